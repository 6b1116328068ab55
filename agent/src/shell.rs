//! The agent's I/O shell (tokio): the connection to the leading master, registration and
//! redirects, heartbeats, status delivery until acknowledged, and the executors.
//!
//! The shell owns the [`AgentCore`], the [`Checkpoint`] and the [`Executors`] and runs one loop
//! that waits for the next event and executes the core's [`Action`]s in order: records are
//! appended to the checkpoint and fsynced before any update is sent and before any task starts.
//!
//! # Connection
//!
//! The connection is a [`LeaderSession`] of `fullerene-client`, the session every client uses to
//! follow the leader: it connects to one of `masters` (QUIC, mutual TLS), opens an `Agent` session
//! and sends `Register` with every task the agent still runs or has unacknowledged updates for.
//! `Registered` completes the registration (the agent kills the tasks it lists); `Redirect` with a
//! leader sends the agent there at once, without one (no leader yet) to the next master after a
//! backoff. A lost session (closed, timed out, or a `Redirect` from a master that stopped leading)
//! is re-opened the same way, with exponential backoff and jitter across the masters. After each
//! registration every unacknowledged update is replayed, each task's in order; while a session
//! lasts, updates left unacknowledged for `status_retry` are resent too (the master drops
//! duplicates). A master that sends nothing, not even heartbeat acks, for ten heartbeat intervals
//! (at least 10 s) is given up like a lost one. Frames are written by a task of their own, so the
//! agent keeps reading while the master is slow to read.
//!
//! # Sandbox files and garbage collection
//!
//! A `ReadFile` from the master (an operator or a framework reading a task's logs) is checked
//! by the core ([`AgentCore::plan_file_read`]) and read on tokio's blocking threads, at most
//! [`MAX_FILE_READS_IN_FLIGHT`] at once (more are answered `Busy` at once), each at most
//! [`MAX_FILE_READ_BYTES`](fullerene_proto::messages::MAX_FILE_READ_BYTES): the loop that
//! delivers status updates never waits on a disk. Every `sandbox_gc_interval` the sandboxes of
//! ended tasks are measured and removed as [`GcPolicy`] says, on a blocking thread too.
//!
//! Stopping the agent (the `shutdown` future) leaves its tasks running: a restarted agent
//! re-attaches to them from the checkpoint.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fullerene_client::event_log::{self, EventLog};
use fullerene_client::follow::DEFAULT_PASS_OVER;
use fullerene_client::{
    AgentSession, FollowConfig, LeaderSession, Pacing, Registered, SendError, SessionConfig,
    SessionEvent,
};
use fullerene_proto::ids::{AgentId, TaskKey};
use fullerene_proto::messages::{
    AgentToMaster, FileRead, FileReadAnswer, FileReadOutcome, FileRefusal, MasterToAgent,
};
use fullerene_proto::resources::{ResourceKind, ResourceVec};
use fullerene_proto::time::SystemClock;
use fullerene_transport::{Client, PeerIdentity, TlsMaterial, TransportConfig, TransportError};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::cgroups::Limits;
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::core::{
    session_silence_limit, Action, AgentCore, CoreConfig, FromMaster, Outcome, EXECUTOR_COMMAND,
    EXECUTOR_SLEEP,
};
use crate::executor::{prepare_work_dir, ExecEvent, Executors};
use crate::isolation::{Isolation, IsolationConfig};
use crate::metrics as m;
use crate::sandboxes::{Collected, GcPolicy, DEFAULT_GC_INTERVAL};

mod sandbox_io;

/// Sandbox file reads the agent carries out at once; more are refused as busy (the master
/// bounds its own reads per agent too, so this is only reached by many readers at once).
pub const MAX_FILE_READS_IN_FLIGHT: usize = 4;

