//! The intra-job side of the DRF baseline.
//!
//! Both papers pair DRF across jobs with Tez's default intra-job scheduler: Carbyne §5.1 ("DRF:
//! YARN's implementation of the DRF algorithm for inter-job scheduling along with the default
//! intra-job scheduler in Tez that decides on a breadth-first ordering for scheduling tasks")
//! and Graphene's Table 3 ("Tez+DRF"). What makes the baseline DRF lives in the allocator
//! (which framework is offered a machine: the one with the smallest dominant share); within the
//! job it fills the offer in Tez's breadth-first order.

use crate::job::{Job, TaskRef};
use crate::policy::baselines::breadth_first_levels;
use crate::policy::bundle::{fit_limit, greedy_fill, RunnableQueues, StageOrder};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision,
};

/// The DRF baseline's intra-job policy (Carbyne §5.1): on every offer the job, chosen by DRF,
/// takes runnable tasks in Tez's breadth-first order (level, then stage, then index), skipping
/// those that do not fit on any resource, until nothing more fits.
#[derive(Clone, Debug)]
pub struct DrfPolicy {
    levels: Vec<u32>,
    queues: RunnableQueues,
}

impl DrfPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> DrfPolicy {
        DrfPolicy {
            levels: breadth_first_levels(job),
            queues: RunnableQueues::new(job, StageOrder::by_index(job)),
        }
    }

    fn key(&self, stage: usize, t: TaskRef) -> (u32, usize, u32) {
        (self.levels[stage], stage, t.index)
    }
}

impl JobPolicy for DrfPolicy {
    fn name(&self) -> &str {
        "drf"
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        let cands = self.queues.candidates(job, state, fit_limit(offer.free));
        OfferDecision {
            launch: greedy_fill(&offer.free, cands, |c, t| self.key(c.stage, t)),
            leftover: LeftoverAction::Decline,
        }
    }

    fn replan(&mut self, _job: &Job, _state: &JobState) {
        self.queues.reset();
    }
}

impl IntraJobPolicy for DrfPolicy {
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
        greedy_fill(&offer.free, cands, |c, t| self.key(c.stage, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};

    #[test]
    fn fills_multi_resource_offers_in_breadth_first_order() {
        let j = job(&[
            (0, &[], &[1.0], "cpus=1"),
            (1, &[0], &[1.0, 1.0], "cpus=1,mem_mib=30000"),
            (2, &[], &[1.0, 1.0, 1.0], "cpus=2,mem_mib=10000"),
        ]);
        let mut state = JobState::new(&j);
        state.mark_launched(TaskRef::new(0, 0), 0, 0.0);
        state.mark_finished(&j, TaskRef::new(0, 0), 1.0);
        let mut p = DrfPolicy::new(&j);
        // Level 0 (stage 2) first: its three tasks take 30000 MiB, leaving room for one
        // task of the level-1 stage, which is then memory-bound.
        let d = p.on_offer(&j, &state, &offer("cpus=16,mem_mib=65536"));
        let c = j.stages.iter().position(|s| s.id == 2).unwrap();
        let b = j.stages.iter().position(|s| s.id == 1).unwrap();
        assert_eq!(
            d.launch,
            vec![
                TaskRef::new(c, 0),
                TaskRef::new(c, 1),
                TaskRef::new(c, 2),
                TaskRef::new(b, 0)
            ]
        );
    }
}
