//! The attempts of one job's tasks, as the DAG-job framework ([`DagJob`](super::DagJob)) and the
//! session framework ([`SessionFramework`](crate::session::SessionFramework)) both launch them:
//! task ids that carry a launch number (so a retry never reuses an id, which the master
//! refuses), the [`TaskSpec`] built from the executor template, and the rule that decides when
//! a task that keeps failing fails its job.

use std::collections::{BTreeMap, HashMap};

use fullerene_proto::messages::{
    CommandSpec, Executor, StatusReason, StatusUpdate, TaskOrigin, TaskSpec,
};
use fullerene_proto::{Resources, TaskId};

use super::job::{DagConfig, ExecutorTemplate};
use super::template::{self, Value};
use crate::job::{Job, TaskRef};

/// The placeholders of a command template that stand for free text (names from the workload),
/// substituted shell-quoted (the others are numbers, substituted bare).
pub(crate) const TEXT_PLACEHOLDERS: [&str; 2] = [JOB_PLACEHOLDER, STAGE_NAME_PLACEHOLDER];
const JOB_PLACEHOLDER: &str = "job";
const STAGE_NAME_PLACEHOLDER: &str = "stage_name";

/// What an attempt that ended without success (FAILED, LOST or KILLED) means for its task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The task runs again (under a new id).
    Retry,
    /// The task ended without success `max_attempts` times: its job fails with this reason.
    OutOfAttempts(String),
}

/// The launches of one job's tasks: ids, launch numbers and failures.
#[derive(Clone, Debug, Default)]
pub struct Attempts {
    /// Task id of each launch → the task and its launch number.
    launches: HashMap<TaskId, (TaskRef, u32)>,
    /// The current launch number of each task.
    current: HashMap<TaskRef, u32>,
    failures: HashMap<TaskRef, u32>,
    failed_attempts: u64,
    preempted_attempts: u64,
}

impl Attempts {
    /// No launch yet.
    pub fn new() -> Attempts {
        Attempts::default()
    }

    /// Launches `task` of `job` once more: its next launch number, recorded, and the spec the
    /// master is asked to run.
    pub fn launch(&mut self, job: &Job, config: &DagConfig, task: TaskRef) -> TaskSpec {
        let launch = self.current.get(&task).map_or(0, |l| l + 1);
        self.current.insert(task, launch);
        let id = task_id(job, task, launch);
        self.launches.insert(id.clone(), (task, launch));
        task_spec(job, config, task, launch, id)
    }

    /// Records a launch made by an earlier process (a journal's): `launch` is never used again.
    pub fn restore(&mut self, id: TaskId, task: TaskRef, launch: u32) {
        self.launches.insert(id, (task, launch));
        let current = self.current.entry(task).or_insert(launch);
        *current = (*current).max(launch);
    }

    /// The task and launch number of a launch of this job, whichever attempt it was.
    pub fn attempt(&self, id: &TaskId) -> Option<(TaskRef, u32)> {
        self.launches.get(id).copied()
    }

    /// Whether `launch` is `task`'s current attempt (a report of an earlier one is late: that
    /// attempt was already given up on).
    pub fn is_current(&self, task: TaskRef, launch: u32) -> bool {
        self.current.get(&task) == Some(&launch)
    }

    /// The task the id names if it is that task's current attempt.
    pub fn current_task(&self, id: &TaskId) -> Option<TaskRef> {
        let (task, launch) = self.attempt(id)?;
        self.is_current(task, launch).then_some(task)
    }

    /// The id of `task`'s current attempt, if it was ever launched.
    pub fn current_id(&self, job: &Job, task: TaskRef) -> Option<TaskId> {
        let launch = self.current.get(&task)?;
        Some(task_id(job, task, *launch))
    }

    /// Every launch recorded, with its task and number.
    pub fn launches(&self) -> impl Iterator<Item = (&TaskId, TaskRef, u32)> {
        self.launches
            .iter()
            .map(|(id, (task, launch))| (id, *task, *launch))
    }

    /// `task`'s current attempt ended without success (`update`): counts it and says whether
    /// the task runs again. The master's answer to reconciliation of a task it never launched
    /// (LOST, `UnknownTask`) counts no attempt: none ran. A task preempted for a reservation
    /// (Rayon §5.2's reclaim) runs again without a failure counted, or a best-effort job whose
    /// newest task is the victim of every reclaim would fail.
    pub fn ended(
        &mut self,
        job: &Job,
        task: TaskRef,
        update: &StatusUpdate,
        max_attempts: u32,
    ) -> AttemptEnd {
        let ran = update.reason != Some(StatusReason::UnknownTask);
        let preempted = matches!(update.reason, Some(StatusReason::Preempted { .. }));
        if preempted {
            self.preempted_attempts += 1;
        }
        if !ran || preempted {
            return AttemptEnd::Retry;
        }
        self.failed_attempts += 1;
        let failures = self.failures.entry(task).or_insert(0);
        *failures += 1;
        if *failures >= max_attempts {
            return AttemptEnd::OutOfAttempts(out_of_attempts(job, task, *failures, update));
        }
        AttemptEnd::Retry
    }

