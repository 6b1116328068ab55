//! Studies made of several comparisons: the same comparison over several seeds
//! ([`compare_seeds`], aggregated into a [`SeedStudy`]), and that over several cluster sizes
//! ([`sweep_machines`], a [`LoadSweep`]).
//!
//! One seed is one draw of the arrivals, of the job sample (`--job-order random`) and of
//! Carbyne's altruism: a single comparison can rank two policies by luck. A study runs the
//! comparison on each seed and reports, per policy, the mean, minimum, maximum and standard
//! deviation over the seeds of each figure. Ratios to the baseline are taken per seed (this
//! policy's run against the baseline's run on the same arrivals) and then aggregated, never as a
//! ratio of means.

use std::fmt::Write as _;

use fullerene_sdk::Job;
use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::error::SimError;
use crate::report::{aligned, Scenario, SimReport, SimSpeed};
use crate::runner::{
    compare_prepared, comparison_kinds, plan_sources, PlanSet, Progress, ProgressFn,
};
use crate::scheduling::Scheduling;
use crate::workload::{prepare_jobs, SimJob};

/// The most seeds a study takes (`fullerene sim --seeds`).
pub const MAX_SEEDS: usize = 1000;

/// A figure over several seeds: its values, in seed order, and their summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (with n − 1; 0 for a single value).
    pub std_dev: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// The values, one per seed in the study's seed order.
    pub values: Vec<f64>,
}

impl Spread {
    /// The summary of `values` (all zero for none). Mean and variance are accumulated with
    /// Welford's method, so that huge ratios (a division by a zero JCT reports `f64::MAX`) do
    /// not overflow to infinity.
    pub fn of(values: Vec<f64>) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        let mut mean = 0.0;
        let mut m2 = 0.0;
        let mut min = f64::INFINITY;
        let mut max = f64::NEG_INFINITY;
        for (k, &x) in values.iter().enumerate() {
            let delta = x - mean;
            mean += delta / (k + 1) as f64;
            m2 += delta * (x - mean);
            min = min.min(x);
            max = max.max(x);
        }
        let n = values.len();
        let std_dev = if n > 1 {
            (m2 / (n - 1) as f64).max(0.0).sqrt()
        } else {
            0.0
        };
        Spread {
            mean,
            std_dev,
            min,
            max,
            values,
        }
    }

    /// `mean (min–max)`, each number formatted by `f`.
    pub fn cell(&self, f: impl Fn(f64) -> String) -> String {
        format!("{} ({}–{})", f(self.mean), f(self.min), f(self.max))
    }
}

/// One policy's figures over the seeds of a study.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicySeeds {
    /// The policy's `--compare` name.
    pub policy: String,
    /// Average JCT, seconds.
    pub avg_jct_s: Spread,
    /// Nearest-rank median JCT, seconds.
    pub median_jct_s: Spread,
    /// Nearest-rank 95th percentile JCT, seconds.
    pub p95_jct_s: Spread,
    /// Makespan, seconds.
    pub makespan_s: Spread,
    /// Mean of Jain's index over 60 s windows.
    pub jain_60s_mean: Spread,
    /// Time-average CPU utilisation, a fraction (0 on machines without `cpus`).
    pub cpu_utilization: Spread,
    /// Time-average number of jobs in the system.
    pub mean_jobs_in_system: Spread,
    /// Per seed, the baseline's average JCT over this policy's (above 1: faster); 1 on the
    /// baseline itself. Absent without a baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_jct_speedup: Option<Spread>,
    /// Per seed, this policy's mean Jain's 60 s index over the baseline's (above 1: fairer).
    /// Absent without a baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jain_60s_mean_ratio: Option<Spread>,
}

/// The same comparison over several seeds, aggregated per policy (the `--json` output of
/// `fullerene sim --seeds N`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedStudy {
    /// The scenario, as run on the first seed (every seed runs the same one but for the seed).
    pub scenario: Scenario,
    /// The seeds, in the order run.
    pub seeds: Vec<u64>,
    /// The baseline's policy name, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Per policy, in the comparison's order (the baseline last when it was not in the list).
    pub policies: Vec<PolicySeeds>,
    /// How fast the simulator ran, all runs of all seeds together.
    pub speed: SimSpeed,
    /// Every run's report: per seed (in [`SeedStudy::seeds`] order), the comparison's reports.
    /// Kept for plots (pooled JCT CDFs); not serialised, as the per-job results of every run
    /// would dwarf the aggregate.
    #[serde(skip)]
    pub reports: Vec<Vec<SimReport>>,
}

