//! The agent's sans-IO core: the task table and each task's ordered status stream.
//!
//! DESIGN.md, "a task's life", step 6: status updates flow agent → master and are acknowledged
//! end to end, at least once and in order per task, kept on the agent's disk until acked. The
//! core decides *what* happens; the shell ([`crate::shell`]) does it. Every method takes the
//! current time where it needs one and returns [`Action`]s, executed in order by the shell:
//!
//! - [`Action::Persist`] appends a [`Record`] to the checkpoint. Every [`Action::Send`] of an
//!   update is preceded by the `Persist` of the same update, so an update is never sent before
//!   it is on disk (the shell fsyncs before it sends).
//! - [`Action::Send`] sends a status update to the master (if connected; otherwise it is sent
//!   after the next registration with every other unacknowledged update).
//! - [`Action::Start`] and [`Action::Kill`] drive the executors; their results come back as
//!   [`AgentCore::started`] and [`AgentCore::finished`].
//!
//! The core's state is a pure function of the records it emitted, so [`AgentCore::recover`]
//! rebuilds it from the checkpoint, and [`AgentCore::snapshot`] writes it back compactly.
//!
//! Time comes in as [`Now`] and spans as [`Duration`]s; the core reads only the wall clock, to
//! stamp updates. What leaves the process keeps its integer milliseconds: the wire's
//! `timestamp_ms`, and the checkpoint's records, whose format outlives any one agent binary.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use fullerene_proto::codec;
use fullerene_proto::ids::{AgentId, FrameworkId, TaskId, TaskKey};
use fullerene_proto::messages::{
    CommandSpec, Executor, FileRead, FileRefusal, MasterToAgent, Redirect, StatusAck, StatusReason,
    StatusUpdate, TaskReport, TaskSpec, TaskState, UnixMillis, WireError,
};
use fullerene_proto::resources::ResourceVec;
use fullerene_proto::time::{whole_millis, Now};
use fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE;
use serde::{Deserialize, Serialize};

/// The name of the executor that runs a real process ([`Executor::Command`]).
pub const EXECUTOR_COMMAND: &str = "command";
/// The name of the built-in executor that runs nothing for a while ([`Executor::Sleep`]).
pub const EXECUTOR_SLEEP: &str = "sleep";

/// The executor name a task asks for, as agents list them in `Register { executors }`.
pub fn executor_name(executor: &Executor) -> &'static str {
    match executor {
        Executor::Command(_) => EXECUTOR_COMMAND,
        Executor::Sleep { .. } => EXECUTOR_SLEEP,
    }
}

/// What the executor needs to find a running task again after an agent restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Runtime {
    /// A process group led by `pid` (the task's wrapper shell).
    Process {
        /// The wrapper's pid, which is also the process group id.
        pid: i32,
        /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so that a
        /// reused pid is not mistaken for the task.
        start_ticks: u64,
    },
    /// A sleep task that finishes at this wall-clock time.
    Sleep {
        /// When it finishes.
        deadline_ms: UnixMillis,
    },
}

/// Who asked for a task to be killed, which decides the reason of its KILLED update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KillCause {
    /// A `Kill` from the master on the framework's behalf.
    Framework,
    /// The master had declared this agent lost and listed the task in `Registered { kill }`.
    AgentLost,
}

/// How a task's execution ended, as the executor saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The process exited with this code.
    Exited(i32),
    /// The process was ended by this signal.
    Signaled(i32),
    /// A sleep task's duration elapsed.
    SleepDone,
    /// The process could not be started; the text says why.
    LaunchFailed(String),
    /// After an agent restart the task's process was gone and its exit code unknown.
    Vanished,
    /// The task had not started (or had already ended) when a kill came.
    NotRunning,
    /// The executor stopped the task on request before it ended (a killed sleep).
    Stopped,
    /// The kernel ended the task for exceeding a limit it was held to (memory.max); the text
    /// says which.
    LimitExceeded(String),
}

