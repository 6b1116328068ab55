//! Fullerene's wire protocol.
//!
//! Every message that crosses a process boundary is a type here ([`messages`]); it is encoded
//! by [`codec`] (a version byte, then bincode 2 with a size limit, decoded strictly). Bad input
//! gives a typed error, never a panic (DESIGN.md, principle 3). The crate holds the wire types
//! and codec only, with no I/O dependency: the frames on streams, the mutual-TLS QUIC transport
//! and the certificates are `fullerene-transport`'s.
//!
//! [`jobs`] holds what frameworks tell the masters of their DAG jobs (stages, edges, outcome),
//! which the masters keep for operators.
//!
//! [`http`] holds the JSON documents of the masters' HTTP API, the one interface that is not
//! framed by the codec.
//!
//! [`resources`] (the multi-resource amounts every other crate computes with) and [`ids`] (the
//! identifier newtypes) re-export their definitions from `fullerene_scheduling`, which the
//! allocator and the policies share without the rest of the protocol.

#![warn(missing_docs)]

pub mod codec;
pub mod http;
pub mod ids;
pub mod jobs;
pub mod limits;
pub mod messages;
pub mod reservations;
pub mod resources;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod time;

#[cfg(test)]
mod proptests;

pub use ids::{AgentId, FrameworkId, MasterId, OfferId, TaskId, TaskKey};
pub use resources::{ResourceKind, ResourceVec, Resources, NUM_RESOURCES};
pub use time::{Now, Time};
