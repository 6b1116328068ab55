//! `fullerene bench scale` (issue 16, item 5): a master group with many agents and
//! frameworks: the allocation cycle's time, offers per second, the masters' memory per agent
//! and per tracked task, and how long after a kill -9 of the leader offers flow again while
//! every agent registers with the new leader at once.
//!
//! Two modes, and the report says which ran:
//!
//! * [`ScaleMode::Quic`]: three `fullerene master` processes (Raft on RocksDB), and in the
//!   bench's process `agents` [`SimAgent`]s, each a real mutual-TLS QUIC session with its own
//!   certificate driven by the real agent core, and `frameworks` SDK frameworks
//!   ([`BenchFramework`]) that launch `tasks` tasks (they never end: the tracked tasks), then
//!   keep wanting more and decline every offer for `refuse_ms`, so that offers keep flowing.
//!   Memory is each master's resident set size, read before and after the agents registered
//!   and before and after the tasks ran, divided; the follower's says what the replicated
//!   state costs, the leader's adds the sessions, the connections and the offers. The
//!   allocation cycle's time is the leader's `fullerene_master_allocation_cycle_seconds`
//!   (absent from masters that do not export it). Then `kills` times: kill -9 the leader, time
//!   until a framework is handed an offer again and until every agent registered again (their
//!   reconnects spread by the session's jittered backoff), restart the killed master.
//! * [`ScaleMode::Core`]: for sizes past what one machine's sockets hold, the master core
//!   ([`MasterCore`]) in this process on in-memory storage, one master, a virtual clock, every
//!   agent and framework an input: the allocation cycle is timed around
//!   [`MasterCore::tick`], memory is the heap this process holds (glibc's counters) before and
//!   after, also less what the in-memory Raft store holds that a master keeps in RocksDB on
//!   disk only (the snapshot; the log's newest entries a master caches in memory too), and
//!   the replicated state's own size is measured by decoding a copy of it. No failover here.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_master::core::{
    AgentRegistration, AgentTimeouts, CoreConfig, Input, MasterCore, Output, SessionId,
    Subscription,
};
use fullerene_master::offers::LEADER_WARMUP_MS;
use fullerene_master::raft_node::{NodeConfig, RaftNode};
use fullerene_master::state::{ClusterSettings, ClusterState};
use fullerene_master::storage::MemStorage;
use fullerene_proto::messages::{
    AgentState, CallOk, DemandSummary, FrameworkCall, FrameworkRequest, Leftover, MasterToAgent,
    MasterToFramework, PendingDemand, StatusAck, StatusUpdate, TaskSpec, TaskState,
    MAX_ACKS_PER_CALL,
};
use fullerene_proto::resources::{ResourceKind, ResourceVec, Resources};
use fullerene_proto::{AgentId, FrameworkId, Now, Time};
use fullerene_transport::{Client, Role, TransportConfig};
use serde::Serialize;
use tokio::sync::watch;

use super::framework::{copies_that_fit, sleep_task, FrameworkLog, FrameworkPlan, Frameworks};
use super::probe::{self, CpuReading, CpuShare};
use super::sim_agent::{SimAgent, SimAgentsLog};
use super::{millis, BenchError, Interrupt, Progress, Spread};
use crate::api::ApiClient;
use crate::cluster::LocalMasters;

/// Which master the bench runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleMode {
    /// Real master processes and agents over real QUIC.
    Quic,
    /// The master core in-process on in-memory storage (no network, no failover).
    Core,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct ScaleConfig {
    /// Which master.
    pub mode: ScaleMode,
    /// Masters in the group (QUIC mode; the core mode runs one).
    pub masters: u64,
    /// Agents.
    pub agents: u64,
    /// Frameworks.
    pub frameworks: u64,
    /// What each agent offers.
    pub agent_resources: ResourceVec,
    /// Tasks launched and kept running (the tracked tasks).
    pub tasks: u64,
    /// What each task needs.
    pub task: ResourceVec,
    /// How long a framework that declines an agent is not offered it again.
    pub refuse_ms: u64,
    /// How long offers are counted.
    pub offer_window: Duration,
    /// Leader kills to time (QUIC mode).
    pub kills: u64,
    /// Allocation cycles timed (core mode).
    pub cycles: u64,
    /// Agent shards of the allocator (core mode; pass `--allocator-shards` to the masters in
    /// `master_args` for the QUIC mode).
    pub allocator_shards: usize,
    /// Worker threads of the simulated agents' runtime.
    pub agent_threads: usize,
    /// The agents' QUIC settings; the masters are given the same keep-alive and idle timeout
    /// (QUIC keeps the smaller idle timeout of the two sides, and a master's keep-alives to
    /// ten thousand agents are ten thousand packets each interval).
    pub agent_transport: TransportConfig,
    /// Flags added to every master's command line (the agents' QUIC keep-alive and idle
    /// timeout come first, unless these set `--quic-` flags).
    pub master_args: Vec<String>,
    /// Keep the cluster's certificates, data and logs here (default: a temporary directory).
    pub dir: Option<PathBuf>,
}

impl Default for ScaleConfig {
    fn default() -> ScaleConfig {
        ScaleConfig {
            mode: ScaleMode::Quic,
            masters: 3,
            agents: 1_000,
            frameworks: 10,
            agent_resources: ResourceVec::from_pairs(&[
                (ResourceKind::Cpus, 16.0),
                (ResourceKind::MemMib, 65_536.0),
            ]),
            tasks: 10_000,
            task: ResourceVec::from_pairs(&[
                (ResourceKind::Cpus, 0.1),
                (ResourceKind::MemMib, 32.0),
            ]),
            refuse_ms: 1_000,
            offer_window: Duration::from_secs(10),
            kills: 5,
            cycles: 50,
            allocator_shards: 1,
            agent_threads: 2,
            agent_transport: super::launch::relaxed_transport(),
            master_args: Vec::new(),
            dir: None,
        }
    }
}

