//! Shortest task first within a job.

use crate::job::{Job, TaskRef};
use crate::policy::baselines::{Baseline, BaselineOrder};
use crate::policy::bundle::{greedy_fill, StageCandidates, StageOrder};
use crate::policy::OfferContext;

/// Shortest (expected) task first across all of the job's runnable tasks (ties: stage order,
/// then index); tasks that do not fit are skipped. Shortest *job* first is the allocator's part.
pub type SjfPolicy = Baseline<ShortestTask>;

/// The order of [`SjfPolicy`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ShortestTask;

impl SjfPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> SjfPolicy {
        Baseline::with(
            job,
            ShortestTask,
            StageOrder::by_key(job, |t| job.duration(t)),
        )
    }
}

impl BaselineOrder for ShortestTask {
    fn name(&self) -> &'static str {
        "sjf"
    }

    fn fill(&self, job: &Job, offer: &OfferContext, cands: Vec<StageCandidates>) -> Vec<TaskRef> {
        greedy_fill(&offer.free, cands, |c, t| {
            (job.duration(t), c.stage, t.index)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};
    use crate::policy::{JobPolicy, JobState};

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
