//! The same inputs give the same output, byte for byte (but for the wall-clock speed figures).

mod common;

use fullerene_sim::{compare, ArrivalSpec, PolicyKind, SimConfig};

fn config(seed: u64) -> SimConfig {
    SimConfig {
        machines: 2,
        jobs: Some(10),
        groups: Some(2),
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 8.0 },
        seed,
        ..SimConfig::default()
    }
}

#[test]
fn two_runs_give_identical_json() {
    let jobs = common::decima(10);
    let policies = [
        PolicyKind::GrapheneCarbyne,
        PolicyKind::Graphene,
        PolicyKind::Carbyne,
        PolicyKind::Drf,
        PolicyKind::Tetris,
    ];
    let first = compare(&jobs, &config(11), &policies, Some(PolicyKind::Drf), None).unwrap();
    let second = compare(&jobs, &config(11), &policies, Some(PolicyKind::Drf), None).unwrap();
    let json = |reports: &[fullerene_sim::SimReport]| {
        let mut reports = reports.to_vec();
        for r in &mut reports {
            assert!(r.speed.wall_s > 0.0, "{}: no wall-clock time", r.policy);
            r.speed = fullerene_sim::SimSpeed::default();
        }
        serde_json::to_vec(&reports).unwrap()
    };
    let (a, b) = (json(&first), json(&second));
    assert!(a == b, "two runs of the same scenario differ");

    // The seed matters: other arrivals, other figures.
    let other = compare(&jobs, &config(12), &policies[3..4], None, None).unwrap();
    assert_ne!(other[0].jobs[1].arrival_s, first[3].jobs[1].arrival_s);
    // Identical arrivals across the policies of one comparison.
    for report in &first {
        let arrivals: Vec<f64> = report.jobs.iter().map(|j| j.arrival_s).collect();
        let base: Vec<f64> = first[0].jobs.iter().map(|j| j.arrival_s).collect();
        assert_eq!(arrivals, base, "{}", report.policy);
    }
}

#[test]
fn baselines_outside_the_list_are_run_and_ratios_attached() {
    let jobs = common::decima(4);
    let reports = compare(
        &jobs,
        &SimConfig {
            jobs: Some(4),
            ..config(3)
        },
        &[PolicyKind::Fifo],
        Some(PolicyKind::Sjf),
        None,
    )
    .unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[1].policy, "sjf");
    let ratios = reports[0].ratios.as_ref().expect("fifo has ratios to sjf");
    assert_eq!(ratios.baseline, "sjf");
    assert!((ratios.avg_jct_speedup - reports[1].avg_jct_s / reports[0].avg_jct_s).abs() < 1e-12);
    assert!(reports[1].ratios.is_none());
}

#[test]
fn plans_computed_in_parallel_equal_sequential_ones() {
    use fullerene_sdk::planner::PlanCluster;
    use fullerene_sdk::testkit::plan_sequentially;
    let jobs = common::decima(5);
    let config = SimConfig {
        jobs: Some(5),
        ..config(0)
    };
    let set = fullerene_sim::plan_jobs(&jobs, &config, None).unwrap();
    let cluster = PlanCluster::new(config.machines, config.machine);
    for (i, job) in jobs.iter().enumerate() {
        let sequential = plan_sequentially(job, &cluster);
        assert_eq!(
            set.get(i).expect("planned").pri_scores,
            sequential.pri_scores,
            "{}",
            job.name
        );
    }
    assert!(set.get(5).is_none());
}
