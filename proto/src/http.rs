//! The JSON documents of the masters' HTTP API: what its `GET` endpoints serve and what its
//! writes take as bodies. The routes, their authentication and their limits are the master's
//! (`fullerene_master::server::http`); these are only the shapes, shared with its clients (the
//! chaos run's observer, the integration tests).
//!
//! Every read is served from the leader's last published view of the cluster state, never
//! computed for the request: each document says which view it comes from ([`ViewStamp`]:
//! the leader, its term, the applied index the view is exact for, when it was built and its
//! sequence number on that master), so a client can tell how fresh it is.
//!
//! Bodies are decoded strictly: an unknown field, a missing one, a value of the wrong type or
//! anything after the JSON value is refused with a message naming it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, FrameworkId, MasterId, TaskId};
use crate::messages::{
    AgentInfo, ClusterStatus, ClusterView, FinishedTaskInfo, FrameworkInfo, GroupInfo,
    StatusReason, TaskInfo, TaskState, UnixMillis,
};

/// Which view of the cluster state a document comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewStamp {
    /// The leader that built the view.
    pub leader: MasterId,
    /// Its term when it built the view.
    pub term: u64,
    /// The log index the view is exact for: everything committed up to it, nothing after.
    pub applied: u64,
    /// When the view was built, in milliseconds since the Unix epoch (the leader's clock).
    pub built_at_ms: u64,
    /// The view's sequence number on this leader's process (1 for the first view it built):
    /// consecutive documents with the same number come from one build.
    pub build: u64,
}

/// `GET /state`: the whole view, with task environments redacted (names kept, values
/// [`REDACTED`](crate::messages::REDACTED)) and at most the leader's bound of tasks (the
/// first ones by framework and task id; `tasks_omitted` says how many were left out).
///
/// The view's own fields (`leader`, `applied`, `agents`, `frameworks`, `offers`, `tasks`,
/// `groups`) sit at the top level of the JSON object, beside the others, so a client that
/// reads a [`ClusterView`] from it reads the same object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateDocument {
    /// The leader's term when it built the view.
    pub term: u64,
    /// When the view was built, in milliseconds since the Unix epoch.
    pub built_at_ms: u64,
    /// The view's sequence number on this leader's process.
    pub build: u64,
    /// Tasks the leader tracks in all.
    pub tasks_total: u64,
    /// Tasks left out of `tasks` by the bound.
    pub tasks_omitted: u64,
    /// Finished tasks the cluster keeps (the history: the last N per framework within a time
    /// window), the most recently recorded ones, at most the view's bound, oldest first.
    #[serde(default)]
    pub finished_tasks: Vec<FinishedTaskInfo>,
    /// Finished tasks kept in all (those left out of `finished_tasks` by the bound are older).
    #[serde(default)]
    pub finished_total: u64,
    /// The view.
    #[serde(flatten)]
    pub view: ClusterView,
}

impl StateDocument {
    /// The stamp of the view this document comes from.
    pub fn stamp(&self) -> ViewStamp {
        ViewStamp {
            leader: self.view.leader,
            term: self.term,
            applied: self.view.applied,
            built_at_ms: self.built_at_ms,
            build: self.build,
        }
    }
}

/// `GET /agents`: every agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentsDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The agents.
    pub agents: Vec<AgentInfo>,
}

/// `GET /frameworks`: every framework (torn-down ones included until forgotten).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameworksDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The frameworks.
    pub frameworks: Vec<FrameworkInfo>,
}

