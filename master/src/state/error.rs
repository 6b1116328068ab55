//! Why a command was refused at apply time.
//!
//! Validation happens when a committed command is applied, against the state every replica has
//! at that point of the log, so all replicas refuse the same commands. A refused command
//! changes nothing; its error goes back to the proposer.

use fullerene_proto::limits::LimitError;
use fullerene_proto::messages::{AgentState, ErrorCode, TaskState, WireError};
use fullerene_proto::resources::ResourceError;
use fullerene_proto::{AgentId, FrameworkId, ResourceVec};
use fullerene_scheduling::allocator::state::StateError;
use fullerene_scheduling::fairness::FairnessError;

use super::command::TaskKey;

/// A command that the current state refutes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CommandError {
    /// The agent is not registered.
    #[error("unknown agent `{0}`")]
    UnknownAgent(AgentId),
    /// `RegisterAgent` for an id already registered (it should re-register).
    #[error("agent `{0}` is already registered")]
    AgentAlreadyRegistered(AgentId),
    /// The agent was declared lost; it must re-register first.
    #[error("agent `{0}` was declared lost and must re-register")]
    AgentLost(AgentId),
    /// Launch on an agent that is not active.
    #[error("agent `{agent}` is {state:?}: no task can be launched on it")]
    AgentNotActive {
        /// The agent.
        agent: AgentId,
        /// Its state.
        state: AgentState,
    },
    /// Launch on an agent an operator is draining for maintenance.
    #[error("agent `{0}` is being drained for maintenance: no task can be launched on it")]
    AgentDraining(AgentId),
    /// The framework is not registered.
    #[error("unknown framework `{0}`")]
    UnknownFramework(FrameworkId),
    /// `SubscribeFramework` with an id in use (or used before).
    #[error("framework `{0}` is already registered")]
    FrameworkAlreadyRegistered(FrameworkId),
    /// The framework was torn down; its id cannot be used again.
    #[error("framework `{0}` was torn down")]
    FrameworkTornDown(FrameworkId),
    /// A principal acting on a framework (and so on its tasks) it does not own.
    #[error("principal `{principal}` does not own framework `{framework}`")]
    NotFrameworkOwner {
        /// The framework.
        framework: FrameworkId,
        /// The principal that tried.
        principal: String,
    },
    /// The task is not known (never launched, or forgotten after its end was acknowledged).
    #[error("unknown task `{0}`")]
    UnknownTask(TaskKey),
    /// A task id already in use by the framework (within the bundle or among its tasks).
    #[error("task `{0}` already exists")]
    DuplicateTask(TaskKey),
    /// A change to a task that has ended: a terminal task never changes.
    #[error("task `{task}` already ended as {state:?}")]
    TerminalTask {
        /// The task.
        task: TaskKey,
        /// Its terminal state.
        state: TaskState,
    },
    /// A state change that the task life cycle does not allow (e.g. RUNNING back to STAGING).
    #[error("task `{task}` cannot go from {from:?} to {to:?}")]
    BadTransition {
        /// The task.
        task: TaskKey,
        /// Its state.
        from: TaskState,
        /// The state asked for.
        to: TaskState,
    },
    /// An agent reporting on a task that runs elsewhere.
    #[error("task `{task}` runs on agent `{runs_on}`, not on `{reported_by}`")]
    TaskOnOtherAgent {
        /// The task.
        task: TaskKey,
        /// Where it runs.
        runs_on: AgentId,
        /// Who reported.
        reported_by: AgentId,
    },
    /// A status update whose own agent field disagrees with the reporting agent.
    #[error("status update names agent `{named}` but was sent by `{sender}`")]
    StatusAgentMismatch {
        /// The agent the update names.
        named: AgentId,
        /// The agent that sent it.
        sender: AgentId,
    },
    /// An acknowledgement of an update that was never recorded.
    #[error("task `{task}`: acknowledged seq {acked} but the latest update is seq {latest}")]
    AckBeyondLatest {
        /// The task.
        task: TaskKey,
        /// The acknowledged sequence number.
        acked: u64,
        /// The latest recorded one.
        latest: u64,
    },
    /// A status update numbered too far past the task's latest (or above the largest number
    /// an agent may use).
    #[error(
        "task `{task}`: status update seq {seq} is past the allowed {limit} (latest is {latest})"
    )]
    SeqOutOfRange {
        /// The task.
        task: TaskKey,
        /// The update's sequence number.
        seq: u64,
        /// The latest recorded one.
        latest: u64,
        /// The largest number the update could have had.
        limit: u64,
    },
    /// A launch bundle without tasks.
    #[error("a launch must contain at least one task")]
    EmptyBundle,
    /// Resource amounts that are unknown, negative, NaN, infinite or (for a task) all zero.
    #[error("invalid resources: {0}")]
    InvalidResources(String),
    /// The bundle does not fit in the agent's free capacity (with the overbooking allowance
    /// for fungible kinds).
    #[error("agent `{agent}` has {free} free, the bundle needs {requested}")]
    InsufficientResources {
        /// The agent.
        agent: AgentId,
        /// What the bundle asks for.
        requested: ResourceVec,
        /// What is free.
        free: ResourceVec,
    },
    /// A task needing an executor the agent did not declare.
    #[error("agent `{agent}` has no `{executor}` executor")]
    UnknownExecutor {
        /// The agent.
        agent: AgentId,
        /// The executor asked for.
        executor: String,
    },
    /// A task whose id, name or encoding is over the protocol's limits
    /// ([`fullerene_proto::limits`]).
    #[error("{0}")]
    TooLarge(#[from] LimitError),
    /// A launch on an agent that already runs the most tasks one agent may.
    #[error("agent `{agent}` runs {running} tasks and the bundle adds {adding}: one agent runs at most {limit}")]
    AgentFull {
        /// The agent.
        agent: AgentId,
        /// Its live tasks.
        running: usize,
        /// The bundle's tasks.
        adding: usize,
        /// [`fullerene_proto::limits::MAX_TASKS_PER_AGENT`].
        limit: usize,
    },
    /// An invalid group weight.
    #[error(transparent)]
    InvalidWeight(#[from] FairnessError),
    /// An overbooking allowance that is negative, NaN or infinite.
    #[error("invalid overbooking allowance {0}: must be finite and >= 0")]
    InvalidAllowance(f64),
    /// A framework asked for a group other than its principal's.
    #[error(
        "principal `{principal}` is in group `{assigned}`, not `{requested}`: groups are set by \
         an operator (`fullerene groups set {requested} --principal {principal}`); subscribe \
         with no group to join `{assigned}`"
    )]
    GroupNotAssigned {
        /// The framework's principal.
        principal: String,
        /// The group it asked for.
        requested: String,
        /// Its principal's group.
        assigned: String,
    },
    /// A new group past [`super::MAX_GROUPS`].
    #[error("group `{group}` would be one more than the {limit} groups a cluster may have")]
    TooManyGroups {
        /// The group.
        group: String,
        /// The limit.
        limit: usize,
    },
    /// A group change that does not hold together.
    #[error("{0}")]
    InvalidGroup(String),
    /// Quotas that cannot be set.
    #[error("{0}")]
    InvalidQuota(String),
    /// A request past an operator's quota; the message names the quota.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A job description or end a framework sent is malformed or over a bound (the message
    /// names what).
    #[error("{0}")]
    BadJob(String),
    /// A reservation name that is empty, too long, or not made of letters, digits, `-`, `_`
    /// and `.`.
    #[error("invalid reservation name `{0}`: 1 to 128 of letters, digits, `-`, `_` and `.`")]
    InvalidReservationName(String),
    /// A reservation policy out of range (the message names what).
    #[error("invalid reservation policy: {0}")]
    InvalidReservationPolicy(String),
    /// A reservation with this name exists already.
    #[error("reservation `{0}` exists already")]
    ReservationExists(String),
    /// No accepted reservation has this name.
    #[error("unknown reservation `{0}`")]
    UnknownReservation(String),
    /// A principal changing a reservation it does not own.
    #[error("principal `{principal}` does not own reservation `{name}`")]
    NotReservationOwner {
        /// The reservation.
        name: String,
        /// The principal that tried.
        principal: String,
    },
    /// The plan refused the reservation (Rayon §5.1): invalid, no room (naming the atom and
    /// window that did not fit) or past the user's caps.
    #[error("reservation `{name}` refused: {refusal}")]
    ReservationRefused {
        /// The reservation.
        name: String,
        /// The plan's reason.
        refusal: fullerene_reservation::Refusal,
    },
    /// The allocation accounting refused a change the state machine had validated: a bug,
    /// reported rather than hidden. The state is left as it was.
    #[error("allocation accounting refused the change: {0}")]
    Accounting(#[from] StateError),
}

