//! `fullerene bench load`: runs [`fullerene_chaos::load`] (well-behaved frameworks on a real
//! cluster, then the same with hostile clients beside them: floods, oversized and garbage
//! frames, slow readers, a connection flood) and prints offer latency with and without them,
//! how each hostile attempt was answered, and whether any process died.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use fullerene_chaos::load::{LoadConfig, LoadReport};
use indicatif::ProgressBar;

use crate::output::{table, JsonOutput};

/// Flags of `fullerene bench load`.
#[derive(Args, Debug)]
pub(crate) struct LoadBenchArgs {
    /// Masters in the group.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Agent processes (sleep executor).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub agents: u64,
    /// What each agent offers.
    #[arg(
        long,
        default_value = "cpus=8,mem_mib=8192",
        value_name = "KIND=AMOUNT,..."
    )]
    pub agent_resources: String,
    /// Well-behaved frameworks.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub frameworks: u64,
    /// What each well-behaved task needs.
    #[arg(
        long,
        default_value = "cpus=0.5,mem_mib=64",
        value_name = "KIND=AMOUNT,..."
    )]
    pub task_resources: fullerene_proto::ResourceVec,
    /// How long each well-behaved task sleeps, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub task_ms: u64,
    /// Seconds the well-behaved frameworks run alone (the baseline).
    #[arg(long, value_name = "SECS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_secs: u64,
    /// Seconds they run beside the hostile clients.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_secs: u64,
    /// Hostile clients of each kind.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub hostile: u64,
    /// Only these kinds of hostile client (default: every kind), to tell which one hurts.
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    pub kinds: Vec<fullerene_chaos::load::HostileKind>,
    /// Connections each connection-flooding client opens.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// Keep the cluster's certificates, data and logs in this directory (default: a temporary
    /// one, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub(crate) fn run(args: LoadBenchArgs, json: &JsonOutput) -> Result<()> {
    let binary = std::env::current_exe().context("cannot find this executable")?;
    let resources: fullerene_proto::ResourceVec = args
        .agent_resources
        .parse()
        .with_context(|| format!("--agent-resources {:?}", args.agent_resources))?;
    if !args.task_resources.fits_in(&resources) {
        bail!(
            "--task-resources {} does not fit in --agent-resources {resources}",
            args.task_resources
        );
    }
    let config = LoadConfig {
        masters: args.masters,
        agents: args.agents,
        agent_resources: args.agent_resources,
        frameworks: args.frameworks,
        task: args.task_resources,
        task_ms: args.task_ms,
        idle: Duration::from_secs(args.idle_secs),
        loaded: Duration::from_secs(args.load_secs),
        hostile_per_kind: args.hostile,
        kinds: if args.kinds.is_empty() {
            fullerene_chaos::load::HostileKind::ALL.to_vec()
        } else {
            args.kinds
        },
        connections: usize::try_from(args.connections).context("--connections")?,
        dir: args.dir,
    };
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(Duration::from_millis(200));
    let report = fullerene_chaos::load::run(binary, &config, &|what| {
        spinner.set_message(what.to_string());
    });
    spinner.finish_and_clear();
    let report = report?;
    json.emit(&report, || render_load(&report))?;
    if !report.held() {
        bail!("the cluster did not hold under load (see the report)");
    }
    Ok(())
}

fn render_load(report: &LoadReport) -> String {
    let mut phases = table(&[
        "phase",
        "secs",
        "offers",
        "offer latency p50",
        "p99",
        "max",
        "tasks finished",
        "starved frameworks",
    ]);
    for (name, phase) in [("idle", &report.idle), ("under load", &report.loaded)] {
        phases.add_row(vec![
            name.to_string(),
            format!("{:.1}", phase.secs),
            phase.offers.to_string(),
            format!("{:.0} ms", phase.offer_latency_p50_ms),
            format!("{:.0} ms", phase.offer_latency_p99_ms),
            format!("{:.0} ms", phase.offer_latency_max_ms),
            phase.tasks_finished.to_string(),
            phase.frameworks_starved.to_string(),
        ]);
    }
    let mut hostile = table(&["hostile client", "clients", "attempts", "answered with"]);
    for kind in &report.hostile {
        let outcomes: Vec<String> = kind
            .tally
            .outcomes
            .iter()
            .map(|(what, n)| format!("{n} × {what}"))
            .collect();
        hostile.add_row(vec![
            kind.kind.name().to_string(),
            kind.clients.to_string(),
            kind.tally.attempts.to_string(),
            outcomes.join("\n"),
        ]);
    }
    let exited = if report.exited.is_empty() {
        "no master or agent exited".to_string()
    } else {
        format!("EXITED: {}", report.exited.join("; "))
    };
    format!(
        "{} masters, {} agents, {} well-behaved frameworks\n{phases}\n\
         p99 offer latency under load / idle: {:.2}×\n{hostile}\n{exited}; Raft term {} → {}\n",
        report.masters,
        report.agents,
        report.frameworks,
        report.p99_ratio,
        report.terms.0,
        report.terms.1
    )
}
