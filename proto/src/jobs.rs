//! DAG jobs as the masters know them: what a framework says of the jobs it runs (their stages,
//! the edges between them, the policy that orders them), how each ended, and how far each
//! stage got. The masters replicate it, so that `fullerene job status`, the HTTP API's
//! `/jobs` and the web UI show a job's shape and outcome whichever master leads, and after its
//! framework is gone.
//!
//! The masters schedule tasks, not jobs (DESIGN.md: two-level scheduling leaves the DAG to the
//! framework): nothing here changes an offer. A framework that never describes its jobs runs
//! as well; its tasks are then shown without a job.

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::limits::{check_bytes, LimitError, MAX_ID_BYTES};
use crate::messages::TaskState;

/// Jobs one framework may have described at once: its record is listed with the framework, so
/// together with [`MAX_JOB_DESCRIPTION_BYTES`] this keeps a framework's listing entry within
/// a quarter of a listing page (`limits::MAX_PAGE_BYTES`).
pub const MAX_JOBS_PER_FRAMEWORK: usize = 16;

/// Encoded bytes of one job's description: about 500 stages with short names, more than any
/// job of the shared workloads (TPC-H's largest has 27 stages).
pub const MAX_JOB_DESCRIPTION_BYTES: usize = 32 * 1024;

/// A DAG job a framework runs, as it tells the masters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct JobDescription {
    /// The job's name, unique within its framework: the `job` of its tasks' `TaskOrigin`.
    pub job: String,
    /// The policy that orders its tasks (e.g. "graphene+carbyne"), as the framework names it.
    pub policy: String,
    /// Its stages, each once, parents before children not required.
    #[cfg_attr(
        test,
        proptest(
            strategy = "proptest::collection::vec(proptest::prelude::any::<StageDescription>(), 0..5)"
        )
    )]
    pub stages: Vec<StageDescription>,
    /// The reservation the job runs in (issue 17; Rayon §5.2: jobs are tagged with their
    /// reservation, and several jobs may share one), by the name it was created with; `None`
    /// for best-effort work. The masters refuse a job that names a reservation they have not
    /// accepted (a typo would otherwise run a production job as best effort, unnoticed).
    /// Last, with a serde default, so that a JSON document without it still reads.
    #[serde(default)]
    pub reservation: Option<String>,
}

/// One stage of a [`JobDescription`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct StageDescription {
    /// The stage's id: the `stage` of its tasks' `TaskOrigin`.
    pub stage: u32,
    /// A human-readable name.
    pub name: String,
    /// How many tasks it has.
    pub tasks: u32,
    /// The stages that must finish before it starts (its parents in the DAG).
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::collection::vec(proptest::prelude::any::<u32>(), 0..4)")
    )]
    pub parents: Vec<u32>,
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
// Externally tagged: the wire codec (bincode) cannot decode internally tagged enums.
#[serde(rename_all = "snake_case")]
pub enum JobEnd {
    /// Every task finished.
    Finished,
    /// The framework gave up on it (a task out of attempts, a user's interrupt, ...), or its
    /// framework went away before it ended.
    Failed {
        /// Why.
        reason: String,
    },
    /// An operator stopped it (`fullerene job kill`, or the framework's teardown).
    Killed {
        /// Who, and how.
        reason: String,
    },
}

impl JobEnd {
    /// A one-word name: `finished`, `failed` or `killed`.
    pub fn name(&self) -> &'static str {
        match self {
            JobEnd::Finished => "finished",
            JobEnd::Failed { .. } => "failed",
            JobEnd::Killed { .. } => "killed",
        }
    }

    /// Why it ended so, when it did not simply finish.
    pub fn reason(&self) -> Option<&str> {
        match self {
            JobEnd::Finished => None,
            JobEnd::Failed { reason } | JobEnd::Killed { reason } => Some(reason),
        }
    }
}

/// Tasks of one stage by how they ended (counted when each task reaches its end), so that a
/// stage's progress outlives the task records, which the masters forget once acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct StageEnds {
    /// Attempts that finished.
    pub finished: u32,
    /// Attempts that failed.
    pub failed: u32,
    /// Attempts that were killed.
    pub killed: u32,
    /// Attempts that were lost.
    pub lost: u32,
}

impl StageEnds {
    /// Counts one attempt that reached `state`; a state that is not an end counts nothing.
    pub fn count(&mut self, state: TaskState) {
        let slot = match state {
            TaskState::Finished => &mut self.finished,
            TaskState::Failed => &mut self.failed,
            TaskState::Killed => &mut self.killed,
            TaskState::Lost => &mut self.lost,
            TaskState::Staging | TaskState::Running => return,
        };
        *slot = slot.saturating_add(1);
    }
}

