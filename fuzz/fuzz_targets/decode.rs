//! Feeds arbitrary bytes to the decoder of every message type. Any panic, abort or allocation
//! beyond the size limit is a bug. Run with `cargo +nightly fuzz run decode` in `fuzz/`.
#![no_main]

use fullerene_proto::codec::decode;
use fullerene_proto::messages::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = decode::<SessionOpen>(bytes);
    let _ = decode::<SessionOpenReply>(bytes);
    let _ = decode::<AgentToMaster>(bytes);
    let _ = decode::<MasterToAgent>(bytes);
    let _ = decode::<FrameworkCall>(bytes);
    let _ = decode::<MasterToFramework>(bytes);
    let _ = decode::<OperatorRequest>(bytes);
    let _ = decode::<OperatorResponse>(bytes);
    let _ = decode::<PeerMessage>(bytes);
    // Re-encoding whatever decoded must not panic either.
    if let Ok(msg) = decode::<FrameworkCall>(bytes) {
        let _ = fullerene_proto::codec::encode(&msg);
    }
});
