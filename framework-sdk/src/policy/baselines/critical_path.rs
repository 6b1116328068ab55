//! Critical-path scheduling within a job (CPSched, Graphene §2.2: "pick tasks along the
//! critical path in the DAG. The CP for a task is the longest path from the task to the job
//! output").

use crate::job::{Job, TaskRef};
use crate::policy::baselines::{Baseline, BaselineOrder};
use crate::policy::bundle::{greedy_fill, StageCandidates, StageOrder};
use crate::policy::OfferContext;

/// For each stage, the longest path from the end of any of its tasks to the job's end: the
/// maximum over its children of (the child's longest task + the child's own value). A task's
/// critical-path length is its duration plus its stage's value. Stages are barriers, so a
/// child's path starts with its longest task.
pub fn downstream_path_lengths(job: &Job) -> Vec<f64> {
    let mut down = vec![0.0f64; job.stages.len()];
    for s in (0..job.stages.len()).rev() {
        down[s] = job.stages[s]
            .children
            .iter()
            .map(|&c| job.stages[c].max_duration() + down[c])
            .fold(0.0, f64::max);
    }
    down
}

/// The runnable task with the longest path to the job's end first (ties: stage order, then
/// index); within a stage that is its longest task. Resources are ignored for the order, as in
/// CPSched, and tasks that do not fit are skipped.
///
/// The paths are computed once from the job's static durations: a runnable task's
/// descendants have not started yet (stages are barriers), so its static path is its remaining
/// path.
pub type CriticalPathPolicy = Baseline<CriticalPath>;

/// The order of [`CriticalPathPolicy`]: each stage's longest path after it.
#[derive(Clone, Debug)]
pub struct CriticalPath {
    down: Vec<f64>,
}

impl CriticalPathPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> CriticalPathPolicy {
        let order = CriticalPath {
            down: downstream_path_lengths(job),
        };
        Baseline::with(job, order, StageOrder::by_key(job, |t| -job.duration(t)))
    }

    /// A task's critical-path length ([`CriticalPath::path_length`]).
    pub fn path_length(&self, job: &Job, t: TaskRef) -> f64 {
        self.order().path_length(job, t)
    }
}

impl CriticalPath {
    /// A task's critical-path length: its duration plus the longest path after its stage.
    pub fn path_length(&self, job: &Job, t: TaskRef) -> f64 {
        job.duration(t) + self.down[t.stage()]
    }
}

impl BaselineOrder for CriticalPath {
    fn name(&self) -> &'static str {
        "cp"
    }

    fn fill(&self, job: &Job, offer: &OfferContext, cands: Vec<StageCandidates>) -> Vec<TaskRef> {
        greedy_fill(&offer.free, cands, |c, t| {
            (-self.path_length(job, t), c.stage, t.index)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};
    use crate::policy::{JobPolicy, JobState};

    #[test]
    fn the_task_on_the_longest_remaining_path_goes_first() {
        // Root a (short tasks) leads to a long chain; root b has a long task but nothing after.
        let j = job(&[
            (0, &[], &[1.0, 2.0], "cpus=4"),
            (1, &[0], &[10.0], "cpus=1"),
            (2, &[1], &[10.0], "cpus=1"),
            (3, &[], &[15.0, 3.0], "cpus=4"),
        ]);
        let a = j.stages.iter().position(|s| s.id == 0).unwrap();
        let b = j.stages.iter().position(|s| s.id == 3).unwrap();
        let state = JobState::new(&j);
        let mut p = CriticalPathPolicy::new(&j);
        assert_eq!(p.path_length(&j, TaskRef::new(a, 1)), 22.0);
        assert_eq!(p.path_length(&j, TaskRef::new(b, 0)), 15.0);
        // Room for one task: the one on the longest path (a's 2-second task, path 22).
        let d = p.on_offer(&j, &state, &offer("cpus=4"));
        assert_eq!(d.launch, vec![TaskRef::new(a, 1)]);
        // Room for all: the order is by path length: 22, 21, 15, 3.
        let d = p.on_offer(&j, &state, &offer("cpus=16"));
        assert_eq!(
            d.launch,
            vec![
                TaskRef::new(a, 1),
                TaskRef::new(a, 0),
                TaskRef::new(b, 0),
                TaskRef::new(b, 1)
            ]
        );
    }
}
