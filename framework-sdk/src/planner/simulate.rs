//! A plain list scheduler on the planner's resource-time space: whenever capacity frees up,
//! start the highest-priority runnable task that fits. With a priority of critical-path length
//! it is CPSched, with a packing score it is a Tetris-like packer, and with a plan's `priScore`
//! it is how Graphene's online component would run the job alone (Graphene §2.2 and Fig. 3
//! compare exactly these). Tests and the `fullerene plan` report use it to compare orders.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::placement::Partial;
use super::problem::Problem;
use super::{placements_of, sort_by_start, PlanCluster, PlanError, Schedule};
use crate::job::{Job, TaskRef};

/// A runnable task, ordered by priority (highest first), then by task (lowest first).
#[derive(Clone, Copy, Debug)]
struct Runnable {
    priority: f64,
    task: TaskRef,
    /// Its position in its stage's longest-first order.
    position: u32,
}

impl PartialEq for Runnable {
    fn eq(&self, other: &Runnable) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Runnable {}

impl Ord for Runnable {
    fn cmp(&self, other: &Runnable) -> Ordering {
        other
            .priority
            .total_cmp(&self.priority)
            .then(self.task.cmp(&other.task))
    }
}

impl PartialOrd for Runnable {
    fn partial_cmp(&self, other: &Runnable) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A task's completion, for the min-heap of running tasks.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Completion {
    end: f64,
    stage: u32,
}

impl Eq for Completion {}

impl Ord for Completion {
    fn cmp(&self, other: &Completion) -> Ordering {
        self.end
            .total_cmp(&other.end)
            .then(self.stage.cmp(&other.stage))
    }
}

impl PartialOrd for Completion {
    fn partial_cmp(&self, other: &Completion) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Runs `job` alone on `cluster` with a greedy, work-conserving list scheduler: at time 0 and
/// whenever a task ends, the runnable tasks (all parents finished) are considered by decreasing
/// `priority` (ties: lower [`TaskRef`] first), and each is started on the lowest-numbered
/// machine where it fits, until none of the rest fits. Priorities are read once per task.
pub fn simulate_order(
    job: &Job,
    cluster: &PlanCluster,
    priority: impl Fn(TaskRef) -> f64,
) -> Result<Schedule, PlanError> {
    let problem = Problem::unfinished(job, cluster, &|_| false)?;
    let mut priorities = vec![0.0; problem.num_tasks];
    for stage in &problem.stages {
        for position in 0..stage.len() {
            priorities[stage.first_id + position] = priority(stage.task_ref(position));
        }
    }
    let listed = list_schedule(&problem, &priorities);
    let mut placements = placements_of(&problem, &listed.placed, 0.0, 0.0);
    sort_by_start(&mut placements);
    let makespan_s = placements.iter().map(|p| p.end_s).fold(0.0, f64::max);
    Ok(Schedule {
        placements,
        makespan_s,
    })
}

/// The list scheduler of [`simulate_order`] on a [`Problem`], with one priority per dense task
/// id. The schedule starts at time 0.
///
/// The tasks of a stage share their demand, so when a stage's best runnable task fits nowhere,
/// none of its tasks does until something ends: each released stage keeps its tasks sorted by
/// priority, and a round pops stages from a queue keyed by their best task, starting tasks
/// until the stage's next one does not fit. That is the global priority order of the plain
/// description, at a cost per round of the stages rather than of the runnable tasks.
pub(crate) fn list_schedule(problem: &Problem, priorities: &[f64]) -> Partial {
    let stages = &problem.stages;
    let mut schedule = Partial::new(problem);
    let mut unfinished_parents: Vec<usize> = stages.iter().map(|s| s.parents.len()).collect();
    let mut unfinished_tasks: Vec<usize> = stages
        .iter()
        .map(super::problem::ProblemStage::len)
        .collect();
    // Per released stage: its tasks by priority, and how many of them have started.
    let mut queued: Vec<Vec<Runnable>> = vec![Vec::new(); stages.len()];
    let mut started: Vec<usize> = vec![0; stages.len()];
    // Released stages with tasks left, to try in the next round.
    let mut waiting: Vec<usize> = Vec::new();
    let mut running: BinaryHeap<Reverse<Completion>> = BinaryHeap::new();
    let release = |s: usize, queued: &mut Vec<Vec<Runnable>>, waiting: &mut Vec<usize>| {
        let stage = &stages[s];
        let mut tasks: Vec<Runnable> = (0..stage.len())
            .map(|position| Runnable {
                priority: priorities[stage.first_id + position],
                task: stage.task_ref(position),
                position: position as u32,
            })
            .collect();
        tasks.sort();
        queued[s] = tasks;
        waiting.push(s);
    };
    for (s, parents) in unfinished_parents.iter().enumerate() {
        if *parents == 0 {
            release(s, &mut queued, &mut waiting);
        }
    }

    let mut now = 0.0;
    let mut round: BinaryHeap<Reverse<(Runnable, usize)>> = BinaryHeap::new();
    loop {
        while let Some(&Reverse(done)) = running.peek() {
            if done.end > now {
                break;
            }
            running.pop();
            let s = done.stage as usize;
            unfinished_tasks[s] -= 1;
            if unfinished_tasks[s] == 0 {
                for &c in &stages[s].children {
                    unfinished_parents[c] -= 1;
                    if unfinished_parents[c] == 0 {
                        release(c, &mut queued, &mut waiting);
                    }
                }
            }
        }

        // One round: the best runnable task of all stages first, as long as tasks fit.
        round.clear();
        round.extend(
            waiting
                .drain(..)
                .map(|s| Reverse((queued[s][started[s]], s))),
        );
        while let Some(Reverse((task, s))) = round.pop() {
            let stage = &stages[s];
            let position = task.position as usize;
            let duration = stage.durations[position];
            match (0..problem.machines)
                .find(|&m| schedule.space.fits_at(m, &stage.fit, now, duration))
            {
                Some(machine) => {
                    schedule.record(problem, s, position, machine, now, now + duration);
                    running.push(Reverse(Completion {
                        end: now + duration,
                        stage: s as u32,
                    }));
                    started[s] += 1;
                    if started[s] < queued[s].len() {
                        round.push(Reverse((queued[s][started[s]], s)));
                    }
                }
                // Usage only falls after `now` (every running task started by then), so the
                // stage's demand fits nowhere for the rest of the round.
                None => waiting.push(s),
            }
        }

        match running.peek() {
            // A task that takes no time ended at `now`: release its children before moving on.
            Some(&Reverse(next)) if next.end <= now => continue,
            Some(&Reverse(next)) => now = next.end,
            // Nothing runs, so every machine is idle, and every demand fits an idle machine:
            // nothing can be left runnable.
            None => break,
        }
    }
    debug_assert_eq!(schedule.placed.len(), problem.num_tasks);
    schedule
}
