//! The leader-following session (the agent's kind) against scripted masters on loopback: a redirect followed to
//! the leader, a join, the replay of what the caller says is outstanding, and a lost session
//! retried at the next master.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fullerene_client::{
    AgentSession, FollowConfig, LeaderSession, Pacing, Registered, SessionConfig, SessionEvent,
};
use fullerene_proto::messages::{AgentToMaster, LeaderInfo, MasterToAgent, Redirect};
use fullerene_proto::{AgentId, MasterId};
use fullerene_transport::certs::{generate_dev_cluster, CertCounts, CertPaths, GeneratedCerts};
use fullerene_transport::{
    Client, Connection, Role, Server, Session, TlsMaterial, TransportConfig,
};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(20);

fn tls(certs: &GeneratedCerts, role: Role, n: usize) -> TlsMaterial {
    let paths = CertPaths::of_member(&certs.dir, role, n);
    TlsMaterial::load(&certs.ca_cert, &paths.cert, &paths.key).expect("tls")
}

async fn accept(server: &mut Server) -> (Connection, Session) {
    let connection = timeout(WAIT, server.accept())
        .await
        .expect("a connection in time")
        .expect("server open")
        .expect("handshake");
    let session = timeout(WAIT, connection.accept_session())
        .await
        .expect("a session in time")
        .expect("session");
    (connection, session)
}

async fn recv(session: &mut Session) -> AgentToMaster {
    timeout(WAIT, session.rx.recv::<AgentToMaster>())
        .await
        .expect("a message in time")
        .expect("session alive")
        .expect("not closed")
}

async fn next(session: &mut LeaderSession<AgentSession>) -> SessionEvent<AgentSession> {
    timeout(WAIT, session.next())
        .await
        .expect("an event in time")
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
    let dir = tempfile::tempdir().expect("tempdir");
    let counts = CertCounts {
        masters: 2,
        agents: 1,
        ..CertCounts::default()
    };
    let certs = generate_dev_cluster(&dir.path().join("certs"), counts, false).expect("certs");
    let bind = |n| {
        Server::bind(
            "127.0.0.1:0".parse().expect("addr"),
            &tls(&certs, Role::Master, n),
            TransportConfig::default(),
        )
        .expect("bind")
    };
    let mut follower = bind(1);
    let mut leader = bind(2);
    let (follower_addr, leader_addr) = (follower.local_addr(), leader.local_addr());
    let client =
        Client::new(&tls(&certs, Role::Agent, 1), TransportConfig::default()).expect("client");
    let config = SessionConfig {
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
    };
    let mut session =
        LeaderSession::<AgentSession>::new(Arc::new(client), vec![follower_addr], config)
            .expect("masters");

    // The follower redirects to the leader, which is tried at once.
    attempt(&mut session, 1).await;
    let (_c, mut at_follower) = accept(&mut follower).await;
    assert_eq!(
        recv(&mut at_follower).await,
        AgentToMaster::Heartbeat { seq: 1 }
    );
    let redirect = MasterToAgent::Redirect(Redirect {
        leader: Some(LeaderInfo {
            id: MasterId(2),
            addr: leader_addr,
            term: 1,
        }),
    });
    at_follower.tx.send(&redirect).await.expect("send");
    attempt(&mut session, 2).await;
    let (connection, mut at_leader) = accept(&mut leader).await;
    assert_eq!(
        recv(&mut at_leader).await,
        AgentToMaster::Heartbeat { seq: 2 }
    );
    let registered = MasterToAgent::Registered {
        agent_id: AgentId::from("agent-1"),
        heartbeat_interval_ms: 250,
        kill: vec![],
    };
    at_leader.tx.send(&registered).await.expect("send");
    match next(&mut session).await {
        SessionEvent::Joined { addr, welcome } => {
            let expected = Registered {
                heartbeat_interval: Duration::from_millis(250),
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
        assert_eq!(recv(&mut at_leader).await, AgentToMaster::Heartbeat { seq });
    }
    at_leader
        .tx
        .send(&MasterToAgent::HeartbeatAck { seq: 13 })
        .await
        .expect("send");
    match next(&mut session).await {
        SessionEvent::Message(MasterToAgent::HeartbeatAck { seq: 13 }) => {}
        other => panic!("expected the ack, got {other:?}"),
    }

    // The leader goes away: the session is lost and the next master of the list is tried.
    connection.close("gone");
    match next(&mut session).await {
        SessionEvent::Lost { .. } => {}
        other => panic!("expected the session to be lost, got {other:?}"),
    }
    assert!(!session.is_joined());
    attempt(&mut session, 3).await;
    let next_addr: SocketAddr = session.follower().current().expect("a master");
    assert_ne!(next_addr, leader_addr);
    let (_c, mut again) = accept(&mut follower).await;
    assert_eq!(recv(&mut again).await, AgentToMaster::Heartbeat { seq: 3 });
    session.close("done");
}
