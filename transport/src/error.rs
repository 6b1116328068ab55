//! The transport's error type.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::identity::{IdentityError, PeerIdentity};
use crate::session::StreamErrorCode;
use fullerene_proto::codec::CodecError;
use fullerene_proto::messages::WireError;

/// Why a transport operation failed. Each variant names what failed, so that a log line is enough
/// to act on.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A certificate, key or CA file could not be read.
    #[error("cannot read {what} file {path}: {source}")]
    FileUnreadable {
        /// `CA certificate`, `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A PEM input holds nothing usable of the kind expected.
    #[error("{what} from {origin} is not usable: {reason}")]
    InvalidPem {
        /// `CA certificate`, `certificate` or `private key`.
        what: &'static str,
        /// The file it came from, or `memory`.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// A certificate does not carry a well-formed Fullerene identity.
    #[error("certificate has no usable identity: {0}")]
    NoIdentity(#[from] IdentityError),
    /// The private key does not belong to the certificate, or rustls refused the material.
    #[error("TLS configuration refused: {0}")]
    Tls(#[from] rustls::Error),
    /// Only masters accept connections; this material is someone else's.
    #[error("only a master certificate may serve connections, this one is {0}")]
    NotAMaster(PeerIdentity),
    /// The [`TransportConfig`](crate::TransportConfig) is inconsistent.
    #[error("invalid transport configuration: {0}")]
    InvalidConfig(String),
    /// The UDP socket could not be bound.
    #[error("cannot bind UDP socket on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A connection attempt could not even start (endpoint closing, bad address).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The master's address.
        addr: SocketAddr,
        /// quinn's reason.
        source: quinn::ConnectError,
    },
    /// The QUIC/TLS handshake failed: unknown CA, wrong role, no identity, unreachable peer.
    #[error("handshake with {addr} failed: {source}")]
    Handshake {
        /// The peer's address.
        addr: SocketAddr,
        /// quinn's reason (for certificate problems, the TLS alert and rustls' explanation).
        source: quinn::ConnectionError,
    },
    /// The handshake did not finish within `handshake_timeout`.
    #[error("handshake with {addr} did not finish within {timeout:?}")]
    HandshakeTimeout {
        /// The peer's address.
        addr: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
    /// The established connection closed: the peer went silent for `idle_timeout`
    /// ([`quinn::ConnectionError::TimedOut`]), closed it, or this side did.
    #[error("the connection was lost: {0}")]
    ConnectionLost(#[from] quinn::ConnectionError),
    /// The master refused the session; the [`WireError`] says why (e.g. `Unauthorized`).
    #[error("session refused: {0}")]
    SessionRefused(WireError),
    /// The `SessionOpen` or its reply did not arrive within `handshake_timeout`.
    #[error("session open exchange did not finish within {0:?}")]
    SessionOpenTimeout(Duration),
    /// The stream ended before a `SessionOpen` or its reply.
    #[error("stream ended before the session was opened")]
    SessionNotOpened,
    /// A frame is larger than the limit: an incoming one (the stream is then stopped with
    /// [`StreamErrorCode::FrameTooLarge`]) or one this side was asked to send (nothing was sent).
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// The frame's length.
        len: usize,
        /// The limit in force.
        limit: usize,
    },
    /// An incoming frame is not a valid message (the stream is then stopped with
    /// [`StreamErrorCode::MalformedFrame`]), or an outgoing message cannot be encoded.
    #[error("malformed frame: {0}")]
    MalformedFrame(CodecError),
    /// The peer finished the stream in the middle of a frame (the stream is stopped with
    /// [`StreamErrorCode::MalformedFrame`]).
    #[error("stream ended inside a frame: {got} of {expected} bytes")]
    TruncatedFrame {
        /// The bytes the frame needed (length prefix included).
        expected: usize,
        /// The bytes received.
        got: usize,
    },
    /// The peer stopped reading this stream; the code says why.
    #[error("the peer stopped the stream: {0}")]
    StreamStopped(StreamErrorCode),
    /// The peer abandoned sending on this stream; the code says why.
    #[error("the peer reset the stream: {0}")]
    StreamReset(StreamErrorCode),
    /// This side already stopped the stream after an error (reported when it happened).
    #[error("the stream was stopped here after an earlier error: {0}")]
    StreamFailed(StreamErrorCode),
    /// The stream was already finished or reset by this side.
    #[error("the stream is already closed")]
    StreamClosed,
    /// A background handshake task failed unexpectedly (a panic in quinn or rustls).
    #[error("handshake task failed: {0}")]
    HandshakeTask(String),
}
