//! Turns a workload file's jobs into the jobs of one experiment: how many (`--jobs`), in which
//! fairness groups (`--groups`), arriving when (`--arrivals`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use fullerene_proto::ResourceVec;
use fullerene_scheduling::Overbooking;
use fullerene_sdk::workload::DEFAULT_GROUP;
use fullerene_sdk::Job;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::arrivals::{poisson_arrivals, ArrivalSpec};
use crate::config::SimConfig;
use crate::error::SimError;

/// Which of the file's jobs an experiment runs, and in what order (`--job-order`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JobOrder {
    /// The file's order: `--jobs N` runs its first N jobs.
    #[default]
    File,
    /// A seeded random permutation of the file (seed [`SimConfig::seed`]): `--jobs N` runs N
    /// jobs drawn without replacement, a random sample of the file's mix of queries and input
    /// sizes, as Decima's and Graphene's evaluations sample TPC-H jobs. Files are often sorted
    /// (the TPC-H files by input size), so their first N jobs are not a representative mix.
    Random,
}

/// Why a job order could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown job order `{0}`: expected `file` or `random`")]
pub struct JobOrderError(String);

impl FromStr for JobOrder {
    type Err = JobOrderError;

    fn from_str(s: &str) -> Result<JobOrder, JobOrderError> {
        match s.trim() {
            "file" => Ok(JobOrder::File),
            "random" => Ok(JobOrder::Random),
            other => Err(JobOrderError(other.to_string())),
        }
    }
}

impl fmt::Display for JobOrder {
    /// The same syntax [`FromStr`] accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobOrder::File => "file",
            JobOrder::Random => "random",
        })
    }
}

/// The ChaCha stream of the job order's draws: the arrivals use stream 0 of the same seed, so
/// that the jobs drawn and their arrival times are independent.
const JOB_ORDER_STREAM: u64 = 1;

/// The sources (indices into the file) of the `count` jobs an experiment runs, in selection
/// order. [`JobOrder::File`] cycles through the file; [`JobOrder::Random`] draws a fresh seeded
/// permutation for every pass through it, so that each pass holds every job once.
pub fn job_sources(file_len: usize, count: usize, order: JobOrder, seed: u64) -> Vec<usize> {
    if file_len == 0 {
        return Vec::new();
    }
    match order {
        JobOrder::File => (0..count).map(|i| i % file_len).collect(),
        JobOrder::Random => {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(JOB_ORDER_STREAM);
            let mut out = Vec::with_capacity(count);
            let mut pass: Vec<usize> = Vec::with_capacity(file_len);
            while out.len() < count {
                pass.clear();
                pass.extend(0..file_len);
                pass.shuffle(&mut rng);
                out.extend(pass.iter().take(count - out.len()));
            }
            out
        }
    }
}

/// One job of an experiment. Copies made by cycling share their source's DAG (and plan).
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    /// Unique name: the file's name, suffixed `#k` for the k-th extra copy.
    pub name: String,
    /// Fairness group.
    pub group: String,
    /// Arrival time, seconds.
    pub arrival_s: f64,
    /// Index of the job's DAG in the workload file's jobs.
    pub source: usize,
}

/// Selects, groups and times the jobs of an experiment.
///
/// - `--jobs N` takes the first N jobs of the file, or with `--job-order random` N jobs of a
///   seeded random permutation of it ([`job_sources`]); when N exceeds the file, it goes
///   through it again (a new permutation for `random`), naming the k-th extra copy of job `x`
///   `x#k` (so `q1`, ..., `q22`, `q1#1`, ...). Copies keep their source's DAG and durations,
///   and therefore share its Graphene plan.
/// - `--groups K` moves jobs of group `default` (lines that name no group) round-robin, in
///   selection order, into `g0..g{K-1}`; named groups are kept.
/// - Arrivals: as [`arrival_times`] gives them (`zero`, `poisson:M`, `trace`).
///
/// Also checks, for every selected DAG, that each stage's task demand fits an empty machine,
/// since a task that fits no machine would wait forever.
pub fn prepare_jobs(file_jobs: &[Job], config: &SimConfig) -> Result<Vec<SimJob>, SimError> {
    validate_config(config)?;
    if file_jobs.is_empty() {
        return Err(SimError::NoJobs);
    }
    let count = config.jobs.unwrap_or(file_jobs.len());
    if count == 0 {
        return Err(SimError::NoJobs);
    }
    let sources = job_sources(file_jobs.len(), count, config.job_order, config.seed);
    let mut checked = vec![false; file_jobs.len()];
    for &source in &sources {
        if !std::mem::replace(&mut checked[source], true) {
            check_fits(&file_jobs[source], std::slice::from_ref(&config.machine))?;
        }
    }

    let arrivals = arrival_times(file_jobs, &sources, config.arrivals, config.seed)?;

    let mut names = BTreeSet::new();
    let mut default_jobs_seen = 0usize;
    let mut jobs = Vec::with_capacity(count);
    for (i, &source) in sources.iter().enumerate() {
        let copy = i / file_jobs.len();
        let job = &file_jobs[source];
        let name = if copy == 0 {
            job.name.clone()
        } else {
            format!("{}#{copy}", job.name)
        };
        if !names.insert(name.clone()) {
            return Err(SimError::DuplicateJobName { name });
        }
        let group = match config.groups {
            Some(k) if job.group == DEFAULT_GROUP => {
                let g = format!("g{}", default_jobs_seen % k);
                default_jobs_seen += 1;
                g
            }
            _ => job.group.clone(),
        };
        jobs.push(SimJob {
            name,
            group,
            arrival_s: arrivals[i],
            source,
        });
    }
    Ok(jobs)
}

