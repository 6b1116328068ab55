//! Every message that crosses a process boundary.
//!
//! The layout follows DESIGN.md's "a task's life". Each connection carries sessions; a session is
//! one bidirectional QUIC stream that starts with a [`SessionOpen`] naming its kind. The kinds a
//! peer may open depend on the role in its certificate, never on what the message says.
//!
//! | session | client → master | master → client |
//! | --- | --- | --- |
//! | agent | [`AgentToMaster`] | [`MasterToAgent`] |
//! | framework | [`FrameworkCall`] | [`MasterToFramework`] |
//! | operator | [`OperatorRequest`] | [`OperatorResponse`] |
//! | peer (master ↔ master) | [`PeerMessage`] | [`PeerMessage`] |

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, FrameworkId, MasterId, OfferId, TaskId, TaskKey};
use crate::reservations::{
    RejectedReservationInfo, ReservationCall, ReservationInfo, ReservationPolicy,
};
use crate::resources::Resources;

/// The demand summary a framework sends and the kind of an offer, shared with the allocator,
/// which defines them.
pub use fullerene_scheduling::{DemandSummary, OfferKind, PendingDemand, ReservationProgress};

/// Milliseconds since the Unix epoch. Used only for expiries and display: clocks never decide
/// correctness (DESIGN.md, failure model).
pub type UnixMillis = u64;

/// The first frame on every stream: which session the client wants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum SessionOpen {
    /// An agent's session with the master (agents only).
    Agent,
    /// A framework scheduler's session (frameworks only).
    Framework,
    /// Operator requests (operators, and masters acting as operators).
    Operator,
    /// Raft traffic between masters (masters only).
    Peer,
}

/// The answer to a [`SessionOpen`]: accepted, or why not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum SessionOpenReply {
    /// The session is open; the stream now carries the session's messages.
    Accepted,
    /// The session is refused and the stream will be closed.
    Refused(WireError),
}

// ---------------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------------

/// The address of the leading master, sent with redirects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct LeaderInfo {
    /// The leader's Raft id.
    pub id: MasterId,
    /// Where clients reach it.
    pub addr: SocketAddr,
    /// The term in which it leads.
    pub term: u64,
}

/// A follower's answer to a request only the leader serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Redirect {
    /// The leader, or `None` while no leader is known (the client should retry with backoff).
    pub leader: Option<LeaderInfo>,
}

/// What went wrong, as a machine-readable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum ErrorCode {
    /// The message could not be decoded.
    Malformed,
    /// The message was larger than the limit.
    TooLarge,
    /// The peer's certificate does not allow this.
    Unauthorized,
    /// This master is not the leader (see the accompanying redirect).
    NotLeader,
    /// The offer is unknown, expired or rescinded.
    UnknownOffer,
    /// The offer was made to another framework.
    OfferNotYours,
    /// The offers of one accept span more than one agent.
    MixedAgents,
    /// The tasks ask for more than the offers hold.
    InsufficientResources,
    /// A task id is already in use by this framework.
    DuplicateTask,
    /// The task is unknown or belongs to another framework.
    UnknownTask,
    /// The task names an executor the agent does not have.
    UnknownExecutor,
    /// The agent is unknown, unreachable or lost, or being drained for maintenance.
    UnknownAgent,
    /// The framework is unknown or torn down.
    UnknownFramework,
    /// A request whose fields are inconsistent (e.g. an empty bundle).
    InvalidRequest,
    /// The cluster cannot serve now (no quorum, shutting down); retry later.
    Unavailable,
    /// A bug or an unexpected local failure (disk full, ...): the message says which.
    Internal,
    /// A write reached the leader but its outcome is unknown (leadership changed, or no answer
    /// before the timeout): it may or may not have been applied. Retrying is safe only for
    /// idempotent requests; otherwise read the state first.
    OutcomeUnknown,
    /// The caller sent more calls than its principal's rate allows (the message says the
    /// rate and when to retry); the call was not carried out.
    RateLimited,
    /// The request would take its principal or framework past a quota the operator set
    /// (frameworks per principal, tasks per framework, connections per certificate); the
    /// message names the quota.
    QuotaExceeded,
    /// No accepted reservation has the name (it was never created, was deleted, ended and
    /// was forgotten, or was rejected after a loss of capacity).
    UnknownReservation,
    /// An accepted reservation already has the name (a create retried after its outcome was
    /// unknown finds its own first attempt this way).
    ReservationExists,
}

/// A typed error that travels on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[error("{code:?}: {message}")]
pub struct WireError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// A human-readable explanation naming what was wrong.
    pub message: String,
}

impl WireError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        WireError {
            code,
            message: message.into(),
        }
    }
}

/// How a task runs on its agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum Executor {
    /// A real process.
    Command(CommandSpec),
    /// Built in: runs no process and finishes after `duration_ms` (like Nomad's mock driver), for
    /// benchmarks and large tests.
    Sleep {
        /// How long the task "runs".
        duration_ms: u64,
    },
}

/// A command line run as the task's process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct CommandSpec {
    /// The program, looked up in `PATH` when it has no `/`.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
}

/// Where a task belongs in its framework's job DAG.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TaskOrigin {
    /// The job's name (unique within its framework).
    pub job: String,
    /// The stage id within the job.
    pub stage: u32,
    /// The task's index within the stage.
    pub index: u32,
    /// 0 for the first attempt, incremented on each retry.
    pub attempt: u32,
}

/// A task as a framework asks for it to be launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TaskSpec {
    /// Unique within the framework.
    pub id: TaskId,
    /// A human-readable name.
    pub name: String,
    /// What runs.
    pub executor: Executor,
    /// The resources charged for the task while it runs.
    pub resources: Resources,
    /// The job and stage it belongs to, when the framework runs DAG jobs.
    pub origin: Option<TaskOrigin>,
    /// How long a kill waits after the polite signal before it kills, in milliseconds.
    pub kill_grace_ms: u64,
}

