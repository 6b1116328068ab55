//! Multi-job sessions in simulation (issue 18; Decima §5.2 and §7): one framework runs many
//! jobs on a set of identical executors, a [`SessionPolicy`] chooses each stage and its job's
//! parallelism, and runs are compared on average job completion time.
//!
//! This is Decima's environment (its `spark_env`): `executors` task slots, each a machine of
//! one cpu, and every task takes one slot whatever its demand (Decima §5 schedules "DAGs on a
//! set of identical executors"; the workload's synthetic demands are ignored here). As in
//! Decima's simulator, an executor that starts a task of another job than its last one (or
//! its first) first moves, for [`DECIMA_MOVING_DELAY_S`]; an executor whose stage still has
//! tasks keeps working on it (the session's rule). Two settings, as Decima's evaluation:
//! a batch of jobs all present at time 0, and a stream of Poisson arrivals.
//!
//! Departures from Decima's simulator, both for want of data: task durations are the
//! workload's samples (profiled near 20 executors), not drawn by the job's parallelism and
//! wave, so parallelism costs only through the moving delay; and there is no first-wave
//! warm-up delay.

use std::sync::Arc;

use fullerene_proto::ResourceVec;
use fullerene_sdk::planner::{plan, PlanCluster, PlannerConfig};
use fullerene_sdk::session::{
    JobKey, Session, SessionOffer, SessionPolicy, SessionPolicyFactory, SessionPolicyKind,
};
use fullerene_sdk::timed_queue::TimedQueue;
use fullerene_sdk::{Job, TaskRef};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;

use crate::arrivals::poisson_arrivals;
use crate::error::SimError;

/// Decima's cluster: 50 executors (§2.3, §7).
pub const DECIMA_EXECUTORS: usize = 50;
/// Jobs in Decima's batch setting (§2.3: "ten randomly chosen TPC-H queries").
pub const DECIMA_BATCH_JOBS: usize = 10;
/// Seconds an executor takes to move to another job (Decima's simulator: `moving_delay`,
/// 2,000 ms).
pub const DECIMA_MOVING_DELAY_S: f64 = 2.0;
/// The load of Decima's streaming setting: its simulator's 25 s mean gap on 50 executors is
/// "load ~85%". Our task durations are the workload's samples, whose mean job (719
/// task-seconds on `tpch-decima.jsonl`) makes a 25 s gap only 57% load, so the gap is
/// derived from the load instead ([`mean_gap_for_load`]).
pub const DECIMA_STREAM_LOAD: f64 = 0.85;
/// Jobs in a streaming episode by default.
pub const DEFAULT_STREAM_JOBS: usize = 100;

/// How jobs arrive in an episode.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "setting")]
pub enum SessionSetting {
    /// `jobs` random jobs, all at time 0.
    Batch {
        /// How many.
        jobs: usize,
    },
    /// `jobs` random jobs, the first at 0, then Poisson arrivals.
    Poisson {
        /// How many.
        jobs: usize,
        /// Mean gap between arrivals, seconds.
        mean_gap_s: f64,
    },
}

impl SessionSetting {
    /// Decima's batch setting.
    pub const BATCH: SessionSetting = SessionSetting::Batch {
        jobs: DECIMA_BATCH_JOBS,
    };

    fn jobs(self) -> usize {
        match self {
            SessionSetting::Batch { jobs } | SessionSetting::Poisson { jobs, .. } => jobs,
        }
    }
}

/// The environment of a session episode.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SessionEnv {
    /// Executors (one-task slots).
    pub executors: usize,
    /// Seconds an executor takes to move between jobs.
    pub moving_delay_s: f64,
    /// How jobs arrive.
    pub setting: SessionSetting,
}

impl Default for SessionEnv {
    fn default() -> SessionEnv {
        SessionEnv {
            executors: DECIMA_EXECUTORS,
            moving_delay_s: DECIMA_MOVING_DELAY_S,
            setting: SessionSetting::BATCH,
        }
    }
}

