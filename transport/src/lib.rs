//! The mutual-TLS QUIC transport shared by masters, agents, framework drivers and operators:
//! endpoints and sessions over quinn and rustls ([`tls`], [`identity`]), the cluster's
//! certificates ([`certs`]), and the length-prefixed framing of `fullerene-proto`'s messages on
//! streams ([`framing`]). The messages and their codec are `fullerene-proto`'s, which has no
//! I/O dependency.
//!
//! quinn 0.11 over rustls with the ring provider, passed explicitly to every config
//! ([`tls::crypto_provider`]); the process-default provider is never consulted, so a dependency
//! that pulls in aws-lc-rs can neither switch providers nor make rustls panic.
//!
//! # Who is who
//!
//! Every process holds a certificate issued by the cluster CA that names its [`Role`] and id in a
//! SAN URI `fullerene://<role>/<id>` ([`identity`]). Masters are the only servers; their
//! certificates also carry the DNS name [`MASTER_SERVER_NAME`], which every client verifies.
//! Clients must present a certificate (mutual TLS), and a server's certificate must have the
//! master role. After the handshake, [`Connection::peer`] is the identity read from the peer's
//! verified certificate: it is the only source of a peer's identity (DESIGN.md, principle 4).
//!
//! # Sessions
//!
//! A connection carries [`Session`]s, one bidirectional stream each, opened by the client with a
//! [`SessionOpen`](fullerene_proto::messages::SessionOpen) frame and admitted by the master according to
//! the client's role ([`role_may_open`]). Frames over `max_frame_bytes` or that do not decode
//! close their stream with a [`StreamErrorCode`]; the connection's other sessions go on.
//!
//! # Liveness
//!
//! Keep-alives every `keep_alive_interval` (100 ms) and an idle timeout (500 ms) make a dead peer show
//! up as [`quinn::ConnectionError::TimedOut`] within half a second; see [`TransportConfig`].
//!
//! ```no_run
//! # async fn example() -> Result<(), fullerene_transport::TransportError> {
//! use std::path::Path;
//! use fullerene_proto::messages::{AgentToMaster, SessionOpen};
//! use fullerene_transport::{Client, TlsMaterial, TransportConfig};
//!
//! let tls = TlsMaterial::load(
//!     Path::new("certs/ca.pem"),
//!     Path::new("certs/agent-1.pem"),
//!     Path::new("certs/agent-1-key.pem"),
//! )?;
//! let client = Client::new(&tls, TransportConfig::default())?;
//! let connection = client.connect("127.0.0.1:5050".parse().unwrap()).await?;
//! let mut session = connection.open_session(SessionOpen::Agent).await?;
//! session.tx.send(&AgentToMaster::Heartbeat { seq: 1 }).await?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod certs;
mod config;
mod endpoint;
mod error;
pub mod framing;
pub mod identity;
mod session;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tls;

pub use config::{TransportConfig, DEFAULT_IDLE_TIMEOUT, DEFAULT_KEEP_ALIVE};
pub use endpoint::{Client, Connection, Server, CLOSE_NORMAL, CLOSE_NO_IDENTITY};
pub use error::TransportError;
pub use identity::{IdentityError, PeerIdentity, Role};
pub use quinn::ConnectionError;
pub use session::{role_may_open, FramedRecv, FramedSend, Session, StreamErrorCode};
pub use tls::{TlsMaterial, ALPN_PROTOCOL, HTTP_ALPN_PROTOCOL, MASTER_SERVER_NAME};
