//! The planner's view of (what is left of) a job: a DAG of stages whose tasks are alike.
//!
//! Graphene §4.4 "reason[s] over stages": every task of a stage has the same parents, children
//! and demand, so ancestry, readiness and the troublesome-set closure are computed per stage,
//! and only durations are kept per task. Each stage's tasks are sorted longest first, so that
//! "the task with the longest runtime" (Fig. 10) and "the tasks with LongScore ≥ l" (Fig. 9) are
//! both prefixes of that order; the planner gives tasks dense ids in that order.

use fullerene_proto::{ResourceKind, ResourceVec};

use super::space::Fit;
use super::{PlanCluster, PlanError};
use crate::job::{Job, TaskRef};

/// One stage of a [`Problem`].
#[derive(Clone, Debug)]
pub(crate) struct ProblemStage {
    /// The stage's index in the job.
    pub(crate) job_stage: usize,
    /// Parent and child stages, as indices into [`Problem::stages`].
    pub(crate) parents: Vec<usize>,
    pub(crate) children: Vec<usize>,
    /// The job's task indices of the tasks to plan, longest first (ties: lower index first).
    pub(crate) tasks: Vec<u32>,
    /// Their durations, in the same order (so non-increasing).
    pub(crate) durations: Vec<f64>,
    /// Dense id of `tasks[0]`; the stage's ids are `first_id..first_id + tasks.len()`.
    pub(crate) first_id: usize,
    /// The per-task demand.
    pub(crate) demand: ResourceVec,
    /// The demand compiled against the machine capacity.
    pub(crate) fit: Fit,
}

impl ProblemStage {
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn task_ref(&self, position: usize) -> TaskRef {
        TaskRef::new(self.job_stage, self.tasks[position] as usize)
    }
}

/// A DAG of stages to plan on `machines` machines of one capacity. Stages are in a topological
/// order, and every stage has at least one task.
#[derive(Clone, Debug)]
pub(crate) struct Problem {
    pub(crate) stages: Vec<ProblemStage>,
    pub(crate) num_tasks: usize,
    pub(crate) machines: usize,
    pub(crate) capacity: ResourceVec,
}

impl Problem {
    /// The unfinished part of `job`: stages with at least one task for which `finished` is
    /// false, with the tasks `finished` says are done dropped. A finished task counts as done at
    /// time 0, so edges from a stage with nothing left impose nothing and are dropped too.
    pub(crate) fn unfinished(
        job: &Job,
        cluster: &PlanCluster,
        finished: &dyn Fn(TaskRef) -> bool,
    ) -> Result<Problem, PlanError> {
        validate_cluster(cluster)?;
        let mut local = vec![usize::MAX; job.stages.len()];
        let mut stages: Vec<ProblemStage> = Vec::new();
        let mut num_tasks = 0;
        for (s, stage) in job.stages.iter().enumerate() {
            for &p in &stage.parents {
                if p >= s {
                    return Err(PlanError::MalformedJob {
                        reason: format!(
                            "stage {} names parent index {p}, which is not an earlier stage",
                            stage.id
                        ),
                    });
                }
            }
            let mut tasks: Vec<u32> = (0..stage.durations.len() as u32)
                .filter(|&i| !finished(TaskRef::new(s, i as usize)))
                .collect();
            if tasks.is_empty() {
                continue;
            }
            for &i in &tasks {
                let d = stage.durations[i as usize];
                if !d.is_finite() || d < 0.0 {
                    return Err(PlanError::InvalidDuration {
                        stage_id: stage.id,
                        task: i,
                        duration: d,
                    });
                }
            }
            check_demand(
                stage.id,
                &stage.name,
                &stage.demand,
                &cluster.machine_capacity,
            )?;
            tasks.sort_by(|&a, &b| {
                stage.durations[b as usize]
                    .total_cmp(&stage.durations[a as usize])
                    .then(a.cmp(&b))
            });
            let durations = tasks.iter().map(|&i| stage.durations[i as usize]).collect();
            let parents: Vec<usize> = stage
                .parents
                .iter()
                .filter_map(|&p| (local[p] != usize::MAX).then_some(local[p]))
                .collect();
            local[s] = stages.len();
            let len = tasks.len();
            stages.push(ProblemStage {
                job_stage: s,
                parents,
                children: Vec::new(),
                tasks,
                durations,
                first_id: num_tasks,
                demand: stage.demand,
                fit: Fit::new(&stage.demand, &cluster.machine_capacity),
            });
            num_tasks += len;
        }
        let mut problem = Problem {
            stages,
            num_tasks,
            machines: cluster.machines,
            capacity: cluster.machine_capacity,
        };
        problem.link_children();
        Ok(problem)
    }

    fn link_children(&mut self) {
        for s in 0..self.stages.len() {
            self.stages[s].children.clear();
        }
        for c in 0..self.stages.len() {
            for i in 0..self.stages[c].parents.len() {
                let p = self.stages[c].parents[i];
                self.stages[p].children.push(c);
            }
        }
    }

    /// The sub-DAG of the stages in `range` (a run of the topological order, as the total-order
    /// cuts of §4.4 produce), with dense ids renumbered from 0. Edges leaving the range are
    /// dropped: the cut guarantees they are satisfied by concatenation.
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Problem {
        let offset = range.start;
        let mut num_tasks = 0;
        let stages = self.stages[range.clone()]
            .iter()
            .map(|stage| {
                let mut stage = stage.clone();
                stage.parents = stage
                    .parents
                    .iter()
                    .filter(|&&p| range.contains(&p))
                    .map(|&p| p - offset)
                    .collect();
                stage.first_id = num_tasks;
                num_tasks += stage.len();
                stage
            })
            .collect();
        let mut problem = Problem {
            stages,
            num_tasks,
            machines: self.machines,
            capacity: self.capacity,
        };
        problem.link_children();
        problem
    }

    /// The stage and position of a dense task id.
    pub(crate) fn locate(&self, id: usize) -> (usize, usize) {
        let s = self
            .stages
            .partition_point(|stage| stage.first_id <= id)
            .saturating_sub(1);
        (s, id - self.stages[s].first_id)
    }

    /// Parent lists, the input of [`super::split::total_order_cuts`].
    pub(crate) fn parent_lists(&self) -> Vec<&[usize]> {
        self.stages.iter().map(|s| s.parents.as_slice()).collect()
    }
}

fn validate_cluster(cluster: &PlanCluster) -> Result<(), PlanError> {
    if cluster.machines == 0 {
        return Err(PlanError::NoMachines);
    }
    for kind in ResourceKind::ALL {
        let amount = cluster.machine_capacity[kind];
        if !amount.is_finite() || amount < 0.0 {
            return Err(PlanError::InvalidCapacity {
                resource: kind,
                amount,
            });
        }
    }
    Ok(())
}

/// Checks that a stage's demand is valid and fits an empty machine.
pub(crate) fn check_demand(
    stage_id: u32,
    stage_name: &str,
    demand: &ResourceVec,
    capacity: &ResourceVec,
) -> Result<(), PlanError> {
    for kind in ResourceKind::ALL {
        let need = demand[kind];
        if !need.is_finite() || need < 0.0 {
            return Err(PlanError::InvalidDemand {
                stage_id,
                stage_name: stage_name.to_string(),
                resource: kind,
                demand: need,
            });
        }
        if need > capacity[kind] + super::space::tolerance(capacity[kind]) {
            return Err(PlanError::DemandExceedsMachine {
                stage_id,
                stage_name: stage_name.to_string(),
                resource: kind,
                demand: need,
                capacity: capacity[kind],
            });
        }
    }
    Ok(())
}
