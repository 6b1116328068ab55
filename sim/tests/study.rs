//! Studies over several seeds and cluster sizes aggregate exactly what the single comparisons
//! they are made of report.

use std::sync::Mutex;

use fullerene_sdk::testkit::{job, res, stage};
use fullerene_sdk::Job;
use fullerene_sim::{
    compare, compare_seeds, render_seed_table, render_sweep, sweep_machines, ArrivalSpec, JobOrder,
    PolicyKind, Progress, SimConfig, SimError,
};

/// Eight small two-stage jobs of different lengths.
fn jobs() -> Vec<Job> {
    (0..8)
        .map(|i| {
            let long = 2.0 + f64::from(i) * 1.5;
            job(
                &format!("j{i}"),
                "default",
                None,
                vec![
                    stage(0, &[], &[long; 4], res("cpus=2,mem_mib=1024,disk_mbps=100")),
                    stage(1, &[0], &[1.0, long], res("cpus=1,net_mbps=200")),
                ],
            )
        })
        .collect()
}

fn config() -> SimConfig {
    SimConfig {
        machines: 1,
        machine: res("cpus=8,mem_mib=16384,disk_mbps=1000,net_mbps=1000"),
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 4.0 },
        jobs: Some(6),
        job_order: JobOrder::Random,
        groups: Some(2),
        ..SimConfig::default()
    }
}

const POLICIES: [PolicyKind; 3] = [PolicyKind::Graphene, PolicyKind::Carbyne, PolicyKind::Sjf];

#[test]
fn a_seed_study_aggregates_the_comparisons_of_its_seeds() {
    let file = jobs();
    let seeds = [3, 4, 5];
    let study = compare_seeds(
        &file,
        &config(),
        &seeds,
        &POLICIES,
        Some(PolicyKind::Drf),
        None,
    )
    .unwrap();
    assert_eq!(study.seeds, seeds);
    let names: Vec<&str> = study.policies.iter().map(|p| p.policy.as_str()).collect();
    assert_eq!(names, ["graphene", "carbyne", "sjf", "drf"]);
    assert_eq!(study.reports.len(), 3);

    // Each seed's values are those of a comparison run alone with that seed (`--seed`), plans
    // shared across seeds or not.
    for (i, &seed) in seeds.iter().enumerate() {
        let alone = compare(
            &file,
            &SimConfig { seed, ..config() },
            &POLICIES,
            Some(PolicyKind::Drf),
            None,
        )
        .unwrap();
        for (p, report) in study.policies.iter().zip(&alone) {
            assert_eq!(p.policy, report.policy);
            assert_eq!(report.scenario.seed, seed);
            assert_eq!(
                p.avg_jct_s.values[i], report.avg_jct_s,
                "{} seed {seed}",
                p.policy
            );
            assert_eq!(p.median_jct_s.values[i], report.median_jct_s);
            assert_eq!(p.p95_jct_s.values[i], report.p95_jct_s);
            assert_eq!(p.mean_jobs_in_system.values[i], report.mean_jobs_in_system);
            assert_eq!(p.cpu_utilization.values[i], report.utilization["cpus"]);
            let speedup = p.avg_jct_speedup.as_ref().unwrap().values[i];
            let jain = p.jain_60s_mean_ratio.as_ref().unwrap().values[i];
            match &report.ratios {
                Some(q) => {
                    assert_eq!(speedup, q.avg_jct_speedup);
                    assert_eq!(jain, q.jain_60s_mean_ratio);
                }
                None => assert_eq!((speedup, jain), (1.0, 1.0)),
            }
        }
    }

    // The seeds change the figures, and the summary covers every seed.
    let drf = study.policy("drf").unwrap();
    assert!(drf.avg_jct_s.min < drf.avg_jct_s.max, "{:?}", drf.avg_jct_s);
    let mean = drf.avg_jct_s.values.iter().sum::<f64>() / 3.0;
    assert!((drf.avg_jct_s.mean - mean).abs() < 1e-9);
    assert!(drf.avg_jct_s.std_dev > 0.0);

    let table = render_seed_table(&study);
    assert!(table.contains("seeds 3–5"), "{table}");
    let rows = table.lines().filter(|l| {
        l.split_whitespace()
            .next()
            .is_some_and(|w| names.contains(&w))
    });
    assert_eq!(rows.count(), 4, "{table}");
}

#[test]
fn studies_reject_bad_seeds_and_machine_counts() {
    let file = jobs();
    let c = config();
    let bad = |r: Result<(), SimError>| match r {
        Err(SimError::InvalidConfig { reason }) => reason,
        other => panic!("expected an invalid config, got {other:?}"),
    };
    assert!(
        bad(compare_seeds(&file, &c, &[], &POLICIES, None, None).map(|_| ())).contains("0 seeds")
    );
    assert!(
        bad(compare_seeds(&file, &c, &[2, 2], &POLICIES, None, None).map(|_| ()))
            .contains("seed 2")
    );
    let sweep = |counts: &[usize]| {
        sweep_machines(&file, &c, counts, &[1], &POLICIES, None, None).map(|_| ())
    };
    assert!(bad(sweep(&[2, 0])).contains("machine count 0"));
    assert!(bad(sweep(&[2, 3, 2])).contains("machine count 2"));
    assert!(bad(sweep(&[])).contains("no machine count"));
}

#[test]
fn a_load_sweep_runs_the_study_at_each_cluster_size() {
    let file = jobs();
    let started = Mutex::new(Vec::new());
    let progress = |p: &Progress| {
        if let Progress::Comparison {
            started: k,
            total,
            seed,
            machines,
        } = *p
        {
            started.lock().unwrap().push((k, total, seed, machines));
        }
    };
    let sweep = sweep_machines(
        &file,
        &config(),
        &[1, 2],
        &[1, 2],
        &[PolicyKind::Sjf],
        Some(PolicyKind::Drf),
        Some(&progress),
    )
    .unwrap();
    assert_eq!(sweep.machine_counts(), [1, 2]);
    assert_eq!(sweep.baseline.as_deref(), Some("drf"));
    assert_eq!(
        started.into_inner().unwrap(),
        [(1, 4, 1, 1), (2, 4, 2, 1), (3, 4, 1, 2), (4, 4, 2, 2)]
    );
    // Each point is the seed study on its cluster.
    let alone = compare_seeds(
        &file,
        &SimConfig {
            machines: 2,
            ..config()
        },
        &[1, 2],
        &[PolicyKind::Sjf],
        Some(PolicyKind::Drf),
        None,
    )
    .unwrap();
    assert_eq!(sweep.points[1].policies, alone.policies);
    // Twice the machines, less load and shorter jobs.
    let drf = |m: usize| sweep.points[m].policy("drf").unwrap().clone();
    assert!(drf(1).cpu_utilization.mean < drf(0).cpu_utilization.mean);
    assert!(drf(1).avg_jct_s.mean < drf(0).avg_jct_s.mean);

    let text = render_sweep(&sweep);
    assert!(text.contains("1 machine × cpus=8") && text.contains("2 machines × cpus=8"));
    let summary = text.lines().last().unwrap();
    assert!(summary.starts_with("sjf"), "{text}");
    let json = serde_json::to_value(&sweep).unwrap();
    assert_eq!(json["points"].as_array().unwrap().len(), 2);
}
