//! The cluster's events (issue 19, point 5), derived from what the state machine applies.
//!
//! An event is a consequence of one committed command and its outcome (an agent lost, a task
//! that ended, a framework torn down), so it is derived where commands are applied, by every
//! master alike: [`EventProbe::before`] notes the little the derivation needs of the state
//! before the command (a task's previous state, whether an agent was drained), and
//! [`EventProbe::events`] turns the command, its outcome and the state after into events.
//! Both are pure: no clock (the time is the command's `at_ms`), no I/O. The Raft driver numbers
//! them ([`number_events`]) from the entry's log index, so every master gives every event the
//! same number, and a client following the events can move from one master to another (after
//! a leader change) and resume after the last number it has, without a gap or a duplicate.
//!
//! Each master keeps its latest events in an [`EventRing`]; what falls out of the ring (or
//! was never seen by this master: before its start, or under a snapshot it installed) is below
//! the ring's *floor*, and a client asking for it is told so rather than handed a gap.

use std::collections::{BTreeMap, VecDeque};

use fullerene_proto::http::{ClusterEvent, EventRecord, EventsDocument, EVENT_SEQ_STRIDE};
use fullerene_proto::messages::{
    AgentState, GroupPlacement, GroupRemoval, StatusUpdate, TaskState, UnixMillis,
};
use fullerene_proto::reservations::ReservationVerdict;
use fullerene_proto::{AgentId, MasterId, TaskKey};

use super::{AgentEntry, ClusterState, Command, CommandError, CommandOutcome};

/// The most bytes of an agent's status message an event keeps.
pub const MAX_EVENT_MESSAGE_BYTES: usize = 256;

/// The default number of events a master keeps (`fullerene master --events-kept`): at a few
/// hundred bytes each, about 3 MB.
pub const DEFAULT_EVENTS_KEPT: usize = 10_000;

/// What the derivation of a command's events needs to know of the state before it is applied.
#[derive(Debug, Default)]
pub struct EventProbe {
    /// The state before of each task the command may change.
    task_states: BTreeMap<TaskKey, TaskState>,
    /// Whether each agent the command may drain was drained before.
    drained: BTreeMap<AgentId, bool>,
    /// The agent's state before (for registrations and heartbeats).
    agent_state: Option<AgentState>,
    /// For group changes: the group's weight before.
    weight: Option<f64>,
    /// How many reservations the adapter had rejected, and how many had closed, before.
    reservations_rejected: u64,
    reservations_closed: u64,
}

impl EventProbe {
    /// Notes what [`EventProbe::events`] will need of `state` before `command` is applied.
    pub fn before(state: &ClusterState, command: &Command) -> EventProbe {
        let mut probe = EventProbe {
            reservations_rejected: state.reservations().rejected_total(),
            reservations_closed: state.reservations().closed_total(),
            ..EventProbe::default()
        };
        match command {
            Command::ReregisterAgent { agent_id, .. }
            | Command::UpdateAgentResources { agent_id, .. }
            | Command::MarkAgentLost { agent_id, .. }
            | Command::AgentHeartbeat { agent_id, .. }
            | Command::DrainAgent { agent_id, .. } => {
                if let Some(agent) = state.agents().get(agent_id) {
                    probe.agent_state = Some(agent.state);
                    probe.drained.insert(agent_id.clone(), agent.drained());
                    if !matches!(
                        command,
                        Command::AgentHeartbeat { .. } | Command::DrainAgent { .. }
                    ) {
                        probe.note_tasks(state, agent.tasks.iter());
                    }
                }
            }
            Command::UpdateStatus { update, .. } => {
                let key = TaskKey::new(update.framework_id.clone(), update.task_id.clone());
                if let Some(task) = state.task(&key) {
                    probe.note_agent(state, &task.agent_id);
                }
                probe.note_tasks(state, std::iter::once(&key));
            }
            Command::TeardownFramework { framework_id, .. } => {
                if let Some(framework) = state.frameworks().get(framework_id) {
                    let keys: Vec<TaskKey> = framework
                        .active_tasks
                        .iter()
                        .map(|task| TaskKey::new(framework_id.clone(), task.clone()))
                        .collect();
                    for key in &keys {
                        if let Some(task) = state.task(key) {
                            probe.note_agent(state, &task.agent_id);
                        }
                    }
                    probe.note_tasks(state, keys.iter());
                }
            }
            Command::SetGroupWeight { group, .. }
            | Command::SetGroup(GroupPlacement { group, .. })
            | Command::RemoveGroup(GroupRemoval { group, .. }) => {
                probe.weight = state.settings().group_weights.get(group).copied();
            }
            _ => {}
        }
        probe
    }

