//! A light-weight agent for `fullerene bench scale`: a real mutual-TLS QUIC session with a
//! certificate of its own, through the same leader-following session the agent uses
//! ([`LeaderSession`], with its jittered backoff), and the real agent core
//! ([`AgentCore`]) deciding what to report. What it leaves out is the machine: no checkpoint
//! (records are dropped rather than written and fsynced) and no executor (a launched task is
//! reported RUNNING at once and runs until the bench ends). So it registers, heartbeats,
//! acknowledges launches with RUNNING updates and resends them until acknowledged exactly as
//! an agent would, for a few kilobytes and no disk, and ten thousand fit in one process.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fullerene_agent::core::{
    Action, AgentCore, CoreConfig, FromMaster, Outcome, Runtime, EXECUTOR_SLEEP,
};
use fullerene_client::follow::DEFAULT_PASS_OVER;
use fullerene_client::{
    AgentSession, FollowConfig, LeaderSession, Pacing, SessionConfig, SessionEvent,
};
use fullerene_proto::ids::TaskKey;
use fullerene_proto::messages::{AgentToMaster, MasterToAgent, TaskIsolation};
use fullerene_proto::resources::ResourceVec;
use fullerene_proto::time::SystemClock;
use fullerene_transport::Client;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

/// What the simulated agents did, shared with the bench.
#[derive(Debug, Default)]
pub struct SimAgentsLog {
    /// Registrations accepted (every agent, every time).
    pub joins: AtomicU64,
    /// Each registration: which agent (its index) and when.
    pub joined_at: Mutex<Vec<(usize, Instant)>>,
    /// Tasks launched on them.
    pub launched: AtomicU64,
    /// Sessions lost (the master went silent or closed them), redirects included.
    pub lost: AtomicU64,
}

impl SimAgentsLog {
    /// When every one of `agents` agents (indices `0..agents`) had registered at or after
    /// `since`: the latest of their first registrations since then, or `None` while one has
    /// not.
    pub fn all_joined_after(&self, agents: usize, since: Instant) -> Option<Instant> {
        let joined = self.joined_at.lock().ok()?;
        let mut first: Vec<Option<Instant>> = vec![None; agents];
        for (agent, at) in joined.iter().rev() {
            // Pushes from several threads may be slightly out of order: no early stop.
            if *at < since {
                continue;
            }
            if let Some(slot) = first.get_mut(*agent) {
                *slot = Some(*at);
            }
        }
        first
            .into_iter()
            .try_fold(since, |latest, at| Some(latest.max(at?)))
    }
}

/// One simulated agent.
pub struct SimAgent {
    /// Its index among the bench's agents (`agent-<index + 1>`'s certificate).
    pub index: usize,
    /// Its endpoint, with its certificate.
    pub client: Arc<Client>,
    /// The masters.
    pub masters: Vec<SocketAddr>,
    /// What it offers.
    pub resources: ResourceVec,
    /// Shared with the bench.
    pub log: Arc<SimAgentsLog>,
}

/// Far enough in the future that a simulated task never ends while the bench runs.
const NEVER_MS: u64 = u64::MAX / 4;