impl SessionEnv {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), SimError> {
        let invalid = |reason: String| Err(SimError::InvalidConfig { reason });
        if self.executors == 0 {
            return invalid("a session needs at least one executor".into());
        }
        if !(self.moving_delay_s.is_finite() && self.moving_delay_s >= 0.0) {
            return invalid(format!(
                "the moving delay must be a finite number of seconds >= 0, not {}",
                self.moving_delay_s
            ));
        }
        if self.setting.jobs() == 0 {
            return Err(SimError::NoJobs);
        }
        if let SessionSetting::Poisson { mean_gap_s, .. } = self.setting {
            if !(mean_gap_s.is_finite() && mean_gap_s > 0.0) {
                return invalid(format!(
                    "the mean arrival gap must be a finite number of seconds > 0, not {mean_gap_s}"
                ));
            }
        }
        Ok(())
    }
}

/// One executor: a one-cpu slot.
fn executor() -> ResourceVec {
    let mut slot = ResourceVec::ZERO;
    slot[fullerene_proto::ResourceKind::Cpus] = 1.0;
    slot
}

/// An episode's jobs, as executors see them (every task one slot), with their arrivals.
#[derive(Clone, Debug)]
pub struct Episode {
    /// The jobs in arrival order, with their index in the workload file.
    pub jobs: Vec<EpisodeJob>,
}

/// One job of an episode.
#[derive(Clone, Debug)]
pub struct EpisodeJob {
    /// Its index in the workload file.
    pub source: usize,
    /// Its DAG, every task demanding one executor.
    pub job: Arc<Job>,
    /// When it arrives, seconds.
    pub arrival_s: f64,
}

/// Draws an episode: jobs uniformly at random from `file_jobs` (with replacement, as Decima
/// draws a query and an input size for each job), arriving as `env.setting` says, from
/// `seed`.
pub fn sample_episode(file_jobs: &[Job], env: &SessionEnv, seed: u64) -> Result<Episode, SimError> {
    env.validate()?;
    if file_jobs.is_empty() {
        return Err(SimError::NoJobs);
    }
    let count = env.setting.jobs();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Stream 0 of the seed draws arrivals (`poisson_arrivals`); the jobs use their own.
    rng.set_stream(1);
    let arrivals = match env.setting {
        SessionSetting::Batch { .. } => vec![0.0; count],
        SessionSetting::Poisson { mean_gap_s, .. } => poisson_arrivals(count, mean_gap_s, seed),
    };
    let mut executor_jobs: Vec<Option<Arc<Job>>> = vec![None; file_jobs.len()];
    let jobs = arrivals
        .into_iter()
        .map(|arrival_s| {
            let source = rng.gen_range(0..file_jobs.len());
            let job = executor_jobs[source]
                .get_or_insert_with(|| Arc::new(on_executors(&file_jobs[source])))
                .clone();
            EpisodeJob {
                source,
                job,
                arrival_s,
            }
        })
        .collect();
    Ok(Episode { jobs })
}

/// The mean arrival gap at which jobs drawn uniformly from `file_jobs` keep `executors` busy
/// `load` of the time with their tasks (moves not counted): the mean job's task-seconds over
/// `executors × load`.
pub fn mean_gap_for_load(file_jobs: &[Job], executors: usize, load: f64) -> Result<f64, SimError> {
    if file_jobs.is_empty() {
        return Err(SimError::NoJobs);
    }
    if !(load.is_finite() && load > 0.0) || executors == 0 {
        return Err(SimError::InvalidConfig {
            reason: format!(
                "a load must be > 0 on at least one executor, not {load} on {executors}"
            ),
        });
    }
    let work: f64 = file_jobs
        .iter()
        .flat_map(|job| &job.stages)
        .map(fullerene_sdk::Stage::total_duration)
        .sum();
    Ok(work / file_jobs.len() as f64 / (executors as f64 * load))
}

/// `job` with every task demanding one executor.
fn on_executors(job: &Job) -> Job {
    let mut job = job.clone();
    for stage in &mut job.stages {
        stage.demand = executor();
    }
    job
}