/// `GET /tasks` and `GET /tasks?framework=ID`: the view's tasks, all or one framework's,
/// redacted like `/state`'s. With `?all=true`, also the finished tasks the cluster keeps
/// (`finished`); without it `finished` is empty.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TasksDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The framework asked for, if any.
    pub framework: Option<FrameworkId>,
    /// Its tasks (or all) that the view holds.
    pub tasks: Vec<TaskInfo>,
    /// Its tasks (or all) that the view's bound left out.
    pub tasks_omitted: u64,
    /// With `?all=true`: its (or all) finished tasks the view holds, oldest first.
    #[serde(default)]
    pub finished: Vec<FinishedTaskInfo>,
    /// With `?all=true`: its (or all) finished tasks the view's bound left out (the oldest).
    #[serde(default)]
    pub finished_omitted: u64,
}

/// `GET /jobs`: the DAG jobs frameworks described (see [`crate::jobs`]), running and ended,
/// each with its stages, their edges and their tasks by state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobsDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The jobs, framework by framework, oldest first within each.
    pub jobs: Vec<JobView>,
    /// Tasks the view's bound left out: their live attempts are missing from the stages'
    /// counts (ended attempts are counted whatever the bound).
    pub tasks_omitted: u64,
}

/// One job of [`JobsDocument`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The framework running it.
    pub framework_id: FrameworkId,
    /// The framework's name.
    pub framework_name: String,
    /// The framework's fairness group.
    pub group: String,
    /// The job's name.
    pub job: String,
    /// The policy ordering its tasks.
    pub policy: String,
    /// When the masters learnt of it (leader's time, Unix ms).
    pub submitted_at_ms: u64,
    /// When it ended.
    pub ended_at_ms: Option<u64>,
    /// `finished`, `failed` or `killed` once it ended ([`crate::jobs::JobEnd::name`]).
    pub outcome: Option<String>,
    /// Why it failed or was killed.
    pub reason: Option<String>,
    /// Its completion time as the masters saw it, once finished.
    pub jct_ms: Option<u64>,
    /// Its stages, in the order the framework described them.
    pub stages: Vec<StageView>,
    /// The reservation it runs in, if any (`None`: best effort).
    #[serde(default)]
    pub reservation: Option<String>,
}

/// One stage of a [`JobView`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageView {
    /// The stage's id (its tasks' `origin.stage`).
    pub stage: u32,
    /// Its name.
    pub name: String,
    /// The stages it waits for.
    pub parents: Vec<u32>,
    /// How many tasks it has.
    pub total: u32,
    /// Its task attempts by state (`staging`, `running`, `finished`, `failed`, `killed`,
    /// `lost`): live ones from the task records, ended ones as counted when they ended. A
    /// stage is done when `finished` reaches `total`.
    pub tasks: BTreeMap<String, u64>,
}

impl StageView {
    /// Whether every task of the stage finished.
    pub fn done(&self) -> bool {
        self.tasks.get("finished").copied().unwrap_or(0) >= u64::from(self.total)
    }
}

