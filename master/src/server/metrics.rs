//! The master's Prometheus series that describe the cluster, and the HELP text of every series
//! the master exports (README.md, "Metrics", lists them all; a test keeps the two in step).
//!
//! The core records no metric: it reads no clock and its decisions stay pure (DESIGN.md,
//! principle 1). The cluster's gauges are read off the replicated state by the shell
//! ([`ClusterGauges`]), at most once per [`GAUGE_INTERVAL`], so they are right on every master,
//! followers included, as of what each has applied. What exists only on the leader (open
//! offers, the offers' fate, launch latencies, allocation cycles) is counted by the core as
//! plain numbers and published by the shell; a follower shows zeros for it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use fullerene_proto::messages::{AgentState, TaskState};
use fullerene_proto::reservations::ReservationPhase;
use fullerene_proto::{ResourceKind, ResourceVec};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

use crate::core::MasterCore;
use crate::storage::RaftStore;

/// How often the shell recomputes the gauges read off the state: a walk over every task, so
/// not on every step of the node loop, and far below a scrape interval.
pub(crate) const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

/// Agents by `state`.
pub const AGENTS: &str = "fullerene_master_agents";
/// Tasks the master tracks, by `state`.
pub const TASKS: &str = "fullerene_master_tasks";
/// Capacity of the registered agents, by resource `kind`.
pub const RESOURCES_CAPACITY: &str = "fullerene_master_resources_capacity";
/// Resources charged to tasks, by `kind`.
pub const RESOURCES_USED: &str = "fullerene_master_resources_used";
/// Resources neither charged to tasks (capacity − used, per agent, floored at zero), by `kind`.
pub const RESOURCES_IDLE: &str = "fullerene_master_resources_idle";
/// Resources in open offers, by `kind` (leader only).
pub const RESOURCES_OFFERED: &str = "fullerene_master_resources_offered";
/// Each fairness group's deficit counter, by `group`.
pub const GROUP_DEFICIT: &str = "fullerene_master_group_deficit";
/// Each fairness group's fair share, by `group`.
pub const GROUP_SHARE: &str = "fullerene_master_group_share";
/// Status updates the frameworks have not acknowledged.
pub const STATUS_UPDATE_BACKLOG: &str = "fullerene_master_status_update_backlog";
/// Offers accepted (leader only).
pub const OFFERS_ACCEPTED: &str = "fullerene_master_offers_accepted_total";
/// Offers declined (leader only).
pub const OFFERS_DECLINED: &str = "fullerene_master_offers_declined_total";
/// Accepts refused by admission control, the leader's writes backlog at its limit (leader
/// only).
pub const ACCEPTS_REFUSED_BUSY: &str = "fullerene_master_accepts_refused_busy_total";
/// Accepted reservations, by `phase` (planned, active, ended).
pub const RESERVATIONS: &str = "fullerene_master_reservations";
/// Reservations the adapter rejected after a loss of capacity, since the cluster began.
pub const RESERVATIONS_REJECTED: &str = "fullerene_master_reservations_rejected_total";
/// Reservation requests the plan refused at admission (leader only).
pub const RESERVATIONS_REFUSED: &str = "fullerene_master_reservations_refused_total";
/// Accept to RUNNING (leader only).
pub const LAUNCH_LATENCY: &str = "fullerene_master_launch_latency_seconds";
/// Reservations whose tagged jobs all ended by their end (issue 17), read off the state.
pub const RESERVATIONS_FULFILLED: &str = "fullerene_master_reservations_fulfilled_total";
/// Reservations with a tagged job still running at their end, read off the state.
pub const RESERVATIONS_LATE: &str = "fullerene_master_reservations_late_total";

/// The `state` label of an agent.
fn agent_state_label(state: AgentState) -> &'static str {
    match state {
        AgentState::Active => "active",
        AgentState::Unreachable => "unreachable",
        AgentState::Lost => "lost",
    }
}

/// The `state` label of a task.
fn task_state_label(state: TaskState) -> &'static str {
    match state {
        TaskState::Staging => "staging",
        TaskState::Running => "running",
        TaskState::Finished => "finished",
        TaskState::Failed => "failed",
        TaskState::Killed => "killed",
        TaskState::Lost => "lost",
    }
}

