//! `fullerene sim`: run workloads through the real allocator and policies in virtual time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;
use fullerene_proto::ResourceVec;
use fullerene_sdk::read_workload;
use fullerene_sim::{
    compare, compare_seeds, compare_sla, compare_sla_seeds, consecutive_seeds, parse_name_list,
    parse_sla_policy_list, plot_gain_vs_load, plot_jct_cdf, plot_seed_jct_cdf, plot_utilization,
    render_seed_table, render_sla_study_table, render_sla_table, render_sweep, render_table,
    sweep_machines, workload_name, ArrivalSpec, JobOrder, Progress, RuleVariant, Scheduling,
    SessionScheduling, SimConfig, SlaOptions,
};
use indicatif::ProgressBar;

use crate::commands::learn::decima_policies;
use crate::commands::plan::progress_bar;
use crate::commands::{
    parse_fraction, parse_fraction_of_cluster, parse_slack, resolve_workload, ModelArg,
    PolicyChoice,
};
use crate::output::JsonOutput;

/// Flags of `fullerene sim`.
#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Workload file (JSON Lines, `shared/workloads/FORMAT.md`). Default: the shared TPC-H file.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    workload: Option<PathBuf>,
    /// The policy to run: graphene+carbyne, graphene, carbyne, drf, tetris, cp, bfs, fifo, sjf
    /// (each job its own framework with that intra-job policy); or decima, Decima's learned
    /// policy over all jobs run as one session framework (`--model`).
    #[arg(
        long,
        short,
        value_name = "POLICY",
        default_value = "graphene+carbyne",
        conflicts_with = "compare"
    )]
    policy: String,
    /// Several policies, comma-separated, run on identical arrivals (decima among them).
    #[arg(long, value_name = "LIST")]
    compare: Option<String>,
    /// Report every policy's ratios to this one (run too if not in --compare).
    #[arg(long, value_name = "NAME")]
    baseline: Option<String>,
    /// Number of machines.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    machines: u32,
    /// Capacity of each machine.
    #[arg(long, value_name = "KIND=AMOUNT,...", default_value = fullerene_sim::REFERENCE_MACHINE)]
    machine_resources: ResourceVec,
    /// Job arrivals: `zero` (all at 0), `poisson:MEAN_GAP_S`, or `trace` (the file's arrival_s).
    #[arg(long, value_name = "SPEC", default_value = "poisson:25")]
    arrivals: ArrivalSpec,
    /// Number of jobs: the first N in --job-order, going through the file again when N is
    /// larger. Default: all.
    #[arg(long, short, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    jobs: Option<u32>,
    /// Which jobs --jobs takes: `file` (the file's first N) or `random` (N drawn without
    /// replacement by a permutation seeded with --seed, a representative mix of a sorted file).
    #[arg(long, value_name = "ORDER", default_value = "file")]
    job_order: JobOrder,
    /// Spread the jobs of group `default` round-robin over K groups `g0..g{K-1}`.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    groups: Option<u32>,
    /// Seed of every random choice.
    #[arg(long, short, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Run the comparison on N seeds, --seed, --seed+1, …, --seed+N-1 (each draws other
    /// arrivals, another job sample with --job-order random and other Carbyne draws, as --seed
    /// does), and print per policy the mean (min–max) over the seeds of the JCTs, the speedup
    /// and Jain ratio to --baseline (taken per seed), CPU utilisation and jobs in the system;
    /// --json writes that aggregate, with standard deviations. 1: one comparison, as without
    /// the flag.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    seeds: u32,
    /// Run the comparison (over --seeds) at each of these machine counts, comma-separated, e.g.
    /// `2,3,4,6` (fewer machines, more load), instead of on --machines: one seed table per
    /// count, then each policy's speedup over --baseline against the load. With --plot, one
    /// CDF per count (FILE-<N>machines.svg).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        conflicts_with = "machines",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    sweep_machines: Option<Vec<u32>>,
    /// Draw each policy's average-JCT speedup over --baseline against the load of each
    /// --sweep-machines count (the baseline's mean CPU utilisation), with min–max bars over the
    /// seeds, to this SVG file.
    #[arg(long, value_name = "FILE.svg", requires_all = ["sweep_machines", "baseline"])]
    plot_gain: Option<PathBuf>,
    /// κ of the deficit counters: only the most deprived group is served while its deficit is
    /// at least κ·C (Graphene §5).
    #[arg(long, value_name = "FRACTION", default_value_t = SimConfig::default().kappa)]
    kappa: f64,
    /// Virtual seconds between allocation cycles (0: after every batch of events).
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    offer_interval_secs: f64,
    /// Draw the JCT CDFs of every policy to this SVG file (with --seeds, the JCTs of all seeds
    /// pooled).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Draw each policy's utilisation over time to FILE-<policy>.svg (with --seeds, of the
    /// first seed's runs).
    #[arg(long, value_name = "FILE.svg", conflicts_with = "sweep_machines")]
    plot_utilization: Option<PathBuf>,
    /// Variants of the scheduler's rules, comma-separated, to measure what each choice is worth:
    /// the rules it followed before it followed the papers, whole-agent (one framework per agent
    /// per cycle), eta-chosen (η from chosen candidates only), equal-share (Carbyne's A_k an
    /// equal split), srtf-only (a leftover to one framework), reoffer-tick (1 s re-offers
    /// instead of due times), remote-penalty (0.8); and pri-within-job (priScores scaled so
    /// each job's best runnable task scores 1, instead of the paper's rank in the whole DAG).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    variant: Vec<RuleVariant>,
    /// Give this fraction of the jobs a deadline (Rayon §6: 5–10%), their NewLB lower bound
    /// times 1 + --deadline-slack after their arrival, and compare reservation policies on
    /// them: `--compare rayon-gree,rayon-gree-l,capacity` (Rayon's planner with GREE or GREE-L
    /// and its plan follower, against a capacity-scheduler queue for production tuned over
    /// fixed shares). Prints per policy the SLA jobs accepted, the accepted ones that met their
    /// deadline, best-effort JCT, utilisation and preemptions; every job runs the critical-path
    /// policy. With --seeds N, the same summed over the seeds, the capacity baseline both with
    /// its share tuned seed by seed and at the one share that meets the most deadlines over
    /// all of them (what an operator can set).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction, conflicts_with_all = ["sweep_machines", "baseline", "plot", "plot_utilization", "policy"])]
    deadlines: Option<f64>,
    /// With --deadlines: the slack of each deadline over the job's lower bound.
    #[arg(long, value_name = "FRACTION", value_parser = parse_slack, requires = "deadlines")]
    deadline_slack: Option<f64>,
    /// With --deadlines: the production shares the capacity baseline is run at, comma-separated
    /// fractions of the cluster in (0, 1]; the one that meets the most deadlines (then the lowest
    /// best-effort mean JCT) is its row, and the whole sweep is printed beneath the table
    /// [default: 0.1,0.3,0.5,0.7,0.9,1]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_fraction_of_cluster, requires = "deadlines")]
    capacity_shares: Vec<f64>,
    #[command(flatten)]
    model: ModelArg,
}