/// One entry of the checkpoint: the core's state is what these records say, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A launch was received (accepted or refused: the refusal's FAILED update follows).
    Launched {
        /// The task's framework.
        framework_id: FrameworkId,
        /// The task as launched.
        spec: TaskSpec,
        /// Whether it was accepted; a refused launch never holds resources.
        accepted: bool,
    },
    /// The executor started the task.
    Started {
        /// The task.
        task: TaskKey,
        /// How to find it again.
        runtime: Runtime,
    },
    /// A kill was asked for.
    KillRequested {
        /// The task.
        task: TaskKey,
        /// Who asked.
        cause: KillCause,
        /// Grace period between the polite signal and the kill, in milliseconds.
        grace_ms: u64,
    },
    /// A status update, recorded before it is sent.
    Update(StatusUpdate),
    /// The master acknowledged `seq` and everything before it.
    Ack {
        /// The task.
        task: TaskKey,
        /// The highest acknowledged sequence number.
        seq: u64,
    },
    /// Compaction: a task's whole state except its unacknowledged updates, which follow as
    /// [`Record::Update`]s.
    Snapshot(TaskSnapshot),
}

/// A task's state in one record (see [`Record::Snapshot`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSnapshot {
    /// The task's framework.
    pub framework_id: FrameworkId,
    /// The task as launched.
    pub spec: TaskSpec,
    /// Its latest state.
    pub state: TaskState,
    /// Whether it was accepted (refused launches never hold resources).
    pub accepted: bool,
    /// The sequence number of its latest update.
    pub last_seq: u64,
    /// The highest acknowledged sequence number.
    pub acked_seq: u64,
    /// How to find it again, once started.
    pub runtime: Option<Runtime>,
    /// A kill asked for and not yet finished, with its grace period in milliseconds.
    pub kill: Option<(KillCause, u64)>,
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Append this record to the checkpoint (and fsync before the next `Send`).
    Persist(Record),
    /// Send this status update to the master.
    Send(StatusUpdate),
    /// Start this task with its executor, then report [`AgentCore::started`] or
    /// [`AgentCore::finished`] with [`Outcome::LaunchFailed`].
    Start {
        /// The task's framework.
        framework_id: FrameworkId,
        /// The task.
        spec: TaskSpec,
    },
    /// Kill this task (polite signal, `grace`, then kill), then report
    /// [`AgentCore::finished`].
    Kill {
        /// The task.
        task: TaskKey,
        /// Grace period.
        grace: Duration,
    },
}

/// How long an agent's session may go without a word from the master before the agent gives
/// it up: ten heartbeat periods, at least 10 s, and at most half the master's agent-lost
/// timeout.
///
/// It also bounds how stale what the agent acts on may be. A frame read after a longer silence
/// (the process was paused, or stalled), or a registration answered that long after it was
/// asked, may come from a session the master has since ended by declaring the agent lost, and
/// a launch in it may be of tasks already relaunched elsewhere: running them would make two
/// instances. The session is given up instead, and the agent registers again (where the
/// master's kill list settles what it still runs). Half the lost timeout leaves room for the
/// heartbeat period and for the two clocks' rates.
pub fn session_silence_limit(heartbeat_period: Duration, lost_after: Duration) -> Duration {
    (heartbeat_period * 10)
        .max(Duration::from_secs(10))
        .min(lost_after / 2)
}

/// What the core is configured with.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// This agent's id (from its certificate).
    pub agent_id: AgentId,
    /// The resources the agent offers.
    pub total: ResourceVec,
    /// The executors this agent runs ([`EXECUTOR_COMMAND`], [`EXECUTOR_SLEEP`]).
    pub executors: BTreeSet<String>,
    /// How far fungible resources (disk and network bandwidth) may be overbooked, as a fraction
    /// of the total, matching the master's allowance (Graphene §5).
    pub overbook_allowance: f64,
}

impl CoreConfig {
    /// A configuration with both executors and a 25% overbooking allowance for bandwidth.
    pub fn new(agent_id: AgentId, total: ResourceVec) -> CoreConfig {
        CoreConfig {
            agent_id,
            total,
            executors: [EXECUTOR_COMMAND, EXECUTOR_SLEEP]
                .into_iter()
                .map(String::from)
                .collect(),
            overbook_allowance: DEFAULT_OVERBOOK_ALLOWANCE,
        }
    }
}