const AGENT_STATES: [AgentState; 3] = [
    AgentState::Active,
    AgentState::Unreachable,
    AgentState::Lost,
];

/// Registers the HELP text of every series the master exports with the installed recorder,
/// and registers the unlabelled counters (and the labelled ones whose labels are known) at
/// zero, so that a scrape lists them before their first event.
pub fn describe() {
    describe_raft();
    describe_cluster();
    describe_shell();
}

fn describe_raft() {
    describe_gauge!("fullerene_raft_term", "Current Raft term");
    describe_gauge!(
        "fullerene_raft_commit_index",
        "Highest Raft log index known committed"
    );
    describe_gauge!(
        "fullerene_raft_applied_index",
        "Highest Raft log index applied to the state machine"
    );
    describe_gauge!(
        "fullerene_raft_is_leader",
        "1 while this master leads, else 0"
    );
    describe_counter!(
        "fullerene_raft_leader_changes_total",
        "Times the known leader changed"
    );
    describe_counter!(
        "fullerene_raft_proposals_total",
        "Commands proposed (entered the log) by this master"
    );
    describe_counter!(
        "fullerene_raft_proposals_failed_total",
        "Proposals refused or dropped"
    );
    describe_histogram!(
        "fullerene_raft_proposal_batch_size",
        "Commands per flushed proposal batch"
    );
    describe_counter!(
        "fullerene_raft_commands_applied_total",
        "Commands applied to the state machine, by result (ok or rejected)"
    );
    describe_histogram!(
        "fullerene_raft_apply_latency_seconds",
        Unit::Seconds,
        "Time from flushing a proposal into the log to applying it, for this master's proposals"
    );
    describe_counter!(
        "fullerene_raft_persist_batches_total",
        "Raft write batches made durable"
    );
    describe_counter!(
        "fullerene_raft_entries_persisted_total",
        "Raft log entries written"
    );
    describe_counter!(
        "fullerene_raft_snapshots_total",
        "State-machine snapshots taken locally"
    );
    describe_counter!(
        "fullerene_raft_snapshots_installed_total",
        "Snapshots received from a leader and installed"
    );
    describe_gauge!(
        "fullerene_raft_snapshot_bytes",
        Unit::Bytes,
        "Size of the latest snapshot taken or installed"
    );
    describe_counter!(
        "fullerene_raft_read_index_timeouts_total",
        "Linearizable reads that timed out"
    );
}

fn describe_cluster() {
    describe_gauge!(AGENTS, "Agents the replicated state knows, by state");
    describe_gauge!(
        TASKS,
        "Tasks the master tracks (running, and ended ones until their framework acknowledges), by state"
    );
    describe_gauge!(
        RESOURCES_CAPACITY,
        "Total resources of the agents not lost, by kind (cpus, mem_mib, disk_mbps, net_mbps, gpus)"
    );
    describe_gauge!(RESOURCES_USED, "Resources charged to tasks, by kind");
    describe_gauge!(
        RESOURCES_IDLE,
        "Resources not charged to tasks (offered or not), by kind"
    );
    describe_gauge!(
        RESOURCES_OFFERED,
        "Resources in open offers, by kind (leader only; 0 on followers)"
    );
    describe_gauge!(
        GROUP_DEFICIT,
        "Deficit counter of each fairness group: positive while it holds less than its share"
    );
    describe_gauge!(
        GROUP_SHARE,
        "Fair share of each fairness group, as a fraction of the cluster"
    );
    describe_gauge!(
        STATUS_UPDATE_BACKLOG,
        "Task status updates their frameworks have not acknowledged"
    );
    describe_counter!(
        OFFERS_ACCEPTED,
        "Offers accepted by frameworks (leader only)"
    );
    describe_counter!(
        OFFERS_DECLINED,
        "Offers declined by frameworks (leader only)"
    );
    describe_counter!(
        ACCEPTS_REFUSED_BUSY,
        "Accepts refused while the leader's writes waiting to commit were at --accept-backlog-limit (leader only)"
    );
    describe_histogram!(
        LAUNCH_LATENCY,
        Unit::Seconds,
        "Time from a task's accept to its RUNNING update, by the leader's wall clock (leader only)"
    );
    describe_counter!(
        RESERVATIONS_FULFILLED,
        "Reservations whose time is over with every job tagged with them ended by their end"
    );
    describe_counter!(
        RESERVATIONS_LATE,
        "Reservations whose time is over with a job tagged with them still running at their end"
    );
    counter!(OFFERS_ACCEPTED).increment(0);
    counter!(OFFERS_DECLINED).increment(0);
    counter!(ACCEPTS_REFUSED_BUSY).increment(0);
    counter!(RESERVATIONS_FULFILLED).increment(0);
    counter!(RESERVATIONS_LATE).increment(0);
}

