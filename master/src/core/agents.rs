//! The leader's side of agent sessions: which session speaks for each agent, liveness, and what
//! must be pushed to agents when commands commit.
//!
//! Registration, status updates and liveness marks go through the log like every other change
//! (DESIGN.md, "a task's life"): an agent is answered `Registered` and a status update
//! `StatusAck`ed only once the command is applied, so an acknowledged update survives any
//! failover. Heartbeats themselves are not replicated; the leader keeps the time it last heard
//! from each agent and proposes `MarkAgentUnreachable` after one timeout and `MarkAgentLost`
//! after the second. A new leader starts every agent's clock afresh (it cannot know when the old
//! leader last heard from it), so a failover delays the detection of a dead agent by at most one
//! timeout, and never declares a live one lost.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fullerene_proto::ids::AgentId;
use fullerene_proto::messages::{
    AgentState, MasterToAgent, Redirect, StatusAck, StatusUpdate, TaskIsolation, TaskState,
};
use fullerene_proto::time::whole_millis;
use fullerene_proto::Time;

use fullerene_proto::messages::{ErrorCode, OperatorResponse, WireError};
use fullerene_proto::Now;

use super::{AgentRegistration, MasterCore, Outbox, Pending, SessionId, Settled};
use crate::state::{ClusterState, Command, CommandError, CommandOutcome, TaskKey, TaskKill};
use crate::storage::RaftStore;

/// When agents are declared unreachable and lost, and how often they must heartbeat.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgentTimeouts {
    /// How often agents heartbeat (sent to them at registration).
    pub heartbeat_interval: Duration,
    /// Silence after which an agent is marked unreachable (no new launches on it).
    pub unreachable_after: Duration,
    /// Silence after which an agent is marked lost (its tasks LOST, its resources gone).
    pub lost_after: Duration,
}

impl Default for AgentTimeouts {
    /// Heartbeats every second; unreachable after 5 s of silence, lost after 30 s: long
    /// enough to ride out a master failover (well under a second) and a short network blip,
    /// short enough that a dead machine's tasks are re-planned within half a minute.
    fn default() -> AgentTimeouts {
        AgentTimeouts {
            heartbeat_interval: Duration::from_secs(1),
            unreachable_after: Duration::from_secs(5),
            lost_after: Duration::from_secs(30),
        }
    }
}

/// An agent's session on this leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgentLink {
    /// The session (a reconnect may overlap the old session's end).
    pub session: SessionId,
    /// Where the session comes from.
    pub address: std::net::SocketAddr,
}

/// What a proposal made for an agent is waiting for.
#[derive(Debug)]
pub(crate) enum AgentPending {
    /// A registration: answer `Registered` (and keep the link) once applied.
    Register { agent_id: AgentId, link: AgentLink },
    /// A status update: acknowledge it once applied.
    Status { agent_id: AgentId, ack: StatusAck },
}

/// The leader's agent sessions and liveness clocks.
#[derive(Debug, Default)]
pub(crate) struct AgentSessions {
    timeouts: AgentTimeouts,
    links: BTreeMap<AgentId, AgentLink>,
    last_heard: BTreeMap<AgentId, Time>,
    /// The wall-clock time of `last_heard`, for operators.
    last_heard_ms: BTreeMap<AgentId, u64>,
    /// Marks proposed and not yet applied, so a tick does not propose them again.
    marks_in_flight: BTreeSet<(AgentId, AgentState)>,
    /// No mark can be due before this time (`None`: look now). [`AgentSessions::due_marks`]
    /// walks the agents only from then on, so that a tick at 10,000 agents does not walk them
    /// all: about one walk per `unreachable_after` minus a heartbeat interval.
    next_marks_check: Option<Time>,
    /// Status updates proposed and not yet applied (task and sequence number), so that an
    /// agent resending an update while its first copy is in the log does not add a copy per
    /// resend: the one proposal's acknowledgement answers them all.
    statuses_in_flight: BTreeSet<(TaskKey, u64)>,
    /// How each agent said it isolates its tasks when it last registered here: soft state
    /// for operators, like its address (every agent says it again to a new leader).
    isolation: BTreeMap<AgentId, TaskIsolation>,
}

