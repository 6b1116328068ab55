use std::collections::BTreeMap;

use super::*;
use crate::core::{Action, AgentCore, CoreConfig};
use fullerene_proto::ids::AgentId;
use fullerene_proto::messages::{StatusReason, StatusUpdate, TaskState};
use fullerene_proto::time::SystemClock;

fn command(id: &str, program: &str, args: &[&str]) -> TaskSpec {
    fullerene_proto::testkit::command_task(id, program, args, "cpus=0.5,mem_mib=64", 200)
}

fn sh(id: &str, script: &str) -> TaskSpec {
    fullerene_proto::testkit::shell_task(id, script, "cpus=0.5,mem_mib=64", 200)
}

/// The key of `task` of the framework every test here launches as (`fw`).
fn key(task: &str) -> TaskKey {
    TaskKey::new(FrameworkId::from("fw"), TaskId::from(task))
}

fn no_isolation() -> Isolation {
    Isolation::unavailable("test")
}

fn not_enforced() -> Limits {
    Limits::NotEnforced {
        reason: "test".into(),
    }
}

/// The machine's clocks, as the shell reads them (the core and the sleep executor read only
/// the wall clock).
fn now() -> Now {
    SystemClock::new().now()
}

/// The core and the executors wired the way the shell wires them, minus the network.
struct Rig {
    core: AgentCore,
    executors: Executors,
    events: mpsc::UnboundedReceiver<ExecEvent>,
    sent: Vec<StatusUpdate>,
    dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let (executors, events) = Executors::new(dir.path(), not_enforced(), no_isolation());
        Rig {
            core: AgentCore::new(CoreConfig::new(
                AgentId::from("agent-1"),
                "cpus=4,mem_mib=4096".parse().expect("r"),
            )),
            executors,
            events,
            sent: Vec::new(),
            dir,
        }
    }

    fn run(&mut self, actions: Vec<Action>) {
        let mut queue: std::collections::VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::Persist(_) => {}
                Action::Send(update) => self.sent.push(update),
                Action::Start { framework_id, spec } => {
                    let task = TaskKey::new(framework_id.clone(), spec.id.clone());
                    let more = match self.executors.start(&framework_id, &spec, now()) {
                        Ok(started) => {
                            self.core
                                .started(&task, started.runtime, started.note, now())
                        }
                        Err(why) => self.core.finished(
                            &task,
                            Outcome::LaunchFailed(why),
                            String::new(),
                            now(),
                        ),
                    };
                    queue.extend(more);
                }
                Action::Kill { task, grace } => {
                    if !self.executors.kill(&task, grace) {
                        queue.extend(self.core.finished(
                            &task,
                            Outcome::NotRunning,
                            String::new(),
                            now(),
                        ));
                    }
                }
            }
        }
    }

    fn launch(&mut self, spec: TaskSpec) {
        let actions = self
            .core
            .launch(&FrameworkId::from("fw"), vec![spec], now());
        self.run(actions);
    }

    async fn next_end(&mut self) -> ExecEvent {
        let event = next_event(
            &mut self.events,
            Duration::from_secs(20),
            "the task ended in time",
        )
        .await;
        self.executors.reap(&event.task);
        let actions = self.core.finished(
            &event.task,
            event.outcome.clone(),
            event.detail.clone(),
            now(),
        );
        self.run(actions);
        event
    }

    fn last(&self, task: &str) -> &StatusUpdate {
        self.sent
            .iter()
            .rev()
            .find(|u| u.task_id.as_str() == task)
            .expect("an update")
    }

    fn sandbox(&self, task: &str) -> PathBuf {
        self.executors
            .sandbox(&FrameworkId::from("fw"), &TaskId::from(task))
    }
}

