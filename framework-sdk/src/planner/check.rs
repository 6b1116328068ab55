//! An independent checker for schedules: the invariants every plan and every simulated order
//! must satisfy (dependencies and capacities), written without the planner's data structures so
//! that it can catch their mistakes.

use fullerene_proto::{ResourceKind, NUM_RESOURCES};

use super::space::tolerance;
use super::{Placement, PlanCluster};
use crate::job::{Job, TaskRef};

/// Slack for comparing times, relative to their magnitude (times are sums of durations).
fn time_slack(t: f64) -> f64 {
    1e-9 * t.abs().max(1.0)
}

/// A way in which a schedule is invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleViolation {
    /// A placement names a task the job does not have.
    #[error("task {task:?} is not a task of the job")]
    UnknownTask {
        /// The task.
        task: TaskRef,
    },
    /// A task is placed twice.
    #[error("task {task:?} is placed more than once")]
    DuplicateTask {
        /// The task.
        task: TaskRef,
    },
    /// A placement on a machine the cluster does not have.
    #[error("task {task:?} is placed on machine {machine}, which does not exist")]
    UnknownMachine {
        /// The task.
        task: TaskRef,
        /// The machine.
        machine: usize,
    },
    /// A placement whose length is not the task's duration.
    #[error("task {task:?} runs {got} s instead of its duration {expected} s")]
    WrongDuration {
        /// The task.
        task: TaskRef,
        /// Its duration.
        expected: f64,
        /// End minus start.
        got: f64,
    },
    /// A task starts before one of its parents ends.
    #[error(
        "task {child:?} starts at {child_start} before its parent {parent:?} ends at {parent_end}"
    )]
    DependencyViolated {
        /// The parent.
        parent: TaskRef,
        /// When it ends.
        parent_end: f64,
        /// The child.
        child: TaskRef,
        /// When it starts.
        child_start: f64,
    },
    /// A machine is overcommitted.
    #[error(
        "machine {machine} uses {used} {resource} at t={time} s, above its capacity {capacity}"
    )]
    CapacityExceeded {
        /// The machine.
        machine: usize,
        /// When.
        time: f64,
        /// The resource.
        resource: ResourceKind,
        /// What is in use then.
        used: f64,
        /// The machine's capacity.
        capacity: f64,
    },
}

/// Checks that `placements` is a valid (possibly partial) schedule of `job` on `cluster`: each
/// task at most once, on an existing machine, for its duration; no task before any of its
/// parents ends (among the placed ones); and no machine over capacity at any instant. Tasks that
/// take no time occupy no machine.
pub fn check_schedule(
    job: &Job,
    cluster: &PlanCluster,
    placements: &[Placement],
) -> Result<(), ScheduleViolation> {
    let mut seen: Vec<Vec<bool>> = job
        .stages
        .iter()
        .map(|s| vec![false; s.durations.len()])
        .collect();
    // Per stage: (latest end, its task) and (earliest start, its task) among placed tasks.
    let mut last_end: Vec<Option<(f64, TaskRef)>> = vec![None; job.stages.len()];
    let mut first_start: Vec<Option<(f64, TaskRef)>> = vec![None; job.stages.len()];
    for p in placements {
        let task = p.task;
        let slot = seen
            .get_mut(task.stage())
            .and_then(|s| s.get_mut(task.index as usize))
            .ok_or(ScheduleViolation::UnknownTask { task })?;
        if std::mem::replace(slot, true) {
            return Err(ScheduleViolation::DuplicateTask { task });
        }
        if p.machine >= cluster.machines {
            return Err(ScheduleViolation::UnknownMachine {
                task,
                machine: p.machine,
            });
        }
        let expected = job.duration(task);
        let got = p.end_s - p.start_s;
        if !got.is_finite() || (got - expected).abs() > time_slack(p.end_s) {
            return Err(ScheduleViolation::WrongDuration {
                task,
                expected,
                got,
            });
        }
        let s = task.stage();
        if last_end[s].is_none_or(|(e, _)| p.end_s > e) {
            last_end[s] = Some((p.end_s, task));
        }
        if first_start[s].is_none_or(|(b, _)| p.start_s < b) {
            first_start[s] = Some((p.start_s, task));
        }
    }
    for (c, stage) in job.stages.iter().enumerate() {
        let Some((child_start, child)) = first_start[c] else {
            continue;
        };
        for &parent_stage in &stage.parents {
            let Some((parent_end, parent)) = last_end.get(parent_stage).copied().flatten() else {
                continue;
            };
            if child_start < parent_end - time_slack(parent_end) {
                return Err(ScheduleViolation::DependencyViolated {
                    parent,
                    parent_end,
                    child,
                    child_start,
                });
            }
        }
    }
    // Sweep every machine's starts and ends in time order, ends first at equal times.
    let mut events: Vec<(f64, bool, usize, usize)> = Vec::with_capacity(2 * placements.len());
    for (i, p) in placements.iter().enumerate() {
        if p.end_s > p.start_s {
            events.push((p.start_s, true, p.machine, i));
            events.push((p.end_s, false, p.machine, i));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let capacity = cluster.machine_capacity;
    let mut used = vec![[0.0f64; NUM_RESOURCES]; cluster.machines];
    for (time, is_start, machine, i) in events {
        let demand = job.demand(placements[i].task);
        for kind in ResourceKind::ALL {
            let r = kind.index();
            if is_start {
                used[machine][r] += demand[kind];
                if used[machine][r] > capacity[kind] + tolerance(capacity[kind]) {
                    return Err(ScheduleViolation::CapacityExceeded {
                        machine,
                        time,
                        resource: kind,
                        used: used[machine][r],
                        capacity: capacity[kind],
                    });
                }
            } else {
                used[machine][r] -= demand[kind];
            }
        }
    }
    Ok(())
}
