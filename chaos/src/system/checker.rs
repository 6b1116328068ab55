//! The invariant checker: reads a run's recorded history ([`Step`]s) and nothing else, and
//! says which promise of DESIGN.md ("Failure model and invariants") was broken where.
//!
//! It keeps its own model of the world, built from the facts: which processes run where, what
//! every master applied at every index, who led which term, what each framework was handed.
//! Each check is counted, so that a report shows that checks ran, not only that none failed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use fullerene_proto::messages::TaskState;
use fullerene_proto::{AgentId, FrameworkId, ResourceVec, TaskId, TaskKey};
use serde::Serialize;

use super::history::{Accounting, Fact, LogicalTask, Step};

/// The promises checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// At most one leader per term.
    OneLeaderPerTerm,
    /// Every master applies the same entry at an index, and what was applied is never lost:
    /// at the end every master that is up has applied at least every index anyone applied.
    NoCommittedChangeLost,
    /// A framework is handed each task's updates in sequence order, and nothing after a
    /// terminal state.
    UpdatesInOrder,
    /// A task whose agent reported it ended is reported ended to its framework (unless the
    /// framework itself ended first).
    UpdatesDelivered,
    /// At most one running instance of a task, counting the simulated executors' processes
    /// (instances on an agent the leader declared lost do not count until it registers again).
    AtMostOneInstance,
    /// What runs on an agent fits its capacity, in the leader's state and in its executor.
    UsedWithinTotal,
    /// An agent's resources are never offered twice at once: offered plus charged fits its
    /// capacity.
    NoDoubleOffer,
    /// Every deficit counter is within κ·C plus one task's factor.
    DeficitBound,
    /// Every job completes once faults stop, within the run's bound of virtual time.
    JobsComplete,
    /// What the reservation plan allocates never exceeds its capacity, at any quantum
    /// (issue 17).
    PlanWithinCapacity,
    /// A reservation whose jobs have work and hold less than its guarantee is made whole (its
    /// share offered and taken) within the grace period plus [`GUARANTEE_SLACK_MS`], under
    /// one leader (issue 17; a new leader's follower starts its grace afresh).
    GuaranteeOffered,
}

/// How long past the grace period a reservation may stay owed: the follower's interval, a
/// kill's grace on the agent, an offer's round trip and the next cycle.
pub const GUARANTEE_SLACK_MS: u64 = 15_000;

impl Invariant {
    /// Every invariant, in report order.
    pub const ALL: [Invariant; 11] = [
        Invariant::OneLeaderPerTerm,
        Invariant::NoCommittedChangeLost,
        Invariant::UpdatesInOrder,
        Invariant::UpdatesDelivered,
        Invariant::AtMostOneInstance,
        Invariant::UsedWithinTotal,
        Invariant::NoDoubleOffer,
        Invariant::DeficitBound,
        Invariant::JobsComplete,
        Invariant::PlanWithinCapacity,
        Invariant::GuaranteeOffered,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::OneLeaderPerTerm => "one-leader-per-term",
            Invariant::NoCommittedChangeLost => "no-committed-change-lost",
            Invariant::UpdatesInOrder => "updates-in-order",
            Invariant::UpdatesDelivered => "updates-delivered",
            Invariant::AtMostOneInstance => "at-most-one-instance",
            Invariant::UsedWithinTotal => "used-within-total",
            Invariant::NoDoubleOffer => "no-double-offer",
            Invariant::DeficitBound => "deficit-bound",
            Invariant::JobsComplete => "jobs-complete",
            Invariant::PlanWithinCapacity => "plan-within-capacity",
            Invariant::GuaranteeOffered => "guarantee-offered",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken promise: which, at which step of the history, and how.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    /// The invariant.
    pub invariant: Invariant,
    /// The index of the step in the history where it was seen.
    pub step: usize,
    /// What was wrong.
    pub detail: String,
}

/// What the checker did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    /// Checks run, by invariant.
    pub checks: BTreeMap<Invariant, u64>,
    /// What it found.
    pub violations: Vec<Violation>,
}

/// Floating-point slack for deficit counters (resource sums use the fit rule's own).
const EPSILON: f64 = 1e-6;

