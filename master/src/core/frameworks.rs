//! The leader's side of framework sessions: who is connected, what to push to whom, and when a
//! disconnected framework has used up its failover timeout.
//!
//! Subscriptions, kills, acknowledgements and teardowns go through the log; the answers to
//! the calls that made them are sent once they are applied. Status updates recorded in the
//! state are pushed to the task's framework when its session is on this leader. Each stays in
//! the replicated state until the framework acknowledges it, and is sent again when the
//! framework subscribes (a failover, or a new leader) and on a timer while it is connected:
//! updates are at least once, in order per task, whatever queue or session dropped them.
//!
//! What a framework is owed in bulk (its unacknowledged updates after it subscribes and on the
//! resend timer, every task's latest state on an implicit reconciliation) is sent by a
//! [`Sweep`] over its tasks, [`SWEEP_PAGE`] tasks per tick: a framework with a hundred thousand
//! tasks is paced, not handed more at once than its session's queue holds (which would end the
//! session as a stuck reader, and the framework's next subscription would start it all again).
//!
//! A framework whose session closes is marked disconnected (replicated), and torn down when
//! `failover_timeout_ms` passes without it subscribing again. A new leader cannot know when
//! the old one last saw a framework, so it gives every framework without a session here the
//! whole timeout from the moment it took over: a failover delays a teardown, never hastens it.

use std::collections::BTreeMap;
use std::time::Duration;

use fullerene_proto::ids::{AgentId, FrameworkId, TaskId};
use fullerene_proto::limits::take_page;
use fullerene_proto::messages::{
    CallOk, ErrorCode, FrameworkCall, FrameworkRequest, Leftover, MasterToFramework, Offer,
    OperatorResponse, Redirect, StatusAck, StatusReason, StatusUpdate, TaskState, WireError,
    MAX_ACKS_PER_CALL, MAX_RECONCILE_TASK_IDS,
};
use fullerene_proto::time::whole_millis;
use fullerene_proto::Time;
use fullerene_proto::{Now, OfferId, ResourceVec};

use super::reservation_calls::reservation_command;
use super::{
    AllocationJob, AllocationPlanning, FrameworkPending, MasterCore, Outbox, Pending, SessionId,
    Settled, Subscription, PLANNING_TIMEOUT,
};
use crate::raft_node::ProposeError;
use crate::state::{
    Acknowledged, ClusterState, Command, CommandOutcome, Requester, TaskKey, TaskRecord,
    TeardownCause,
};
use crate::storage::RaftStore;
use fullerene_scheduling::allocator::{CycleStats, ShardPlan};

/// A framework's session on this leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrameworkLink {
    /// The session (a reconnect may overlap the old session's end).
    pub session: SessionId,
    /// The principal of the session's certificate.
    pub principal: String,
}

/// How many of a framework's tasks one step of a [`Sweep`] covers. With each task's latest state
/// and its unacknowledged updates, a page stays well inside a session's queue (4,096 frames in
/// the tokio shell); at a 25 ms tick a sweep covers 10,000 tasks a second.
pub(crate) const SWEEP_PAGE: usize = 256;

/// A pass over one framework's tasks in key order, a page per tick.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sweep {
    /// Send each task's latest state (an implicit reconciliation).
    latest: bool,
    /// Send each task's unacknowledged updates.
    unacked: bool,
    /// The last task covered: the next page starts after it.
    after: Option<TaskKey>,
}

/// The leader's framework sessions and failover clocks.
#[derive(Debug)]
pub(crate) struct FrameworkSessions {
    links: BTreeMap<FrameworkId, FrameworkLink>,
    /// Sweeps under way, of connected frameworks only.
    sweeps: BTreeMap<FrameworkId, Sweep>,
    /// Since when each framework without a session on this leader has been without one.
    absent_since: BTreeMap<FrameworkId, Time>,
    /// Teardowns proposed and not yet applied.
    teardowns_in_flight: std::collections::BTreeSet<FrameworkId>,
    /// How often unacknowledged status updates are sent again.
    resend_interval: Duration,
    /// When they are next sent again.
    next_resend: Time,
}

impl FrameworkSessions {
    pub(crate) fn new(resend_interval: Duration) -> FrameworkSessions {
        FrameworkSessions {
            links: BTreeMap::new(),
            sweeps: BTreeMap::new(),
            absent_since: BTreeMap::new(),
            teardowns_in_flight: std::collections::BTreeSet::new(),
            resend_interval,
            next_resend: Time::ZERO,
        }
    }

    /// Starts a sweep of a connected framework's tasks, sending each one's latest state
    /// (`latest`) and its unacknowledged updates (`unacked`), and sends its first page. A sweep
    /// under way that already sends what is asked goes on; one that does not starts over with
    /// both.
    pub(crate) fn sweep(
        &mut self,
        state: &ClusterState,
        framework_id: &FrameworkId,
        latest: bool,
        unacked: bool,
        out: &mut Outbox,
    ) {
        if !self.links.contains_key(framework_id) {
            return;
        }
        match self.sweeps.get_mut(framework_id) {
            Some(sweep) if (sweep.latest || !latest) && (sweep.unacked || !unacked) => return,
            Some(sweep) => {
                sweep.latest |= latest;
                sweep.unacked |= unacked;
                sweep.after = None;
            }
            None => {
                self.sweeps.insert(
                    framework_id.clone(),
                    Sweep {
                        latest,
                        unacked,
                        after: None,
                    },
                );
            }
        }
        self.sweep_page(state, framework_id, out);
    }

