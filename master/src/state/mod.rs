//! The replicated cluster state: the Raft state machine (DESIGN.md, principle 2).
//!
//! [`ClusterState`] holds what must survive a leader change: agents (totals, state, attributes,
//! last heartbeat), frameworks (principal, group, failover timeout, connection), tasks (spec,
//! state, per-task sequence number, agent), the groups' weights and the deficit counters. The
//! allocation accounting (what each agent has charged, what each framework holds, the deficit
//! counters of Graphene §5) is the allocator's [`AllocationState`], owned here and changed only
//! through its `apply_*` methods as committed commands are applied; the allocator reads it and
//! keeps no copy.
//!
//! [`ClusterState::apply`] is deterministic: it reads no clock (time comes in the commands,
//! stamped by the leader), iterates only ordered maps, and validates a command completely
//! before changing anything, so a refused command changes nothing on any replica.

mod command;
mod error;
pub mod events;
mod history;
mod jobs;
mod records;
mod reservations;
mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fullerene_proto::limits::{self, MAX_TASKS_PER_AGENT};
use fullerene_proto::messages::{
    AgentInfo, AgentState, DrainStatus, Executor, FinishedTaskInfo, FrameworkInfo, GroupPlacement,
    GroupRemoval, StatusReason, StatusUpdate, TaskInfo, TaskSpec, TaskState, UnixMillis,
};
use fullerene_proto::{AgentId, FrameworkId, ResourceKind, ResourceVec, Resources, TaskId, Time};
use fullerene_scheduling::allocator::state::{AllocationState, StateError};
use fullerene_scheduling::fairness::{FairnessError, FairnessFactor};
use fullerene_scheduling::{Overbooking, NUM_RESOURCES};

pub use command::{Acknowledged, Command, CommandOutcome, Requester, TaskKey, TaskKill};
pub use error::CommandError;
pub use fullerene_proto::http::TeardownCause;
use history::FinishedTasks;
pub use jobs::{teardown_notice, MAX_TORN_DOWN_WITH_JOBS};
pub use records::{
    AgentEntry, ClusterSettings, Drain, FrameworkEntry, HistoryLimits, TaskRecord, DEFAULT_GROUP,
    FINISHED_TASK_BYTES, MAX_GROUPS, MAX_MAPPED_PRINCIPALS,
};
pub use reservations::{
    ClosedReservation, RejectedReservation, ReservationOutcome, Reservations,
    MAX_ACCEPTED_RESERVATIONS, MAX_CLOSED_KEPT, MAX_REJECTED_KEPT,
};
pub use snapshot::{SnapshotError, FRAME_BYTES, STATE_FORMAT_VERSION};

/// How far past a task's recorded sequence number an agent's status update may jump. Agents
/// number their updates one by one; gaps come only from numbers the master used when it ended
/// a task itself (a handful), so a larger jump is a bug or an attack and is refused.
pub const MAX_STATUS_SEQ_GAP: u64 = 1 << 16;

/// The largest sequence number an agent may give a status update: far below `u64::MAX`, so
/// that the numbers the master adds after it (LOST, KILLED) always exist.
pub const MAX_STATUS_SEQ: u64 = 1 << 62;

/// The maps of the replicated state: ordered as `BTreeMap`s are, and copied in constant time
/// by sharing their nodes until one side changes them. Every snapshot copies the whole state on
/// the node loop (the copy is then encoded and saved off it); with 30,000 tasks a deep copy
/// took 45–95 ms there, a stall that cost leader elections under load.
pub type StateMap<K, V> = imbl::OrdMap<K, V>;

/// The replicated state of a Fullerene cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterState {
    settings: ClusterSettings,
    agents: StateMap<AgentId, AgentEntry>,
    frameworks: StateMap<FrameworkId, FrameworkEntry>,
    /// Records behind an `Arc`: the map's nodes hold 64 entries each, about half full, so a
    /// record inline would cost twice its size; a pointer costs 8 bytes twice.
    tasks: StateMap<TaskKey, Arc<TaskRecord>>,
    /// The allocator's accounting: agents' charges, frameworks' holdings, deficit counters.
    allocation: AllocationState,
    /// How many frameworks (not torn down) each principal has: an index over `frameworks`
    /// for the frameworks-per-principal quota (tombstones stay forever, so counting them at
    /// each subscription would grow without bound). Rebuilt when a snapshot is read.
    live_frameworks_by_principal: BTreeMap<String, u32>,
    /// The torn-down frameworks that keep their jobs, by (teardown time, id): the oldest lose
    /// them first (see [`jobs`]). An index over `frameworks`, rebuilt when a snapshot is read.
    torn_down_with_jobs: BTreeSet<(UnixMillis, FrameworkId)>,
    /// The history of finished tasks, bounded by [`ClusterSettings::history`].
    finished: FinishedTasks,
    /// The reservations' plan (issue 17), behind an `Arc` so that copying the state for a
    /// snapshot shares it; changed through `Arc::make_mut`.
    reservations: Arc<Reservations>,
    /// The live (not lost) agents' capacity: an index over `agents`, kept as agents come,
    /// change and are lost, and rebuilt when a snapshot is read.
    live_capacity: LiveCapacity,
}

/// The live agents' capacity, kept in O(1) per agent where that gives the very sum a walk of
/// every agent in order would (the value the reservations' plan followed before the index, bit
/// for bit), and a walk otherwise.
///
/// Amounts that are whole multiples of 2⁻¹⁰ below 2⁴⁰ (every machine's cores, MiB and Mbps in
/// practice) are summed as integers of 2⁻¹⁰: while the sum stays below 2⁴³ every partial sum
/// of such amounts is exact in an `f64`, so the walk's sum is this one, whatever the order.
/// An agent with another amount (0.1 of a core) is counted apart, and while one is live the
/// capacity is walked as before. The walk cost a master 10,000 walks of 10,000 agents when a
/// new leader's agents came back or a mass of them was lost: seconds of its Raft loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveCapacity {
    /// Per kind, the sum of the exact agents' amounts in units of 2⁻¹⁰.
    sums: [i128; NUM_RESOURCES],
    /// Live agents with an amount that is not exact.
    inexact: u64,
}

impl LiveCapacity {
    const UNIT: f64 = 1024.0;
    /// The largest amount, in units, counted exactly (2⁴⁰ of a unit, scaled).
    const MAX_AMOUNT: f64 = (1u64 << 50) as f64;
    /// The largest sum, in units, whose walk is exact in an `f64` (2⁴³, scaled).
    const MAX_SUM: i128 = 1 << 53;

    /// Adds (`sign` 1) or takes away (`sign` −1) a live agent's total.
    pub(crate) fn add(&mut self, total: &ResourceVec, sign: i8) {
        match Self::units(total) {
            Some(units) => {
                for (sum, amount) in self.sums.iter_mut().zip(units) {
                    *sum += i128::from(sign) * amount;
                }
            }
            None if sign > 0 => self.inexact += 1,
            None => self.inexact = self.inexact.saturating_sub(1),
        }
    }

    /// An agent's total in units of 2⁻¹⁰, when every amount is a whole number of them below
    /// the bound (multiplying by a power of two is exact, so `fract` tells).
    fn units(total: &ResourceVec) -> Option<[i128; NUM_RESOURCES]> {
        let mut units = [0i128; NUM_RESOURCES];
        for (unit, amount) in units.iter_mut().zip(total.0) {
            let scaled = amount * Self::UNIT;
            if !(0.0..Self::MAX_AMOUNT).contains(&scaled) || scaled.fract() != 0.0 {
                return None;
            }
            // Whole and below 2⁵⁰: the conversion is exact.
            *unit = scaled as i128;
        }
        Some(units)
    }

    /// The sum, when it is the one a walk gives (`None`: walk).
    pub(crate) fn total(&self) -> Option<ResourceVec> {
        if self.inexact > 0
            || self
                .sums
                .iter()
                .any(|&sum| !(0..Self::MAX_SUM).contains(&sum))
        {
            return None;
        }
        // Below 2⁵³: exact as an f64, and so is the division by a power of two.
        Some(ResourceVec(self.sums.map(|sum| sum as f64 / Self::UNIT)))
    }
}

/// The name of the executor a task needs, as agents declare them.
pub fn executor_name(executor: &Executor) -> &'static str {
    match executor {
        Executor::Command(_) => "command",
        Executor::Sleep { .. } => "sleep",
    }
}