impl AgentSessions {
    pub(crate) fn new(timeouts: AgentTimeouts) -> AgentSessions {
        AgentSessions {
            timeouts,
            ..AgentSessions::default()
        }
    }

    pub(crate) fn timeouts(&self) -> AgentTimeouts {
        self.timeouts
    }

    /// This master became leader: every known agent's clock starts now.
    pub(crate) fn on_leadership(&mut self, state: &ClusterState, now: Time) {
        self.last_heard = state.agents().keys().map(|id| (id.clone(), now)).collect();
        self.marks_in_flight.clear();
        self.statuses_in_flight.clear();
        self.next_marks_check = None;
    }

    /// This master stopped leading: agents are sent to the new leader (or told none is
    /// known), their sessions closed, and forgotten.
    pub(crate) fn on_lost_leadership(&mut self, redirect: &Redirect, out: &mut Outbox) {
        for (_, link) in std::mem::take(&mut self.links) {
            out.send_agent(link.session, MasterToAgent::Redirect(redirect.clone()));
            out.close(link.session);
        }
        self.last_heard.clear();
        self.marks_in_flight.clear();
        self.statuses_in_flight.clear();
        self.next_marks_check = None;
    }

    /// The agent's registration committed: its session becomes the one to push to.
    pub(crate) fn attach(
        &mut self,
        agent_id: AgentId,
        link: AgentLink,
        now: Time,
        out: &mut Outbox,
    ) {
        self.last_heard.insert(agent_id.clone(), now);
        if let Some(old) = self.links.insert(agent_id, link) {
            // A session replaced by a newer one of the same agent is told to go away.
            if old.session != link.session {
                out.close(old.session);
            }
        }
    }

    /// A session ended; forgets it unless a newer session of the agent replaced it.
    pub(crate) fn detach(&mut self, agent_id: &AgentId, session: SessionId) {
        if self
            .links
            .get(agent_id)
            .is_some_and(|link| link.session == session)
        {
            self.links.remove(agent_id);
        }
    }

    /// The agent was declared lost while its session may still be open (a pause, or a
    /// partition that healed before the connection timed out): it is told so and its session
    /// closed, so that it registers again, which is how a lost agent comes back (its tasks
    /// ended LOST, it must kill what it still runs of them).
    pub(crate) fn send_back_lost(&mut self, agent_id: &AgentId, out: &mut Outbox) {
        if let Some(link) = self.links.remove(agent_id) {
            tracing::info!(agent = %agent_id, "agent declared lost while connected: told to register again");
            out.send_agent(
                link.session,
                MasterToAgent::Error(WireError::new(
                    ErrorCode::UnknownAgent,
                    format!("agent `{agent_id}` was declared lost: register again"),
                )),
            );
            out.close(link.session);
        }
    }

    /// The agent was heard from. Returns the command to propose when the agent was marked
    /// unreachable and is back.
    pub(crate) fn heard(
        &mut self,
        state: &ClusterState,
        agent_id: &AgentId,
        now: Time,
        at_ms: u64,
    ) -> Option<Command> {
        set_without_cloning(&mut self.last_heard, agent_id, now);
        set_without_cloning(&mut self.last_heard_ms, agent_id, at_ms);
        let entry = state.agents().get(agent_id)?;
        (entry.state == AgentState::Unreachable
            && self
                .marks_in_flight
                .insert((agent_id.clone(), AgentState::Active)))
        .then(|| Command::AgentHeartbeat {
            agent_id: agent_id.clone(),
            at_ms,
        })
    }

