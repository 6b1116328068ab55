//! FIFO within a job: stage order (the job's topological order), then task index.

use crate::job::{Job, TaskRef};
use crate::policy::baselines::{Baseline, BaselineOrder};
use crate::policy::bundle::{greedy_fill, StageCandidates, StageOrder};
use crate::policy::OfferContext;

/// First in, first out within the job: the earliest stage (in the job's topological order),
/// then the lowest task index; tasks that do not fit are skipped, so the bundle fills the offer.
pub type FifoPolicy = Baseline<Fifo>;

/// The order of [`FifoPolicy`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Fifo;

impl FifoPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> FifoPolicy {
        Baseline::with(job, Fifo, StageOrder::by_index(job))
    }
}

impl BaselineOrder for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn fill(&self, _job: &Job, offer: &OfferContext, cands: Vec<StageCandidates>) -> Vec<TaskRef> {
        greedy_fill(&offer.free, cands, |c, t| (c.stage, t.index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};
    use crate::policy::{JobPolicy, JobState};

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
