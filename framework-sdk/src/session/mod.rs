//! The multi-job framework mode (issue 18; Decima §5.2): one framework runs many jobs, as a
//! Spark or Tez session does, and a [`SessionPolicy`] decides on each batch of offers which
//! stage, among all its jobs' runnable stages, runs next and with how much parallelism its
//! job may run.
//!
//! Decima's action is a pair: a stage `v` and a parallelism limit `l` for `v`'s job. The
//! scheduler then gives `v` free executors until the job holds `l` of them or `v` has no
//! unassigned task left, and asks again while executors are free. A session works the same
//! way on two-level offers:
//! - a batch of offers (each a machine's free resources) is a scheduling event; the session
//!   asks its policy for actions until the offers hold no runnable task or no stage is left
//!   to choose (Decima's `node_selected`: a stage is chosen at most once per event, which also
//!   bounds the actions per event);
//! - an executor is a running task (Spark runs one task per executor slot), so a job's
//!   parallelism is its running tasks; an action's limit is at least one more than the job
//!   holds, so that every action launches a task (Decima masks the smaller limits);
//! - a machine whose last task's stage still has runnable tasks keeps working on it without
//!   a decision while the job is under its limit (Decima's executors stay on their stage:
//!   `assign_executor` asks the agent only when the stage has no task left); its last task is
//!   the one that last finished there (the room it freed) or, since, the last placed there,
//!   which on Decima's one-task executors is the same task;
//! - the chosen stage's tasks go first to machines that last worked for its job, then to
//!   machines that work for none, then to the rest (a machine that changes jobs is Decima's
//!   executor that moves).
//!
//! One departure: the candidates are the stages with runnable tasks. Decima's frontier also
//! holds stages whose parents have all been dispatched but not finished, and executors
//! committed to them wait there.
//!
//! Sans-IO: the caller (the simulator, a framework driver) hands in offers and the time, and
//! reports finished and lost tasks; the session returns launches and job completions.
//!
//! - [`framework`]: [`SessionFramework`], the sans-IO core of one framework running a whole
//!   workload's jobs as a session on a real cluster (offers and status updates in, calls to
//!   the master out);
//! - `run` (feature `driver`): the driver's `Scheduler` around it and `run_session`, the
//!   session counterpart of `dag::run_jobs` (one framework per job).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fullerene_proto::messages::DemandSummary;
use fullerene_proto::ResourceVec;
use fullerene_scheduling::fit::fits;

use crate::job::{Job, StageIdx, TaskRef};
use crate::policy::{joint_demand_summary, JobState, PriScoreScope};

pub mod framework;
pub mod heuristics;
#[cfg(feature = "driver")]
pub mod run;

pub use framework::{SessionFramework, SessionRefusal};
pub use heuristics::{FairSession, FifoSession, GrapheneSession, SessionPolicyKind, SjfSession};
#[cfg(feature = "driver")]
pub use run::{run_session, SessionScheduler};

/// A session's largest parallelism limit ([`Session::max_limit`], Decima's executor count).
/// Decima's parallelism limits count executors; a session counts a job's running tasks, so its
/// largest limit is the most tasks the cluster can run at once: for every resource that all of
/// `demands` (each stage's task demand and task count) demand, `cluster_capacity` over the
/// smallest demand of it, the least of these (on the reference machines: the cluster's cores
/// over the smallest task's cores). No limit above it could ever bind, and any below it could
/// keep a lone job from filling an idle cluster. Without such a resource, the task count. At
/// least 1; saturates rather than overflows.
///
/// Departure: Decima's model was trained on one-task executors (50 of them), where the limit is
/// a number of machines; here one machine runs several tasks and the limit can go beyond what
/// the model met in training.
pub fn largest_limit(
    cluster_capacity: &ResourceVec,
    demands: impl IntoIterator<Item = (ResourceVec, usize)>,
) -> usize {
    let mut smallest = [f64::INFINITY; fullerene_proto::NUM_RESOURCES];
    let mut tasks = 0_usize;
    for (demand, count) in demands {
        tasks = tasks.saturating_add(count);
        for (k, least) in smallest.iter_mut().enumerate() {
            // A kind some task does not demand bounds nothing: it is marked 0.
            *least = if demand.0[k] > 0.0 {
                least.min(demand.0[k])
            } else {
                0.0
            };
        }
    }
    let bound = smallest
        .iter()
        .zip(cluster_capacity.0)
        .filter(|(least, _)| **least > 0.0 && least.is_finite())
        .map(|(least, capacity)| (capacity.max(0.0) / least).floor())
        .fold(f64::INFINITY, f64::min);
    let limit = if bound.is_finite() {
        // The float is a whole number >= 0; `as` saturates.
        bound as usize
    } else {
        tasks
    };
    limit.max(1)
}