/// The jobs `frameworks` described, with their stages' task counts: live attempts from
/// `tasks` (those not yet ended; an ended task's record may linger until acknowledged and is
/// counted from its stage's ends instead, so never twice), ended attempts from the stages'
/// counts.
pub fn job_views(frameworks: &[FrameworkInfo], tasks: &[TaskInfo]) -> Vec<JobView> {
    let state_name = |state: TaskState| format!("{state:?}").to_lowercase();
    // Live attempts per (framework, job, stage) and state, in one pass over the tasks.
    let mut live: BTreeMap<(&FrameworkId, &str, u32), BTreeMap<String, u64>> = BTreeMap::new();
    for task in tasks.iter().filter(|t| !t.state.is_terminal()) {
        if let Some(origin) = &task.spec.origin {
            *live
                .entry((&task.framework_id, origin.job.as_str(), origin.stage))
                .or_default()
                .entry(state_name(task.state))
                .or_insert(0) += 1;
        }
    }
    let mut views = Vec::new();
    for framework in frameworks {
        for job in &framework.jobs {
            let name = job.description.job.as_str();
            let stages = job
                .description
                .stages
                .iter()
                .enumerate()
                .map(|(i, stage)| {
                    let mut counts = live
                        .get(&(&framework.id, name, stage.stage))
                        .cloned()
                        .unwrap_or_default();
                    let ends = job.stage_ends.get(i).copied().unwrap_or_default();
                    for (state, n) in [
                        (TaskState::Finished, ends.finished),
                        (TaskState::Failed, ends.failed),
                        (TaskState::Killed, ends.killed),
                        (TaskState::Lost, ends.lost),
                    ] {
                        if n > 0 {
                            *counts.entry(state_name(state)).or_insert(0) += u64::from(n);
                        }
                    }
                    StageView {
                        stage: stage.stage,
                        name: stage.name.clone(),
                        parents: stage.parents.clone(),
                        total: stage.tasks,
                        tasks: counts,
                    }
                })
                .collect();
            views.push(JobView {
                framework_id: framework.id.clone(),
                framework_name: framework.name.clone(),
                group: framework.group.clone(),
                job: name.to_string(),
                policy: job.description.policy.clone(),
                submitted_at_ms: job.submitted_at_ms,
                ended_at_ms: job.ended_at_ms,
                outcome: job.end.as_ref().map(|end| end.name().to_string()),
                reason: job
                    .end
                    .as_ref()
                    .and_then(|end| end.reason())
                    .map(str::to_string),
                jct_ms: job.jct_ms(),
                stages,
                reservation: job.description.reservation.clone(),
            });
        }
    }
    views
}

/// `GET /groups`: the fairness groups with their deficit counters, and the weights operators
/// set (a group not listed there weighs 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupsDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The groups with frameworks or weights.
    pub groups: Vec<GroupInfo>,
    /// The weights set by operators.
    pub weights: BTreeMap<String, f64>,
}

/// `GET /cluster`: the Raft group as the leader sees it (members, their replication lag).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The group.
    pub cluster: ClusterStatus,
}

/// How far apart the sequence numbers of events from consecutive Raft log entries are: an
/// event's [`EventRecord::seq`] is `index * EVENT_SEQ_STRIDE + position`, its entry's index
/// and its position among the events that entry gave (an entry gives fewer; one that would give
/// more ends with [`ClusterEvent::EventsOmitted`]). So `1234000002` is the third event of entry
/// 1234, and every master numbers every event alike.
pub const EVENT_SEQ_STRIDE: u64 = 1_000_000;

/// One thing that happened in the cluster, as `GET /events` serves it and `fullerene events`
/// prints it. The event's own fields sit beside `seq`, `index` and `at_ms` in one JSON object
/// whose `kind` names the event, for example
///
/// ```json
/// {"seq": 812000001, "index": 812, "at_ms": 1764190000123, "kind": "task_state_changed",
///  "framework": "fw-3", "task": "q1-s2-t7-a0", "agent": "agent-2",
///  "from": "Running", "to": "Finished", "reason": {"Exited": {"code": 0}}}
/// ```
///
/// Every event but [`ClusterEvent::LeaderElected`] is derived from a command every master
/// applies, so every master, and a new leader after a failover, holds the same events under
/// the same numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Its number: increasing, unique, and the same on every master (see
    /// [`EVENT_SEQ_STRIDE`]). A client resumes after the last one it has (`?since=`, or
    /// `Last-Event-ID` on the event stream).
    pub seq: u64,
    /// The Raft log index of the entry it comes from.
    pub index: u64,
    /// When it happened, in milliseconds since the Unix epoch: the leader's time stamped in the
    /// command. `None` for the few commands that carry no time (group weights, undrains,
    /// membership changes, a new term's first entry).
    pub at_ms: Option<UnixMillis>,
    /// What happened.
    #[serde(flatten)]
    pub event: ClusterEvent,
}

/// Why a framework was torn down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TeardownCause {
    /// An operator asked (`fullerene framework teardown`, the HTTP API).
    Operator,
    /// It stayed disconnected past its failover timeout.
    FailoverTimeout,
    /// It asked itself (its job is done).
    OwnRequest,
}