/// A job as the operator API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct JobInfo {
    /// What its framework said of it.
    pub description: JobDescription,
    /// When the masters learnt of it (leader's time, Unix ms): the job's start as the cluster
    /// sees it.
    pub submitted_at_ms: u64,
    /// When it ended (leader's time), once it did.
    pub ended_at_ms: Option<u64>,
    /// How it ended, once it did.
    pub end: Option<JobEnd>,
    /// Per stage (in the description's order), its attempts that ended, by how.
    #[cfg_attr(
        test,
        proptest(
            strategy = "proptest::collection::vec(proptest::prelude::any::<StageEnds>(), 0..5)"
        )
    )]
    pub stage_ends: Vec<StageEnds>,
}

impl JobInfo {
    /// The job's completion time as the masters saw it (from its description to its end), in
    /// milliseconds, once it finished.
    pub fn jct_ms(&self) -> Option<u64> {
        match (&self.end, self.ended_at_ms) {
            (Some(JobEnd::Finished), Some(ended)) => {
                Some(ended.saturating_sub(self.submitted_at_ms))
            }
            _ => None,
        }
    }
}

/// Why a [`JobDescription`] is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobDescriptionError {
    /// A name over [`MAX_ID_BYTES`], or the whole over [`MAX_JOB_DESCRIPTION_BYTES`].
    #[error(transparent)]
    TooLarge(#[from] LimitError),
    /// The job names an empty reservation (leave it out for best-effort work).
    #[error("job `{job}` names an empty reservation; leave it out to run as best effort")]
    EmptyReservation {
        /// The job.
        job: String,
    },
    /// The job has no stage.
    #[error("job `{job}` has no stage")]
    NoStages {
        /// The job.
        job: String,
    },
    /// Two stages share an id.
    #[error("job `{job}` lists stage {stage} twice")]
    DuplicateStage {
        /// The job.
        job: String,
        /// The id.
        stage: u32,
    },
    /// A parent that is not a stage of the job.
    #[error("job `{job}`: stage {stage} names parent {parent}, which is not a stage of the job")]
    UnknownParent {
        /// The job.
        job: String,
        /// The stage.
        stage: u32,
        /// The parent it names.
        parent: u32,
    },
    /// The stages' edges form a cycle, so it is not a DAG.
    #[error("job `{job}` is not a DAG: stage {stage} depends on itself through its parents")]
    Cycle {
        /// The job.
        job: String,
        /// A stage on the cycle.
        stage: u32,
    },
}

impl JobDescription {
    /// Checks the description: names and size within the limits, a reservation's name not
    /// empty, at least one stage, stage ids unique, every parent a stage of the job, and no
    /// cycle. Whether the reservation exists is the masters' check.
    pub fn validate(&self) -> Result<(), JobDescriptionError> {
        check_bytes(|| "a job's name".to_string(), &self.job, MAX_ID_BYTES)?;
        check_bytes(
            || format!("job `{}`'s policy name", self.job),
            &self.policy,
            MAX_ID_BYTES,
        )?;
        if let Some(reservation) = &self.reservation {
            if reservation.is_empty() {
                return Err(JobDescriptionError::EmptyReservation {
                    job: self.job.clone(),
                });
            }
            check_bytes(
                || format!("job `{}`'s reservation name", self.job),
                reservation,
                MAX_ID_BYTES,
            )?;
        }
        let size = codec::encoded_size(self).unwrap_or(usize::MAX);
        if size > MAX_JOB_DESCRIPTION_BYTES {
            return Err(LimitError {
                what: format!("job `{}`'s description", self.job),
                size,
                limit: MAX_JOB_DESCRIPTION_BYTES,
            }
            .into());
        }
        let job = || self.job.clone();
        if self.stages.is_empty() {
            return Err(JobDescriptionError::NoStages { job: job() });
        }
        let mut index = std::collections::HashMap::with_capacity(self.stages.len());
        for (i, stage) in self.stages.iter().enumerate() {
            check_bytes(
                || format!("job `{}`'s stage {} name", self.job, stage.stage),
                &stage.name,
                MAX_ID_BYTES,
            )?;
            if index.insert(stage.stage, i).is_some() {
                return Err(JobDescriptionError::DuplicateStage {
                    job: job(),
                    stage: stage.stage,
                });
            }
        }
        for stage in &self.stages {
            if let Some(&parent) = stage.parents.iter().find(|p| !index.contains_key(p)) {
                return Err(JobDescriptionError::UnknownParent {
                    job: job(),
                    stage: stage.stage,
                    parent,
                });
            }
        }
        // Kahn's algorithm: a stage whose parents are all placed is placed; a DAG places all.
        let mut waiting: Vec<usize> = self.stages.iter().map(|s| s.parents.len()).collect();
        let mut children = vec![Vec::new(); self.stages.len()];
        for (i, stage) in self.stages.iter().enumerate() {
            for parent in &stage.parents {
                children[index[parent]].push(i);
            }
        }
        let mut ready: Vec<usize> = (0..self.stages.len())
            .filter(|&i| waiting[i] == 0)
            .collect();
        let mut placed = 0;
        while let Some(i) = ready.pop() {
            placed += 1;
            for &child in &children[i] {
                waiting[child] -= 1;
                if waiting[child] == 0 {
                    ready.push(child);
                }
            }
        }
        if placed < self.stages.len() {
            let stage = waiting
                .iter()
                .position(|&w| w > 0)
                .map_or(0, |i| self.stages[i].stage);
            return Err(JobDescriptionError::Cycle { job: job(), stage });
        }
        Ok(())
    }

