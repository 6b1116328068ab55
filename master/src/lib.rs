//! The Fullerene master.
//!
//! It holds the replicated cluster state (a Raft state machine on RocksDB), runs the sharded
//! allocator that decides which framework is offered which agent's free resources (deficit
//! counters for fairness, Graphene §5; leftover redistribution, Carbyne §3.3.4; both in
//! `fullerene_scheduling`, which the simulator drives unchanged), and serves agents, frameworks
//! and operators. The decision logic lives in sans-IO modules.

pub mod core;
pub mod offers;
pub mod raft_node;
pub mod server;
pub mod state;
pub mod storage;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

/// The optional features this build of the crate was compiled with (`fullerene version` shows
/// them, so a bug report says whether RocksDB storage was in).
pub const ENABLED_FEATURES: &[&str] = &[
    #[cfg(feature = "rocksdb-storage")]
    "rocksdb-storage",
    #[cfg(feature = "testkit")]
    "testkit",
];
