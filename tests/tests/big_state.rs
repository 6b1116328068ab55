//! A cluster whose replicated state outgrows every frame and message limit (the hardening
//! issue's first item): real masters on RocksDB and QUIC, real agents running real task
//! processes, and a framework that launches tasks with long environments until the state is
//! past 64 MiB. Then each of the paths a large state must take is exercised and checked:
//!
//! - the masters snapshot it and compact their logs (read back from a stopped master's RocksDB);
//! - a master added with an empty data directory catches up from scratch (the leader's
//!   snapshot travels to it in parts);
//! - a killed master restarts from its snapshot and catches up;
//! - the operator listings page through every task, each with its whole environment;
//! - the whole group restarts from disk and still knows every task.
//!
//! It prints the figures the closing note reports (snapshot size, catch-up and restart times).
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fullerene_master::storage::{RaftStore, RocksStorage};
use fullerene_proto::messages::{
    CommandSpec, ErrorCode, Executor, FrameworkRequest, Leftover, Offer, TaskSpec, TaskState,
};
use fullerene_proto::{FrameworkId, TaskId};
use fullerene_tests::{
    cluster_status, wait_caught_up, MasterCluster, TestFramework, KILL_GRACE_MS,
};

/// Tasks launched: each carries [`ENV_VARS`] variables of [`ENV_VALUE_BYTES`] bytes.
const TASKS: usize = 600;
const ENV_VARS: usize = 16;
const ENV_VALUE_BYTES: usize = 7 * 1024;
/// Tasks per accept: 30 tasks of 112 KiB make a 3.4 MB launch, under the 4 MiB frame.
const BUNDLE: usize = 30;
/// The state must grow past this.
const TARGET_BYTES: usize = 64 << 20;
const AGENTS: u64 = 3;
const WAIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

/// Task `n`'s environment: distinct per task, so that nothing compresses it away.
fn environment(n: usize) -> BTreeMap<String, String> {
    (0..ENV_VARS)
        .map(|v| {
            let seed = format!("task-{n:04}-var-{v:02}-");
            let value: String = seed.chars().cycle().take(ENV_VALUE_BYTES).collect();
            (format!("FULLERENE_TEST_VAR_{v:02}"), value)
        })
        .collect()
}

/// Task `n`: a real process that sleeps (long enough to outlive the test's checks, short
/// enough that a test killed half-way leaves nothing behind for long).
fn big_task(n: usize) -> TaskSpec {
    TaskSpec {
        id: TaskId::from(format!("big-{n:04}")),
        name: format!("big task {n}"),
        executor: Executor::Command(CommandSpec {
            program: "sleep".to_string(),
            args: vec!["600".to_string()],
            env: environment(n),
        }),
        resources: fullerene_tests::resources("cpus=0.1,mem_mib=1"),
        origin: None,
        kill_grace_ms: KILL_GRACE_MS,
    }
}

/// Launches [`TASKS`] tasks through offers, a bundle per offer; returns once every task has
/// reported RUNNING.
async fn launch_all(cluster: &MasterCluster, framework: &mut TestFramework) {
    let mut next = 0;
    let mut running = 0;
    let mut retry = Vec::new();
    let mut retried = Vec::new();
    let started = Instant::now();
    while running < TASKS {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{running} of {TASKS} tasks running after 10 minutes\n{}",
            cluster.logs()
        );
        let event = framework
            .wait_for(WAIT, |event| Some(event.clone()))
            .await
            .unwrap_or_else(|| panic!("the framework heard nothing\n{}", cluster.logs()));
        match event {
            fullerene_tests::FrameworkEvent::Offers(offers) => {
                for offer in offers {
                    next = answer(framework, &offer, next, &mut retry);
                }
            }
            fullerene_tests::FrameworkEvent::Update(update) => {
                assert!(
                    !update.state.is_terminal(),
                    "task {} ended: {update:?}\n{}",
                    update.task_id,
                    cluster.logs()
                );
                if update.state == TaskState::Running {
                    running += 1;
                }
            }
            // A leader change (an election on a loaded machine) takes a launch's session or its
            // offer: a launch answered OutcomeUnknown may or may not have committed, one on an
            // offer of the old leader did not. It is tried again on a new offer, and a
            // duplicate then says that it had committed.
            fullerene_tests::FrameworkEvent::CallFailed(request, error)
                if matches!(
                    error.code,
                    ErrorCode::OutcomeUnknown
                        | ErrorCode::NotLeader
                        | ErrorCode::Unavailable
                        | ErrorCode::UnknownOffer
                ) && bundle_of(&request).is_some() =>
            {
                eprintln!("a launch did not go through ({error}); trying it again");
                retry.extend(bundle_of(&request));
                retried.extend(bundle_of(&request));
            }
            fullerene_tests::FrameworkEvent::CallFailed(request, error)
                if error.code == ErrorCode::DuplicateTask
                    && bundle_of(&request).is_some_and(|b| retried.contains(&b)) => {}
            fullerene_tests::FrameworkEvent::CallFailed(_, error) => {
                panic!("a launch was refused: {error}\n{}", cluster.logs())
            }
            _ => {}
        }
    }
}

/// Accepts `offer` with a bundle whose launch must be tried again (its outcome was unknown), or
/// the next bundle, or declines it once every task is launched; the number of the next task.
fn answer(
    framework: &TestFramework,
    offer: &Offer,
    next: usize,
    retry: &mut Vec<std::ops::Range<usize>>,
) -> usize {
    let (bundle, next) = match retry.pop() {
        Some(bundle) => (bundle, next),
        None if next >= TASKS => {
            framework.call(FrameworkRequest::Decline {
                offer_ids: vec![offer.id],
                refuse_ms: 60_000,
            });
            return next;
        }
        None => {
            let end = (next + BUNDLE).min(TASKS);
            (next..end, end)
        }
    };
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: bundle.map(big_task).collect(),
        leftover: Leftover::Decline { refuse_ms: 0 },
    });
    next
}

