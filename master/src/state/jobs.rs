//! The DAG jobs frameworks describe ([`fullerene_proto::jobs`]): kept with their framework,
//! their stages' ends counted as tasks end, and ended when the framework says so or leaves.
//!
//! # Bounds
//!
//! A framework holds at most [`MAX_JOBS_PER_FRAMEWORK`] jobs: describing one more drops its
//! oldest ended job, and is refused when none has ended. Torn-down frameworks keep their jobs
//! (what ran and how it ended is what an operator looks for after the fact) for the last
//! [`MAX_TORN_DOWN_WITH_JOBS`] teardowns, ordered by (teardown time, id) so that every replica
//! drops the same ones, whether or not it restored from a snapshot in between. With
//! descriptions of at most [`fullerene_proto::jobs::MAX_JOB_DESCRIPTION_BYTES`] (a few hundred
//! bytes for the shared workloads' jobs), the history costs at most 1,000 × 16 jobs, and
//! in practice a few MB.

use fullerene_proto::http::TeardownCause;
use fullerene_proto::jobs::{JobDescription, JobEnd, JobInfo, StageEnds, MAX_JOBS_PER_FRAMEWORK};
use fullerene_proto::messages::TaskState;
use fullerene_proto::{FrameworkId, TaskKey};

use super::{ClusterState, CommandError, CommandOutcome, UnixMillis};

/// Torn-down frameworks whose jobs are kept (see the module documentation).
pub const MAX_TORN_DOWN_WITH_JOBS: usize = 1_000;

/// How a job that had not ended when its framework was torn down for `cause` ends.
fn job_end_at_teardown(cause: TeardownCause) -> JobEnd {
    match cause {
        TeardownCause::OwnRequest => JobEnd::Failed {
            reason: "its framework tore itself down before the job ended".to_string(),
        },
        TeardownCause::Operator => JobEnd::Killed {
            reason: "killed by an operator (its framework was torn down)".to_string(),
        },
        TeardownCause::FailoverTimeout => JobEnd::Failed {
            reason: "its framework did not reconnect within its failover timeout".to_string(),
        },
    }
}

/// What a framework is told when the masters tore it down for `cause`, if it did not ask.
pub fn teardown_notice(cause: TeardownCause) -> Option<String> {
    match cause {
        TeardownCause::OwnRequest => None,
        TeardownCause::Operator => Some("torn down by an operator".to_string()),
        TeardownCause::FailoverTimeout => {
            Some("torn down: it stayed disconnected past its failover timeout".to_string())
        }
    }
}

impl ClusterState {
    /// Records (or re-describes, while unended) one of a framework's jobs.
    pub(super) fn describe_job(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        description: &JobDescription,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        description
            .validate()
            .map_err(|error| CommandError::BadJob(error.to_string()))?;
        let entry = self.owned_framework(framework_id, Some(principal))?;
        let jobs = &entry.jobs;
        if let Some(i) = jobs
            .iter()
            .position(|j| j.description.job == description.job)
        {
            if jobs[i].end.is_some() {
                return Err(CommandError::BadJob(format!(
                    "job `{}` already ended; a job's name is not reused within its framework",
                    description.job
                )));
            }
            if jobs[i].description == *description {
                return Ok(CommandOutcome::Unchanged);
            }
        } else if jobs.len() >= MAX_JOBS_PER_FRAMEWORK && jobs.iter().all(|j| j.end.is_none()) {
            return Err(CommandError::BadJob(format!(
                "framework `{framework_id}` already runs {MAX_JOBS_PER_FRAMEWORK} jobs that \
                 have not ended, the most one framework may describe"
            )));
        }
        // Refused rather than run untagged: a production job whose reservation name has a
        // typo would otherwise compete as best effort and miss its deadline unnoticed. An
        // unchanged description is accepted above even if its reservation has since ended.
        if let Some(reservation) = &description.reservation {
            if self.reservations.get(reservation).is_none() {
                return Err(CommandError::BadJob(format!(
                    "job `{}` names reservation `{reservation}`, which the masters have not \
                     accepted (or whose time is over): create it first, or leave it out to run \
                     as best effort",
                    description.job
                )));
            }
        }
        let Some(entry) = self.frameworks.get_mut(framework_id) else {
            return Err(CommandError::UnknownFramework(framework_id.clone()));
        };
        let stage_ends = vec![StageEnds::default(); description.stages.len()];
        match entry
            .jobs
            .iter_mut()
            .find(|j| j.description.job == description.job)
        {
            // Ends counted so far stay with the stages that keep their ids.
            Some(job) => {
                let old = std::mem::replace(&mut job.description, description.clone());
                job.stage_ends = description
                    .stages
                    .iter()
                    .map(|stage| {
                        old.stage_position(stage.stage)
                            .and_then(|i| job.stage_ends.get(i).copied())
                            .unwrap_or_default()
                    })
                    .collect();
            }
            None => {
                if entry.jobs.len() >= MAX_JOBS_PER_FRAMEWORK {
                    if let Some(oldest_ended) = entry.jobs.iter().position(|j| j.end.is_some()) {
                        entry.jobs.remove(oldest_ended);
                    }
                }
                entry.jobs.push(JobInfo {
                    description: description.clone(),
                    submitted_at_ms: at_ms,
                    ended_at_ms: None,
                    end: None,
                    stage_ends,
                });
            }
        }
        Ok(CommandOutcome::Applied)
    }