/// Everything the agent is configured with.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The masters to try, in order (any of them; followers redirect to the leader).
    pub masters: Vec<SocketAddr>,
    /// The checkpoint and the task sandboxes live here.
    pub work_dir: PathBuf,
    /// The host name reported to the master.
    pub hostname: String,
    /// The resources offered.
    pub resources: ResourceVec,
    /// Placement attributes (rack, zone, ...).
    pub attributes: BTreeMap<String, String>,
    /// The executors offered ([`EXECUTOR_COMMAND`], [`EXECUTOR_SLEEP`]).
    pub executors: BTreeSet<String>,
    /// How far bandwidth may be overbooked (see [`CoreConfig::overbook_allowance`]).
    pub overbook_allowance: f64,
    /// The local address of the agent's QUIC socket (`None`: any address, a free port).
    pub bind: Option<SocketAddr>,
    /// QUIC timeouts and limits.
    pub transport: TransportConfig,
    /// The first reconnection delay; it doubles per failed attempt up to `backoff_max`, and each
    /// delay is drawn uniformly from its upper half (jitter).
    pub backoff_min: Duration,
    /// The largest reconnection delay.
    pub backoff_max: Duration,
    /// How long to wait for the answer to `Register`.
    pub register_timeout: Duration,
    /// Updates still unacknowledged after this long in a session are sent again.
    pub status_retry: Duration,
    /// Where a cgroup v2 hierarchy is looked for.
    pub cgroup_root: PathBuf,
    /// The uids tasks run as and where their leases are locked ([`crate::isolation`]).
    pub isolation: IsolationConfig,
    /// Refuse to start unless tasks are fully isolated (own users and cgroup limits).
    pub require_isolation: bool,
    /// Re-measures the machine now and then; a change is reported with `UpdateResources`.
    pub resource_check: Option<ResourceCheck>,
    /// Where registrations, task starts and status updates sent are logged, one JSON line
    /// each (`fullerene chaos run` reads it into its history).
    pub event_log: Option<Arc<EventLog>>,
    /// When the sandboxes of ended tasks are removed.
    pub sandbox_gc: GcPolicy,
    /// How often the garbage collection looks at the sandboxes.
    pub sandbox_gc_interval: Duration,
}

/// How the agent notices that the machine's capacity changed (hot-plugged memory or CPUs).
#[derive(Clone)]
pub struct ResourceCheck {
    /// How often to measure.
    pub interval: Duration,
    /// The measurement: the totals to offer now (detected values with the operator's
    /// overrides applied).
    pub measure: Arc<dyn Fn() -> ResourceVec + Send + Sync>,
}

impl std::fmt::Debug for ResourceCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceCheck")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl AgentConfig {
    /// A configuration with the defaults: both executors, 100 ms to 5 s backoff, 10 s status
    /// retry, cgroups at `/sys/fs/cgroup`.
    pub fn new(masters: Vec<SocketAddr>, work_dir: PathBuf, resources: ResourceVec) -> AgentConfig {
        AgentConfig {
            masters,
            work_dir,
            hostname: crate::machine::hostname(),
            resources,
            attributes: BTreeMap::new(),
            executors: [EXECUTOR_COMMAND, EXECUTOR_SLEEP]
                .into_iter()
                .map(String::from)
                .collect(),
            overbook_allowance: 0.25,
            bind: None,
            transport: TransportConfig::default(),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            register_timeout: Duration::from_secs(10),
            status_retry: Duration::from_secs(10),
            cgroup_root: PathBuf::from(crate::cgroups::DEFAULT_ROOT),
            isolation: IsolationConfig::default(),
            require_isolation: false,
            resource_check: None,
            event_log: None,
            sandbox_gc: GcPolicy::default(),
            sandbox_gc_interval: DEFAULT_GC_INTERVAL,
        }
    }
}

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No master address was given.
    #[error("no master addresses: pass --master-addrs ADDR,...")]
    NoMasters,
    /// The certificate is not an agent's.
    #[error("the certificate names {0}, not an agent (role `agent`); use an agent-<n> certificate from `fullerene certs init`")]
    NotAnAgent(PeerIdentity),
    /// Another agent uses the work directory.
    #[error("work directory {path} is in use by another agent (lock {lock} is held)")]
    WorkDirLocked {
        /// The work directory.
        path: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// The work directory cannot be used.
    #[error("work directory {path}: {source}")]
    WorkDir {
        /// The work directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The checkpoint cannot be read or written: no update may be sent that is not on disk.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The QUIC client could not be set up.
    #[error("cannot set up the QUIC client: {0}")]
    Transport(#[from] TransportError),
    /// `--require-isolation` was given and the machine cannot isolate tasks.
    #[error("tasks cannot be isolated on this machine and --require-isolation was given: {0}")]
    IsolationRequired(String),
    /// The Prometheus endpoint could not be started.
    #[error("cannot serve metrics on {addr}: {detail}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// What went wrong.
        detail: String,
    },
}

/// Serves Prometheus metrics (`GET /metrics`) on `addr`. Call inside the tokio runtime, before
/// [`run`], so that the agent's metrics are registered with it.
pub fn install_prometheus(addr: SocketAddr) -> Result<(), AgentError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| AgentError::Metrics {
            addr,
            detail: e.to_string(),
        })?;
    m::describe();
    Ok(())
}

