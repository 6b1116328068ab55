//! The driver against a scripted master: the testkit's `FakeMaster`s (real transport `Server`s
//! on loopback with a development cluster's certificates), answering as the test says. Covers
//! the redirect from a follower, subscription, an offer answered, updates acknowledged (a
//! duplicate delivered once), and a lost session: reconnection, re-subscription with the same
//! id, reconciliation.

use fullerene_proto::messages::{
    CallOk, Executor, FrameworkRequest, Leftover, MasterToFramework, Offer, StatusAck,
    StatusUpdate, TaskSpec, TaskState,
};
use std::time::Duration;

use fullerene_proto::{FrameworkId, MasterId, OfferId, TaskId};
use fullerene_sdk::driver::{run, DriverConfig, DriverHandle, RunOptions, Scheduler};
use fullerene_transport::certs::CertCounts;
use fullerene_transport::testkit::{awaiting, FakeMaster, FrameworkPeer, PeerSession, TestCerts};
use fullerene_transport::Role;

/// Records what it saw; accepts every offer with one task, tears down when `t1` finishes.
#[derive(Default)]
struct Recorder {
    log: Vec<String>,
}

impl Scheduler for Recorder {
    fn registered(&mut self, _driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.log.push(format!("registered {framework_id}"));
    }

    fn reconnected(&mut self, _driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.log.push(format!("reconnected {framework_id}"));
    }

    fn disconnected(&mut self, _driver: &mut DriverHandle, _reason: &str) {
        self.log.push("disconnected".into());
    }

    fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>) {
        for offer in offers {
            self.log.push(format!("offer {}", offer.id));
            driver.accept(
                vec![offer.id],
                vec![TaskSpec {
                    id: TaskId::from("t1"),
                    name: "t1".into(),
                    executor: Executor::Sleep { duration_ms: 10 },
                    resources: offer.resources.clone(),
                    origin: None,
                    kill_grace_ms: 0,
                }],
                Leftover::Yield,
            );
        }
    }

    fn status_update(&mut self, driver: &mut DriverHandle, update: &StatusUpdate) {
        self.log.push(format!(
            "update {} {:?} {}",
            update.task_id, update.state, update.seq
        ));
        if update.state == TaskState::Finished {
            driver.teardown();
        }
    }
}

/// Answers the call `call_id` with `ok`.
async fn answer(session: &mut PeerSession<FrameworkPeer>, call_id: u64, ok: CallOk) {
    session
        .send(&MasterToFramework::CallResult {
            call_id,
            result: Ok(ok),
        })
        .await;
}

fn offer(id: u64) -> Offer {
    fullerene_proto::testkit::offer(id, "fw-1", "agent-1", "h1", "cpus=2", u64::MAX)
}

fn update(seq: u64, state: TaskState) -> StatusUpdate {
    fullerene_proto::testkit::status_update("t1", "fw-1", "agent-1", state, seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_follows_redirect_answers_offers_acks_updates_and_resubscribes() {
    let certs = TestCerts::new(CertCounts {
        masters: 2,
        frameworks: 1,
        ..CertCounts::default()
    });
    let follower = FakeMaster::bind(&certs, 1);
    let mut leader = FakeMaster::bind(&certs, 2);
    let follower_addr = follower.addr();
    let leader_addr = leader.addr();
    let follower_task = follower.follow_leader::<FrameworkPeer>(MasterId(2), leader_addr);

    let framework_tls = certs.tls(Role::Framework, 1);
    let mut config = DriverConfig::new(vec![follower_addr], "test-fw", "g1");
    config.backoff_initial = Duration::from_millis(20);
    config.backoff_max = Duration::from_millis(200);
    let driver = tokio::spawn(async move {
        run(
            config,
            &framework_tls,
            RunOptions::default(),
            Recorder::default(),
        )
        .await
    });

    // First session with the leader, after the follower's redirect.
    let mut s = leader.accept::<FrameworkPeer>().await;
    let call = s.recv().await;
    match &call.call {
        FrameworkRequest::Subscribe {
            framework_id: None,
            name,
            group,
            ..
        } => {
            assert_eq!(name, "test-fw");
            assert_eq!(group, "g1");
        }
        other => panic!("expected a first Subscribe, got {other:?}"),
    }
    answer(
        &mut s,
        call.call_id,
        CallOk::Subscribed {
            framework_id: FrameworkId::from("fw-1"),
            group: "default".into(),
            heartbeat_interval_ms: 1_000,
        },
    )
    .await;
    let call = s.recv().await;
    assert_eq!(call.call, FrameworkRequest::Reconcile { task_ids: vec![] });
    answer(&mut s, call.call_id, CallOk::Done).await;

    s.send(&MasterToFramework::Offers(vec![offer(7)])).await;
    let call = s.recv().await;
    match &call.call {
        FrameworkRequest::Accept {
            offer_ids, tasks, ..
        } => {
            assert_eq!(offer_ids, &vec![OfferId(7)]);
            assert_eq!(tasks[0].id, TaskId::from("t1"));
        }
        other => panic!("expected the Accept, got {other:?}"),
    }
    answer(&mut s, call.call_id, CallOk::Done).await;

    // An update, then the same update again (at-least-once): both acknowledged.
    for _ in 0..2 {
        s.send(&MasterToFramework::Update(update(1, TaskState::Running)))
            .await;
        let call = s.recv().await;
        assert_eq!(
            call.call,
            FrameworkRequest::Acknowledge(vec![StatusAck {
                task_id: TaskId::from("t1"),
                framework_id: "fw-1".into(),
                seq: 1
            }])
        );
    }

    // The leader drops the session; the driver comes back (through the follower again, which
    // redirects) with the same id and reconciles.
    s.close("test: leader drops the framework");
    drop(s);
    let mut s = leader.accept::<FrameworkPeer>().await;
    let call = s.recv().await;
    assert!(
        matches!(
            &call.call,
            FrameworkRequest::Subscribe { framework_id: Some(id), .. } if id.as_str() == "fw-1"
        ),
        "expected a re-subscription with the id, got {:?}",
        call.call
    );
    answer(
        &mut s,
        call.call_id,
        CallOk::Subscribed {
            framework_id: FrameworkId::from("fw-1"),
            group: "default".into(),
            heartbeat_interval_ms: 1_000,
        },
    )
    .await;
    let call = s.recv().await;
    assert_eq!(call.call, FrameworkRequest::Reconcile { task_ids: vec![] });
    answer(&mut s, call.call_id, CallOk::Done).await;
    // Reconciliation's answer: the task finished meanwhile.
    s.send(&MasterToFramework::Update(update(3, TaskState::Finished)))
        .await;
    // The scheduler tears down on it, in its callback: the driver acknowledges what it
    // received before it stops.
    let call = s.recv().await;
    assert_eq!(
        call.call,
        FrameworkRequest::Acknowledge(vec![StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: "fw-1".into(),
            seq: 3
        }])
    );
    let call = s.recv().await;
    assert_eq!(call.call, FrameworkRequest::Teardown);
    answer(&mut s, call.call_id, CallOk::Done).await;
    drop(s);

    let recorder = awaiting("the driver to stop after the teardown", driver)
        .await
        .expect("driver task")
        .expect("driver ok");
    assert_eq!(
        recorder.log,
        vec![
            "registered fw-1",
            "offer 7",
            "update t1 Running 1",
            "disconnected",
            "reconnected fw-1",
            "update t1 Finished 3",
        ]
    );
    follower_task.abort();
    leader.close();
}