/// One task in the table.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskEntry {
    /// The task's framework.
    pub framework_id: FrameworkId,
    /// The task as launched.
    pub spec: TaskSpec,
    /// Its latest state.
    pub state: TaskState,
    /// Whether the launch was accepted (a refused one never held resources).
    pub accepted: bool,
    /// The sequence number of its latest update (0 before the first).
    pub last_seq: u64,
    /// The highest acknowledged sequence number.
    pub acked_seq: u64,
    /// Updates not yet acknowledged, in sequence order.
    pub unacked: VecDeque<StatusUpdate>,
    /// How to find it again, once started.
    pub runtime: Option<Runtime>,
    /// A kill asked for and not yet finished, with its grace period.
    pub kill: Option<(KillCause, Duration)>,
}

impl TaskEntry {
    /// The task's key.
    pub fn key(&self) -> TaskKey {
        TaskKey::new(self.framework_id.clone(), self.spec.id.clone())
    }

    /// Whether the task holds the agent's resources: accepted and not yet ended.
    pub fn holds_resources(&self) -> bool {
        self.accepted && !self.state.is_terminal()
    }
}

/// What a recovered task needs from the executors (see [`AgentCore::to_resume`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Resume {
    /// The task.
    pub task_id: TaskId,
    /// Its framework.
    pub framework_id: FrameworkId,
    /// The task as launched.
    pub spec: TaskSpec,
    /// Where it runs, if it had started.
    pub runtime: Option<Runtime>,
    /// A kill to finish, if one was under way, with its grace period.
    pub kill: Option<(KillCause, Duration)>,
}

impl Resume {
    /// The task's key.
    pub fn key(&self) -> TaskKey {
        TaskKey::new(self.framework_id.clone(), self.task_id.clone())
    }
}

/// What a message from the master asks of the shell ([`AgentCore::on_master`]).
#[derive(Debug)]
pub enum FromMaster {
    /// Carry out the core's actions (none, for a heartbeat's answer).
    Act {
        /// What the core decided.
        actions: Vec<Action>,
        /// An acknowledgement retired updates: the shell's timer for resending the rest
        /// starts again.
        acknowledged: bool,
    },
    /// The master does not lead: the shell drops the session and connects again, to the leader
    /// it names if it names one.
    Redirect(Redirect),
    /// A request failed on the master; nothing to do but say so.
    Error(WireError),
    /// Read a sandbox file (see [`AgentCore::plan_file_read`]) and answer the master, off the
    /// shell's event loop.
    ReadFile(FileRead),
}

/// A file read the core allowed: what the shell opens, and what the answer says of the task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePlan {
    /// The task whose sandbox holds the file.
    pub task: TaskKey,
    /// The file's name in the sandbox, checked to be a plain name.
    pub name: String,
    /// Whether the task has ended (or the agent forgot it, which it does once its end is
    /// acknowledged): a follower that reached the end of the file may stop.
    pub task_ended: bool,
}