    /// Sends the next page of every sweep under way (on each tick).
    pub(crate) fn advance_sweeps(&mut self, state: &ClusterState, out: &mut Outbox) {
        let sweeping: Vec<FrameworkId> = self.sweeps.keys().cloned().collect();
        for framework_id in sweeping {
            self.sweep_page(state, &framework_id, out);
        }
    }

    /// Sends one page of `framework_id`'s sweep; a sweep that reached the framework's last task
    /// (or whose framework is no longer connected here) ends.
    fn sweep_page(&mut self, state: &ClusterState, framework_id: &FrameworkId, out: &mut Outbox) {
        let (Some(link), Some(sweep)) = (
            self.links.get(framework_id),
            self.sweeps.get_mut(framework_id),
        ) else {
            self.sweeps.remove(framework_id);
            return;
        };
        let page: Vec<(&TaskKey, &TaskRecord)> = state
            .tasks_of_after(framework_id, sweep.after.as_ref())
            .take(SWEEP_PAGE)
            .collect();
        for (key, record) in &page {
            let mut sent_seq = None;
            if sweep.unacked {
                for update in &record.unacked {
                    out.send_framework(link.session, MasterToFramework::Update(update.clone()));
                    sent_seq = Some(update.seq);
                }
            }
            if sweep.latest && sent_seq != Some(record.seq) {
                let update = latest_update(key, record, "reconciliation");
                out.send_framework(link.session, MasterToFramework::Update(update));
            }
        }
        match page.last() {
            Some((last, _)) if page.len() == SWEEP_PAGE => sweep.after = Some((*last).clone()),
            _ => {
                self.sweeps.remove(framework_id);
            }
        }
    }

    /// Whether the resend timer fired at `now` (it is then set again).
    fn resend_due(&mut self, now: Time) -> bool {
        if now < self.next_resend {
            return false;
        }
        self.next_resend = now + self.resend_interval;
        true
    }

    /// This master became leader: every framework's failover clock starts now, and so does
    /// the resend timer (frameworks get their unacknowledged updates when they subscribe).
    pub(crate) fn on_leadership(&mut self, state: &ClusterState, now: Time) {
        self.absent_since = state
            .frameworks()
            .values()
            .filter(|f| f.torn_down_at_ms.is_none())
            .map(|f| (f.id.clone(), now))
            .collect();
        self.teardowns_in_flight.clear();
        self.next_resend = now + self.resend_interval;
    }

    /// This master stopped leading: frameworks are sent to the new leader, their sessions
    /// closed, and forgotten.
    pub(crate) fn on_lost_leadership(&mut self, redirect: &Redirect, out: &mut Outbox) {
        for (_, link) in std::mem::take(&mut self.links) {
            out.send_framework(link.session, MasterToFramework::Redirect(redirect.clone()));
            out.close(link.session);
        }
        self.sweeps.clear();
        self.absent_since.clear();
        self.teardowns_in_flight.clear();
    }

    /// The framework's subscription committed: its session becomes the one to push to.
    pub(crate) fn attach(
        &mut self,
        framework_id: FrameworkId,
        link: FrameworkLink,
        out: &mut Outbox,
    ) {
        self.absent_since.remove(&framework_id);
        // What the old session was owed, the new one is sent from the start.
        self.sweeps.remove(&framework_id);
        let session = link.session;
        if let Some(old) = self.links.insert(framework_id, link) {
            // A session replaced by a newer one of the same framework is closed.
            if old.session != session {
                out.close(old.session);
            }
        }
    }

    /// A session ended. Returns true when it was the framework's current one (the leader then
    /// marks the framework disconnected).
    pub(crate) fn detach(
        &mut self,
        framework_id: &FrameworkId,
        session: SessionId,
        now: Time,
    ) -> bool {
        let current = self
            .links
            .get(framework_id)
            .is_some_and(|link| link.session == session);
        if current {
            self.links.remove(framework_id);
            self.sweeps.remove(framework_id);
            self.absent_since.insert(framework_id.clone(), now);
        }
        current
    }

    /// The framework's current session, when it has one on this leader.
    pub(crate) fn link(&self, framework_id: &FrameworkId) -> Option<&FrameworkLink> {
        self.links.get(framework_id)
    }

    /// Teardowns due at `now`: frameworks absent for longer than their failover timeout.
    /// Each is returned once until it is applied.
    pub(crate) fn due_teardowns(
        &mut self,
        state: &ClusterState,
        now: Time,
        at_ms: u64,
    ) -> Vec<Command> {
        let mut due = Vec::new();
        for (framework_id, since) in &self.absent_since {
            let Some(entry) = state.frameworks().get(framework_id) else {
                continue;
            };
            if entry.torn_down_at_ms.is_some() {
                continue;
            }
            let timeout = Duration::from_millis(entry.failover_timeout_ms);
            if now.saturating_duration_since(*since) >= timeout
                && self.teardowns_in_flight.insert(framework_id.clone())
            {
                due.push(Command::TeardownFramework {
                    framework_id: framework_id.clone(),
                    principal: None,
                    cause: TeardownCause::FailoverTimeout,
                    at_ms,
                });
            }
        }
        due
    }