/// Runs the agent until `shutdown` completes (tasks keep running) or a fatal error.
pub async fn run<F>(
    mut config: AgentConfig,
    tls: TlsMaterial,
    shutdown: F,
) -> Result<(), AgentError>
where
    F: Future<Output = ()>,
{
    if config.masters.is_empty() {
        return Err(AgentError::NoMasters);
    }
    // Tasks see their sandbox paths from their own working directory: make them absolute.
    config.work_dir =
        std::path::absolute(&config.work_dir).map_err(|source| AgentError::WorkDir {
            path: config.work_dir.clone(),
            source,
        })?;
    let agent_id = tls
        .identity()
        .agent_id()
        .ok_or_else(|| AgentError::NotAnAgent(tls.identity().clone()))?;
    let _lock = lock_work_dir(&config.work_dir)?;
    let (checkpoint, recovered) = Checkpoint::open(&config.work_dir)?;
    let core_config = CoreConfig {
        agent_id: agent_id.clone(),
        total: config.resources,
        executors: config.executors.clone(),
        overbook_allowance: config.overbook_allowance,
    };
    let core = AgentCore::recover(core_config, recovered.records);
    let limits = Limits::detect(&config.cgroup_root, agent_id.as_str());
    match &limits {
        Limits::Enforced(cgroup) => {
            tracing::info!(cgroup = %cgroup.base().display(), "task limits enforced with cgroup v2");
        }
        Limits::NotEnforced { reason } => {
            tracing::warn!(%reason, "task resource limits are NOT enforced on this agent");
        }
    }
    m::limits_enforced(limits.enforced());
    let isolation = Isolation::detect(&config.isolation);
    match &isolation {
        Isolation::Users(pool) => {
            tracing::info!(uids = %pool.range(), "tasks run as users of their own");
        }
        Isolation::Unavailable { reason } => {
            tracing::warn!(%reason, "tasks are NOT isolated from each other or from the agent on this agent");
        }
    }
    m::tasks_isolated(isolation.enforced());
    if config.require_isolation {
        let missing: Vec<String> = [isolation.reason(), limits_reason(&limits)]
            .into_iter()
            .flatten()
            .map(str::to_string)
            .collect();
        if !missing.is_empty() {
            return Err(AgentError::IsolationRequired(missing.join("; ")));
        }
    }
    prepare_work_dir(&config.work_dir, &isolation).map_err(|source| AgentError::WorkDir {
        path: config.work_dir.clone(),
        source,
    })?;
    let (mut executors, exec_rx) = Executors::new(&config.work_dir, limits, isolation);
    let clock = SystemClock::new();
    let now = clock.now();
    let resumed = core.to_resume();
    if !resumed.is_empty() || core.backlog() > 0 {
        tracing::info!(
            tasks = resumed.len(),
            unacked = core.backlog(),
            "recovered from the checkpoint"
        );
    }
    for resume in &resumed {
        executors.resume(resume, now);
    }
    let client = match config.bind {
        Some(local) => Client::bind(local, &tls, config.transport.clone())?,
        None => Client::new(&tls, config.transport.clone())?,
    };
    let client = Arc::new(client);
    let follow = FollowConfig {
        pacing: Pacing::Backoff {
            initial: config.backoff_min,
            max: config.backoff_max,
        },
        // Up to three redirects in a row are followed at once.
        redirects_at_once: 3,
        // A master that just failed (a dead leader) is not tried again, nor redirected to,
        // while the followers elect another.
        pass_over: DEFAULT_PASS_OVER,
        seed: rand::random(),
    };
    let session = LeaderSession::new(
        Arc::clone(&client),
        config.masters.clone(),
        SessionConfig {
            follow,
            join_timeout: config.register_timeout,
            outbox_capacity: fullerene_client::DEFAULT_OUTBOX_CAPACITY,
        },
    )
    .map_err(|_| AgentError::NoMasters)?;
    tracing::info!(
        agent = %agent_id,
        resources = %config.resources,
        masters = ?config.masters,
        "agent starting"
    );
    let status_retry = config.status_retry;
    let resource_check = config.resource_check.as_ref().map(|check| {
        let mut interval =
            tokio::time::interval_at(Instant::now() + check.interval, check.interval);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        interval
    });
    let (file_answers_tx, file_answers) = mpsc::unbounded_channel();
    let gc_every = config.sandbox_gc_interval.max(Duration::from_secs(1));
    let mut sandbox_gc = tokio::time::interval_at(Instant::now() + gc_every, gc_every);
    sandbox_gc.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut shell = Shell {
        agent_id,
        config,
        clock,
        core,
        checkpoint,
        executors,
        exec_rx,
        client,
        session,
        liveness: None,
        attempt_started: None,
        heartbeat_seq: 0,
        retry: tokio::time::interval(status_retry),
        acked_since_retry: true,
        resource_check,
        file_reads: Arc::new(tokio::sync::Semaphore::new(MAX_FILE_READS_IN_FLIGHT)),
        file_answers_tx,
        file_answers,
        collected: Arc::new(std::sync::Mutex::new(Collected::new(
            sandbox_io::COLLECTED_REMEMBERED,
        ))),
        sandbox_gc,
        sandbox_gc_run: None,
    };
    shell
        .retry
        .set_missed_tick_behavior(MissedTickBehavior::Delay);
    shell.publish();
    let result = shell.run_loop(shutdown).await;
    shell.stop();
    result
}

