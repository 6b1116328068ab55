//! The replicated master's Raft node: a sans-IO driver around raft-rs's `RawNode`.
//!
//! Like `quinn-proto` under `quinn`, [`RaftNode`] opens no socket, spawns no thread and reads
//! no clock. The shell feeds it peer messages ([`RaftNode::step`]), ticks
//! ([`RaftNode::tick`]), client proposals ([`RaftNode::propose`]), linearizable read requests
//! ([`RaftNode::read_index`]) and membership changes ([`RaftNode::propose_conf_change`]), and
//! calls [`RaftNode::advance`] whenever [`RaftNode::has_ready`] says so; `advance` runs one
//! raft-rs `Ready` cycle and returns a [`NodeOutput`]: messages to send, answers to proposals,
//! reads that may now be served, leadership and membership changes.
//!
//! # One `Ready` cycle (Raft thesis §10.2.1; raft-rs 0.7's asynchronous `Ready` protocol)
//!
//! 1. The proposals queued since the last cycle go to raft-rs as **one** batch (one
//!    `MsgPropose` with many entries): they are appended, replicated, persisted and committed
//!    together, so a burst of commands costs one synced write per master, not one per command.
//! 2. Messages that need no durable state (the leader's appends and heartbeats: the leader
//!    writes its log in parallel with replication) are returned at once.
//! 3. The snapshot from the leader (if any), the new entries and the new hard state are
//!    *staged* in the store as one atomic write ([`RaftStore::stage`]): raft-rs can read them
//!    at once, and a [`StoreJob`] makes them durable, synced unless the `Ready` changes only the
//!    commit index ([`Durability::Ordered`]). The node does not wait for it
//!    (`advance_append_async`).
//! 4. The *persisted messages* (votes, append acknowledgements, which promise durable state)
//!    are held until the job of their `Ready`, and of every `Ready` before it, is reported
//!    done; then raft-rs is told (`on_persist_ready`), which is also when the leader counts its
//!    own log towards a commit.
//! 5. Committed entries (raft-rs hands out only entries this master has persisted) are
//!    applied to the [`ClusterState`].
//! 6. Every proposal of this master that was applied is answered with the state machine's
//!    result; reads whose index is now applied are released.
//! 7. Every `snapshot_interval` applied entries, a copy of the state machine becomes a job
//!    that encodes and saves it; once saved, the log before it (less `log_retention`) stops
//!    being served and another job deletes it.
//!
//! Jobs run inside `advance` ([`Persistence::Inline`]: everything is durable when it
//! returns) or wherever the caller runs them ([`Persistence::Offloaded`]: the master's shell
//! on a thread of its own, so that no tick, heartbeat or answer waits for an fsync; several
//! `Ready`s that queue behind one fsync are written with the next, a group commit). See
//! [`persistence`].
//!
//! # Matching answers to proposals
//!
//! When a batch enters the leader's log, each command's (index, term) is recorded with the
//! caller's [`Token`]. Raft's log matching property makes (index, term) identify an entry, so
//! when index `i` is applied: the same term means it is our command (answered with its result);
//! another term means a new leader overwrote it ([`ProposeError::Superseded`]). Proposals whose
//! index is passed by a snapshot get [`ProposeError::OutcomeUnknown`]. No token is left
//! unanswered while the node runs.

mod config;
mod logger;
mod metrics;
pub mod persistence;

use fullerene_proto::Time;
use std::collections::{BTreeMap, VecDeque};

use fullerene_proto::codec::{self, CodecError};
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState,
    Entry, EntryType, Message, MessageType, Snapshot, SnapshotMetadata,
};
use raft::{RawNode, StateRole};

pub use config::{NodeConfig, DEFAULT_SNAPSHOT_ENTRIES_PER_RECORD, MAX_GROWN_SNAPSHOT_INTERVAL};
pub use logger::{raft_logger, TracingDrain};
pub use persistence::{run_store_jobs, JobOutcome, Persistence, StoreJob, StoreReport, StoreWork};

use crate::state::events::{self, EventBatch, EventProbe};
use crate::state::{ClusterSettings, ClusterState, Command, CommandError, CommandOutcome};
use crate::storage::{Durability, RaftStore, ReadyWrite, StorageError};
use fullerene_proto::http::{ClusterEvent, EventRecord};
use metrics::NodeMetrics;

/// A caller's handle on a proposal or a read, echoed in the [`NodeOutput`] that answers it.
/// Chosen by the caller; only its uniqueness among the caller's outstanding requests matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// Why a proposal was not (or may not have been) applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProposeError {
    /// Only the leader takes proposals; `leader` is the leader's id when known.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The current leader, if known.
        leader: Option<u64>,
    },
    /// The command could not be encoded (e.g. larger than the codec's limit).
    #[error("cannot encode the command: {0}")]
    Encode(CodecError),
    /// Too many proposals queued since the last `advance`.
    #[error("too many queued proposals ({0}); retry later")]
    Busy(usize),
    /// raft-rs refused the batch (a leadership transfer in progress, or too many uncommitted
    /// entries): nothing entered the log.
    #[error("the proposal was dropped by Raft: {0}")]
    Dropped(String),
    /// The entry was overwritten by another leader's log: it was not applied.
    #[error("the proposal was superseded by a new leader's log")]
    Superseded,
    /// The entry's index was covered by a snapshot from the leader, or this master lost
    /// leadership and the entry left its log: it may or may not be applied. Retry only
    /// idempotent commands (or check the state first).
    #[error("the outcome of the proposal is unknown (leadership lost, or a snapshot was installed past it)")]
    OutcomeUnknown,
    /// The membership change was refused: it is invalid for the current configuration.
    #[error("membership change refused: {0}")]
    ConfChangeRefused(String),
    /// The membership change was not made because another one may not be applied yet: a
    /// change in flight, or a new leader that has not applied its whole log (raft-rs counts
    /// that log as a possible change). Nothing was changed; the same change may be proposed
    /// again once the leader has caught up.
    #[error("membership change not made yet: another change may be in flight, or the leader has not applied its whole log; try again")]
    ConfChangePending,
    /// This master was removed from the group.
    #[error("this master was removed from the group")]
    Removed,
    /// The node stopped after a fatal failure.
    #[error("the node stopped: {0}")]
    Halted(NodeError),
}

/// Why a linearizable read failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    /// No leader is known: ReadIndex requests are not queued while there is none.
    #[error("no leader is known; retry later")]
    NoLeader,
    /// The leader did not confirm the read in time (leader lost, partition, message loss).
    #[error("the read was not confirmed within {0} ticks")]
    Timeout(usize),
    /// This master was removed from the group.
    #[error("this master was removed from the group")]
    Removed,
    /// The node stopped after a fatal failure.
    #[error("the node stopped: {0}")]
    Halted(NodeError),
}

