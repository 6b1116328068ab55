//! Shortest task first within a job.

use crate::job::{Job, TaskRef};
use crate::policy::bundle::{fit_limit, greedy_fill, RunnableQueues, StageOrder};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision,
};

/// Shortest (expected) task first across all of the job's runnable tasks (ties: stage order,
/// then index); tasks that do not fit are skipped. Shortest *job* first is the allocator's part.
#[derive(Clone, Debug)]
pub struct SjfPolicy {
    queues: RunnableQueues,
}

impl SjfPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> SjfPolicy {
        SjfPolicy {
            queues: RunnableQueues::new(job, StageOrder::by_key(job, |t| job.duration(t))),
        }
    }
}

fn sjf_key(job: &Job, stage: usize, t: TaskRef) -> (f64, usize, u32) {
    (job.duration(t), stage, t.index)
}

impl JobPolicy for SjfPolicy {
    fn name(&self) -> &str {
        "sjf"
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        let cands = self.queues.candidates(job, state, fit_limit(offer.free));
        OfferDecision {
            launch: greedy_fill(&offer.free, cands, |c, t| sjf_key(job, c.stage, t)),
            leftover: LeftoverAction::Decline,
        }
    }

    fn replan(&mut self, _job: &Job, _state: &JobState) {
        self.queues.reset();
    }
}

impl IntraJobPolicy for SjfPolicy {
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
        greedy_fill(&offer.free, cands, |c, t| sjf_key(job, c.stage, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};

    #[test]
    fn shortest_task_first_across_stages() {
        let j = job(&[
            (0, &[], &[5.0, 1.0, 3.0], "cpus=1"),
            (1, &[], &[2.0, 0.5], "cpus=1"),
        ]);
        let state = JobState::new(&j);
        let mut p = SjfPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=4"));
        assert_eq!(
            d.launch,
            vec![
                TaskRef::new(1, 1),
                TaskRef::new(0, 1),
                TaskRef::new(1, 0),
                TaskRef::new(0, 2)
            ]
        );
    }
}