impl SeedStudy {
    /// Aggregates comparisons run on `seeds`: `reports[i]` holds the reports of seed
    /// `seeds[i]`, every seed the same policies in the same order (as [`crate::compare`]
    /// returns them). With `baseline`, per-seed ratios to that policy's report are aggregated.
    pub fn from_reports(
        seeds: Vec<u64>,
        reports: Vec<Vec<SimReport>>,
        baseline: Option<&str>,
    ) -> Result<SeedStudy, SimError> {
        let (Some(first), true) = (reports.first(), reports.len() == seeds.len()) else {
            return Err(SimError::InvalidConfig {
                reason: format!(
                    "{} seed(s) but {} comparison(s) to aggregate",
                    seeds.len(),
                    reports.len()
                ),
            });
        };
        let names: Vec<&str> = first.iter().map(|r| r.policy.as_str()).collect();
        for (seed, runs) in seeds.iter().zip(&reports) {
            if !runs
                .iter()
                .map(|r| r.policy.as_str())
                .eq(names.iter().copied())
            {
                return Err(SimError::Internal(format!(
                    "seed {seed} ran other policies than seed {}",
                    seeds[0]
                )));
            }
        }
        let bases: Option<Vec<&SimReport>> = match baseline {
            None => None,
            Some(name) => {
                let Some(index) = names.iter().position(|n| *n == name) else {
                    return Err(SimError::InvalidConfig {
                        reason: format!("baseline `{name}` is not among the policies compared"),
                    });
                };
                Some(reports.iter().map(|runs| &runs[index]).collect())
            }
        };
        let policies = names
            .iter()
            .enumerate()
            .map(|(p, name)| {
                let runs: Vec<&SimReport> = reports.iter().map(|runs| &runs[p]).collect();
                let spread =
                    |f: &dyn Fn(&SimReport) -> f64| Spread::of(runs.iter().map(|r| f(r)).collect());
                let ratios = bases.as_ref().map(|bases| {
                    let q: Vec<_> = runs
                        .iter()
                        .zip(bases)
                        .map(|(r, b)| r.ratios_to(b))
                        .collect();
                    (
                        Spread::of(q.iter().map(|q| q.avg_jct_speedup).collect()),
                        Spread::of(q.iter().map(|q| q.jain_60s_mean_ratio).collect()),
                    )
                });
                let (avg_jct_speedup, jain_60s_mean_ratio) = ratios.unzip();
                PolicySeeds {
                    policy: (*name).to_string(),
                    avg_jct_s: spread(&|r| r.avg_jct_s),
                    median_jct_s: spread(&|r| r.median_jct_s),
                    p95_jct_s: spread(&|r| r.p95_jct_s),
                    makespan_s: spread(&|r| r.makespan_s),
                    jain_60s_mean: spread(&|r| r.jain_60s_mean),
                    cpu_utilization: spread(&|r| r.utilization.get("cpus").copied().unwrap_or(0.0)),
                    mean_jobs_in_system: spread(&|r| r.mean_jobs_in_system),
                    avg_jct_speedup,
                    jain_60s_mean_ratio,
                }
            })
            .collect();
        let speed = SimSpeed::total(reports.iter().flatten().map(|r| &r.speed));
        Ok(SeedStudy {
            scenario: first[0].scenario.clone(),
            seeds,
            baseline: baseline.map(str::to_string),
            policies,
            speed,
            reports,
        })
    }

    /// The figures of policy `name`.
    pub fn policy(&self, name: &str) -> Option<&PolicySeeds> {
        self.policies.iter().find(|p| p.policy == name)
    }

    /// Per seed, `baseline`'s average JCT over `policy`'s, aggregated: the speedup against any
    /// policy of the study, not only its baseline. `None` when either was not run.
    pub fn gain_over(&self, policy: &str, baseline: &str) -> Option<Spread> {
        let p = self.policy(policy)?;
        let b = self.policy(baseline)?;
        Some(Spread::of(
            b.avg_jct_s
                .values
                .iter()
                .zip(&p.avg_jct_s.values)
                .map(|(&base, &this)| crate::report::ratio(base, this))
                .collect(),
        ))
    }
}