#[derive(Default)]
struct Model {
    report: CheckReport,
    leaders: BTreeMap<u64, u64>,
    applied: BTreeMap<u64, (u64, u64)>,
    max_applied: u64,
    capacity: BTreeMap<AgentId, (ResourceVec, f64)>,
    /// Running processes: agent -> (framework, attempt) -> demand.
    running: BTreeMap<AgentId, BTreeMap<TaskKey, ResourceVec>>,
    lost: BTreeSet<AgentId>,
    /// Instances a returning agent was told to kill, until they end.
    dying: BTreeSet<(AgentId, TaskKey)>,
    delivered: BTreeMap<TaskKey, (u64, TaskState)>,
    terminal_delivered: BTreeSet<TaskKey>,
    terminal_sent: BTreeMap<TaskKey, usize>,
    ended_frameworks: BTreeSet<FrameworkId>,
    completed_frameworks: BTreeSet<FrameworkId>,
    submitted: BTreeSet<String>,
    completed: BTreeSet<String>,
    /// Since when (leader's term, virtual ms) each reservation has been owed continuously.
    owed_since: BTreeMap<String, (u64, u64)>,
}

impl Model {
    fn check(&mut self, invariant: Invariant) {
        *self.report.checks.entry(invariant).or_default() += 1;
    }

    fn violate(&mut self, invariant: Invariant, step: usize, detail: String) {
        self.report.violations.push(Violation {
            invariant,
            step,
            detail,
        });
    }

    fn leader(&mut self, step: usize, master: u64, term: u64) {
        self.check(Invariant::OneLeaderPerTerm);
        match self.leaders.get(&term) {
            Some(&other) if other != master => self.violate(
                Invariant::OneLeaderPerTerm,
                step,
                format!("masters {other} and {master} both lead term {term}"),
            ),
            Some(_) => {}
            None => {
                self.leaders.insert(term, master);
            }
        }
    }

    fn applied(&mut self, step: usize, master: u64, index: u64, term: u64, digest: u64) {
        self.check(Invariant::NoCommittedChangeLost);
        match self.applied.get(&index) {
            Some(&(t, d)) if (t, d) != (term, digest) => self.violate(
                Invariant::NoCommittedChangeLost,
                step,
                format!(
                    "master {master} applied term {term} ({digest:016x}) at index {index}, \
                     where another applied term {t} ({d:016x})"
                ),
            ),
            Some(_) => {}
            None => {
                self.applied.insert(index, (term, digest));
                self.max_applied = self.max_applied.max(index);
            }
        }
    }

    /// Counts the running instances of `task`, not counting agents declared lost.
    fn instances(&self, task: &LogicalTask) -> Vec<(AgentId, TaskId)> {
        let mut found = Vec::new();
        for (agent, processes) in &self.running {
            if self.lost.contains(agent) {
                continue;
            }
            for key in processes.keys() {
                if self.dying.contains(&(agent.clone(), key.clone())) {
                    continue;
                }
                if LogicalTask::of(&key.framework_id, &key.task_id) == *task {
                    found.push((agent.clone(), key.task_id.clone()));
                }
            }
        }
        found
    }

    fn check_instances(&mut self, step: usize, task: &LogicalTask) {
        self.check(Invariant::AtMostOneInstance);
        let found = self.instances(task);
        if found.len() > 1 {
            self.violate(
                Invariant::AtMostOneInstance,
                step,
                format!(
                    "{} of {} {} run at once: {found:?}",
                    found.len(),
                    task.framework_id,
                    task.task
                ),
            );
        }
    }

    fn spawned(&mut self, step: usize, agent: &AgentId, key: TaskKey, demand: ResourceVec) {
        let task = LogicalTask::of(&key.framework_id, &key.task_id);
        self.running
            .entry(agent.clone())
            .or_default()
            .insert(key, demand);
        self.check_instances(step, &task);
        self.check(Invariant::UsedWithinTotal);
        let used = self.running[agent]
            .values()
            .fold(ResourceVec::ZERO, |sum, d| sum + *d);
        if let Some((total, allowance)) = self.capacity.get(agent).copied() {
            if !used.fits_with_overbooking(&total, allowance) {
                self.violate(
                    Invariant::UsedWithinTotal,
                    step,
                    format!("{agent} runs processes using {used}, more than its {total}"),
                );
            }
        }
    }

