//! The records [`ClusterState`](super::ClusterState) keeps besides the allocation accounting.
//!
//! They are serde types because they travel in snapshots (to followers, and to disk), which
//! cross a process boundary: they are encoded only through [`fullerene_proto::codec`].

use std::collections::{BTreeMap, BTreeSet};

use fullerene_proto::messages::{
    AgentState, Quotas, StatusReason, StatusUpdate, TaskSpec, TaskState, UnixMillis,
};
use fullerene_proto::{AgentId, FrameworkId, ResourceKind, ResourceVec, TaskId};
use fullerene_scheduling::fairness::FairnessFactor;
use fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE;
use serde::{Deserialize, Serialize};

use super::command::TaskKey;

/// Cluster-wide settings, replicated like everything else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// How tasks count in the deficit counters (slot fairness or DRF, Graphene §5). Fixed when
    /// the cluster is created: changing it would re-base every counter.
    pub fairness_factor: FairnessFactor,
    /// The slot [`FairnessFactor::Slot`] measures the cluster capacity in.
    pub slot_size: ResourceVec,
    /// How far launches may overbook an agent's fungible resources (disk and network
    /// bandwidth), as a fraction of its total (Graphene §5); 0 allows no overbooking.
    pub overbooking_allowance: f64,
    /// Group weights an operator set (groups not listed weigh 1).
    pub group_weights: BTreeMap<String, f64>,
    /// The fairness group of each principal an operator placed (`fullerene groups set`); a
    /// framework subscribes into its principal's group, and an unmapped principal's frameworks
    /// into [`DEFAULT_GROUP`]. Frameworks never choose their group (issue 14: a framework
    /// that did could pick the group with the most share).
    pub principal_groups: BTreeMap<String, String>,
    /// The operator's quotas (frameworks per principal, tasks per framework, pending offers).
    pub quotas: Quotas,
    /// Where each master serves (peers and clients alike), by Raft id: the founders' from the
    /// bootstrap, then each added master's from its membership change. Kept in the replicated
    /// state so that a master restarting from a snapshot, or joining, learns every member's
    /// address without being told on its command line.
    pub master_addresses: BTreeMap<u64, std::net::SocketAddr>,
    /// Where each master's HTTP API listens, as each announced it on becoming leader.
    pub master_http_addresses: BTreeMap<u64, std::net::SocketAddr>,
    /// How many finished tasks are kept, and for how long (see [`HistoryLimits`]).
    pub history: HistoryLimits,
}

/// How much of the history of finished tasks the replicated state keeps: at most
/// `tasks_per_framework` per framework (the most recently recorded), none that ended more
/// than `window_ms` before the latest command's time. Fixed when the cluster is created
/// (`fullerene master --history-tasks-per-framework`, `--history-window`), like the fairness
/// factor: every master must prune alike.
///
/// A kept task costs about [`FINISHED_TASK_BYTES`] bytes plus its ids', name's and job's
/// lengths, so the defaults bound the history to about 1,000 × 700 B = 700 KB per framework
/// that ran in the last day.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryLimits {
    /// Finished tasks kept per framework (0 keeps none).
    pub tasks_per_framework: u32,
    /// How long a finished task is kept after it ended, in milliseconds.
    pub window_ms: u64,
}

impl HistoryLimits {
    /// 1,000 tasks per framework, 24 hours.
    pub const DEFAULT: HistoryLimits = HistoryLimits {
        tasks_per_framework: 1_000,
        window_ms: 24 * 60 * 60 * 1000,
    };
}

impl Default for HistoryLimits {
    fn default() -> HistoryLimits {
        HistoryLimits::DEFAULT
    }
}

