//! Outbound Raft traffic: one sender task per peer master.
//!
//! Each task keeps one QUIC connection and one `Peer` session to its master. Raft tolerates
//! message loss (it retransmits on heartbeats and probes), so the sender never queues for an
//! unreachable peer: a batch it cannot deliver is dropped and reported
//! ([`RaftNode::report_unreachable`](crate::raft_node::RaftNode::report_unreachable)), and
//! reconnection is attempted again only after an exponential backoff.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fullerene_proto::messages::{PeerMessage, SessionOpen};
use fullerene_transport::{Client, Connection, FramedRecv, FramedSend};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};

use super::node_loop::Event;
use crate::core::Input;

/// The first wait before reconnecting to a peer that could not be reached.
const MIN_RECONNECT_BACKOFF: Duration = Duration::from_millis(50);

/// Batches are merged into one frame up to this many bytes, well under the transport's frame
/// limit (4 MiB by default) so that a merged frame is never refused for its size.
const MAX_MERGED_BYTES: usize = 1 << 20;

/// A Raft message larger than this goes out as consecutive `RaftPart` frames of this size.
const PART_BYTES: usize = 1 << 20;

/// How long a connection attempt (QUIC and TLS handshakes, then the session open) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Encoded Raft messages for one peer, from one `advance`.
#[derive(Debug, Default)]
pub(crate) struct PeerBatch {
    /// Each an encoded `raft::eraftpb::Message`.
    pub messages: Vec<Vec<u8>>,
    /// Whether one of them is a `MsgSnapshot`, whose delivery must be reported.
    pub has_snapshot: bool,
}

impl PeerBatch {
    fn bytes(&self) -> usize {
        self.messages.iter().map(Vec::len).sum()
    }
}

/// The node loop's handle on a sender task. Dropping it lets the task send what is queued and
/// end.
#[derive(Debug)]
pub(crate) struct PeerHandle {
    queue: mpsc::Sender<PeerBatch>,
}

impl PeerHandle {
    /// Queues `batch`; false when the queue is full (the peer is slow or unreachable).
    pub(crate) fn try_send(&self, batch: PeerBatch) -> bool {
        self.queue.try_send(batch).is_ok()
    }
}

/// Starts the sender task for master `peer` at `addr`.
pub(crate) fn spawn_sender(
    peer: u64,
    addr: SocketAddr,
    client: Arc<Client>,
    events: mpsc::Sender<Event>,
    queue: usize,
    max_backoff: Duration,
) -> PeerHandle {
    let (tx, rx) = mpsc::channel(queue.max(1));
    let sender = PeerSender {
        peer,
        addr,
        client,
        events,
        link: None,
        backoff: MIN_RECONNECT_BACKOFF,
        max_backoff: max_backoff.max(MIN_RECONNECT_BACKOFF),
        retry_at: Instant::now(),
    };
    tokio::spawn(sender.run(rx));
    PeerHandle { queue: tx }
}

struct PeerSender {
    peer: u64,
    addr: SocketAddr,
    client: Arc<Client>,
    events: mpsc::Sender<Event>,
    /// The open connection and the session's sending half (the connection is kept so it
    /// stays open; the receiving half has its own task, see [`watch_answers`]).
    link: Option<(Connection, FramedSend)>,
    backoff: Duration,
    max_backoff: Duration,
    /// No reconnection attempt before this instant.
    retry_at: Instant,
}

impl PeerSender {
    async fn run(mut self, mut queue: mpsc::Receiver<PeerBatch>) {
        while let Some(mut batch) = queue.recv().await {
            // Merge whatever else is queued: one frame, one write.
            while batch.bytes() < MAX_MERGED_BYTES {
                match queue.try_recv() {
                    Ok(more) => {
                        batch.messages.extend(more.messages);
                        batch.has_snapshot |= more.has_snapshot;
                    }
                    Err(_) => break,
                }
            }
            let delivered = self.deliver(batch.messages).await;
            if !delivered {
                self.report(Event::Input(Input::PeerUnreachable(self.peer)))
                    .await;
            }
            if batch.has_snapshot {
                self.report(Event::Input(Input::SnapshotReport(self.peer, delivered)))
                    .await;
            }
        }
        if let Some((connection, _)) = self.link.take() {
            connection.close("master stopping");
        }
    }

