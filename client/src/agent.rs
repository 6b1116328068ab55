//! The agent's kind of session: `Register`, answered by `Registered`.

use std::time::Duration;

use fullerene_proto::ids::TaskKey;
use fullerene_proto::messages::{AgentToMaster, MasterToAgent, SessionOpen};

use crate::session::{Answer, Handshake};

/// The agent's [`Handshake`]: the hello is `Register`; `Registered` joins, `Redirect` points to
/// the leader and `Error` refuses.
#[derive(Debug)]
pub struct AgentSession;

/// What `Registered` carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// How often the agent heartbeats, as the master says.
    pub heartbeat_interval: Duration,
    /// Silence after which the master declares the agent lost.
    pub lost_after: Duration,
    /// Tasks the master marked lost that the agent must kill if it still runs them.
    pub kill: Vec<TaskKey>,
}

impl Handshake for AgentSession {
    type Up = AgentToMaster;
    type Down = MasterToAgent;
    type Welcome = Registered;
    const KIND: SessionOpen = SessionOpen::Agent;

    fn answer(message: MasterToAgent) -> Answer<Registered, MasterToAgent> {
        match message {
            MasterToAgent::Registered {
                agent_id: _,
                heartbeat_interval_ms,
                lost_after_ms,
                kill,
            } => Answer::Joined(Registered {
                heartbeat_interval: Duration::from_millis(heartbeat_interval_ms),
                lost_after: Duration::from_millis(lost_after_ms),
                kill,
            }),
            MasterToAgent::Redirect(redirect) => Answer::Redirect(redirect.leader),
            MasterToAgent::Error(error) => Answer::Refused(error),
            other => Answer::Other(other),
        }
    }
}
