//! `fullerene bench launch` and `fullerene bench scale` run once each at a tiny size: the
//! report's structure and that something was measured (counts above zero), never a speed;
//! and nothing they started is left running.

use std::process::{Command, Output};

mod common;
use common::processes_using;

fn fullerene() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fullerene"));
    cmd.env_remove("FULLERENE_CONFIG")
        .env_remove("FULLERENE_LOG");
    cmd
}

/// Runs `fullerene` with `args` and `--json`; the report.
fn report(args: &[&str]) -> serde_json::Value {
    let out: Output = fullerene()
        .args(args)
        .arg("--json")
        .output()
        .expect("fullerene runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: the report is not JSON ({e}):\n{stderr}"))
}

fn number(report: &serde_json::Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {report:#}"))
}

#[test]
fn bench_launch_times_tasks_from_accept_to_running() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = dir.path().join("cluster");
    let report = report(&[
        "bench",
        "launch",
        "--agents",
        "4",
        "--frameworks",
        "2",
        "--task-ms",
        "200",
        "--warmup-secs",
        "2",
        "--duration-secs",
        "3",
        "--dir",
        cluster.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(report["masters"], 3);
    assert_eq!(report["agents"], 4);
    assert_eq!(report["frameworks"], 2);
    let running = number(&report, "running");
    assert!(running > 0.0, "no launch completed: {report:#}");
    assert!(number(&report, "launches_per_sec") > 0.0);
    assert!(number(&report, "accepted") > 0.0);
    assert_eq!(report["latency"]["samples"].as_f64(), Some(running));
    let (p50, p99, max) = (
        number(&report["latency"], "p50_ms"),
        number(&report["latency"], "p99_ms"),
        number(&report["latency"], "max_ms"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{report:#}");
    let cpu: Vec<&str> = report["cpu"]
        .as_array()
        .expect("cpu shares")
        .iter()
        .filter_map(|share| share["who"].as_str())
        .collect();
    assert!(cpu.iter().any(|who| who.contains("(leader)")), "{cpu:?}");
    assert!(cpu.contains(&"bench/bench-agents"), "{cpu:?}");
    assert!(
        report["exited"].as_array().is_some_and(Vec::is_empty),
        "{report:#}"
    );
    let left = processes_using(&cluster, None);
    assert!(left.is_empty(), "processes left running: {left:#?}");
}

#[test]
fn bench_scale_over_quic_measures_memory_offers_and_a_failover() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = dir.path().join("cluster");
    let report = report(&[
        "bench",
        "scale",
        "--agents",
        "20",
        "--frameworks",
        "2",
        "--tasks",
        "40",
        "--offer-secs",
        "2",
        "--kills",
        "1",
        "--dir",
        cluster.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(report["mode"], "quic");
    assert_eq!(report["agents"], 20);
    assert_eq!(report["tasks"], 40);
    assert!(number(&report, "offers") > 0.0, "{report:#}");
    let memory: Vec<&str> = report["memory"]
        .as_array()
        .expect("memory figures")
        .iter()
        .filter_map(|m| m["what"].as_str())
        .collect();
    assert_eq!(memory, ["leader RSS", "follower RSS"]);
    let kills = report["failover"]["kills"].as_array().expect("kills");
    assert_eq!(kills.len(), 1);
    assert!(
        kills[0]["offers_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{report:#}"
    );
    assert!(
        kills[0]["agents_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{report:#}"
    );
    let left = processes_using(&cluster, None);
    assert!(left.is_empty(), "processes left running: {left:#?}");
}

#[test]
fn bench_scale_in_core_mode_times_allocation_cycles() {
    let report = report(&[
        "bench",
        "scale",
        "--mode",
        "core",
        "--agents",
        "200",
        "--frameworks",
        "4",
        "--tasks",
        "400",
        "--cycles",
        "5",
    ]);
    assert_eq!(report["mode"], "core");
    assert_eq!(report["allocation"]["cycles"], 5);
    assert!(number(&report["allocation"], "mean_ms") > 0.0);
    assert!(number(&report, "offers") > 0.0, "{report:#}");
    assert!(report["failover"].is_null());
    let memory = |what: &str| {
        report["memory"]
            .as_array()
            .and_then(|figures| figures.iter().find(|f| f["what"].as_str() == Some(what)))
            .unwrap_or_else(|| panic!("no `{what}` memory figure: {report:#}"))
            .clone()
    };
    let state = memory("replicated state");
    assert!(number(&state, "per_agent_bytes") > 0.0 && number(&state, "per_task_bytes") > 0.0);
    // Frameworks subscribe before their tasks launch, and are counted apart from them.
    assert!(number(&state, "per_framework_bytes") > 0.0);
    // The heap less what a master keeps on disk only: less than the whole heap, and never
    // less than nothing.
    let heap = memory("core heap (state, Raft log, leader's books)");
    let less_store = memory("core heap less what a master keeps on disk only (the Raft snapshot)");
    for figure in ["per_agent_bytes", "per_task_bytes"] {
        let (whole, less) = (number(&heap, figure), number(&less_store, figure));
        assert!(less > 0.0 && less < whole, "{figure}: {less} of {whole}");
    }
}
