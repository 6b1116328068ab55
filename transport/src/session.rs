//! Sessions and the framed streams they are made of.
//!
//! A session is one bidirectional QUIC stream. The client opens it and sends a
//! [`SessionOpen`] frame; the master checks that the role in the client's certificate may open
//! that kind of session ([`role_may_open`]) and answers [`SessionOpenReply::Accepted`] or
//! [`SessionOpenReply::Refused`] with an `Unauthorized` [`WireError`], after which a refused
//! stream is closed. From then on each direction carries frames of the session's message types
//! (see [`fullerene_proto::messages`]).
//!
//! Frames are those of [`crate::framing`]: a 4-byte big-endian length, then one message encoded
//! by [`fullerene_proto::codec`]. When a received frame is over the limit, fails to decode, or is cut
//! short, the receiver stops its half of the stream with a [`StreamErrorCode`] and returns an
//! error naming the failure; the sender's next write (or [`FramedSend::stopped`]) reports that
//! code. Only that stream is affected: the connection's other sessions go on.

use std::fmt;

use quinn::{ReadError, RecvStream, SendStream, StoppedError, VarInt, WriteError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::framing::{self, FrameError};
use crate::identity::{PeerIdentity, Role};
use crate::TransportError;
use fullerene_proto::messages::{ErrorCode, SessionOpen, SessionOpenReply, WireError};

/// Application error codes carried by QUIC `STOP_SENDING` and `RESET_STREAM` frames on session
/// streams. The numeric values are part of the wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamErrorCode {
    /// `0`: the stream was dropped without an error (quinn's code for a dropped stream).
    Closed,
    /// `1`: a frame announced a length over the receiver's `max_frame_bytes`.
    FrameTooLarge,
    /// `2`: a frame did not decode as the expected message, or the stream ended inside a frame.
    MalformedFrame,
    /// `3`: the session was refused (the `SessionOpenReply::Refused` frame says why).
    SessionRefused,
    /// `4`: the `SessionOpen` (or its reply) did not arrive within `handshake_timeout`.
    SessionOpenTimeout,
    /// `5`: a send was abandoned by this side (e.g. [`FramedSend::reset`] on shutdown).
    Abandoned,
    /// A code this build does not know (a newer peer's).
    Unknown(u64),
}

impl StreamErrorCode {
    /// The code on the wire.
    pub fn code(self) -> u64 {
        match self {
            StreamErrorCode::Closed => 0,
            StreamErrorCode::FrameTooLarge => 1,
            StreamErrorCode::MalformedFrame => 2,
            StreamErrorCode::SessionRefused => 3,
            StreamErrorCode::SessionOpenTimeout => 4,
            StreamErrorCode::Abandoned => 5,
            StreamErrorCode::Unknown(code) => code,
        }
    }

    /// The meaning of a code received from the wire.
    pub fn from_code(code: u64) -> StreamErrorCode {
        match code {
            0 => StreamErrorCode::Closed,
            1 => StreamErrorCode::FrameTooLarge,
            2 => StreamErrorCode::MalformedFrame,
            3 => StreamErrorCode::SessionRefused,
            4 => StreamErrorCode::SessionOpenTimeout,
            5 => StreamErrorCode::Abandoned,
            other => StreamErrorCode::Unknown(other),
        }
    }

    fn var_int(self) -> VarInt {
        // Every named code is tiny; an unknown one came from a VarInt in the first place, and
        // falling back to `Abandoned` only matters if a caller invents an out-of-range code.
        VarInt::from_u64(self.code()).unwrap_or(VarInt::from_u32(5))
    }

    fn from_var_int(code: VarInt) -> StreamErrorCode {
        StreamErrorCode::from_code(code.into_inner())
    }
}

impl fmt::Display for StreamErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let meaning = match self {
            StreamErrorCode::Closed => "closed without error",
            StreamErrorCode::FrameTooLarge => "frame too large",
            StreamErrorCode::MalformedFrame => "malformed frame",
            StreamErrorCode::SessionRefused => "session refused",
            StreamErrorCode::SessionOpenTimeout => "session open timed out",
            StreamErrorCode::Abandoned => "abandoned by the sender",
            StreamErrorCode::Unknown(_) => "unknown code",
        };
        write!(f, "{meaning} (code {})", self.code())
    }
}

/// Whether a peer with `role` may open a session of `kind`: agent sessions are for agents,
/// framework sessions for frameworks, operator sessions for operators and masters (a master
/// forwards operator requests to the leader), peer (Raft) sessions for masters.
pub fn role_may_open(role: Role, kind: &SessionOpen) -> bool {
    match kind {
        SessionOpen::Agent => role == Role::Agent,
        SessionOpen::Framework => role == Role::Framework,
        SessionOpen::Operator => matches!(role, Role::Operator | Role::Master),
        SessionOpen::Peer => role == Role::Master,
    }
}