/// A task's state (DESIGN.md, "a task's life", step 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum TaskState {
    /// Accepted and committed; being sent to or set up on the agent.
    Staging,
    /// Its process (or sleep) is running.
    Running,
    /// Ended with success.
    Finished,
    /// Ended with failure (non-zero exit, could not start, ...).
    Failed,
    /// Killed on request.
    Killed,
    /// Its agent was declared lost, or the task vanished.
    Lost,
}

impl TaskState {
    /// Every state, in a task's life's order.
    pub const ALL: [TaskState; 6] = [
        TaskState::Staging,
        TaskState::Running,
        TaskState::Finished,
        TaskState::Failed,
        TaskState::Killed,
        TaskState::Lost,
    ];

    /// True for the states a task never leaves.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Finished | TaskState::Failed | TaskState::Killed | TaskState::Lost
        )
    }
}

/// Why a task reached its state, when the state alone does not say.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum StatusReason {
    /// The process exited with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// The process was ended by this signal.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// The executor is unknown on the agent.
    UnknownExecutor,
    /// The agent did not have the resources free.
    InsufficientResources,
    /// The process could not be started (the message says why).
    LaunchFailed,
    /// The agent restarted and could not re-attach to the process.
    AgentRestarted,
    /// The agent was declared lost.
    AgentLost,
    /// The framework asked for the kill.
    KilledByFramework,
    /// The framework was torn down or did not fail over in time.
    FrameworkRemoved,
    /// The master reconciled a task it does not know.
    UnknownTask,
    /// The task exceeded a resource limit it was held to.
    LimitExceeded,
    /// The agent came back, or reported, with less capacity than its tasks were charged: the
    /// master ended its newest tasks until the rest fit.
    AgentShrunk,
    /// A best-effort task the master killed to give a reservation's jobs what the plan
    /// guarantees them (issue 17; Rayon §5.2), after the shortfall outlasted the grace period.
    Preempted {
        /// The reservation it made room for.
        reservation: String,
    },
}

/// One step in a task's ordered status stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct StatusUpdate {
    /// The task.
    pub task_id: TaskId,
    /// Its framework.
    pub framework_id: FrameworkId,
    /// Its agent.
    pub agent_id: AgentId,
    /// The new state.
    pub state: TaskState,
    /// Per-task sequence number, from 1, increasing by one per update: receivers drop
    /// duplicates (`seq` already seen) and detect gaps.
    pub seq: u64,
    /// Why, when there is a reason.
    pub reason: Option<StatusReason>,
    /// Free text for humans (stderr tail, error message).
    pub message: String,
    /// When the agent produced the update.
    pub timestamp_ms: UnixMillis,
}

impl StatusUpdate {
    /// The task this update is about.
    pub fn key(&self) -> TaskKey {
        TaskKey::new(self.framework_id.clone(), self.task_id.clone())
    }
}

/// Acknowledges a status update; the sender stops retrying `seq` and everything before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct StatusAck {
    /// The task.
    pub task_id: TaskId,
    /// Its framework: task ids are unique within a framework only, so an agent running tasks
    /// of two frameworks with the same id tells their streams apart by this. A framework's own
    /// acknowledgement must name itself.
    pub framework_id: FrameworkId,
    /// The highest sequence number acknowledged.
    pub seq: u64,
}

impl StatusAck {
    /// The task acknowledged.
    pub fn key(&self) -> TaskKey {
        TaskKey::new(self.framework_id.clone(), self.task_id.clone())
    }
}

/// Free resources of one agent, offered to one framework until `expires_at_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Offer {
    /// The offer's id.
    pub id: OfferId,
    /// The framework it is made to.
    pub framework_id: FrameworkId,
    /// The agent whose resources these are.
    pub agent_id: AgentId,
    /// The agent's host name, for logs and locality.
    pub hostname: String,
    /// The agent's attributes (rack, zone, ...).
    pub attributes: BTreeMap<String, String>,
    /// The resources offered.
    pub resources: Resources,
    /// Regular or leftover.
    pub kind: OfferKind,
    /// After this the offer is void and accepting it fails.
    pub expires_at_ms: UnixMillis,
    /// The framework's share `A_k` of the cluster under the master's fairness rule (Carbyne
    /// §3.3.1's input for `T_k`: DRF by progressive filling with demand caps), as of this
    /// offer. Empty when the master computes none.
    pub fair_share: Resources,
    /// The reservation whose guaranteed capacity (Rayon §5.2's plan follower) this offer comes
    /// out of, at least in part: the one a job of this framework runs in. Unset for capacity
    /// offered under the fairness policy, which a reservation may reclaim.
    #[serde(default)]
    pub reservation: Option<String>,
}

/// A task's current state, as reported by reconciliation and status listings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TaskInfo {
    /// The task as launched.
    pub spec: TaskSpec,
    /// Its framework.
    pub framework_id: FrameworkId,
    /// Its agent.
    pub agent_id: AgentId,
    /// Its latest state.
    pub state: TaskState,
    /// The sequence number of its latest update.
    pub seq: u64,
}

impl TaskInfo {
    /// The task's key.
    pub fn key(&self) -> TaskKey {
        TaskKey::new(self.framework_id.clone(), self.spec.id.clone())
    }
}