/// A fatal failure: the node must stop (and, for storage damage, must not be restarted on
/// the same data without an operator's decision).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NodeError {
    /// The store failed or holds damaged data.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// raft-rs refused to start or step (invalid configuration or state).
    #[error("raft: {0}")]
    Raft(String),
    /// The configuration is invalid.
    #[error("invalid node configuration: {0}")]
    Config(String),
    /// A committed entry this build cannot decode: applying the rest would diverge from the
    /// other masters, so the node stops.
    #[error("committed entry {index} cannot be decoded: {source}")]
    UndecodableEntry {
        /// Its index.
        index: u64,
        /// The codec's error.
        source: CodecError,
    },
    /// raft-rs gave up (it panics where it meets what it cannot handle, such as a failed read
    /// of the log); the node stops rather than serve from a state raft-rs left half-changed.
    #[error("raft stopped: {0}")]
    Halted(String),
    /// A snapshot (from the leader, or the store's) that does not decode.
    #[error("snapshot at index {index} from {origin} cannot be decoded: {detail}")]
    BadSnapshot {
        /// Its index.
        index: u64,
        /// Where it came from.
        origin: String,
        /// What is wrong.
        detail: String,
    },
}

/// Why a peer's message was not stepped. None is fatal in itself (the transport logs them);
/// `Halted` reports a failure that [`RaftNode::advance`] returns as fatal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// A message type only a node sends itself (a buggy or hostile peer).
    #[error("peer {from} sent a local message type {msg_type:?}")]
    LocalMessage {
        /// The sender.
        from: u64,
        /// The type.
        msg_type: MessageType,
    },
    /// A response from a peer that is not a member (e.g. removed).
    #[error("response from unknown peer {0}")]
    UnknownPeer(u64),
    /// The message is not for this node.
    #[error("message for node {to} delivered to node {this}")]
    WrongRecipient {
        /// The addressee.
        to: u64,
        /// This node.
        this: u64,
    },
    /// This master was removed from the group and ignores traffic.
    #[error("this master was removed from the group")]
    Removed,
    /// raft-rs refused it.
    #[error("raft: {0}")]
    Raft(String),
    /// The node stopped after a fatal failure ([`RaftNode::advance`] returns it).
    #[error("the node stopped: {0}")]
    Halted(NodeError),
}

/// A membership change in a form that needs no raft-rs types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipChange {
    /// Add a master as a learner: it receives the log (a snapshot first) but does not vote.
    AddLearner(u64),
    /// Add a master as a voter, or promote a learner.
    AddVoter(u64),
    /// Remove a master (voter or learner).
    Remove(u64),
}

impl MembershipChange {
    fn single(&self) -> ConfChangeSingle {
        let (change_type, node_id) = match *self {
            MembershipChange::AddLearner(id) => (ConfChangeType::AddLearnerNode, id),
            MembershipChange::AddVoter(id) => (ConfChangeType::AddNode, id),
            MembershipChange::Remove(id) => (ConfChangeType::RemoveNode, id),
        };
        ConfChangeSingle {
            change_type,
            node_id,
            ..Default::default()
        }
    }

    /// A ConfChangeV2 applying `changes` at once, with `context` (opaque here: the shell puts
    /// the new master's address in it). One voter change is a simple change; several use
    /// joint consensus, left automatically (Raft thesis §4.3).
    pub fn to_conf_change(changes: &[MembershipChange], context: Vec<u8>) -> ConfChangeV2 {
        ConfChangeV2 {
            transition: ConfChangeTransition::Auto,
            changes: changes.iter().map(MembershipChange::single).collect(),
            context: context.into(),
            ..Default::default()
        }
    }
}

/// A membership change that was applied (or refused) in this cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct MembershipApplied {
    /// The proposer's token, when this master proposed it.
    pub token: Option<Token>,
    /// The log index of the change.
    pub index: u64,
    /// The change as proposed (its context carries what the shell put there).
    pub change: ConfChangeV2,
    /// The membership after it (voters and learners sorted), or why it was refused.
    pub result: Result<ConfState, String>,
}

/// A leadership change seen by this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderChange {
    /// The new leader, `None` while an election runs.
    pub leader: Option<u64>,
    /// The term.
    pub term: u64,
    /// Whether this node is the new leader.
    pub is_self: bool,
}

/// What one [`RaftNode::advance`] produced.
#[derive(Debug, Default)]
pub struct NodeOutput {
    /// Raft messages to send to peers, in order (each has its `to`). A `MsgSnapshot` must be
    /// reported back with [`RaftNode::report_snapshot`] once delivered or failed.
    pub messages_to_send: Vec<Message>,
    /// This master's proposals that were applied, with the state machine's answer.
    pub applied: Vec<(Token, Result<CommandOutcome, CommandError>)>,
    /// This master's proposals that will not be applied (or whose fate is unknown).
    pub dropped: Vec<(Token, ProposeError)>,
    /// Membership changes applied in this cycle, in log order.
    pub membership: Vec<MembershipApplied>,
    /// Reads that may now be served from [`RaftNode::state`]: linearizable as of this cycle.
    pub reads_ready: Vec<Token>,
    /// Reads that failed.
    pub reads_failed: Vec<(Token, ReadError)>,
    /// Set when the known leader changed.
    pub leader_changed: Option<LeaderChange>,
    /// Set when this master was removed from the group: the shell should stop it.
    pub removed_self: bool,
    /// Set (to its index) when a snapshot from the leader replaced the state machine: the
    /// shell must rebuild whatever it derived from the state.
    pub snapshot_installed: Option<u64>,
}

impl NodeOutput {
    /// True when there is nothing to act on.
    pub fn is_empty(&self) -> bool {
        self.messages_to_send.is_empty()
            && self.applied.is_empty()
            && self.dropped.is_empty()
            && self.membership.is_empty()
            && self.reads_ready.is_empty()
            && self.reads_failed.is_empty()
            && self.leader_changed.is_none()
            && !self.removed_self
            && self.snapshot_installed.is_none()
    }
}

/// A proposal waiting for the next flush.
#[derive(Debug)]
enum Queued {
    Command { token: Token, data: Vec<u8> },
    ConfChange { token: Token, change: ConfChangeV2 },
}

/// Flush times of applied proposals kept for a caller that does not take them (a caller that
/// measures takes them after every step; one that does not, such as a simulation, loses
/// nothing it wanted).
pub const MAX_UNTAKEN_FLUSH_TIMES: usize = 4_096;

/// Events kept for a caller that does not take them (a simulation, an in-process benchmark):
/// past this many, the oldest are dropped and the batch's floor raised past them, so a ring
/// fed late says so. As many as a ring keeps by default; the master's shell takes them after
/// every step, so only one entry with more events than this (a teardown of that many tasks)
/// loses some, and its readers are told.
pub const MAX_UNTAKEN_EVENTS: usize = crate::state::events::DEFAULT_EVENTS_KEPT;

/// Leaders remembered by term, to name the leader of a term when its first entry is applied.
const LEADERS_REMEMBERED: usize = 16;

/// What kind of entry a tracked proposal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProposalKind {
    Command,
    ConfChange,
}

/// A proposal in the log, waiting to be applied.
#[derive(Debug)]
struct InFlight {
    term: u64,
    token: Token,
    kind: ProposalKind,
    flushed_at: Time,
}

/// A read waiting for the leader's confirmation (its ReadState).
#[derive(Debug)]
struct PendingRead {
    token: Token,
    ticks_left: usize,
}

/// An applied entry, as [`RaftNode::take_apply_trace`] returns it when
/// [`NodeConfig::trace_applied`] is set: what an oracle outside the node (the deterministic
/// cluster simulation) compares across masters to check that they all apply the same entry at
/// each index (Raft's state machine safety, thesis §3.6.3).
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedTrace {
    /// Its index.
    pub index: u64,
    /// Its term.
    pub term: u64,
    /// Its type.
    pub entry_type: EntryType,
    /// Its data.
    pub data: Vec<u8>,
}