impl ClusterState {
    /// An empty cluster. Every founding master must start from the same settings (they are
    /// part of the initial snapshot).
    pub fn new(settings: ClusterSettings) -> ClusterState {
        let allocation = AllocationState::new(settings.fairness_factor, settings.slot_size);
        ClusterState {
            settings,
            agents: StateMap::new(),
            frameworks: StateMap::new(),
            tasks: StateMap::new(),
            allocation,
            live_frameworks_by_principal: BTreeMap::new(),
            torn_down_with_jobs: BTreeSet::new(),
            finished: FinishedTasks::default(),
            reservations: Arc::default(),
            live_capacity: LiveCapacity::default(),
        }
    }

    /// The reservations: the plan, accepted reservations by name, and those the adapter
    /// rejected.
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// The cluster-wide settings.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// Applies the address side of a committed membership change (the Raft driver calls it
    /// when it applies the change): masters added with an address are recorded, removed ones
    /// forgotten. Deterministic, like every change to the state.
    pub fn record_membership(
        &mut self,
        added: &[(u64, Option<std::net::SocketAddr>)],
        removed: &[u64],
    ) {
        for (id, addr) in added {
            if let Some(addr) = addr {
                self.settings.master_addresses.insert(*id, *addr);
            }
        }
        for id in removed {
            self.settings.master_addresses.remove(id);
            self.settings.master_http_addresses.remove(id);
        }
    }

    /// The allocator's replicated accounting (agents' charges, frameworks' holdings, deficit
    /// counters), read by the allocator.
    pub fn allocation(&self) -> &AllocationState {
        &self.allocation
    }

    /// Every agent ever registered (lost ones included), by id.
    pub fn agents(&self) -> &StateMap<AgentId, AgentEntry> {
        &self.agents
    }

    /// Every framework ever subscribed (torn down ones included, as tombstones), by id.
    pub fn frameworks(&self) -> &StateMap<FrameworkId, FrameworkEntry> {
        &self.frameworks
    }

    /// Every task the master tracks: non-terminal ones, and terminal ones whose final update
    /// the framework has not yet acknowledged.
    pub fn tasks(&self) -> &StateMap<TaskKey, Arc<TaskRecord>> {
        &self.tasks
    }

    /// How many records a snapshot of the state holds, less a constant few: agents,
    /// frameworks, tracked tasks and finished tasks kept in the history. What a snapshot costs
    /// to encode grows with it.
    pub fn record_count(&self) -> u64 {
        let records = self.agents.len() + self.frameworks.len() + self.tasks.len();
        (records + self.finished.len()) as u64
    }

    /// One task.
    pub fn task(&self, key: &TaskKey) -> Option<&TaskRecord> {
        self.tasks.get(key).map(|record| &**record)
    }

    /// One task to change: its record is copied first if a copy of the state shares it.
    fn task_mut(&mut self, key: &TaskKey) -> Option<&mut TaskRecord> {
        self.tasks.get_mut(key).map(Arc::make_mut)
    }

    /// The accepted reservation a live framework's jobs run in (Rayon §5.2): the one its first
    /// unended job names, if the plan still holds it. The plan follower guarantees capacity to
    /// such a framework, and offers made out of the guarantee name it.
    pub fn reservation_of(&self, framework_id: &FrameworkId) -> Option<&str> {
        let entry = self.frameworks.get(framework_id)?;
        if entry.torn_down_at_ms.is_some() {
            return None;
        }
        entry
            .jobs
            .iter()
            .filter(|job| job.end.is_none())
            .filter_map(|job| job.description.reservation.as_deref())
            .find(|name| self.reservations().id_of(name).is_some())
    }

