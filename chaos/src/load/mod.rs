//! The load test behind `fullerene bench load` (issue 14): real masters and agents on
//! loopback, well-behaved SDK frameworks that always want more short tasks, and, halfway
//! through, hostile clients of every [`HostileKind`]. It reports whether the well-behaved
//! frameworks kept receiving offers (offer latency with and without the hostile clients),
//! how the masters answered each hostile attempt, and whether any master or agent died.
//!
//! *Offer latency* here is how long a framework that wants resources waits between two
//! offers: a polite framework always has runnable tasks and answers every offer at once, so
//! every gap between its offers is time it spent waiting for the master. With the allocator's
//! one-second cycle an idle cluster shows gaps of about a cycle; a master slowed by hostile
//! clients shows longer ones.

pub mod hostile;
pub mod polite;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_client::OperatorClient;
use fullerene_proto::messages::{GroupPlacement, OperatorRequest, OperatorResponse};
use fullerene_proto::ResourceVec;
use fullerene_sdk::driver::{run_with_client, DriverConfig, RunOptions};
use fullerene_sim::metrics::percentile_nearest_rank;
use fullerene_transport::{Client, Role, TransportConfig};
use serde::Serialize;

use hostile::{HostileContext, Tally};
pub use hostile::{HostileKind, HostileTally};
use polite::{PoliteFramework, PoliteLog};

use crate::cluster::{ClusterError, LocalMasters};

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Masters in the group.
    pub masters: u64,
    /// Agent processes (each with `agent_resources` and the `sleep` executor).
    pub agents: u64,
    /// What each agent offers (`--resources` syntax).
    pub agent_resources: String,
    /// Well-behaved frameworks.
    pub frameworks: u64,
    /// What each of their tasks needs.
    pub task: ResourceVec,
    /// How long each of their tasks sleeps.
    pub task_ms: u64,
    /// How long the well-behaved frameworks run alone (the baseline).
    pub idle: Duration,
    /// How long they run with the hostile clients.
    pub loaded: Duration,
    /// Hostile clients of each kind (a connection flood is one client opening `connections`).
    pub hostile_per_kind: u64,
    /// The kinds of hostile client to run (to tell which hurts).
    pub kinds: Vec<HostileKind>,
    /// Connections a connection flood opens.
    pub connections: usize,
    /// Keep the cluster's files here (default: a temporary directory).
    pub dir: Option<PathBuf>,
}

impl Default for LoadConfig {
    fn default() -> LoadConfig {
        LoadConfig {
            masters: 3,
            agents: 4,
            agent_resources: "cpus=8,mem_mib=8192".to_string(),
            frameworks: 4,
            task: polite::default_task(),
            task_ms: 500,
            idle: Duration::from_secs(20),
            loaded: Duration::from_secs(30),
            hostile_per_kind: 2,
            kinds: HostileKind::ALL.to_vec(),
            connections: 256,
            dir: None,
        }
    }
}

/// Why the load test could not run (what it found is a [`LoadReport`], not an error).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The cluster could not be set up.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The async runtime or a client could not start.
    #[error("{0}")]
    Setup(String),
    /// The masters did not elect a leader, or agents did not register.
    #[error("the cluster did not come up: {0}")]
    NotReady(String),
}

/// Offers to the well-behaved frameworks over one phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseFigures {
    /// The phase's length.
    pub secs: f64,
    /// Offer batches received, over all well-behaved frameworks.
    pub offers: u64,
    /// Median wait between offers to a framework that wanted more, in milliseconds.
    pub offer_latency_p50_ms: f64,
    /// 99th percentile of that wait.
    pub offer_latency_p99_ms: f64,
    /// The longest wait.
    pub offer_latency_max_ms: f64,
    /// Well-behaved tasks that finished in the phase.
    pub tasks_finished: u64,
    /// Well-behaved frameworks that received no offer at all in the phase.
    pub frameworks_starved: u64,
}

/// One hostile kind's figures.
#[derive(Clone, Debug, Serialize)]
pub struct HostileFigures {
    /// The kind.
    pub kind: HostileKind,
    /// Clients of this kind.
    pub clients: u64,
    /// What they tried and how the masters answered.
    #[serde(flatten)]
    pub tally: HostileTally,
}

/// What `fullerene bench load` prints.
#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    /// Masters, agents, well-behaved frameworks.
    pub masters: u64,
    /// Agent processes.
    pub agents: u64,
    /// Well-behaved frameworks.
    pub frameworks: u64,
    /// Without the hostile clients.
    pub idle: PhaseFigures,
    /// With them.
    pub loaded: PhaseFigures,
    /// p99 offer latency under load over p99 idle.
    pub p99_ratio: f64,
    /// The hostile clients, by kind.
    pub hostile: Vec<HostileFigures>,
    /// Masters and agents that exited during the run, with their exit status and log.
    pub exited: Vec<String>,
    /// Raft term when the hostile clients started and when the run ended (a change means
    /// an election happened under load).
    pub terms: (u64, u64),
}