/// The replicated master's Raft node over a store `S`. See the module documentation.
///
/// ```
/// use fullerene_master::raft_node::{NodeConfig, RaftNode, Token};
/// use fullerene_master::state::{ClusterSettings, Command};
/// use fullerene_master::storage::MemStorage;
/// use fullerene_proto::Time;
///
/// let mut node = RaftNode::bootstrap(NodeConfig::new(1), MemStorage::new("m1"), &[1], ClusterSettings::default())?;
/// node.campaign()?;
/// while node.has_ready() {
///     node.advance(Time::ZERO)?;
/// }
/// assert!(node.is_leader());
/// // A command is applied once committed, and its outcome comes back with its token.
/// node.propose(&Command::SetGroupWeight { group: "prod".to_string(), weight: 2.0 }, Token(7))?;
/// let mut applied = Vec::new();
/// while node.has_ready() {
///     applied.extend(node.advance(Time::ZERO)?.applied);
/// }
/// assert!(matches!(applied.as_slice(), [(Token(7), Ok(_))]));
/// assert_eq!(node.state().settings().group_weights.get("prod"), Some(&2.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RaftNode<S: RaftStore> {
    raw: RawNode<S>,
    config: NodeConfig,
    state: ClusterState,
    /// Highest index applied to `state`.
    applied: u64,
    /// Index of the latest state-machine snapshot in the store.
    snapshot_index: u64,
    queued: Vec<Queued>,
    in_flight: BTreeMap<u64, InFlight>,
    /// Reads sent to raft-rs, by context, waiting for their ReadState.
    reads_unconfirmed: BTreeMap<Vec<u8>, PendingRead>,
    /// Reads confirmed at a read index, waiting for `applied` to reach it.
    reads_confirmed: VecDeque<(u64, Token)>,
    reads_failed: Vec<(Token, ReadError)>,
    /// Proposals refused at flush time, reported by the next `advance`.
    dropped: Vec<(Token, ProposeError)>,
    leader: Option<u64>,
    removed: bool,
    /// Set when a membership change was applied: the next snapshot must not wait for the
    /// interval, or a new master could only be sent a snapshot it refuses (see
    /// `storage::snapshot_covers`).
    force_snapshot: bool,
    /// When each of this master's proposals applied since the last `take_applied_flush_times`
    /// was flushed into the log. The node reads no clock, and the time passed to `advance` is
    /// read before the step: a proposal committed and applied within one step (always, under
    /// inline persistence) measured against it read 0 s, so the caller measures against a
    /// reading taken after the step.
    applied_flush_times: Vec<Time>,
    metrics: NodeMetrics,
    /// The entries applied since the last `take_apply_trace`, when `config.trace_applied`.
    trace: Vec<AppliedTrace>,
    /// Set when raft-rs gave up or the store failed a read: nothing reaches raft-rs any more,
    /// and [`RaftNode::advance`] returns it.
    halted: Option<NodeError>,
    /// The events derived from what was applied since the last [`RaftNode::take_events`].
    events: EventBatch,
    /// The term of the last applied entry: an entry of a later term starts a new leader's.
    applied_term: u64,
    /// The leader of each recent term, as this node learnt it from Raft's soft state.
    leaders_by_term: BTreeMap<u64, u64>,
    /// Runs the store jobs under [`Persistence::Inline`].
    writer: S::Writer,
    /// Jobs not yet taken (offloaded) or run (inline), in order.
    jobs: Vec<StoreJob<S::Staged>>,
    /// The id of the next job.
    next_job: u64,
    /// Jobs handed out and not yet reported done, in order, with what their completion means.
    awaited: VecDeque<(u64, Awaited)>,
    /// Messages that promise durable state, each batch held until the job it names is done.
    held: VecDeque<(u64, Vec<Message>)>,
    /// Messages a report released, sent by the next `advance`.
    released: Vec<Message>,
    /// A snapshot job is out: no other is taken until it is reported.
    snapshot_job_out: bool,
}

/// What a store job's completion means to the node.
#[derive(Debug)]
enum Awaited {
    /// The write of `Ready` `number`, staged with the store's `ticket`.
    Ready { number: u64, ticket: u64 },
    /// A state-machine snapshot.
    Snapshot { meta: SnapshotMetadata },
    /// Deleting compacted entries.
    Compact,
}

impl<S: RaftStore> std::fmt::Debug for RaftNode<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode")
            .field("id", &self.config.id)
            .field("role", &self.raw.raft.state)
            .field("term", &self.raw.raft.term)
            .field("applied", &self.applied)
            .field("leader", &self.leader)
            .finish_non_exhaustive()
    }
}

fn raft_error(e: raft::Error) -> NodeError {
    NodeError::Raft(e.to_string())
}

/// Runs `call`, turning a panic (how raft-rs gives up) into [`NodeError::Halted`] with the
/// panic's message.
fn catch_raft_panic<R>(call: impl FnOnce() -> R) -> Result<R, NodeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "raft-rs panicked".to_string());
        NodeError::Halted(message)
    })
}

fn sorted_conf_state(mut cs: ConfState) -> ConfState {
    cs.voters.sort_unstable();
    cs.learners.sort_unstable();
    cs.voters_outgoing.sort_unstable();
    cs.learners_next.sort_unstable();
    cs
}

fn read_context(node: u64, token: Token) -> Vec<u8> {
    let mut ctx = Vec::with_capacity(16);
    ctx.extend_from_slice(&node.to_be_bytes());
    ctx.extend_from_slice(&token.0.to_be_bytes());
    ctx
}

impl<S: RaftStore> RaftNode<S> {
    /// Creates a founding member of a new group on an empty store: every founding master is
    /// bootstrapped with the same `voters` and `settings`.
    pub fn bootstrap(
        config: NodeConfig,
        mut store: S,
        voters: &[u64],
        settings: ClusterSettings,
    ) -> Result<RaftNode<S>, NodeError> {
        if !voters.contains(&config.id) {
            return Err(NodeError::Config(format!(
                "master {} is not among the initial voters {voters:?}",
                config.id
            )));
        }
        let initial = ClusterState::new(settings)
            .encode_snapshot()
            .map_err(|e| NodeError::Config(e.to_string()))?;
        store.bootstrap(voters, &initial)?;
        RaftNode::open(config, store)
    }