    /// The marks due at `now`: unreachable after the first timeout of silence, lost after
    /// the second. Each is returned once until it is applied.
    pub(crate) fn due_marks(
        &mut self,
        state: &ClusterState,
        now: Time,
        at_ms: u64,
    ) -> Vec<Command> {
        let mut marks = Vec::new();
        if self.next_marks_check.is_some_and(|next| now < next) {
            return marks;
        }
        let mut next_check: Option<Time> = None;
        for (agent_id, entry) in state.agents() {
            let heard = match self.last_heard.get(agent_id) {
                Some(heard) => *heard,
                None => {
                    self.last_heard.insert(agent_id.clone(), now);
                    now
                }
            };
            let silent = now.saturating_duration_since(heard);
            let (target, due) = match entry.state {
                AgentState::Active => (AgentState::Unreachable, self.timeouts.unreachable_after),
                AgentState::Unreachable => (AgentState::Lost, self.timeouts.lost_after),
                AgentState::Lost => continue,
            };
            if silent < due {
                let deadline = heard.saturating_add(due);
                next_check = Some(next_check.map_or(deadline, |next| next.min(deadline)));
                continue;
            }
            // A mark in flight is looked at again once settled (`mark_settled`).
            if !self.marks_in_flight.insert((agent_id.clone(), target)) {
                continue;
            }
            let agent_id = agent_id.clone();
            marks.push(match target {
                AgentState::Unreachable => Command::MarkAgentUnreachable { agent_id, at_ms },
                _ => Command::MarkAgentLost { agent_id, at_ms },
            });
        }
        // Looked at again at the earliest deadline, and at least every shortest timeout: an
        // agent that registers or is heard from after this walk has a deadline no sooner than
        // that (an agent that entered the state without registering here starts its clock
        // when a walk first sees it).
        let shortest = self
            .timeouts
            .unreachable_after
            .min(self.timeouts.lost_after);
        let latest = now.saturating_add(shortest);
        self.next_marks_check = Some(next_check.map_or(latest, |next| next.min(latest)));
        marks
    }

    /// A mark (or heartbeat) command was applied or refused: it may be proposed again.
    pub(crate) fn mark_settled(&mut self, command: &Command) {
        let key = match command {
            Command::MarkAgentUnreachable { agent_id, .. } => {
                (agent_id.clone(), AgentState::Unreachable)
            }
            Command::MarkAgentLost { agent_id, .. } => (agent_id.clone(), AgentState::Lost),
            Command::AgentHeartbeat { agent_id, .. } => (agent_id.clone(), AgentState::Active),
            _ => return,
        };
        self.marks_in_flight.remove(&key);
        // The agent's next mark (lost after unreachable, or none) is not in the check's time.
        self.next_marks_check = None;
    }

    /// Pushes what an applied command's outcome asks agents to do: launches and kills.
    pub(crate) fn push_outcome(&self, outcome: &CommandOutcome, out: &mut Outbox) {
        match outcome {
            CommandOutcome::TasksLaunched {
                agent_id,
                framework_id,
                tasks,
            } => {
                if let Some(link) = self.links.get(agent_id) {
                    out.send_agent(
                        link.session,
                        MasterToAgent::Launch {
                            framework_id: framework_id.clone(),
                            tasks: tasks.clone(),
                        },
                    );
                } else {
                    tracing::warn!(agent = %agent_id, "tasks launched on an agent with no session; it learns of them when it re-registers");
                }
            }
            CommandOutcome::KillRequested(kill) => self.push_kill(kill, out),
            CommandOutcome::KillsRequested(kill) | CommandOutcome::TasksEnded { kill, .. } => {
                for one in kill {
                    self.push_kill(one, out);
                }
            }
            _ => {}
        }
    }

    fn push_kill(&self, kill: &TaskKill, out: &mut Outbox) {
        if let Some(link) = self.links.get(&kill.agent_id) {
            out.send_agent(
                link.session,
                MasterToAgent::Kill {
                    task_id: kill.task.task_id.clone(),
                    framework_id: kill.task.framework_id.clone(),
                    grace_ms: kill.grace_ms,
                },
            );
        }
    }

