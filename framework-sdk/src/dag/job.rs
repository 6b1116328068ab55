//! The sans-IO core of one DAG job run as its own framework: given offers, status updates and
//! failed calls (with the time in milliseconds), what to send the master.
//!
//! It keeps the job's [`JobState`] and the same [`JobPolicy`] the simulator uses
//! (`sim/src/framework.rs`), built by [`policy::build`] from Graphene's offline plan: the plan
//! is made when the cluster's shape is first known (from the first offers, unless configured)
//! and re-made over what is left of the DAG ([`plan_remaining`]) after tasks are lost
//! (DESIGN.md, "a task's life", steps 2, 4 and 7).
//!
//! Policies reason in the job's own seconds (the durations of the workload file); tasks run
//! for their durations times `time_scale`, so the core's clock for the policies is the real
//! time since submission divided by `time_scale`.

use fullerene_proto::jobs::{JobDescription, JobEnd, StageDescription};
use std::collections::BTreeSet;

use fullerene_proto::messages::{
    DemandSummary, ErrorCode, FrameworkRequest, Leftover, Offer, StatusUpdate, TaskState,
    WireError, MAX_RECONCILE_TASK_IDS,
};
use fullerene_proto::time::secs_f64;
use fullerene_proto::{FrameworkId, ResourceVec, TaskId, Time};
use serde::Serialize;

use super::attempts::{parse_task_id, AttemptEnd, Attempts, TEXT_PLACEHOLDERS};
pub use super::common::MAX_REFUSED_ACCEPTS;
use super::common::{count_refused_accept, decline_for_good, read_offers, transient, Machines};
use super::journal::Record;
use super::template::{self, TemplateError};
use crate::job::{Job, TaskRef};
use crate::planner::{plan_remaining, PlanCluster, PlanError, PlannerConfig};
use crate::policy::{
    self, JobPolicy, JobState, LeftoverAction, OfferContext, PolicyError, PolicyKind, PolicyParams,
    TaskStatus,
};
use crate::reserve::ReservationAtoms;
use fullerene_proto::messages::ReservationProgress;
use fullerene_reservation::Expr;

/// How each task runs on its agent.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutorTemplate {
    /// The agents' built-in `sleep` executor, for the task's duration × `time_scale`.
    Sleep,
    /// `sh -c TEMPLATE`, with `{job}`, `{stage}` (id), `{stage_name}`, `{index}`, `{attempt}`,
    /// `{duration_s}` and `{duration_ms}` (scaled) replaced: the names single-quoted as one
    /// shell word each (so do not quote them again in the template), the numbers bare
    /// (see [`super::template`]).
    Command(String),
}

/// How the DAG-job framework runs a job.
#[derive(Clone, Debug, PartialEq)]
pub struct DagConfig {
    /// The intra-job policy (the allocator's half of the scheme is the master's).
    pub policy: PolicyKind,
    /// The policies' parameters.
    pub params: PolicyParams,
    /// Graphene's offline planner.
    pub planner: PlannerConfig,
    /// What each task runs.
    pub executor: ExecutorTemplate,
    /// Real seconds per second of the workload's durations (0.1 runs ten times faster).
    pub time_scale: f64,
    /// Attempts a task gets before the job fails (FAILED, LOST or KILLED each end one).
    pub max_attempts: u32,
    /// How long an offer declined while nothing is runnable is refused.
    pub idle_refuse_ms: u64,
    /// The cluster to plan for; `None`: the agents seen in offers, each with the most it ever
    /// offered (at least the job's largest task, so that planning never fails on a partial
    /// view).
    pub plan_cluster: Option<PlanCluster>,
    /// Jobs running at once: the job's fair share is estimated as the cluster over this (the
    /// master does not tell frameworks their share; Carbyne §3.3.1 needs an estimate).
    pub concurrent_jobs: usize,
    /// Grace between the polite signal and the kill, for tasks this framework kills.
    pub kill_grace_ms: u64,
}