    /// A teardown was applied or refused. An applied teardown closes the framework's
    /// session, after whatever was already sent on it.
    /// A teardown settled: if it applied, the framework's session (if one is open) is told
    /// `notice` (why the masters tore it down, when it did not ask) and closed.
    pub(crate) fn teardown_settled(
        &mut self,
        framework_id: &FrameworkId,
        applied: bool,
        notice: Option<String>,
        out: &mut Outbox,
    ) {
        self.teardowns_in_flight.remove(framework_id);
        if applied {
            self.absent_since.remove(framework_id);
            self.sweeps.remove(framework_id);
            if let Some(link) = self.links.remove(framework_id) {
                if let Some(reason) = notice {
                    out.send_framework(link.session, MasterToFramework::TornDown { reason });
                }
                out.close(link.session);
            }
        }
    }

    /// Sends `message` to every framework of `principal` connected here.
    pub(crate) fn tell_principal(
        &self,
        state: &ClusterState,
        principal: &str,
        message: &MasterToFramework,
        out: &mut Outbox,
    ) {
        for (framework_id, link) in &self.links {
            let owned = state
                .frameworks()
                .get(framework_id)
                .is_some_and(|entry| entry.principal == principal);
            if owned {
                out.send_framework(link.session, message.clone());
            }
        }
    }

    /// Pushes the status updates an applied command's outcome carries to their frameworks.
    pub(crate) fn push_outcome(&self, outcome: &CommandOutcome, out: &mut Outbox) {
        match outcome {
            CommandOutcome::StatusRecorded(update) => self.push_update(update, out),
            CommandOutcome::AgentRegistered { updates, .. }
            | CommandOutcome::TasksEnded { updates, .. } => {
                for update in updates {
                    self.push_update(update, out);
                }
            }
            _ => {}
        }
    }

    /// Sends `update` to its framework, if connected here.
    pub(crate) fn push_update(&self, update: &StatusUpdate, out: &mut Outbox) {
        if let Some(link) = self.links.get(&update.framework_id) {
            out.send_framework(link.session, MasterToFramework::Update(update.clone()));
        }
    }
}

impl<S: RaftStore> MasterCore<S> {
    /// On the resend timer, starts sending each connected framework the updates it has not
    /// acknowledged (the leader's half of at-least-once: a framework may have missed a push
    /// that was under way when its acknowledgement, or its session, was lost); on the other
    /// ticks, sends the next page of every sweep under way.
    pub(super) fn resend_status_updates(&mut self, now: Now) {
        if !self.node.is_leader() {
            return;
        }
        if self.frameworks.resend_due(now.monotonic) {
            let connected: Vec<FrameworkId> = self.frameworks.links.keys().cloned().collect();
            for framework_id in &connected {
                self.frameworks
                    .sweep(self.node.state(), framework_id, false, true, &mut self.out);
            }
        } else {
            self.frameworks
                .advance_sweeps(self.node.state(), &mut self.out);
        }
    }

    pub(super) fn handle_subscribe(
        &mut self,
        session: SessionId,
        subscription: Subscription,
        now: Now,
    ) {
        if !self.node.is_leader() {
            self.out
                .send_framework(session, MasterToFramework::Redirect(self.redirect()));
            self.out.close(session);
            return;
        }
        let at_ms = now.wall_ms();
        let Subscription {
            call_id,
            framework_id,
            name,
            group,
            failover_timeout_ms,
            principal,
        } = subscription;
        let link = FrameworkLink {
            session,
            principal: principal.clone(),
        };
        let (id, command) = match framework_id {
            Some(id) => (
                id.clone(),
                Command::FailoverFramework {
                    framework_id: id,
                    principal,
                    name,
                    failover_timeout_ms,
                    at_ms,
                },
            ),
            None => {
                // Unique across leaders: a term has one leader, and it counts.
                let id =
                    FrameworkId::from(format!("fw-{}-{}", self.node.term(), self.next_framework));
                self.next_framework += 1;
                (
                    id.clone(),
                    Command::SubscribeFramework {
                        framework_id: id,
                        principal,
                        name,
                        group,
                        failover_timeout_ms,
                        at_ms,
                    },
                )
            }
        };
        self.propose_for_framework(command, call_id, link, FrameworkPending::Subscribe(id));
    }