/// The runs the policy names stand for: each intra-job policy as it is, `decima` as a session
/// of Decima's model (`--model`, or the built-in one). Also returns the count of decisions the
/// model failed to compute, when decima is among them.
fn schedulings(
    choices: &[PolicyChoice],
    model: &ModelArg,
) -> Result<(Vec<Scheduling>, Option<Arc<AtomicU64>>)> {
    let mut failures = None;
    let mut decima = None;
    let mut out = Vec::with_capacity(choices.len());
    for choice in choices {
        out.push(match *choice {
            PolicyChoice::Job(kind) => Scheduling::PerJob(kind),
            PolicyChoice::Decima => {
                if decima.is_none() {
                    let (factory, counter) =
                        decima_policies(model.model.as_deref(), model.choice())?;
                    failures = Some(counter);
                    decima = Some(SessionScheduling::new(factory));
                }
                Scheduling::Session(decima.clone().context("decima's session")?)
            }
        });
    }
    Ok((out, failures))
}

/// The simulated cluster and workload the flags describe.
fn scenario(args: &SimArgs) -> SimConfig {
    let mut config = SimConfig {
        machines: args.machines as usize,
        machine: args.machine_resources,
        arrivals: args.arrivals,
        jobs: args.jobs.map(|n| n as usize),
        job_order: args.job_order,
        groups: args.groups.map(|k| k as usize),
        seed: args.seed,
        offer_interval_s: args.offer_interval_secs,
        kappa: args.kappa,
        ..SimConfig::default()
    };
    for rule in &args.variant {
        rule.apply(&mut config);
    }
    config
}