impl DagConfig {
    /// Checks what every job run with this configuration relies on: a time scale that is a
    /// number > 0, at least one attempt, and a command template that keeps names quoted.
    pub fn validate(&self) -> Result<(), DagError> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(DagError::TimeScale(self.time_scale));
        }
        if self.max_attempts == 0 {
            return Err(DagError::MaxAttempts);
        }
        if let ExecutorTemplate::Command(template) = &self.executor {
            template::check(template, |name| TEXT_PLACEHOLDERS.contains(&name))?;
        }
        Ok(())
    }
}

impl Default for DagConfig {
    fn default() -> DagConfig {
        DagConfig {
            policy: PolicyKind::GrapheneCarbyne,
            params: PolicyParams::default(),
            planner: PlannerConfig::default(),
            executor: ExecutorTemplate::Sleep,
            time_scale: 1.0,
            max_attempts: 3,
            idle_refuse_ms: 1_000,
            plan_cluster: None,
            concurrent_jobs: 1,
            kill_grace_ms: 2_000,
        }
    }
}

/// Why a job cannot be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DagError {
    /// The policy could not be built.
    #[error("job `{job}`: {source}")]
    Policy {
        /// The job.
        job: String,
        /// Why.
        source: PolicyError,
    },
    /// Graphene's planner refused the job.
    #[error("job `{job}`: planning failed: {source}")]
    Plan {
        /// The job.
        job: String,
        /// Why.
        source: PlanError,
    },
    /// A time scale that is not a positive number.
    #[error("time scale {0} must be a finite number > 0")]
    TimeScale(f64),
    /// No attempt at all.
    #[error("max attempts must be at least 1")]
    MaxAttempts,
    /// A command template that would not keep names quoted.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// Where a job is.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JobOutcome {
    /// Tasks remain.
    Running,
    /// Every task finished; `jct_ms` from submission to the last FINISHED.
    Finished {
        /// Job completion time, milliseconds.
        jct_ms: u64,
    },
    /// A task ran out of attempts (or the framework could not go on).
    Failed {
        /// What happened.
        reason: String,
    },
}

/// A snapshot of a job's progress, for progress bars and reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobProgress {
    /// The job's name.
    pub name: String,
    /// Its fairness group.
    pub group: String,
    /// Tasks in the job.
    pub tasks: usize,
    /// Tasks finished.
    pub finished: usize,
    /// Tasks launched and not yet ended.
    pub running: usize,
    /// Task attempts that ended without success (retried or not), preempted ones aside.
    pub failed_attempts: u64,
    /// Task attempts the masters killed for a reservation (retried, never counted against
    /// `max_attempts`: the task did nothing wrong).
    pub preempted_attempts: u64,
    /// Where it is.
    pub outcome: JobOutcome,
}

/// One job's decisions (see the module documentation).
pub struct DagJob {
    job: Job,
    config: DagConfig,
    state: JobState,
    policy: Option<Box<dyn JobPolicy>>,
    pri_scores: Option<Vec<Vec<f64>>>,
    replan: bool,
    machines: Machines,
    /// The launches of the job's tasks, their ids and failures.
    attempts: Attempts,
    submitted: Time,
    outcome: JobOutcome,
    last_demand: Option<DemandSummary>,
    had_runnable: bool,
    /// Accepts the master refused since the last status update of one of this job's tasks
    /// (refusals for a while aside: `count_refused_accept`).
    refused_in_a_row: u32,
    /// Launches whose accept's outcome is unknown (the session was lost before its answer)
    /// and of which no update has come since: reconciled explicitly after every
    /// (re)subscription until one does, since the implicit reconciliation answers only for
    /// the tasks the master knows, and one explicit reconcile may itself be lost with its
    /// session.
    unconfirmed: BTreeSet<TaskId>,
    /// Of those, the ones whose explicit reconcile is already asked for and will go out on
    /// the next session (the driver holds calls made while disconnected): the next
    /// subscription does not ask again.
    reconcile_queued: BTreeSet<TaskId>,
    /// The reservation the job runs in, told to the masters in its description.
    reservation: Option<String>,
    /// When that reservation was asked for with the job's own request
    /// ([`crate::reserve::job_reservation`]), the stage of each of its atoms: the demand
    /// summaries then say which the job has finished.
    own_reservation: Option<ReservationAtoms>,
}