/// A job's key in its session: the order it was added in (never reused).
pub type JobKey = u64;

/// One job of a session, live until its last task finishes.
#[derive(Clone, Debug)]
pub struct SessionJob {
    /// Its key.
    pub key: JobKey,
    /// Its DAG.
    pub job: Arc<Job>,
    /// Its tasks' progress.
    pub state: JobState,
    /// When it arrived, seconds.
    pub arrival_s: f64,
    /// The parallelism limit its last action set (`None` before its first).
    pub limit: Option<usize>,
    /// Graphene's priScores per stage and task, when the offline planner ran for it.
    pub pri_scores: Option<Arc<Vec<Vec<f64>>>>,
}

/// One offer of a scheduling event: a machine's free resources.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionOffer {
    /// The machine's stable index.
    pub machine: usize,
    /// What it has free.
    pub free: ResourceVec,
    /// Its total capacity (for packing scores).
    pub capacity: ResourceVec,
}

/// A stage a policy may choose, with the smallest limit it may set for the stage's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageCandidate {
    /// The job's index in [`SessionView::jobs`].
    pub job: usize,
    /// The stage.
    pub stage: StageIdx,
    /// One more than the tasks the job runs now: every limit from here to
    /// [`SessionView::max_limit`] launches at least one task.
    pub min_limit: usize,
}

/// A policy's choice: a candidate and the parallelism limit for its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionAction {
    /// Index into the candidates.
    pub candidate: usize,
    /// The job's new parallelism limit (clamped to `[min_limit, max_limit]`).
    pub limit: usize,
}

/// What a policy sees at a decision.
#[derive(Debug)]
pub struct SessionView<'a> {
    /// The live jobs, in arrival order.
    pub jobs: &'a [SessionJob],
    /// What is left of the event's offers.
    pub offers: &'a [SessionOffer],
    /// The job each offer's machine last worked for (Decima: whether the free executors
    /// are local to a job), aligned with `offers`.
    pub offer_jobs: &'a [Option<JobKey>],
    /// The largest limit (Decima: the number of executors).
    pub max_limit: usize,
    /// The time, seconds.
    pub now_s: f64,
    /// The capacity of every machine together.
    pub cluster_capacity: ResourceVec,
}

/// A multi-job scheduling policy (Decima §5.2's agent, or a hand-written heuristic).
pub trait SessionPolicy: Send {
    /// Its name on the command line.
    fn name(&self) -> &str;

    /// Chooses among `candidates` (never empty).
    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction;
}

/// Makes a fresh policy for each session (a simulator run per seed, a framework per run):
/// a policy may keep state between decisions, so sessions never share one. The argument is
/// the session's seed: a policy that samples its actions (Decima's, as Decima runs it) draws
/// them from it, so the same seed gives the same run.
pub type SessionPolicyFactory = std::sync::Arc<dyn Fn(u64) -> Box<dyn SessionPolicy> + Send + Sync>;

