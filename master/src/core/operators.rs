//! Operator requests: writes go through the log (answered once applied), reads through
//! ReadIndex (Raft thesis §6.4: linearizable, answered once the leader's commit is confirmed and
//! applied). Followers answer with a redirect to the leader.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Bound;

use fullerene_proto::limits::take_page;
use fullerene_proto::messages::{
    AgentInfo, ClusterStatus, ClusterView, ErrorCode, FinishedTaskInfo, GroupInfo, MemberStatus,
    OperatorRequest, OperatorResponse, Redirect, UnixMillis, WireError,
};
use fullerene_proto::reservations::RejectedReservationInfo;
use fullerene_proto::time::Now;
use fullerene_proto::{AgentId, FrameworkId, MasterId, TaskId, TaskKey};

use super::reservation_calls::{policy_command, policy_view, reservation_command};
use super::{MasterCore, Pending, RequestId};
use crate::raft_node::{MembershipChange, ProposeError, ReadError};
use crate::state::{Command, CommandError, Requester, TeardownCause};
use crate::storage::RaftStore;

/// The leader's view of the cluster for the HTTP API's reads ([`MasterCore::bounded_view`]):
/// redacted, bounded in tasks, exact for its applied index.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundedView {
    /// The view: task environments redacted, at most the bound of tasks.
    pub view: ClusterView,
    /// The leader's term.
    pub term: u64,
    /// Tasks the state holds in all.
    pub tasks_total: u64,
    /// Tasks left out of `view.tasks` by the bound.
    pub tasks_omitted: u64,
    /// The same, per framework (frameworks with none left out are not listed).
    pub omitted_by_framework: BTreeMap<FrameworkId, u64>,
    /// The Raft group as the leader sees it.
    pub cluster: ClusterStatus,
    /// The group weights operators set.
    pub weights: BTreeMap<String, f64>,
    /// The most recently recorded finished tasks, at most the view's bound of tasks, oldest
    /// first.
    pub finished: Vec<FinishedTaskInfo>,
    /// Finished tasks kept in all.
    pub finished_total: u64,
    /// Finished tasks left out of `finished` by the bound, per framework.
    pub finished_omitted_by_framework: BTreeMap<FrameworkId, u64>,
    /// The reservations the adapter rejected, oldest first (the accepted are in `view`).
    pub rejected_reservations: Vec<RejectedReservationInfo>,
    /// How many the adapter rejected since the cluster began.
    pub rejected_reservations_total: u64,
}

/// A read waiting for its ReadIndex confirmation.
#[derive(Debug)]
pub(super) enum ReadQuery {
    ClusterStatus,
    ListAgents(Option<AgentId>),
    ListFrameworks(Option<FrameworkId>),
    ListTasks(Option<FrameworkId>, Option<TaskKey>),
    ListFinishedTasks(Option<FrameworkId>, Option<u64>),
    GroupWeights,
    ListGroups,
    Quotas,
    /// The whole view, with reservations as of a wall-clock time.
    State(UnixMillis),
    /// Accepted reservations after a name, read as of a wall-clock time.
    Reservations(Option<String>, UnixMillis),
    /// One reservation with its allocation, read as of a wall-clock time.
    Reservation(String, UnixMillis),
    /// The placement policy and the sharing caps.
    ReservationPolicy,
}

impl<S: RaftStore> MasterCore<S> {
    /// Proposes an operator's write, answered `Done` once applied (or with the reason it
    /// could not be proposed). With `closes`, an operator's teardown: once applied, that
    /// framework's session here is closed too, as for a teardown the leader decides itself.
    fn propose_write(
        &mut self,
        command: &Command,
        token: crate::raft_node::Token,
        request: RequestId,
        closes: Option<FrameworkId>,
    ) {
        match self.node.propose(command, token) {
            Ok(()) => {
                self.pending
                    .insert(token, Pending::Write { request, closes });
            }
            Err(error) => {
                let response = self.propose_error_response(&error);
                self.answer(request, response);
            }
        }
    }

