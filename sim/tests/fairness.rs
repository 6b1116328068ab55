//! Jain's index end to end: 1 when two identical jobs of two groups share a machine evenly,
//! lower when one group is starved.

use fullerene_sdk::testkit::{job, res, stage};
use fullerene_sim::{run, ArrivalSpec, PolicyKind, SimConfig};

fn twins() -> Vec<fullerene_sdk::Job> {
    ["a", "b"]
        .into_iter()
        .map(|g| {
            job(
                &format!("job-{g}"),
                g,
                Some(0.0),
                vec![stage(0, &[], &[100.0; 8], res("cpus=2,mem_mib=1024"))],
            )
        })
        .collect()
}

fn config() -> SimConfig {
    SimConfig {
        machines: 2,
        machine: res("cpus=8,mem_mib=8192"),
        arrivals: ArrivalSpec::Trace,
        ..SimConfig::default()
    }
}

#[test]
fn identical_jobs_of_two_groups_are_treated_equally_by_drf() {
    let report = run(&twins(), &config(), PolicyKind::Drf, None).unwrap();
    // DRF hands each group one machine (the least-served group gets the next agent), where its
    // job runs four tasks at a time: both done at 200 s.
    for j in &report.jobs {
        assert_eq!(j.finish_s, 200.0, "{}", j.name);
    }
    for (mean, min) in [
        (report.jain_10s_mean, report.jain_10s_min),
        (report.jain_60s_mean, report.jain_60s_min),
        (report.jain_240s_mean, report.jain_240s_min),
    ] {
        assert!(
            (mean - 1.0).abs() < 1e-9 && (min - 1.0).abs() < 1e-9,
            "{report:?}"
        );
    }
}

#[test]
fn a_starved_group_lowers_the_index() {
    // FIFO gives both machines to the first job, all eight tasks for 100 s, while the second
    // waits.
    let report = run(&twins(), &config(), PolicyKind::Fifo, None).unwrap();
    assert_eq!(report.jobs[0].finish_s, 100.0);
    assert_eq!(report.jobs[1].finish_s, 200.0);
    // While both are active, one group holds everything: index 1/2.
    assert!((report.jain_60s_min - 0.5).abs() < 1e-9, "{report:?}");
    assert!((report.jain_10s_mean - 0.5).abs() < 1e-9, "{report:?}");
    let drf = run(&twins(), &config(), PolicyKind::Drf, None).unwrap();
    assert!(report.jain_60s_mean < drf.jain_60s_mean);
}
