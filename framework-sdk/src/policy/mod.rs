//! Online, per-offer scheduling policies of a framework (the second level of the two-level
//! design): given an offer of one machine's free resources, which of the job's runnable tasks to
//! launch there, and what to do with the rest (decline, or yield it altruistically).
//!
//! A policy is sans-IO: the simulator and the production DAG-job framework call the same
//! [`JobPolicy`] with the same [`JobState`].

use fullerene_proto::ResourceVec;

use crate::job::{Job, TaskRef};

pub use fullerene_scheduling::{LeftoverAction, OfferKind};

/// What a policy sees of an offer.
#[derive(Clone, Debug)]
pub struct OfferContext {
    /// A stable index of the offered machine (for locality: where parents ran).
    pub machine: usize,
    /// The resources offered (the machine's free resources, or the yielded part of them).
    pub free: ResourceVec,
    /// The machine's total capacity (for packing scores, which Graphene §5 normalises by it).
    pub capacity: ResourceVec,
    /// Regular (fair) or leftover (yielded by another framework).
    pub kind: OfferKind,
    /// Current time, seconds.
    pub now_s: f64,
    /// The whole cluster's capacity.
    pub cluster_capacity: ResourceVec,
    /// The resources this job would hold under its fair share right now (Carbyne §3.3.1 uses
    /// it to estimate T_k). The allocator computes it from the groups' weights and the jobs
    /// active in each group. Zero where the caller knows the policy does not read it
    /// ([`JobPolicy::reads_fair_share`]).
    pub fair_share: ResourceVec,
    /// Whether it comes out of the guarantee of the reservation the job runs in (Rayon §5.2:
    /// the plan follower's guaranteed capacity). A policy should not give it away: Carbyne's
    /// altruism takes it as greedily as a leftover, since what the job leaves of it goes to
    /// best effort and the reservation is owed it again in the next cycle.
    pub guaranteed: bool,
}

/// A policy's answer to an offer.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferDecision {
    /// Tasks to launch on the offered machine, a bundle in launch order. Their summed demand
    /// fits `free`, except for the overbooking of fungible resources the policy allows itself.
    pub launch: Vec<TaskRef>,
    /// What happens to what is left of the offer.
    pub leftover: LeftoverAction,
}

/// A framework-side scheduling policy for one job.
pub trait JobPolicy: Send {
    /// Short name, as used on the command line (`graphene`, `cp`, ...).
    fn name(&self) -> &str;

    /// Chooses a bundle for `offer`. Must only choose tasks that are runnable in `state`.
    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision;

    /// Called when the job's DAG must be re-planned (tasks were lost); the default keeps the
    /// policy as it is.
    fn replan(&mut self, _job: &Job, _state: &JobState) {}

    /// When the policy will next want to start a task it declined to start so far, if it knows
    /// (Carbyne: the next latest start of a task it left to altruism). A framework asks for
    /// offers again then, so that allocation is driven by events (completions, arrivals, and
    /// these due times) rather than by a periodic re-offer tick. `None`: no such time.
    fn next_start_s(&self) -> Option<f64> {
        None
    }

    /// Whether [`JobPolicy::on_offer`] reads [`OfferContext::fair_share`] (Carbyne's `A_k`).
    /// A master sends the share with every offer, since it does not know the framework's
    /// policy; the simulator, which does, asks its allocator for the share (a progressive
    /// filling over every framework with demand) only for the policies that read it, and
    /// hands the others zero. `false` by default.
    fn reads_fair_share(&self) -> bool {
        false
    }
}

pub mod baselines;
mod bundle;
pub mod carbyne;
pub mod graphene;
pub mod kind;
/// Graphene's scoring primitives (tech report §5, Fig. 8) and the default overbooking
/// allowance, which the policies share with the allocator; defined in `fullerene_scheduling`.
pub mod scoring {
    pub use fullerene_scheduling::fit::DEFAULT_OVERBOOK_ALLOWANCE;
    pub use fullerene_scheduling::scoring::*;
}
#[cfg(test)]
mod tests;

pub use baselines::{
    drf_policy, BfsPolicy, CriticalPathPolicy, FifoPolicy, SjfPolicy, TetrisPolicy,
};
pub use bundle::{IntraJobPolicy, StageCandidates};
pub use carbyne::{CarbyneParams, CarbynePolicy};
pub use graphene::{GrapheneMatcher, MatcherParams};
pub use kind::{build, PolicyError, PolicyKind, PolicyParams};

pub mod job_state;
pub use job_state::{joint_demand_summary, JobState, JobStateError, PriScoreScope, TaskStatus};
