//! The simulated frameworks. [`SimFramework`]: a job run as its own framework, as a Spark
//! application runs on Mesos or a Tez application master on YARN. It holds the job's
//! [`JobState`], its intra-job [`JobPolicy`] and, for the Graphene policies, the offline plan's
//! priScores, and answers offers exactly as the production DAG-job framework does.
//! [`SessionFramework`]: every job of a run in one framework, a multi-job [`Session`] (Decima
//! §5.2, [`crate::scheduling::SessionScheduling`]).

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::sync::Arc;

use fullerene_proto::messages::DemandSummary;
use fullerene_proto::{FrameworkId, ResourceVec};
use fullerene_reservation::ReservationId;
use fullerene_sdk::policy::{JobPolicy, JobState, OfferContext, OfferDecision, PriScoreScope};
use fullerene_sdk::reserve::ReservationAtoms;
use fullerene_sdk::session::{JobKey, Session, SessionJob};
use fullerene_sdk::{Job, TaskRef};

/// Up to this many tasks, a bundle is checked for repeats by scanning the tasks before each.
const LINEAR_REPEAT_CHECK: usize = 32;

/// A framework's live state during a run.
pub(crate) struct SimFramework<'a> {
    /// The id it registered with.
    pub id: FrameworkId,
    /// The job's DAG (shared by cycled copies).
    pub job: &'a Job,
    /// Index of its group in the run's sorted group list.
    pub group: usize,
    /// Progress of its tasks.
    pub state: JobState,
    /// The stage of each atom of the job's own reservation, worked out the first time the plan
    /// follower asks how far the job has got, with the reservation's id (`None`: the
    /// reservation is not of the job's form).
    pub reservation_atoms: OnceCell<(ReservationId, Option<ReservationAtoms>)>,
    policy: Box<dyn JobPolicy>,
    pri_scores: Option<&'a [Vec<f64>]>,
}

impl<'a> SimFramework<'a> {
    /// A framework that just arrived: nothing ran yet.
    pub(crate) fn new(
        id: FrameworkId,
        job: &'a Job,
        group: usize,
        policy: Box<dyn JobPolicy>,
        pri_scores: Option<&'a [Vec<f64>]>,
    ) -> SimFramework<'a> {
        SimFramework {
            id,
            job,
            group,
            state: JobState::new(job),
            reservation_atoms: OnceCell::new(),
            policy,
            pri_scores,
        }
    }

    /// The policy's name, for errors.
    pub(crate) fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// The summary of pending demand the framework keeps the master informed of (DESIGN.md,
    /// step 2), remaining work measured in seconds of the whole cluster.
    pub(crate) fn demand_summary(
        &self,
        cluster_capacity: &ResourceVec,
        scope: PriScoreScope,
    ) -> DemandSummary {
        self.state
            .demand_summary(self.job, cluster_capacity, self.pri_scores, scope)
    }

    /// When the policy next wants to start a task it left for later ([`JobPolicy::next_start_s`]).
    pub(crate) fn next_start_s(&self) -> Option<f64> {
        self.policy.next_start_s()
    }

    /// Whether the policy reads its share `A_k` ([`JobPolicy::reads_fair_share`]).
    pub(crate) fn reads_fair_share(&self) -> bool {
        self.policy.reads_fair_share()
    }

    /// Asks the policy for a bundle and checks it the way the master checks an accept: every
    /// task runnable and named once ([`check_bundle`]). Returns the decision and the bundle's
    /// demands, or why it is invalid. Fitting the machine is checked by the caller, which knows
    /// the machine.
    pub(crate) fn answer(
        &mut self,
        offer: &OfferContext,
    ) -> Result<(OfferDecision, Vec<ResourceVec>), String> {
        let decision = self.policy.on_offer(self.job, &self.state, offer);
        let state = &self.state;
        let demands = check_bundle(self.job, &decision.launch, |task| {
            if state.is_runnable(task) {
                Ok(())
            } else {
                Err(format!(
                    "task {} is not runnable (status {:?})",
                    describe(self.job, task),
                    state.status(task)
                ))
            }
        })?;
        Ok((decision, demands))
    }
}

/// Checks a bundle of `job`'s tasks the way the master checks an accept: every task named once
/// and, by `ready`, in a state to be launched. Returns the tasks' demands, or why the bundle is
/// invalid.
pub(crate) fn check_bundle(
    job: &Job,
    launch: &[TaskRef],
    ready: impl Fn(TaskRef) -> Result<(), String>,
) -> Result<Vec<ResourceVec>, String> {
    // Bundles are mostly a handful of tasks, for which a scan of the earlier ones is cheaper
    // than a set (the set is only filled, and allocated, for large bundles).
    let linear = launch.len() <= LINEAR_REPEAT_CHECK;
    let mut seen = BTreeSet::new();
    let mut demands = Vec::with_capacity(launch.len());
    for (i, &task) in launch.iter().enumerate() {
        let repeated = if linear {
            launch[..i].contains(&task)
        } else {
            !seen.insert(task)
        };
        if repeated {
            return Err(format!("task {} is launched twice", describe(job, task)));
        }
        ready(task)?;
        demands.push(job.demand(task));
    }
    Ok(demands)
}

