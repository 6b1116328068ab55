//! `fullerene chaos sim`: the whole-system deterministic simulation
//! ([`fullerene_chaos::system`]) over many seeds, with the invariant checker's verdict.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_chaos::system::{
    run_seed, trace_excerpt, FaultKind, FaultSet, Invariant, RunReport, SimOptions,
};
use serde::Serialize;

use crate::commands::plan::progress_bar;
use crate::output::{table, JsonOutput};

/// Fault injection.
#[derive(Subcommand, Debug)]
pub(crate) enum ChaosCommand {
    /// The whole system (masters with Raft, agents, DAG-job frameworks: the real cores) in one
    /// thread per seed, on a virtual clock, under seeded faults; an independent checker reads
    /// each run's history for broken promises (DESIGN.md, "Failure model and invariants").
    ///
    /// Prints, per fault kind, how many were injected and, per invariant, how many checks ran.
    /// On a violation it prints the seed, the invariant and the steps that led to it, and
    /// exits non-zero. A seed replays bit for bit: `--seed S --trace FILE` writes one run's
    /// full trace.
    ///
    /// Example: `fullerene chaos sim --seeds 500 --masters 5 --agents 20 --faults
    /// partition,master-crash,pause`.
    Sim(ChaosSimArgs),
}

/// Flags of `fullerene chaos sim`.
#[derive(Args, Debug)]
pub(crate) struct ChaosSimArgs {
    /// Seeds to run (from `--start`).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    pub start: u64,
    /// Run this one seed only (see `--trace`).
    #[arg(long, conflicts_with_all = ["seeds", "start"])]
    pub seed: Option<u64>,
    /// With `--seed`: write the run's full trace (every recorded step, every frame the
    /// frameworks sent and received) to FILE.
    #[arg(long, value_name = "FILE", requires = "seed")]
    pub trace: Option<PathBuf>,
    /// Masters (Raft voters).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub masters: u64,
    /// Agents.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=200))]
    pub agents: u64,
    /// DAG jobs, each its own framework, submitted during the first half of the fault phase.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=200))]
    pub jobs: u64,
    /// Faults to inject: `all`, `none`, or a comma-separated list of loss, delay,
    /// duplication, partition, asymmetric-partition, leader-isolation,
    /// agents-cut-from-leader, master-crash, master-crash-before-send, agent-crash,
    /// agent-crash-before-sync, torn-write, framework-crash, pause, clock-jump,
    /// storage-write-error, bad-peer.
    #[arg(long, default_value = "all", value_parser = parse_faults)]
    pub faults: FaultSet,
    /// Seconds of virtual time with faults.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub fault_secs: u64,
    /// Seconds of virtual time every job has, once faults stop, to complete.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=36_000))]
    pub liveness_secs: u64,
    /// Worker threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
}

fn parse_faults(text: &str) -> Result<FaultSet, String> {
    text.parse::<FaultSet>().map_err(|e| e.to_string())
}

/// One broken promise, with what led to it.
#[derive(Serialize, Debug)]
struct Found {
    seed: u64,
    invariant: Invariant,
    step: usize,
    detail: String,
    trace: Vec<String>,
}

/// What `chaos sim` prints.
#[derive(Serialize, Debug)]
struct ChaosSimReport {
    seeds: u64,
    start: u64,
    masters: usize,
    agents: usize,
    jobs_per_seed: usize,
    faults_enabled: Vec<FaultKind>,
    wall_secs: f64,
    sim_secs: f64,
    events: u64,
    events_per_sec: f64,
    sim_secs_per_wall_sec: f64,
    jobs_submitted: u64,
    jobs_completed: u64,
    faults_injected: BTreeMap<FaultKind, u64>,
    checks: BTreeMap<Invariant, u64>,
    violations: Vec<Found>,
}

/// Steps of history shown before a violation.
const TRACE_CONTEXT: usize = 40;

pub(crate) fn run(command: ChaosCommand, json: &JsonOutput) -> Result<()> {
    match command {
        ChaosCommand::Sim(args) => sim(args, json),
    }
}

fn sim(args: ChaosSimArgs, json: &JsonOutput) -> Result<()> {
    let options = SimOptions {
        masters: args.masters as usize,
        agents: args.agents as usize,
        jobs: args.jobs as usize,
        faults: args.faults.clone(),
        fault_phase: Duration::from_secs(args.fault_secs),
        liveness_bound: Duration::from_secs(args.liveness_secs),
        trace_frames: args.trace.is_some(),
        ..SimOptions::new()
    };
    let (start, seeds) = match args.seed {
        Some(seed) => (seed, 1),
        None => (args.start, args.seeds),
    };
    if start.checked_add(seeds).is_none() {
        bail!("--start {start} plus --seeds {seeds} overflows the seed range");
    }
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        |n| n as usize,
    );
    let began = Instant::now();
    let reports = run_seeds(&options, start, seeds, threads, args.trace.is_some());
    let wall = began.elapsed().as_secs_f64();
    if let (Some(path), Some(report)) = (&args.trace, reports.first()) {
        let text: String = report.history.iter().map(|s| format!("{s}\n")).collect();
        std::fs::write(path, text)
            .with_context(|| format!("cannot write the trace to {}", path.display()))?;
        eprintln!(
            "wrote the trace of seed {} ({} steps) to {}",
            report.seed,
            report.history.len(),
            path.display()
        );
    }
    let summary = summarize(&options, start, seeds, wall, reports);
    json.emit(&summary, || render(&summary))?;
    if let Some(first) = summary.violations.first() {
        bail!(
            "{} violation(s); the first: seed {}, {}. Replay it with `fullerene chaos sim --seed {} \
             --masters {} --agents {} --jobs {} --trace trace.txt`",
            summary.violations.len(),
            first.seed,
            first.invariant,
            first.seed,
            args.masters,
            args.agents,
            args.jobs
        );
    }
    Ok(())
}