    pub(super) fn handle_operator(
        &mut self,
        request_id: RequestId,
        principal: &str,
        request: OperatorRequest,
        now: Now,
    ) {
        if !self.node.is_leader() {
            let redirect = OperatorResponse::Redirect(self.redirect());
            self.answer(request_id, redirect);
            return;
        }
        let token = self.token();
        let query = match request {
            OperatorRequest::ClusterStatus => ReadQuery::ClusterStatus,
            OperatorRequest::ListAgents { after } => ReadQuery::ListAgents(after),
            OperatorRequest::ListFrameworks { after } => ReadQuery::ListFrameworks(after),
            OperatorRequest::ListTasks {
                framework_id,
                after,
            } => ReadQuery::ListTasks(framework_id, after),
            OperatorRequest::ListFinishedTasks {
                framework_id,
                after,
            } => ReadQuery::ListFinishedTasks(framework_id, after),
            OperatorRequest::Events { .. } => {
                // The shell answers it from its ring of events (`server::sessions`), off the
                // node loop; the core keeps no ring.
                self.answer(
                    request_id,
                    invalid("events are served by the master's shell".to_string()),
                );
                return;
            }
            OperatorRequest::GroupWeights => ReadQuery::GroupWeights,
            OperatorRequest::ListGroups => ReadQuery::ListGroups,
            OperatorRequest::Quotas => ReadQuery::Quotas,
            OperatorRequest::State => ReadQuery::State(now.wall_ms()),
            OperatorRequest::ListReservations { after } => {
                ReadQuery::Reservations(after, now.wall_ms())
            }
            OperatorRequest::ShowReservation { name } => {
                ReadQuery::Reservation(name, now.wall_ms())
            }
            OperatorRequest::ReservationPolicy => ReadQuery::ReservationPolicy,
            OperatorRequest::SetReservationPolicy(policy) => {
                match policy_command(policy) {
                    Ok(command) => self.propose_write(&command, token, request_id, None),
                    Err(error) => self.answer(request_id, OperatorResponse::Error(error)),
                }
                return;
            }
            OperatorRequest::Reservation(call) => {
                let by = Requester::Operator(principal.to_string());
                let limits = &self.node.state().reservations().plan().config().limits;
                match reservation_command(call, by, limits, now.wall_ms()) {
                    Ok(command) => self.propose_write(&command, token, request_id, None),
                    Err(error) => self.answer(request_id, OperatorResponse::Error(error)),
                }
                return;
            }
            OperatorRequest::ReadTaskFile(_) => {
                // The operator session serves it beside the node loop (server::files).
                self.answer(
                    request_id,
                    invalid("file reads are served by the operator session".to_string()),
                );
                return;
            }
            OperatorRequest::SetGroupWeight { group, weight } => {
                let command = Command::SetGroupWeight { group, weight };
                return self.propose_write(&command, token, request_id, None);
            }
            OperatorRequest::SetGroup(placement) => {
                return self.propose_write(&Command::SetGroup(placement), token, request_id, None);
            }
            OperatorRequest::RemoveGroup(removal) => {
                return self.propose_write(&Command::RemoveGroup(removal), token, request_id, None);
            }
            OperatorRequest::SetQuotas(quotas) => {
                return self.propose_write(&Command::SetQuotas(quotas), token, request_id, None);
            }
            OperatorRequest::AddMaster { id, addr } => {
                if id.0 == 0 {
                    // Raft reserves id 0 for "none".
                    self.answer(request_id, invalid("master ids start at 1".to_string()));
                    return;
                }
                let membership = self.node.membership();
                if membership.voters.contains(&id.0) || membership.learners.contains(&id.0) {
                    self.answer(
                        request_id,
                        invalid(format!("master {} is already a member", id.0)),
                    );
                    return;
                }
                // A new master joins as a learner and is promoted to voter once it has caught
                // up (see `promote_learners`): added as a voter at once, it would count in the
                // quorum while it still fetches the snapshot, and one more failure would stop
                // the group. The address travels in the change's context, so every master
                // (and any master that replays this entry later) learns where it is.
                let change = MembershipChange::to_conf_change(
                    &[MembershipChange::AddLearner(id.0)],
                    addr.to_string().into_bytes(),
                );
                self.propose_change(change, request_id);
                return;
            }
            OperatorRequest::DrainAgent {
                agent_id,
                deadline_after_ms,
            } => {
                let at_ms = now.wall_ms();
                let command = Command::DrainAgent {
                    agent_id,
                    deadline_ms: deadline_after_ms.map(|after| at_ms.saturating_add(after)),
                    at_ms,
                };
                return self.propose_write(&command, token, request_id, None);
            }
            OperatorRequest::UndrainAgent { agent_id } => {
                return self.propose_write(
                    &Command::UndrainAgent { agent_id },
                    token,
                    request_id,
                    None,
                );
            }
            OperatorRequest::KillTask {
                framework_id,
                task_id,
            } => {
                let command = Command::KillTasks {
                    tasks: vec![TaskKey::new(framework_id, task_id)],
                    at_ms: now.wall_ms(),
                };
                return self.propose_write(&command, token, request_id, None);
            }
            OperatorRequest::TeardownFramework { framework_id } => {
                let command = Command::TeardownFramework {
                    framework_id: framework_id.clone(),
                    principal: None,
                    cause: TeardownCause::Operator,
                    at_ms: now.wall_ms(),
                };
                return self.propose_write(&command, token, request_id, Some(framework_id));
            }
            OperatorRequest::RemoveMaster { id } => {
                let membership = self.node.membership();
                if !membership.voters.contains(&id.0) && !membership.learners.contains(&id.0) {
                    self.answer(
                        request_id,
                        invalid(format!("master {} is not a member", id.0)),
                    );
                    return;
                }
                let change =
                    MembershipChange::to_conf_change(&[MembershipChange::Remove(id.0)], Vec::new());
                self.propose_change(change, request_id);
                return;
            }
        };
        match self.node.read_index(token) {
            Ok(()) => {
                self.pending.insert(token, Pending::Read(query, request_id));
            }
            Err(error) => self.answer(request_id, read_error_response(&error)),
        }
    }