    /// Ends one of a framework's described jobs.
    pub(super) fn end_job(
        &mut self,
        framework_id: &FrameworkId,
        principal: &str,
        job: &str,
        end: &JobEnd,
        at_ms: UnixMillis,
    ) -> Result<CommandOutcome, CommandError> {
        if let Some(reason) = end.reason() {
            fullerene_proto::limits::check_bytes(
                || format!("job `{job}`'s end reason"),
                reason,
                fullerene_proto::limits::MAX_ATTRIBUTE_BYTES * 4,
            )
            .map_err(|error| CommandError::BadJob(error.to_string()))?;
        }
        self.owned_framework(framework_id, Some(principal))?;
        let Some(entry) = self.frameworks.get_mut(framework_id) else {
            return Err(CommandError::UnknownFramework(framework_id.clone()));
        };
        let Some(record) = entry.jobs.iter_mut().find(|j| j.description.job == job) else {
            return Err(CommandError::BadJob(format!(
                "framework `{framework_id}` described no job `{job}`"
            )));
        };
        if record.end.is_some() {
            return Ok(CommandOutcome::Unchanged);
        }
        record.end = Some(end.clone());
        record.ended_at_ms = Some(at_ms);
        Ok(CommandOutcome::Applied)
    }

    /// Counts a task attempt that reached the end `state` in its job's stage, if its framework
    /// described the job.
    pub(super) fn count_task_end(&mut self, key: &TaskKey, state: TaskState) {
        let Some(origin) = self
            .tasks
            .get(key)
            .and_then(|record| record.spec.origin.clone())
        else {
            return;
        };
        let Some(framework) = self.frameworks.get_mut(&key.framework_id) else {
            return;
        };
        let Some(job) = framework
            .jobs
            .iter_mut()
            .find(|j| j.description.job == origin.job)
        else {
            return;
        };
        if let Some(i) = job.description.stage_position(origin.stage) {
            job.stage_ends[i].count(state);
        }
    }

    /// Ends the unended jobs of a framework being torn down for `cause`, and keeps its jobs
    /// among the last [`MAX_TORN_DOWN_WITH_JOBS`] teardowns' (dropping the oldest's).
    pub(super) fn end_jobs_at_teardown(
        &mut self,
        framework_id: &FrameworkId,
        cause: TeardownCause,
        at_ms: UnixMillis,
    ) {
        let Some(entry) = self.frameworks.get_mut(framework_id) else {
            return;
        };
        if entry.jobs.is_empty() {
            return;
        }
        for job in entry.jobs.iter_mut().filter(|j| j.end.is_none()) {
            job.end = Some(job_end_at_teardown(cause));
            job.ended_at_ms = Some(at_ms);
        }
        self.torn_down_with_jobs
            .insert((at_ms, framework_id.clone()));
        while self.torn_down_with_jobs.len() > MAX_TORN_DOWN_WITH_JOBS {
            let Some((_, oldest)) = self.torn_down_with_jobs.pop_first() else {
                break;
            };
            if let Some(entry) = self.frameworks.get_mut(&oldest) {
                entry.jobs.clear();
            }
        }
    }
}