/// Graphene's priScores for each job of `episode`, planned on `executors` slots (each
/// distinct job once).
pub fn pri_scores(
    episode: &Episode,
    executors: usize,
) -> Result<Vec<Arc<Vec<Vec<f64>>>>, SimError> {
    let cluster = PlanCluster::new(executors, executor());
    let config = PlannerConfig::default();
    let mut sources: Vec<usize> = episode.jobs.iter().map(|j| j.source).collect();
    sources.sort_unstable();
    sources.dedup();
    let planned: Vec<(usize, Arc<Vec<Vec<f64>>>)> = sources
        .par_iter()
        .map(|&source| {
            let job = episode
                .jobs
                .iter()
                .find(|j| j.source == source)
                .map(|j| &j.job)
                .ok_or_else(|| SimError::Internal(format!("source {source} not in episode")))?;
            let planned = plan(job, &cluster, &config).map_err(|source| SimError::Plan {
                job: job.name.clone(),
                source,
            })?;
            Ok((source, Arc::new(planned.pri_scores)))
        })
        .collect::<Result<_, SimError>>()?;
    episode
        .jobs
        .iter()
        .map(|j| {
            planned
                .iter()
                .find(|(source, _)| *source == j.source)
                .map(|(_, scores)| scores.clone())
                .ok_or_else(|| SimError::Internal(format!("job `{}` not planned", j.job.name)))
        })
        .collect()
}

/// What one policy did in one episode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EpisodeOutcome {
    /// Each job's completion time minus its arrival, seconds, in the episode's job order; for
    /// a job still running when an episode was cut short, its time in the system until then,
    /// and `None` for one that had not arrived.
    pub jcts_s: Vec<Option<f64>>,
    /// Jobs that finished.
    pub finished: usize,
    /// When the last job finished, or when the episode was cut short, seconds.
    pub makespan_s: f64,
    /// Decisions the policy made.
    pub decisions: u64,
    /// Tasks launched.
    pub tasks: u64,
    /// Executor-seconds spent running tasks and moving, over executors × makespan.
    pub utilisation: f64,
}

impl EpisodeOutcome {
    /// The mean job completion time of the jobs that arrived, seconds.
    pub fn mean_jct_s(&self) -> f64 {
        let arrived: Vec<f64> = self.jcts_s.iter().flatten().copied().collect();
        arrived.iter().sum::<f64>() / arrived.len().max(1) as f64
    }
}

/// What happens at a time of the episode's timeline.
#[derive(Debug)]
enum EventKind {
    Arrival(usize),
    TaskDone {
        job: JobKey,
        task: TaskRef,
        executor: usize,
    },
}

/// One executor's state.
#[derive(Clone, Copy, Debug, Default)]
struct Executor {
    busy: bool,
    /// The job it works for (it moves to work for another).
    job: Option<JobKey>,
}

/// Runs `episode` under `policy` in `env`; `pri_scores` (one per job, from [`pri_scores`]) for
/// the policies that read them.
pub fn run_episode(
    episode: &Episode,
    policy: Box<dyn SessionPolicy>,
    env: &SessionEnv,
    pri_scores: Option<&[Arc<Vec<Vec<f64>>>]>,
) -> Result<EpisodeOutcome, SimError> {
    run_episode_until(episode, policy, env, pri_scores, f64::INFINITY)
}

