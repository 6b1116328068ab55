//! The sans-IO core of a session framework on a real cluster: one framework subscription runs
//! every job of a workload, and a [`SessionPolicy`] (Decima §5.2's agent, or a hand-written
//! one) decides on each batch of offers which stage runs next and with how much parallelism
//! its job may run, through a [`Session`].
//!
//! Given offers, status updates, failed calls and ticks (with the time), it says what to send
//! the master, as [`DagJob`](crate::dag::DagJob) does for a job run as its own framework, and
//! shares its rules ([`Attempts`], [`crate::dag::common`]): the same task ids and task specs
//! built from the executor template, the same retries (a task that ends without success
//! `max_attempts` times fails its job, with the same reason; a task preempted, or never
//! launched, counts no attempt), the same explicit reconciliation of launches whose accept's
//! outcome is unknown, and the same bound per job on accepts refused in a row
//! ([`MAX_REFUSED_ACCEPTS`](crate::dag::common::MAX_REFUSED_ACCEPTS), with the same reason): a
//! refused accept counts once for each job with tasks in it, a status update of a job's task
//! starts its count again, and only the jobs that reach the bound fail; a refusal for a while
//! (rate-limited, no leader, unavailable, outcome unknown:
//! [`transient`](crate::dag::common::transient)) counts for no job.
//!
//! On a batch of offers it merges each agent's offers into one [`SessionOffer`] (its machine
//! an index it assigns to the agent's id), calls [`Session::schedule`] once, accepts each
//! agent's offers with the tasks launched on it and declines the rest. A finished task goes to
//! [`Session::task_finished`] (the job's JCT when it was its last); a task that ended without
//! success goes to [`Session::task_lost`], so that it is offered again, unless it ran out of
//! attempts: its job then fails, leaves the session, and what still runs of it is killed. The
//! other jobs go on.
//!
//! Departures from Decima and from the DAG-job framework:
//! - Decima's executors are task slots of one task each, and its model was trained on such
//!   executors (the simulator's session environment). On a cluster an agent runs as many
//!   tasks as its offer holds, so the session's largest limit ([`Session::max_limit`],
//!   Decima's executor count) is [`largest_limit`] (as in the simulator) of the cluster's
//!   capacity as offers show it (each agent's largest offer, summed) and the live jobs'
//!   stages: the most tasks that can run at once. It changes as agents appear or are declared
//!   lost, and as jobs come and go.
//! - The session's clock is the workload's seconds since the framework started (real time
//!   divided by the time scale). A job's JCT runs from its nominal arrival (the framework's
//!   start plus its arrival time scaled), not from the tick that noticed it, to the FINISHED
//!   of its last task as this framework hears of it.
//! - Policies get no Graphene priScores (no offline plan is made), and the master is told one
//!   demand for all jobs together ([`Session::demand_summary`]).
//! - Framework failover keeps one journal for the whole session ([`SessionFramework::restore`]),
//!   so every job must arrive at once. No deadlines, reservations or event log:
//!   [`SessionRefusal`] says so.
//! - The masters keep at most [`MAX_JOBS_PER_FRAMEWORK`] unended job descriptions per
//!   framework: beyond that a job runs undescribed (operators do not see it in `fullerene job
//!   status`), with a warning.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fullerene_proto::jobs::JobEnd;
#[cfg(doc)]
use fullerene_proto::jobs::MAX_JOBS_PER_FRAMEWORK;
use fullerene_proto::messages::{
    DemandSummary, ErrorCode, FrameworkRequest, Leftover, Offer, StatusReason, StatusUpdate,
    TaskState, WireError,
};
use fullerene_proto::time::secs_f64;
use fullerene_proto::{AgentId, FrameworkId, OfferId, ResourceVec, TaskId, Time};

use super::{largest_limit, JobKey, Session, SessionOffer, SessionPolicy};
use crate::dag::attempts::{parse_task_id, AttemptEnd, Attempts};
use crate::dag::common::{
    check_arrivals, count_refused_accept, decline_for_good, read_offers, resend_job_call,
    ArrivalsError, Machines,
};
use crate::dag::job::{describe, push_reconciles};
use crate::dag::journal::Record;
use crate::dag::{DagConfig, DagError, JobOutcome, JobProgress};
use crate::job::{Job, TaskRef};
use crate::policy::{PriScoreScope, TaskStatus};

