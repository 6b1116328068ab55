//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use fullerene_sdk::job::StageSpec;
use fullerene_sdk::{read_workload, Job};

/// A stage with explicit per-task durations and a demand in `--machine` syntax.
pub(crate) fn stage(id: u32, parents: &[u32], durations: &[f64], demand: &str) -> StageSpec {
    StageSpec {
        id,
        name: format!("s{id}"),
        parents: parents.to_vec(),
        durations: durations.to_vec(),
        demand: demand.parse().expect("demand parses"),
    }
}

/// A job from stage specs.
pub(crate) fn job(name: &str, group: &str, arrival_s: Option<f64>, stages: Vec<StageSpec>) -> Job {
    Job::new(name, group, arrival_s, stages).expect("valid job")
}

/// The shared workloads folder, beside the checkout.
pub(crate) fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads")
}

/// The first `n` jobs of `tpch-decima.jsonl`.
pub(crate) fn decima(n: usize) -> Vec<Job> {
    let mut jobs = read_workload(&workloads_dir().join("tpch-decima.jsonl"))
        .expect("the shared TPC-H workload reads");
    jobs.truncate(n);
    jobs
}
