//! `fullerene bench launch` (issue 16, item 4): end-to-end task launches per second through a
//! replicated master group.
//!
//! Three `fullerene master` processes (real Raft on RocksDB) on loopback; in the bench's own
//! process, many real agent shells ([`fullerene_agent::run`]: the agent core, its checkpoint
//! with its fsyncs, the `sleep` executor, over mutual-TLS QUIC with a certificate each) in one
//! tokio runtime, and many SDK frameworks ([`BenchFramework`]) in another. Each framework
//! fills every offer with as many tasks as fit; each task is timed from the moment its
//! framework accepted the offer to the moment its `RUNNING` update reached the framework, which
//! is everything a launch goes through: the accept's validation and its Raft commit on the
//! masters, the launch frame to the agent, the agent's checkpoint write and fsync, the executor,
//! the RUNNING update's checkpoint, its commit on the masters and its forwarding.
//!
//! After a warm-up, the bench counts over a measured window: tasks accepted, RUNNING updates
//! received (each is one launch completed end to end), FINISHED updates, refused tasks, and the
//! accept-to-RUNNING latency; and it reads the CPU each part used over that window (each
//! master, the agents' runtime, the frameworks' runtime, the whole machine), which says which
//! part limits the rate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_agent::isolation::IsolationConfig;
use fullerene_agent::AgentConfig;
use fullerene_proto::resources::{ResourceKind, ResourceVec};
use fullerene_transport::{Role, TransportConfig};
use serde::Serialize;
use tokio::sync::watch;

use super::framework::{FrameworkLog, FrameworkPlan, Frameworks};
use super::probe::{self, CpuReading, CpuShare};
use super::{BenchError, Interrupt, Progress, Spread};
use crate::cluster::LocalMasters;

/// What to run.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    /// Masters in the group.
    pub masters: u64,
    /// Agent shells (all in the bench's process).
    pub agents: u64,
    /// What each agent offers.
    pub agent_resources: ResourceVec,
    /// Worker threads of the agents' runtime (an agent's checkpoint fsync blocks its thread).
    pub agent_threads: usize,
    /// Frameworks (SDK drivers, each with a certificate and a principal of its own).
    pub frameworks: u64,
    /// What each task needs.
    pub task: ResourceVec,
    /// How long each task sleeps.
    pub task_ms: u64,
    /// Load before the measured window.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
    /// The agents' QUIC settings (keep-alive and idle timeout).
    pub agent_transport: TransportConfig,
    /// Flags added to every master's command line (the agents' QUIC keep-alive and idle
    /// timeout come first, unless these set `--quic-` flags).
    pub master_args: Vec<String>,
    /// Where the agents' work directories (and so their checkpoints) go: a directory made in
    /// here and removed at the end (default: the cluster's directory). On a tmpfs such as
    /// `/dev/shm`, the agents' fsyncs cost nothing: that is how their share is measured.
    pub agent_work_root: Option<PathBuf>,
    /// Keep the cluster's certificates, data and logs here (default: a temporary directory).
    pub dir: Option<PathBuf>,
}

impl Default for LaunchConfig {
    fn default() -> LaunchConfig {
        LaunchConfig {
            masters: 3,
            agents: 1_000,
            agent_resources: ResourceVec::from_pairs(&[
                (ResourceKind::Cpus, 8.0),
                (ResourceKind::MemMib, 8_192.0),
            ]),
            agent_threads: 4,
            frameworks: 32,
            task: ResourceVec::from_pairs(&[
                (ResourceKind::Cpus, 0.1),
                (ResourceKind::MemMib, 32.0),
            ]),
            task_ms: 1_000,
            warmup: Duration::from_secs(10),
            duration: Duration::from_secs(30),
            agent_transport: relaxed_transport(),
            master_args: Vec::new(),
            agent_work_root: None,
            dir: None,
        }
    }
}

/// QUIC settings for thousands of clients on one machine: a keep-alive every second and a
/// connection given up after 5 s of silence (agents heartbeat every second anyway). The
/// defaults (100 ms, 500 ms) cost every idle connection ten packets a second each way.
pub fn relaxed_transport() -> TransportConfig {
    TransportConfig {
        keep_alive_interval: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(5),
        ..TransportConfig::default()
    }
}

