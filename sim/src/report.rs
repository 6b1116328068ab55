//! What a run produces: [`SimReport`] (serialised as the `--json` output of `fullerene sim`)
//! and its rendering as a plain-text table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::metrics::UtilizationTimeline;

/// One job's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    /// The job's name (suffixed `#k` for cycled copies).
    pub name: String,
    /// Its fairness group.
    pub group: String,
    /// When it arrived, seconds.
    pub arrival_s: f64,
    /// When its last task finished, seconds.
    pub finish_s: f64,
    /// Job completion time: `finish_s − arrival_s`.
    pub jct_s: f64,
}

/// A run's figures relative to a baseline run on identical arrivals. Speedups follow Carbyne's
/// "factor of improvement" (§5.1, eq. 1): the baseline's value divided by this run's, so above 1
/// means this policy is better; the fairness ratio is this run's index over the baseline's, so
/// above 1 means fairer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// The baseline's policy name.
    pub baseline: String,
    /// Baseline average JCT / this average JCT.
    pub avg_jct_speedup: f64,
    /// Baseline median JCT / this median JCT.
    pub median_jct_speedup: f64,
    /// Baseline p95 JCT / this p95 JCT.
    pub p95_jct_speedup: f64,
    /// Baseline makespan / this makespan.
    pub makespan_speedup: f64,
    /// This mean Jain's 60 s index / the baseline's.
    pub jain_60s_mean_ratio: f64,
    /// This minimum Jain's 60 s index / the baseline's.
    pub jain_60s_min_ratio: f64,
}

/// The scenario a report was produced under, echoed so a JSON file explains itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Number of machines.
    pub machines: usize,
    /// One machine's capacity, in `--machine` syntax.
    pub machine: String,
    /// The arrival spec, in `--arrivals` syntax.
    pub arrivals: String,
    /// Number of jobs simulated.
    pub jobs: usize,
    /// Which jobs were taken, in `--job-order` syntax (`file` or `random`).
    #[serde(default)]
    pub job_order: String,
    /// Number of distinct fairness groups among them.
    pub groups: usize,
    /// The seed.
    pub seed: u64,
}

/// Everything one simulated run measured (Graphene §7, Carbyne §5.1). The JSON keys are those of
/// `fullerene sim --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// The policy's `--compare` name.
    pub policy: String,
    /// The scenario.
    pub scenario: Scenario,
    /// Mean job completion time, seconds.
    pub avg_jct_s: f64,
    /// Nearest-rank median JCT, seconds.
    pub median_jct_s: f64,
    /// Nearest-rank 95th percentile JCT, seconds.
    pub p95_jct_s: f64,
    /// Last finish − first arrival, seconds.
    pub makespan_s: f64,
    /// Mean of Jain's index over 10 s windows.
    pub jain_10s_mean: f64,
    /// Minimum of Jain's index over 10 s windows.
    pub jain_10s_min: f64,
    /// Mean of Jain's index over 60 s windows (Carbyne §5.1's measure).
    pub jain_60s_mean: f64,
    /// Minimum of Jain's index over 60 s windows.
    pub jain_60s_min: f64,
    /// Mean of Jain's index over 240 s windows.
    pub jain_240s_mean: f64,
    /// Minimum of Jain's index over 240 s windows.
    pub jain_240s_min: f64,
    /// Time-average utilisation of each resource the cluster has (fraction of capacity).
    pub utilization: BTreeMap<String, f64>,
    /// Utilisation over time, for plots.
    pub utilization_timeline: UtilizationTimeline,
    /// Per job, in arrival order.
    pub jobs: Vec<JobResult>,
    /// Figures relative to the baseline, when one was named (absent on the baseline itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratios: Option<Ratios>,
}

impl SimReport {
    /// Ratios of this report against `baseline` (see [`Ratios`]).
    pub fn ratios_to(&self, baseline: &SimReport) -> Ratios {
        Ratios {
            baseline: baseline.policy.clone(),
            avg_jct_speedup: ratio(baseline.avg_jct_s, self.avg_jct_s),
            median_jct_speedup: ratio(baseline.median_jct_s, self.median_jct_s),
            p95_jct_speedup: ratio(baseline.p95_jct_s, self.p95_jct_s),
            makespan_speedup: ratio(baseline.makespan_s, self.makespan_s),
            jain_60s_mean_ratio: ratio(self.jain_60s_mean, baseline.jain_60s_mean),
            jain_60s_min_ratio: ratio(self.jain_60s_min, baseline.jain_60s_min),
        }
    }
}

/// `a / b`, with 0/0 = 1 (two equal nothings) and x/0 = a large finite number rather than an
/// infinity JSON cannot carry.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else if a > 0.0 {
        f64::MAX
    } else {
        1.0
    }
}

/// Fills in every report's [`SimReport::ratios`] against the report of policy `baseline` (the
/// baseline's own stays `None`). Returns false, changing nothing, when no report has that name.
pub fn attach_ratios(reports: &mut [SimReport], baseline: &str) -> bool {
    let Some(base) = reports.iter().find(|r| r.policy == baseline).cloned() else {
        return false;
    };
    for r in reports.iter_mut() {
        r.ratios = (r.policy != base.policy).then(|| r.ratios_to(&base));
    }
    true
}