/// A task that ended and whose end its framework acknowledged (or whose framework was torn
/// down): what the master keeps of it so that operators see what ran and how it ended. Kept
/// bounded in the replicated state (the last N per framework within a time window, see the
/// master's `ClusterSettings::history`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FinishedTaskInfo {
    /// Its framework.
    pub framework_id: FrameworkId,
    /// The task.
    pub task_id: TaskId,
    /// Its human-readable name.
    pub name: String,
    /// The job and stage it belonged to, when its framework runs DAG jobs.
    pub origin: Option<TaskOrigin>,
    /// The agent it ran on.
    pub agent_id: AgentId,
    /// How it ended (a terminal state).
    pub state: TaskState,
    /// Why, when known.
    pub reason: Option<StatusReason>,
    /// When it was launched (leader's time, milliseconds since the Unix epoch).
    pub launched_at_ms: UnixMillis,
    /// When it reached its final state (leader's time).
    pub ended_at_ms: UnixMillis,
    /// The resources it was charged while it ran.
    pub resources: Resources,
    /// Its place in the history of finished tasks (increasing in the order they were
    /// recorded, the same on every master): the cursor of [`OperatorRequest::ListFinishedTasks`].
    pub ordinal: u64,
}

/// What an agent says of one of its tasks when it registers: enough for the master to
/// reconcile (which tasks still run, which ended unacknowledged), not the whole task, which the
/// master already holds. Small and bounded ([`crate::limits::MAX_TASKS_PER_AGENT`]), so that
/// an agent with many tasks still registers in one frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TaskReport {
    /// The task.
    pub task: TaskKey,
    /// Its latest state on the agent.
    pub state: TaskState,
    /// The sequence number of its latest update.
    pub seq: u64,
}

// ---------------------------------------------------------------------------------------------
// Agent <-> master
// ---------------------------------------------------------------------------------------------

/// How an agent keeps its tasks apart, as it reports it when it registers: so that operators
/// see (`fullerene agents`) which machines cannot isolate tasks, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TaskIsolation {
    /// Each task runs as its own unprivileged user, in a sandbox only it can read, out of
    /// reach of the agent's work directory and key, unable to write its exit code.
    pub users: Enforcement,
    /// cgroup v2 limits (cpu, memory, pids) from each task's resources.
    pub limits: Enforcement,
}

impl TaskIsolation {
    /// Whether both users and limits are enforced.
    pub fn full(&self) -> bool {
        self.users.enforced() && self.limits.enforced()
    }
}

/// Whether one kind of isolation is enforced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// It is.
    Enforced,
    /// It is not, for this reason.
    NotEnforced {
        /// Why (the machine's lack: no root, no cgroup v2, ...).
        reason: String,
    },
}

impl Enforcement {
    /// Whether it is enforced.
    pub fn enforced(&self) -> bool {
        matches!(self, Enforcement::Enforced)
    }
}

impl Default for Enforcement {
    /// What is assumed of an agent that did not say: nothing.
    fn default() -> Enforcement {
        Enforcement::NotEnforced {
            reason: "not reported".into(),
        }
    }
}

/// What an agent sends the master. The agent's id is taken from its certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum AgentToMaster {
    /// First message of a session: register, or re-register after a restart or a failover.
    Register {
        /// The machine's host name.
        hostname: String,
        /// Total resources the agent offers.
        resources: Resources,
        /// Placement attributes.
        attributes: BTreeMap<String, String>,
        /// Tasks the agent still runs or has unacknowledged updates for (empty on first start).
        tasks: Vec<TaskReport>,
        /// Executors this agent can run (`command`, `sleep`).
        executors: Vec<String>,
        /// How the agent keeps its tasks apart (shown by `fullerene agents`).
        isolation: TaskIsolation,
    },
    /// Liveness; `seq` increases per heartbeat.
    Heartbeat {
        /// Heartbeat counter.
        seq: u64,
    },
    /// Capacity changed (hot-plugged resources, operator edit).
    UpdateResources {
        /// The new totals.
        resources: Resources,
    },
    /// A task's status changed. Retried until acknowledged.
    Status(StatusUpdate),
    /// The answer to a [`MasterToAgent::ReadFile`]: bytes of a sandbox file, or why not.
    FileRead(FileReadAnswer),
}

/// What the master sends an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum MasterToAgent {
    /// Registration is committed.
    Registered {
        /// The agent's id, as the master knows it.
        agent_id: AgentId,
        /// How often the agent should heartbeat.
        heartbeat_interval_ms: u64,
        /// Silence after which the master declares the agent lost: the agent does not act on
        /// what it reads after a silence that long could have made it lost.
        lost_after_ms: u64,
        /// Tasks the master has marked LOST that the agent must kill if it still runs them.
        kill: Vec<TaskKey>,
    },
    /// Answer to a heartbeat.
    HeartbeatAck {
        /// The heartbeat answered.
        seq: u64,
    },
    /// Run these tasks (committed before being sent).
    Launch {
        /// The tasks' framework.
        framework_id: FrameworkId,
        /// The bundle.
        tasks: Vec<TaskSpec>,
    },
    /// Kill a task.
    Kill {
        /// The task.
        task_id: TaskId,
        /// Its framework.
        framework_id: FrameworkId,
        /// Grace period between the polite signal and the kill.
        grace_ms: u64,
    },
    /// The update is committed; the agent may forget it.
    StatusAck(StatusAck),
    /// Read part of a file in a task's sandbox (its logs). The agent answers with
    /// [`AgentToMaster::FileRead`] carrying the same `request`; it reads off its event loop
    /// and refuses reads beyond a few in flight.
    ReadFile(FileRead),
    /// This master is not the leader.
    Redirect(Redirect),
    /// A request failed.
    Error(WireError),
}

/// The largest number of bytes one [`FileRead`] returns (64 KiB): a chunk stays far below
/// the message limit and costs the agent little to read; larger reads are several chunks.
pub const MAX_FILE_READ_BYTES: u64 = 64 * 1024;