/// A task the session launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLaunch {
    /// The job.
    pub job: JobKey,
    /// The task.
    pub task: TaskRef,
    /// The machine of the offer it runs on.
    pub machine: usize,
    /// Whether a policy decision placed it (`false`: its machine kept working on its stage).
    pub decided: bool,
}

/// Why a session refused a report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    /// A report for a job the session does not run (never added, or finished).
    #[error("job {0} is not live in this session")]
    UnknownJob(JobKey),
    /// The job's state refused the report.
    #[error("job {job}: {source}")]
    Task {
        /// The job.
        job: JobKey,
        /// What was wrong.
        source: crate::policy::JobStateError,
    },
}

/// The machine of a task taken over from an earlier process ([`Session::restore_task`]):
/// none that offers name.
const UNPLACED: usize = usize::MAX;

/// Many jobs run by one framework, scheduled by one [`SessionPolicy`].
pub struct Session {
    jobs: Vec<SessionJob>,
    policy: Box<dyn SessionPolicy>,
    max_limit: usize,
    cluster_capacity: ResourceVec,
    next_key: JobKey,
    /// Each machine's last stage, for the executors that stay on it.
    last_stage: BTreeMap<usize, (JobKey, StageIdx)>,
    decisions: u64,
}

impl Session {
    /// An empty session: `max_limit` is the largest parallelism limit (Decima's executor
    /// count; at least 1), `cluster_capacity` all machines' resources together.
    pub fn new(
        policy: Box<dyn SessionPolicy>,
        max_limit: usize,
        cluster_capacity: ResourceVec,
    ) -> Session {
        Session {
            jobs: Vec::new(),
            policy,
            max_limit: max_limit.max(1),
            cluster_capacity,
            next_key: 0,
            last_stage: BTreeMap::new(),
            decisions: 0,
        }
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// Adds a job that arrived at `now_s`; returns its key.
    pub fn add_job(
        &mut self,
        job: Arc<Job>,
        now_s: f64,
        pri_scores: Option<Arc<Vec<Vec<f64>>>>,
    ) -> JobKey {
        let key = self.next_key;
        self.next_key += 1;
        self.jobs.push(SessionJob {
            key,
            state: JobState::new(&job),
            job,
            arrival_s: now_s,
            limit: None,
            pri_scores,
        });
        key
    }

    /// The live jobs, in arrival order.
    pub fn jobs(&self) -> &[SessionJob] {
        &self.jobs
    }

    /// The largest parallelism limit a policy may set.
    pub fn max_limit(&self) -> usize {
        self.max_limit
    }

    /// Changes what the session knows of the cluster (a framework on a real cluster learns it
    /// from offers as agents appear): the largest limit (at least 1) and all machines'
    /// resources together. Limits already set stay as they are until the job's next action.
    pub fn set_cluster(&mut self, max_limit: usize, cluster_capacity: ResourceVec) {
        self.max_limit = max_limit.max(1);
        self.cluster_capacity = cluster_capacity;
    }

    /// Takes a job out of the session before it finished (it failed); its tasks still
    /// running are the caller's to kill.
    pub fn remove_job(&mut self, key: JobKey) -> Option<SessionJob> {
        let i = self.index_of(key).ok()?;
        self.last_stage.retain(|_, (job, _)| *job != key);
        Some(self.jobs.remove(i))
    }

    /// The live job of key `job`, if it is one.
    pub fn job(&self, job: JobKey) -> Option<&SessionJob> {
        self.index_of(job).ok().map(|i| &self.jobs[i])
    }

    /// The summary of pending demand the session's framework sends the master (DESIGN.md,
    /// step 2): the sum of its live jobs' summaries ([`joint_demand_summary`]), remaining work
    /// in seconds of the whole `capacity`.
    pub fn demand_summary(&self, capacity: &ResourceVec, scope: PriScoreScope) -> DemandSummary {
        joint_demand_summary(
            self.jobs.iter().map(|j| {
                (
                    j.job.as_ref(),
                    &j.state,
                    j.pri_scores.as_deref().map(Vec::as_slice),
                )
            }),
            capacity,
            scope,
        )
    }

    /// Decisions the policy made so far.
    pub fn decisions(&self) -> u64 {
        self.decisions
    }

    /// Records that `task` of `job` finished at `now_s`; returns the job when that was its
    /// last task (it leaves the session).
    pub fn task_finished(
        &mut self,
        job: JobKey,
        task: TaskRef,
        now_s: f64,
    ) -> Result<Option<SessionJob>, SessionError> {
        let i = self.index_of(job)?;
        let entry = &mut self.jobs[i];
        let machine = entry.state.running_on(task);
        entry
            .state
            .try_mark_finished(&entry.job, task, now_s)
            .map_err(|source| SessionError::Task { job, source })?;
        if !entry.state.is_complete() {
            // The room the task freed keeps working on its stage (on a machine of several
            // tasks, the stage last placed there may be another job's).
            if let Some(machine) = machine.filter(|&m| m != UNPLACED) {
                self.last_stage.insert(machine, (job, task.stage()));
            }
            return Ok(None);
        }
        self.last_stage.retain(|_, (key, _)| *key != job);
        Ok(Some(self.jobs.remove(i)))
    }

    /// Takes over a task an earlier process of this session's framework launched (framework
    /// failover, from its journal): a task it saw finish is finished (returning the job when
    /// that was its last task, as [`Session::task_finished`] does); one still open runs, on a
    /// machine not known until the master reports it, and is never launched again while it
    /// may run. Tasks are restored in the order they were launched, so that a task's parents
    /// finished before it.
    pub fn restore_task(
        &mut self,
        job: JobKey,
        task: TaskRef,
        finished: bool,
    ) -> Result<Option<SessionJob>, SessionError> {
        let i = self.index_of(job)?;
        self.jobs[i]
            .state
            .try_mark_launched(task, UNPLACED, 0.0)
            .map_err(|source| SessionError::Task { job, source })?;
        if finished {
            self.task_finished(job, task, 0.0)
        } else {
            Ok(None)
        }
    }

    /// Records that a running `task` of `job` was lost: it becomes runnable again.
    pub fn task_lost(&mut self, job: JobKey, task: TaskRef) -> Result<(), SessionError> {
        let i = self.index_of(job)?;
        self.jobs[i]
            .state
            .try_mark_lost(task)
            .map_err(|source| SessionError::Task { job, source })
    }

    fn index_of(&self, job: JobKey) -> Result<usize, SessionError> {
        // Keys grow with arrival order, and so does the list.
        self.jobs
            .binary_search_by_key(&job, |j| j.key)
            .map_err(|_| SessionError::UnknownJob(job))
    }

    /// One scheduling event: launches tasks on `offers` at `now_s`, first on the machines that
    /// keep working on their stage, then by the policy's actions.
    pub fn schedule(&mut self, offers: &[SessionOffer], now_s: f64) -> Vec<SessionLaunch> {
        let mut offers = offers.to_vec();
        let mut launches = self.continue_stages(&mut offers, now_s);
        let mut chosen: BTreeSet<(JobKey, StageIdx)> = BTreeSet::new();
        loop {
            let candidates = self.candidates(&offers, &chosen);
            if candidates.is_empty() {
                return launches;
            }
            let offer_jobs: Vec<Option<JobKey>> = offers
                .iter()
                .map(|o| self.last_stage.get(&o.machine).map(|(job, _)| *job))
                .collect();
            let view = SessionView {
                jobs: &self.jobs,
                offers: &offers,
                offer_jobs: &offer_jobs,
                max_limit: self.max_limit,
                now_s,
                cluster_capacity: self.cluster_capacity,
            };
            let action = self.policy.choose(&view, &candidates);
            self.decisions += 1;
            let candidate = candidates[action.candidate.min(candidates.len() - 1)];
            let limit = action.limit.clamp(candidate.min_limit, self.max_limit);
            let entry = &mut self.jobs[candidate.job];
            chosen.insert((entry.key, candidate.stage));
            entry.limit = Some(limit);
            let room = limit.saturating_sub(entry.state.num_running());
            // The machines already working for the job first, then those working for none,
            // then the rest: a machine that changes jobs moves (Decima assigns the executors
            // its source job freed).
            let mut order: Vec<usize> = (0..offers.len()).collect();
            order.sort_by_key(|&o| match offer_jobs[o] {
                Some(job) if job == entry.key => 0,
                None => 1,
                Some(_) => 2,
            });
            let placed = launch_stage(
                entry,
                candidate.stage,
                room,
                &mut offers,
                &order,
                now_s,
                true,
            );
            for launch in &placed {
                self.last_stage
                    .insert(launch.machine, (launch.job, candidate.stage));
            }
            launches.extend(placed);
        }
    }

    /// Machines whose last stage still has runnable tasks take them, while the job is under
    /// its limit.
    fn continue_stages(&mut self, offers: &mut [SessionOffer], now_s: f64) -> Vec<SessionLaunch> {
        let mut launches = Vec::new();
        for o in 0..offers.len() {
            let Some(&(key, stage)) = self.last_stage.get(&offers[o].machine) else {
                continue;
            };
            let Ok(i) = self.index_of(key) else {
                continue;
            };
            let entry = &mut self.jobs[i];
            let limit = entry.limit.unwrap_or(self.max_limit);
            let room = limit.saturating_sub(entry.state.num_running());
            launches.extend(launch_stage(
                entry,
                stage,
                room,
                &mut offers[o..=o],
                &[0],
                now_s,
                false,
            ));
        }
        launches
    }

    /// Every runnable stage with a task that fits some offer, not chosen yet in this event,
    /// whose job may grow.
    fn candidates(
        &self,
        offers: &[SessionOffer],
        chosen: &BTreeSet<(JobKey, StageIdx)>,
    ) -> Vec<StageCandidate> {
        let mut candidates = Vec::new();
        for (j, entry) in self.jobs.iter().enumerate() {
            let min_limit = entry.state.num_running() + 1;
            if min_limit > self.max_limit {
                continue;
            }
            for stage in entry.state.runnable_stages() {
                let demand = entry.job.stages[stage].demand;
                if chosen.contains(&(entry.key, stage))
                    || !offers.iter().any(|o| fits(&demand, &o.free))
                {
                    continue;
                }
                candidates.push(StageCandidate {
                    job: j,
                    stage,
                    min_limit,
                });
            }
        }
        candidates
    }
}

/// Launches up to `room` runnable tasks of `stage` on `offers`, first fit in `order` (indices
/// into `offers`), and charges them.
fn launch_stage(
    entry: &mut SessionJob,
    stage: StageIdx,
    room: usize,
    offers: &mut [SessionOffer],
    order: &[usize],
    now_s: f64,
    decided: bool,
) -> Vec<SessionLaunch> {
    let demand = entry.job.stages[stage].demand;
    let tasks: Vec<TaskRef> = entry.state.stage_runnable(stage).take(room).collect();
    let mut launches = Vec::new();
    let mut next = 0;
    for task in tasks {
        while next < order.len() && !fits(&demand, &offers[order[next]].free) {
            next += 1;
        }
        let Some(offer) = order.get(next).and_then(|&o| offers.get_mut(o)) else {
            break;
        };
        offer.free -= demand;
        entry.state.mark_launched(task, offer.machine, now_s);
        launches.push(SessionLaunch {
            job: entry.key,
            task,
            machine: offer.machine,
            decided,
        });
    }
    launches
}

#[cfg(test)]
mod tests;
