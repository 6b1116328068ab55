//! `fullerene bench`: figures measured on real processes, for the issues' targets.
//!
//! * `bench raft` ([`raft`]): commits per second and commit latency of three masters at
//!   several client counts, leader failover over repeated `kill -9`s, and the same measured on
//!   a 3-member etcd beside them (`--compare-etcd`).
//! * `bench load` ([`load`]): well-behaved frameworks beside hostile clients on a real
//!   cluster.

mod load;
mod raft;

use anyhow::Result;
use clap::Subcommand;

use crate::output::JsonOutput;

/// Benchmarks.
#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Three masters on loopback: commits per second and commit latency at several client
    /// counts, and leader failover time over repeated kill -9s of the leader; with
    /// --compare-etcd, the same on a 3-member etcd side by side.
    Raft(raft::RaftBenchArgs),
    /// Well-behaved frameworks beside hostile clients (floods, oversized and garbage frames,
    /// slow readers, a connection flood) on three masters and real agents: offer latency with
    /// and without them, how the masters answered each hostile attempt, and whether any
    /// process died. Exits with an error if the cluster did not hold.
    Load(load::LoadBenchArgs),
}

/// Runs a `bench` subcommand.
pub(crate) fn run(command: BenchCommand, json: &JsonOutput) -> Result<()> {
    match command {
        BenchCommand::Raft(args) => raft::run(args, json),
        BenchCommand::Load(args) => load::run(args, json),
    }
}