/// A read of part of a file in a task's sandbox ([`MasterToAgent::ReadFile`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FileRead {
    /// Pairs the answer with the read (chosen by the master, unique per agent session).
    pub request: u64,
    /// The task's framework.
    pub framework_id: FrameworkId,
    /// The task.
    pub task_id: TaskId,
    /// The file's name in the sandbox (`stdout`, `stderr`): one path component, never a path.
    pub name: String,
    /// The first byte wanted.
    pub offset: u64,
    /// How many bytes at most (the agent caps it at [`MAX_FILE_READ_BYTES`]).
    pub length: u64,
}

/// The agent's answer to a [`FileRead`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FileReadAnswer {
    /// The read answered.
    pub request: u64,
    /// What was read, or why nothing was.
    pub outcome: FileReadOutcome,
}

/// What came of a [`FileRead`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum FileReadOutcome {
    /// Bytes of the file.
    Chunk(FileChunk),
    /// The read was refused or failed.
    Refused(FileRefusal),
}

/// Bytes of a sandbox file, and what a reader following it needs to know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FileChunk {
    /// Where `data` starts in the file: the offset asked for, clamped to the file's size.
    pub offset: u64,
    /// The bytes, at most the length asked for and [`MAX_FILE_READ_BYTES`].
    pub data: Vec<u8>,
    /// The file's size when it was read.
    pub size: u64,
    /// Whether the task had ended when the file was read: a follower that has read to
    /// `size` has then read everything the task will ever write.
    pub task_ended: bool,
}

/// Why a sandbox file could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum FileRefusal {
    /// The name is not a plain file name (a path, `..`, a hidden file, empty or too long).
    #[error("`{0}` is not the name of a file in a sandbox (use stdout or stderr)")]
    BadName(String),
    /// The agent has no sandbox for the task (never ran here, or ran without one, as a
    /// `sleep` task does).
    #[error("the agent has no sandbox for this task")]
    NoSandbox,
    /// The sandbox was removed by the agent's garbage collection.
    #[error("sandbox removed by garbage collection")]
    Collected,
    /// The sandbox holds no such file.
    #[error("the task's sandbox has no file `{0}`")]
    NoSuchFile(String),
    /// The name is there but not a regular file (a directory, a link, a pipe).
    #[error("`{0}` in the task's sandbox is not a regular file")]
    NotAFile(String),
    /// The agent is already answering as many reads as it takes at once.
    #[error("the agent is busy with other file reads; retry")]
    Busy,
    /// Reading failed.
    #[error("the agent could not read the file: {0}")]
    Io(String),
}

// ---------------------------------------------------------------------------------------------
// Framework <-> master
// ---------------------------------------------------------------------------------------------

/// The most task ids one explicit reconciliation may name: the master answers it at once, so
/// its answer must fit a session's queue. Frameworks split longer lists (or reconcile all).
pub const MAX_RECONCILE_TASK_IDS: usize = 1024;

/// The most status updates one [`FrameworkRequest::Acknowledge`] acknowledges: at most
/// [`crate::limits::MAX_ID_BYTES`] of task id and of framework id each, they fit a message.
pub const MAX_ACKS_PER_CALL: usize = 1024;

/// A framework's request, with an id the answer refers to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FrameworkCall {
    /// Chosen by the framework; echoed in [`MasterToFramework::CallResult`].
    pub call_id: u64,
    /// The request.
    pub call: FrameworkRequest,
}

/// What to do with the part of an offer a framework does not use.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum Leftover {
    /// Give it back; do not offer it to this framework again for `refuse_ms`.
    Decline {
        /// Filter duration.
        refuse_ms: u64,
    },
    /// Yield it altruistically: re-offer it at once to others (Carbyne §3.3).
    Yield,
}

/// A framework's request. The framework's principal comes from its certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum FrameworkRequest {
    /// Register, or re-register after a disconnect (with the id it was given).
    Subscribe {
        /// The id from a previous subscription, to fail over; `None` the first time.
        framework_id: Option<FrameworkId>,
        /// Human-readable name.
        name: String,
        /// The fairness group it expects to be in, or empty to take whatever group its
        /// principal is in. Groups are the operator's to assign (`fullerene groups set`): a
        /// group other than the principal's is refused, so that no framework can pick the
        /// group with the most share.
        group: String,
        /// How long the master keeps the framework's tasks after it disconnects.
        failover_timeout_ms: u64,
    },
    /// The framework's pending demand changed.
    UpdateDemand(DemandSummary),
    /// Launch a bundle on the agent of `offer_ids` (all offers must be of one agent).
    Accept {
        /// The offers used.
        offer_ids: Vec<OfferId>,
        /// The bundle.
        tasks: Vec<TaskSpec>,
        /// What happens to what the bundle does not use.
        leftover: Leftover,
    },
    /// Decline offers entirely.
    Decline {
        /// The offers.
        offer_ids: Vec<OfferId>,
        /// Filter duration.
        refuse_ms: u64,
    },
    /// Yield offers entirely, for redistribution (Carbyne §3.3.4).
    Yield {
        /// The offers.
        offer_ids: Vec<OfferId>,
    },
    /// Clear all decline filters and resume offers.
    Revive,
    /// Stop sending offers until revived.
    Suppress,
    /// Kill one of this framework's tasks.
    Kill {
        /// The task.
        task_id: TaskId,
    },
    /// Ask for the latest state of these tasks (at most [`MAX_RECONCILE_TASK_IDS`]); an empty
    /// list means all of this framework's tasks, which the master sends a page at a time.
    Reconcile {
        /// The tasks.
        task_ids: Vec<TaskId>,
    },
    /// Acknowledge status updates: one call for the updates a framework received together
    /// (at most [`MAX_ACKS_PER_CALL`]), so that its calls grow with what it receives at once,
    /// not with its tasks (two acknowledgements a task spent a busy framework's call budget).
    /// Each names this framework; one beyond its task's latest update refuses them all, while
    /// a task the master no longer tracks (acknowledged to its end already) is passed over.
    Acknowledge(Vec<StatusAck>),
    /// Unregister: kill every task and forget the framework.
    Teardown,
    /// Describe a DAG job this framework runs (its stages and their edges), so that operators
    /// see its shape and progress; at most [`crate::jobs::MAX_JOBS_PER_FRAMEWORK`] unended
    /// ones at once. Describing a job again with the same name replaces an unended one's
    /// description.
    DescribeJob(crate::jobs::JobDescription),
    /// A described job ended (before the framework tears itself down, so that operators see
    /// how, not only that its framework left).
    EndJob {
        /// The job's name.
        job: String,
        /// How it ended.
        end: crate::jobs::JobEnd,
    },
    /// Create, update or delete a reservation (Rayon §5.2), owned by the framework's
    /// principal; answered `Done` once committed, or with the plan's refusal.
    Reservation(ReservationCall),
    /// A page of the accepted reservations of the framework's principal (`listRes`), in name
    /// order, starting after `after`, answered with [`CallOk::Reservations`].
    ListReservations {
        /// The last reservation of the previous page.
        after: Option<String>,
    },
}