/// The task table and its status streams. Deterministic: no clock, no disk, no sockets.
///
/// The shell feeds it what happens (a launch from the master, an executor's report, an
/// acknowledgement) and carries out the [`Action`]s it returns, in order: checkpoint records
/// are persisted before the updates that follow them are sent.
///
/// ```
/// use std::time::Duration;
///
/// use fullerene_agent::core::{Action, AgentCore, CoreConfig, Outcome, Runtime};
/// use fullerene_proto::messages::{Executor, StatusAck, TaskSpec, TaskState};
/// use fullerene_proto::time::{Now, Time};
/// use fullerene_proto::{ResourceVec, Resources, TaskKey};
///
/// let total: ResourceVec = "cpus=4,mem_mib=4096".parse()?;
/// let mut core = AgentCore::new(CoreConfig::new("agent-1".into(), total));
/// let task = TaskSpec {
///     id: "t1".into(),
///     name: "t1".to_string(),
///     executor: Executor::Sleep { duration_ms: 10 },
///     resources: Resources::from("cpus=1,mem_mib=512".parse::<ResourceVec>()?),
///     origin: None,
///     kill_grace_ms: 0,
/// };
/// let now = Now::at(Time::from_millis(1_000));
/// let actions = core.launch(&"fw-1".into(), vec![task], now);
/// assert!(matches!(actions.as_slice(), [Action::Persist(_), Action::Start { .. }]));
///
/// // The executor started it (recorded with where it runs), then it ended: each update is
/// // persisted, then sent.
/// let key = TaskKey::new("fw-1".into(), "t1".into());
/// let running = core.started(&key, Runtime::Sleep { deadline_ms: 1_010 }, String::new(), now);
/// assert!(matches!(
///     &running[..],
///     [Action::Persist(_), Action::Persist(_), Action::Send(u)] if u.state == TaskState::Running
/// ));
/// let later = now.after(Duration::from_millis(10));
/// let finished = core.finished(&key, Outcome::SleepDone, String::new(), later);
/// assert!(finished.iter().any(|a| matches!(a, Action::Send(u) if u.state == TaskState::Finished)));
///
/// // Kept (and resent after a reconnect) until the master acknowledges it.
/// assert_eq!(core.unacked().len(), 2);
/// core.ack(&StatusAck { task_id: "t1".into(), framework_id: "fw-1".into(), seq: 2 });
/// assert!(core.unacked().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct AgentCore {
    config: CoreConfig,
    /// Keyed by framework and task: two frameworks may run tasks with the same id here (a job
    /// resubmitted under a new framework reuses its task ids).
    tasks: BTreeMap<TaskKey, TaskEntry>,
}

impl AgentCore {
    /// An empty table (a first start).
    pub fn new(config: CoreConfig) -> AgentCore {
        AgentCore {
            config,
            tasks: BTreeMap::new(),
        }
    }

    /// Rebuilds the table from checkpoint records, in the order they were written.
    ///
    /// Records about a task the records never launched are ignored: after a compaction nothing
    /// refers to a forgotten task, so they can only be acks that arrived after it was dropped.
    pub fn recover(config: CoreConfig, records: impl IntoIterator<Item = Record>) -> AgentCore {
        let mut core = AgentCore::new(config);
        for record in records {
            core.replay(record);
        }
        core
    }