impl SimAgent {
    /// Runs until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let Some(agent_id) = self.client.identity().agent_id() else {
            return;
        };
        let clock = SystemClock::new();
        let mut core = AgentCore::new(CoreConfig {
            executors: [EXECUTOR_SLEEP.to_string()].into_iter().collect(),
            ..CoreConfig::new(agent_id, self.resources)
        });
        let follow = FollowConfig {
            pacing: Pacing::Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(5),
            },
            redirects_at_once: 3,
            pass_over: DEFAULT_PASS_OVER,
            seed: self.index as u64 + 1,
        };
        let Ok(mut session) = LeaderSession::<AgentSession>::new(
            Arc::clone(&self.client),
            self.masters.clone(),
            SessionConfig {
                follow,
                join_timeout: Duration::from_secs(10),
                outbox_capacity: fullerene_client::DEFAULT_OUTBOX_CAPACITY,
            },
        ) else {
            return;
        };
        let mut heartbeat: Option<tokio::time::Interval> = None;
        let mut heartbeat_seq = 0u64;
        loop {
            let beat = async {
                match heartbeat.as_mut() {
                    Some(interval) => {
                        interval.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break,
                () = beat => None,
                event = session.next() => Some(event),
            };
            let actions = match event {
                None => {
                    heartbeat_seq += 1;
                    let _ = session.send(AgentToMaster::Heartbeat { seq: heartbeat_seq });
                    continue;
                }
                Some(SessionEvent::Due) => {
                    session.attempt(AgentToMaster::Register {
                        hostname: format!("sim-{}", self.index + 1),
                        resources: core.config().total.into(),
                        attributes: Default::default(),
                        tasks: core.register_tasks(),
                        executors: vec![EXECUTOR_SLEEP.to_string()],
                        isolation: TaskIsolation::default(),
                    });
                    continue;
                }
                Some(SessionEvent::Joined { welcome, .. }) => {
                    self.log.joins.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut joined) = self.log.joined_at.lock() {
                        joined.push((self.index, Instant::now()));
                    }
                    let period = welcome
                        .heartbeat_interval
                        .clamp(Duration::from_millis(10), Duration::from_secs(3_600));
                    let mut interval =
                        tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    heartbeat = Some(interval);
                    let _ = session.replay(core.unacked().into_iter().map(AgentToMaster::Status));
                    core.registered(&welcome.kill)
                }
                Some(SessionEvent::Message(message)) => {
                    if let MasterToAgent::Launch { tasks, .. } = &message {
                        self.log
                            .launched
                            .fetch_add(tasks.len() as u64, Ordering::Relaxed);
                    }
                    match core.on_master(message, clock.now()) {
                        FromMaster::Act { actions, .. } => actions,
                        FromMaster::Redirect(redirect) => {
                            self.log.lost.fetch_add(1, Ordering::Relaxed);
                            heartbeat = None;
                            session.redirected(redirect.leader);
                            continue;
                        }
                        // The bench's agents run no sandboxes and are never asked for logs.
                        FromMaster::Error(_) | FromMaster::ReadFile(_) => continue,
                    }
                }
                Some(SessionEvent::Lost { .. }) => {
                    self.log.lost.fetch_add(1, Ordering::Relaxed);
                    heartbeat = None;
                    continue;
                }
            };
            apply(&mut core, &mut session, &clock, actions);
        }
        session.close("the bench is over");
        self.client.close();
    }
}

/// Carries out the core's actions as the agent's shell would, without a disk or processes:
/// records are dropped, a start is a task running until the bench ends, a kill ends it at once.
fn apply(
    core: &mut AgentCore,
    session: &mut LeaderSession<AgentSession>,
    clock: &SystemClock,
    actions: Vec<Action>,
) {
    let mut queue: VecDeque<Action> = actions.into();
    while let Some(action) = queue.pop_front() {
        let more = match action {
            Action::Persist(_) => continue,
            Action::Send(update) => {
                // Without a session the update waits in the core, replayed after the next join.
                let _ = session.send(AgentToMaster::Status(update));
                continue;
            }
            Action::Start { framework_id, spec } => {
                let key = TaskKey::new(framework_id, spec.id);
                let runtime = Runtime::Sleep {
                    deadline_ms: NEVER_MS,
                };
                core.started(&key, runtime, String::new(), clock.now())
            }
            Action::Kill { task, .. } => {
                core.finished(&task, Outcome::Stopped, String::new(), clock.now())
            }
        };
        for (i, action) in more.into_iter().enumerate() {
            queue.insert(i, action);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_agent_must_join_again_after_the_moment() {
        let log = SimAgentsLog::default();
        let t0 = Instant::now();
        let later = |ms| t0 + Duration::from_millis(ms);
        {
            let mut joined = log.joined_at.lock().expect("log");
            joined.extend([
                (0, t0),
                (1, t0),
                (0, later(10)),
                (1, later(30)),
                (0, later(40)),
            ]);
        }
        assert_eq!(log.all_joined_after(2, later(5)), Some(later(30)));
        assert_eq!(
            log.all_joined_after(3, later(5)),
            None,
            "agent 2 never joined"
        );
        assert_eq!(
            log.all_joined_after(2, later(35)),
            None,
            "agent 1 has not joined since"
        );
    }
}
