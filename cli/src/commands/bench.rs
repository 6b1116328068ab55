//! `fullerene bench`: figures measured on real processes, for the issues' targets.
//!
//! `bench raft` starts three (by default) `fullerene master` processes on loopback (this very
//! binary), then measures what the replicated-master issue asks for: committed commands per
//! second under many concurrent clients (Raft batches their proposals into one synced write),
//! the commit latency each client sees (p50, p99), and, over repeated `kill -9`s of the
//! leader, the time until a new leader accepts a proposal (timed by a client that knows which
//! master was killed and polls the survivors every 5 ms, so the figure is the masters'
//! failover rather than a client's discovery of it).
//!
//! `bench load` runs [`fullerene_chaos::load`]: well-behaved frameworks on a real cluster,
//! then the same with hostile clients beside them (floods, oversized and garbage frames, slow
//! readers, a connection flood); it prints offer latency with and without them, how each
//! hostile attempt was answered, and whether any process died.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_chaos::load::{LoadConfig, LoadReport};
use fullerene_chaos::LocalMasters;
use fullerene_client::OperatorClient;
use fullerene_proto::messages::{ClusterStatus, OperatorRequest, OperatorResponse};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::output::{table, JsonOutput};

/// Benchmarks.
#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Three masters on loopback: commits per second, commit latency, and leader failover
    /// time over repeated kill -9s of the leader.
    Raft(RaftBenchArgs),
    /// Well-behaved frameworks beside hostile clients (floods, oversized and garbage frames,
    /// slow readers, a connection flood) on three masters and real agents: offer latency with
    /// and without them, how the masters answered each hostile attempt, and whether any
    /// process died. Exits with an error if the cluster did not hold.
    Load(LoadBenchArgs),
    /// End-to-end task launches per second through three masters, from many frameworks to
    /// thousands of real agent shells (sleep executor, real QUIC) in this process: launches/s,
    /// RUNNING updates/s, accept-to-RUNNING latency, and the CPU each part used.
    Launch(super::bench_scale::LaunchBenchArgs),
    /// A master group with many agents (simulated over real QUIC, or the core in-process with
    /// `--mode core`): allocation cycle time, offers/s, memory per agent and per task, and the
    /// time until offers flow again after kill -9s of the leader while every agent registers
    /// again.
    Scale(super::bench_scale::ScaleBenchArgs),
}

/// Flags of `fullerene bench load`.
#[derive(Args, Debug)]
pub(crate) struct LoadBenchArgs {
    /// Masters in the group.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Agent processes (sleep executor).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub agents: u64,
    /// What each agent offers.
    #[arg(
        long,
        default_value = "cpus=8,mem_mib=8192",
        value_name = "NAME=AMOUNT,..."
    )]
    pub agent_resources: String,
    /// Well-behaved frameworks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub frameworks: u64,
    /// What each well-behaved task needs.
    #[arg(
        long,
        default_value = "cpus=0.5,mem_mib=64",
        value_name = "NAME=AMOUNT,..."
    )]
    pub task: fullerene_proto::ResourceVec,
    /// How long each well-behaved task sleeps, in milliseconds.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub task_ms: u64,
    /// Seconds the well-behaved frameworks run alone (the baseline).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_secs: u64,
    /// Seconds they run beside the hostile clients.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_secs: u64,
    /// Hostile clients of each kind.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub hostile: u64,
    /// Only these kinds of hostile client (default: every kind), to tell which one hurts.
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    pub kinds: Vec<fullerene_chaos::load::HostileKind>,
    /// Connections each connection-flooding client opens.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// Keep the cluster's certificates, data and logs in this directory (default: a temporary
    /// one, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Flags of `fullerene bench raft`.
