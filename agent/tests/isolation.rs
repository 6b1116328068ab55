//! Task isolation (issue 14): a hostile task on a real agent tries to read the agent's
//! checkpoint, its TLS key and another task's sandbox, to list the agent's directories, to
//! write exit codes and to signal its wrapper, and fails at each; its forged exit-code files
//! change nothing, also across an agent restart while it runs.
//!
//! These tests need root (the agent runs tasks as other users only then): as another user they
//! print why and pass without checking anything. Each test has its own uid range and lock
//! directory, so that tests running side by side never share a uid.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use fullerene_agent::isolation::IsolationConfig;
use fullerene_proto::messages::{Enforcement, StatusReason, StatusUpdate, TaskSpec, TaskState};
use fullerene_transport::Role;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Waits (polling, up to a minute) until `file` holds `text`; returns what it holds.
fn wait_for_text(file: &Path, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let content = std::fs::read_to_string(file).unwrap_or_default();
        if content.contains(text) {
            return content;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held {text:?}; it holds {content:?}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn with_env(mut spec: TaskSpec, vars: &[(&str, String)]) -> TaskSpec {
    if let fullerene_proto::messages::Executor::Command(command) = &mut spec.executor {
        for (k, v) in vars {
            command.env.insert(k.to_string(), v.clone());
        }
    }
    spec
}

/// Status updates until `task` has a terminal one, acknowledging each.
async fn until_terminal(session: &mut AgentSession, task: &str) -> StatusUpdate {
    loop {
        let update = session.status().await;
        session.ack(&update).await;
        if update.task_id.as_str() == task && update.state.is_terminal() {
            return update;
        }
    }
}

/// What the hostile task does. Every attempt prints `denied <what>` or `BREACH <what>`.
const HOSTILE: &str = r#"
attempt() { what=$1; shift; if "$@" >/dev/null 2>&1; then echo "BREACH $what"; else echo "denied $what"; fi; }
echo "uid $(id -u)"
# A control: what is its own it reads, by its absolute path through the agent's directories.
echo mine > own
if cat "$FULLERENE_SANDBOX/own" >/dev/null 2>&1; then echo "control: reads its own files"; fi
attempt "read the checkpoint" cat "$CHECKPOINT"
attempt "read the agent key" cat "$KEY"
attempt "read the other task's file" cat "$VICTIM/secret"
attempt "list the other task's sandbox" ls "$VICTIM"
attempt "list the work directory" ls "$WORK"
attempt "list the exit codes" ls "$WORK/exit-codes"
attempt "write its exit code" sh -c 'echo 0 > "$WORK/exit-codes/fw%2Fhostile"'
attempt "write the other task's exit code" sh -c 'echo 0 > "$WORK/exit-codes/fw%2Fvictim"'
attempt "create a file in the work directory" sh -c 'echo x > "$WORK/planted"'
attempt "replace the checkpoint" mv "$CHECKPOINT" "$CHECKPOINT.old"
attempt "signal its wrapper" kill -TERM "$PPID"
attempt "write into the other task's sandbox" sh -c 'echo x > "$VICTIM/planted"'
# Forgeries where it can write: the old in-sandbox code file, and its stdout's neighbours.
echo 0 > .fullerene-exit-code
echo 0 > exit-code
echo "forged where it could"
while [ ! -e proceed ]; do sleep 0.05; done
exit 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_task_reads_and_writes_nothing_of_the_agents_and_cannot_forge_its_exit_code() {
    if !root() {
        eprintln!(
            "skipped: task isolation needs the agent to run as root (this test runs as uid {})",
            unsafe { libc::geteuid() }
        );
        return;
    }
    let certs = certs();
    let mut master = FakeMaster::bind(&certs, 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    // Passable, so that only the agent's own modes stand between the task and its files (and
    // the task reaches its sandbox by its absolute path).
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let work = tmp.path().join("work");
    let key = certs
        .generated()
        .member(Role::Agent, 1)
        .expect("agent-1")
        .paths
        .key
        .clone();
    // The key's directories passable too: its own mode (0600, as `certs init` writes it) is
    // what must keep it from tasks.
    for dir in key.ancestors().skip(1).take(2) {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    }
    let isolation = IsolationConfig {
        task_ids: "320000-320015".parse().expect("range"),
        lock_dir: tmp.path().join("task-ids"),
        ..IsolationConfig::default()
    };
    if !isolation.setpriv.is_file() {
        eprintln!("skipped: {} is not installed", isolation.setpriv.display());
        return;
    }
    let addr = master.addr();
    let start = |config_isolation: IsolationConfig| {
        RunningAgent::start_with(&certs, vec![addr], &work, move |config| {
            config.isolation = config_isolation;
        })
    };
    let agent = start(isolation.clone());
    let registering = next_registration(&mut master).await;
    assert_eq!(
        registering.isolation.users,
        Enforcement::Enforced,
        "{:?}",
        registering.isolation
    );
    // No cgroup v2 here (the test points the agent at an empty directory): said, with why.
    assert!(
        matches!(&registering.isolation.limits, Enforcement::NotEnforced { reason } if reason.contains("cgroup")),
        "{:?}",
        registering.isolation
    );
    let mut session = registering.accept(vec![]).await;

    let sandboxes = work.join("sandboxes").join("fw");
    let victim_box = sandboxes.join("victim");
    let hostile_box = sandboxes.join("hostile");
    session
        .launch(vec![sh(
            "victim",
            "echo secret-of-the-victim > secret; chmod 644 secret; while [ ! -e done ]; do sleep 0.05; done",
        )])
        .await;
    let running = session.status().await;
    assert_eq!(running.state, TaskState::Running, "{running:?}");
    assert!(
        running.message.contains("runs as uid"),
        "{}",
        running.message
    );
    session.ack(&running).await;
    wait_for_text(&victim_box.join("secret"), "secret-of-the-victim");

    let hostile = with_env(
        sh("hostile", HOSTILE),
        &[
            (
                "CHECKPOINT",
                work.join("checkpoint.log").display().to_string(),
            ),
            ("KEY", key.display().to_string()),
            ("VICTIM", victim_box.display().to_string()),
            ("WORK", work.display().to_string()),
        ],
    );
    session.launch(vec![hostile]).await;
    let running = session.status().await;
    assert_eq!(
        (running.task_id.as_str(), running.state),
        ("hostile", TaskState::Running),
        "{running:?}"
    );
    session.ack(&running).await;
    let observed = wait_for_text(&hostile_box.join("stdout"), "forged where it could");

    // The agent stops while the hostile task runs; a new one takes over.
    tokio::time::sleep(Duration::from_millis(100)).await;
    agent.stop().await;
    let agent = start(isolation.clone());
    let registering = next_registration(&mut master).await;
    let reported: Vec<&str> = registering
        .tasks
        .iter()
        .map(|t| t.task.task_id.as_str())
        .collect();
    assert!(
        reported.contains(&"hostile") && reported.contains(&"victim"),
        "{reported:?}"
    );
    let mut session = registering.accept(vec![]).await;
    std::fs::write(hostile_box.join("proceed"), "").expect("proceed");
    let ended = until_terminal(&mut session, "hostile").await;
    assert_eq!(
        (ended.state, &ended.reason),
        (TaskState::Failed, &Some(StatusReason::Exited { code: 3 })),
        "the forged codes were believed: {ended:?}\nthe task saw:\n{observed}"
    );

    // What the task saw: every attempt denied.
    eprintln!("the hostile task saw:\n{observed}");
    let attempts: Vec<&str> = observed
        .lines()
        .filter(|l| l.starts_with("denied") || l.starts_with("BREACH"))
        .collect();
    assert_eq!(attempts.len(), 12, "{observed}");
    assert!(
        observed.contains("control: reads its own files"),
        "{observed}"
    );
    let breaches: Vec<&&str> = attempts
        .iter()
        .filter(|l| l.starts_with("BREACH"))
        .collect();
    assert!(breaches.is_empty(), "breaches: {breaches:?}\n{observed}");
    // It ran as a uid of the range, not the victim's, and the agent's files are as they were.
    let uid: u32 = observed
        .lines()
        .find_map(|l| l.strip_prefix("uid "))
        .and_then(|u| u.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid line:\n{observed}"));
    assert!(isolation.task_ids.contains(uid), "uid {uid}");
    let victim_uid = std::fs::metadata(&victim_box)
        .expect("victim sandbox")
        .uid();
    assert!(isolation.task_ids.contains(victim_uid) && victim_uid != uid);
    assert!(!work.join("planted").exists() && !victim_box.join("planted").exists());
    assert!(work.join("checkpoint.log").is_file());
    // Its sandbox went back to root when it ended: the next task with its uid cannot read it.
    assert_eq!(std::fs::metadata(&hostile_box).expect("sandbox").uid(), 0);

    std::fs::write(victim_box.join("done"), "").expect("done");
    let ended = until_terminal(&mut session, "victim").await;
    assert_eq!(ended.state, TaskState::Finished, "{ended:?}");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_refuses_to_start_without_isolation_when_it_is_required() {
    let certs = certs();
    let master = FakeMaster::bind(&certs, 1);
    let (_tmp, work) = work_dir();
    // This test's agent never has cgroup v2 (its root is an empty directory), so full
    // isolation is never there, root or not.
    let agent = RunningAgent::start_with(&certs, vec![master.addr()], &work, |config| {
        config.require_isolation = true;
        config.isolation = IsolationConfig {
            task_ids: "320100-320101".parse().expect("range"),
            lock_dir: work.with_file_name("task-ids"),
            ..IsolationConfig::default()
        };
    });
    let mut agent = agent;
    let result = fullerene_transport::testkit::awaiting("the agent to refuse", &mut agent.handle)
        .await
        .expect("no panic");
    let error = result.expect_err("the agent must refuse to start");
    let text = error.to_string();
    assert!(
        text.contains("--require-isolation") && text.contains("cgroup"),
        "{text}"
    );
    drop(master);
}