    async fn report(&self, event: Event) {
        // The node loop may be gone (shutdown); then no one needs the report.
        let _ = self.events.send(event).await;
    }

    async fn deliver(&mut self, messages: Vec<Vec<u8>>) -> bool {
        if self.link.is_none() {
            if Instant::now() < self.retry_at {
                return false;
            }
            match timeout(CONNECT_TIMEOUT, self.connect()).await {
                Ok(Ok(link)) => {
                    tracing::info!(peer = self.peer, addr = %self.addr, "connected to peer");
                    self.link = Some(link);
                    self.backoff = MIN_RECONNECT_BACKOFF;
                }
                Ok(Err(error)) => {
                    self.failed(&error);
                    return false;
                }
                Err(_) => {
                    self.failed("connection attempt timed out");
                    return false;
                }
            }
        }
        let Some((_, tx)) = self.link.as_mut() else {
            return false;
        };
        match send_in_frames(tx, messages).await {
            Ok(()) => true,
            Err(error) => {
                tracing::info!(peer = self.peer, %error, "lost the session to the peer");
                self.link = None;
                self.retry_at = Instant::now();
                false
            }
        }
    }

    fn failed(&mut self, error: &str) {
        tracing::debug!(peer = self.peer, addr = %self.addr, error, backoff = ?self.backoff, "peer unreachable");
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(self.max_backoff);
    }

    /// Connects and opens the `Peer` session, and starts watching it for answers; the error
    /// says why not, for the log.
    async fn connect(&self) -> Result<(Connection, FramedSend), String> {
        let connection = self
            .client
            .connect(self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let expected = Some(fullerene_proto::ids::MasterId(self.peer));
        if connection.peer().master_id() != expected {
            let found = connection.peer().to_string();
            connection.close("unexpected master identity");
            return Err(format!(
                "{} is {found}, not master-{}",
                self.addr, self.peer
            ));
        }
        let session = connection
            .open_session(SessionOpen::Peer)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(watch_answers(self.peer, session.rx, self.events.clone()));
        Ok((connection, session.tx))
    }
}

/// Sends `messages` in order: small ones together in one `Raft` frame, any larger than
/// [`PART_BYTES`] as consecutive `RaftPart` frames.
async fn send_in_frames(
    tx: &mut FramedSend,
    messages: Vec<Vec<u8>>,
) -> Result<(), fullerene_transport::TransportError> {
    let mut small = Vec::new();
    for message in messages {
        if message.len() <= PART_BYTES {
            small.push(message);
            continue;
        }
        if !small.is_empty() {
            tx.send(&PeerMessage::Raft(std::mem::take(&mut small)))
                .await?;
        }
        let total = message.len() as u64;
        for piece in message.chunks(PART_BYTES) {
            tx.send(&PeerMessage::RaftPart {
                total,
                bytes: piece.to_vec(),
            })
            .await?;
        }
    }
    if !small.is_empty() {
        tx.send(&PeerMessage::Raft(small)).await?;
    }
    Ok(())
}

/// Reads what the peer answers on our session: only `NotAMember`, which is passed to the node
/// loop. Ends with the session.
async fn watch_answers(peer: u64, mut rx: FramedRecv, events: mpsc::Sender<Event>) {
    loop {
        match rx.recv::<PeerMessage>().await {
            Ok(Some(PeerMessage::NotAMember { as_of })) => {
                let _ = events
                    .send(Event::Input(Input::NotAMember { from: peer, as_of }))
                    .await;
            }
            Ok(Some(_)) => {
                tracing::warn!(peer, "unexpected frame on our own peer session; ignored");
            }
            Ok(None) | Err(_) => return,
        }
    }
}
