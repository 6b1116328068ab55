//! How often concurrently planned shards conflict at commit: on the allocator bench's cluster
//! (10,000 agents × 1,000 frameworks unless told otherwise, every agent's free resources
//! allocated in one cycle), prints for each policy and shard count the picks planned,
//! committed and dropped by reason, the share dropped, and the tasks committed against one
//! shard's (what the division of pending work among shards and the conflicts leave for the
//! next cycle), with the cycle's time with the shards planned on two threads.
//!
//! Run: `cargo run --release -p fullerene-scheduling --example shard_conflicts -- [AGENTS FRAMEWORKS [CYCLES]]`.

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use fullerene_scheduling::allocator::{AgentMatching, CycleStats};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: usize| {
        args.next()
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let agents = number(10_000);
    let frameworks = number(1_000);
    let cycles = number(3);
    println!(
        "{agents} agents × {frameworks} frameworks, task at a time, shards planned on 2 threads; \
         mean of {cycles} cycles after a warm-up"
    );
    println!(
        "{:<12} {:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9}",
        "policy",
        "shards",
        "planned",
        "committed",
        "taken",
        "bound",
        "agent",
        "framework",
        "dropped",
        "vs 1 shard",
        "ms/cycle"
    );
    for (label, policy) in common::policies() {
        let mut one_shard = None;
        for shards in [1, 2, 4, 8] {
            let mut allocator =
                common::build(policy, AgentMatching::TaskAtATime, shards, agents, frameworks, 7);
            let _ = allocator.allocate_all(0.0);
            let mut stats = CycleStats::default();
            let mut elapsed = 0.0;
            for cycle in 0..cycles {
                common::rescind_all(&mut allocator);
                let start = Instant::now();
                let outcome = allocator.allocate_all_with(1.0 + cycle as f64, |snapshot| {
                    common::plan_on_threads(snapshot, 2)
                });
                elapsed += start.elapsed().as_secs_f64();
                stats.add(&outcome.stats);
            }
            let committed = stats.committed as f64 / cycles as f64;
            let reference = *one_shard.get_or_insert(committed);
            println!(
                "{:<12} {:>6} {:>9.0} {:>9.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>7.2}% {:>9.1}% {:>9.1}",
                label,
                shards,
                stats.planned as f64 / cycles as f64,
                committed,
                stats.task_taken as f64 / cycles as f64,
                stats.fairness_bound as f64 / cycles as f64,
                stats.agent_changed as f64 / cycles as f64,
                stats.framework_changed as f64 / cycles as f64,
                100.0 * stats.dropped() as f64 / stats.planned.max(1) as f64,
                100.0 * committed / reference.max(1.0),
                1e3 * elapsed / cycles as f64,
            );
        }
    }
}
