//! One simulated framework: a job run as its own framework, as a Spark application runs on Mesos
//! or a Tez application master on YARN. It holds the job's [`JobState`], its intra-job
//! [`JobPolicy`] and, for the Graphene policies, the offline plan's priScores, and answers
//! offers exactly as the production DAG-job framework does.

use std::collections::BTreeSet;

use fullerene_proto::messages::DemandSummary;
use fullerene_proto::{FrameworkId, ResourceVec};
use fullerene_sdk::policy::{JobPolicy, JobState, OfferContext, OfferDecision, PriScoreScope};
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
    /// task runnable and named once. Returns the decision and the bundle's demands, or why it is
    /// invalid. Fitting the machine is checked by the caller, which knows the machine.
    pub(crate) fn answer(
        &mut self,
        offer: &OfferContext,
    ) -> Result<(OfferDecision, Vec<ResourceVec>), String> {
        let decision = self.policy.on_offer(self.job, &self.state, offer);
        // Bundles are mostly a handful of tasks, for which a scan of the earlier ones is cheaper
        // than a set (the set is only filled, and allocated, for large bundles).
        let linear = decision.launch.len() <= LINEAR_REPEAT_CHECK;
        let mut seen = BTreeSet::new();
        let mut demands = Vec::with_capacity(decision.launch.len());
        for (i, &task) in decision.launch.iter().enumerate() {
            let repeated = if linear {
                decision.launch[..i].contains(&task)
            } else {
                !seen.insert(task)
            };
            if repeated {
                return Err(format!(
                    "task {} is launched twice",
                    describe(self.job, task)
                ));
            }
            if !self.state.is_runnable(task) {
                return Err(format!(
                    "task {} is not runnable (status {:?})",
                    describe(self.job, task),
                    self.state.status(task)
                ));
            }
            demands.push(self.job.demand(task));
        }
        Ok((decision, demands))
    }
}

/// `stage-id.index (stage name)` for error messages.
pub(crate) fn describe(job: &Job, task: TaskRef) -> String {
    match job.stages.get(task.stage()) {
        Some(stage) => format!("{}.{} (`{}`)", stage.id, task.index, stage.name),
        None => format!("#{}.{}", task.stage, task.index),
    }
}