/// [`run_episode`], stopped before the first event after `until_s` (Decima's training
/// episodes end at a random time, its curriculum).
pub fn run_episode_until(
    episode: &Episode,
    policy: Box<dyn SessionPolicy>,
    env: &SessionEnv,
    pri_scores: Option<&[Arc<Vec<Vec<f64>>>]>,
    until_s: f64,
) -> Result<EpisodeOutcome, SimError> {
    env.validate()?;
    let slot = executor();
    let mut session = Session::new(policy, env.executors, slot.scale(env.executors as f64));
    let mut executors = vec![Executor::default(); env.executors];
    let mut events = TimedQueue::new();
    for (i, job) in episode.jobs.iter().enumerate() {
        events.push(job.arrival_s, EventKind::Arrival(i));
    }
    // Keys are handed out in arrival order: key k is the k-th job to arrive.
    let mut index_of_key: Vec<usize> = Vec::with_capacity(episode.jobs.len());
    let mut jcts_s: Vec<Option<f64>> = vec![None; episode.jobs.len()];
    let mut finished = 0;
    let (mut tasks, mut now_s, mut busy_s) = (0_u64, 0.0, 0.0);
    while let Some(first) = events.pop() {
        if first.time > until_s {
            now_s = until_s;
            break;
        }
        now_s = first.time;
        let mut next = Some(first);
        while let Some(event) = next.take() {
            match event.kind {
                EventKind::Arrival(i) => {
                    let scores = pri_scores.and_then(|s| s.get(i)).cloned();
                    session.add_job(episode.jobs[i].job.clone(), now_s, scores);
                    index_of_key.push(i);
                }
                EventKind::TaskDone {
                    job,
                    task,
                    executor,
                } => {
                    executors[executor].busy = false;
                    let done = session.task_finished(job, task, now_s).map_err(|e| {
                        SimError::Internal(format!("session refused a completion: {e}"))
                    })?;
                    if let Some(done) = done {
                        let i = index_of_key[usize::try_from(done.key).unwrap_or(usize::MAX)];
                        jcts_s[i] = Some(now_s - done.arrival_s);
                        finished += 1;
                        // Its executors no longer work for it.
                        for e in executors.iter_mut().filter(|e| e.job == Some(done.key)) {
                            e.job = None;
                        }
                    }
                }
            }
            next = events.pop_at(now_s);
        }
        let offers: Vec<SessionOffer> = executors
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.busy)
            .map(|(machine, _)| SessionOffer {
                machine,
                free: slot,
                capacity: slot,
            })
            .collect();
        if offers.is_empty() || session.jobs().is_empty() {
            continue;
        }
        for launch in session.schedule(&offers, now_s) {
            let executor = &mut executors[launch.machine];
            let moving = if executor.job == Some(launch.job) {
                0.0
            } else {
                env.moving_delay_s
            };
            executor.busy = true;
            executor.job = Some(launch.job);
            let job = &session.jobs()[session
                .jobs()
                .binary_search_by_key(&launch.job, |j| j.key)
                .map_err(|_| SimError::Internal("launch for a job not in the session".into()))?];
            let busy_for = moving + job.job.duration(launch.task);
            // Only the part before a cut-off is the episode's.
            busy_s += busy_for.min(until_s - now_s);
            events.push(
                now_s + busy_for,
                EventKind::TaskDone {
                    job: launch.job,
                    task: launch.task,
                    executor: launch.machine,
                },
            );
            tasks += 1;
        }
    }
    let cut_short = now_s >= until_s && finished < episode.jobs.len();
    if cut_short {
        for (job, jct) in episode.jobs.iter().zip(&mut jcts_s) {
            if jct.is_none() && job.arrival_s <= now_s {
                *jct = Some(now_s - job.arrival_s);
            }
        }
    } else if finished < episode.jobs.len() {
        let first_job = session
            .jobs()
            .first()
            .map_or_else(String::new, |j| j.job.name.clone());
        return Err(SimError::Stalled {
            now_s,
            unfinished: episode.jobs.len() - finished,
            first_job,
        });
    }
    Ok(EpisodeOutcome {
        jcts_s,
        finished,
        makespan_s: now_s,
        decisions: session.decisions(),
        tasks,
        utilisation: busy_s / (env.executors as f64 * now_s).max(f64::MIN_POSITIVE),
    })
}

/// One policy's results over a comparison's episodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyResult {
    /// The policy's name.
    pub policy: String,
    /// Its mean JCT in each episode, seconds, by seed.
    pub mean_jct_s: Vec<f64>,
    /// The mean of those means, seconds.
    pub average_jct_s: f64,
    /// Decisions per episode, on average.
    pub decisions: f64,
    /// Executor utilisation, on average over the episodes.
    pub utilisation: f64,
}

/// Hand-written session policies compared on the same episodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionComparison {
    /// The environment.
    pub env: SessionEnv,
    /// The episodes' seeds.
    pub seeds: Vec<u64>,
    /// One row per policy, in the order asked.
    pub results: Vec<PolicyResult>,
}

/// A policy in a comparison: its name, whether it reads Graphene's priScores, and how to
/// make a fresh one for an episode.
pub struct Contender {
    /// The name in the table.
    pub name: String,
    /// Whether the episodes' jobs must be planned for it.
    pub needs_pri_scores: bool,
    /// A fresh policy for the episode of each seed.
    pub build: SessionPolicyFactory,
}

impl From<SessionPolicyKind> for Contender {
    fn from(kind: SessionPolicyKind) -> Contender {
        Contender {
            name: kind.name().to_string(),
            needs_pri_scores: kind.needs_pri_scores(),
            build: std::sync::Arc::new(move |_seed| kind.build()),
        }
    }
}

