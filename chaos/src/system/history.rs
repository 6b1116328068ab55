//! What a whole-system run records: the facts the invariant checker reads, in the order they
//! happened. The simulation writes them and never reads them back; the checker
//! ([`super::checker`]) reads nothing else, so a check cannot lean on the code under test.

use std::fmt;

use fullerene_proto::messages::TaskState;
use fullerene_proto::{AgentId, FrameworkId, ResourceVec, TaskId, TaskKey, Time};

/// One recorded fact, at a virtual time.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// When it happened.
    pub at: Time,
    /// What happened.
    pub fact: Fact,
}

/// A task's running instance as the simulated executors see it: the framework and the task id
/// without its launch number (the DAG framework names attempts `<job>/<stage>.<index>/<n>`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogicalTask {
    /// The framework.
    pub framework_id: FrameworkId,
    /// The task id up to its last `/`.
    pub task: String,
}

impl LogicalTask {
    /// The logical task an attempt's id belongs to.
    pub fn of(framework_id: &FrameworkId, task_id: &TaskId) -> LogicalTask {
        let id = task_id.as_str();
        let task = id.rsplit_once('/').map_or(id, |(head, _)| head).to_string();
        LogicalTask {
            framework_id: framework_id.clone(),
            task,
        }
    }
}

/// A recorded fact. Agents are named by their ids, masters by their Raft ids.
#[derive(Clone, Debug, PartialEq)]
pub enum Fact {
    /// A fault was injected.
    Fault {
        /// Its kind.
        kind: super::FaultKind,
        /// Which process or link, in words.
        detail: String,
    },
    /// A shell's doing that explains what follows (sessions opened, lost, redirected); the
    /// checker ignores it.
    Shell {
        /// The process.
        process: String,
        /// What it did.
        event: String,
    },
    /// Faults stop from here on (the healing phase).
    FaultsStopped,
    /// A master's Raft node says it leads `term`.
    Leader {
        /// The master.
        master: u64,
        /// The term.
        term: u64,
    },
    /// A master applied a committed entry.
    Applied {
        /// The master.
        master: u64,
        /// The entry's index.
        index: u64,
        /// The entry's term.
        term: u64,
        /// A digest of the entry's type and data.
        digest: u64,
    },
    /// A master crashed (its applied index starts again from its store).
    MasterCrashed {
        /// The master.
        master: u64,
    },
    /// An agent's capacity, when it starts.
    AgentCapacity {
        /// The agent.
        agent: AgentId,
        /// Its total.
        total: ResourceVec,
        /// The overbooking allowance of fungible kinds.
        allowance: f64,
    },
    /// A simulated executor started a task's process.
    Spawned {
        /// Where.
        agent: AgentId,
        /// The framework.
        framework_id: FrameworkId,
        /// The task attempt.
        task_id: TaskId,
        /// Its resources.
        demand: ResourceVec,
    },
    /// A task's process ended (exited, killed, or killed as unrecorded after a restart).
    ProcessEnded {
        /// Where.
        agent: AgentId,
        /// The framework.
        framework_id: FrameworkId,
        /// The task attempt.
        task_id: TaskId,
    },
    /// The leader's committed state shows the agent lost: what it still runs no longer counts
    /// until it registers again (DESIGN.md: at most one instance once recovery completes).
    AgentLost {
        /// The agent.
        agent: AgentId,
    },
    /// The agent handled its `Registered`, and started killing the tasks it listed (those
    /// the master gave up on while the agent was lost); what it kills counts no more.
    AgentRejoined {
        /// The agent.
        agent: AgentId,
        /// The tasks it was told to kill.
        killing: Vec<TaskKey>,
    },
    /// An agent sent a status update (first time or again).
    UpdateSent {
        /// The agent.
        agent: AgentId,
        /// The framework.
        framework_id: FrameworkId,
        /// The task.
        task_id: TaskId,
        /// Its sequence number.
        seq: u64,
        /// The state.
        state: TaskState,
    },
    /// A framework's scheduler was handed a status update (after the driver's deduplication).
    UpdateDelivered {
        /// The framework.
        framework_id: FrameworkId,
        /// The task.
        task_id: TaskId,
        /// Its sequence number.
        seq: u64,
        /// The state.
        state: TaskState,
    },
    /// A framework subscribed for the first time.
    FrameworkRegistered {
        /// The job it runs.
        job: String,
        /// Its id.
        framework_id: FrameworkId,
    },
    /// A framework's process ended: crashed, or its subscription was refused for good. Its
    /// job is submitted again as a new framework.
    FrameworkEnded {
        /// Its id, if it had one.
        framework_id: Option<FrameworkId>,
        /// Why.
        why: String,
    },
    /// Another process took a framework over (framework failover): the updates the old one
    /// was handed may be handed again (delivery is at least once, and the new process has no
    /// memory of what the old one saw); from here they must come in order again.
    FrameworkTakenOver {
        /// The framework.
        framework_id: FrameworkId,
    },
    /// A job was submitted (again when a new process takes it over: the first counts).
    JobSubmitted {
        /// Its name.
        job: String,
    },
    /// A job's every task finished.
    JobCompleted {
        /// Its name.
        job: String,
        /// The framework that completed it.
        framework_id: FrameworkId,
    },
    /// The leader's accounting, sampled.
    Accounting(Accounting),
    /// The end of the run.
    End {
        /// The applied index of every master that is up.
        applied: Vec<(u64, u64)>,
        /// Frameworks still subscribed at the end (their jobs not done).
        live_frameworks: Vec<FrameworkId>,
    },
}