    fn note_tasks<'a>(&mut self, state: &ClusterState, keys: impl Iterator<Item = &'a TaskKey>) {
        for key in keys {
            if let Some(task) = state.task(key) {
                self.task_states.insert(key.clone(), task.state);
            }
        }
    }

    fn note_agent(&mut self, state: &ClusterState, agent: &AgentId) {
        if let Some(entry) = state.agents().get(agent) {
            self.drained.insert(agent.clone(), entry.drained());
        }
    }

    /// The events of `command`, applied with `result`, given `state` after it. A refused
    /// command, or one that changed nothing, has none.
    pub fn events(
        self,
        state: &ClusterState,
        command: &Command,
        result: &Result<CommandOutcome, CommandError>,
    ) -> Vec<ClusterEvent> {
        let Ok(outcome) = result else {
            return Vec::new();
        };
        if matches!(outcome, CommandOutcome::Unchanged) {
            return Vec::new();
        }
        let mut events = Vec::new();
        match command {
            Command::RegisterAgent {
                agent_id, hostname, ..
            } => events.push(ClusterEvent::AgentRegistered {
                agent: agent_id.clone(),
                hostname: hostname.clone(),
            }),
            Command::ReregisterAgent {
                agent_id, hostname, ..
            } => events.push(ClusterEvent::AgentReregistered {
                agent: agent_id.clone(),
                hostname: hostname.clone(),
                was_lost: self.agent_state == Some(AgentState::Lost),
            }),
            Command::AgentHeartbeat { agent_id, .. } => {
                if self.agent_state == Some(AgentState::Unreachable) {
                    events.push(ClusterEvent::AgentReachable {
                        agent: agent_id.clone(),
                    });
                }
            }
            Command::MarkAgentUnreachable { agent_id, .. } => {
                events.push(ClusterEvent::AgentUnreachable {
                    agent: agent_id.clone(),
                });
            }
            Command::MarkAgentLost { agent_id, .. } => {
                let tasks_lost = match outcome {
                    CommandOutcome::TasksEnded { updates, .. } => updates.len() as u64,
                    _ => 0,
                };
                events.push(ClusterEvent::AgentLost {
                    agent: agent_id.clone(),
                    tasks_lost,
                });
            }
            Command::DrainAgent {
                agent_id,
                deadline_ms,
                ..
            } => events.push(ClusterEvent::AgentDraining {
                agent: agent_id.clone(),
                deadline_ms: *deadline_ms,
            }),
            Command::UndrainAgent { agent_id } => events.push(ClusterEvent::AgentUndrained {
                agent: agent_id.clone(),
            }),
            Command::SubscribeFramework {
                framework_id,
                principal,
                name,
                ..
            } => events.push(ClusterEvent::FrameworkSubscribed {
                framework: framework_id.clone(),
                name: name.clone(),
                principal: principal.clone(),
                group: state
                    .frameworks()
                    .get(framework_id)
                    .map(|f| f.group.clone())
                    .unwrap_or_default(),
            }),
            Command::FailoverFramework {
                framework_id, name, ..
            } => events.push(ClusterEvent::FrameworkReconnected {
                framework: framework_id.clone(),
                name: name.clone(),
            }),
            Command::DisconnectFramework { framework_id, .. } => {
                events.push(ClusterEvent::FrameworkDisconnected {
                    framework: framework_id.clone(),
                });
            }
            Command::LaunchTasks {
                framework_id,
                agent_id,
                tasks,
                ..
            } => {
                for spec in tasks {
                    events.push(ClusterEvent::TaskStateChanged {
                        framework: framework_id.clone(),
                        task: spec.id.clone(),
                        agent: agent_id.clone(),
                        from: None,
                        to: TaskState::Staging,
                        reason: None,
                        message: String::new(),
                    });
                }
            }
            Command::SetGroupWeight { group, .. }
            | Command::SetGroup(GroupPlacement { group, .. })
            | Command::RemoveGroup(GroupRemoval { group, .. }) => {
                let after = state.settings().group_weights.get(group).copied();
                if after != self.weight {
                    events.push(ClusterEvent::GroupWeightChanged {
                        group: group.clone(),
                        weight: after.unwrap_or(1.0),
                    });
                }
            }
            Command::UpdateAgentResources { .. }
            | Command::DescribeJob { .. }
            | Command::EndJob { .. }
            | Command::UpdateStatus { .. }
            | Command::TeardownFramework { .. }
            | Command::KillTask { .. }
            | Command::KillTasks { .. }
            | Command::PreemptTasks { .. }
            | Command::CloseReservations { .. }
            | Command::AcknowledgeStatus { .. }
            | Command::SetQuotas(_)
            | Command::SetReservationPolicy { .. }
            | Command::SetOverbookingAllowance { .. }
            | Command::AnnounceMasterHttp { .. } => {}
            Command::CreateReservation {
                name, principal, ..
            } => events.push(ClusterEvent::ReservationAccepted {
                reservation: name.clone(),
                principal: principal.clone(),
                updated: false,
            }),
            Command::UpdateReservation { name, by, .. } => {
                events.push(ClusterEvent::ReservationAccepted {
                    reservation: name.clone(),
                    principal: by.name().to_string(),
                    updated: true,
                });
            }
            Command::DeleteReservation { name, .. } => {
                events.push(ClusterEvent::ReservationDeleted {
                    reservation: name.clone(),
                });
            }
        }
        // Tasks that changed state with the command, in the order the outcome lists them.
        let updates: &[StatusUpdate] = match outcome {
            CommandOutcome::StatusRecorded(update) => std::slice::from_ref(update),
            CommandOutcome::AgentRegistered { updates, .. }
            | CommandOutcome::TasksEnded { updates, .. } => updates,
            _ => &[],
        };
        for update in updates {
            let key = TaskKey::new(update.framework_id.clone(), update.task_id.clone());
            let from = self.task_states.get(&key).copied();
            if from == Some(update.state) {
                continue;
            }
            events.push(ClusterEvent::TaskStateChanged {
                framework: update.framework_id.clone(),
                task: update.task_id.clone(),
                agent: update.agent_id.clone(),
                from,
                to: update.state,
                reason: update.reason.clone(),
                message: clipped(&update.message),
            });
        }
        // Reservations that ended with this command, after the agent's own events: rejected
        // by the adapter with a loss of capacity, or closed with their verdict.
        let ended = state
            .reservations()
            .ended_since(self.reservations_rejected, self.reservations_closed);
        for (principal, notice) in ended {
            let (reservation, principal) = (notice.name, principal.to_string());
            events.push(match notice.verdict {
                ReservationVerdict::Rejected { reason } => ClusterEvent::ReservationRejected {
                    reservation,
                    principal,
                    reason,
                },
                closed => ClusterEvent::ReservationClosed {
                    reservation,
                    principal,
                    outcome: closed.name().into(),
                    jobs: closed.jobs(),
                    late_jobs: closed.late_jobs(),
                },
            });
        }
        if let Command::TeardownFramework {
            framework_id,
            cause,
            ..
        } = command
        {
            events.push(ClusterEvent::FrameworkTornDown {
                framework: framework_id.clone(),
                cause: *cause,
                tasks_killed: updates.len() as u64,
            });
        }
        // A drain is done once its agent runs nothing: after its last task ended, or at once
        // for an idle agent.
        for (agent, was_drained) in &self.drained {
            let drained_now = state.agents().get(agent).is_some_and(AgentEntry::drained);
            if drained_now && !was_drained {
                events.push(ClusterEvent::AgentDrained {
                    agent: agent.clone(),
                });
            }
        }
        events
    }
}

