//! `fullerene dev`: a whole local cluster in one command, running a sample of DAG jobs (the
//! README's first command: what a new user runs to see Fullerene work).
//!
//! It starts `--masters` replicated masters and `--agents` agents with the `sleep` executor
//! (this very binary, on loopback ports the OS hands out, with development certificates, data
//! directories and logs in one directory), waits for a leader and for every agent to register,
//! then runs a sample of the workload's jobs with the SDK's DAG-job framework exactly as
//! `fullerene job run` does (with `--policy decima`, all of them in one session framework
//! under Decima's learned policy): a progress bar per job, then the JCT summary (`--json`
//! too). The time scale is chosen so that the sample keeps the cluster busy for about `--target-secs`.
//! Every process it started is stopped when it ends: on success, on error, and on ctrl-c,
//! SIGTERM or SIGHUP (the processes run in their own process group, so a terminal's ctrl-c, or
//! the hangup of a closed terminal or a dropped ssh session, reaches this command only, which
//! then stops them).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use fullerene_chaos::cluster::{tail, Exited};
use fullerene_chaos::LocalMasters;
use fullerene_client::OperatorClient;
use fullerene_proto::messages::{AgentState, OperatorRequest, OperatorResponse};
use fullerene_proto::{ResourceKind, ResourceVec};
use fullerene_sdk::lower_bound::lower_bounds;
use fullerene_sdk::planner::PlanCluster;
use fullerene_sdk::{parse_workload, Job};
use fullerene_sim::{check_fits, job_sources, JobOrder, REFERENCE_MACHINE};
use fullerene_transport::certs::CertPaths;
use fullerene_transport::Role;

use crate::commands::job::{self, JobRunArgs};
use crate::commands::learn::decima_policies;
use crate::commands::reservation::set_plan_quantum;
use crate::commands::{
    parse_fraction, parse_positive, parse_slack, resolve_workload, Caught, PolicyChoice, Signals,
};
use crate::output::JsonOutput;
use fullerene_sim::reserved::DEFAULT_SLACK;

/// How much longer than its lower bound a sample takes on the cluster: Graphene's packing is
/// not perfect and every task costs an offer round trip. Measured: the default sample (6 jobs,
/// seed 1, 7,190 tasks, 3 reference agents, one master) has a 30 s bound at its scale and ran
/// in 66 s (2.2×). Only the default time scale depends on it.
const RUN_OVER_LOWER_BOUND: f64 = 2.0;

/// Lines of each log shown when a process fails.
const LOG_LINES: usize = 20;

