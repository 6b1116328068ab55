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

    common::check_tasks(outcome, file_jobs, kind.name());
    for r in &outcome.trace {
        let job = &file_jobs[outcome.jobs[r.job].source];
        assert!(
            r.finish_s - r.start_s >= job.duration(r.task) - 1e-6,
            "{kind}: a task ran faster than its duration"
        );
    }

    // Capacity, machine by machine.
    for m in 0..config.machines {
        common::for_each_charge(outcome, m, |charged| {
            assert!(
                charged.fits_with_overbooking(&config.machine, config.overbook_allowance),
                "{kind}: machine {m} charged {charged}"
            );
            if !charged.fits_in(&config.machine) {
                assert!(
                    matches!(kind, PolicyKind::Graphene | PolicyKind::GrapheneCarbyne),
                    "{kind} overbooked machine {m}: {charged}"
                );
                for k in ResourceKind::ALL.into_iter().filter(|k| !k.is_fungible()) {
                    assert!(charged[k] <= config.machine[k] + 1e-9);
                }
            }
        });
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