/// `count` consecutive seeds from `first`: `first, first + 1, …` (what `--seed S --seeds N`
/// runs). Fails for no seeds, more than [`MAX_SEEDS`], or seeds beyond `u64::MAX`.
pub fn consecutive_seeds(first: u64, count: usize) -> Result<Vec<u64>, SimError> {
    if count == 0 || count > MAX_SEEDS {
        return Err(SimError::InvalidConfig {
            reason: format!("{count} seeds: a study takes 1 to {MAX_SEEDS}"),
        });
    }
    (0..count as u64)
        .map(|k| {
            first.checked_add(k).ok_or_else(|| SimError::InvalidConfig {
                reason: format!("{count} seeds from {first} go beyond {}", u64::MAX),
            })
        })
        .collect()
}

pub(crate) fn check_seeds(seeds: &[u64]) -> Result<(), SimError> {
    if seeds.is_empty() || seeds.len() > MAX_SEEDS {
        return Err(SimError::InvalidConfig {
            reason: format!("{} seeds: a study takes 1 to {MAX_SEEDS}", seeds.len()),
        });
    }
    for (i, seed) in seeds.iter().enumerate() {
        if seeds[..i].contains(seed) {
            return Err(SimError::InvalidConfig {
                reason: format!("seed {seed} is given twice (it would count twice)"),
            });
        }
    }
    Ok(())
}

