//! `fullerene learn`: Decima's multi-job setting (issue 18). `eval` runs the session policies
//! on job sequences drawn from a workload, in Decima's batch or streaming setting, and prints
//! each policy's average JCT with its reduction against every other.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand, ValueEnum};
use fullerene_sdk::read_workload;
use fullerene_sdk::session::SessionPolicyKind;
use fullerene_sim::session::{
    compare_sessions, mean_gap_for_load, SessionComparison, SessionEnv, SessionSetting,
    DECIMA_BATCH_JOBS, DECIMA_EXECUTORS, DECIMA_MOVING_DELAY_S, DECIMA_STREAM_LOAD,
    DEFAULT_STREAM_JOBS,
};

use crate::commands::resolve_workload;
use crate::output::{table, JsonOutput};

/// `fullerene learn` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum LearnCommand {
    /// Compare the multi-job session policies on job sequences not used in training (seeds
    /// from `--first-seed`), in Decima's batch or streaming setting: average JCT per policy
    /// and the reduction of each against every other.
    ///
    /// Example: `fullerene learn eval --setting batch --seeds 20`.
    Eval(EvalArgs),
}

/// How jobs arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Setting {
    /// Decima's batch: `--jobs` (10) random jobs, all at time 0.
    Batch,
    /// Continuous Poisson arrivals at `--load` (85%: Decima's high load), or `--mean-gap-s`
    /// apart on average.
    Poisson,
}

/// Flags of `fullerene learn eval`.
#[derive(Args, Debug)]
pub(crate) struct EvalArgs {
    /// Workload file (JSON Lines, `shared/workloads/FORMAT.md`). Default: the shared TPC-H file.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Batch (all jobs at 0) or Poisson arrivals.
    #[arg(long, value_enum, default_value_t = Setting::Batch)]
    setting: Setting,
    /// Executors: task slots, one task each.
    #[arg(long, value_name = "N", default_value_t = DECIMA_EXECUTORS,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize))]
    executors: usize,
    /// Jobs per episode (default: 10 in batch, 100 with Poisson arrivals).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize))]
    jobs: Option<usize>,
    /// Poisson arrivals: the share of the executors' time the jobs' tasks take, on average
    /// (sets the mean gap from the workload's mean job).
    #[arg(long, value_name = "FRACTION", default_value_t = DECIMA_STREAM_LOAD,
          value_parser = positive_fraction, conflicts_with = "mean_gap_s")]
    load: f64,
    /// Poisson arrivals: the mean gap, seconds (instead of `--load`).
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    mean_gap_s: Option<f64>,
    /// Seconds an executor takes to move to another job (Decima's simulator: 2).
    #[arg(long, value_name = "SECONDS", default_value_t = DECIMA_MOVING_DELAY_S,
          value_parser = non_negative_seconds)]
    moving_delay_s: f64,
    /// Episodes (job sequences), one seed each.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as u64))]
    seeds: u64,
    /// The first episode's seed. Training draws its sequences below this, so the default
    /// evaluates on sequences it never saw.
    #[arg(long, value_name = "SEED", default_value_t = EVAL_FIRST_SEED)]
    first_seed: u64,
    /// The policies to compare, comma-separated.
    #[arg(long, value_name = "NAMES", value_delimiter = ',',
          default_values_t = SessionPolicyKind::ALL.map(|k| k.name().to_string()))]
    policies: Vec<String>,
}

/// The first seed of evaluation episodes: training's seeds stay below it.
pub(crate) const EVAL_FIRST_SEED: u64 = 1_000_000;

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("`{text}` is not a number of seconds > 0")),
    }
}

fn positive_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("`{text}` is not a fraction in (0, 1]")),
    }
}

fn non_negative_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!("`{text}` is not a number of seconds >= 0")),
    }
}

pub(crate) fn run(cmd: LearnCommand, json: &JsonOutput) -> Result<()> {
    match cmd {
        LearnCommand::Eval(args) => eval(args, json),
    }
}

fn eval(args: EvalArgs, json: &JsonOutput) -> Result<()> {
    let kinds = args
        .policies
        .iter()
        .map(|name| name.parse::<SessionPolicyKind>())
        .collect::<Result<Vec<_>, _>>()?;
    let workload = resolve_workload(args.workload)?;
    let jobs = read_workload(&workload)?;
    let setting = match args.setting {
        Setting::Batch => SessionSetting::Batch {
            jobs: args.jobs.unwrap_or(DECIMA_BATCH_JOBS),
        },
        Setting::Poisson => SessionSetting::Poisson {
            jobs: args.jobs.unwrap_or(DEFAULT_STREAM_JOBS),
            mean_gap_s: match args.mean_gap_s {
                Some(gap) => gap,
                None => mean_gap_for_load(&jobs, args.executors, args.load)?,
            },
        },
    };
    let env = SessionEnv {
        executors: args.executors,
        moving_delay_s: args.moving_delay_s,
        setting,
    };
    let seeds: Vec<u64> = (0..args.seeds)
        .map(|i| args.first_seed.saturating_add(i))
        .collect();
    let comparison = compare_sessions(&jobs, &env, &kinds, &seeds)
        .with_context(|| format!("evaluating on {}", workload.display()))?;
    json.emit(&comparison, || render(&comparison))
}

/// The policies' average JCT, and each one's reduction against every other
/// (`1 − mine / theirs`: positive when it is faster).
fn render(comparison: &SessionComparison) -> String {
    let env = &comparison.env;
    let setting = match env.setting {
        SessionSetting::Batch { jobs } => format!("batch of {jobs} jobs"),
        SessionSetting::Poisson { jobs, mean_gap_s } => {
            format!("{jobs} jobs, Poisson arrivals {mean_gap_s:.1} s apart")
        }
    };
    let mut header = vec![
        "policy".to_string(),
        "avg JCT (s)".to_string(),
        "decisions".to_string(),
        "utilisation".to_string(),
    ];
    header.extend(
        comparison
            .results
            .iter()
            .map(|r| format!("vs {}", r.policy)),
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&header);
    for r in &comparison.results {
        let mut row = vec![
            r.policy.clone(),
            format!("{:.1}", r.average_jct_s),
            format!("{:.0}", r.decisions),
            format!("{:.0}%", 100.0 * r.utilisation),
        ];
        row.extend(comparison.results.iter().map(|other| {
            if other.policy == r.policy {
                "—".to_string()
            } else {
                format!(
                    "{:+.1}%",
                    100.0 * (1.0 - r.average_jct_s / other.average_jct_s)
                )
            }
        }));
        t.add_row(row);
    }
    format!(
        "{setting}, {} executors, moving delay {} s, {} episodes (seeds {}..{})\n{t}\n\
         vs X: the reduction of average JCT against X (positive: faster)",
        env.executors,
        env.moving_delay_s,
        comparison.seeds.len(),
        comparison.seeds.first().copied().unwrap_or(0),
        comparison.seeds.last().copied().unwrap_or(0),
    )
}