/// `fullerene sim --deadlines`: SLA jobs under reservations (Rayon §6). Decima is refused:
/// its session, one framework for every job, has no per-job reservations or queues (clap
/// already refuses `--policy` with `--deadlines`; this is decima in `--compare`).
fn run_deadlines(args: SimArgs, json: &JsonOutput) -> Result<()> {
    let list = args
        .compare
        .as_deref()
        .unwrap_or("rayon-gree,rayon-gree-l,capacity");
    if list
        .split(',')
        .any(|name| name.trim() == PolicyChoice::DECIMA)
    {
        bail!(
            "--deadlines cannot run decima (in --compare): its one session framework for every \
             job has no reservations or SLA queues; --deadlines compares rayon-gree, \
             rayon-gree-l and capacity; drop decima, or drop --deadlines to compare decima"
        );
    }
    args.model.check_used(false)?;
    let policies = parse_sla_policy_list(list)?;
    let workload = resolve_workload(args.workload.clone())?;
    let jobs = read_workload(&workload)?;
    let config = scenario(&args);
    let mut options = SlaOptions::default();
    options.fraction = args.deadlines.unwrap_or(options.fraction);
    options.slack = args.deadline_slack.unwrap_or(options.slack);
    if !args.capacity_shares.is_empty() {
        options.capacity_shares = args.capacity_shares.clone();
    }
    let bar = progress_bar(0);
    let tracker = ProgressTracker::new(&bar);
    let progress = |p: &Progress| tracker.update(p);
    if args.seeds > 1 {
        let seeds = consecutive_seeds(args.seed, args.seeds as usize)?;
        let study = compare_sla_seeds(&jobs, &config, &policies, &options, &seeds, Some(&progress))
            .with_context(|| format!("simulating {}", workload.display()))?;
        bar.finish_and_clear();
        return json.emit(&study, || render_sla_study_table(&study));
    }
    let comparison = compare_sla(&jobs, &config, &policies, &options, Some(&progress))
        .with_context(|| format!("simulating {}", workload.display()))?;
    bar.finish_and_clear();
    json.emit(&comparison, || render_sla_table(&comparison))
}

