//! One allocation cycle over 10,000 agents and 1,000 frameworks (the target: under
//! 50 ms, so that a cycle every 100 ms leaves the leader time for Raft; Mesos' allocator
//! benchmark takes about a second for that size). Measured on the project's 2-core machine:
//! dividing every agent task at a time ([`AgentMatching::TaskAtATime`], about 16 picks per idle
//! agent, the κ·C gate checked on each) costs 225 ms under the deficit counters and 29 ms under
//! DRF, against 13 ms and 4.3 ms for one framework per agent; the first is over the target,
//! which is what running shards concurrently is for.
//!
//! The cluster: reference machines (`cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000`), a
//! third of them partly used. The frameworks: spread over 2–10 groups with unequal weights, each
//! with a demand summary of 1–6 shapes drawn from TPC-H-like task sizes, with priScores and
//! remaining work. Before each iteration the previous iteration's offers are rescinded outside
//! the timed section, so every iteration allocates the whole cluster again: a full cycle (only
//! η, ε and the agents' visiting rotation move on between iterations, as in a running master).
//!
//! Run: `cargo bench -p fullerene-scheduling --bench allocator`.

// `criterion_group!` defines a public function it cannot document.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fullerene_scheduling::allocator::{
    AgentMatching, AllocatorConfig, InterJobPolicy, StandaloneAllocator,
};
use fullerene_scheduling::fairness::FairnessFactor;
use fullerene_scheduling::testkit::machine;
use fullerene_scheduling::{
    AgentId, DemandSummary, FrameworkId, PendingDemand, ResourceVec, Resources,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const AGENTS: usize = 10_000;
const FRAMEWORKS: usize = 1_000;

/// Task shapes in the range of the TPC-H workloads.
fn random_shape(rng: &mut ChaCha8Rng) -> ResourceVec {
    let cpus = [0.5, 1.0, 1.0, 2.0, 2.0, 4.0][rng.gen_range(0..6)];
    let mem = [512.0, 1024.0, 2048.0, 4096.0, 8192.0][rng.gen_range(0..5)];
    let disk = rng.gen_range(0.0..120.0_f64).round();
    let net = rng.gen_range(0.0..800.0_f64).round();
    format!("cpus={cpus},mem_mib={mem},disk_mbps={disk},net_mbps={net}")
        .parse()
        .expect("shape parses")
}

/// Builds the cluster with `shards` shards under `policy`, agents matched by `matching`.
fn build(
    policy: InterJobPolicy,
    matching: AgentMatching,
    shards: usize,
    seed: u64,
) -> StandaloneAllocator {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut allocator = StandaloneAllocator::new(AllocatorConfig {
        policy,
        shards,
        matching,
        ..AllocatorConfig::default()
    })
    .expect("valid config");
    let groups = rng.gen_range(2..=10);
    for g in 0..groups {
        allocator
            .set_group_weight(&format!("g{g}"), rng.gen_range(1.0..4.0))
            .expect("valid weight");
    }
    for a in 0..AGENTS {
        allocator
            .add_agent(AgentId(format!("agent-{a}")), machine())
            .expect("new agent");
    }
    for f in 0..FRAMEWORKS {
        let id = FrameworkId(format!("fw-{f}"));
        allocator
            .add_framework(id.clone(), &format!("g{}", f % groups), f as f64)
            .expect("new framework");
        let shapes = rng.gen_range(1..=6);
        let pending = (0..shapes)
            .map(|_| PendingDemand {
                resources: Resources::from(random_shape(&mut rng)),
                count: rng.gen_range(1..40),
                pri_score: rng.gen_range(0.0..1.0),
            })
            .collect();
        let summary = DemandSummary {
            pending,
            remaining_work: rng.gen_range(10.0..10_000.0),
            srpt: rng.gen_range(1.0..1_000.0),
        };
        allocator
            .update_demand(&id, &summary)
            .expect("valid demand");
    }
    // A third of the agents run a few tasks already.
    for a in (0..AGENTS).step_by(3) {
        let agent = AgentId(format!("agent-{a}"));
        let framework = FrameworkId(format!("fw-{}", rng.gen_range(0..FRAMEWORKS)));
        for _ in 0..rng.gen_range(1..6) {
            let task = random_shape(&mut rng);
            if let Some(free) = allocator.free_resources(&agent) {
                if task.fits_in(&free) {
                    allocator
                        .apply_launch(&agent, &framework, task)
                        .expect("known ids");
                }
            }
        }
    }
    allocator
}

fn rescind_all(allocator: &mut StandaloneAllocator) {
    for offer in allocator.outstanding_offers() {
        allocator
            .rescind_offer(&offer.agent, &offer.framework)
            .expect("offer is out");
    }
}

fn bench_allocate_all(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocate_all_10k_agents_1k_frameworks");
    group.sample_size(20);
    let policies = [
        InterJobPolicy::DeficitCounters {
            factor: FairnessFactor::Drf,
            kappa: 0.1,
        },
        InterJobPolicy::DeficitCounters {
            factor: FairnessFactor::Slot,
            kappa: 0.1,
        },
        InterJobPolicy::Drf,
        InterJobPolicy::CapacityScheduler { max_capacity: 1.0 },
        InterJobPolicy::Fifo,
        InterJobPolicy::Sjf,
        InterJobPolicy::Tetris,
    ];
    for policy in policies {
        let label = match policy {
            InterJobPolicy::DeficitCounters { factor, .. } => format!("deficit-{}", factor.name()),
            other => other.name().to_string(),
        };
        // Task at a time (the default) on 1 and 8 shards; one framework per agent on 1 shard,
        // to measure what dividing agents costs.
        for (matching, shards) in [
            (AgentMatching::TaskAtATime, 1),
            (AgentMatching::TaskAtATime, 8),
            (AgentMatching::WholeAgent, 1),
        ] {
            let variant = match matching {
                AgentMatching::TaskAtATime => format!("{shards}-shards"),
                AgentMatching::WholeAgent => format!("{shards}-shards-whole-agent"),
            };
            group.bench_with_input(
                BenchmarkId::new(label.clone(), variant),
                &shards,
                |b, &shards| {
                    // Built only when this benchmark is selected.
                    let mut allocator = build(policy, matching, shards, 7);
                    // Warm up η / ε the way a running master would have.
                    let _ = allocator.allocate_all(0.0);
                    b.iter_custom(|iterations| {
                        let mut timed = Duration::ZERO;
                        for _ in 0..iterations {
                            rescind_all(&mut allocator);
                            let start = Instant::now();
                            let offers = allocator.allocate_all(1.0);
                            timed += start.elapsed();
                            black_box(offers);
                        }
                        timed
                    });
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_allocate_all);
criterion_main!(benches);