    /// Adds what only the leader's sessions know to an agent's operator view: where its
    /// session comes from and when it was last heard (heartbeats are not replicated).
    pub(crate) fn decorate(&self, info: &mut fullerene_proto::messages::AgentInfo) {
        info.address = self.links.get(&info.id).map(|link| link.address);
        info.isolation = self.isolation.get(&info.id).cloned();
        if let Some(ms) = self.last_heard_ms.get(&info.id) {
            info.last_heartbeat_ms = info.last_heartbeat_ms.max(*ms);
        }
    }

    /// Keeps what `agent` reported of its isolation in its latest registration.
    pub(crate) fn reported_isolation(&mut self, agent: &AgentId, isolation: TaskIsolation) {
        self.isolation.insert(agent.clone(), isolation);
    }

    /// The agent's session, when it has one on this leader.
    pub(crate) fn link(&self, agent_id: &AgentId) -> Option<&AgentLink> {
        self.links.get(agent_id)
    }
}

/// Sets `agent_id`'s value, cloning the id only for an agent not in `map` yet (heartbeats
/// come from agents already there, thousands a second).
fn set_without_cloning<V>(map: &mut BTreeMap<AgentId, V>, agent_id: &AgentId, value: V) {
    match map.get_mut(agent_id) {
        Some(slot) => *slot = value,
        None => {
            map.insert(agent_id.clone(), value);
        }
    }
}

/// Whether the state already holds `update` from `agent` (its task runs there and has
/// recorded this sequence number or a later one): what `UpdateStatus` would apply as a
/// duplicate.
fn already_recorded(state: &ClusterState, agent: &AgentId, update: &StatusUpdate) -> bool {
    let key = TaskKey::new(update.framework_id.clone(), update.task_id.clone());
    update.agent_id == *agent
        && state
            .tasks()
            .get(&key)
            .is_some_and(|task| task.agent_id == *agent && task.seq >= update.seq)
}

pub(crate) fn ack_of(update: &StatusUpdate) -> StatusAck {
    StatusAck {
        task_id: update.task_id.clone(),
        framework_id: update.framework_id.clone(),
        seq: update.seq,
    }
}

