//! Checks every run's trace: no machine holds more than its capacity (beyond the overbooking
//! allowance on fungible resources), no task starts before its job arrived or before its parent
//! stages ended, every task runs exactly once, and every job completes.

mod common;

use fullerene_proto::ResourceKind;
use fullerene_sim::{simulate, ArrivalSpec, PolicyKind, SimConfig, SimOutcome};

fn check(
    outcome: &SimOutcome,
    file_jobs: &[fullerene_sdk::Job],
    config: &SimConfig,
    kind: PolicyKind,
) {
    let report = &outcome.report;
    assert_eq!(report.jobs.len(), outcome.jobs.len(), "{kind}");
    for (result, job) in report.jobs.iter().zip(&outcome.jobs) {
        assert!(
            result.finish_s.is_finite(),
            "{kind}: {} never finished",
            job.name
        );
        assert!(result.jct_s > 0.0, "{kind}: {}", job.name);
    }
    // Little's law, exactly: ∫ jobs in system dt = Σ JCT.
    let jct_sum: f64 = report.jobs.iter().map(|j| j.jct_s).sum();
    let little = jct_sum / report.makespan_s;
    assert!(
        (report.mean_jobs_in_system - little).abs() <= 1e-9 * little,
        "{kind}: mean jobs in system {} vs Σ JCT / makespan {little}",
        report.mean_jobs_in_system
    );
    assert_eq!(report.speed.tasks as usize, outcome.trace.len(), "{kind}");

    // Every task exactly once.
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
    for r in &outcome.trace {
        ran[r.job][r.task.stage()][r.task.index as usize] += 1;
    }
    assert!(
        ran.iter().flatten().flatten().all(|&n| n == 1),
        "{kind}: some task did not run exactly once"
    );

    // Dependencies and arrivals.
    let mut stage_end: Vec<Vec<f64>> = outcome
        .jobs
        .iter()
        .map(|j| vec![f64::NEG_INFINITY; file_jobs[j.source].stages.len()])
        .collect();
    for r in &outcome.trace {
        let end = &mut stage_end[r.job][r.task.stage()];
        *end = end.max(r.finish_s);
    }
    for r in &outcome.trace {
        let sim_job = &outcome.jobs[r.job];
        let job = &file_jobs[sim_job.source];
        assert!(
            r.start_s >= sim_job.arrival_s,
            "{kind}: task before its job arrived"
        );
        for &p in &job.stages[r.task.stage()].parents {
            assert!(
                r.start_s >= stage_end[r.job][p] - 1e-9,
                "{kind}: {} stage {} started at {} before parent stage {} ended at {}",
                sim_job.name,
                r.task.stage,
                r.start_s,
                p,
                stage_end[r.job][p]
            );
        }
        let duration = job.duration(r.task);
        let took = r.finish_s - r.start_s;
        assert!(
            took >= duration - 1e-6,
            "{kind}: a task ran faster than its duration"
        );
        assert_eq!(r.demand, job.demand(r.task));
    }

    // Capacity, machine by machine: sweep launches and completions in time order, completions
    // first at equal times (a completion frees what a launch at the same instant takes).
    for m in 0..config.machines {
        let mut events: Vec<(f64, bool, usize)> = Vec::new();
        for (i, r) in outcome
            .trace
            .iter()
            .enumerate()
            .filter(|(_, r)| r.machine == m)
        {
            events.push((r.start_s, true, i));
            events.push((r.finish_s, false, i));
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut charged = fullerene_proto::ResourceVec::ZERO;
        for (_, start, i) in events {
            let demand = outcome.trace[i].demand;
            if start {
                charged += demand;
                assert!(
                    charged.fits_with_overbooking(&config.machine, config.overbook_allowance),
                    "{kind}: machine {m} charged {charged}"
                );
                let overbooks = !charged.fits_in(&config.machine);
                if overbooks {
                    assert!(
                        matches!(kind, PolicyKind::Graphene | PolicyKind::GrapheneCarbyne),
                        "{kind} overbooked machine {m}: {charged}"
                    );
                    for k in ResourceKind::ALL.into_iter().filter(|k| !k.is_fungible()) {
                        assert!(charged[k] <= config.machine[k] + 1e-9);
                    }
                }
            } else {
                charged = charged.saturating_sub(&demand);
            }
        }
    }
    // A task slowed down only when something was overbooked: without overbooking policies every
    // task takes exactly its duration.
    if !matches!(kind, PolicyKind::Graphene | PolicyKind::GrapheneCarbyne) {
        for r in &outcome.trace {
            let job = &file_jobs[outcome.jobs[r.job].source];
            assert!((r.finish_s - r.start_s - job.duration(r.task)).abs() < 1e-6);
        }
    }
}

#[test]
fn every_policy_respects_capacity_and_dependencies_and_completes_every_job() {
    let file_jobs = common::decima(6);
    for seed in [1, 2] {
        let config = SimConfig {
            machines: 2,
            jobs: Some(8),
            groups: Some(2),
            arrivals: ArrivalSpec::Poisson { mean_gap_s: 5.0 },
            seed,
            record_trace: true,
            ..SimConfig::default()
        };
        for kind in PolicyKind::ALL {
            let outcome = simulate(&file_jobs, &config, kind, None, None)
                .unwrap_or_else(|e| panic!("{kind}, seed {seed}: {e}"));
            assert_eq!(outcome.jobs.len(), 8);
            assert!(outcome.jobs[6].name.ends_with("#1"));
            check(&outcome, &file_jobs, &config, kind);
        }
    }
}
