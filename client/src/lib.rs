//! The client side of Fullerene: how agents, framework drivers and operators reach the leading
//! master.
//!
//! Any master may be contacted; followers redirect to the leader. Every client follows the
//! leader the same way:
//!
//! - [`follow`]: the sans-IO decisions: which master to try next and when, whether a redirect
//!   is followed, the backoff with jitter, masters passed over after they failed. The agent's
//!   session, the framework driver's core and the operator client all ask a [`Follower`];
//! - [`link`]: connecting to one master and opening a session of a given kind within a time
//!   limit;
//! - [`session`]: the [`LeaderSession`], the thin tokio shell that carries out a follower's
//!   decisions for a session that lasts: it joins (sends the caller's hello and reads the
//!   answer), follows redirects, backs off, and replays what the caller says is
//!   unacknowledged after each join; [`agent`] is the agent's kind of session;
//! - [`operator`]: the [`OperatorClient`], which sends each operator request to the leader
//!   within a deadline and never sends a non-idempotent request twice;
//! - [`append_log`]: files of lines appended as things happen, read back after a crash;
//! - [`event_log`]: what agents and frameworks did, one JSON line per event, for tests of the
//!   whole cluster (`fullerene chaos run`) and audits.

#![warn(missing_docs)]

pub mod agent;
pub mod append_log;
pub mod event_log;
pub mod follow;
pub mod link;
pub mod operator;
pub mod session;

pub use agent::{AgentSession, Registered};
pub use follow::{Attempt, FollowConfig, Follower, NoMasters, Pacing};
pub use link::{open, Link, OpenError};
pub use operator::{OperatorClient, OperatorClientError};
pub use session::{
    Answer, Handshake, LeaderSession, SendError, SessionConfig, SessionEvent,
    DEFAULT_OUTBOX_CAPACITY,
};