/// Flags of `fullerene dev` (all of them also under `[dev]` in the config file).
#[derive(Args, Debug)]
pub(crate) struct DevArgs {
    /// Masters in the Raft group (3 or 5 for a replicated one).
    #[arg(long, value_name = "N", env = "FULLERENE_DEV_MASTERS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Agents, each with the `sleep` executor (tasks sleep for their scaled duration) and
    /// `--agent-resources`.
    #[arg(long, value_name = "N", env = "FULLERENE_DEV_AGENTS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub agents: u64,
    /// What each agent offers (default: the workloads' reference machine).
    #[arg(
        long,
        env = "FULLERENE_DEV_AGENT_RESOURCES",
        value_name = "KIND=AMOUNT,...",
        default_value = REFERENCE_MACHINE
    )]
    pub agent_resources: ResourceVec,
    /// The workload file (JSON Lines, `shared/workloads/FORMAT.md`); default
    /// `../shared/workloads/tpch-decima.jsonl`, else `shared/workloads/tpch-decima.jsonl`.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// Jobs to run, all submitted at once.
    #[arg(long, short, value_name = "N", env = "FULLERENE_DEV_JOBS", default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub jobs: u64,
    /// Which jobs: `random` (drawn by a permutation seeded with --seed: a mix of sizes from a
    /// file sorted by size) or `file` (the file's first N).
    #[arg(
        long,
        env = "FULLERENE_DEV_JOB_ORDER",
        value_name = "ORDER",
        default_value = "random"
    )]
    pub job_order: JobOrder,
    /// Seed of the random sample.
    #[arg(
        long,
        short,
        value_name = "N",
        env = "FULLERENE_DEV_SEED",
        default_value_t = 1
    )]
    pub seed: u64,
    #[command(flatten)]
    pub policy: super::JobPolicyArg,
    #[command(flatten)]
    pub model: super::ModelArg,
    /// Real seconds per second of the workload's task durations (default: chosen from the
    /// sample's work and the cluster's capacity to take about --target-secs).
    #[arg(long, env = "FULLERENE_TIME_SCALE", value_name = "FACTOR", value_parser = parse_positive, allow_negative_numbers = true)]
    pub time_scale: Option<f64>,
    /// About how long the run should take when --time-scale is not given, in seconds.
    #[arg(long, value_name = "SECS", env = "FULLERENE_DEV_TARGET_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub target_secs: u64,
    /// Lay the cluster out in this directory (new or empty; kept at the end) instead of a
    /// temporary one (removed at the end unless --keep).
    #[arg(long, env = "FULLERENE_DEV_DIR", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the temporary directory (certificates, data, logs, the sample's jobs) at the end.
    #[arg(long)]
    pub keep: bool,
    /// How long the masters get to elect a leader, and the agents to register, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub start_timeout_secs: u64,
    /// Run this fraction of the jobs (chosen with --seed) under reservations (Rayon): each gets
    /// a deadline, its lower bound alone on the cluster times 1 + --deadline-slack, and
    /// reserves capacity for its stages within it before it runs. The summary says whether the
    /// masters accepted each reservation and whether each job met its deadline. The plan is
    /// kept in tenths of a second and the masters preempt tasks without a grace
    /// period, to suit jobs of seconds.
    #[arg(long, value_name = "FRACTION", env = "FULLERENE_DEV_RESERVATIONS", value_parser = parse_fraction)]
    pub reservations: Option<f64>,
    /// With --reservations: the slack of each deadline over the job's lower bound (3 by
    /// default: twice the simulator's, as a local cluster runs its sample in about twice its
    /// lower bound).
    #[arg(long, value_name = "FRACTION", value_parser = parse_slack, default_value_t = DEV_DEADLINE_SLACK, requires = "reservations")]
    pub deadline_slack: f64,
}

/// The default deadline slack of `dev --reservations`: a deadline of `(1 + slack) × NewLB`,
/// with the simulator's `1 + DEFAULT_SLACK` doubled by [`RUN_OVER_LOWER_BOUND`] (every task
/// costs an offer round trip that the lower bound and the plan do not count, and at `dev`'s
/// compressed time scale that is most of a short task).
const DEV_DEADLINE_SLACK: f64 = (1.0 + DEFAULT_SLACK) * RUN_OVER_LOWER_BOUND - 1.0;

/// The plan's quantum under `dev --reservations`: its jobs last seconds, and their DAGs have
/// many levels, each ordered after the previous in whole quanta.
const DEV_QUANTUM_MS: u64 = 100;

/// The masters' grace before preempting for a reservation under `dev --reservations`: none,
/// as the simulator's default (a grace is time a just-in-time reservation lacks at its end;
/// with one second, most reserved jobs of a default `dev` sample were late).
const DEV_RESERVATION_GRACE_SECS: u64 = 0;

/// The jobs `dev` runs and how fast, worked out before any process starts.
#[derive(Debug)]
struct Sample {
    /// The chosen jobs, in submission order.
    jobs: Vec<Job>,
    /// Their lines of the workload file, in the same order.
    lines: Vec<String>,
    /// Workload seconds the sample takes at best on the cluster (its lower bound).
    lower_bound_s: f64,
    /// Real seconds per workload second.
    time_scale: f64,
    /// Whether the time scale was computed (rather than given).
    computed_scale: bool,
}

