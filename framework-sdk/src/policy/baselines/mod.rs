//! The baselines the papers compare against, as intra-job policies behind [`JobPolicy`]
//! (their inter-job halves are the master's allocator, see `PolicyKind`):
//!
//! | policy | intra-job order | source |
//! | --- | --- | --- |
//! | [`FifoPolicy`] | stage order (topological), then task index | FIFO |
//! | [`BfsPolicy`] | breadth-first: distance from the roots, then stage, then index | Tez (Graphene §2.2, §7.1) |
//! | [`drf_policy`] | Tez's breadth-first order, the DRF baseline's intra-job side | Carbyne §5.1, Graphene Table 3 |
//! | [`CriticalPathPolicy`] | longest remaining path to the job's end first | CPSched (Graphene §2.2) |
//! | [`TetrisPolicy`] | best alignment with the free resources, SRTF among equals | Tetris (Graphene §2.2) |
//! | [`SjfPolicy`] | shortest task first | SJF |
//!
//! All are work-conserving: a bundle stops only when no runnable task fits what is left of the
//! offer (Graphene §2.2: "all of the schedulers are work-conserving"), and none overbooks.
//! They differ only in their order, a [`BaselineOrder`]; one generic [`Baseline`] does the
//! offer handling they share.

use crate::job::{Job, TaskRef};
use crate::policy::bundle::{fit_limit, RunnableQueues, StageCandidates, StageOrder};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision,
};

mod bfs;
mod critical_path;
mod drf;
mod fifo;
mod sjf;
mod tetris;

pub use bfs::{breadth_first_levels, BfsPolicy, BreadthFirst};
pub use critical_path::{downstream_path_lengths, CriticalPath, CriticalPathPolicy};
pub use drf::drf_policy;
pub use fifo::{Fifo, FifoPolicy};
pub use sjf::{ShortestTask, SjfPolicy};
pub use tetris::{Tetris, TetrisPolicy};

/// What makes one baseline: its name and how it fills an offer from the runnable tasks.
pub trait BaselineOrder: Send {
    /// Short name, as used on the command line.
    fn name(&self) -> &'static str;

    /// The bundle for `offer`, chosen among `cands`: each runnable stage's candidate tasks in
    /// this baseline's within-stage order, at most as many per stage as fit the offer. Takes
    /// tasks until none of the rest fits what is left of `offer.free`.
    fn fill(&self, job: &Job, offer: &OfferContext, cands: Vec<StageCandidates>) -> Vec<TaskRef>;
}

/// A baseline intra-job policy: a [`BaselineOrder`] behind the offer handling every baseline
/// shares. Each stage's runnable tasks are walked in a fixed within-stage order, cut to what
/// fits the offer, filled by the order, and the rest of the offer is declined (no baseline
/// yields or overbooks).
#[derive(Clone, Debug)]
pub struct Baseline<O> {
    order: O,
    queues: RunnableQueues,
}

impl<O: BaselineOrder> Baseline<O> {
    /// The policy for `job`: `order`, with each stage's tasks in `within_stage` order.
    pub(crate) fn with(job: &Job, order: O, within_stage: StageOrder) -> Baseline<O> {
        Baseline {
            order,
            queues: RunnableQueues::new(job, within_stage),
        }
    }

    /// The baseline's order.
    pub fn order(&self) -> &O {
        &self.order
    }
}

impl<O: BaselineOrder> JobPolicy for Baseline<O> {
    fn name(&self) -> &str {
        self.order.name()
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        let cands = self.queues.candidates(job, state, fit_limit(offer.free));
        OfferDecision {
            launch: self.order.fill(job, offer, cands),
            leftover: LeftoverAction::Decline,
        }
    }

    fn replan(&mut self, _job: &Job, _state: &JobState) {
        self.queues.reset();
    }
}

impl<O: BaselineOrder> IntraJobPolicy for Baseline<O> {
    fn bundle_among(
        &mut self,
        job: &Job,
        state: &JobState,
        offer: &OfferContext,
        tasks: &[TaskRef],
    ) -> Vec<TaskRef> {
        let runnable = tasks.iter().copied().filter(|t| state.is_runnable(*t));
        let cands = self
            .queues
            .order()
            .candidates_from(job, runnable, fit_limit(offer.free));
        self.order.fill(job, offer, cands)
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use fullerene_proto::messages::OfferKind;

    use crate::job::Job;
    use crate::policy::OfferContext;

    use crate::testkit::{self, machine, res};

    pub(crate) fn offer(free: &str) -> OfferContext {
        let capacity = machine();
        OfferContext {
            machine: 0,
            free: res(free),
            capacity,
            kind: OfferKind::Regular,
            now_s: 0.0,
            cluster_capacity: capacity,
            fair_share: capacity,
            guaranteed: false,
        }
    }

    /// `(id, parents, durations, demand)`
    pub(crate) fn job(stages: &[(u32, &[u32], &[f64], &str)]) -> Job {
        testkit::job(
            "j",
            "g",
            None,
            stages
                .iter()
                .map(|(id, parents, durations, demand)| {
                    testkit::stage(*id, parents, durations, res(demand))
                })
                .collect(),
        )
    }
}