/// Renders reports as an aligned text table, one row per policy: JCTs and makespan in seconds,
/// Jain's index (mean/min) per window, average CPU and memory utilisation, and, when `baseline`
/// names one of the reports, each policy's speedup of average, median and p95 JCT over it.
pub fn render_table(reports: &[SimReport], baseline: Option<&str>) -> String {
    let base = baseline.and_then(|b| reports.iter().find(|r| r.policy == b));
    let mut header = vec![
        "policy".to_string(),
        "avg JCT s".into(),
        "median s".into(),
        "p95 s".into(),
        "makespan s".into(),
        "Jain 10s".into(),
        "Jain 60s".into(),
        "Jain 240s".into(),
        "cpu util".into(),
        "mem util".into(),
    ];
    if let Some(b) = base {
        header.push(format!("avg ×{}", b.policy));
        header.push(format!("median ×{}", b.policy));
        header.push(format!("p95 ×{}", b.policy));
        header.push(format!("Jain60 /{}", b.policy));
    }
    let mut rows = vec![header];
    for r in reports {
        let util = |name: &str| {
            r.utilization
                .get(name)
                .map_or_else(|| "-".to_string(), |u| format!("{:.1}%", u * 100.0))
        };
        let mut row = vec![
            r.policy.clone(),
            format!("{:.1}", r.avg_jct_s),
            format!("{:.1}", r.median_jct_s),
            format!("{:.1}", r.p95_jct_s),
            format!("{:.1}", r.makespan_s),
            format!("{:.3}/{:.3}", r.jain_10s_mean, r.jain_10s_min),
            format!("{:.3}/{:.3}", r.jain_60s_mean, r.jain_60s_min),
            format!("{:.3}/{:.3}", r.jain_240s_mean, r.jain_240s_min),
            util("cpus"),
            util("mem_mib"),
        ];
        if let Some(b) = base {
            let q = r.ratios_to(b);
            row.push(format!("{:.2}", q.avg_jct_speedup));
            row.push(format!("{:.2}", q.median_jct_speedup));
            row.push(format!("{:.2}", q.p95_jct_speedup));
            row.push(format!("{:.3}", q.jain_60s_mean_ratio));
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (columns - 1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    if base.is_some() {
        let _ = writeln!(
            out,
            "× columns: the baseline's value over the policy's (above 1: faster); Jain60 /: the policy's 60 s index over the baseline's."
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(policy: &str, avg: f64, jain: f64) -> SimReport {
        SimReport {
            policy: policy.into(),
            scenario: Scenario {
                machines: 1,
                machine: "cpus=1".into(),
                arrivals: "zero".into(),
                jobs: 1,
                job_order: "file".into(),
                groups: 1,
                seed: 0,
            },
            avg_jct_s: avg,
            median_jct_s: avg,
            p95_jct_s: avg * 2.0,
            makespan_s: avg * 3.0,
            jain_10s_mean: jain,
            jain_10s_min: jain,
            jain_60s_mean: jain,
            jain_60s_min: jain,
            jain_240s_mean: jain,
            jain_240s_min: jain,
            utilization: BTreeMap::from([("cpus".to_string(), 0.5)]),
            utilization_timeline: UtilizationTimeline::default(),
            jobs: vec![],
            ratios: None,
        }
    }

    #[test]
    fn ratios_follow_the_factor_of_improvement() {
        let mut reports = vec![report("graphene", 50.0, 0.9), report("drf", 100.0, 1.0)];
        assert!(attach_ratios(&mut reports, "drf"));
        let q = reports[0].ratios.as_ref().unwrap();
        assert_eq!(q.baseline, "drf");
        assert_eq!(q.avg_jct_speedup, 2.0);
        assert_eq!(q.jain_60s_mean_ratio, 0.9);
        assert!(reports[1].ratios.is_none());
        assert!(!attach_ratios(&mut reports, "fifo"));
        assert_eq!(ratio(0.0, 0.0), 1.0);
    }

    #[test]
    fn json_uses_the_issue_key_names() {
        let mut reports = vec![report("graphene", 50.0, 0.9), report("drf", 100.0, 1.0)];
        attach_ratios(&mut reports, "drf");
        let v = serde_json::to_value(&reports[0]).unwrap();
        for key in [
            "avg_jct_s",
            "median_jct_s",
            "p95_jct_s",
            "makespan_s",
            "jain_60s_mean",
            "jain_60s_min",
            "utilization",
            "jobs",
            "ratios",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        let back: SimReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, reports[0]);
        let base = serde_json::to_value(&reports[1]).unwrap();
        assert!(base.get("ratios").is_none());
    }

    #[test]
    fn table_aligns_rows_and_shows_ratios() {
        let reports = vec![
            report("graphene+carbyne", 50.0, 0.9),
            report("drf", 100.0, 1.0),
        ];
        let table = render_table(&reports, Some("drf"));
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("policy"));
        assert!(lines[0].contains("avg ×drf"));
        assert!(lines[2].starts_with("graphene+carbyne"));
        assert!(lines[2].contains("2.00"), "{table}");
        assert!(lines[3].starts_with("drf"));
        assert_eq!(
            lines[2].chars().count(),
            lines[3].chars().count(),
            "{table}"
        );
        let plain = render_table(&reports, None);
        assert!(!plain.contains('×'));
        assert_eq!(plain.lines().count(), 4);
    }
}
