//! Progress of one job: which tasks are waiting, runnable, running or done.
//!
//! The simulator and the production DAG-job framework both keep one [`JobState`] per job and
//! feed it the task events (launched, finished, lost); policies read it on every offer. Offers
//! arrive many times a second and jobs have thousands of tasks, so every event costs O(log n)
//! (plus, when a stage completes, O(tasks of the stages it unlocks), each task once), and the
//! aggregates the policies ask for per offer ([`JobState::srpt`], [`JobState::remaining_work`])
//! cost O(stages), never O(tasks).

use std::collections::{BTreeMap, BTreeSet};

use fullerene_proto::messages::{DemandSummary, PendingDemand};
use fullerene_proto::{ResourceVec, Resources};

use crate::job::{Job, StageIdx, TaskRef};
use crate::policy::scoring::srpt_term;

/// At most this many task shapes go into a [`DemandSummary`] (its doc asks for "a few dozen"),
/// so that the summary a framework sends the master stays small whatever the DAG.
pub const MAX_SUMMARY_SHAPES: usize = 32;

/// Where one task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Some parent stage has not finished yet.
    Waiting,
    /// Every parent stage finished; not running (never launched, or lost and to be retried).
    Runnable,
    /// Launched and not yet finished or lost.
    Running,
    /// Finished successfully.
    Finished,
}

/// A task event that does not match the task's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobStateError {
    /// The task reference names no task of this job.
    #[error("task {stage}.{index} does not exist in this job")]
    UnknownTask {
        /// Stage index.
        stage: u32,
        /// Task index within the stage.
        index: u32,
    },
    /// The event needs the task in another state.
    #[error("task {stage}.{index} is {actual:?}, expected {expected:?}")]
    WrongStatus {
        /// Stage index.
        stage: u32,
        /// Task index within the stage.
        index: u32,
        /// The status the event requires.
        expected: TaskStatus,
        /// The task's status.
        actual: TaskStatus,
    },
}

#[derive(Clone, Debug)]
struct TaskSlot {
    status: TaskStatus,
    attempt: u32,
    duration_s: f64,
    /// Machine and launch time of the current run (meaningful while `Running`; after a
    /// finish, where the task ran).
    machine: usize,
    launched_at_s: f64,
}

#[derive(Clone, Debug)]
struct StageProgress {
    demand: ResourceVec,
    children: Vec<StageIdx>,
    /// Parent stages that have not completed.
    unfinished_parents: usize,
    unfinished_tasks: usize,
    unlaunched_tasks: usize,
    /// Σ duration over tasks not finished (running included).
    unfinished_duration_s: f64,
    /// Σ duration over tasks not running and not finished.
    unlaunched_duration_s: f64,
    /// Runnable task indices (never launched or lost), in index order.
    runnable: BTreeSet<u32>,
    /// The subset of `runnable` that ran before and was lost.
    retry: BTreeSet<u32>,
    /// Machines where this stage's tasks finished: its output's location.
    ran_on: BTreeSet<usize>,
    /// Union of the parents' `ran_on`, sorted, fixed when the stage is unlocked.
    parent_machines: Vec<usize>,
    completed_at_s: Option<f64>,
}

/// The progress of one job's tasks through the DAG (Graphene §5 and Carbyne §3.3 both reason
/// over "runnable" tasks: those whose parent stages all finished).
///
/// Stages are barriers, as in the workload format: a task becomes runnable only when every
/// task of every parent stage has finished.
#[derive(Clone, Debug)]
pub struct JobState {
    /// Flat index of each stage's first task.
    offsets: Vec<usize>,
    tasks: Vec<TaskSlot>,
    stages: Vec<StageProgress>,
    /// Stages with at least one runnable task.
    active_stages: BTreeSet<StageIdx>,
    running: BTreeSet<TaskRef>,
    num_runnable: usize,
    num_finished: usize,
    num_losses: u64,
    epoch: u64,
    dag_epoch: u64,
    completed_at_s: Option<f64>,
}

