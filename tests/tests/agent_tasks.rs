//! Tasks on real agents through the framework path: real commands
//! launched through offers report FINISHED or FAILED with their exit codes and keep their
//! output in the sandbox; a task's status stream survives a kill -9 of its agent; a launch the
//! agent cannot run ends clearly and changes nothing else; an agent that returns after being
//! declared lost kills the tasks the master marked LOST.
//!
//! Every test drives a [`TestFramework`] (the SDK driver with a scheduler the test answers
//! for) against real `fullerene master` and `fullerene agent` processes on loopback.
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fullerene_proto::messages::{
    ClusterView, ErrorCode, FrameworkRequest, Leftover, Offer, OperatorRequest, OperatorResponse,
    StatusReason, TaskState,
};
use fullerene_proto::{AgentId, TaskId};
use fullerene_tests::{
    demand, resources, shell_task, sleep_task, FrameworkEvent, MasterCluster, TestFramework,
    FAST_LIVENESS, KILL_GRACE_MS,
};

const AGENT_RESOURCES: [&str; 2] = ["--resources", "cpus=4,mem_mib=4096,disk_mbps=100"];

const WAIT: Duration = Duration::from_secs(20);

/// What every task here asks for.
const SMALL_TASK: &str = "cpus=1,mem_mib=64";

/// The agent number of `agent-<n>`.
fn agent_number(id: &AgentId) -> u64 {
    id.0.strip_prefix("agent-")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("an agent id of the form agent-<n>: {id}"))
}

/// The sandbox of `task` under agent `n`'s work directory (`sandboxes/<framework>/<task>`).
fn sandbox(cluster: &MasterCluster, n: u64, task: &str) -> Option<PathBuf> {
    let root = cluster.agent_work_dir(n).join("sandboxes");
    std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .map(|framework| framework.path().join(task))
        .find(|path| path.is_dir())
}

async fn state(cluster: &MasterCluster) -> ClusterView {
    let mut client =
        cluster.operator_client(&cluster.addrs.keys().copied().collect::<Vec<_>>(), WAIT);
    match client.request(&OperatorRequest::State).await {
        Ok(OperatorResponse::State(view)) => view,
        other => panic!("no cluster state: {other:?}\n{}", cluster.logs()),
    }
}

/// Asserts that no agent has anything charged to it.
fn assert_nothing_used(view: &ClusterView, context: &str) {
    for agent in &view.agents {
        assert!(
            agent.used.iter().all(|(_, v)| v.abs() < 1e-9),
            "{context}: agent {} still has {:?} in use; state: {view:?}",
            agent.id,
            agent.used
        );
    }
}

/// Asserts that the master tracks no task that has not ended, in any framework.
fn assert_no_active_task(view: &ClusterView) {
    assert!(
        view.tasks.iter().all(|t| t.state.is_terminal()),
        "a task is still active: {view:?}"
    );
    assert!(
        view.frameworks.iter().all(|f| f.active_tasks == 0),
        "a framework still has active tasks: {view:?}"
    );
}

/// Polls the state until every agent's `used` is zero (terminal updates release resources
/// as they commit, so this converges right after the last one).
async fn wait_nothing_used(cluster: &MasterCluster, context: &str) -> ClusterView {
    let started = Instant::now();
    loop {
        let view = state(cluster).await;
        let idle = view
            .agents
            .iter()
            .all(|a| a.used.iter().all(|(_, v)| v.abs() < 1e-9));
        if idle || started.elapsed() > Duration::from_secs(10) {
            assert_nothing_used(&view, context);
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Subscribes a framework, announces demand for `count` small tasks and waits until it holds
/// offers from `agents` distinct agents; those offers, one per agent.
async fn framework_with_offers(
    cluster: &MasterCluster,
    name: &str,
    count: u32,
    agents: usize,
) -> (TestFramework, Vec<Offer>) {
    let mut framework = cluster.test_framework(1, name);
    assert!(
        framework.registered(WAIT).await.is_some(),
        "the framework did not subscribe\n{}",
        cluster.logs()
    );
    framework.call(FrameworkRequest::UpdateDemand(demand(
        &resources(SMALL_TASK),
        count,
    )));
    let mut held: Vec<Offer> = Vec::new();
    let started = Instant::now();
    while held.len() < agents {
        let left = WAIT.saturating_sub(started.elapsed());
        let Some(offers) = framework.offers(left).await else {
            panic!(
                "offers from {agents} agents did not come (held {held:?})\n{}",
                cluster.logs()
            );
        };
        for offer in offers {
            if !held.iter().any(|o| o.agent_id == offer.agent_id) {
                held.push(offer);
            }
        }
    }
    (framework, held)
}

fn accept(
    framework: &TestFramework,
    offer: &Offer,
    tasks: Vec<fullerene_proto::messages::TaskSpec>,
) {
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks,
        leftover: Leftover::Decline { refuse_ms: 500 },
    });
}

/// Checks a task's updates as the framework saw them: sequence numbers strictly increasing,
/// RUNNING before the terminal state, nothing after the terminal state.
fn assert_ordered_stream(framework: &mut TestFramework, task: &TaskId, logs: &str) {
    let updates = framework.updates_of(task);
    let seqs: Vec<u64> = updates.iter().map(|u| u.seq).collect();
    let states: Vec<TaskState> = updates.iter().map(|u| u.state).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "{task}: sequence numbers not increasing: {seqs:?} ({states:?})\n{logs}"
    );
    let terminal = states.iter().position(|s| s.is_terminal());
    assert_eq!(
        terminal,
        Some(states.len() - 1),
        "{task}: the terminal state is not the last and only one: {states:?}\n{logs}"
    );
    let running = states.iter().position(|s| *s == TaskState::Running);
    assert!(
        running.is_some_and(|r| r < states.len() - 1),
        "{task}: RUNNING was not seen before the end: {states:?}\n{logs}"
    );
}