/// The refusal sent to a peer whose role may not open `kind`.
pub(crate) fn refusal(peer: &PeerIdentity, kind: &SessionOpen) -> WireError {
    WireError::new(
        ErrorCode::Unauthorized,
        format!(
            "the certificate of {peer} (role {}) does not allow a {kind:?} session",
            peer.role
        ),
    )
}

/// An open session: its kind, the peer as its certificate names it, and the two halves of its
/// stream. The halves are separate so that reading and writing can happen in different tasks.
#[derive(Debug)]
pub struct Session {
    /// What the session is for.
    pub kind: SessionOpen,
    /// Who is at the other end, from its verified certificate.
    pub peer: PeerIdentity,
    /// Frames to the peer.
    pub tx: FramedSend,
    /// Frames from the peer.
    pub rx: FramedRecv,
}

/// The sending half of a session: whole frames of serde messages.
///
/// `send` is cancel-safe in this sense: the stream never carries part of a frame followed by
/// another frame. A `send` future dropped before it completes may or may not deliver its
/// message, but never a part of it: once its frame is queued here, whatever of it is unwritten
/// goes out at the start of the next `send` (or in [`FramedSend::finish`]). Dropping the
/// `FramedSend` finishes the stream (quinn); if a cancelled frame was then only partly written,
/// the peer's `recv` reports it as [`TransportError::TruncatedFrame`], never as a message.
#[derive(Debug)]
pub struct FramedSend {
    stream: SendStream,
    limit: usize,
    /// The frame being written and how much of it is written.
    pending: Vec<u8>,
    written: usize,
}

impl FramedSend {
    pub(crate) fn new(stream: SendStream, limit: usize) -> FramedSend {
        FramedSend {
            stream,
            limit,
            pending: Vec::new(),
            written: 0,
        }
    }

    /// Encodes `message` and writes it as one frame.
    ///
    /// Fails with [`TransportError::FrameTooLarge`] (nothing sent) if the encoded message is
    /// over this side's `max_frame_bytes`, and with [`TransportError::StreamStopped`] if the
    /// peer stopped the stream, e.g. because the frame was over *its* limit.
    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), TransportError> {
        self.flush_pending().await?;
        let mut frame = Vec::new();
        framing::send(&mut frame, message, self.limit)
            .await
            .map_err(frame_error)?;
        self.pending = frame;
        self.written = 0;
        self.flush_pending().await
    }

    /// Writes what remains of a frame whose `send` was cancelled, then finishes the stream: the
    /// peer's `recv` returns `Ok(None)` after the last frame.
    pub async fn finish(&mut self) -> Result<(), TransportError> {
        self.flush_pending().await?;
        self.stream
            .finish()
            .map_err(|_| TransportError::StreamClosed)
    }

    /// Abandons the stream: unsent data is dropped and the peer's `recv` fails with
    /// [`TransportError::StreamReset`] carrying `code`.
    pub fn reset(&mut self, code: StreamErrorCode) {
        self.pending.clear();
        self.written = 0;
        // Fails only if the stream is already finished or reset, which is what was asked.
        let _ = self.stream.reset(code.var_int());
    }

    /// Waits until the peer stops the stream (`Some(code)`), or has received everything after
    /// [`FramedSend::finish`] (`None`).
    pub async fn stopped(&self) -> Result<Option<StreamErrorCode>, TransportError> {
        match self.stream.stopped().await {
            Ok(code) => Ok(code.map(StreamErrorCode::from_var_int)),
            Err(StoppedError::ConnectionLost(e)) => Err(TransportError::ConnectionLost(e)),
            Err(StoppedError::ZeroRttRejected) => Err(TransportError::StreamClosed),
        }
    }

    /// The largest frame this half sends.
    pub fn max_frame_bytes(&self) -> usize {
        self.limit
    }

    /// Writes a frame whose length prefix announces `announced` bytes followed by `body`
    /// (which may be shorter), past this half's limit: what a hostile peer sends, for tests
    /// and the load test to show that a receiver refuses it without reading it.
    #[cfg(feature = "testkit")]
    pub async fn send_hostile_frame(
        &mut self,
        announced: u32,
        body: &[u8],
    ) -> Result<(), TransportError> {
        self.flush_pending().await?;
        let mut frame = announced.to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        self.pending = frame;
        self.written = 0;
        self.flush_pending().await
    }

    async fn flush_pending(&mut self) -> Result<(), TransportError> {
        while self.written < self.pending.len() {
            // `write` is cancel-safe (quinn): progress is recorded after each call.
            let n = self
                .stream
                .write(&self.pending[self.written..])
                .await
                .map_err(write_error)?;
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Ok(())
    }
}

