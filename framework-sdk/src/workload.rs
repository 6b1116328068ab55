//! Reads workload files (`shared/workloads/FORMAT.md`): JSON Lines, one job per line.
//!
//! An invalid job is never dropped silently: the whole read fails with the file, the line and
//! the reason, so a typo cannot quietly shrink an experiment.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use fullerene_proto::{ResourceKind, ResourceVec, Resources};
use serde::Deserialize;

use crate::job::{Job, JobError, StageSpec};

/// The most tasks one stage may have. Far above any real stage (the TPC-H traces peak at a few
/// thousand), low enough that a corrupt count cannot make the reader allocate without bound.
pub const MAX_TASKS_PER_STAGE: i64 = 10_000_000;

/// The default fairness group of a job whose line names none.
pub const DEFAULT_GROUP: &str = "default";

/// Why a workload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The file could not be opened or read.
    #[error("{file}: cannot read workload: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// One line is not a valid job.
    #[error("{file}:{line}: {reason}")]
    InvalidJob {
        /// The file (or the name given to [`parse_workload`]).
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The file holds no job.
    #[error("{file}: workload has no jobs")]
    Empty {
        /// The file.
        file: PathBuf,
    },
}

#[derive(Deserialize)]
struct RawJob {
    name: String,
    #[serde(default)]
    arrival_s: Option<f64>,
    #[serde(default)]
    group: Option<String>,
    stages: Vec<RawStage>,
}

#[derive(Deserialize)]
struct RawStage {
    id: u32,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    parents: Vec<u32>,
    tasks: i64,
    #[serde(default)]
    duration_s: Option<f64>,
    #[serde(default)]
    durations_s: Option<Vec<f64>>,
    #[serde(default)]
    demand: BTreeMap<String, f64>,
}

/// Reads a workload file.
pub fn read_workload(path: &Path) -> Result<Vec<Job>, WorkloadError> {
    let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    parse_workload(&text, path)
}

/// Parses workload text; `file` names it in errors.
pub fn parse_workload(text: &str, file: &Path) -> Result<Vec<Job>, WorkloadError> {
    let mut jobs = Vec::new();
    let mut names = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let invalid = |reason: String| WorkloadError::InvalidJob {
            file: file.to_path_buf(),
            line: line_no,
            reason,
        };
        let raw: RawJob =
            serde_json::from_str(line).map_err(|e| invalid(format!("not a valid job: {e}")))?;
        let job = build_job(raw).map_err(&invalid)?;
        if !names.insert(job.name.clone()) {
            return Err(invalid(format!("job name `{}` appears twice", job.name)));
        }
        jobs.push(job);
    }
    if jobs.is_empty() {
        return Err(WorkloadError::Empty {
            file: file.to_path_buf(),
        });
    }
    Ok(jobs)
}