    /// Starts a node on a store: a restart (the state machine is loaded from the store's
    /// snapshot and the committed entries after it are re-applied), or a new master joining an
    /// existing group (an empty store: it waits for the leader's snapshot).
    pub fn open(config: NodeConfig, store: S) -> Result<RaftNode<S>, NodeError> {
        let snapshot = store.latest_snapshot();
        let snapshot_index = snapshot.get_metadata().index;
        let snapshot_term = snapshot.get_metadata().term;
        let hard_state = store.hard_state();
        if snapshot_index > hard_state.commit {
            return Err(StorageError::Corrupt {
                location: store.location(),
                detail: format!(
                    "the state snapshot is at index {snapshot_index}, beyond the commit index {}",
                    hard_state.commit
                ),
            }
            .into());
        }
        let state = if snapshot_index == 0 {
            ClusterState::default()
        } else {
            ClusterState::decode_snapshot(&snapshot.data).map_err(|e| StorageError::Corrupt {
                location: store.location(),
                detail: format!(
                    "the state snapshot at index {snapshot_index} does not decode: {e}"
                ),
            })?
        };
        let raft_config = config.to_raft(snapshot_index).map_err(NodeError::Config)?;
        let writer = store.writer();
        let logger = raft_logger(config.id);
        let raw =
            catch_raft_panic(|| RawNode::new(&raft_config, store, &logger))?.map_err(raft_error)?;
        let metrics = NodeMetrics::new(config.id);
        metrics.applied_index.set(snapshot_index as f64);
        metrics.snapshot_bytes.set(snapshot.data.len() as f64);
        tracing::info!(
            node = config.id,
            applied = snapshot_index,
            commit = hard_state.commit,
            term = hard_state.term,
            "raft node started"
        );
        Ok(RaftNode {
            raw,
            config,
            state,
            applied: snapshot_index,
            snapshot_index,
            queued: Vec::new(),
            in_flight: BTreeMap::new(),
            reads_unconfirmed: BTreeMap::new(),
            reads_confirmed: VecDeque::new(),
            reads_failed: Vec::new(),
            dropped: Vec::new(),
            leader: None,
            removed: false,
            force_snapshot: false,
            applied_flush_times: Vec::new(),
            metrics,
            trace: Vec::new(),
            halted: None,
            events: EventBatch::default(),
            applied_term: snapshot_term,
            leaders_by_term: BTreeMap::new(),
            writer,
            jobs: Vec::new(),
            next_job: 1,
            awaited: VecDeque::new(),
            held: VecDeque::new(),
            released: Vec::new(),
            snapshot_job_out: false,
        })
    }

