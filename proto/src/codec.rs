//! The message codec: a version byte, then bincode 2 (serde) with an explicit size limit.
//!
//! Decoding is strict: an unknown version, a payload over the limit, malformed contents or bytes
//! left over after the message are all errors, each with its own [`CodecError`] variant. bincode is
//! used nowhere else in the project, so the wire format can change here alone.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The wire format version, the first byte of every encoded message.
pub const WIRE_VERSION: u8 = 1;

/// The largest encoded message, version byte included (4 MiB). Large enough for a batch of a
/// thousand offers; small enough that a hostile peer cannot make a process allocate much.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The largest value [`encode_large`] and [`decode_large`] accept (1 GiB): for state that is
/// stored or sent in [`MAX_MESSAGE_BYTES`]-sized pieces and reassembled, such as the
/// allocation accounting of a large cluster's snapshot.
pub const MAX_LARGE_BYTES: usize = 1 << 30;

fn config<const LIMIT: usize>() -> Configuration<LittleEndian, Varint, Limit<LIMIT>> {
    bincode::config::standard().with_limit::<LIMIT>()
}

/// Why a message could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Zero bytes: not even a version byte.
    #[error("empty message: expected a version byte")]
    Empty,
    /// A version this build does not speak.
    #[error("unsupported wire version {found} (this build speaks version {expected})")]
    UnsupportedVersion {
        /// The version byte received.
        found: u8,
        /// The version this build speaks.
        expected: u8,
    },
    /// The message is larger than [`MAX_MESSAGE_BYTES`].
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Its size (or a lower bound of it).
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes do not form a valid message of the expected type.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A valid message followed by extra bytes.
    #[error("trailing bytes: message ended at byte {consumed} of {len}")]
    TrailingBytes {
        /// Bytes the message used (version byte included).
        consumed: usize,
        /// Bytes received.
        len: usize,
    },
    /// The value could not be encoded (a serde error in a type that cannot be represented).
    #[error("cannot encode message: {0}")]
    Encode(String),
}

/// Encodes `message` as version byte + bincode.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, CodecError> {
    encode_limited::<T, MAX_MESSAGE_BYTES>(message)
}

/// Decodes one message of type `T` that must span `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    decode_limited::<T, MAX_MESSAGE_BYTES>(bytes)
}

/// [`encode`] with the [`MAX_LARGE_BYTES`] limit, for values the caller splits into pieces.
pub fn encode_large<T: Serialize>(message: &T) -> Result<Vec<u8>, CodecError> {
    encode_limited::<T, MAX_LARGE_BYTES>(message)
}

/// [`encode_large`] appending to `out` (a caller that frames many values into one buffer saves
/// copying each); returns the bytes appended. On an error `out` is left as it was.
pub fn encode_large_into<T: Serialize>(
    message: &T,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    append_limited::<T, MAX_LARGE_BYTES>(message, out)
}

/// [`decode`] with the [`MAX_LARGE_BYTES`] limit, for values reassembled from pieces that
/// were each checked against [`MAX_MESSAGE_BYTES`].
pub fn decode_large<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    decode_limited::<T, MAX_LARGE_BYTES>(bytes)
}

/// The size [`encode`] would give `message` (version byte included), computed without
/// encoding it into memory: what a sender needs to cut a long list into messages that fit.
pub fn encoded_size<T: Serialize>(message: &T) -> Result<usize, CodecError> {
    /// Counts the bytes the encoder writes, and keeps none.
    struct Counter<'a>(&'a mut usize);
    impl bincode::enc::write::Writer for Counter<'_> {
        fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
            *self.0 += bytes.len();
            Ok(())
        }
    }
    let mut size = 1;
    bincode::serde::encode_into_writer(message, Counter(&mut size), config::<MAX_LARGE_BYTES>())
        .map_err(|e| CodecError::Encode(e.to_string()))?;
    Ok(size)
}

fn encode_limited<T: Serialize, const LIMIT: usize>(message: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    append_limited::<T, LIMIT>(message, &mut out)?;
    Ok(out)
}

/// Appends `message` (version byte + bincode) to `out`, written there directly: no
/// intermediate buffer to copy from. On an error `out` is left as it was.
fn append_limited<T: Serialize, const LIMIT: usize>(
    message: &T,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    /// Appends what the encoder writes to a vector.
    struct Append<'a>(&'a mut Vec<u8>);
    impl bincode::enc::write::Writer for Append<'_> {
        fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
            self.0.extend_from_slice(bytes);
            Ok(())
        }
    }
    let start = out.len();
    out.push(WIRE_VERSION);
    // bincode's limit bounds only decoding; the size check below bounds encoding.
    let encoded = bincode::serde::encode_into_writer(message, Append(out), config::<LIMIT>());
    let size = out.len() - start;
    let error = match encoded {
        Err(e) => CodecError::Encode(e.to_string()),
        Ok(()) if size > LIMIT => CodecError::TooLarge { size, limit: LIMIT },
        Ok(()) => return Ok(size),
    };
    out.truncate(start);
    Err(error)
}

fn decode_limited<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != WIRE_VERSION {
        return Err(CodecError::UnsupportedVersion {
            found: version,
            expected: WIRE_VERSION,
        });
    }
    if bytes.len() > LIMIT {
        return Err(CodecError::TooLarge {
            size: bytes.len(),
            limit: LIMIT,
        });
    }
    let (message, consumed) =
        bincode::serde::decode_from_slice(body, config::<LIMIT>()).map_err(|e| match e {
            // The frame itself is within the limit (checked above): a length or count inside
            // it claims more, which no valid message of this size can.
            bincode::error::DecodeError::LimitExceeded => CodecError::Malformed(format!(
                "a length or count inside claims more than the {LIMIT}-byte message limit"
            )),
            other => CodecError::Malformed(other.to_string()),
        })?;
    if consumed != body.len() {
        return Err(CodecError::TrailingBytes {
            consumed: consumed + 1,
            len: bytes.len(),
        });
    }
    Ok(message)
}
