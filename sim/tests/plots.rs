//! The SVG plots are written and name what they show.

use fullerene_sdk::testkit::{job, res, stage};
use fullerene_sim::{compare, plot_jct_cdf, plot_utilization, ArrivalSpec, PolicyKind, SimConfig};

#[test]
fn cdf_and_utilisation_plots_are_svg_files() {
    let jobs: Vec<_> = (0..5)
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
        .collect();
    let config = SimConfig {
        machines: 1,
        arrivals: ArrivalSpec::Poisson { mean_gap_s: 3.0 },
        ..SimConfig::default()
    };
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
    plot_jct_cdf(&reports, &cdf).unwrap();
    let text = std::fs::read_to_string(&cdf).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(80)]);
    assert!(text.contains("drf") && text.contains("fifo"));
    assert!(text.contains("<polyline") || text.contains("<path"));

    let util = dir.path().join("util.svg");
    plot_utilization(&reports[0], &util).unwrap();
    let text = std::fs::read_to_string(&util).unwrap();
    assert!(text.starts_with("<svg"));
    assert!(text.contains("cpus") && text.contains("mem_mib"));

    let missing = dir.path().join("no/such/dir/x.svg");
    assert!(plot_jct_cdf(&reports, &missing).is_err());
}
