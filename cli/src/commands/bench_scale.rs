//! `fullerene bench launch` and `fullerene bench scale` (issue 16): the flags, the progress
//! bar and the tables; the benches themselves are [`fullerene_chaos::bench`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use fullerene_chaos::bench::launch::{LaunchConfig, LaunchReport};
use fullerene_chaos::bench::probe::CpuShare;
use fullerene_chaos::bench::scale::{ScaleConfig, ScaleMode, ScaleReport};
use fullerene_chaos::bench::{BenchError, Progress, Spread};
use fullerene_proto::ResourceVec;
use fullerene_transport::TransportConfig;
use indicatif::{ProgressBar, ProgressStyle};

use crate::output::{table, JsonOutput};

/// The agents' QUIC timing in both benches.
#[derive(Args, Debug, Clone)]
pub(crate) struct AgentQuicArgs {
    /// The agents' QUIC keep-alive, in milliseconds (the transport's default is 100: ten
    /// packets a second each way per idle agent).
    #[arg(long, value_name = "MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub agent_keep_alive_ms: u64,
    /// The agents' QUIC idle timeout, in milliseconds (default 500 in the transport).
    #[arg(long, value_name = "MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(2..))]
    pub agent_idle_timeout_ms: u64,
}

impl AgentQuicArgs {
    fn config(&self) -> Result<TransportConfig> {
        let config = TransportConfig {
            keep_alive_interval: Duration::from_millis(self.agent_keep_alive_ms),
            idle_timeout: Duration::from_millis(self.agent_idle_timeout_ms),
            ..TransportConfig::default()
        };
        config
            .validate()
            .context("invalid --agent-keep-alive-ms / --agent-idle-timeout-ms")?;
        Ok(config)
    }
}

/// Flags of `fullerene bench launch`.
#[derive(Args, Debug)]
pub(crate) struct LaunchBenchArgs {
    /// Masters in the group.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Agent shells, all in this process (each with its certificate, checkpoint and QUIC
    /// connection).
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub agents: u64,
    /// What each agent offers.
    #[arg(
        long,
        default_value = "cpus=8,mem_mib=8192",
        value_name = "KIND=AMOUNT,..."
    )]
    pub agent_resources: ResourceVec,
    /// Worker threads of the agents' runtime (a checkpoint fsync blocks one).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub agent_threads: u64,
    /// Where the agents' work directories (checkpoints) go; a tmpfs such as /dev/shm takes
    /// their fsyncs out of the figure (default: the cluster's directory).
    #[arg(long, value_name = "DIR")]
    pub agent_work_root: Option<PathBuf>,
    /// Frameworks (SDK drivers, a certificate each), all in this process.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub frameworks: u64,
    /// What each task needs.
    #[arg(
        long,
        default_value = "cpus=0.1,mem_mib=32",
        value_name = "KIND=AMOUNT,..."
    )]
    pub task_resources: ResourceVec,
    /// How long each task sleeps, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub task_ms: u64,
    /// Seconds of load before measuring.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub warmup_secs: u64,
    /// Seconds measured.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_secs: u64,
    #[command(flatten)]
    pub quic: AgentQuicArgs,
    /// A flag for every master, e.g. `--master-arg=--allocation-interval-ms=50` (repeat for
    /// more). The masters get the agents' QUIC keep-alive and idle timeout unless this sets
    /// them.
    #[arg(long = "master-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub master_args: Vec<String>,
    /// Keep the cluster's certificates, data and logs here (default: a temporary directory,
    /// removed at the end).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Which master `bench scale` runs.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum ScaleModeArg {
    /// Real master processes, agents over real QUIC.
    Quic,
    /// The master core in this process on in-memory storage (for sizes past the machine's
    /// sockets; no failover).
    Core,
}

/// Flags of `fullerene bench scale`.
#[derive(Args, Debug)]
pub(crate) struct ScaleBenchArgs {
    /// Which master runs.
    #[arg(long, value_enum, default_value_t = ScaleModeArg::Quic)]
    pub mode: ScaleModeArg,
    /// Masters in the group (QUIC mode).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Agents: simulated ones with a QUIC session and certificate each (QUIC mode), inputs
    /// of the core (core mode).
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub agents: u64,
    /// Frameworks.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub frameworks: u64,
    /// What each agent offers.
    #[arg(
        long,
        default_value = "cpus=16,mem_mib=65536",
        value_name = "KIND=AMOUNT,..."
    )]
    pub agent_resources: ResourceVec,
    /// Tasks launched and kept running (memory per tracked task).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub tasks: u64,
    /// What each task needs.
    #[arg(
        long,
        default_value = "cpus=0.1,mem_mib=32",
        value_name = "KIND=AMOUNT,..."
    )]
    pub task_resources: ResourceVec,
    /// How long a framework declining an offer refuses that agent, in milliseconds (QUIC
    /// mode; the frameworks decline every offer once their tasks run).
    #[arg(long, value_name = "MS", default_value_t = 1_000)]
    pub refuse_ms: u64,
    /// Seconds offers are counted (QUIC mode).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub offer_secs: u64,
    /// Leader kills to time (QUIC mode; 0 skips them).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub kills: u64,
    /// Allocation cycles timed (core mode).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub cycles: u64,
    /// Agent shards of the allocator (core mode; for the QUIC mode pass
    /// `--master-arg=--allocator-shards=N`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub allocator_shards: u64,
    /// Worker threads of the simulated agents' runtime.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub agent_threads: u64,
    #[command(flatten)]
    pub quic: AgentQuicArgs,
    /// A flag for every master (QUIC mode), e.g. `--master-arg=--allocator-shards=2`.
    #[arg(long = "master-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub master_args: Vec<String>,
    /// Keep the cluster's certificates, data and logs here (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// A progress bar fed by a bench's [`Progress`] reports.
