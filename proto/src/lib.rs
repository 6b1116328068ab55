//! Fullerene's wire protocol.
//!
//! Every message that crosses a process boundary is a type here ([`messages`]); it is encoded
//! by [`codec`] (a version byte, then bincode 2 with a size limit, decoded strictly) and carried
//! in length-prefixed frames ([`framing`]) on mutual-TLS QUIC streams ([`transport`]). Bad input
//! gives a typed error, never a panic (DESIGN.md, principle 3).
//!
//! [`resources`] (the multi-resource amounts every other crate computes with) and [`ids`] (the
//! identifier newtypes) re-export their definitions from `fullerene_scheduling`, which the
//! allocator and the policies share without the rest of the protocol.

#![warn(missing_docs)]

pub mod certs;
pub mod codec;
pub mod framing;
pub mod ids;
pub mod messages;
pub mod resources;
pub mod time;
pub mod transport;

#[cfg(test)]
mod proptests;

pub use ids::{AgentId, FrameworkId, MasterId, OfferId, TaskId};
pub use resources::{ResourceKind, ResourceVec, Resources, NUM_RESOURCES};
pub use time::{Now, Time};