/// The leader's view of the cluster's resources and fairness at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Accounting {
    /// The leader.
    pub master: u64,
    /// Its term.
    pub term: u64,
    /// Per agent not lost: its total, what is charged to it, and what is offered of it now.
    pub agents: Vec<AgentAccount>,
    /// The overbooking allowance of fungible kinds.
    pub allowance: f64,
    /// Each group's deficit counter.
    pub deficits: Vec<(String, f64)>,
    /// The bound of DESIGN.md: κ·C plus the largest factor one task can add.
    pub deficit_bound: f64,
    /// The first quantum of the replicated reservation plan at which what the plan allocates
    /// exceeds its capacity, with both (`None`: the plan fits everywhere).
    pub plan_excess: Option<(u64, ResourceVec, ResourceVec)>,
    /// The reservations the leader's plan follower found owed now (their jobs want work and
    /// hold less than the plan guarantees them), with what is owed.
    pub reservations_owed: Vec<(String, ResourceVec)>,
    /// How long the leader lets a shortfall last before it preempts best effort, in ms.
    pub reservation_grace_ms: u64,
}

/// One agent's line of [`Accounting`].
#[derive(Clone, Debug, PartialEq)]
pub struct AgentAccount {
    /// The agent.
    pub agent: AgentId,
    /// Its capacity.
    pub total: ResourceVec,
    /// Charged to its tasks.
    pub used: ResourceVec,
    /// Offered to frameworks now, summed over the open offers.
    pub offered: ResourceVec,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>10.3}s ", self.at.as_secs_f64())?;
        match &self.fact {
            Fact::Fault { kind, detail } => write!(f, "fault {kind}: {detail}"),
            Fact::FaultsStopped => write!(f, "faults stop"),
            Fact::Shell { process, event } => write!(f, "{process}: {event}"),
            Fact::Leader { master, term } => write!(f, "master {master} leads term {term}"),
            Fact::Applied {
                master,
                index,
                term,
                digest,
            } => write!(
                f,
                "master {master} applied {index} (term {term}, {digest:016x})"
            ),
            Fact::MasterCrashed { master } => write!(f, "master {master} crashed"),
            Fact::AgentCapacity {
                agent,
                total,
                allowance,
            } => write!(f, "{agent} has {total} (overbooking {allowance})"),
            Fact::Spawned {
                agent,
                framework_id,
                task_id,
                demand,
            } => write!(f, "{agent} spawned {framework_id} {task_id} ({demand})"),
            Fact::ProcessEnded {
                agent,
                framework_id,
                task_id,
            } => write!(f, "{agent}: process of {framework_id} {task_id} ended"),
            Fact::AgentLost { agent } => write!(f, "{agent} is lost in the leader's state"),
            Fact::AgentRejoined { agent, killing } => {
                write!(f, "{agent} registered again, killing {killing:?}")
            }
            Fact::UpdateSent {
                agent,
                framework_id,
                task_id,
                seq,
                state,
            } => write!(f, "{agent} sent {framework_id} {task_id} #{seq} {state:?}"),
            Fact::UpdateDelivered {
                framework_id,
                task_id,
                seq,
                state,
            } => write!(f, "{framework_id} got {task_id} #{seq} {state:?}"),
            Fact::FrameworkRegistered { job, framework_id } => {
                write!(f, "{job} subscribed as {framework_id}")
            }
            Fact::FrameworkEnded { framework_id, why } => {
                write!(f, "framework {framework_id:?} ended: {why}")
            }
            Fact::FrameworkTakenOver { framework_id } => {
                write!(f, "{framework_id} taken over by a new process")
            }
            Fact::JobSubmitted { job } => write!(f, "{job} submitted"),
            Fact::JobCompleted { job, framework_id } => {
                write!(f, "{job} completed by {framework_id}")
            }
            Fact::Accounting(accounting) => write!(
                f,
                "leader {} (term {}) accounts {} agents, deficits {:?}",
                accounting.master,
                accounting.term,
                accounting.agents.len(),
                accounting.deficits
            ),
            Fact::End {
                applied,
                live_frameworks,
            } => write!(
                f,
                "end: applied {applied:?}, live frameworks {live_frameworks:?}"
            ),
        }
    }
}