/// `message` cut to at most [`MAX_EVENT_MESSAGE_BYTES`], on a character boundary.
fn clipped(message: &str) -> String {
    if message.len() <= MAX_EVENT_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_EVENT_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// The events of a membership change: masters added (with the address the change carried)
/// and removed.
pub fn membership_events(
    added: &[(u64, Option<std::net::SocketAddr>)],
    removed: &[u64],
) -> Vec<ClusterEvent> {
    added
        .iter()
        .map(|(master, addr)| ClusterEvent::MasterAdded {
            master: *master,
            addr: *addr,
        })
        .chain(
            removed
                .iter()
                .map(|master| ClusterEvent::MasterRemoved { master: *master }),
        )
        .collect()
}

/// The first sequence number of the events of the entry at `index`.
pub fn first_seq(index: u64) -> u64 {
    index.saturating_mul(EVENT_SEQ_STRIDE)
}

/// The last sequence number the events of the entry at `index` may have: the floor of a ring
/// that has seen everything up to and including that entry.
pub fn last_seq(index: u64) -> u64 {
    first_seq(index).saturating_add(EVENT_SEQ_STRIDE - 1)
}

/// Numbers the events of the entry at `index` (`at_ms` its command's time): the `n`th gets
/// `first_seq(index) + n`. An entry with more events than [`EVENT_SEQ_STRIDE`] numbers keeps
/// the first ones and ends with [`ClusterEvent::EventsOmitted`] counting the rest.
pub fn number_events(
    index: u64,
    at_ms: Option<UnixMillis>,
    events: Vec<ClusterEvent>,
) -> Vec<EventRecord> {
    let room = (EVENT_SEQ_STRIDE - 1) as usize;
    let total = events.len();
    let mut records: Vec<EventRecord> = events
        .into_iter()
        .take(room)
        .enumerate()
        .map(|(position, event)| EventRecord {
            seq: first_seq(index) + position as u64,
            index,
            at_ms,
            event,
        })
        .collect();
    if total > room {
        records.push(EventRecord {
            seq: first_seq(index) + room as u64,
            index,
            at_ms,
            event: ClusterEvent::EventsOmitted {
                count: (total - room) as u64,
            },
        });
    }
    records
}

/// What the Raft driver hands the shell about events since it was last asked.
#[derive(Debug, Default, PartialEq)]
pub struct EventBatch {
    /// Set when events at or below this number can no longer be had from this master (it
    /// installed a snapshot, or nobody took its events in time): a ring drops what it holds up
    /// to it and raises its floor to it, before it adds `events`.
    pub floor: Option<u64>,
    /// New events, in order.
    pub events: Vec<EventRecord>,
}

/// A master's latest events, at most `capacity`, oldest first, with the floor below which it
/// cannot answer (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct EventRing {
    capacity: usize,
    events: VecDeque<EventRecord>,
    floor: u64,
}