    fn propose_change(&mut self, change: raft::eraftpb::ConfChangeV2, request_id: RequestId) {
        let token = self.token();
        match self.node.propose_conf_change(change, token) {
            Ok(()) => {
                self.pending.insert(
                    token,
                    Pending::Write {
                        request: request_id,
                        closes: None,
                    },
                );
            }
            Err(error) => {
                let response = self.propose_error_response(&error);
                self.answer(request_id, response);
            }
        }
    }

    /// What a client is told when its proposal could not be made or was dropped.
    pub(super) fn propose_error_response(&self, error: &ProposeError) -> OperatorResponse {
        match error {
            ProposeError::NotLeader { .. } => OperatorResponse::Redirect(self.redirect()),
            ProposeError::ConfChangeRefused(detail) => {
                invalid(format!("membership change refused: {detail}"))
            }
            ProposeError::Encode(_) => invalid(error.to_string()),
            ProposeError::OutcomeUnknown => OperatorResponse::Error(WireError::new(
                ErrorCode::OutcomeUnknown,
                error.to_string(),
            )),
            // Retryable (`ConfChangePending`, `Busy`, ...): the client sends it again after
            // its pause, until its deadline.
            _ => OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, error.to_string())),
        }
    }

    pub(super) fn serve_read(&self, query: ReadQuery) -> OperatorResponse {
        let state = self.node.state();
        match query {
            ReadQuery::ClusterStatus => OperatorResponse::ClusterStatus(self.cluster_status()),
            ReadQuery::ListAgents(after) => {
                let (agents, next) = take_page(
                    state
                        .agents()
                        .range::<_, AgentId>(after_key(after.as_ref()))
                        .filter_map(|(id, _)| Some((id.clone(), self.agent_info(id)?))),
                );
                OperatorResponse::Agents { agents, next }
            }
            ReadQuery::ListFrameworks(after) => {
                let (frameworks, next) = take_page(
                    state
                        .frameworks()
                        .range::<_, FrameworkId>(after_key(after.as_ref()))
                        .filter_map(|(id, _)| Some((id.clone(), state.framework_info(id)?))),
                );
                OperatorResponse::Frameworks { frameworks, next }
            }
            ReadQuery::ListTasks(framework, after) => {
                // One framework's tasks are one run of keys: start at its first key (or after
                // the cursor) and stop at the next framework's.
                let start = match (&after, &framework) {
                    (Some(after), _) => Bound::Excluded(after.clone()),
                    (None, Some(framework)) => Bound::Included(TaskKey::new(
                        framework.clone(),
                        TaskId::from(String::new()),
                    )),
                    (None, None) => Bound::Unbounded,
                };
                let (tasks, next) = take_page(
                    state
                        .tasks()
                        .range((start, Bound::Unbounded))
                        .take_while(|(key, _)| {
                            framework.as_ref().is_none_or(|f| &key.framework_id == f)
                        })
                        .filter_map(|(key, _)| Some((key.clone(), state.task_info(key)?))),
                );
                OperatorResponse::Tasks { tasks, next }
            }
            ReadQuery::ListFinishedTasks(framework, after) => {
                let (tasks, next) = take_page(
                    state
                        .finished_tasks_after(framework.as_ref(), after)
                        .map(|task| (task.ordinal, task.clone())),
                );
                OperatorResponse::FinishedTasks { tasks, next }
            }
            ReadQuery::GroupWeights => {
                OperatorResponse::GroupWeights(state.settings().group_weights.clone())
            }
            ReadQuery::ListGroups => OperatorResponse::Groups {
                groups: group_infos(state),
                default_group: crate::state::DEFAULT_GROUP.to_string(),
            },
            ReadQuery::Quotas => OperatorResponse::Quotas(state.settings().quotas),
            ReadQuery::State(now_ms) => {
                OperatorResponse::State(self.cluster_view(usize::MAX, now_ms).0)
            }
            ReadQuery::Reservations(after, now_ms) => {
                let reservations = state.reservations();
                let (accepted, next) =
                    take_page(reservations.infos_after(after.as_deref(), now_ms));
                OperatorResponse::Reservations {
                    accepted,
                    next,
                    // With the first page only: a client paging through has them once.
                    rejected: if after.is_none() {
                        reservations.rejected_infos()
                    } else {
                        Vec::new()
                    },
                }
            }
            ReadQuery::ReservationPolicy => OperatorResponse::ReservationPolicy(policy_view(
                state.reservations().plan().config(),
            )),
            ReadQuery::Reservation(name, now_ms) => {
                match state.reservations().info(&name, now_ms, true) {
                    Some(info) => OperatorResponse::Reservation(info),
                    None => OperatorResponse::Error(WireError::new(
                        ErrorCode::UnknownReservation,
                        format!("no accepted reservation `{name}`"),
                    )),
                }
            }
        }
    }

    /// The leader's view for the HTTP API's reads, or `None` on a follower (which redirects
    /// them). Task environments are redacted ([`ClusterView::redacted`]), and the view holds
    /// at most `max_tasks` tasks, the first by framework and task id, so that building and
    /// serving it costs a bounded amount whatever the cluster holds; what it leaves out is
    /// counted, per framework. Everything in it is read at one step, so it is exact for its
    /// applied index; its reservations' phases and guarantees are those of wall-clock time
    /// `now_ms`.
    pub fn bounded_view(&self, max_tasks: usize, now_ms: UnixMillis) -> Option<BoundedView> {
        if !self.node.is_leader() {
            return None;
        }
        let (view, omitted_by_framework) = self.cluster_view(max_tasks, now_ms);
        let state = self.node.state();
        let finished_total = state.finished_count();
        let finished_omitted = finished_total.saturating_sub(max_tasks);
        let mut finished_omitted_by_framework: BTreeMap<FrameworkId, u64> = BTreeMap::new();
        for task in state.finished_tasks().take(finished_omitted) {
            *finished_omitted_by_framework
                .entry(task.framework_id.clone())
                .or_default() += 1;
        }
        Some(BoundedView {
            finished: state
                .finished_tasks()
                .skip(finished_omitted)
                .cloned()
                .collect(),
            finished_total: finished_total as u64,
            finished_omitted_by_framework,
            view: view.redacted(),
            term: self.node.term(),
            tasks_total: state.tasks().len() as u64,
            tasks_omitted: omitted_by_framework.values().sum(),
            omitted_by_framework,
            cluster: self.cluster_status(),
            weights: state.settings().group_weights.clone(),
            rejected_reservations: state.reservations().rejected_infos(),
            rejected_reservations_total: state.reservations().rejected_total(),
        })
    }

    /// The cluster state as operators see it, with at most `max_tasks` tasks (the first by
    /// key) and the reservations as of `now_ms`; the tasks left out, counted per framework
    /// (only their keys are read).
    fn cluster_view(
        &self,
        max_tasks: usize,
        now_ms: UnixMillis,
    ) -> (ClusterView, BTreeMap<FrameworkId, u64>) {
        let state = self.node.state();
        let mut omitted: BTreeMap<FrameworkId, u64> = BTreeMap::new();
        for key in state.tasks().keys().skip(max_tasks) {
            *omitted.entry(key.framework_id.clone()).or_default() += 1;
        }
        let view = ClusterView {
            leader: MasterId(self.node.id()),
            applied: self.node.applied_index(),
            agents: self.agent_infos(),
            frameworks: state
                .frameworks()
                .keys()
                .filter_map(|framework| state.framework_info(framework))
                .collect(),
            offers: self.open_offers(),
            tasks: state
                .tasks()
                .keys()
                .take(max_tasks)
                .filter_map(|key| state.task_info(key))
                .collect(),
            groups: group_infos(state),
            reservations: state
                .reservations()
                .infos_after(None, now_ms)
                .map(|(_, info)| info)
                .collect(),
        };
        (view, omitted)
    }

    /// Every agent as operators see it, with the leader's session details.
    fn agent_infos(&self) -> Vec<AgentInfo> {
        self.node
            .state()
            .agents()
            .keys()
            .filter_map(|agent| self.agent_info(agent))
            .collect()
    }

    /// An agent as operators see it, with the leader's session details.
    fn agent_info(&self, agent: &AgentId) -> Option<AgentInfo> {
        let mut info = self.node.state().agent_info(agent)?;
        self.agents.decorate(&mut info);
        Some(info)
    }

    /// The leader's view of the group: each member's matched index comes from the leader's
    /// progress tracker; its lag is how far that is behind the leader's last index.
    fn cluster_status(&self) -> ClusterStatus {
        let status = self.node.status();
        let membership = self.node.membership();
        let last_index = self.node.last_index();
        let unknown_addr = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut members = Vec::new();
        let voters = membership.voters.iter().map(|id| (*id, true));
        let learners = membership.learners.iter().map(|id| (*id, false));
        for (id, voter) in voters.chain(learners) {
            let matched = if id == self.node.id() {
                last_index
            } else {
                status
                    .progress
                    .and_then(|progress| progress.get(id))
                    .map_or(0, |progress| progress.matched)
            };
            members.push(MemberStatus {
                id: MasterId(id),
                addr: self.addresses.get(&id).copied().unwrap_or(unknown_addr),
                matched,
                lag: last_index.saturating_sub(matched),
                voter,
            });
        }
        ClusterStatus {
            this: MasterId(self.node.id()),
            leader: self.leader_info(),
            term: self.node.term(),
            commit: self.node.commit_index(),
            applied: self.node.applied_index(),
            members,
        }
    }
}