/// What the master sends a framework.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum MasterToFramework {
    /// The answer to a call.
    CallResult {
        /// The call answered.
        call_id: u64,
        /// Success, or a typed error.
        result: Result<CallOk, WireError>,
    },
    /// New offers.
    Offers(Vec<Offer>),
    /// Offers withdrawn (agent lost, leader stepping down, expiry).
    Rescind {
        /// The offers.
        offer_ids: Vec<OfferId>,
    },
    /// A task's status changed (or reconciliation's answer); acknowledge it.
    Update(StatusUpdate),
    /// This master is not the leader.
    Redirect(Redirect),
    /// The framework was torn down by the masters (an operator's `fullerene job kill` or
    /// `framework teardown`): its tasks are killed and its id cannot subscribe again. The
    /// session closes after this message.
    TornDown {
        /// Who tore it down, and why.
        reason: String,
    },
    /// A reservation of the framework's principal ended: the adapter rejected it after a loss
    /// of capacity, or its time is over (fulfilled, late or unused). Sent by the leader to the
    /// principal's frameworks connected to it when the change applies; one that was not
    /// connected finds it in the principal's rejected reservations and the events stream.
    ReservationEnded(crate::reservations::ReservationNotice),
}

/// Successful answers to framework calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum CallOk {
    /// Subscribed with this id.
    Subscribed {
        /// The framework's id.
        framework_id: FrameworkId,
        /// The fairness group it is in (its principal's, as the operator set it).
        group: String,
        /// How often the master heartbeats the framework.
        heartbeat_interval_ms: u64,
    },
    /// Done.
    Done,
    /// For [`FrameworkRequest::ListReservations`]: a page of the principal's accepted
    /// reservations, by name, without their allocations.
    Reservations {
        /// This page.
        reservations: Vec<ReservationInfo>,
        /// Set when more follow.
        next: Option<String>,
    },
}

// ---------------------------------------------------------------------------------------------
// Operator <-> master
// ---------------------------------------------------------------------------------------------

/// A fairness group to create or change, and principals to place in it: what an operator asks
/// for ([`OperatorRequest::SetGroup`]) and what the masters replicate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct GroupPlacement {
    /// The group.
    pub group: String,
    /// Its weight (finite, ≥ 0); `None` keeps the current one (1 for a new group).
    pub weight: Option<f64>,
    /// Principals to put in it (at most [`crate::limits::MAX_PAGE_ITEMS`] per request).
    pub principals: Vec<String>,
}

/// A fairness group to remove, or only some of its principals' mappings
/// ([`OperatorRequest::RemoveGroup`], replicated as is).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct GroupRemoval {
    /// The group.
    pub group: String,
    /// Only these principals (each must be in `group`); empty: the whole group.
    pub principals: Vec<String>,
}

