//! `fullerene sim --deadlines`: the capacity baseline runs at the production shares given with
//! `--capacity-shares` and reports its whole sweep; a share outside (0, 1] is refused by name;
//! over several seeds the baseline is also run at one share for all of them.

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

#[test]
fn over_several_seeds_the_baseline_is_also_run_at_one_share_for_every_seed() {
    let w = workload();
    let mut args = sla_args(&w, "0.2,0.8");
    args.extend(["--seeds", "2", "--seed", "4"]);
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let study: Value = serde_json::from_str(&stdout(&out)).expect("sim prints JSON");
    assert_eq!(study["seeds"], serde_json::json!([4, 5]), "{study}");
    assert_eq!(study["per_seed"].as_array().map(Vec::len), Some(2));
    let rows = study["rows"].as_array().expect("the rows");
    // The share tuned seed by seed, then the one share best over both seeds.
    assert_eq!(rows.len(), 2, "{study}");
    assert_eq!(rows[0]["share"], "tuned_per_seed", "{study}");
    let sweep = study["capacity_sweep"].as_array().expect("the sweep");
    assert_eq!(sweep.len(), 2, "{study}");
    let best = sweep
        .iter()
        .max_by(|a, b| {
            let met = |p: &Value| p["met"].as_u64().expect("met");
            let jct = |p: &Value| p["best_effort_mean_jct_s"].as_f64().expect("JCT");
            met(a).cmp(&met(b)).then(jct(b).total_cmp(&jct(a)))
        })
        .expect("a best share");
    let fixed = study["fixed_share"].as_f64().expect("a fixed share");
    assert_eq!(Some(fixed), best["share"].as_f64(), "{study}");
    assert_eq!(rows[1]["share"]["fixed"].as_f64(), Some(fixed), "{study}");
    assert_eq!(rows[1]["met"], best["met"], "{study}");
    // The fixed row's JCTs are each seed's at that share.
    let at_fixed: Vec<f64> = study["per_seed"]
        .as_array()
        .expect("per seed")
        .iter()
        .map(|c| {
            c["capacity_sweep"]
                .as_array()
                .expect("a seed's sweep")
                .iter()
                .find(|p| p["share"].as_f64() == Some(fixed))
                .and_then(|p| p["best_effort_mean_jct_s"].as_f64())
                .expect("the seed ran the fixed share")
        })
        .collect();
    let fixed_jcts: Vec<f64> = rows[1]["best_effort_mean_jct_s"]["values"]
        .as_array()
        .expect("per-seed JCTs")
        .iter()
        .map(|v| v.as_f64().expect("a JCT"))
        .collect();
    assert_eq!(fixed_jcts, at_fixed, "{study}");
    let seeds_jobs: u64 = study["per_seed"]
        .as_array()
        .expect("per seed")
        .iter()
        .map(|c| c["policies"][0]["sla_jobs"].as_u64().expect("SLA jobs"))
        .sum();
    assert_eq!(rows[1]["sla_jobs"].as_u64(), Some(seeds_jobs), "{study}");
}
