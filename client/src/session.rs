//! The leader-following session: the thin tokio/QUIC shell around a [`Follower`] for a client
//! whose session lasts (an agent).
//!
//! A [`LeaderSession`] connects to a master, opens a session of the [`Handshake`]'s kind, sends
//! the hello the caller gives (a registration) and reads the answer: joined, redirected to the
//! leader, refused, or no answer within `join_timeout`. Every decision about where to go next
//! and when is the [`Follower`]'s; the session carries it out (timers, one task per attempt, a
//! writer task per joined session) and reports what the caller must act on through
//! [`LeaderSession::next`]. After a join, the caller says what is still unacknowledged and the
//! session sends it again ([`LeaderSession::replay`]); the master drops what it already has.
//!
//! Frames are written by a task of their own, so the caller keeps reading while the master is
//! slow to read: a master that blocks writing to the client while the client writes to it
//! cannot deadlock the two on QUIC flow control.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fullerene_proto::messages::{LeaderInfo, SessionOpen, WireError};
use fullerene_proto::time::{SystemClock, Time};
use fullerene_transport::{Client, Connection, FramedRecv, FramedSend, TransportError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::follow::{Attempt, FollowConfig, Follower, NoMasters};
use crate::link::{open, Link, OpenError};

/// What a kind of session sends and how the master's answer to its hello reads.
pub trait Handshake: Send + 'static {
    /// Messages to the master (the hello among them).
    type Up: Serialize + Send + Sync + 'static;
    /// Messages from the master.
    type Down: DeserializeOwned + fmt::Debug + Send + 'static;
    /// What the master's acceptance of the hello carries.
    type Welcome: Send + 'static;
    /// The kind of session opened.
    const KIND: SessionOpen;
    /// What a message received while waiting for the answer to the hello means.
    fn answer(message: Self::Down) -> Answer<Self::Welcome, Self::Down>;
}

/// The meaning of a message received while waiting for the answer to the hello.
#[derive(Debug)]
pub enum Answer<W, D> {
    /// The master accepted: the session is joined.
    Joined(W),
    /// The master is not the leader; `None` when it knows of none yet.
    Redirect(Option<LeaderInfo>),
    /// The master refused the hello.
    Refused(WireError),
    /// Not an answer to the hello: skipped.
    Other(D),
}

/// How a [`LeaderSession`] runs.
#[derive(Clone, Copy, Debug)]
pub struct SessionConfig {
    /// Where to go next and when.
    pub follow: FollowConfig,
    /// How long an attempt may take, from connecting to the master's answer to the hello.
    pub join_timeout: Duration,
    /// How many messages may wait for the session's writer. A master that stops reading
    /// (stuck, or its flow control closed) would otherwise make the queue grow for as long as
    /// the session lasts; past this, [`LeaderSession::send`] answers [`SendError::Full`] and the
    /// caller gives the session up (what must arrive is replayed after the next join).
    /// [`DEFAULT_OUTBOX_CAPACITY`] suits agents and frameworks.
    pub outbox_capacity: usize,
}

/// The default [`SessionConfig::outbox_capacity`]: far more than a session queues while its
/// master reads (a few heartbeats, a burst of updates, a replay of every unacknowledged one on
/// a busy agent), small enough that a stuck session costs megabytes, not the machine.
pub const DEFAULT_OUTBOX_CAPACITY: usize = 1 << 16;

/// What the caller must act on.
pub enum SessionEvent<H: Handshake> {
    /// An attempt is due: call [`LeaderSession::attempt`] with the hello, built now so that it
    /// says what is true now.
    Due,
    /// The master at `addr` accepted the hello. Send what is unacknowledged with
    /// [`LeaderSession::replay`].
    Joined {
        /// The master.
        addr: SocketAddr,
        /// What its answer carried.
        welcome: H::Welcome,
    },
    /// A message from the joined master.
    Message(H::Down),
    /// The joined session ended (closed by the master, or the stream failed); the next attempt
    /// is scheduled.
    Lost {
        /// Why.
        reason: String,
    },
}

