//! Runs the project's target scenario and prints the comparison table:
//! 100 TPC-H jobs drawn at random from `tpch-decima.jsonl` (`--job-order random`, seeded by
//! `--seed`), Poisson arrivals with a 25 s mean gap, two fairness groups, four reference
//! machines (busy: about 60% of their cores and disk bandwidth in use under DRF), every policy,
//! DRF as the baseline. `scripts/run` runs the same scenario through `fullerene sim`.
//!
//! ```text
//! cargo run --release -p fullerene-sim --example compare -- \
//!     [--workload FILE] [--machines 4] [--jobs 100] [--job-order random|file] \
//!     [--groups 2] [--seed 1] \
//!     [--arrivals poisson:25] [--compare graphene+carbyne,graphene,...] [--baseline drf] \
//!     [--overbook 0.25] [--kappa 0.1] [--timing] \
//!     [--seeds N] [--sweep-machines 2,3,4,6] [--plot-gain FILE.svg] \
//!     [--json FILE] [--plot FILE.svg] [--utilization-plot FILE.svg]
//! ```
//!
//! With `--deadlines FRACTION` that fraction of the jobs gets deadlines (NewLB × (1 + `--slack`,
//! default 1)) and `--compare` takes the SLA policies (`rayon-gree,rayon-gree-l,capacity`, the
//! default): the SLA table of `fullerene_sim::reserved` instead.
//!
//! With `--seeds N` (N > 1) the comparison runs on seeds `--seed`, `--seed`+1, … and prints
//! the seed table; `--sweep-machines` runs that at each machine count and `--plot-gain` draws
//! the speedup over the baseline against the load. Wall-clock times of planning and of each run
//! are printed on stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use fullerene_sdk::read_workload;
use fullerene_sim::{
    compare, compare_seeds, compare_sla, consecutive_seeds, parse_policy_list,
    parse_sla_policy_list, plan_jobs, plot_gain_vs_load, plot_jct_cdf, plot_seed_jct_cdf,
    plot_utilization, render_seed_table, render_sla_table, render_sweep, render_table, simulate,
    sweep_machines, workload_name, JobOrder, PolicyKind, Progress, SimConfig, SlaOptions,
    SlaPolicy,
};

struct Args {
    workload: PathBuf,
    config: SimConfig,
    policies: Vec<PolicyKind>,
    baseline: Option<PolicyKind>,
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
    utilization_plot: Option<PathBuf>,
    timing: bool,
    seeds: usize,
    sweep: Option<Vec<usize>>,
    plot_gain: Option<PathBuf>,
    /// `--compare` as given, parsed once `--deadlines` is known.
    compare: Option<String>,
    sla: Option<SlaOptions>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        workload: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/workloads/tpch-decima.jsonl"),
        config: SimConfig {
            machines: 4,
            jobs: Some(100),
            job_order: JobOrder::Random,
            groups: Some(2),
            seed: 1,
            ..SimConfig::default()
        },
        policies: PolicyKind::ALL.to_vec(),
        baseline: Some(PolicyKind::Drf),
        json: None,
        plot: None,
        utilization_plot: None,
        timing: false,
        seeds: 1,
        sweep: None,
        plot_gain: None,
        compare: None,
        sla: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--timing" {
            args.timing = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--workload" => args.workload = PathBuf::from(value),
            "--machines" => args.config.machines = number(&value)? as usize,
            "--machine-resources" => {
                args.config.machine = value.parse().map_err(|e| format!("{e}"))?;
            }
            "--jobs" => args.config.jobs = Some(number(&value)? as usize),
            "--job-order" => args.config.job_order = value.parse().map_err(|e| format!("{e}"))?,
            "--groups" => args.config.groups = Some(number(&value)? as usize),
            "--seed" => args.config.seed = number(&value)?,
            "--overbook" => {
                args.config.overbook_allowance = value.parse().map_err(|e| format!("{e}"))?;
            }
            "--kappa" => args.config.kappa = value.parse().map_err(|e| format!("{e}"))?,
            "--arrivals" => args.config.arrivals = value.parse().map_err(|e| format!("{e}"))?,
            "--compare" => args.compare = Some(value),
            "--deadlines" => {
                args.sla.get_or_insert_with(SlaOptions::default).fraction =
                    value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
            }
            "--slack" => {
                args.sla.get_or_insert_with(SlaOptions::default).slack =
                    value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
            }
            "--baseline" => {
                args.baseline = match value.as_str() {
                    "none" => None,
                    name => Some(name.parse().map_err(|e| format!("{e}"))?),
                }
            }
            "--json" => args.json = Some(PathBuf::from(value)),
            "--plot" => args.plot = Some(PathBuf::from(value)),
            "--utilization-plot" => args.utilization_plot = Some(PathBuf::from(value)),
            "--seeds" => args.seeds = number(&value)? as usize,
            "--sweep-machines" => {
                args.sweep = Some(
                    value
                        .split(',')
                        .map(|m| number(m.trim()).map(|m| m as usize))
                        .collect::<Result<_, _>>()?,
                );
            }
            "--plot-gain" => args.plot_gain = Some(PathBuf::from(value)),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if let (Some(list), None) = (&args.compare, &args.sla) {
        args.policies = parse_policy_list(list).map_err(|e| e.to_string())?;
    }
    Ok(args)
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let file_jobs = read_workload(&args.workload)?;
    let last_report = Mutex::new(Instant::now());
    let progress = |p: &Progress| {
        let mut last = last_report
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.elapsed().as_secs_f64() < 2.0 {
            return;
        }
        *last = Instant::now();
        match p {
            Progress::Planning { done, total } => eprintln!("  planned {done}/{total} jobs"),
            Progress::Simulating {
                policy,
                jobs_done,
                jobs_total,
                now_s,
            } => eprintln!("  {policy}: {jobs_done}/{jobs_total} jobs done at t={now_s:.0}s"),
            Progress::Comparison {
                started,
                total,
                seed,
                machines,
            } => eprintln!("  comparison {started}/{total}: seed {seed}, {machines} machines"),
        }
    };

