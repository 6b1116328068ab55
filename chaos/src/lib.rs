//! Fullerene's test harness and fault injection.
//!
//! * [`raft_sim`]: a deterministic, seeded in-memory cluster of
//!   [`RaftNode`](fullerene_master::raft_node::RaftNode)s that loses, duplicates and reorders
//!   messages, partitions the network and crashes masters, while an oracle checks Raft's safety
//!   properties; a failing seed replays exactly.
//! * [`storage_suite`]: the conformance suite every
//!   [`RaftStore`](fullerene_master::storage::RaftStore) passes, run on the in-memory and the
//!   RocksDB store ([`raft_store_conformance!`]).
//! * [`system`]: the whole-system deterministic simulation: masters, agents and frameworks
//!   (real cores) under seeded faults on a virtual clock, and the invariant checker that reads
//!   the run's history.
//! * [`cluster`]: fault injection on real processes. [`LocalMasters`] starts
//!   `fullerene master` processes on loopback, kills them with SIGKILL and restarts them on
//!   their data directories; the integration tests (`tests/`) and `fullerene bench raft` drive
//!   failures through it.
//! * [`api`]: the harnesses' one client of the masters' HTTP API (HTTPS, with an operator's
//!   certificate or a bearer token).
//! * [`live`]: chaos on real processes (`fullerene chaos run`): a real cluster behind a UDP
//!   fault proxy, faults on a seeded schedule, and the simulation's checker over a history read
//!   from the masters' API, the agents' and frameworks' event logs and the process table.
//! * [`etcd`]: a real etcd cluster on loopback with mutual TLS from the cluster's CA, and a
//!   minimal gRPC client of it, for `fullerene bench raft --compare-etcd`.
//! * [`load`]: the load test (`fullerene bench load`): well-behaved frameworks beside hostile
//!   clients on a real cluster, and whether the well-behaved ones kept receiving offers.
//! * [`bench`]: the scale benchmarks (`fullerene bench launch`, `fullerene bench scale`):
//!   task launches per second end to end through a real master group, and a master group with
//!   thousands of agents (memory, allocation cycles, offers, failover).

pub mod api;
pub mod bench;
pub mod cluster;
pub mod etcd;
pub mod live;
pub mod load;
pub mod raft_sim;
pub mod storage_suite;
pub mod system;

pub use api::{ApiAnswer, ApiClient};
pub use cluster::{
    free_loopback_addr, free_loopback_tcp_addr, raise_open_file_limit, ClusterError, HttpTokens,
    LocalMasters,
};