impl<S: RaftStore> MasterCore<S> {
    pub(super) fn settle_agent(&mut self, pending: AgentPending, settled: Settled, now: Now) {
        match pending {
            AgentPending::Register { agent_id, link } => match settled {
                Settled::Applied(_) if !self.node.is_leader() => {
                    // Committed under the next leader: registered there, not attached here
                    // (a follower's session would hear no launch and report no loss).
                    tracing::info!(agent = %agent_id, "registration committed after this master stopped leading; redirecting");
                    self.out
                        .send_agent(link.session, MasterToAgent::Redirect(self.redirect()));
                    self.out.close(link.session);
                }
                Settled::Applied(outcome) => {
                    let kill = match outcome {
                        CommandOutcome::AgentRegistered { kill, .. } => {
                            kill.into_iter().map(|k| k.task).collect()
                        }
                        _ => Vec::new(),
                    };
                    tracing::info!(agent = %agent_id, "agent registered");
                    let timeouts = self.agents.timeouts();
                    let (interval, lost_after) = (timeouts.heartbeat_interval, timeouts.lost_after);
                    self.out.send_agent(
                        link.session,
                        MasterToAgent::Registered {
                            agent_id: agent_id.clone(),
                            heartbeat_interval_ms: whole_millis(interval),
                            lost_after_ms: whole_millis(lost_after),
                            kill,
                        },
                    );
                    self.agents
                        .attach(agent_id, link, now.monotonic, &mut self.out);
                }
                Settled::Refused(error) => {
                    tracing::warn!(agent = %agent_id, %error, "agent registration refused");
                    self.out.send_agent(
                        link.session,
                        MasterToAgent::Error(WireError::new(
                            ErrorCode::InvalidRequest,
                            error.to_string(),
                        )),
                    );
                    self.out.close(link.session);
                }
                Settled::Dropped(error) => {
                    // Not committed (leadership changed): the agent registers again.
                    let redirect = Redirect {
                        leader: self.leader_info().filter(|_| !self.node.is_leader()),
                    };
                    tracing::info!(agent = %agent_id, %error, "agent registration not committed");
                    self.out
                        .send_agent(link.session, MasterToAgent::Redirect(redirect));
                    self.out.close(link.session);
                }
            },
            AgentPending::Status { agent_id, ack } => {
                self.agents.statuses_in_flight.remove(&(ack.key(), ack.seq));
                match &settled {
                    Settled::Applied(_) => {}
                    // A resend of an update whose task has since ended and been forgotten
                    // (its end acknowledged by the framework) is routine after a reconnect.
                    Settled::Refused(
                        error @ (CommandError::UnknownTask(_) | CommandError::TerminalTask { .. }),
                    ) => {
                        tracing::debug!(agent = %agent_id, task = %ack.key(), seq = ack.seq, %error, "status update of an ended task refused");
                    }
                    Settled::Refused(error) => {
                        // Retrying cannot change the answer: acknowledge so the agent stops.
                        tracing::warn!(agent = %agent_id, task = %ack.key(), seq = ack.seq, %error, "status update refused");
                    }
                    // Not committed: no ack, the agent resends it.
                    Settled::Dropped(_) => return,
                }
                if let Some(link) = self.agents.link(&agent_id) {
                    self.out
                        .send_agent(link.session, MasterToAgent::StatusAck(ack));
                }
            }
        }
    }

    pub(super) fn handle_agent_register(
        &mut self,
        agent_id: AgentId,
        link: AgentLink,
        registration: AgentRegistration,
        now: Now,
    ) {
        if !self.node.is_leader() {
            self.out
                .send_agent(link.session, MasterToAgent::Redirect(self.redirect()));
            self.out.close(link.session);
            return;
        }
        let at_ms = now.wall_ms();
        let AgentRegistration {
            hostname,
            resources,
            attributes,
            tasks,
            executors,
            isolation,
        } = registration;
        self.agents.reported_isolation(&agent_id, isolation);
        let command = if self.node.state().agents().contains_key(&agent_id) {
            let running = tasks
                .iter()
                .filter(|report| !report.state.is_terminal())
                .map(|report| report.task.clone())
                .collect();
            Command::ReregisterAgent {
                agent_id: agent_id.clone(),
                hostname,
                resources,
                attributes,
                executors,
                running,
                at_ms,
            }
        } else {
            Command::RegisterAgent {
                agent_id: agent_id.clone(),
                hostname,
                resources,
                attributes,
                executors,
                at_ms,
            }
        };
        let token = self.token();
        match self.node.propose(&command, token) {
            Ok(()) => {
                self.pending.insert(
                    token,
                    Pending::Agent(AgentPending::Register { agent_id, link }),
                );
            }
            Err(error) => {
                let response = match self.propose_error_response(&error) {
                    OperatorResponse::Redirect(redirect) => MasterToAgent::Redirect(redirect),
                    _ => MasterToAgent::Error(WireError::new(
                        ErrorCode::Unavailable,
                        error.to_string(),
                    )),
                };
                self.out.send_agent(link.session, response);
                self.out.close(link.session);
            }
        }
    }

