//! Fault injection for Fullerene, on real processes: [`LocalMasters`] starts `fullerene master`
//! processes on loopback, kills them with SIGKILL and restarts them on their data directories.
//! The integration tests (`tests/`) and `fullerene bench raft` drive failures through it.
//! (The deterministic in-memory Raft cluster lives beside the node it tests, in
//! `fullerene_master::raft_node::sim`.)

pub mod cluster;

pub use cluster::{free_loopback_addr, free_loopback_tcp_addr, ClusterError, LocalMasters};
