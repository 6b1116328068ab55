//! `fullerene bench`: figures measured on real processes, for the issues' targets.
//!
//! * `bench raft` ([`raft`]): commits per second and commit latency of three masters at
//!   several client counts, leader failover over repeated `kill -9`s, and the same measured on
//!   a 3-member etcd beside them (`--compare-etcd`).
//! * `bench load` ([`load`]): well-behaved frameworks beside hostile clients on a real
//!   cluster.
//! * `bench launch` and `bench scale` (`super::bench_scale`): task launches per second through
//!   three masters, and a master group with thousands of agents.

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
    /// End-to-end task launches per second through three masters, from many frameworks to
    /// thousands of real agent shells (sleep executor, real QUIC) in this process: launches/s,
    /// RUNNING updates/s, accept-to-RUNNING latency, and the CPU each part used.
    Launch(super::bench_scale::LaunchBenchArgs),
    /// A master group with many agents (simulated over real QUIC, or the core in-process with
    /// `--mode core`): allocation cycle time, offers/s, memory per agent and per task, and the
    /// time until offers flow again after kill -9s of the leader while every agent registers
    /// again.
    Scale(super::bench_scale::ScaleBenchArgs),
}

/// Runs a `bench` subcommand.
pub(crate) fn run(command: BenchCommand, json: &JsonOutput) -> Result<()> {
    match command {
        BenchCommand::Raft(args) => raft::run(args, json),
        BenchCommand::Load(args) => load::run(args, json),
        BenchCommand::Launch(args) => super::bench_scale::launch(args, json),
        BenchCommand::Scale(args) => super::bench_scale::scale(args, json),
    }
}