    /// This master's Raft id.
    pub fn id(&self) -> u64 {
        self.config.id
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The state machine, as of [`RaftNode::applied_index`].
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// Highest log index applied to the state machine.
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// Highest log index known committed.
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// Index of the last entry in the log.
    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The leader, if known.
    pub fn leader(&self) -> Option<u64> {
        match self.raw.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    /// Whether this master leads.
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// Whether this master was removed from the group.
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    /// The current membership (voters and learners sorted).
    pub fn membership(&self) -> ConfState {
        sorted_conf_state(self.raw.raft.prs().conf().to_conf_state())
    }

    /// raft-rs's view of the group (progress of each follower, on the leader).
    pub fn status(&self) -> raft::Status<'_> {
        self.raw.status()
    }

    /// The store.
    pub fn store(&self) -> &S {
        self.raw.store()
    }

    /// Proposals queued and in the log but not yet answered: the leader's backlog of writes,
    /// which admission control bounds (`CoreConfig::accept_backlog_limit`).
    pub fn pending_proposals(&self) -> usize {
        self.queued.len() + self.in_flight.len()
    }

    /// Whether [`RaftNode::advance`] has something to do (for a halted node: report why).
    pub fn has_ready(&self) -> bool {
        self.halted.is_some()
            || !self.removed
                && (self.raw.has_ready()
                    || !self.released.is_empty()
                    || !self.queued.is_empty()
                    || !self.dropped.is_empty()
                    || !self.reads_failed.is_empty()
                    || self
                        .reads_confirmed
                        .front()
                        .is_some_and(|(index, _)| *index <= self.applied))
    }

    /// Queues `command` for the next batch. Only the leader takes proposals; the answer comes
    /// in a later [`NodeOutput`] (`applied` or `dropped`) with `token`.
    pub fn propose(&mut self, command: &Command, token: Token) -> Result<(), ProposeError> {
        self.check_can_propose()?;
        let data = codec::encode(command).map_err(ProposeError::Encode)?;
        self.queued.push(Queued::Command { token, data });
        Ok(())
    }

    /// Queues a membership change (see [`MembershipChange::to_conf_change`]). Its result comes
    /// in [`NodeOutput::membership`] with `token`, or in `dropped`.
    pub fn propose_conf_change(
        &mut self,
        change: ConfChangeV2,
        token: Token,
    ) -> Result<(), ProposeError> {
        self.check_can_propose()?;
        self.queued.push(Queued::ConfChange { token, change });
        Ok(())
    }

    fn check_can_propose(&self) -> Result<(), ProposeError> {
        if let Some(error) = &self.halted {
            return Err(ProposeError::Halted(error.clone()));
        }
        if self.removed {
            return Err(ProposeError::Removed);
        }
        if !self.is_leader() {
            return Err(ProposeError::NotLeader {
                leader: self.leader(),
            });
        }
        if self.queued.len() >= self.config.max_queued_proposals {
            return Err(ProposeError::Busy(self.queued.len()));
        }
        Ok(())
    }

    /// Asks for a linearizable read (Raft thesis §6.4, ReadIndex): once the token appears in
    /// [`NodeOutput::reads_ready`], [`RaftNode::state`] reflects every command committed
    /// before this call. Works on followers too (the leader confirms). Fails at once while no
    /// leader is known, and after `read_timeout_ticks` if the leader does not confirm.
    pub fn read_index(&mut self, token: Token) -> Result<(), ReadError> {
        if let Some(error) = &self.halted {
            return Err(ReadError::Halted(error.clone()));
        }
        if self.removed {
            return Err(ReadError::Removed);
        }
        if self.leader().is_none() {
            return Err(ReadError::NoLeader);
        }
        let ctx = read_context(self.config.id, token);
        self.reads_unconfirmed.insert(
            ctx.clone(),
            PendingRead {
                token,
                ticks_left: self.config.read_timeout_ticks,
            },
        );
        self.guarded(|node| node.raw.read_index(ctx))
            .map_err(ReadError::Halted)
    }

    /// Advances Raft's logical clock by one tick (the shell ticks every
    /// [`NodeConfig::tick_interval`]), and times out reads the leader did not confirm.
    pub fn tick(&mut self) {
        if self.removed {
            return;
        }
        // A failure is kept in `halted` and returned by the next `advance`.
        if self.guarded(|node| node.raw.tick()).is_err() {
            return;
        }
        let mut expired = Vec::new();
        for (ctx, read) in self.reads_unconfirmed.iter_mut() {
            read.ticks_left = read.ticks_left.saturating_sub(1);
            if read.ticks_left == 0 {
                expired.push(ctx.clone());
            }
        }
        for ctx in expired {
            if let Some(read) = self.reads_unconfirmed.remove(&ctx) {
                self.metrics.read_timeouts.increment(1);
                self.reads_failed.push((
                    read.token,
                    ReadError::Timeout(self.config.read_timeout_ticks),
                ));
            }
        }
    }

    /// Steps a message from a peer.
    pub fn step(&mut self, message: Message) -> Result<(), StepError> {
        if self.removed {
            return Err(StepError::Removed);
        }
        if message.to != self.config.id {
            return Err(StepError::WrongRecipient {
                to: message.to,
                this: self.config.id,
            });
        }
        let (from, msg_type) = (message.from, message.get_msg_type());
        let stepped = self
            .guarded(|node| node.raw.step(message))
            .map_err(StepError::Halted)?;
        match stepped {
            Ok(()) => Ok(()),
            Err(raft::Error::StepLocalMsg) => Err(StepError::LocalMessage { from, msg_type }),
            Err(raft::Error::StepPeerNotFound) => Err(StepError::UnknownPeer(from)),
            Err(e) => Err(StepError::Raft(e.to_string())),
        }
    }

    /// Reports that the last message to `peer` could not be delivered (the leader then probes
    /// it instead of streaming appends).
    pub fn report_unreachable(&mut self, peer: u64) {
        // A failure is kept and returned by the next `advance`.
        let _ = self.guarded(|node| node.raw.report_unreachable(peer));
    }

    /// Reports whether a `MsgSnapshot` to `peer` was delivered. raft-rs waits for this before
    /// replicating to `peer` again.
    pub fn report_snapshot(&mut self, peer: u64, delivered: bool) {
        let status = if delivered {
            raft::SnapshotStatus::Finish
        } else {
            raft::SnapshotStatus::Failure
        };
        // A failure is kept and returned by the next `advance`.
        let _ = self.guarded(|node| node.raw.report_snapshot(peer, status));
    }

    /// Asks the leader to hand leadership to `transferee` (e.g. before removing itself).
    pub fn transfer_leader(&mut self, transferee: u64) {
        // A failure is kept and returned by the next `advance`.
        let _ = self.guarded(|node| node.raw.transfer_leader(transferee));
    }

    /// Starts an election now (tests, and an operator's forced election).
    pub fn campaign(&mut self) -> Result<(), NodeError> {
        self.guarded(|node| node.raw.campaign())?
            .map_err(raft_error)
    }

    /// Runs `call`, which reaches into raft-rs, so that raft-rs giving up does not take the
    /// process down with it. raft-rs panics where it meets what it cannot handle, a failed
    /// read of the log above all ([`RaftStore::read_fault`]): the panic, or a read failure it
    /// passed over, halts the node with a [`NodeError`] that [`RaftNode::advance`] returns, so
    /// that the shell stops the master cleanly (its peers elect another leader) instead of
    /// crashing or serving from a state raft-rs left half-changed. A halted node makes no
    /// further call into raft-rs.
    fn guarded<R>(&mut self, call: impl FnOnce(&mut Self) -> R) -> Result<R, NodeError> {
        if let Some(error) = &self.halted {
            return Err(error.clone());
        }
        let result = catch_raft_panic(|| call(self));
        let failure = match (self.raw.store().read_fault(), result) {
            (Some(fault), _) => NodeError::Storage(fault),
            (None, Ok(value)) => return Ok(value),
            (None, Err(panic)) => panic,
        };
        tracing::error!(node = self.config.id, error = %failure, "raft stopped; this master stops");
        self.halted = Some(failure.clone());
        Err(failure)
    }

    /// Runs one `Ready` cycle (see the module documentation). `now` only stamps the
    /// proposals flushed (see [`RaftNode::take_applied_flush_times`]). An error is fatal: stop the node.
    pub fn advance(&mut self, now: Time) -> Result<NodeOutput, NodeError> {
        if self.removed {
            return Ok(NodeOutput::default());
        }
        self.guarded(|node| node.advance_guarded(now))?
    }

    fn advance_guarded(&mut self, now: Time) -> Result<NodeOutput, NodeError> {
        let mut out = NodeOutput::default();
        out.messages_to_send.append(&mut self.released);
        self.flush_proposals(now);

        if self.raw.has_ready() {
            self.handle_ready(&mut out)?;
        }
        self.maybe_snapshot()?;
        if self.config.persistence == Persistence::Inline {
            self.run_jobs_inline(&mut out)?;
        }

        self.give_up_lost_proposals(&mut out);
        self.release_reads(&mut out);
        out.dropped.append(&mut self.dropped);
        out.reads_failed.append(&mut self.reads_failed);
        self.metrics.term.set(self.raw.raft.term as f64);
        self.metrics.commit_index.set(self.commit_index() as f64);
        self.metrics.applied_index.set(self.applied as f64);
        if out.removed_self {
            self.removed = true;
            self.fail_everything_pending(&mut out, ProposeError::Removed, ReadError::Removed);
        }
        Ok(out)
    }

    /// Hands the queued proposals to raft-rs: commands as one batch, membership changes one by
    /// one (raft-rs allows one pending change).
    fn flush_proposals(&mut self, now: Time) {
        if self.queued.is_empty() {
            return;
        }
        let queued = std::mem::take(&mut self.queued);
        if !self.is_leader() {
            let leader = self.leader();
            let queued_count = queued.len();
            for q in queued {
                let token = match q {
                    Queued::Command { token, .. } | Queued::ConfChange { token, .. } => token,
                };
                self.dropped
                    .push((token, ProposeError::NotLeader { leader }));
            }
            self.metrics.proposals_failed.increment(queued_count as u64);
            return;
        }
        let mut tokens = Vec::new();
        let mut entries = Vec::new();
        let mut changes = Vec::new();
        for q in queued {
            match q {
                Queued::Command { token, data } => {
                    tokens.push(token);
                    entries.push(Entry {
                        entry_type: EntryType::EntryNormal,
                        data: data.into(),
                        ..Default::default()
                    });
                }
                Queued::ConfChange { token, change } => changes.push((token, change)),
            }
        }
        if !entries.is_empty() {
            let count = entries.len();
            let mut message = Message {
                msg_type: MessageType::MsgPropose,
                from: self.config.id,
                to: self.config.id,
                ..Default::default()
            };
            message.set_entries(entries.into());
            match self.raw.raft.step(message) {
                Ok(()) => {
                    let term = self.raw.raft.term;
                    let last = self.raw.raft.raft_log.last_index();
                    let first = last + 1 - count as u64;
                    for (offset, token) in tokens.into_iter().enumerate() {
                        self.in_flight.insert(
                            first + offset as u64,
                            InFlight {
                                term,
                                token,
                                kind: ProposalKind::Command,
                                flushed_at: now,
                            },
                        );
                    }
                    self.metrics.proposals.increment(count as u64);
                    self.metrics.batch_size.record(count as f64);
                }
                Err(e) => {
                    self.metrics.proposals_failed.increment(count as u64);
                    let reason = e.to_string();
                    for token in tokens {
                        self.dropped
                            .push((token, ProposeError::Dropped(reason.clone())));
                    }
                }
            }
        }
        for (token, change) in changes {
            let data = match change.write_to_bytes() {
                Ok(data) => data,
                Err(e) => {
                    self.metrics.proposals_failed.increment(1);
                    self.dropped
                        .push((token, ProposeError::ConfChangeRefused(e.to_string())));
                    continue;
                }
            };
            let mut message = Message {
                msg_type: MessageType::MsgPropose,
                from: self.config.id,
                to: self.config.id,
                ..Default::default()
            };
            message.set_entries(
                vec![Entry {
                    entry_type: EntryType::EntryConfChangeV2,
                    data: data.into(),
                    ..Default::default()
                }]
                .into(),
            );
            match self.raw.raft.step(message) {
                Ok(()) => {
                    let index = self.raw.raft.raft_log.last_index();
                    self.in_flight.insert(
                        index,
                        InFlight {
                            term: self.raw.raft.term,
                            token,
                            kind: ProposalKind::ConfChange,
                            flushed_at: now,
                        },
                    );
                }
                Err(e) => {
                    self.metrics.proposals_failed.increment(1);
                    self.dropped
                        .push((token, ProposeError::Dropped(e.to_string())));
                }
            }
        }
    }

    fn handle_ready(&mut self, out: &mut NodeOutput) -> Result<(), NodeError> {
        let mut ready = self.raw.ready();

        if let Some(ss) = ready.ss() {
            let leader = match ss.leader_id {
                0 => None,
                id => Some(id),
            };
            if let Some(leader) = leader {
                self.leaders_by_term.insert(self.raw.raft.term, leader);
                while self.leaders_by_term.len() > LEADERS_REMEMBERED {
                    self.leaders_by_term.pop_first();
                }
            }
            if leader != self.leader {
                self.leader = leader;
                self.metrics.leader_changes.increment(1);
                out.leader_changed = Some(LeaderChange {
                    leader,
                    term: self.raw.raft.term,
                    is_self: leader == Some(self.config.id),
                });
                tracing::info!(
                    node = self.config.id,
                    ?leader,
                    term = self.raw.raft.term,
                    "leader changed"
                );
            }
            self.metrics
                .is_leader
                .set(if ss.raft_state == StateRole::Leader {
                    1.0
                } else {
                    0.0
                });
        }

        // The leader's appends and heartbeats need no durable state of its own.
        out.messages_to_send.extend(ready.take_messages());

        // Decode a snapshot from the leader before writing it: a snapshot this build cannot
        // read must not replace a good log.
        let incoming = if ready.snapshot().is_empty() {
            None
        } else {
            let snapshot = ready.snapshot();
            let index = snapshot.get_metadata().index;
            let state = ClusterState::decode_snapshot(&snapshot.data).map_err(|e| {
                NodeError::BadSnapshot {
                    index,
                    origin: "the leader".to_string(),
                    detail: e.to_string(),
                }
            })?;
            Some((index, state))
        };

        let number = ready.number();
        let write = ReadyWrite {
            // raft-rs says when only the commit index changed; see `Durability::Ordered`.
            durability: if ready.must_sync() {
                Durability::Synced
            } else {
                Durability::Ordered
            },
            snapshot: incoming.as_ref().map(|_| ready.snapshot()),
            entries: ready.entries(),
            hard_state: ready.hs(),
            commit: None,
        };
        if !write.is_empty() {
            let entries = write.entries.len() as u64;
            let (ticket, staged) = self.raw.mut_store().stage(write)?;
            self.push_job(StoreWork::Write(staged), Awaited::Ready { number, ticket });
            self.metrics.persist_batches.increment(1);
            self.metrics.entries_persisted.increment(entries);
        }

        if let Some((index, state)) = incoming {
            self.install_snapshot(index, state, ready.snapshot(), out);
        }

        // Votes and append acknowledgements promise what was just staged: they wait for it,
        // and for every write staged before it, to be durable.
        let persisted = ready.take_persisted_messages();
        if !persisted.is_empty() {
            match self.last_awaited_write() {
                Some(job) => self.held.push_back((job, persisted)),
                None => out.messages_to_send.extend(persisted),
            }
        }

        let committed = ready.take_committed_entries();
        self.apply_entries(committed, out)?;

        for read in ready.take_read_states() {
            if let Some(pending) = self.reads_unconfirmed.remove(&read.request_ctx) {
                self.reads_confirmed.push_back((read.index, pending.token));
            }
        }

        self.raw.advance_append_async(ready);
        if self.last_awaited_write().is_none() {
            // Nothing of this `Ready` (or before it) is waiting for the disk.
            self.raw.on_persist_ready(number);
        }
        self.tell_raft_applied();
        Ok(())
    }

    /// Tells raft-rs how far the state machine has applied, as far as raft-rs allows: a
    /// snapshot from the leader is installed in the state machine at once, but raft-rs counts
    /// it applied only once its write is durable (`on_persist_ready`), so the rest waits for
    /// the store's report.
    fn tell_raft_applied(&mut self) {
        let log = &self.raw.raft.raft_log;
        let allowed = self.applied.min(log.committed).min(log.persisted);
        if allowed > log.applied {
            self.raw.advance_apply_to(allowed);
        }
    }

    /// Queues a store job and remembers what its completion means.
    fn push_job(&mut self, work: StoreWork<S::Staged>, awaited: Awaited) {
        let id = self.next_job;
        self.next_job += 1;
        self.jobs.push(StoreJob { id, work });
        self.awaited.push_back((id, awaited));
    }

    /// The newest write job not yet reported done.
    fn last_awaited_write(&self) -> Option<u64> {
        self.awaited
            .iter()
            .rev()
            .find(|(_, a)| matches!(a, Awaited::Ready { .. }))
            .map(|(id, _)| *id)
    }

    /// Under [`Persistence::Offloaded`]: the store jobs queued since the last call, in the
    /// order they must run (with [`run_store_jobs`] and the store's writer, one queue at a
    /// time). Report what was done with [`RaftNode::store_report`]. Empty under
    /// [`Persistence::Inline`], which runs them itself.
    pub fn take_store_jobs(&mut self) -> Vec<StoreJob<S::Staged>> {
        std::mem::take(&mut self.jobs)
    }

    /// Whether store jobs handed out are not yet reported done.
    pub fn store_jobs_pending(&self) -> usize {
        self.awaited.len()
    }

    /// The writer reports on jobs taken with [`RaftNode::take_store_jobs`]: what they made
    /// durable takes effect (held messages are released for the next `advance`, raft-rs
    /// learns what is persisted, a saved snapshot is served and the log behind it compacted).
    /// A failed job halts the node: the next `advance` returns the error.
    pub fn store_report(&mut self, report: StoreReport) {
        let mut persisted_ready = None;
        for (id, outcome) in report.done {
            let Some((expected, awaited)) = self.awaited.pop_front() else {
                tracing::error!(
                    node = self.config.id,
                    job = id,
                    "a report of a store job the node did not hand out"
                );
                break;
            };
            if expected != id {
                tracing::error!(
                    node = self.config.id,
                    job = id,
                    expected,
                    "store jobs reported out of order"
                );
            }
            match awaited {
                Awaited::Ready { number, ticket } => {
                    self.raw.mut_store().durable_through(ticket);
                    persisted_ready = Some(number);
                }
                Awaited::Snapshot { meta } => self.snapshot_done(&meta, &outcome),
                Awaited::Compact => {}
            }
            while self.held.front().is_some_and(|(job, _)| *job <= id) {
                if let Some((_, messages)) = self.held.pop_front() {
                    self.released.extend(messages);
                }
            }
        }
        if let Some(number) = persisted_ready {
            // A failure is kept in `halted` and returned by the next `advance`.
            let _ = self.guarded(|node| {
                node.raw.on_persist_ready(number);
                node.tell_raft_applied();
            });
        }
        if let Some((job, error)) = report.failed {
            tracing::error!(node = self.config.id, job, error = %error, "a store job failed; this master stops");
            self.halted.get_or_insert(NodeError::Storage(error));
        }
    }

    /// Runs the queued store jobs now ([`Persistence::Inline`]) and acts on their report.
    fn run_jobs_inline(&mut self, out: &mut NodeOutput) -> Result<(), NodeError> {
        while !self.jobs.is_empty() {
            let jobs = std::mem::take(&mut self.jobs);
            let report = run_store_jobs(&mut self.writer, jobs);
            self.store_report(report);
            if let Some(error) = &self.halted {
                return Err(error.clone());
            }
            // Saving a snapshot queues the compaction behind it.
        }
        out.messages_to_send.append(&mut self.released);
        Ok(())
    }

    /// A snapshot job ended: a saved snapshot is served from now on and the log behind it
    /// compacted, keeping `log_retention` entries.
    fn snapshot_done(&mut self, meta: &SnapshotMetadata, outcome: &JobOutcome) {
        self.snapshot_job_out = false;
        let index = meta.index;
        match outcome {
            JobOutcome::SnapshotSaved { bytes } => {
                self.raw.mut_store().snapshot_saved(meta);
                self.snapshot_index = self.snapshot_index.max(index);
                self.metrics.snapshots.increment(1);
                self.metrics.snapshot_bytes.set(*bytes as f64);
                let compact_to = (index + 1).saturating_sub(self.config.log_retention);
                if compact_to > 1 {
                    match self.raw.mut_store().forget_before(compact_to) {
                        Ok(Some(compaction)) => {
                            self.push_job(StoreWork::Compact(compaction), Awaited::Compact);
                        }
                        Ok(None) => {}
                        Err(error) => {
                            tracing::error!(node = self.config.id, index, error = %error, "cannot compact the log");
                            self.halted.get_or_insert(NodeError::Storage(error));
                        }
                    }
                }
                tracing::debug!(
                    node = self.config.id,
                    index,
                    bytes,
                    compact_to,
                    "state snapshot saved"
                );
            }
            JobOutcome::SnapshotSkipped(reason) => {
                // The log keeps growing until the state encodes again; the node stays correct.
                tracing::error!(node = self.config.id, index, error = %reason, "cannot encode the state snapshot; log not compacted");
                self.snapshot_index = self.snapshot_index.max(index);
            }
            JobOutcome::Done => {}
        }
    }

    fn install_snapshot(
        &mut self,
        index: u64,
        state: ClusterState,
        snapshot: &Snapshot,
        out: &mut NodeOutput,
    ) {
        self.state = state;
        self.applied = index;
        self.applied_term = snapshot.get_metadata().term;
        self.snapshot_index = index;
        out.snapshot_installed = Some(index);
        // What the snapshot covers happened without this node seeing it.
        self.events.events.clear();
        self.events.floor = Some(events::last_seq(index));
        self.metrics.snapshots_installed.increment(1);
        self.metrics.snapshot_bytes.set(snapshot.data.len() as f64);
        // Our proposals up to `index` were decided without us seeing how.
        let covered: Vec<u64> = self.in_flight.range(..=index).map(|(i, _)| *i).collect();
        for i in covered {
            if let Some(p) = self.in_flight.remove(&i) {
                self.metrics.proposals_failed.increment(1);
                out.dropped.push((p.token, ProposeError::OutcomeUnknown));
            }
        }
        tracing::info!(
            node = self.config.id,
            index,
            "installed snapshot from the leader"
        );
    }

    fn apply_entries(
        &mut self,
        entries: Vec<Entry>,
        out: &mut NodeOutput,
    ) -> Result<(), NodeError> {
        for entry in entries {
            if entry.index <= self.applied {
                continue;
            }
            if self.config.trace_applied {
                self.trace.push(AppliedTrace {
                    index: entry.index,
                    term: entry.term,
                    entry_type: entry.get_entry_type(),
                    data: entry.data.to_vec(),
                });
            }
            let mut entry_events = Vec::new();
            if entry.term > self.applied_term {
                // A new term's first entry is its leader's: everyone applies it at the same
                // index, so the election is numbered alike on every master.
                entry_events.push(ClusterEvent::LeaderElected {
                    term: entry.term,
                    leader: self.leaders_by_term.get(&entry.term).copied(),
                });
                self.applied_term = entry.term;
            }
            let mut entry_time = None;
            let mine = match self.in_flight.remove(&entry.index) {
                Some(p) if p.term == entry.term => Some(p),
                Some(p) => {
                    self.metrics.proposals_failed.increment(1);
                    out.dropped.push((p.token, ProposeError::Superseded));
                    None
                }
                None => None,
            };
            match entry.get_entry_type() {
                EntryType::EntryNormal if entry.data.is_empty() => {
                    // A new leader's empty entry, or a membership change raft-rs refused
                    // (it replaces those with empty entries).
                    if let Some(p) = mine {
                        self.metrics.proposals_failed.increment(1);
                        let error = match p.kind {
                            ProposalKind::ConfChange => ProposeError::ConfChangePending,
                            ProposalKind::Command => ProposeError::Superseded,
                        };
                        out.dropped.push((p.token, error));
                    }
                }
                EntryType::EntryNormal => {
                    let command: Command = codec::decode(&entry.data).map_err(|source| {
                        NodeError::UndecodableEntry {
                            index: entry.index,
                            source,
                        }
                    })?;
                    let probe = EventProbe::before(&self.state, &command);
                    let result = self.state.apply(&command);
                    entry_events.extend(probe.events(&self.state, &command, &result));
                    entry_time = command.at_ms();
                    match &result {
                        Ok(_) => self.metrics.applied_ok.increment(1),
                        Err(e) => {
                            self.metrics.applied_rejected.increment(1);
                            tracing::debug!(
                                node = self.config.id,
                                index = entry.index,
                                command = command.kind(),
                                error = %e,
                                "command rejected"
                            );
                        }
                    }
                    if let Some(p) = mine {
                        if self.applied_flush_times.len() < MAX_UNTAKEN_FLUSH_TIMES {
                            self.applied_flush_times.push(p.flushed_at);
                        }
                        out.applied.push((p.token, result));
                    }
                }
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    let change = decode_conf_change(entry.get_entry_type(), &entry.data).map_err(
                        |source| NodeError::UndecodableEntry {
                            index: entry.index,
                            source,
                        },
                    )?;
                    let result = self
                        .raw
                        .apply_conf_change(&change)
                        .map(sorted_conf_state)
                        .map_err(|e| e.to_string());
                    if let Ok(cs) = &result {
                        self.force_snapshot = true;
                        let (added, removed) = membership_of(&change);
                        entry_events.extend(events::membership_events(&added, &removed));
                        self.state.record_membership(&added, &removed);
                        let id = self.config.id;
                        let member = cs.voters.contains(&id)
                            || cs.learners.contains(&id)
                            || cs.voters_outgoing.contains(&id)
                            || cs.learners_next.contains(&id);
                        if !member {
                            out.removed_self = true;
                        }
                        tracing::info!(node = id, index = entry.index, voters = ?cs.voters, learners = ?cs.learners, "membership changed");
                    }
                    if let (Some(p), Err(e)) = (&mine, &result) {
                        out.dropped
                            .push((p.token, ProposeError::ConfChangeRefused(e.clone())));
                    }
                    out.membership.push(MembershipApplied {
                        token: mine.map(|p| p.token),
                        index: entry.index,
                        change,
                        result,
                    });
                }
            }
            self.applied = entry.index;
            if !entry_events.is_empty() {
                self.push_events(events::number_events(entry.index, entry_time, entry_events));
            }
        }
        Ok(())
    }