/// The arrival time, in seconds from the start, of each job selected by `sources` (indices into
/// `file_jobs`, in selection order, as [`job_sources`] makes them), under `spec`: `zero` puts
/// every job at 0; `poisson:M` gives the i-th selected job the i-th time of a Poisson process
/// seeded with `seed` ([`poisson_arrivals`]); `trace` uses `arrival_s`, and the k-th extra
/// copy of a job (the i-th selection with i / `file_jobs.len()` = k) arrives at
/// `arrival_s + k · P`, P the largest `arrival_s` of the file, so that cycling replays the
/// trace after itself. `trace` needs every job of the file to have an `arrival_s`.
///
/// The simulator and `fullerene job run --arrivals` both time their jobs with it.
pub fn arrival_times(
    file_jobs: &[Job],
    sources: &[usize],
    spec: ArrivalSpec,
    seed: u64,
) -> Result<Vec<f64>, SimError> {
    match spec {
        ArrivalSpec::Zero => Ok(vec![0.0; sources.len()]),
        ArrivalSpec::Poisson { mean_gap_s } => {
            Ok(poisson_arrivals(sources.len(), mean_gap_s, seed))
        }
        ArrivalSpec::Trace => {
            let mut period: f64 = 0.0;
            for job in file_jobs {
                let arrival = job.arrival_s.ok_or_else(|| SimError::MissingArrival {
                    job: job.name.clone(),
                })?;
                period = period.max(arrival);
            }
            Ok(sources
                .iter()
                .enumerate()
                .map(|(i, &source)| {
                    let copy = i / file_jobs.len().max(1);
                    // Checked above: every job of the file has an arrival time.
                    let arrival = file_jobs.get(source).and_then(|job| job.arrival_s);
                    arrival.unwrap_or(0.0) + copy as f64 * period
                })
                .collect())
        }
    }
}

fn validate_config(config: &SimConfig) -> Result<(), SimError> {
    let invalid = |reason: String| Err(SimError::InvalidConfig { reason });
    if config.machines == 0 {
        return invalid("the cluster needs at least one machine".into());
    }
    if !config.machine.is_valid() || config.machine.is_zero() {
        return invalid(format!(
            "machine capacity `{}` must be finite, non-negative and not all zero",
            config.machine
        ));
    }
    if config.groups == Some(0) {
        return invalid("--groups must be at least 1".into());
    }
    if !(config.offer_interval_s.is_finite() && config.offer_interval_s >= 0.0) {
        return invalid(format!(
            "offer interval {} must be a finite number of seconds >= 0",
            config.offer_interval_s
        ));
    }
    if !(config.reoffer_interval_s.is_finite() && config.reoffer_interval_s >= 0.0) {
        return invalid(format!(
            "re-offer interval {} must be a finite number of seconds >= 0",
            config.reoffer_interval_s
        ));
    }
    if !(config.remote_penalty.is_finite() && (0.0..=1.0).contains(&config.remote_penalty)) {
        return invalid(format!(
            "remote penalty {} must be in [0, 1]",
            config.remote_penalty
        ));
    }
    if !(config.decline_filter_s.is_finite() && config.decline_filter_s >= 0.0) {
        return invalid(format!(
            "decline filter {} must be a finite number of seconds >= 0",
            config.decline_filter_s
        ));
    }
    if !(config.kappa.is_finite() && (0.0..1.0).contains(&config.kappa)) {
        return invalid(format!("kappa {} must be in [0, 1)", config.kappa));
    }
    if !Overbooking(config.overbook_allowance).is_valid() {
        return invalid(format!(
            "overbooking allowance {} must be finite and >= 0",
            config.overbook_allowance
        ));
    }
    Ok(())
}