/// What happened, tagged by `kind` in JSON (snake case: `agent_lost`, `task_state_changed`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClusterEvent {
    /// A master won an election and its term's first entry was applied.
    LeaderElected {
        /// The term.
        term: u64,
        /// The new leader, as this master saw it elected; `None` when this master applied the
        /// term's first entry without having heard from that leader (it was catching up).
        leader: Option<u64>,
    },
    /// A new agent registered.
    AgentRegistered {
        /// The agent.
        agent: AgentId,
        /// Its host name.
        hostname: String,
    },
    /// A known agent registered again (restart, partition, failover, or back from lost).
    AgentReregistered {
        /// The agent.
        agent: AgentId,
        /// Its host name.
        hostname: String,
        /// Whether it had been declared lost.
        was_lost: bool,
    },
    /// An unreachable agent was heard from again.
    AgentReachable {
        /// The agent.
        agent: AgentId,
    },
    /// An agent missed heartbeats: no new launches on it.
    AgentUnreachable {
        /// The agent.
        agent: AgentId,
    },
    /// An agent stayed silent past the second timeout: its tasks are lost.
    AgentLost {
        /// The agent.
        agent: AgentId,
        /// How many tasks were ended LOST with it.
        tasks_lost: u64,
    },
    /// An operator began draining an agent, or moved its drain's deadline.
    AgentDraining {
        /// The agent.
        agent: AgentId,
        /// When its remaining tasks are killed (leader's time), if ever.
        deadline_ms: Option<UnixMillis>,
    },
    /// A draining agent runs nothing any more.
    AgentDrained {
        /// The agent.
        agent: AgentId,
    },
    /// An operator ended an agent's drain.
    AgentUndrained {
        /// The agent.
        agent: AgentId,
    },
    /// A new framework subscribed.
    FrameworkSubscribed {
        /// The framework.
        framework: FrameworkId,
        /// Its name.
        name: String,
        /// Its owner.
        principal: String,
        /// Its fairness group.
        group: String,
    },
    /// A registered framework subscribed again (a failed-over or reconnected scheduler).
    FrameworkReconnected {
        /// The framework.
        framework: FrameworkId,
        /// Its (possibly new) name.
        name: String,
    },
    /// A framework's connection closed; it has its failover timeout to come back.
    FrameworkDisconnected {
        /// The framework.
        framework: FrameworkId,
    },
    /// A framework was torn down: its tasks were killed and it is gone for good.
    FrameworkTornDown {
        /// The framework.
        framework: FrameworkId,
        /// Why.
        cause: TeardownCause,
        /// How many of its tasks were still running and were killed.
        tasks_killed: u64,
    },
    /// A task changed state: launched (`from` is `None`, `to` STAGING), started, ended.
    TaskStateChanged {
        /// Its framework.
        framework: FrameworkId,
        /// The task.
        task: TaskId,
        /// Its agent.
        agent: AgentId,
        /// Its state before (`None` for a launch).
        from: Option<TaskState>,
        /// Its state now.
        to: TaskState,
        /// Why, when known.
        reason: Option<StatusReason>,
        /// The agent's message, if any (at most 256 bytes of it).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        message: String,
    },
    /// A master joined the Raft group.
    MasterAdded {
        /// Its Raft id.
        master: u64,
        /// Its peer address, when the change carried it.
        addr: Option<SocketAddr>,
    },
    /// A master left the Raft group.
    MasterRemoved {
        /// Its Raft id.
        master: u64,
    },
    /// An operator changed a fairness group's weight (or removed it: back to 1).
    GroupWeightChanged {
        /// The group.
        group: String,
        /// Its weight now.
        weight: f64,
    },
    /// The plan accepted a reservation, new or updated (issue 17).
    ReservationAccepted {
        /// Its name.
        reservation: String,
        /// Its owner.
        principal: String,
        /// Whether it replaced the owner's earlier request.
        updated: bool,
    },
    /// Its owner deleted a reservation.
    ReservationDeleted {
        /// Its name.
        reservation: String,
    },
    /// After a loss of capacity, the adapter could no longer fit an accepted reservation and
    /// removed it from the plan (Rayon §5.2), telling its owner why.
    ReservationRejected {
        /// Its name.
        reservation: String,
        /// Its owner.
        principal: String,
        /// The plan's reason (which atom and window no longer fit).
        reason: String,
    },
    /// A reservation's time is over, and the jobs tagged with it judged it (issue 17's
    /// fulfilment, Rayon §6).
    ReservationClosed {
        /// Its name.
        reservation: String,
        /// Its owner.
        principal: String,
        /// `fulfilled` (every job tagged with it ended by its end), `late` or `unused`.
        outcome: String,
        /// The jobs that ran in it.
        jobs: u32,
        /// Of those, the ones still running at its end.
        late_jobs: u32,
    },
    /// One Raft entry gave more events than its sequence numbers hold
    /// ([`EVENT_SEQ_STRIDE`]): this many after the last one were not recorded.
    EventsOmitted {
        /// How many.
        count: u64,
    },
}

