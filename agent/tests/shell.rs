//! The agent's shell against a scripted master (the testkit's `FakeMaster`, see `common`).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use fullerene_agent::AgentError;
use fullerene_proto::ids::{AgentId, FrameworkId, TaskId, TaskKey};
use fullerene_proto::messages::{AgentToMaster, StatusReason, StatusUpdate, TaskState};
use fullerene_proto::resources::ResourceVec;
use fullerene_proto::testkit::resources;
use fullerene_transport::testkit::WAIT;
use tokio::time::timeout;

/// One scripted master (master 1) and a fresh work directory for the agents a test starts.
struct Bench {
    certs: TestCerts,
    master: FakeMaster,
    _tmp: tempfile::TempDir,
    work: std::path::PathBuf,
}

impl Bench {
    fn new() -> Bench {
        let certs = certs();
        let master = FakeMaster::bind(&certs, 1);
        let (tmp, work) = work_dir();
        Bench {
            certs,
            master,
            _tmp: tmp,
            work,
        }
    }

    /// An agent on the work directory that knows only the master.
    fn start_agent(&self) -> RunningAgent {
        RunningAgent::start(&self.certs, vec![self.master.addr()], &self.work)
    }

    /// Accepts the next registration with nothing to kill.
    async fn session(&mut self) -> AgentSession {
        next_registration(&mut self.master)
            .await
            .accept(vec![])
            .await
    }
}

