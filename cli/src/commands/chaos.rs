//! `fullerene chaos sim`: the whole-system deterministic simulation
//! ([`fullerene_chaos::system`]) over many seeds, with the invariant checker's verdict; and
//! `fullerene chaos run`: the same checker over real processes under faults
//! ([`fullerene_chaos::live`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_chaos::live::{run_live, LiveError, LiveFault, LiveOptions, LiveReport, Progress};
use fullerene_chaos::system::{
    run_seed, trace_excerpt, FaultKind, FaultSet, Invariant, RunReport, SimOptions,
};
use serde::Serialize;

use crate::commands::parse_positive;
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
    /// Real processes on loopback: masters, agents running real task processes, and DAG-job
    /// frameworks (`job run`) on jobs from the workload, under faults drawn from `--seed`
    /// for `--duration-secs` seconds: SIGKILL and restart of the leader, a follower, an agent and
    /// a framework; SIGSTOP pauses past the election and agent timeouts; partitions, one-way
    /// cuts, loss, delay and duplication through a UDP fault proxy every master is reached
    /// by; with root, a master's data directory filling up. Faults stop, everything heals,
    /// the jobs must complete; then the simulation's invariant checker reads the history
    /// (the masters' HTTP API, the agents' and frameworks' event logs, the process table).
    ///
    /// Prints the faults injected, the time until offers flow again after each leader kill
    /// (from the kill, or from when work was next waiting if none was; p50, p99, max), status updates sent, resent, delivered and lost (must be 0), tasks
    /// that ran twice (must be 0), jobs completed and their average JCT (with `--fault-free-baseline`,
    /// against the same seed without faults), and the verdicts. Exits non-zero on a
    /// violation, naming the seed and the file (`violations.txt` under `--dir`) with the
    /// history that shows it. Everything it started is stopped at the end, on error and on
    /// ctrl-c; the directory keeps every log.
    ///
    /// Example: `fullerene chaos run --seed 7 --duration-secs 60 --dir /tmp/chaos`; `--runs 10
    /// --duration-secs 120` for ten runs (seeds 7 to 16).
    Run(ChaosRunArgs),
}

/// Flags of `fullerene chaos run`.
#[derive(Args, Debug)]
pub(crate) struct ChaosRunArgs {
    /// The seed of the first run (jobs, faults and their victims).
    #[arg(long, short, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Runs, with seeds from `--seed` on.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub runs: u64,
    /// Seconds of faults per run.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=86_400))]
    pub duration_secs: u64,
    /// Where runs keep their clusters, logs, histories and reports (`run-<seed>` each);
    /// default: a new directory under the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Masters.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub masters: u64,
    /// Agents (each with the `command` executor).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub agents: u64,
    /// Framework processes (`fullerene job run`), started through the first half of a run.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub frameworks: u64,
    /// Jobs per framework process, drawn from the workload's smaller jobs.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs_per_framework: u64,
    /// Workload file (JSON Lines, `shared/workloads/FORMAT.md`). Default: the shared TPC-H file.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// Real seconds per second of the workload's task durations.
    #[arg(long, env = "FULLERENE_TIME_SCALE", value_name = "FACTOR", default_value_t = 1.0, value_parser = parse_positive, allow_negative_numbers = true)]
    pub time_scale: f64,
    /// Each agent's resources.
    #[arg(
        long,
        default_value = "cpus=4,mem_mib=16384,disk_mbps=1000,net_mbps=10000",
        value_name = "KIND=AMOUNT,..."
    )]
    pub agent_resources: String,
    /// Faults: `all`, `no-root` (all but disk-full), `none`, or a comma-separated list of
    /// kill-leader, kill-follower, kill-agent, kill-framework, pause-leader, pause-agent,
    /// isolate-leader, split-masters, agent-cut-from-leader, asymmetric, loss, delay,
    /// duplicate, disk-full.
    #[arg(long, value_name = "KIND,...", default_value = "all", value_parser = parse_live_faults)]
    pub faults: LiveFaults,
    /// Seconds the jobs have to complete once faults stop.
    #[arg(long, value_name = "SECS", default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub settle_secs: u64,
    /// Also run each seed without faults and compare the average JCT.
    #[arg(long)]
    pub fault_free_baseline: bool,
}

