//! Breadth-first order within a job: what Tez does (Graphene §2.2 and §7.1: "Tez:
//! breadth-first order of tasks in the DAG running atop YARN's Capacity Scheduler").

use crate::job::{Job, TaskRef};
use crate::policy::baselines::{Baseline, BaselineOrder};
use crate::policy::bundle::{greedy_fill, StageCandidates, StageOrder};
use crate::policy::OfferContext;

/// Each stage's breadth-first level: 0 for roots, otherwise one more than its deepest parent.
/// This is Tez's "distance from root", which its natural-order DAG scheduler turns into
/// request priorities; taking the deepest parent keeps the order consistent with the barriers.
pub fn breadth_first_levels(job: &Job) -> Vec<u32> {
    let mut levels = vec![0u32; job.stages.len()];
    // Stages are in topological order: parents are final before their children.
    for (s, stage) in job.stages.iter().enumerate() {
        levels[s] = stage
            .parents
            .iter()
            .map(|&p| levels[p] + 1)
            .max()
            .unwrap_or(0);
    }
    levels
}

/// Breadth-first order: the runnable stage closest to the roots first (ties by stage order),
/// tasks by index; what does not fit is skipped (Graphene §2.2: the capacity scheduler "picks
/// (in a breadth-first order) a runnable task from the designated DAG that fits"). Which job
/// gets the machine is the capacity scheduler's part, in the allocator.
pub type BfsPolicy = Baseline<BreadthFirst>;

/// The order of [`BfsPolicy`]: each stage's breadth-first level.
#[derive(Clone, Debug)]
pub struct BreadthFirst {
    name: &'static str,
    levels: Vec<u32>,
}

impl BfsPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> BfsPolicy {
        BfsPolicy::named(job, "bfs")
    }

    /// The same order under another name: the DRF baseline's intra-job side is Tez's
    /// breadth-first order too (see [`super::drf`]).
    pub(crate) fn named(job: &Job, name: &'static str) -> BfsPolicy {
        let order = BreadthFirst {
            name,
            levels: breadth_first_levels(job),
        };
        Baseline::with(job, order, StageOrder::by_index(job))
    }
}

impl BaselineOrder for BreadthFirst {
    fn name(&self) -> &'static str {
        self.name
    }

    fn fill(&self, _job: &Job, offer: &OfferContext, cands: Vec<StageCandidates>) -> Vec<TaskRef> {
        greedy_fill(&offer.free, cands, |c, t| {
            (self.levels[c.stage], c.stage, t.index)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};
    use crate::policy::{JobPolicy, JobState};

    #[test]
    fn levels_are_distances_from_the_roots_through_the_deepest_parent() {
        let j = job(&[
            (0, &[], &[1.0], "cpus=1"),
            (1, &[0], &[1.0], "cpus=1"),
            (2, &[1], &[1.0], "cpus=1"),
            (3, &[], &[1.0], "cpus=1"),
            (4, &[3, 2], &[1.0], "cpus=1"),
        ]);
        assert_eq!(breadth_first_levels(&j), vec![0, 1, 2, 0, 3]);
    }

    #[test]
    fn shallower_stages_go_first() {
        // Stage a (root) -> b; c is a root listed after b in the file. Once a finished, b
        // (level 1) and c (level 0) are runnable: c goes first although b comes first in
        // topological order.
        let j = job(&[
            (0, &[], &[1.0], "cpus=1"),
            (1, &[0], &[1.0, 1.0], "cpus=4"),
            (2, &[], &[1.0, 1.0], "cpus=4"),
        ]);
        let mut state = JobState::new(&j);
        state.mark_launched(TaskRef::new(0, 0), 0, 0.0);
        state.mark_finished(&j, TaskRef::new(0, 0), 1.0);
        let idx_c = j.stages.iter().position(|s| s.id == 2).unwrap();
        let idx_b = j.stages.iter().position(|s| s.id == 1).unwrap();
        let mut p = BfsPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=12"));
        assert_eq!(
            d.launch,
            vec![
                TaskRef::new(idx_c, 0),
                TaskRef::new(idx_c, 1),
                TaskRef::new(idx_b, 0)
            ]
        );
    }
}