/// The next executor event, within `limit` (`what` says what was awaited).
async fn next_event(
    events: &mut mpsc::UnboundedReceiver<ExecEvent>,
    limit: Duration,
    what: &str,
) -> ExecEvent {
    tokio::time::timeout(limit, events.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: no event within {limit:?}"))
        .expect("the executors' event channel is open")
}

/// The pid and start time of `task`'s process, as the core recorded them.
fn process_of(rig: &Rig, task: &str) -> (i32, u64) {
    match rig.core.task(&key(task)).and_then(|e| e.runtime.clone()) {
        Some(Runtime::Process { pid, start_ticks }) => (pid, start_ticks),
        other => panic!("no process runtime for {task}: {other:?}"),
    }
}

#[tokio::test]
async fn exit_codes_become_finished_or_failed() {
    let mut rig = Rig::new();
    rig.launch(sh("three", "exit 3"));
    rig.launch(command("ok", "true", &[]));
    assert_eq!(rig.last("three").state, TaskState::Running);
    for _ in 0..2 {
        rig.next_end().await;
    }
    let three = rig.last("three");
    assert_eq!((three.state, three.seq), (TaskState::Failed, 2));
    assert_eq!(three.reason, Some(StatusReason::Exited { code: 3 }));
    let ok = rig.last("ok");
    assert_eq!(ok.state, TaskState::Finished);
    assert_eq!(ok.reason, Some(StatusReason::Exited { code: 0 }));
    // The RUNNING update says plainly that limits were not enforced.
    let running = rig
        .sent
        .iter()
        .find(|u| u.task_id.as_str() == "ok")
        .expect("running");
    assert!(
        running.message.contains("NOT enforced"),
        "{}",
        running.message
    );
    // The wrapper records codes outside the sandbox, where the task cannot write (a restarted
    // agent reads them there), and the agent clears a code once it has reported it.
    assert!(!rig.sandbox("three").join(".fullerene-exit-code").exists());
    assert!(rig.dir.path().join(EXIT_CODES_DIR).is_dir());
    let code_file = rig
        .executors
        .exit_code_path(&FrameworkId::from("fw"), &TaskId::from("three"));
    assert!(code_file.starts_with(rig.dir.path().join(EXIT_CODES_DIR)));
    assert!(!code_file.exists(), "{} left behind", code_file.display());
}

#[tokio::test]
async fn output_is_captured_in_the_sandbox_with_the_specs_environment() {
    let mut rig = Rig::new();
    let mut spec = sh(
        "out",
        "echo \"$GREETING from $(pwd)\"; echo \"$FULLERENE_TASK_ID ${FULLERENE_CERTS_DIR:-clean}\"; echo oops >&2; exit 4",
    );
    if let Executor::Command(c) = &mut spec.executor {
        c.env.insert("GREETING".into(), "hello".into());
    }
    rig.launch(spec);
    rig.next_end().await;
    let sandbox = rig.sandbox("out");
    assert!(sandbox.starts_with(rig.dir.path().join("sandboxes").join("fw")));
    let stdout = fs::read_to_string(sandbox.join(STDOUT_FILE)).expect("stdout");
    let real = fs::canonicalize(&sandbox).expect("canonical");
    // The spec's variables and the task's own, but nothing of the agent's.
    assert_eq!(
        stdout.trim(),
        format!("hello from {}\nout clean", real.display())
    );
    let failed = rig.last("out");
    assert_eq!(failed.reason, Some(StatusReason::Exited { code: 4 }));
    assert!(
        failed.message.contains("stderr: oops"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn a_missing_program_is_a_launch_failure() {
    let mut rig = Rig::new();
    rig.launch(command("typo", "no-such-program-fullerene", &[]));
    let update = rig.last("typo");
    assert_eq!(update.state, TaskState::Failed);
    assert_eq!(update.reason, Some(StatusReason::LaunchFailed));
    assert!(
        update.message.contains("not found in PATH"),
        "{}",
        update.message
    );
    assert_eq!(rig.core.active_count(), 0);
}

#[tokio::test]
async fn a_signal_ends_the_task_as_signaled() {
    let mut rig = Rig::new();
    rig.launch(sh("sig", "kill -USR1 $$"));
    rig.next_end().await;
    assert_eq!(
        rig.last("sig").reason,
        Some(StatusReason::Signaled {
            signal: libc::SIGUSR1
        })
    );
}

#[tokio::test]
async fn kill_terms_the_group_and_kills_what_ignores_it_after_the_grace_period() {
    let mut rig = Rig::new();
    // Handles TERM by writing a marker and going on: only SIGKILL ends it.
    rig.launch(sh(
        "stubborn",
        "trap 'echo term >> marker' TERM; echo started > ready; while true; do sleep 0.05; done",
    ));
    rig.launch(sh("polite", "echo started > ready; sleep 30"));
    for task in ["stubborn", "polite"] {
        let ready = rig.sandbox(task).join("ready");
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let actions = rig.core.kill(&key("stubborn"), Duration::from_millis(1000));
    rig.run(actions);
    let actions = rig
        .core
        .kill(&key("polite"), Duration::from_millis(u64::MAX));
    rig.run(actions);
    let mut ends = BTreeMap::new();
    for _ in 0..2 {
        let event = rig.next_end().await;
        ends.insert(event.task.task_id.to_string(), event);
    }
    let stubborn = &ends["stubborn"];
    assert_eq!(stubborn.outcome, Outcome::Signaled(libc::SIGKILL));
    assert!(stubborn.detail.contains("SIGKILL"), "{}", stubborn.detail);
    let marker =
        fs::read_to_string(rig.sandbox("stubborn").join("marker")).expect("TERM came first");
    assert!(marker.contains("term"));
    // A process that stops on TERM is not escalated, even with an endless grace period.
    assert_eq!(ends["polite"].outcome, Outcome::Signaled(libc::SIGTERM));
    for task in ["stubborn", "polite"] {
        let update = rig.last(task);
        assert_eq!(update.state, TaskState::Killed);
        assert_eq!(update.reason, Some(StatusReason::KilledByFramework));
    }
}

#[tokio::test]
async fn what_a_task_leaves_running_in_its_group_is_cleaned_up() {
    let mut rig = Rig::new();
    rig.launch(sh("bg", "sleep 30 & echo $! > bgpid; exit 0"));
    rig.next_end().await;
    assert_eq!(rig.last("bg").state, TaskState::Finished);
    let bgpid: i32 = fs::read_to_string(rig.sandbox("bg").join("bgpid"))
        .expect("bgpid")
        .trim()
        .parse()
        .expect("pid");
    // The leftover was SIGKILLed; wait for it to be reaped by whoever is its parent now.
    for _ in 0..100 {
        if proc_stat(bgpid).is_none_or(|s| s.state == 'Z') {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the background process {bgpid} of a finished task still runs");
}

#[tokio::test]
async fn sleep_tasks_finish_after_their_duration_or_when_killed() {
    let mut rig = Rig::new();
    let mut nap = command("nap", "unused", &[]);
    nap.executor = Executor::Sleep { duration_ms: 30 };
    let mut long = command("long", "unused", &[]);
    long.executor = Executor::Sleep {
        duration_ms: 3_600_000,
    };
    rig.launch(nap);
    rig.launch(long);
    let event = rig.next_end().await;
    assert_eq!(event.task.task_id.as_str(), "nap");
    assert_eq!(rig.last("nap").state, TaskState::Finished);
    let actions = rig.core.kill(&key("long"), Duration::from_millis(1000));
    rig.run(actions);
    rig.next_end().await;
    assert_eq!(rig.last("long").state, TaskState::Killed);
}

#[tokio::test]
async fn a_recovered_sleep_keeps_its_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut executors, mut events) = Executors::new(dir.path(), not_enforced(), no_isolation());
    let resume = |deadline_ms| Resume {
        task_id: TaskId::from("s"),
        framework_id: FrameworkId::from("fw"),
        spec: command("s", "unused", &[]),
        runtime: Some(Runtime::Sleep { deadline_ms }),
        kill: None,
    };
    // A deadline that passed while the agent was down ends the task at once.
    let now = now();
    executors.resume(&resume(now.wall_ms() - 1_000), now);
    let event = next_event(&mut events, Duration::from_secs(5), "at once").await;
    assert_eq!(event.outcome, Outcome::SleepDone);
}

#[tokio::test]
async fn a_restarted_agent_reattaches_and_reports_the_exit_code() {
    let mut rig = Rig::new();
    rig.launch(sh("long", "sleep 2; exit 7"));
    let (pid, start_ticks) = process_of(&rig, "long");
    // The agent "crashes": its supervisors go, the process does not.
    let Rig {
        core,
        executors,
        dir,
        ..
    } = rig;
    drop(executors);
    assert!(
        process_alive(pid, start_ticks),
        "the task died with its agent"
    );

    let (mut executors, mut events) = Executors::new(dir.path(), not_enforced(), no_isolation());
    let resume = core.to_resume();
    assert_eq!(resume.len(), 1);
    executors.resume(&resume[0], now());
    let event = next_event(&mut events, Duration::from_secs(20), "ends").await;
    assert_eq!(event.outcome, Outcome::Exited(7));
}

/// Waits until process `pid` carries the mark of `task` in its environment, that is until
/// the spawned child has exec'd.
fn wait_until_marked(pid: i32, task: &str) {
    let mark = format!("{TASK_ID_VAR}={task}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if environ
            .split(|&b| b == 0)
            .any(|item| item == mark.as_bytes())
        {
            return;
        }
        assert!(Instant::now() < deadline, "{pid} never exec'd as {task}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test]
async fn a_process_spawned_but_not_recorded_as_started_is_killed_on_recovery_not_doubled() {
    // The scan for marked processes sees the whole machine: an id of this test process's own
    // keeps tests running side by side (and a run left over from an earlier one) apart.
    let orphan = format!("orphan-{}", std::process::id());
    let mut rig = Rig::new();
    rig.launch(sh(&orphan, "sleep 60"));
    let (pid, start_ticks) = process_of(&rig, &orphan);
    // Until the child has exec'd, its environment is still ours, without the marks.
    wait_until_marked(pid, &orphan);
    // The agent crashes after the spawn, before its `Started` record is synced: the recovered
    // core knows the launch only.
    let Rig { executors, dir, .. } = rig;
    drop(executors);
    assert!(process_alive(pid, start_ticks));
    let resume = Resume {
        task_id: TaskId::from(orphan.as_str()),
        framework_id: FrameworkId::from("fw"),
        spec: sh(&orphan, "sleep 60"),
        runtime: None,
        kill: None,
    };
    let (mut executors, mut events) = Executors::new(dir.path(), not_enforced(), no_isolation());
    executors.resume(&resume, now());
    let event = next_event(&mut events, Duration::from_secs(5), "at once").await;
    assert_eq!(event.outcome, Outcome::Vanished);
    assert!(event.detail.contains("1 process group"), "{}", event.detail);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !group_members(pid).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        group_members(pid).is_empty(),
        "the unrecorded process still runs: it would run twice once relaunched"
    );

    // Another task's processes are left alone, and so are those of the same task run by
    // another agent on this machine (lost here, launched again there).
    let mut rig = Rig::new();
    rig.launch(sh("other", "sleep 60"));
    rig.launch(sh(&orphan, "sleep 60"));
    let (other, _) = process_of(&rig, "other");
    let (relaunched, _) = process_of(&rig, &orphan);
    wait_until_marked(other, "other");
    wait_until_marked(relaunched, &orphan);
    executors.resume(&resume, now());
    let event = next_event(&mut events, Duration::from_secs(5), "at once").await;
    assert_eq!(event.detail, "it had not been recorded as started");
    assert!(!group_members(other).is_empty());
    assert!(!group_members(relaunched).is_empty());
    for task in ["other", orphan.as_str()] {
        assert!(rig.executors.kill(&key(task), Duration::ZERO));
        rig.next_end().await;
    }
}

#[tokio::test]
async fn a_reused_pid_is_not_taken_for_the_task() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut executors, mut events) = Executors::new(dir.path(), not_enforced(), no_isolation());
    // Our own pid, alive, but with another start time: the task's process is gone, and
    // killing it must not signal us.
    let me = std::process::id() as i32;
    let mine = proc_stat(me).expect("own stat");
    let resume = Resume {
        task_id: TaskId::from("old"),
        framework_id: FrameworkId::from("fw"),
        spec: sh("old", "true"),
        runtime: Some(Runtime::Process {
            pid: me,
            start_ticks: mine.start_ticks + 1,
        }),
        kill: Some((crate::core::KillCause::Framework, Duration::ZERO)),
    };
    executors.resume(&resume, now());
    let event = next_event(&mut events, Duration::from_secs(5), "at once").await;
    assert_eq!(event.outcome, Outcome::Vanished);
}

#[test]
fn stat_lines_parse_even_with_odd_command_names() {
    let line =
        "4242 (we(i)rd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    let stat = parse_stat(line).expect("parses");
    assert_eq!(stat.state, 'S');
    assert_eq!(stat.pgrp, 4240);
    assert_eq!(stat.start_ticks, 987654);
    assert_eq!(parse_stat("garbage"), None);
    let me = proc_stat(std::process::id() as i32).expect("own stat");
    assert!(process_alive(std::process::id() as i32, me.start_ticks));
}

#[test]
fn codes_above_128_are_signals() {
    assert_eq!(outcome_of_code(0), Outcome::Exited(0));
    assert_eq!(outcome_of_code(3), Outcome::Exited(3));
    assert_eq!(outcome_of_code(128), Outcome::Exited(128));
    assert_eq!(outcome_of_code(137), Outcome::Signaled(9));
    assert_eq!(outcome_of_code(255), Outcome::Exited(255));
}

#[tokio::test]
async fn with_cgroup_v2_the_wrapper_joins_the_tasks_cgroup_before_the_program_runs() {
    // A directory shaped like a cgroup v2 hierarchy: the agent only writes its files, so the
    // mechanics (limits written, the wrapper's pid joining) show without a real cgroupfs.
    let hierarchy = tempfile::tempdir().expect("tempdir");
    fs::write(hierarchy.path().join("cgroup.controllers"), "cpu memory\n").expect("write");
    let limits = Limits::detect(hierarchy.path(), "agent-1");
    assert!(limits.enforced());
    let work = tempfile::tempdir().expect("tempdir");
    let (mut executors, mut events) = Executors::new(work.path(), limits, no_isolation());
    let spec = sh("t", "echo \"${FULLERENE_CGROUP_PROCS:-unset}\" > env-seen");
    let started = executors
        .start(&FrameworkId::from("fw"), &spec, now())
        .expect("starts");
    assert!(started.note.contains("limits enforced"), "{}", started.note);
    let Runtime::Process { pid, .. } = started.runtime else {
        panic!("a process runtime");
    };
    let event = next_event(&mut events, Duration::from_secs(20), "ends").await;
    assert_eq!(event.outcome, Outcome::Exited(0));
    let cgroup = hierarchy.path().join("fullerene-agent-1").join("fw%2Ft");
    let procs = fs::read_to_string(cgroup.join("cgroup.procs")).expect("joined");
    assert_eq!(procs.trim(), pid.to_string());
    assert_eq!(
        fs::read_to_string(cgroup.join("cpu.max")).expect("cpu.max"),
        "50000 100000"
    );
    assert_eq!(
        fs::read_to_string(cgroup.join("memory.max")).expect("memory.max"),
        (64u64 << 20).to_string()
    );
    // The program itself does not see the agent's plumbing.
    let sandbox = executors.sandbox(&FrameworkId::from("fw"), &TaskId::from("t"));
    let seen = fs::read_to_string(sandbox.join("env-seen")).expect("env-seen");
    assert_eq!(seen.trim(), "unset");
}

#[tokio::test]
async fn a_task_the_oom_killer_ends_fails_as_limit_exceeded() {
    let hierarchy = tempfile::tempdir().expect("tempdir");
    fs::write(hierarchy.path().join("cgroup.controllers"), "cpu memory\n").expect("write");
    let limits = Limits::detect(hierarchy.path(), "agent-1");
    let work = tempfile::tempdir().expect("tempdir");
    let (mut executors, mut events) = Executors::new(work.path(), limits, no_isolation());
    // The kernel would write memory.events and SIGKILL the process; the fake does the same.
    let cgroup = hierarchy.path().join("fullerene-agent-1").join("fw%2Foom");
    let script = format!(
        "printf 'low 0\\nhigh 0\\nmax 3\\noom 1\\noom_kill 1\\n' > {}/memory.events; kill -KILL $$",
        cgroup.display()
    );
    executors
        .start(&FrameworkId::from("fw"), &sh("oom", &script), now())
        .expect("starts");
    let event = next_event(&mut events, Duration::from_secs(20), "ends").await;
    assert_eq!(
        event.outcome,
        Outcome::LimitExceeded("memory (memory.max)".into())
    );
    let mut core = AgentCore::new(CoreConfig::new(
        AgentId::from("agent-1"),
        "cpus=4,mem_mib=4096".parse().expect("r"),
    ));
    let mut actions = core.launch(&FrameworkId::from("fw"), vec![sh("oom", "true")], now());
    actions.extend(core.finished(&key("oom"), event.outcome, event.detail, now()));
    let last = actions
        .into_iter()
        .rev()
        .find_map(|a| match a {
            Action::Send(u) => Some(u),
            _ => None,
        })
        .expect("an update");
    assert_eq!(last.state, TaskState::Failed);
    assert_eq!(last.reason, Some(StatusReason::LimitExceeded));
}