/// The one framework of a run in session mode ([`crate::scheduling::SessionScheduling`]):
/// every job of the run joins its [`Session`] when it arrives and leaves it when its last task
/// finishes. The session's keys are handed out in arrival order; the engine knows jobs by their
/// index in the run.
pub(crate) struct SessionFramework {
    /// The id it registered with.
    pub id: FrameworkId,
    /// The live jobs and the policy.
    pub session: Session,
    /// Its demand summary changed since it was last sent.
    pub dirty: bool,
    /// The run's job index of each session key.
    job_of_key: Vec<usize>,
    /// The session key of each of the run's jobs, once it arrived.
    key_of_job: Vec<Option<JobKey>>,
    /// Each source's DAG, shared by its copies (made at the first copy's arrival).
    dags: Vec<Option<Arc<Job>>>,
    /// Each source's priScores, shared likewise, when the policy reads them.
    pri_scores: Option<Vec<Option<PriScores>>>,
}

/// One job's priScores, per stage and task, as a session shares them.
type PriScores = Arc<Vec<Vec<f64>>>;

impl SessionFramework {
    /// A session framework with no job yet, for a run of `jobs` jobs drawn from `sources` jobs
    /// of the workload file; `reads_pri_scores` when its policy reads Graphene's priScores.
    pub(crate) fn new(
        id: FrameworkId,
        session: Session,
        reads_pri_scores: bool,
        sources: usize,
        jobs: usize,
    ) -> SessionFramework {
        SessionFramework {
            id,
            session,
            dirty: false,
            job_of_key: Vec::with_capacity(jobs),
            key_of_job: vec![None; jobs],
            dags: vec![None; sources],
            pri_scores: reads_pri_scores.then(|| vec![None; sources]),
        }
    }

    /// Whether the policy reads Graphene's priScores.
    pub(crate) fn reads_pri_scores(&self) -> bool {
        self.pri_scores.is_some()
    }

    /// The run's job `j`, a copy of the file's job `source` (`dag`), arrives at `now_s`, with
    /// its plan's priScores when the policy reads them.
    pub(crate) fn add_job(
        &mut self,
        j: usize,
        source: usize,
        dag: &Job,
        now_s: f64,
        pri_scores: Option<&[Vec<f64>]>,
    ) {
        let dag = self.dags[source]
            .get_or_insert_with(|| Arc::new(dag.clone()))
            .clone();
        let scores = match (&mut self.pri_scores, pri_scores) {
            (Some(cache), Some(scores)) => Some(
                cache[source]
                    .get_or_insert_with(|| Arc::new(scores.to_vec()))
                    .clone(),
            ),
            _ => None,
        };
        let key = self.session.add_job(dag, now_s, scores);
        self.key_of_job[j] = Some(key);
        self.job_of_key.push(j);
        self.dirty = true;
    }

    /// The session key of the run's job `j`, once it arrived.
    pub(crate) fn key_of(&self, j: usize) -> Option<JobKey> {
        self.key_of_job.get(j).copied().flatten()
    }

    /// The run's job index of session key `key`.
    pub(crate) fn job_of(&self, key: JobKey) -> Option<usize> {
        usize::try_from(key)
            .ok()
            .and_then(|k| self.job_of_key.get(k))
            .copied()
    }

    /// The run's job `j` in the session, while it is live.
    pub(crate) fn job(&self, j: usize) -> Option<&SessionJob> {
        self.session.job(self.key_of(j)?)
    }

    /// The summary of pending demand it keeps the master informed of: the sum over its live
    /// jobs ([`Session::demand_summary`]).
    pub(crate) fn demand_summary(
        &self,
        cluster_capacity: &ResourceVec,
        scope: PriScoreScope,
    ) -> DemandSummary {
        self.session.demand_summary(cluster_capacity, scope)
    }
}

/// `stage-id.index (stage name)` for error messages.
pub(crate) fn describe(job: &Job, task: TaskRef) -> String {
    match job.stages.get(task.stage()) {
        Some(stage) => format!("{}.{} (`{}`)", stage.id, task.index, stage.name),
        None => format!("#{}.{}", task.stage, task.index),
    }
}