impl Sample {
    fn tasks(&self) -> usize {
        self.jobs.iter().map(Job::num_tasks).sum()
    }
}

/// Chooses `count` jobs of the workload `text` (read from `file`) and the time scale, and
/// checks that every task fits on one agent.
fn choose_sample(text: &str, file: &Path, args: &DevArgs) -> Result<Sample> {
    let jobs = parse_workload(text, file)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != jobs.len() {
        bail!(
            "{}: {} jobs but {} non-blank lines",
            file.display(),
            jobs.len(),
            lines.len()
        );
    }
    let count = usize::try_from(args.jobs).context("--jobs is too large")?;
    if count > jobs.len() {
        bail!(
            "--jobs {count}: {} holds only {} jobs",
            file.display(),
            jobs.len()
        );
    }
    let sources = job_sources(jobs.len(), count, args.job_order, args.seed);
    let chosen: Vec<Job> = sources.iter().map(|&i| jobs[i].clone()).collect();
    let machine = args.agent_resources;
    for job in &chosen {
        check_fits(job, &[machine])
            .context("a task is larger than an agent (--agent-resources)")?;
    }
    let agents = usize::try_from(args.agents).context("--agents is too large")?;
    let lower_bound_s = sample_lower_bound(&chosen, &PlanCluster::new(agents, machine));
    let (time_scale, computed_scale) = match args.time_scale {
        Some(x) => (x, false),
        None => (
            default_time_scale(lower_bound_s, args.target_secs as f64),
            true,
        ),
    };
    Ok(Sample {
        jobs: chosen,
        lines: sources.iter().map(|&i| lines[i].to_string()).collect(),
        lower_bound_s,
        time_scale,
        computed_scale,
    })
}

/// Workload seconds the jobs take at best when all run at once on `cluster`: the longest
/// critical path, or all their work packed perfectly on the busiest resource, whichever is
/// longer (Graphene's CPLen and TWork, §4.1, over the whole sample).
fn sample_lower_bound(jobs: &[Job], cluster: &PlanCluster) -> f64 {
    let capacity = cluster.total_capacity();
    let mut work = ResourceVec::ZERO;
    let mut longest_path: f64 = 0.0;
    for job in jobs {
        longest_path = longest_path.max(lower_bounds(job, cluster).cp_len);
        for stage in &job.stages {
            work += stage.demand.scale(stage.total_duration());
        }
    }
    let packed = ResourceKind::ALL
        .iter()
        .filter(|&&kind| capacity[kind] > 0.0)
        .map(|&kind| work[kind] / capacity[kind])
        .fold(0.0, f64::max);
    packed.max(longest_path)
}

/// The time scale that makes a sample with this lower bound take about `target_s` real
/// seconds; never above 1 (the workload's own speed).
fn default_time_scale(lower_bound_s: f64, target_s: f64) -> f64 {
    let expected = lower_bound_s * RUN_OVER_LOWER_BOUND;
    if !(expected.is_finite() && expected > 0.0) {
        return 1.0;
    }
    (target_s / expected).min(1.0)
}

