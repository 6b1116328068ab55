//! The job model: a DAG of stages, each with tasks that have durations and one multi-resource
//! demand vector (`shared/workloads/FORMAT.md`).
//!
//! Stages are kept in a topological order, and parents and children are stage *indices* into
//! [`Job::stages`], so that every algorithm can walk the DAG without maps.

use fullerene_proto::ResourceVec;
use serde::Serialize;

/// Index of a stage in [`Job::stages`] (not the file's stage id).
pub type StageIdx = usize;

/// One task of a job: its stage index and its index within the stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TaskRef {
    /// The stage, as an index into [`Job::stages`].
    pub stage: u32,
    /// The task's index within the stage.
    pub index: u32,
}

impl TaskRef {
    /// A task reference.
    pub fn new(stage: StageIdx, index: usize) -> TaskRef {
        TaskRef {
            stage: stage as u32,
            index: index as u32,
        }
    }

    /// The stage index as `usize`.
    pub fn stage(self) -> StageIdx {
        self.stage as usize
    }
}

/// A stage: tasks with the same dependencies and demand.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stage {
    /// The stage's id in the workload file.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Stages that must finish entirely before any task of this one starts.
    pub parents: Vec<StageIdx>,
    /// Stages that wait for this one.
    pub children: Vec<StageIdx>,
    /// Per-task durations in seconds (`len()` is the number of tasks, at least 1).
    pub durations: Vec<f64>,
    /// Per-task demand.
    pub demand: ResourceVec,
}

impl Stage {
    /// Number of tasks.
    pub fn num_tasks(&self) -> usize {
        self.durations.len()
    }

    /// Sum of task durations (task-seconds).
    pub fn total_duration(&self) -> f64 {
        self.durations.iter().sum()
    }

    /// Longest task duration.
    pub fn max_duration(&self) -> f64 {
        self.durations.iter().copied().fold(0.0, f64::max)
    }

    /// Shortest task duration.
    pub fn min_duration(&self) -> f64 {
        self.durations.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Mean task duration.
    pub fn mean_duration(&self) -> f64 {
        self.total_duration() / self.num_tasks() as f64
    }
}

/// A job: a DAG of stages with a name, a fairness group and an optional arrival time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Job {
    /// Unique within its workload.
    pub name: String,
    /// Seconds from the start of the trace, when the file gives it.
    pub arrival_s: Option<f64>,
    /// Fairness group (queue, tenant).
    pub group: String,
    /// Stages in a topological order: every parent comes before its children.
    pub stages: Vec<Stage>,
}

/// Why a set of stages does not form a valid job DAG.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    /// A job needs at least one stage.
    #[error("job has no stages")]
    NoStages,
    /// Two stages share an id.
    #[error("stage id {0} appears more than once")]
    DuplicateStage(u32),
    /// A parent that is not a stage of the job.
    #[error("stage {stage} names unknown parent {parent}")]
    UnknownParent {
        /// The stage naming it.
        stage: u32,
        /// The unknown parent id.
        parent: u32,
    },
    /// The stages' dependencies form a cycle.
    #[error("stages form a cycle through stage {0}")]
    Cycle(u32),
    /// A stage with no tasks.
    #[error("stage {0} has no tasks (tasks must be >= 1)")]
    NoTasks(u32),
    /// A negative or non-finite duration.
    #[error("stage {stage} has invalid duration {duration}: durations must be finite and >= 0")]
    BadDuration {
        /// The stage.
        stage: u32,
        /// The duration.
        duration: f64,
    },
}

/// A stage as given, with parents as ids: the input of [`Job::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct StageSpec {
    /// Stage id, unique in the job.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Parent stage ids.
    pub parents: Vec<u32>,
    /// Per-task durations (one per task).
    pub durations: Vec<f64>,
    /// Per-task demand.
    pub demand: ResourceVec,
}