/// The range of a listing that starts after `after` (from the first key when `None`).
fn after_key<K: Clone>(after: Option<&K>) -> (Bound<K>, Bound<K>) {
    let start = after.map_or(Bound::Unbounded, |key| Bound::Excluded(key.clone()));
    (start, Bound::Unbounded)
}

fn invalid(message: String) -> OperatorResponse {
    OperatorResponse::Error(WireError::new(ErrorCode::InvalidRequest, message))
}

/// What a client is told when its read could not be confirmed.
pub(super) fn read_error_response(error: &ReadError) -> OperatorResponse {
    match error {
        ReadError::NoLeader => OperatorResponse::Redirect(Redirect { leader: None }),
        _ => OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, error.to_string())),
    }
}

/// What an operator is told when the state machine refused its command.
pub(super) fn command_error_response(error: &CommandError) -> OperatorResponse {
    OperatorResponse::Error(error.to_wire())
}

/// Every fairness group with its counters and the principals an operator placed in it, by
/// name (every group that had a weight, a principal or a framework has a deficit counter).
fn group_infos(state: &crate::state::ClusterState) -> Vec<GroupInfo> {
    let mut principals: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (principal, group) in &state.settings().principal_groups {
        principals
            .entry(group.as_str())
            .or_default()
            .push(principal.clone());
    }
    let mut groups: Vec<GroupInfo> = state
        .allocation()
        .deficits()
        .iter()
        .map(|(_, group)| GroupInfo {
            name: group.name.clone(),
            weight: group.weight,
            frameworks: group.frameworks,
            principals: principals.remove(group.name.as_str()).unwrap_or_default(),
            share: group.share,
            held: group.held,
            deficit: group.deficit,
        })
        .collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    groups
}