impl std::fmt::Debug for DagJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DagJob")
            .field("job", &self.job.name)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

impl DagJob {
    /// A job submitted at `now` (on the clock every later call's time is read from). With a
    /// configured plan cluster, plans now (so that a job the planner refuses is refused before
    /// anything runs).
    pub fn new(job: Job, config: DagConfig, now: Time) -> Result<DagJob, DagError> {
        config.validate()?;
        let state = JobState::new(&job);
        let mut dag = DagJob {
            job,
            config,
            state,
            policy: None,
            pri_scores: None,
            replan: false,
            machines: Machines::default(),
            attempts: Attempts::new(),
            submitted: now,
            outcome: JobOutcome::Running,
            refused_in_a_row: 0,
            last_demand: None,
            had_runnable: true,
            unconfirmed: BTreeSet::new(),
            reconcile_queued: BTreeSet::new(),
            reservation: None,
            own_reservation: None,
        };
        if !dag.config.policy.needs_pri_scores() || dag.config.plan_cluster.is_some() {
            dag.ensure_policy()?;
        }
        Ok(dag)
    }

    /// The job.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// Where the job is.
    pub fn outcome(&self) -> &JobOutcome {
        &self.outcome
    }

    /// True once the job finished or failed.
    pub fn is_done(&self) -> bool {
        self.outcome != JobOutcome::Running
    }

    /// Runs the job inside the reservation `name` (one an operator or the job's owner created
    /// with `fullerene reservation create`; several jobs may share one), or as best effort
    /// (`None`, the default). The masters refuse the job's description if they have accepted
    /// no reservation of that name, and the job then fails (its framework torn down) rather
    /// than run as best effort.
    pub fn with_reservation(mut self, name: Option<String>) -> DagJob {
        self.set_reservation(name);
        self
    }

    /// [`DagJob::with_reservation`] on a running job: the next description names it.
    pub fn set_reservation(&mut self, name: Option<String>) {
        self.reservation = name;
        self.own_reservation = None;
    }

    /// [`DagJob::set_reservation`] for a reservation the masters accepted for the job's own
    /// request `expr` ([`crate::reserve::job_reservation`], its atoms the stages of its DAG):
    /// from now on its demand summaries tell the masters which atoms it has finished
    /// ([`crate::reserve::ReservationAtoms`]), so that the plan follower owes the reservation
    /// only the allocations of the atoms left, with the request's atom count, so that the
    /// masters ignore the progress if the reservation is replaced by one of another shape. A
    /// request not of the job's form is joined without progress, as
    /// [`DagJob::set_reservation`] does.
    pub fn set_own_reservation(&mut self, name: String, expr: &Expr) {
        self.own_reservation = ReservationAtoms::of(&self.job, expr);
        if self.own_reservation.is_none() {
            tracing::warn!(job = %self.job.name, reservation = %name, "the request is not of the job's form: its progress is not reported, and the reservation stays owed in full");
        }
        self.reservation = Some(name);
    }

    /// The reservation the job runs in, if any.
    pub fn reservation(&self) -> Option<&str> {
        self.reservation.as_deref()
    }

    /// The job as the masters are told of it (`FrameworkRequest::DescribeJob`): its stages
    /// with their ids (the `stage` of its tasks' origins), sizes and parents, the policy, and
    /// the reservation it runs in.
    pub fn description(&self) -> JobDescription {
        describe(
            &self.job,
            self.config.policy.name(),
            self.reservation.clone(),
        )
    }

    /// How the job ended, as the masters are told (`FrameworkRequest::EndJob`); `None` while
    /// it runs.
    pub fn end(&self) -> Option<JobEnd> {
        match &self.outcome {
            JobOutcome::Running => None,
            JobOutcome::Finished { .. } => Some(JobEnd::Finished),
            JobOutcome::Failed { reason } => Some(JobEnd::Failed {
                reason: reason.clone(),
            }),
        }
    }