#[derive(Args, Debug)]
pub(crate) struct RaftBenchArgs {
    /// Masters in the group.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Concurrent clients, each with its own connection, sending one command at a time.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub clients: u64,
    /// Seconds of measured load (after the warm-up).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_secs: u64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2)]
    pub warmup_secs: u64,
    /// Leader kills to time (0 skips the failover part).
    #[arg(long, default_value_t = 20)]
    pub kills: u64,
    /// Raft tick of the masters, in milliseconds.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    pub tick_ms: u64,
    /// Election timeout of the masters, in ticks (randomised in [N, 2N)).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
    pub election_ticks: u64,
    /// Keep the masters' certificates, data and logs in this directory (default: a temporary
    /// directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The figures `bench raft` prints.
#[derive(Serialize, Debug)]
struct RaftBenchReport {
    masters: u64,
    clients: u64,
    measured_secs: f64,
    commits: u64,
    commits_per_sec: f64,
    commit_p50_ms: f64,
    commit_p99_ms: f64,
    commit_max_ms: f64,
    failed_requests: u64,
    kills: Vec<KillSample>,
    failover_p50_ms: Option<f64>,
    failover_p99_ms: Option<f64>,
    failover_max_ms: Option<f64>,
}

/// One leader kill.
#[derive(Serialize, Debug)]
struct KillSample {
    killed: u64,
    new_leader: Option<u64>,
    /// From the SIGKILL to the first proposal a new leader answered as committed.
    failover_ms: f64,
}

/// Runs a `bench` subcommand.
pub(crate) fn run(command: BenchCommand, json: &JsonOutput) -> Result<()> {
    match command {
        BenchCommand::Raft(args) => raft(args, json),
        BenchCommand::Load(args) => load(args, json),
        BenchCommand::Launch(args) => super::bench_scale::launch(args, json),
        BenchCommand::Scale(args) => super::bench_scale::scale(args, json),
    }
}

fn load(args: LoadBenchArgs, json: &JsonOutput) -> Result<()> {
    let binary = std::env::current_exe().context("cannot find this executable")?;
    let resources: fullerene_proto::ResourceVec = args
        .agent_resources
        .parse()
        .with_context(|| format!("--agent-resources {:?}", args.agent_resources))?;
    if !args.task.fits_in(&resources) {
        bail!(
            "--task {} does not fit in --agent-resources {resources}",
            args.task
        );
    }
    let config = LoadConfig {
        masters: args.masters,
        agents: args.agents,
        agent_resources: args.agent_resources,
        frameworks: args.frameworks,
        task: args.task,
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

fn raft(args: RaftBenchArgs, json: &JsonOutput) -> Result<()> {
    let binary = std::env::current_exe().context("cannot find this executable")?;
    let mut masters =
        LocalMasters::prepare(binary, args.masters, args.masters, 0, args.dir.clone())?;
    masters.extra_args = vec![
        "--tick-ms".to_string(),
        args.tick_ms.to_string(),
        "--election-ticks".to_string(),
        args.election_ticks.to_string(),
    ];
    masters.start_founders()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async { bench(&args, &mut masters).await });
    if result.is_err() {
        eprintln!("{}", masters.logs(20));
    }
    let report = result?;
    json.emit(&report, || render(&report))
}

async fn bench(args: &RaftBenchArgs, masters: &mut LocalMasters) -> Result<RaftBenchReport> {
    let all: Vec<u64> = masters.addrs.keys().copied().collect();
    let mut probe = masters.operator_client(&all, Duration::from_secs(30))?;
    wait_for_healthy(&mut probe, args.masters as usize, Duration::from_secs(60))
        .await
        .context("the masters did not elect a leader")?;

    // Throughput and latency under `clients` concurrent clients.
    let spinner = ProgressBar::new_spinner().with_message(format!(
        "{} clients for {} s (+{} s warm-up)",
        args.clients, args.duration_secs, args.warmup_secs
    ));
    spinner.enable_steady_tick(Duration::from_millis(200));
    let stop = Arc::new(AtomicBool::new(false));
    let measure_from = Instant::now() + Duration::from_secs(args.warmup_secs);
    let mut tasks = Vec::new();
    for client_id in 0..args.clients {
        let mut client = masters.operator_client(&all, Duration::from_secs(5))?;
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut failed = 0u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let request = OperatorRequest::SetGroupWeight {
                    group: format!("bench-{client_id}"),
                    weight: (n % 1000) as f64 + 1.0,
                };
                n += 1;
                let sent = Instant::now();
                let answer = client.request(&request).await;
                if sent < measure_from {
                    continue;
                }
                match answer {
                    Ok(OperatorResponse::Done) => latencies.push(sent.elapsed()),
                    _ => failed += 1,
                }
            }
            (latencies, failed)
        }));
    }
    tokio::time::sleep_until((measure_from + Duration::from_secs(args.duration_secs)).into()).await;
    stop.store(true, Ordering::Relaxed);
    let measured = measure_from.elapsed();
    let mut latencies = Vec::new();
    let mut failed_requests = 0;
    for task in tasks {
        let (mine, failed) = task.await.context("a client task failed")?;
        latencies.extend(mine);
        failed_requests += failed;
    }
    spinner.finish_and_clear();
    latencies.sort();
    let commits = latencies.len() as u64;

    // Leader kills.
    let bar = ProgressBar::new(args.kills).with_style(
        ProgressStyle::with_template("leader kills {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut kills = Vec::new();
    for round in 0..args.kills {
        let status = wait_for_healthy(&mut probe, args.masters as usize, Duration::from_secs(60))
            .await
            .with_context(|| format!("the group did not recover before kill {}", round + 1))?;
        let Some(leader) = status.leader.map(|l| l.id.0) else {
            bail!("no leader before kill {}", round + 1);
        };
        masters.kill(leader);
        let killed_at = Instant::now();
        let survivors: Vec<u64> = all.iter().copied().filter(|id| *id != leader).collect();
        // The client knows which master died, so it does not follow the survivors' stale
        // redirects to it: the figure is the masters' failover, not a client's discovery.
        let mut client = masters
            .operator_client(&survivors, Duration::from_secs(30))?
            .with_retry_pause(Duration::from_millis(5));
        client.avoid(masters.addrs[&leader], Duration::from_secs(60));
        let request = OperatorRequest::SetGroupWeight {
            group: "bench-failover".to_string(),
            weight: round as f64 + 1.0,
        };
        match client.request(&request).await {
            Ok(OperatorResponse::Done) => {}
            other => bail!(
                "no new leader took a proposal after kill {}: {other:?}",
                round + 1
            ),
        }
        let failover = killed_at.elapsed();
        let new_leader = client
            .last_master()
            .and_then(|addr| masters.addrs.iter().find(|(_, a)| **a == addr))
            .map(|(id, _)| *id);
        kills.push(KillSample {
            killed: leader,
            new_leader,
            failover_ms: millis(failover),
        });
        bar.set_message(format!("last {:.0} ms", millis(failover)));
        bar.inc(1);
        masters.spawn(leader, false)?;
    }
    bar.finish_and_clear();

    let mut failovers: Vec<f64> = kills.iter().map(|k| k.failover_ms).collect();
    failovers.sort_by(f64::total_cmp);
    Ok(RaftBenchReport {
        masters: args.masters,
        clients: args.clients,
        measured_secs: measured.as_secs_f64(),
        commits,
        commits_per_sec: commits as f64 / measured.as_secs_f64(),
        commit_p50_ms: percentile(&latencies, 0.50).map_or(0.0, millis),
        commit_p99_ms: percentile(&latencies, 0.99).map_or(0.0, millis),
        commit_max_ms: latencies.last().copied().map_or(0.0, millis),
        failed_requests,
        kills,
        failover_p50_ms: percentile(&failovers, 0.50),
        failover_p99_ms: percentile(&failovers, 0.99),
        failover_max_ms: failovers.last().copied(),
    })
}

/// Waits until a leader answers and every one of `members` masters is within a few entries
/// of its log (a restarted master has caught up).
async fn wait_for_healthy(
    client: &mut OperatorClient,
    members: usize,
    timeout: Duration,
) -> Result<ClusterStatus> {
    let started = Instant::now();
    let mut last = String::from("no answer yet");
    while started.elapsed() < timeout {
        match client.request(&OperatorRequest::ClusterStatus).await {
            Ok(OperatorResponse::ClusterStatus(status)) => {
                let caught_up = status.members.len() == members
                    && status.members.iter().all(|m| m.matched > 0 && m.lag <= 64);
                if status.leader.is_some() && caught_up {
                    return Ok(status);
                }
                last = format!(
                    "{} members, lags {:?}",
                    status.members.len(),
                    status.members.iter().map(|m| m.lag).collect::<Vec<_>>()
                );
            }
            Ok(other) => last = format!("{other:?}"),
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("not healthy within {timeout:?}: {last}")
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn render(report: &RaftBenchReport) -> String {
    let mut figures = table(&["figure", "value"]);
    let ms = |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.1} ms"));
    figures.add_row(vec![
        "masters / clients".to_string(),
        format!("{} / {}", report.masters, report.clients),
    ]);
    figures.add_row(vec![
        "committed commands/s".to_string(),
        format!("{:.0}", report.commits_per_sec),
    ]);
    figures.add_row(vec![
        "commits measured".to_string(),
        format!(
            "{} in {:.1} s ({} failed)",
            report.commits, report.measured_secs, report.failed_requests
        ),
    ]);
    figures.add_row(vec![
        "commit latency p50".to_string(),
        ms(Some(report.commit_p50_ms)),
    ]);
    figures.add_row(vec![
        "commit latency p99".to_string(),
        ms(Some(report.commit_p99_ms)),
    ]);
    figures.add_row(vec![
        "commit latency max".to_string(),
        ms(Some(report.commit_max_ms)),
    ]);
    figures.add_row(vec![
        "leader kills".to_string(),
        report.kills.len().to_string(),
    ]);
    figures.add_row(vec!["failover p50".to_string(), ms(report.failover_p50_ms)]);
    figures.add_row(vec!["failover p99".to_string(), ms(report.failover_p99_ms)]);
    figures.add_row(vec!["failover max".to_string(), ms(report.failover_max_ms)]);
    figures.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.50), Some(50));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 1.0), Some(100));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile::<u32>(&[], 0.5), None);
    }
}
