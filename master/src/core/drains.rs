//! The leader's half of agent drains (`fullerene agent drain`): when a drain's deadline
//! passes, what still runs on the agent is killed.
//!
//! The drain itself lives in the replicated state (`state::Drain`): launches on a draining
//! agent are refused there and the offer book leaves it out, whichever master leads. What a
//! leader adds is the clock: the deadline is a wall-clock time in the state, so a new leader
//! goes on where the old one stopped.

use std::collections::BTreeSet;
use std::time::Duration;

use fullerene_proto::messages::UnixMillis;
use fullerene_proto::{TaskKey, Time};

use super::MasterCore;
use crate::state::{ClusterState, Command};
use crate::storage::RaftStore;

/// How often the leader looks for drains past their deadline: deadlines are an operator's
/// minutes, and a walk over every agent on each 25 ms tick would cost 10,000 lookups at that
/// scale for nothing.
pub(crate) const DRAIN_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Kills proposed for drains past their deadline, until they are applied.
#[derive(Debug, Default)]
pub(crate) struct DrainDeadlines {
    /// Tasks in a kill proposed and not yet applied, so a later look does not propose them
    /// again.
    kills_in_flight: BTreeSet<TaskKey>,
    /// No look before this time (`None`: look now).
    next_check: Option<Time>,
}

impl DrainDeadlines {
    /// This master became leader: look at once.
    pub(crate) fn on_leadership(&mut self) {
        self.kills_in_flight.clear();
        self.next_check = None;
    }

    /// The kill to propose at `now` (`at_ms` on the wall clock): every live task, not yet
    /// asked to die, of every agent whose drain deadline has passed; `None` when there is
    /// none, or it is not yet time to look.
    pub(crate) fn due_kills(
        &mut self,
        state: &ClusterState,
        now: Time,
        at_ms: UnixMillis,
    ) -> Option<Command> {
        if self.next_check.is_some_and(|next| now < next) {
            return None;
        }
        self.next_check = Some(now.saturating_add(DRAIN_CHECK_INTERVAL));
        let mut tasks = Vec::new();
        for entry in state.agents().values() {
            let past_deadline = entry
                .drain
                .as_ref()
                .and_then(|drain| drain.deadline_ms)
                .is_some_and(|deadline| deadline <= at_ms);
            if !past_deadline {
                continue;
            }
            for key in &entry.tasks {
                let asked = state.tasks().get(key).is_none_or(|t| t.kill_requested);
                if !asked && !self.kills_in_flight.contains(key) {
                    tasks.push(key.clone());
                }
            }
        }
        if tasks.is_empty() {
            return None;
        }
        self.kills_in_flight.extend(tasks.iter().cloned());
        Some(Command::KillTasks { tasks, at_ms })
    }

    /// A kill this leader proposed was applied or refused: its tasks may be looked at again
    /// (a refused one, say because a task ended meanwhile, is proposed anew without it).
    pub(crate) fn settled(&mut self, command: &Command) {
        if let Command::KillTasks { tasks, .. } = command {
            for key in tasks {
                self.kills_in_flight.remove(key);
            }
            self.next_check = None;
        }
    }
}

impl<S: RaftStore> MasterCore<S> {
    /// On the leader: kills what still runs on agents whose drain deadline has passed.
    pub(super) fn propose_drain_kills(&mut self, now: fullerene_proto::time::Now) {
        if !self.node.is_leader() {
            return;
        }
        let kill = self
            .drains
            .due_kills(self.node.state(), now.monotonic, now.wall_ms());
        if let Some(command) = kill {
            if let Command::KillTasks { tasks, .. } = &command {
                tracing::info!(
                    tasks = tasks.len(),
                    "drain deadline passed: killing what still runs"
                );
            }
            self.propose_internal(command);
        }
    }
}