    /// A progress snapshot.
    pub fn progress(&self) -> JobProgress {
        JobProgress {
            name: self.job.name.clone(),
            group: self.job.group.clone(),
            tasks: self.state.num_tasks(),
            finished: self.state.num_finished(),
            running: self.state.num_running(),
            failed_attempts: self.attempts.failed_attempts(),
            preempted_attempts: self.attempts.preempted_attempts(),
            outcome: self.outcome.clone(),
        }
    }

    /// What to send once subscribed: the demand, so that the allocator offers.
    pub fn on_subscribed(&mut self) -> Vec<FrameworkRequest> {
        self.last_demand = None;
        let mut out = Vec::new();
        let queued = std::mem::take(&mut self.reconcile_queued);
        let task_ids: Vec<TaskId> = self.unconfirmed.difference(&queued).cloned().collect();
        push_reconciles(task_ids, &mut out);
        self.push_demand(&mut out);
        out
    }

    /// Takes up where an earlier process of this framework left off (framework failover),
    /// from its [journal](super::journal): launch numbers already used are never used again,
    /// finished tasks count as finished (replayed in the order they finished, which the DAG
    /// allowed), and the launches with no recorded end count as running and are reconciled on
    /// the next subscription: the master's answer says whether they still run, ended, or never
    /// started (then they are launched again under a new id). Returns the framework id to subscribe with, if one was
    /// recorded. Records naming no task of this job are skipped with a warning.
    pub fn restore(&mut self, records: &[Record]) -> Option<FrameworkId> {
        let mut framework_id = None;
        let mut ended = BTreeSet::new();
        for record in records {
            match record {
                Record::Subscribed(id) => framework_id = Some(id.clone()),
                // A framework per job: its job's end is its framework's.
                Record::JobEnded(_) => {}
                Record::Launched(id) => {
                    let Some((task, launch)) = parse_task_id(&self.job, id) else {
                        tracing::warn!(task = %id, "journal names a task of another job; skipped");
                        continue;
                    };
                    self.attempts.restore(id.clone(), task, launch);
                }
                Record::Finished(id) => {
                    let Some((task, _)) = parse_task_id(&self.job, id) else {
                        tracing::warn!(task = %id, "journal names a task of another job; skipped");
                        continue;
                    };
                    if self.state.try_mark_launched(task, 0, 0.0).is_ok() {
                        self.state.mark_finished(&self.job, task, 0.0);
                    }
                    ended.insert(task);
                }
            }
        }
        // A launch with no recorded end runs until the master says otherwise: it is never
        // launched again while it may still run (at most one instance).
        let open: Vec<(TaskId, TaskRef)> = self
            .attempts
            .launches()
            .filter(|(_, task, launch)| {
                !ended.contains(task) && self.attempts.is_current(*task, *launch)
            })
            .map(|(id, task, _)| (id.clone(), task))
            .collect();
        for (id, task) in open {
            if self.state.try_mark_launched(task, 0, 0.0).is_ok() {
                self.unconfirmed.insert(id);
            }
        }
        if self.state.is_complete() {
            self.outcome = JobOutcome::Finished { jct_ms: 0 };
        }
        self.replan = true;
        framework_id
    }

    /// The framework could not go on (its driver stopped): the job fails with `reason`.
    pub fn fail(&mut self, reason: impl Into<String>) {
        if !self.is_done() {
            self.outcome = JobOutcome::Failed {
                reason: reason.into(),
            };
        }
    }