/// The faults of `chaos run --faults`.
#[derive(Clone, Debug)]
pub(crate) struct LiveFaults(pub BTreeSet<LiveFault>);

fn parse_live_faults(text: &str) -> Result<LiveFaults, String> {
    let set = match text {
        "all" => LiveFault::ALL.into_iter().collect(),
        "no-root" => LiveFault::without_root(),
        "none" => BTreeSet::new(),
        list => list
            .split(',')
            .map(|name| name.trim().parse::<LiveFault>())
            .collect::<Result<BTreeSet<_>, _>>()?,
    };
    Ok(LiveFaults(set))
}

/// Flags of `fullerene chaos sim`.
#[derive(Args, Debug)]
pub(crate) struct ChaosSimArgs {
    /// Seeds to run (from `--start`).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub start: u64,
    /// Run this one seed only (see `--trace`).
    #[arg(long, short, value_name = "N", conflicts_with_all = ["seeds", "start"])]
    pub seed: Option<u64>,
    /// With `--seed`: write the run's full trace (every recorded step, every frame the
    /// frameworks sent and received) to FILE.
    #[arg(long, value_name = "FILE", requires = "seed")]
    pub trace: Option<PathBuf>,
    /// Masters (Raft voters).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub masters: u64,
    /// Agents.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=200))]
    pub agents: u64,
    /// DAG jobs, each its own framework, submitted during the first half of the fault phase.
    #[arg(long, short, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=200))]
    pub jobs: u64,
    /// More DAG jobs, all run by one session framework (the SDK's multi-job framework, as
    /// `job run --policy decima` runs, here under the fair session policy) beside the per-job
    /// frameworks, submitted together during the first half of the fault phase; a session
    /// that ends before its jobs do starts again with those not completed.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=200))]
    pub session_jobs: u64,
    /// Faults to inject: `all`, `none`, or a comma-separated list of loss, delay,
    /// duplication, partition, asymmetric-partition, leader-isolation,
    /// agents-cut-from-leader, master-crash, master-crash-before-send, agent-crash,
    /// agent-crash-before-sync, torn-write, framework-crash, pause, clock-jump,
    /// storage-write-error, bad-peer.
    #[arg(long, value_name = "KIND,...", default_value = "all", value_parser = parse_faults)]
    pub faults: FaultSet,
    /// Seconds of virtual time with faults.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub fault_secs: u64,
    /// Seconds of virtual time every job has, once faults stop, to complete.
    #[arg(long, value_name = "SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=36_000))]
    pub liveness_secs: u64,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
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
    session_jobs_per_seed: usize,
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
        ChaosCommand::Run(args) => live_runs(args, json),
    }
}