/// What `fullerene bench launch` prints.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchReport {
    /// Masters in the group.
    pub masters: u64,
    /// Agent shells.
    pub agents: u64,
    /// Frameworks.
    pub frameworks: u64,
    /// What each agent offers.
    pub agent_resources: String,
    /// What each task needs.
    pub task: String,
    /// How long each task sleeps.
    pub task_ms: u64,
    /// Where the agents' checkpoints were written.
    pub agent_work_root: String,
    /// The measured window's length.
    pub measured_secs: f64,
    /// Tasks the frameworks put in accepts during the window.
    pub accepted: u64,
    /// Tasks of accepts the masters refused during the window.
    pub refused: u64,
    /// Of those, the tasks refused because their framework's principal had spent its call
    /// budget (the masters' `--calls-per-second`).
    pub rate_limited: u64,
    /// RUNNING updates that reached the frameworks during the window: launches completed end
    /// to end.
    pub running: u64,
    /// FINISHED updates during the window.
    pub finished: u64,
    /// Updates of other terminal states (FAILED, KILLED, LOST) during the window.
    pub failed: u64,
    /// Offers the frameworks received during the window.
    pub offers: u64,
    /// `accepted` per second.
    pub accepted_per_sec: f64,
    /// Tasks whose launch the leader committed, per second (its
    /// `fullerene_master_tasks_launched_total`; `None` when it does not export it).
    pub committed_per_sec: Option<f64>,
    /// `running` per second: the end-to-end launch rate.
    pub launches_per_sec: f64,
    /// `finished` per second.
    pub finished_per_sec: f64,
    /// `offers` per second.
    pub offers_per_sec: f64,
    /// From the framework's accept to its RUNNING update, for the RUNNING updates of the
    /// window.
    pub latency: Spread,
    /// CPU used over the window, in cores: each master (`master-N`, the leader marked), the
    /// bench's thread groups (`bench/bench-agents`, `bench/bench-fw`, ...), the machine.
    pub cpu: Vec<CpuShare>,
    /// The machine's load averages (1, 5, 15 min) before the cluster started and at the end.
    pub load_before: Option<[f64; 3]>,
    /// At the end.
    pub load_after: Option<[f64; 3]>,
    /// The leader during the window, and the Raft term at its start and end (a change: an
    /// election happened under load).
    pub leader: Option<u64>,
    /// Raft terms at the window's start and end.
    pub terms: (u64, u64),
    /// Masters that exited during the run, with their status and log.
    pub exited: Vec<String>,
}

/// Runs the bench with `binary` as `fullerene`; `progress` hears what it is doing.
pub fn run(
    binary: PathBuf,
    config: &LaunchConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<LaunchReport, BenchError> {
    super::check_task_fits(&config.task, &config.agent_resources)?;
    let load_before = probe::load_average();
    progress(&Progress::phase(format!(
        "certificates for {} agents and {} frameworks",
        config.agents, config.frameworks
    )));
    let mut masters = super::start_masters(
        binary,
        config.masters,
        config.agents.max(config.frameworks),
        &super::master_flags(&config.agent_transport, &config.master_args),
        config.dir.clone(),
    )?;
    let work_root = match &config.agent_work_root {
        Some(root) => tempfile::Builder::new()
            .prefix("fullerene-bench-agents-")
            .tempdir_in(root)
            .map_err(|e| BenchError::Setup(format!("a directory in {}: {e}", root.display())))?,
        None => tempfile::Builder::new()
            .prefix("agents-")
            .tempdir_in(masters.dir())
            .map_err(|e| BenchError::Setup(format!("the agents' directory: {e}")))?,
    };
    let control = super::runtime("bench-main", 1, None)?;
    let agents_runtime = super::runtime(
        "bench-agents",
        config.agent_threads,
        Some(&masters.dir().join("agents.log")),
    )?;
    let frameworks_runtime = super::runtime("bench-fw", 1, None)?;
    let run = Run {
        config,
        masters: &mut masters,
        work_root: work_root.path().to_path_buf(),
        agents_runtime: &agents_runtime,
        frameworks_runtime: &frameworks_runtime,
        progress,
    };
    let result = control.block_on(run.drive());
    frameworks_runtime.shutdown_timeout(Duration::from_secs(5));
    agents_runtime.shutdown_timeout(Duration::from_secs(5));
    let mut report = result?;
    report.exited = super::exited(&mut masters);
    report.load_before = load_before;
    report.load_after = probe::load_average();
    report.agent_work_root = work_root.path().display().to_string();
    Ok(report)
}

struct Run<'a> {
    config: &'a LaunchConfig,
    masters: &'a mut LocalMasters,
    work_root: PathBuf,
    agents_runtime: &'a tokio::runtime::Runtime,
    frameworks_runtime: &'a tokio::runtime::Runtime,
    progress: &'a (dyn Fn(&Progress) + Sync),
}