impl ClusterEvent {
    /// Its `kind`, as tagged in JSON and named in the event stream's `event:` lines.
    pub fn kind(&self) -> &'static str {
        match self {
            ClusterEvent::LeaderElected { .. } => "leader_elected",
            ClusterEvent::AgentRegistered { .. } => "agent_registered",
            ClusterEvent::AgentReregistered { .. } => "agent_reregistered",
            ClusterEvent::AgentReachable { .. } => "agent_reachable",
            ClusterEvent::AgentUnreachable { .. } => "agent_unreachable",
            ClusterEvent::AgentLost { .. } => "agent_lost",
            ClusterEvent::AgentDraining { .. } => "agent_draining",
            ClusterEvent::AgentDrained { .. } => "agent_drained",
            ClusterEvent::AgentUndrained { .. } => "agent_undrained",
            ClusterEvent::FrameworkSubscribed { .. } => "framework_subscribed",
            ClusterEvent::FrameworkReconnected { .. } => "framework_reconnected",
            ClusterEvent::FrameworkDisconnected { .. } => "framework_disconnected",
            ClusterEvent::FrameworkTornDown { .. } => "framework_torn_down",
            ClusterEvent::TaskStateChanged { .. } => "task_state_changed",
            ClusterEvent::MasterAdded { .. } => "master_added",
            ClusterEvent::MasterRemoved { .. } => "master_removed",
            ClusterEvent::GroupWeightChanged { .. } => "group_weight_changed",
            ClusterEvent::ReservationAccepted { .. } => "reservation_accepted",
            ClusterEvent::ReservationDeleted { .. } => "reservation_deleted",
            ClusterEvent::ReservationRejected { .. } => "reservation_rejected",
            ClusterEvent::ReservationClosed { .. } => "reservation_closed",
            ClusterEvent::EventsOmitted { .. } => "events_omitted",
        }
    }
}

/// `GET /events` without following: this master's recent events. With `?since=SEQ`, the
/// first `limit` events after `SEQ`; without, the last `limit`.
///
/// Each master keeps its events in a bounded ring (`--events-kept`, 10,000 by default). A
/// client asking for events older than the ring holds is told so (`missed`), never silently
/// handed a gap: it has lost events between `since` and `floor` and should re-read the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventsDocument {
    /// The master that answered (the leader).
    pub master: MasterId,
    /// Every event numbered above this is in this master's ring (or still to come); those at
    /// or below it are gone from it (or were never seen by it: before its start, or covered by
    /// a snapshot it installed).
    pub floor: u64,
    /// The number of the newest event in the ring (its floor when the ring is empty).
    pub last: u64,
    /// The `since` asked for.
    pub since: Option<u64>,
    /// Set when `since` is below `floor`: events between them are gone from this master.
    pub missed: bool,
    /// The events, oldest first.
    pub events: Vec<EventRecord>,
    /// Set when `limit` cut the answer short: ask again with `since` the last event's `seq`.
    pub more: bool,
}

