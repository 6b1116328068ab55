//! The entry points: plan, run one policy, compare several on identical arrivals.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use fullerene_sdk::planner::{plan, Plan, PlanCluster, PlannerConfig};
use fullerene_sdk::Job;
use rayon::prelude::*;

use crate::config::SimConfig;
use crate::engine::{Engine, RunStats, TaskRecord};
use crate::error::SimError;
use crate::metrics::{JctStats, JAIN_WINDOWS_S};
use crate::report::{attach_ratios, JobResult, Scenario, SimReport, SimSpeed};
use crate::reserved::QueueSetup;
use crate::scheduling::Scheduling;
use crate::workload::{prepare_jobs, SimJob};

/// What a run reports while it goes, for a progress bar.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    /// Graphene's offline planner finished one more job (jobs are planned in parallel).
    Planning {
        /// Jobs planned so far.
        done: usize,
        /// Jobs to plan.
        total: usize,
    },
    /// A job of a run finished.
    Simulating {
        /// The run's policy, by its name in reports ([`Scheduling::name`]).
        policy: String,
        /// Jobs finished so far in this run.
        jobs_done: usize,
        /// Jobs in the run.
        jobs_total: usize,
        /// Virtual time, seconds.
        now_s: f64,
    },
    /// A study over several seeds or cluster sizes ([`crate::study`]) starts one of its
    /// comparisons; the [`Progress::Simulating`] reports that follow are this comparison's.
    Comparison {
        /// Comparisons started so far, this one included.
        started: usize,
        /// Comparisons in the study.
        total: usize,
        /// This comparison's seed.
        seed: u64,
        /// This comparison's number of machines.
        machines: usize,
    },
}

/// The progress callback: called from the threads that plan and simulate (runs of a
/// comparison go in parallel), hence `Sync`.
pub type ProgressFn<'a> = dyn Fn(&Progress) + Sync + 'a;

/// Graphene's offline plans for the jobs of a scenario, indexed by the job's position in the
/// workload file (cycled copies share their source's plan). Computed once, they serve every
/// Graphene run on the same cluster.
#[derive(Clone, Debug, Default)]
pub struct PlanSet {
    plans: Vec<Option<Plan>>,
    machines: usize,
    machine: fullerene_proto::ResourceVec,
}

impl PlanSet {
    /// The plan of the file's job `source`, if it was planned.
    pub fn get(&self, source: usize) -> Option<&Plan> {
        self.plans.get(source).and_then(Option::as_ref)
    }

    /// The plans, indexed by source.
    pub(crate) fn plans(&self) -> &[Option<Plan>] {
        &self.plans
    }

    fn fits(&self, config: &SimConfig) -> bool {
        self.machines == config.machines && self.machine == config.machine
    }
}

/// A run's report and, when [`SimConfig::record_trace`] is set, every task's placement.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    /// The report.
    pub report: SimReport,
    /// The jobs as simulated (names, groups, arrivals), indexed like [`TaskRecord::job`].
    pub jobs: Vec<SimJob>,
    /// Every task's run, in launch order (empty unless recorded).
    pub trace: Vec<TaskRecord>,
    /// What the engine did.
    pub stats: RunStats,
}

/// Plans every job the scenario uses with Graphene's offline planner, for the cluster it runs
/// on (`config.machines` machines of `config.machine`), as Graphene plans each DAG for the
/// cluster before it runs. Jobs are planned in parallel with rayon; each plan is deterministic,
/// so the set is the same as a sequential one, and errors are reported for the first failing
/// job in file order.
pub fn plan_jobs(
    file_jobs: &[Job],
    config: &SimConfig,
    progress: Option<&ProgressFn<'_>>,
) -> Result<PlanSet, SimError> {
    let jobs = prepare_jobs(file_jobs, config)?;
    plan_sources(file_jobs, &jobs, config, progress)
}

/// Plans the sources `jobs` use (cycled copies and repeats planned once).
pub(crate) fn plan_sources(
    file_jobs: &[Job],
    jobs: &[SimJob],
    config: &SimConfig,
    progress: Option<&ProgressFn<'_>>,
) -> Result<PlanSet, SimError> {
    // Only the sources the scenario uses: a random sample of a large file need not plan the
    // rest of it.
    let used = jobs.iter().map(|j| j.source).max().map_or(0, |s| s + 1);
    let mut wanted = vec![false; used];
    for job in jobs {
        wanted[job.source] = true;
    }
    let total = wanted.iter().filter(|&&w| w).count();
    let cluster = PlanCluster::new(config.machines, config.machine);
    let planner = PlannerConfig::default();
    let done = AtomicUsize::new(0);
    let results: Vec<Option<Result<Plan, SimError>>> = file_jobs[..used]
        .par_iter()
        .zip(wanted.par_iter())
        .map(|(job, &wanted)| {
            if !wanted {
                return None;
            }
            let result = plan(job, &cluster, &planner).map_err(|source| SimError::Plan {
                job: job.name.clone(),
                source,
            });
            let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(progress) = progress {
                progress(&Progress::Planning {
                    done: finished,
                    total,
                });
            }
            Some(result)
        })
        .collect();
    let mut plans = Vec::with_capacity(used);
    for result in results {
        plans.push(result.transpose()?);
    }
    Ok(PlanSet {
        plans,
        machines: config.machines,
        machine: config.machine,
    })
}