/// An operator's request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum OperatorRequest {
    /// Raft status of the cluster.
    ClusterStatus,
    /// A page of agents, in id order, starting after `after` (from the first when `None`).
    /// The answer holds at most [`crate::limits::MAX_PAGE_ITEMS`] agents and says where the
    /// next page starts.
    ListAgents {
        /// The last agent of the previous page.
        after: Option<AgentId>,
    },
    /// A page of frameworks, in id order, starting after `after`.
    ListFrameworks {
        /// The last framework of the previous page.
        after: Option<FrameworkId>,
    },
    /// A page of tasks (optionally of one framework), in key order, starting after `after`.
    ListTasks {
        /// Only this framework's tasks.
        framework_id: Option<FrameworkId>,
        /// The last task of the previous page.
        after: Option<TaskKey>,
    },
    /// Add a master to the Raft group.
    AddMaster {
        /// Its id.
        id: MasterId,
        /// Its peer address.
        addr: SocketAddr,
    },
    /// Remove a master from the Raft group.
    RemoveMaster {
        /// Its id.
        id: MasterId,
    },
    /// Set a fairness group's weight (a replicated command; answered `Done` once committed).
    SetGroupWeight {
        /// The group.
        group: String,
        /// Its weight (finite, ≥ 0).
        weight: f64,
    },
    /// The group weights operators set (a linearizable read).
    GroupWeights,
    /// Create or change a fairness group (a replicated command; `Done` once committed): set
    /// its weight when `weight` is given, and put `principals` in it (a principal is in one
    /// group; one already in another group moves). Frameworks take the group of their
    /// principal when they subscribe.
    SetGroup(GroupPlacement),
    /// Remove a group's weight and its principals' mappings (they fall back to the default
    /// group), or, with `principals` non-empty, only those principals' mappings.
    RemoveGroup(GroupRemoval),
    /// Every group (weight, principals, frameworks, share and deficit), and the default
    /// group unmapped principals fall into (a linearizable read).
    ListGroups,
    /// Set the cluster's quotas (a replicated command; `Done` once committed).
    SetQuotas(Quotas),
    /// The cluster's quotas (a linearizable read).
    Quotas,
    /// The whole cluster state at once: agents, frameworks, open offers, tasks and fairness
    /// groups, task environments included (the HTTP API's `/state` serves a redacted,
    /// bounded copy).
    State,
    /// Drain an agent for maintenance (a replicated command; `Done` once committed): it is
    /// offered nothing and takes no new task; its tasks run until they end, or until
    /// `deadline_after_ms` from now, when the leader kills them; then it is drained. Draining
    /// an agent already draining moves its deadline.
    DrainAgent {
        /// The agent.
        agent_id: AgentId,
        /// How long its tasks may still run; `None`: until they end on their own.
        deadline_after_ms: Option<u64>,
    },
    /// End an agent's drain: it is offered again (a replicated command).
    UndrainAgent {
        /// The agent.
        agent_id: AgentId,
    },
    /// Kill a task, as its framework could (a replicated command; `Done` once the kill is
    /// recorded, before the agent has carried it out). The framework learns of it by the
    /// task's KILLED status update.
    KillTask {
        /// The task's framework.
        framework_id: FrameworkId,
        /// The task.
        task_id: TaskId,
    },
    /// Tear a framework down (a replicated command): its tasks are killed and its id can
    /// never be used again.
    TeardownFramework {
        /// The framework.
        framework_id: FrameworkId,
    },
    /// A page of finished tasks (optionally of one framework), oldest first, starting after
    /// the one whose [`FinishedTaskInfo::ordinal`] is `after` (a linearizable read).
    ListFinishedTasks {
        /// Only this framework's finished tasks.
        framework_id: Option<FrameworkId>,
        /// The ordinal of the last task of the previous page.
        after: Option<u64>,
    },
    /// The cluster's events after sequence number `since` (the most recent ones when
    /// `None`), at most `limit` (and at most [`crate::limits::MAX_PAGE_ITEMS`]), from the
    /// leader's ring. When none is newer than `since`, the leader waits up to `wait_ms` for
    /// one (long polling: `fullerene events --follow`), at most half the request timeout.
    Events {
        /// The sequence number of the last event the client has.
        since: Option<u64>,
        /// The most events to answer with.
        limit: u32,
        /// How long to wait for a new event when there is none, in milliseconds.
        wait_ms: u64,
    },
    /// Read part of a file in a task's sandbox (its stdout or stderr), from the agent that
    /// ran it, through the leader: answered with [`OperatorResponse::File`]. Never reaches
    /// the node loop's decisions and changes nothing.
    ReadTaskFile(TaskFileRead),
    /// Create, update or delete a reservation (Rayon §5.2; a replicated command, `Done` once
    /// committed, or refused with the plan's reason). The operator's principal owns what it
    /// creates.
    Reservation(ReservationCall),
    /// A page of accepted reservations, in name order, starting after `after`, and the
    /// reservations the adapter rejected (a linearizable read; `listRes`).
    ListReservations {
        /// The last reservation of the previous page.
        after: Option<String>,
    },
    /// One accepted reservation with its allocation over time (a linearizable read).
    ShowReservation {
        /// The reservation.
        name: String,
    },
    /// Set how reservations are planned: placement policy and sharing caps (a replicated
    /// command, `Done` once committed; for admissions from then on).
    SetReservationPolicy(ReservationPolicy),
    /// How reservations are planned (a linearizable read).
    ReservationPolicy,
}

/// An operator's (or the HTTP API's) read of a task's sandbox file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TaskFileRead {
    /// The task's framework.
    pub framework_id: FrameworkId,
    /// The task.
    pub task_id: TaskId,
    /// The file (`stdout`, `stderr`).
    pub name: String,
    /// The first byte wanted.
    pub offset: u64,
    /// How many bytes at most (capped at [`MAX_FILE_READ_BYTES`]).
    pub length: u64,
    /// The agent the task ran on, for a task the master has forgotten (ended and
    /// acknowledged); ignored while the master knows the task.
    pub agent_id: Option<AgentId>,
}

impl OperatorRequest {
    /// Whether sending the request twice has the same effect as once: reads, setting a
    /// weight to a value, draining and undraining. A client may retry these after a lost
    /// answer; membership changes, kills and teardowns it may not (a retried `AddMaster` or
    /// teardown that had committed would be refused as a duplicate, hiding the success).
    pub fn is_idempotent(&self) -> bool {
        !matches!(
            self,
            OperatorRequest::AddMaster { .. }
                | OperatorRequest::RemoveMaster { .. }
                | OperatorRequest::KillTask { .. }
                | OperatorRequest::TeardownFramework { .. }
                | OperatorRequest::Reservation(_)
        )
    }
}

/// The cluster state as operators see it (one linearizable read on the leader).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ClusterView {
    /// The leader that answered, and its term.
    pub leader: MasterId,
    /// The log index the view reflects.
    pub applied: u64,
    /// Every agent.
    pub agents: Vec<AgentInfo>,
    /// Every framework (torn-down ones included until forgotten).
    pub frameworks: Vec<FrameworkInfo>,
    /// Offers out now (the leader's soft state; a new leader starts with none).
    pub offers: Vec<Offer>,
    /// Every task the master tracks.
    pub tasks: Vec<TaskInfo>,
    /// The fairness groups with their deficit counters (Graphene §5).
    pub groups: Vec<GroupInfo>,
    /// The accepted reservations (Rayon §5.2), by name, without their allocations.
    #[serde(default)]
    pub reservations: Vec<ReservationInfo>,
}