    pub(super) fn handle_agent_status(
        &mut self,
        agent_id: AgentId,
        update: StatusUpdate,
        now: Now,
    ) {
        // Updates count only on the leader, from an agent whose registration committed here;
        // otherwise the agent resends them after it registers.
        if !self.node.is_leader() {
            return;
        }
        let Some(session) = self.agents.link(&agent_id).map(|link| link.session) else {
            return;
        };
        let ack = ack_of(&update);
        if already_recorded(self.node.state(), &agent_id, &update) {
            // Applying it again would change nothing and be acknowledged: acknowledge now,
            // without a log entry.
            self.out.send_agent(session, MasterToAgent::StatusAck(ack));
            return;
        }
        if !self.agents.statuses_in_flight.insert((ack.key(), ack.seq)) {
            return;
        }
        if update.state == TaskState::Running {
            self.note_launch_latency(&ack, now);
        }
        let command = Command::UpdateStatus {
            agent_id: agent_id.clone(),
            update,
            at_ms: now.wall_ms(),
        };
        let token = self.token();
        if self.node.propose(&command, token).is_ok() {
            self.pending.insert(
                token,
                Pending::Agent(AgentPending::Status { agent_id, ack }),
            );
        } else {
            self.agents.statuses_in_flight.remove(&(ack.key(), ack.seq));
        }
    }

    /// A task's first RUNNING update: how long it took from the accept that launched it.
    fn note_launch_latency(&mut self, ack: &StatusAck, now: Now) {
        let Some(task) = self.node.state().task(&ack.key()) else {
            return;
        };
        if task.state != TaskState::Staging
            || self.launch_latencies.len() >= super::MAX_UNTAKEN_LAUNCH_LATENCIES
        {
            return;
        }
        let waited = now.wall_ms().saturating_sub(task.launched_at_ms);
        self.launch_latencies.push(Duration::from_millis(waited));
    }