/// Runs `policy` (an intra-job [`PolicyKind`](fullerene_sdk::policy::PolicyKind) for every job, or a session,
/// [`Scheduling`]) over the jobs of `file_jobs` selected, grouped and timed by `config`, and
/// returns its report. Plans the jobs first if the policy follows Graphene's plan.
pub fn run(
    file_jobs: &[Job],
    config: &SimConfig,
    policy: impl Into<Scheduling>,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SimReport, SimError> {
    simulate(file_jobs, config, policy, None, progress).map(|o| o.report)
}

/// [`run`], with the trace and counters, and optionally reusing `plans` (computed by
/// [`plan_jobs`] for the same scenario; they are recomputed when they were made for another
/// cluster).
pub fn simulate(
    file_jobs: &[Job],
    config: &SimConfig,
    policy: impl Into<Scheduling>,
    plans: Option<&PlanSet>,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SimOutcome, SimError> {
    let policy = policy.into();
    let jobs = prepare_jobs(file_jobs, config)?;
    let computed;
    let plans: &[Option<Plan>] = if policy.needs_pri_scores() {
        match plans {
            Some(set) if set.fits(config) && jobs.iter().all(|j| set.get(j.source).is_some()) => {
                &set.plans
            }
            _ => {
                computed = plan_sources(file_jobs, &jobs, config, progress)?;
                &computed.plans
            }
        }
    } else {
        &[]
    };
    simulate_prepared(file_jobs, &jobs, config, &policy, plans, progress)
}

fn simulate_prepared(
    file_jobs: &[Job],
    jobs: &[SimJob],
    config: &SimConfig,
    policy: &Scheduling,
    plans: &[Option<Plan>],
    progress: Option<&ProgressFn<'_>>,
) -> Result<SimOutcome, SimError> {
    run_engine(file_jobs, jobs, config, policy, plans, None, progress)
}

/// [`simulate`] of jobs already prepared, with the allocator's queues (and, for Rayon, the
/// plan to follow) set by `queues` ([`crate::reserved`]).
pub(crate) fn simulate_queued(
    file_jobs: &[Job],
    jobs: &[SimJob],
    config: &SimConfig,
    policy: &Scheduling,
    plans: &[Option<Plan>],
    queues: QueueSetup,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SimOutcome, SimError> {
    run_engine(
        file_jobs,
        jobs,
        config,
        policy,
        plans,
        Some(queues),
        progress,
    )
}

fn run_engine(
    file_jobs: &[Job],
    jobs: &[SimJob],
    config: &SimConfig,
    policy: &Scheduling,
    plans: &[Option<Plan>],
    queues: Option<QueueSetup>,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SimOutcome, SimError> {
    let started = Instant::now();
    let engine = Engine::with_queues(config, policy, file_jobs, jobs, plans, progress, queues)?;
    let output = engine.run()?;
    let speed = SimSpeed::new(
        started.elapsed().as_secs_f64(),
        jobs.len(),
        output.stats.tasks,
        output.stats.events,
    );
    let mut report = build_report(
        policy.name(),
        config,
        jobs,
        &output.finish_s,
        &output.recorder,
    );
    report.speed = speed;
    Ok(SimOutcome {
        report,
        jobs: jobs.to_vec(),
        trace: output.trace,
        stats: output.stats,
    })
}

/// Runs every policy of `policies` (intra-job [`PolicyKind`](fullerene_sdk::policy::PolicyKind)s or [`Scheduling`]s, sessions
/// among them) on identical arrivals (the same jobs, groups and arrival times, from the same
/// seed), in parallel with rayon, and returns their reports in the order given. Graphene's
/// plans are computed once and shared. With `baseline`, every report but the baseline's carries
/// its [`crate::report::Ratios`] to it; a baseline not among `policies` is run too and its
/// report appended.
pub fn compare<S: Into<Scheduling> + Clone>(
    file_jobs: &[Job],
    config: &SimConfig,
    policies: &[S],
    baseline: Option<S>,
    progress: Option<&ProgressFn<'_>>,
) -> Result<Vec<SimReport>, SimError> {
    let (kinds, baseline) = comparison_kinds(policies, baseline)?;
    let jobs = prepare_jobs(file_jobs, config)?;
    let plans = if kinds.iter().any(Scheduling::needs_pri_scores) {
        plan_sources(file_jobs, &jobs, config, progress)?.plans
    } else {
        Vec::new()
    };
    compare_prepared(
        file_jobs,
        &jobs,
        config,
        &kinds,
        baseline.as_deref(),
        &plans,
        progress,
    )
}

/// The policies a comparison runs: `policies`, then `baseline` if none of them has its name;
/// and the baseline's name.
pub(crate) fn comparison_kinds<S: Into<Scheduling> + Clone>(
    policies: &[S],
    baseline: Option<S>,
) -> Result<(Vec<Scheduling>, Option<String>), SimError> {
    let mut kinds: Vec<Scheduling> = policies.iter().cloned().map(Into::into).collect();
    let baseline = baseline.map(Into::<Scheduling>::into);
    let name = baseline.as_ref().map(|b| b.name().to_string());
    if let Some(base) = baseline {
        if !kinds.iter().any(|k| k.name() == base.name()) {
            kinds.push(base);
        }
    }
    if kinds.is_empty() {
        return Err(SimError::InvalidConfig {
            reason: "no policy to compare".into(),
        });
    }
    Ok((kinds, name))
}

/// [`compare`] of `kinds` on jobs already prepared for `config`, with `plans` (indexed by
/// source, covering every job when a kind follows Graphene's plan), ratios to the run named
/// `baseline`.
pub(crate) fn compare_prepared(
    file_jobs: &[Job],
    jobs: &[SimJob],
    config: &SimConfig,
    kinds: &[Scheduling],
    baseline: Option<&str>,
    plans: &[Option<Plan>],
    progress: Option<&ProgressFn<'_>>,
) -> Result<Vec<SimReport>, SimError> {
    let results: Vec<Result<SimOutcome, SimError>> = kinds
        .par_iter()
        .map(|kind| simulate_prepared(file_jobs, jobs, config, kind, plans, progress))
        .collect();
    let mut reports = Vec::with_capacity(results.len());
    for result in results {
        reports.push(result?.report);
    }
    if let Some(base) = baseline {
        attach_ratios(&mut reports, base);
    }
    Ok(reports)
}

fn build_report(
    policy: &str,
    config: &SimConfig,
    jobs: &[SimJob],
    finish_s: &[f64],
    recorder: &crate::metrics::UsageRecorder,
) -> SimReport {
    let results: Vec<JobResult> = jobs
        .iter()
        .zip(finish_s)
        .map(|(job, &finish)| JobResult {
            name: job.name.clone(),
            group: job.group.clone(),
            arrival_s: job.arrival_s,
            finish_s: finish,
            jct_s: finish - job.arrival_s,
        })
        .collect();
    let jcts: Vec<f64> = results.iter().map(|r| r.jct_s).collect();
    let stats = JctStats::of(&jcts);
    let first_arrival = jobs
        .iter()
        .map(|j| j.arrival_s)
        .fold(f64::INFINITY, f64::min);
    let last_finish = finish_s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let makespan_s = if jobs.is_empty() {
        0.0
    } else {
        last_finish - first_arrival
    };
    let [f10, f60, f240] = JAIN_WINDOWS_S.map(|w| recorder.fairness(w));
    let mut groups: Vec<&str> = jobs.iter().map(|j| j.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    SimReport {
        policy: policy.to_string(),
        scenario: Scenario {
            machines: config.machines,
            machine: config.machine.to_string(),
            arrivals: config.arrivals.to_string(),
            jobs: jobs.len(),
            job_order: config.job_order.to_string(),
            groups: groups.len(),
            seed: config.seed,
        },
        avg_jct_s: stats.avg,
        median_jct_s: stats.median,
        p95_jct_s: stats.p95,
        makespan_s,
        mean_jobs_in_system: recorder.mean_jobs_in_system(),
        jain_10s_mean: f10.mean,
        jain_10s_min: f10.min,
        jain_60s_mean: f60.mean,
        jain_60s_min: f60.min,
        jain_240s_mean: f240.mean,
        jain_240s_min: f240.min,
        utilization: recorder.average_utilization(),
        utilization_timeline: recorder.utilization_timeline(),
        jobs: results,
        ratios: None,
        speed: SimSpeed::default(),
    }
}