/// Runs `fullerene sim`.
pub(crate) fn run(args: SimArgs, json: &JsonOutput) -> Result<()> {
    if args.deadlines.is_some() {
        return run_deadlines(args, json);
    }
    let mut choices: Vec<PolicyChoice> = match &args.compare {
        Some(list) => parse_name_list(list).context("invalid --compare")?,
        None => vec![PolicyChoice::parse(&args.policy)?],
    };
    if choices.is_empty() {
        bail!("--compare names no policy");
    }
    let baseline: Option<PolicyChoice> = args
        .baseline
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("invalid --baseline")?;
    // The baseline goes through the same conversion, as the list's last entry.
    choices.extend(baseline);
    args.model
        .check_used(choices.contains(&PolicyChoice::Decima))?;
    let (mut policies, failures) = schedulings(&choices, &args.model)?;
    let baseline = match baseline {
        Some(_) => policies.pop(),
        None => None,
    };
    if !(args.kappa.is_finite() && args.kappa >= 0.0) {
        bail!("--kappa must be a finite number >= 0, not {}", args.kappa);
    }
    if !(args.offer_interval_secs.is_finite() && args.offer_interval_secs >= 0.0) {
        bail!("--offer-interval-secs must be a finite number of seconds >= 0");
    }
    let workload = resolve_workload(args.workload.clone())?;
    let jobs = read_workload(&workload)?;
    let config = scenario(&args);

    let seeds = consecutive_seeds(args.seed, args.seeds as usize)?;
    let label = workload_name(&workload);
    let baseline_name = baseline.as_ref().map(Scheduling::name);
    // Decima's figures are the model's only if it computed every decision.
    let check_model = || match failures.as_ref().map(|f| f.load(Ordering::Relaxed)) {
        Some(failed) if failed > 0 => bail!(
            "the Decima model failed to compute {failed} decision(s) (each fell back to the \
             first candidate): decima's figures would not be its own"
        ),
        _ => Ok(()),
    };

    let bar = progress_bar(0);
    let tracker = ProgressTracker::new(&bar);
    let progress = |p: &Progress| tracker.update(p);

    if let Some(counts) = &args.sweep_machines {
        let counts: Vec<usize> = counts.iter().map(|&m| m as usize).collect();
        let sweep = sweep_machines(
            &jobs,
            &config,
            &counts,
            &seeds,
            &policies,
            baseline.clone(),
            Some(&progress),
        )
        .with_context(|| format!("simulating {}", workload.display()))?;
        bar.finish_and_clear();
        check_model()?;
        if let Some(path) = &args.plot {
            for point in &sweep.points {
                let file = suffixed(path, &format!("{}machines", point.scenario.machines));
                plot_seed_jct_cdf(point, &label, &file)?;
                eprintln!("wrote {}", file.display());
            }
        }
        if let Some(path) = &args.plot_gain {
            let Some(base) = baseline_name else {
                bail!("--plot-gain needs --baseline");
            };
            plot_gain_vs_load(&sweep, base, &label, path)?;
            eprintln!("wrote {}", path.display());
        }
        return json.emit(&sweep, || render_sweep(&sweep));
    }

    if seeds.len() > 1 {
        let study = compare_seeds(
            &jobs,
            &config,
            &seeds,
            &policies,
            baseline.clone(),
            Some(&progress),
        )
        .with_context(|| format!("simulating {}", workload.display()))?;
        bar.finish_and_clear();
        check_model()?;
        if let Some(path) = &args.plot {
            plot_seed_jct_cdf(&study, &label, path)?;
            eprintln!("wrote {}", path.display());
        }
        if let (Some(path), Some(first)) = (&args.plot_utilization, study.reports.first()) {
            for report in first {
                let file = suffixed(path, &report.policy);
                plot_utilization(report, &label, &file)?;
                eprintln!("wrote {}", file.display());
            }
        }
        return json.emit(&study, || render_seed_table(&study));
    }

    let reports = compare(&jobs, &config, &policies, baseline.clone(), Some(&progress))
        .with_context(|| format!("simulating {}", workload.display()))?;
    bar.finish_and_clear();
    check_model()?;

    if let Some(path) = &args.plot {
        plot_jct_cdf(&reports, &label, path)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot_utilization {
        for report in &reports {
            let file = suffixed(path, &report.policy);
            plot_utilization(report, &label, &file)?;
            eprintln!("wrote {}", file.display());
        }
    }
    json.emit(&reports, || render_table(&reports, baseline_name))
}

/// `jct.svg` + `drf` → `jct-drf.svg`.
fn suffixed(path: &std::path::Path, suffix: &str) -> PathBuf {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    let clean: String = suffix
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    path.with_file_name(format!("{stem}-{clean}.{ext}"))
}

/// Folds the progress of parallel runs into one bar; in a study over several seeds or machine
/// counts, the bar follows the current comparison and its message says which one it is.
struct ProgressTracker<'a> {
    bar: &'a ProgressBar,
    jobs_done: Mutex<BTreeMap<String, (usize, usize)>>,
    /// `seed 3, 4 machines (2/20): `, or empty outside a study.
    comparison: Mutex<String>,
}