    fn rejoined(&mut self, step: usize, agent: &AgentId, killing: &[TaskKey]) {
        self.lost.remove(agent);
        for task in killing {
            let running = self
                .running
                .get(agent)
                .is_some_and(|p| p.contains_key(task));
            if running {
                self.dying.insert((agent.clone(), task.clone()));
            }
        }
        let tasks: BTreeSet<LogicalTask> = self
            .running
            .get(agent)
            .into_iter()
            .flat_map(|p| p.keys())
            .map(|key| LogicalTask::of(&key.framework_id, &key.task_id))
            .collect();
        for task in tasks {
            self.check_instances(step, &task);
        }
    }

    fn delivered(&mut self, step: usize, key: TaskKey, seq: u64, state: TaskState) {
        self.check(Invariant::UpdatesInOrder);
        if let Some(&(last_seq, last_state)) = self.delivered.get(&key) {
            if seq <= last_seq {
                self.violate(
                    Invariant::UpdatesInOrder,
                    step,
                    format!(
                        "{} {} was handed #{seq} {state:?} after #{last_seq} {last_state:?}",
                        key.framework_id, key.task_id
                    ),
                );
            } else if last_state.is_terminal() {
                self.violate(
                    Invariant::UpdatesInOrder,
                    step,
                    format!(
                        "{} {} was handed #{seq} {state:?} after its end #{last_seq} {last_state:?}",
                        key.framework_id, key.task_id
                    ),
                );
            }
        }
        if state.is_terminal() {
            self.terminal_delivered.insert(key.clone());
        }
        self.delivered.insert(key, (seq, state));
    }

    fn reservations(&mut self, step: usize, at_ms: u64, accounting: &Accounting) {
        self.check(Invariant::PlanWithinCapacity);
        if let Some((quantum, used, capacity)) = &accounting.plan_excess {
            self.violate(
                Invariant::PlanWithinCapacity,
                step,
                format!(
                    "leader {}'s plan allocates {used} at quantum {quantum}, more than its \
                     capacity {capacity}",
                    accounting.master
                ),
            );
        }
        // One check a sample: no reservation in it has been owed past the bound (the clocks of
        // the shortfalls it ends are dropped, those of a previous leader's term too).
        self.check(Invariant::GuaranteeOffered);
        let owed: BTreeSet<&String> = accounting
            .reservations_owed
            .iter()
            .map(|(r, _)| r)
            .collect();
        self.owed_since
            .retain(|name, (term, _)| owed.contains(name) && *term == accounting.term);
        for (name, amount) in &accounting.reservations_owed {
            let (_, since) = *self
                .owed_since
                .entry(name.clone())
                .or_insert((accounting.term, at_ms));
            let bound = accounting.reservation_grace_ms + GUARANTEE_SLACK_MS;
            if at_ms.saturating_sub(since) > bound {
                self.violate(
                    Invariant::GuaranteeOffered,
                    step,
                    format!(
                        "reservation {name} is still owed {amount} after {} ms under leader {} \
                         (grace {} ms)",
                        at_ms - since,
                        accounting.master,
                        accounting.reservation_grace_ms
                    ),
                );
                // Reported once per shortfall.
                self.owed_since
                    .insert(name.clone(), (accounting.term, at_ms));
            }
        }
    }

    fn accounting(&mut self, step: usize, accounting: &Accounting) {
        for account in &accounting.agents {
            self.check(Invariant::UsedWithinTotal);
            let room = account.total;
            if !account
                .used
                .fits_with_overbooking(&room, accounting.allowance)
            {
                self.violate(
                    Invariant::UsedWithinTotal,
                    step,
                    format!(
                        "leader {} charges {} with {}, more than its {}",
                        accounting.master, account.agent, account.used, account.total
                    ),
                );
            }
            self.check(Invariant::NoDoubleOffer);
            let promised = account.used + account.offered;
            if !promised.fits_with_overbooking(&room, accounting.allowance) {
                self.violate(
                    Invariant::NoDoubleOffer,
                    step,
                    format!(
                        "leader {} offers {} of {} while charging {}: more than its {}",
                        accounting.master,
                        account.offered,
                        account.agent,
                        account.used,
                        account.total
                    ),
                );
            }
        }
        for (group, deficit) in &accounting.deficits {
            self.check(Invariant::DeficitBound);
            if *deficit > accounting.deficit_bound + EPSILON {
                self.violate(
                    Invariant::DeficitBound,
                    step,
                    format!(
                        "group {group}'s deficit {deficit:.4} is over the bound {:.4}",
                        accounting.deficit_bound
                    ),
                );
            }
        }
    }