impl EventRing {
    /// An empty ring of at most `capacity` events (at least one) on a master whose state has
    /// applied up to `applied`: it holds nothing of the entries up to it.
    pub fn new(capacity: usize, applied: u64) -> EventRing {
        EventRing {
            capacity: capacity.max(1),
            events: VecDeque::new(),
            floor: if applied == 0 { 0 } else { last_seq(applied) },
        }
    }

    /// Every event numbered above it is held, or still to come.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The newest event's number (the floor when there is none).
    pub fn last(&self) -> u64 {
        self.events.back().map_or(self.floor, |event| event.seq)
    }

    /// How many events it holds.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Takes in a batch: raises the floor first when it says so, then adds its events, the
    /// oldest falling out (and raising the floor) past the capacity. Events numbered at or
    /// below what it holds are ignored: numbers only grow.
    pub fn push(&mut self, batch: EventBatch) {
        if let Some(floor) = batch.floor {
            if floor > self.floor {
                self.floor = floor;
                while self.events.front().is_some_and(|e| e.seq <= floor) {
                    self.events.pop_front();
                }
            }
        }
        for event in batch.events {
            if event.seq <= self.last() {
                continue;
            }
            if self.events.len() == self.capacity {
                if let Some(dropped) = self.events.pop_front() {
                    self.floor = dropped.seq;
                }
            }
            self.events.push_back(event);
        }
    }