/// Memory per agent, per framework (core mode) and per tracked task, in bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemoryFigure {
    /// Whose memory: `leader RSS`, `follower RSS`, `core heap`, the core heap less what a
    /// master keeps on disk only, `replicated state`.
    pub what: String,
    /// Before any agent.
    pub base_bytes: u64,
    /// Growth per agent registered.
    pub per_agent_bytes: f64,
    /// Growth per framework subscribed, before any task (core mode; the QUIC mode's
    /// frameworks subscribe while their tasks launch, so their cost is in `per_task_bytes`).
    pub per_framework_bytes: Option<f64>,
    /// Growth per task launched and running, once the agents were there.
    pub per_task_bytes: f64,
}

/// Allocation cycles.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CycleFigures {
    /// Where the figures come from.
    pub source: String,
    /// Cycles counted.
    pub cycles: u64,
    /// Mean duration.
    pub mean_ms: f64,
    /// Median (core mode: over the timed cycles; QUIC mode: the leader's summary, which
    /// covers its last minute or so).
    pub p50_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// The longest.
    pub max_ms: Option<f64>,
}

/// One leader kill.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KillRound {
    /// The master killed.
    pub killed: u64,
    /// From the SIGKILL to the first offer a framework was handed.
    pub offers_ms: Option<f64>,
    /// From the SIGKILL until every agent had registered again.
    pub agents_ms: Option<f64>,
    /// The longest time without any offer reaching any framework, from the first offer after
    /// the kill until two seconds after the last agent registered (did the registrations stall
    /// the offers?).
    pub longest_offer_gap_ms: Option<f64>,
}

/// The leader kills.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FailoverFigures {
    /// Each kill.
    pub kills: Vec<KillRound>,
    /// Kill to offers flowing again.
    pub offers: Spread,
    /// Kill to every agent registered again.
    pub agents: Spread,
    /// Kills after which offers did not flow again within the round's minute.
    pub offers_missing: u64,
}

/// What `fullerene bench scale` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleReport {
    /// Which master ran.
    pub mode: ScaleMode,
    /// Masters.
    pub masters: u64,
    /// Agents.
    pub agents: u64,
    /// Frameworks.
    pub frameworks: u64,
    /// Tracked tasks running.
    pub tasks: u64,
    /// How long the agents took to register (QUIC: from the first connection to the last
    /// registration; core: to register them all through the core).
    pub registration_secs: f64,
    /// Memory per agent and per task.
    pub memory: Vec<MemoryFigure>,
    /// The allocation cycle.
    pub allocation: CycleFigures,
    /// Offers made per second while every framework declined everything.
    pub offers_per_sec: f64,
    /// Offers counted.
    pub offers: u64,
    /// Over how long.
    pub offer_secs: f64,
    /// CPU used while offers were counted, in cores (QUIC mode).
    pub cpu: Vec<CpuShare>,
    /// The leader kills (QUIC mode).
    pub failover: Option<FailoverFigures>,
    /// The machine's load averages before and after.
    pub load_before: Option<[f64; 3]>,
    /// After.
    pub load_after: Option<[f64; 3]>,
    /// Masters that exited by themselves.
    pub exited: Vec<String>,
}

/// Runs the bench with `binary` as `fullerene` (QUIC mode); `progress` hears what it does.
pub fn run(
    binary: PathBuf,
    config: &ScaleConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<ScaleReport, BenchError> {
    super::check_task_fits(&config.task, &config.agent_resources)?;
    let load_before = probe::load_average();
    let mut report = match config.mode {
        ScaleMode::Core => run_core(config, progress)?,
        ScaleMode::Quic => run_quic(binary, config, progress)?,
    };
    report.load_before = load_before;
    report.load_after = probe::load_average();
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// QUIC mode
// ---------------------------------------------------------------------------------------------

fn run_quic(
    binary: PathBuf,
    config: &ScaleConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<ScaleReport, BenchError> {
    // Every simulated agent holds a UDP socket.
    raise_open_files_limit(config.agents + 1_024)?;
    progress(&Progress::phase(format!(
        "certificates for {} agents and {} frameworks",
        config.agents, config.frameworks
    )));
    let master_args = super::master_flags(&config.agent_transport, &config.master_args);
    let mut masters = super::start_masters(
        binary,
        config.masters,
        config.agents.max(config.frameworks),
        &master_args,
        config.dir.clone(),
    )?;
    let control = super::runtime("bench-main", 1, None)?;
    let agents_runtime = super::runtime("bench-agents", config.agent_threads, None)?;
    let frameworks_runtime = super::runtime("bench-fw", 1, None)?;
    let api = masters.api_client()?;
    let quic = Quic {
        config,
        masters: &mut masters,
        api,
        agents_runtime: &agents_runtime,
        frameworks_runtime: &frameworks_runtime,
        progress,
        agents_log: Arc::new(SimAgentsLog::default()),
    };
    let result = control.block_on(quic.drive());
    frameworks_runtime.shutdown_timeout(Duration::from_secs(5));
    agents_runtime.shutdown_timeout(Duration::from_secs(5));
    let mut report = result?;
    report.exited = super::exited(&mut masters);
    Ok(report)
}

/// Raises this process's soft limit on open files to at least `wanted` (within the hard one).
fn raise_open_files_limit(wanted: u64) -> Result<(), BenchError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Ok(());
        }
        if limit.rlim_cur >= wanted {
            return Ok(());
        }
        if limit.rlim_max < wanted {
            return Err(BenchError::Setup(format!(
                "{wanted} open files are needed (a socket per agent) and the hard limit is {}: \
                 raise it (ulimit -Hn) or run fewer agents",
                limit.rlim_max
            )));
        }
        limit.rlim_cur = wanted;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    Ok(())
}

struct Quic<'a> {
    config: &'a ScaleConfig,
    masters: &'a mut LocalMasters,
    api: ApiClient,
    agents_runtime: &'a tokio::runtime::Runtime,
    frameworks_runtime: &'a tokio::runtime::Runtime,
    progress: &'a (dyn Fn(&Progress) + Sync),
    agents_log: Arc<SimAgentsLog>,
}