fn progress_bar() -> (ProgressBar, impl Fn(&Progress) + Sync) {
    let bar = ProgressBar::new(0).with_style(style(false));
    bar.enable_steady_tick(Duration::from_millis(200));
    let shown = bar.clone();
    let update = move |progress: &Progress| {
        shown.set_style(style(progress.total > 0));
        shown.set_length(progress.total);
        shown.set_position(progress.done);
        shown.set_message(progress.phase.clone());
    };
    (bar, update)
}

fn style(bar: bool) -> ProgressStyle {
    let template = if bar {
        "{spinner} [{bar:30}] {pos}/{len} {msg}"
    } else {
        "{spinner} {msg}"
    };
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

fn bench_error(error: BenchError) -> anyhow::Error {
    match error {
        BenchError::Interrupted => anyhow::anyhow!("interrupted; everything started was stopped"),
        other => anyhow::Error::new(other),
    }
}

/// Runs `fullerene bench launch`.
pub(crate) fn launch(args: LaunchBenchArgs, json: &JsonOutput) -> Result<()> {
    let binary = std::env::current_exe().context("cannot find this executable")?;
    let config = LaunchConfig {
        masters: args.masters,
        agents: args.agents,
        agent_resources: args.agent_resources,
        agent_threads: usize::try_from(args.agent_threads).context("--agent-threads")?,
        frameworks: args.frameworks,
        task: args.task_resources,
        task_ms: args.task_ms,
        warmup: Duration::from_secs(args.warmup_secs),
        duration: Duration::from_secs(args.duration_secs),
        agent_transport: args.quic.config()?,
        master_args: args.master_args,
        agent_work_root: args.agent_work_root,
        dir: args.dir,
    };
    let (bar, update) = progress_bar();
    let report = fullerene_chaos::bench::launch::run(binary, &config, &update);
    bar.finish_and_clear();
    let report = report.map_err(bench_error)?;
    json.emit(&report, || render_launch(&report))?;
    if report.launches_per_sec <= 0.0 {
        bail!("no task reached RUNNING in the measured window (see the report)");
    }
    Ok(())
}

/// Runs `fullerene bench scale`.
pub(crate) fn scale(args: ScaleBenchArgs, json: &JsonOutput) -> Result<()> {
    let binary = std::env::current_exe().context("cannot find this executable")?;
    let config = ScaleConfig {
        mode: match args.mode {
            ScaleModeArg::Quic => ScaleMode::Quic,
            ScaleModeArg::Core => ScaleMode::Core,
        },
        masters: args.masters,
        agents: args.agents,
        frameworks: args.frameworks,
        agent_resources: args.agent_resources,
        tasks: args.tasks,
        task: args.task_resources,
        refuse_ms: args.refuse_ms,
        offer_window: Duration::from_secs(args.offer_secs),
        kills: args.kills,
        cycles: args.cycles,
        allocator_shards: usize::try_from(args.allocator_shards).context("--allocator-shards")?,
        agent_threads: usize::try_from(args.agent_threads).context("--agent-threads")?,
        agent_transport: args.quic.config()?,
        master_args: args.master_args,
        dir: args.dir,
    };
    let (bar, update) = progress_bar();
    let report = fullerene_chaos::bench::scale::run(binary, &config, &update);
    bar.finish_and_clear();
    let report = report.map_err(bench_error)?;
    json.emit(&report, || render_scale(&report))
}

fn ms(value: f64) -> String {
    format!("{value:.1} ms")
}

fn spread_row(spread: &Spread) -> String {
    format!(
        "p50 {} / p99 {} / max {} ({} samples)",
        ms(spread.p50_ms),
        ms(spread.p99_ms),
        ms(spread.max_ms),
        spread.samples
    )
}

fn load_row(before: Option<[f64; 3]>, after: Option<[f64; 3]>) -> String {
    let show = |load: Option<[f64; 3]>| {
        load.map_or("-".to_string(), |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"))
    };
    format!("before {} / after {}", show(before), show(after))
}

fn cpu_row(cpu: &[CpuShare]) -> String {
    cpu.iter()
        .map(|share| format!("{} {:.2}", share.who, share.cores))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line naming the processes that exited by themselves, if any did.
fn exited_note(exited: &[String]) -> String {
    if exited.is_empty() {
        String::new()
    } else {
        format!("\nEXITED: {}", exited.join("; "))
    }
}

fn render_launch(report: &LaunchReport) -> String {
    let mut figures = table(&["figure", "value"]);
    let rows = [
        (
            "masters / agents / frameworks",
            format!(
                "{} / {} / {}",
                report.masters, report.agents, report.frameworks
            ),
        ),
        (
            "agent / task",
            format!(
                "{} / {} for {} ms",
                report.agent_resources, report.task, report.task_ms
            ),
        ),
        ("agents' checkpoints in", report.agent_work_root.clone()),
        (
            "launches/s (RUNNING reached the framework)",
            format!("{:.0}", report.launches_per_sec),
        ),
        (
            "tasks accepted/s",
            format!("{:.0}", report.accepted_per_sec),
        ),
        (
            "launches committed/s (leader's metric)",
            report
                .committed_per_sec
                .map_or("-".to_string(), |rate| format!("{rate:.0}")),
        ),
        ("FINISHED/s", format!("{:.0}", report.finished_per_sec)),
        ("offers/s", format!("{:.0}", report.offers_per_sec)),
        ("accept → RUNNING", spread_row(&report.latency)),
        (
            "measured",
            format!(
                "{:.1} s: {} RUNNING, {} accepted, {} refused ({} rate limited), {} failed",
                report.measured_secs,
                report.running,
                report.accepted,
                report.refused,
                report.rate_limited,
                report.failed
            ),
        ),
        ("CPU (cores)", cpu_row(&report.cpu)),
        (
            "leader / Raft term",
            format!(
                "{} / {} → {}",
                report.leader.map_or("-".to_string(), |l| format!("{l}")),
                report.terms.0,
                report.terms.1
            ),
        ),
        (
            "load average (1, 5, 15 min)",
            load_row(report.load_before, report.load_after),
        ),
    ];
    for (name, value) in rows {
        figures.add_row(vec![name.to_string(), value]);
    }
    format!("{figures}{}", exited_note(&report.exited))
}

fn bytes(value: f64) -> String {
    if value.abs() >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", value / (1024.0 * 1024.0))
    } else if value.abs() >= 1024.0 {
        format!("{:.2} KiB", value / 1024.0)
    } else {
        format!("{value:.0} B")
    }
}

fn render_scale(report: &ScaleReport) -> String {
    let mode = match report.mode {
        ScaleMode::Quic => "QUIC: master processes, simulated agents over real QUIC",
        ScaleMode::Core => "core: the master core in-process on in-memory storage",
    };
    let mut figures = table(&["figure", "value"]);
    let allocation = &report.allocation;
    let optional = |v: Option<f64>| v.map_or("-".to_string(), ms);
    let mut rows = vec![
        ("mode", mode.to_string()),
        (
            "masters / agents / frameworks / tasks",
            format!(
                "{} / {} / {} / {}",
                report.masters, report.agents, report.frameworks, report.tasks
            ),
        ),
        (
            "agents registered in",
            format!("{:.1} s", report.registration_secs),
        ),
        (
            "allocation cycle",
            if allocation.cycles == 0 {
                allocation.source.clone()
            } else {
                format!(
                    "mean {} / p50 {} / p99 {} / max {} over {} cycles\n({})",
                    ms(allocation.mean_ms),
                    optional(allocation.p50_ms),
                    optional(allocation.p99_ms),
                    optional(allocation.max_ms),
                    allocation.cycles,
                    allocation.source
                )
            },
        ),
        (
            "offers/s",
            format!(
                "{:.0} ({} in {:.1} s)",
                report.offers_per_sec, report.offers, report.offer_secs
            ),
        ),
    ];
    for memory in &report.memory {
        rows.push((
            "memory",
            format!(
                "{}: {} per agent, {}{} per task (base {})",
                memory.what,
                bytes(memory.per_agent_bytes),
                memory
                    .per_framework_bytes
                    .map(|b| format!("{} per framework, ", bytes(b)))
                    .unwrap_or_default(),
                bytes(memory.per_task_bytes),
                bytes(memory.base_bytes as f64)
            ),
        ));
    }
    if let Some(failover) = &report.failover {
        rows.push((
            "kill -9 leader → offers again",
            format!(
                "{} ({} kills without offers within a minute)",
                spread_row(&failover.offers),
                failover.offers_missing
            ),
        ));
        rows.push((
            "kill -9 leader → every agent registered",
            spread_row(&failover.agents),
        ));
        let gaps: Vec<String> = failover
            .kills
            .iter()
            .map(|k| k.longest_offer_gap_ms.map_or("-".to_string(), ms))
            .collect();
        rows.push(("longest offer gap after each kill", gaps.join(", ")));
    }
    if !report.cpu.is_empty() {
        rows.push(("CPU while counting offers (cores)", cpu_row(&report.cpu)));
    }
    rows.push((
        "load average (1, 5, 15 min)",
        load_row(report.load_before, report.load_after),
    ));
    for (name, value) in rows {
        figures.add_row(vec![name.to_string(), value]);
    }
    format!("{figures}{}", exited_note(&report.exited))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_bytes_kib_and_mib() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(2048.0), "2.00 KiB");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
    }
}