    /// Answers offers: a bundle per offer chosen by the policy, the rest declined or yielded
    /// as the policy says.
    pub fn on_offers(&mut self, offers: &[Offer], now: Time) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        let usable = read_offers(offers, self.config.idle_refuse_ms, &mut out);
        for (offer, free) in &usable {
            self.machines.saw(&offer.agent_id, free);
        }
        if self.is_done() {
            out.push(decline_for_good(usable.iter().map(|(o, _)| o.id).collect()));
            return out;
        }
        if let Err(error) = self.ensure_policy() {
            self.outcome = JobOutcome::Failed {
                reason: error.to_string(),
            };
            out.push(decline_for_good(usable.iter().map(|(o, _)| o.id).collect()));
            out.push(FrameworkRequest::Suppress);
            return out;
        }
        let now_s = self.job_seconds(now);
        let cluster_capacity = self.cluster_capacity();
        // Carbyne's A_k as the master computed it; a master that sends none (or one that does
        // not parse) leaves the job an equal split among the jobs it runs with.
        let equal_split = cluster_capacity.scale(1.0 / self.config.concurrent_jobs.max(1) as f64);
        for (offer, free) in usable {
            let fair_share = offer
                .fair_share
                .to_vec()
                .ok()
                .filter(|share| !share.is_zero())
                .unwrap_or(equal_split);
            let Some(machine) = self.machines.get(&offer.agent_id) else {
                continue;
            };
            let (index, capacity) = (machine.index, machine.capacity);
            let context = OfferContext {
                machine: index,
                free,
                capacity,
                kind: offer.kind,
                now_s,
                cluster_capacity,
                fair_share,
                // The masters name a reservation only on offers made out of its guarantee to
                // the framework whose job runs in it.
                guaranteed: offer.reservation.is_some(),
            };
            let Some(policy) = self.policy.as_mut() else {
                break;
            };
            let decision = policy.on_offer(&self.job, &self.state, &context);
            let mut seen = BTreeSet::new();
            let mut tasks = Vec::with_capacity(decision.launch.len());
            for task in decision.launch {
                // The policy's contract; checked anyway since the master would refuse the
                // whole bundle for one bad task.
                if !seen.insert(task) || !self.state.is_runnable(task) {
                    tracing::warn!(?task, "policy chose a task that is not runnable; skipped");
                    continue;
                }
                self.state.mark_launched(task, index, now_s);
                tasks.push(self.attempts.launch(&self.job, &self.config, task));
            }
            let leftover = match decision.leftover {
                LeftoverAction::Decline => Leftover::Decline { refuse_ms: 0 },
                LeftoverAction::Yield => Leftover::Yield,
            };
            out.push(if !tasks.is_empty() {
                FrameworkRequest::Accept {
                    offer_ids: vec![offer.id],
                    tasks,
                    leftover,
                }
            } else if decision.leftover == LeftoverAction::Yield {
                FrameworkRequest::Yield {
                    offer_ids: vec![offer.id],
                }
            } else {
                let refuse_ms = if self.state.num_runnable() == 0 {
                    self.config.idle_refuse_ms
                } else {
                    0
                };
                FrameworkRequest::Decline {
                    offer_ids: vec![offer.id],
                    refuse_ms,
                }
            });
        }
        self.push_demand(&mut out);
        out
    }

    /// Takes a task's new status into account.
    pub fn on_update(&mut self, update: &StatusUpdate, now: Time) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        self.unconfirmed.remove(&update.task_id);
        self.reconcile_queued.remove(&update.task_id);
        let Some((task, launch)) = self.attempts.attempt(&update.task_id) else {
            tracing::debug!(task = %update.task_id, "update for a task this job does not know");
            return out;
        };
        self.refused_in_a_row = 0;
        // A late report of an earlier attempt: that attempt was already given up on.
        if !self.attempts.is_current(task, launch)
            || self.state.status(task) != Some(TaskStatus::Running)
        {
            return out;
        }
        let now_s = self.job_seconds(now);
        match update.state {
            TaskState::Staging | TaskState::Running => return out,
            TaskState::Finished => {
                self.state.mark_finished(&self.job, task, now_s);
                if self.state.is_complete() && !self.is_done() {
                    self.outcome = JobOutcome::Finished {
                        jct_ms: now.as_millis().saturating_sub(self.submitted.as_millis()),
                    };
                    out.push(FrameworkRequest::Suppress);
                }
            }
            TaskState::Failed | TaskState::Lost | TaskState::Killed => {
                let end = self
                    .attempts
                    .ended(&self.job, task, update, self.config.max_attempts);
                self.state.mark_lost(task);
                match end {
                    AttemptEnd::OutOfAttempts(reason) if !self.is_done() => {
                        self.give_up(reason, &mut out);
                        return out;
                    }
                    _ => self.replan = true,
                }
            }
        }
        if self.is_done() {
            return out;
        }
        self.push_demand(&mut out);
        out
    }

    /// A call failed: tasks of an accept the master refused become runnable again; those of
    /// an accept whose outcome is unknown are reconciled explicitly (the master answers LOST
    /// for the ones it never launched).
    pub fn on_call_failed(
        &mut self,
        request: &FrameworkRequest,
        error: &WireError,
    ) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        if let FrameworkRequest::UpdateDemand(_) = request {
            if !transient(error.code) && self.last_demand.as_ref() == Some(&self.demand()) {
                // Refused for good: the same summary would be refused again, in a busy loop.
                // The next one that differs goes out (the masters say what was wrong).
                tracing::warn!(job = %self.job.name, %error, "the masters refused the job's demand summary");
                return out;
            }
            // The master may not know what the job wants (a rate-limited summary, a lost
            // session): send the current one again, or the allocator offers it nothing and the
            // job stalls.
            self.last_demand = None;
            if !self.is_done() {
                self.push_demand(&mut out);
            }
            return out;
        }
        let FrameworkRequest::Accept { tasks, .. } = request else {
            return out;
        };
        let mut unknown = Vec::new();
        for spec in tasks {
            let Some(task) = self.attempts.current_task(&spec.id) else {
                continue;
            };
            if self.state.status(task) != Some(TaskStatus::Running) {
                continue;
            }
            if error.code == ErrorCode::OutcomeUnknown {
                unknown.push(spec.id.clone());
            } else {
                self.state.mark_lost(task);
            }
        }
        if let Some(reason) = count_refused_accept(&mut self.refused_in_a_row, error) {
            self.fail(reason);
            return out;
        }
        if !unknown.is_empty() {
            self.unconfirmed.extend(unknown.iter().cloned());
            self.reconcile_queued.extend(unknown.iter().cloned());
            push_reconciles(unknown, &mut out);
        }
        if !self.is_done() {
            self.push_demand(&mut out);
        }
        out
    }

    /// Ids of the tasks launched and not known to have ended (to kill them, or reconcile).
    pub fn running_task_ids(&self) -> Vec<TaskId> {
        let mut ids: Vec<TaskId> = self
            .state
            .running_tasks()
            .filter_map(|(task, _, _)| self.attempts.current_id(&self.job, task))
            .collect();
        ids.sort();
        ids
    }

    /// A task ran out of attempts: the job fails with `reason`, and what still runs of it is
    /// killed.
    fn give_up(&mut self, reason: String, out: &mut Vec<FrameworkRequest>) {
        self.outcome = JobOutcome::Failed { reason };
        for task_id in self.running_task_ids() {
            out.push(FrameworkRequest::Kill { task_id });
        }
        out.push(FrameworkRequest::Suppress);
    }

    /// Builds the policy, planning first when it follows Graphene's plan; re-plans what is
    /// left after losses.
    fn ensure_policy(&mut self) -> Result<(), DagError> {
        if self.policy.is_some() && !self.replan {
            return Ok(());
        }
        let kind = self.config.policy;
        if !kind.needs_pri_scores() {
            match self.policy.as_mut() {
                Some(policy) => policy.replan(&self.job, &self.state),
                None => {
                    let policy = policy::build(kind, &self.job, None, &self.config.params)
                        .map_err(|source| DagError::Policy {
                            job: self.job.name.clone(),
                            source,
                        })?;
                    self.policy = Some(policy);
                }
            }
            self.replan = false;
            return Ok(());
        }
        let cluster = self.plan_cluster();
        let state = &self.state;
        let plan = plan_remaining(&self.job, &cluster, &self.config.planner, &|t| {
            state.status(t) == Some(TaskStatus::Finished)
        })
        .map_err(|source| DagError::Plan {
            job: self.job.name.clone(),
            source,
        })?;
        let policy = policy::build(
            kind,
            &self.job,
            Some(plan.pri_scores.clone()),
            &self.config.params,
        )
        .map_err(|source| DagError::Policy {
            job: self.job.name.clone(),
            source,
        })?;
        self.pri_scores = Some(plan.pri_scores);
        self.policy = Some(policy);
        self.replan = false;
        Ok(())
    }

    fn plan_cluster(&self) -> PlanCluster {
        if let Some(cluster) = &self.config.plan_cluster {
            return cluster.clone();
        }
        let machine = self
            .machines
            .iter()
            .fold(self.job.largest_task(), |acc, m| acc.max(&m.capacity));
        PlanCluster::new(self.machines.len().max(1), machine)
    }

    /// The cluster as the offers showed it; kinds they never showed as the configured plan
    /// cluster has them, or as the job's largest task does ([`Machines::capacity_or`]).
    fn cluster_capacity(&self) -> ResourceVec {
        // A configured planning cluster may lack a kind the tasks use: the largest task stands
        // in for it, so that no kind is left at zero.
        let fallback = self
            .plan_cluster()
            .total_capacity()
            .max(&self.job.largest_task());
        self.machines.capacity_or(&fallback)
    }

    /// What the job wants now, as its demand summary tells the masters.
    fn demand(&self) -> DemandSummary {
        let capacity = self.cluster_capacity();
        let mut demand = self.state.demand_summary(
            &self.job,
            &capacity,
            self.pri_scores.as_deref(),
            crate::policy::PriScoreScope::WholeDag,
        );
        if let Some(atoms) = &self.own_reservation {
            demand.reservation_progress = Some(ReservationProgress {
                finished_atoms: atoms.finished(&self.state),
                atoms: u32::try_from(atoms.len()).unwrap_or(u32::MAX),
                request: atoms.request(),
            });
        }
        demand
    }

    fn push_demand(&mut self, out: &mut Vec<FrameworkRequest>) {
        let demand = self.demand();
        let runnable = self.state.num_runnable() > 0;
        // Work became runnable again (a stage unlocked, a task lost): earlier declines may be
        // filtering agents that could run it now.
        if runnable && !self.had_runnable {
            out.push(FrameworkRequest::Revive);
        }
        self.had_runnable = runnable;
        if self.last_demand.as_ref() != Some(&demand) {
            self.last_demand = Some(demand.clone());
            out.push(FrameworkRequest::UpdateDemand(demand));
        }
    }

    /// The job's time at `now`, in the workload's seconds.
    fn job_seconds(&self, now: Time) -> f64 {
        secs_f64(now - self.submitted) / self.config.time_scale
    }
}

/// `job` as the masters are told of it (`FrameworkRequest::DescribeJob`): its stages with
/// their ids (the `stage` of its tasks' origins), sizes and parents, the policy that orders its
/// tasks, and the reservation it runs in.
pub(crate) fn describe(job: &Job, policy: &str, reservation: Option<String>) -> JobDescription {
    let stages = &job.stages;
    JobDescription {
        job: job.name.clone(),
        policy: policy.to_string(),
        stages: stages
            .iter()
            .map(|stage| StageDescription {
                stage: stage.id,
                name: stage.name.clone(),
                tasks: u32::try_from(stage.num_tasks()).unwrap_or(u32::MAX),
                parents: stage.parents.iter().map(|&p| stages[p].id).collect(),
            })
            .collect(),
        reservation,
    }
}

/// Explicit reconciliations of `task_ids`, split so that none names more than the master
/// answers in one call ([`MAX_RECONCILE_TASK_IDS`]).
pub(crate) fn push_reconciles(task_ids: Vec<TaskId>, out: &mut Vec<FrameworkRequest>) {
    for chunk in task_ids.chunks(MAX_RECONCILE_TASK_IDS) {
        out.push(FrameworkRequest::Reconcile {
            task_ids: chunk.to_vec(),
        });
    }
}