/// The resident set size of each master, by id.
fn rss_by_master(masters: &LocalMasters) -> BTreeMap<u64, u64> {
    masters
        .addrs
        .keys()
        .filter_map(|id| Some((*id, probe::resident_bytes(masters.master_pid(*id)?)?)))
        .collect()
}

/// How long the masters are left alone before their memory is read, so that what a burst
/// allocated and freed is settled.
const SETTLE: Duration = Duration::from_secs(3);

impl Quic<'_> {
    async fn drive(mut self) -> Result<ScaleReport, BenchError> {
        let config = self.config;
        let interrupt = Interrupt::listen();
        let all: Vec<u64> = self.masters.addrs.keys().copied().collect();
        let mut operator = self.masters.operator_client(&all, Duration::from_secs(5))?;
        (self.progress)(&Progress::phase("waiting for a leader"));
        super::wait_for_leader(&mut operator, &interrupt).await?;
        interrupt.sleep(SETTLE).await?;
        let rss_empty = rss_by_master(self.masters);
        let addrs: Vec<SocketAddr> = self.masters.addrs.values().copied().collect();

        let (stop_agents, agents_stopped) = watch::channel(false);
        let mut agents = Vec::new();
        let registering = Instant::now();
        for index in 0..config.agents as usize {
            interrupt.check()?;
            let tls = self.masters.tls_of(Role::Agent, index + 1)?;
            let client = Client::new(&tls, config.agent_transport.clone())
                .map_err(|e| BenchError::Setup(format!("agent {}: {e}", index + 1)))?;
            let agent = SimAgent {
                index,
                client: Arc::new(client),
                masters: addrs.clone(),
                resources: config.agent_resources,
                log: Arc::clone(&self.agents_log),
            };
            agents.push(self.agents_runtime.spawn(agent.run(agents_stopped.clone())));
            if (index + 1) % 200 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                (self.progress)(&Progress {
                    phase: "starting agents".to_string(),
                    done: index as u64 + 1,
                    total: config.agents,
                });
            }
        }
        let outcome = self
            .with_agents(&mut operator, registering, rss_empty, &interrupt)
            .await;
        let _ = stop_agents.send(true);
        for agent in agents {
            let _ = tokio::time::timeout(Duration::from_secs(5), agent).await;
        }
        outcome
    }

    async fn with_agents(
        &mut self,
        operator: &mut fullerene_client::OperatorClient,
        registering: Instant,
        rss_empty: BTreeMap<u64, u64>,
        interrupt: &Interrupt,
    ) -> Result<ScaleReport, BenchError> {
        let config = self.config;
        let agents = config.agents as usize;
        let within = Duration::from_secs(60) + Duration::from_millis(20) * agents as u32;
        let registered_at = loop {
            interrupt.check()?;
            if let Some(at) = self.agents_log.all_joined_after(agents, registering) {
                break at;
            }
            if registering.elapsed() > within {
                return Err(BenchError::NotReady(format!(
                    "{} of {agents} agents registered within {within:?}",
                    distinct_joins(&self.agents_log, agents)
                )));
            }
            (self.progress)(&Progress {
                phase: "agents registering".to_string(),
                done: distinct_joins(&self.agents_log, agents) as u64,
                total: config.agents,
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let registration_secs = registered_at.duration_since(registering).as_secs_f64();
        interrupt.sleep(SETTLE).await?;
        let rss_agents = rss_by_master(self.masters);

        // The frameworks launch the tracked tasks, then decline whatever they are offered.
        let frameworks = Frameworks::spawn(
            self.frameworks_runtime,
            self.masters,
            config.frameworks,
            &FrameworkPlan {
                prefix: "scale",
                task: config.task,
                task_ms: TRACKED_TASK_MS,
                tasks: Some(config.tasks),
                refuse_ms: config.refuse_ms,
            },
        )?;
        let outcome = self
            .with_frameworks(
                operator,
                &frameworks,
                registration_secs,
                [rss_empty, rss_agents],
                interrupt,
            )
            .await;
        frameworks.stop().await;
        outcome
    }

    async fn with_frameworks(
        &mut self,
        operator: &mut fullerene_client::OperatorClient,
        frameworks: &Frameworks,
        registration_secs: f64,
        [rss_empty, rss_agents]: [BTreeMap<u64, u64>; 2],
        interrupt: &Interrupt,
    ) -> Result<ScaleReport, BenchError> {
        let config = self.config;
        let logs = &frameworks.logs;
        let started = Instant::now();
        let within = Duration::from_secs(60) + Duration::from_millis(1) * config.tasks as u32;
        loop {
            interrupt.check()?;
            let running: u64 = logs.iter().map(|l| l.running.load(Ordering::Relaxed)).sum();
            (self.progress)(&Progress {
                phase: "launching the tracked tasks".to_string(),
                done: running,
                total: config.tasks,
            });
            if running >= config.tasks {
                break;
            }
            if started.elapsed() > within {
                let sum = |count: fn(&FrameworkLog) -> &AtomicU64| -> u64 {
                    logs.iter().map(|l| count(l).load(Ordering::Relaxed)).sum()
                };
                return Err(BenchError::Failed(format!(
                    "{running} of {} tasks running after {within:?} (the frameworks got {} \
                     offers, put {} tasks in accepts, had {} refused and {} ended otherwise)",
                    config.tasks,
                    sum(|l| &l.offers),
                    sum(|l| &l.accepted),
                    sum(|l| &l.refused),
                    sum(|l| &l.failed),
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The tracked tasks run: offers flow again (and are declined) for what follows.
        frameworks.want_offers();
        interrupt.sleep(SETTLE).await?;
        let rss_tasks = rss_by_master(self.masters);
        let status = super::cluster_status(operator).await;
        let leader = status
            .as_ref()
            .and_then(|s| s.leader.as_ref())
            .map(|l| l.id.0);
        let memory = rss_figures(
            leader,
            &[&rss_empty, &rss_agents, &rss_tasks],
            config.agents,
            config.tasks,
        );

        // Offers per second, and the allocation cycle from the leader's metrics.
        (self.progress)(&Progress::phase(format!(
            "counting offers for {} s",
            config.offer_window.as_secs()
        )));
        let processes = super::master_processes(self.masters, leader);
        let leader_http = leader.and_then(|id| self.masters.http_addrs.get(&id).copied());
        let metrics_before = super::fetch_metrics(&self.api, leader_http).await;
        let offers_before = offers(logs);
        let cpu_before = CpuReading::take(&processes);
        let from = Instant::now();
        interrupt.sleep(config.offer_window).await?;
        let offer_secs = from.elapsed().as_secs_f64();
        let offers_counted = offers(logs) - offers_before;
        let cpu = CpuReading::take(&processes).since(&cpu_before);
        let metrics_after = super::fetch_metrics(&self.api, leader_http).await;
        let allocation = cycle_figures(metrics_before.as_deref(), metrics_after.as_deref());

        let failover = if config.kills > 0 {
            Some(self.kills(operator, logs, interrupt).await?)
        } else {
            None
        };
        Ok(ScaleReport {
            mode: ScaleMode::Quic,
            masters: config.masters,
            agents: config.agents,
            frameworks: config.frameworks,
            tasks: config.tasks,
            registration_secs,
            memory,
            allocation,
            offers_per_sec: offers_counted as f64 / offer_secs,
            offers: offers_counted,
            offer_secs,
            cpu,
            failover,
            load_before: None,
            load_after: None,
            exited: Vec::new(),
        })
    }

    async fn kills(
        &mut self,
        operator: &mut fullerene_client::OperatorClient,
        logs: &[Arc<FrameworkLog>],
        interrupt: &Interrupt,
    ) -> Result<FailoverFigures, BenchError> {
        let config = self.config;
        let agents = config.agents as usize;
        let mut rounds = Vec::new();
        for round in 0..config.kills {
            (self.progress)(&Progress {
                phase: format!("leader kills{}", last_round(&rounds)),
                done: round,
                total: config.kills,
            });
            let status =
                super::wait_for_healthy(operator, config.masters as usize, interrupt).await?;
            let Some(leader) = status.leader.map(|l| l.id.0) else {
                return Err(BenchError::Failed(format!(
                    "no leader before kill {}",
                    round + 1
                )));
            };
            // Offers flowing before the kill.
            let settled = Instant::now();
            while first_offer_after(logs, Instant::now() - Duration::from_secs(1)).is_none()
                && settled.elapsed() < Duration::from_secs(30)
            {
                interrupt.sleep(Duration::from_millis(200)).await?;
            }
            let killed_at = Instant::now();
            self.masters.kill(leader);
            let deadline = killed_at + Duration::from_secs(60);
            let mut offered = None;
            let mut all_joined = None;
            while Instant::now() < deadline && (offered.is_none() || all_joined.is_none()) {
                interrupt.check()?;
                offered = offered.or_else(|| first_offer_after(logs, killed_at));
                all_joined =
                    all_joined.or_else(|| self.agents_log.all_joined_after(agents, killed_at));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The gap is looked for until two seconds after the last registration.
            if let Some(joined) = all_joined {
                let until = joined + Duration::from_secs(2);
                let now = Instant::now();
                if until > now {
                    interrupt.sleep(until - now).await?;
                }
            }
            let gap = match (offered, all_joined) {
                (Some(first), Some(joined)) => {
                    longest_gap(logs, first, joined + Duration::from_secs(2))
                }
                _ => None,
            };
            rounds.push(KillRound {
                killed: leader,
                offers_ms: offered.map(|at| millis(at.duration_since(killed_at))),
                agents_ms: all_joined.map(|at| millis(at.duration_since(killed_at))),
                longest_offer_gap_ms: gap,
            });
            self.masters.spawn(leader, false)?;
        }
        let offers_missing = rounds.iter().filter(|r| r.offers_ms.is_none()).count() as u64;
        Ok(FailoverFigures {
            offers: Spread::of(rounds.iter().filter_map(|r| r.offers_ms).collect()),
            agents: Spread::of(rounds.iter().filter_map(|r| r.agents_ms).collect()),
            kills: rounds,
            offers_missing,
        })
    }
}

/// How long each tracked task sleeps: longer than any run (the simulated agents never end
/// one anyway).
const TRACKED_TASK_MS: u64 = 7 * 24 * 3_600 * 1_000;

/// The progress line's note on the last kill.
fn last_round(rounds: &[KillRound]) -> String {
    match rounds.last() {
        Some(KillRound {
            offers_ms: Some(offers),
            agents_ms,
            ..
        }) => format!(
            " (last: offers after {offers:.0} ms, agents after {})",
            agents_ms.map_or("-".to_string(), |ms| format!("{ms:.0} ms"))
        ),
        _ => String::new(),
    }
}

/// Agents (of `agents`) that registered at least once.
fn distinct_joins(log: &SimAgentsLog, agents: usize) -> usize {
    let Ok(joined) = log.joined_at.lock() else {
        return 0;
    };
    let mut seen = vec![false; agents];
    for (agent, _) in joined.iter() {
        if let Some(slot) = seen.get_mut(*agent) {
            *slot = true;
        }
    }
    seen.into_iter().filter(|s| *s).count()
}

fn offers(logs: &[Arc<FrameworkLog>]) -> u64 {
    logs.iter().map(|l| l.offers.load(Ordering::Relaxed)).sum()
}

/// The first batch of offers any framework received at or after `t`.
fn first_offer_after(logs: &[Arc<FrameworkLog>], t: Instant) -> Option<Instant> {
    logs.iter().filter_map(|log| log.first_offer_after(t)).min()
}

/// The longest time between `from` and `to` during which no framework received an offer.
fn longest_gap(logs: &[Arc<FrameworkLog>], from: Instant, to: Instant) -> Option<f64> {
    let mut times: Vec<Instant> = Vec::new();
    for log in logs {
        if let Ok(batches) = log.offer_batches.lock() {
            times.extend(batches.iter().copied().filter(|t| *t >= from && *t <= to));
        }
    }
    times.sort();
    let mut previous = from;
    let mut longest = Duration::ZERO;
    for t in times.into_iter().chain([to]) {
        longest = longest.max(t.duration_since(previous));
        previous = t;
    }
    Some(millis(longest))
}

/// Memory per agent and per task from the masters' resident sizes with no agent, with the
/// agents, and with the tasks too: the leader's, and the followers' mean.
fn rss_figures(
    leader: Option<u64>,
    readings: &[&BTreeMap<u64, u64>; 3],
    agents: u64,
    tasks: u64,
) -> Vec<MemoryFigure> {
    let mut figures = Vec::new();
    let ids: Vec<u64> = readings[0].keys().copied().collect();
    let (leaders, followers): (Vec<u64>, Vec<u64>) =
        ids.into_iter().partition(|id| Some(*id) == leader);
    for (what, group) in [("leader RSS", leaders), ("follower RSS", followers)] {
        let mean = |reading: &BTreeMap<u64, u64>| -> Option<f64> {
            let values: Vec<f64> = group
                .iter()
                .filter_map(|id| reading.get(id).map(|v| *v as f64))
                .collect();
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        let (Some(empty), Some(with_agents), Some(with_tasks)) =
            (mean(readings[0]), mean(readings[1]), mean(readings[2]))
        else {
            continue;
        };
        figures.push(MemoryFigure {
            what: what.to_string(),
            base_bytes: empty as u64,
            per_agent_bytes: (with_agents - empty) / agents.max(1) as f64,
            per_framework_bytes: None,
            per_task_bytes: (with_tasks - with_agents) / tasks.max(1) as f64,
        });
    }
    figures
}

/// The allocation cycle's figures from two readings of the leader's metrics.
fn cycle_figures(before: Option<&str>, after: Option<&str>) -> CycleFigures {
    const NAME: &str = "fullerene_master_allocation_cycle_seconds";
    let Some(after) = after else {
        return CycleFigures {
            source: "the leader's /metrics did not answer".to_string(),
            ..CycleFigures::default()
        };
    };
    let sum_count = |text: &str| {
        Some((
            probe::metric(text, &format!("{NAME}_sum"), "")?,
            probe::metric(text, &format!("{NAME}_count"), "")?,
        ))
    };
    let Some((sum, count)) = sum_count(after) else {
        return CycleFigures {
            source: format!("not exported by these masters ({NAME})"),
            ..CycleFigures::default()
        };
    };
    let (sum0, count0) = before.and_then(sum_count).unwrap_or((0.0, 0.0));
    let cycles = (count - count0).max(0.0);
    let quantile =
        |q: &str| probe::metric(after, NAME, &format!("quantile=\"{q}\"")).map(|s| s * 1000.0);
    CycleFigures {
        source: format!("leader's {NAME} (mean over the window; quantiles its own summary's)"),
        cycles: cycles as u64,
        mean_ms: if cycles > 0.0 {
            (sum - sum0) / cycles * 1000.0
        } else {
            0.0
        },
        p50_ms: quantile("0.5"),
        p99_ms: quantile("0.99"),
        max_ms: quantile("1"),
    }
}

// ---------------------------------------------------------------------------------------------
// Core mode
// ---------------------------------------------------------------------------------------------

/// Inputs handed to the core between two `advance`s, as the node loop takes them.
const INPUTS_PER_STEP: usize = 256;

/// One master core on in-memory storage, driven on a virtual clock.
struct CoreHarness {
    core: MasterCore<MemStorage>,
    now: Now,
    agent_sessions: HashMap<SessionId, AgentId>,
    framework_sessions: HashMap<SessionId, FrameworkId>,
    sessions: BTreeMap<FrameworkId, SessionId>,
    next_session: u64,
    next_call: u64,
}

impl CoreHarness {
    fn leader(config: &ScaleConfig) -> Result<CoreHarness, BenchError> {
        let failed = |e: &dyn std::fmt::Display| BenchError::Setup(format!("the core: {e}"));
        let node = RaftNode::bootstrap(
            NodeConfig::new(1),
            MemStorage::new("bench"),
            &[1],
            ClusterSettings::default(),
        )
        .map_err(|e| failed(&e))?;
        let core_config = CoreConfig {
            members: [(1, SocketAddr::from(([127, 0, 0, 1], 1)))]
                .into_iter()
                .collect(),
            // No agent heartbeats here: none may be marked unreachable while the clock runs.
            agent_timeouts: AgentTimeouts {
                heartbeat_interval: Duration::from_secs(1),
                unreachable_after: Duration::from_secs(365 * 86_400),
                lost_after: Duration::from_secs(730 * 86_400),
            },
            allocator_shards: config.allocator_shards.max(1),
            ..CoreConfig::default()
        };
        let mut harness = CoreHarness {
            core: MasterCore::new(node, core_config),
            now: Now::at(Time::from_millis(1_000)),
            agent_sessions: HashMap::new(),
            framework_sessions: HashMap::new(),
            sessions: BTreeMap::new(),
            next_session: 1,
            next_call: 1,
        };
        harness.core.start(harness.now);
        harness.core.campaign().map_err(|e| failed(&e))?;
        for _ in 0..10 {
            harness.step()?;
        }
        if !harness.core.node().is_leader() {
            return Err(BenchError::Setup(
                "the lone master did not lead".to_string(),
            ));
        }
        Ok(harness)
    }

    /// Runs the node until idle; the outputs.
    fn step(&mut self) -> Result<Vec<Output>, BenchError> {
        self.core
            .advance(self.now)
            .map_err(|e| BenchError::Failed(format!("the core stopped: {e}")))?;
        Ok(self.core.drain_outputs())
    }

    fn session(&mut self) -> SessionId {
        let session = SessionId(self.next_session);
        self.next_session += 1;
        session
    }

    fn call(&mut self, framework: &FrameworkId, request: FrameworkRequest) -> Input {
        let call_id = self.next_call;
        self.next_call += 1;
        Input::FrameworkCall {
            framework_id: framework.clone(),
            session: self.sessions[framework],
            call: FrameworkCall {
                call_id,
                call: request,
            },
        }
    }

    fn register_agents(&mut self, count: u64, resources: ResourceVec) -> Result<(), BenchError> {
        for n in 1..=count {
            let session = self.session();
            let agent_id = AgentId::from(format!("agent-{n}"));
            self.agent_sessions.insert(session, agent_id.clone());
            self.core.handle(
                Input::AgentRegister {
                    agent_id,
                    session,
                    address: SocketAddr::from(([127, 0, 0, 1], 2)),
                    registration: AgentRegistration {
                        hostname: format!("sim-{n}"),
                        resources: resources.into(),
                        attributes: Default::default(),
                        tasks: Vec::new(),
                        executors: vec![fullerene_agent::core::EXECUTOR_SLEEP.to_string()],
                        isolation: Default::default(),
                    },
                },
                self.now,
            );
            if n as usize % INPUTS_PER_STEP == 0 {
                self.step()?;
            }
        }
        self.step()?;
        Ok(())
    }

    fn subscribe(&mut self, count: u64, task: ResourceVec) -> Result<(), BenchError> {
        for n in 1..=count {
            let session = self.session();
            let call_id = self.next_call;
            self.next_call += 1;
            self.core.handle(
                Input::FrameworkSubscribe(
                    session,
                    Subscription {
                        call_id,
                        framework_id: None,
                        name: format!("scale-{n}"),
                        group: String::new(),
                        failover_timeout_ms: 3_600_000,
                        principal: format!("framework-{n}"),
                    },
                ),
                self.now,
            );
            for output in self.step()? {
                if let Output::ToFramework {
                    session,
                    message:
                        MasterToFramework::CallResult {
                            result: Ok(CallOk::Subscribed { framework_id, .. }),
                            ..
                        },
                } = output
                {
                    self.framework_sessions
                        .insert(session, framework_id.clone());
                    self.sessions.insert(framework_id, session);
                }
            }
        }
        if self.sessions.len() as u64 != count {
            return Err(BenchError::Failed(format!(
                "{} of {count} frameworks subscribed",
                self.sessions.len()
            )));
        }
        let demand = DemandSummary {
            pending: vec![PendingDemand {
                resources: Resources::from(task),
                count: 1_000_000,
                pri_score: 0.5,
            }],
            remaining_work: 1e6,
            srpt: 1e6,
            reservation_progress: None,
        };
        let frameworks: Vec<FrameworkId> = self.sessions.keys().cloned().collect();
        for framework in frameworks {
            let input = self.call(&framework, FrameworkRequest::UpdateDemand(demand.clone()));
            self.core.handle(input, self.now);
        }
        self.step()?;
        Ok(())
    }

    /// One allocation period: the clock moves on, the tick runs the cycle (timed), then the
    /// node runs. Returns the tick's duration and the outputs.
    fn cycle(&mut self) -> Result<(Duration, Vec<Output>), BenchError> {
        self.now = self.now.after(self.core.config().allocation_interval);
        let started = Instant::now();
        self.core.tick(self.now);
        let took = started.elapsed();
        let mut outputs = self.core.drain_outputs();
        outputs.extend(self.step()?);
        Ok((took, outputs))
    }

    /// Answers the outputs as frameworks and agents would: offers filled with tasks while
    /// `budget` lasts (the rest declined), launches reported RUNNING, updates acknowledged.
    /// Returns how many offers and RUNNING updates there were.
    fn answer(
        &mut self,
        outputs: Vec<Output>,
        budget: &mut u64,
        task: ResourceVec,
        next_task: &mut u64,
    ) -> Result<(u64, u64), BenchError> {
        let mut offers = 0u64;
        let mut running = 0u64;
        let mut inputs = Vec::new();
        // Each framework acknowledges the updates of one step together, as the SDK's driver
        // acknowledges what it received at once.
        let mut acks: BTreeMap<FrameworkId, Vec<StatusAck>> = BTreeMap::new();
        for output in outputs {
            match output {
                Output::ToFramework {
                    session,
                    message: MasterToFramework::Offers(batch),
                } => {
                    let Some(framework) = self.framework_sessions.get(&session).cloned() else {
                        continue;
                    };
                    offers += batch.len() as u64;
                    let mut declined = Vec::new();
                    for offer in batch {
                        let room = offer.resources.to_vec().unwrap_or(ResourceVec::ZERO);
                        let count = copies_that_fit(&task, room, *budget);
                        *budget -= count;
                        let tasks: Vec<TaskSpec> = (0..count)
                            .map(|_| {
                                *next_task += 1;
                                sleep_task(format!("t{next_task}"), "bench", task, TRACKED_TASK_MS)
                            })
                            .collect();
                        if tasks.is_empty() {
                            declined.push(offer.id);
                        } else {
                            inputs.push(self.call(
                                &framework,
                                FrameworkRequest::Accept {
                                    offer_ids: vec![offer.id],
                                    tasks,
                                    leftover: Leftover::Decline { refuse_ms: 0 },
                                },
                            ));
                        }
                    }
                    if !declined.is_empty() {
                        inputs.push(self.call(
                            &framework,
                            FrameworkRequest::Decline {
                                offer_ids: declined,
                                refuse_ms: 0,
                            },
                        ));
                    }
                }
                Output::ToFramework {
                    message: MasterToFramework::Update(update),
                    session,
                } => {
                    let Some(framework) = self.framework_sessions.get(&session).cloned() else {
                        continue;
                    };
                    if update.state == TaskState::Running {
                        running += 1;
                    }
                    acks.entry(framework).or_default().push(StatusAck {
                        task_id: update.task_id,
                        framework_id: update.framework_id,
                        seq: update.seq,
                    });
                }
                Output::ToAgent {
                    session,
                    message:
                        MasterToAgent::Launch {
                            framework_id,
                            tasks,
                        },
                } => {
                    let Some(agent) = self.agent_sessions.get(&session).cloned() else {
                        continue;
                    };
                    for spec in tasks {
                        inputs.push(Input::AgentStatus(
                            agent.clone(),
                            StatusUpdate {
                                task_id: spec.id,
                                framework_id: framework_id.clone(),
                                agent_id: agent.clone(),
                                state: TaskState::Running,
                                seq: 1,
                                reason: None,
                                message: String::new(),
                                timestamp_ms: self.now.wall_ms(),
                            },
                        ));
                    }
                }
                _ => {}
            }
        }
        for (framework, acks) in acks {
            for batch in acks.chunks(MAX_ACKS_PER_CALL) {
                inputs.push(self.call(&framework, FrameworkRequest::Acknowledge(batch.to_vec())));
            }
        }
        let mut inputs = inputs.into_iter().peekable();
        while inputs.peek().is_some() {
            for input in inputs.by_ref().take(INPUTS_PER_STEP) {
                self.core.handle(input, self.now);
            }
            let more = self.step()?;
            let (o, r) = self.answer(more, budget, task, next_task)?;
            offers += o;
            running += r;
        }
        Ok((offers, running))
    }

    /// The heap the in-memory Raft store holds that a master keeps in RocksDB on disk only
    /// (the snapshot, and its second copy of the log's entry list).
    fn stored_bytes(&self) -> u64 {
        self.core.node().store().disk_only_bytes()
    }

    /// The heap a copy of the replicated state takes. A clone would share the state's nodes
    /// (its maps are persistent), so the copy is decoded from a snapshot, sharing nothing.
    fn state_bytes(&self) -> Option<u64> {
        let encoded = self.core.node().state().encode_snapshot().ok()?;
        let before = probe::heap_in_use()?;
        let copy = ClusterState::decode_snapshot(&encoded).ok()?;
        let after = probe::heap_in_use()?;
        drop(copy);
        Some(after.saturating_sub(before))
    }
}

fn run_core(
    config: &ScaleConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<ScaleReport, BenchError> {
    let mut harness = CoreHarness::leader(config)?;
    let heap = || probe::heap_in_use().unwrap_or(0);
    let heap_empty = heap();
    let stored_empty = harness.stored_bytes();
    let state_empty = harness.state_bytes().unwrap_or(0);
    progress(&Progress::phase(format!(
        "registering {} agents with the core",
        config.agents
    )));
    let registering = Instant::now();
    harness.register_agents(config.agents, config.agent_resources)?;
    let registration_secs = registering.elapsed().as_secs_f64();
    let agents_active = harness
        .core
        .node()
        .state()
        .agents()
        .values()
        .filter(|a| a.state == AgentState::Active)
        .count() as u64;
    if agents_active != config.agents {
        return Err(BenchError::Failed(format!(
            "{agents_active} of {} agents registered",
            config.agents
        )));
    }
    let heap_agents = heap();
    let stored_agents = harness.stored_bytes();
    let state_agents = harness.state_bytes().unwrap_or(0);

    progress(&Progress::phase(format!(
        "{} frameworks launching {} tasks",
        config.frameworks, config.tasks
    )));
    harness.subscribe(config.frameworks, config.task)?;
    let heap_frameworks = heap();
    let stored_frameworks = harness.stored_bytes();
    let state_frameworks = harness.state_bytes().unwrap_or(0);
    let mut budget = config.tasks;
    let mut next_task = 0u64;
    let mut running = 0u64;
    let mut idle_cycles = 0;
    while running < config.tasks {
        let (_, outputs) = harness.cycle()?;
        let (_, r) = harness.answer(outputs, &mut budget, config.task, &mut next_task)?;
        running += r;
        idle_cycles = if r == 0 { idle_cycles + 1 } else { 0 };
        if idle_cycles > 100 {
            return Err(BenchError::Failed(format!(
                "{running} of {} tasks running, and no progress in 100 cycles",
                config.tasks
            )));
        }
        progress(&Progress {
            phase: "launching the tracked tasks".to_string(),
            done: running,
            total: config.tasks,
        });
    }
    // A new leader's first cycles are partial (`fullerene_master::offers::LEADER_WARMUP_MS`):
    // the timed ones come after its warm-up, full.
    let interval_ms = harness.core.config().allocation_interval.as_millis().max(1) as u64;
    for _ in 0..=LEADER_WARMUP_MS.div_ceil(interval_ms) {
        let (_, outputs) = harness.cycle()?;
        harness.answer(outputs, &mut 0, config.task, &mut next_task)?;
    }
    let heap_tasks = heap();
    let stored_tasks = harness.stored_bytes();
    let state_tasks = harness.state_bytes().unwrap_or(0);

    progress(&Progress::phase(format!(
        "timing {} allocation cycles",
        config.cycles
    )));
    let mut durations = Vec::new();
    let mut offers_counted = 0u64;
    let loop_started = Instant::now();
    for done in 0..config.cycles {
        let (took, outputs) = harness.cycle()?;
        durations.push(millis(took));
        let (o, _) = harness.answer(outputs, &mut 0, config.task, &mut next_task)?;
        offers_counted += o;
        progress(&Progress {
            phase: "timing allocation cycles".to_string(),
            done,
            total: config.cycles,
        });
    }
    let offer_secs = loop_started.elapsed().as_secs_f64();
    let spread = Spread::of(durations.clone());
    // Each figure from its readings: empty, with the agents, with the frameworks, with the
    // tasks (so a framework's subscription is not counted as its tasks').
    let figure = |what: &str, readings: [u64; 4]| {
        let per = |phase: usize, n: u64| {
            readings[phase].saturating_sub(readings[phase - 1]) as f64 / n.max(1) as f64
        };
        MemoryFigure {
            what: what.to_string(),
            base_bytes: readings[0],
            per_agent_bytes: per(1, config.agents),
            per_framework_bytes: Some(per(2, config.frameworks)),
            per_task_bytes: per(3, config.tasks),
        }
    };
    let heap_readings = [heap_empty, heap_agents, heap_frameworks, heap_tasks];
    let stored_readings = [stored_empty, stored_agents, stored_frameworks, stored_tasks];
    let less_store = std::array::from_fn(|i| heap_readings[i].saturating_sub(stored_readings[i]));
    Ok(ScaleReport {
        mode: ScaleMode::Core,
        masters: 1,
        agents: config.agents,
        frameworks: config.frameworks,
        tasks: config.tasks,
        registration_secs,
        memory: vec![
            figure("core heap (state, Raft log, leader's books)", heap_readings),
            figure(
                "core heap less what a master keeps on disk only (the Raft snapshot)",
                less_store,
            ),
            figure(
                "replicated state",
                [state_empty, state_agents, state_frameworks, state_tasks],
            ),
        ],
        allocation: CycleFigures {
            source: "timed around MasterCore::tick (the allocation cycle and Raft's tick)"
                .to_string(),
            cycles: spread.samples,
            mean_ms: durations.iter().sum::<f64>() / durations.len().max(1) as f64,
            p50_ms: Some(spread.p50_ms),
            p99_ms: Some(spread.p99_ms),
            max_ms: Some(spread.max_ms),
        },
        offers_per_sec: offers_counted as f64 / offer_secs.max(1e-9),
        offers: offers_counted,
        offer_secs,
        cpu: Vec::new(),
        failover: None,
        load_before: None,
        load_after: None,
        exited: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_per_agent_and_task_is_the_growth_divided() {
        let empty = BTreeMap::from([(1, 100), (2, 100), (3, 120)]);
        let agents = BTreeMap::from([(1, 1_100), (2, 600), (3, 620)]);
        let tasks = BTreeMap::from([(1, 3_100), (2, 1_600), (3, 1_620)]);
        let figures = rss_figures(Some(1), &[&empty, &agents, &tasks], 10, 100);
        assert_eq!(figures.len(), 2);
        assert_eq!(figures[0].what, "leader RSS");
        assert_eq!(figures[0].per_agent_bytes, 100.0);
        assert_eq!(figures[0].per_task_bytes, 20.0);
        assert_eq!(figures[1].what, "follower RSS");
        assert_eq!(figures[1].base_bytes, 110);
        assert_eq!(figures[1].per_agent_bytes, 50.0);
        assert_eq!(figures[1].per_task_bytes, 10.0);
    }

    #[test]
    fn cycle_figures_come_from_the_window_of_the_leaders_summary() {
        let name = "fullerene_master_allocation_cycle_seconds";
        let before = format!("{name}_sum 1\n{name}_count 100\n");
        let after = format!(
            "{name}{{quantile=\"0.5\"}} 0.002\n{name}{{quantile=\"0.99\"}} 0.008\n\
             {name}{{quantile=\"1\"}} 0.02\n{name}_sum 1.5\n{name}_count 200\n"
        );
        let figures = cycle_figures(Some(&before), Some(&after));
        assert_eq!(figures.cycles, 100);
        assert!((figures.mean_ms - 5.0).abs() < 1e-9);
        assert_eq!(figures.p99_ms, Some(8.0));
        let missing = cycle_figures(Some(""), Some("other 1\n"));
        assert_eq!(missing.cycles, 0);
        assert!(missing.source.contains("not exported"));
    }
}