/// The task numbers a launch carried.
fn bundle_of(request: &FrameworkRequest) -> Option<std::ops::Range<usize>> {
    let FrameworkRequest::Accept { tasks, .. } = request else {
        return None;
    };
    let number = |spec: &TaskSpec| spec.id.as_str().strip_prefix("big-")?.parse::<usize>().ok();
    let first = number(tasks.first()?)?;
    Some(first..first + tasks.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_past_64_mib_is_snapshotted_sent_to_a_new_master_and_restored() {
    // Snapshots every 200 applied entries, 100 kept behind each: several are taken and the log
    // compacted while the state grows. Each
    // launch is a 3.4 MB entry that every master writes and syncs on its node loop (issue 16
    // moves that off it); on a loaded two-core machine in a debug build that stalls heartbeats
    // past the LAN election timeout, so this test's masters wait 1-2 s before campaigning.
    let mut cluster = MasterCluster::start_with(
        3,
        4,
        AGENTS,
        &[
            "--snapshot-interval-entries",
            "200",
            "--snapshot-entries-per-record",
            "0",
            "--log-retention-entries",
            "100",
            "--election-ticks",
            "40",
        ],
    );
    for n in 1..=AGENTS {
        cluster.spawn_agent(
            n,
            &[
                "--resources",
                "cpus=64,mem_mib=65536",
                "--executors",
                "command",
            ],
        );
    }
    assert!(
        cluster.wait_for_active_agents(AGENTS as usize, WAIT),
        "the agents did not register\n{}",
        cluster.logs()
    );
    let mut framework = cluster.test_framework(1, "big-state");
    let framework_id: FrameworkId = framework
        .registered(WAIT)
        .await
        .expect("the framework subscribed");
    // Offers go to frameworks that want something.
    framework.call(FrameworkRequest::UpdateDemand(fullerene_tests::demand(
        &fullerene_tests::resources("cpus=0.1,mem_mib=1"),
        TASKS as u32,
    )));

    let launch_started = Instant::now();
    launch_all(&cluster, &mut framework).await;
    eprintln!(
        "{TASKS} tasks of {} KiB launched and running in {:?}",
        ENV_VARS * ENV_VALUE_BYTES / 1024,
        launch_started.elapsed()
    );

    // Every task, with its whole environment, through the paged listing.
    let mut client = cluster.operator_client(&[1, 2, 3], WAIT);
    let tasks = client
        .list_tasks(Some(framework_id.clone()))
        .await
        .expect("the tasks");
    assert_eq!(tasks.len(), TASKS);
    for task in [&tasks[0], &tasks[TASKS / 2], &tasks[TASKS - 1]] {
        let n: usize = task.spec.id.as_str()["big-".len()..]
            .parse()
            .expect("a number");
        assert_eq!(
            task.spec,
            big_task(n),
            "task {} came back changed",
            task.spec.id
        );
    }

    // A new master with an empty directory catches up from the leader's snapshot.
    let status = cluster_status(&mut client).await.expect("a status");
    let leader = status.leader.expect("a leader").id.0;
    cluster.spawn(4, true);
    let added = Instant::now();
    cluster.add_master(&mut client, 4).await;
    wait_caught_up(&cluster, &mut client, 4, WAIT, POLL).await;
    let catch_up = added.elapsed();
    let joined_log = std::fs::read_to_string(cluster.log_path(4)).expect("master 4's log");
    assert!(
        joined_log.contains("installed snapshot from the leader"),
        "master 4 caught up without a snapshot\n{joined_log}"
    );
    eprintln!("a new master caught up from scratch in {catch_up:?}");

    // A follower killed and restarted loads its snapshot from disk and catches up.
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    cluster.kill(follower);
    let data = cluster.data_dir(follower);
    let (snapshot_bytes, first_index) = {
        let store = RocksStorage::open(&data).expect("the follower's store opens");
        let first = raft::Storage::first_index(&store).expect("a first index");
        (store.latest_snapshot().data.len(), first)
    };
    assert!(
        snapshot_bytes > TARGET_BYTES,
        "the stored snapshot is {snapshot_bytes} bytes, not past {TARGET_BYTES}"
    );
    assert!(first_index > 2, "the log was never compacted");
    eprintln!("the stored snapshot is {snapshot_bytes} bytes; the log starts at {first_index}");
    let restarted = Instant::now();
    cluster.spawn(follower, false);
    wait_caught_up(&cluster, &mut client, follower, WAIT, POLL).await;
    eprintln!("a restarted master caught up in {:?}", restarted.elapsed());

    // The whole group stops and restarts from disk, and still knows every task.
    for id in 1..=4 {
        cluster.kill(id);
    }
    let restarted = Instant::now();
    for id in 1..=4 {
        cluster.spawn(id, false);
    }
    let mut client = cluster.operator_client(&[1, 2, 3, 4], WAIT);
    let tasks = match client.list_tasks(Some(framework_id.clone())).await {
        Ok(tasks) => tasks,
        // Once, under a full test run's load, no master answered for 120 s here: the logs
        // say what each was doing.
        Err(error) => panic!("the tasks after a restart: {error}\n{}", cluster.logs()),
    };
    eprintln!(
        "the whole group restarted and listed every task in {:?}",
        restarted.elapsed()
    );
    assert_eq!(tasks.len(), TASKS);
    assert!(tasks.iter().all(|t| t.state == TaskState::Running));

    // The framework ends (the masters kill its tasks); whatever still runs when the cluster
    // is dropped is killed with it.
    framework.teardown(WAIT).await;
}