    /// The position of stage `stage` in [`JobDescription::stages`].
    pub fn stage_position(&self, stage: u32) -> Option<usize> {
        self.stages.iter().position(|s| s.stage == stage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(stage: u32, parents: &[u32]) -> StageDescription {
        StageDescription {
            stage,
            name: format!("s{stage}"),
            tasks: 2,
            parents: parents.to_vec(),
        }
    }

    fn job(stages: Vec<StageDescription>) -> JobDescription {
        JobDescription {
            job: "q1".to_string(),
            policy: "graphene".to_string(),
            stages,
            reservation: None,
        }
    }

    #[test]
    fn a_diamond_is_a_dag() {
        let diamond = job(vec![
            stage(3, &[1, 2]),
            stage(0, &[]),
            stage(1, &[0]),
            stage(2, &[0]),
        ]);
        assert_eq!(diamond.validate(), Ok(()));
        assert_eq!(diamond.stage_position(2), Some(3));
    }

    #[test]
    fn each_malformed_description_is_refused_naming_what_is_wrong() {
        let cases = [
            (job(vec![]), "job `q1` has no stage"),
            (
                job(vec![stage(0, &[]), stage(0, &[])]),
                "job `q1` lists stage 0 twice",
            ),
            (
                job(vec![stage(0, &[]), stage(1, &[7])]),
                "job `q1`: stage 1 names parent 7, which is not a stage of the job",
            ),
            (
                job(vec![stage(0, &[]), stage(1, &[0, 2]), stage(2, &[1])]),
                "job `q1` is not a DAG: stage 1 depends on itself through its parents",
            ),
        ];
        let mut empty_reservation = job(vec![stage(0, &[])]);
        empty_reservation.reservation = Some(String::new());
        let cases = cases.into_iter().chain([(
            empty_reservation,
            "job `q1` names an empty reservation; leave it out to run as best effort",
        )]);
        for (description, message) in cases {
            let error = description.validate().expect_err(message);
            assert_eq!(error.to_string(), message);
        }
        let mut long = job(vec![stage(0, &[])]);
        long.stages[0].name = "x".repeat(MAX_ID_BYTES + 1);
        assert!(matches!(
            long.validate(),
            Err(JobDescriptionError::TooLarge(_))
        ));
        let huge = job((0..5_000).map(|s| stage(s, &[])).collect());
        let error = huge.validate().expect_err("over the size limit");
        assert!(
            error.to_string().contains("job `q1`'s description"),
            "{error}"
        );
    }

    #[test]
    fn stage_ends_count_only_ends_and_jct_needs_a_finish() {
        let mut ends = StageEnds::default();
        for state in TaskState::ALL {
            ends.count(state);
        }
        assert_eq!(
            ends,
            StageEnds {
                finished: 1,
                failed: 1,
                killed: 1,
                lost: 1
            }
        );
        let mut info = JobInfo {
            description: job(vec![stage(0, &[])]),
            submitted_at_ms: 1_000,
            ended_at_ms: Some(4_500),
            end: Some(JobEnd::Failed {
                reason: "task out of attempts".to_string(),
            }),
            stage_ends: vec![ends],
        };
        assert_eq!(info.jct_ms(), None);
        info.end = Some(JobEnd::Finished);
        assert_eq!(info.jct_ms(), Some(3_500));
    }
}