/// The receiving half of a session: whole frames decoded as serde messages.
///
/// `recv` is cancel-safe: bytes of a partly received frame are kept and the next `recv` goes on
/// from them, so it may be used in `tokio::select!`. The buffer never holds more than one frame,
/// and a frame's length is checked against the limit before its body is read.
#[derive(Debug)]
pub struct FramedRecv {
    stream: RecvStream,
    limit: usize,
    /// The current frame so far, length prefix included.
    buffer: Vec<u8>,
    /// The current frame's body length, once its prefix is in.
    body_len: Option<usize>,
    /// Set when this side stopped the stream after a bad frame.
    failed: Option<StreamErrorCode>,
}

const PREFIX_LEN: usize = 4;

impl FramedRecv {
    pub(crate) fn new(stream: RecvStream, limit: usize) -> FramedRecv {
        FramedRecv {
            stream,
            limit,
            buffer: Vec::new(),
            body_len: None,
            failed: None,
        }
    }

    /// Reads the next frame and decodes it as a `T`. `Ok(None)` when the peer finished the
    /// stream cleanly between frames.
    ///
    /// A frame over `max_frame_bytes`, one that does not decode as a `T`, or a stream that ends
    /// inside a frame stops the stream (codes [`StreamErrorCode::FrameTooLarge`] and
    /// [`StreamErrorCode::MalformedFrame`]) and returns the matching error; later calls return
    /// [`TransportError::StreamFailed`].
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, TransportError> {
        if let Some(code) = self.failed {
            return Err(TransportError::StreamFailed(code));
        }
        loop {
            let frame_len = match self.body_len {
                None => PREFIX_LEN,
                Some(body_len) => PREFIX_LEN + body_len,
            };
            if self.buffer.len() == frame_len {
                match self.body_len {
                    None => {
                        let mut prefix = [0u8; PREFIX_LEN];
                        prefix.copy_from_slice(&self.buffer);
                        let body_len = u32::from_be_bytes(prefix) as usize;
                        if body_len > self.limit {
                            return Err(self.fail(
                                StreamErrorCode::FrameTooLarge,
                                TransportError::FrameTooLarge {
                                    len: body_len,
                                    limit: self.limit,
                                },
                            ));
                        }
                        self.body_len = Some(body_len);
                    }
                    Some(_) => {
                        let frame = std::mem::take(&mut self.buffer);
                        self.body_len = None;
                        // The frame is complete; `framing` decodes it so that the wire format
                        // has one implementation. (It cannot see an empty input: the frame
                        // holds at least its prefix.)
                        return match framing::recv(&mut frame.as_slice(), self.limit).await {
                            Ok(Some(message)) => Ok(Some(message)),
                            Ok(None) => Err(self.fail(
                                StreamErrorCode::MalformedFrame,
                                TransportError::TruncatedFrame {
                                    expected: frame_len,
                                    got: frame.len(),
                                },
                            )),
                            Err(e) => {
                                let code = match e {
                                    FrameError::TooLarge { .. } => StreamErrorCode::FrameTooLarge,
                                    _ => StreamErrorCode::MalformedFrame,
                                };
                                Err(self.fail(code, frame_error(e)))
                            }
                        };
                    }
                }
                continue;
            }
            let wanted = frame_len - self.buffer.len();
            // Reading at most the rest of this frame keeps the buffer to one frame; `read_chunk`
            // is cancel-safe, and the buffer is updated only after it returns.
            match self.stream.read_chunk(wanted, true).await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk.bytes),
                Ok(None) if self.buffer.is_empty() => return Ok(None),
                Ok(None) => {
                    let got = self.buffer.len();
                    return Err(self.fail(
                        StreamErrorCode::MalformedFrame,
                        TransportError::TruncatedFrame {
                            expected: frame_len,
                            got,
                        },
                    ));
                }
                Err(e) => return Err(read_error(e)),
            }
        }
    }

    /// Tells the peer to stop sending, with `code`; later `recv`s fail.
    pub fn stop(&mut self, code: StreamErrorCode) {
        self.failed.get_or_insert(code);
        // Fails only if the stream is already closed, in which case there is nothing to stop.
        let _ = self.stream.stop(code.var_int());
    }

    /// The largest frame this half accepts.
    pub fn max_frame_bytes(&self) -> usize {
        self.limit
    }

    fn fail(&mut self, code: StreamErrorCode, error: TransportError) -> TransportError {
        tracing::debug!(%error, %code, "stopping a session stream after a bad frame");
        self.buffer = Vec::new();
        self.body_len = None;
        self.stop(code);
        error
    }
}