/// What the event stream sends (as `event: lagged`) when the client asked to resume from
/// before this master's [`EventsDocument::floor`], or fell so far behind that the ring moved
/// past it: the events between `since` and `floor` are gone; the stream goes on after `floor`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventsLagged {
    /// Where the client was.
    pub since: u64,
    /// Where the stream goes on from.
    pub floor: u64,
}

/// The body of `POST /agents/{agent}/drain` (may be `{}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainBody {
    /// How long the agent's tasks may still run before the leader kills them, in
    /// milliseconds; absent: until they end on their own.
    #[serde(default)]
    pub deadline_after_ms: Option<u64>,
}

/// `GET /reservations`: the accepted reservations (Rayon §5.2), by name, without their
/// allocations, and the last ones the adapter rejected after a loss of capacity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReservationsDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The accepted reservations, by name; their phases and guarantees are those of the view's
    /// `built_at_ms`.
    pub accepted: Vec<crate::reservations::ReservationInfo>,
    /// The last reservations the adapter rejected, oldest first.
    pub rejected: Vec<crate::reservations::RejectedReservationInfo>,
    /// How many the adapter rejected since the cluster began.
    pub rejected_total: u64,
}

/// The body of `POST /reservations`: a reservation to create, owned by the caller (its
/// certificate's id, or `token:NAME`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateReservationBody {
    /// Its name.
    pub name: String,
    /// Its request, in RDL's text syntax.
    pub rdl: String,
}

/// The body of `PUT /reservations/{name}`: the reservation's new request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateReservationBody {
    /// The new request, in RDL's text syntax.
    pub rdl: String,
}

/// The body of `PUT /groups/{group}/weight`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupWeightBody {
    /// The group's weight: finite and at least 0.
    pub weight: f64,
}

/// The body of `POST /masters`: a master to add to the group (as a learner, promoted once it
/// has caught up).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMasterBody {
    /// Its Raft id (at least 1).
    pub id: u64,
    /// Its peer address (QUIC).
    pub addr: SocketAddr,
}

/// What a write answers once its change is committed and applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteDone {
    /// Always `true`.
    pub committed: bool,
}

/// What `GET /ui/session` answers, and `POST /ui/session` (the web UI's login) once it set
/// the session cookie: who the caller is and what it may do, so the page shows write buttons
/// only to callers that may use them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionDocument {
    /// The caller as the audit log names it: `operator operator-1`, `token deploy`.
    pub who: String,
    /// `read` or `write`.
    pub scope: Option<String>,
    /// Whether the caller is known by the session cookie (else by a certificate or a header).
    pub cookie: bool,
}

/// What `GET /health` and `GET /ready` answer: 200 with `ok: true`, or 503 with `ok: false`,
/// and `reason` saying why either way. Only this master's own Raft position, never cluster
/// data: the probes are served without credentials (load balancers and Kubernetes send none).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeDocument {
    /// Whether the probe passed.
    pub ok: bool,
    /// Why it passed or failed, for a person to read.
    pub reason: String,
    /// This master's Raft id, once its node loop answered.
    pub master: Option<u64>,
    /// The leader it follows (itself when it leads), if it knows one.
    pub leader: Option<u64>,
    /// Its Raft term.
    pub term: Option<u64>,
    /// Entries it knows are committed but has not applied yet.
    pub apply_lag: Option<u64>,
}

/// What every refusal and failure answers, with the status code saying which.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDocument {
    /// What was wrong, for a person to read.
    pub error: String,
}