/// Lets the agent's heartbeats (and so what it sent before them) reach the master until
/// `count` have arrived in this session.
async fn wait_heartbeats(session: &mut AgentSession, count: u64) {
    while session.heartbeats < count {
        let _ = timeout(Duration::from_millis(100), session.next()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_runs_tasks_and_forgets_what_was_acked() {
    let mut bench = Bench::new();
    let agent = bench.start_agent();

    let registering = next_registration(&mut bench.master).await;
    assert!(registering.tasks.is_empty(), "a first start has no tasks");
    let mut session = registering.accept(vec![]).await;
    let mut too_big = sh("too-big", "true");
    too_big.resources = resources("cpus=64");
    session
        .launch(vec![sh("three", "echo hi; exit 3"), too_big])
        .await;
    let mut by_task: BTreeMap<String, Vec<StatusUpdate>> = BTreeMap::new();
    for _ in 0..3 {
        let update = session.status().await;
        assert_eq!(update.agent_id, AgentId::from("agent-1"));
        by_task
            .entry(update.task_id.to_string())
            .or_default()
            .push(update);
    }
    let three: Vec<(u64, TaskState)> = by_task["three"].iter().map(|u| (u.seq, u.state)).collect();
    assert_eq!(three, vec![(1, TaskState::Running), (2, TaskState::Failed)]);
    assert_eq!(
        by_task["three"][1].reason,
        Some(StatusReason::Exited { code: 3 })
    );
    let refused = &by_task["too-big"];
    assert_eq!((refused[0].seq, refused[0].state), (1, TaskState::Failed));
    assert_eq!(refused[0].reason, Some(StatusReason::InsufficientResources));
    for updates in by_task.values() {
        for update in updates {
            session.ack(update).await;
        }
    }
    // Heartbeats flow at the interval the master gave.
    wait_heartbeats(&mut session, 2).await;
    // The acks were recorded: a restarted agent has nothing to report.
    tokio::time::sleep(Duration::from_millis(100)).await;
    agent.stop().await;
    let agent = bench.start_agent();
    let registering = next_registration(&mut bench.master).await;
    assert!(registering.tasks.is_empty(), "{:?}", registering.tasks);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_redirects_to_the_leader() {
    let certs = certs();
    let mut follower = FakeMaster::bind(&certs, 1);
    let mut leader = FakeMaster::bind(&certs, 2);
    let (_tmp, work) = work_dir();
    let agent = RunningAgent::start(&certs, vec![follower.addr()], &work);

    let mut at_follower = next_registration(&mut follower).await.agent;
    at_follower.redirect_to(2, leader.addr()).await;
    let mut session = next_registration(&mut leader).await.accept(vec![]).await;
    session.launch(vec![sleep_task("s", 1)]).await;
    assert_eq!(session.status().await.state, TaskState::Running);

    // Leadership moves mid-session: the old leader redirects, the agent re-registers.
    session.redirect_to(1, follower.addr()).await;
    let registering = next_registration(&mut follower).await;
    assert_eq!(registering.tasks.len(), 1, "{:?}", registering.tasks);
    let mut session = registering.accept(vec![]).await;
    let resent = session.status().await;
    assert_eq!((resent.seq, resent.state), (1, TaskState::Running));
    let finished = session.status().await;
    assert_eq!((finished.seq, finished.state), (2, TaskState::Finished));
    drop(at_follower);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_are_resent_in_order_after_each_lost_session_until_acked() {
    let mut bench = Bench::new();
    let agent = bench.start_agent();

    let mut session = bench.session().await;
    session.launch(vec![sleep_task("nap", 10)]).await;
    let running = session.status().await;
    let finished = session.status().await;
    assert_eq!(
        [(running.seq, running.state), (finished.seq, finished.state)],
        [(1, TaskState::Running), (2, TaskState::Finished)]
    );
    session.drop_connection();

    // Second session: both updates again, in order; only the first is acked.
    let registering = next_registration(&mut bench.master).await;
    assert_eq!(registering.tasks.len(), 1);
    assert_eq!(
        (registering.tasks[0].state, registering.tasks[0].seq),
        (TaskState::Finished, 2)
    );
    let mut session = registering.accept(vec![]).await;
    let first = session.status().await;
    let second = session.status().await;
    assert_eq!((first.seq, second.seq), (1, 2));
    assert_eq!(first, running);
    session.ack(&first).await;
    // Let the ack arrive before the session drops.
    wait_heartbeats(&mut session, 1).await;
    session.drop_connection();

    // Third session: only the unacked one.
    let registering = next_registration(&mut bench.master).await;
    assert_eq!(registering.tasks.len(), 1);
    let mut session = registering.accept(vec![]).await;
    let only = session.status().await;
    assert_eq!(only, finished);
    session.ack(&only).await;
    wait_heartbeats(&mut session, 1).await;
    session.drop_connection();

    // Fourth session: nothing left.
    let registering = next_registration(&mut bench.master).await;
    assert!(registering.tasks.is_empty(), "{:?}", registering.tasks);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_reregisters_its_task_and_reports_how_it_ended() {
    let mut bench = Bench::new();
    let agent = bench.start_agent();
    let mut session = bench.session().await;
    session
        .launch(vec![sh("survivor", "sleep 1.5; exit 5")])
        .await;
    let running = session.status().await;
    assert_eq!(running.state, TaskState::Running);
    // The agent crashes mid-task; its task does not.
    agent.crash().await;

    let agent = bench.start_agent();
    let registering = next_registration(&mut bench.master).await;
    assert_eq!(registering.tasks.len(), 1);
    assert_eq!(
        (
            registering.tasks[0].task.task_id.as_str(),
            registering.tasks[0].state,
            registering.tasks[0].seq
        ),
        ("survivor", TaskState::Running, 1)
    );
    let mut session = registering.accept(vec![]).await;
    assert_eq!(session.status().await, running);
    let ended = session.status().await;
    assert_eq!((ended.seq, ended.state), (2, TaskState::Failed));
    assert_eq!(ended.reason, Some(StatusReason::Exited { code: 5 }));
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_the_master_lists_at_registration_are_killed() {
    let mut bench = Bench::new();
    let agent = bench.start_agent();
    let mut session = bench.session().await;
    session
        .launch(vec![sh("doomed", "sleep 30"), sleep_task("kept", 60_000)])
        .await;
    for _ in 0..2 {
        let running = session.status().await;
        assert_eq!(running.state, TaskState::Running);
        session.ack(&running).await;
    }
    wait_heartbeats(&mut session, 1).await;
    session.drop_connection();

    // The master declared the agent lost meanwhile and marked `doomed` LOST.
    let registering = next_registration(&mut bench.master).await;
    assert_eq!(registering.tasks.len(), 2);
    let mut session = registering
        .accept(vec![TaskKey::new(
            FrameworkId::from("fw"),
            TaskId::from("doomed"),
        )])
        .await;
    let killed = session.status().await;
    assert_eq!(killed.task_id.as_str(), "doomed");
    assert_eq!((killed.seq, killed.state), (2, TaskState::Killed));
    assert_eq!(killed.reason, Some(StatusReason::AgentLost));
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_work_dir_is_refused() {
    let bench = Bench::new();
    let first = bench.start_agent();
    // Wait until the first holds the lock (it creates the checkpoint after taking it).
    while !bench.work.join("checkpoint.log").exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut second = bench.start_agent();
    let result = timeout(WAIT, &mut second.handle)
        .await
        .expect("refused at once")
        .expect("no panic");
    assert!(
        matches!(result, Err(AgentError::WorkDirLocked { .. })),
        "{result:?}"
    );
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_capacity_is_reported_and_used() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let mut bench = Bench::new();
    let cpus = Arc::new(AtomicU64::new(4));
    let measured = Arc::clone(&cpus);
    let agent = RunningAgent::start_with(
        &bench.certs,
        vec![bench.master.addr()],
        &bench.work,
        |config| {
            config.resource_check = Some(fullerene_agent::shell::ResourceCheck {
                interval: Duration::from_millis(20),
                measure: Arc::new(move || {
                    let cpus = measured.load(Ordering::SeqCst) as f64;
                    ResourceVec::from_pairs(&[
                        (fullerene_proto::resources::ResourceKind::Cpus, cpus),
                        (fullerene_proto::resources::ResourceKind::MemMib, 4096.0),
                    ])
                }),
            });
        },
    );
    let mut session = bench.session().await;
    cpus.store(8, Ordering::SeqCst);
    match session.next().await {
        AgentToMaster::UpdateResources { resources } => {
            assert_eq!(resources.get("cpus"), Some(8.0));
        }
        other => panic!("expected UpdateResources, got {other:?}"),
    }
    // The new capacity is what launches are checked against.
    let mut big = sleep_task("big", 60_000);
    big.resources = resources("cpus=6");
    session.launch(vec![big]).await;
    assert_eq!(session.status().await.state, TaskState::Running);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_checkpoint_tail_is_dropped_and_damage_is_refused() {
    let mut bench = Bench::new();
    let agent = bench.start_agent();
    let mut session = bench.session().await;
    session.launch(vec![sleep_task("nap", 600_000)]).await;
    let running = session.status().await;
    agent.crash().await;

    // A crash in the middle of an append leaves half a record.
    let log = bench.work.join("checkpoint.log");
    let good = std::fs::read(&log).expect("checkpoint");
    let mut torn = good.clone();
    torn.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, 5, 6]);
    std::fs::write(&log, &torn).expect("write");
    let agent = bench.start_agent();
    let registering = next_registration(&mut bench.master).await;
    assert_eq!(registering.tasks.len(), 1);
    let mut session = registering.accept(vec![]).await;
    assert_eq!(session.status().await, running);
    agent.crash().await;
    assert_eq!(
        std::fs::read(&log).expect("checkpoint"),
        good,
        "tail truncated"
    );

    // Damage before the last record is not a torn write: the agent refuses to start.
    let mut damaged = good.clone();
    damaged[12] ^= 0xFF;
    std::fs::write(&log, &damaged).expect("write");
    let mut agent = bench.start_agent();
    let result = timeout(WAIT, &mut agent.handle)
        .await
        .expect("refused at once")
        .expect("no panic");
    let error = result.expect_err("a damaged checkpoint is refused");
    let text = error.to_string();
    assert!(text.contains("damaged"), "{text}");
    assert!(text.contains(&log.display().to_string()), "{text}");
}
