//! How often concurrently planned shards conflict at commit: on the allocator bench's cluster
//! (10,000 agents × 1,000 frameworks unless told otherwise, every agent's free resources
//! allocated in one cycle), prints for each policy and shard count the picks planned,
//! committed and dropped by reason, the share dropped, and the tasks committed against one
//! shard's, and the tasks the next cycle offers (what the division of pending work among shards
//! and the conflicts left), with the cycle's time with the shards planned on two threads.
//!
//! Run: `cargo run --release -p fullerene-scheduling --example shard_conflicts -- [AGENTS
//! FRAMEWORKS [CYCLES [POLICY [SHARDS,...]]]]` (POLICY: `deficit-drf` or `drf`).

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use fullerene_scheduling::allocator::CycleStats;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: usize| {
        args.next()
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let agents = number(10_000);
    let frameworks = number(1_000);
    let cycles = number(3);
    let only = args.next();
    let shard_counts: Vec<usize> = args.next().map_or(vec![1, 2, 4, 8], |list| {
        list.split(',')
            .map(|s| s.parse().expect("a shard count"))
            .collect()
    });
    println!(
        "{agents} agents × {frameworks} frameworks, task at a time, shards planned on 2 threads; \
         mean of {cycles} cycles after a warm-up"
    );
    println!(
        "{:<12} {:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>6} {:>9}  snapshot/plan/commit ms",
        "policy",
        "shards",
        "planned",
        "committed",
        "taken",
        "bound",
        "agent",
        "framework",
        "dropped",
        "rematched",
        "vs 1 shard",
        "next",
        "ms/cycle",
    );
    for (label, policy) in common::policies() {
        if only.as_ref().is_some_and(|only| only != label) {
            continue;
        }
        let mut one_shard = None;
        for &shards in &shard_counts {
            let mut allocator = common::warmed_up(policy, shards, agents, frameworks);
            let mut stats = CycleStats::default();
            let mut elapsed = 0.0;
            let mut phases = [0.0; 3];
            for cycle in 0..cycles {
                common::rescind_all(&mut allocator);
                let now = 1.0 + cycle as f64;
                let start = Instant::now();
                let snapshot = allocator.snapshot_cycle(now);
                let planning = Instant::now();
                let plans = common::plan_on_threads(&snapshot, 2);
                let committing = Instant::now();
                let outcome = allocator.commit_cycle(plans, now);
                let end = Instant::now();
                elapsed += (end - start).as_secs_f64();
                phases[0] += (planning - start).as_secs_f64();
                phases[1] += (committing - planning).as_secs_f64();
                phases[2] += (end - committing).as_secs_f64();
                stats.add(&outcome.stats);
            }
            // The cycle after, with the last one's offers still out: what it offers is what
            // the division of the work and the conflicts left.
            let next = allocator
                .allocate_all_with(1.0 + cycles as f64, |snapshot| {
                    common::plan_on_threads(snapshot, 2)
                })
                .stats
                .committed;
            let committed = stats.committed as f64 / cycles as f64;
            let reference = *one_shard.get_or_insert(committed);
            println!(
                "{:<12} {:>6} {:>9.0} {:>9.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>7.2}% {:>8.0} {:>9.1}% {:>6} {:>9.1}  {:.1}/{:.1}/{:.1}",
                label,
                shards,
                stats.planned as f64 / cycles as f64,
                committed,
                stats.task_taken as f64 / cycles as f64,
                stats.fairness_bound as f64 / cycles as f64,
                stats.agent_changed as f64 / cycles as f64,
                stats.framework_changed as f64 / cycles as f64,
                100.0 * stats.dropped() as f64 / stats.planned.max(1) as f64,
                stats.rematched as f64 / cycles as f64,
                100.0 * committed / reference.max(1.0),
                next,
                1e3 * elapsed / cycles as f64,
                1e3 * phases[0] / cycles as f64,
                1e3 * phases[1] / cycles as f64,
                1e3 * phases[2] / cycles as f64,
            );
        }
    }
}
