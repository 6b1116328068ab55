//! The driver against a scripted master: real proto `Server`s on loopback with certificates
//! from `generate_dev_cluster`, answering as the test says. Covers the redirect from a follower,
//! subscription, an offer answered, updates acknowledged (a duplicate delivered once), and a
//! lost session: reconnection, re-subscription with the same id, reconciliation.

use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::messages::{
    CallOk, Executor, FrameworkCall, FrameworkRequest, LeaderInfo, Leftover, MasterToFramework,
    Offer, Redirect, SessionOpen, StatusAck, StatusUpdate, TaskSpec, TaskState,
};
use fullerene_proto::{FrameworkId, MasterId, OfferId, TaskId};
use fullerene_sdk::driver::{run, DriverConfig, DriverHandle, RunOptions, Scheduler};
use fullerene_transport::certs::{generate_dev_cluster, CertCounts, CertPaths};
use fullerene_transport::{Connection, Role, Server, Session, TlsMaterial, TransportConfig};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(20);

fn tls(dir: &std::path::Path, ca: &std::path::Path, role: Role, n: usize) -> TlsMaterial {
    let paths = CertPaths::of_member(dir, role, n);
    TlsMaterial::load(ca, &paths.cert, &paths.key).expect("tls")
}

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

struct MasterSession {
    _connection: Connection,
    session: Session,
}

impl MasterSession {
    async fn accept(server: &mut Server) -> MasterSession {
        let connection = timeout(WAIT, server.accept())
            .await
            .expect("the driver connects")
            .expect("server open")
            .expect("handshake");
        let session = timeout(WAIT, connection.accept_session())
            .await
            .expect("a session opens")
            .expect("session");
        assert_eq!(session.kind, SessionOpen::Framework);
        MasterSession {
            _connection: connection,
            session,
        }
    }

    async fn next(&mut self) -> FrameworkCall {
        timeout(WAIT, self.session.rx.recv::<FrameworkCall>())
            .await
            .expect("a call in time")
            .expect("session alive")
            .expect("not closed")
    }

    async fn send(&mut self, message: MasterToFramework) {
        self.session.tx.send(&message).await.expect("send");
    }

    async fn answer(&mut self, call_id: u64, ok: CallOk) {
        self.send(MasterToFramework::CallResult {
            call_id,
            result: Ok(ok),
        })
        .await;
    }
}

fn offer(id: u64) -> Offer {
    fullerene_proto::testkit::offer(id, "fw-1", "agent-1", "h1", "cpus=2", u64::MAX)
}

fn update(seq: u64, state: TaskState) -> StatusUpdate {
    fullerene_proto::testkit::status_update("t1", "fw-1", "agent-1", state, seq)
}

/// A follower that redirects every framework session to `leader`.
async fn follower(mut server: Server, leader: SocketAddr) {
    loop {
        let Some(Ok(connection)) = server.accept().await else {
            return;
        };
        let Ok(mut session) = connection.accept_session().await else {
            continue;
        };
        if let Ok(Some(FrameworkCall { .. })) = session.rx.recv::<FrameworkCall>().await {
            let redirect = MasterToFramework::Redirect(Redirect {
                leader: Some(LeaderInfo {
                    id: MasterId(2),
                    addr: leader,
                    term: 1,
                }),
            });
            let _ = session.tx.send(&redirect).await;
            let _ = session.tx.finish().await;
            let _ = timeout(Duration::from_secs(2), session.tx.stopped()).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_follows_redirect_answers_offers_acks_updates_and_resubscribes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let counts = CertCounts {
        masters: 2,
        frameworks: 1,
        ..CertCounts::default()
    };
    let certs = generate_dev_cluster(&dir.path().join("certs"), counts, false).expect("certs");
    let master_tls = |n| tls(&certs.dir, &certs.ca_cert, Role::Master, n);
    let bind = |n| {
        Server::bind(
            "127.0.0.1:0".parse().expect("addr"),
            &master_tls(n),
            TransportConfig::default(),
        )
        .expect("bind")
    };
    let follower_server = bind(1);
    let mut leader = bind(2);
    let follower_addr = follower_server.local_addr();
    let leader_addr = leader.local_addr();
    let follower_task = tokio::spawn(follower(follower_server, leader_addr));

    let framework_tls = tls(&certs.dir, &certs.ca_cert, Role::Framework, 1);
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
    let mut s = MasterSession::accept(&mut leader).await;
    let call = s.next().await;
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
    s.answer(
        call.call_id,
        CallOk::Subscribed {
            framework_id: FrameworkId::from("fw-1"),
            heartbeat_interval_ms: 1_000,
        },
    )
    .await;
    let call = s.next().await;
    assert_eq!(call.call, FrameworkRequest::Reconcile { task_ids: vec![] });
    s.answer(call.call_id, CallOk::Done).await;

    s.send(MasterToFramework::Offers(vec![offer(7)])).await;
    let call = s.next().await;
    match &call.call {
        FrameworkRequest::Accept {
            offer_ids, tasks, ..
        } => {
            assert_eq!(offer_ids, &vec![OfferId(7)]);
            assert_eq!(tasks[0].id, TaskId::from("t1"));
        }
        other => panic!("expected the Accept, got {other:?}"),
    }
    s.answer(call.call_id, CallOk::Done).await;

    // An update, then the same update again (at-least-once): both acknowledged.
    for _ in 0..2 {
        s.send(MasterToFramework::Update(update(1, TaskState::Running)))
            .await;
        let call = s.next().await;
        assert_eq!(
            call.call,
            FrameworkRequest::Acknowledge(StatusAck {
                task_id: TaskId::from("t1"),
                seq: 1
            })
        );
    }

    // The leader drops the session; the driver comes back (through the follower again, which
    // redirects) with the same id and reconciles.
    s._connection.close("test: leader drops the framework");
    drop(s);
    let mut s = MasterSession::accept(&mut leader).await;
    let call = s.next().await;
    assert!(
        matches!(
            &call.call,
            FrameworkRequest::Subscribe { framework_id: Some(id), .. } if id.as_str() == "fw-1"
        ),
        "expected a re-subscription with the id, got {:?}",
        call.call
    );
    s.answer(
        call.call_id,
        CallOk::Subscribed {
            framework_id: FrameworkId::from("fw-1"),
            heartbeat_interval_ms: 1_000,
        },
    )
    .await;
    let call = s.next().await;
    assert_eq!(call.call, FrameworkRequest::Reconcile { task_ids: vec![] });
    s.answer(call.call_id, CallOk::Done).await;
    // Reconciliation's answer: the task finished meanwhile.
    s.send(MasterToFramework::Update(update(3, TaskState::Finished)))
        .await;
    let call = s.next().await;
    assert_eq!(
        call.call,
        FrameworkRequest::Acknowledge(StatusAck {
            task_id: TaskId::from("t1"),
            seq: 3
        })
    );
    let call = s.next().await;
    assert_eq!(call.call, FrameworkRequest::Teardown);
    s.answer(call.call_id, CallOk::Done).await;
    drop(s);

    let recorder = timeout(WAIT, driver)
        .await
        .expect("the driver stops after the teardown")
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
