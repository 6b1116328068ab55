//! Commit throughput of a three-master Raft group driven in one process: the leader takes a
//! batch of small commands, and the three masters run `advance` and exchange messages (handed
//! over directly, no network) until every command is applied and answered.
//!
//! `memory` measures the driver, the codec and the state machine alone. `rocksdb` (feature
//! `rocksdb-storage`) adds the real stores: one synced write batch per `Ready` per master, so
//! it shows what batching buys against per-command fsyncs. The target (≥ 20,000 commands/s on
//! three masters) is for the `rocksdb` case with batches of a few hundred commands.

// `criterion_group!` defines a public function it cannot document.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fullerene_master::raft_node::{NodeConfig, RaftNode, Token};
use fullerene_master::state::{ClusterSettings, Command};
use fullerene_master::storage::{MemStorage, RaftStore};
use fullerene_master::testkit::register_agent;

struct Group<S: RaftStore> {
    nodes: Vec<RaftNode<S>>,
    next_token: u64,
    stamp: u64,
}

impl<S: RaftStore> Group<S> {
    fn new(stores: Vec<S>) -> Group<S> {
        let voters: Vec<u64> = (1..=stores.len() as u64).collect();
        let nodes: Vec<RaftNode<S>> = stores
            .into_iter()
            .enumerate()
            .map(|(i, store)| {
                RaftNode::bootstrap(
                    NodeConfig::new(i as u64 + 1),
                    store,
                    &voters,
                    ClusterSettings::default(),
                )
                .expect("bootstrap")
            })
            .collect();
        let mut group = Group {
            nodes,
            next_token: 0,
            stamp: 0,
        };
        group.nodes[0].campaign().expect("campaign");
        for _ in 0..100 {
            group.pump();
            if group.nodes[0].is_leader() {
                break;
            }
        }
        assert!(group.nodes[0].is_leader(), "master 1 did not become leader");
        let register = register_agent("agent-1", "agent-1", "cpus=16", &["sleep"], 0);
        group.commit(std::slice::from_ref(&register));
        group
    }

    /// One `advance` of every master, delivering the messages it produced.
    fn pump(&mut self) -> usize {
        // Only the apply-latency metric reads it: the wall clock serves.
        let now = fullerene_proto::time::wall_clock();
        let mut answered = 0;
        let mut mail = Vec::new();
        for node in &mut self.nodes {
            let out = node.advance(now).expect("advance");
            answered += out.applied.len();
            mail.extend(out.messages_to_send);
        }
        for message in mail {
            let to = message.to as usize - 1;
            let _ = self.nodes[to].step(message);
        }
        answered
    }

    /// Proposes `commands` at the leader and runs until all are answered.
    fn commit(&mut self, commands: &[Command]) {
        for command in commands {
            self.next_token += 1;
            self.nodes[0]
                .propose(command, Token(self.next_token))
                .expect("propose");
        }
        let mut answered = 0;
        while answered < commands.len() {
            answered += self.pump();
        }
    }

    fn heartbeats(&mut self, n: usize) -> Vec<Command> {
        (0..n)
            .map(|_| {
                self.stamp += 1;
                Command::AgentHeartbeat {
                    agent_id: "agent-1".into(),
                    at_ms: self.stamp,
                }
            })
            .collect()
    }
}

fn bench_memory(c: &mut Criterion) {
    let mut group = c.benchmark_group("raft_commit/memory");
    for batch in [1usize, 64, 512] {
        let mut cluster = Group::new(
            (1..=3)
                .map(|i| MemStorage::new(format!("bench-{i}")))
                .collect(),
        );
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| {
                let commands = cluster.heartbeats(batch);
                cluster.commit(&commands);
            });
        });
    }
    group.finish();
}

#[cfg(feature = "rocksdb-storage")]
fn bench_rocksdb(c: &mut Criterion) {
    use fullerene_master::storage::RocksStorage;
    let mut group = c.benchmark_group("raft_commit/rocksdb");
    group.sample_size(10);
    for batch in [1usize, 64, 512] {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut cluster = Group::new(
            dirs.iter()
                .map(|d| RocksStorage::open(d.path()).expect("open"))
                .collect(),
        );
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| {
                let commands = cluster.heartbeats(batch);
                cluster.commit(&commands);
            });
        });
    }
    group.finish();
}

#[cfg(not(feature = "rocksdb-storage"))]
fn bench_rocksdb(_: &mut Criterion) {}

criterion_group!(benches, bench_memory, bench_rocksdb);
criterion_main!(benches);
