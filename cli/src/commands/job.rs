//! `fullerene job`: submit DAG jobs to a running cluster with the SDK's DAG-job framework.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_client::event_log::EventLog;
use fullerene_proto::messages::AgentState;
use fullerene_proto::ResourceVec;
use fullerene_sdk::dag::{
    run_jobs, DagConfig, ExecutorTemplate, JobOutcome, JobProgress, JobReport, ProgressFn,
    RunJobsOptions,
};
use fullerene_sdk::planner::PlanCluster;
use fullerene_sdk::read_workload;
use fullerene_sdk::reserve::{deadline_request, Admission, DeadlineRequest};
use fullerene_sdk::session::run_session;
use fullerene_sim::reserved::DEFAULT_SLACK;
use fullerene_sim::sla::choose_sla_jobs;
use fullerene_sim::{arrival_times, check_fits, ArrivalSpec};
use fullerene_transport::certs::CertPaths;
use fullerene_transport::{Role, TlsMaterial};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::commands::cluster::{operator_client, ClusterArgs};
use crate::commands::control::parse_span;
use crate::commands::learn::decima_policies;
use crate::commands::master::tls_paths;
use crate::commands::reservation::read_policy;
use crate::commands::{
    parse_fraction, parse_positive, parse_slack, resolve_workload, Caught, PolicyChoice, Signals,
};
use crate::output::{table, JsonOutput};

/// Job commands.
#[derive(Subcommand, Debug)]
// Parsed once per process: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum JobCommand {
    /// Run the jobs of a workload file on the cluster, each as its own framework (planned with
    /// Graphene, matched online, yielding with Carbyne), show a progress bar per job, then a
    /// JCT summary.
    ///
    /// With `--policy decima`, every job runs in one framework instead, a session whose learned
    /// policy (`--model`, or the built-in one) picks on each batch of offers the next stage
    /// among all jobs and that job's parallelism (Decima §5.2); `--state-dir` keeps one journal
    /// for the session, and `--deadlines` and `--event-log` are refused with it.
    ///
    /// Jobs arrive as `--arrivals` says, like the simulator's (`zero`: all at once, the
    /// default; `poisson:MEAN_GAP_S`; `trace`: the file's `arrival_s`), in workload seconds
    /// scaled by `--time-scale`; a job's JCT runs from its arrival to its last task's FINISHED. A job whose task fails or is lost
    /// `--max-attempts` times fails with the reason; the command then exits non-zero.
    ///
    /// Example: `fullerene job run --workload ../shared/workloads/tpch-decima.jsonl --master-addrs
    /// 127.0.0.1:5051 --certs-dir certs --jobs 5 --time-scale 0.05`. Config file table: `[job.run]`.
    Run(JobRunArgs),
    /// The jobs the masters know, running and ended (the last ones of each framework, and of
    /// the last 1,000 frameworks torn down): each with how it ended (finished, failed or
    /// killed, and why), its JCT, its stages done and its tasks by state; frameworks that
    /// describe no job are listed by name. `--json` for machines.
    Status(crate::commands::cluster::ClusterArgs),
    /// Kill a running job: its framework is torn down, so its tasks are killed, the job is
    /// recorded as killed, and the `fullerene job run` running it stops and says so.
    ///
    /// Example: `fullerene job kill q17 --master-addrs 127.0.0.1:5050`.
    Kill(crate::commands::control::JobKillArgs),
}