/// What a [`ClusterView::redacted`] shows instead of each task environment variable's value.
pub const REDACTED: &str = "<redacted>";

impl ClusterView {
    /// The view without the secrets tasks carry, for the HTTP API (whose readers include
    /// dashboards with read-only tokens): each task's environment keeps its variable names,
    /// and their values become [`REDACTED`].
    pub fn redacted(mut self) -> ClusterView {
        for task in &mut self.tasks {
            if let Executor::Command(command) = &mut task.spec.executor {
                for value in command.env.values_mut() {
                    *value = REDACTED.to_string();
                }
            }
        }
        self
    }
}

/// A fairness group in a [`ClusterView`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct GroupInfo {
    /// The group's name.
    pub name: String,
    /// Its weight.
    pub weight: f64,
    /// Registered frameworks in it.
    pub frameworks: u32,
    /// The principals an operator put in it (frameworks of these principals join it).
    pub principals: Vec<String>,
    /// Its fair share `f_g` of the cluster, as a fraction.
    pub share: f64,
    /// The factors of its running tasks (`H_g`).
    pub held: f64,
    /// Its deficit counter: positive when it holds less than its share.
    pub deficit: f64,
}

/// Limits an operator sets for the whole cluster, replicated with the state, each refused with
/// [`ErrorCode::QuotaExceeded`] naming it. (Call rates and connections per certificate are
/// each master's flags, enforced where the connection is served.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Quotas {
    /// Frameworks one principal may have registered (not torn down) at once.
    pub frameworks_per_principal: u32,
    /// Live (non-terminal) tasks one framework may have at once.
    pub tasks_per_framework: u32,
    /// Offers one framework may hold unanswered at once; the allocator offers it nothing more
    /// until it answers or they expire.
    pub pending_offers_per_framework: u32,
}

impl Quotas {
    /// The defaults: 64 frameworks per principal, 100,000 live tasks per framework, 1,024
    /// pending offers per framework (enough for one offer of every agent of a large cluster
    /// section, and far below what the leader can hold for every framework).
    pub const DEFAULT: Quotas = Quotas {
        frameworks_per_principal: 64,
        tasks_per_framework: 100_000,
        pending_offers_per_framework: 1_024,
    };
}

impl Default for Quotas {
    fn default() -> Quotas {
        Quotas::DEFAULT
    }
}

/// A master's state in a cluster status answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct MemberStatus {
    /// The master.
    pub id: MasterId,
    /// Its peer address.
    pub addr: SocketAddr,
    /// Highest log index known replicated to it (leader's view).
    pub matched: u64,
    /// Entries it is behind the leader's last index.
    pub lag: u64,
    /// Voter or learner.
    pub voter: bool,
}

/// The Raft view of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ClusterStatus {
    /// The answering master.
    pub this: MasterId,
    /// The leader, if known.
    pub leader: Option<LeaderInfo>,
    /// Current term.
    pub term: u64,
    /// Commit index.
    pub commit: u64,
    /// Applied index.
    pub applied: u64,
    /// Members.
    pub members: Vec<MemberStatus>,
}

/// State of an agent as the master sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum AgentState {
    /// Heartbeating.
    Active,
    /// Missed heartbeats for the first timeout.
    Unreachable,
    /// Declared lost; its tasks are LOST.
    Lost,
}

/// An agent as the master sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct AgentInfo {
    /// The agent.
    pub id: AgentId,
    /// Its host name.
    pub hostname: String,
    /// Total resources.
    pub total: Resources,
    /// Resources charged to running tasks.
    pub used: Resources,
    /// Its state.
    pub state: AgentState,
    /// Its attributes.
    pub attributes: BTreeMap<String, String>,
    /// When the master last heard from it.
    pub last_heartbeat_ms: UnixMillis,
    /// The address its session to the leader comes from (`None` while it has no session on
    /// the leader, e.g. just after a failover).
    pub address: Option<std::net::SocketAddr>,
    /// How it isolates its tasks, as it said when it last registered with this leader (`None`
    /// until it has: kept by the leader, not replicated, and reported again by every agent
    /// when it registers with a new leader).
    #[serde(default)]
    pub isolation: Option<TaskIsolation>,
    /// Its drain for maintenance, while one is under way or done (`fullerene agent drain`).
    #[serde(default)]
    pub drain: Option<DrainStatus>,
}

/// An agent's drain for maintenance, as operators see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct DrainStatus {
    /// When the drain began (leader's time).
    pub since_ms: UnixMillis,
    /// When the leader kills what still runs; `None`: tasks end on their own.
    pub deadline_ms: Option<UnixMillis>,
    /// Whether it is drained: nothing runs on it any more.
    pub drained: bool,
}

/// A framework as the master sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FrameworkInfo {
    /// The framework.
    pub id: FrameworkId,
    /// Its name.
    pub name: String,
    /// The principal from its certificate.
    pub principal: String,
    /// Its fairness group.
    pub group: String,
    /// Connected now.
    pub connected: bool,
    /// Torn down (a tombstone keeping its id from reuse): its tasks are gone.
    pub torn_down: bool,
    /// Resources its running tasks use.
    pub used: Resources,
    /// Tasks not yet terminal.
    pub active_tasks: u64,
    /// The DAG jobs it described (see [`crate::jobs`]), oldest first.
    // Nested vectors of proptest's default size make listings of hundreds of MB.
    #[cfg_attr(
        test,
        proptest(
            strategy = "proptest::collection::vec(proptest::prelude::any::<crate::jobs::JobInfo>(), 0..3)"
        )
    )]
    pub jobs: Vec<crate::jobs::JobInfo>,
}