/// The heartbeats of a registered session, and how long the master may stay silent (no
/// answer even to heartbeats) before the session is given up.
struct Liveness {
    heartbeat: Interval,
    silence_limit: Duration,
    last_heard: Instant,
}

impl Liveness {
    /// How long the master has been silent, when that is past the limit.
    fn overdue(&self) -> Option<Duration> {
        Some(self.last_heard.elapsed()).filter(|silent| *silent > self.silence_limit)
    }
}

enum Event {
    Shutdown,
    Exec(ExecEvent),
    Session(SessionEvent<AgentSession>),
    Heartbeat,
    Retry,
    CheckResources,
    FileAnswered(FileReadAnswer),
    CollectSandboxes,
}

struct Shell {
    agent_id: AgentId,
    config: AgentConfig,
    /// The one clock the core's and the executors' `now` is read from.
    clock: SystemClock,
    core: AgentCore,
    checkpoint: Checkpoint,
    executors: Executors,
    exec_rx: mpsc::UnboundedReceiver<ExecEvent>,
    client: Arc<Client>,
    session: LeaderSession<AgentSession>,
    /// Set while a session is registered.
    liveness: Option<Liveness>,
    /// When the current registration attempt was sent.
    attempt_started: Option<Instant>,
    heartbeat_seq: u64,
    retry: Interval,
    acked_since_retry: bool,
    resource_check: Option<Interval>,
    /// Slots for sandbox file reads in flight ([`MAX_FILE_READS_IN_FLIGHT`]).
    file_reads: Arc<tokio::sync::Semaphore>,
    /// Where the blocking reads leave their answers for the loop to send.
    file_answers_tx: mpsc::UnboundedSender<FileReadAnswer>,
    file_answers: mpsc::UnboundedReceiver<FileReadAnswer>,
    /// The sandboxes the garbage collection removed lately.
    collected: sandbox_io::CollectedSandboxes,
    sandbox_gc: Interval,
    /// The collection's pass under way, if one is: passes never overlap.
    sandbox_gc_run: Option<tokio::task::JoinHandle<usize>>,
}

