//! Timeouts and limits of the transport.

use std::sync::Arc;
use std::time::Duration;

use quinn::{IdleTimeout, VarInt};

use crate::framing::MAX_FRAME_BYTES;
use crate::TransportError;
use fullerene_proto::codec::MAX_MESSAGE_BYTES;

/// Timeouts and limits of a [`Server`](crate::Server) or [`Client`](crate::Client).
///
/// The defaults notice a dead peer within half a second, as fast as the masters' Raft notices
/// a dead leader (elections after 250-500 ms): an agent or a framework whose leader died is
/// back on the new leader within a second (`fullerene chaos run` measures it):
///
/// | field | default | why |
/// | --- | --- | --- |
/// | `keep_alive_interval` | 100 ms | five keep-alives per idle period, so four lost packets in a row do not kill a live connection |
/// | `idle_timeout` | 500 ms | a peer that has sent nothing (keep-alives included) for this long is dead |
/// | `handshake_timeout` | 5 s | bounds the TLS handshake and the `SessionOpen` exchange; longer than `idle_timeout` so that a dead peer shows up as a timeout of the connection, and a slow but live one still gets through |
/// | `max_frame_bytes` | 4 MiB ([`MAX_FRAME_BYTES`]) | one message at its largest |
/// | `max_concurrent_sessions` | 100 | quinn's default stream limit; a connection needs a handful |
/// | `max_pending_handshakes` | 256 | bounds the memory strangers can make a server spend before they are authenticated |
///
/// QUIC uses the smaller of the two sides' idle timeouts, so the shorter setting wins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// How often an otherwise silent connection sends a keep-alive. Must be shorter than
    /// `idle_timeout`.
    pub keep_alive_interval: Duration,
    /// How long a connection may receive nothing before it is declared dead.
    pub idle_timeout: Duration,
    /// How long a handshake, or a session's `SessionOpen`/`SessionOpenReply` exchange, may take.
    pub handshake_timeout: Duration,
    /// The largest frame this side accepts (and sends). A larger incoming frame closes its stream
    /// with [`StreamErrorCode::FrameTooLarge`](crate::StreamErrorCode::FrameTooLarge).
    pub max_frame_bytes: usize,
    /// How many sessions the peer may have open on one connection at once.
    pub max_concurrent_sessions: u32,
    /// Server only: how many connections may be mid-handshake at once; more are refused.
    pub max_pending_handshakes: usize,
}

/// The default `keep_alive_interval` (see [`TransportConfig`]).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_millis(100);

/// The default `idle_timeout` (see [`TransportConfig`]).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_millis(500);

/// The round-trip time assumed before one is measured. QUIC never times a connection out
/// sooner than three probe timeouts (RFC 9000 §10.1), and quinn's default guess of 333 ms
/// makes that about three seconds: a client trying a master that just died would wait that long
/// before trying the next. 50 ms is a LAN's guess; a longer real RTT costs a few early
/// retransmissions of the first packets, nothing more.
const INITIAL_RTT: Duration = Duration::from_millis(50);

impl Default for TransportConfig {
    fn default() -> TransportConfig {
        TransportConfig {
            keep_alive_interval: DEFAULT_KEEP_ALIVE,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            handshake_timeout: Duration::from_secs(5),
            max_frame_bytes: MAX_FRAME_BYTES,
            max_concurrent_sessions: 100,
            max_pending_handshakes: 256,
        }
    }
}

impl TransportConfig {
    /// Checks that the settings are usable together.
    pub fn validate(&self) -> Result<(), TransportError> {
        let invalid = |reason: String| Err(TransportError::InvalidConfig(reason));
        if self.keep_alive_interval.is_zero() {
            return invalid("keep_alive_interval must be positive".into());
        }
        if self.keep_alive_interval >= self.idle_timeout {
            return invalid(format!(
                "keep_alive_interval ({:?}) must be shorter than idle_timeout ({:?}), \
                 or a live but quiet connection would time out",
                self.keep_alive_interval, self.idle_timeout
            ));
        }
        if IdleTimeout::try_from(self.idle_timeout).is_err() {
            return invalid(format!("idle_timeout {:?} is too large", self.idle_timeout));
        }
        if self.handshake_timeout.is_zero() {
            return invalid("handshake_timeout must be positive".into());
        }
        if self.max_frame_bytes == 0 || self.max_frame_bytes > MAX_MESSAGE_BYTES {
            return invalid(format!(
                "max_frame_bytes must be between 1 and {MAX_MESSAGE_BYTES} \
                 (a frame holds one message, and no message is larger)"
            ));
        }
        if self.max_concurrent_sessions == 0 {
            return invalid("max_concurrent_sessions must be positive".into());
        }
        if self.max_pending_handshakes == 0 {
            return invalid("max_pending_handshakes must be positive".into());
        }
        Ok(())
    }

    /// The quinn transport parameters these settings imply.
    pub(crate) fn quinn_transport(&self) -> Result<Arc<quinn::TransportConfig>, TransportError> {
        self.validate()?;
        let idle = IdleTimeout::try_from(self.idle_timeout).map_err(|_| {
            TransportError::InvalidConfig(format!(
                "idle_timeout {:?} is too large",
                self.idle_timeout
            ))
        })?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .initial_rtt(INITIAL_RTT)
            .keep_alive_interval(Some(self.keep_alive_interval))
            .max_idle_timeout(Some(idle))
            .max_concurrent_bidi_streams(VarInt::from_u32(self.max_concurrent_sessions))
            // Sessions are bidirectional streams only; refusing the rest narrows what a peer can
            // make this side buffer.
            .max_concurrent_uni_streams(VarInt::from_u32(0))
            .datagram_receive_buffer_size(None);
        Ok(Arc::new(transport))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_notice_a_dead_peer_within_three_seconds() {
        let config = TransportConfig::default();
        config.validate().unwrap();
        assert!(config.idle_timeout <= Duration::from_secs(3));
        assert!(config.quinn_transport().is_ok());
    }

    #[test]
    fn inconsistent_settings_are_refused() {
        let base = TransportConfig::default();
        let cases = [
            TransportConfig {
                keep_alive_interval: Duration::from_secs(3),
                ..base.clone()
            },
            TransportConfig {
                keep_alive_interval: Duration::ZERO,
                ..base.clone()
            },
            TransportConfig {
                max_frame_bytes: 0,
                ..base.clone()
            },
            TransportConfig {
                max_frame_bytes: MAX_MESSAGE_BYTES + 1,
                ..base.clone()
            },
            TransportConfig {
                handshake_timeout: Duration::ZERO,
                ..base.clone()
            },
            TransportConfig {
                max_concurrent_sessions: 0,
                ..base.clone()
            },
            TransportConfig {
                max_pending_handshakes: 0,
                ..base.clone()
            },
            TransportConfig {
                idle_timeout: Duration::from_secs(u64::MAX),
                ..base.clone()
            },
        ];
        for config in cases {
            assert!(
                matches!(config.validate(), Err(TransportError::InvalidConfig(_))),
                "{config:?} was accepted"
            );
        }
    }
}