/// Checks that every stage's task fits one of `machines` when it is empty: a stage whose task
/// demand exceeds them all can never run, whatever the policy (even one that overbooks
/// bandwidth, since the others would not). The one rule behind `sim`, `dev` and `job run`'s
/// refusal of such a workload, for a cluster of one machine size or of several.
pub fn check_fits(job: &Job, machines: &[ResourceVec]) -> Result<(), SimError> {
    for stage in &job.stages {
        if !machines.iter().any(|machine| stage.demand.fits_in(machine)) {
            let sizes: Vec<String> = machines.iter().map(ToString::to_string).collect();
            return Err(SimError::DemandFitsNoMachine {
                job: job.name.clone(),
                stage: stage.id,
                stage_name: stage.name.clone(),
                demand: stage.demand.to_string(),
                machine: if sizes.is_empty() {
                    "none".to_string()
                } else {
                    sizes.join("; ")
                },
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_sdk::job::StageSpec;
    use fullerene_sdk::testkit;
    use fullerene_sdk::workload::parse_workload;
    use std::path::Path;

    fn job(name: &str, group: &str, arrival: Option<f64>, cpus: f64) -> Job {
        let map = StageSpec {
            name: "map".into(),
            ..testkit::stage(3, &[], &[1.0], testkit::cpus(cpus))
        };
        testkit::job(name, group, arrival, vec![map])
    }

    fn config(arrivals: ArrivalSpec) -> SimConfig {
        SimConfig {
            arrivals,
            ..SimConfig::default()
        }
    }

    #[test]
    fn cycling_suffixes_names_and_groups_spread_round_robin() {
        let file = vec![
            job("a", DEFAULT_GROUP, None, 1.0),
            job("b", "named", None, 1.0),
            job("c", DEFAULT_GROUP, None, 1.0),
        ];
        let cfg = SimConfig {
            jobs: Some(7),
            groups: Some(2),
            ..config(ArrivalSpec::Zero)
        };
        let jobs = prepare_jobs(&file, &cfg).unwrap();
        let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "a#1", "b#1", "c#1", "a#2"]);
        let groups: Vec<&str> = jobs.iter().map(|j| j.group.as_str()).collect();
        assert_eq!(groups, ["g0", "named", "g1", "g0", "named", "g1", "g0"]);
        assert_eq!(jobs[6].source, 0);
        assert!(jobs.iter().all(|j| j.arrival_s == 0.0));

        let first_two = prepare_jobs(
            &file,
            &SimConfig {
                jobs: Some(2),
                ..config(ArrivalSpec::Zero)
            },
        )
        .unwrap();
        assert_eq!(first_two.len(), 2);
        assert_eq!(first_two[0].group, DEFAULT_GROUP);
    }

    #[test]
    fn trace_arrivals_need_arrival_s_and_cycle_after_the_trace() {
        let file = vec![
            job("a", "g", Some(5.0), 1.0),
            job("b", "g", Some(20.0), 1.0),
        ];
        let cfg = SimConfig {
            jobs: Some(3),
            ..config(ArrivalSpec::Trace)
        };
        let jobs = prepare_jobs(&file, &cfg).unwrap();
        let arrivals: Vec<f64> = jobs.iter().map(|j| j.arrival_s).collect();
        assert_eq!(arrivals, [5.0, 20.0, 25.0]);

        let missing = vec![job("a", "g", Some(5.0), 1.0), job("b", "g", None, 1.0)];
        let err = prepare_jobs(&missing, &config(ArrivalSpec::Trace)).unwrap_err();
        assert!(matches!(&err, SimError::MissingArrival { job } if job == "b"));
        assert!(err.to_string().contains("`b`"), "{err}");
    }

    #[test]
    fn poisson_arrivals_follow_the_seed() {
        let file: Vec<Job> = (0..5)
            .map(|i| job(&format!("j{i}"), "g", None, 1.0))
            .collect();
        let cfg = |seed| SimConfig {
            seed,
            ..config(ArrivalSpec::Poisson { mean_gap_s: 10.0 })
        };
        let a = prepare_jobs(&file, &cfg(1)).unwrap();
        let b = prepare_jobs(&file, &cfg(1)).unwrap();
        let c = prepare_jobs(&file, &cfg(2)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a[0].arrival_s, 0.0);
        assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    }

    #[test]
    fn random_order_is_a_seeded_permutation_per_pass() {
        let order = |count, seed| job_sources(10, count, JobOrder::Random, seed);
        assert_eq!(order(25, 3), order(25, 3));
        assert_ne!(order(10, 3), order(10, 4));
        let all = order(25, 3);
        for pass in all.chunks(10) {
            let mut sorted = pass.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                pass.len(),
                "each pass holds a job once: {pass:?}"
            );
        }
        assert_ne!(all[..10], (0..10).collect::<Vec<_>>()[..], "shuffled");
        // A prefix of a longer draw: --jobs N and --jobs M > N start alike.
        assert_eq!(order(4, 3)[..], all[..4]);
        assert_eq!(
            job_sources(3, 7, JobOrder::File, 9),
            vec![0, 1, 2, 0, 1, 2, 0]
        );
        assert!(job_sources(0, 5, JobOrder::Random, 1).is_empty());
    }

    #[test]
    fn random_order_keeps_names_unique_and_arrivals_independent() {
        let file: Vec<Job> = (0..6)
            .map(|i| job(&format!("j{i}"), DEFAULT_GROUP, None, 1.0))
            .collect();
        let cfg = |order| SimConfig {
            jobs: Some(14),
            groups: Some(2),
            job_order: order,
            seed: 5,
            ..config(ArrivalSpec::Poisson { mean_gap_s: 10.0 })
        };
        let random = prepare_jobs(&file, &cfg(JobOrder::Random)).unwrap();
        let in_file = prepare_jobs(&file, &cfg(JobOrder::File)).unwrap();
        let names: BTreeSet<&str> = random.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names.len(), 14);
        for job in &random {
            let copy = job.name.split_once('#').map(|(base, _)| base);
            assert_eq!(copy.unwrap_or(&job.name), file[job.source].name);
        }
        let sources: Vec<usize> = random.iter().map(|j| j.source).collect();
        assert_ne!(
            sources,
            in_file.iter().map(|j| j.source).collect::<Vec<_>>()
        );
        // The i-th job arrives at the same time whichever job it is, and groups still alternate.
        for (r, f) in random.iter().zip(&in_file) {
            assert_eq!(r.arrival_s, f.arrival_s);
            assert_eq!(r.group, f.group);
        }
    }

    #[test]
    fn job_orders_parse_and_display() {
        for order in [JobOrder::File, JobOrder::Random] {
            assert_eq!(order.to_string().parse::<JobOrder>(), Ok(order));
        }
        let err = "shuffle".parse::<JobOrder>().unwrap_err();
        assert!(err.to_string().contains("`shuffle`"), "{err}");
    }

    #[test]
    fn a_stage_that_fits_no_machine_is_named() {
        let file = vec![job("small", "g", None, 1.0), job("huge", "g", None, 64.0)];
        let err = prepare_jobs(&file, &config(ArrivalSpec::Zero)).unwrap_err();
        assert!(
            matches!(&err, SimError::DemandFitsNoMachine { job, stage: 3, .. } if job == "huge"),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("huge") && text.contains("map"), "{text}");
        // Only the selected jobs are checked.
        let cfg = SimConfig {
            jobs: Some(1),
            ..config(ArrivalSpec::Zero)
        };
        assert!(prepare_jobs(&file, &cfg).is_ok());
    }

    #[test]
    fn a_stage_fits_a_cluster_of_mixed_sizes_when_one_machine_holds_it() {
        let wide = job("wide", "g", None, 12.0);
        let small = testkit::cpus_and_mem(8.0, 1024.0);
        let large = testkit::cpus_and_mem(16.0, 1024.0);
        assert!(check_fits(&wide, &[small, large]).is_ok());
        let err = check_fits(&wide, &[small, small]).unwrap_err().to_string();
        assert!(err.contains("`map`") && err.contains("cpus=8"), "{err}");
        let err = check_fits(&wide, &[]).unwrap_err().to_string();
        assert!(err.contains("(none)"), "{err}");
    }

    #[test]
    fn bad_configs_are_rejected() {
        let file = parse_workload(
            r#"{"name":"a","stages":[{"id":0,"tasks":1,"duration_s":1}]}"#,
            Path::new("w"),
        )
        .unwrap();
        for cfg in [
            SimConfig {
                machines: 0,
                ..SimConfig::default()
            },
            SimConfig {
                groups: Some(0),
                ..SimConfig::default()
            },
            SimConfig {
                offer_interval_s: -1.0,
                ..SimConfig::default()
            },
            SimConfig {
                jobs: Some(0),
                ..SimConfig::default()
            },
        ] {
            assert!(prepare_jobs(&file, &cfg).is_err(), "{cfg:?}");
        }
    }
}