/// Flags of `fullerene job run`.
#[derive(Args, Debug)]
pub(crate) struct JobRunArgs {
    /// The workload file (JSON Lines, `shared/workloads/FORMAT.md`). Default: the shared
    /// TPC-H file, as for `sim` and `dev`.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    pub workload: Option<PathBuf>,
    #[command(flatten)]
    pub masters: crate::commands::MasterAddrs,
    /// Directory laid out by `fullerene certs init` (uses `framework-<N>`, see `--framework-cert`).
    #[arg(long = "certs-dir", env = "FULLERENE_CERTS_DIR", value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// Which framework certificate of `--certs-dir` to use (`framework-<N>.pem`).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub framework_cert: usize,
    /// The cluster CA certificate.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The framework's certificate.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The framework's private key.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    #[command(flatten)]
    pub policy: super::JobPolicyArg,
    #[command(flatten)]
    pub model: super::ModelArg,
    /// Real seconds per second of the workload's task durations (0.05 runs 20 times faster).
    #[arg(
        long,
        env = "FULLERENE_TIME_SCALE",
        default_value_t = 1.0,
        value_name = "FACTOR",
        value_parser = parse_positive,
        allow_negative_numbers = true
    )]
    pub time_scale: f64,
    /// Run only the first N jobs of the file.
    #[arg(long, short, value_name = "N")]
    pub jobs: Option<usize>,
    /// Job arrivals, replayed as the simulator times them: `zero` (all at once),
    /// `poisson:MEAN_GAP_S` (a Poisson process seeded with --seed), or `trace` (the file's
    /// `arrival_s`); in workload seconds, scaled by --time-scale.
    #[arg(long, value_name = "SPEC", default_value = "zero")]
    pub arrivals: ArrivalSpec,
    /// Seed of the Poisson arrivals (the same seed gives the simulator's arrivals), of the
    /// jobs given deadlines, and of the actions `--policy decima` samples.
    #[arg(long, short, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// The fairness group every job expects to be in: the master refuses the jobs if the
    /// framework certificate's principal is in another (an operator places principals in
    /// groups with `fullerene groups set`). Default: the principal's group, whatever it is.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Run each task as `sh -c TEMPLATE` instead of with the agents' `sleep` executor;
    /// `{job}`, `{stage}`, `{stage_name}`, `{index}`, `{attempt}`, `{duration_s}` and
    /// `{duration_ms}` are replaced (durations scaled by --time-scale); names are substituted
    /// single-quoted, one shell word each, so write `echo {job}`, not `echo "{job}"`.
    #[arg(long, value_name = "TEMPLATE")]
    pub command: Option<String>,
    /// Attempts a task gets (FAILED or LOST each end one) before its job fails.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_attempts: u32,
    /// How long the master keeps a job's tasks while its framework is disconnected.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub failover_timeout_secs: u64,
    /// Append what each framework is handed (subscriptions, offers, status updates) and how
    /// its job ends to FILE, one JSON object per line, for `fullerene chaos run` and audits.
    #[arg(long, env = "FULLERENE_JOB_EVENT_LOG", value_name = "FILE")]
    pub event_log: Option<PathBuf>,
    /// Keep each job's journal (framework id, launches, finished tasks; with `--policy decima`
    /// one for the session) in DIR: run the same command again with the same DIR after this
    /// process died and it takes its frameworks over if it comes within `--failover-timeout-secs` (their running tasks are adopted, not
    /// run again), or starts the jobs over otherwise.
    #[arg(long, env = "FULLERENE_JOB_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Give this fraction of the jobs (chosen with --seed, as `sim --deadlines` chooses) a
    /// deadline, their NewLB lower bound on the cluster times 1 + --deadline-slack after their
    /// arrival (scaled by --time-scale), and have each reserve capacity for it first (Rayon:
    /// atoms per stage, in the DAG's order, within the deadline). A job whose reservation is
    /// refused runs as best effort. The table says, per job, whether the masters accepted its
    /// reservation and whether it met its deadline. Needs an operator certificate in
    /// --certs-dir, to read the cluster's size, the plan's quantum and its placement policy
    /// (under gree-l, small classes of long tasks are asked as gangs of whole tasks).
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    pub deadlines: Option<f64>,
    /// With --deadlines: the slack of each deadline over the job's lower bound.
    #[arg(long, value_name = "FRACTION", value_parser = parse_slack, default_value_t = DEFAULT_SLACK, requires = "deadlines")]
    pub deadline_slack: f64,
    /// With --deadlines: how long after the masters accept a reservation its first allocation
    /// may start. The plan follower frees reserved capacity by preempting tasks
    /// only after the masters' --reservation-grace-secs and a follow cycle (1 s), so that
    /// much, or the reservation may not get its first quanta.
    #[arg(long, value_name = "SPAN", value_parser = parse_span, default_value = "31s", requires = "deadlines")]
    pub reservation_lead: Duration,
    #[command(flatten)]
    pub quic: crate::commands::QuicArgs,
}

/// Runs a `job` subcommand.
pub(crate) fn run(command: JobCommand, json: &JsonOutput) -> Result<()> {
    match command {
        JobCommand::Run(args) => run_jobs_command(args, json, true),
        JobCommand::Status(args) => crate::commands::status::job_status(args, json),
        JobCommand::Kill(args) => crate::commands::control::run_job_kill(args, json),
    }
}