impl<H: Handshake> fmt::Debug for SessionEvent<H>
where
    H::Welcome: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionEvent::Due => f.write_str("Due"),
            SessionEvent::Joined { addr, welcome } => f
                .debug_struct("Joined")
                .field("addr", addr)
                .field("welcome", welcome)
                .finish(),
            SessionEvent::Message(message) => f.debug_tuple("Message").field(message).finish(),
            SessionEvent::Lost { reason } => {
                f.debug_struct("Lost").field("reason", reason).finish()
            }
        }
    }
}

/// Why a message could not be queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No session is joined: the message was dropped (what must arrive is replayed after the
    /// next join).
    #[error("no session with a master")]
    NotJoined,
    /// The session's writer stopped (the connection failed): give the session up with
    /// [`LeaderSession::lose`].
    #[error("the session's writer stopped")]
    WriterStopped,
    /// The session's outbox is full: the master is not reading. Give the session up with
    /// [`LeaderSession::lose`].
    #[error("the session's outbox is full: the master is not reading")]
    Full,
}

/// A session that follows the leader (see the module documentation).
pub struct LeaderSession<H: Handshake> {
    client: Arc<Client>,
    follower: Follower,
    join_timeout: Duration,
    outbox_capacity: usize,
    /// The follower's clock.
    clock: SystemClock,
    /// The next attempt: when, and where.
    due: Option<(Instant, SocketAddr)>,
    joining: Option<JoinHandle<Outcome<H>>>,
    joined: Option<Joined<H>>,
}

impl<H: Handshake> fmt::Debug for LeaderSession<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSession")
            .field("follower", &self.follower)
            .field("due", &self.due)
            .field("joining", &self.joining.is_some())
            .field("joined", &self.joined.as_ref().map(|j| j.addr))
            .finish_non_exhaustive()
    }
}

/// A joined session.
struct Joined<H: Handshake> {
    addr: SocketAddr,
    connection: Connection,
    outbox: mpsc::Sender<H::Up>,
    writer: JoinHandle<()>,
    rx: FramedRecv,
}

impl<H: Handshake> Joined<H> {
    fn close(self, why: &str) {
        self.connection.close(why);
        self.writer.abort();
    }
}

/// How an attempt ended.
enum Outcome<H: Handshake> {
    Joined(Box<Accepted<H>>),
    Redirect(Option<LeaderInfo>),
    Refused(WireError),
    Failed(String),
}

/// A hello the master accepted.
struct Accepted<H: Handshake> {
    addr: SocketAddr,
    connection: Connection,
    tx: FramedSend,
    rx: FramedRecv,
    welcome: H::Welcome,
}

enum Step<H: Handshake> {
    Due,
    Attempted(Outcome<H>),
    Received(Result<Option<H::Down>, TransportError>),
}

impl<H: Handshake> LeaderSession<H> {
    /// A session over `masters`; the first attempt is due at once. Call inside a tokio runtime.
    pub fn new(
        client: Arc<Client>,
        masters: Vec<SocketAddr>,
        config: SessionConfig,
    ) -> Result<LeaderSession<H>, NoMasters> {
        let clock = SystemClock::new();
        let mut follower = Follower::new(masters, config.follow)?;
        let first = follower.start(clock.monotonic());
        let mut session = LeaderSession {
            client,
            follower,
            join_timeout: config.join_timeout,
            outbox_capacity: config.outbox_capacity,
            clock,
            due: None,
            joining: None,
            joined: None,
        };
        session.schedule(first);
        Ok(session)
    }

    /// Whether a session is joined.
    pub fn is_joined(&self) -> bool {
        self.joined.is_some()
    }

    /// The joined master.
    pub fn master(&self) -> Option<SocketAddr> {
        self.joined.as_ref().map(|j| j.addr)
    }

    /// The decisions so far (for logs and tests).
    pub fn follower(&self) -> &Follower {
        &self.follower
    }

