//! Fake masters and test certificates for component tests; not for production use.
//!
//! One copy of what the component tests of the agent, the client, the SDK and the transport
//! share: a development cluster's certificates in a temporary directory ([`TestCerts`]), a
//! master that is a real [`Server`] on loopback answering as the test says ([`FakeMaster`],
//! with typed sessions, [`PeerSession`]), the follower that redirects every session to the
//! leader ([`FakeMaster::follow_leader`]), the master that echoes strings
//! ([`EchoMaster`]) and the bound on every wait ([`WAIT`], [`within`], [`awaiting`]).
//! Enabled by this crate's `testkit` feature.
//!
//! The master's side of a session is generic over the role's messages ([`PeerKind`]: an
//! [`AgentPeer`] sends `AgentToMaster` and reads `MasterToAgent`, a [`FrameworkPeer`] sends
//! `FrameworkCall` and reads `MasterToFramework`), so that a test reads and writes the
//! messages of its role and nothing else.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::net::{Ipv4Addr, SocketAddr};
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use fullerene_proto::messages::{
    AgentToMaster, FrameworkCall, LeaderInfo, MasterToAgent, MasterToFramework, Redirect,
    SessionOpen,
};
use fullerene_proto::MasterId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tempfile::TempDir;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::certs::{generate_dev_cluster, CertCounts, GeneratedCerts};
use crate::{
    Connection, PeerIdentity, Role, Server, Session, TlsMaterial, TransportConfig, TransportError,
};

/// How long a test waits for anything that takes milliseconds on loopback: generous, so that
/// only a hang fails a test on a loaded machine.
pub const WAIT: Duration = Duration::from_secs(20);

/// How long a session that has ended is kept open so that the peer can read its last frames.
const LINGER: Duration = Duration::from_secs(2);

/// Awaits `future` for at most [`WAIT`], panicking with `what` when it takes longer.
///
/// # Panics
///
/// When `future` does not complete within [`WAIT`].
pub async fn awaiting<F: IntoFuture>(what: impl fmt::Display, future: F) -> F::Output {
    match tokio::time::timeout(WAIT, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {WAIT:?} awaiting {what}"),
    }
}

/// Awaits `future` for at most [`WAIT`], panicking with the caller's line when it takes longer
/// (the line names what was awaited).
///
/// # Panics
///
/// When `future` does not complete within [`WAIT`].
#[track_caller]
pub fn within<F: IntoFuture>(future: F) -> impl Future<Output = F::Output> {
    awaiting(Location::caller(), future)
}

/// The loopback address with a port the OS chooses.
#[must_use]
pub fn localhost() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// A development cluster's certificates (`generate_dev_cluster`), in a temporary directory
/// removed when this is dropped.
pub struct TestCerts {
    generated: GeneratedCerts,
    _dir: TempDir,
}

impl TestCerts {
    /// A CA and `counts` member certificates, `master-1`, `agent-1`, … as usual.
    ///
    /// # Panics
    ///
    /// When the temporary directory or the certificates cannot be made.
    #[must_use]
    pub fn new(counts: CertCounts) -> TestCerts {
        let dir = tempfile::tempdir().expect("a temporary directory for the certificates");
        let generated = generate_dev_cluster(&dir.path().join("certs"), counts, false)
            .expect("development certificates");
        TestCerts {
            generated,
            _dir: dir,
        }
    }

    /// What was generated: the CA's files and every member's.
    #[must_use]
    pub fn generated(&self) -> &GeneratedCerts {
        &self.generated
    }

    /// The TLS material of the `n`-th (from 1) member of `role`.
    ///
    /// # Panics
    ///
    /// When the counts made no such member, or its files do not load.
    #[must_use]
    pub fn tls(&self, role: Role, n: usize) -> TlsMaterial {
        let member = self
            .generated
            .member(role, n)
            .unwrap_or_else(|| panic!("no certificate for {role} {n}: raise the counts"));
        TlsMaterial::load(
            &self.generated.ca_cert,
            &member.paths.cert,
            &member.paths.key,
        )
        .unwrap_or_else(|error| panic!("the certificate of {role} {n} loads: {error}"))
    }
}

/// A kind of session as the master sees it: the messages its peer sends and those the master
/// answers with.
pub trait PeerKind: Send + 'static {
    /// What the peer sends.
    type FromPeer: DeserializeOwned + fmt::Debug + Send;
    /// What the master sends.
    type ToPeer: Serialize + Sync + Send;
    /// The kind of session the peer opens.
    const KIND: SessionOpen;
    /// The master's redirect, in this kind's messages.
    fn redirect(redirect: Redirect) -> Self::ToPeer;
}