    /// Attempts that ended without success (retried or not), preempted ones aside.
    pub fn failed_attempts(&self) -> u64 {
        self.failed_attempts
    }

    /// Attempts the masters killed for a reservation.
    pub fn preempted_attempts(&self) -> u64 {
        self.preempted_attempts
    }
}

/// Why a job fails when `task` ended without success `failures` times, the last with `update`.
fn out_of_attempts(job: &Job, task: TaskRef, failures: u32, update: &StatusUpdate) -> String {
    let stage = &job.stages[task.stage()];
    let detail = match (&update.reason, update.message.is_empty()) {
        (Some(reason), true) => format!("{:?} ({reason:?})", update.state),
        (Some(reason), false) => {
            format!("{:?} ({reason:?}): {}", update.state, update.message)
        }
        (None, true) => format!("{:?}", update.state),
        (None, false) => format!("{:?}: {}", update.state, update.message),
    };
    format!(
        "task {}.{} of stage `{}` ended without success {failures} times (the limit); last: {detail}",
        stage.id, task.index, stage.name
    )
}

/// The id of launch `launch` of `task`: `<job>/<stage id>.<index>/<launch>`.
pub fn task_id(job: &Job, task: TaskRef, launch: u32) -> TaskId {
    let stage = &job.stages[task.stage()];
    TaskId::from(format!(
        "{}/{}.{}/{}",
        job.name, stage.id, task.index, launch
    ))
}

/// The task and launch number of one of `job`'s task ids (see [`task_id`]).
pub fn parse_task_id(job: &Job, id: &TaskId) -> Option<(TaskRef, u32)> {
    let rest = id.as_str().strip_prefix(&job.name)?.strip_prefix('/')?;
    let (stage_and_index, launch) = rest.rsplit_once('/')?;
    let (stage_id, index) = stage_and_index.split_once('.')?;
    let stage_id: u32 = stage_id.parse().ok()?;
    let index: usize = index.parse().ok()?;
    let stage = job.stages.iter().position(|s| s.id == stage_id)?;
    // The last launch number has no successor: an id that names it cannot come from
    // `launch`, and a restored task could never run again without reusing an id.
    let launch: u32 = launch.parse().ok().filter(|&l| l < u32::MAX)?;
    (index < job.stages[stage].num_tasks()).then(|| (TaskRef::new(stage, index), launch))
}

/// What the master is asked to run for launch `launch` (id `id`) of `task`: the executor
/// template filled in, the task's demand, and its origin in the DAG.
fn task_spec(job: &Job, config: &DagConfig, task: TaskRef, launch: u32, id: TaskId) -> TaskSpec {
    let stage = &job.stages[task.stage()];
    let duration_s = job.duration(task) * config.time_scale;
    let duration_ms = (duration_s * 1000.0).round().max(0.0) as u64;
    let executor = match &config.executor {
        ExecutorTemplate::Sleep => Executor::Sleep { duration_ms },
        ExecutorTemplate::Command(template) => {
            let command = template::expand(template, |name| {
                Some(match name {
                    JOB_PLACEHOLDER => Value::Text(job.name.clone()),
                    STAGE_NAME_PLACEHOLDER => Value::Text(stage.name.clone()),
                    "stage" => Value::Number(stage.id.to_string()),
                    "index" => Value::Number(task.index.to_string()),
                    "attempt" => Value::Number(launch.to_string()),
                    "duration_s" => Value::Number(format!("{duration_s:.3}")),
                    "duration_ms" => Value::Number(duration_ms.to_string()),
                    _ => return None,
                })
            });
            Executor::Command(CommandSpec {
                program: "sh".into(),
                args: vec!["-c".into(), command],
                env: BTreeMap::new(),
            })
        }
    };
    TaskSpec {
        name: format!("{} {}.{} ({})", job.name, stage.id, task.index, stage.name),
        id,
        executor,
        resources: Resources::from(job.demand(task)),
        origin: Some(TaskOrigin {
            job: job.name.clone(),
            stage: stage.id,
            index: task.index,
            attempt: launch,
        }),
        kill_grace_ms: config.kill_grace_ms,
    }
}