impl Job {
    /// Builds a job, checking the DAG: known parents, no cycle, at least one task per stage,
    /// valid durations. Stages are reordered topologically (stable: file order among ready
    /// stages), and parent ids become indices.
    pub fn new(
        name: impl Into<String>,
        group: impl Into<String>,
        arrival_s: Option<f64>,
        specs: Vec<StageSpec>,
    ) -> Result<Job, JobError> {
        if specs.is_empty() {
            return Err(JobError::NoStages);
        }
        let mut by_id = std::collections::HashMap::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            if by_id.insert(s.id, i).is_some() {
                return Err(JobError::DuplicateStage(s.id));
            }
            if s.durations.is_empty() {
                return Err(JobError::NoTasks(s.id));
            }
            if let Some(&d) = s.durations.iter().find(|d| !d.is_finite() || **d < 0.0) {
                return Err(JobError::BadDuration {
                    stage: s.id,
                    duration: d,
                });
            }
        }
        let mut parent_pos: Vec<Vec<usize>> = Vec::with_capacity(specs.len());
        for s in &specs {
            let mut ps = Vec::with_capacity(s.parents.len());
            for p in &s.parents {
                let pos = *by_id.get(p).ok_or(JobError::UnknownParent {
                    stage: s.id,
                    parent: *p,
                })?;
                if !ps.contains(&pos) {
                    ps.push(pos);
                }
            }
            parent_pos.push(ps);
        }
        // Kahn's algorithm, always taking the earliest-in-file ready stage.
        let n = specs.len();
        let mut indegree: Vec<usize> = parent_pos.iter().map(Vec::len).collect();
        let mut children_pos: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (c, ps) in parent_pos.iter().enumerate() {
            for &p in ps {
                children_pos[p].push(c);
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &c in &children_pos[i] {
                indegree[c] -= 1;
                if indegree[c] == 0 {
                    ready.insert(c);
                }
            }
        }
        if order.len() < n {
            let stuck = (0..n).find(|i| indegree[*i] > 0).unwrap_or(0);
            return Err(JobError::Cycle(specs[stuck].id));
        }
        let mut new_index = vec![0; n];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        let mut specs: Vec<Option<StageSpec>> = specs.into_iter().map(Some).collect();
        let mut stages: Vec<Stage> = order
            .iter()
            .map(|&old| {
                let s = specs[old].take().expect("each stage is taken once");
                let mut parents: Vec<StageIdx> =
                    parent_pos[old].iter().map(|p| new_index[*p]).collect();
                parents.sort_unstable();
                Stage {
                    id: s.id,
                    name: s.name,
                    parents,
                    children: Vec::new(),
                    durations: s.durations,
                    demand: s.demand,
                }
            })
            .collect();
        for c in 0..stages.len() {
            for p in stages[c].parents.clone() {
                stages[p].children.push(c);
            }
        }
        Ok(Job {
            name: name.into(),
            arrival_s,
            group: group.into(),
            stages,
        })
    }

    /// Total number of tasks.
    pub fn num_tasks(&self) -> usize {
        self.stages.iter().map(Stage::num_tasks).sum()
    }

    /// A task's duration.
    pub fn duration(&self, task: TaskRef) -> f64 {
        self.stages[task.stage()].durations[task.index as usize]
    }

    /// The largest demand of any stage's tasks, kind by kind (the component-wise maximum over
    /// the stages).
    pub fn largest_task(&self) -> ResourceVec {
        self.stages
            .iter()
            .fold(ResourceVec::ZERO, |acc, stage| acc.max(&stage.demand))
    }

    /// A task's demand.
    pub fn demand(&self, task: TaskRef) -> ResourceVec {
        self.stages[task.stage()].demand
    }

    /// Every task, stage by stage in topological order.
    pub fn tasks(&self) -> impl Iterator<Item = TaskRef> + '_ {
        self.stages
            .iter()
            .enumerate()
            .flat_map(|(s, st)| (0..st.num_tasks()).map(move |i| TaskRef::new(s, i)))
    }

    /// Stages with no parents.
    pub fn roots(&self) -> impl Iterator<Item = StageIdx> + '_ {
        (0..self.stages.len()).filter(|&s| self.stages[s].parents.is_empty())
    }

    /// Total work: Σ duration × dominant share of `capacity` over all tasks (resource-seconds
    /// in units of `capacity`). Carbyne's and the allocator's measure of "remaining work".
    pub fn total_work(&self, capacity: &ResourceVec) -> f64 {
        self.stages
            .iter()
            .map(|s| s.total_duration() * s.demand.dominant_share(capacity))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    fn spec(id: u32, parents: &[u32], tasks: usize) -> StageSpec {
        testkit::stage(id, parents, &vec![1.0; tasks], testkit::cpus(1.0))
    }

    #[test]
    fn stages_are_sorted_topologically_with_children_linked() {
        let job = Job::new(
            "j",
            "default",
            None,
            vec![spec(7, &[3, 5], 1), spec(3, &[], 2), spec(5, &[3], 3)],
        )
        .unwrap();
        let ids: Vec<u32> = job.stages.iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![3, 5, 7]);
        assert_eq!(job.stages[2].parents, vec![0, 1]);
        assert_eq!(job.stages[0].children, vec![1, 2]);
        assert_eq!(job.num_tasks(), 6);
        assert_eq!(job.roots().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn invalid_dags_are_rejected_with_the_stage_named() {
        let cycle = Job::new("j", "g", None, vec![spec(1, &[2], 1), spec(2, &[1], 1)]);
        assert!(matches!(cycle, Err(JobError::Cycle(_))));
        let unknown = Job::new("j", "g", None, vec![spec(1, &[9], 1)]);
        assert_eq!(
            unknown,
            Err(JobError::UnknownParent {
                stage: 1,
                parent: 9
            })
        );
        let empty = Job::new("j", "g", None, vec![spec(1, &[], 0)]);
        assert_eq!(empty, Err(JobError::NoTasks(1)));
        let dup = Job::new("j", "g", None, vec![spec(1, &[], 1), spec(1, &[], 1)]);
        assert_eq!(dup, Err(JobError::DuplicateStage(1)));
        let selfloop = Job::new("j", "g", None, vec![spec(1, &[1], 1)]);
        assert!(matches!(selfloop, Err(JobError::Cycle(1))));
    }
}