/// Why a workload cannot run as one session framework.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionRefusal {
    /// The DAG framework's settings are invalid.
    #[error(transparent)]
    Config(#[from] DagError),
    /// The arrival times do not fit the jobs.
    #[error(transparent)]
    Arrivals(#[from] ArrivalsError),
    /// Two jobs share a name: in one framework a job's name prefixes its task ids and names
    /// its description, so it must be unique.
    #[error(
        "job `{0}` appears more than once: the jobs of one session framework need distinct names"
    )]
    DuplicateJob(String),
    /// The journal of a run to take over names a task or job of no job of this workload
    /// (what): it is another session's.
    #[error("the session's journal names {0}, of no job of this workload: it belongs to another run; give this one another state directory")]
    ForeignJournal(String),
    /// A journal for framework failover was asked for with jobs that arrive later: a process
    /// that takes the session over could not replay their arrivals.
    #[error("a journal (state directory) needs every job of the session to arrive at once: a process that takes the session over cannot replay later arrivals")]
    JournalWithArrivals,
    /// Deadlines (and the reservations made for them) were asked for.
    #[error("deadlines and reservations are not supported in session mode yet")]
    Deadlines,
    /// An event log was asked for.
    #[error("an event log is not supported in session mode: its readers (`fullerene chaos run`) expect one framework per job")]
    EventLog,
}

/// One job of the workload, arrived or not.
#[derive(Debug)]
struct Entry {
    job: Arc<Job>,
    /// When it arrives, in the workload's seconds from the framework's start.
    arrival_s: f64,
    /// Its key in the session, once it arrived.
    key: Option<JobKey>,
    /// When it arrived (its JCT counts from then): the nominal instant, the framework's start
    /// plus its arrival time scaled, not the tick that noticed it.
    submitted: Option<Time>,
    /// Its launches while it runs; once it ended, only its counts are kept (see
    /// [`SessionFramework::prune`]).
    attempts: Attempts,
    outcome: JobOutcome,
    /// Accepts holding tasks of it the master refused (not for a while: transient refusals
    /// do not count) since the last status update of one of its tasks.
    refused_in_a_row: u32,
    /// Tasks finished when it left the session (finished or failed).
    finished_at_exit: usize,
    /// Its failed and preempted attempts when it left the session.
    attempts_at_exit: (u64, u64),
    /// The masters recorded its description (or refused it for good).
    description_recorded: bool,
    /// Its description was refused for a while: sent again on the next tick.
    describe_again: bool,
    /// Its end was sent (and not lost or refused for a while since).
    end_told: bool,
    /// The masters recorded its end (or refused it for good, or it never arrived).
    end_recorded: bool,
}

impl Entry {
    /// Whether its description is (still) to be sent: it arrived, has not ended (a job whose
    /// end is in flight is not described again: its end may be recorded already), and the
    /// masters have not recorded the description.
    fn describable(&self) -> bool {
        self.key.is_some() && self.outcome == JobOutcome::Running && !self.description_recorded
    }
}

/// A whole workload run as one framework (see the module documentation).
pub struct SessionFramework {
    session: Session,
    config: DagConfig,
    policy_name: String,
    jobs: Vec<Entry>,
    /// Session key → index into `jobs`, for the jobs in the session.
    by_key: BTreeMap<JobKey, usize>,
    /// The agents seen in offers. Frameworks hear of no agent's loss as such (a rescind names
    /// offers, not agents); an agent is forgotten when a task of this framework on it is
    /// reported LOST because the masters declared the agent lost ([`StatusReason::AgentLost`]).
    /// An agent lost with none of this framework's tasks on it stays counted in the session's
    /// capacity and largest limit until then.
    machines: Machines,
    /// Task id of every launch of a job that has not ended → its job's index (a job's entries
    /// go when it ends: later updates of its tasks are ignored as unknown).
    owners: HashMap<TaskId, usize>,
    started: Time,
    last_demand: Option<DemandSummary>,
    had_runnable: bool,
    /// Launches whose accept's outcome is unknown and of which no update has come since:
    /// reconciled explicitly after every (re)subscription until one does (as `DagJob` does).
    unconfirmed: BTreeSet<TaskId>,
    /// Of those, the ones whose reconcile is queued for the next session already.
    reconcile_queued: BTreeSet<TaskId>,
    /// Jobs whose progress changed since [`SessionFramework::take_changed`].
    changed: BTreeSet<usize>,
    /// Tasks the session counted finished (restored ones aside): the shell journals a
    /// status update that raised it.
    tasks_finished: u64,
}