fn describe_shell() {
    describe_histogram!(
        "fullerene_master_allocation_snapshot_seconds",
        Unit::Seconds,
        "Time to snapshot the state for an allocation cycle, on the node loop (leader only)"
    );
    describe_histogram!(
        "fullerene_master_allocation_plan_seconds",
        Unit::Seconds,
        "Time to plan an allocation cycle's shards, off the node loop (leader only)"
    );
    describe_histogram!(
        "fullerene_master_allocation_commit_seconds",
        Unit::Seconds,
        "Time to commit an allocation cycle's plans, on the node loop (leader only)"
    );
    describe_histogram!(
        "fullerene_master_allocation_cycle_seconds",
        Unit::Seconds,
        "Time of a whole allocation cycle: snapshot, planning and commit (leader only)"
    );
    describe_histogram!(
        "fullerene_master_node_loop_step_seconds",
        Unit::Seconds,
        "Time of one turn of the node loop"
    );
    describe_gauge!(RESERVATIONS, "Accepted reservations, by phase");
    describe_counter!(
        RESERVATIONS_REJECTED,
        "Reservations the adapter rejected after a loss of capacity"
    );
    describe_counter!(
        RESERVATIONS_REFUSED,
        "Reservation requests the plan refused at admission (leader only)"
    );
    describe_counter!(
        "fullerene_master_offers_made_total",
        "Offers sent to frameworks (leader only)"
    );
    describe_counter!(
        "fullerene_master_offers_rescinded_total",
        "Offers rescinded (leader only)"
    );
    describe_counter!(
        "fullerene_master_tasks_launched_total",
        "Tasks sent to agents to launch (leader only)"
    );
    describe_counter!(
        "fullerene_master_allocation_picks_total",
        "Allocation picks committed or dropped, by outcome (leader only)"
    );
    describe_counter!(
        "fullerene_master_allocation_picks_planned_total",
        "Allocation picks planned by the shards (leader only)"
    );
    describe_counter!(
        "fullerene_master_stuck_sessions_ended_total",
        "Sessions ended because their peer read too slowly, by role"
    );
    describe_counter!(
        "fullerene_master_connections_refused_total",
        "Connections refused, by reason"
    );
    describe_counter!(
        "fullerene_master_sessions_ended_not_reading_total",
        "Sessions ended because the peer stopped reading"
    );
    describe_counter!(
        "fullerene_master_calls_rate_limited_total",
        "Calls refused by the rate limit, by role"
    );
    describe_counter!(
        "fullerene_http_view_builds_total",
        "Views of the state built for the HTTP API"
    );
    describe_counter!(
        "fullerene_http_responses_total",
        "HTTP API responses, by status code"
    );
    describe_counter!(
        "fullerene_http_auth_refusals_total",
        "HTTP API requests refused for their credentials"
    );
    for name in [
        "fullerene_master_offers_made_total",
        "fullerene_master_offers_rescinded_total",
        "fullerene_master_tasks_launched_total",
        "fullerene_master_allocation_picks_planned_total",
        "fullerene_master_sessions_ended_not_reading_total",
        "fullerene_http_view_builds_total",
        "fullerene_http_auth_refusals_total",
        RESERVATIONS_REFUSED,
    ] {
        counter!(name).increment(0);
    }
    for role in ["agent", "framework"] {
        counter!("fullerene_master_stuck_sessions_ended_total", "role" => role).increment(0);
        counter!("fullerene_master_calls_rate_limited_total", "role" => role).increment(0);
    }
    counter!("fullerene_master_connections_refused_total", "reason" => "per_certificate")
        .increment(0);
}

