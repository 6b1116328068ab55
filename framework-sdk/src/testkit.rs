//! Builders for tests and benchmarks; not for production use.
//!
//! One copy of each job builder the SDK's tests and benchmarks share. Enabled by this crate's
//! `testkit` feature (and in its own unit tests).

use std::path::Path;

use crate::job::Job;
use crate::workload::read_workload;

/// The job with the most tasks in the shared TPC-H workload (`tpch-decima.jsonl`, in the
/// workloads folder beside the checkout): the largest input the planner and the policies see
/// in the experiments, which their benchmarks time.
///
/// # Panics
///
/// When the shared workload is missing, unreadable or empty.
#[must_use]
pub fn largest_tpch_job() -> Job {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl");
    let jobs = read_workload(&path).expect("the shared TPC-H workload is readable");
    jobs.into_iter()
        .max_by_key(Job::num_tasks)
        .expect("the workload has jobs")
}