/// Runs `fullerene dev`.
pub(crate) fn run(args: DevArgs, json: &JsonOutput) -> Result<()> {
    let policy = args.policy.choice()?;
    args.model.check_used(policy == PolicyChoice::Decima)?;
    if policy == PolicyChoice::Decima {
        if args.reservations.is_some() {
            bail!(
                "--reservations is not supported with --policy decima (one framework for all \
                 jobs makes no per-job reservations yet)"
            );
        }
        // Read before any process starts: a model that cannot be read is refused at once.
        decima_policies(args.model.model.as_deref(), args.model.choice())?;
    }
    let workload = resolve_workload(args.workload.clone()).map_err(|error| {
        let cwd =
            std::env::current_dir().map_or_else(|_| "?".to_string(), |d| d.display().to_string());
        anyhow!("{error} (relative to the current directory, {cwd})")
    })?;
    let text = std::fs::read_to_string(&workload)
        .with_context(|| format!("cannot read the workload {}", workload.display()))?;
    let sample = choose_sample(&text, &workload, &args)?;
    if let Some(dir) = &args.dir {
        check_empty_dir(dir)?;
    }

    // The signal handlers are in place before the first process starts, so that no ctrl-c
    // can leave one behind.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut signals = runtime.block_on(async { Signals::new() })?;

    let binary = std::env::current_exe().context("cannot find this executable")?;
    let mut cluster = LocalMasters::prepare(
        binary,
        args.masters,
        args.masters,
        args.agents,
        args.dir.clone(),
    )
    .context("cannot lay out the cluster's directory")?;
    cluster.own_process_group = true;
    if args.reservations.is_some() {
        cluster.extra_args.extend([
            "--reservation-grace-secs".to_string(),
            DEV_RESERVATION_GRACE_SECS.to_string(),
        ]);
    }
    if args.keep {
        cluster.keep_dir();
    }
    let dir = cluster.dir().to_path_buf();
    let kept = args.keep || args.dir.is_some();

    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = drive(&mut cluster, &args, &sample, policy, json) => outcome,
            signal = signals.next() => Outcome::Interrupted(signal),
        }
    });
    let (masters, agents) = cluster.running();
    // A failed run's errors name log files: the directory stays for them to be read.
    let failed = matches!(outcome, Outcome::Done(Err(_)));
    if failed {
        cluster.keep_dir();
    }
    drop(cluster); // stops every process, removes a temporary directory
    let stopped = format!(
        "stopped {} and {}",
        plural(masters, "master"),
        plural(agents, "agent")
    );
    let where_ = if kept || failed {
        format!("; logs and data kept in {}", dir.display())
    } else {
        String::new()
    };
    match outcome {
        Outcome::Done(result) => {
            eprintln!("{stopped}{where_}");
            result
        }
        Outcome::Interrupted(signal) => {
            // After a hangup the terminal may be gone, and eprintln! would panic on the failed
            // write: the processes are stopped already, so the message is only a courtesy.
            let _ = writeln!(std::io::stderr(), "\n{signal}: {stopped}{where_}");
            // The job thread is abandoned mid-run; exiting ends it (128 + the signal's number,
            // as shells report a process the signal killed).
            std::process::exit(128 + signal.number);
        }
    }
}

/// `1 job`, `2 jobs`.
fn plural(count: usize, noun: &str) -> String {
    format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
}

/// How a run ended.
enum Outcome {
    /// It ran to the end (or failed).
    Done(Result<()>),
    /// A signal stopped it.
    Interrupted(Caught),
}

/// A new or empty directory: dev lays out a new cluster, and an old one's data would make the
/// masters restart from it.
fn check_empty_dir(dir: &Path) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "--dir {} is not empty: fullerene dev lays out a new cluster there; pass a new \
                     or empty directory",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!(e).context(format!("cannot read --dir {}", dir.display()))),
    }
}