impl LoadReport {
    /// Whether the cluster held: no process died, no well-behaved framework starved, and no
    /// election under load.
    pub fn held(&self) -> bool {
        self.exited.is_empty()
            && self.loaded.frameworks_starved == 0
            && self.loaded.offers > 0
            && self.terms.0 == self.terms.1
    }
}

/// Runs the load test with `binary` as `fullerene`; `progress` hears what it is doing.
pub fn run(
    binary: PathBuf,
    config: &LoadConfig,
    progress: &dyn Fn(&str),
) -> Result<LoadReport, LoadError> {
    let framework_certs = config.frameworks + hostile_certs(config);
    let mut masters = LocalMasters::prepare(
        binary,
        config.masters,
        config.masters,
        config.agents.max(framework_certs),
        config.dir.clone(),
    )?;
    masters.die_with_parent = true;
    masters.start_founders()?;
    for n in 1..=config.agents {
        masters.spawn_agent(
            n,
            &[
                "--resources",
                &config.agent_resources,
                "--executors",
                "sleep",
            ],
        )?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| LoadError::Setup(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(drive(config, &mut masters, progress));
    runtime.shutdown_timeout(Duration::from_secs(5));
    let mut report = result?;
    report.exited = masters
        .reap_exited()
        .into_iter()
        .map(|e| format!("{} exited ({}); log {}", e.name, e.status, e.log.display()))
        .collect();
    Ok(report)
}

/// Framework certificates the hostile clients use: one per client.
fn hostile_certs(config: &LoadConfig) -> u64 {
    config.hostile_per_kind * config.kinds.len() as u64
}

async fn drive(
    config: &LoadConfig,
    masters: &mut LocalMasters,
    progress: &dyn Fn(&str),
) -> Result<LoadReport, LoadError> {
    progress("waiting for a leader and the agents");
    let all: Vec<u64> = masters.addrs.keys().copied().collect();
    let mut operator = masters.operator_client(&all, Duration::from_secs(5))?;
    wait_until_ready(&mut operator, config.agents as usize).await?;
    // Each well-behaved framework in a group of its own, as an operator would place tenants:
    // the deficit counters then share the cluster among them (in one group, the group's own
    // order would decide which of them runs).
    for n in 1..=config.frameworks {
        let request = OperatorRequest::SetGroup(GroupPlacement {
            group: format!("polite-{n}"),
            weight: None,
            principals: vec![format!("framework-{n}")],
        });
        match operator.request(&request).await {
            Ok(OperatorResponse::Done) => {}
            other => {
                return Err(LoadError::NotReady(format!(
                    "cannot place framework-{n} in its group: {other:?}"
                )))
            }
        }
    }
    let addrs: Vec<SocketAddr> = masters.addrs.values().copied().collect();

    let stop_polite = Arc::new(AtomicBool::new(false));
    let mut logs = Vec::new();
    let mut drivers = Vec::new();
    for n in 1..=config.frameworks {
        let tls = masters.tls_of(Role::Framework, n as usize)?;
        let client = Client::new(&tls, TransportConfig::default())
            .map_err(|e| LoadError::Setup(format!("framework {n}: {e}")))?;
        let log = Arc::new(PoliteLog::default());
        logs.push(Arc::clone(&log));
        let name = format!("polite-{n}");
        let scheduler = PoliteFramework::new(
            name.clone(),
            config.task,
            config.task_ms,
            log,
            Arc::clone(&stop_polite),
        );
        let mut driver = DriverConfig::new(addrs.clone(), name, String::new());
        driver.jitter_seed = n;
        drivers.push(tokio::spawn(async move {
            let result = run_with_client(&client, driver, RunOptions::default(), scheduler).await;
            client.close();
            result.map(|_| ())
        }));
    }

    progress(&format!(
        "{} well-behaved frameworks alone for {} s",
        config.frameworks,
        config.idle.as_secs()
    ));
    let idle_from = Instant::now();
    tokio::time::sleep(config.idle).await;
    let loaded_from = Instant::now();
    let term_before = term(&mut operator).await;

    progress(&format!(
        "with {} hostile clients of each kind for {} s",
        config.hostile_per_kind,
        config.loaded.as_secs()
    ));
    let stop_hostile = Arc::new(AtomicBool::new(false));
    // The hostile clients get a runtime of their own: in the well-behaved frameworks' runtime,
    // a flood that never waits would delay their drivers, and the bench would measure its own
    // clients rather than the masters.
    let hostile_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("hostile")
        .enable_all()
        .build()
        .map_err(|e| LoadError::Setup(format!("cannot start the hostile clients' runtime: {e}")))?;
    let mut tallies = Vec::new();
    let mut hostiles = Vec::new();
    let mut cert = config.frameworks;
    for &kind in &config.kinds {
        let tally = Tally::default();
        tallies.push((kind, tally.clone()));
        for n in 0..config.hostile_per_kind {
            cert += 1;
            let ctx = HostileContext {
                tls: masters.tls_of(Role::Framework, cert as usize)?,
                masters: addrs.clone(),
                stop: Arc::clone(&stop_hostile),
                connections: config.connections,
            };
            hostiles.push(hostile_runtime.spawn(hostile::run(
                kind,
                n as usize,
                ctx,
                tally.clone(),
            )));
        }
    }
    let finished_before: u64 = finished(&logs);
    tokio::time::sleep(config.loaded).await;
    let ended_at = Instant::now();
    let finished_after: u64 = finished(&logs);
    stop_hostile.store(true, Ordering::Relaxed);
    for task in hostiles {
        // A hostile client blocked on a master that never answers is not waited for.
        let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    }
    // Whatever is still blocked is dropped with its runtime (it cannot be joined from here).
    hostile_runtime.shutdown_background();
    let term_after = term(&mut operator).await;
    stop_polite.store(true, Ordering::Relaxed);
    for task in drivers {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }

    let idle = phase(&logs, idle_from, loaded_from, finished_before);
    let loaded = phase(
        &logs,
        loaded_from,
        ended_at,
        finished_after.saturating_sub(finished_before),
    );
    let p99_ratio = if idle.offer_latency_p99_ms > 0.0 {
        loaded.offer_latency_p99_ms / idle.offer_latency_p99_ms
    } else {
        0.0
    };
    Ok(LoadReport {
        masters: config.masters,
        agents: config.agents,
        frameworks: config.frameworks,
        idle,
        loaded,
        p99_ratio,
        hostile: tallies
            .into_iter()
            .map(|(kind, tally)| HostileFigures {
                kind,
                clients: config.hostile_per_kind,
                tally: tally.snapshot(),
            })
            .collect(),
        exited: Vec::new(),
        terms: (term_before, term_after),
    })
}

fn finished(logs: &[Arc<PoliteLog>]) -> u64 {
    logs.iter()
        .map(|log| log.finished.load(Ordering::Relaxed))
        .sum()
}

/// Offer figures of the well-behaved frameworks between `from` and `to`.
fn phase(logs: &[Arc<PoliteLog>], from: Instant, to: Instant, tasks_finished: u64) -> PhaseFigures {
    let mut gaps = Vec::new();
    let mut offers = 0u64;
    let mut starved = 0u64;
    for log in logs {
        let at = log.offers_at.lock().map(|a| a.clone()).unwrap_or_default();
        let within: Vec<Instant> = at.into_iter().filter(|t| *t >= from && *t < to).collect();
        if within.is_empty() {
            starved += 1;
        }
        offers += within.len() as u64;
        // The wait from the phase's start to the first offer counts too: a framework starved
        // from the start waited all that time.
        let mut previous = from;
        for t in within {
            gaps.push(t.duration_since(previous).as_secs_f64() * 1000.0);
            previous = t;
        }
        gaps.push(to.duration_since(previous).as_secs_f64() * 1000.0);
    }
    gaps.sort_by(f64::total_cmp);
    PhaseFigures {
        secs: to.duration_since(from).as_secs_f64(),
        offers,
        offer_latency_p50_ms: percentile_nearest_rank(&gaps, 50.0),
        offer_latency_p99_ms: percentile_nearest_rank(&gaps, 99.0),
        offer_latency_max_ms: gaps.last().copied().unwrap_or(0.0),
        tasks_finished,
        frameworks_starved: starved,
    }
}

async fn wait_until_ready(operator: &mut OperatorClient, agents: usize) -> Result<(), LoadError> {
    let started = Instant::now();
    let mut last = "no answer yet".to_string();
    while started.elapsed() < Duration::from_secs(60) {
        match operator.list_agents().await {
            Ok(list)
                if list
                    .iter()
                    .filter(|a| a.state == fullerene_proto::messages::AgentState::Active)
                    .count()
                    >= agents =>
            {
                return Ok(())
            }
            Ok(list) => last = format!("{} of {agents} agents registered", list.len()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(LoadError::NotReady(last))
}

async fn term(operator: &mut OperatorClient) -> u64 {
    match operator.request(&OperatorRequest::ClusterStatus).await {
        Ok(OperatorResponse::ClusterStatus(status)) => status.term,
        _ => 0,
    }
}
