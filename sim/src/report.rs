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
    /// One machine's capacity, in `--machine-resources` syntax.
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

/// How fast the simulator went: wall-clock figures of one run, or of several summed by
/// [`SimSpeed::total`]. The only part of a report that differs between two runs of the same
/// scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SimSpeed {
    /// Wall-clock seconds of the run: setting up the engine and its event loop (Graphene's
    /// offline planning, shared by the runs of a comparison, is not counted). The runs of a
    /// comparison go in parallel and share the cores, so each is slower than it would be alone.
    pub wall_s: f64,
    /// Jobs simulated.
    pub jobs: usize,
    /// Tasks launched ([`crate::RunStats::tasks`]).
    pub tasks: u64,
    /// Events handled ([`crate::RunStats::events`]).
    pub events: u64,
    /// Jobs simulated per wall-clock second (0 when no time was measured).
    pub jobs_per_s: f64,
    /// Tasks simulated per wall-clock second (0 when no time was measured).
    pub tasks_per_s: f64,
}

impl SimSpeed {
    /// The speed of a run that simulated `jobs` jobs, `tasks` tasks and `events` events in
    /// `wall_s` seconds.
    pub fn new(wall_s: f64, jobs: usize, tasks: u64, events: u64) -> SimSpeed {
        let per_s = |n: f64| if wall_s > 0.0 { n / wall_s } else { 0.0 };
        SimSpeed {
            wall_s,
            jobs,
            tasks,
            events,
            jobs_per_s: per_s(jobs as f64),
            tasks_per_s: per_s(tasks as f64),
        }
    }

    /// Several runs together: their wall-clock times, jobs, tasks and events summed, and the
    /// rates over the summed time (what one run goes at on average).
    pub fn total<'a>(speeds: impl IntoIterator<Item = &'a SimSpeed>) -> SimSpeed {
        let (mut wall_s, mut jobs, mut tasks, mut events) = (0.0, 0, 0, 0);
        for s in speeds {
            wall_s += s.wall_s;
            jobs += s.jobs;
            tasks += s.tasks;
            events += s.events;
        }
        SimSpeed::new(wall_s, jobs, tasks, events)
    }

    /// One line for under a table: `runs` runs' totals and rates.
    pub fn summary_line(&self, runs: usize) -> String {
        format!(
            "simulator speed: {runs} run(s), {} jobs, {} tasks in {:.3} s of run wall-clock time: {:.1} jobs/s, {:.0} tasks/s per run (parallel runs share the cores)",
            self.jobs, self.tasks, self.wall_s, self.jobs_per_s, self.tasks_per_s
        )
    }
}

impl Scenario {
    /// The cluster, as `N machines × CAPACITY` (for titles and table headings).
    pub fn cluster(&self) -> String {
        let plural = if self.machines == 1 { "" } else { "s" };
        format!("{} machine{plural} × {}", self.machines, self.machine)
    }

    /// Everything but the seed and the cluster, in one line: jobs, their order, the arrivals
    /// and the groups.
    pub fn workload_line(&self) -> String {
        let order = if self.job_order.is_empty() {
            String::new()
        } else {
            format!(" ({} order)", self.job_order)
        };
        let plural = if self.groups == 1 { "" } else { "s" };
        format!(
            "{} jobs{order}, arrivals {}, {} group{plural}",
            self.jobs, self.arrivals, self.groups
        )
    }
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
    /// Time average of the number of jobs in the system (arrived, not finished) from the first
    /// arrival to the last finish (see
    /// [`UsageRecorder::mean_jobs_in_system`](crate::metrics::UsageRecorder::mean_jobs_in_system)).
    #[serde(default)]
    pub mean_jobs_in_system: f64,
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
    /// How fast the simulator ran this run (wall-clock: differs from one run to the next).
    #[serde(default)]
    pub speed: SimSpeed,
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
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
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
/// the mean number of jobs in the system, Jain's index (mean/min) per window, average CPU and
/// memory utilisation, and, when `baseline` names one of the reports, each policy's speedup of
/// average, median and p95 JCT over it. A line under the table gives the simulator's speed when
/// the reports measured it.
pub fn render_table(reports: &[SimReport], baseline: Option<&str>) -> String {
    let base = baseline.and_then(|b| reports.iter().find(|r| r.policy == b));
    let mut header = vec![
        "policy".to_string(),
        "avg JCT s".into(),
        "median s".into(),
        "p95 s".into(),
        "makespan s".into(),
        "jobs in sys".into(),
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
            format!("{:.2}", r.mean_jobs_in_system),
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
    let mut out = aligned(&rows);
    if base.is_some() {
        let _ = writeln!(
            out,
            "× columns: the baseline's value over the policy's (above 1: faster); Jain60 /: the policy's 60 s index over the baseline's."
        );
    }
    let speed = SimSpeed::total(reports.iter().map(|r| &r.speed));
    if speed.wall_s > 0.0 {
        let _ = writeln!(out, "{}", speed.summary_line(reports.len()));
    }
    out
}

/// Lays `rows` out as columns: the first left-aligned, the others right-aligned, the first row a
/// header underlined with dashes. Every row has the header's length.
pub(crate) fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
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
            let total: usize = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    out
}

/// A report with made-up figures for tests: JCTs from `avg`, every Jain index `jain`, half the
/// CPUs used.
#[cfg(test)]
pub(crate) fn test_report(policy: &str, avg: f64, jain: f64) -> SimReport {
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
        mean_jobs_in_system: avg / 10.0,
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
        speed: SimSpeed::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(policy: &str, avg: f64, jain: f64) -> SimReport {
        test_report(policy, avg, jain)
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
            "mean_jobs_in_system",
            "speed",
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
        // The mean number of jobs in the system has its column (50 / 10 and 100 / 10 here).
        let header: Vec<&str> = lines[0].split("  ").filter(|c| !c.is_empty()).collect();
        let column = header
            .iter()
            .position(|c| c.trim() == "jobs in sys")
            .unwrap();
        let cells =
            |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_string).collect() };
        assert_eq!(cells(lines[2])[column], "5.00", "{table}");
        assert_eq!(cells(lines[3])[column], "10.00", "{table}");
    }

    #[test]
    fn speed_is_summed_over_runs_and_shown_under_the_table() {
        let a = SimSpeed::new(2.0, 10, 1000, 3000);
        assert_eq!((a.jobs_per_s, a.tasks_per_s), (5.0, 500.0));
        let b = SimSpeed::new(0.5, 10, 1500, 100);
        let t = SimSpeed::total([&a, &b]);
        assert_eq!((t.wall_s, t.jobs, t.tasks, t.events), (2.5, 20, 2500, 3100));
        assert_eq!((t.jobs_per_s, t.tasks_per_s), (8.0, 1000.0));
        assert_eq!(SimSpeed::new(0.0, 3, 3, 3).tasks_per_s, 0.0);

        let mut reports = vec![report("drf", 100.0, 1.0), report("sjf", 80.0, 1.0)];
        reports[0].speed = a;
        reports[1].speed = b;
        let table = render_table(&reports, None);
        let last = table.lines().last().unwrap();
        assert!(
            last.starts_with("simulator speed: 2 run(s), 20 jobs, 2500 tasks in 2.500 s"),
            "{table}"
        );
        assert!(last.contains("8.0 jobs/s, 1000 tasks/s"), "{table}");
    }
}
