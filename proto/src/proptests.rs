//! Property tests of the codec over every message type: everything round-trips, and arbitrary
//! bytes never panic the decoder.

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

round_trip_tests! {
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        never_panics::<AgentToMaster>(&bytes);
        never_panics::<MasterToAgent>(&bytes);
        never_panics::<FrameworkCall>(&bytes);
        never_panics::<MasterToFramework>(&bytes);
        never_panics::<OperatorRequest>(&bytes);
        never_panics::<OperatorResponse>(&bytes);
        never_panics::<PeerMessage>(&bytes);
        never_panics::<SessionOpen>(&bytes);
    }

    #[test]
    fn versioned_garbage_gives_typed_errors(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut framed = vec![WIRE_VERSION];
        framed.extend_from_slice(&bytes);
        match decode::<FrameworkCall>(&framed) {
            Ok(_) |
Err(CodecError::Malformed(_) | CodecError::TrailingBytes { .. } |
CodecError::TooLarge { .. }) => {}
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
    // A Vec<Vec<u8>> announcing 2^62 elements: bincode's limit must refuse it up front.
    let mut bytes = vec![WIRE_VERSION, 0]; // PeerMessage::Raft
    bytes.push(255); // varint u64 marker
    bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let err = decode::<PeerMessage>(&bytes).unwrap_err();
    assert!(
        matches!(err, CodecError::TooLarge { .. } | CodecError::Malformed(_)),
        "{err:?}"
    );
}

#[test]
fn oversized_messages_are_refused_on_encode() {
    let big = PeerMessage::Raft(vec![vec![0u8; MAX_MESSAGE_BYTES]]);
    assert!(matches!(encode(&big), Err(CodecError::TooLarge { .. })));
}
