//! Session mode (Decima §5.2 in the main engine): every job in one framework whose multi-job
//! policy picks stages among all jobs. Runs complete every job without over-committing a
//! machine, and the policy's choices show in the jobs' completion order.

mod common;

use fullerene_sdk::session::SessionPolicyKind;
use fullerene_sdk::testkit::{job, res, stage};
use fullerene_sim::{
    compare, simulate, ArrivalSpec, PolicyKind, Scheduling, SessionScheduling, SimConfig,
    SimOutcome,
};

fn session(kind: SessionPolicyKind) -> Scheduling {
    SessionScheduling::heuristic(kind).into()
}

/// Every job finished, every task ran exactly once, after its job arrived and its parents
/// ended, for exactly its duration (a session never overbooks, so nothing slows down), and no
/// machine ever held more than its capacity.
fn check(outcome: &SimOutcome, file_jobs: &[fullerene_sdk::Job], config: &SimConfig, name: &str) {
    let report = &outcome.report;
    assert_eq!(report.policy, name);
    assert_eq!(report.jobs.len(), outcome.jobs.len());
    for (result, job) in report.jobs.iter().zip(&outcome.jobs) {
        assert!(
            result.finish_s.is_finite() && result.jct_s > 0.0,
            "{name}: {} never finished",
            job.name
        );
    }
    common::check_tasks(outcome, file_jobs, name);
    for r in &outcome.trace {
        let job = &file_jobs[outcome.jobs[r.job].source];
        assert!((r.finish_s - r.start_s - job.duration(r.task)).abs() < 1e-6);
    }
    for m in 0..config.machines {
        common::for_each_charge(outcome, m, |charged| {
            assert!(
                charged.fits_in(&config.machine),
                "{name}: machine {m} charged {charged} of {}",
                config.machine
            );
        });
    }
}

#[test]
fn session_runs_complete_every_job_within_every_machines_capacity() {
    let file_jobs = common::decima(6);
    for (seed, decline_filter_s) in [(1, 0.0), (2, 5.0)] {
        let config = SimConfig {
            machines: 2,
            jobs: Some(8),
            groups: Some(2),
            arrivals: ArrivalSpec::Poisson { mean_gap_s: 5.0 },
            seed,
            decline_filter_s,
            record_trace: true,
            ..SimConfig::default()
        };
        for kind in SessionPolicyKind::ALL {
            let scheduling = session(kind);
            let name = scheduling.name().to_string();
            let outcome = simulate(&file_jobs, &config, scheduling, None, None)
                .unwrap_or_else(|e| panic!("{name}, seed {seed}: {e}"));
            assert_eq!(outcome.jobs.len(), 8);
            check(&outcome, &file_jobs, &config, &name);
        }
    }
}

/// One 4-core machine. A long job L arrives at 0: four 10 s tasks, then four more. Two short
/// jobs arrive at 1, four 1 s tasks each. L's first stage holds the machine until 10; then
/// the policy chooses. FIFO keeps to arrival order: L's second stage runs 10–20, S1 20–21,
/// S2 21–22. SJF takes the least remaining work first: S1 10–11, S2 11–12, L 12–22.
#[test]
fn the_session_policy_decides_which_job_goes_first() {
    let cpu = res("cpus=1");
    let long = job(
        "long",
        "default",
        Some(0.0),
        vec![
            stage(0, &[], &[10.0; 4], cpu),
            stage(1, &[0], &[10.0; 4], cpu),
        ],
    );
    let short = |name: &str| {
        job(
            name,
            "default",
            Some(1.0),
            vec![stage(0, &[], &[1.0; 4], cpu)],
        )
    };
    let jobs = vec![long, short("s1"), short("s2")];
    let config = SimConfig {
        machines: 1,
        machine: res("cpus=4,mem_mib=1024"),
        arrivals: ArrivalSpec::Trace,
        record_trace: true,
        ..SimConfig::default()
    };
    let policies = [
        session(SessionPolicyKind::Fifo),
        session(SessionPolicyKind::Sjf),
    ];
    let reports = compare(&jobs, &config, &policies, None, None).unwrap();
    let finish = |r: usize| -> Vec<f64> { reports[r].jobs.iter().map(|j| j.finish_s).collect() };
    assert_eq!(reports[0].policy, "session-fifo");
    assert_eq!(finish(0), vec![20.0, 21.0, 22.0], "FIFO: long, s1, s2");
    assert_eq!(reports[1].policy, "session-sjf");
    assert_eq!(finish(1), vec![22.0, 11.0, 12.0], "SJF: s1, s2, long");
    assert!(reports[1].avg_jct_s < reports[0].avg_jct_s);
    for outcome in policies
        .iter()
        .map(|p| simulate(&jobs, &config, p.clone(), None, None).unwrap())
    {
        let name = outcome.report.policy.clone();
        check(&outcome, &jobs, &config, &name);
    }
}

/// A session and per-job policies compare on the same arrivals, ratios to a per-job baseline:
/// every job finishes under every policy, each report is bit for bit that of the policy run
/// alone on the same seed (a session in the comparison changes nothing of the per-job runs),
/// and the session's ratios are to the baseline's figures.
#[test]
fn sessions_compare_with_per_job_policies() {
    let file_jobs = common::decima(4);
    let config = SimConfig {
        machines: 2,
        jobs: Some(4),
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 10.0 },
        ..SimConfig::default()
    };
    let policies = [
        Scheduling::from(PolicyKind::Drf),
        session(SessionPolicyKind::Graphene),
    ];
    let baseline = Scheduling::from(PolicyKind::Fifo);
    let reports = compare(&file_jobs, &config, &policies, Some(baseline.clone()), None).unwrap();
    let names: Vec<&str> = reports.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(names, ["drf", "session-graphene", "fifo"]);

    let bits = |report: &fullerene_sim::SimReport| -> Vec<(String, u64, u64)> {
        report
            .jobs
            .iter()
            .map(|j| (j.name.clone(), j.arrival_s.to_bits(), j.finish_s.to_bits()))
            .collect()
    };
    let alone: Vec<Scheduling> = policies.iter().cloned().chain([baseline]).collect();
    for (report, policy) in reports.iter().zip(alone) {
        let name = &report.policy;
        assert_eq!(report.jobs.len(), 4, "{name}");
        for job in &report.jobs {
            assert!(
                job.finish_s.is_finite() && job.jct_s > 0.0,
                "{name}: {} never finished",
                job.name
            );
        }
        // The same arrivals under every policy.
        let arrivals = |r: &fullerene_sim::SimReport| -> Vec<u64> {
            r.jobs.iter().map(|j| j.arrival_s.to_bits()).collect()
        };
        assert_eq!(arrivals(report), arrivals(&reports[0]), "{name}");
        let single = simulate(&file_jobs, &config, policy, None, None).unwrap();
        assert_eq!(
            bits(report),
            bits(&single.report),
            "{name}: not as run alone"
        );
        assert_eq!(
            report.avg_jct_s.to_bits(),
            single.report.avg_jct_s.to_bits(),
            "{name}"
        );
    }

    assert!(reports[0].ratios.is_some() && reports[2].ratios.is_none());
    let ratios = reports[1].ratios.as_ref().expect("the session's ratios");
    assert_eq!(ratios.baseline, "fifo");
    assert_eq!(
        ratios.avg_jct_speedup,
        reports[2].avg_jct_s / reports[1].avg_jct_s
    );
}