/// What one kept finished task costs in memory, estimated (not measured) beyond the bytes of
/// its strings: the record (`FinishedTaskInfo`, about 230 bytes inline), the heap blocks of its
/// strings and its `Resources` list (about 300 bytes with the allocator's overhead, for short
/// ids and two resources, counting its framework's and agent's ids as its own although it
/// shares them with their entries while those exist), its `Arc`, and its entries in the three
/// persistent maps that index it (by ordinal, by framework, by end time; their nodes sit
/// about half full).
pub const FINISHED_TASK_BYTES: usize = 700;

impl Default for ClusterSettings {
    /// DRF (the factor DESIGN.md describes first for multi-resource clusters), a one-CPU slot,
    /// Graphene's 25% overbooking of disk and network bandwidth (the default allowance the
    /// SDK's matcher and the agents assume, so that what a framework picks the master accepts), every
    /// group weighing 1.
    fn default() -> ClusterSettings {
        ClusterSettings {
            fairness_factor: FairnessFactor::Drf,
            slot_size: ResourceVec::from_pairs(&[(ResourceKind::Cpus, 1.0)]),
            overbooking_allowance: DEFAULT_OVERBOOK_ALLOWANCE,
            group_weights: BTreeMap::new(),
            principal_groups: BTreeMap::new(),
            quotas: Quotas::DEFAULT,
            master_addresses: BTreeMap::new(),
            master_http_addresses: BTreeMap::new(),
            history: HistoryLimits::DEFAULT,
        }
    }
}

/// The fairness group of principals no operator placed in a group.
pub const DEFAULT_GROUP: &str = "default";

/// Fairness groups the cluster may know (with a weight, a principal or a framework): each is
/// a deficit counter the allocator visits every cycle, so their number is bounded.
pub const MAX_GROUPS: usize = 10_000;

/// Principals an operator may place in groups.
pub const MAX_MAPPED_PRINCIPALS: usize = 10_000;

impl ClusterSettings {
    /// The group `principal`'s frameworks subscribe into.
    pub fn group_of(&self, principal: &str) -> &str {
        self.principal_groups
            .get(principal)
            .map(String::as_str)
            .unwrap_or(DEFAULT_GROUP)
    }
}

/// An agent as the replicated state knows it. What is charged on it lives in the allocation
/// accounting ([`ClusterState::agent_used`](super::ClusterState::agent_used)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentEntry {
    /// Its id.
    pub id: AgentId,
    /// Its host name.
    pub hostname: String,
    /// Its total resources.
    pub total: ResourceVec,
    /// Active, unreachable or lost.
    pub state: AgentState,
    /// Placement attributes.
    pub attributes: BTreeMap<String, String>,
    /// Executors it can run.
    pub executors: Vec<String>,
    /// When it first registered (leader's time).
    pub registered_at_ms: UnixMillis,
    /// When the leader last recorded hearing from it (registration, re-registration, resource
    /// update, or a replicated heartbeat).
    pub last_heartbeat_ms: UnixMillis,
    /// The operator's drain for maintenance, while one is under way (see [`Drain`]).
    pub drain: Option<Drain>,
    /// Its non-terminal tasks: an index over the task table, so not written in snapshots
    /// (which rebuild it from the task records).
    #[serde(skip)]
    pub tasks: BTreeSet<TaskKey>,
}

impl AgentEntry {
    /// Whether new tasks may be launched (and offers made) on it: it is active and not
    /// being drained.
    pub fn takes_new_tasks(&self) -> bool {
        self.state == AgentState::Active && self.drain.is_none()
    }

    /// Whether a drain has finished: the agent is drained and runs nothing (it stays out of
    /// offers until an operator undrains it).
    pub fn drained(&self) -> bool {
        self.drain.is_some() && self.tasks.is_empty()
    }
}

/// An agent drained for maintenance, as Mesos maintenance's DRAINING mode and `nomad node
/// drain` do: it is offered nothing and takes no new task; its tasks run on until they end
/// or, past the deadline, the leader kills them; with none left it is drained. Replicated, so
/// a new leader goes on with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// When the drain began (leader's time).
    pub since_ms: UnixMillis,
    /// When the leader kills what still runs (leader's time); `None`: tasks end on their own.
    pub deadline_ms: Option<UnixMillis>,
}