    /// On the leader: proposes the liveness marks that are due.
    pub(super) fn propose_agent_marks(&mut self, now: Now) {
        if !self.node.is_leader() {
            return;
        }
        let marks = self
            .agents
            .due_marks(self.node.state(), now.monotonic, now.wall_ms());
        for command in marks {
            tracing::info!(command = command.kind(), "agent silent too long");
            self.propose_internal(command);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(state: &mut ClusterState, agent: &str) {
        state
            .apply(&crate::testkit::register_agent(
                agent,
                "host",
                "cpus=4,mem_mib=4096",
                &["sleep"],
                0,
            ))
            .expect("registered");
    }

    fn timeouts() -> AgentTimeouts {
        AgentTimeouts {
            heartbeat_interval: Duration::from_millis(100),
            unreachable_after: Duration::from_secs(1),
            lost_after: Duration::from_secs(3),
        }
    }

    #[test]
    fn a_silent_agent_is_marked_unreachable_then_lost_once_each() {
        let mut state = ClusterState::default();
        register(&mut state, "agent-1");
        let mut links = AgentSessions::new(timeouts());
        let start = Time::from_millis(1_000);
        links.on_leadership(&state, start);
        assert!(links
            .due_marks(&state, start + Duration::from_millis(900), 0)
            .is_empty());
        let marks = links.due_marks(&state, start + Duration::from_millis(1100), 0);
        assert!(matches!(
            marks.as_slice(),
            [Command::MarkAgentUnreachable { .. }]
        ));
        // In flight: not proposed again on the next tick.
        assert!(links
            .due_marks(&state, start + Duration::from_millis(1200), 0)
            .is_empty());
        state.apply(&marks[0]).expect("applied");
        links.mark_settled(&marks[0]);
        assert!(links
            .due_marks(&state, start + Duration::from_millis(2900), 0)
            .is_empty());
        let marks = links.due_marks(&state, start + Duration::from_millis(3100), 0);
        assert!(matches!(marks.as_slice(), [Command::MarkAgentLost { .. }]));
        state.apply(&marks[0]).expect("applied");
        links.mark_settled(&marks[0]);
        assert!(links
            .due_marks(&state, start + Duration::from_secs(60), 0)
            .is_empty());
    }

    #[test]
    fn a_heartbeat_resets_the_clock_and_brings_an_unreachable_agent_back() {
        let mut state = ClusterState::default();
        register(&mut state, "agent-1");
        let agent = AgentId::from("agent-1");
        let mut links = AgentSessions::new(timeouts());
        let start = Time::from_millis(1_000);
        links.on_leadership(&state, start);
        // An active agent that heartbeats needs nothing proposed, and is not marked.
        assert!(links
            .heard(&state, &agent, start + Duration::from_millis(800), 0)
            .is_none());
        assert!(links
            .due_marks(&state, start + Duration::from_millis(1500), 0)
            .is_empty());
        let marks = links.due_marks(&state, start + Duration::from_millis(1900), 0);
        state.apply(&marks[0]).expect("unreachable");
        links.mark_settled(&marks[0]);
        let back = links.heard(&state, &agent, start + Duration::from_secs(2), 0);
        assert!(matches!(back, Some(Command::AgentHeartbeat { .. })));
        // Proposed once until it is applied.
        assert!(links
            .heard(&state, &agent, start + Duration::from_secs(2), 0)
            .is_none());
    }

    #[test]
    fn marks_come_due_on_the_first_tick_past_each_deadline_though_walks_are_skipped() {
        let mut state = ClusterState::default();
        for agent in ["agent-1", "agent-2", "agent-3"] {
            register(&mut state, agent);
        }
        let mut links = AgentSessions::new(timeouts());
        let start = Time::from_millis(1_000);
        links.on_leadership(&state, start);
        let id = |name: &str| AgentId::from(name.to_string());
        // agent-1 is never heard from; agent-2 heartbeats every 100 ms until 2 s; agent-3 is
        // heard at 0.5 s, marked unreachable, heard again at 2.2 s, then silent.
        let heard_at = |ms: u64| -> Vec<AgentId> {
            let mut heard = Vec::new();
            if ms % 100 == 0 && ms <= 2_000 {
                heard.push(id("agent-2"));
            }
            if ms == 500 || ms == 2_200 {
                heard.push(id("agent-3"));
            }
            heard
        };
        let mut seen = Vec::new();
        for tick in 0..=400u64 {
            let ms = tick * 25;
            let now = start + Duration::from_millis(ms);
            for agent in heard_at(ms) {
                if let Some(back) = links.heard(&state, &agent, now, 0) {
                    state.apply(&back).expect("heartbeat applies");
                    links.mark_settled(&back);
                }
            }
            for mark in links.due_marks(&state, now, 0) {
                let (agent, kind) = match &mark {
                    Command::MarkAgentUnreachable { agent_id, .. } => {
                        (agent_id.to_string(), "unreachable")
                    }
                    Command::MarkAgentLost { agent_id, .. } => (agent_id.to_string(), "lost"),
                    other => panic!("not a mark: {other:?}"),
                };
                seen.push((ms, agent, kind));
                state.apply(&mark).expect("mark applies");
                links.mark_settled(&mark);
            }
        }
        let expected: Vec<(u64, String, &str)> = [
            (1_000, "agent-1", "unreachable"),
            (1_500, "agent-3", "unreachable"),
            (3_000, "agent-1", "lost"),
            (3_000, "agent-2", "unreachable"),
            (3_200, "agent-3", "unreachable"),
            (5_000, "agent-2", "lost"),
            (5_200, "agent-3", "lost"),
        ]
        .into_iter()
        .map(|(ms, agent, kind)| (ms, agent.to_string(), kind))
        .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_new_leader_starts_every_clock_afresh() {
        let mut state = ClusterState::default();
        register(&mut state, "agent-1");
        let mut links = AgentSessions::new(timeouts());
        let start = Time::from_millis(1_000);
        links.on_leadership(&state, start);
        links.on_lost_leadership(&Redirect { leader: None }, &mut Outbox::default());
        let later = start + Duration::from_secs(10);
        links.on_leadership(&state, later);
        assert!(links
            .due_marks(&state, later + Duration::from_millis(500), 0)
            .is_empty());
    }
}