fn build_job(raw: RawJob) -> Result<Job, String> {
    let name = raw.name;
    if name.is_empty() {
        return Err("job name is empty".into());
    }
    if let Some(a) = raw.arrival_s {
        if !a.is_finite() || a < 0.0 {
            return Err(format!(
                "job `{name}`: arrival_s {a} must be finite and >= 0"
            ));
        }
    }
    let mut specs = Vec::with_capacity(raw.stages.len());
    for s in raw.stages {
        if s.tasks < 1 {
            return Err(format!(
                "job `{name}`: stage {} has tasks = {} (must be >= 1)",
                s.id, s.tasks
            ));
        }
        if s.tasks > MAX_TASKS_PER_STAGE {
            return Err(format!(
                "job `{name}`: stage {} has tasks = {} (at most {MAX_TASKS_PER_STAGE})",
                s.id, s.tasks
            ));
        }
        let tasks = s.tasks as usize;
        let durations = match (s.durations_s, s.duration_s) {
            (Some(ds), _) if ds.len() == tasks => ds,
            (Some(ds), _) => {
                return Err(format!(
                    "job `{name}`: stage {} has {} durations_s for {} tasks",
                    s.id,
                    ds.len(),
                    tasks
                ))
            }
            (None, Some(d)) => vec![d; tasks],
            (None, None) => {
                return Err(format!(
                    "job `{name}`: stage {} has neither duration_s nor durations_s",
                    s.id
                ))
            }
        };
        let mut demand_map = s.demand;
        demand_map
            .entry(ResourceKind::Cpus.name().to_string())
            .or_insert(1.0);
        let demand: ResourceVec = Resources::from_iter(demand_map)
            .to_vec()
            .map_err(|e| format!("job `{name}`: stage {}: {e}", s.id))?;
        specs.push(StageSpec {
            id: s.id,
            name: s.name.unwrap_or_else(|| format!("stage-{}", s.id)),
            parents: s.parents,
            durations,
            demand,
        });
    }
    let group = raw.group.unwrap_or_else(|| DEFAULT_GROUP.to_string());
    Job::new(name.clone(), group, raw.arrival_s, specs)
        .map_err(|e: JobError| format!("job `{name}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Job>, WorkloadError> {
        parse_workload(text, Path::new("w.jsonl"))
    }

    #[test]
    fn reads_the_format_example() {
        let text = r#"{"name":"tpch-q9-100g","arrival_s":12.5,"group":"analytics","stages":[{"id":0,"name":"scan","parents":[],"tasks":2,"durations_s":[2.41,2.37],"demand":{"cpus":1,"mem_mib":2048,"disk_mbps":90,"net_mbps":20}},{"id":1,"name":"join","parents":[0],"tasks":200,"duration_s":3.2,"demand":{"mem_mib":4096,"net_mbps":400}}]}"#;
        let jobs = parse(text).unwrap();
        assert_eq!(jobs.len(), 1);
        let j = &jobs[0];
        assert_eq!(j.group, "analytics");
        assert_eq!(j.arrival_s, Some(12.5));
        assert_eq!(j.stages[1].num_tasks(), 200);
        assert_eq!(
            j.stages[1].demand[ResourceKind::Cpus],
            1.0,
            "cpus defaults to 1"
        );
        assert_eq!(j.stages[1].demand[ResourceKind::DiskMbps], 0.0);
    }

    #[test]
    fn errors_name_file_line_and_reason() {
        let text = "{\"name\":\"a\",\"stages\":[{\"id\":0,\"tasks\":1,\"duration_s\":1}]}\n\n{\"name\":\"b\",\"stages\":[{\"id\":0,\"parents\":[1],\"tasks\":1,\"duration_s\":1},{\"id\":1,\"parents\":[0],\"tasks\":1,\"duration_s\":1}]}";
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with("w.jsonl:3: job `b`:"), "{err}");
        assert!(err.contains("cycle"), "{err}");

        let zero = r#"{"name":"z","stages":[{"id":0,"tasks":0,"duration_s":1}]}"#;
        assert!(parse(zero).unwrap_err().to_string().contains("tasks = 0"));
        let huge = r#"{"name":"h","stages":[{"id":0,"tasks":9223372036854775807,"duration_s":1}]}"#;
        assert!(parse(huge).unwrap_err().to_string().contains("at most"));
        let unknown = r#"{"name":"u","stages":[{"id":0,"parents":[4],"tasks":1,"duration_s":1}]}"#;
        assert!(parse(unknown)
            .unwrap_err()
            .to_string()
            .contains("unknown parent 4"));
        let dup = "{\"name\":\"d\",\"stages\":[{\"id\":0,\"tasks\":1,\"duration_s\":1}]}\n{\"name\":\"d\",\"stages\":[{\"id\":0,\"tasks\":1,\"duration_s\":1}]}";
        assert!(parse(dup).unwrap_err().to_string().contains("w.jsonl:2"));
        assert!(parse("not json")
            .unwrap_err()
            .to_string()
            .contains("w.jsonl:1"));
        assert!(matches!(parse("\n"), Err(WorkloadError::Empty { .. })));
    }

    #[test]
    fn reads_the_shared_workloads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads");
        if !dir.exists() {
            // The shared folder sits beside the checkout in CI and on developer machines.
            panic!("shared workloads not found at {}", dir.display());
        }
        let decima = read_workload(&dir.join("tpch-decima.jsonl")).unwrap();
        assert_eq!(decima.len(), 154);
        let largest = decima.iter().map(Job::num_tasks).max().unwrap();
        assert!(largest > 3000, "largest job has {largest} tasks");
        let cloudlab = read_workload(&dir.join("tpch-cloudlab.jsonl")).unwrap();
        assert_eq!(cloudlab.len(), 352);
    }
}
