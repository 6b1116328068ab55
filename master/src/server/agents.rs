//! The leader's side of agent sessions: who is connected, liveness, and what must be pushed
//! to agents when commands commit.
//!
//! The node loop owns one [`AgentLinks`]. Registration, status updates and liveness marks go
//! through the log like every other change (DESIGN.md, "a task's life"): an agent is answered
//! `Registered` and a status update `StatusAck`ed only once the command is applied, so an
//! acknowledged update survives any failover. Heartbeats themselves are not replicated; the
//! leader keeps the time it last heard from each agent and proposes `MarkAgentUnreachable`
//! after one timeout and `MarkAgentLost` after the second. A new leader starts every agent's
//! clock afresh (it cannot know when the old leader last heard from it), so a failover delays
//! the detection of a dead agent by at most one timeout, and never declares a live one lost.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use fullerene_proto::ids::AgentId;
use fullerene_proto::messages::{AgentState, MasterToAgent, Redirect, StatusAck, StatusUpdate};
use tokio::sync::mpsc;

use crate::state::{ClusterState, Command, CommandOutcome, TaskKill};

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

/// A session's outbound queue, tagged so that a stale session's end does not drop a newer one.
#[derive(Debug, Clone)]
pub(crate) struct AgentLink {
    /// Distinguishes sessions of the same agent.
    pub session: u64,
    /// Where the session comes from.
    pub address: std::net::SocketAddr,
    /// Frames for the agent.
    pub outbound: mpsc::Sender<MasterToAgent>,
}

impl AgentLink {
    /// Queues `message`; a full or closed queue means the session is gone or stuck, and the
    /// agent will re-register (and be resent what matters) when it reconnects.
    pub(crate) fn push(&self, message: MasterToAgent) {
        let _ = self.outbound.try_send(message);
    }
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
pub(crate) struct AgentLinks {
    timeouts: AgentTimeouts,
    links: HashMap<AgentId, AgentLink>,
    last_heard: HashMap<AgentId, Instant>,
    /// The wall-clock time of `last_heard`, for operators.
    last_heard_ms: HashMap<AgentId, u64>,
    /// Marks proposed and not yet applied, so a tick does not propose them again.
    marks_in_flight: BTreeSet<(AgentId, AgentState)>,
}

impl AgentLinks {
    pub(crate) fn new(timeouts: AgentTimeouts) -> AgentLinks {
        AgentLinks {
            timeouts,
            ..AgentLinks::default()
        }
    }

    pub(crate) fn timeouts(&self) -> AgentTimeouts {
        self.timeouts
    }

    /// This master became leader: every known agent's clock starts now.
    pub(crate) fn on_leadership(&mut self, state: &ClusterState, now: Instant) {
        self.last_heard = state.agents().keys().map(|id| (id.clone(), now)).collect();
        self.marks_in_flight.clear();
    }

    /// This master stopped leading: agents are sent to the new leader (or told none is
    /// known) and forgotten.
    pub(crate) fn on_lost_leadership(&mut self, redirect: Redirect) {
        for (_, link) in self.links.drain() {
            link.push(MasterToAgent::Redirect(redirect.clone()));
        }
        self.last_heard.clear();
        self.marks_in_flight.clear();
    }

    /// The agent's registration committed: its session becomes the one to push to.
    pub(crate) fn attach(&mut self, agent_id: AgentId, link: AgentLink, now: Instant) {
        self.last_heard.insert(agent_id.clone(), now);
        if let Some(old) = self.links.insert(agent_id, link) {
            // A session replaced by a newer one of the same agent is told to go away.
            drop(old);
        }
    }

    /// A session ended; forgets it unless a newer session of the agent replaced it.
    pub(crate) fn detach(&mut self, agent_id: &AgentId, session: u64) {
        if self
            .links
            .get(agent_id)
            .is_some_and(|link| link.session == session)
        {
            self.links.remove(agent_id);
        }
    }