/// Runs the seeds on `threads` workers; the reports come back in seed order.
fn run_seeds(
    options: &SimOptions,
    start: u64,
    seeds: u64,
    threads: usize,
    keep_history: bool,
) -> Vec<RunReport> {
    let bar = progress_bar(seeds);
    bar.set_message("0 violations");
    let next = AtomicU64::new(0);
    let violating = AtomicU64::new(0);
    let done = Mutex::new(Vec::with_capacity(seeds as usize));
    std::thread::scope(|scope| {
        for _ in 0..threads.min(seeds as usize).max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= seeds {
                    return;
                }
                let seed = start + i;
                let mut report = run_seed(seed, options, keep_history);
                if !report.violations.is_empty() {
                    let n = violating.fetch_add(1, Ordering::Relaxed) + 1;
                    bar.set_message(format!("{n} violating seed(s)"));
                    if !keep_history {
                        // Run it again to keep its history for the trace (it replays exactly).
                        report = run_seed(seed, options, true);
                    }
                }
                done.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(report);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let mut reports = done
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    reports.sort_by_key(|r| r.seed);
    reports
}

fn summarize(
    options: &SimOptions,
    start: u64,
    seeds: u64,
    wall: f64,
    reports: Vec<RunReport>,
) -> ChaosSimReport {
    let mut faults_injected: BTreeMap<FaultKind, u64> = BTreeMap::new();
    let mut checks: BTreeMap<Invariant, u64> = Invariant::ALL.iter().map(|i| (*i, 0)).collect();
    let mut violations = Vec::new();
    let (mut sim_secs, mut events, mut submitted, mut completed) = (0.0, 0, 0, 0);
    for report in reports {
        sim_secs += report.sim_time_s;
        events += report.events;
        submitted += report.jobs as u64;
        completed += report.jobs_completed as u64;
        for (kind, n) in &report.faults {
            *faults_injected.entry(*kind).or_default() += n;
        }
        for (invariant, n) in &report.checks {
            *checks.entry(*invariant).or_default() += n;
        }
        for violation in &report.violations {
            violations.push(Found {
                seed: report.seed,
                invariant: violation.invariant,
                step: violation.step,
                detail: violation.detail.clone(),
                trace: trace_excerpt(&report.history, violation.step, TRACE_CONTEXT),
            });
        }
    }
    ChaosSimReport {
        seeds,
        start,
        masters: options.masters,
        agents: options.agents,
        jobs_per_seed: options.jobs,
        faults_enabled: options.faults.0.iter().copied().collect(),
        wall_secs: wall,
        sim_secs,
        events,
        events_per_sec: events as f64 / wall.max(1e-9),
        sim_secs_per_wall_sec: sim_secs / wall.max(1e-9),
        jobs_submitted: submitted,
        jobs_completed: completed,
        faults_injected,
        checks,
        violations,
    }
}

fn render(r: &ChaosSimReport) -> String {
    let mut out = format!(
        "{} seed(s) from {}: {} masters, {} agents, {} jobs each\n\
         {:.1} s simulated in {:.1} s ({:.0}× real time), {} events ({:.0}/s); \
         {}/{} jobs completed\n",
        r.seeds,
        r.start,
        r.masters,
        r.agents,
        r.jobs_per_seed,
        r.sim_secs,
        r.wall_secs,
        r.sim_secs_per_wall_sec,
        r.events,
        r.events_per_sec,
        r.jobs_completed,
        r.jobs_submitted
    );
    let mut faults = table(&["fault", "injected"]);
    for kind in FaultKind::ALL {
        let enabled = r.faults_enabled.contains(&kind);
        let n = r.faults_injected.get(&kind).copied().unwrap_or(0);
        faults.add_row(vec![
            kind.to_string(),
            if enabled { n.to_string() } else { "off".into() },
        ]);
    }
    let mut checks = table(&["invariant", "checks", "violations"]);
    for invariant in Invariant::ALL {
        let n = r.checks.get(&invariant).copied().unwrap_or(0);
        let broken = r
            .violations
            .iter()
            .filter(|v| v.invariant == invariant)
            .count();
        checks.add_row(vec![
            invariant.to_string(),
            n.to_string(),
            broken.to_string(),
        ]);
    }
    out.push_str(&format!("{faults}\n{checks}\n"));
    for v in &r.violations {
        out.push_str(&format!(
            "\nVIOLATION seed {}: {} at step {}: {}\n",
            v.seed, v.invariant, v.step, v.detail
        ));
        for line in &v.trace {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}
