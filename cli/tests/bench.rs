//! `fullerene bench raft` run once at a tiny size, as CI proves that the benchmark works: the
//! report's structure and sanity (every phase measured something, the figures are finite and
//! ordered), never a speed figure. With etcd on the PATH the comparison runs too; without it
//! that test says it skipped and why.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn fullerene() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fullerene"));
    cmd.env_remove("FULLERENE_CONFIG")
        .env_remove("FULLERENE_LOG");
    cmd
}

/// The tiny size: 1 and 4 clients for a second each, one leader kill.
const TINY: [&str; 10] = [
    "--clients",
    "1,4",
    "--duration-secs",
    "1",
    "--warmup-secs",
    "0",
    "--kills",
    "1",
    "--payload-bytes",
    "64",
];

fn bench_raft(extra: &[&str]) -> Value {
    let out = fullerene()
        .args(["--json", "bench", "raft"])
        .args(TINY)
        .args(extra)
        .output()
        .expect("fullerene runs");
    assert!(
        out.status.success(),
        "bench raft failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bench raft printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn number(value: &Value, key: &str) -> f64 {
    value[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {value}"))
}

/// One system's report: a row per client count with commits, ordered latencies, and a timed
/// kill by both clients.
fn check_system(system: &Value, name: &str) {
    assert_eq!(system["system"], name);
    assert_eq!(system["fsync"], "always");
    let rows = system["throughput"].as_array().expect("throughput rows");
    let clients: Vec<u64> = rows.iter().filter_map(|r| r["clients"].as_u64()).collect();
    assert_eq!(clients, [1, 4], "{name}: one row per client count");
    for row in rows {
        assert!(row["commits"].as_u64().unwrap_or(0) > 0, "{name}: {row}");
        let rate = number(row, "commits_per_sec");
        assert!(rate.is_finite() && rate > 0.0, "{name}: {row}");
        let (p50, p99, max) = (
            number(row, "commit_p50_ms"),
            number(row, "commit_p99_ms"),
            number(row, "commit_max_ms"),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{name}: {row}");
    }
    let kills = system["failover"]["kills"].as_array().expect("kills");
    assert_eq!(kills.len(), 1, "{name}: one kill");
    let kill = &kills[0];
    let killed = kill["killed"].as_u64().expect("the killed member");
    assert!((1..=3).contains(&killed), "{name}: {kill}");
    assert_ne!(kill["answered_by"].as_u64(), Some(killed), "{name}: {kill}");
    for figure in ["connected_client_ms", "informed_client_ms"] {
        let ms = number(kill, figure);
        assert!(ms.is_finite() && ms > 0.0, "{name}: {kill}");
    }
    for figure in ["connected_client", "informed_client"] {
        let p99 = number(&system["failover"][figure], "p99_ms");
        assert!(
            p99.is_finite() && p99 > 0.0,
            "{name}: {}",
            system["failover"]
        );
    }
}

#[test]
fn bench_raft_measures_every_client_count_and_a_leader_kill() {
    let report = bench_raft(&[]);
    assert_eq!(report["members"], 3);
    assert_eq!(report["payload_bytes"], 64);
    assert_eq!(report["fsync"], "always");
    assert_eq!(report["timing"]["etcd_heartbeat_interval_ms"], 50);
    assert_eq!(report["timing"]["etcd_election_timeout_ms"], 250);
    let systems = report["systems"].as_array().expect("systems");
    assert_eq!(systems.len(), 1, "only the masters without --compare-etcd");
    check_system(&systems[0], "fullerene");
    assert!(report["comparison"].is_null());
}

#[test]
fn bench_raft_compares_with_etcd_side_by_side() {
    if fullerene_chaos::etcd::etcd_on_path().is_none() {
        eprintln!(
            "SKIPPED: etcd is not on the PATH, so --compare-etcd cannot run; install it with \
             scripts/install-etcd (scripts/test does when run as root)"
        );
        return;
    }
    let report = bench_raft(&["--compare-etcd"]);
    let systems = report["systems"].as_array().expect("systems");
    assert_eq!(systems.len(), 2);
    check_system(&systems[0], "fullerene");
    check_system(&systems[1], "etcd");
    assert!(
        systems[1]["version"]
            .as_str()
            .is_some_and(|v| v.contains("etcd")),
        "{}",
        systems[1]
    );
    let comparison = &report["comparison"];
    let rows = comparison["throughput"].as_array().expect("ratio rows");
    assert_eq!(rows.len(), 2);
    for row in rows {
        for ratio in ["commits_per_sec_ratio", "p50_ratio", "p99_ratio"] {
            let value = number(row, ratio);
            assert!(value.is_finite() && value > 0.0, "{row}");
        }
    }
    for ratio in [
        "failover_connected_p99_ratio",
        "failover_informed_p99_ratio",
    ] {
        let value = number(comparison, ratio);
        assert!(value.is_finite() && value > 0.0, "{comparison}");
    }
}

#[test]
fn compare_etcd_without_etcd_says_how_to_install_it_and_starts_nothing() {
    let empty = tempfile::tempdir().unwrap();
    let kept = tempfile::tempdir().unwrap();
    let out: Output = fullerene()
        .env("PATH", empty.path())
        .args(["bench", "raft", "--compare-etcd", "--dir"])
        .arg(kept.path())
        .args(TINY)
        .output()
        .expect("fullerene runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("scripts/install-etcd") && stderr.contains("apt-get install etcd-server"),
        "{stderr}"
    );
    // It refused before starting any master.
    assert!(!Path::new(&kept.path().join("fullerene")).exists());
}
