//! The node driver's knobs.

use std::time::Duration;

/// Configuration of a [`RaftNode`](super::RaftNode).
///
/// Times are in ticks; the shell calls [`RaftNode::tick`](super::RaftNode::tick) every
/// [`tick_interval`](Self::tick_interval). The defaults assume a 25 ms tick on a LAN or
/// loopback: a leader heartbeats every 2 ticks (50 ms), and a follower that hears nothing
/// starts an election after a random timeout in [10, 20) ticks (250–500 ms), so a crashed
/// leader is replaced in under half a second plus one pre-vote and vote round and the new
/// leader's first synced write: sub-second failover.
/// Five heartbeats fit in the shortest election timeout, so a leader delayed by one or two
/// lost heartbeats (or a busy machine) is not deposed. Raise the tick on slower networks. Pre-vote and
/// check-quorum are always on: an isolated leader steps down after an election timeout without
/// a quorum, and a partitioned follower that rejoins cannot depose a healthy leader (Raft
/// thesis §9.6).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    /// This master's Raft id (non-zero, unique in the group).
    pub id: u64,
    /// How often the shell ticks the node. Only the shell uses it; the node counts ticks.
    pub tick_interval: Duration,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// Base election timeout in ticks; the actual timeout is random in [this, 2 × this).
    pub election_ticks: usize,
    /// Whether raft-rs randomises the election timeout (the default, and what production
    /// needs). raft-rs draws it from the thread's RNG, which a seeded simulation cannot
    /// control; with `false` the timeout is exactly `election_ticks` and the simulation
    /// supplies the randomness by jittering when it ticks each node.
    pub randomized_election_timeout: bool,
    /// Largest append message to a follower, in bytes of entries (at least one entry is always
    /// sent). 1 MiB batches thousands of small commands yet keeps a lagging follower's catch-up
    /// messages small, well below the codec's 4 MiB frame limit.
    pub max_size_per_msg: u64,
    /// Append messages in flight to one follower before the leader waits for
    /// acknowledgements (with `max_size_per_msg`, bounds what a slow follower can buffer).
    pub max_inflight_msgs: usize,
    /// Bytes of uncommitted entries the leader accepts before refusing proposals (back
    /// pressure when followers cannot keep up).
    pub max_uncommitted_size: u64,
    /// Bytes of committed entries handed to the state machine per `Ready`, so that one
    /// `advance` stays short after a long partition heals.
    pub max_committed_size_per_ready: u64,
    /// Proposals queued between two `advance` calls before `propose` refuses more.
    pub max_queued_proposals: usize,
    /// Take a state-machine snapshot, and compact the log, every this many applied entries
    /// at least (see `snapshot_entries_per_record`).
    pub snapshot_interval: u64,
    /// Applied entries between snapshots per record of the state (agents, frameworks,
    /// tracked and finished tasks), when that is more than `snapshot_interval`: a snapshot
    /// encodes every record, so its cost per applied entry stays bounded however large the
    /// state grows (about 1 / this many records encoded per entry). With a fixed interval,
    /// `fullerene bench launch` (about 19,000 entries a second, 20,000 records) snapshotted
    /// twice a second, and encoding them took a fifth of every master's CPU. etcd's default
    /// is a fixed 100,000 entries. 0 keeps the interval fixed. Grown this way, the interval
    /// stops at [`MAX_GROWN_SNAPSHOT_INTERVAL`].
    pub snapshot_entries_per_record: u64,
    /// Entries kept in the log behind the latest snapshot, so that a follower that is only a
    /// little behind catches up from the log rather than with a whole snapshot.
    pub log_retention: u64,
    /// Ticks a linearizable read may wait for the leader's confirmation before it fails.
    pub read_timeout_ticks: usize,
    /// Whether the node keeps a copy of every entry it applies until
    /// [`RaftNode::take_apply_trace`](super::RaftNode::take_apply_trace) collects them, for an
    /// oracle that compares what each master applied (the deterministic cluster simulation).
    /// Off by default: it copies every entry, and nothing collects them in a real master.
    pub trace_applied: bool,
    /// Where the store's writes run: inside `advance` (the default) or handed to the caller
    /// (the master's shell runs them on a thread of its own). See
    /// [`Persistence`](super::Persistence).
    pub persistence: super::Persistence,
}

/// The default of [`NodeConfig::snapshot_entries_per_record`].
pub const DEFAULT_SNAPSHOT_ENTRIES_PER_RECORD: u64 = 4;

/// The most applied entries between snapshots however large the state, so that the log on
/// disk and its replay on a restart stay bounded (a million entries of a few hundred bytes:
/// a few hundred MB, and seconds to replay); `snapshot_interval` may still set more.
pub const MAX_GROWN_SNAPSHOT_INTERVAL: u64 = 1_000_000;

impl NodeConfig {
    /// The defaults for master `id` (see the type's documentation).
    pub fn new(id: u64) -> NodeConfig {
        NodeConfig {
            id,
            tick_interval: Duration::from_millis(25),
            heartbeat_ticks: 2,
            election_ticks: 10,
            randomized_election_timeout: true,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            max_uncommitted_size: 64 << 20,
            max_committed_size_per_ready: 16 << 20,
            max_queued_proposals: 100_000,
            snapshot_interval: 10_000,
            snapshot_entries_per_record: DEFAULT_SNAPSHOT_ENTRIES_PER_RECORD,
            log_retention: 5_000,
            read_timeout_ticks: 80,
            trace_applied: false,
            persistence: super::Persistence::Inline,
        }
    }

    /// The raft-rs configuration, validated.
    pub(crate) fn to_raft(&self, applied: u64) -> Result<raft::Config, String> {
        if self.snapshot_interval == 0 {
            return Err("snapshot_interval must be at least 1".to_string());
        }
        if self.read_timeout_ticks == 0 {
            return Err("read_timeout_ticks must be at least 1".to_string());
        }
        if self.max_queued_proposals == 0 {
            return Err("max_queued_proposals must be at least 1".to_string());
        }
        let config = raft::Config {
            id: self.id,
            election_tick: self.election_ticks,
            // 0 means raft-rs's default range, [election, 2 × election).
            max_election_tick: if self.randomized_election_timeout {
                0
            } else {
                self.election_ticks + 1
            },
            heartbeat_tick: self.heartbeat_ticks,
            applied,
            max_size_per_msg: self.max_size_per_msg,
            max_inflight_msgs: self.max_inflight_msgs,
            check_quorum: true,
            pre_vote: true,
            max_uncommitted_size: self.max_uncommitted_size,
            max_committed_size_per_ready: self.max_committed_size_per_ready,
            ..raft::Config::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}
