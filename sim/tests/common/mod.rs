//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use fullerene_sdk::{read_workload, Job};

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