/// Whether a process whose command line holds `marker` runs (zombies count as gone).
fn process_with_marker(marker: &str) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s == "Z"))
            })
            .unwrap_or(true);
        if !zombie {
            return Some(pid);
        }
    }
    None
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{}: {e}>", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_launched_through_offers_report_their_exit_codes() {
    let mut cluster = MasterCluster::start_with(1, 1, 2, &FAST_LIVENESS);
    cluster.spawn_agent(1, &AGENT_RESOURCES);
    cluster.spawn_agent(2, &AGENT_RESOURCES);
    let (mut framework, offers) = framework_with_offers(&cluster, "exit-codes", 2, 2).await;

    // One task per agent: one succeeds, one fails with its own code.
    let ok = TaskId::from("ok");
    let bad = TaskId::from("bad");
    accept(
        &framework,
        &offers[0],
        vec![shell_task(
            "ok",
            "echo out-of-ok; exit 0",
            SMALL_TASK,
            KILL_GRACE_MS,
        )],
    );
    accept(
        &framework,
        &offers[1],
        vec![shell_task(
            "bad",
            "echo err-of-bad >&2; exit 3",
            SMALL_TASK,
            KILL_GRACE_MS,
        )],
    );
    let Some(ok_end) = framework.terminal_update(&ok, WAIT).await else {
        panic!(
            "`ok` did not end: {:?}\n{}",
            framework.history,
            cluster.logs()
        );
    };
    let bad_end = match framework
        .updates_of(&bad)
        .into_iter()
        .find(|u| u.state.is_terminal())
    {
        Some(update) => update,
        None => framework
            .terminal_update(&bad, WAIT)
            .await
            .unwrap_or_else(|| {
                panic!(
                    "`bad` did not end: {:?}\n{}",
                    framework.history,
                    cluster.logs()
                )
            }),
    };
    assert_eq!(ok_end.state, TaskState::Finished, "{ok_end:?}");
    assert_eq!(
        ok_end.reason,
        Some(StatusReason::Exited { code: 0 }),
        "{ok_end:?}"
    );
    assert_eq!(bad_end.state, TaskState::Failed, "{bad_end:?}");
    assert_eq!(
        bad_end.reason,
        Some(StatusReason::Exited { code: 3 }),
        "{bad_end:?}"
    );
    let logs = cluster.logs();
    assert_ordered_stream(&mut framework, &ok, &logs);
    assert_ordered_stream(&mut framework, &bad, &logs);

    // The output stays in the sandboxes, on the agents the offers came from.
    let ok_box = sandbox(&cluster, agent_number(&offers[0].agent_id), "ok")
        .unwrap_or_else(|| panic!("no sandbox for `ok` on {}", offers[0].agent_id));
    let bad_box = sandbox(&cluster, agent_number(&offers[1].agent_id), "bad")
        .unwrap_or_else(|| panic!("no sandbox for `bad` on {}", offers[1].agent_id));
    assert_eq!(read(&ok_box.join("stdout")).trim(), "out-of-ok");
    assert!(read(&bad_box.join("stderr")).contains("err-of-bad"));
    // The exit code was the agent's record (in its work directory, out of the task's reach,
    // removed once reported): nothing is left where the task could have rewritten it.
    assert!(
        !bad_box.join(".fullerene-exit-code").exists(),
        "an exit code in the sandbox"
    );

    // The master agrees, and nothing stays charged.
    let view = wait_nothing_used(&cluster, "after both tasks ended").await;
    assert_no_active_task(&view);
    for (task, expected) in [(&ok, TaskState::Finished), (&bad, TaskState::Failed)] {
        // The master may already have forgotten an acknowledged terminal task.
        if let Some(info) = view.tasks.iter().find(|t| &t.spec.id == task) {
            assert_eq!(info.state, expected, "{info:?}");
        }
    }
    framework.teardown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_keeps_its_status_stream_across_an_agent_kill_and_restart() {
    // Default liveness: the agent is back long before the master would call it unreachable.
    let mut cluster = MasterCluster::start_with(1, 1, 1, &[]);
    cluster.spawn_agent(1, &AGENT_RESOURCES);
    let (mut framework, offers) = framework_with_offers(&cluster, "restart", 1, 1).await;
    let task = TaskId::from("sleeper");
    accept(
        &framework,
        &offers[0],
        vec![shell_task(
            "sleeper",
            "sleep 2; echo woke",
            SMALL_TASK,
            KILL_GRACE_MS,
        )],
    );
    let running = framework
        .wait_for(WAIT, |e| match e {
            FrameworkEvent::Update(u) if u.task_id == task && u.state == TaskState::Running => {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert!(
        running.is_some(),
        "the task never ran: {:?}\n{}",
        framework.history,
        cluster.logs()
    );

    cluster.kill_agent(1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.spawn_agent(1, &AGENT_RESOURCES);

    let Some(end) = framework.terminal_update(&task, WAIT).await else {
        panic!(
            "no terminal update after the agent restarted: {:?}\n{}",
            framework.history,
            cluster.logs()
        );
    };
    assert_eq!(
        end.state,
        TaskState::Finished,
        "{end:?}\n{}",
        cluster.logs()
    );
    assert_eq!(
        end.reason,
        Some(StatusReason::Exited { code: 0 }),
        "{end:?}"
    );
    let logs = cluster.logs();
    assert_ordered_stream(&mut framework, &task, &logs);
    let updates = framework.updates_of(&task);
    // The agent numbers the stream itself and the master ended nothing here, so nothing may
    // be missing between the first update seen and the last.
    let seqs: Vec<u64> = updates.iter().map(|u| u.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "status updates missing: seqs {seqs:?}, updates {updates:?}\n{logs}"
    );
    let view = wait_nothing_used(&cluster, "after the task finished").await;
    assert_no_active_task(&view);
    if let Some(info) = view.tasks.iter().find(|t| t.spec.id == task) {
        assert_eq!(info.state, TaskState::Finished, "{info:?}");
        assert_eq!(
            info.seq, end.seq,
            "the master's last seq differs from the framework's"
        );
    }
    framework.teardown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_the_agent_cannot_run_ends_clearly_and_changes_nothing_else() {
    let mut cluster = MasterCluster::start_with(1, 1, 1, &FAST_LIVENESS);
    // This agent runs only `sleep` tasks: a command task names an executor it does not have.
    cluster.spawn_agent(
        1,
        &[
            "--resources",
            "cpus=4,mem_mib=4096,disk_mbps=100",
            "--executors",
            "sleep",
        ],
    );
    let (mut framework, offers) = framework_with_offers(&cluster, "refusals", 2, 1).await;
    let unknown = TaskId::from("needs-command");
    accept(
        &framework,
        &offers[0],
        vec![shell_task(
            "needs-command",
            "exit 0",
            SMALL_TASK,
            KILL_GRACE_MS,
        )],
    );
    let outcome = framework
        .wait_for(WAIT, |e| match e {
            FrameworkEvent::CallFailed(_, error) => Some(Err(error.clone())),
            FrameworkEvent::Update(u) if u.task_id == unknown && u.state.is_terminal() => {
                Some(Ok(u.clone()))
            }
            _ => None,
        })
        .await;
    match outcome {
        Some(Ok(update)) => {
            assert_eq!(update.state, TaskState::Failed, "{update:?}");
            assert_eq!(
                update.reason,
                Some(StatusReason::UnknownExecutor),
                "{update:?}"
            );
        }
        Some(Err(error)) => assert_eq!(error.code, ErrorCode::UnknownExecutor, "{error}"),
        None => panic!(
            "a task with an unknown executor neither failed nor was refused: {:?}\n{}",
            framework.history,
            cluster.logs()
        ),
    }
    let view = wait_nothing_used(&cluster, "after the unknown executor").await;
    assert!(
        view.tasks.iter().all(|t| t.state.is_terminal()),
        "a task is left active: {view:?}"
    );

    // Far above what the agent has: refused, nothing launched.
    framework.call(FrameworkRequest::Revive);
    let Some(offers) = framework.offers(WAIT).await else {
        panic!("no further offer\n{}", cluster.logs());
    };
    let sleep = sleep_task("too-big", 100, "cpus=64,mem_mib=64", KILL_GRACE_MS);
    accept(&framework, &offers[0], vec![sleep]);
    let refused = framework.call_failed(WAIT).await;
    let updates = framework.updates_of(&TaskId::from("too-big"));
    match refused {
        Some((_, error)) => assert_eq!(
            error.code,
            ErrorCode::InsufficientResources,
            "{error}; updates {updates:?}"
        ),
        None => panic!(
            "a task above the agent's resources was not refused: {:?}\n{}",
            framework.history,
            cluster.logs()
        ),
    }
    let after = state(&cluster).await;
    assert_nothing_used(&after, "after the oversized launch");
    assert!(
        after.tasks.iter().all(|t| t.spec.id.as_str() != "too-big"),
        "the refused task is recorded: {after:?}"
    );
    assert!(
        after
            .agents
            .iter()
            .all(|a| a.state == fullerene_proto::messages::AgentState::Active),
        "an agent suffered: {after:?}"
    );

    // The agent still runs what it can.
    let Some(offers) = framework.offers(WAIT).await else {
        panic!("no offer after the refusals\n{}", cluster.logs());
    };
    let fine = sleep_task("fine", 100, SMALL_TASK, KILL_GRACE_MS);
    accept(&framework, &offers[0], vec![fine]);
    let Some(end) = framework.terminal_update(&TaskId::from("fine"), WAIT).await else {
        panic!("a valid task did not run afterwards\n{}", cluster.logs());
    };
    assert_eq!(end.state, TaskState::Finished, "{end:?}");
    framework.teardown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_back_from_lost_kills_the_tasks_the_master_marked_lost() {
    let mut cluster = MasterCluster::start_with(1, 1, 1, &FAST_LIVENESS);
    cluster.spawn_agent(1, &AGENT_RESOURCES);
    let (mut framework, offers) = framework_with_offers(&cluster, "lost", 1, 1).await;
    let task = TaskId::from("orphan");
    let marker = format!("orphan-marker-{}", std::process::id());
    accept(
        &framework,
        &offers[0],
        vec![shell_task(
            "orphan",
            &format!("sleep 60; echo {marker}"),
            SMALL_TASK,
            KILL_GRACE_MS,
        )],
    );
    let running = framework
        .wait_for(WAIT, |e| match e {
            FrameworkEvent::Update(u) if u.task_id == task && u.state == TaskState::Running => {
                Some(())
            }
            _ => None,
        })
        .await;
    assert!(running.is_some(), "the task never ran\n{}", cluster.logs());
    let Some(pid) = process_with_marker(&marker) else {
        panic!("the task's process is not running\n{}", cluster.logs());
    };

    cluster.kill_agent(1);
    let Some(lost) = framework.terminal_update(&task, WAIT).await else {
        panic!("the task was not declared LOST\n{}", cluster.logs());
    };
    assert_eq!(lost.state, TaskState::Lost, "{lost:?}");
    assert_eq!(lost.reason, Some(StatusReason::AgentLost), "{lost:?}");
    assert!(
        process_with_marker(&marker).is_some(),
        "the task's process {pid} died with its agent: nothing left for the agent to kill"
    );

    cluster.spawn_agent(1, &AGENT_RESOURCES);
    let started = Instant::now();
    while process_with_marker(&marker).is_some() {
        assert!(
            started.elapsed() < WAIT,
            "the returning agent did not kill the LOST task's process {pid}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let view = wait_nothing_used(&cluster, "after the agent came back").await;
    assert_no_active_task(&view);
    if let Some(info) = view.tasks.iter().find(|t| t.spec.id == task) {
        assert_eq!(
            info.state,
            TaskState::Lost,
            "a LOST task changed state: {info:?}"
        );
    }
    assert!(
        view.agents
            .iter()
            .any(|a| a.state == fullerene_proto::messages::AgentState::Active),
        "the agent did not come back: {view:?}"
    );
    // Whatever the agent reports about the killed process must not reach the framework.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_lost: Vec<_> = framework
        .updates_of(&task)
        .into_iter()
        .skip_while(|u| u.state != TaskState::Lost)
        .skip(1)
        .collect();
    assert!(after_lost.is_empty(), "updates after LOST: {after_lost:?}");
    framework.teardown(Duration::from_secs(5)).await;
}
