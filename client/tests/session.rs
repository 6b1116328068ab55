//! The leader-following session (the agent's kind) against scripted masters on loopback (the
//! testkit's `FakeMaster`): a redirect followed to the leader, a join, the replay of what the
//! caller says is outstanding, and a lost session retried at the next master.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fullerene_client::{
    AgentSession, FollowConfig, LeaderSession, Pacing, Registered, SendError, SessionConfig,
    SessionEvent, DEFAULT_OUTBOX_CAPACITY,
};
use fullerene_proto::messages::{AgentToMaster, MasterToAgent};
use fullerene_proto::{AgentId, MasterId};
use fullerene_transport::certs::CertCounts;
use fullerene_transport::testkit::{within, AgentPeer, FakeMaster, TestCerts};
use fullerene_transport::{Client, Role, TransportConfig};

/// Quick retries (20 ms to 200 ms, seeded), a 10 s join timeout, and `outbox_capacity`.
fn config(outbox_capacity: usize) -> SessionConfig {
    SessionConfig {
        follow: FollowConfig {
            pacing: Pacing::Backoff {
                initial: Duration::from_millis(20),
                max: Duration::from_millis(200),
            },
            redirects_at_once: 3,
            pass_over: Duration::ZERO,
            seed: 1,
        },
        join_timeout: Duration::from_secs(10),
        outbox_capacity,
    }
}

async fn next(session: &mut LeaderSession<AgentSession>) -> SessionEvent<AgentSession> {
    within(session.next()).await
}

/// Waits for the next attempt and makes it with a heartbeat `seq` as the hello (a scripted
/// master reads any message as the hello).
async fn attempt(session: &mut LeaderSession<AgentSession>, seq: u64) {
    match next(session).await {
        SessionEvent::Due => session.attempt(AgentToMaster::Heartbeat { seq }),
        other => panic!("expected an attempt to be due, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_redirect_joins_replays_and_retries_after_a_loss() {
    let certs = TestCerts::new(CertCounts {
        masters: 2,
        agents: 1,
        ..CertCounts::default()
    });
    let mut follower = FakeMaster::bind(&certs, 1);
    let mut leader = FakeMaster::bind(&certs, 2);
    let (follower_addr, leader_addr) = (follower.addr(), leader.addr());
    let client =
        Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).expect("client");
    let config = config(DEFAULT_OUTBOX_CAPACITY);
    let mut session =
        LeaderSession::<AgentSession>::new(Arc::new(client), vec![follower_addr], config)
            .expect("masters");

    // The follower redirects to the leader, which is tried at once.
    attempt(&mut session, 1).await;
    let mut at_follower = follower.accept::<AgentPeer>().await;
    assert_eq!(
        at_follower.recv().await,
        AgentToMaster::Heartbeat { seq: 1 }
    );
    at_follower.redirect_to(MasterId(2), leader_addr).await;
    attempt(&mut session, 2).await;
    let mut at_leader = leader.accept::<AgentPeer>().await;
    assert_eq!(at_leader.recv().await, AgentToMaster::Heartbeat { seq: 2 });
    let registered = MasterToAgent::Registered {
        agent_id: AgentId::from("agent-1"),
        heartbeat_interval_ms: 250,
        lost_after_ms: 30_000,
        kill: vec![],
    };
    at_leader.send(&registered).await;
    match next(&mut session).await {
        SessionEvent::Joined { addr, welcome } => {
            let expected = Registered {
                heartbeat_interval: Duration::from_millis(250),
                lost_after: Duration::from_secs(30),
                kill: vec![],
            };
            assert_eq!((addr, welcome), (leader_addr, expected));
        }
        other => panic!("expected a join, got {other:?}"),
    }
    assert!(session.is_joined());
    assert_eq!(session.master(), Some(leader_addr));
    assert_eq!(session.follower().masters(), &[follower_addr, leader_addr]);

    // What the caller says is outstanding goes out in order, then new messages.
    let outstanding = (10..13).map(|seq| AgentToMaster::Heartbeat { seq });
    session.replay(outstanding).expect("joined");
    session
        .send(AgentToMaster::Heartbeat { seq: 13 })
        .expect("joined");
    for seq in 10..14 {
        assert_eq!(at_leader.recv().await, AgentToMaster::Heartbeat { seq });
    }
    at_leader
        .send(&MasterToAgent::HeartbeatAck { seq: 13 })
        .await;
    match next(&mut session).await {
        SessionEvent::Message(MasterToAgent::HeartbeatAck { seq: 13 }) => {}
        other => panic!("expected the ack, got {other:?}"),
    }

    // The leader goes away: the session is lost and the next master of the list is tried.
    at_leader.close("gone");
    match next(&mut session).await {
        SessionEvent::Lost { .. } => {}
        other => panic!("expected the session to be lost, got {other:?}"),
    }
    assert!(!session.is_joined());
    attempt(&mut session, 3).await;
    let next_addr: SocketAddr = session.follower().current().expect("a master");
    assert_ne!(next_addr, leader_addr);
    let mut again = follower.accept::<AgentPeer>().await;
    assert_eq!(again.recv().await, AgentToMaster::Heartbeat { seq: 3 });
    session.close("done");
}

// One thread, so that the session's writer cannot run between the sends below: the outbox fills
// exactly as it would behind a master that stopped reading.
#[tokio::test(flavor = "current_thread")]
async fn a_full_outbox_is_reported_rather_than_growing() {
    let certs = TestCerts::new(CertCounts {
        masters: 1,
        agents: 1,
        ..CertCounts::default()
    });
    let mut master = FakeMaster::bind(&certs, 1);
    let client =
        Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).expect("client");
    let config = config(2);
    let mut session =
        LeaderSession::<AgentSession>::new(Arc::new(client), vec![master.addr()], config)
            .expect("masters");
    attempt(&mut session, 1).await;
    let mut at_master = master.accept::<AgentPeer>().await;
    assert_eq!(at_master.recv().await, AgentToMaster::Heartbeat { seq: 1 });
    at_master
        .send(&MasterToAgent::Registered {
            agent_id: AgentId::from("agent-1"),
            heartbeat_interval_ms: 250,
            lost_after_ms: 30_000,
            kill: vec![],
        })
        .await;
    assert!(matches!(
        next(&mut session).await,
        SessionEvent::Joined { .. }
    ));

    let mut send = |seq| session.send(AgentToMaster::Heartbeat { seq });
    assert_eq!(send(10), Ok(()));
    assert_eq!(send(11), Ok(()));
    assert_eq!(send(12), Err(SendError::Full));
    // What was queued still goes out, in order.
    assert_eq!(at_master.recv().await, AgentToMaster::Heartbeat { seq: 10 });
    assert_eq!(at_master.recv().await, AgentToMaster::Heartbeat { seq: 11 });
    session.close("done");
}