/// The response header of `GET /frameworks/{framework}/tasks/{task}/files/{name}` holding the
/// file's whole size in bytes when it was read (a log viewer pages and tails with it).
pub const FILE_SIZE_HEADER: &str = "x-fullerene-file-size";

/// The response header of the same route holding the offset the body starts at: the one
/// asked for, clamped to the file's size.
pub const FILE_OFFSET_HEADER: &str = "x-fullerene-file-offset";

/// The response header of the same route saying (`true` or `false`) whether the task had
/// ended when the file was read: once it has and the reader has reached the size, nothing
/// more will come.
pub const TASK_ENDED_HEADER: &str = "x-fullerene-task-ended";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_document_reads_as_a_cluster_view_too() {
        let document = StateDocument {
            term: 3,
            built_at_ms: 1_700_000_000_000,
            build: 9,
            tasks_total: 0,
            tasks_omitted: 0,
            finished_tasks: Vec::new(),
            finished_total: 0,
            view: ClusterView {
                leader: MasterId(2),
                applied: 41,
                agents: Vec::new(),
                frameworks: Vec::new(),
                offers: Vec::new(),
                tasks: Vec::new(),
                groups: Vec::new(),
                reservations: Vec::new(),
            },
        };
        let json = serde_json::to_string(&document).expect("encode");
        let back: StateDocument = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, document);
        let view: ClusterView = serde_json::from_str(&json).expect("a cluster view");
        assert_eq!(view, document.view);
        assert_eq!(back.stamp().applied, 41);
        assert_eq!(back.stamp().leader, MasterId(2));
    }

    #[test]
    fn an_event_is_one_json_object_tagged_by_its_kind() {
        let record = EventRecord {
            seq: 812_000_001,
            index: 812,
            at_ms: Some(1_764_190_000_123),
            event: ClusterEvent::TaskStateChanged {
                framework: FrameworkId::from("fw-3"),
                task: TaskId::from("t7"),
                agent: AgentId::from("agent-2"),
                from: Some(TaskState::Running),
                to: TaskState::Finished,
                reason: Some(StatusReason::Exited { code: 0 }),
                message: String::new(),
            },
        };
        let json: serde_json::Value = serde_json::to_value(&record).expect("encode");
        assert_eq!(json["kind"], "task_state_changed");
        assert_eq!(json["kind"], record.event.kind());
        assert_eq!(json["seq"], 812_000_001);
        assert_eq!(json["from"], "Running");
        assert_eq!(json["reason"]["Exited"]["code"], 0);
        assert!(
            json.get("message").is_none(),
            "an empty message is left out"
        );
        let back: EventRecord = serde_json::from_value(json).expect("decode");
        assert_eq!(back, record);
        let torn: EventRecord = serde_json::from_str(
            r#"{"seq": 5, "index": 0, "at_ms": null, "kind": "framework_torn_down",
                "framework": "f", "cause": "failover_timeout", "tasks_killed": 2}"#,
        )
        .expect("a teardown");
        assert_eq!(
            torn.event,
            ClusterEvent::FrameworkTornDown {
                framework: FrameworkId::from("f"),
                cause: TeardownCause::FailoverTimeout,
                tasks_killed: 2
            }
        );
    }

    #[test]
    fn bodies_are_strict() {
        let ok: GroupWeightBody = serde_json::from_str(r#"{"weight": 2.5}"#).expect("a body");
        assert_eq!(ok.weight, 2.5);
        for bad in [
            r#"{"weight": 2.5, "extra": 1}"#,
            r#"{}"#,
            r#"{"weight": "2"}"#,
            r#"{"weight": 2} {"#,
        ] {
            assert!(
                serde_json::from_str::<GroupWeightBody>(bad).is_err(),
                "{bad} was accepted"
            );
        }
        let error = serde_json::from_str::<AddMasterBody>(r#"{"id": 4, "adr": "x"}"#)
            .expect_err("a misspelt field");
        assert!(error.to_string().contains("adr"), "{error}");
    }
}