/// A framework as the replicated state knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameworkEntry {
    /// Its id.
    pub id: FrameworkId,
    /// Its name.
    pub name: String,
    /// The principal that owns it (from the certificate that subscribed it).
    pub principal: String,
    /// Its fairness group.
    pub group: String,
    /// How long the leader waits for it to reconnect before tearing it down.
    pub failover_timeout_ms: u64,
    /// Whether a scheduler connection is open.
    pub connected: bool,
    /// When it subscribed (leader's time).
    pub registered_at_ms: UnixMillis,
    /// When its connection closed, while disconnected.
    pub disconnected_at_ms: Option<UnixMillis>,
    /// When it was torn down; a torn-down framework is a tombstone that keeps its id from
    /// being reused.
    pub torn_down_at_ms: Option<UnixMillis>,
    /// The DAG jobs it described, oldest first (see [`super::jobs`]).
    pub jobs: Vec<fullerene_proto::jobs::JobInfo>,
    /// Its non-terminal tasks: an index over the task table, so not written in snapshots
    /// (which rebuild it from the task records).
    #[serde(skip)]
    pub active_tasks: BTreeSet<TaskId>,
}

/// A task the master tracks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task as launched.
    pub spec: TaskSpec,
    /// The agent it runs on.
    pub agent_id: AgentId,
    /// Its resources, as charged.
    pub demand: ResourceVec,
    /// Its latest state.
    pub state: TaskState,
    /// The sequence number of its latest update (0 before the first).
    pub seq: u64,
    /// The highest sequence number its framework acknowledged. A terminal task whose latest
    /// update is acknowledged is forgotten; until then a new leader re-sends the update.
    pub acked_seq: u64,
    /// Why it reached its state, when known.
    pub reason: Option<StatusReason>,
    /// When it was launched (leader's time).
    pub launched_at_ms: UnixMillis,
    /// When its state last changed (leader's time).
    pub updated_at_ms: UnixMillis,
    /// Whether its framework asked for it to be killed (a new leader re-sends the kill).
    pub kill_requested: bool,
    /// The updates its framework has not acknowledged yet, oldest first: the leader sends them
    /// again until it does, whichever master leads (DESIGN.md: every status update reaches its
    /// framework at least once, in order per task). See [`TaskRecord::push_unacked`].
    pub unacked: Vec<StatusUpdate>,
    /// The reservation the leader preempted it for (`Command::PreemptTasks`): its KILLED
    /// update is recorded with that reason.
    pub preempted_for: Option<String>,
}

impl TaskRecord {
    /// Keeps `update` until its framework acknowledges it. An unacknowledged update of the
    /// same state is replaced rather than kept beside it: each state the task passes through
    /// reaches the framework, with the latest word on it, and the list stays as short as the
    /// task's life cycle (STAGING, RUNNING, an end) however many updates an agent sends.
    pub fn push_unacked(&mut self, update: StatusUpdate) {
        if let Some(last) = self.unacked.last_mut() {
            if last.state == update.state {
                *last = update;
                return;
            }
        }
        // At most three updates wait at once (STAGING, RUNNING, an end), and most tasks are
        // acknowledged with one waiting: growing by one keeps a record from holding room for
        // four updates (about 600 bytes) that it never uses.
        self.unacked.reserve_exact(1);
        self.unacked.push(update);
    }

    /// Records that its framework acknowledged every update up to `seq`, and forgets them.
    /// The list's room is given back too: a running task, acknowledged, would otherwise keep
    /// the room of the updates it had, for as long as it runs.
    pub fn acknowledge(&mut self, seq: u64) {
        self.acked_seq = self.acked_seq.max(seq);
        self.unacked.retain(|update| update.seq > seq);
        if self.unacked.is_empty() {
            self.unacked = Vec::new();
        }
    }
}