impl<'a> ProgressTracker<'a> {
    fn new(bar: &'a ProgressBar) -> ProgressTracker<'a> {
        ProgressTracker {
            bar,
            jobs_done: Mutex::new(BTreeMap::new()),
            comparison: Mutex::new(String::new()),
        }
    }

    fn update(&self, progress: &Progress) {
        match progress {
            &Progress::Planning { done, total } => {
                self.bar.set_length(total as u64);
                self.bar.set_position(done as u64);
                self.bar.set_message("planning jobs (Graphene offline)");
            }
            Progress::Simulating {
                policy,
                jobs_done,
                jobs_total,
                now_s,
            } => {
                let Ok(mut runs) = self.jobs_done.lock() else {
                    return;
                };
                runs.insert(policy.clone(), (*jobs_done, *jobs_total));
                let done: usize = runs.values().map(|(d, _)| d).sum();
                let total: usize = runs.values().map(|(_, t)| t).sum();
                let prefix = self
                    .comparison
                    .lock()
                    .map(|c| c.clone())
                    .unwrap_or_default();
                self.bar.set_length(total as u64);
                self.bar.set_position(done as u64);
                self.bar.set_message(format!(
                    "{prefix}simulating {} runs, t = {now_s:.0} s",
                    runs.len()
                ));
            }
            &Progress::Comparison {
                started,
                total,
                seed,
                machines,
            } => {
                if let Ok(mut runs) = self.jobs_done.lock() {
                    runs.clear();
                }
                let prefix = format!("seed {seed}, {machines} machines ({started}/{total}): ");
                self.bar.set_position(0);
                self.bar.set_message(prefix.clone());
                if let Ok(mut c) = self.comparison.lock() {
                    *c = prefix;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn parse(args: &[&str]) -> std::result::Result<SimArgs, String> {
        Cli::try_parse_from(std::iter::once("sim").chain(args.iter().copied()))
            .map(|c| c.sim)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn seeds_and_sweeps_are_validated() {
        let plain = parse(&[]).unwrap();
        assert_eq!(plain.seeds, 1);
        assert!(plain.sweep_machines.is_none());
        let study = parse(&["--seeds", "5", "--sweep-machines", "2,3,4,6"]).unwrap();
        assert_eq!(study.seeds, 5);
        assert_eq!(study.sweep_machines, Some(vec![2, 3, 4, 6]));
        for (args, bad) in [
            (&["--seeds", "0"][..], "'0'"),
            (&["--seeds", "1001"][..], "'1001'"),
            (&["--sweep-machines", "2,0,4"][..], "'0'"),
            (&["--sweep-machines", "2,x"][..], "'x'"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(bad), "{args:?}: {e}");
        }
        // A sweep sets the machine counts itself; the gain plot needs a sweep and a baseline.
        assert!(parse(&["--sweep-machines", "2,3", "--machines", "4"]).is_err());
        assert!(parse(&["--plot-gain", "g.svg", "--baseline", "drf"]).is_err());
        assert!(parse(&["--plot-gain", "g.svg", "--sweep-machines", "2"]).is_err());
        assert!(parse(&[
            "--plot-gain",
            "g.svg",
            "--sweep-machines",
            "2",
            "--baseline",
            "drf"
        ])
        .is_ok());
    }

    #[test]
    fn utilization_plots_get_one_file_per_policy() {
        assert_eq!(
            suffixed(std::path::Path::new("out/util.svg"), "graphene+carbyne"),
            PathBuf::from("out/util-graphene-carbyne.svg")
        );
    }
}