impl JobState {
    /// A job before any task ran: the tasks of root stages are runnable, the others waiting.
    pub fn new(job: &Job) -> JobState {
        let mut offsets = Vec::with_capacity(job.stages.len());
        let mut tasks = Vec::with_capacity(job.num_tasks());
        let mut stages = Vec::with_capacity(job.stages.len());
        for stage in &job.stages {
            offsets.push(tasks.len());
            tasks.extend(stage.durations.iter().map(|&duration_s| TaskSlot {
                status: TaskStatus::Waiting,
                attempt: 0,
                duration_s,
                machine: 0,
                launched_at_s: 0.0,
            }));
            let total = stage.total_duration();
            stages.push(StageProgress {
                demand: stage.demand,
                children: stage.children.clone(),
                unfinished_parents: stage.parents.len(),
                unfinished_tasks: stage.num_tasks(),
                unlaunched_tasks: stage.num_tasks(),
                unfinished_duration_s: total,
                unlaunched_duration_s: total,
                runnable: BTreeSet::new(),
                retry: BTreeSet::new(),
                ran_on: BTreeSet::new(),
                parent_machines: Vec::new(),
                completed_at_s: None,
            });
        }
        let mut state = JobState {
            offsets,
            tasks,
            stages,
            active_stages: BTreeSet::new(),
            running: BTreeSet::new(),
            num_runnable: 0,
            num_finished: 0,
            num_losses: 0,
            epoch: 0,
            dag_epoch: 0,
            completed_at_s: None,
        };
        for s in 0..state.stages.len() {
            if state.stages[s].unfinished_parents == 0 {
                state.unlock(s);
            }
        }
        state
    }

    fn slot_index(&self, t: TaskRef) -> Option<usize> {
        let stage = t.stage();
        let start = *self.offsets.get(stage)?;
        let end = self
            .offsets
            .get(stage + 1)
            .copied()
            .unwrap_or(self.tasks.len());
        let i = start + t.index as usize;
        (i < end).then_some(i)
    }

    fn unlock(&mut self, stage: StageIdx) {
        let start = self.offsets[stage];
        let end = self
            .offsets
            .get(stage + 1)
            .copied()
            .unwrap_or(self.tasks.len());
        for slot in &mut self.tasks[start..end] {
            slot.status = TaskStatus::Runnable;
        }
        let count = end - start;
        let progress = &mut self.stages[stage];
        // Built from an ascending range: the set is bulk-built in O(count).
        progress.runnable = (0..count as u32).collect();
        self.num_runnable += count;
        self.active_stages.insert(stage);
    }

    fn unlock_with_parent_machines(&mut self, job: &Job, stage: StageIdx) {
        let mut machines: Vec<usize> = job.stages[stage]
            .parents
            .iter()
            .flat_map(|&p| self.stages[p].ran_on.iter().copied())
            .collect();
        machines.sort_unstable();
        machines.dedup();
        self.stages[stage].parent_machines = machines;
        self.unlock(stage);
    }