    if args.timing {
        // Times planning (when a policy needs the plans) and each policy on its own,
        // sequentially, for the speed figures.
        let plans = if args.policies.iter().any(|p| p.needs_pri_scores()) {
            let start = Instant::now();
            let plans = plan_jobs(&file_jobs, &args.config, Some(&progress))?;
            eprintln!("planning: {:.2}s", start.elapsed().as_secs_f64());
            Some(plans)
        } else {
            None
        };
        for &policy in &args.policies {
            let start = Instant::now();
            let outcome = simulate(&file_jobs, &args.config, policy, plans.as_ref(), None)?;
            eprintln!(
                "{policy}: {:.2}s wall, {} tasks, {} offers, {} cycles, avg JCT {:.1}s",
                start.elapsed().as_secs_f64(),
                outcome.stats.tasks,
                outcome.stats.offers,
                outcome.stats.allocation_cycles,
                outcome.report.avg_jct_s
            );
        }
        return Ok(());
    }

    if let Some(options) = &args.sla {
        let policies = match &args.compare {
            Some(list) => parse_sla_policy_list(list)?,
            None => SlaPolicy::ALL.to_vec(),
        };
        let start = Instant::now();
        let comparison = compare_sla(
            &file_jobs,
            &args.config,
            &policies,
            options,
            Some(&progress),
        )?;
        eprintln!("SLA comparison: {:.2}s wall", start.elapsed().as_secs_f64());
        print!("{}", render_sla_table(&comparison));
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_vec_pretty(&comparison)?)?;
        }
        return Ok(());
    }

    let workload = workload_name(&args.workload);
    if let Some(counts) = &args.sweep {
        let seeds = consecutive_seeds(args.config.seed, args.seeds)?;
        let start = Instant::now();
        let sweep = sweep_machines(
            &file_jobs,
            &args.config,
            counts,
            &seeds,
            &args.policies,
            args.baseline,
            Some(&progress),
        )?;
        eprintln!("sweep: {:.2}s wall", start.elapsed().as_secs_f64());
        print!("{}", render_sweep(&sweep));
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_vec_pretty(&sweep)?)?;
        }
        if let (Some(path), Some(base)) = (&args.plot_gain, args.baseline) {
            plot_gain_vs_load(&sweep, base.name(), &workload, path)?;
        }
        return Ok(());
    }
    if args.seeds > 1 {
        let seeds = consecutive_seeds(args.config.seed, args.seeds)?;
        let start = Instant::now();
        let study = compare_seeds(
            &file_jobs,
            &args.config,
            &seeds,
            &args.policies,
            args.baseline,
            Some(&progress),
        )?;
        eprintln!(
            "{} seeds: {:.2}s wall",
            seeds.len(),
            start.elapsed().as_secs_f64()
        );
        print!("{}", render_seed_table(&study));
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_vec_pretty(&study)?)?;
        }
        if let Some(path) = &args.plot {
            plot_seed_jct_cdf(&study, &workload, path)?;
        }
        return Ok(());
    }

    let start = Instant::now();
    let reports = compare(
        &file_jobs,
        &args.config,
        &args.policies,
        args.baseline,
        Some(&progress),
    )?;
    eprintln!(
        "{} jobs ({} order) on {} machines ({}), arrivals {}, seed {}: {:.2}s wall",
        reports.first().map_or(0, |r| r.scenario.jobs),
        args.config.job_order,
        args.config.machines,
        args.config.machine,
        args.config.arrivals,
        args.config.seed,
        start.elapsed().as_secs_f64()
    );
    print!(
        "{}",
        render_table(&reports, args.baseline.map(PolicyKind::name))
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&reports)?)?;
    }
    if let Some(path) = &args.plot {
        plot_jct_cdf(&reports, &workload, path)?;
    }
    if let (Some(path), Some(first)) = (&args.utilization_plot, reports.first()) {
        plot_utilization(first, &workload, path)?;
    }
    Ok(())
}