/// The gauges read off the replicated state (and the leader's open offers), recomputed at most
/// once per [`GAUGE_INTERVAL`].
pub(crate) struct ClusterGauges {
    /// When they were last computed.
    computed: Option<Instant>,
    /// The groups given a value last time: a group that disappears is set to zero.
    groups: BTreeSet<String>,
}

impl ClusterGauges {
    pub(crate) fn new() -> ClusterGauges {
        ClusterGauges {
            computed: None,
            groups: BTreeSet::new(),
        }
    }

    /// Recomputes the gauges from `core` if [`GAUGE_INTERVAL`] has passed since the last time.
    pub(crate) fn maybe_update<S: RaftStore>(&mut self, core: &MasterCore<S>) {
        let now = Instant::now();
        if self
            .computed
            .is_some_and(|last| now.duration_since(last) < GAUGE_INTERVAL)
        {
            return;
        }
        self.computed = Some(now);
        self.update(core);
    }

    fn update<S: RaftStore>(&mut self, core: &MasterCore<S>) {
        let state = core.node().state();

        let mut agents: BTreeMap<&str, u64> = AGENT_STATES
            .iter()
            .map(|state| (agent_state_label(*state), 0))
            .collect();
        for agent in state.agents().values() {
            *agents.entry(agent_state_label(agent.state)).or_default() += 1;
        }
        for (label, count) in agents {
            gauge!(AGENTS, "state" => label).set(count as f64);
        }

        let mut tasks: BTreeMap<&str, u64> = TaskState::ALL
            .iter()
            .map(|state| (task_state_label(*state), 0))
            .collect();
        let mut backlog = 0_usize;
        for task in state.tasks().values() {
            *tasks.entry(task_state_label(task.state)).or_default() += 1;
            backlog += task.unacked.len();
        }
        for (label, count) in tasks {
            gauge!(TASKS, "state" => label).set(count as f64);
        }
        gauge!(STATUS_UPDATE_BACKLOG).set(backlog as f64);
        // Replicated totals: every master shows the same, and a new leader goes on counting.
        let reservations = state.reservations();
        counter!(RESERVATIONS_FULFILLED).absolute(reservations.fulfilled_total());
        counter!(RESERVATIONS_LATE).absolute(reservations.late_total());

        let mut used = ResourceVec::ZERO;
        let mut idle = ResourceVec::ZERO;
        for (_, agent) in state.allocation().agents() {
            used += agent.used;
            idle += agent.free();
        }
        let capacity = state.allocation().capacity();
        let offered = core.offered_resources();
        for kind in ResourceKind::ALL {
            let label = kind.name();
            gauge!(RESOURCES_CAPACITY, "kind" => label).set(capacity[kind]);
            gauge!(RESOURCES_USED, "kind" => label).set(used[kind]);
            gauge!(RESOURCES_IDLE, "kind" => label).set(idle[kind]);
            gauge!(RESOURCES_OFFERED, "kind" => label).set(offered[kind]);
        }

        let mut groups = BTreeSet::new();
        for (_, group) in state.allocation().deficits().iter() {
            gauge!(GROUP_DEFICIT, "group" => group.name.clone()).set(group.deficit);
            gauge!(GROUP_SHARE, "group" => group.name.clone()).set(group.share);
            groups.insert(group.name.clone());
        }
        for gone in self.groups.difference(&groups) {
            gauge!(GROUP_DEFICIT, "group" => gone.clone()).set(0.0);
            gauge!(GROUP_SHARE, "group" => gone.clone()).set(0.0);
        }
        self.groups = groups;

        let reservations = state.reservations();
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let mut phases: BTreeMap<&str, u64> = [
            ReservationPhase::Planned,
            ReservationPhase::Active,
            ReservationPhase::Ended,
        ]
        .iter()
        .map(|phase| (phase.as_str(), 0))
        .collect();
        for phase in reservations.phases(now_ms) {
            *phases.entry(phase.as_str()).or_default() += 1;
        }
        for (phase, count) in phases {
            gauge!(RESERVATIONS, "phase" => phase).set(count as f64);
        }
        counter!(RESERVATIONS_REJECTED).absolute(reservations.rejected_total());
    }
}