/// Starts the cluster, runs the sample, and watches the processes meanwhile.
async fn drive(
    cluster: &mut LocalMasters,
    args: &DevArgs,
    sample: &Sample,
    policy: PolicyChoice,
    json: &JsonOutput,
) -> Outcome {
    let started = Instant::now();
    let timeout = Duration::from_secs(args.start_timeout_secs);
    if let Err(error) = start(cluster, args, timeout).await {
        return Outcome::Done(Err(error));
    }
    let jobs_file = cluster.dir().join("jobs.jsonl");
    if let Err(error) = std::fs::write(&jobs_file, sample.lines.join("\n") + "\n") {
        return Outcome::Done(Err(anyhow!(error).context(format!(
            "cannot write the sample to {}",
            jobs_file.display()
        ))));
    }
    print_banner(cluster, args, sample, started.elapsed());

    let run_args = JobRunArgs {
        workload: Some(jobs_file),
        masters: super::MasterAddrs {
            addrs: cluster.addrs.values().copied().collect(),
        },
        certs: Some(cluster.certs_dir()),
        framework_cert: 1,
        ca: None,
        cert: None,
        key: None,
        policy: super::JobPolicyArg {
            policy: policy.name().to_string(),
        },
        model: args.model.clone(),
        time_scale: sample.time_scale,
        jobs: None,
        arrivals: fullerene_sim::ArrivalSpec::Zero,
        seed: args.seed,
        group: None,
        command: None,
        max_attempts: 3,
        failover_timeout_secs: 60,
        event_log: None,
        state_dir: None,
        deadlines: args.reservations,
        deadline_slack: args.deadline_slack,
        // The grace and a follower cycle.
        reservation_lead: Duration::from_secs(DEV_RESERVATION_GRACE_SECS + 1),
        quic: crate::commands::QuicArgs::default(),
    };
    // `job run` blocks on a runtime of its own: it runs on a thread, so that this one keeps
    // watching signals and processes.
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let json = json.clone();
    let spawned = std::thread::Builder::new()
        .name("dev-jobs".to_string())
        .spawn(move || {
            // This command handles the signals: it stops the whole cluster, the jobs' tasks
            // with it.
            let _ = done_tx.send(job::run_jobs_command(run_args, &json, false));
        });
    if let Err(error) = spawned {
        return Outcome::Done(Err(anyhow!(error).context("cannot start the jobs' thread")));
    }
    let run_started = Instant::now();
    let result = tokio::select! {
        result = done_rx => match result {
            Ok(result) => result,
            Err(_) => Err(anyhow!("the jobs' thread ended without an answer (it panicked)")),
        },
        exited = watch(cluster) => Err(died(&exited)),
    };
    if result.is_ok() {
        eprintln!(
            "{} ({} tasks) ran in {:.1} s",
            plural(sample.jobs.len(), "job"),
            sample.tasks(),
            run_started.elapsed().as_secs_f64()
        );
    }
    Outcome::Done(result)
}

/// Starts the masters, waits for a leader, starts the agents and waits until every one is
/// registered and active.
async fn start(cluster: &mut LocalMasters, args: &DevArgs, timeout: Duration) -> Result<()> {
    cluster
        .start_founders()
        .context("cannot start the masters")?;
    let ids: Vec<u64> = cluster.addrs.keys().copied().collect();
    let mut client = cluster.operator_client(&ids, Duration::from_secs(2))?;
    let elected = tokio::select! {
        elected = wait_for_leader(&mut client, timeout) => Ok(elected),
        exited = watch(cluster) => Err(exited),
    };
    match elected {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            return Err(error.context(format!(
                "the masters did not elect a leader within {} s\n{}",
                timeout.as_secs(),
                strip_ansi(&cluster.logs(LOG_LINES))
            )))
        }
        Err(exited) => return Err(died(&exited)),
    }

    let resources = args.agent_resources.to_string();
    for n in 1..=args.agents {
        let hostname = format!("dev-agent-{n}");
        let extra = [
            "--executors",
            "sleep",
            "--resources",
            resources.as_str(),
            "--hostname",
            hostname.as_str(),
        ];
        cluster
            .spawn_agent(n, &extra)
            .with_context(|| format!("cannot start agent {n}"))?;
    }
    let agents = usize::try_from(args.agents).context("--agents is too large")?;
    let registered = tokio::select! {
        registered = wait_for_agents(&mut client, agents, timeout) => Ok(registered),
        exited = watch(cluster) => Err(exited),
    };
    match registered {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.context(format!(
            "the agents did not register within {} s\n{}",
            timeout.as_secs(),
            strip_ansi(&cluster.logs(LOG_LINES))
        ))),
        Err(exited) => Err(died(&exited)),
    }?;
    if args.reservations.is_some() {
        set_plan_quantum(&mut client, DEV_QUANTUM_MS)
            .await
            .context("cannot set the reservation plan's quantum")?;
    }
    Ok(())
}

