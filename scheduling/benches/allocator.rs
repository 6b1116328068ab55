//! One allocation cycle (every agent's free resources divided task at a time,
//! `AgentMatching::TaskAtATime`) over 10,000 agents × 1,000 frameworks and, with
//! `FULLERENE_LONG_BENCHES=1`, over 100,000 agents × 10,000 frameworks (the targets on the
//! project's 2-core machine: 10 ms and 150 ms), under Graphene's deficit counters (DRF factor,
//! κ = 0.1) and Mesos' DRF. Each size runs one shard sequentially (`1-shard`: `allocate_all`,
//! the cycle in place, as the simulator runs it) and N shards planned from one snapshot on two
//! threads and committed in order (`N-shards-2-threads`: `allocate_all_with`, what the master
//! runs).
//!
//! The cluster is `common::build`'s: about 69,000 pending tasks at 10,000 × 1,000, fewer than
//! the agents hold, so a cycle offers every pending task. Before each iteration the previous
//! iteration's offers are rescinded outside the timed section, so every iteration allocates
//! the whole cluster again: a full cycle (only η and the agents' visiting rotation move on
//! between iterations, as in a running master). The timed section is the whole cycle:
//! snapshot, planning, commit.
//!
//! Measured on the project's 2-core machine while other builds ran (load average 5–8, so two
//! planner threads had no second core to themselves; figures move by ±30% with the load),
//! 10,000 × 1,000, with the memoized picks and the bounding trees: deficit counters 451 ms
//! (1 shard) and 550 ms (2 shards on 2 threads); DRF 132 and 167 ms. The sequential cycle
//! before the sharded design (its bench binary, run minutes later at load 8–10): 1,074 ms and
//! 168 ms (225 ms and 29 ms on a quiet machine). Instructions per cycle (callgrind, the
//! `shard_conflicts` example, 2 shards, load-independent): about 1.5 G planning and 0.09 G
//! committing under the deficit counters, 0.2 G and 0.1 G under DRF. The targets are far off.
//! Under the deficit counters most of a cycle is the bounding trees' search for each computed
//! pick (a few hundred node bounds per search: a node's bound takes each kind's maximum over
//! shapes of different kinds, so it is loose above the leaves), and the memo replays only
//! while a framework's shape lasts (about 3,500 shapes of about 20 tasks each). Tried and
//! left out, on the same cluster: capping each kind of a node's bound at priScore × the free
//! amount (+32% instructions: it seldom binds, a task is small against a machine), a
//! best-first search over all trees at once (+170%: no early leaf to prune with), scoring only
//! the children that fit (+1%). Under DRF the commit is half the cycle (allocations of the
//! offers' ids, and the candidate sets relisted after every pick). At 100,000 × 10,000 one
//! cycle under the deficit counters took more than six minutes before the memo and the trees;
//! the `shard_conflicts` example measures that size per step.
//!
//! Re-measured on an idle machine after the trees learnt to settle ties (load 0.3–3, the
//! `shard_conflicts` example, mean of 3 cycles): deficit counters 372 ms with 1 shard, 192 ms
//! with 2 on two cores; DRF 85 and 53 ms. The ties matter most where frameworks are alike:
//! `fullerene bench scale --mode core` at the same size, 1,000 identical frameworks, went from
//! 33.4 s to 1.01 s per cycle.
//!
//! With each agent's tree search going on from where its last one stopped (the frontier of
//! module `score_tree`; same picks), on an idle machine, the `shard_conflicts` example
//! alternated with the build before it (load 0.9–1.8): deficit counters 236 and 257 ms with 1
//! shard (was 312 and 315 ms), 137 and 150 ms with 2 shards on two cores (was 177 and 172 ms);
//! callgrind, one cycle's planning: 1.43 G instructions (was 1.85 G). Per computed pick the
//! search went through about 140 tree nodes instead of about 490: nine picks in ten are an
//! agent's second or later, and its frontier (about 230 nodes, most dismissed by the bounds they
//! had at its earlier picks) spares it the loose nodes near the roots. Tried on the way: a
//! best-first search over a heap of the frontier, each node's bound refreshed from the tree as
//! it came up (twice as slow: the heap's pushes and pops, and a node far in memory for every
//! refresh), and scoring only the last pick's choice first (1.93 G: the choice's own score
//! falls most with its pick, and the runner-up usually wins the next).
//!
//! Run: `cargo bench -p fullerene-scheduling --bench allocator` (add a filter such as
//! `deficit-drf/1-shard` to run part of it).

// `criterion_group!` defines a public function it cannot document.
#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fullerene_scheduling::allocator::{CycleSnapshot, ShardPlan};

/// Runs one size: `agents` × `frameworks`, 1 shard sequentially and each of `shard_counts`
/// planned on two threads.
fn bench_size(
    c: &mut Criterion,
    name: &str,
    agents: usize,
    frameworks: usize,
    samples: usize,
    shard_counts: &[usize],
) {
    let mut group = c.benchmark_group(name);
    group.sample_size(samples);
    for (label, policy) in common::policies() {
        let variants = std::iter::once((1, 1)).chain(shard_counts.iter().map(|&s| (s, 2)));
        for (shards, threads) in variants {
            let variant = if threads == 1 {
                format!("{shards}-shard")
            } else {
                format!("{shards}-shards-{threads}-threads")
            };
            group.bench_function(BenchmarkId::new(label, variant), |b| {
                // Built only when this benchmark is selected.
                let mut allocator = common::warmed_up(policy, shards, agents, frameworks);
                b.iter_custom(|iterations| {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iterations {
                        common::rescind_all(&mut allocator);
                        let start = Instant::now();
                        let offers = if threads == 1 {
                            allocator.allocate_all(1.0)
                        } else {
                            allocator
                                .allocate_all_with(1.0, |snapshot| {
                                    plan_on_threads(snapshot, threads)
                                })
                                .offers
                        };
                        timed += start.elapsed();
                        black_box(offers);
                    }
                    timed
                });
            });
        }
    }
    group.finish();
}

/// Plans a snapshot's shards on `threads` scoped threads, shard `s` on thread `s % threads`.
fn plan_on_threads(snapshot: &CycleSnapshot, threads: usize) -> Vec<ShardPlan> {
    let shards = snapshot.shard_count();
    if threads <= 1 || shards <= 1 {
        return snapshot.plan_all();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(shards))
            .map(|t| {
                scope.spawn(move || {
                    (t..shards)
                        .step_by(threads)
                        .map(|s| snapshot.plan_shard(s))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("planner thread"))
            .collect()
    })
}

fn bench_allocate_all(c: &mut Criterion) {
    bench_size(
        c,
        "allocate_all_10k_agents_1k_frameworks",
        10_000,
        1_000,
        20,
        &[2, 8],
    );
    // Minutes per cycle under the deficit counters: only when asked for.
    if std::env::var("FULLERENE_LONG_BENCHES").is_ok_and(|v| v == "1") {
        bench_size(
            c,
            "allocate_all_100k_agents_10k_frameworks",
            100_000,
            10_000,
            10,
            &[2, 8],
        );
    }
}

criterion_group!(benches, bench_allocate_all);
criterion_main!(benches);