impl Run<'_> {
    async fn drive(self) -> Result<LaunchReport, BenchError> {
        let config = self.config;
        let interrupt = Interrupt::listen();
        let all: Vec<u64> = self.masters.addrs.keys().copied().collect();
        let mut operator = self.masters.operator_client(&all, Duration::from_secs(5))?;
        (self.progress)(&Progress::phase("waiting for a leader"));
        super::wait_for_leader(&mut operator, &interrupt).await?;
        let addrs: Vec<SocketAddr> = self.masters.addrs.values().copied().collect();

        // The agents.
        let (stop_agents, agents_stopped) = watch::channel(false);
        let mut agents = Vec::new();
        for n in 1..=config.agents {
            interrupt.check()?;
            let tls = self.masters.tls_of(Role::Agent, n as usize)?;
            let mut agent = AgentConfig::new(
                addrs.clone(),
                self.work_root.join(format!("agent-{n}")),
                config.agent_resources,
            );
            agent.hostname = format!("bench-agent-{n}");
            agent.executors = [fullerene_agent::core::EXECUTOR_SLEEP.to_string()]
                .into_iter()
                .collect();
            agent.transport = config.agent_transport.clone();
            // Sleep tasks need neither limits nor users of their own: no cgroup is made and no
            // uid leased for thousands of agents.
            agent.cgroup_root = self.work_root.join("no-cgroups");
            agent.isolation = IsolationConfig {
                setpriv: self.work_root.join("no-setpriv"),
                lock_dir: self.work_root.join("task-ids"),
                ..IsolationConfig::default()
            };
            let mut stopped = agents_stopped.clone();
            agents.push(self.agents_runtime.spawn(async move {
                let shutdown = async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                fullerene_agent::run(agent, tls, shutdown).await
            }));
            // A few hundred handshakes at a time: the masters admit 256 at once.
            if n % 100 == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                (self.progress)(&Progress {
                    phase: "starting agents".to_string(),
                    done: n,
                    total: config.agents,
                });
            }
        }
        let outcome = self.measure(&mut operator, &interrupt).await;
        let _ = stop_agents.send(true);
        for agent in agents {
            match tokio::time::timeout(Duration::from_secs(10), agent).await {
                Ok(Ok(Ok(()))) | Err(_) => {}
                Ok(Ok(Err(error))) => {
                    if outcome.is_ok() {
                        return Err(BenchError::Failed(format!("an agent failed: {error}")));
                    }
                }
                Ok(Err(join)) => {
                    return Err(BenchError::Failed(format!("an agent task failed: {join}")))
                }
            }
        }
        outcome
    }

    async fn measure(
        &self,
        operator: &mut fullerene_client::OperatorClient,
        interrupt: &Interrupt,
    ) -> Result<LaunchReport, BenchError> {
        let config = self.config;
        super::wait_for_agents(operator, config.agents, interrupt, self.progress).await?;

        let frameworks = Frameworks::spawn(
            self.frameworks_runtime,
            self.masters,
            config.frameworks,
            &FrameworkPlan {
                prefix: "launch",
                task: config.task,
                task_ms: config.task_ms,
                tasks: None,
                refuse_ms: 0,
            },
        )?;
        let outcome = self.window(operator, &frameworks.logs, interrupt).await;
        frameworks.stop().await;
        outcome
    }

    /// The warm-up, then the measured window.
    async fn window(
        &self,
        operator: &mut fullerene_client::OperatorClient,
        logs: &[Arc<FrameworkLog>],
        interrupt: &Interrupt,
    ) -> Result<LaunchReport, BenchError> {
        let config = self.config;
        let warmup = config.warmup.as_secs().max(1);
        for second in 0..warmup {
            (self.progress)(&Progress {
                phase: format!("warm-up: {} launches/s", recent_rate(logs)),
                done: second,
                total: warmup,
            });
            interrupt.sleep(Duration::from_secs(1)).await?;
        }
        let status = super::cluster_status(operator).await;
        let leader = status
            .as_ref()
            .and_then(|s| s.leader.as_ref())
            .map(|l| l.id.0);
        let term_before = status.map_or(0, |s| s.term);
        let processes = super::master_processes(self.masters, leader);
        let api = self.masters.api_client()?;
        let leader_http = leader.and_then(|id| self.masters.http_addrs.get(&id).copied());
        let committed_before = committed(&api, leader_http).await;
        let counts_before = Counts::of(logs);
        let cpu_before = CpuReading::take(&processes);
        let from = Instant::now();
        let secs = config.duration.as_secs().max(1);
        for second in 0..secs {
            (self.progress)(&Progress {
                phase: format!("measuring: {} launches/s", recent_rate(logs)),
                done: second,
                total: secs,
            });
            interrupt.sleep(Duration::from_secs(1)).await?;
        }
        let to = Instant::now();
        let cpu = CpuReading::take(&processes).since(&cpu_before);
        let counts = Counts::of(logs).minus(&counts_before);
        let committed_after = committed(&api, leader_http).await;
        let term_after = super::cluster_status(operator).await.map_or(0, |s| s.term);
        let mut latencies = Vec::new();
        let mut running = 0u64;
        for log in logs {
            if let Ok(launches) = log.launches.lock() {
                for (at, latency) in launches.iter() {
                    if *at >= from && *at < to {
                        running += 1;
                        latencies.push(*latency);
                    }
                }
            }
        }
        let measured = to.duration_since(from).as_secs_f64();
        Ok(LaunchReport {
            masters: config.masters,
            agents: config.agents,
            frameworks: config.frameworks,
            agent_resources: config.agent_resources.to_string(),
            task: config.task.to_string(),
            task_ms: config.task_ms,
            agent_work_root: String::new(),
            measured_secs: measured,
            accepted: counts.accepted,
            refused: counts.refused,
            rate_limited: counts.rate_limited,
            running,
            finished: counts.finished,
            failed: counts.failed,
            offers: counts.offers,
            accepted_per_sec: counts.accepted as f64 / measured,
            committed_per_sec: committed_before
                .zip(committed_after)
                .map(|(before, after)| (after - before) / measured),
            launches_per_sec: running as f64 / measured,
            finished_per_sec: counts.finished as f64 / measured,
            offers_per_sec: counts.offers as f64 / measured,
            latency: Spread::of(latencies),
            cpu,
            load_before: None,
            load_after: None,
            leader,
            terms: (term_before, term_after),
            exited: Vec::new(),
        })
    }
}

