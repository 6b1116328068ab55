//! One round of the plan follower (Rayon §5.2; issue 17) on 10,000 agents (issue 16's size):
//! the follower places a reservation's owed tasks on the agents' free resources, and on a
//! shortfall chooses victims agent by agent.
//!
//! The cluster: 10,000 reference agents (16 cpus each). One reservation is guaranteed 2,000
//! bundles of 2 cpus and 8 GiB now; its job holds nothing and has 2,000 such tasks runnable.
//! - `covered`: 9,000 agents have 1 cpu free and the last 1,000 have 4: the owed tasks fit
//!   without a kill, on the last agents (the path the leader takes each second while a
//!   reservation is owed and room exists).
//! - `shortfall`: every agent has 1 cpu free and runs three 5-cpu best-effort tasks (30,000
//!   candidates): the follower kills about one task in three agents' worth, choosing each
//!   agent by the work lost.
//!
//! Measured on the project's 2-core machine, 2026-11-27 (load about 1): `covered` 2.1 ms;
//! `shortfall` 11.7 ms for 750 victims. The first version of the agent-by-agent victims
//! scanned every agent for every owed task and took 1.67 s here, which on the leader's node
//! loop would have outlasted an election timeout; each shape now keeps the agents in a heap by
//! cost, and a kill updates one agent's place in it.
//!
//! Run: `cargo bench -p fullerene-reservation --bench follower`.

// `criterion_group!` defines a public function it cannot document.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use fullerene_reservation::{
    parse, AgentRoom, Plan, PlanConfig, PlanFollower, PolicyKind, PreemptibleTask, ReservationId,
    ReservationRequest, TaggedJob,
};
use fullerene_scheduling::testkit::machine;
use fullerene_scheduling::{AgentId, FrameworkId, ResourceVec, TaskId, TaskKey};

const AGENTS: usize = 10_000;
const OWED_TASKS: u32 = 2_000;

fn vec(text: &str) -> ResourceVec {
    text.parse().expect("the bench's resources parse")
}

/// A plan of the whole cluster with one reservation guaranteed [`OWED_TASKS`] bundles over
/// its first hour.
fn plan() -> Plan {
    let mut plan = Plan::new(
        PlanConfig::new(0, PolicyKind::Gree),
        machine().scale(AGENTS as f64),
    );
    let expr = parse(&format!(
        "window(atom(cpus=2,mem_mib=8192; g=1, h={OWED_TASKS}, l=1h, w={OWED_TASKS}h), s=0, f=1h)"
    ))
    .expect("the bench's request parses");
    let request = ReservationRequest {
        id: ReservationId(1),
        user: "etl".into(),
        expr,
    };
    plan.admit(request, 0)
        .expect("the cluster holds the reservation");
    plan
}

fn job() -> TaggedJob {
    let shape = vec("cpus=2,mem_mib=8192");
    TaggedJob {
        reservation: ReservationId(1),
        held: ResourceVec::ZERO,
        shapes: vec![(shape, OWED_TASKS)],
        running: Vec::new(),
        finished_atoms: Default::default(),
    }
}

fn agent(i: usize) -> AgentId {
    AgentId::from(format!("agent-{i:05}"))
}

fn bench_follow(c: &mut Criterion) {
    let plan = plan();
    let jobs = [job()];
    let mut group = c.benchmark_group(format!("follow_{AGENTS}_agents_{OWED_TASKS}_owed"));
    group.sample_size(20);

    let covered: Vec<AgentRoom> = (0..AGENTS)
        .map(|i| AgentRoom {
            agent: agent(i),
            free: if i < AGENTS - AGENTS / 10 {
                vec("cpus=1,mem_mib=4096")
            } else {
                vec("cpus=4,mem_mib=16384")
            },
            capacity: machine(),
        })
        .collect();
    let decision = PlanFollower::new(0).follow(&plan, 1_000, &jobs, &covered, &[]);
    assert!(decision.preempt.is_empty(), "room for every owed task");
    group.bench_function("covered", |b| {
        b.iter(|| black_box(PlanFollower::new(0).follow(&plan, 1_000, &jobs, &covered, &[])));
    });

    let short: Vec<AgentRoom> = (0..AGENTS)
        .map(|i| AgentRoom {
            agent: agent(i),
            free: vec("cpus=1,mem_mib=4096"),
            capacity: machine(),
        })
        .collect();
    let tasks: Vec<PreemptibleTask> = (0..AGENTS * 3)
        .map(|k| PreemptibleTask {
            key: TaskKey::new(FrameworkId::from("adhoc"), TaskId::from(k.to_string())),
            agent: agent(k / 3),
            started_ms: (k % 997) as u64,
            resources: vec("cpus=5,mem_mib=20480"),
            reservation: None,
        })
        .collect();
    let decision = PlanFollower::new(0).follow(&plan, 1_000, &jobs, &short, &tasks);
    assert!(!decision.preempt.is_empty(), "a shortfall to preempt for");
    group.bench_function(
        format!("shortfall/{}-victims", decision.preempt.len()),
        |b| {
            b.iter(|| black_box(PlanFollower::new(0).follow(&plan, 1_000, &jobs, &short, &tasks)));
        },
    );
    group.finish();
}

criterion_group!(benches, bench_follow);
criterion_main!(benches);