    /// The tasks of one framework that the master still tracks (live, or ended and not yet
    /// acknowledged), in id order.
    pub fn tasks_of<'a>(
        &'a self,
        framework_id: &'a FrameworkId,
    ) -> impl Iterator<Item = (&'a TaskKey, &'a TaskRecord)> + 'a {
        self.tasks_of_after(framework_id, None)
    }

    /// The tasks of one framework in id order, from just after `after` (from the first when
    /// `None`): where a pass over them that stopped at `after` goes on.
    pub fn tasks_of_after<'a>(
        &'a self,
        framework_id: &'a FrameworkId,
        after: Option<&TaskKey>,
    ) -> impl Iterator<Item = (&'a TaskKey, &'a TaskRecord)> + 'a {
        use std::ops::Bound;
        let start = match after {
            Some(after) => Bound::Excluded(after.clone()),
            None => Bound::Included(TaskKey::new(
                framework_id.clone(),
                TaskId::from(String::new()),
            )),
        };
        self.tasks
            .range((start, Bound::Unbounded))
            .take_while(move |(key, _)| &key.framework_id == framework_id)
            .map(|(key, record)| (key, &**record))
    }

    /// The finished tasks kept (the history), oldest recorded first.
    pub fn finished_tasks(&self) -> impl DoubleEndedIterator<Item = &FinishedTaskInfo> + '_ {
        self.finished.iter()
    }

    /// How many finished tasks are kept.
    pub fn finished_count(&self) -> usize {
        self.finished.len()
    }

    /// The finished tasks kept, of `framework` when given, recorded after the one whose
    /// ordinal is `after` (from the oldest when `None`), oldest first.
    pub fn finished_tasks_after<'a>(
        &'a self,
        framework: Option<&'a FrameworkId>,
        after: Option<u64>,
    ) -> impl Iterator<Item = &'a FinishedTaskInfo> + 'a {
        self.finished.after(framework, after)
    }

    /// `id` as its agent's entry holds it, so that a record naming it shares the text (ids are
    /// shared text, and a copy per index cost about 200 bytes per task); `id` itself when no
    /// entry has it.
    fn shared_agent_id(&self, id: &AgentId) -> AgentId {
        self.agents
            .get(id)
            .map_or_else(|| id.clone(), |agent| agent.id.clone())
    }

    /// `id` as its framework's entry holds it (see [`ClusterState::shared_agent_id`]).
    fn shared_framework_id(&self, id: &FrameworkId) -> FrameworkId {
        self.frameworks
            .get(id)
            .map_or_else(|| id.clone(), |framework| framework.id.clone())
    }

    /// Moves a terminal task from the task table to the history of finished tasks.
    fn retire_task(&mut self, key: &TaskKey) {
        // The map's own key: its ids are the ones shared with the entries (the caller's may
        // have come off the wire).
        let Some((key, record)) = self.tasks.remove_with_key(key) else {
            return;
        };
        let finished = FinishedTaskInfo {
            framework_id: key.framework_id.clone(),
            task_id: key.task_id.clone(),
            name: record.spec.name.clone(),
            origin: record.spec.origin.clone(),
            agent_id: record.agent_id.clone(),
            state: record.state,
            reason: record.reason.clone(),
            launched_at_ms: record.launched_at_ms,
            ended_at_ms: record.updated_at_ms,
            resources: record.demand.into(),
            ordinal: 0,
        };
        self.finished.record(finished, &self.settings.history);
    }

    /// The status updates a framework has not acknowledged, in order per task.
    pub fn unacked_updates<'a>(
        &'a self,
        framework_id: &'a FrameworkId,
    ) -> impl Iterator<Item = &'a StatusUpdate> + 'a {
        self.tasks_of(framework_id)
            .flat_map(|(_, record)| record.unacked.iter())
    }

    /// Resources charged on an agent (zero for a lost or unknown agent).
    pub fn agent_used(&self, agent: &AgentId) -> ResourceVec {
        self.allocation
            .agent_by_id(agent)
            .map(|a| a.used)
            .unwrap_or(ResourceVec::ZERO)
    }

    /// An agent as the operator API shows it.
    pub fn agent_info(&self, agent: &AgentId) -> Option<AgentInfo> {
        let entry = self.agents.get(agent)?;
        let used = self.agent_used(agent);
        Some(AgentInfo {
            id: entry.id.clone(),
            hostname: entry.hostname.clone(),
            total: entry.total.into(),
            // Every resource the agent has gets an amount used, 0 when idle: readers of the
            // operator API see the same fields whatever the agent's load.
            used: ResourceKind::ALL
                .into_iter()
                .filter(|&kind| entry.total[kind] != 0.0 || used[kind] != 0.0)
                .map(|kind| (kind.name(), used[kind]))
                .collect(),
            state: entry.state,
            attributes: entry.attributes.clone(),
            last_heartbeat_ms: entry.last_heartbeat_ms,
            // Soft state of the leader's sessions, filled in by the leader.
            address: None,
            isolation: None,
            drain: entry.drain.as_ref().map(|drain| DrainStatus {
                since_ms: drain.since_ms,
                deadline_ms: drain.deadline_ms,
                drained: entry.drained(),
            }),
        })
    }

    /// A framework as the operator API shows it.
    pub fn framework_info(&self, framework: &FrameworkId) -> Option<FrameworkInfo> {
        let entry = self.frameworks.get(framework)?;
        let used = self
            .allocation
            .framework_by_id(framework)
            .map(|f| f.held)
            .unwrap_or(ResourceVec::ZERO);
        Some(FrameworkInfo {
            id: entry.id.clone(),
            name: entry.name.clone(),
            principal: entry.principal.clone(),
            group: entry.group.clone(),
            connected: entry.connected,
            torn_down: entry.torn_down_at_ms.is_some(),
            used: used.into(),
            active_tasks: entry.active_tasks.len() as u64,
            jobs: entry.jobs.clone(),
        })
    }

    /// A task as reconciliation and the operator API show it.
    pub fn task_info(&self, key: &TaskKey) -> Option<TaskInfo> {
        let record = self.tasks.get(key)?;
        Some(TaskInfo {
            spec: record.spec.clone(),
            framework_id: key.framework_id.clone(),
            agent_id: record.agent_id.clone(),
            state: record.state,
            seq: record.seq,
        })
    }

    /// What must hold before a re-registration or a capacity change of `agent_id` starts
    /// changing anything, so that it cannot fail halfway: the new total is valid, the
    /// allocation knows the agent exactly when it is not lost (`was_lost`), and every task it
    /// may end (those recorded on the agent) is live there, of a framework the allocation
    /// knows. Past these checks, the allocation's operations fail only if its accounting
    /// disagrees with the task table, which `check_accounting` in the tests rules out.
    ///
    /// These commands used to run on a copy of the whole state to undo a failure; with
    /// thousands of agents re-registering after a failover, each copying every task record,
    /// that copy stalled the node loop for seconds.
    fn check_agent_change(
        &self,
        agent_id: &AgentId,
        total: &ResourceVec,
        was_lost: bool,
    ) -> Result<(), CommandError> {
        if !total.is_valid() {
            return Err(CommandError::InvalidResources(format!(
                "{total}: amounts must be finite and >= 0"
            )));
        }
        let entry = self
            .agents
            .get(agent_id)
            .ok_or_else(|| CommandError::UnknownAgent(agent_id.clone()))?;
        match (was_lost, self.allocation.agent_idx(agent_id).is_ok()) {
            (true, true) => return Err(StateError::DuplicateAgent(agent_id.clone()).into()),
            (false, false) => return Err(StateError::UnknownAgent(agent_id.clone()).into()),
            _ => {}
        }
        for key in &entry.tasks {
            let live_here = self
                .tasks
                .get(key)
                .is_some_and(|t| &t.agent_id == agent_id && !t.state.is_terminal());
            if !live_here {
                return Err(CommandError::UnknownTask(key.clone()));
            }
            self.allocation.framework_idx(&key.framework_id)?;
        }
        Ok(())
    }

    /// Applies one committed command. On error nothing has changed.
    pub fn apply(&mut self, command: &Command) -> Result<CommandOutcome, CommandError> {
        let capacity_of = |state: &ClusterState, agent: Option<&AgentId>| {
            let entry = state.agents.get(agent?)?;
            Some((entry.state != AgentState::Lost, entry.total))
        };
        let agent = match command {
            Command::RegisterAgent { agent_id, .. }
            | Command::ReregisterAgent { agent_id, .. }
            | Command::UpdateAgentResources { agent_id, .. }
            | Command::MarkAgentLost { agent_id, .. } => Some(agent_id),
            _ => None,
        };
        let capacity_before = capacity_of(self, agent);
        let outcome = self.apply_command(command)?;
        let capacity_after = capacity_of(self, agent);
        let capacity_changed = agent.is_some() && capacity_after != capacity_before;
        if capacity_changed {
            if let Some((true, total)) = capacity_before {
                self.live_capacity.add(&total, -1);
            }
            if let Some((true, total)) = capacity_after {
                self.live_capacity.add(&total, 1);
            }
        }
        // The history's window moves with the commands' own time, never a clock, so every
        // master prunes alike; only a command that changed something moves it (a refused or
        // repeated one changes nothing at all).
        if let (Some(at_ms), false) = (command.at_ms(), outcome == CommandOutcome::Unchanged) {
            self.finished.prune(at_ms, &self.settings.history);
            if capacity_changed {
                self.follow_capacity(at_ms);
            }
        }
        Ok(outcome)
    }

    /// Tells the reservations' plan the live agents' capacity after an agent came, changed or
    /// was lost (Rayon §5.2: a loss makes the adapter re-plan, and reject what no longer fits).
    fn follow_capacity(&mut self, at_ms: UnixMillis) {
        let capacity = self.live_capacity.total().unwrap_or_else(|| {
            self.agents
                .values()
                .filter(|agent| agent.state != AgentState::Lost)
                .fold(ResourceVec::ZERO, |sum, agent| sum + agent.total)
        });
        if capacity != self.reservations.followed_capacity() {
            Arc::make_mut(&mut self.reservations).follow_capacity(capacity, at_ms);
        }
    }

    fn apply_command(&mut self, command: &Command) -> Result<CommandOutcome, CommandError> {
        match command {
            Command::RegisterAgent {
                agent_id,
                hostname,
                resources,
                attributes,
                executors,
                at_ms,
            } => self.register_agent(agent_id, hostname, resources, attributes, executors, *at_ms),
            Command::ReregisterAgent {
                agent_id,
                hostname,
                resources,
                attributes,
                executors,
                running,
                at_ms,
            } => self.reregister_agent(
                agent_id, hostname, resources, attributes, executors, running, *at_ms,
            ),
            Command::UpdateAgentResources {
                agent_id,
                resources,
                at_ms,
            } => self.update_agent_resources(agent_id, resources, *at_ms),
            Command::AgentHeartbeat { agent_id, at_ms } => self.agent_heartbeat(agent_id, *at_ms),
            Command::MarkAgentUnreachable { agent_id, at_ms } => {
                self.mark_agent_unreachable(agent_id, *at_ms)
            }
            Command::MarkAgentLost { agent_id, at_ms } => self.mark_agent_lost(agent_id, *at_ms),
            Command::SubscribeFramework {
                framework_id,
                principal,
                name,
                group,
                failover_timeout_ms,
                at_ms,
            } => self.subscribe_framework(
                framework_id,
                principal,
                name,
                group,
                *failover_timeout_ms,
                *at_ms,
            ),
            Command::FailoverFramework {
                framework_id,
                principal,
                name,
                failover_timeout_ms,
                at_ms,
            } => {
                self.failover_framework(framework_id, principal, name, *failover_timeout_ms, *at_ms)
            }
            Command::DisconnectFramework {
                framework_id,
                at_ms,
            } => self.disconnect_framework(framework_id, *at_ms),
            Command::TeardownFramework {
                framework_id,
                principal,
                cause,
                at_ms,
            } => self.teardown_framework(framework_id, principal.as_deref(), *cause, *at_ms),
            Command::DescribeJob {
                framework_id,
                principal,
                description,
                at_ms,
            } => self.describe_job(framework_id, principal, description, *at_ms),
            Command::EndJob {
                framework_id,
                principal,
                job,
                end,
                at_ms,
            } => self.end_job(framework_id, principal, job, end, *at_ms),
            Command::LaunchTasks {
                framework_id,
                principal,
                agent_id,
                tasks,
                at_ms,
            } => self.launch_tasks(framework_id, principal, agent_id, tasks, *at_ms),
            Command::UpdateStatus {
                agent_id,
                update,
                at_ms,
            } => self.update_status(agent_id, update, *at_ms),
            Command::KillTask {
                framework_id,
                principal,
                task_id,
                at_ms,
            } => self.kill_task(framework_id, principal, task_id, *at_ms),
            Command::AcknowledgeStatus {
                framework_id,
                principal,
                acks,
            } => self.acknowledge_statuses(framework_id, principal, acks),
            Command::SetGroupWeight { group, weight } => self.set_group_weight(group, *weight),
            Command::SetGroup(GroupPlacement {
                group,
                weight,
                principals,
            }) => self.set_group(group, *weight, principals),
            Command::RemoveGroup(GroupRemoval { group, principals }) => {
                self.remove_group(group, principals)
            }
            Command::SetQuotas(quotas) => self.set_quotas(*quotas),
            Command::SetOverbookingAllowance { allowance } => {
                self.set_overbooking_allowance(*allowance)
            }
            Command::AnnounceMasterHttp { master, addr } => {
                let http = &mut self.settings.master_http_addresses;
                let changed = match addr {
                    Some(addr) => http.insert(*master, *addr) != Some(*addr),
                    None => http.remove(master).is_some(),
                };
                Ok(if changed {
                    CommandOutcome::Applied
                } else {
                    CommandOutcome::Unchanged
                })
            }
            Command::DrainAgent {
                agent_id,
                deadline_ms,
                at_ms,
            } => self.drain_agent(agent_id, *deadline_ms, *at_ms),
            Command::UndrainAgent { agent_id } => self.undrain_agent(agent_id),
            Command::KillTasks { tasks, at_ms } => self.kill_tasks(tasks, *at_ms),
            Command::CreateReservation {
                name,
                principal,
                expr,
                at_ms,
            } => {
                self.reservations_mut()
                    .create(name, principal, expr, *at_ms)?;
                Ok(CommandOutcome::Applied)
            }
            Command::UpdateReservation {
                name,
                by,
                expr,
                at_ms,
            } => {
                self.reservations_mut().update(name, by, expr, *at_ms)?;
                Ok(CommandOutcome::Applied)
            }
            Command::SetReservationPolicy {
                placement,
                sharing,
                quantum_ms,
            } => {
                self.reservations_mut()
                    .set_policy(*placement, sharing, *quantum_ms)?;
                Ok(CommandOutcome::Applied)
            }
            Command::DeleteReservation { name, by, .. } => {
                self.reservations_mut().delete(name, by)?;
                Ok(CommandOutcome::Applied)
            }
            Command::PreemptTasks {
                reservation, tasks, ..
            } => self.preempt_tasks(reservation, tasks),
            Command::CloseReservations { at_ms } => Ok(self.close_reservations(*at_ms)),
        }
    }

    /// The reservations to change: copied first if a copy of the state shares them. A refused
    /// command may copy them and change nothing, which costs a copy but no difference.
    fn reservations_mut(&mut self) -> &mut Reservations {
        Arc::make_mut(&mut self.reservations)
    }

    // -----------------------------------------------------------------------------------------
    // Agents
    // -----------------------------------------------------------------------------------------

    fn register_agent(
        &mut self,
        agent_id: &AgentId,
        hostname: &str,
        resources: &Resources,
        attributes: &BTreeMap<String, String>,
        executors: &[String],
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        if self.agents.contains_key(agent_id) {
            return Err(CommandError::AgentAlreadyRegistered(agent_id.clone()));
        }
        let total = resources.to_vec()?;
        self.allocation.add_agent(agent_id.clone(), total)?;
        self.agents.insert(
            agent_id.clone(),
            AgentEntry {
                id: agent_id.clone(),
                hostname: hostname.to_string(),
                total,
                state: AgentState::Active,
                attributes: attributes.clone(),
                executors: executors.to_vec(),
                registered_at_ms: at_ms,
                last_heartbeat_ms: at_ms,
                drain: None,
                tasks: Default::default(),
            },
        );
        Ok(CommandOutcome::AgentRegistered {
            kill: Vec::new(),
            updates: Vec::new(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn reregister_agent(
        &mut self,
        agent_id: &AgentId,
        hostname: &str,
        resources: &Resources,
        attributes: &BTreeMap<String, String>,
        executors: &[String],
        running: &[TaskKey],
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let Some(entry) = self.agents.get(agent_id) else {
            return Err(CommandError::UnknownAgent(agent_id.clone()));
        };
        let total = resources.to_vec()?;
        let was_lost = entry.state == AgentState::Lost;
        self.check_agent_change(agent_id, &total, was_lost)?;

        // Reconcile: what the agent runs that the master considers ended or never launched
        // there must be killed (DESIGN.md: at most one instance of a task once recovery
        // completes); what the master has running there that the agent does not report is lost.
        let reported: std::collections::BTreeSet<&TaskKey> = running.iter().collect();
        let mut kill = Vec::new();
        for key in running {
            let record = self.tasks.get(key);
            let alive_here =
                record.is_some_and(|t| &t.agent_id == agent_id && !t.state.is_terminal());
            // A kill asked for and not yet done is asked again: the first may have been lost
            // with the agent's previous session.
            let kill_pending = record.is_some_and(|t| t.kill_requested);
            if !alive_here || kill_pending {
                let grace_ms = self.tasks.get(key).map_or(0, |t| t.spec.kill_grace_ms);
                kill.push(TaskKill {
                    agent_id: agent_id.clone(),
                    task: key.clone(),
                    grace_ms,
                });
            }
        }
        let vanished: Vec<TaskKey> = entry
            .tasks
            .iter()
            .filter(|k| !reported.contains(k))
            .cloned()
            .collect();

        if was_lost {
            self.allocation.add_agent(agent_id.clone(), total)?;
        } else if self.agents[agent_id].total != total {
            self.replace_agent_total(agent_id, total)?;
        }
        let mut updates = Vec::with_capacity(vanished.len());
        for key in &vanished {
            updates.push(self.end_task(
                key,
                TaskState::Lost,
                StatusReason::AgentRestarted,
                at_ms,
            )?);
        }
        let entry = self.known_agent_mut(agent_id)?;
        entry.hostname = hostname.to_string();
        entry.total = total;
        entry.state = AgentState::Active;
        entry.attributes = attributes.clone();
        entry.executors = executors.to_vec();
        entry.last_heartbeat_ms = at_ms;
        let (shed_updates, shed_kill) = self.shed_to_fit(agent_id, at_ms)?;
        updates.extend(shed_updates);
        kill.extend(shed_kill);
        Ok(CommandOutcome::AgentRegistered { kill, updates })
    }

    fn update_agent_resources(
        &mut self,
        agent_id: &AgentId,
        resources: &Resources,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let entry = self.live_agent(agent_id)?;
        let total = resources.to_vec()?;
        if entry.total == total {
            return Ok(CommandOutcome::Unchanged);
        }
        self.check_agent_change(agent_id, &total, false)?;
        self.replace_agent_total(agent_id, total)?;
        if let Some(entry) = self.agents.get_mut(agent_id) {
            entry.total = total;
            entry.last_heartbeat_ms = entry.last_heartbeat_ms.max(at_ms);
        }
        let (updates, kill) = self.shed_to_fit(agent_id, at_ms)?;
        if updates.is_empty() {
            Ok(CommandOutcome::Applied)
        } else {
            Ok(CommandOutcome::TasksEnded { updates, kill })
        }
    }

    /// Ends an agent's newest tasks (LOST, [`StatusReason::AgentShrunk`]) until what the rest
    /// are charged fits its total under the overbooking allowance (DESIGN.md: used ≤ total).
    /// An agent whose capacity shrank (a disk removed, a smaller machine under the same id)
    /// cannot run what it ran; the newest tasks have lost the least work. Returns the updates
    /// for their frameworks and the kills for the agent, which may still run them.
    fn shed_to_fit(
        &mut self,
        agent_id: &AgentId,
        at_ms: UnixMillis,
    ) -> Result<(Vec<StatusUpdate>, Vec<TaskKill>), CommandError> {
        let allowance = Overbooking(self.settings.overbooking_allowance);
        let Some(entry) = self.agents.get(agent_id) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let total = entry.total;
        let mut newest_first: Vec<(UnixMillis, TaskKey)> = entry
            .tasks
            .iter()
            .filter_map(|key| self.tasks.get(key).map(|t| (t.launched_at_ms, key.clone())))
            .collect();
        newest_first.sort_unstable_by(|a, b| b.cmp(a));
        let (mut updates, mut kill) = (Vec::new(), Vec::new());
        for (_, key) in newest_first {
            if allowance.admits(&self.agent_used(agent_id), &total) {
                break;
            }
            let grace_ms = self.tasks.get(&key).map_or(0, |t| t.spec.kill_grace_ms);
            updates.push(self.end_task(&key, TaskState::Lost, StatusReason::AgentShrunk, at_ms)?);
            kill.push(TaskKill {
                agent_id: agent_id.clone(),
                task: key,
                grace_ms,
            });
        }
        Ok((updates, kill))
    }

    /// Changes an agent's total in the allocation accounting. `AllocationState` has no such
    /// operation, so the agent is removed and re-added (it gets its slot back: slots are reused
    /// last-freed-first) and its running tasks are charged again, in their order, at the new
    /// cluster capacity — what a capacity change does to DRF factors anyway. Its callers have
    /// checked `total` with [`ClusterState::check_agent_change`].
    fn replace_agent_total(
        &mut self,
        agent_id: &AgentId,
        total: ResourceVec,
    ) -> Result<(), CommandError> {
        let released = self.allocation.remove_agent(agent_id)?;
        self.allocation.add_agent(agent_id.clone(), total)?;
        for task in released {
            let framework = self
                .allocation
                .framework(task.framework)
                .map(|f| f.id.clone())
                .ok_or_else(|| {
                    CommandError::Accounting(StateError::UnknownFramework(FrameworkId::from("?")))
                })?;
            self.allocation
                .apply_launch(agent_id, &framework, task.demand)?;
        }
        Ok(())
    }

    fn agent_heartbeat(
        &mut self,
        agent_id: &AgentId,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        self.live_agent(agent_id)?;
        let entry = self.known_agent_mut(agent_id)?;
        entry.state = AgentState::Active;
        entry.last_heartbeat_ms = entry.last_heartbeat_ms.max(at_ms);
        Ok(CommandOutcome::Applied)
    }

    fn mark_agent_unreachable(
        &mut self,
        agent_id: &AgentId,
        _at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let entry = self.live_agent(agent_id)?;
        if entry.state == AgentState::Unreachable {
            return Ok(CommandOutcome::Unchanged);
        }
        if let Some(entry) = self.agents.get_mut(agent_id) {
            entry.state = AgentState::Unreachable;
        }
        Ok(CommandOutcome::Applied)
    }

    fn mark_agent_lost(
        &mut self,
        agent_id: &AgentId,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let entry = self
            .agents
            .get(agent_id)
            .ok_or_else(|| CommandError::UnknownAgent(agent_id.clone()))?;
        if entry.state == AgentState::Lost {
            return Ok(CommandOutcome::Unchanged);
        }
        let on_agent: Vec<TaskKey> = entry.tasks.iter().cloned().collect();
        // Removing the agent releases every task's charge (and deficit) in one go; the task
        // records are ended below without releasing again.
        self.allocation.remove_agent(agent_id)?;
        let mut updates = Vec::with_capacity(on_agent.len());
        let mut kill = Vec::with_capacity(on_agent.len());
        for key in &on_agent {
            let grace_ms = self.tasks.get(key).map_or(0, |t| t.spec.kill_grace_ms);
            updates.push(self.finish_task_record(
                key,
                TaskState::Lost,
                StatusReason::AgentLost,
                at_ms,
            )?);
            kill.push(TaskKill {
                agent_id: agent_id.clone(),
                task: key.clone(),
                grace_ms,
            });
        }
        if let Some(entry) = self.agents.get_mut(agent_id) {
            entry.state = AgentState::Lost;
            entry.tasks.clear();
        }
        Ok(CommandOutcome::TasksEnded { updates, kill })
    }

    /// The entry of an agent that is registered and not lost.
    fn live_agent(&self, agent_id: &AgentId) -> Result<&AgentEntry, CommandError> {
        let entry = self
            .agents
            .get(agent_id)
            .ok_or_else(|| CommandError::UnknownAgent(agent_id.clone()))?;
        if entry.state == AgentState::Lost {
            return Err(CommandError::AgentLost(agent_id.clone()));
        }
        Ok(entry)
    }

    /// The entry of a registered agent, lost or not, to change.
    fn known_agent_mut(&mut self, agent_id: &AgentId) -> Result<&mut AgentEntry, CommandError> {
        self.agents
            .get_mut(agent_id)
            .ok_or_else(|| CommandError::UnknownAgent(agent_id.clone()))
    }

    fn drain_agent(
        &mut self,
        agent_id: &AgentId,
        deadline_ms: Option<UnixMillis>,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        // Any known agent may be drained, a lost one too: it stays out of offers when it
        // comes back, which is what an operator taking a machine down wants.
        let entry = self.known_agent_mut(agent_id)?;
        match &mut entry.drain {
            Some(drain) if drain.deadline_ms == deadline_ms => Ok(CommandOutcome::Unchanged),
            Some(drain) => {
                drain.deadline_ms = deadline_ms;
                Ok(CommandOutcome::Applied)
            }
            None => {
                entry.drain = Some(Drain {
                    since_ms: at_ms,
                    deadline_ms,
                });
                Ok(CommandOutcome::Applied)
            }
        }
    }

    fn undrain_agent(&mut self, agent_id: &AgentId) -> Result<CommandOutcome, CommandError> {
        let entry = self.known_agent_mut(agent_id)?;
        Ok(match entry.drain.take() {
            Some(_) => CommandOutcome::Applied,
            None => CommandOutcome::Unchanged,
        })
    }

    // -----------------------------------------------------------------------------------------
    // Frameworks
    // -----------------------------------------------------------------------------------------

    fn subscribe_framework(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        name: &str,
        requested_group: &str,
        failover_timeout_ms: u64,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        if self.frameworks.contains_key(framework_id) {
            return Err(CommandError::FrameworkAlreadyRegistered(
                framework_id.clone(),
            ));
        }
        let assigned = self.settings.group_of(principal).to_string();
        if !requested_group.is_empty() && requested_group != assigned {
            return Err(CommandError::GroupNotAssigned {
                principal: principal.to_string(),
                requested: requested_group.to_string(),
                assigned,
            });
        }
        let live = self
            .live_frameworks_by_principal
            .get(principal)
            .copied()
            .unwrap_or(0);
        let quota = self.settings.quotas.frameworks_per_principal;
        if live >= quota {
            return Err(CommandError::QuotaExceeded(format!(
                "principal `{principal}` has {live} registered frameworks, its quota \
                 (frameworks per principal) is {quota}"
            )));
        }
        let group = assigned.as_str();
        self.check_group_room(group)?;
        self.allocation.add_framework(
            framework_id.clone(),
            group,
            Time::from_millis(at_ms).as_secs_f64(),
        )?;
        *self
            .live_frameworks_by_principal
            .entry(principal.to_string())
            .or_default() += 1;
        self.frameworks.insert(
            framework_id.clone(),
            FrameworkEntry {
                id: framework_id.clone(),
                name: name.to_string(),
                principal: principal.to_string(),
                group: group.to_string(),
                failover_timeout_ms,
                connected: true,
                registered_at_ms: at_ms,
                disconnected_at_ms: None,
                torn_down_at_ms: None,
                jobs: Vec::new(),
                active_tasks: Default::default(),
            },
        );
        Ok(CommandOutcome::Applied)
    }

    /// The entry of a framework that exists, is not torn down and is owned by `principal`.
    /// A task of a framework `principal` owns, for the framework's own requests on it.
    fn owned_task_mut(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        task_id: &TaskId,
    ) -> Result<(TaskKey, &mut TaskRecord), CommandError> {
        self.owned_framework(framework_id, Some(principal))?;
        let key = TaskKey::new(framework_id.clone(), task_id.clone());
        match self.task_mut(&key) {
            Some(record) => Ok((key, record)),
            None => Err(CommandError::UnknownTask(key)),
        }
    }

    fn owned_framework(
        &self,
        framework_id: &FrameworkId,
        principal: Option<&str>,
    ) -> Result<&FrameworkEntry, CommandError> {
        let entry = self
            .frameworks
            .get(framework_id)
            .ok_or_else(|| CommandError::UnknownFramework(framework_id.clone()))?;
        if entry.torn_down_at_ms.is_some() {
            return Err(CommandError::FrameworkTornDown(framework_id.clone()));
        }
        if let Some(principal) = principal {
            if entry.principal != principal {
                return Err(CommandError::NotFrameworkOwner {
                    framework: framework_id.clone(),
                    principal: principal.to_string(),
                });
            }
        }
        Ok(entry)
    }

    fn failover_framework(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        name: &str,
        failover_timeout_ms: u64,
        _at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        self.owned_framework(framework_id, Some(principal))?;
        if let Some(entry) = self.frameworks.get_mut(framework_id) {
            entry.name = name.to_string();
            entry.failover_timeout_ms = failover_timeout_ms;
            entry.connected = true;
            entry.disconnected_at_ms = None;
        }
        Ok(CommandOutcome::Applied)
    }

    fn disconnect_framework(
        &mut self,
        framework_id: &FrameworkId,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let entry = self.owned_framework(framework_id, None)?;
        if !entry.connected {
            return Ok(CommandOutcome::Unchanged);
        }
        if let Some(entry) = self.frameworks.get_mut(framework_id) {
            entry.connected = false;
            entry.disconnected_at_ms = Some(at_ms);
        }
        Ok(CommandOutcome::Applied)
    }

    fn teardown_framework(
        &mut self,
        framework_id: &FrameworkId,
        principal: Option<&str>,
        cause: TeardownCause,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let entry = self.owned_framework(framework_id, principal)?;
        let active: Vec<TaskKey> = entry
            .active_tasks
            .iter()
            .map(|t| TaskKey::new(framework_id.clone(), t.clone()))
            .collect();
        // Removing the framework releases its tasks' charges and deficits.
        self.allocation.remove_framework(framework_id)?;
        let mut updates = Vec::with_capacity(active.len());
        let mut kill = Vec::with_capacity(active.len());
        for key in &active {
            let (agent_id, grace_ms) = match self.tasks.get(key) {
                Some(t) => (t.agent_id.clone(), t.spec.kill_grace_ms),
                None => continue,
            };
            updates.push(self.finish_task_record(
                key,
                TaskState::Killed,
                StatusReason::FrameworkRemoved,
                at_ms,
            )?);
            kill.push(TaskKill {
                agent_id,
                task: key.clone(),
                grace_ms,
            });
        }
        // Nobody will acknowledge the final updates of a framework that is gone: its tasks
        // leave the task table now, for the history. The framework stays as a tombstone so
        // that its id is never reused.
        let forget: Vec<TaskKey> = self
            .tasks
            .range(TaskKey::new(framework_id.clone(), TaskId::from(String::new()))..)
            .take_while(|(k, _)| &k.framework_id == framework_id)
            .map(|(k, _)| k.clone())
            .collect();
        for key in forget {
            self.retire_task(&key);
        }
        if let Some(entry) = self.frameworks.get_mut(framework_id) {
            entry.torn_down_at_ms = Some(at_ms);
            entry.connected = false;
            entry.active_tasks.clear();
            if let Some(live) = self.live_frameworks_by_principal.get_mut(&entry.principal) {
                *live = live.saturating_sub(1);
                if *live == 0 {
                    self.live_frameworks_by_principal.remove(&entry.principal);
                }
            }
        }
        self.end_jobs_at_teardown(framework_id, cause, at_ms);
        Ok(CommandOutcome::TasksEnded { updates, kill })
    }

    // -----------------------------------------------------------------------------------------
    // Tasks
    // -----------------------------------------------------------------------------------------

    fn launch_tasks(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        agent_id: &AgentId,
        tasks: &[TaskSpec],
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        // Validate everything before charging anything.
        self.owned_framework(framework_id, Some(principal))?;
        let agent = self.live_agent(agent_id)?;
        if agent.state != AgentState::Active {
            return Err(CommandError::AgentNotActive {
                agent: agent_id.clone(),
                state: agent.state,
            });
        }
        if agent.drain.is_some() {
            return Err(CommandError::AgentDraining(agent_id.clone()));
        }
        if tasks.is_empty() {
            return Err(CommandError::EmptyBundle);
        }
        let live = self
            .frameworks
            .get(framework_id)
            .map_or(0, |f| f.active_tasks.len());
        let quota = self.settings.quotas.tasks_per_framework as usize;
        if live + tasks.len() > quota {
            return Err(CommandError::QuotaExceeded(format!(
                "framework `{framework_id}` runs {live} tasks and the bundle adds {}: its quota \
                 (tasks per framework) is {quota}",
                tasks.len()
            )));
        }
        let running = agent.tasks.len();
        if running + tasks.len() > MAX_TASKS_PER_AGENT {
            return Err(CommandError::AgentFull {
                agent: agent_id.clone(),
                running,
                adding: tasks.len(),
                limit: MAX_TASKS_PER_AGENT,
            });
        }
        let mut demands = Vec::with_capacity(tasks.len());
        let mut requested = ResourceVec::ZERO;
        let mut seen = std::collections::BTreeSet::new();
        for spec in tasks {
            limits::check_task_spec(spec)?;
            let key = TaskKey::new(framework_id.clone(), spec.id.clone());
            if self.tasks.contains_key(&key) || !seen.insert(spec.id.clone()) {
                return Err(CommandError::DuplicateTask(key));
            }
            let demand = spec.resources.to_vec()?;
            if demand.is_zero() {
                return Err(CommandError::InvalidResources(format!(
                    "task `{key}` asks for no resources"
                )));
            }
            let executor = executor_name(&spec.executor);
            if !agent.executors.iter().any(|e| e == executor) {
                return Err(CommandError::UnknownExecutor {
                    agent: agent_id.clone(),
                    executor: executor.to_string(),
                });
            }
            requested += demand;
            demands.push(demand);
        }
        let used = self.agent_used(agent_id);
        if !Overbooking(self.settings.overbooking_allowance)
            .admits(&(used + requested), &agent.total)
        {
            return Err(CommandError::InsufficientResources {
                agent: agent_id.clone(),
                requested,
                free: agent.total.saturating_sub(&used),
            });
        }

        for (i, demand) in demands.iter().enumerate() {
            if let Err(e) = self
                .allocation
                .apply_launch(agent_id, framework_id, *demand)
            {
                // Validated above, so this is a bug; undo the launches already charged so
                // that the command still changes nothing.
                for undo in demands[..i].iter().rev() {
                    let _ = self.allocation.apply_release(agent_id, framework_id, *undo);
                }
                return Err(e.into());
            }
        }
        // Every record, key and index of these tasks shares one copy of each id (the agent's
        // and the framework's as their entries hold them, each task's as its spec does).
        let shared_agent_id = self.shared_agent_id(agent_id);
        let shared_framework_id = self.shared_framework_id(framework_id);
        for (spec, demand) in tasks.iter().zip(demands) {
            let key = TaskKey::new(shared_framework_id.clone(), spec.id.clone());
            self.tasks.insert(
                key.clone(),
                Arc::new(TaskRecord {
                    spec: spec.clone(),
                    agent_id: shared_agent_id.clone(),
                    demand,
                    state: TaskState::Staging,
                    seq: 0,
                    acked_seq: 0,
                    reason: None,
                    launched_at_ms: at_ms,
                    updated_at_ms: at_ms,
                    kill_requested: false,
                    unacked: Vec::new(),
                    preempted_for: None,
                }),
            );
            if let Some(agent) = self.agents.get_mut(agent_id) {
                agent.tasks.insert(key);
            }
            if let Some(framework) = self.frameworks.get_mut(framework_id) {
                framework.active_tasks.insert(spec.id.clone());
            }
        }
        Ok(CommandOutcome::TasksLaunched {
            agent_id: agent_id.clone(),
            framework_id: framework_id.clone(),
            tasks: tasks.to_vec(),
        })
    }

    /// Status updates carry a per-task `seq`. One at or below the recorded seq is a duplicate
    /// (the agent retries until acknowledged) and succeeds without changing anything. A newer
    /// one must be a valid transition: a terminal task never changes, and RUNNING never goes
    /// back to STAGING. Gaps in `seq` are accepted: the master itself uses a number when it
    /// ends a task (LOST, KILLED on teardown), so the agent's next number may already be taken.
    /// But the numbers an agent may use are bounded: at most [`MAX_STATUS_SEQ_GAP`] past the
    /// recorded one and never above [`MAX_STATUS_SEQ`], so that a buggy or hostile agent can
    /// neither exhaust a task's numbers (the master still numbers the updates it makes itself)
    /// nor make the replicated apply overflow on every master.
    fn update_status(
        &mut self,
        sender: &AgentId,
        update: &StatusUpdate,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        if &update.agent_id != sender {
            return Err(CommandError::StatusAgentMismatch {
                named: update.agent_id.clone(),
                sender: sender.clone(),
            });
        }
        let key = TaskKey::new(update.framework_id.clone(), update.task_id.clone());
        let record = self
            .tasks
            .get(&key)
            .ok_or_else(|| CommandError::UnknownTask(key.clone()))?;
        if &record.agent_id != sender {
            return Err(CommandError::TaskOnOtherAgent {
                task: key,
                runs_on: record.agent_id.clone(),
                reported_by: sender.clone(),
            });
        }
        if update.seq <= record.seq {
            return Ok(CommandOutcome::Unchanged);
        }
        let limit = record
            .seq
            .saturating_add(MAX_STATUS_SEQ_GAP)
            .min(MAX_STATUS_SEQ);
        if update.seq > limit {
            return Err(CommandError::SeqOutOfRange {
                task: key,
                seq: update.seq,
                latest: record.seq,
                limit,
            });
        }
        if record.state.is_terminal() {
            return Err(CommandError::TerminalTask {
                task: key,
                state: record.state,
            });
        }
        if record.state == TaskState::Running && update.state == TaskState::Staging {
            return Err(CommandError::BadTransition {
                task: key,
                from: record.state,
                to: update.state,
            });
        }
        if update.state.is_terminal() {
            let demand = record.demand;
            let agent_id = record.agent_id.clone();
            self.allocation
                .apply_release(&agent_id, &key.framework_id, demand)?;
            self.detach_task(&key, &agent_id, update.state);
        }
        let record = self
            .task_mut(&key)
            .ok_or_else(|| CommandError::UnknownTask(key.clone()))?;
        let mut update = update.clone();
        if let (TaskState::Killed, Some(reservation)) = (update.state, &record.preempted_for) {
            update.reason = Some(StatusReason::Preempted {
                reservation: reservation.clone(),
            });
            update.message = if update.message.is_empty() {
                format!("preempted for reservation `{reservation}`")
            } else {
                format!(
                    "preempted for reservation `{reservation}`: {}",
                    update.message
                )
            };
        }
        record.state = update.state;
        record.seq = update.seq;
        record.reason = update.reason.clone();
        record.updated_at_ms = at_ms;
        record.push_unacked(update.clone());
        Ok(CommandOutcome::StatusRecorded(update))
    }

    fn kill_task(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        task_id: &TaskId,
        _at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        let (key, record) = self.owned_task_mut(framework_id, principal, task_id)?;
        if record.state.is_terminal() {
            return Err(CommandError::TerminalTask {
                task: key,
                state: record.state,
            });
        }
        // A repeated kill is not a change, but the leader sends it again: the first one may
        // have been lost on its way to the agent.
        record.kill_requested = true;
        Ok(CommandOutcome::KillRequested(TaskKill {
            agent_id: record.agent_id.clone(),
            task: key,
            grace_ms: record.spec.kill_grace_ms,
        }))
    }

    fn kill_tasks(
        &mut self,
        tasks: &[TaskKey],
        _at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        if tasks.is_empty() {
            return Err(CommandError::EmptyBundle);
        }
        // Validate every task before marking any.
        for key in tasks {
            let record = self
                .tasks
                .get(key)
                .ok_or_else(|| CommandError::UnknownTask(key.clone()))?;
            if record.state.is_terminal() {
                return Err(CommandError::TerminalTask {
                    task: key.clone(),
                    state: record.state,
                });
            }
        }
        let mut kills = Vec::with_capacity(tasks.len());
        for key in tasks {
            if let Some(record) = self.task_mut(key) {
                record.kill_requested = true;
                kills.push(TaskKill {
                    agent_id: record.agent_id.clone(),
                    task: key.clone(),
                    grace_ms: record.spec.kill_grace_ms,
                });
            }
        }
        Ok(CommandOutcome::KillsRequested(kills))
    }

    /// Asks the live ones of `tasks` to die for `reservation` (`Command::PreemptTasks`).
    fn preempt_tasks(
        &mut self,
        reservation: &str,
        tasks: &[TaskKey],
    ) -> Result<CommandOutcome, CommandError> {
        if tasks.is_empty() {
            return Err(CommandError::EmptyBundle);
        }
        let mut kills = Vec::with_capacity(tasks.len());
        for key in tasks {
            let live = self.tasks.get(key).is_some_and(|t| !t.state.is_terminal());
            if !live {
                continue;
            }
            if let Some(record) = self.task_mut(key) {
                record.kill_requested = true;
                record.preempted_for = Some(reservation.to_string());
                kills.push(TaskKill {
                    agent_id: record.agent_id.clone(),
                    task: key.clone(),
                    grace_ms: record.spec.kill_grace_ms,
                });
            }
        }
        Ok(if kills.is_empty() {
            CommandOutcome::Unchanged
        } else {
            CommandOutcome::KillsRequested(kills)
        })
    }

    /// Forgets the plan's past before `at_ms` and judges each reservation whose time is over
    /// by the jobs tagged with it that were described before its end: fulfilled if every one
    /// ended by then, late if one did not, unused without any (`Command::CloseReservations`).
    /// A name reused by a later reservation is judged with the jobs of its own time only.
    fn close_reservations(&mut self, at_ms: UnixMillis) -> CommandOutcome {
        let over = self.reservations_mut().forget_before(at_ms);
        if over.is_empty() {
            return CommandOutcome::Applied;
        }
        for (name, reservation, end_ms) in over {
            let (mut jobs, mut late_jobs) = (0_u32, 0_u32);
            let tagged = self
                .frameworks
                .values()
                .flat_map(|framework| &framework.jobs)
                .filter(|job| {
                    job.description.reservation.as_deref() == Some(name.as_str())
                        && job.submitted_at_ms < end_ms
                        && job
                            .ended_at_ms
                            .is_none_or(|ended| ended >= reservation.anchor_ms)
                });
            for job in tagged {
                jobs = jobs.saturating_add(1);
                if job.ended_at_ms.is_none_or(|ended| ended > end_ms) {
                    late_jobs = late_jobs.saturating_add(1);
                }
            }
            let outcome = if jobs == 0 {
                ReservationOutcome::Unused
            } else if late_jobs > 0 {
                ReservationOutcome::Late
            } else {
                ReservationOutcome::Fulfilled
            };
            self.reservations_mut().close(ClosedReservation {
                name,
                principal: reservation.user,
                end_ms,
                jobs,
                late_jobs,
                outcome,
            });
        }
        CommandOutcome::Applied
    }

    fn acknowledge_statuses(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        acks: &[Acknowledged],
    ) -> Result<CommandOutcome, CommandError> {
        self.owned_framework(framework_id, Some(principal))?;
        // Checked first, so that a refused batch changes nothing.
        let mut fresh = Vec::with_capacity(acks.len());
        for ack in acks {
            let key = TaskKey::new(framework_id.clone(), ack.task_id.clone());
            let Some(record) = self.tasks.get(&key) else {
                continue;
            };
            if ack.seq > record.seq {
                return Err(CommandError::AckBeyondLatest {
                    task: key,
                    acked: ack.seq,
                    latest: record.seq,
                });
            }
            if ack.seq > record.acked_seq {
                fresh.push((key, ack.seq));
            }
        }
        if fresh.is_empty() {
            return Ok(CommandOutcome::Unchanged);
        }
        for (key, seq) in fresh {
            // A task named twice in the batch: its higher number may have come first, or
            // retired it.
            let Some(record) = self.task_mut(&key).filter(|r| seq > r.acked_seq) else {
                continue;
            };
            record.acknowledge(seq);
            if record.state.is_terminal() && record.acked_seq == record.seq {
                self.retire_task(&key);
            }
        }
        Ok(CommandOutcome::Applied)
    }

    /// Ends a non-terminal task on the master's decision: releases its charge, then records
    /// the terminal state. Returns the status update for its framework.
    fn end_task(
        &mut self,
        key: &TaskKey,
        state: TaskState,
        reason: StatusReason,
        at_ms: UnixMillis,
    ) -> Result<StatusUpdate, CommandError> {
        let record = self
            .tasks
            .get(key)
            .ok_or_else(|| CommandError::UnknownTask(key.clone()))?;
        let (agent_id, demand) = (record.agent_id.clone(), record.demand);
        self.allocation
            .apply_release(&agent_id, &key.framework_id, demand)?;
        self.finish_task_record(key, state, reason, at_ms)
    }

    /// Records a master-decided terminal state on a task whose charge is already released,
    /// with the next sequence number, and detaches it from its agent and framework.
    fn finish_task_record(
        &mut self,
        key: &TaskKey,
        state: TaskState,
        reason: StatusReason,
        at_ms: UnixMillis,
    ) -> Result<StatusUpdate, CommandError> {
        let record = self
            .task_mut(key)
            .ok_or_else(|| CommandError::UnknownTask(key.clone()))?;
        record.state = state;
        // Agents' numbers are bounded (`MAX_STATUS_SEQ`), so this never saturates in practice;
        // saturating keeps a replayed log from panicking every master if that ever changed.
        record.seq = record.seq.saturating_add(1);
        record.reason = Some(reason.clone());
        record.updated_at_ms = at_ms;
        let update = StatusUpdate {
            task_id: key.task_id.clone(),
            framework_id: key.framework_id.clone(),
            agent_id: record.agent_id.clone(),
            state,
            seq: record.seq,
            reason: Some(reason),
            message: String::new(),
            timestamp_ms: at_ms,
        };
        record.push_unacked(update.clone());
        let agent_id = record.agent_id.clone();
        self.detach_task(key, &agent_id, state);
        Ok(update)
    }

    /// Removes a task that ended (in `state`) from its agent's and its framework's lists of
    /// live tasks, and counts its end in its job's stage.
    fn detach_task(&mut self, key: &TaskKey, agent_id: &AgentId, state: TaskState) {
        self.count_task_end(key, state);
        if let Some(agent) = self.agents.get_mut(agent_id) {
            agent.tasks.remove(key);
        }
        if let Some(framework) = self.frameworks.get_mut(&key.framework_id) {
            framework.active_tasks.remove(&key.task_id);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Operator settings
    // -----------------------------------------------------------------------------------------

    fn set_group_weight(
        &mut self,
        group: &str,
        weight: f64,
    ) -> Result<CommandOutcome, CommandError> {
        if !weight.is_finite() || weight < 0.0 {
            return Err(FairnessError::InvalidWeight {
                group: group.to_string(),
                weight,
            }
            .into());
        }
        limits::check_bytes(|| "a group name".to_string(), group, limits::MAX_ID_BYTES)?;
        self.check_group_room(group)?;
        self.allocation.set_group_weight(group, weight)?;
        self.settings
            .group_weights
            .insert(group.to_string(), weight);
        Ok(CommandOutcome::Applied)
    }

    /// Refuses a group that would be one more than [`MAX_GROUPS`]. Every group that ever had a
    /// weight, a principal or a framework keeps its deficit counter (its index is part of the
    /// accounting), so they all count.
    fn check_group_room(&self, group: &str) -> Result<(), CommandError> {
        let deficits = self.allocation.deficits();
        if deficits.find(group).is_none() && deficits.len() >= MAX_GROUPS {
            return Err(CommandError::TooManyGroups {
                group: group.to_string(),
                limit: MAX_GROUPS,
            });
        }
        Ok(())
    }

    fn set_group(
        &mut self,
        group: &str,
        weight: Option<f64>,
        principals: &[String],
    ) -> Result<CommandOutcome, CommandError> {
        limits::check_bytes(|| "a group name".to_string(), group, limits::MAX_ID_BYTES)?;
        if group.is_empty() {
            return Err(CommandError::InvalidGroup(
                "a group name cannot be empty".into(),
            ));
        }
        if principals.len() > limits::MAX_PAGE_ITEMS {
            return Err(CommandError::InvalidGroup(format!(
                "{} principals in one request, at most {} are allowed",
                principals.len(),
                limits::MAX_PAGE_ITEMS
            )));
        }
        for principal in principals {
            limits::check_bytes(
                || "a principal".to_string(),
                principal,
                limits::MAX_ID_BYTES,
            )?;
            if principal.is_empty() {
                return Err(CommandError::InvalidGroup(
                    "a principal cannot be empty".into(),
                ));
            }
        }
        self.check_group_room(group)?;
        let new_principals = principals
            .iter()
            .filter(|p| !self.settings.principal_groups.contains_key(p.as_str()))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        if self.settings.principal_groups.len() + new_principals > MAX_MAPPED_PRINCIPALS {
            return Err(CommandError::InvalidGroup(format!(
                "{} principals are placed in groups and this adds {new_principals}: at most \
                 {MAX_MAPPED_PRINCIPALS} can be",
                self.settings.principal_groups.len()
            )));
        }
        let weight = match weight {
            Some(weight) => Some(weight),
            // A new group gets its weight recorded, so that it is listed even before a
            // framework joins it.
            None if !self.settings.group_weights.contains_key(group) => Some(1.0),
            None => None,
        };
        if let Some(weight) = weight {
            self.set_group_weight(group, weight)?;
        }
        for principal in principals {
            self.settings
                .principal_groups
                .insert(principal.clone(), group.to_string());
        }
        Ok(CommandOutcome::Applied)
    }

    fn remove_group(
        &mut self,
        group: &str,
        principals: &[String],
    ) -> Result<CommandOutcome, CommandError> {
        if principals.is_empty() {
            let removed_weight = self.settings.group_weights.remove(group).is_some();
            let before = self.settings.principal_groups.len();
            self.settings.principal_groups.retain(|_, g| g != group);
            if removed_weight {
                // Frameworks still in the group keep it, at the default weight.
                self.allocation.set_group_weight(group, 1.0)?;
            }
            return Ok(
                if removed_weight || before != self.settings.principal_groups.len() {
                    CommandOutcome::Applied
                } else {
                    CommandOutcome::Unchanged
                },
            );
        }
        for principal in principals {
            match self.settings.principal_groups.get(principal) {
                Some(g) if g == group => {}
                Some(g) => {
                    return Err(CommandError::InvalidGroup(format!(
                        "principal `{principal}` is in group `{g}`, not `{group}`"
                    )))
                }
                // Already out of every group: removing it again is a retry, not a mistake.
                None => {}
            }
        }
        let before = self.settings.principal_groups.len();
        for principal in principals {
            self.settings.principal_groups.remove(principal);
        }
        Ok(if before != self.settings.principal_groups.len() {
            CommandOutcome::Applied
        } else {
            CommandOutcome::Unchanged
        })
    }

    fn set_quotas(
        &mut self,
        quotas: fullerene_proto::messages::Quotas,
    ) -> Result<CommandOutcome, CommandError> {
        let zero = [
            ("frameworks per principal", quotas.frameworks_per_principal),
            ("tasks per framework", quotas.tasks_per_framework),
            (
                "pending offers per framework",
                quotas.pending_offers_per_framework,
            ),
        ]
        .into_iter()
        .find(|(_, value)| *value == 0);
        if let Some((name, _)) = zero {
            return Err(CommandError::InvalidQuota(format!(
                "the quota of {name} must be at least 1 (0 would stop the cluster)"
            )));
        }
        if self.settings.quotas == quotas {
            return Ok(CommandOutcome::Unchanged);
        }
        // Lowering a quota refuses what would go past it from now on; nothing running is
        // stopped for it.
        self.settings.quotas = quotas;
        Ok(CommandOutcome::Applied)
    }

    fn set_overbooking_allowance(
        &mut self,
        allowance: f64,
    ) -> Result<CommandOutcome, CommandError> {
        if !Overbooking(allowance).is_valid() {
            return Err(CommandError::InvalidAllowance(allowance));
        }
        self.settings.overbooking_allowance = allowance;
        Ok(CommandOutcome::Applied)
    }
}

impl Default for ClusterState {
    fn default() -> ClusterState {
        ClusterState::new(ClusterSettings::default())
    }
}

impl ClusterSettings {
    /// Settings with `factor` and the defaults for the rest.
    pub fn with_factor(factor: FairnessFactor) -> ClusterSettings {
        ClusterSettings {
            fairness_factor: factor,
            ..ClusterSettings::default()
        }
    }
}