    /// The events after `since`, at most `limit` (the last `limit` when `since` is `None`), as
    /// the document `GET /events` answers for `master`.
    pub fn read(&self, master: MasterId, since: Option<u64>, limit: usize) -> EventsDocument {
        let (events, more) = match since {
            Some(since) => {
                let start = self.events.partition_point(|event| event.seq <= since);
                let events: Vec<EventRecord> =
                    self.events.range(start..).take(limit).cloned().collect();
                let more = self.events.len() - start > events.len();
                (events, more)
            }
            None => {
                let start = self.events.len().saturating_sub(limit);
                (self.events.range(start..).cloned().collect(), false)
            }
        };
        EventsDocument {
            master,
            floor: self.floor,
            last: self.last(),
            since,
            missed: since.is_some_and(|since| since < self.floor),
            events,
            more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> EventRecord {
        EventRecord {
            seq,
            index: seq / EVENT_SEQ_STRIDE,
            at_ms: Some(seq),
            event: ClusterEvent::AgentUnreachable {
                agent: AgentId::from("a1"),
            },
        }
    }

    fn batch(seqs: &[u64]) -> EventBatch {
        EventBatch {
            floor: None,
            events: seqs.iter().map(|&seq| record(seq)).collect(),
        }
    }

    fn seqs(document: &EventsDocument) -> Vec<u64> {
        document.events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn a_ring_keeps_its_capacity_and_says_what_fell_out() {
        let mut ring = EventRing::new(3, 0);
        ring.push(batch(&[10, 11, 20, 30]));
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.floor(), 10, "the first event fell out");
        assert_eq!(ring.last(), 30);
        let read = ring.read(MasterId(1), Some(10), 10);
        assert_eq!(seqs(&read), [11, 20, 30]);
        assert!(!read.missed);
        let read = ring.read(MasterId(1), Some(5), 10);
        assert!(read.missed, "event 10 is gone: the client is told");
        assert_eq!(seqs(&read), [11, 20, 30]);
        let read = ring.read(MasterId(1), Some(11), 1);
        assert_eq!(seqs(&read), [20]);
        assert!(read.more);
        let read = ring.read(MasterId(1), None, 2);
        assert_eq!(seqs(&read), [20, 30]);
        // A client ahead of this master (it came from a master further on) waits for more.
        let read = ring.read(MasterId(1), Some(99), 10);
        assert!(read.events.is_empty() && !read.missed);
        // Numbers only grow: a repeat is ignored.
        ring.push(batch(&[30, 25]));
        assert_eq!(ring.last(), 30);
        assert_eq!(ring.len(), 3);
    }

    #[test]
    fn a_raised_floor_drops_what_is_under_it() {
        let mut ring = EventRing::new(10, 2);
        assert_eq!(ring.floor(), last_seq(2), "nothing of entries up to 2");
        ring.push(batch(&[first_seq(3), first_seq(4), first_seq(4) + 1]));
        ring.push(EventBatch {
            floor: Some(last_seq(4)),
            events: vec![record(first_seq(6))],
        });
        assert_eq!(ring.floor(), last_seq(4));
        assert_eq!(seqs(&ring.read(MasterId(1), None, 10)), [first_seq(6)]);
        assert!(ring.read(MasterId(1), Some(first_seq(3)), 10).missed);
    }

    #[test]
    fn an_entry_with_too_many_events_says_how_many_it_left_out() {
        let events = vec![ClusterEvent::MasterRemoved { master: 1 }; EVENT_SEQ_STRIDE as usize + 2];
        let records = number_events(7, None, events);
        assert_eq!(records.len(), EVENT_SEQ_STRIDE as usize);
        assert_eq!(records[0].seq, 7 * EVENT_SEQ_STRIDE);
        let last = records.last().expect("a last record");
        assert_eq!(last.seq, last_seq(7));
        assert_eq!(last.event, ClusterEvent::EventsOmitted { count: 3 });
    }

    #[test]
    fn status_messages_are_clipped_on_a_character_boundary() {
        let long = "é".repeat(200);
        let clipped = clipped(&long);
        assert!(clipped.len() <= MAX_EVENT_MESSAGE_BYTES);
        assert!(long.starts_with(&clipped));
        assert_eq!(clipped.len(), MAX_EVENT_MESSAGE_BYTES);
    }
}