    /// Every runnable task (parents finished, not launched or lost since), stage by stage in
    /// topological order, by index within a stage.
    pub fn runnable(&self) -> impl Iterator<Item = TaskRef> + '_ {
        self.active_stages
            .iter()
            .flat_map(move |&s| self.stage_runnable(s))
    }

    /// The runnable tasks of one stage, by index.
    pub fn stage_runnable(&self, stage: StageIdx) -> impl Iterator<Item = TaskRef> + '_ {
        self.stages.get(stage).into_iter().flat_map(move |p| {
            p.runnable
                .iter()
                .map(move |&i| TaskRef::new(stage, i as usize))
        })
    }

    /// The runnable tasks of one stage that ran before and were lost, by index. Together with
    /// the never-launched ones (those with [`JobState::attempts`] = 0) they make up
    /// [`JobState::stage_runnable`]; a policy that walks a stage's fresh tasks in its own order
    /// with a cursor finds the retries here instead of rescanning.
    pub fn stage_retries(&self, stage: StageIdx) -> impl Iterator<Item = TaskRef> + '_ {
        self.stages.get(stage).into_iter().flat_map(move |p| {
            p.retry
                .iter()
                .map(move |&i| TaskRef::new(stage, i as usize))
        })
    }

    /// Stages with at least one runnable task, in topological order.
    pub fn runnable_stages(&self) -> impl Iterator<Item = StageIdx> + '_ {
        self.active_stages.iter().copied()
    }

    /// True when `t` is runnable: its parent stages finished and it is neither running nor done.
    pub fn is_runnable(&self, t: TaskRef) -> bool {
        self.status(t) == Some(TaskStatus::Runnable)
    }

    /// The task's status, `None` for a reference outside the job.
    pub fn status(&self, t: TaskRef) -> Option<TaskStatus> {
        self.slot_index(t).map(|i| self.tasks[i].status)
    }

    /// Number of runnable tasks.
    pub fn num_runnable(&self) -> usize {
        self.num_runnable
    }

    /// Number of runnable tasks of one stage.
    pub fn num_runnable_in_stage(&self, stage: StageIdx) -> usize {
        self.stages.get(stage).map_or(0, |p| p.runnable.len())
    }

    /// Number of running tasks.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Number of finished tasks.
    pub fn num_finished(&self) -> usize {
        self.num_finished
    }

    /// How many times a running task was lost, over the job's life.
    pub fn num_losses(&self) -> u64 {
        self.num_losses
    }

    /// Number of tasks in the job.
    pub fn num_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Number of stages in the job.
    pub fn num_stages(&self) -> usize {
        self.stages.len()
    }

    /// Tasks of `stage` not finished yet (running ones included).
    pub fn unfinished_in_stage(&self, stage: StageIdx) -> usize {
        self.stages.get(stage).map_or(0, |p| p.unfinished_tasks)
    }

    /// Tasks of `stage` neither running nor finished (waiting or runnable).
    pub fn unlaunched_in_stage(&self, stage: StageIdx) -> usize {
        self.stages.get(stage).map_or(0, |p| p.unlaunched_tasks)
    }

    /// True when every task of `stage` finished.
    pub fn is_stage_complete(&self, stage: StageIdx) -> bool {
        self.unfinished_in_stage(stage) == 0
    }

    /// True when every parent of `stage` completed (its tasks are, or were, runnable).
    pub fn is_stage_unlocked(&self, stage: StageIdx) -> bool {
        self.stages
            .get(stage)
            .is_some_and(|p| p.unfinished_parents == 0)
    }

    /// When the stage's last task finished.
    pub fn stage_completed_at(&self, stage: StageIdx) -> Option<f64> {
        self.stages.get(stage).and_then(|p| p.completed_at_s)
    }

    /// Running tasks with the machine they run on and their launch time, in task order.
    pub fn running_tasks(&self) -> impl Iterator<Item = (TaskRef, usize, f64)> + '_ {
        self.running.iter().map(move |&t| {
            let slot = &self.tasks[self.offsets[t.stage()] + t.index as usize];
            (t, slot.machine, slot.launched_at_s)
        })
    }

    /// The machine a running task runs on.
    pub fn running_on(&self, t: TaskRef) -> Option<usize> {
        let i = self.slot_index(t)?;
        (self.tasks[i].status == TaskStatus::Running).then_some(self.tasks[i].machine)
    }

    /// When a running task was launched.
    pub fn launched_at(&self, t: TaskRef) -> Option<f64> {
        let i = self.slot_index(t)?;
        (self.tasks[i].status == TaskStatus::Running).then_some(self.tasks[i].launched_at_s)
    }

    /// Records that `t` was launched on `machine` at `now_s`.
    ///
    /// # Panics
    ///
    /// When `t` is not runnable (not a task of this job, parents unfinished, already running or
    /// finished): a policy may only choose runnable tasks, so this is a bug in the caller. Use
    /// [`JobState::try_mark_launched`] where the task comes from outside the process.
    pub fn mark_launched(&mut self, t: TaskRef, machine: usize, now_s: f64) {
        if let Err(e) = self.try_mark_launched(t, machine, now_s) {
            panic!("JobState::mark_launched: {e}");
        }
    }

    /// [`JobState::mark_launched`], with an error instead of a panic.
    pub fn try_mark_launched(
        &mut self,
        t: TaskRef,
        machine: usize,
        now_s: f64,
    ) -> Result<(), JobStateError> {
        let i = self.expect_status(t, TaskStatus::Runnable)?;
        let slot = &mut self.tasks[i];
        slot.status = TaskStatus::Running;
        slot.machine = machine;
        slot.launched_at_s = now_s;
        let duration = slot.duration_s;
        let stage = t.stage();
        let progress = &mut self.stages[stage];
        progress.runnable.remove(&t.index);
        progress.retry.remove(&t.index);
        progress.unlaunched_tasks -= 1;
        progress.unlaunched_duration_s = if progress.unlaunched_tasks == 0 {
            0.0
        } else {
            (progress.unlaunched_duration_s - duration).max(0.0)
        };
        if progress.runnable.is_empty() {
            self.active_stages.remove(&stage);
        }
        self.num_runnable -= 1;
        self.running.insert(t);
        self.epoch += 1;
        Ok(())
    }

    /// Records that the running task `t` finished at `now_s`; when it was its stage's last
    /// task, the children whose parents have now all completed become runnable.
    ///
    /// A report for a task that is not running (a duplicate, or the late report of an attempt
    /// already declared lost) changes nothing: status updates arrive at least once, and a lost
    /// attempt's output is not trusted. [`JobState::try_mark_finished`] says which case it was.
    pub fn mark_finished(&mut self, job: &Job, t: TaskRef, now_s: f64) {
        // Ignoring is the documented behaviour for stale or duplicate reports.
        let _ = self.try_mark_finished(job, t, now_s);
    }

    /// [`JobState::mark_finished`], with an error when the task is not running.
    pub fn try_mark_finished(
        &mut self,
        job: &Job,
        t: TaskRef,
        now_s: f64,
    ) -> Result<(), JobStateError> {
        let i = self.expect_status(t, TaskStatus::Running)?;
        let slot = &mut self.tasks[i];
        slot.status = TaskStatus::Finished;
        let (duration, machine) = (slot.duration_s, slot.machine);
        let stage = t.stage();
        self.running.remove(&t);
        self.num_finished += 1;
        let progress = &mut self.stages[stage];
        progress.unfinished_tasks -= 1;
        progress.unfinished_duration_s = if progress.unfinished_tasks == 0 {
            0.0
        } else {
            (progress.unfinished_duration_s - duration).max(0.0)
        };
        progress.ran_on.insert(machine);
        self.epoch += 1;
        self.dag_epoch += 1;
        if progress.unfinished_tasks == 0 {
            progress.completed_at_s = Some(now_s);
            let children = progress.children.clone();
            for child in children {
                let c = &mut self.stages[child];
                c.unfinished_parents -= 1;
                if c.unfinished_parents == 0 {
                    self.unlock_with_parent_machines(job, child);
                }
            }
        }
        if self.num_finished == self.tasks.len() {
            self.completed_at_s = Some(now_s);
        }
        Ok(())
    }

    /// Records that the running task `t` was lost (its agent died, it failed): it becomes
    /// runnable again and its attempt number grows by one. A report for a task that is not
    /// running changes nothing (see [`JobState::mark_finished`]).
    pub fn mark_lost(&mut self, t: TaskRef) {
        // Ignoring is the documented behaviour for stale or duplicate reports.
        let _ = self.try_mark_lost(t);
    }

    /// [`JobState::mark_lost`], with an error when the task is not running.
    pub fn try_mark_lost(&mut self, t: TaskRef) -> Result<(), JobStateError> {
        let i = self.expect_status(t, TaskStatus::Running)?;
        let slot = &mut self.tasks[i];
        slot.status = TaskStatus::Runnable;
        slot.attempt += 1;
        let duration = slot.duration_s;
        let stage = t.stage();
        self.running.remove(&t);
        let progress = &mut self.stages[stage];
        progress.runnable.insert(t.index);
        progress.retry.insert(t.index);
        progress.unlaunched_tasks += 1;
        progress.unlaunched_duration_s += duration;
        self.active_stages.insert(stage);
        self.num_runnable += 1;
        self.num_losses += 1;
        self.epoch += 1;
        self.dag_epoch += 1;
        Ok(())
    }

    fn expect_status(&self, t: TaskRef, expected: TaskStatus) -> Result<usize, JobStateError> {
        let i = self.slot_index(t).ok_or(JobStateError::UnknownTask {
            stage: t.stage,
            index: t.index,
        })?;
        let actual = self.tasks[i].status;
        if actual != expected {
            return Err(JobStateError::WrongStatus {
                stage: t.stage,
                index: t.index,
                expected,
                actual,
            });
        }
        Ok(i)
    }

    /// The attempt number of the task's current (or next) run: 0 until it is first lost, then
    /// one more per loss (`TaskOrigin::attempt` on the wire). 0 for a reference outside the job.
    pub fn attempts(&self, t: TaskRef) -> u32 {
        self.slot_index(t).map_or(0, |i| self.tasks[i].attempt)
    }

    /// True when every task finished.
    pub fn is_complete(&self) -> bool {
        self.num_finished == self.tasks.len()
    }

    /// When the job's last task finished.
    pub fn completed_at(&self) -> Option<f64> {
        self.completed_at_s
    }

    /// Grows by one on every event (launch, finish, loss): a policy that caches a decision
    /// derived from the state compares it to know when the cache is stale.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Grows by one when a task finishes or is lost: the events after which the remaining DAG
    /// itself differs, and plans over it (Carbyne's reverse packing) must be recomputed.
    /// Launches do not change it: they follow the plan.
    pub fn dag_epoch(&self) -> u64 {
        self.dag_epoch
    }

    /// Σ over unfinished tasks (running ones included) of duration × dominant share of
    /// `capacity`: the job's remaining work, in seconds of the whole `capacity` (Carbyne §3.3.4's
    /// key for leftover redistribution; [`Job::total_work`] before anything ran).
    /// O(stages).
    pub fn remaining_work(&self, _job: &Job, capacity: &ResourceVec) -> f64 {
        self.stages
            .iter()
            .filter(|p| p.unfinished_tasks > 0)
            .map(|p| p.unfinished_duration_s * p.demand.dominant_share(capacity))
            .sum()
    }

    /// Fig. 8's `srpt_j = Σ_{pending u ∈ j} u_duration · |u_demands|`, with |·| the demand
    /// normalised by `capacity` and summed over resources ([`srpt_term`]).
    ///
    /// "Pending" is read as not yet launched (waiting or runnable, lost tasks included): in
    /// Fig. 8 the score ranks the work still competing for machines; the work of running tasks
    /// is already placed. O(stages).
    pub fn srpt(&self, _job: &Job, capacity: &ResourceVec) -> f64 {
        self.stages
            .iter()
            .filter(|p| p.unlaunched_tasks > 0)
            .map(|p| srpt_term(p.unlaunched_duration_s, &p.demand, capacity))
            .sum()
    }

    /// The machines where the tasks of `stage`'s parents ran (sorted, distinct): where its
    /// input lives, for Graphene's remote penalty. Empty for a root stage, and for a stage whose
    /// parents have not all completed yet (it is fixed when the stage becomes runnable).
    pub fn parent_machines(&self, stage: StageIdx) -> &[usize] {
        self.stages
            .get(stage)
            .map_or(&[], |p| p.parent_machines.as_slice())
    }

    /// The compact summary of pending demand a framework sends the master (DESIGN.md, step 2):
    /// runnable tasks grouped by demand vector, each group with its count and the best
    /// priScore among its tasks, best first, at most [`MAX_SUMMARY_SHAPES`] groups; and the
    /// remaining work.
    ///
    /// Without `pri_scores` (policies with no offline plan) every group scores 1.0, so the
    /// allocator ranks this job by packing alone. A priScore missing for some task (a plan of
    /// another shape) counts as 0. With [`PriScoreScope::WithinJob`] the scores are divided by
    /// the best one, so the job's next task in its plan scores 1 (see [`PriScoreScope`]).
    /// Costs O(stages) without `pri_scores`, O(runnable tasks) with them (the best score of a
    /// stage has to be found among its runnable tasks).
    pub fn demand_summary(
        &self,
        job: &Job,
        capacity: &ResourceVec,
        pri_scores: Option<&[Vec<f64>]>,
        scope: PriScoreScope,
    ) -> DemandSummary {
        let pending = self
            .pending_shapes(pri_scores, scope)
            .into_values()
            .collect();
        summary_of(
            pending,
            self.remaining_work(job, capacity),
            self.srpt(job, capacity),
        )
    }

    /// The runnable tasks grouped by shape (see [`JobState::demand_summary`]), their
    /// priScores scaled by `scope`.
    fn pending_shapes(&self, pri_scores: Option<&[Vec<f64>]>, scope: PriScoreScope) -> Shapes {
        let mut shapes = Shapes::new();
        for &stage in &self.active_stages {
            let progress = &self.stages[stage];
            let best = match pri_scores {
                None => 1.0,
                Some(scores) => {
                    let row = scores.get(stage).map(Vec::as_slice).unwrap_or(&[]);
                    progress
                        .runnable
                        .iter()
                        .map(|&i| row.get(i as usize).copied().unwrap_or(0.0))
                        .fold(0.0, f64::max)
                }
            };
            let count = u32::try_from(progress.runnable.len()).unwrap_or(u32::MAX);
            add_shape(&mut shapes, progress.demand, count, best);
        }
        if scope == PriScoreScope::WithinJob {
            let best = shapes.values().map(|p| p.2).fold(0.0, f64::max);
            if best > 0.0 {
                for p in shapes.values_mut() {
                    p.2 /= best;
                }
            }
        }
        shapes
    }
}