    pub(super) fn handle_framework_call(
        &mut self,
        framework_id: FrameworkId,
        session: SessionId,
        call: FrameworkCall,
        now: Now,
    ) {
        let Some(link) = self
            .frameworks
            .link(&framework_id)
            .filter(|link| link.session == session)
            .cloned()
        else {
            // A stale session (replaced, or from before a leader change): it is being closed.
            return;
        };
        let call_id = call.call_id;
        let principal = link.principal.clone();
        let at_ms = now.wall_ms();
        let result = match call.call {
            FrameworkRequest::Subscribe { .. } => Err(WireError::new(
                ErrorCode::InvalidRequest,
                "already subscribed on this session",
            )),
            FrameworkRequest::DescribeJob(description) => {
                let command = Command::DescribeJob {
                    framework_id,
                    principal,
                    description,
                    at_ms,
                };
                self.propose_for_framework(command, call_id, link, FrameworkPending::Answer);
                return;
            }
            FrameworkRequest::EndJob { job, end } => {
                let command = Command::EndJob {
                    framework_id,
                    principal,
                    job,
                    end,
                    at_ms,
                };
                self.propose_for_framework(command, call_id, link, FrameworkPending::Answer);
                return;
            }
            FrameworkRequest::Reservation(call) => {
                let by = Requester::Principal(principal);
                let limits = &self.node.state().reservations().plan().config().limits;
                match reservation_command(call, by, limits, at_ms) {
                    Ok(command) => {
                        self.propose_for_framework(
                            command,
                            call_id,
                            link,
                            FrameworkPending::Answer,
                        );
                        return;
                    }
                    Err(error) => Err(error),
                }
            }
            FrameworkRequest::ListReservations { after } => {
                // The leader's applied state, not a ReadIndex read: what this framework's own
                // committed calls did is in it, which is what a framework reads for.
                let reservations = self.node.state().reservations();
                let (reservations, next) = take_page(reservations.owned_infos_after(
                    Some(&principal),
                    after.as_deref(),
                    at_ms,
                ));
                Ok(CallOk::Reservations { reservations, next })
            }
            FrameworkRequest::Kill { task_id } => {
                let command = Command::KillTask {
                    framework_id,
                    principal,
                    task_id,
                    at_ms,
                };
                self.propose_for_framework(command, call_id, link, FrameworkPending::Answer);
                return;
            }
            FrameworkRequest::Acknowledge(acks) => match acknowledged(&framework_id, acks) {
                Ok(acks) => {
                    let command = Command::AcknowledgeStatus {
                        framework_id,
                        principal,
                        acks,
                    };
                    self.propose_for_framework(command, call_id, link, FrameworkPending::Answer);
                    return;
                }
                Err(error) => Err(error),
            },
            FrameworkRequest::Teardown => {
                let command = Command::TeardownFramework {
                    framework_id: framework_id.clone(),
                    principal: Some(principal),
                    cause: TeardownCause::OwnRequest,
                    at_ms,
                };
                self.propose_for_framework(
                    command,
                    call_id,
                    link,
                    FrameworkPending::Teardown(framework_id),
                );
                return;
            }
            FrameworkRequest::Reconcile { task_ids } if task_ids.is_empty() => {
                self.frameworks
                    .sweep(self.node.state(), &framework_id, true, false, &mut self.out);
                Ok(CallOk::Done)
            }
            FrameworkRequest::Reconcile { task_ids } if task_ids.len() > MAX_RECONCILE_TASK_IDS => {
                Err(WireError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "a reconciliation names at most {MAX_RECONCILE_TASK_IDS} tasks, this one \
                         {}: split it, or send an empty list for all of them",
                        task_ids.len()
                    ),
                ))
            }
            FrameworkRequest::Reconcile { task_ids } => {
                for update in self.reconcile(&framework_id, &task_ids, now) {
                    self.out
                        .send_framework(link.session, MasterToFramework::Update(update));
                }
                Ok(CallOk::Done)
            }
            FrameworkRequest::UpdateDemand(summary) => match self.offers.as_mut() {
                Some(offers) => {
                    let result = offers
                        .update_demand(self.node.state(), &framework_id, &summary)
                        .map(|()| CallOk::Done);
                    if result.is_ok() {
                        self.allocation_wanted();
                    }
                    result
                }
                None => Err(no_offers()),
            },
            FrameworkRequest::Revive | FrameworkRequest::Suppress => {
                let suppress = matches!(call.call, FrameworkRequest::Suppress);
                match self.offers.as_mut() {
                    Some(offers) => offers
                        .set_suppressed(self.node.state(), &framework_id, suppress)
                        .map(|()| CallOk::Done),
                    None => Err(no_offers()),
                }
            }
            FrameworkRequest::Decline {
                offer_ids,
                refuse_ms,
            } => self
                .give_back(
                    &framework_id,
                    &offer_ids,
                    Leftover::Decline { refuse_ms },
                    now,
                )
                .map(|()| {
                    self.offer_tally.declined += offer_ids.len() as u64;
                    CallOk::Done
                }),
            FrameworkRequest::Yield { offer_ids } => self
                .give_back(&framework_id, &offer_ids, Leftover::Yield, now)
                .map(|()| CallOk::Done),
            FrameworkRequest::Accept {
                offer_ids,
                tasks,
                leftover,
            } => {
                let backlog = self.node.pending_proposals();
                if backlog >= self.config.accept_backlog_limit {
                    let declined = Leftover::Decline { refuse_ms: 0 };
                    // An offer that is not this framework's to give back is refused as such.
                    let result = self
                        .give_back(&framework_id, &offer_ids, declined, now)
                        .and_then(|()| Err(busy(backlog, self.config.accept_backlog_limit)));
                    if result
                        .as_ref()
                        .is_err_and(|e| e.code == ErrorCode::Unavailable)
                    {
                        self.offer_tally.refused_busy += 1;
                    }
                    self.answer_call(&link, call_id, result);
                    return;
                }
                let Some(offers) = self.offers.as_mut() else {
                    self.answer_call(&link, call_id, Err(no_offers()));
                    return;
                };
                let accepted = match offers.accept(
                    self.node.state(),
                    &framework_id,
                    &offer_ids,
                    &tasks,
                    leftover,
                    at_ms,
                ) {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        self.answer_call(&link, call_id, Err(error));
                        return;
                    }
                };
                self.offer_tally.accepted += offer_ids.len() as u64;
                if !accepted.reoffers.is_empty() {
                    self.push_offers(accepted.reoffers);
                }
                let command = Command::LaunchTasks {
                    framework_id,
                    principal,
                    agent_id: accepted.agent.clone(),
                    tasks,
                    at_ms,
                };
                let kind = FrameworkPending::Launch {
                    agent: accepted.agent,
                    launching: accepted.launching,
                };
                self.propose_for_framework(command, call_id, link, kind);
                return;
            }
        };
        self.answer_call(&link, call_id, result);
    }

    pub(super) fn answer_call(
        &mut self,
        link: &FrameworkLink,
        call_id: u64,
        result: Result<CallOk, WireError>,
    ) {
        self.out.send_framework(
            link.session,
            MasterToFramework::CallResult { call_id, result },
        );
    }

    /// The latest state of each of `task_ids` (explicit reconciliation; at most
    /// [`MAX_RECONCILE_TASK_IDS`]): LOST with `UnknownTask` for a task the master does not know.
    pub(super) fn reconcile(
        &self,
        framework_id: &FrameworkId,
        task_ids: &[TaskId],
        now: Now,
    ) -> Vec<StatusUpdate> {
        let state = self.node.state();
        task_ids
            .iter()
            .map(|task_id| {
                let key = TaskKey::new(framework_id.clone(), task_id.clone());
                match state.tasks().get(&key) {
                    Some(record) => latest_update(&key, record, "reconciliation"),
                    None => StatusUpdate {
                        task_id: task_id.clone(),
                        framework_id: framework_id.clone(),
                        agent_id: AgentId::from(String::new()),
                        state: TaskState::Lost,
                        seq: 0,
                        reason: Some(StatusReason::UnknownTask),
                        message: "the master does not know this task".to_string(),
                        timestamp_ms: now.wall_ms(),
                    },
                }
            })
            .collect()
    }

    pub(super) fn propose_for_framework(
        &mut self,
        command: Command,
        call_id: u64,
        link: FrameworkLink,
        kind: FrameworkPending,
    ) {
        let token = self.token();
        match self.node.propose(&command, token) {
            Ok(()) => {
                self.pending.insert(
                    token,
                    Pending::Framework {
                        call_id,
                        link,
                        kind,
                    },
                );
            }
            Err(error) => {
                if let FrameworkPending::Launch { agent, launching } = &kind {
                    if let Some(offers) = self.offers.as_mut() {
                        offers.launch_settled(self.node.state(), agent, *launching);
                    }
                }
                let message = match self.propose_error_response(&error) {
                    OperatorResponse::Redirect(redirect) => MasterToFramework::Redirect(redirect),
                    _ => MasterToFramework::CallResult {
                        call_id,
                        result: Err(WireError::new(ErrorCode::Unavailable, error.to_string())),
                    },
                };
                self.out.send_framework(link.session, message);
                if matches!(kind, FrameworkPending::Subscribe(_)) {
                    // The session never became the framework's: nothing else will use it.
                    self.out.close(link.session);
                }
            }
        }
    }

    pub(super) fn settle_framework(
        &mut self,
        call_id: u64,
        link: FrameworkLink,
        kind: FrameworkPending,
        settled: Settled,
    ) {
        if let FrameworkPending::Launch { agent, launching } = &kind {
            // Charged (applied) or not (refused, dropped): either way no longer held back.
            if let Some(offers) = self.offers.as_mut() {
                offers.launch_settled(self.node.state(), agent, *launching);
            }
        }
        // A subscription that did not commit leaves its session to no framework: it is closed
        // once answered (an attached session is closed where it is detached or replaced).
        let subscribing = matches!(kind, FrameworkPending::Subscribe(_));
        let result = match settled {
            Settled::Applied(_) => match kind {
                FrameworkPending::Subscribe(framework_id) if !self.node.is_leader() => {
                    // Proposed as leader, committed under the next one: this master's
                    // sessions were redirected when it stepped down, and this one must be
                    // too, or the framework would stay on a follower that makes no offers.
                    tracing::info!(framework = %framework_id, "subscription committed after this master stopped leading; redirecting");
                    self.out
                        .send_framework(link.session, MasterToFramework::Redirect(self.redirect()));
                    self.out.close(link.session);
                    return;
                }
                FrameworkPending::Subscribe(framework_id) => {
                    tracing::info!(framework = %framework_id, principal = link.principal, "framework subscribed");
                    self.frameworks
                        .attach(framework_id.clone(), link.clone(), &mut self.out);
                    let interval = self.agents.timeouts().heartbeat_interval;
                    let group = self
                        .node
                        .state()
                        .frameworks()
                        .get(&framework_id)
                        .map(|entry| entry.group.clone())
                        .unwrap_or_default();
                    // The answer first: the framework knows its id before its updates arrive.
                    self.answer_call(
                        &link,
                        call_id,
                        Ok(CallOk::Subscribed {
                            framework_id: framework_id.clone(),
                            group,
                            heartbeat_interval_ms: whole_millis(interval),
                        }),
                    );
                    // What a framework failing over missed, or what its old session dropped,
                    // with every task's latest state: the implicit reconciliation a driver asks
                    // for next is then already under way, not started over.
                    self.frameworks.sweep(
                        self.node.state(),
                        &framework_id,
                        true,
                        true,
                        &mut self.out,
                    );
                    return;
                }
                FrameworkPending::Teardown(framework_id) => {
                    // The answer goes out before the session closes.
                    self.answer_call(&link, call_id, Ok(CallOk::Done));
                    self.frameworks
                        .teardown_settled(&framework_id, true, None, &mut self.out);
                    return;
                }
                FrameworkPending::Answer | FrameworkPending::Launch { .. } => Ok(CallOk::Done),
            },
            Settled::Refused(error) => Err(error.to_wire()),
            Settled::Dropped(error) => {
                if !self.node.is_leader() {
                    // Leadership moved: the framework follows the redirect it gets.
                    if subscribing {
                        self.out.close(link.session);
                    }
                    return;
                }
                let code = match error {
                    ProposeError::OutcomeUnknown => ErrorCode::OutcomeUnknown,
                    _ => ErrorCode::Unavailable,
                };
                Err(WireError::new(code, error.to_string()))
            }
        };
        let failed = result.is_err();
        self.answer_call(&link, call_id, result);
        if subscribing && failed {
            self.out.close(link.session);
        }
    }

    /// Declines or yields offers; yielded resources are re-offered at once.
    pub(super) fn give_back(
        &mut self,
        framework_id: &FrameworkId,
        offer_ids: &[OfferId],
        leftover: Leftover,
        now: Now,
    ) -> Result<(), WireError> {
        let Some(offers) = self.offers.as_mut() else {
            return Err(no_offers());
        };
        let reoffers = offers.give_back(
            self.node.state(),
            framework_id,
            offer_ids,
            leftover,
            now.wall_ms(),
        )?;
        self.push_offers(reoffers);
        Ok(())
    }

    /// Sends offers to their frameworks, in frames of at most
    /// [`MAX_OFFERS_PER_FRAME`](fullerene_proto::limits::MAX_OFFERS_PER_FRAME) offers (so a
    /// cycle over many agents never makes a frame too large to send).
    pub(super) fn push_offers(&mut self, offers: Vec<Offer>) {
        let mut by_framework: BTreeMap<FrameworkId, Vec<Offer>> = BTreeMap::new();
        for offer in offers {
            by_framework
                .entry(offer.framework_id.clone())
                .or_default()
                .push(offer);
        }
        for (framework_id, offers) in by_framework {
            if let Some(link) = self.frameworks.link(&framework_id) {
                for frame in offers.chunks(fullerene_proto::limits::MAX_OFFERS_PER_FRAME) {
                    self.out
                        .send_framework(link.session, MasterToFramework::Offers(frame.to_vec()));
                }
            }
        }
    }

    /// On the leader, every allocation interval (sooner after events, see
    /// `allocation_wanted`): rescinds what is stale and makes new offers, at once
    /// ([`AllocationPlanning::Inline`]) or by marking a cycle due for the shell to plan
    /// ([`AllocationPlanning::Offloaded`]). No cycle starts while another's plans are awaited.
    pub(super) fn allocate(&mut self, now: Now) {
        if let Some((id, since)) = self.planning {
            if now.monotonic.saturating_duration_since(since) < PLANNING_TIMEOUT {
                return;
            }
            tracing::warn!(
                master = self.node.id(),
                cycle = id,
                "an allocation cycle's plans did not come back in time; the next cycle starts"
            );
            self.planning = None;
        }
        if now.monotonic < self.next_allocation || self.offers.is_none() {
            return;
        }
        self.next_allocation = now.monotonic + self.config.allocation_interval;
        self.last_allocation = now.monotonic;
        match self.config.allocation_planning {
            AllocationPlanning::Offloaded => self.allocation_due = true,
            AllocationPlanning::Inline => {
                if let Some(job) = self.begin_allocation(now) {
                    let plans = job.snapshot.plan_all();
                    self.allocation_planned(job.id, plans, now);
                }
            }
        }
    }

    /// Starts the allocation cycle that is due, if one is ([`AllocationPlanning::Offloaded`];
    /// the shell asks after every step): rescinds what is stale and returns the snapshot for
    /// the shell to plan, off the node loop.
    pub fn begin_allocation(&mut self, now: Now) -> Option<AllocationJob> {
        let due = std::mem::take(&mut self.allocation_due)
            || self.config.allocation_planning == AllocationPlanning::Inline;
        if !due || self.planning.is_some() {
            return None;
        }
        self.follow_plan(now);
        let offers = self.offers.as_mut()?;
        let frameworks = &self.frameworks;
        let (rescinded, snapshot) = offers.begin_cycle(
            self.node.state(),
            |framework| frameworks.link(framework).is_some(),
            now.wall_ms(),
        );
        self.send_rescinds(rescinded);
        self.allocation_jobs += 1;
        let id = self.allocation_jobs;
        self.planning = Some((id, now.monotonic));
        Some(AllocationJob { id, snapshot })
    }

    /// The shards of allocation cycle `id` were planned: the plans are committed against the
    /// state as it is now (what no longer holds is dropped) and the offers sent. Plans of a
    /// cycle given up, or of a term this master no longer leads, are ignored.
    pub fn allocation_planned(&mut self, id: u64, plans: Vec<ShardPlan>, now: Now) {
        if self.planning.map(|(awaited, _)| awaited) != Some(id) {
            return;
        }
        self.planning = None;
        let Some(offers) = self.offers.as_mut() else {
            return;
        };
        let frameworks = &self.frameworks;
        let (made, stats) = offers.finish_cycle(
            self.node.state(),
            |framework| frameworks.link(framework).is_some(),
            plans,
            now.wall_ms(),
        );
        self.allocation_stats.add(&stats);
        self.push_offers(made);
    }

    /// What the commits of this master's allocation cycles did so far: picks planned,
    /// committed and dropped by reason (the shards' conflict rate).
    pub fn allocation_stats(&self) -> CycleStats {
        self.allocation_stats
    }

    /// What frameworks did with this master's offers so far (while it led).
    pub fn offer_tally(&self) -> super::OfferTally {
        self.offer_tally
    }

    /// How many reservation requests this master proposed were refused by the plan (no room,
    /// invalid for the plan, past the user's caps), since it started.
    pub fn reservations_refused(&self) -> u64 {
        self.reservations_refused
    }

    /// The resources of the offers open now, summed (zero unless leading).
    pub fn offered_resources(&self) -> ResourceVec {
        let mut offered = ResourceVec::ZERO;
        for offer in self
            .offers
            .iter()
            .flat_map(crate::offers::OfferManager::offers)
        {
            // The master makes its offers from valid amounts; none fails to convert.
            if let Ok(resources) = offer.resources.to_vec() {
                offered += resources;
            }
        }
        offered
    }

    /// When each of this master's proposals applied since the last call was flushed (see
    /// [`RaftNode::take_applied_flush_times`](crate::raft_node::RaftNode::take_applied_flush_times)).
    pub fn take_applied_flush_times(&mut self) -> Vec<Time> {
        self.node.take_applied_flush_times()
    }

    /// The accept-to-RUNNING times of the tasks that started since the last call: from the
    /// leader's time of the accept, recorded with the task, to the leader's time of the
    /// agent's RUNNING update (wall clocks, so across a leader change two machines' clocks).
    pub fn take_launch_latencies(&mut self) -> Vec<Duration> {
        std::mem::take(&mut self.launch_latencies)
    }

    /// Sends each framework the rescinds of its offers, in frames.
    pub(super) fn send_rescinds(&mut self, rescinded: Vec<Offer>) {
        let mut rescinds: BTreeMap<FrameworkId, Vec<OfferId>> = BTreeMap::new();
        for offer in rescinded {
            rescinds
                .entry(offer.framework_id)
                .or_default()
                .push(offer.id);
        }
        for (framework_id, offer_ids) in rescinds {
            if let Some(link) = self.frameworks.link(&framework_id) {
                for frame in offer_ids.chunks(fullerene_proto::limits::MAX_OFFERS_PER_FRAME) {
                    let offer_ids = frame.to_vec();
                    self.out
                        .send_framework(link.session, MasterToFramework::Rescind { offer_ids });
                }
            }
        }
    }

    /// On the leader: tears down the frameworks absent past their failover timeout.
    pub(super) fn propose_framework_teardowns(&mut self, now: Now) {
        if !self.node.is_leader() {
            return;
        }
        let due = self
            .frameworks
            .due_teardowns(self.node.state(), now.monotonic, now.wall_ms());
        for command in due {
            self.propose_internal(command);
        }
    }
}