/// The answer to an operator request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum OperatorResponse {
    /// For [`OperatorRequest::ClusterStatus`].
    ClusterStatus(ClusterStatus),
    /// For [`OperatorRequest::ListAgents`]: a page, and the last agent on it when more follow
    /// (ask again with `after` set to it).
    Agents {
        /// This page.
        agents: Vec<AgentInfo>,
        /// Set when more agents follow.
        next: Option<AgentId>,
    },
    /// For [`OperatorRequest::ListFrameworks`]: a page, and where the next one starts.
    Frameworks {
        /// This page.
        frameworks: Vec<FrameworkInfo>,
        /// Set when more frameworks follow.
        next: Option<FrameworkId>,
    },
    /// For [`OperatorRequest::ListTasks`]: a page, and where the next one starts.
    Tasks {
        /// This page.
        tasks: Vec<TaskInfo>,
        /// Set when more tasks follow.
        next: Option<TaskKey>,
    },
    /// For [`OperatorRequest::GroupWeights`]: every weight set (groups not listed weigh 1).
    GroupWeights(BTreeMap<String, f64>),
    /// For [`OperatorRequest::ListGroups`].
    Groups {
        /// Every group with a weight, a principal or a framework, by name.
        groups: Vec<GroupInfo>,
        /// The group of principals no operator mapped.
        default_group: String,
    },
    /// For [`OperatorRequest::Quotas`].
    Quotas(Quotas),
    /// For [`OperatorRequest::State`].
    State(ClusterView),
    /// For [`OperatorRequest::ListFinishedTasks`]: a page, and the ordinal to ask after when
    /// more follow.
    FinishedTasks {
        /// This page, oldest first.
        tasks: Vec<FinishedTaskInfo>,
        /// Set when more finished tasks follow.
        next: Option<u64>,
    },
    /// For [`OperatorRequest::Events`]: a [`crate::http::EventsDocument`] as JSON text. The
    /// events are self-describing JSON objects (tagged by `kind`, the shape the HTTP API and
    /// the web UI read), which the binary codec cannot carry field by field, so they travel
    /// as the same JSON the HTTP API serves.
    Events(String),
    /// For [`OperatorRequest::ReadTaskFile`].
    File(FileChunk),
    /// For [`OperatorRequest::ListReservations`]: a page of the accepted, where the next one
    /// starts, and the rejected.
    Reservations {
        /// This page of accepted reservations, by name.
        accepted: Vec<ReservationInfo>,
        /// Set when more accepted reservations follow.
        next: Option<String>,
        /// The last reservations the adapter rejected, oldest first (on the first page only).
        rejected: Vec<RejectedReservationInfo>,
    },
    /// For [`OperatorRequest::ShowReservation`].
    Reservation(ReservationInfo),
    /// For [`OperatorRequest::ReservationPolicy`].
    ReservationPolicy(ReservationPolicy),
    /// A change was committed.
    Done,
    /// This master is not the leader.
    Redirect(Redirect),
    /// The request failed.
    Error(WireError),
}

// ---------------------------------------------------------------------------------------------
// Master <-> master
// ---------------------------------------------------------------------------------------------

/// Traffic between masters. The sender's id comes from its certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum PeerMessage {
    /// Raft messages, each an encoded `raft::eraftpb::Message`: opaque here, so that `proto`
    /// does not depend on raft-rs's protobuf types.
    Raft(Vec<Vec<u8>>),
    /// One piece of an encoded Raft message too large for one frame (a snapshot of a large
    /// state). The pieces of one message follow each other on the session, in order, until
    /// they add up to `total` bytes.
    RaftPart {
        /// The whole message's length in bytes.
        total: u64,
        /// The next piece.
        bytes: Vec<u8>,
    },
    /// Sent back on a peer's own session by a master that does not count the sender as a
    /// member: as of log index `as_of` (committed, so true for every master) the sender was
    /// not in the group. A master that has applied less than `as_of` learns from this that it
    /// was removed, even if it missed the removal itself.
    NotAMember {
        /// The log index at which the answering master's membership was last set.
        as_of: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_view_keeps_environment_names_and_hides_their_values() {
        let mut spec = crate::testkit::command_task("t1", "run", &["--fast"], "cpus=1", 0);
        if let Executor::Command(command) = &mut spec.executor {
            command.env.insert("DB_PASSWORD".into(), "hunter2".into());
        }
        let view = ClusterView {
            leader: MasterId(1),
            applied: 7,
            agents: Vec::new(),
            frameworks: Vec::new(),
            offers: Vec::new(),
            tasks: vec![TaskInfo {
                spec,
                framework_id: "fw-1".into(),
                agent_id: "agent-1".into(),
                state: TaskState::Running,
                seq: 1,
            }],
            groups: Vec::new(),
            reservations: Vec::new(),
        };
        let redacted = view.clone().redacted();
        match &redacted.tasks[0].spec.executor {
            Executor::Command(command) => assert_eq!(
                command.env.iter().collect::<Vec<_>>(),
                vec![(&"DB_PASSWORD".to_string(), &REDACTED.to_string())]
            ),
            other => panic!("{other:?}"),
        }
        // Everything else is as it was.
        let mut unredacted = redacted;
        if let Executor::Command(command) = &mut unredacted.tasks[0].spec.executor {
            command.env.insert("DB_PASSWORD".into(), "hunter2".into());
        }
        assert_eq!(unredacted, view);
    }
}
