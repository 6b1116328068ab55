//! Plans every job of a workload and compares each offline schedule with NewLB (tech report
//! §6 and §8.4): prints the distribution of makespan / NewLB and the time to plan the largest
//! job. `fullerene plan --all` reports the same figures through the same library calls.
//!
//! ```text
//! cargo run --release -p fullerene-sdk --example plan_all -- \
//!     [WORKLOAD] [MACHINES] [MACHINE_CAPACITY] [--sequential]
//! ```
//!
//! Defaults: `shared/workloads/tpch-decima.jsonl`, 2 machines of
//! `cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use fullerene_proto::ResourceVec;
use fullerene_sdk::lower_bound::lower_bounds;
use fullerene_sdk::planner::{check_schedule, plan, PlanCluster, PlannerConfig};
use fullerene_sdk::{read_workload, Job};

/// CPU time of the whole process (all threads) in milliseconds, where Linux's `/proc` tells it:
/// on a shared machine it says what planning costs when the wall clock includes waiting.
fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks are 100 per second on every Linux configuration Rust supports by default.
    Some((utime + stime) * 10.0)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let sequential = args.iter().any(|a| a == "--sequential");
    args.retain(|a| a != "--sequential");
    let workload = args.first().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl")
    });
    let machines: usize = args.get(1).map_or(Ok(2), |m| m.parse())?;
    let capacity: ResourceVec = args
        .get(2)
        .map_or("cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000", |c| {
            c.as_str()
        })
        .parse()?;
    let cluster = PlanCluster::new(machines, capacity);
    let config = PlannerConfig {
        parallel: !sequential,
        ..PlannerConfig::default()
    };
    let jobs = read_workload(&workload)?;

    let mut ratios = Vec::with_capacity(jobs.len());
    let mut built_ratios = Vec::with_capacity(jobs.len());
    let mut worst: Option<(f64, &Job)> = None;
    let started = Instant::now();
    for job in &jobs {
        let planned = plan(job, &cluster, &config)?;
        check_schedule(job, &cluster, &planned.schedule)?;
        let bounds = lower_bounds(job, &cluster);
        let ratio = planned.makespan_s / bounds.new_lb;
        built_ratios.push(planned.stats.built_makespan_s / bounds.new_lb);
        if worst.is_none_or(|(r, _)| ratio > r) {
            worst = Some((ratio, job));
        }
        ratios.push(ratio);
    }
    let total = started.elapsed();
    ratios.sort_by(f64::total_cmp);
    built_ratios.sort_by(f64::total_cmp);
    println!(
        "{} jobs of {} on {machines} x {capacity}",
        jobs.len(),
        workload.display()
    );
    println!(
        "makespan / NewLB: median {:.4}  p75 {:.4}  p90 {:.4}  max {:.4}{}",
        quantile(&ratios, 0.5),
        quantile(&ratios, 0.75),
        quantile(&ratios, 0.9),
        quantile(&ratios, 1.0),
        worst.map_or(String::new(), |(_, j)| format!(" ({})", j.name)),
    );
    println!(
        "  as built, before improvement: median {:.4}  p75 {:.4}  p90 {:.4}  max {:.4}",
        quantile(&built_ratios, 0.5),
        quantile(&built_ratios, 0.75),
        quantile(&built_ratios, 0.9),
        quantile(&built_ratios, 1.0),
    );
    println!(
        "optimal (ratio <= 1.0001): {} of {}",
        ratios.iter().filter(|&&r| r <= 1.0001).count(),
        ratios.len()
    );
    println!("all jobs planned in {:.1} ms", total.as_secs_f64() * 1e3);

    let largest = jobs
        .iter()
        .max_by_key(|j| j.num_tasks())
        .ok_or("the workload has no jobs")?;
    let mut times = Vec::new();
    let mut last = None;
    let cpu_before = process_cpu_ms();
    for _ in 0..10 {
        let t = Instant::now();
        last = Some(plan(largest, &cluster, &config)?);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let cpu_per_plan = cpu_before
        .zip(process_cpu_ms())
        .map(|(before, after)| (after - before) / 10.0);
    times.sort_by(f64::total_cmp);
    let planned = last.ok_or("no plan")?;
    let bounds = lower_bounds(largest, &cluster);
    println!(
        "largest job {} ({} tasks): plan in {:.1} ms (median of 10, min {:.1}; CPU {}), {} \
         parts, {} candidates, makespan {:.2} s, NewLB {:.2} s (CPLen {:.2}, TWork {:.2}, \
         ModCP {:.2})",
        largest.name,
        largest.num_tasks(),
        quantile(&times, 0.5),
        times[0],
        cpu_per_plan.map_or("unknown".to_string(), |ms| format!("{ms:.0} ms per plan")),
        planned.stats.partitions,
        planned.stats.candidates,
        planned.makespan_s,
        bounds.new_lb,
        bounds.cp_len,
        bounds.t_work,
        bounds.mod_cp
    );
    Ok(())
}