impl From<ResourceError> for CommandError {
    fn from(e: ResourceError) -> CommandError {
        CommandError::InvalidResources(e.to_string())
    }
}

impl CommandError {
    /// The wire error code a client sees.
    pub fn code(&self) -> ErrorCode {
        match self {
            CommandError::UnknownAgent(_)
            | CommandError::AgentLost(_)
            | CommandError::AgentNotActive { .. }
            | CommandError::AgentDraining(_) => ErrorCode::UnknownAgent,
            CommandError::AgentAlreadyRegistered(_) => ErrorCode::InvalidRequest,
            CommandError::UnknownFramework(_) | CommandError::FrameworkTornDown(_) => {
                ErrorCode::UnknownFramework
            }
            CommandError::FrameworkAlreadyRegistered(_) => ErrorCode::InvalidRequest,
            CommandError::NotFrameworkOwner { .. } | CommandError::StatusAgentMismatch { .. } => {
                ErrorCode::Unauthorized
            }
            CommandError::UnknownTask(_) | CommandError::TaskOnOtherAgent { .. } => {
                ErrorCode::UnknownTask
            }
            CommandError::DuplicateTask(_) => ErrorCode::DuplicateTask,
            CommandError::TerminalTask { .. }
            | CommandError::BadTransition { .. }
            | CommandError::AckBeyondLatest { .. }
            | CommandError::SeqOutOfRange { .. }
            | CommandError::EmptyBundle
            | CommandError::InvalidResources(_)
            | CommandError::InvalidWeight(_)
            | CommandError::InvalidAllowance(_)
            | CommandError::BadJob(_) => ErrorCode::InvalidRequest,
            CommandError::InsufficientResources { .. } | CommandError::AgentFull { .. } => {
                ErrorCode::InsufficientResources
            }
            CommandError::TooLarge(_) => ErrorCode::TooLarge,
            CommandError::GroupNotAssigned { .. } => ErrorCode::Unauthorized,
            CommandError::TooManyGroups { .. } | CommandError::QuotaExceeded(_) => {
                ErrorCode::QuotaExceeded
            }
            CommandError::InvalidGroup(_) | CommandError::InvalidQuota(_) => {
                ErrorCode::InvalidRequest
            }
            CommandError::UnknownExecutor { .. } => ErrorCode::UnknownExecutor,
            CommandError::InvalidReservationName(_)
            | CommandError::InvalidReservationPolicy(_)
            | CommandError::ReservationRefused { .. } => ErrorCode::InvalidRequest,
            CommandError::ReservationExists(_) => ErrorCode::ReservationExists,
            CommandError::UnknownReservation(_) => ErrorCode::UnknownReservation,
            CommandError::NotReservationOwner { .. } => ErrorCode::Unauthorized,
            CommandError::Accounting(_) => ErrorCode::Internal,
        }
    }

    /// The error as it travels to a client.
    pub fn to_wire(&self) -> WireError {
        WireError::new(self.code(), self.to_string())
    }
}
