//! The cluster the allocator bench and the `shard_conflicts` example allocate: reference
//! machines (`cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000`), a third of them partly
//! used; frameworks spread over 2–10 groups with unequal weights, each with a demand summary of
//! 1–6 shapes drawn from TPC-H-like task sizes (1–39 tasks each), with priScores and remaining
//! work.

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

/// The policies the figures are taken for, with their labels: Graphene's deficit counters
/// (DRF factor, κ = 0.1) and Mesos' hierarchical DRF.
pub(crate) fn policies() -> [(&'static str, InterJobPolicy); 2] {
    [
        (
            "deficit-drf",
            InterJobPolicy::DeficitCounters {
                factor: FairnessFactor::Drf,
                kappa: 0.1,
            },
        ),
        ("drf", InterJobPolicy::Drf),
    ]
}

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

/// Builds the cluster of `agents` agents and `frameworks` frameworks with `shards` shards under
/// `policy`, agents matched by `matching`.
pub(crate) fn build(
    policy: InterJobPolicy,
    matching: AgentMatching,
    shards: usize,
    agents: usize,
    frameworks: usize,
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
    for a in 0..agents {
        allocator
            .add_agent(AgentId::from(format!("agent-{a}")), machine())
            .expect("new agent");
    }
    for f in 0..frameworks {
        let id = FrameworkId::from(format!("fw-{f}"));
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
            reservation_progress: None,
        };
        allocator
            .update_demand(&id, &summary)
            .expect("valid demand");
    }
    // A third of the agents run a few tasks already.
    for a in (0..agents).step_by(3) {
        let agent = AgentId::from(format!("agent-{a}"));
        let framework = FrameworkId::from(format!("fw-{}", rng.gen_range(0..frameworks)));
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

/// The cluster of [`build`] (task at a time, seed 7) after one cycle at time 0, which sets η
/// the way a running master would have, with that cycle's offers taken back.
pub(crate) fn warmed_up(
    policy: InterJobPolicy,
    shards: usize,
    agents: usize,
    frameworks: usize,
) -> StandaloneAllocator {
    let mut allocator = build(
        policy,
        AgentMatching::TaskAtATime,
        shards,
        agents,
        frameworks,
        7,
    );
    let _ = allocator.allocate_all(0.0);
    rescind_all(&mut allocator);
    allocator
}

/// Takes back every offer, so that the next cycle allocates the whole cluster again.
pub(crate) fn rescind_all(allocator: &mut StandaloneAllocator) {
    for offer in allocator.outstanding_offers() {
        allocator
            .rescind_offer(&offer.agent, &offer.framework)
            .expect("offer is out");
    }
}
