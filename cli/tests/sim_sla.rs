//! `fullerene sim --deadlines`: the capacity baseline runs at the production shares given with
//! `--capacity-shares` and reports its whole sweep; a share outside (0, 1] is refused by name.

mod common;

use std::path::{Path, PathBuf};

use common::{run, stderr, stdout};
use serde_json::Value;

fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl")
}

fn sla_args<'a>(w: &'a Path, shares: &'a str) -> Vec<&'a str> {
    vec![
        "--json",
        "sim",
        "--workload",
        w.to_str().unwrap(),
        "--jobs",
        "6",
        "--machines",
        "2",
        "--arrivals",
        "poisson:10",
        "--deadlines",
        "0.5",
        "--compare",
        "capacity",
        "--capacity-shares",
        shares,
    ]
}

#[test]
fn the_capacity_baseline_runs_at_the_shares_given_and_reports_the_sweep() {
    let w = workload();
    let out = run(&sla_args(&w, "0.2,0.8"));
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).expect("sim prints JSON");
    let sweep: Vec<f64> = report["capacity_sweep"]
        .as_array()
        .expect("the sweep")
        .iter()
        .map(|point| point["share"].as_f64().expect("a share"))
        .collect();
    assert_eq!(sweep, vec![0.2, 0.8], "{report}");
    let capacity = &report["policies"][0];
    assert_eq!(capacity["policy"].as_str(), Some("capacity"), "{report}");
    let chosen = capacity["production_share"].as_f64().expect("its share");
    assert!(sweep.contains(&chosen), "{report}");
}

#[test]
fn a_share_outside_the_cluster_is_refused_by_name() {
    let w = workload();
    let out = run(&sla_args(&w, "0.5,1.5"));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--capacity-shares") && err.contains("1.5"),
        "{err}"
    );
}