/// Runs `job run`. With `handle_signals`, ctrl-c, SIGTERM and SIGHUP tear the jobs' frameworks
/// down (the masters kill their tasks at once) before it exits with 128 + the signal's number;
/// `dev`, which stops its whole cluster on a signal, runs it without.
pub(crate) fn run_jobs_command(
    args: JobRunArgs,
    json: &JsonOutput,
    handle_signals: bool,
) -> Result<()> {
    let choice = args.policy.choice()?;
    args.model.check_used(choice == PolicyChoice::Decima)?;
    if choice == PolicyChoice::Decima {
        refuse_session_flags(&args)?;
    }
    // Loaded before anything runs: a model that cannot be read is refused at once.
    let decima = match choice {
        PolicyChoice::Decima => Some(decima_policies(
            args.model.model.as_deref(),
            args.model.choice(),
        )?),
        PolicyChoice::Job(_) => None,
    };
    if args.max_attempts == 0 {
        bail!("invalid --max-attempts 0: a task needs at least one attempt");
    }
    let workload = resolve_workload(args.workload.clone())?;
    let mut jobs = read_workload(&workload)?;
    if let Some(n) = args.jobs {
        jobs.truncate(n);
    }
    if jobs.is_empty() {
        bail!("{} holds no job to run", workload.display());
    }
    if args.arrivals != ArrivalSpec::Zero && args.state_dir.is_some() {
        bail!(
            "--arrivals {} with --state-dir: a run that takes its jobs over cannot replay their \
             arrivals (they arrived in the first run); use --arrivals zero",
            args.arrivals
        );
    }
    let sources: Vec<usize> = (0..jobs.len()).collect();
    // Its errors name the flag and the job (a `trace` without `arrival_s`).
    let arrivals_s = arrival_times(&jobs, &sources, args.arrivals, args.seed)?;
    let (ca, cert, key) = tls_paths(
        args.certs.as_deref(),
        args.ca.clone(),
        args.cert.clone(),
        args.key.clone(),
        Role::Framework,
        args.framework_cert,
    )?;
    let tls = TlsMaterial::load(&ca, &cert, &key).context("cannot load the TLS material")?;
    let stop = Arc::new(AtomicBool::new(false));
    let options = RunJobsOptions {
        masters: args.masters.addrs.clone(),
        dag: DagConfig {
            // Decima's session orders the tasks itself; the intra-job policy is unused.
            policy: match choice {
                PolicyChoice::Job(kind) => kind,
                PolicyChoice::Decima => DagConfig::default().policy,
            },
            time_scale: args.time_scale,
            max_attempts: args.max_attempts,
            executor: match &args.command {
                Some(template) => ExecutorTemplate::Command(template.clone()),
                None => ExecutorTemplate::Sleep,
            },
            ..DagConfig::default()
        },
        group: args.group.clone(),
        failover_timeout_ms: args.failover_timeout_secs.saturating_mul(1000),
        transport: args.quic.config()?,
        event_log: match &args.event_log {
            Some(path) => Some(Arc::new(
                EventLog::open(path).context("cannot open --event-log")?,
            )),
            None => None,
        },
        state_dir: args.state_dir.clone(),
        arrivals_s,
        stop: Some(Arc::clone(&stop)),
        deadlines: Vec::new(),
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let cluster = runtime.block_on(read_cluster(&args))?;
    if let Some(cluster) = &cluster {
        for job in &jobs {
            check_fits(job, &cluster.sizes)
                .context("a task is larger than every agent of the cluster")?;
        }
    }
    let mut options = options;
    if let Some(fraction) = args.deadlines {
        let Some(cluster) = &cluster else {
            bail!(
                "--deadlines needs the cluster's size and the plan's quantum and placement \
                 policy, which only an operator may read: give --certs-dir with an operator \
                 certificate (`fullerene certs init` lays one out)"
            );
        };
        options.deadlines = deadlines(&jobs, fraction, &args, cluster);
    }

    // Bars on a terminal; plain lines where they would not show (a log file, CI); nothing
    // beside JSON on standard output.
    let json_out = matches!(json, JsonOutput::Stdout);
    let lines = (!json_out && !std::io::stderr().is_terminal())
        .then(|| Arc::new(ProgressLines::new(jobs.len())));
    let bars = Bars::new(&jobs, json_out || lines.is_some());
    let progress: ProgressFn = {
        let bars = bars.bars.clone();
        Arc::new(move |index: usize, p: &JobProgress| {
            if let Some(lines) = &lines {
                if let Some(line) = lines.line(index, p) {
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            } else if let Some(bar) = bars.get(index) {
                update_bar(bar, p);
            }
        })
    };
    let factory = decima.as_ref().map(|(factory, _)| factory.clone());
    let (reports, caught) = runtime.block_on(async {
        let run = async {
            match factory {
                Some(factory) => {
                    run_session(jobs, &tls, options, factory, args.seed, Some(progress)).await
                }
                None => run_jobs(jobs, &tls, options, Some(progress)).await,
            }
        };
        tokio::pin!(run);
        let mut signals = if handle_signals {
            Some(Signals::new()?)
        } else {
            None
        };
        let caught = tokio::select! {
            reports = &mut run => return Ok::<_, anyhow::Error>((reports?, None)),
            caught = next_signal(signals.as_mut()) => caught,
        };
        stop.store(true, Ordering::Relaxed);
        let _ = writeln!(
            std::io::stderr(),
            "{caught}: tearing the jobs' frameworks down (their tasks are killed)"
        );
        match tokio::time::timeout(TEARDOWN_GRACE, &mut run).await {
            Ok(reports) => Ok((reports?, Some(caught))),
            Err(_) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "the masters did not answer the teardowns within {} s: the tasks end at \
                     the failover timeout",
                    TEARDOWN_GRACE.as_secs()
                );
                std::process::exit(128 + caught.number);
            }
        }
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    bars.finish();

    let summary = Summary::of(&workload, choice.name(), args.time_scale, reports);
    json.emit(&summary, || summary.render())?;
    if let Some(caught) = caught {
        std::process::exit(128 + caught.number);
    }
    let failed_decisions = decima
        .as_ref()
        .map_or(0, |(_, failures)| failures.load(Ordering::Relaxed));
    if failed_decisions > 0 {
        bail!(
            "the model failed to compute {failed_decisions} decision(s) (each fell back to the \
             first candidate): the run's figures are not the model's"
        );
    }
    if summary.failed > 0 {
        bail!(
            "{} of {} jobs failed (see the table)",
            summary.failed,
            summary.jobs.len()
        );
    }
    Ok(())
}

/// The flags `--policy decima` cannot honour yet: its one framework for all jobs has no
/// per-job reservations or event log (the SDK refuses them too, as
/// [`fullerene_sdk::session::SessionRefusal`]); refused by name rather than ignored.
fn refuse_session_flags(args: &JobRunArgs) -> Result<()> {
    let refused = [
        (
            args.deadlines.is_some(),
            "--deadlines",
            "one framework for all jobs makes no per-job reservations yet",
        ),
        (
            args.event_log.is_some(),
            "--event-log",
            "its readers, such as `fullerene chaos run`, expect one framework per job",
        ),
    ];
    if let Some((_, flag, why)) = refused.iter().find(|(given, _, _)| *given) {
        bail!("{flag} is not supported with --policy decima ({why})");
    }
    Ok(())
}

/// What `job run` reads of the cluster before it submits anything, as an operator.
#[derive(Debug)]
struct ClusterFacts {
    /// The distinct sizes of the agents not lost.
    sizes: Vec<ResourceVec>,
    /// How many agents are not lost.
    agents: usize,
    /// Their capacity together.
    total: ResourceVec,
    /// The reservation plan's quantum.
    quantum_ms: u64,
    /// The plan's placement policy, which the jobs' requests are shaped for.
    placement: fullerene_reservation::PolicyKind,
}

/// The cluster's agents, plan quantum and placement policy, read as the operator of
/// `--certs-dir` when that directory holds an operator certificate (a `fullerene certs init`
/// directory does): a framework may not read them. With them, `job run` refuses at once a job
/// with a task larger than every agent (no offer could ever hold it, and the job would wait
/// forever), and sets deadlines. `None` without an operator certificate, or when the masters do not answer (said
/// on standard error): the jobs then run unchecked.
async fn read_cluster(args: &JobRunArgs) -> Result<Option<ClusterFacts>> {
    let Some(certs) = &args.certs else {
        return Ok(None);
    };
    if !CertPaths::of_member(certs, Role::Operator, 1)
        .cert
        .is_file()
    {
        tracing::info!(
            "no operator certificate in {}: the jobs' demands are not checked against the agents",
            certs.display()
        );
        return Ok(None);
    }
    let cluster = ClusterArgs {
        masters: args.masters.clone(),
        certs: Some(certs.clone()),
        operator_cert: 1,
        ca: None,
        cert: None,
        key: None,
        timeout_secs: AGENT_LIST_TIMEOUT_SECS,
    };
    let mut client = operator_client(&cluster)?;
    let agents = match client.list_agents().await {
        Ok(agents) => agents,
        Err(error) => {
            eprintln!("warning: cannot list the agents to check the jobs' demands: {error}");
            return Ok(None);
        }
    };
    let mut facts = ClusterFacts {
        sizes: Vec::new(),
        agents: 0,
        total: ResourceVec::ZERO,
        quantum_ms: 0,
        placement: fullerene_reservation::PolicyKind::default(),
    };
    for agent in agents.iter().filter(|a| a.state != AgentState::Lost) {
        let size = agent
            .total
            .to_vec()
            .with_context(|| format!("agent {} reports invalid resources", agent.id))?;
        facts.agents += 1;
        facts.total += size;
        if !facts.sizes.contains(&size) {
            facts.sizes.push(size);
        }
    }
    if facts.sizes.is_empty() {
        eprintln!("warning: no agent is registered: the jobs wait until one is");
        return Ok(None);
    }
    let policy = read_policy(&mut client).await?;
    facts.quantum_ms = policy.quantum_ms;
    // A request shaped for GREE (fluid atoms) is valid under any policy: a policy this
    // client does not know (a newer master's) costs only the shaping.
    facts.placement = match fullerene_reservation::PolicyKind::from_name(&policy.placement) {
        Some(placement) => placement,
        None => {
            eprintln!(
                "warning: the masters' reservation placement policy {:?} is not one this \
                 client knows (gree, gree-l): deadline reservations are asked as for gree",
                policy.placement
            );
            fullerene_reservation::PolicyKind::Gree
        }
    };
    Ok(Some(facts))
}

/// The deadline and reservation request of each job `fraction` of them get (the same choice
/// as the simulator's for the same seed): `NewLB × (1 + slack)` on `cluster` after arrival.
/// NewLB and the bundles' packing treat the cluster as its agents' number of machines of
/// their average size (exact for agents of one size).
fn deadlines(
    jobs: &[fullerene_sdk::Job],
    fraction: f64,
    args: &JobRunArgs,
    cluster: &ClusterFacts,
) -> Vec<Option<DeadlineRequest>> {
    let machine = cluster.total.scale(1.0 / cluster.agents as f64);
    let plan_cluster = PlanCluster::new(cluster.agents, machine);
    let lead_ms = u64::try_from(args.reservation_lead.as_millis()).unwrap_or(u64::MAX);
    let marked = choose_sla_jobs(jobs.len(), fraction, args.seed);
    jobs.iter()
        .zip(marked)
        .map(|(job, marked)| {
            marked.then(|| {
                deadline_request(
                    job,
                    &plan_cluster,
                    args.deadline_slack,
                    args.time_scale,
                    lead_ms,
                    cluster.quantum_ms,
                    cluster.placement,
                )
            })
        })
        .collect()
}

/// How long `job run`, stopped by a signal, waits for its frameworks to be torn down: each
/// stops within a driver tick and waits up to a second for the master's answer.
const TEARDOWN_GRACE: Duration = Duration::from_secs(5);

/// The next signal, or never without handlers.
async fn next_signal(signals: Option<&mut Signals>) -> Caught {
    match signals {
        Some(signals) => signals.next().await,
        None => std::future::pending().await,
    }
}

/// How long `job run` waits for the masters' list of agents before it runs the jobs unchecked.
const AGENT_LIST_TIMEOUT_SECS: u64 = 5;

struct Bars {
    _multi: MultiProgress,
    bars: Arc<Vec<ProgressBar>>,
}

impl Bars {
    fn new(jobs: &[fullerene_sdk::Job], hidden: bool) -> Bars {
        let multi = if hidden {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        } else {
            MultiProgress::new()
        };
        let width = jobs.iter().map(|j| j.name.len()).max().unwrap_or(8).min(32);
        let style = ProgressStyle::with_template(&format!(
            "{{prefix:<{width}}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bars = jobs
            .iter()
            .map(|job| {
                let bar = multi.add(ProgressBar::new(job.num_tasks() as u64));
                bar.set_style(style.clone());
                bar.set_prefix(job.name.clone());
                bar.set_message("waiting for offers");
                bar
            })
            .collect();
        Bars {
            _multi: multi,
            bars: Arc::new(bars),
        }
    }

    fn finish(&self) {
        for bar in self.bars.iter() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

/// Progress as plain lines, for an output that is not a terminal: a line per job at each
/// quarter of its tasks finished, and one when it ends.
struct ProgressLines {
    /// The last step each job was reported at: quarters 1 to 4, then 5 once it ended.
    reported: Mutex<Vec<u8>>,
}

impl ProgressLines {
    fn new(jobs: usize) -> ProgressLines {
        ProgressLines {
            reported: Mutex::new(vec![0; jobs]),
        }
    }

    /// The line to print for job `index`'s progress `p`, when it reached a new step.
    fn line(&self, index: usize, p: &JobProgress) -> Option<String> {
        let step = match p.outcome {
            JobOutcome::Running => (p.finished * 4 / p.tasks.max(1)).min(4) as u8,
            JobOutcome::Finished { .. } | JobOutcome::Failed { .. } => 5,
        };
        let mut reported = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let last = reported.get_mut(index)?;
        if step <= *last {
            return None;
        }
        *last = step;
        let name = &p.name;
        Some(match &p.outcome {
            JobOutcome::Running => format!(
                "{name}: {}/{} tasks finished, {} running",
                p.finished, p.tasks, p.running
            ),
            JobOutcome::Finished { jct_ms } => {
                format!("{name}: done in {:.1} s", *jct_ms as f64 / 1000.0)
            }
            JobOutcome::Failed { reason } => format!("{name}: FAILED: {reason}"),
        })
    }
}

fn update_bar(bar: &ProgressBar, p: &JobProgress) {
    bar.set_position(p.finished as u64);
    match &p.outcome {
        JobOutcome::Running => {
            let retries = if p.failed_attempts > 0 {
                format!(", {} failed attempts", p.failed_attempts)
            } else {
                String::new()
            };
            bar.set_message(format!("{} running{retries}", p.running));
        }
        JobOutcome::Finished { jct_ms } => {
            bar.finish_with_message(format!("done in {:.1} s", *jct_ms as f64 / 1000.0));
        }
        JobOutcome::Failed { reason } => {
            bar.abandon_with_message(format!("FAILED: {reason}"));
        }
    }
}

/// What `job run` prints (and `--json` writes).
#[derive(Debug, Serialize)]
struct Summary {
    workload: String,
    policy: String,
    time_scale: f64,
    finished: usize,
    failed: usize,
    /// JCT statistics over the finished jobs, seconds.
    jct_avg_s: Option<f64>,
    jct_median_s: Option<f64>,
    jct_p95_s: Option<f64>,
    /// With `--deadlines`: how the jobs with one fared.
    deadlines: Option<DeadlineSummary>,
    jobs: Vec<JobReport>,
}

/// The jobs with deadlines, together (Rayon §6's measures: SLA acceptance and fulfilment).
#[derive(Debug, PartialEq, Serialize)]
struct DeadlineSummary {
    /// Jobs with a deadline.
    jobs: usize,
    /// Whose reservation the masters accepted.
    accepted: usize,
    /// Accepted, and finished by the deadline.
    met_accepted: usize,
    /// Refused (or unanswered), run as best effort, and finished by the deadline all the same.
    met_unreserved: usize,
}

impl DeadlineSummary {
    fn of(jobs: &[JobReport]) -> Option<DeadlineSummary> {
        let with: Vec<_> = jobs.iter().filter_map(|j| j.deadline.as_ref()).collect();
        if with.is_empty() {
            return None;
        }
        let mut summary = DeadlineSummary {
            jobs: with.len(),
            accepted: 0,
            met_accepted: 0,
            met_unreserved: 0,
        };
        for deadline in with {
            let met = usize::from(deadline.met == Some(true));
            if matches!(deadline.admission, Admission::Accepted { .. }) {
                summary.accepted += 1;
                summary.met_accepted += met;
            } else {
                summary.met_unreserved += met;
            }
        }
        Some(summary)
    }
}

/// A job's deadline as the table shows it: its window, the masters' answer, and whether it was
/// met.
fn deadline_cell(job: &JobReport) -> String {
    let Some(deadline) = &job.deadline else {
        return "-".to_string();
    };
    let window = format!("{:.1} s", deadline.window_ms as f64 / 1000.0);
    let met = match deadline.met {
        Some(true) => "met",
        Some(false) => "late",
        None => "unfinished",
    };
    match &deadline.admission {
        Admission::Accepted { .. } => format!("{met} ({window}, reserved)"),
        Admission::Refused { .. } => format!("{met} ({window}, best effort: refused)"),
        Admission::Withdrawn { .. } => {
            format!("{met} ({window}, best effort: reservation rejected)")
        }
        Admission::Unanswered => format!("{met} ({window}, best effort: no answer)"),
    }
}

impl Summary {
    fn of(file: &Path, policy: &str, time_scale: f64, jobs: Vec<JobReport>) -> Summary {
        let mut jcts: Vec<f64> = jobs
            .iter()
            .filter_map(|j| match j.outcome {
                JobOutcome::Finished { jct_ms } => Some(jct_ms as f64 / 1000.0),
                _ => None,
            })
            .collect();
        jcts.sort_by(f64::total_cmp);
        let finished = jcts.len();
        Summary {
            workload: file.display().to_string(),
            policy: policy.to_string(),
            time_scale,
            finished,
            failed: jobs.len() - finished,
            jct_avg_s: (!jcts.is_empty()).then(|| jcts.iter().sum::<f64>() / finished as f64),
            jct_median_s: quantile(&jcts, 0.5),
            jct_p95_s: quantile(&jcts, 0.95),
            deadlines: DeadlineSummary::of(&jobs),
            jobs,
        }
    }

    fn render(&self) -> String {
        let mut headers = vec![
            "job",
            "group",
            "tasks",
            "JCT (s)",
            "failed attempts",
            "outcome",
        ];
        if self.deadlines.is_some() {
            headers.push("deadline");
        }
        let mut per_job = table(&headers);
        for job in &self.jobs {
            let (jct, outcome) = match &job.outcome {
                JobOutcome::Finished { jct_ms } => (
                    format!("{:.2}", *jct_ms as f64 / 1000.0),
                    "finished".to_string(),
                ),
                JobOutcome::Failed { reason } => ("-".to_string(), format!("failed: {reason}")),
                JobOutcome::Running => ("-".to_string(), "running".to_string()),
            };
            let mut row = vec![
                job.name.clone(),
                if job.group.is_empty() {
                    "(principal's)".to_string()
                } else {
                    job.group.clone()
                },
                job.tasks.to_string(),
                jct,
                job.failed_attempts.to_string(),
                outcome,
            ];
            if self.deadlines.is_some() {
                row.push(deadline_cell(job));
            }
            per_job.add_row(row);
        }
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        let mut totals = table(&[
            "policy",
            "jobs finished",
            "failed",
            "avg JCT (s)",
            "median (s)",
            "p95 (s)",
        ]);
        totals.add_row(vec![
            self.policy.clone(),
            self.finished.to_string(),
            self.failed.to_string(),
            fmt(self.jct_avg_s),
            fmt(self.jct_median_s),
            fmt(self.jct_p95_s),
        ]);
        let Some(d) = &self.deadlines else {
            return format!("{per_job}\n{totals}");
        };
        // The masters' reasons are long (the atom, its work and window): below the table.
        let refusals: String = self
            .jobs
            .iter()
            .filter_map(|job| match &job.deadline.as_ref()?.admission {
                Admission::Refused { reason } => {
                    Some(format!("\n  {}: reservation refused: {reason}", job.name))
                }
                Admission::Withdrawn { name, reason } => Some(format!(
                    "\n  {}: reservation `{name}` rejected after a loss of capacity: {reason}",
                    job.name
                )),
                _ => None,
            })
            .collect();
        format!(
            "{per_job}\n{totals}\ndeadlines: {} jobs, {} reserved, {} of them met their deadline; \
             {} of the {} unreserved met it as best effort{refusals}",
            d.jobs,
            d.accepted,
            d.met_accepted,
            d.met_unreserved,
            d.jobs - d.accepted
        )
    }
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, outcome: JobOutcome) -> JobReport {
        JobReport {
            name: name.into(),
            group: "g".into(),
            framework_id: None,
            tasks: 3,
            outcome,
            failed_attempts: 0,
            preempted_attempts: 0,
            deadline: None,
        }
    }

    #[test]
    fn config_file_table_job_run_fills_flags_not_given() {
        use clap::{CommandFactory, FromArgMatches};
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(
            file.path(),
            "[job.run]\npolicy = \"drf\"\ntime_scale = 0.1\nmaster_addrs = [\"127.0.0.1:7\"]\n",
        )
        .expect("write");
        let args = [
            "fullerene",
            "job",
            "run",
            "-w",
            "w.jsonl",
            "--policy",
            "fifo",
        ]
        .iter()
        .map(std::ffi::OsString::from)
        .collect();
        let args = crate::config::apply_config_file(&crate::Cli::command(), args, file.path())
            .expect("config applies");
        let matches = crate::Cli::command().get_matches_from(args);
        let cli = crate::Cli::from_arg_matches(&matches).expect("parses");
        let crate::Commands::Job(JobCommand::Run(run)) = cli.command else {
            panic!("not `job run`");
        };
        assert_eq!(run.policy.policy, "fifo", "the flag beats the file");
        assert_eq!(run.time_scale, 0.1);
        assert_eq!(
            run.masters.addrs,
            vec!["127.0.0.1:7".parse::<std::net::SocketAddr>().unwrap()]
        );
        assert_eq!(run.workload, Some(PathBuf::from("w.jsonl")));
    }

    #[test]
    fn plain_progress_says_each_quarter_and_the_end_once() {
        let lines = ProgressLines::new(1);
        let progress = |finished: usize, outcome: JobOutcome| JobProgress {
            name: "q1".into(),
            group: String::new(),
            tasks: 8,
            finished,
            running: 2,
            failed_attempts: 0,
            preempted_attempts: 0,
            outcome,
        };
        assert_eq!(lines.line(0, &progress(1, JobOutcome::Running)), None);
        assert_eq!(
            lines.line(0, &progress(2, JobOutcome::Running)).as_deref(),
            Some("q1: 2/8 tasks finished, 2 running")
        );
        assert_eq!(lines.line(0, &progress(3, JobOutcome::Running)), None);
        assert!(lines.line(0, &progress(8, JobOutcome::Running)).is_some());
        assert_eq!(
            lines
                .line(0, &progress(8, JobOutcome::Finished { jct_ms: 1_500 }))
                .as_deref(),
            Some("q1: done in 1.5 s")
        );
        assert_eq!(
            lines.line(0, &progress(8, JobOutcome::Finished { jct_ms: 1_500 })),
            None
        );
        assert_eq!(
            lines.line(1, &progress(8, JobOutcome::Running)),
            None,
            "no such job"
        );
    }

    #[test]
    fn summary_counts_and_quantiles_cover_finished_jobs_only() {
        let jobs = vec![
            report("a", JobOutcome::Finished { jct_ms: 1_000 }),
            report("b", JobOutcome::Finished { jct_ms: 3_000 }),
            report(
                "c",
                JobOutcome::Failed {
                    reason: "boom".into(),
                },
            ),
            report("d", JobOutcome::Finished { jct_ms: 2_000 }),
        ];
        let s = Summary::of(Path::new("w.jsonl"), "graphene", 1.0, jobs);
        assert_eq!((s.finished, s.failed), (3, 1));
        assert_eq!(s.jct_avg_s, Some(2.0));
        assert_eq!(s.jct_median_s, Some(2.0));
        assert_eq!(s.jct_p95_s, Some(3.0));
        let text = s.render();
        assert!(text.contains("failed: boom"), "{text}");
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn deadlines_are_counted_by_answer_and_shown_per_job() {
        use fullerene_sdk::reserve::DeadlineReport;
        let with = |name: &str, jct_ms: u64, admission: Admission| {
            let mut job = report(name, JobOutcome::Finished { jct_ms });
            job.deadline = Some(DeadlineReport {
                window_ms: 2_000,
                admission,
                met: Some(jct_ms <= 2_000),
            });
            job
        };
        let accepted = || Admission::Accepted { name: "r".into() };
        let jobs = vec![
            with("a", 1_500, accepted()),
            with("b", 2_500, accepted()),
            with(
                "c",
                1_000,
                Admission::Refused {
                    reason: "no room".into(),
                },
            ),
            with("d", 3_000, Admission::Unanswered),
            report("e", JobOutcome::Finished { jct_ms: 9_000 }),
            with(
                "f",
                1_800,
                Admission::Withdrawn {
                    name: "r-f".into(),
                    reason: "agent lost".into(),
                },
            ),
        ];
        let s = Summary::of(Path::new("w.jsonl"), "graphene", 1.0, jobs);
        assert_eq!(
            s.deadlines,
            Some(DeadlineSummary {
                jobs: 5,
                accepted: 2,
                met_accepted: 1,
                met_unreserved: 2,
            })
        );
        let text = s.render();
        assert!(text.contains("met (2.0 s, reserved)"), "{text}");
        assert!(text.contains("late (2.0 s, reserved)"), "{text}");
        assert!(text.contains("met (2.0 s, best effort: refused)"), "{text}");
        assert!(text.contains("c: reservation refused: no room"), "{text}");
        // A reservation the adapter rejected mid-run: the job was best effort from then on.
        assert!(
            text.contains("met (2.0 s, best effort: reservation rejected)"),
            "{text}"
        );
        assert!(
            text.contains("f: reservation `r-f` rejected after a loss of capacity: agent lost"),
            "{text}"
        );
        assert!(
            text.contains(
                "5 jobs, 2 reserved, 1 of them met their deadline; 2 of the 3 unreserved"
            ),
            "{text}"
        );
        // Without deadlines, no column.
        let plain = Summary::of(
            Path::new("w.jsonl"),
            "graphene",
            1.0,
            vec![report("e", JobOutcome::Finished { jct_ms: 9_000 })],
        );
        assert_eq!(plain.deadlines, None);
        assert!(!plain.render().contains("deadline"));
    }
}
