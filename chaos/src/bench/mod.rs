//! The scale benchmarks of issue 16: `fullerene bench launch` ([`launch`]) and `fullerene
//! bench scale` ([`scale`]), and what both measure with: CPU time per process and per thread
//! group, resident memory, heap in use, the machine's load, and the masters' Prometheus
//! metrics ([`probe`]).
//!
//! Both run real `fullerene master` processes ([`LocalMasters`](crate::LocalMasters)) and put
//! the many clients (agents, frameworks) in the bench's own process, each kind in a tokio
//! runtime of its own whose threads are named, so that the CPU each kind spends is read from
//! `/proc` apart from the others and from the masters': the figure that says which part of the
//! system limits a rate.

pub mod framework;
pub mod launch;
pub mod probe;
pub mod scale;
pub mod sim_agent;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_client::OperatorClient;
use fullerene_proto::messages::{AgentState, ClusterStatus, OperatorRequest, OperatorResponse};
use fullerene_proto::resources::ResourceVec;
use fullerene_sim::metrics::percentile_nearest_rank;
use fullerene_transport::TransportConfig;
use serde::Serialize;

use crate::api::ApiClient;
use crate::cluster::{ClusterError, LocalMasters};

/// Why a benchmark could not run (what it measured, however poor, is its report).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The cluster could not be set up.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A runtime, a client or a file could not be set up.
    #[error("{0}")]
    Setup(String),
    /// The masters did not elect a leader, or the clients did not join in time.
    #[error("the cluster did not come up: {0}")]
    NotReady(String),
    /// Something the bench measures went wrong in a way that makes its figures meaningless.
    #[error("{0}")]
    Failed(String),
    /// Interrupted (ctrl-c): everything started was stopped.
    #[error("interrupted")]
    Interrupted,
}

/// What a bench tells its caller while it runs (a progress bar's position and message).
#[derive(Clone, Debug)]
pub struct Progress {
    /// What it is doing.
    pub phase: String,
    /// How far into the phase (same unit as `total`).
    pub done: u64,
    /// The phase's length (0 when unknown: a spinner).
    pub total: u64,
}

impl Progress {
    /// A phase of unknown length.
    pub fn phase(what: impl Into<String>) -> Progress {
        Progress {
            phase: what.into(),
            done: 0,
            total: 0,
        }
    }
}

/// p50, p99 and max of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// How many samples.
    pub samples: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank).
    pub p99_ms: f64,
    /// The largest.
    pub max_ms: f64,
}