/// Runs every policy of `contenders` on the episodes of `seeds` (the same episodes for each),
/// in parallel over the episodes.
pub fn compare_sessions(
    file_jobs: &[Job],
    env: &SessionEnv,
    contenders: &[Contender],
    seeds: &[u64],
) -> Result<SessionComparison, SimError> {
    env.validate()?;
    let per_seed: Vec<Vec<EpisodeOutcome>> = seeds
        .par_iter()
        .map(|&seed| {
            let episode = sample_episode(file_jobs, env, seed)?;
            let scores = if contenders.iter().any(|c| c.needs_pri_scores) {
                Some(pri_scores(&episode, env.executors)?)
            } else {
                None
            };
            contenders
                .iter()
                .map(|c| {
                    let scores = scores.as_deref().filter(|_| c.needs_pri_scores);
                    run_episode(&episode, (c.build)(seed), env, scores)
                })
                .collect()
        })
        .collect::<Result<_, SimError>>()?;
    let results = contenders
        .iter()
        .enumerate()
        .map(|(k, contender)| {
            let mean_jct_s: Vec<f64> = per_seed.iter().map(|runs| runs[k].mean_jct_s()).collect();
            let n = mean_jct_s.len().max(1) as f64;
            PolicyResult {
                policy: contender.name.clone(),
                average_jct_s: mean_jct_s.iter().sum::<f64>() / n,
                decisions: per_seed
                    .iter()
                    .map(|runs| runs[k].decisions as f64)
                    .sum::<f64>()
                    / n,
                utilisation: per_seed.iter().map(|runs| runs[k].utilisation).sum::<f64>() / n,
                mean_jct_s,
            }
        })
        .collect();
    Ok(SessionComparison {
        env: *env,
        seeds: seeds.to_vec(),
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_sdk::testkit::{job, stage};

    fn one_stage(name: &str, tasks: usize, seconds: f64) -> Job {
        job(
            name,
            "default",
            None,
            vec![stage(0, &[], &vec![seconds; tasks], executor())],
        )
    }

    fn episode(jobs: &[(Job, f64)]) -> Episode {
        Episode {
            jobs: jobs
                .iter()
                .enumerate()
                .map(|(source, (job, arrival_s))| EpisodeJob {
                    source,
                    job: Arc::new(job.clone()),
                    arrival_s: *arrival_s,
                })
                .collect(),
        }
    }

    fn env(executors: usize, moving_delay_s: f64) -> SessionEnv {
        SessionEnv {
            executors,
            moving_delay_s,
            setting: SessionSetting::BATCH,
        }
    }

    #[test]
    fn a_job_alone_runs_in_waves_after_the_move() {
        // 4 tasks of 1 s on 2 executors: a 2 s move, then two waves (the executors stay on
        // the stage, so they move once).
        let ep = episode(&[(one_stage("a", 4, 1.0), 0.0)]);
        let out = run_episode(&ep, SessionPolicyKind::Fifo.build(), &env(2, 2.0), None).unwrap();
        assert_eq!(out.jcts_s, vec![Some(4.0)]);
        assert_eq!(out.tasks, 4);
        assert_eq!(out.decisions, 1);
    }

    #[test]
    fn sjf_beats_fifo_when_a_long_job_comes_first() {
        let ep = episode(&[
            (one_stage("long", 10, 10.0), 0.0),
            (one_stage("short", 1, 1.0), 0.0),
        ]);
        let e = env(1, 0.0);
        let fifo = run_episode(&ep, SessionPolicyKind::Fifo.build(), &e, None).unwrap();
        let sjf = run_episode(&ep, SessionPolicyKind::Sjf.build(), &e, None).unwrap();
        assert_eq!(fifo.jcts_s, vec![Some(100.0), Some(101.0)]);
        assert_eq!(sjf.jcts_s, vec![Some(101.0), Some(1.0)]);
    }

    #[test]
    fn moving_between_jobs_costs_the_delay() {
        // One executor, two one-task jobs: it moves to the first (2 s), runs it (1 s), moves
        // to the second (2 s), runs it.
        let ep = episode(&[(one_stage("a", 1, 1.0), 0.0), (one_stage("b", 1, 1.0), 0.0)]);
        let out = run_episode(&ep, SessionPolicyKind::Fifo.build(), &env(1, 2.0), None).unwrap();
        assert_eq!(out.jcts_s, vec![Some(3.0), Some(6.0)]);
        assert_eq!(out.makespan_s, 6.0);
        assert_eq!(out.utilisation, 1.0);
    }

    #[test]
    fn an_episode_cut_short_counts_the_time_jobs_spent_so_far() {
        let ep = episode(&[
            (one_stage("a", 1, 1.0), 0.0),
            (one_stage("b", 1, 1.0), 0.0),
            (one_stage("late", 1, 1.0), 10.0),
        ]);
        let out = run_episode_until(
            &ep,
            SessionPolicyKind::Fifo.build(),
            &env(1, 2.0),
            None,
            4.0,
        )
        .unwrap();
        // a finished at 3; b moved at 3 and would finish at 6; late had not arrived.
        assert_eq!(out.jcts_s, vec![Some(3.0), Some(4.0), None]);
        assert_eq!(out.mean_jct_s(), 3.5);
        // One executor, busy from 0 to the cut-off at 4.
        assert_eq!(out.utilisation, 1.0);
        assert_eq!(out.finished, 1);
        assert_eq!(out.makespan_s, 4.0);
    }

    #[test]
    fn episodes_are_drawn_from_the_seed() {
        let file: Vec<Job> = (0..20)
            .map(|i| one_stage(&format!("j{i}"), 2, 1.0))
            .collect();
        let poisson = SessionEnv {
            setting: SessionSetting::Poisson {
                jobs: 30,
                mean_gap_s: 5.0,
            },
            ..SessionEnv::default()
        };
        let a = sample_episode(&file, &poisson, 7).unwrap();
        let b = sample_episode(&file, &poisson, 7).unwrap();
        let c = sample_episode(&file, &poisson, 8).unwrap();
        let sources = |e: &Episode| e.jobs.iter().map(|j| j.source).collect::<Vec<_>>();
        assert_eq!(sources(&a), sources(&b));
        assert_ne!(sources(&a), sources(&c));
        assert_eq!(a.jobs.len(), 30);
        assert!(a.jobs.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        assert!(a.jobs.last().unwrap().arrival_s > 0.0);
    }

    #[test]
    fn the_gap_for_a_load_keeps_the_executors_that_busy() {
        // Jobs of 10 and 30 task-seconds: 20 on average; on 4 executors at half load, one
        // every 10 s.
        let file = vec![one_stage("a", 10, 1.0), one_stage("b", 3, 10.0)];
        assert!((mean_gap_for_load(&file, 4, 0.5).unwrap() - 10.0).abs() < 1e-9);
        assert!(mean_gap_for_load(&file, 4, 0.0).is_err());
        assert!(mean_gap_for_load(&[], 4, 0.5).is_err());
    }

    #[test]
    fn bad_settings_are_named() {
        let file = vec![one_stage("a", 1, 1.0)];
        let no_executors = SessionEnv {
            executors: 0,
            ..SessionEnv::default()
        };
        let err = sample_episode(&file, &no_executors, 1).unwrap_err();
        assert!(err.to_string().contains("executor"), "{err}");
        let bad_gap = SessionEnv {
            setting: SessionSetting::Poisson {
                jobs: 3,
                mean_gap_s: 0.0,
            },
            ..SessionEnv::default()
        };
        let err = sample_episode(&file, &bad_gap, 1).unwrap_err();
        assert!(err.to_string().contains("gap"), "{err}");
    }

    #[test]
    fn every_policy_finishes_every_job_of_a_comparison() {
        let file: Vec<Job> = (0..5)
            .map(|i| {
                job(
                    &format!("j{i}"),
                    "default",
                    None,
                    vec![
                        stage(0, &[], &vec![1.0 + i as f64; 3 + i], executor()),
                        stage(1, &[0], &[2.0; 2], executor()),
                    ],
                )
            })
            .collect();
        let small = SessionEnv {
            executors: 4,
            ..SessionEnv::default()
        };
        let all = || SessionPolicyKind::ALL.map(Contender::from);
        let cmp = compare_sessions(&file, &small, &all(), &[1, 2]).unwrap();
        let again = compare_sessions(&file, &small, &all(), &[1, 2]).unwrap();
        assert_eq!(cmp, again, "episodes run in parallel give the same results");
        assert_eq!(cmp.results.len(), SessionPolicyKind::ALL.len());
        for r in &cmp.results {
            assert_eq!(r.mean_jct_s.len(), 2);
            assert!(
                r.average_jct_s.is_finite() && r.average_jct_s > 0.0,
                "{r:?}"
            );
        }
    }
}