impl Shell {
    async fn run_loop<F: Future<Output = ()>>(&mut self, shutdown: F) -> Result<(), AgentError> {
        tokio::pin!(shutdown);
        loop {
            let event = self.next_event(&mut shutdown).await;
            match event {
                Event::Shutdown => return Ok(()),
                Event::Exec(event) => {
                    self.executors.reap(&event.task);
                    let now = self.clock.now();
                    let actions = self
                        .core
                        .finished(&event.task, event.outcome, event.detail, now);
                    self.apply(actions).await?;
                }
                Event::Session(SessionEvent::Due) => self.start_attempt(),
                Event::Session(SessionEvent::Joined { addr, welcome }) => {
                    self.on_registered(addr, welcome).await?;
                }
                Event::Session(SessionEvent::Message(message)) => {
                    if let Some(silent) = self.liveness.as_ref().and_then(Liveness::overdue) {
                        self.lose_session(&format!(
                            "a message came after {silent:?} of silence (was this process \
                             paused?); not acting on it, registering again"
                        ));
                        continue;
                    }
                    if let Some(liveness) = self.liveness.as_mut() {
                        liveness.last_heard = Instant::now();
                    }
                    self.on_master(message).await?;
                }
                Event::Session(SessionEvent::Lost { reason }) => {
                    // The session already gave it up and scheduled the next attempt.
                    self.liveness = None;
                    tracing::warn!(why = %reason, "session with the master lost; reconnecting");
                    m::reconnect();
                }
                Event::Heartbeat => {
                    if let Some(silent) = self.liveness.as_ref().and_then(Liveness::overdue) {
                        self.lose_session(&format!(
                            "no message from the master for {silent:?}, not even heartbeat acks"
                        ));
                        continue;
                    }
                    self.heartbeat_seq += 1;
                    let seq = self.heartbeat_seq;
                    self.send(AgentToMaster::Heartbeat { seq });
                }
                Event::Retry => {
                    if self.session.is_joined()
                        && !self.acked_since_retry
                        && self.core.backlog() > 0
                    {
                        tracing::debug!(
                            backlog = self.core.backlog(),
                            "resending unacknowledged updates"
                        );
                        self.resend_unacked();
                    }
                    self.acked_since_retry = false;
                }
                Event::CheckResources => self.check_resources(),
                Event::FileAnswered(answer) => self.send(AgentToMaster::FileRead(answer)),
                Event::CollectSandboxes => self.collect_sandboxes(),
            }
            self.publish();
        }
    }