/// The frameworks' counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    accepted: u64,
    refused: u64,
    rate_limited: u64,
    finished: u64,
    failed: u64,
    offers: u64,
}

impl Counts {
    fn of(logs: &[Arc<FrameworkLog>]) -> Counts {
        let mut counts = Counts::default();
        for log in logs {
            counts.accepted += log.accepted.load(Ordering::Relaxed);
            counts.refused += log.refused.load(Ordering::Relaxed);
            counts.rate_limited += log.rate_limited.load(Ordering::Relaxed);
            counts.finished += log.finished.load(Ordering::Relaxed);
            counts.failed += log.failed.load(Ordering::Relaxed);
            counts.offers += log.offers.load(Ordering::Relaxed);
        }
        counts
    }

    fn minus(self, earlier: &Counts) -> Counts {
        Counts {
            accepted: self.accepted - earlier.accepted,
            refused: self.refused - earlier.refused,
            rate_limited: self.rate_limited - earlier.rate_limited,
            finished: self.finished - earlier.finished,
            failed: self.failed - earlier.failed,
            offers: self.offers - earlier.offers,
        }
    }
}

/// The leader's count of tasks launched (committed), if it exports it.
async fn committed(api: &crate::api::ApiClient, leader_http: Option<SocketAddr>) -> Option<f64> {
    let text = super::fetch_metrics(api, leader_http).await?;
    probe::metric(&text, "fullerene_master_tasks_launched_total", "")
}

/// RUNNING updates received over the last second, for the progress line.
fn recent_rate(logs: &[Arc<FrameworkLog>]) -> u64 {
    let since = Instant::now() - Duration::from_secs(1);
    logs.iter()
        .map(|log| {
            log.launches.lock().map_or(0, |launches| {
                launches
                    .iter()
                    .rev()
                    .take_while(|(at, _)| *at >= since)
                    .count() as u64
            })
        })
        .sum()
}
