//! FIFO within a job: stage order (the job's topological order), then task index.

use crate::job::{Job, TaskRef};
use crate::policy::bundle::{fit_limit, greedy_fill, RunnableQueues, StageOrder};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision,
};

/// First in, first out within the job: the earliest stage (in the job's topological order),
/// then the lowest task index; tasks that do not fit are skipped, so the bundle fills the offer.
#[derive(Clone, Debug)]
pub struct FifoPolicy {
    queues: RunnableQueues,
}

impl FifoPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> FifoPolicy {
        FifoPolicy {
            queues: RunnableQueues::new(job, StageOrder::by_index(job)),
        }
    }
}

fn fifo_key(stage: usize, t: TaskRef) -> (usize, u32) {
    (stage, t.index)
}

impl JobPolicy for FifoPolicy {
    fn name(&self) -> &str {
        "fifo"
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        let cands = self.queues.candidates(job, state, fit_limit(offer.free));
        OfferDecision {
            launch: greedy_fill(&offer.free, cands, |c, t| fifo_key(c.stage, t)),
            leftover: LeftoverAction::Decline,
        }
    }

    fn replan(&mut self, _job: &Job, _state: &JobState) {
        self.queues.reset();
    }
}

impl IntraJobPolicy for FifoPolicy {
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
        greedy_fill(&offer.free, cands, |c, t| fifo_key(c.stage, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};

    #[test]
    fn takes_stages_in_order_and_tasks_by_index() {
        let j = job(&[
            (0, &[], &[5.0, 1.0], "cpus=4"),
            (1, &[], &[0.5, 0.1], "cpus=4"),
            (2, &[], &[9.0], "cpus=2"),
        ]);
        let state = JobState::new(&j);
        let mut p = FifoPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=12"));
        assert_eq!(
            d.launch,
            vec![TaskRef::new(0, 0), TaskRef::new(0, 1), TaskRef::new(1, 0)]
        );
        // A stage that does not fit is skipped, the next one that fits is taken.
        let d = p.on_offer(&j, &state, &offer("cpus=3"));
        assert_eq!(d.launch, vec![TaskRef::new(2, 0)]);
    }
}