    /// The agent was heard from. Returns the command to propose when the agent was marked
    /// unreachable and is back.
    pub(crate) fn heard(
        &mut self,
        state: &ClusterState,
        agent_id: &AgentId,
        now: Instant,
        at_ms: u64,
    ) -> Option<Command> {
        self.last_heard.insert(agent_id.clone(), now);
        self.last_heard_ms.insert(agent_id.clone(), at_ms);
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
        now: Instant,
        at_ms: u64,
    ) -> Vec<Command> {
        let mut marks = Vec::new();
        for (agent_id, entry) in state.agents() {
            let heard = *self.last_heard.entry(agent_id.clone()).or_insert(now);
            let silent = now.saturating_duration_since(heard);
            let (target, due) = match entry.state {
                AgentState::Active => (AgentState::Unreachable, self.timeouts.unreachable_after),
                AgentState::Unreachable => (AgentState::Lost, self.timeouts.lost_after),
                AgentState::Lost => continue,
            };
            if silent < due || !self.marks_in_flight.insert((agent_id.clone(), target)) {
                continue;
            }
            let agent_id = agent_id.clone();
            marks.push(match target {
                AgentState::Unreachable => Command::MarkAgentUnreachable { agent_id, at_ms },
                _ => Command::MarkAgentLost { agent_id, at_ms },
            });
        }
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
    }

    /// Pushes what an applied command's outcome asks agents to do: launches and kills.
    pub(crate) fn push_outcome(&self, outcome: &CommandOutcome) {
        match outcome {
            CommandOutcome::TasksLaunched {
                agent_id,
                framework_id,
                tasks,
            } => {
                if let Some(link) = self.links.get(agent_id) {
                    link.push(MasterToAgent::Launch {
                        framework_id: framework_id.clone(),
                        tasks: tasks.clone(),
                    });
                } else {
                    tracing::warn!(agent = %agent_id, "tasks launched on an agent with no session; it learns of them when it re-registers");
                }
            }
            CommandOutcome::KillRequested(kill) => self.push_kill(kill),
            CommandOutcome::TasksEnded { kill, .. } => {
                for one in kill {
                    self.push_kill(one);
                }
            }
            _ => {}
        }
    }

    fn push_kill(&self, kill: &TaskKill) {
        if let Some(link) = self.links.get(&kill.agent_id) {
            link.push(MasterToAgent::Kill {
                task_id: kill.task.task_id.clone(),
                framework_id: kill.task.framework_id.clone(),
                grace_ms: kill.grace_ms,
            });
        }
    }

    /// Adds what only the leader's sessions know to an agent's operator view: where its
    /// session comes from and when it was last heard (heartbeats are not replicated).
    pub(crate) fn decorate(&self, info: &mut fullerene_proto::messages::AgentInfo) {
        info.address = self.links.get(&info.id).map(|link| link.address);
        if let Some(ms) = self.last_heard_ms.get(&info.id) {
            info.last_heartbeat_ms = info.last_heartbeat_ms.max(*ms);
        }
    }

    /// The agent's session, when it has one on this leader.
    pub(crate) fn link(&self, agent_id: &AgentId) -> Option<&AgentLink> {
        self.links.get(agent_id)
    }
}

/// The acknowledgement of `update`.
pub(crate) fn ack_of(update: &StatusUpdate) -> StatusAck {
    StatusAck {
        task_id: update.task_id.clone(),
        seq: update.seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_proto::Resources;

    fn register(state: &mut ClusterState, agent: &str) {
        let resources = Resources::from(
            "cpus=4,mem_mib=4096"
                .parse::<fullerene_proto::ResourceVec>()
                .expect("resources"),
        );
        state
            .apply(&Command::RegisterAgent {
                agent_id: AgentId(agent.to_string()),
                hostname: "host".to_string(),
                resources,
                attributes: Default::default(),
                executors: vec!["sleep".to_string()],
                at_ms: 0,
            })
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
        let mut links = AgentLinks::new(timeouts());
        let start = Instant::now();
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
        let agent = AgentId("agent-1".to_string());
        let mut links = AgentLinks::new(timeouts());
        let start = Instant::now();
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
    fn a_new_leader_starts_every_clock_afresh() {
        let mut state = ClusterState::default();
        register(&mut state, "agent-1");
        let mut links = AgentLinks::new(timeouts());
        let start = Instant::now();
        links.on_leadership(&state, start);
        links.on_lost_leadership(Redirect { leader: None });
        let later = start + Duration::from_secs(10);
        links.on_leadership(&state, later);
        assert!(links
            .due_marks(&state, later + Duration::from_millis(500), 0)
            .is_empty());
    }
}
