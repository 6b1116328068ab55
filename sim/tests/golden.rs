//! Golden figures: a few small runs of every policy whose figures must not move unless a commit
//! means to move them. Speed work on the simulator, the allocator and the policies must leave
//! every job completion time bit for bit where it was; this test is the cheap check that it
//! did (the determinism test only shows that two runs of the *same* build agree).
//!
//! The figures are in `tests/golden/figures.txt`, one `scenario policy figure value` line each,
//! values printed with Rust's shortest exact representation of an `f64` (parsing the text gives
//! the same bits). A change that is meant to alter scheduling decisions regenerates the file
//! with `FULLERENE_BLESS_GOLDEN=1 cargo test -p fullerene-sim --test golden` and says so in its
//! commit message.

mod common;

use std::path::PathBuf;

use fullerene_sim::{compare, ArrivalSpec, JobOrder, PolicyKind, SimConfig, SimReport};

/// How many differing lines a failure lists.
const SHOWN_DIFFERENCES: usize = 20;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/figures.txt")
}

/// The runs: Poisson arrivals and a batch, groups; and the engine's other paths
/// (allocation ticks, Mesos' re-offer tick with decline filters) for the policies they matter to.
fn scenarios() -> Vec<(&'static str, SimConfig, Vec<PolicyKind>)> {
    let base = SimConfig {
        machines: 2,
        jobs: Some(6),
        job_order: JobOrder::Random,
        groups: Some(2),
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 15.0 },
        ..SimConfig::default()
    };
    let all = PolicyKind::ALL.to_vec();
    let altruistic_and_drf = vec![
        PolicyKind::GrapheneCarbyne,
        PolicyKind::Carbyne,
        PolicyKind::Drf,
    ];
    vec![
        (
            "poisson-seed1",
            SimConfig {
                seed: 1,
                ..base.clone()
            },
            all.clone(),
        ),
        (
            "batch-seed3",
            SimConfig {
                machines: 3,
                groups: Some(3),
                arrivals: ArrivalSpec::Zero,
                seed: 3,
                ..base.clone()
            },
            all,
        ),
        (
            "ticks-seed4",
            SimConfig {
                offer_interval_s: 1.0,
                seed: 4,
                ..base.clone()
            },
            altruistic_and_drf.clone(),
        ),
        (
            "filters-seed5",
            SimConfig {
                decline_filter_s: 5.0,
                reoffer_interval_s: 1.0,
                seed: 5,
                ..base
            },
            altruistic_and_drf,
        ),
    ]
}

/// One line per figure of `report`: every job's JCT, then the summary figures and the counts of
/// tasks and events (the speed fields that do not depend on the wall clock).
fn report_lines(scenario: &str, report: &SimReport, out: &mut Vec<String>) {
    let mut line = |figure: &str, value: String| {
        out.push(format!("{scenario} {} {figure} {value}", report.policy));
    };
    for job in &report.jobs {
        line(&format!("jct:{}", job.name), format!("{:?}", job.jct_s));
    }
    for (figure, value) in [
        ("avg_jct", report.avg_jct_s),
        ("p95_jct", report.p95_jct_s),
        ("makespan", report.makespan_s),
        ("mean_jobs_in_system", report.mean_jobs_in_system),
        ("jain_10s_mean", report.jain_10s_mean),
        ("jain_60s_min", report.jain_60s_min),
        ("jain_240s_mean", report.jain_240s_mean),
    ] {
        line(figure, format!("{value:?}"));
    }
    for (resource, value) in &report.utilization {
        line(&format!("utilization:{resource}"), format!("{value:?}"));
    }
    for (resource, series) in &report.utilization_timeline.series {
        let sum: f64 = series.iter().sum();
        line(&format!("timeline_sum:{resource}"), format!("{sum:?}"));
    }
    line("tasks", report.speed.tasks.to_string());
    line("events", report.speed.events.to_string());
}

fn figures() -> Vec<String> {
    // The file's 22 smallest jobs (every query at 2 GB), drawn at random.
    let jobs = common::decima(22);
    let mut lines = Vec::new();
    for (name, config, policies) in scenarios() {
        let reports = compare(&jobs, &config, &policies, None, None).expect("scenario runs");
        for report in &reports {
            report_lines(name, report, &mut lines);
        }
    }
    lines
}

#[test]
fn figures_match_the_golden_file() {
    let got = figures();
    let path = golden_path();
    if std::env::var_os("FULLERENE_BLESS_GOLDEN").is_some() {
        let mut text = got.join("\n");
        text.push('\n');
        std::fs::write(&path, text).expect("golden file written");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (FULLERENE_BLESS_GOLDEN=1 writes it)",
            path.display()
        )
    });
    let want: Vec<&str> = want.lines().collect();
    let differing: Vec<String> = got
        .iter()
        .map(String::as_str)
        .zip(want.iter().copied())
        .filter(|(g, w)| g != w)
        .take(SHOWN_DIFFERENCES)
        .map(|(g, w)| format!("  expected {w}\n  got      {g}"))
        .collect();
    assert!(
        differing.is_empty() && got.len() == want.len(),
        "the simulator's figures moved ({} lines now, {} in {}); first differences:\n{}\n\
         If the change is meant to alter scheduling, regenerate the file with \
         FULLERENE_BLESS_GOLDEN=1 and say so in the commit message.",
        got.len(),
        want.len(),
        path.display(),
        differing.join("\n")
    );
}