/// Waits until a master answers as the leader's.
async fn wait_for_leader(client: &mut OperatorClient, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    let mut last = String::from("no answer yet");
    while started.elapsed() < timeout {
        match client.request(&OperatorRequest::ClusterStatus).await {
            Ok(OperatorResponse::ClusterStatus(status)) if status.leader.is_some() => return Ok(()),
            Ok(other) => last = format!("{other:?}"),
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("last answer: {last}")
}

/// Waits until `count` agents are registered and active.
async fn wait_for_agents(
    client: &mut OperatorClient,
    count: usize,
    timeout: Duration,
) -> Result<()> {
    let started = Instant::now();
    let mut last = String::from("no answer yet");
    while started.elapsed() < timeout {
        match client.list_agents().await {
            Ok(agents) => {
                let active = agents
                    .iter()
                    .filter(|a| a.state == AgentState::Active)
                    .count();
                if active >= count {
                    return Ok(());
                }
                last = format!("{active} of {count} agents active");
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{last}")
}

/// Resolves when a master or an agent exits by itself (they only do on failure: a port taken,
/// a crash), with what exited.
async fn watch(cluster: &mut LocalMasters) -> Vec<Exited> {
    loop {
        let exited = cluster.reap_exited();
        if !exited.is_empty() {
            return exited;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The error for processes that exited, with the end of their logs.
fn died(exited: &[Exited]) -> anyhow::Error {
    let mut text = String::new();
    for process in exited {
        text.push_str(&format!(
            "{} exited ({}); the end of {}:\n{}",
            process.name,
            process.status,
            process.log.display(),
            strip_ansi(&tail(&process.log, LOG_LINES))
        ));
    }
    anyhow!("{}", text.trim_end())
}

/// `text` without its terminal escape sequences (the logs are colored).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, then a final byte in @..~.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// What is running and where to look, on standard error (standard output is the summary's).
fn print_banner(cluster: &LocalMasters, args: &DevArgs, sample: &Sample, took: Duration) {
    let http: Vec<SocketAddr> = cluster.http_addrs.values().copied().collect();
    let (masters, agents) = cluster.running();
    eprintln!(
        "cluster up in {:.1} s: {} (Raft), {} of {} (sleep executor)",
        took.as_secs_f64(),
        plural(masters, "master"),
        plural(agents, "agent"),
        args.agent_resources
    );
    if let Some(first) = http.first() {
        let others = if http.len() > 1 {
            let rest: Vec<String> = http[1..].iter().map(ToString::to_string).collect();
            format!(
                " (also {}; followers redirect to the leader)",
                rest.join(", ")
            )
        } else {
            String::new()
        };
        let certs = cluster.certs_dir();
        let operator = CertPaths::of_member(&certs, Role::Operator, 1);
        // The token rides in the fragment, which the browser never sends to a server; the page
        // exchanges it for a session cookie and drops it from the address bar.
        eprintln!(
            "  web UI: https://{first}/#token={} (a one-time login link with the write token; the \
             certificate is signed by the cluster's CA, {}: trust it or accept the warning)",
            cluster.http_tokens.write,
            certs.join("ca.pem").display()
        );
        eprintln!(
            "  HTTP API: https://{first}/state, /agents, /tasks, /groups, /cluster, /metrics{others}"
        );
        eprintln!(
            "    as the operator: curl -L --cacert {} --cert {} --key {} https://{first}/state",
            certs.join("ca.pem").display(),
            operator.cert.display(),
            operator.key.display()
        );
        eprintln!(
            "    with a read token: curl -L --location-trusted --cacert {} -H 'Authorization: Bearer {}' https://{first}/metrics",
            certs.join("ca.pem").display(),
            cluster.http_tokens.read
        );
    }
    let masters_flag: Vec<String> = cluster.addrs.values().map(ToString::to_string).collect();
    eprintln!(
        "  operator commands: fullerene agents --master-addrs {} --certs-dir {}",
        masters_flag.join(","),
        cluster.certs_dir().display()
    );
    eprintln!("  directory: {}", cluster.dir().display());
    let names: Vec<&str> = sample.jobs.iter().map(|j| j.name.as_str()).collect();
    eprintln!(
        "running {} ({} tasks): {}",
        plural(sample.jobs.len(), "job"),
        sample.tasks(),
        names.join(", ")
    );
    eprintln!(
        "  time scale {:.4}{}",
        sample.time_scale,
        if sample.computed_scale {
            format!(
                " (the sample's lower bound is {:.0} s of workload time on this cluster; \
                 --time-scale overrides)",
                sample.lower_bound_s
            )
        } else {
            String::new()
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Just the `dev` flags, parsed as the binary does.
    #[derive(Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        dev: DevArgs,
    }

    fn args(words: &[&str]) -> DevArgs {
        let mut all = vec!["dev"];
        all.extend_from_slice(words);
        Wrapper::try_parse_from(all).expect("parses").dev
    }

    /// Two jobs: `small` (one stage of 4 one-second tasks of 1 cpu) and `chain` (two stages of
    /// one 10-second task each, 2 cpus, 1000 MiB).
    const WORKLOAD: &str = concat!(
        r#"{"name":"small","stages":[{"id":0,"name":"s0","parents":[],"tasks":4,"duration_s":1.0,"demand":{"cpus":1}}]}"#,
        "\n\n",
        r#"{"name":"chain","stages":[{"id":0,"name":"a","parents":[],"tasks":1,"duration_s":10.0,"demand":{"cpus":2,"mem_mib":1000}},{"id":1,"name":"b","parents":[0],"tasks":1,"duration_s":10.0,"demand":{"cpus":2,"mem_mib":1000}}]}"#,
        "\n",
    );

    #[test]
    fn sample_keeps_the_chosen_jobs_lines_in_order() {
        let a = args(&["--jobs", "2", "--job-order", "file"]);
        let sample = choose_sample(WORKLOAD, Path::new("w.jsonl"), &a).expect("sample");
        let names: Vec<&str> = sample.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["small", "chain"]);
        assert_eq!(sample.lines.len(), 2);
        for (job, line) in sample.jobs.iter().zip(&sample.lines) {
            let reparsed = parse_workload(line, Path::new("line")).expect("a line is a job");
            assert_eq!(&reparsed[0], job);
        }
        assert_eq!(sample.tasks(), 6);
    }

    #[test]
    fn lower_bound_is_the_longer_of_the_critical_path_and_the_packed_work() {
        let a = args(&["--jobs", "2", "--job-order", "file", "--agents", "1"]);
        let sample = choose_sample(WORKLOAD, Path::new("w.jsonl"), &a).expect("sample");
        // One reference machine (16 cpus): 4 + 40 cpu-seconds of work is 2.75 s packed; the
        // chain's critical path is 20 s.
        assert!(
            (sample.lower_bound_s - 20.0).abs() < 1e-9,
            "{}",
            sample.lower_bound_s
        );

        // A machine of 2 cpus: the work, 4 + 2 × 2 × 10 = 44 cpu-seconds, takes 22 s.
        let a = args(&[
            "--jobs",
            "2",
            "--job-order",
            "file",
            "--agents",
            "1",
            "--agent-resources",
            "cpus=2,mem_mib=1000",
        ]);
        let sample = choose_sample(WORKLOAD, Path::new("w.jsonl"), &a).expect("sample");
        assert!(
            (sample.lower_bound_s - 22.0).abs() < 1e-9,
            "{}",
            sample.lower_bound_s
        );
    }

    #[test]
    fn time_scale_targets_the_run_length_and_never_slows_the_workload() {
        let scale = default_time_scale(100.0, 60.0);
        assert!((scale * 100.0 * RUN_OVER_LOWER_BOUND - 60.0).abs() < 1e-9);
        assert_eq!(default_time_scale(1.0, 60.0), 1.0);
        assert_eq!(default_time_scale(0.0, 60.0), 1.0);
        assert_eq!(default_time_scale(f64::INFINITY, 60.0), 1.0);

        let a = args(&["--jobs", "1", "--job-order", "file", "--time-scale", "0.5"]);
        let sample = choose_sample(WORKLOAD, Path::new("w.jsonl"), &a).expect("sample");
        assert_eq!((sample.time_scale, sample.computed_scale), (0.5, false));
        for bad in ["0", "-1", "inf", "fast"] {
            let err = Wrapper::try_parse_from(["dev", "--time-scale", bad])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("--time-scale") && err.contains("is not a number > 0"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_task_larger_than_an_agent_or_too_many_jobs_are_refused_by_name() {
        let a = args(&["--jobs", "2", "--agent-resources", "cpus=1,mem_mib=4096"]);
        let err = format!(
            "{:#}",
            choose_sample(WORKLOAD, Path::new("w.jsonl"), &a).unwrap_err()
        );
        assert!(err.contains("job `chain`, stage 0 (`a`)"), "{err}");
        assert!(err.contains("--agent-resources"), "{err}");
        assert!(err.contains("(cpus=1,"), "{err}");

        let a = args(&["--jobs", "3"]);
        let err = choose_sample(WORKLOAD, Path::new("w.jsonl"), &a)
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds only 2 jobs"), "{err}");
    }

    #[test]
    fn random_order_draws_distinct_jobs_by_seed() {
        let a = args(&["--jobs", "2", "--seed", "7"]);
        let sample = choose_sample(WORKLOAD, Path::new("w.jsonl"), &a).expect("sample");
        let mut names: Vec<&str> = sample.jobs.iter().map(|j| j.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["chain", "small"]);
    }

    #[test]
    fn log_colors_are_stripped() {
        let line = "\u{1b}[2m2026-11-22T09:16:27Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m serving";
        assert_eq!(strip_ansi(line), "2026-11-22T09:16:27Z  INFO serving");
        assert_eq!(strip_ansi("plain ✓"), "plain ✓");
    }

    #[test]
    fn a_directory_with_files_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        check_empty_dir(dir.path()).expect("empty is fine");
        check_empty_dir(&dir.path().join("new")).expect("missing is fine");
        std::fs::write(dir.path().join("x"), "x").expect("write");
        let err = check_empty_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not empty"), "{err}");
    }

    #[test]
    fn config_file_table_dev_fills_flags_not_given() {
        use clap::{CommandFactory, FromArgMatches};
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(
            file.path(),
            "[dev]\nmasters = 3\nagents = 5\ntime_scale = 0.01\nkeep = true\n",
        )
        .expect("write");
        let words = ["fullerene", "dev", "--agents", "2"]
            .iter()
            .map(std::ffi::OsString::from)
            .collect();
        let words = crate::config::apply_config_file(&crate::Cli::command(), words, file.path())
            .expect("config applies");
        let matches = crate::Cli::command().get_matches_from(words);
        let cli = crate::Cli::from_arg_matches(&matches).expect("parses");
        let crate::Commands::Dev(dev) = cli.command else {
            panic!("not `dev`");
        };
        assert_eq!(dev.agents, 2, "the flag beats the file");
        assert_eq!(dev.masters, 3);
        assert_eq!(dev.time_scale, Some(0.01));
        assert!(dev.keep);
    }
}