/// The answer to offer calls on a master that makes none (not leading, or its allocator could
/// not start).
fn no_offers() -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        "this master makes no offers now (it is not leading); retry",
    )
}

/// A task's latest state as a status update (its latest sequence number, reason and time).
fn latest_update(key: &TaskKey, record: &TaskRecord, message: &str) -> StatusUpdate {
    StatusUpdate {
        task_id: key.task_id.clone(),
        framework_id: key.framework_id.clone(),
        agent_id: record.agent_id.clone(),
        state: record.state,
        seq: record.seq,
        reason: record.reason.clone(),
        message: message.to_string(),
        timestamp_ms: record.updated_at_ms,
    }
}

/// An accept refused by admission control ([`super::CoreConfig::accept_backlog_limit`]).
fn busy(backlog: usize, limit: usize) -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        format!(
            "the masters are busy: {backlog} writes wait to commit (the limit for accepts is \
             {limit}); the offers were taken back and come again in a later cycle"
        ),
    )
}

/// A framework's acknowledgements as the replicated command takes them, once each is known to
/// name the framework of the session (task ids are unique within a framework only) and the
/// batch is within [`MAX_ACKS_PER_CALL`].
fn acknowledged(
    framework_id: &FrameworkId,
    acks: Vec<StatusAck>,
) -> Result<Vec<Acknowledged>, WireError> {
    let invalid = |message: String| WireError::new(ErrorCode::InvalidRequest, message);
    if acks.is_empty() {
        return Err(invalid(
            "an acknowledgement names at least one status update".to_string(),
        ));
    }
    if acks.len() > MAX_ACKS_PER_CALL {
        return Err(invalid(format!(
            "one call acknowledges at most {MAX_ACKS_PER_CALL} status updates, this one {}: \
             split it",
            acks.len()
        )));
    }
    if let Some(other) = acks.iter().find(|ack| ack.framework_id != *framework_id) {
        return Err(invalid(format!(
            "acknowledgement of task {} names framework {}, but this session is framework \
             {framework_id}",
            other.task_id, other.framework_id
        )));
    }
    Ok(acks
        .into_iter()
        .map(|ack| Acknowledged {
            task_id: ack.task_id,
            seq: ack.seq,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscribe(state: &mut ClusterState, id: &str, failover_timeout_ms: u64) {
        state
            .apply(&crate::testkit::subscribe_framework(
                id,
                "framework-1",
                "job",
                "default",
                failover_timeout_ms,
                0,
            ))
            .expect("subscribed");
    }

    fn link(session: u64) -> FrameworkLink {
        FrameworkLink {
            session: SessionId(session),
            principal: "framework-1".to_string(),
        }
    }

    #[test]
    fn an_absent_framework_is_torn_down_after_its_failover_timeout_once() {
        let mut state = ClusterState::default();
        subscribe(&mut state, "fw-1", 1_000);
        let id = FrameworkId::from("fw-1");
        let mut links = FrameworkSessions::new(crate::core::DEFAULT_STATUS_RESEND_INTERVAL);
        let start = Time::from_millis(1_000);
        links.on_leadership(&state, start);
        let mut out = Outbox::default();
        links.attach(id.clone(), link(7), &mut out);
        // Connected: never due.
        assert!(links
            .due_teardowns(&state, start + Duration::from_secs(60), 0)
            .is_empty());
        // A stale session's end changes nothing; the current one's starts the clock.
        assert!(!links.detach(&id, SessionId(6), start));
        assert!(links.detach(&id, SessionId(7), start));
        assert!(links
            .due_teardowns(&state, start + Duration::from_millis(900), 0)
            .is_empty());
        let due = links.due_teardowns(&state, start + Duration::from_millis(1_100), 0);
        assert!(matches!(
            due.as_slice(),
            [Command::TeardownFramework {
                principal: None,
                ..
            }]
        ));
        assert!(links
            .due_teardowns(&state, start + Duration::from_millis(1_200), 0)
            .is_empty());
        // Subscribing again in time stops the clock.
        links.teardown_settled(&id, false, None, &mut out);
        links.attach(id, link(8), &mut out);
        assert!(links
            .due_teardowns(&state, start + Duration::from_secs(60), 0)
            .is_empty());
    }

    #[test]
    fn a_new_leader_gives_every_framework_its_whole_timeout() {
        let mut state = ClusterState::default();
        subscribe(&mut state, "fw-1", 1_000);
        let mut links = FrameworkSessions::new(crate::core::DEFAULT_STATUS_RESEND_INTERVAL);
        let later = Time::from_millis(1_000) + Duration::from_secs(100);
        links.on_leadership(&state, later);
        assert!(links
            .due_teardowns(&state, later + Duration::from_millis(500), 0)
            .is_empty());
        assert_eq!(
            links
                .due_teardowns(&state, later + Duration::from_millis(1_500), 0)
                .len(),
            1
        );
    }

    #[test]
    fn updates_go_to_the_connected_framework_only() {
        let mut links = FrameworkSessions::new(crate::core::DEFAULT_STATUS_RESEND_INTERVAL);
        let mut out = Outbox::default();
        links.attach(FrameworkId::from("fw-1"), link(1), &mut out);
        let update = |framework: &str| StatusUpdate {
            task_id: fullerene_proto::ids::TaskId::from("t"),
            framework_id: FrameworkId::from(framework.to_string()),
            agent_id: fullerene_proto::ids::AgentId::from("agent-1"),
            state: fullerene_proto::messages::TaskState::Running,
            seq: 1,
            reason: None,
            message: String::new(),
            timestamp_ms: 0,
        };
        links.push_update(&update("fw-2"), &mut out);
        links.push_update(&update("fw-1"), &mut out);
        let mut sent = out.drain();
        assert!(
            matches!(sent.next(), Some(super::super::Output::ToFramework { session: SessionId(1), message: MasterToFramework::Update(u) }) if u.framework_id.as_str() == "fw-1")
        );
        assert!(sent.next().is_none());
    }
}