/// Pending shapes keyed by the bit patterns of their demand, so that equality is exact and the
/// map ordered deterministically: each shape's demand, runnable count and best priScore.
type Shapes = BTreeMap<[u64; fullerene_proto::NUM_RESOURCES], (ResourceVec, u32, f64)>;

/// Counts `count` runnable tasks of `demand`, the best of them scoring `best`, in `shapes`:
/// stages of equal demand form one shape.
fn add_shape(shapes: &mut Shapes, demand: ResourceVec, count: u32, best: f64) {
    let key = demand.0.map(f64::to_bits);
    let entry = shapes.entry(key).or_insert((demand, 0, 0.0));
    entry.1 = entry.1.saturating_add(count);
    entry.2 = entry.2.max(best);
}

/// The summary of `pending` shapes: best first, at most [`MAX_SUMMARY_SHAPES`] of them.
fn summary_of(
    mut pending: Vec<(ResourceVec, u32, f64)>,
    remaining_work: f64,
    srpt: f64,
) -> DemandSummary {
    pending.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)));
    pending.truncate(MAX_SUMMARY_SHAPES);
    DemandSummary {
        pending: pending
            .into_iter()
            .map(|(demand, count, pri_score)| PendingDemand {
                resources: Resources::from(demand),
                count,
                pri_score,
            })
            .collect(),
        remaining_work,
        srpt,
        reservation_progress: None,
    }
}