    /// Keeps derived events for [`RaftNode::take_events`], at most [`MAX_UNTAKEN_EVENTS`].
    fn push_events(&mut self, records: Vec<EventRecord>) {
        self.events.events.extend(records);
        let excess = self.events.events.len().saturating_sub(MAX_UNTAKEN_EVENTS);
        if excess > 0 {
            let dropped: Vec<EventRecord> = self.events.events.drain(..excess).collect();
            if let Some(last) = dropped.last() {
                self.events.floor = Some(self.events.floor.unwrap_or(0).max(last.seq));
            }
        }
    }

    /// The events derived from the entries applied since the last call (see
    /// [`crate::state::events`]), for the shell's ring.
    pub fn take_events(&mut self) -> EventBatch {
        std::mem::take(&mut self.events)
    }

    /// A master that lost leadership answers its proposals that are no longer in its log
    /// with [`ProposeError::OutcomeUnknown`]: a new leader truncated them, and nothing may
    /// ever commit at their index again if the cluster stays quiet. (They are not
    /// `Superseded`: a master that still holds the entry may yet be elected and commit it.)
    fn give_up_lost_proposals(&mut self, out: &mut NodeOutput) {
        if self.is_leader() || self.in_flight.is_empty() {
            return;
        }
        let log = &self.raw.raft.raft_log;
        let lost: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(index, p)| !log.term(**index).is_ok_and(|term| term == p.term))
            .map(|(index, _)| *index)
            .collect();
        for index in lost {
            if let Some(p) = self.in_flight.remove(&index) {
                self.metrics.proposals_failed.increment(1);
                out.dropped.push((p.token, ProposeError::OutcomeUnknown));
            }
        }
    }

    /// Releases confirmed reads whose index is applied.
    fn release_reads(&mut self, out: &mut NodeOutput) {
        // Read indexes are confirmed in increasing order by one leader, but reads confirmed by
        // different leaders may interleave; check them all.
        let applied = self.applied;
        let mut waiting = VecDeque::with_capacity(self.reads_confirmed.len());
        for (index, token) in self.reads_confirmed.drain(..) {
            if index <= applied {
                out.reads_ready.push(token);
            } else {
                waiting.push_back((index, token));
            }
        }
        self.reads_confirmed = waiting;
    }

    /// Every `snapshot_interval` applied entries, or more with a large state (see
    /// [`NodeConfig::snapshot_entries_per_record`]), and after a membership change, hands a copy
    /// of the state machine to a store job that encodes and saves it (see `snapshot_done`).
    fn maybe_snapshot(&mut self) -> Result<(), NodeError> {
        let grown = self
            .state
            .record_count()
            .saturating_mul(self.config.snapshot_entries_per_record)
            .min(MAX_GROWN_SNAPSHOT_INTERVAL);
        let interval = self.config.snapshot_interval.max(grown);
        let due = self.applied >= self.snapshot_index.saturating_add(interval)
            || (self.force_snapshot && self.applied > self.snapshot_index);
        if !due || self.snapshot_job_out {
            return Ok(());
        }
        self.force_snapshot = false;
        let index = self.applied;
        let term = match raft::Storage::term(self.raw.store(), index) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(node = self.config.id, index, error = %e, "no term for the snapshot index; snapshot skipped");
                return Ok(());
            }
        };
        let mut meta = SnapshotMetadata {
            index,
            term,
            ..Default::default()
        };
        meta.set_conf_state(self.raw.raft.prs().conf().to_conf_state());
        self.raw.store().check_snapshot(&meta)?;
        self.snapshot_job_out = true;
        self.push_job(
            StoreWork::Snapshot {
                meta: meta.clone(),
                state: Box::new(self.state.clone()),
            },
            Awaited::Snapshot { meta },
        );
        Ok(())
    }

    fn fail_everything_pending(
        &mut self,
        out: &mut NodeOutput,
        propose: ProposeError,
        read: ReadError,
    ) {
        for q in self.queued.drain(..) {
            let token = match q {
                Queued::Command { token, .. } | Queued::ConfChange { token, .. } => token,
            };
            out.dropped.push((token, propose.clone()));
        }
        for (_, p) in std::mem::take(&mut self.in_flight) {
            out.dropped.push((p.token, propose.clone()));
        }
        for (_, r) in std::mem::take(&mut self.reads_unconfirmed) {
            out.reads_failed.push((r.token, read.clone()));
        }
        for (_, token) in self.reads_confirmed.drain(..) {
            out.reads_failed.push((token, read.clone()));
        }
    }

    /// When each of this master's proposals applied since the last call was flushed into the
    /// log (the `now` of that `advance`), for the caller to measure the apply latency against
    /// its clock after the step (`fullerene_raft_apply_latency_seconds`). At most
    /// [`MAX_UNTAKEN_FLUSH_TIMES`] are kept between calls.
    pub fn take_applied_flush_times(&mut self) -> Vec<Time> {
        std::mem::take(&mut self.applied_flush_times)
    }

    /// The entries applied since the last call, in order; always empty unless
    /// [`NodeConfig::trace_applied`] is set. See [`AppliedTrace`].
    pub fn take_apply_trace(&mut self) -> Vec<AppliedTrace> {
        std::mem::take(&mut self.trace)
    }
}