    fn end(&mut self, step: usize, applied: &[(u64, u64)], live: &[FrameworkId]) {
        for &(master, index) in applied {
            self.check(Invariant::NoCommittedChangeLost);
            if index < self.max_applied {
                self.violate(
                    Invariant::NoCommittedChangeLost,
                    step,
                    format!(
                        "master {master} ends at index {index}, behind index {} that was applied",
                        self.max_applied
                    ),
                );
            }
        }
        let live: BTreeSet<&FrameworkId> = live.iter().collect();
        let sent: Vec<(TaskKey, usize)> = self
            .terminal_sent
            .iter()
            .map(|(k, s)| (k.clone(), *s))
            .collect();
        for (key, sent_at) in sent {
            let framework_went_on = live.contains(&key.framework_id)
                || self.completed_frameworks.contains(&key.framework_id);
            if !framework_went_on || self.ended_frameworks.contains(&key.framework_id) {
                continue;
            }
            self.check(Invariant::UpdatesDelivered);
            if !self.terminal_delivered.contains(&key) {
                self.violate(
                    Invariant::UpdatesDelivered,
                    step,
                    format!(
                        "the end of {} {} (sent at step {sent_at}) never reached its framework",
                        key.framework_id, key.task_id
                    ),
                );
            }
        }
        let submitted: Vec<String> = self.submitted.iter().cloned().collect();
        for job in submitted {
            self.check(Invariant::JobsComplete);
            if !self.completed.contains(&job) {
                self.violate(
                    Invariant::JobsComplete,
                    step,
                    format!("job {job} did not complete once faults stopped"),
                );
            }
        }
    }
}

/// Checks every invariant over `history`.
pub fn check(history: &[Step]) -> CheckReport {
    let mut model = Model::default();
    for (step, Step { fact, at }) in history.iter().enumerate() {
        match fact {
            Fact::Fault { .. }
            | Fact::Shell { .. }
            | Fact::FaultsStopped
            | Fact::MasterCrashed { .. } => {}
            Fact::Leader { master, term } => model.leader(step, *master, *term),
            Fact::Applied {
                master,
                index,
                term,
                digest,
            } => model.applied(step, *master, *index, *term, *digest),
            Fact::AgentCapacity {
                agent,
                total,
                allowance,
            } => {
                model.capacity.insert(agent.clone(), (*total, *allowance));
            }
            Fact::Spawned {
                agent,
                framework_id,
                task_id,
                demand,
            } => model.spawned(
                step,
                agent,
                TaskKey::new(framework_id.clone(), task_id.clone()),
                *demand,
            ),
            Fact::ProcessEnded {
                agent,
                framework_id,
                task_id,
            } => {
                let key = TaskKey::new(framework_id.clone(), task_id.clone());
                if let Some(processes) = model.running.get_mut(agent) {
                    processes.remove(&key);
                }
                model.dying.remove(&(agent.clone(), key));
            }
            Fact::AgentLost { agent } => {
                model.lost.insert(agent.clone());
            }
            Fact::AgentRejoined { agent, killing } => model.rejoined(step, agent, killing),
            Fact::UpdateSent {
                framework_id,
                task_id,
                state,
                ..
            } => {
                if state.is_terminal() {
                    model
                        .terminal_sent
                        .entry(TaskKey::new(framework_id.clone(), task_id.clone()))
                        .or_insert(step);
                }
            }
            Fact::UpdateDelivered {
                framework_id,
                task_id,
                seq,
                state,
            } => model.delivered(
                step,
                TaskKey::new(framework_id.clone(), task_id.clone()),
                *seq,
                *state,
            ),
            Fact::FrameworkRegistered { .. } => {}
            Fact::FrameworkTakenOver { framework_id } => {
                model
                    .delivered
                    .retain(|key, _| key.framework_id != *framework_id);
            }
            Fact::FrameworkEnded { framework_id, .. } => {
                if let Some(id) = framework_id {
                    model.ended_frameworks.insert(id.clone());
                }
            }
            Fact::JobSubmitted { job } => {
                model.submitted.insert(job.clone());
            }
            Fact::JobCompleted { job, framework_id } => {
                model.completed.insert(job.clone());
                model.completed_frameworks.insert(framework_id.clone());
            }
            Fact::Accounting(accounting) => {
                model.accounting(step, accounting);
                model.reservations(step, at.as_millis(), accounting);
            }
            Fact::End {
                applied,
                live_frameworks,
            } => model.end(step, applied, live_frameworks),
        }
    }
    model.report
}