impl Spread {
    /// The spread of `values_ms` (sorted here).
    pub fn of(mut values_ms: Vec<f64>) -> Spread {
        values_ms.sort_by(f64::total_cmp);
        Spread {
            samples: values_ms.len() as u64,
            p50_ms: percentile_nearest_rank(&values_ms, 50.0),
            p99_ms: percentile_nearest_rank(&values_ms, 99.0),
            max_ms: values_ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// `Err` unless a task needing `task` fits in an agent offering `agent`.
pub(crate) fn check_task_fits(task: &ResourceVec, agent: &ResourceVec) -> Result<(), BenchError> {
    if task.fits_in(agent) {
        Ok(())
    } else {
        Err(BenchError::Setup(format!(
            "a task ({task}) does not fit in an agent ({agent})"
        )))
    }
}

/// Milliseconds in `duration`, as a float.
pub(crate) fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Set by ctrl-c (SIGINT) while a bench runs: the bench stops what it started and returns
/// [`BenchError::Interrupted`]. The masters run in process groups of their own, so a
/// terminal's ctrl-c reaches only the bench, which kills them itself.
#[derive(Clone, Debug, Default)]
pub(crate) struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Listens for ctrl-c on the current tokio runtime.
    pub(crate) fn listen() -> Interrupt {
        let interrupt = Interrupt::default();
        let flag = Arc::clone(&interrupt.0);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                flag.store(true, Ordering::SeqCst);
            }
        });
        interrupt
    }

    /// Whether ctrl-c came.
    pub(crate) fn raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Err(Interrupted)` once ctrl-c came.
    pub(crate) fn check(&self) -> Result<(), BenchError> {
        if self.raised() {
            Err(BenchError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// Sleeps `span`, waking early (with `Err`) on ctrl-c.
    pub(crate) async fn sleep(&self, span: Duration) -> Result<(), BenchError> {
        let until = tokio::time::Instant::now() + span;
        while tokio::time::Instant::now() < until {
            self.check()?;
            let step = until
                .saturating_duration_since(tokio::time::Instant::now())
                .min(Duration::from_millis(100));
            tokio::time::sleep(step).await;
        }
        self.check()
    }
}

/// The masters' command-line flags: the agents' QUIC keep-alive and idle timeout (QUIC keeps
/// the smaller idle timeout of the two sides, and a master's keep-alives to thousands of
/// agents are thousands of packets each interval) unless `given` sets QUIC flags itself, then
/// `given`.
pub fn master_flags(agents: &TransportConfig, given: &[String]) -> Vec<String> {
    let mut flags = Vec::new();
    if !given.iter().any(|flag| flag.starts_with("--quic-")) {
        flags.extend([
            format!(
                "--quic-keep-alive-ms={}",
                agents.keep_alive_interval.as_millis()
            ),
            format!("--quic-idle-timeout-ms={}", agents.idle_timeout.as_millis()),
        ]);
    }
    flags.extend(given.iter().cloned());
    flags
}

/// Starts `masters` masters (with certificates for `clients` agents and as many frameworks)
/// with `extra_args` on their command lines. Each runs in a process group of its own, so that
/// a terminal's ctrl-c reaches the bench alone, which stops them; and each dies with the
/// thread that started it, should the bench be killed outright.
pub(crate) fn start_masters(
    binary: PathBuf,
    masters: u64,
    clients: u64,
    extra_args: &[String],
    dir: Option<PathBuf>,
) -> Result<LocalMasters, BenchError> {
    let mut cluster = LocalMasters::prepare(binary, masters, masters, clients, dir)?;
    cluster.own_process_group = true;
    cluster.die_with_parent = true;
    cluster.extra_args = extra_args.to_vec();
    cluster.start_founders()?;
    Ok(cluster)
}

/// A multi-threaded runtime whose `threads` workers are named `name` (the CPU it uses is read
/// by that name); with `log`, whatever its tasks log at `warn` and above goes to that file
/// rather than to the terminal (thousands of agents each warn that their tasks are not
/// isolated).
pub(crate) fn runtime(
    name: &str,
    threads: usize,
    log: Option<&Path>,
) -> Result<tokio::runtime::Runtime, BenchError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all();
    if let Some(path) = log {
        let file = std::fs::File::create(path)
            .map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))?;
        let subscriber = tracing_subscriber::fmt()
            .with_writer(Arc::new(file))
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        let dispatch = tracing::Dispatch::new(subscriber);
        builder.on_thread_start(move || {
            // Kept for the thread's life: the runtime's threads log here, and only they do.
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        });
    }
    builder
        .build()
        .map_err(|e| BenchError::Setup(format!("cannot start the {name} runtime: {e}")))
}

/// The leader's view of the group, if a leader answers.
pub(crate) async fn cluster_status(operator: &mut OperatorClient) -> Option<ClusterStatus> {
    match operator.request(&OperatorRequest::ClusterStatus).await {
        Ok(OperatorResponse::ClusterStatus(status)) => Some(status),
        _ => None,
    }
}

/// Waits (up to a minute) until a leader answers.
pub(crate) async fn wait_for_leader(
    operator: &mut OperatorClient,
    interrupt: &Interrupt,
) -> Result<ClusterStatus, BenchError> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        interrupt.check()?;
        if let Some(status) = cluster_status(operator).await {
            if status.leader.is_some() {
                return Ok(status);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(BenchError::NotReady(
        "no leader within 60 s (see the masters' logs)".to_string(),
    ))
}

/// Waits (up to a minute) until a leader answers and every one of `members` masters is within
/// 64 entries of its log (a restarted master has caught up).
pub(crate) async fn wait_for_healthy(
    operator: &mut OperatorClient,
    members: usize,
    interrupt: &Interrupt,
) -> Result<ClusterStatus, BenchError> {
    wait_for_healthy_within(operator, members, Duration::from_secs(60), || {
        interrupt.check()
    })
    .await
}

/// Waits up to `within` until a leader answers and every one of `members` masters is within
/// 64 entries of its log (a restarted master has caught up); `go_on` is asked between polls
/// and ends the wait with its error.
pub async fn wait_for_healthy_within(
    operator: &mut OperatorClient,
    members: usize,
    within: Duration,
    mut go_on: impl FnMut() -> Result<(), BenchError>,
) -> Result<ClusterStatus, BenchError> {
    let started = Instant::now();
    let mut last = "no answer yet".to_string();
    while started.elapsed() < within {
        go_on()?;
        if let Some(status) = cluster_status(operator).await {
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(BenchError::NotReady(format!(
        "the group did not recover within {within:?}: {last}"
    )))
}

/// Waits until `agents` agents are active with a session on the leader: a minute, plus 20 ms
/// per agent.
pub(crate) async fn wait_for_agents(
    operator: &mut OperatorClient,
    agents: u64,
    interrupt: &Interrupt,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<(), BenchError> {
    let started = Instant::now();
    let within = Duration::from_secs(60) + Duration::from_millis(20) * agents as u32;
    let mut last = "no answer yet".to_string();
    while started.elapsed() < within {
        interrupt.check()?;
        match operator.list_agents().await {
            Ok(list) => {
                let joined = list
                    .iter()
                    .filter(|a| a.state == AgentState::Active && a.address.is_some())
                    .count() as u64;
                progress(&Progress {
                    phase: "agents registering".to_string(),
                    done: joined,
                    total: agents,
                });
                if joined >= agents {
                    return Ok(());
                }
                last = format!("{joined} of {agents} agents registered");
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(BenchError::NotReady(format!(
        "agents did not register within {within:?}: {last}"
    )))
}

/// The Prometheus text of the master whose HTTP API is at `addr`, if it answers.
pub(crate) async fn fetch_metrics(api: &ApiClient, addr: Option<SocketAddr>) -> Option<String> {
    let addr = addr?;
    let api = api.clone();
    let answer = tokio::task::spawn_blocking(move || api.get(addr, "/metrics"))
        .await
        .ok()?
        .ok()?;
    (answer.code == 200).then_some(answer.body)
}

/// The running masters' processes, named `master-N` (`master-N (leader)` for `leader`).
pub(crate) fn master_processes(masters: &LocalMasters, leader: Option<u64>) -> Vec<(String, u32)> {
    masters
        .addrs
        .keys()
        .filter_map(|id| {
            let pid = masters.master_pid(*id)?;
            let name = if Some(*id) == leader {
                format!("master-{id} (leader)")
            } else {
                format!("master-{id}")
            };
            Some((name, pid))
        })
        .collect()
}

/// The masters and agents that exited by themselves, with their status and log.
pub(crate) fn exited(masters: &mut LocalMasters) -> Vec<String> {
    masters
        .reap_exited()
        .into_iter()
        .map(|e| format!("{} exited ({}); log {}", e.name, e.status, e.log.display()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masters_get_the_agents_quic_timing_unless_told_otherwise() {
        let agents = TransportConfig {
            keep_alive_interval: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(5),
            ..TransportConfig::default()
        };
        assert_eq!(
            master_flags(&agents, &["--allocator-shards=2".to_string()]),
            [
                "--quic-keep-alive-ms=1000",
                "--quic-idle-timeout-ms=5000",
                "--allocator-shards=2"
            ]
        );
        assert_eq!(
            master_flags(&agents, &["--quic-idle-timeout-ms=800".to_string()]),
            ["--quic-idle-timeout-ms=800"]
        );
    }

    #[test]
    fn a_spread_takes_nearest_rank_percentiles() {
        let spread = Spread::of((1..=100).rev().map(f64::from).collect());
        assert_eq!(spread.samples, 100);
        assert_eq!(spread.p50_ms, 50.0);
        assert_eq!(spread.p99_ms, 99.0);
        assert_eq!(spread.max_ms, 100.0);
        assert_eq!(Spread::of(Vec::new()), Spread::default());
    }
}
