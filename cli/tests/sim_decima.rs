//! `fullerene sim --policy decima`: every job in one session framework scheduled by Decima's
//! built-in model, alone or compared with per-job policies; a model file that cannot be read
//! is named in the error; decima with --deadlines, and --model without decima, are refused.

mod common;

use std::path::{Path, PathBuf};

use common::{run, stderr, stdout};
use serde_json::Value;

fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl")
}

/// `fullerene --json sim` on three jobs of the shared workload on two machines, with `extra`.
fn sim_json(extra: &[&str]) -> Vec<Value> {
    let w = workload();
    let mut args = vec![
        "--json",
        "sim",
        "--workload",
        w.to_str().unwrap(),
        "--jobs",
        "3",
        "--machines",
        "2",
        "--arrivals",
        "poisson:10",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let reports: Value = serde_json::from_str(&stdout(&out)).expect("sim prints JSON");
    reports.as_array().expect("a list of reports").clone()
}

fn every_job_finished(report: &Value) {
    let jobs = report["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3, "{report}");
    for job in jobs {
        let jct = job["jct_s"].as_f64().unwrap_or(f64::NAN);
        assert!(jct.is_finite() && jct > 0.0, "{job}");
    }
}

#[test]
fn sim_runs_decima_alone_and_beside_per_job_policies() {
    let reports = sim_json(&["--policy", "decima"]);
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0]["policy"].as_str(), Some("decima"));
    every_job_finished(&reports[0]);
    // Its actions are sampled from --seed: the same seed replays the same run.
    let again = sim_json(&["--policy", "decima"]);
    assert_eq!(again[0]["jobs"], reports[0]["jobs"]);
    let greedy = sim_json(&["--policy", "decima", "--action-choice", "greedy"]);
    every_job_finished(&greedy[0]);

    let reports = sim_json(&["--compare", "drf,decima", "--baseline", "fifo"]);
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["drf", "decima", "fifo"]);
    for report in &reports {
        every_job_finished(report);
    }
    assert!(reports[1]["ratios"]["avg_jct_speedup"].as_f64().is_some());

    // decima as the baseline.
    let reports = sim_json(&["--compare", "drf", "--baseline", "decima"]);
    assert_eq!(reports[1]["policy"].as_str(), Some("decima"));
    assert!(reports[0]["ratios"].is_object());
}

#[test]
fn a_model_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.model");
    let w = workload();
    let out = run(&[
        "sim",
        "--workload",
        w.to_str().unwrap(),
        "--jobs",
        "2",
        "--policy",
        "decima",
        "--model",
        missing.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.model"), "{}", stderr(&out));

    let out = run(&["sim", "--compare", "drf,decimal"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("decimal") && err.contains("decima)"), "{err}");
}

#[test]
fn decima_with_deadlines_is_refused_naming_both_flags() {
    let w = workload();
    let base = ["sim", "--workload", w.to_str().unwrap(), "--jobs", "2"];
    for extra in [
        &["--policy", "decima", "--deadlines", "0.3"][..],
        &["--compare", "decima,capacity", "--deadlines", "0.3"][..],
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} ran: {}", stdout(&out));
        let err = stderr(&out);
        let decima_flag = if extra[0] == "--policy" {
            "--policy"
        } else {
            "decima"
        };
        assert!(
            err.contains("--deadlines") && err.contains(decima_flag),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_model_or_an_action_choice_without_decima_is_refused() {
    let w = workload();
    let cases: [(&[&str], &str); 2] = [
        (
            &["--compare", "drf,fifo", "--model", "unused.model"],
            "--model is only read with --policy decima",
        ),
        (
            &["--policy", "drf", "--action-choice", "greedy"],
            "--action-choice greedy is only read with --policy decima",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = vec!["sim", "--workload", w.to_str().unwrap(), "--jobs", "2"];
        args.extend_from_slice(flags);
        let out = run(&args);
        assert!(!out.status.success(), "{flags:?} ran: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains(expected), "{flags:?}: {err}");
    }
}
