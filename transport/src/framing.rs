//! Length-prefixed framing on byte streams (QUIC streams in production).
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of one encoded message
//! ([`fullerene_proto::codec`]). The reader checks the length against its limit *before* reading or
//! allocating the body, so a peer cannot make it buffer more than the limit.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use fullerene_proto::codec::{self, CodecError, MAX_MESSAGE_BYTES};

/// Default frame limit: one message at its largest.
pub const MAX_FRAME_BYTES: usize = MAX_MESSAGE_BYTES;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed.
    #[error("stream I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The announced (or offered) frame is larger than the limit; nothing of its body was read.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame: {got} of {expected} bytes")]
    Truncated {
        /// The bytes expected (length prefix included).
        expected: usize,
        /// The bytes received.
        got: usize,
    },
    /// The frame's payload is not a valid message.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// Writes one frame holding `payload`.
pub async fn write_frame<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    payload: &[u8],
    limit: usize,
) -> Result<(), FrameError> {
    if payload.len() > limit || payload.len() > u32::MAX as usize {
        return Err(FrameError::TooLarge {
            len: payload.len(),
            limit,
        });
    }
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    writer.write_all(&buf).await?;
    Ok(())
}

/// Reads one frame. `Ok(None)` when the stream ends cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
    limit: usize,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        let n = reader.read(&mut prefix[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated { expected: 4, got })
            };
        }
        got += n;
    }
    let len = u32::from_be_bytes(prefix) as usize;
    if len > limit {
        return Err(FrameError::TooLarge { len, limit });
    }
    let mut body = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        let n = reader.read(&mut body[filled..]).await?;
        if n == 0 {
            return Err(FrameError::Truncated {
                expected: 4 + len,
                got: 4 + filled,
            });
        }
        filled += n;
    }
    Ok(Some(body))
}

/// Encodes `message` and writes it as one frame.
pub async fn send<W, T>(writer: &mut W, message: &T, limit: usize) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin + ?Sized,
    T: Serialize,
{
    let bytes = codec::encode(message)?;
    write_frame(writer, &bytes, limit).await
}

/// Reads one frame and decodes it as a `T`. `Ok(None)` at a clean end of stream.
pub async fn recv<R, T>(reader: &mut R, limit: usize) -> Result<Option<T>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
    T: DeserializeOwned,
{
    match read_frame(reader, limit).await? {
        Some(bytes) => Ok(Some(codec::decode(&bytes)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_end_cleanly() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            send(&mut a, &("hello".to_string(), 7u32), 1024)
                .await
                .unwrap();
            send(&mut a, &vec![1u8; 300], 1024).await.unwrap();
        });
        let first: (String, u32) = recv(&mut b, 1024).await.unwrap().unwrap();
        assert_eq!(first, ("hello".to_string(), 7));
        let second: Vec<u8> = recv(&mut b, 1024).await.unwrap().unwrap();
        assert_eq!(second.len(), 300);
        writer.await.unwrap();
        assert!(recv::<_, Vec<u8>>(&mut b, 1024).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn oversized_frame_is_refused_before_its_body_is_read() {
        // Only the prefix is sent: a reader that tried to read the body would hang, not error.
        let mut input: &[u8] = &(10_000u32).to_be_bytes();
        match read_frame(&mut input, 1000).await {
            Err(FrameError::TooLarge {
                len: 10_000,
                limit: 1000,
            }) => {}
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let mut sink = Vec::new();
        assert!(matches!(
            write_frame(&mut sink, &[0u8; 1001], 1000).await,
            Err(FrameError::TooLarge { .. })
        ));
        assert!(sink.is_empty());
    }

    #[tokio::test]
    async fn truncated_frames_are_errors() {
        let mut input: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame(&mut input, 1000).await,
            Err(FrameError::Truncated {
                expected: 4,
                got: 2
            })
        ));
        let mut input: &[u8] = &[0, 0, 0, 5, 1, 2];
        assert!(matches!(
            read_frame(&mut input, 1000).await,
            Err(FrameError::Truncated {
                expected: 9,
                got: 6
            })
        ));
    }
}
