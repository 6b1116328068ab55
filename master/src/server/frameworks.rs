//! The leader's side of framework sessions: who is connected, what to push to whom, and when a
//! disconnected framework has used up its failover timeout.
//!
//! Subscriptions, kills, acknowledgements and teardowns go through the log; the answers to
//! the calls that made them are sent once they are applied. Status updates recorded in the
//! state are pushed to the task's framework when its session is on this leader, and again on
//! reconciliation: updates are at least once, and the framework acknowledges each.
//!
//! A framework whose session closes is marked disconnected (replicated), and torn down when
//! `failover_timeout_ms` passes without it subscribing again. A new leader cannot know when
//! the old one last saw a framework, so it gives every framework without a session here the
//! whole timeout from the moment it took over: a failover delays a teardown, never hastens it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fullerene_proto::ids::FrameworkId;
use fullerene_proto::messages::{MasterToFramework, Redirect, StatusUpdate};
use tokio::sync::mpsc;

use crate::state::{ClusterState, Command, CommandOutcome};

/// A framework session's outbound queue, tagged so that a stale session's end does not drop
/// a newer one.
#[derive(Debug, Clone)]
pub(crate) struct FrameworkLink {
    /// Distinguishes sessions of the same framework.
    pub session: u64,
    /// The principal of the session's certificate.
    pub principal: String,
    /// Frames for the framework.
    pub outbound: mpsc::Sender<MasterToFramework>,
}

impl FrameworkLink {
    /// Queues `message`; a full or closed queue means the session is gone or stuck (the
    /// framework reconciles when it reconnects).
    pub(crate) fn push(&self, message: MasterToFramework) {
        let _ = self.outbound.try_send(message);
    }
}

/// The leader's framework sessions and failover clocks.
#[derive(Debug, Default)]
pub(crate) struct FrameworkLinks {
    links: HashMap<FrameworkId, FrameworkLink>,
    /// Since when each framework without a session on this leader has been without one.
    absent_since: HashMap<FrameworkId, Instant>,
    /// Teardowns proposed and not yet applied.
    teardowns_in_flight: std::collections::BTreeSet<FrameworkId>,
}

impl FrameworkLinks {
    /// This master became leader: every framework's failover clock starts now.
    pub(crate) fn on_leadership(&mut self, state: &ClusterState, now: Instant) {
        self.absent_since = state
            .frameworks()
            .values()
            .filter(|f| f.torn_down_at_ms.is_none())
            .map(|f| (f.id.clone(), now))
            .collect();
        self.teardowns_in_flight.clear();
    }

    /// This master stopped leading: frameworks are sent to the new leader and forgotten.
    pub(crate) fn on_lost_leadership(&mut self, redirect: Redirect) {
        for (_, link) in self.links.drain() {
            link.push(MasterToFramework::Redirect(redirect.clone()));
        }
        self.absent_since.clear();
        self.teardowns_in_flight.clear();
    }

    /// The framework's subscription committed: its session becomes the one to push to.
    pub(crate) fn attach(&mut self, framework_id: FrameworkId, link: FrameworkLink) {
        self.absent_since.remove(&framework_id);
        self.links.insert(framework_id, link);
    }

    /// A session ended. Returns true when it was the framework's current one (the leader then
    /// marks the framework disconnected).
    pub(crate) fn detach(
        &mut self,
        framework_id: &FrameworkId,
        session: u64,
        now: Instant,
    ) -> bool {
        let current = self
            .links
            .get(framework_id)
            .is_some_and(|link| link.session == session);
        if current {
            self.links.remove(framework_id);
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
        now: Instant,
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
                    at_ms,
                });
            }
        }
        due
    }

    /// A teardown was applied or refused.
    pub(crate) fn teardown_settled(&mut self, framework_id: &FrameworkId, applied: bool) {
        self.teardowns_in_flight.remove(framework_id);
        if applied {
            self.absent_since.remove(framework_id);
            self.links.remove(framework_id);
        }
    }

    /// Pushes the status updates an applied command's outcome carries to their frameworks.
    pub(crate) fn push_outcome(&self, outcome: &CommandOutcome) {
        match outcome {
            CommandOutcome::StatusRecorded(update) => self.push_update(update),
            CommandOutcome::AgentRegistered { updates, .. }
            | CommandOutcome::TasksEnded { updates, .. } => {
                for update in updates {
                    self.push_update(update);
                }
            }
            _ => {}
        }
    }

    /// Sends `update` to its framework, if connected here.
    pub(crate) fn push_update(&self, update: &StatusUpdate) {
        if let Some(link) = self.links.get(&update.framework_id) {
            link.push(MasterToFramework::Update(update.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscribe(state: &mut ClusterState, id: &str, failover_timeout_ms: u64) {
        state
            .apply(&Command::SubscribeFramework {
                framework_id: FrameworkId(id.to_string()),
                principal: "framework-1".to_string(),
                name: "job".to_string(),
                group: "default".to_string(),
                failover_timeout_ms,
                at_ms: 0,
            })
            .expect("subscribed");
    }

    fn link(session: u64) -> (FrameworkLink, mpsc::Receiver<MasterToFramework>) {
        let (outbound, rx) = mpsc::channel(8);
        (
            FrameworkLink {
                session,
                principal: "framework-1".to_string(),
                outbound,
            },
            rx,
        )
    }

    #[test]
    fn an_absent_framework_is_torn_down_after_its_failover_timeout_once() {
        let mut state = ClusterState::default();
        subscribe(&mut state, "fw-1", 1_000);
        let id = FrameworkId("fw-1".to_string());
        let mut links = FrameworkLinks::default();
        let start = Instant::now();
        links.on_leadership(&state, start);
        let (session, _rx) = link(7);
        links.attach(id.clone(), session);
        // Connected: never due.
        assert!(links
            .due_teardowns(&state, start + Duration::from_secs(60), 0)
            .is_empty());
        // A stale session's end changes nothing; the current one's starts the clock.
        assert!(!links.detach(&id, 6, start));
        assert!(links.detach(&id, 7, start));
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
        links.teardown_settled(&id, false);
        let (session, _rx) = link(8);
        links.attach(id, session);
        assert!(links
            .due_teardowns(&state, start + Duration::from_secs(60), 0)
            .is_empty());
    }

    #[test]
    fn a_new_leader_gives_every_framework_its_whole_timeout() {
        let mut state = ClusterState::default();
        subscribe(&mut state, "fw-1", 1_000);
        let mut links = FrameworkLinks::default();
        let later = Instant::now() + Duration::from_secs(100);
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
        let mut links = FrameworkLinks::default();
        let (session, mut rx) = link(1);
        links.attach(FrameworkId("fw-1".to_string()), session);
        let update = |framework: &str| StatusUpdate {
            task_id: fullerene_proto::ids::TaskId("t".to_string()),
            framework_id: FrameworkId(framework.to_string()),
            agent_id: fullerene_proto::ids::AgentId("agent-1".to_string()),
            state: fullerene_proto::messages::TaskState::Running,
            seq: 1,
            reason: None,
            message: String::new(),
            timestamp_ms: 0,
        };
        links.push_update(&update("fw-2"));
        links.push_update(&update("fw-1"));
        assert!(
            matches!(rx.try_recv(), Ok(MasterToFramework::Update(u)) if u.framework_id.0 == "fw-1")
        );
        assert!(rx.try_recv().is_err());
    }
}