    /// Waits for the next event. Cancel-safe: it may be used in `tokio::select!`.
    pub async fn next(&mut self) -> SessionEvent<H> {
        loop {
            let LeaderSession {
                due,
                joining,
                joined,
                ..
            } = self;
            let due_at = match due {
                Some((at, _)) if joining.is_none() && joined.is_none() => Some(*at),
                _ => None,
            };
            let step = tokio::select! {
                () = async {
                    match due_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => Step::Due,
                outcome = async {
                    match joining.as_mut() {
                        Some(handle) => match handle.await {
                            Ok(outcome) => outcome,
                            Err(e) => Outcome::Failed(format!("the attempt's task failed: {e}")),
                        },
                        None => std::future::pending().await,
                    }
                } => Step::Attempted(outcome),
                received = async {
                    match joined.as_mut() {
                        Some(joined) => joined.rx.recv::<H::Down>().await,
                        None => std::future::pending().await,
                    }
                } => Step::Received(received),
            };
            match step {
                Step::Due => return SessionEvent::Due,
                Step::Attempted(outcome) => {
                    self.joining = None;
                    if let Some(event) = self.attempted(outcome) {
                        return event;
                    }
                }
                Step::Received(Ok(Some(message))) => return SessionEvent::Message(message),
                Step::Received(Ok(None)) => {
                    let reason = "the master closed the session".to_string();
                    self.lose(&reason);
                    return SessionEvent::Lost { reason };
                }
                Step::Received(Err(error)) => {
                    let reason = error.to_string();
                    self.lose(&reason);
                    return SessionEvent::Lost { reason };
                }
            }
        }
    }

    /// Starts the attempt that is due, sending `hello` once the session is open. Does nothing
    /// when no attempt is due.
    pub fn attempt(&mut self, hello: H::Up) {
        if self.joining.is_some() || self.joined.is_some() {
            return;
        }
        let Some((at, addr)) = self.due else {
            return;
        };
        if Instant::now() < at {
            return;
        }
        self.due = None;
        tracing::debug!(master = %addr, kind = ?H::KIND, failures = self.follower.failures(), "joining");
        let client = Arc::clone(&self.client);
        let within = self.join_timeout;
        self.joining = Some(tokio::spawn(async move {
            match tokio::time::timeout(within, join::<H>(&client, addr, hello, within)).await {
                Ok(outcome) => outcome,
                Err(_) => Outcome::Failed(format!("no answer from {addr} within {within:?}")),
            }
        }));
    }

    /// Queues `message` for the joined master.
    pub fn send(&mut self, message: H::Up) -> Result<(), SendError> {
        let joined = self.joined.as_ref().ok_or(SendError::NotJoined)?;
        joined
            .outbox
            .try_send(message)
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => SendError::Full,
                mpsc::error::TrySendError::Closed(_) => SendError::WriterStopped,
            })
    }

    /// Sends again, in order, what the caller says is outstanding (unacknowledged).
    pub fn replay(
        &mut self,
        outstanding: impl IntoIterator<Item = H::Up>,
    ) -> Result<(), SendError> {
        for message in outstanding {
            self.send(message)?;
        }
        Ok(())
    }

    /// Gives the joined session up (the master went silent, the writer stopped): the next
    /// attempt goes to the next master after a backoff. Returns whether a session was joined.
    pub fn lose(&mut self, why: &str) -> bool {
        let Some(joined) = self.joined.take() else {
            return false;
        };
        joined.close(why);
        let next = self.follower.lost(self.now());
        self.schedule(next);
        true
    }

    /// The joined master said it no longer leads, naming the leader if it knows it.
    pub fn redirected(&mut self, leader: Option<LeaderInfo>) {
        if let Some(joined) = self.joined.take() {
            joined.close("redirected");
        }
        let next = self.follower.redirected(leader.map(|l| l.addr), self.now());
        self.schedule(next);
    }

    /// Stops: the attempt in flight is abandoned and the joined session closed.
    pub fn close(&mut self, why: &str) {
        if let Some(handle) = self.joining.take() {
            handle.abort();
        }
        if let Some(joined) = self.joined.take() {
            joined.close(why);
        }
        self.due = None;
    }

    fn attempted(&mut self, outcome: Outcome<H>) -> Option<SessionEvent<H>> {
        let now = self.now();
        let next = match outcome {
            Outcome::Joined(accepted) => {
                let Accepted {
                    addr,
                    connection,
                    tx,
                    rx,
                    welcome,
                } = *accepted;
                self.follower.joined();
                let (outbox, writer) =
                    spawn_writer::<H::Up>(tx, connection.clone(), self.outbox_capacity);
                self.joined = Some(Joined {
                    addr,
                    connection,
                    outbox,
                    writer,
                    rx,
                });
                return Some(SessionEvent::Joined { addr, welcome });
            }
            Outcome::Redirect(Some(leader)) => {
                let next = self.follower.redirected(Some(leader.addr), now);
                tracing::info!(leader = %leader.addr, id = %leader.id, next = %next.addr, delay = ?next.delay, "redirected to the leader");
                next
            }
            Outcome::Redirect(None) => {
                tracing::info!("no leader known yet; backing off");
                self.follower.redirected(None, now)
            }
            Outcome::Refused(error) => {
                tracing::warn!(%error, "refused; backing off");
                self.follower.failed(now)
            }
            Outcome::Failed(why) => {
                // A master briefly away is routine; a client that cannot join at all must be
                // visible at the default log level.
                let failures = self.follower.failures();
                if failures >= 3 {
                    tracing::warn!(%why, attempts = failures + 1, "cannot join any master yet; backing off");
                } else {
                    tracing::info!(%why, "attempt failed; backing off");
                }
                self.follower.failed(now)
            }
        };
        self.schedule(next);
        None
    }

    fn schedule(&mut self, attempt: Attempt) {
        let at = Instant::now() + attempt.delay;
        self.due = Some((at, attempt.addr));
    }

    /// The follower's time: a reading of the monotonic clock.
    fn now(&self) -> Time {
        self.clock.monotonic()
    }
}

