//! Critical-path scheduling within a job (CPSched, Graphene §2.2: "pick tasks along the
//! critical path in the DAG. The CP for a task is the longest path from the task to the job
//! output").

use crate::job::{Job, TaskRef};
use crate::policy::bundle::{fit_limit, greedy_fill, RunnableQueues, StageOrder};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision,
};

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
#[derive(Clone, Debug)]
pub struct CriticalPathPolicy {
    down: Vec<f64>,
    queues: RunnableQueues,
}

impl CriticalPathPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> CriticalPathPolicy {
        CriticalPathPolicy {
            down: downstream_path_lengths(job),
            queues: RunnableQueues::new(job, StageOrder::by_key(job, |t| -job.duration(t))),
        }
    }

    /// A task's critical-path length: its duration plus the longest path after its stage.
    pub fn path_length(&self, job: &Job, t: TaskRef) -> f64 {
        job.duration(t) + self.down[t.stage()]
    }

    fn key(&self, job: &Job, stage: usize, t: TaskRef) -> (f64, usize, u32) {
        (-self.path_length(job, t), stage, t.index)
    }
}

impl JobPolicy for CriticalPathPolicy {
    fn name(&self) -> &str {
        "cp"
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        let cands = self.queues.candidates(job, state, fit_limit(offer.free));
        OfferDecision {
            launch: greedy_fill(&offer.free, cands, |c, t| self.key(job, c.stage, t)),
            leftover: LeftoverAction::Decline,
        }
    }

    fn replan(&mut self, _job: &Job, _state: &JobState) {
        self.queues.reset();
    }
}

impl IntraJobPolicy for CriticalPathPolicy {
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
        greedy_fill(&offer.free, cands, |c, t| self.key(job, c.stage, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};

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