/// The membership change a committed `EntryConfChange` or `EntryConfChangeV2` entry carries,
/// as a `ConfChangeV2` (a legacy `ConfChange` becomes the equivalent one-change `ConfChangeV2`).
///
/// The node reads every membership entry it applies with it; it is public so that a replay of
/// the committed log outside a node (the deterministic cluster simulation's oracle) reads them
/// the same way. A normal entry is not a membership change and is refused.
pub fn decode_conf_change(entry_type: EntryType, data: &[u8]) -> Result<ConfChangeV2, CodecError> {
    let malformed = |e: protobuf::ProtobufError| CodecError::Malformed(e.to_string());
    match entry_type {
        EntryType::EntryConfChange => {
            let mut v1 = ConfChange::default();
            v1.merge_from_bytes(data).map_err(malformed)?;
            Ok(conf_change_v1_to_v2(v1))
        }
        EntryType::EntryConfChangeV2 => {
            let mut v2 = ConfChangeV2::default();
            v2.merge_from_bytes(data).map_err(malformed)?;
            Ok(v2)
        }
        EntryType::EntryNormal => Err(CodecError::Malformed(
            "a normal entry is not a membership change".to_string(),
        )),
    }
}

/// A legacy ConfChange as the equivalent ConfChangeV2 (one change, same context).
fn conf_change_v1_to_v2(v1: ConfChange) -> ConfChangeV2 {
    ConfChangeV2 {
        transition: ConfChangeTransition::Auto,
        changes: vec![ConfChangeSingle {
            change_type: v1.get_change_type(),
            node_id: v1.node_id,
            ..Default::default()
        }]
        .into(),
        context: v1.context,
        ..Default::default()
    }
}

