//! The commands of the replicated log and what applying one reports.
//!
//! A command is proposed by the leader on behalf of an agent, a framework, an operator or its
//! own timers, travels in a Raft entry (encoded with [`fullerene_proto::codec`], so it is
//! versioned and decoded strictly), and is applied by every master in log order. Everything a
//! command's effect depends on is inside it: identities come from the proposer's verified
//! certificate (DESIGN.md, principle 4), and time is stamped by the leader (`at_ms`), never read
//! by the state machine.

use std::collections::BTreeMap;

use fullerene_proto::messages::{GroupPlacement, GroupRemoval, StatusUpdate, TaskSpec, UnixMillis};
pub use fullerene_proto::TaskKey;

/// One task's updates acknowledged up to `seq`, in [`Command::AcknowledgeStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acknowledged {
    /// The task.
    pub task_id: TaskId,
    /// The highest sequence number acknowledged.
    pub seq: u64,
}

use fullerene_proto::{AgentId, FrameworkId, Resources, TaskId};
use fullerene_reservation::Expr;
use serde::{Deserialize, Serialize};

/// One change to the cluster state (DESIGN.md, "a task's life").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A new agent registers (step 1). Fails if the id is already known.
    RegisterAgent {
        /// The agent, from its certificate.
        agent_id: AgentId,
        /// Its host name.
        hostname: String,
        /// Its total resources.
        resources: Resources,
        /// Placement attributes.
        attributes: BTreeMap<String, String>,
        /// Executors it can run (`command`, `sleep`).
        executors: Vec<String>,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A known agent registers again, after its own restart, a network partition, a master
    /// failover, or after it was declared lost. `running` lists the tasks it still runs; any
    /// the master considers ended (or never heard of) must be killed, and the master's
    /// non-terminal tasks on it that it does not report are lost.
    ReregisterAgent {
        /// The agent, from its certificate.
        agent_id: AgentId,
        /// Its host name.
        hostname: String,
        /// Its total resources.
        resources: Resources,
        /// Placement attributes.
        attributes: BTreeMap<String, String>,
        /// Executors it can run.
        executors: Vec<String>,
        /// The tasks it still runs.
        running: Vec<TaskKey>,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// An agent's capacity changed.
    UpdateAgentResources {
        /// The agent.
        agent_id: AgentId,
        /// The new totals.
        resources: Resources,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// The leader heard from an agent: refreshes its last heartbeat and brings an unreachable
    /// agent back to active. The leader proposes it when an unreachable agent heartbeats, and
    /// otherwise as rarely as it likes (heartbeats themselves are not replicated).
    AgentHeartbeat {
        /// The agent.
        agent_id: AgentId,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// An agent missed heartbeats for the first timeout: no new launches on it. Idempotent.
    MarkAgentUnreachable {
        /// The agent.
        agent_id: AgentId,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// An agent missed heartbeats for the second timeout: its tasks are LOST and their
    /// resources released; if it comes back it must re-register and kill them. Idempotent.
    MarkAgentLost {
        /// The agent.
        agent_id: AgentId,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A new framework subscribes (step 2) with the id the leader assigned.
    SubscribeFramework {
        /// The id assigned by the leader.
        framework_id: FrameworkId,
        /// The principal from its certificate.
        principal: String,
        /// Its name.
        name: String,
        /// Its fairness group.
        group: String,
        /// How long its tasks survive a disconnection.
        failover_timeout_ms: u64,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A registered framework subscribes again with its id (a new scheduler process, or a
    /// reconnection). Its group cannot change: deficits are accounted per group.
    FailoverFramework {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal from the new connection's certificate; must own the framework.
        principal: String,
        /// Its (possibly new) name.
        name: String,
        /// Its (possibly new) failover timeout.
        failover_timeout_ms: u64,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A framework's connection closed; the leader tears it down if it does not come back
    /// within its failover timeout. Idempotent.
    DisconnectFramework {
        /// The framework.
        framework_id: FrameworkId,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// Unregister a framework: its non-terminal tasks are KILLED (agents are told to kill
    /// them) and it can never be used again.
    TeardownFramework {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal asking, when the framework asks itself; `None` when the master removes
        /// it (failover timeout, operator).
        principal: Option<String>,
        /// Why: what its unended jobs are marked with, and what its scheduler is told.
        cause: super::TeardownCause,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A framework describes one of its DAG jobs (`FrameworkRequest::DescribeJob`).
    DescribeJob {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal of its session; must own it.
        principal: String,
        /// The job.
        description: fullerene_proto::jobs::JobDescription,
        /// Leader's time: the job's submission as the cluster sees it.
        at_ms: UnixMillis,
    },
    /// A framework says how one of its described jobs ended (`FrameworkRequest::EndJob`).
    EndJob {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal of its session; must own it.
        principal: String,
        /// The job's name.
        job: String,
        /// How it ended.
        end: fullerene_proto::jobs::JobEnd,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// Launch a bundle of tasks on one agent (step 5): the leader has checked the offers; the
    /// state machine checks what state can refute (ids, capacity, executors).
    LaunchTasks {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal of the accepting connection; must own the framework.
        principal: String,
        /// The agent all tasks run on.
        agent_id: AgentId,
        /// The bundle (at least one task).
        tasks: Vec<TaskSpec>,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A task's status changed, as reported by its agent (step 6).
    UpdateStatus {
        /// The reporting agent, from its certificate; must be the task's agent.
        agent_id: AgentId,
        /// The update.
        update: StatusUpdate,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A framework asks for one of its tasks to be killed.
    KillTask {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal asking; must own the framework.
        principal: String,
        /// The task.
        task_id: TaskId,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A framework acknowledged its tasks' updates, each up to its `seq` (one call's batch,
    /// see `FrameworkRequest::Acknowledge`). A terminal task whose last update is acknowledged
    /// leaves the task table for the history of finished tasks. All are checked before any is
    /// applied: one beyond its task's latest update refuses the batch; a task no longer
    /// tracked (acknowledged to its end by an earlier batch) is passed over.
    AcknowledgeStatus {
        /// The framework.
        framework_id: FrameworkId,
        /// The principal acknowledging; must own the framework.
        principal: String,
        /// The tasks, each with the highest sequence number acknowledged.
        acks: Vec<Acknowledged>,
    },
    /// An operator sets a group's weight.
    SetGroupWeight {
        /// The group.
        group: String,
        /// Its weight (finite, ≥ 0).
        weight: f64,
    },
    /// An operator creates or changes a fairness group: its weight (when given; a new group
    /// gets 1) and principals placed in it (moved from any other group).
    SetGroup(GroupPlacement),
    /// An operator removes a group's weight and mappings, or only some principals' mappings
    /// (they fall back to the default group; frameworks already subscribed keep their group).
    RemoveGroup(GroupRemoval),
    /// An operator sets the cluster's quotas.
    SetQuotas(fullerene_proto::messages::Quotas),
    /// An operator sets how far fungible resources (disk and network bandwidth) may be
    /// overbooked by launches, as a fraction of an agent's total (Graphene §5).
    SetOverbookingAllowance {
        /// The fraction (finite, ≥ 0).
        allowance: f64,
    },
    /// A master says where its HTTP API (`/state`, `/metrics`) listens, or that it has none.
    /// A new leader proposes it for itself, so followers can redirect HTTP clients to it.
    AnnounceMasterHttp {
        /// The master's Raft id.
        master: u64,
        /// Its HTTP address.
        addr: Option<std::net::SocketAddr>,
    },
    /// An operator drains an agent for maintenance (see [`Drain`](super::Drain)), or moves
    /// the deadline of a drain under way.
    DrainAgent {
        /// The agent.
        agent_id: AgentId,
        /// When to kill what still runs (leader's time); `None`: let tasks end on their own.
        deadline_ms: Option<UnixMillis>,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// An operator ends an agent's drain: it is offered again.
    UndrainAgent {
        /// The agent.
        agent_id: AgentId,
    },
    /// Kill tasks on behalf of an operator, or of the leader when a drain's deadline passes:
    /// no framework's ownership is checked. Every task must be live; a repeated kill sends
    /// it again.
    KillTasks {
        /// The tasks (at least one).
        tasks: Vec<TaskKey>,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// A principal reserves capacity ahead (Rayon §5.2's `createRes`): accepted only if the
    /// plan places it in full, as of `at_ms`.
    CreateReservation {
        /// Its name, unique among accepted reservations.
        name: String,
        /// The principal asking: it owns the reservation.
        principal: String,
        /// The request.
        expr: Expr,
        /// Leader's time: the request is placed from then on.
        at_ms: UnixMillis,
    },
    /// The owner (or an operator) replaces a reservation's request (`updateRes`); refused, the
    /// old one stays.
    UpdateReservation {
        /// The reservation.
        name: String,
        /// Who asks: its owner, or an operator.
        by: Requester,
        /// The new request.
        expr: Expr,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// An operator sets how reservations are planned, for admissions from then on.
    SetReservationPolicy {
        /// The placement policy (Rayon §4.2).
        placement: fullerene_reservation::PolicyKind,
        /// The per-principal caps (Rayon §5.2).
        sharing: fullerene_reservation::SharingPolicy,
        /// The plan's quantum, in milliseconds (changes only while the plan is empty).
        quantum_ms: u64,
    },
    /// The owner (or an operator) removes a reservation (`deleteRes`).
    DeleteReservation {
        /// The reservation.
        name: String,
        /// Who asks: its owner, or an operator.
        by: Requester,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// The leader's plan follower kills tasks (best effort, and capacity lent to other
    /// reservations' jobs) so that a reservation's jobs get
    /// what the plan guarantees them (Rayon §5.2): each live one is asked to die like an
    /// operator's kill, and its KILLED update is recorded as preempted for `reservation`.
    /// Tasks that ended meanwhile are skipped.
    PreemptTasks {
        /// The reservation they make room for.
        reservation: String,
        /// The tasks (at least one).
        tasks: Vec<TaskKey>,
        /// Leader's time.
        at_ms: UnixMillis,
    },
    /// The leader's timer: the plan forgets its past before `at_ms`, so that it does not grow
    /// with time, and each reservation whose time is over is judged fulfilled, late or unused
    /// from the jobs tagged with it (the same on every master: it depends on the log only).
    CloseReservations {
        /// Leader's time.
        at_ms: UnixMillis,
    },
}

impl Command {
    /// The leader's time stamped in the command, for those that carry one.
    pub fn at_ms(&self) -> Option<UnixMillis> {
        match self {
            Command::RegisterAgent { at_ms, .. }
            | Command::ReregisterAgent { at_ms, .. }
            | Command::UpdateAgentResources { at_ms, .. }
            | Command::AgentHeartbeat { at_ms, .. }
            | Command::MarkAgentUnreachable { at_ms, .. }
            | Command::MarkAgentLost { at_ms, .. }
            | Command::SubscribeFramework { at_ms, .. }
            | Command::FailoverFramework { at_ms, .. }
            | Command::DisconnectFramework { at_ms, .. }
            | Command::TeardownFramework { at_ms, .. }
            | Command::DescribeJob { at_ms, .. }
            | Command::EndJob { at_ms, .. }
            | Command::LaunchTasks { at_ms, .. }
            | Command::UpdateStatus { at_ms, .. }
            | Command::KillTask { at_ms, .. }
            | Command::DrainAgent { at_ms, .. }
            | Command::KillTasks { at_ms, .. }
            | Command::CreateReservation { at_ms, .. }
            | Command::UpdateReservation { at_ms, .. }
            | Command::DeleteReservation { at_ms, .. }
            | Command::PreemptTasks { at_ms, .. }
            | Command::CloseReservations { at_ms } => Some(*at_ms),
            Command::AcknowledgeStatus { .. }
            | Command::SetGroupWeight { .. }
            | Command::SetGroup(_)
            | Command::RemoveGroup(_)
            | Command::SetQuotas(_)
            | Command::SetReservationPolicy { .. }
            | Command::SetOverbookingAllowance { .. }
            | Command::AnnounceMasterHttp { .. }
            | Command::UndrainAgent { .. } => None,
        }
    }

    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::RegisterAgent { .. } => "register_agent",
            Command::ReregisterAgent { .. } => "reregister_agent",
            Command::UpdateAgentResources { .. } => "update_agent_resources",
            Command::AgentHeartbeat { .. } => "agent_heartbeat",
            Command::MarkAgentUnreachable { .. } => "mark_agent_unreachable",
            Command::MarkAgentLost { .. } => "mark_agent_lost",
            Command::SubscribeFramework { .. } => "subscribe_framework",
            Command::FailoverFramework { .. } => "failover_framework",
            Command::DisconnectFramework { .. } => "disconnect_framework",
            Command::TeardownFramework { .. } => "teardown_framework",
            Command::DescribeJob { .. } => "describe_job",
            Command::EndJob { .. } => "end_job",
            Command::LaunchTasks { .. } => "launch_tasks",
            Command::UpdateStatus { .. } => "update_status",
            Command::KillTask { .. } => "kill_task",
            Command::AcknowledgeStatus { .. } => "acknowledge_status",
            Command::SetGroupWeight { .. } => "set_group_weight",
            Command::SetGroup(_) => "set_group",
            Command::RemoveGroup(_) => "remove_group",
            Command::SetQuotas(_) => "set_quotas",
            Command::SetOverbookingAllowance { .. } => "set_overbooking_allowance",
            Command::AnnounceMasterHttp { .. } => "announce_master_http",
            Command::DrainAgent { .. } => "drain_agent",
            Command::UndrainAgent { .. } => "undrain_agent",
            Command::KillTasks { .. } => "kill_tasks",
            Command::CreateReservation { .. } => "create_reservation",
            Command::UpdateReservation { .. } => "update_reservation",
            Command::DeleteReservation { .. } => "delete_reservation",
            Command::SetReservationPolicy { .. } => "set_reservation_policy",
            Command::PreemptTasks { .. } => "preempt_tasks",
            Command::CloseReservations { .. } => "close_reservations",
        }
    }
}

/// A task an agent must kill, with the grace period its spec asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskKill {
    /// The agent running it.
    pub agent_id: AgentId,
    /// The task.
    pub task: TaskKey,
    /// Milliseconds between the polite signal and the kill.
    pub grace_ms: u64,
}

/// What applying a valid command did, for the leader to act on (answer the proposer, tell
/// agents and frameworks). Followers apply the same command and ignore it.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandOutcome {
    /// The state changed; nobody else needs telling.
    Applied,
    /// A duplicate or a request for what already holds: nothing changed (idempotent retries,
    /// e.g. a status update with a sequence number already recorded).
    Unchanged,
    /// An agent registered or re-registered. `kill` lists tasks it must kill (ended on the
    /// master's side, or unknown); `updates` the tasks it no longer runs, now LOST, for
    /// their frameworks.
    AgentRegistered {
        /// Tasks the agent must kill.
        kill: Vec<TaskKill>,
        /// Status updates for the frameworks of tasks it lost.
        updates: Vec<StatusUpdate>,
    },
    /// A bundle was launched: send it to the agent.
    TasksLaunched {
        /// The agent.
        agent_id: AgentId,
        /// The framework.
        framework_id: FrameworkId,
        /// The launched tasks, in bundle order.
        tasks: Vec<TaskSpec>,
    },
    /// A status update was recorded: acknowledge it to the agent, forward it to the framework.
    StatusRecorded(StatusUpdate),
    /// A kill was recorded: send it to the agent.
    KillRequested(TaskKill),
    /// Kills were recorded (an operator's, or a drain's deadline): send them to the agents.
    KillsRequested(Vec<TaskKill>),
    /// Tasks ended on the master's decision (agent lost, framework torn down): `updates` for
    /// their frameworks, `kill` for agents that may still run them.
    TasksEnded {
        /// Status updates generated by the master.
        updates: Vec<StatusUpdate>,
        /// Kills to send.
        kill: Vec<TaskKill>,
    },
}

/// Who changes a reservation: the plan is the cluster's, so an operator may change any
/// reservation; a framework's principal only its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Requester {
    /// An operator (its certificate's principal, or `token:NAME`).
    Operator(String),
    /// A framework's principal.
    Principal(String),
}

impl Requester {
    /// The principal's name.
    pub fn name(&self) -> &str {
        match self {
            Requester::Operator(name) | Requester::Principal(name) => name,
        }
    }
}