/// Runs [`crate::compare`] once per seed of `seeds` (the scenario of `config` with
/// [`SimConfig::seed`] set to each: other arrivals, another job sample with
/// `--job-order random`, other altruism draws) and aggregates the reports per policy (see
/// [`SeedStudy::from_reports`]). Seeds run one after the other, each comparison's policies in
/// parallel; Graphene's plans are computed once for the jobs of all seeds. `progress` hears a
/// [`Progress::Comparison`] before each seed's runs.
pub fn compare_seeds<S: Into<Scheduling> + Clone>(
    file_jobs: &[Job],
    config: &SimConfig,
    seeds: &[u64],
    policies: &[S],
    baseline: Option<S>,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SeedStudy, SimError> {
    check_seeds(seeds)?;
    let (kinds, baseline) = comparison_kinds(policies, baseline)?;
    run_seeds(
        file_jobs,
        config,
        seeds,
        &kinds,
        baseline.as_deref(),
        progress,
        (0, seeds.len()),
    )
}

/// [`compare_seeds`], numbering its comparisons from `offset.0 + 1` out of `offset.1`.
fn run_seeds(
    file_jobs: &[Job],
    config: &SimConfig,
    seeds: &[u64],
    kinds: &[Scheduling],
    baseline: Option<&str>,
    progress: Option<&ProgressFn<'_>>,
    (before, total): (usize, usize),
) -> Result<SeedStudy, SimError> {
    let configs: Vec<SimConfig> = seeds
        .iter()
        .map(|&seed| SimConfig {
            seed,
            ..config.clone()
        })
        .collect();
    let jobs: Vec<Vec<SimJob>> = configs
        .iter()
        .map(|c| prepare_jobs(file_jobs, c))
        .collect::<Result<_, _>>()?;
    let plans = if kinds.iter().any(Scheduling::needs_pri_scores) {
        plan_sources(file_jobs, &jobs.concat(), config, progress)?
    } else {
        PlanSet::default()
    };
    let mut reports = Vec::with_capacity(seeds.len());
    for (k, (config, jobs)) in configs.iter().zip(&jobs).enumerate() {
        if let Some(progress) = progress {
            progress(&Progress::Comparison {
                started: before + k + 1,
                total,
                seed: config.seed,
                machines: config.machines,
            });
        }
        reports.push(compare_prepared(
            file_jobs,
            jobs,
            config,
            kinds,
            baseline,
            plans.plans(),
            progress,
        )?);
    }
    SeedStudy::from_reports(seeds.to_vec(), reports, baseline)
}

/// `1–5` for consecutive seeds, `1, 4, 9` otherwise.
pub fn seeds_label(seeds: &[u64]) -> String {
    let consecutive = seeds.windows(2).all(|w| w[0].checked_add(1) == Some(w[1]));
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if consecutive && seeds.len() > 1 => format!("{a}–{b}"),
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn seconds(x: f64) -> String {
    format!("{x:.1}")
}

fn times(x: f64) -> String {
    format!("{x:.2}")
}

fn index(x: f64) -> String {
    format!("{x:.3}")
}

fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Renders a study as a text table, one row per policy, each cell `mean (min–max)` over the
/// seeds: average, median and p95 JCT, the per-seed average-JCT speedup and Jain's 60 s ratio
/// to the baseline (when there is one), CPU utilisation and the mean number of jobs in the
/// system. A line above names the cluster and the scenario; lines under explain the cells and
/// give the simulator's speed.
pub fn render_seed_table(study: &SeedStudy) -> String {
    let base = study.baseline.as_deref();
    let mut header = vec![
        "policy".to_string(),
        "avg JCT s".into(),
        "median s".into(),
        "p95 s".into(),
    ];
    if let Some(b) = base {
        header.push(format!("avg ×{b}"));
        header.push(format!("Jain60 /{b}"));
    }
    header.push("cpu util".into());
    header.push("jobs in sys".into());
    let mut rows = vec![header];
    for p in &study.policies {
        let mut row = vec![
            p.policy.clone(),
            p.avg_jct_s.cell(seconds),
            p.median_jct_s.cell(seconds),
            p.p95_jct_s.cell(seconds),
        ];
        if base.is_some() {
            let ratio = |s: &Option<Spread>, f: fn(f64) -> String| {
                s.as_ref().map_or_else(|| "-".to_string(), |s| s.cell(f))
            };
            row.push(ratio(&p.avg_jct_speedup, times));
            row.push(ratio(&p.jain_60s_mean_ratio, index));
        }
        row.push(p.cpu_utilization.cell(percent));
        row.push(p.mean_jobs_in_system.cell(times));
        rows.push(row);
    }
    let s = &study.scenario;
    let mut out = format!(
        "{}; {}; seeds {}\n",
        s.cluster(),
        s.workload_line(),
        seeds_label(&study.seeds)
    );
    out.push_str(&aligned(&rows));
    let _ = write!(
        out,
        "cells: mean (min–max) over {} seed(s); standard deviations in --json.",
        study.seeds.len()
    );
    if let Some(b) = base {
        let _ = write!(
            out,
            " avg ×{b}: {b}'s average JCT over the policy's on the same seed (above 1: faster); Jain60 /{b}: the policy's 60 s Jain index over {b}'s on the same seed."
        );
    }
    out.push('\n');
    let runs = study.reports.iter().map(Vec::len).sum();
    if study.speed.wall_s > 0.0 {
        let _ = writeln!(out, "{}", study.speed.summary_line(runs));
    }
    out
}

/// The multi-seed comparison at several cluster sizes (the `--json` output of
/// `fullerene sim --sweep-machines`): fewer machines, more load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadSweep {
    /// One machine's capacity, in `--machine-resources` syntax.
    pub machine: String,
    /// The seeds every point ran.
    pub seeds: Vec<u64>,
    /// The baseline's policy name, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// One study per machine count, in the order given.
    pub points: Vec<SeedStudy>,
}

impl LoadSweep {
    /// The machine counts, in the points' order.
    pub fn machine_counts(&self) -> Vec<usize> {
        self.points.iter().map(|p| p.scenario.machines).collect()
    }
}

/// Runs [`compare_seeds`] on `config` with [`SimConfig::machines`] set to each of
/// `machine_counts` in turn (each count's Graphene plans are computed for its cluster).
/// Fails, naming the value, on a count of 0 or a count given twice.
pub fn sweep_machines<S: Into<Scheduling> + Clone>(
    file_jobs: &[Job],
    config: &SimConfig,
    machine_counts: &[usize],
    seeds: &[u64],
    policies: &[S],
    baseline: Option<S>,
    progress: Option<&ProgressFn<'_>>,
) -> Result<LoadSweep, SimError> {
    if machine_counts.is_empty() {
        return Err(SimError::InvalidConfig {
            reason: "the load sweep names no machine count".into(),
        });
    }
    for (i, &m) in machine_counts.iter().enumerate() {
        if m == 0 {
            return Err(SimError::InvalidConfig {
                reason: "machine count 0 in the load sweep: each must be at least 1".into(),
            });
        }
        if machine_counts[..i].contains(&m) {
            return Err(SimError::InvalidConfig {
                reason: format!("machine count {m} is given twice in the load sweep"),
            });
        }
    }
    check_seeds(seeds)?;
    let (kinds, baseline) = comparison_kinds(policies, baseline)?;
    let total = machine_counts.len() * seeds.len();
    let mut points = Vec::with_capacity(machine_counts.len());
    for (i, &machines) in machine_counts.iter().enumerate() {
        let config = SimConfig {
            machines,
            ..config.clone()
        };
        points.push(run_seeds(
            file_jobs,
            &config,
            seeds,
            &kinds,
            baseline.as_deref(),
            progress,
            (i * seeds.len(), total),
        )?);
    }
    Ok(LoadSweep {
        machine: config.machine.to_string(),
        seeds: seeds.to_vec(),
        baseline,
        points,
    })
}

/// Renders a sweep: one [`render_seed_table`] per machine count, then, with a baseline, a
/// summary of each policy's average-JCT speedup over it against the load (the baseline's mean
/// CPU utilisation) at each count.
pub fn render_sweep(sweep: &LoadSweep) -> String {
    let mut out = String::new();
    for point in &sweep.points {
        out.push_str(&render_seed_table(point));
        out.push('\n');
    }
    let Some(base) = sweep.baseline.as_deref() else {
        return out;
    };
    let mut header = vec!["policy".to_string()];
    for point in &sweep.points {
        let load = point
            .policy(base)
            .map_or_else(|| "-".to_string(), |b| percent(b.cpu_utilization.mean));
        header.push(format!("{} m ({load} cpu)", point.scenario.machines));
    }
    let mut rows = vec![header];
    let names: Vec<&str> = sweep
        .points
        .first()
        .map(|p| p.policies.iter().map(|q| q.policy.as_str()).collect())
        .unwrap_or_default();
    for name in names.into_iter().filter(|n| *n != base) {
        let mut row = vec![name.to_string()];
        for point in &sweep.points {
            row.push(
                point
                    .gain_over(name, base)
                    .map_or_else(|| "-".to_string(), |g| g.cell(times)),
            );
        }
        rows.push(row);
    }
    let _ = writeln!(
        out,
        "average-JCT speedup over {base} against the load (machines, {base}'s mean CPU utilisation); mean (min–max) over seeds {}:",
        seeds_label(&sweep.seeds)
    );
    out.push_str(&aligned(&rows));
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn spreads_summarise_values_exactly() {
        let s = Spread::of(vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!((s.mean, s.min, s.max), (5.0, 2.0, 9.0));
        // Σ (x − 5)² = 32; sample variance 32 / 7.
        assert!((s.std_dev - (32.0_f64 / 7.0).sqrt()).abs() < 1e-12, "{s:?}");
        assert_eq!(s.values.len(), 8);
        let one = Spread::of(vec![3.5]);
        assert_eq!(
            (one.mean, one.std_dev, one.min, one.max),
            (3.5, 0.0, 3.5, 3.5)
        );
        assert_eq!(Spread::of(vec![]), Spread::default());
        let huge = Spread::of(vec![f64::MAX, f64::MAX]);
        assert_eq!(huge.mean, f64::MAX);
        assert_eq!(one.cell(|x| format!("{x:.1}")), "3.5 (3.5–3.5)");
    }

    #[test]
    fn seeds_are_consecutive_and_bounded() {
        assert_eq!(consecutive_seeds(7, 3).unwrap(), vec![7, 8, 9]);
        assert!(consecutive_seeds(1, 0).is_err());
        assert!(consecutive_seeds(1, MAX_SEEDS + 1).is_err());
        assert!(consecutive_seeds(u64::MAX, 2).is_err());
        assert_eq!(consecutive_seeds(u64::MAX, 1).unwrap(), vec![u64::MAX]);
        assert!(check_seeds(&[1, 2, 1]).is_err());
        assert_eq!(seeds_label(&[1, 2, 3]), "1–3");
        assert_eq!(seeds_label(&[4]), "4");
        assert_eq!(seeds_label(&[1, 3]), "1, 3");
    }

    fn report(policy: &str, seed: u64, avg: f64, jain: f64, cpu: f64) -> SimReport {
        let mut report = crate::report::test_report(policy, avg, jain);
        report.scenario = Scenario {
            machines: 3,
            machine: "cpus=16".into(),
            arrivals: "poisson:25".into(),
            jobs: 10,
            job_order: "random".into(),
            groups: 2,
            seed,
        };
        report.median_jct_s = avg / 2.0;
        report.makespan_s = 100.0;
        report.utilization = BTreeMap::from([("cpus".to_string(), cpu)]);
        report.speed = SimSpeed::new(1.0, 10, 100, 300);
        report
    }

    /// Two seeds: the speedup is averaged per seed (100/50 = 2 and 300/300 = 1 give 1.5), not
    /// taken as a ratio of means (200/175).
    fn two_seeds() -> SeedStudy {
        let reports = vec![
            vec![
                report("sjf", 1, 50.0, 0.9, 0.8),
                report("drf", 1, 100.0, 1.0, 0.7),
            ],
            vec![
                report("sjf", 2, 300.0, 0.8, 0.6),
                report("drf", 2, 300.0, 0.5, 0.5),
            ],
        ];
        SeedStudy::from_reports(vec![1, 2], reports, Some("drf")).unwrap()
    }

    #[test]
    fn ratios_are_taken_per_seed_then_aggregated() {
        let study = two_seeds();
        let sjf = study.policy("sjf").unwrap();
        let speedup = sjf.avg_jct_speedup.as_ref().unwrap();
        assert_eq!(speedup.values, vec![2.0, 1.0]);
        assert_eq!((speedup.mean, speedup.min, speedup.max), (1.5, 1.0, 2.0));
        assert!((speedup.std_dev - 0.5_f64.sqrt()).abs() < 1e-12);
        let jain = sjf.jain_60s_mean_ratio.as_ref().unwrap();
        assert_eq!(jain.values, vec![0.9, 1.6]);
        assert_eq!(sjf.avg_jct_s.mean, 175.0);
        assert_eq!(sjf.median_jct_s.values, vec![25.0, 150.0]);
        assert_eq!(sjf.p95_jct_s.max, 600.0);
        assert_eq!(sjf.cpu_utilization.values, vec![0.8, 0.6]);
        assert_eq!(sjf.mean_jobs_in_system.mean, 17.5);
        let drf = study.policy("drf").unwrap();
        assert_eq!(drf.avg_jct_speedup.as_ref().unwrap().values, vec![1.0, 1.0]);
        assert_eq!(study.gain_over("sjf", "drf"), sjf.avg_jct_speedup.clone());
        assert_eq!(
            study.gain_over("drf", "sjf").unwrap().values,
            vec![0.5, 1.0]
        );
        assert!(study.gain_over("fifo", "drf").is_none());
        assert_eq!((study.speed.jobs, study.speed.tasks), (40, 400));
        assert_eq!(study.scenario.seed, 1);

        let json = serde_json::to_value(&study).unwrap();
        assert!(json.get("reports").is_none());
        let back: SeedStudy = serde_json::from_value(json).unwrap();
        assert_eq!(back.policies, study.policies);
        assert!(back.reports.is_empty());
    }

    #[test]
    fn aggregation_rejects_mismatched_inputs() {
        let a = vec![vec![report("sjf", 1, 1.0, 1.0, 1.0)]];
        assert!(SeedStudy::from_reports(vec![1, 2], a.clone(), None).is_err());
        assert!(SeedStudy::from_reports(vec![1], a.clone(), Some("drf")).is_err());
        let mixed = vec![
            vec![report("sjf", 1, 1.0, 1.0, 1.0)],
            vec![report("drf", 2, 1.0, 1.0, 1.0)],
        ];
        assert!(SeedStudy::from_reports(vec![1, 2], mixed, None).is_err());
        let plain = SeedStudy::from_reports(vec![1], a, None).unwrap();
        assert!(plain.policies[0].avg_jct_speedup.is_none());
        let table = render_seed_table(&plain);
        assert!(
            !table.contains("avg ×") && !table.contains("Jain60 /"),
            "{table}"
        );
    }

    #[test]
    fn the_seed_table_shows_mean_and_range() {
        let table = render_seed_table(&two_seeds());
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("3 machines × cpus=16; 10 jobs (random order), arrivals poisson:25, 2 groups; seeds 1–2"), "{table}");
        assert!(lines[1].starts_with("policy"));
        assert!(lines[1].contains("avg ×drf") && lines[1].contains("jobs in sys"));
        assert!(lines[3].starts_with("sjf"));
        for cell in [
            "175.0 (50.0–300.0)",
            "1.50 (1.00–2.00)",
            "70.0% (60.0%–80.0%)",
            "17.50 (5.00–30.00)",
        ] {
            assert!(lines[3].contains(cell), "{cell} missing: {table}");
        }
        assert_eq!(
            lines[3].chars().count(),
            lines[4].chars().count(),
            "{table}"
        );
        assert!(table.contains("over 2 seed(s)"));
        assert!(table
            .lines()
            .last()
            .unwrap()
            .starts_with("simulator speed: 4 run(s)"));
    }
}