fn frame_error(error: FrameError) -> TransportError {
    match error {
        FrameError::TooLarge { len, limit } => TransportError::FrameTooLarge { len, limit },
        FrameError::Truncated { expected, got } => TransportError::TruncatedFrame { expected, got },
        FrameError::Codec(e) => TransportError::MalformedFrame(e),
        // Only reachable with in-memory buffers, which do not fail; kept distinct anyway.
        FrameError::Io(e) => TransportError::MalformedFrame(
            fullerene_proto::codec::CodecError::Encode(format!("in-memory frame I/O: {e}")),
        ),
    }
}

fn write_error(error: WriteError) -> TransportError {
    match error {
        WriteError::Stopped(code) => {
            TransportError::StreamStopped(StreamErrorCode::from_var_int(code))
        }
        WriteError::ConnectionLost(e) => TransportError::ConnectionLost(e),
        WriteError::ClosedStream | WriteError::ZeroRttRejected => TransportError::StreamClosed,
    }
}

fn read_error(error: ReadError) -> TransportError {
    match error {
        ReadError::Reset(code) => TransportError::StreamReset(StreamErrorCode::from_var_int(code)),
        ReadError::ConnectionLost(e) => TransportError::ConnectionLost(e),
        ReadError::ClosedStream | ReadError::IllegalOrderedRead | ReadError::ZeroRttRejected => {
            TransportError::StreamClosed
        }
    }
}

/// The client side of the open exchange on a fresh stream: send `kind`, read the reply.
pub(crate) async fn client_open(
    kind: &SessionOpen,
    tx: &mut FramedSend,
    rx: &mut FramedRecv,
) -> Result<(), TransportError> {
    tx.send(kind).await?;
    match rx.recv::<SessionOpenReply>().await? {
        Some(SessionOpenReply::Accepted) => Ok(()),
        Some(SessionOpenReply::Refused(error)) => Err(TransportError::SessionRefused(error)),
        None => Err(TransportError::SessionNotOpened),
    }
}

/// The server side of the open exchange: read the `SessionOpen`, check the peer's role, reply.
/// On refusal the reply is sent, the stream closed both ways, and the refusal returned.
pub(crate) async fn server_open(
    peer: &PeerIdentity,
    tx: &mut FramedSend,
    rx: &mut FramedRecv,
) -> Result<SessionOpen, TransportError> {
    let kind = rx
        .recv::<SessionOpen>()
        .await?
        .ok_or(TransportError::SessionNotOpened)?;
    if role_may_open(peer.role, &kind) {
        tx.send(&SessionOpenReply::Accepted).await?;
        return Ok(kind);
    }
    let error = refusal(peer, &kind);
    tx.send(&SessionOpenReply::Refused(error.clone())).await?;
    tx.finish().await?;
    rx.stop(StreamErrorCode::SessionRefused);
    Err(TransportError::SessionRefused(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for code in [
            StreamErrorCode::Closed,
            StreamErrorCode::FrameTooLarge,
            StreamErrorCode::MalformedFrame,
            StreamErrorCode::SessionRefused,
            StreamErrorCode::SessionOpenTimeout,
            StreamErrorCode::Abandoned,
            StreamErrorCode::Unknown(77),
        ] {
            assert_eq!(StreamErrorCode::from_code(code.code()), code);
            assert_eq!(StreamErrorCode::from_var_int(code.var_int()), code);
        }
        assert_eq!(StreamErrorCode::FrameTooLarge.code(), 1);
        assert_eq!(
            StreamErrorCode::FrameTooLarge.to_string(),
            "frame too large (code 1)"
        );
    }

    #[test]
    fn each_session_kind_admits_exactly_its_roles() {
        use Role::*;
        let allowed = |kind: SessionOpen| -> Vec<Role> {
            Role::ALL
                .into_iter()
                .filter(|role| role_may_open(*role, &kind))
                .collect()
        };
        assert_eq!(allowed(SessionOpen::Agent), vec![Agent]);
        assert_eq!(allowed(SessionOpen::Framework), vec![Framework]);
        assert_eq!(allowed(SessionOpen::Operator), vec![Master, Operator]);
        assert_eq!(allowed(SessionOpen::Peer), vec![Master]);
    }
}