/// The summary of pending demand of a framework that runs several jobs (a session,
/// [`crate::session::Session::demand_summary`]): the sum of the jobs' own summaries
/// ([`JobState::demand_summary`], each job's priScores scaled by `scope` on their own), shapes
/// of equal demand merged (counts added, the best priScore kept), best first, at most
/// [`MAX_SUMMARY_SHAPES`]; remaining work and srpt added.
pub fn joint_demand_summary<'a>(
    jobs: impl IntoIterator<Item = (&'a Job, &'a JobState, Option<&'a [Vec<f64>]>)>,
    capacity: &ResourceVec,
    scope: PriScoreScope,
) -> DemandSummary {
    let mut shapes = Shapes::new();
    let (mut remaining_work, mut srpt) = (0.0, 0.0);
    for (job, state, pri_scores) in jobs {
        for (demand, count, best) in state.pending_shapes(pri_scores, scope).into_values() {
            add_shape(&mut shapes, demand, count, best);
        }
        remaining_work += state.remaining_work(job, capacity);
        srpt += state.srpt(job, capacity);
    }
    summary_of(shapes.into_values().collect(), remaining_work, srpt)
}

/// What a demand summary's priScores are relative to.
///
/// Graphene's priScore (tech report §5) ranks a task in its DAG's offline schedule: 1 for the
/// task that begins first, 0 for the last, "dividing the rank by the number of tasks in the
/// DAG". Fig. 8 multiplies it into every candidate's score across all jobs, so a job far into
/// its schedule has only low scores left and yields machines to jobs early in theirs. That is
/// the default here, because it is what the paper computes, and it is what reproduces the
/// paper's own two-job example (Fig. 3: 2T, `sim/tests/figure2.rs`). Scaling each job's
/// scores so its best runnable task scores 1 ([`PriScoreScope::WithinJob`]) makes the score
/// order tasks only within a job, and measurably lowers average JCT on the busy TPC-H
/// scenarios (`scripts/compare`), but turns Fig. 3 into 3.1T; it is kept as a variant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PriScoreScope {
    /// The plan's scores as they are: ranks over the whole DAG (the paper's; the default).
    #[default]
    WholeDag,
    /// Scaled so the job's best runnable task scores 1. Because the plan's scores are evenly
    /// spaced ranks, the scaled score of a task is about its rank among the job's remaining
    /// tasks.
    WithinJob,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::StageSpec;
    use crate::testkit;
    use fullerene_proto::ResourceKind;

    fn stage(id: u32, parents: &[u32], durations: &[f64], cpus: f64) -> StageSpec {
        testkit::stage(id, parents, durations, testkit::cpus(cpus))
    }

    /// 0 -> 2 <- 1, 2 -> 3
    fn diamond() -> Job {
        Job::new(
            "j",
            "g",
            None,
            vec![
                stage(0, &[], &[1.0, 2.0], 1.0),
                stage(1, &[], &[3.0], 2.0),
                stage(2, &[0, 1], &[4.0, 5.0, 6.0], 1.0),
                stage(3, &[2], &[7.0], 4.0),
            ],
        )
        .unwrap()
    }

    fn cap() -> ResourceVec {
        ResourceVec::from_pairs(&[(ResourceKind::Cpus, 16.0)])
    }

    #[test]
    fn children_become_runnable_only_when_every_parent_task_finished() {
        let job = diamond();
        let mut st = JobState::new(&job);
        let roots: Vec<TaskRef> = st.runnable().collect();
        assert_eq!(
            roots,
            vec![TaskRef::new(0, 0), TaskRef::new(0, 1), TaskRef::new(1, 0)]
        );
        for (m, t) in roots.iter().enumerate() {
            st.mark_launched(*t, m, 0.0);
        }
        assert_eq!(st.num_runnable(), 0);
        assert_eq!(st.num_running(), 3);
        st.mark_finished(&job, TaskRef::new(0, 0), 1.0);
        st.mark_finished(&job, TaskRef::new(0, 1), 2.0);
        // Stage 0 is complete, stage 1 is not: stage 2 still waits.
        assert!(st.is_stage_complete(0));
        assert_eq!(st.status(TaskRef::new(2, 0)), Some(TaskStatus::Waiting));
        assert_eq!(st.num_runnable(), 0);
        st.mark_finished(&job, TaskRef::new(1, 0), 3.0);
        assert_eq!(st.num_runnable(), 3);
        assert!(st.is_runnable(TaskRef::new(2, 2)));
        assert!(!st.is_runnable(TaskRef::new(3, 0)));
        // Parents ran on machines 0, 1 (stage 0) and 2 (stage 1).
        assert_eq!(st.parent_machines(2), &[0, 1, 2]);
        assert_eq!(st.parent_machines(0), &[] as &[usize]);
        for i in 0..3 {
            st.mark_launched(TaskRef::new(2, i), 5, 3.0);
        }
        for i in 0..2 {
            st.mark_finished(&job, TaskRef::new(2, i), 9.0);
        }
        assert!(!st.is_runnable(TaskRef::new(3, 0)));
        st.mark_finished(&job, TaskRef::new(2, 2), 9.0);
        assert!(st.is_runnable(TaskRef::new(3, 0)));
        assert_eq!(st.parent_machines(3), &[5]);
        st.mark_launched(TaskRef::new(3, 0), 1, 9.0);
        assert!(!st.is_complete());
        st.mark_finished(&job, TaskRef::new(3, 0), 16.0);
        assert!(st.is_complete());
        assert_eq!(st.completed_at(), Some(16.0));
    }

    #[test]
    fn lost_tasks_become_runnable_again_with_a_new_attempt() {
        let job = diamond();
        let mut st = JobState::new(&job);
        let t = TaskRef::new(0, 1);
        st.mark_launched(t, 3, 0.0);
        assert_eq!(st.running_on(t), Some(3));
        assert_eq!(st.attempts(t), 0);
        let epoch = st.dag_epoch();
        st.mark_lost(t);
        assert!(st.dag_epoch() > epoch);
        assert!(st.is_runnable(t));
        assert_eq!(st.attempts(t), 1);
        assert_eq!(st.num_losses(), 1);
        assert_eq!(st.stage_retries(0).collect::<Vec<_>>(), vec![t]);
        assert_eq!(st.num_running(), 0);
        assert_eq!(st.num_runnable(), 3);
        // A late "finished" from the lost attempt is ignored.
        assert!(matches!(
            st.try_mark_finished(&job, t, 1.0),
            Err(JobStateError::WrongStatus {
                actual: TaskStatus::Runnable,
                ..
            })
        ));
        st.mark_finished(&job, t, 1.0);
        assert!(st.is_runnable(t));
        st.mark_launched(t, 4, 2.0);
        assert_eq!(st.stage_retries(0).count(), 0);
        st.mark_finished(&job, t, 4.0);
        assert_eq!(st.status(t), Some(TaskStatus::Finished));
        assert_eq!(st.attempts(t), 1);
    }

    #[test]
    fn launching_a_task_that_is_not_runnable_is_an_error() {
        let job = diamond();
        let mut st = JobState::new(&job);
        assert!(matches!(
            st.try_mark_launched(TaskRef::new(2, 0), 0, 0.0),
            Err(JobStateError::WrongStatus {
                actual: TaskStatus::Waiting,
                ..
            })
        ));
        assert_eq!(
            st.try_mark_launched(TaskRef::new(0, 9), 0, 0.0),
            Err(JobStateError::UnknownTask { stage: 0, index: 9 })
        );
        assert_eq!(
            st.try_mark_launched(TaskRef::new(9, 0), 0, 0.0),
            Err(JobStateError::UnknownTask { stage: 9, index: 0 })
        );
        st.mark_launched(TaskRef::new(0, 0), 0, 0.0);
        assert!(st.try_mark_launched(TaskRef::new(0, 0), 0, 0.0).is_err());
    }

    #[test]
    #[should_panic(expected = "mark_launched")]
    fn mark_launched_panics_on_misuse() {
        let job = diamond();
        let mut st = JobState::new(&job);
        st.mark_launched(TaskRef::new(3, 0), 0, 0.0);
    }

    #[test]
    fn work_aggregates_follow_events() {
        let job = diamond();
        let mut st = JobState::new(&job);
        let total = job.total_work(&cap());
        assert!((st.remaining_work(&job, &cap()) - total).abs() < 1e-12);
        let srpt0 = st.srpt(&job, &cap());
        // srpt: Σ duration × cpus/16 over all tasks.
        let expected = (1.0 + 2.0) / 16.0 + 3.0 * 2.0 / 16.0 + 15.0 / 16.0 + 7.0 * 4.0 / 16.0;
        assert!((srpt0 - expected).abs() < 1e-12);
        st.mark_launched(TaskRef::new(1, 0), 0, 0.0);
        // Launching removes the task from srpt but not from the remaining work.
        assert!((st.srpt(&job, &cap()) - (expected - 6.0 / 16.0)).abs() < 1e-12);
        assert!((st.remaining_work(&job, &cap()) - total).abs() < 1e-12);
        st.mark_finished(&job, TaskRef::new(1, 0), 3.0);
        assert!((st.remaining_work(&job, &cap()) - (total - 6.0 / 16.0)).abs() < 1e-12);
        st.mark_launched(TaskRef::new(0, 0), 0, 3.0);
        st.mark_lost(TaskRef::new(0, 0));
        assert!((st.srpt(&job, &cap()) - (expected - 6.0 / 16.0)).abs() < 1e-12);
    }

    #[test]
    fn demand_summary_groups_shapes_and_reports_best_pri_score() {
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                stage(0, &[], &[1.0, 1.0, 1.0], 1.0),
                stage(1, &[], &[1.0, 1.0], 1.0),
                stage(2, &[], &[1.0], 3.0),
                stage(3, &[0], &[1.0], 5.0),
            ],
        )
        .unwrap();
        let mut st = JobState::new(&job);
        let pri = vec![vec![0.9, 0.5, 0.4], vec![0.3, 0.2], vec![0.95], vec![0.1]];
        st.mark_launched(TaskRef::new(0, 0), 0, 0.0);
        let summary = st.demand_summary(&job, &cap(), Some(&pri), PriScoreScope::WholeDag);
        assert_eq!(summary.pending.len(), 2);
        // Stage 2 (cpus=3) has the best score; stages 0 and 1 share cpus=1: 4 runnable tasks,
        // best remaining score 0.5 (task 0.0 with 0.9 is running).
        assert_eq!(summary.pending[0].count, 1);
        assert_eq!(summary.pending[0].pri_score, 0.95);
        assert_eq!(summary.pending[1].count, 4);
        assert_eq!(summary.pending[1].pri_score, 0.5);
        assert_eq!(
            summary.pending[1].resources.to_vec().unwrap()[ResourceKind::Cpus],
            1.0
        );
        assert!((summary.remaining_work - st.remaining_work(&job, &cap())).abs() < 1e-12);
        assert!((summary.srpt - st.srpt(&job, &cap())).abs() < 1e-12);
        let plain = st.demand_summary(&job, &cap(), None, PriScoreScope::WithinJob);
        assert!(plain.pending.iter().all(|p| p.pri_score == 1.0));
        // Within the job: the best runnable shape scores 1, the others keep their ratio to it.
        let scaled = st.demand_summary(&job, &cap(), Some(&pri), PriScoreScope::WithinJob);
        assert_eq!(scaled.pending[0].pri_score, 1.0);
        assert!((scaled.pending[1].pri_score - 0.5 / 0.95).abs() < 1e-12);
    }

    #[test]
    fn a_joint_demand_summary_adds_the_jobs_summaries_shape_by_shape() {
        let a = Job::new(
            "a",
            "g",
            None,
            vec![stage(0, &[], &[1.0, 1.0], 1.0), stage(1, &[], &[2.0], 3.0)],
        )
        .unwrap();
        let b = Job::new("b", "g", None, vec![stage(0, &[], &[4.0; 3], 1.0)]).unwrap();
        let (sa, sb) = (JobState::new(&a), JobState::new(&b));
        let scope = PriScoreScope::WholeDag;
        // One job: its own summary.
        assert_eq!(
            joint_demand_summary([(&a, &sa, None)], &cap(), scope),
            sa.demand_summary(&a, &cap(), None, scope)
        );
        let pri_a = vec![vec![0.2, 0.1], vec![0.9]];
        let joint = joint_demand_summary(
            [(&a, &sa, Some(pri_a.as_slice())), (&b, &sb, None)],
            &cap(),
            scope,
        );
        // cpus=1: a's two tasks and b's three, b's score (1, no plan) the best; cpus=3: a's one.
        assert_eq!(joint.pending.len(), 2);
        assert_eq!(
            (joint.pending[0].count, joint.pending[0].pri_score),
            (5, 1.0)
        );
        assert_eq!(
            (joint.pending[1].count, joint.pending[1].pri_score),
            (1, 0.9)
        );
        let sum = |f: fn(&JobState, &Job) -> f64| f(&sa, &a) + f(&sb, &b);
        assert!((joint.remaining_work - sum(|s, j| s.remaining_work(j, &cap()))).abs() < 1e-12);
        assert!((joint.srpt - sum(|s, j| s.srpt(j, &cap()))).abs() < 1e-12);
    }
}