/// A marker type for a kind of session, its messages and its [`PeerKind`] impl.
macro_rules! peer_kind {
    ($(#[$doc:meta])* $name:ident: $from:ty => $to:ident, $kind:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {}

        impl PeerKind for $name {
            type FromPeer = $from;
            type ToPeer = $to;
            const KIND: SessionOpen = SessionOpen::$kind;
            fn redirect(redirect: Redirect) -> $to {
                $to::Redirect(redirect)
            }
        }
    };
}

peer_kind!(
    /// An agent's session: `AgentToMaster` up, `MasterToAgent` down.
    AgentPeer: AgentToMaster => MasterToAgent, Agent
);
peer_kind!(
    /// A framework's session: `FrameworkCall` up, `MasterToFramework` down.
    FrameworkPeer: FrameworkCall => MasterToFramework, Framework
);

/// The leader `id` at `addr`, in term 1: what a fake follower names.
fn leader(id: MasterId, addr: SocketAddr) -> Redirect {
    Redirect {
        leader: Some(LeaderInfo { id, addr, term: 1 }),
    }
}

/// A master that does what the test tells it: a real transport [`Server`] on loopback with a
/// master's certificate.
pub struct FakeMaster {
    server: Server,
}

impl FakeMaster {
    /// Binds `127.0.0.1:0` with the certificate of `master-n`.
    ///
    /// # Panics
    ///
    /// When there is no such certificate or the server cannot bind.
    #[must_use]
    pub fn bind(certs: &TestCerts, n: usize) -> FakeMaster {
        let server = Server::bind(
            localhost(),
            &certs.tls(Role::Master, n),
            TransportConfig::default(),
        )
        .expect("the fake master binds on loopback");
        FakeMaster { server }
    }

    /// Where peers reach it.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The next connection and its first session, which must be of kind `K`.
    ///
    /// # Panics
    ///
    /// When none comes within [`WAIT`], the handshake fails or the session is of another kind.
    pub async fn accept<K: PeerKind>(&mut self) -> PeerSession<K> {
        let addr = self.addr();
        let connection = awaiting(
            format!("a connection to the fake master at {addr}"),
            self.server.accept(),
        )
        .await
        .expect("the fake master's server is open")
        .unwrap_or_else(|error| panic!("the handshake with the fake master failed: {error}"));
        let session = awaiting(
            format!("a session from {}", connection.peer()),
            connection.accept_session(),
        )
        .await
        .unwrap_or_else(|error| panic!("the session from {} failed: {error}", connection.peer()));
        assert_eq!(session.kind, K::KIND, "the session's kind");
        PeerSession {
            connection,
            session,
            kind: PhantomData,
        }
    }

    /// Serves every connection in a task of its own, until the server is closed or a handshake
    /// fails: `serve` gets the connection's first session, of kind `K`, and the connection's
    /// number (from 1). Once `serve` returns the connection is kept a little longer, so that
    /// the peer reads the last frames.
    pub fn serve_each<K, F, Fut>(mut self, serve: F) -> JoinHandle<()>
    where
        K: PeerKind,
        F: Fn(PeerSession<K>, usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let serve = Arc::new(serve);
        tokio::spawn(async move {
            let mut connections = 0;
            while let Some(Ok(connection)) = self.server.accept().await {
                connections += 1;
                let number = connections;
                let serve = Arc::clone(&serve);
                tokio::spawn(async move {
                    let Ok(session) = connection.accept_session().await else {
                        return;
                    };
                    assert_eq!(session.kind, K::KIND, "the session's kind");
                    let kept = connection.clone();
                    serve(
                        PeerSession {
                            connection,
                            session,
                            kind: PhantomData,
                        },
                        number,
                    )
                    .await;
                    let _ = tokio::time::timeout(LINGER, kept.closed()).await;
                });
            }
        })
    }

    /// Plays a follower: answers the first message of every session of kind `K` with a
    /// redirect to the leader `id` at `addr`.
    pub fn follow_leader<K: PeerKind>(self, id: MasterId, addr: SocketAddr) -> JoinHandle<()> {
        self.serve_each(move |mut peer: PeerSession<K>, _| async move {
            if peer.recv_until_end().await.is_some() {
                let _ = peer.try_send(&K::redirect(leader(id, addr))).await;
                let _ = peer.session.tx.finish().await;
                let _ = tokio::time::timeout(LINGER, peer.session.tx.stopped()).await;
            }
        })
    }

    /// Stops accepting connections and closes the ones it has.
    pub fn close(&self) {
        self.server.close();
    }
}

/// The master's side of a session of kind `K`, and its connection.
pub struct PeerSession<K: PeerKind> {
    /// The connection the session is on.
    pub connection: Connection,
    /// The session.
    pub session: Session,
    kind: PhantomData<fn() -> K>,
}

impl<K: PeerKind> PeerSession<K> {
    /// Who is at the other end, from its certificate.
    #[must_use]
    pub fn peer(&self) -> &PeerIdentity {
        &self.session.peer
    }

    /// The peer's next message.
    ///
    /// # Panics
    ///
    /// When none comes within [`WAIT`], or the session ends or fails first.
    pub async fn recv(&mut self) -> K::FromPeer {
        let peer = self.session.peer.clone();
        match awaiting(
            format!("a message from {peer}"),
            self.session.rx.recv::<K::FromPeer>(),
        )
        .await
        {
            Ok(Some(message)) => message,
            Ok(None) => panic!("{peer} ended its session while a message was awaited"),
            Err(error) => {
                panic!("the session with {peer} failed while a message was awaited: {error}")
            }
        }
    }

    /// The peer's next message, however long it takes, or `None` once the session has ended
    /// or failed: for a master that serves until its peer leaves.
    pub async fn recv_until_end(&mut self) -> Option<K::FromPeer> {
        self.session.rx.recv::<K::FromPeer>().await.ok().flatten()
    }

    /// Sends `message` to the peer.
    ///
    /// # Panics
    ///
    /// When the session fails.
    pub async fn send(&mut self, message: &K::ToPeer) {
        let peer = self.session.peer.clone();
        self.try_send(message)
            .await
            .unwrap_or_else(|error| panic!("sending to {peer} failed: {error}"));
    }

    /// Sends `message` to the peer, saying whether it could.
    ///
    /// # Errors
    ///
    /// When the session fails.
    pub async fn try_send(&mut self, message: &K::ToPeer) -> Result<(), TransportError> {
        self.session.tx.send(message).await
    }

    /// Redirects the peer to the leader `id` at `addr` (in term 1).
    ///
    /// # Panics
    ///
    /// When the session fails.
    pub async fn redirect_to(&mut self, id: MasterId, addr: SocketAddr) {
        self.send(&K::redirect(leader(id, addr))).await;
    }

    /// Closes the connection, as a master that goes away does.
    pub fn close(&self, reason: &str) {
        self.connection.close(reason);
    }
}

/// What an [`EchoMaster`] saw of one session.
#[derive(Debug, PartialEq)]
pub struct EchoedSession {
    /// The connection's peer.
    pub connection_peer: PeerIdentity,
    /// The session's peer.
    pub session_peer: PeerIdentity,
    /// The kind of session opened.
    pub kind: SessionOpen,
}

/// A master that accepts every connection and session, reports each session, and answers
/// every `String` with `<peer id>:<string>`. Dropping it shuts everything down.
pub struct EchoMaster {
    /// Where clients reach it.
    pub addr: SocketAddr,
    /// Every session accepted, in order; a failed handshake as `Err` with its error.
    pub reports: mpsc::UnboundedReceiver<Result<EchoedSession, String>>,
    _tasks: JoinSet<()>,
}

impl EchoMaster {
    /// Starts it on loopback with `tls` (which may be any master's, a foreign one included)
    /// and `config`.
    ///
    /// # Panics
    ///
    /// When the server cannot bind.
    #[must_use]
    pub fn start(tls: &TlsMaterial, config: TransportConfig) -> EchoMaster {
        let mut server = Server::bind(localhost(), tls, config).expect("the echo master binds");
        let addr = server.local_addr();
        let (report, reports) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Some(accepted) = server.accept().await {
                let connection = match accepted {
                    Ok(connection) => connection,
                    Err(error) => {
                        let _ = report.send(Err(error.to_string()));
                        continue;
                    }
                };
                let report = report.clone();
                connections.spawn(async move {
                    let mut sessions = JoinSet::new();
                    while let Ok(mut session) = connection.accept_session().await {
                        let _ = report.send(Ok(EchoedSession {
                            connection_peer: connection.peer().clone(),
                            session_peer: session.peer.clone(),
                            kind: session.kind.clone(),
                        }));
                        sessions.spawn(async move {
                            while let Ok(Some(text)) = session.rx.recv::<String>().await {
                                let answer = format!("{}:{text}", session.peer.id);
                                if session.tx.send(&answer).await.is_err() {
                                    break;
                                }
                            }
                        });
                    }
                });
            }
        });
        EchoMaster {
            addr,
            reports,
            _tasks: tasks,
        }
    }
}