impl<H: Handshake> Drop for LeaderSession<H> {
    fn drop(&mut self) {
        if let Some(handle) = self.joining.take() {
            handle.abort();
        }
        if let Some(joined) = self.joined.take() {
            joined.writer.abort();
        }
    }
}

/// Connects, opens the session, sends the hello and waits for the answer.
async fn join<H: Handshake>(
    client: &Client,
    addr: SocketAddr,
    hello: H::Up,
    within: Duration,
) -> Outcome<H> {
    let Link {
        connection,
        session,
        ..
    } = match open(client, addr, H::KIND, within).await {
        Ok(link) => link,
        Err(OpenError::Transport(TransportError::SessionRefused(error))) => {
            return Outcome::Refused(error)
        }
        Err(e) => return Outcome::Failed(format!("cannot open a session with {addr}: {e}")),
    };
    let (mut tx, mut rx) = (session.tx, session.rx);
    if let Err(e) = tx.send(&hello).await {
        return Outcome::Failed(format!("cannot send the hello to {addr}: {e}"));
    }
    loop {
        match rx.recv::<H::Down>().await {
            Ok(Some(message)) => match H::answer(message) {
                Answer::Joined(welcome) => {
                    return Outcome::Joined(Box::new(Accepted {
                        addr,
                        connection,
                        tx,
                        rx,
                        welcome,
                    }))
                }
                Answer::Redirect(leader) => {
                    connection.close("redirected");
                    return Outcome::Redirect(leader);
                }
                Answer::Refused(error) => {
                    connection.close("refused");
                    return Outcome::Refused(error);
                }
                Answer::Other(message) => {
                    tracing::debug!(
                        ?message,
                        "ignoring a message before the answer to the hello"
                    );
                }
            },
            Ok(None) => {
                return Outcome::Failed(format!("{addr} closed the session before answering"))
            }
            Err(e) => return Outcome::Failed(format!("no answer from {addr}: {e}")),
        }
    }
}

/// The writer task of a session: sends queued frames in order (at most `capacity` wait); on a
/// failure it closes the connection, which ends the session for the reader too.
fn spawn_writer<U: Serialize + Send + Sync + 'static>(
    mut tx: FramedSend,
    connection: Connection,
    capacity: usize,
) -> (mpsc::Sender<U>, JoinHandle<()>) {
    let (outbox, mut queue) = mpsc::channel::<U>(capacity.max(1));
    let writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            if let Err(error) = tx.send(&message).await {
                connection.close(&format!("cannot send: {error}"));
                return;
            }
        }
        let _ = tx.finish().await;
    });
    (outbox, writer)
}
