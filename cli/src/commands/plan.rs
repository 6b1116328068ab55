//! `fullerene plan`: Graphene's offline schedule for one job or all jobs of a workload, and how
//! close it comes to the lower bound (tech report §6 and §8.4).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use fullerene_proto::ResourceVec;
use fullerene_sdk::lower_bound::{lower_bounds, LowerBounds};
use fullerene_sdk::planner::{check_schedule, plan, PlanCluster, PlannerConfig};
use fullerene_sdk::{read_workload, Job};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::commands::resolve_workload;
use crate::output::{table, JsonOutput};

/// Flags of `fullerene plan`.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["job", "all"])))]
pub(crate) struct PlanArgs {
    /// Workload file (JSON Lines, `shared/workloads/FORMAT.md`). Default: the shared TPC-H file.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    workload: Option<PathBuf>,
    /// The job to plan, by name.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Plan every job and print the distribution of makespan / NewLB.
    #[arg(long)]
    all: bool,
    /// Machines the job is planned on (Graphene plans against the share a job expects).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100000))]
    machines: u32,
    /// Capacity of each machine.
    #[arg(
        long,
        value_name = "KIND=AMOUNT,...",
        default_value = "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
    )]
    machine_resources: ResourceVec,
    /// Explore candidate troublesome sets on one thread instead of all cores.
    #[arg(long)]
    sequential: bool,
}

/// One job's plan, as reported.
#[derive(Serialize)]
struct JobPlanReport {
    job: String,
    tasks: usize,
    stages: usize,
    makespan_s: f64,
    bounds: LowerBounds,
    ratio_to_new_lb: f64,
    construction_ms: f64,
    partitions: usize,
    candidates: usize,
}

/// The `--all` summary.
#[derive(Serialize)]
struct AllPlansReport {
    workload: PathBuf,
    machines: u32,
    machine: String,
    jobs: usize,
    ratio_median: f64,
    ratio_p75: f64,
    ratio_p90: f64,
    ratio_max: f64,
    total_construction_ms: f64,
    largest_job: String,
    largest_job_tasks: usize,
    largest_job_construction_ms: f64,
    per_job: Vec<JobPlanReport>,
}

/// Runs `fullerene plan`.
pub(crate) fn run(args: PlanArgs, json: &JsonOutput) -> Result<()> {
    let workload = resolve_workload(args.workload.clone())?;
    let jobs = read_workload(&workload)?;
    let cluster = PlanCluster::new(args.machines as usize, args.machine_resources);
    let config = PlannerConfig {
        parallel: !args.sequential,
        ..PlannerConfig::default()
    };
    if let Some(name) = &args.job {
        let job = jobs
            .iter()
            .find(|j| &j.name == name)
            .with_context(|| format!("no job named `{name}` in {}", workload.display()))?;
        let report = plan_one(job, &cluster, &config)?;
        return json.emit(&report, || render_one(&report));
    }
    if !args.all {
        bail!("give --job NAME or --all");
    }
    let bar = progress_bar(jobs.len() as u64);
    let mut per_job = Vec::with_capacity(jobs.len());
    for job in &jobs {
        bar.set_message(job.name.clone());
        per_job.push(plan_one(job, &cluster, &config)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let report = summarize(workload, &args, per_job);
    json.emit(&report, || render_all(&report))
}

fn plan_one(job: &Job, cluster: &PlanCluster, config: &PlannerConfig) -> Result<JobPlanReport> {
    let started = Instant::now();
    let planned = plan(job, cluster, config).with_context(|| format!("job `{}`", job.name))?;
    let construction_ms = started.elapsed().as_secs_f64() * 1e3;
    check_schedule(job, cluster, &planned.schedule)
        .with_context(|| format!("job `{}`: the planner built an invalid schedule", job.name))?;
    let bounds = lower_bounds(job, cluster);
    Ok(JobPlanReport {
        job: job.name.clone(),
        tasks: job.num_tasks(),
        stages: job.stages.len(),
        makespan_s: planned.makespan_s,
        ratio_to_new_lb: ratio(planned.makespan_s, bounds.new_lb),
        bounds,
        construction_ms,
        partitions: planned.stats.partitions,
        candidates: planned.stats.candidates,
    })
}

fn ratio(makespan: f64, bound: f64) -> f64 {
    if bound > 0.0 {
        makespan / bound
    } else {
        1.0
    }
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn summarize(workload: PathBuf, args: &PlanArgs, per_job: Vec<JobPlanReport>) -> AllPlansReport {
    let mut ratios: Vec<f64> = per_job.iter().map(|r| r.ratio_to_new_lb).collect();
    ratios.sort_by(f64::total_cmp);
    let largest = per_job.iter().max_by_key(|r| r.tasks);
    AllPlansReport {
        workload,
        machines: args.machines,
        machine: args.machine_resources.to_string(),
        jobs: per_job.len(),
        ratio_median: quantile(&ratios, 0.5),
        ratio_p75: quantile(&ratios, 0.75),
        ratio_p90: quantile(&ratios, 0.9),
        ratio_max: quantile(&ratios, 1.0),
        total_construction_ms: per_job.iter().map(|r| r.construction_ms).sum(),
        largest_job: largest.map(|r| r.job.clone()).unwrap_or_default(),
        largest_job_tasks: largest.map_or(0, |r| r.tasks),
        largest_job_construction_ms: largest.map_or(0.0, |r| r.construction_ms),
        per_job,
    }
}

fn render_one(r: &JobPlanReport) -> String {
    let mut t = table(&[
        "job",
        "tasks",
        "stages",
        "makespan s",
        "NewLB s",
        "ratio",
        "CPLen s",
        "TWork s",
        "ModCP s",
        "plan ms",
    ]);
    t.add_row([
        r.job.clone(),
        r.tasks.to_string(),
        r.stages.to_string(),
        format!("{:.2}", r.makespan_s),
        format!("{:.2}", r.bounds.new_lb),
        format!("{:.3}", r.ratio_to_new_lb),
        format!("{:.2}", r.bounds.cp_len),
        format!("{:.2}", r.bounds.t_work),
        format!("{:.2}", r.bounds.mod_cp),
        format!("{:.1}", r.construction_ms),
    ]);
    t.to_string()
}

fn render_all(r: &AllPlansReport) -> String {
    let mut t = table(&["makespan / NewLB", "value"]);
    t.add_row(["median".to_string(), format!("{:.4}", r.ratio_median)]);
    t.add_row(["p75".to_string(), format!("{:.4}", r.ratio_p75)]);
    t.add_row(["p90".to_string(), format!("{:.4}", r.ratio_p90)]);
    t.add_row(["max".to_string(), format!("{:.4}", r.ratio_max)]);
    format!(
        "{} jobs of {} on {} x {}\n{t}\nplanning took {:.0} ms in all; the largest job ({}, {} tasks) {:.1} ms",
        r.jobs,
        r.workload.display(),
        r.machines,
        r.machine,
        r.total_construction_ms,
        r.largest_job,
        r.largest_job_tasks,
        r.largest_job_construction_ms
    )
}

/// A progress bar on standard error, hidden when it is not a terminal.
pub(crate) fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.75), 3.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
    }
}
