//! Property tests of the codec over every message type: everything round-trips; arbitrary
//! bytes, and valid frames mutated byte by byte, never panic the decoder and get a typed error
//! (or decode to a message that itself round-trips).

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{decode, encode, CodecError, MAX_MESSAGE_BYTES, WIRE_VERSION};
use crate::messages::*;

/// Round trip by bytes rather than by value: floats may be NaN, which is never equal to itself,
/// and the bytes are what must survive.
fn round_trips<T: Serialize + DeserializeOwned + std::fmt::Debug>(value: &T) {
    let bytes = encode(value).expect("encode");
    assert_eq!(bytes[0], WIRE_VERSION);
    let decoded: T = decode(&bytes).expect("decode what we encoded");
    assert_eq!(encode(&decoded).expect("re-encode"), bytes, "{value:?}");
    // Strictness: one extra byte is an error, and so is any truncation.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        decode::<T>(&longer),
        Err(CodecError::TrailingBytes { .. })
    ));
    if bytes.len() > 1 {
        assert!(decode::<T>(&bytes[..bytes.len() - 1]).is_err());
    }
}

/// Decoding garbage must give a typed error (or, rarely, a valid message), never a panic, and
/// never allocate past the limit.
fn never_panics<T: DeserializeOwned>(bytes: &[u8]) {
    let _ = decode::<T>(bytes);
}

/// Calls the test-generating macro `$tests` with every message type, each with a test name.
macro_rules! every_message_type {
    ($tests:ident) => {
        $tests! {
            session_open: SessionOpen,
            session_open_reply: SessionOpenReply,
            agent_to_master: AgentToMaster,
            master_to_agent: MasterToAgent,
            framework_call: FrameworkCall,
            master_to_framework: MasterToFramework,
            operator_request: OperatorRequest,
            operator_response: OperatorResponse,
            peer_message: PeerMessage,
        }
    };
}