    async fn next_event<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> Event {
        let Shell {
            exec_rx,
            session,
            liveness,
            retry,
            resource_check,
            file_answers,
            sandbox_gc,
            ..
        } = self;
        let joined = session.is_joined();
        let heartbeat = async {
            match liveness.as_mut() {
                Some(liveness) if joined => {
                    liveness.heartbeat.tick().await;
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.as_mut() => Event::Shutdown,
            Some(event) = exec_rx.recv() => Event::Exec(event),
            event = session.next() => Event::Session(event),
            () = heartbeat => Event::Heartbeat,
            _ = retry.tick() => Event::Retry,
            Some(answer) = file_answers.recv() => Event::FileAnswered(answer),
            _ = sandbox_gc.tick() => Event::CollectSandboxes,
            () = async {
                match resource_check.as_mut() {
                    Some(interval) => {
                        interval.tick().await;
                    }
                    None => std::future::pending().await,
                }
            } => Event::CheckResources,
        }
    }

    /// Executes the core's actions in order; `Start`s and `Kill`s may produce more.
    async fn apply(&mut self, actions: Vec<Action>) -> Result<(), AgentError> {
        let mut queue: VecDeque<Action> = actions.into();
        // Updates wait here until one fsync has made them all durable, so that a bundle of
        // launches costs a couple of fsyncs, not one per update.
        let mut outbox = Vec::new();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::Persist(record) => self.checkpoint.append(&record)?,
                Action::Send(update) => outbox.push(update),
                Action::Start { framework_id, spec } => {
                    // The launch is durable before its process exists, so a restarted agent
                    // knows about every process it may have started.
                    self.checkpoint.sync()?;
                    m::launched();
                    let now = self.clock.now();
                    let key = TaskKey::new(framework_id.clone(), spec.id.clone());
                    self.log_event(|agent| event_log::Event::TaskStarting {
                        agent,
                        task: key.clone(),
                        // The core validated the launch's resources before asking for a start.
                        resources: spec.resources.to_vec().unwrap_or(ResourceVec::ZERO),
                    });
                    self.collected
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&self.executors.sandbox(&framework_id, &spec.id));
                    let more = match self.executors.start(&framework_id, &spec, now) {
                        Ok(started) => {
                            tracing::info!(task = %key, "task started");
                            self.core.started(&key, started.runtime, started.note, now)
                        }
                        Err(why) => {
                            tracing::warn!(task = %key, %why, "task could not start");
                            self.core
                                .finished(&key, Outcome::LaunchFailed(why), String::new(), now)
                        }
                    };
                    for (i, action) in more.into_iter().enumerate() {
                        queue.insert(i, action);
                    }
                }
                Action::Kill { task, grace } => {
                    self.checkpoint.sync()?;
                    if !self.executors.kill(&task, grace) {
                        let more = self.core.finished(
                            &task,
                            Outcome::NotRunning,
                            String::new(),
                            self.clock.now(),
                        );
                        for (i, action) in more.into_iter().enumerate() {
                            queue.insert(i, action);
                        }
                    }
                }
            }
        }
        // Durable before it leaves the machine.
        self.checkpoint.sync()?;
        for update in outbox {
            self.log_event(|agent| event_log::Event::UpdateSent {
                agent,
                task: update.key(),
                seq: update.seq,
                state: update.state,
            });
            self.send(AgentToMaster::Status(update));
        }
        if self.checkpoint.should_compact() {
            self.checkpoint.compact(&self.core.snapshot())?;
        }
        Ok(())
    }

    /// Appends what `event` makes (given this agent's id) to the event log, if there is one.
    fn log_event(&self, event: impl FnOnce(AgentId) -> event_log::Event) {
        if let Some(log) = &self.config.event_log {
            log.log(event(self.agent_id.clone()));
        }
    }

    /// Queues a frame for the session, if there is one; a session whose writer has stopped is
    /// lost (what was not acked is resent after the next registration).
    fn send(&mut self, message: AgentToMaster) {
        let sent = self.session.send(message);
        self.settle_send(sent);
    }

    /// Sends every unacknowledged update again, each task's in order.
    fn resend_unacked(&mut self) {
        let unacked = self.core.unacked();
        for update in &unacked {
            self.log_event(|agent| event_log::Event::UpdateSent {
                agent,
                task: update.key(),
                seq: update.seq,
                state: update.state,
            });
        }
        let unacked = unacked.into_iter().map(AgentToMaster::Status);
        let sent = self.session.replay(unacked);
        self.settle_send(sent);
    }

    /// A session that cannot take more (its writer stopped, or its master stopped reading) is
    /// given up; without a session, what matters is replayed after the next registration.
    fn settle_send(&mut self, sent: Result<(), SendError>) {
        match sent {
            Ok(()) | Err(SendError::NotJoined) => {}
            Err(error @ (SendError::WriterStopped | SendError::Full)) => {
                self.lose_session(&error.to_string());
            }
        }
    }

    /// Registers with the master the session chose, saying what is true now.
    fn start_attempt(&mut self) {
        let register = AgentToMaster::Register {
            hostname: self.config.hostname.clone(),
            resources: self.core.config().total.into(),
            attributes: self.config.attributes.clone(),
            tasks: self.core.register_tasks(),
            executors: self.config.executors.iter().cloned().collect(),
            isolation: self.executors.task_isolation(),
        };
        self.attempt_started = Some(Instant::now());
        self.session.attempt(register);
    }

    async fn on_registered(
        &mut self,
        addr: SocketAddr,
        welcome: Registered,
    ) -> Result<(), AgentError> {
        let Registered {
            heartbeat_interval,
            lost_after,
            kill,
        } = welcome;
        tracing::info!(
            master = %addr,
            heartbeat = ?heartbeat_interval,
            tasks = self.core.tasks().count(),
            "registered"
        );
        // The interval comes from the master: keep it sane (10 ms to an hour).
        let period =
            heartbeat_interval.clamp(Duration::from_millis(10), Duration::from_secs(3_600));
        let silence_limit = session_silence_limit(period, lost_after);
        let waited = self.attempt_started.take().map(|t| t.elapsed());
        if let Some(waited) = waited.filter(|waited| *waited > silence_limit) {
            self.lose_session(&format!(
                "the registration was answered {waited:?} after it was sent (was this process \
                 paused?); not acting on it, registering again"
            ));
            return Ok(());
        }
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.liveness = Some(Liveness {
            heartbeat,
            silence_limit,
            last_heard: Instant::now(),
        });
        self.acked_since_retry = true;
        // Unacknowledged updates go first, in order, then whatever the kills produce.
        self.resend_unacked();
        self.log_event(|agent| event_log::Event::AgentRegistered {
            agent,
            killing: kill.clone(),
        });
        let actions = self.core.registered(&kill);
        self.apply(actions).await
    }

    async fn on_master(&mut self, message: MasterToAgent) -> Result<(), AgentError> {
        match &message {
            MasterToAgent::StatusAck(ack) => {
                self.log_event(|agent| event_log::Event::UpdateAcked {
                    agent,
                    task: ack.key(),
                    seq: ack.seq,
                });
            }
            MasterToAgent::Registered { kill, .. } => {
                self.log_event(|agent| event_log::Event::AgentRegistered {
                    agent,
                    killing: kill.clone(),
                });
            }
            _ => {}
        }
        match self.core.on_master(message, self.clock.now()) {
            FromMaster::Act {
                actions,
                acknowledged,
            } => {
                if acknowledged {
                    self.acked_since_retry = true;
                }
                self.apply(actions).await?;
            }
            FromMaster::Redirect(redirect) => {
                let from = self.session.master();
                tracing::info!(?from, leader = ?redirect.leader, "the master is no longer the leader");
                m::reconnect();
                self.liveness = None;
                self.session.redirected(redirect.leader);
            }
            FromMaster::Error(error) => {
                tracing::warn!(%error, "the master reported an error");
            }
            FromMaster::ReadFile(read) => self.read_file(read),
        }
        Ok(())
    }

    /// Starts a sandbox file read on a blocking thread, or refuses it at once (a bad name, or
    /// too many reads in flight). The answer comes back as [`Event::FileAnswered`].
    fn read_file(&mut self, read: FileRead) {
        let request = read.request;
        let refuse = |shell: &mut Shell, refusal: FileRefusal| {
            shell.send(AgentToMaster::FileRead(FileReadAnswer {
                request,
                outcome: FileReadOutcome::Refused(refusal),
            }));
        };
        let plan = match self.core.plan_file_read(&read) {
            Ok(plan) => plan,
            Err(refusal) => return refuse(self, refusal),
        };
        let Ok(slot) = Arc::clone(&self.file_reads).try_acquire_owned() else {
            return refuse(self, FileRefusal::Busy);
        };
        let sandbox = self
            .executors
            .sandbox(&plan.task.framework_id, &plan.task.task_id);
        let collected = Arc::clone(&self.collected);
        let answers = self.file_answers_tx.clone();
        tokio::task::spawn_blocking(move || {
            let outcome = sandbox_io::read_sandbox_file(
                &sandbox,
                &plan.name,
                read.offset,
                read.length,
                plan.task_ended,
                &collected,
            );
            drop(slot);
            // The loop is gone only when the agent stops.
            let _ = answers.send(FileReadAnswer { request, outcome });
        });
    }

    /// Starts a pass of the sandbox garbage collection on a blocking thread, unless one is
    /// still under way; the sandboxes of tasks that have not ended are kept.
    fn collect_sandboxes(&mut self) {
        if self
            .sandbox_gc_run
            .as_ref()
            .is_some_and(|run| !run.is_finished())
        {
            return;
        }
        let running: std::collections::HashSet<PathBuf> = self
            .core
            .tasks()
            .filter(|entry| !entry.state.is_terminal())
            .map(|entry| self.executors.sandbox(&entry.framework_id, &entry.spec.id))
            .collect();
        let root = self.config.work_dir.join("sandboxes");
        let policy = self.config.sandbox_gc;
        let now_ms = self.clock.now().wall_ms();
        let collected = Arc::clone(&self.collected);
        self.sandbox_gc_run = Some(tokio::task::spawn_blocking(move || {
            sandbox_io::collect_sandboxes(&root, &running, policy, now_ms, &collected)
        }));
    }

    /// Measures the machine; new totals go to the core and, if registered, to the master (a
    /// later registration carries them anyway).
    fn check_resources(&mut self) {
        let Some(check) = &self.config.resource_check else {
            return;
        };
        let measured = (check.measure)();
        let current = self.core.config().total;
        if measured == current {
            return;
        }
        tracing::info!(from = %current, to = %measured, "the machine's capacity changed");
        self.core.set_total(measured);
        self.send(AgentToMaster::UpdateResources {
            resources: measured.into(),
        });
    }

    /// Gives the session up; the next attempt goes to the next master after a backoff.
    fn lose_session(&mut self, why: &str) {
        self.liveness = None;
        if self.session.lose(why) {
            tracing::warn!(%why, "session with the master lost; reconnecting");
            m::reconnect();
        }
    }

    fn publish(&self) {
        m::tasks_running(self.core.running_count());
        m::backlog(self.core.backlog());
        m::connected(self.session.is_joined());
        let used = self.core.used();
        m::used_cpus(used[ResourceKind::Cpus]);
    }

    fn stop(&mut self) {
        if let Err(error) = self.checkpoint.sync() {
            tracing::warn!(%error, "cannot sync the checkpoint at shutdown");
        }
        self.liveness = None;
        self.session.close("agent shutting down");
        self.client.close();
        tracing::info!(
            agent = %self.agent_id,
            tasks = self.core.active_count(),
            "agent stopped; its tasks keep running"
        );
    }
}

/// Why limits are not enforced, when they are not.
fn limits_reason(limits: &Limits) -> Option<&str> {
    match limits {
        Limits::Enforced(_) => None,
        Limits::NotEnforced { reason } => Some(reason),
    }
}

/// Holds `<work-dir>/agent.lock` with `flock` for as long as the agent runs.
struct WorkDirLock {
    _file: std::fs::File,
}

fn lock_work_dir(dir: &Path) -> Result<WorkDirLock, AgentError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| AgentError::WorkDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let lock = dir.join("agent.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock)
        .map_err(io)?;
    // SAFETY: flock on a file descriptor this function owns; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(AgentError::WorkDirLocked {
            path: dir.to_path_buf(),
            lock,
        });
    }
    Ok(WorkDirLock { _file: file })
}
