//! The SVG plots are written and name what they show.

use fullerene_sdk::testkit::{job, res, stage};
use fullerene_sim::{
    compare, compare_seeds, plot_gain_vs_load, plot_jct_cdf, plot_seed_jct_cdf, plot_utilization,
    sweep_machines, workload_name, ArrivalSpec, PolicyKind, SeedStudy, SimConfig,
};

fn jobs() -> Vec<fullerene_sdk::Job> {
    (0..5)
        .map(|i| {
            job(
                &format!("j{i}"),
                "default",
                None,
                vec![
                    stage(0, &[], &[1.0 + i as f64; 3], res("cpus=2,mem_mib=512")),
                    stage(1, &[0], &[2.0], res("cpus=1,disk_mbps=100")),
                ],
            )
        })
        .collect()
}

fn config() -> SimConfig {
    SimConfig {
        machines: 1,
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 3.0 },
        ..SimConfig::default()
    }
}

/// The text of the SVG's `<text>` elements, in order.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let start = t.find('>')? + 1;
            let end = t.find("</text>")?;
            Some(t[start..end].trim().to_string())
        })
        .collect()
}

#[test]
fn cdf_and_utilisation_plots_are_svg_files() {
    let jobs = jobs();
    let config = config();
    let reports = compare(
        &jobs,
        &config,
        &[PolicyKind::Drf, PolicyKind::Fifo],
        None,
        None,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cdf = dir.path().join("cdf.svg");
    plot_jct_cdf(&reports, "tiny.jsonl", &cdf).unwrap();
    let text = std::fs::read_to_string(&cdf).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(80)]);
    assert!(text.contains("drf") && text.contains("fifo"));
    assert!(text.contains("<polyline") || text.contains("<path"));
    // The title names the workload, the cluster and the scenario.
    let labels = texts(&text);
    assert_eq!(
        labels[0], "Job completion time CDF: tiny.jsonl",
        "{labels:?}"
    );
    assert_eq!(
        labels[1],
        "1 machine × cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
    );
    assert_eq!(
        labels[2],
        "5 jobs (file order), arrivals poisson:3, 1 group; seed 0"
    );
    // Log-axis ticks at round values (one significant digit), in increasing order.
    let ticks: Vec<f64> = labels
        .iter()
        .filter_map(|l| l.parse::<f64>().ok())
        .filter(|&x| x > 1.0)
        .collect();
    assert!(ticks.len() >= 3, "{labels:?}");
    for t in &ticks {
        let digits = t.to_string();
        assert!(
            digits.chars().skip(1).all(|c| c == '0'),
            "tick {t}: {labels:?}"
        );
    }
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{labels:?}");

    let util = dir.path().join("util.svg");
    plot_utilization(&reports[0], "tiny.jsonl", &util).unwrap();
    let text = std::fs::read_to_string(&util).unwrap();
    assert!(text.starts_with("<svg"));
    assert!(text.contains("cpus") && text.contains("mem_mib"));
    // Its title names the policy, the workload and the cluster too.
    let labels = texts(&text);
    assert_eq!(
        labels[0], "Cluster utilisation under drf: tiny.jsonl",
        "{labels:?}"
    );
    assert_eq!(
        labels[1],
        "1 machine × cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
    );

    let missing = dir.path().join("no/such/dir/x.svg");
    assert!(plot_jct_cdf(&reports, "tiny.jsonl", &missing).is_err());
    assert_eq!(
        workload_name(std::path::Path::new(
            "../shared/workloads/tpch-decima.jsonl"
        )),
        "tpch-decima.jsonl"
    );
}

#[test]
fn study_plots_name_the_workload_the_clusters_and_the_seeds() {
    let jobs = jobs();
    let dir = tempfile::tempdir().unwrap();
    let policies = [PolicyKind::Sjf, PolicyKind::Fifo];
    let study = compare_seeds(
        &jobs,
        &config(),
        &[1, 2, 3],
        &policies,
        Some(PolicyKind::Drf),
        None,
    )
    .unwrap();
    let cdf = dir.path().join("seeds.svg");
    plot_seed_jct_cdf(&study, "tiny.jsonl", &cdf).unwrap();
    let labels = texts(&std::fs::read_to_string(&cdf).unwrap());
    assert_eq!(labels[0], "Job completion time CDF: tiny.jsonl");
    assert!(
        labels[2].ends_with("seeds 1–3, the JCTs of all seeds pooled"),
        "{labels:?}"
    );
    // A study read back from JSON has no runs to pool.
    let back: SeedStudy = serde_json::from_str(&serde_json::to_string(&study).unwrap()).unwrap();
    assert!(plot_seed_jct_cdf(&back, "tiny.jsonl", &cdf).is_err());

    let sweep = sweep_machines(
        &jobs,
        &config(),
        &[1, 2, 4],
        &[1, 2],
        &policies,
        Some(PolicyKind::Drf),
        None,
    )
    .unwrap();
    let gain = dir.path().join("gain.svg");
    plot_gain_vs_load(&sweep, "drf", "tiny.jsonl", &gain).unwrap();
    let svg = std::fs::read_to_string(&gain).unwrap();
    let labels = texts(&svg);
    assert_eq!(
        labels[0],
        "Average-JCT speedup over drf against load: tiny.jsonl"
    );
    assert_eq!(
        labels[1],
        "1, 2, 4 machines × cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
    );
    assert!(
        labels[2].ends_with("seeds 1–2: mean, bars min–max"),
        "{labels:?}"
    );
    for label in ["1 machine", "2 machines", "4 machines", "sjf", "fifo"] {
        assert!(
            labels.iter().any(|l| l == label),
            "{label} missing: {labels:?}"
        );
    }
    // The baseline is the reference line, not a series of its own.
    assert!(!labels.iter().any(|l| l == "drf"), "{labels:?}");
    assert!(svg.contains("<circle"));
    assert!(plot_gain_vs_load(&sweep, "tetris", "tiny.jsonl", &gain).is_err());
}