/// One change to an encoded frame. Positions are fractions of the body (the bytes after the
/// version byte), so that they land inside whatever frame they are applied to.
#[derive(Clone, Debug)]
enum Mutation {
    /// Flips one bit.
    FlipBit { at: f64, bit: u8 },
    /// Overwrites one byte.
    SetByte { at: f64, byte: u8 },
    /// Cuts the frame short.
    Truncate { keep: f64 },
    /// Inserts bytes.
    Insert { at: f64, bytes: Vec<u8> },
    /// Removes up to `n` bytes.
    Delete { at: f64, n: usize },
    /// Writes bincode's largest varint (a length or count of 2^64 - 1): the decoder must refuse
    /// it without allocating for it.
    HugeVarint { at: f64 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0.0..1.0f64;
    prop_oneof![
        (at.clone(), 0..8u8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        (at.clone(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte { at, byte }),
        (0.0..1.0f64).prop_map(|keep| Mutation::Truncate { keep }),
        (at.clone(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (at.clone(), 1..16usize).prop_map(|(at, n)| Mutation::Delete { at, n }),
        at.prop_map(|at| Mutation::HugeVarint { at }),
    ]
}

/// Applies `mutations` to the body of `frame`, leaving its version byte as it is, so that the
/// decoder behind the version check is what is exercised.
fn mutate(frame: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut body = frame[1..].to_vec();
    // A position within the body (or its end, for an empty one).
    let index = |body: &Vec<u8>, at: f64| ((body.len() as f64) * at) as usize;
    for m in mutations {
        match m {
            Mutation::FlipBit { at, bit } => {
                let i = index(&body, *at);
                if let Some(b) = body.get_mut(i) {
                    *b ^= 1 << bit;
                }
            }
            Mutation::SetByte { at, byte } => {
                let i = index(&body, *at);
                if let Some(b) = body.get_mut(i) {
                    *b = *byte;
                }
            }
            Mutation::Truncate { keep } => {
                let len = index(&body, *keep);
                body.truncate(len);
            }
            Mutation::Insert { at, bytes } => {
                let i = index(&body, *at);
                body.splice(i..i, bytes.iter().copied());
            }
            Mutation::Delete { at, n } => {
                let i = index(&body, *at);
                let end = (i + n).min(body.len());
                body.drain(i..end);
            }
            Mutation::HugeVarint { at } => {
                let i = index(&body, *at);
                // bincode's varint: 253 announces a u64, little endian.
                let huge = [253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
                let end = (i + huge.len()).min(body.len());
                body.splice(i..end, huge);
            }
        }
    }
    let mut out = vec![frame[0]];
    out.extend(body);
    out
}

/// What decoding a mutated frame may give: a message that round-trips itself, or an error
/// about the body (the version byte was left intact, so never `Empty` or `UnsupportedVersion`).
fn decodes_or_names_the_damage<T: Serialize + DeserializeOwned + std::fmt::Debug>(
    value: &T,
    mutations: &[Mutation],
) -> Result<(), TestCaseError> {
    let frame = encode(value).expect("encode");
    let mutated = mutate(&frame, mutations);
    match decode::<T>(&mutated) {
        Ok(decoded) => {
            let again = encode(&decoded).expect("a decoded message encodes");
            let redecoded: T = decode(&again).expect("and decodes");
            prop_assert_eq!(encode(&redecoded).expect("re-encode"), again);
        }
        Err(CodecError::Malformed(_) | CodecError::TrailingBytes { .. }) => {}
        Err(CodecError::TooLarge { size, limit }) => {
            // Only for a frame that is itself too large, never for what it claims inside.
            prop_assert!(size > limit && mutated.len() == size, "{size} / {limit}");
        }
        Err(other) => prop_assert!(false, "unexpected error for a mutated body: {other:?}"),
    }
    Ok(())
}

macro_rules! mutated_frame_tests {
    ($($name:ident: $ty:ty),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(
                    value in any::<$ty>(),
                    mutations in proptest::collection::vec(mutation(), 1..4),
                ) {
                    decodes_or_names_the_damage(&value, &mutations)?;
                }
            )*
        }
    };
}

mod mutated_frames {
    use super::*;

    every_message_type!(mutated_frame_tests);
}

macro_rules! round_trip_tests {
    ($($name:ident: $ty:ty),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(value in any::<$ty>()) {
                    round_trips(&value);
                }
            )*
        }
    };
}

every_message_type!(round_trip_tests);

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(
        versioned in any::<bool>(),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        // Random bytes almost never start with the version byte: half the cases are given it,
        // so that the decoder behind the version check sees them too.
        let mut bytes = Vec::with_capacity(body.len() + 1);
        if versioned {
            bytes.push(WIRE_VERSION);
        }
        bytes.extend(body);
        never_panics::<AgentToMaster>(&bytes);
        never_panics::<MasterToAgent>(&bytes);
        never_panics::<FrameworkCall>(&bytes);
        never_panics::<MasterToFramework>(&bytes);
        never_panics::<OperatorRequest>(&bytes);
        never_panics::<OperatorResponse>(&bytes);
        never_panics::<PeerMessage>(&bytes);
        never_panics::<SessionOpen>(&bytes);
        never_panics::<SessionOpenReply>(&bytes);
    }

    /// `Resources` is a short sorted list, no longer a `BTreeMap`: on the wire it must be
    /// the map it was, byte for byte, both ways (a name given twice keeps its last amount).
    #[test]
    fn resources_travel_as_the_map_they_replaced(
        entries in proptest::collection::vec(
            (prop_oneof![
                Just("cpus".to_string()),
                Just("mem_mib".to_string()),
                Just("gpus".to_string()),
                "[a-z_]{0,8}",
            ], any::<f64>()),
            0..6,
        ),
    ) {
        let map: std::collections::BTreeMap<String, f64> = entries.iter().cloned().collect();
        let resources: crate::resources::Resources = entries.iter().cloned().collect();
        let bytes = encode(&map).expect("encode the map");
        prop_assert_eq!(encode(&resources).expect("encode"), bytes.clone());
        let decoded: crate::resources::Resources = decode(&bytes).expect("decode the map's bytes");
        prop_assert_eq!(encode(&decoded).expect("re-encode"), bytes);
        prop_assert_eq!(decoded.len(), map.len());
        for (name, amount) in &map {
            prop_assert_eq!(decoded.get(name).map(f64::to_bits), Some(amount.to_bits()));
        }
    }

    #[test]
    fn versioned_garbage_gives_typed_errors(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut framed = vec![WIRE_VERSION];
        framed.extend_from_slice(&bytes);
        match decode::<FrameworkCall>(&framed) {
            // Never TooLarge: the frame is within the limit, whatever it claims inside.
            Ok(_) | Err(CodecError::Malformed(_) | CodecError::TrailingBytes { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }
}

#[test]
fn wrong_version_and_empty_input_are_named() {
    assert_eq!(decode::<SessionOpen>(&[]), Err(CodecError::Empty));
    assert_eq!(
        decode::<SessionOpen>(&[WIRE_VERSION + 1, 0]),
        Err(CodecError::UnsupportedVersion {
            found: WIRE_VERSION + 1,
            expected: WIRE_VERSION
        })
    );
}

#[test]
fn huge_length_prefixes_inside_messages_do_not_allocate() {
    // bincode's varint marker of a u64 is 253 (255 is reserved).
    let huge = |prefix: &[u8]| {
        let mut bytes = vec![WIRE_VERSION];
        bytes.extend_from_slice(prefix);
        bytes.push(253);
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        bytes
    };
    // A string announcing 2^62 bytes: refused up front by the limit, and said so.
    let err = decode::<String>(&huge(&[])).unwrap_err();
    assert!(
        matches!(&err, CodecError::Malformed(why) if why.contains("limit")),
        "{err:?}"
    );
    // A Vec<Vec<u8>> announcing 2^62 elements (PeerMessage::Raft): serde reserves cautiously
    // and the data runs out.
    let err = decode::<PeerMessage>(&huge(&[0])).unwrap_err();
    assert!(matches!(err, CodecError::Malformed(_)), "{err:?}");
}

#[test]
fn oversized_messages_are_refused_on_encode() {
    let big = PeerMessage::Raft(vec![vec![0u8; MAX_MESSAGE_BYTES]]);
    assert!(matches!(encode(&big), Err(CodecError::TooLarge { .. })));
}