/// Records in the state the addresses a membership change carries in its context (the
/// shell's convention: an added master's `ip:port`), and forgets removed masters.
///
/// The node does this for every membership change it applies; it is public so that a replay
/// of the committed log outside a node (the deterministic cluster simulation's oracle) reaches
/// the same state.
pub fn record_membership_change(state: &mut ClusterState, change: &ConfChangeV2) {
    let (added, removed) = membership_of(change);
    state.record_membership(&added, &removed);
}

/// The masters a membership change adds (with the address its context carries) and removes.
#[allow(clippy::type_complexity)]
fn membership_of(change: &ConfChangeV2) -> (Vec<(u64, Option<std::net::SocketAddr>)>, Vec<u64>) {
    let addr = std::str::from_utf8(&change.context)
        .ok()
        .and_then(|text| text.parse::<std::net::SocketAddr>().ok());
    let mut added = Vec::new();
    let mut removed = Vec::new();
    for single in &change.changes {
        match single.get_change_type() {
            raft::eraftpb::ConfChangeType::AddNode
            | raft::eraftpb::ConfChangeType::AddLearnerNode => added.push((single.node_id, addr)),
            raft::eraftpb::ConfChangeType::RemoveNode => removed.push(single.node_id),
        }
    }
    (added, removed)
}