impl std::fmt::Debug for SessionFramework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionFramework")
            .field("policy", &self.policy_name)
            .field("jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

impl SessionFramework {
    /// A framework for `jobs`, started at `now` (on the clock every later call's time is read
    /// from), scheduled by `policy`. The i-th job arrives `arrivals_s[i]` workload seconds
    /// after `now` (scaled by the time scale; empty: every job at once; refused unless there
    /// is one finite time ≥ 0 per job, as [`check_arrivals`] says). Jobs due at once are added
    /// now.
    pub fn new(
        jobs: Vec<Job>,
        config: DagConfig,
        policy: Box<dyn SessionPolicy>,
        arrivals_s: &[f64],
        now: Time,
    ) -> Result<SessionFramework, SessionRefusal> {
        config.validate()?;
        check_arrivals(arrivals_s, jobs.len())?;
        let mut names = BTreeSet::new();
        for job in &jobs {
            if !names.insert(job.name.as_str()) {
                return Err(SessionRefusal::DuplicateJob(job.name.clone()));
            }
        }
        let policy_name = policy.name().to_string();
        let jobs = jobs
            .into_iter()
            .enumerate()
            .map(|(i, job)| Entry {
                job: Arc::new(job),
                arrival_s: arrivals_s.get(i).copied().unwrap_or(0.0),
                key: None,
                submitted: None,
                attempts: Attempts::new(),
                outcome: JobOutcome::Running,
                refused_in_a_row: 0,
                finished_at_exit: 0,
                attempts_at_exit: (0, 0),
                description_recorded: false,
                describe_again: false,
                end_told: false,
                end_recorded: false,
            })
            .collect();
        let mut framework = SessionFramework {
            session: Session::new(policy, 1, ResourceVec::ZERO),
            config,
            policy_name,
            jobs,
            by_key: BTreeMap::new(),
            machines: Machines::default(),
            owners: HashMap::new(),
            started: now,
            last_demand: None,
            had_runnable: true,
            unconfirmed: BTreeSet::new(),
            reconcile_queued: BTreeSet::new(),
            changed: BTreeSet::new(),
            tasks_finished: 0,
        };
        // Those there from the start are described on subscription.
        framework.arrive_due(now, &mut Vec::new());
        Ok(framework)
    }

    /// The session policy's name.
    pub fn policy_name(&self) -> &str {
        &self.policy_name
    }

    /// The jobs, in the order given.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.iter().map(|entry| entry.job.as_ref())
    }

    /// The session (its live jobs, its largest limit, the policy's decisions so far).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Job `index`'s progress.
    pub fn progress(&self, index: usize) -> Option<JobProgress> {
        let entry = self.jobs.get(index)?;
        let live = entry.key.and_then(|key| self.session.job(key));
        let (finished, running) = match live {
            Some(live) => (live.state.num_finished(), live.state.num_running()),
            None => (entry.finished_at_exit, 0),
        };
        let (failed_attempts, preempted_attempts) = if entry.outcome == JobOutcome::Running {
            (
                entry.attempts.failed_attempts(),
                entry.attempts.preempted_attempts(),
            )
        } else {
            entry.attempts_at_exit
        };
        Some(JobProgress {
            name: entry.job.name.clone(),
            group: entry.job.group.clone(),
            tasks: entry.job.num_tasks(),
            finished,
            running,
            failed_attempts,
            preempted_attempts,
            outcome: entry.outcome.clone(),
        })
    }

    /// Tasks the session counted finished since it started (those restored from a journal
    /// aside).
    pub fn tasks_finished(&self) -> u64 {
        self.tasks_finished
    }

    /// Takes over from an earlier process of this framework (framework failover) the records
    /// of its journal (the session shell's [`Journal`](crate::dag::journal::Journal), one for
    /// the whole session): the launches it asked for, with their ids (never used again), the
    /// tasks it saw finish and the jobs it ended. A launch with no recorded finish runs until
    /// the master says otherwise: it is never launched again while it may still run (at most
    /// one instance), and is reconciled explicitly once subscribed. A job all of whose tasks
    /// finished is done (its JCT, which the earlier process measured, is reported as 0, as
    /// [`DagJob::restore`](crate::dag::DagJob::restore) does); a job it ended otherwise failed
    /// then, and is not run again; the other jobs' JCTs count from this process's start.
    /// Returns the framework id to subscribe with, if one was recorded.
    ///
    /// Only the jobs already in the session (arrived) can take their tasks back: with later
    /// arrivals a run with a journal is refused ([`SessionRefusal::JournalWithArrivals`]).
    /// A journal that names a task or job of no job here is another session's, and is refused
    /// ([`SessionRefusal::ForeignJournal`]) rather than taken over.
    pub fn restore(&mut self, records: &[Record]) -> Result<Option<FrameworkId>, SessionRefusal> {
        let jobs: Vec<Arc<Job>> = self.jobs.iter().map(|entry| entry.job.clone()).collect();
        let by_name: HashMap<&str, usize> = jobs
            .iter()
            .enumerate()
            .map(|(index, job)| (job.name.as_str(), index))
            .collect();
        // A task id is `{job}/{stage}.{index}/{launch}`, and a job's name may hold `/`.
        let owner = |id: &TaskId| -> Option<(usize, TaskRef, u32)> {
            let job = id.as_str().rsplitn(3, '/').nth(2)?;
            let index = *by_name.get(job)?;
            let (task, launch) = parse_task_id(&jobs[index], id)?;
            Some((index, task, launch))
        };
        let mut framework_id = None;
        let mut launched = Vec::new();
        let mut ended = BTreeSet::new();
        let mut jobs_ended = BTreeSet::new();
        for record in records {
            match record {
                Record::Subscribed(id) => framework_id = Some(id.clone()),
                Record::JobEnded(job) => {
                    let index = *by_name
                        .get(job.as_str())
                        .ok_or_else(|| SessionRefusal::ForeignJournal(format!("job `{job}`")))?;
                    jobs_ended.insert(index);
                }
                Record::Launched(id) | Record::Finished(id) => {
                    let (index, task, launch) = owner(id)
                        .ok_or_else(|| SessionRefusal::ForeignJournal(format!("task `{id}`")))?;
                    if matches!(record, Record::Launched(_)) {
                        self.jobs[index].attempts.restore(id.clone(), task, launch);
                        launched.push((index, task, launch, id.clone()));
                    } else {
                        ended.insert((index, task));
                    }
                }
            }
        }
        // In launch order: a task's parents finished before it was launched.
        for (index, task, launch, id) in launched {
            let entry = &self.jobs[index];
            let Some(key) = entry.key else { continue };
            let finished = ended.contains(&(index, task));
            // Of a job that ended, only what finished counts: what still ran was killed.
            if entry.outcome != JobOutcome::Running
                || !entry.attempts.is_current(task, launch)
                || (!finished && jobs_ended.contains(&index))
            {
                continue;
            }
            match self.session.restore_task(key, task, finished) {
                Ok(Some(done)) => {
                    let entry = &mut self.jobs[index];
                    entry.finished_at_exit = done.state.num_finished();
                    entry.outcome = JobOutcome::Finished { jct_ms: 0 };
                    self.prune(index);
                }
                Ok(None) => {
                    self.owners.insert(id.clone(), index);
                    if !finished {
                        self.unconfirmed.insert(id);
                    }
                }
                Err(error) => {
                    tracing::warn!(task = %id, %error, "the journal's launch does not fit its job; skipped");
                }
            }
            self.changed.insert(index);
        }
        // Jobs it ended without finishing them failed then; their ends are told again (the
        // masters may not have recorded them), and what still ran of them was killed then.
        for index in jobs_ended {
            let entry = &mut self.jobs[index];
            if entry.outcome != JobOutcome::Running {
                continue;
            }
            entry.outcome = JobOutcome::Failed {
                reason: "it failed before this process took the session over".into(),
            };
            if let Some(left) = entry.key.and_then(|key| self.session.remove_job(key)) {
                entry.finished_at_exit = left.state.num_finished();
            }
            self.changed.insert(index);
            self.prune(index);
        }
        Ok(framework_id)
    }

    /// The jobs whose progress changed since the last call, by index.
    pub fn take_changed(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.changed).into_iter().collect()
    }

    /// True once every job finished or failed.
    pub fn is_done(&self) -> bool {
        self.jobs.iter().all(|e| e.outcome != JobOutcome::Running)
    }

    /// True once every job ended and the masters recorded every end: nothing of the framework
    /// needs to outlive it, and it may be torn down.
    pub fn is_finished(&self) -> bool {
        self.is_done() && self.jobs.iter().all(|e| e.end_recorded)
    }

    /// What to send once subscribed (the first time or again): the descriptions the masters
    /// may lack, explicit reconciliations of launches whose outcome is unknown, and the demand.
    pub fn on_subscribed(&mut self) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        for entry in &mut self.jobs {
            if entry.describable() {
                entry.describe_again = false;
                out.push(FrameworkRequest::DescribeJob(describe(
                    &entry.job,
                    &self.policy_name,
                    None,
                )));
            }
        }
        self.last_demand = None;
        let queued = std::mem::take(&mut self.reconcile_queued);
        let task_ids: Vec<TaskId> = self.unconfirmed.difference(&queued).cloned().collect();
        push_reconciles(task_ids, &mut out);
        self.push_demand(&mut out);
        out
    }

    /// The driver's tick: jobs whose arrival came are added (and described), and descriptions
    /// and ends refused for a while are sent again.
    pub fn on_tick(&mut self, now: Time) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        self.arrive_due(now, &mut out);
        for entry in &mut self.jobs {
            if std::mem::take(&mut entry.describe_again) && entry.describable() {
                out.push(FrameworkRequest::DescribeJob(describe(
                    &entry.job,
                    &self.policy_name,
                    None,
                )));
            }
        }
        self.push_ends(&mut out);
        // New jobs' demand, or a summary the master did not take.
        self.push_demand(&mut out);
        out
    }

    /// Adds the jobs whose arrival time passed.
    fn arrive_due(&mut self, now: Time, out: &mut Vec<FrameworkRequest>) {
        let now_s = self.seconds(now);
        for index in 0..self.jobs.len() {
            let entry = &mut self.jobs[index];
            if entry.key.is_some() || entry.outcome != JobOutcome::Running {
                continue;
            }
            if entry.arrival_s > now_s {
                continue;
            }
            // Its nominal arrival, not the tick that noticed it (up to a tick later).
            let key = self
                .session
                .add_job(entry.job.clone(), entry.arrival_s, None);
            let after = Duration::try_from_secs_f64(entry.arrival_s * self.config.time_scale)
                .unwrap_or(Duration::MAX);
            entry.key = Some(key);
            entry.submitted = Some(self.started.saturating_add(after).min(now));
            self.by_key.insert(key, index);
            self.changed.insert(index);
            if now > self.started {
                // Those there from the start are described on subscription.
                out.push(FrameworkRequest::DescribeJob(describe(
                    &entry.job,
                    &self.policy_name,
                    None,
                )));
            }
        }
    }

    /// Answers a batch of offers: one scheduling event of the session; each agent's offers
    /// accepted with the tasks launched on it, or declined.
    pub fn on_offers(&mut self, offers: &[Offer], now: Time) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        // Each agent's offers of the batch together: an accept names offers of one agent.
        let mut by_agent: BTreeMap<AgentId, (Vec<OfferId>, ResourceVec)> = BTreeMap::new();
        for (offer, free) in read_offers(offers, self.config.idle_refuse_ms, &mut out) {
            let (ids, total) = by_agent
                .entry(offer.agent_id.clone())
                .or_insert((Vec::new(), ResourceVec::ZERO));
            ids.push(offer.id);
            *total += free;
        }
        if self.is_done() {
            let offer_ids: Vec<OfferId> = by_agent.into_values().flat_map(|(ids, _)| ids).collect();
            if !offer_ids.is_empty() {
                out.push(decline_for_good(offer_ids));
            }
            return out;
        }
        let mut batch = Vec::with_capacity(by_agent.len());
        for (agent, (ids, free)) in by_agent {
            let machine = self.machines.saw(&agent, &free);
            batch.push((
                ids,
                SessionOffer {
                    machine: machine.index,
                    free,
                    capacity: machine.capacity,
                },
            ));
        }
        self.update_cluster();
        let now_s = self.seconds(now);
        let session_offers: Vec<SessionOffer> = batch.iter().map(|(_, o)| o.clone()).collect();
        let launches = if self.session.jobs().is_empty() {
            Vec::new()
        } else {
            self.session.schedule(&session_offers, now_s)
        };
        let mut tasks_on: BTreeMap<usize, Vec<_>> = BTreeMap::new();
        for launch in launches {
            let Some(&index) = self.by_key.get(&launch.job) else {
                continue;
            };
            let entry = &mut self.jobs[index];
            let spec = entry.attempts.launch(&entry.job, &self.config, launch.task);
            self.owners.insert(spec.id.clone(), index);
            self.changed.insert(index);
            tasks_on.entry(launch.machine).or_default().push(spec);
        }
        let idle = self.runnable() == 0;
        for (offer_ids, offer) in batch {
            out.push(match tasks_on.remove(&offer.machine) {
                Some(tasks) => FrameworkRequest::Accept {
                    offer_ids,
                    tasks,
                    leftover: Leftover::Decline { refuse_ms: 0 },
                },
                None => FrameworkRequest::Decline {
                    offer_ids,
                    refuse_ms: if idle { self.config.idle_refuse_ms } else { 0 },
                },
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
        if update.reason == Some(StatusReason::AgentLost) {
            // The masters declared the agent lost: what it offered is gone with it.
            self.machines.remove(&update.agent_id);
        }
        let Some(&index) = self.owners.get(&update.task_id) else {
            // Of no job, or of a job that already ended.
            tracing::debug!(task = %update.task_id, "update for a task this framework does not know");
            return out;
        };
        self.jobs[index].refused_in_a_row = 0;
        let now_s = self.seconds(now);
        // A late report of an earlier attempt, or of a job that already left the session.
        let Some((key, task)) = self.running_task(index, &update.task_id) else {
            return out;
        };
        let entry = &mut self.jobs[index];
        match update.state {
            TaskState::Staging | TaskState::Running => return out,
            TaskState::Finished => match self.session.task_finished(key, task, now_s) {
                Ok(Some(done)) => {
                    self.tasks_finished += 1;
                    let submitted = entry.submitted.unwrap_or(self.started);
                    entry.finished_at_exit = done.state.num_finished();
                    entry.outcome = JobOutcome::Finished {
                        jct_ms: now.as_millis().saturating_sub(submitted.as_millis()),
                    };
                    self.prune(index);
                }
                Ok(None) => self.tasks_finished += 1,
                Err(error) => tracing::warn!(%error, "the session refused a finished task"),
            },
            TaskState::Failed | TaskState::Lost | TaskState::Killed => {
                let end = entry
                    .attempts
                    .ended(&entry.job, task, update, self.config.max_attempts);
                if let Err(error) = self.session.task_lost(key, task) {
                    tracing::warn!(%error, "the session refused a lost task");
                }
                if let AttemptEnd::OutOfAttempts(reason) = end {
                    self.fail_job(index, reason, &mut out);
                }
            }
        }
        self.changed.insert(index);
        self.push_ends(&mut out);
        self.push_demand(&mut out);
        out
    }

    /// A call failed: tasks of an accept the master refused are offered again; those of an
    /// accept whose outcome is unknown are reconciled explicitly; descriptions and ends refused
    /// for a while are sent again.
    pub fn on_call_failed(
        &mut self,
        request: &FrameworkRequest,
        error: &WireError,
    ) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        match request {
            FrameworkRequest::UpdateDemand(_) => {
                // The master may not know what the jobs want: sent again on the next tick (not
                // at once, which a summary refused for good would turn into a busy loop).
                self.last_demand = None;
                return out;
            }
            FrameworkRequest::DescribeJob(description) => {
                let Some(entry) = self.entry_named(&description.job) else {
                    return out;
                };
                if let Some(on_tick) = resend_job_call(error.code) {
                    // A lost session's calls are sent again on subscription; the rest on the
                    // next tick.
                    entry.describe_again = on_tick;
                } else {
                    // The job runs on; only what operators see of it is missing.
                    tracing::warn!(job = %description.job, %error, "the masters refused the job's description");
                    entry.description_recorded = true;
                }
                return out;
            }
            FrameworkRequest::EndJob { job, .. } => {
                let Some(entry) = self.entry_named(job) else {
                    return out;
                };
                if resend_job_call(error.code).is_some() {
                    entry.end_told = false;
                } else {
                    tracing::warn!(%job, %error, "the masters refused the job's end");
                    entry.end_recorded = true;
                }
                return out;
            }
            FrameworkRequest::Accept { tasks, .. } => {
                let mut unknown = Vec::new();
                // The jobs with tasks in the accept: each counts the refusal.
                let mut refused_jobs = BTreeSet::new();
                for spec in tasks {
                    let Some(&index) = self.owners.get(&spec.id) else {
                        continue;
                    };
                    let Some((key, task)) = self.running_task(index, &spec.id) else {
                        continue;
                    };
                    refused_jobs.insert(index);
                    if error.code == ErrorCode::OutcomeUnknown {
                        unknown.push(spec.id.clone());
                    } else if let Err(error) = self.session.task_lost(key, task) {
                        tracing::warn!(%error, "the session refused a refused launch");
                    } else {
                        self.changed.insert(index);
                    }
                }
                for index in refused_jobs {
                    let entry = &mut self.jobs[index];
                    if let Some(reason) = count_refused_accept(&mut entry.refused_in_a_row, error) {
                        self.fail_job(index, reason, &mut out);
                    }
                }
                self.push_ends(&mut out);
                if !unknown.is_empty() {
                    self.unconfirmed.extend(unknown.iter().cloned());
                    self.reconcile_queued.extend(unknown.iter().cloned());
                    push_reconciles(unknown, &mut out);
                }
            }
            _ => return out,
        }
        if !self.is_done() {
            self.push_demand(&mut out);
        }
        out
    }

    /// The masters committed a job's description or end.
    pub fn on_job_recorded(&mut self, request: &FrameworkRequest) {
        match request {
            FrameworkRequest::DescribeJob(description) => {
                if let Some(entry) = self.entry_named(&description.job) {
                    entry.description_recorded = true;
                }
            }
            FrameworkRequest::EndJob { job, .. } => {
                if let Some(entry) = self.entry_named(job) {
                    entry.end_recorded = true;
                }
            }
            _ => {}
        }
    }

    /// Every job not ended fails with `reason` (the run was stopped, or the framework cannot
    /// go on); what still runs is killed and the ends are told.
    pub fn stop(&mut self, reason: &str) -> Vec<FrameworkRequest> {
        let mut out = Vec::new();
        self.fail_all(reason, &mut out);
        out
    }

    fn fail_all(&mut self, reason: &str, out: &mut Vec<FrameworkRequest>) {
        for index in 0..self.jobs.len() {
            if self.jobs[index].outcome == JobOutcome::Running {
                self.fail_job(index, reason.to_string(), out);
            }
        }
        self.push_ends(out);
    }

    /// Job `index` fails with `reason`: it leaves the session and what still runs of it is
    /// killed.
    fn fail_job(&mut self, index: usize, reason: String, out: &mut Vec<FrameworkRequest>) {
        let entry = &mut self.jobs[index];
        entry.outcome = JobOutcome::Failed { reason };
        self.changed.insert(index);
        let Some(key) = entry.key else {
            // It never arrived: the masters never heard of it.
            entry.end_recorded = true;
            return;
        };
        if let Some(left) = self.session.remove_job(key) {
            entry.finished_at_exit = left.state.num_finished();
            let mut kills: Vec<TaskId> = left
                .state
                .running_tasks()
                .filter_map(|(task, _, _)| entry.attempts.current_id(&entry.job, task))
                .collect();
            kills.sort();
            out.extend(
                kills
                    .into_iter()
                    .map(|task_id| FrameworkRequest::Kill { task_id }),
            );
        }
        self.prune(index);
    }

    /// Job `index` ended: what was kept to follow its tasks goes (its launches, their owners,
    /// its session key, its launches awaiting reconciliation); its counts stay for its report.
    /// Later updates of its tasks are ignored as those of unknown tasks.
    fn prune(&mut self, index: usize) {
        let entry = &mut self.jobs[index];
        entry.attempts_at_exit = (
            entry.attempts.failed_attempts(),
            entry.attempts.preempted_attempts(),
        );
        let attempts = std::mem::take(&mut entry.attempts);
        for (id, _, _) in attempts.launches() {
            self.owners.remove(id);
            self.unconfirmed.remove(id);
            self.reconcile_queued.remove(id);
        }
        if let Some(key) = entry.key {
            self.by_key.remove(&key);
        }
    }

    /// The job and task of `id` if it is the current attempt of a task of job `index` that the
    /// session counts as running; `None` for a late report of an earlier attempt, or of a job
    /// that already left the session.
    fn running_task(&self, index: usize, id: &TaskId) -> Option<(JobKey, TaskRef)> {
        let entry = &self.jobs[index];
        let key = entry.key?;
        let task = entry.attempts.current_task(id)?;
        let live = self.session.job(key)?;
        (live.state.status(task) == Some(TaskStatus::Running)).then_some((key, task))
    }

    /// Tells the masters how the jobs that ended and were not told yet ended.
    fn push_ends(&mut self, out: &mut Vec<FrameworkRequest>) {
        for entry in &mut self.jobs {
            if entry.end_told || entry.end_recorded {
                continue;
            }
            let end = match &entry.outcome {
                JobOutcome::Running => continue,
                JobOutcome::Finished { .. } => JobEnd::Finished,
                JobOutcome::Failed { reason } => JobEnd::Failed {
                    reason: reason.clone(),
                },
            };
            entry.end_told = true;
            out.push(FrameworkRequest::EndJob {
                job: entry.job.name.clone(),
                end,
            });
        }
    }

    fn entry_named(&mut self, name: &str) -> Option<&mut Entry> {
        self.jobs.iter_mut().find(|e| e.job.name == name)
    }

    /// Tells the session what the offers showed of the cluster (see the module documentation
    /// for the largest limit).
    fn update_cluster(&mut self) {
        let capacity = self.machines.total_capacity();
        let limit = largest_limit(
            &capacity,
            self.session
                .jobs()
                .iter()
                .flat_map(|live| live.job.stages.iter())
                .map(|stage| (stage.demand, stage.num_tasks())),
        );
        self.session.set_cluster(limit, capacity);
    }

    /// All machines' capacity together as offers showed it; kinds they never showed as the
    /// largest task of any job has them (the work in a summary is relative to it, and must stay
    /// finite: [`Machines::capacity_or`]).
    fn cluster_capacity(&self) -> ResourceVec {
        let largest = self.jobs.iter().fold(ResourceVec::ZERO, |acc, entry| {
            acc.max(&entry.job.largest_task())
        });
        self.machines.capacity_or(&largest)
    }

    fn runnable(&self) -> usize {
        self.session
            .jobs()
            .iter()
            .map(|j| j.state.num_runnable())
            .sum()
    }

    /// Sends the jobs' demand together when it changed, and a revive when work became
    /// runnable again (earlier declines may be filtering agents that could run it now).
    fn push_demand(&mut self, out: &mut Vec<FrameworkRequest>) {
        if self.is_done() {
            if self.last_demand.as_ref() != Some(&DemandSummary::default()) {
                self.last_demand = Some(DemandSummary::default());
                out.push(FrameworkRequest::Suppress);
            }
            return;
        }
        let capacity = self.cluster_capacity();
        let demand = self
            .session
            .demand_summary(&capacity, PriScoreScope::WholeDag);
        let runnable = self.runnable() > 0;
        if runnable && !self.had_runnable {
            out.push(FrameworkRequest::Revive);
        }
        self.had_runnable = runnable;
        if self.last_demand.as_ref() != Some(&demand) {
            self.last_demand = Some(demand.clone());
            out.push(FrameworkRequest::UpdateDemand(demand));
        }
    }

    /// Workload seconds since the framework started.
    fn seconds(&self, now: Time) -> f64 {
        secs_f64(now - self.started) / self.config.time_scale
    }
}

#[cfg(test)]
mod tests;