    fn replay(&mut self, record: Record) {
        match record {
            Record::Launched {
                framework_id,
                spec,
                accepted,
            } => {
                let key = TaskKey::new(framework_id.clone(), spec.id.clone());
                self.tasks
                    .insert(key, new_entry(framework_id, spec, accepted));
            }
            Record::Snapshot(s) => {
                self.tasks.insert(
                    TaskKey::new(s.framework_id.clone(), s.spec.id.clone()),
                    TaskEntry {
                        framework_id: s.framework_id,
                        spec: s.spec,
                        state: s.state,
                        accepted: s.accepted,
                        last_seq: s.last_seq,
                        acked_seq: s.acked_seq,
                        unacked: VecDeque::new(),
                        runtime: s.runtime,
                        kill: s
                            .kill
                            .map(|(cause, grace_ms)| (cause, Duration::from_millis(grace_ms))),
                    },
                );
            }
            Record::Started { task, runtime } => {
                if let Some(entry) = self.tasks.get_mut(&task) {
                    entry.runtime = Some(runtime);
                }
            }
            Record::KillRequested {
                task,
                cause,
                grace_ms,
            } => {
                if let Some(entry) = self.tasks.get_mut(&task) {
                    entry.kill = Some((cause, Duration::from_millis(grace_ms)));
                }
            }
            Record::Update(update) => {
                if let Some(entry) = self.tasks.get_mut(&update.key()) {
                    entry.last_seq = entry.last_seq.max(update.seq);
                    entry.state = update.state;
                    if update.state.is_terminal() {
                        entry.kill = None;
                    }
                    if update.seq > entry.acked_seq
                        && entry.unacked.back().is_none_or(|u| u.seq < update.seq)
                    {
                        entry.unacked.push_back(update);
                    }
                }
            }
            Record::Ack { task, seq } => {
                self.apply_ack(&task, seq);
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// New totals (the machine's capacity changed). Running tasks keep what they hold; launches
    /// are checked against the new totals.
    pub fn set_total(&mut self, total: ResourceVec) {
        self.config.total = total;
    }

    /// A task, if the table holds it.
    pub fn task(&self, task: &TaskKey) -> Option<&TaskEntry> {
        self.tasks.get(task)
    }

    /// Every task in the table, by framework and id.
    pub fn tasks(&self) -> impl Iterator<Item = &TaskEntry> {
        self.tasks.values()
    }

    /// Resources held by accepted tasks that have not ended.
    pub fn used(&self) -> ResourceVec {
        let mut used = ResourceVec::ZERO;
        for entry in self.tasks.values().filter(|e| e.holds_resources()) {
            // Accepted tasks passed validation, so their resources convert.
            if let Ok(demand) = entry.spec.resources.to_vec() {
                used += demand;
            }
        }
        used
    }

    /// Tasks that hold resources (staging or running).
    pub fn active_count(&self) -> usize {
        self.tasks.values().filter(|e| e.holds_resources()).count()
    }

    /// Tasks whose executor runs them now.
    pub fn running_count(&self) -> usize {
        self.tasks
            .values()
            .filter(|e| e.state == TaskState::Running)
            .count()
    }

    /// How many updates wait for an acknowledgement.
    pub fn backlog(&self) -> usize {
        self.tasks.values().map(|e| e.unacked.len()).sum()
    }

    /// What `Register { tasks }` carries: every task still running or with unacknowledged
    /// updates.
    pub fn register_tasks(&self) -> Vec<TaskReport> {
        self.tasks
            .values()
            .map(|e| TaskReport {
                task: TaskKey::new(e.framework_id.clone(), e.spec.id.clone()),
                state: e.state,
                seq: e.last_seq,
            })
            .collect()
    }

    /// Every unacknowledged update, each task's in sequence order: what to resend after a
    /// registration.
    pub fn unacked(&self) -> Vec<StatusUpdate> {
        self.tasks
            .values()
            .flat_map(|e| e.unacked.iter().cloned())
            .collect()
    }

    /// Tasks that have not ended, for the executors to re-attach to after a restart.
    pub fn to_resume(&self) -> Vec<Resume> {
        self.tasks
            .values()
            .filter(|e| e.holds_resources())
            .map(|e| Resume {
                task_id: e.spec.id.clone(),
                framework_id: e.framework_id.clone(),
                spec: e.spec.clone(),
                runtime: e.runtime.clone(),
                kill: e.kill,
            })
            .collect()
    }

    /// The table as compact records: a [`Record::Snapshot`] per task, then its unacknowledged
    /// updates. Recovering from these gives the same table.
    pub fn snapshot(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for e in self.tasks.values() {
            records.push(Record::Snapshot(TaskSnapshot {
                framework_id: e.framework_id.clone(),
                spec: e.spec.clone(),
                state: e.state,
                accepted: e.accepted,
                last_seq: e.last_seq,
                acked_seq: e.acked_seq,
                runtime: e.runtime.clone(),
                kill: e.kill.map(|(cause, grace)| (cause, whole_millis(grace))),
            }));
            records.extend(e.unacked.iter().cloned().map(Record::Update));
        }
        records
    }

    /// Why `spec` cannot run here, if it cannot: an executor this agent lacks, resources that
    /// do not parse, or more than is free (the agent's totals minus what its tasks hold).
    fn validate(&self, spec: &TaskSpec) -> Result<(), (StatusReason, String)> {
        let name = executor_name(&spec.executor);
        if !self.config.executors.contains(name) {
            let known: Vec<&str> = self.config.executors.iter().map(String::as_str).collect();
            return Err((
                StatusReason::UnknownExecutor,
                format!(
                    "agent {} has no `{name}` executor (it has: {})",
                    self.config.agent_id,
                    known.join(", ")
                ),
            ));
        }
        let demand = spec.resources.to_vec().map_err(|e| {
            (
                StatusReason::LaunchFailed,
                format!("invalid task resources: {e}"),
            )
        })?;
        let used = self.used();
        let total = self.config.total;
        if !(used + demand).fits_with_overbooking(&total, self.config.overbook_allowance) {
            let free = total.saturating_sub(&used);
            return Err((
                StatusReason::InsufficientResources,
                format!(
                    "task needs {demand} but agent {} has {free} free of {total}",
                    self.config.agent_id
                ),
            ));
        }
        Ok(())
    }

    /// Tasks sent by the master. Each accepted task is recorded and started; a refused one
    /// ends at once with a FAILED update (UnknownExecutor, InsufficientResources or
    /// LaunchFailed) and holds nothing. A task the table already holds (the same id of the same
    /// framework) is ignored: the launch is a duplicate.
    pub fn launch(
        &mut self,
        framework_id: &FrameworkId,
        tasks: Vec<TaskSpec>,
        now: Now,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        // Starts come after every launch record, so that one fsync covers the whole bundle.
        let mut starts = Vec::new();
        for spec in tasks {
            if self
                .tasks
                .contains_key(&TaskKey::new(framework_id.clone(), spec.id.clone()))
            {
                continue;
            }
            let size = codec::encode(&spec).map_or(usize::MAX, |b| b.len());
            let (spec, verdict) = if size > MAX_SPEC_BYTES {
                // Kept whole it could not even be checkpointed: keep what identifies it.
                let why = format!(
                    "the task's spec is {size} bytes encoded, over the agent's limit of \
                     {MAX_SPEC_BYTES}"
                );
                (stripped(spec), Err((StatusReason::LaunchFailed, why)))
            } else {
                let verdict = self.validate(&spec);
                (spec, verdict)
            };
            let key = TaskKey::new(framework_id.clone(), spec.id.clone());
            actions.push(Action::Persist(Record::Launched {
                framework_id: framework_id.clone(),
                spec: spec.clone(),
                accepted: verdict.is_ok(),
            }));
            self.tasks.insert(
                key.clone(),
                new_entry(framework_id.clone(), spec.clone(), verdict.is_ok()),
            );
            match verdict {
                Ok(()) => starts.push(Action::Start {
                    framework_id: framework_id.clone(),
                    spec,
                }),
                Err((reason, message)) => {
                    self.push_update(
                        &key,
                        TaskState::Failed,
                        Some(reason),
                        message,
                        now,
                        &mut actions,
                    );
                }
            }
        }
        actions.extend(starts);
        actions
    }

    /// The executor started the task: RUNNING, with `note` (e.g. that limits are not
    /// enforced) as the message.
    pub fn started(
        &mut self,
        task: &TaskKey,
        runtime: Runtime,
        note: String,
        now: Now,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(entry) = self.tasks.get_mut(task) else {
            return actions;
        };
        if entry.state.is_terminal() {
            return actions;
        }
        entry.runtime = Some(runtime.clone());
        actions.push(Action::Persist(Record::Started {
            task: task.clone(),
            runtime,
        }));
        if entry.state == TaskState::Staging {
            self.push_update(task, TaskState::Running, None, note, now, &mut actions);
        }
        actions
    }

    /// The task's execution ended: its terminal update. After a kill this is KILLED whatever
    /// the process did; otherwise exit code 0 or a finished sleep is FINISHED and anything
    /// else FAILED. A task already ended is left alone (the executor may report twice).
    pub fn finished(
        &mut self,
        task: &TaskKey,
        outcome: Outcome,
        detail: String,
        now: Now,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(entry) = self.tasks.get(task) else {
            return actions;
        };
        if entry.state.is_terminal() {
            return actions;
        }
        let join = |summary: String| {
            if detail.is_empty() {
                summary
            } else {
                format!("{summary}: {detail}")
            }
        };
        let (state, reason, message) = match (entry.kill, outcome) {
            (Some((cause, _)), outcome) => {
                let reason = match cause {
                    KillCause::Framework => StatusReason::KilledByFramework,
                    KillCause::AgentLost => StatusReason::AgentLost,
                };
                (
                    TaskState::Killed,
                    Some(reason),
                    join(format!("killed ({})", describe(&outcome))),
                )
            }
            (None, Outcome::Exited(0)) => (
                TaskState::Finished,
                Some(StatusReason::Exited { code: 0 }),
                join("exited with code 0".into()),
            ),
            (None, Outcome::SleepDone) => (TaskState::Finished, None, join("slept".into())),
            (None, Outcome::Exited(code)) => (
                TaskState::Failed,
                Some(StatusReason::Exited { code }),
                join(format!("exited with code {code}")),
            ),
            (None, Outcome::Signaled(signal)) => (
                TaskState::Failed,
                Some(StatusReason::Signaled { signal }),
                join(format!("killed by signal {signal}")),
            ),
            (None, Outcome::LimitExceeded(what)) => (
                TaskState::Failed,
                Some(StatusReason::LimitExceeded),
                join(format!("exceeded its {what} limit")),
            ),
            (None, Outcome::LaunchFailed(why)) => (
                TaskState::Failed,
                Some(StatusReason::LaunchFailed),
                join(format!("could not start: {why}")),
            ),
            (None, Outcome::Vanished | Outcome::NotRunning | Outcome::Stopped) => (
                TaskState::Failed,
                Some(StatusReason::AgentRestarted),
                join("the agent restarted and the task's process is gone with no exit code".into()),
            ),
        };
        self.push_update(task, state, reason, message, now, &mut actions);
        actions
    }

    /// A kill from the master. Unknown or ended tasks need nothing (their updates are already
    /// queued); a task of another framework with the same id is another key, left alone.
    pub fn kill(&mut self, task: &TaskKey, grace: Duration) -> Vec<Action> {
        self.request_kill(task, KillCause::Framework, grace)
    }

    /// One message of the master's session: launches, kills, acknowledgements and
    /// registrations go to the core's handlers; what only the shell can do (reconnect, report
    /// an error) is handed back. The agent's shell and the simulations' agents all dispatch
    /// through here.
    pub fn on_master(&mut self, message: MasterToAgent, now: Now) -> FromMaster {
        let act = |actions| FromMaster::Act {
            actions,
            acknowledged: false,
        };
        match message {
            MasterToAgent::Launch {
                framework_id,
                tasks,
            } => act(self.launch(&framework_id, tasks, now)),
            MasterToAgent::Kill {
                task_id,
                framework_id,
                grace_ms,
            } => act(self.kill(
                &TaskKey::new(framework_id, task_id),
                Duration::from_millis(grace_ms),
            )),
            MasterToAgent::StatusAck(ack) => {
                let actions = self.ack(&ack);
                FromMaster::Act {
                    acknowledged: !actions.is_empty(),
                    actions,
                }
            }
            MasterToAgent::Registered { kill, .. } => act(self.registered(&kill)),
            MasterToAgent::HeartbeatAck { .. } => act(Vec::new()),
            MasterToAgent::ReadFile(read) => FromMaster::ReadFile(read),
            MasterToAgent::Redirect(redirect) => FromMaster::Redirect(redirect),
            MasterToAgent::Error(error) => FromMaster::Error(error),
        }
    }

    /// Whether the read may go ahead, and what its answer says of the task; the refusal
    /// otherwise (a name that is not a plain file name, see
    /// [`crate::sandboxes::check_file_name`]). The range is clamped by the shell once it knows
    /// the file's size ([`crate::sandboxes::clamp_range`]).
    pub fn plan_file_read(&self, read: &FileRead) -> Result<FilePlan, FileRefusal> {
        let name = crate::sandboxes::check_file_name(&read.name)?.to_string();
        let task = TaskKey::new(read.framework_id.clone(), read.task_id.clone());
        let task_ended = self
            .tasks
            .get(&task)
            .is_none_or(|entry| entry.state.is_terminal());
        Ok(FilePlan {
            task,
            name,
            task_ended,
        })
    }

    /// Registration answered: kill the listed tasks (the master declared this agent lost and
    /// its tasks LOST) if they still run.
    pub fn registered(&mut self, kill: &[TaskKey]) -> Vec<Action> {
        let mut actions = Vec::new();
        for task in kill {
            let grace = match self.tasks.get(task) {
                Some(entry) => Duration::from_millis(entry.spec.kill_grace_ms),
                None => continue,
            };
            actions.extend(self.request_kill(task, KillCause::AgentLost, grace));
        }
        actions
    }

    fn request_kill(&mut self, task: &TaskKey, cause: KillCause, grace: Duration) -> Vec<Action> {
        let Some(entry) = self.tasks.get_mut(task) else {
            return Vec::new();
        };
        if entry.state.is_terminal() || entry.kill.is_some() {
            return Vec::new();
        }
        entry.kill = Some((cause, grace));
        vec![
            Action::Persist(Record::KillRequested {
                task: task.clone(),
                cause,
                grace_ms: whole_millis(grace),
            }),
            Action::Kill {
                task: task.clone(),
                grace,
            },
        ]
    }

    /// An acknowledgement: forget `seq` and everything before it. A task that has ended and
    /// has nothing left unacknowledged leaves the table. Duplicate or stale acks change
    /// nothing and record nothing.
    pub fn ack(&mut self, ack: &StatusAck) -> Vec<Action> {
        let task = ack.key();
        if self.apply_ack(&task, ack.seq) {
            vec![Action::Persist(Record::Ack { task, seq: ack.seq })]
        } else {
            Vec::new()
        }
    }

    fn apply_ack(&mut self, task: &TaskKey, seq: u64) -> bool {
        let Some(entry) = self.tasks.get_mut(task) else {
            return false;
        };
        // An ack beyond what was sent cannot be for this incarnation of the task.
        let seq = seq.min(entry.last_seq);
        if seq <= entry.acked_seq {
            return false;
        }
        entry.acked_seq = seq;
        while entry.unacked.front().is_some_and(|u| u.seq <= seq) {
            entry.unacked.pop_front();
        }
        if entry.state.is_terminal() && entry.unacked.is_empty() {
            self.tasks.remove(task);
        }
        true
    }

    fn push_update(
        &mut self,
        task: &TaskKey,
        state: TaskState,
        reason: Option<StatusReason>,
        message: String,
        now: Now,
        actions: &mut Vec<Action>,
    ) {
        let Some(entry) = self.tasks.get_mut(task) else {
            return;
        };
        entry.last_seq += 1;
        entry.state = state;
        if state.is_terminal() {
            entry.kill = None;
        }
        let update = StatusUpdate {
            task_id: task.task_id.clone(),
            framework_id: entry.framework_id.clone(),
            agent_id: self.config.agent_id.clone(),
            state,
            seq: entry.last_seq,
            reason,
            message,
            timestamp_ms: now.wall_ms(),
        };
        entry.unacked.push_back(update.clone());
        actions.push(Action::Persist(Record::Update(update.clone())));
        actions.push(Action::Send(update));
    }
}

/// The largest task spec (encoded) the agent runs: a checkpoint record must hold it with room
/// to spare within the codec's message limit.
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// An oversized spec reduced to what identifies the task.
fn stripped(spec: TaskSpec) -> TaskSpec {
    let executor = match spec.executor {
        Executor::Command(command) => Executor::Command(CommandSpec {
            program: command.program.chars().take(256).collect(),
            args: Vec::new(),
            env: BTreeMap::new(),
        }),
        sleep @ Executor::Sleep { .. } => sleep,
    };
    TaskSpec {
        id: TaskId::from(spec.id.0.chars().take(1024).collect::<String>()),
        name: spec.name.chars().take(256).collect(),
        executor,
        resources: Default::default(),
        origin: None,
        kill_grace_ms: spec.kill_grace_ms,
    }
}

fn new_entry(framework_id: FrameworkId, spec: TaskSpec, accepted: bool) -> TaskEntry {
    TaskEntry {
        framework_id,
        spec,
        state: TaskState::Staging,
        accepted,
        last_seq: 0,
        acked_seq: 0,
        unacked: VecDeque::new(),
        runtime: None,
        kill: None,
    }
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Exited(code) => format!("exited with code {code}"),
        Outcome::Signaled(signal) => format!("signal {signal}"),
        Outcome::SleepDone => "sleep had ended".into(),
        Outcome::LaunchFailed(why) => format!("had not started: {why}"),
        Outcome::Vanished => "process gone".into(),
        Outcome::NotRunning => "was not running".into(),
        Outcome::Stopped => "stopped before its end".into(),
        Outcome::LimitExceeded(what) => format!("exceeded its {what} limit"),
    }
}

#[cfg(test)]
mod tests;
