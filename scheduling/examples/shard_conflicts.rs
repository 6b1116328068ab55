//! How often concurrently planned shards conflict at commit: on the allocator bench's cluster
//! (10,000 agents × 1,000 frameworks unless told otherwise, every agent's free resources
//! allocated in one cycle), prints for each policy and shard count the picks planned,
//! committed and dropped by reason, the share dropped, the tasks rematched at commit and the
//! tasks committed against one shard's (what the division of the pending work and the
//! conflicts leave for the next cycle), with the time of each step: the snapshot, each shard's
//! planning (timed apart on this thread, so that a loaded machine does not hide how the work
//! divides) and the commit.
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
        "{agents} agents × {frameworks} frameworks, task at a time; mean of {cycles} cycles after \
         a warm-up. Shards are planned one after the other on this thread and timed apart: plan \
         ms is their sum (the work), 2-core the larger of the two sums when shard s is planned \
         on thread s % 2, and cycle ms is snapshot + 2-core + commit, the cycle on two idle \
         cores"
    );
    println!(
        "{:<12} {:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9}",
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
        "snap ms",
        "plan ms",
        "2-core",
        "commit",
        "cycle ms",
    );
    for (label, policy) in common::policies() {
        if only.as_ref().is_some_and(|only| only != label) {
            continue;
        }
        let mut one_shard = None;
        for &shards in &shard_counts {
            let mut allocator = common::warmed_up(policy, shards, agents, frameworks);
            let mut stats = CycleStats::default();
            // Snapshot, planning (the sum over shards, and the larger of the two threads'
            // sums when shard s is planned on thread s % 2), commit.
            let mut phases = [0.0; 4];
            for cycle in 0..cycles {
                common::rescind_all(&mut allocator);
                let now = 1.0 + cycle as f64;
                let start = Instant::now();
                let snapshot = allocator.snapshot_cycle(now);
                phases[0] += start.elapsed().as_secs_f64();
                let mut threads = [0.0; 2];
                let mut plans = Vec::new();
                for shard in 0..snapshot.shard_count() {
                    let planning = Instant::now();
                    plans.push(snapshot.plan_shard(shard));
                    threads[shard % 2] += planning.elapsed().as_secs_f64();
                }
                phases[1] += threads[0] + threads[1];
                phases[2] += threads[0].max(threads[1]);
                let committing = Instant::now();
                let outcome = allocator.commit_cycle(plans, now);
                phases[3] += committing.elapsed().as_secs_f64();
                stats.add(&outcome.stats);
            }
            let committed = stats.committed as f64 / cycles as f64;
            let reference = *one_shard.get_or_insert(committed);
            let ms = |seconds: f64| 1e3 * seconds / cycles as f64;
            println!(
                "{:<12} {:>6} {:>9.0} {:>9.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>7.2}% {:>8.0} {:>9.1}% {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1}",
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
                ms(phases[0]),
                ms(phases[1]),
                ms(phases[2]),
                ms(phases[3]),
                ms(phases[0] + phases[2] + phases[3]),
            );
        }
    }
}
