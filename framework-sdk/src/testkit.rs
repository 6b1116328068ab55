//! Builders for tests and benchmarks; not for production use.
//!
//! One copy of each job builder the SDK's and the simulator's tests and benchmarks share. The
//! resource builders are `fullerene_scheduling::testkit`'s, re-exported. Enabled by this
//! crate's `testkit` feature (and in its own unit tests).

use std::path::Path;

pub use fullerene_scheduling::testkit::*;

use fullerene_scheduling::{ResourceKind, ResourceVec};

use crate::job::{Job, StageSpec};
use crate::planner::{plan, Plan, PlanCluster, PlannerConfig};
use crate::workload::read_workload;

/// A stage named `s{id}` with the given parents, one task per duration, each demanding
/// `demand`.
#[must_use]
pub fn stage(id: u32, parents: &[u32], durations: &[f64], demand: ResourceVec) -> StageSpec {
    StageSpec {
        id,
        name: format!("s{id}"),
        parents: parents.to_vec(),
        durations: durations.to_vec(),
        demand,
    }
}

/// A job of `stages`, checked by [`Job::new`].
///
/// # Panics
///
/// When the stages do not form a valid job.
#[must_use]
pub fn job(name: &str, group: &str, arrival_s: Option<f64>, stages: Vec<StageSpec>) -> Job {
    Job::new(name, group, arrival_s, stages).expect("test job is valid")
}

/// Graphene Fig. 2 (§2.2), reconstructed from the text, which gives the figure's claims but
/// not all of its numbers. Meant for one machine with capacity 1 of cpus and memory; T = 1,
/// ε = 0.01.
///
/// - Dependencies: t1 → t2 and t3 → t4 → t5; t0 stands alone (stage `i` is task `ti`).
/// - Durations: t0 = T(1+5ε), t2 = T, t5 = T(1+2ε) (the long tasks); t1 = t3 = t4 = εT. This
///   gives the critical-path lengths of the footnote: CP(t0) = T(1+5ε), CP(t1) = T(1+ε),
///   CP(t3) = T(1+4ε).
/// - Demands (cpus, mem), chosen so that the long tasks fit together (OPT overlaps t0, t2, t5),
///   t0 fits beside t4 but not beside t1 or t3, t2 does not fit beside t4, and t1 does not fit
///   beside t5; their sums rank the tasks as the footnote's Tetris scores do
///   (t0 > t1 > t3 > t2 > t4 > t5).
///
/// The offline optimum overlaps the long tasks and takes about T; critical-path and packing
/// schedulers take about 3T.
#[must_use]
pub fn figure_2(name: &str, group: &str, arrival_s: Option<f64>) -> Job {
    let t = 1.0;
    let eps = 0.01;
    let s = |id: u32, parents: &[u32], duration: f64, cpus: f64, mem: f64| {
        stage(id, parents, &[duration], cpus_and_mem(cpus, mem))
    };
    job(
        name,
        group,
        arrival_s,
        vec![
            s(0, &[], t * (1.0 + 5.0 * eps), 0.35, 0.55),
            s(1, &[], eps * t, 0.85, 0.0),
            s(2, &[1], t, 0.40, 0.35),
            s(3, &[], eps * t, 0.70, 0.10),
            s(4, &[3], eps * t, 0.62, 0.05),
            s(5, &[4], t * (1.0 + 2.0 * eps), 0.20, 0.05),
        ],
    )
}

/// A resource vector of `cpus` cpus and `mem` MiB of memory, the two resources of the papers'
/// small examples.
#[must_use]
pub fn cpus_and_mem(cpus: f64, mem: f64) -> ResourceVec {
    ResourceVec::from_pairs(&[(ResourceKind::Cpus, cpus), (ResourceKind::MemMib, mem)])
}

/// priScores by topological rank (1 for the first task, falling evenly), a stand-in for the
/// offline plan's.
#[must_use]
pub fn rank_pri_scores(job: &Job) -> Vec<Vec<f64>> {
    let n = job.num_tasks() as f64;
    let mut rank = 0.0;
    job.stages
        .iter()
        .map(|s| {
            (0..s.num_tasks())
                .map(|_| {
                    rank += 1.0;
                    1.0 - (rank - 1.0) / n
                })
                .collect()
        })
        .collect()
}

/// `job` planned on `cluster` with the default settings on one thread: the reference that a
/// parallel search, which must find the same plan, is compared with.
///
/// # Panics
///
/// When the job cannot be planned on the cluster.
#[must_use]
pub fn plan_sequentially(job: &Job, cluster: &PlanCluster) -> Plan {
    let config = PlannerConfig {
        parallel: false,
        ..PlannerConfig::default()
    };
    plan(job, cluster, &config).expect("the test job can be planned")
}

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
