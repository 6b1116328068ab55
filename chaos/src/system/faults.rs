//! The faults the whole-system simulation injects, and how often.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

/// A kind of fault (DESIGN.md, "Failure model").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// A Raft message between masters is lost.
    Loss,
    /// A message is delayed well past the usual latency (Raft messages are then reordered;
    /// a session's frames stay in order, as on a QUIC stream).
    Delay,
    /// A Raft message is delivered twice.
    Duplication,
    /// Masters and clients are split in two groups that cannot reach each other.
    Partition,
    /// One master cannot send to another, which can still send to it.
    AsymmetricPartition,
    /// The leader is cut from every other process.
    LeaderIsolation,
    /// Some agents are cut from the leader only.
    AgentsCutFromLeader,
    /// A master crashes and restarts from its store.
    MasterCrash,
    /// A master crashes after its Raft step persisted but before what it had to send left.
    MasterCrashBeforeSend,
    /// An agent crashes and restarts from its checkpoint; its tasks' processes go on.
    AgentCrash,
    /// An agent crashes after spawning a task's process, before the `Started` record is synced.
    AgentCrashBeforeSync,
    /// An agent crashes with checkpoint records written but not synced (a torn tail).
    TornWrite,
    /// A framework's process dies; its job is submitted again as a new framework.
    FrameworkCrash,
    /// A process stops for longer than the timeouts, then goes on with stale beliefs.
    Pause,
    /// A process's wall clock jumps forward or back.
    ClockJump,
    /// A master's storage write fails (the master stops, as it does on a failed fsync).
    StorageWriteError,
    /// A peer sends what it must not: a status seq of `u64::MAX`, an accept of a foreign
    /// offer, a launch on an unknown agent.
    BadPeer,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 17] = [
        FaultKind::Loss,
        FaultKind::Delay,
        FaultKind::Duplication,
        FaultKind::Partition,
        FaultKind::AsymmetricPartition,
        FaultKind::LeaderIsolation,
        FaultKind::AgentsCutFromLeader,
        FaultKind::MasterCrash,
        FaultKind::MasterCrashBeforeSend,
        FaultKind::AgentCrash,
        FaultKind::AgentCrashBeforeSync,
        FaultKind::TornWrite,
        FaultKind::FrameworkCrash,
        FaultKind::Pause,
        FaultKind::ClockJump,
        FaultKind::StorageWriteError,
        FaultKind::BadPeer,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Loss => "loss",
            FaultKind::Delay => "delay",
            FaultKind::Duplication => "duplication",
            FaultKind::Partition => "partition",
            FaultKind::AsymmetricPartition => "asymmetric-partition",
            FaultKind::LeaderIsolation => "leader-isolation",
            FaultKind::AgentsCutFromLeader => "agents-cut-from-leader",
            FaultKind::MasterCrash => "master-crash",
            FaultKind::MasterCrashBeforeSend => "master-crash-before-send",
            FaultKind::AgentCrash => "agent-crash",
            FaultKind::AgentCrashBeforeSync => "agent-crash-before-sync",
            FaultKind::TornWrite => "torn-write",
            FaultKind::FrameworkCrash => "framework-crash",
            FaultKind::Pause => "pause",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::StorageWriteError => "storage-write-error",
            FaultKind::BadPeer => "bad-peer",
        }
    }

    /// Whether it is a partition (at most one runs at a time).
    pub fn is_partition(self) -> bool {
        matches!(
            self,
            FaultKind::Partition
                | FaultKind::AsymmetricPartition
                | FaultKind::LeaderIsolation
                | FaultKind::AgentsCutFromLeader
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault kind name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault kind `{0}`; the kinds are: all, none, or a comma-separated list of {list}", list = FaultKind::ALL.map(FaultKind::name).join(", "))]
pub struct UnknownFault(pub String);

/// A set of fault kinds: `all`, `none`, or a comma-separated list of names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSet(pub BTreeSet<FaultKind>);

impl FaultSet {
    /// Every kind.
    pub fn all() -> FaultSet {
        FaultSet(FaultKind::ALL.into_iter().collect())
    }

    /// No fault.
    pub fn none() -> FaultSet {
        FaultSet(BTreeSet::new())
    }

    /// Whether `kind` is on.
    pub fn has(&self, kind: FaultKind) -> bool {
        self.0.contains(&kind)
    }
}

impl FromStr for FaultSet {
    type Err = UnknownFault;

    fn from_str(text: &str) -> Result<FaultSet, UnknownFault> {
        match text.trim() {
            "all" => return Ok(FaultSet::all()),
            "none" | "" => return Ok(FaultSet::none()),
            _ => {}
        }
        let mut set = BTreeSet::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let kind = FaultKind::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .ok_or_else(|| UnknownFault(name.to_string()))?;
            set.insert(kind);
        }
        Ok(FaultSet(set))
    }
}

/// How often each fault strikes while faults are on.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRates {
    /// Probability that a Raft message is lost.
    pub loss: f64,
    /// Probability that a message is delayed by up to [`FaultRates::max_delay`].
    pub delay: f64,
    /// The longest extra delay.
    pub max_delay: Duration,
    /// Probability that a Raft message is delivered twice.
    pub duplication: f64,
    /// Partitions started per second (one at a time).
    pub partition_per_s: f64,
    /// How long a partition lasts (min, max).
    pub partition_length: (Duration, Duration),
    /// Master crashes per second.
    pub master_crash_per_s: f64,
    /// Probability that a master crashes right after one Raft step persisted.
    pub crash_before_send: f64,
    /// Agent crashes per second.
    pub agent_crash_per_s: f64,
    /// Probability that an agent crashes right after one spawn.
    pub crash_before_sync: f64,
    /// Probability that an agent crashes right after one unsynced checkpoint write.
    pub torn_write: f64,
    /// Framework crashes per second.
    pub framework_crash_per_s: f64,
    /// How long a crashed process stays down (min, max).
    pub downtime: (Duration, Duration),
    /// Pauses per second.
    pub pause_per_s: f64,
    /// How long a pause lasts (min, max): past the agents' and the masters' timeouts.
    pub pause_length: (Duration, Duration),
    /// Clock jumps per second.
    pub clock_jump_per_s: f64,
    /// The largest clock jump, either way.
    pub max_clock_jump: Duration,
    /// Storage write failures per second.
    pub storage_error_per_s: f64,
    /// Bad peers' messages per second.
    pub bad_peer_per_s: f64,
}

impl Default for FaultRates {
    fn default() -> FaultRates {
        FaultRates {
            loss: 0.03,
            delay: 0.05,
            max_delay: Duration::from_millis(400),
            duplication: 0.02,
            partition_per_s: 0.08,
            partition_length: (Duration::from_millis(500), Duration::from_secs(6)),
            master_crash_per_s: 0.04,
            crash_before_send: 0.0005,
            agent_crash_per_s: 0.04,
            crash_before_sync: 0.01,
            torn_write: 0.002,
            framework_crash_per_s: 0.01,
            downtime: (Duration::from_millis(200), Duration::from_secs(4)),
            pause_per_s: 0.04,
            pause_length: (Duration::from_secs(1), Duration::from_secs(8)),
            clock_jump_per_s: 0.05,
            max_clock_jump: Duration::from_secs(30),
            storage_error_per_s: 0.02,
            bad_peer_per_s: 0.1,
        }
    }
}
