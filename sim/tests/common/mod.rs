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

/// Checks a run's trace against its jobs: every task ran exactly once, after its job arrived
/// and its parent stages ended, charged its own demand. `label` names the run in failures.
pub(crate) fn check_tasks(
    outcome: &fullerene_sim::SimOutcome,
    file_jobs: &[fullerene_sdk::Job],
    label: &str,
) {
    let mut ran: Vec<Vec<Vec<u32>>> = outcome
        .jobs
        .iter()
        .map(|j| {
            file_jobs[j.source]
                .stages
                .iter()
                .map(|s| vec![0; s.num_tasks()])
                .collect()
        })
        .collect();
    let mut stage_end: Vec<Vec<f64>> = outcome
        .jobs
        .iter()
        .map(|j| vec![f64::NEG_INFINITY; file_jobs[j.source].stages.len()])
        .collect();
    for r in &outcome.trace {
        ran[r.job][r.task.stage()][r.task.index as usize] += 1;
        let end = &mut stage_end[r.job][r.task.stage()];
        *end = end.max(r.finish_s);
    }
    assert!(
        ran.iter().flatten().flatten().all(|&n| n == 1),
        "{label}: some task did not run exactly once"
    );
    for r in &outcome.trace {
        let sim_job = &outcome.jobs[r.job];
        let job = &file_jobs[sim_job.source];
        assert!(
            r.start_s >= sim_job.arrival_s,
            "{label}: task before its job arrived"
        );
        for &p in &job.stages[r.task.stage()].parents {
            assert!(
                r.start_s >= stage_end[r.job][p] - 1e-9,
                "{label}: {} stage {} started at {} before parent stage {} ended at {}",
                sim_job.name,
                r.task.stage,
                r.start_s,
                p,
                stage_end[r.job][p]
            );
        }
        assert_eq!(r.demand, job.demand(r.task));
    }
}

/// Sweeps machine `m`'s launches and completions in time order, completions first at equal
/// times (a completion frees what a launch at the same instant takes), and hands `on_launch`
/// what the machine holds after each launch.
pub(crate) fn for_each_charge(
    outcome: &fullerene_sim::SimOutcome,
    m: usize,
    mut on_launch: impl FnMut(&fullerene_proto::ResourceVec),
) {
    let mut events: Vec<(f64, bool, usize)> = Vec::new();
    for (i, r) in outcome.trace.iter().enumerate() {
        if r.machine == m {
            events.push((r.start_s, true, i));
            events.push((r.finish_s, false, i));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut charged = fullerene_proto::ResourceVec::ZERO;
    for (_, start, i) in events {
        let demand = outcome.trace[i].demand;
        if start {
            charged += demand;
            on_launch(&charged);
        } else {
            charged = charged.saturating_sub(&demand);
        }
    }
}