fn sim(args: ChaosSimArgs, json: &JsonOutput) -> Result<()> {
    let options = SimOptions {
        masters: args.masters as usize,
        agents: args.agents as usize,
        jobs: args.jobs as usize,
        session_jobs: args.session_jobs as usize,
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
             --master-addrs {} --agents {} --jobs {} --trace trace.txt`",
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
        session_jobs_per_seed: options.session_jobs,
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
        "{} seed(s) from {}: {} masters, {} agents, {} jobs each{}\n\
         {:.1} s simulated in {:.1} s ({:.0}× real time), {} events ({:.0}/s); \
         {}/{} jobs completed\n",
        r.seeds,
        r.start,
        r.masters,
        r.agents,
        r.jobs_per_seed,
        if r.session_jobs_per_seed > 0 {
            format!(" and {} in one session framework", r.session_jobs_per_seed)
        } else {
            String::new()
        },
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

/// What `chaos run` prints: each run's report, and its baseline's average JCT.
#[derive(Serialize, Debug)]
struct ChaosRunSummary {
    runs: Vec<LiveRun>,
    passed: bool,
}

#[derive(Serialize, Debug)]
struct LiveRun {
    report: LiveReport,
    baseline_avg_jct_s: Option<f64>,
}

fn live_runs(args: ChaosRunArgs, json: &JsonOutput) -> Result<()> {
    let workload = crate::commands::resolve_workload(args.workload.clone())?;
    let binary = std::env::current_exe().context("cannot find this executable")?;
    let root = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "fullerene-chaos-{}-{}",
            args.seed,
            std::process::id()
        )),
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&interrupted));
    let quiet = matches!(json, JsonOutput::Stdout);
    let mut runs = Vec::new();
    for seed in args.seed..args.seed.saturating_add(args.runs) {
        let options = LiveOptions {
            binary: binary.clone(),
            seed,
            duration: Duration::from_secs(args.duration_secs),
            dir: root.join(format!("run-{seed}")),
            masters: args.masters,
            agents: args.agents,
            frameworks: args.frameworks,
            jobs_per_framework: usize::try_from(args.jobs_per_framework).unwrap_or(1),
            workload: workload.clone(),
            time_scale: args.time_scale,
            agent_resources: args.agent_resources.clone(),
            faults: args.faults.0.clone(),
            settle: Duration::from_secs(args.settle_secs),
            interrupted: Arc::clone(&interrupted),
        };
        let report = one_live_run(&options, quiet)?;
        let baseline_avg_jct_s = if args.fault_free_baseline {
            let baseline = LiveOptions {
                dir: root.join(format!("run-{seed}-baseline")),
                faults: BTreeSet::new(),
                ..options.clone()
            };
            one_live_run(&baseline, quiet)?.avg_jct_s
        } else {
            None
        };
        runs.push(LiveRun {
            report,
            baseline_avg_jct_s,
        });
    }
    let summary = ChaosRunSummary {
        passed: runs.iter().all(|r| r.report.passed()),
        runs,
    };
    json.emit(&summary, || render_live(&summary))?;
    if let Some(failed) = summary.runs.iter().find(|r| !r.report.passed()) {
        bail!(
            "seed {} broke {} promise(s); the history that shows it is in {}",
            failed.report.seed,
            failed.report.violations.len(),
            failed.report.dir.join("violations.txt").display()
        );
    }
    Ok(())
}

fn one_live_run(options: &LiveOptions, quiet: bool) -> Result<LiveReport> {
    let bar = progress_bar(options.duration.as_secs());
    if quiet {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_prefix(format!("seed {}", options.seed));
    let started = Instant::now();
    let progress = |p: Progress| match p {
        Progress::Phase(phase) => bar.set_message(phase),
        Progress::Fault { at, fault, detail } => {
            bar.set_position((at as u64).min(options.duration.as_secs()));
            bar.set_message(format!("{fault}: {detail}"));
        }
    };
    let outcome = run_live(options, &progress);
    bar.finish_and_clear();
    match outcome {
        Ok(report) => {
            if !quiet {
                eprintln!(
                    "seed {}: {} in {:.0} s, files in {}",
                    options.seed,
                    if report.passed() { "passed" } else { "FAILED" },
                    started.elapsed().as_secs_f64(),
                    options.dir.display()
                );
            }
            Ok(report)
        }
        Err(LiveError::Interrupted) => {
            eprintln!(
                "interrupted: every process of the run was stopped; its files are in {}",
                options.dir.display()
            );
            std::process::exit(130);
        }
        Err(error) => Err(anyhow::Error::new(error).context(format!(
            "the run of seed {} could not be carried out (its logs are in {})",
            options.seed,
            options.dir.display()
        ))),
    }
}

/// Sets `flag` on SIGINT, SIGTERM or SIGHUP (a closed terminal), so that a run stops what it
/// started before exiting.
fn watch_signals(flag: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                    signal(SignalKind::hangup()),
                ) else {
                    return;
                };
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                    _ = hup.recv() => {}
                }
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        });
}

fn render_live(summary: &ChaosRunSummary) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let mut out = String::new();
    for run in &summary.runs {
        let r = &run.report;
        let mut faults = table(&["fault", "injected"]);
        for (kind, n) in &r.faults {
            faults.add_row(vec![kind.clone(), n.to_string()]);
        }
        for (kind, why) in &r.skipped {
            faults.add_row(vec![kind.clone(), format!("skipped: {why}")]);
        }
        let mut figures = table(&["figure", "value"]);
        let k = &r.offers_after_leader_kill;
        let rows = [
            (
                "leader kills -> offers again p50 / p99 / max (ms)".to_string(),
                format!(
                    "{} / {} / {} over {} kills",
                    ms(k.p50_ms),
                    ms(k.p99_ms),
                    ms(k.max_ms),
                    k.count
                ),
            ),
            ("status updates sent".into(), r.updates_sent.to_string()),
            ("  resent (allowed)".into(), r.updates_resent.to_string()),
            ("  delivered".into(), r.updates_delivered.to_string()),
            ("  acknowledged".into(), r.updates_acked.to_string()),
            ("  lost (must be 0)".into(), r.updates_lost.to_string()),
            (
                "tasks run twice (must be 0)".into(),
                r.tasks_run_twice.to_string(),
            ),
            (
                "launches asked for".into(),
                r.launches_requested.to_string(),
            ),
            ("task processes".into(), r.task_processes.to_string()),
            (
                "jobs completed".into(),
                format!("{} of {}", r.jobs_completed, r.jobs),
            ),
            (
                "average JCT (s)".into(),
                match (r.avg_jct_s, run.baseline_avg_jct_s) {
                    (Some(jct), Some(base)) => {
                        format!("{jct:.1} (without faults {base:.1}, x{:.2})", jct / base)
                    }
                    (Some(jct), None) => format!("{jct:.1}"),
                    _ => "-".into(),
                },
            ),
            (
                "packets relayed / cut / lost / duplicated / delayed".into(),
                ["relayed", "cut", "lost", "duplicated", "delayed"]
                    .iter()
                    .map(|key| r.packets.get(*key).copied().unwrap_or(0).to_string())
                    .collect::<Vec<_>>()
                    .join(" / "),
            ),
        ];
        for (name, value) in rows {
            figures.add_row(vec![name, value]);
        }
        let mut verdicts = table(&["invariant", "checks", "violations"]);
        for invariant in Invariant::ALL {
            let broken = r
                .violations
                .iter()
                .filter(|v| v.invariant == invariant)
                .count();
            verdicts.add_row(vec![
                invariant.name().to_string(),
                r.checks
                    .get(invariant.name())
                    .copied()
                    .unwrap_or(0)
                    .to_string(),
                broken.to_string(),
            ]);
        }
        out.push_str(&format!(
            "seed {} ({}):\n{faults}\n{figures}\n{verdicts}\n",
            r.seed,
            r.dir.display()
        ));
        for violation in r.violations.iter().take(10) {
            out.push_str(&format!(
                "  {} at step {}: {}\n",
                violation.invariant, violation.step, violation.detail
            ));
        }
        for error in r.framework_errors.iter().take(5) {
            out.push_str(&format!("  {error}\n"));
        }
        for exit in r.process_exits.iter().take(10) {
            out.push_str(&format!("  exited by itself: {exit}\n"));
        }
    }
    out.push_str(if summary.passed {
        "every promise held\n"
    } else {
        "PROMISES BROKEN (see above)\n"
    });
    out
}
