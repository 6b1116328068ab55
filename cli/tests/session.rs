//! Issue 18 on a real cluster: a whole workload run as one session framework. Masters and
//! agents are processes of the binary under test on loopback ports the OS hands out. The SDK's
//! `run_session` runs small DAG jobs under a hand-written session policy (FIFO), and stops
//! cleanly when asked to; `fullerene job run --policy decima` and `fullerene dev --policy
//! decima` run jobs to their end under the built-in model; the flags session mode cannot honour
//! are refused by name.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_chaos::LocalMasters;
use fullerene_client::OperatorClient;
use fullerene_proto::jobs::JobEnd;
use fullerene_proto::messages::AgentState;
use fullerene_sdk::dag::{DagConfig, JobOutcome, JobReport, RunError, RunJobsOptions};
use fullerene_sdk::parse_workload;
use fullerene_sdk::session::{
    run_session, SessionPolicyFactory, SessionPolicyKind, SessionRefusal,
};
use fullerene_transport::Role;

mod common;
use common::{fullerene, processes_using, stderr, stdout};

/// Three small jobs: a chain, a fan-in and a single stage, 1-cpu and 2-cpu tasks of 1-4 s.
const WORKLOAD: &str = concat!(
    r#"{"name":"chain","stages":[{"id":0,"name":"map","parents":[],"tasks":4,"duration_s":2.0,"demand":{"cpus":1,"mem_mib":100}},{"id":1,"name":"reduce","parents":[0],"tasks":2,"duration_s":1.0,"demand":{"cpus":2,"mem_mib":100}}]}"#,
    "\n",
    r#"{"name":"fan-in","stages":[{"id":0,"name":"left","parents":[],"tasks":3,"duration_s":1.0,"demand":{"cpus":1,"mem_mib":100}},{"id":1,"name":"right","parents":[],"tasks":3,"duration_s":3.0,"demand":{"cpus":1,"mem_mib":100}},{"id":2,"name":"join","parents":[0,1],"tasks":1,"duration_s":4.0,"demand":{"cpus":2,"mem_mib":100}}]}"#,
    "\n",
    r#"{"name":"single","stages":[{"id":0,"name":"scan","parents":[],"tasks":5,"duration_s":1.0,"demand":{"cpus":1,"mem_mib":100}}]}"#,
    "\n",
);

/// What each agent offers: small, so that the jobs compete for the cluster.
const AGENT_RESOURCES: &str = "cpus=4,mem_mib=4096,disk_mbps=1000,net_mbps=10000";

/// One master and two agents with the `sleep` executor, up and registered.
fn cluster() -> LocalMasters {
    let mut cluster = LocalMasters::prepare(
        PathBuf::from(env!("CARGO_BIN_EXE_fullerene")),
        1,
        1,
        2,
        None,
    )
    .expect("lay the cluster out");
    cluster.die_with_parent = true;
    cluster.start_founders().expect("start the master");
    for n in 1..=2 {
        cluster
            .spawn_agent(n, &["--executors", "sleep", "--resources", AGENT_RESOURCES])
            .expect("start an agent");
    }
    let runtime = runtime();
    let registered = runtime.block_on(async {
        let mut client = cluster
            .operator_client(&[1], Duration::from_secs(2))
            .expect("an operator client");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(agents) = client.list_agents().await {
                if agents
                    .iter()
                    .filter(|a| a.state == AgentState::Active)
                    .count()
                    == 2
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    assert!(
        registered,
        "the agents did not register:\n{}",
        cluster.logs(20)
    );
    cluster
}

/// Runs `command` to its end, or interrupts it (SIGINT: `dev` then stops its cluster) and
/// fails the test after `limit`.
fn output_within(command: &mut Command, limit: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fullerene starts");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    let started = Instant::now();
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
            let out = waiter.join().expect("the waiter").expect("the output");
            panic!(
                "{command:?} did not end within {limit:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    waiter.join().expect("the waiter").expect("the output")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn options(cluster: &LocalMasters, time_scale: f64) -> RunJobsOptions {
    let dag = DagConfig {
        time_scale,
        ..DagConfig::default()
    };
    RunJobsOptions {
        failover_timeout_ms: 10_000,
        ..RunJobsOptions::new(cluster.addrs.values().copied().collect(), dag)
    }
}

/// Agents whose resources are charged to running tasks, as the leader says (those it cannot
/// be asked about count as charged).
async fn charged(client: &mut OperatorClient) -> usize {
    match client.list_agents().await {
        Ok(agents) => agents
            .iter()
            .filter(|a| a.used.to_vec().map_or(true, |used| !used.is_zero()))
            .count(),
        Err(_) => usize::MAX,
    }
}

fn fifo() -> SessionPolicyFactory {
    Arc::new(|_seed| SessionPolicyKind::Fifo.build())
}

fn jobs() -> Vec<fullerene_sdk::Job> {
    parse_workload(WORKLOAD, Path::new("session.jsonl")).expect("the workload parses")
}

/// Every task ran and every job finished; `n` reports, in the workload's order.
fn assert_all_finished(reports: &[JobReport], cluster: &LocalMasters) {
    let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["chain", "fan-in", "single"]);
    for report in reports {
        assert!(
            matches!(report.outcome, JobOutcome::Finished { .. }),
            "{report:?}\n{}",
            cluster.logs(20)
        );
        assert_eq!(report.failed_attempts, 0, "{report:?}");
    }
}

#[test]
fn one_session_framework_runs_every_job_on_a_real_cluster_and_stops_cleanly() {
    let cluster = cluster();
    let runtime = runtime();
    let tls = cluster.tls_of(Role::Framework, 1).expect("framework-1");

    // The three jobs, the last arriving a second after the others, in one framework.
    let mut run = options(&cluster, 0.1);
    run.arrivals_s = vec![0.0, 0.0, 10.0];
    let reports = runtime
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                run_session(jobs(), &tls, run, fifo(), 1, None),
            )
            .await
        })
        .expect("the jobs finish within a minute")
        .expect("the session runs");
    assert_all_finished(&reports, &cluster);
    let framework = reports[0].framework_id.clone().expect("a framework id");
    assert!(
        reports
            .iter()
            .all(|r| r.framework_id.as_ref() == Some(&framework)),
        "one framework for all: {reports:?}"
    );
    // The masters were told of every job and how it ended, and the framework is gone.
    let frameworks = runtime.block_on(async {
        let mut client = cluster
            .operator_client(&[1], Duration::from_secs(5))
            .expect("an operator client");
        client.list_frameworks().await.expect("the frameworks")
    });
    let info = frameworks
        .iter()
        .find(|f| f.id.to_string() == framework)
        .expect("the session's framework is listed");
    assert!(info.torn_down, "{info:?}");
    assert_eq!(info.name, "fifo-session");
    let ended: Vec<(&str, Option<&JobEnd>)> = info
        .jobs
        .iter()
        .map(|j| (j.description.job.as_str(), j.end.as_ref()))
        .collect();
    assert_eq!(
        ended,
        [
            ("chain", Some(&JobEnd::Finished)),
            ("fan-in", Some(&JobEnd::Finished)),
            ("single", Some(&JobEnd::Finished))
        ]
    );

    // Stopped mid-run (ctrl-c in `job run`): every job fails as stopped, and the framework is
    // torn down, so its tasks are killed at once and nothing stays charged.
    let stop = Arc::new(AtomicBool::new(false));
    let mut run = options(&cluster, 2.0);
    run.stop = Some(Arc::clone(&stop));
    let tls = cluster.tls_of(Role::Framework, 2).expect("framework-2");
    let mut client = runtime.block_on(async {
        cluster
            .operator_client(&[1], Duration::from_secs(5))
            .expect("an operator client")
    });
    let (was_charged, stopped) = runtime.block_on(async {
        let session =
            tokio::spawn(async move { run_session(jobs(), &tls, run, fifo(), 1, None).await });
        // Once tasks run (the first end 2 s in at this time scale).
        let started = Instant::now();
        let mut was_charged = charged(&mut client).await;
        // (`usize::MAX`: the leader could not be asked.)
        while started.elapsed() < Duration::from_secs(10) && !(1..usize::MAX).contains(&was_charged)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            was_charged = charged(&mut client).await;
        }
        stop.store(true, Ordering::Relaxed);
        (
            was_charged,
            tokio::time::timeout(Duration::from_secs(10), session).await,
        )
    });
    // Otherwise nothing ran to be stopped, and the check below that nothing stays charged
    // would pass trivially.
    assert!(
        (1..usize::MAX).contains(&was_charged),
        "no agent was charged for the session's tasks within 10 s"
    );
    let reports = stopped
        .expect("the session stops within 10 s")
        .expect("its task ends")
        .expect("the session ran");
    for report in &reports {
        match &report.outcome {
            JobOutcome::Failed { reason } => assert!(reason.contains("stopped"), "{report:?}"),
            other => panic!("{} did not stop: {other:?}", report.name),
        }
    }
    let (frameworks, busy) = runtime.block_on(async {
        let frameworks = client.list_frameworks().await.expect("the frameworks");
        // The killed tasks' ends come back from the agents after the kill's grace.
        let started = Instant::now();
        let mut busy = charged(&mut client).await;
        while busy > 0 && started.elapsed() < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            busy = charged(&mut client).await;
        }
        (frameworks, busy)
    });
    assert!(frameworks.iter().all(|f| f.torn_down), "{frameworks:#?}");
    assert_eq!(busy, 0, "tasks still run after the stop");

    // The same workload through the command line, under Decima's built-in model.
    let file = cluster.dir().join("session.jsonl");
    std::fs::write(&file, WORKLOAD).expect("write the workload");
    let masters: Vec<String> = cluster.addrs.values().map(ToString::to_string).collect();
    let mut job_run = fullerene();
    job_run
        .env_remove("FULLERENE_POLICY")
        .env_remove("FULLERENE_MODEL")
        .args([
            "--json",
            "job",
            "run",
            "--policy",
            "decima",
            "--time-scale",
            "0.1",
        ])
        .arg("--workload")
        .arg(&file)
        .arg("--master-addrs")
        .arg(masters.join(","))
        .arg("--certs-dir")
        .arg(cluster.certs_dir())
        .args(["--framework-cert", "1"]);
    let out = output_within(&mut job_run, Duration::from_secs(90));
    assert!(
        out.status.success(),
        "job run --policy decima failed:\n{}\n{}",
        stderr(&out),
        cluster.logs(20)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("the summary is JSON");
    assert_eq!(summary["policy"], "decima", "{summary:#}");
    assert_eq!(summary["finished"], 3, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    let ids: Vec<&str> = summary["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["framework_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 3, "{summary:#}");
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one framework: {summary:#}"
    );
}

/// The lines of a session journal that start with `kind`, without it.
fn journal_lines(path: &Path, kind: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix(kind))
        .map(|rest| rest.trim().to_string())
        .collect()
}

#[test]
fn a_new_process_takes_the_session_over_from_its_journal() {
    let cluster = cluster();
    let runtime = runtime();
    let tls = cluster.tls_of(Role::Framework, 1).expect("framework-1");
    let state = tempfile::tempdir().expect("temp dir");
    let journal = state.path().join("fifo-session.journal");
    let mut run = options(&cluster, 1.0);
    run.state_dir = Some(state.path().to_path_buf());

    // A journal needs every job at once: a successor could not replay later arrivals.
    let mut late = run.clone();
    late.arrivals_s = vec![0.0, 0.0, 10.0];
    let refused = runtime.block_on(run_session(jobs(), &tls, late, fifo(), 1, None));
    assert!(
        matches!(
            refused,
            Err(RunError::Session(SessionRefusal::JournalWithArrivals))
        ),
        "{refused:?}"
    );

    // The first process dies (its driver dropped, no teardown) once some tasks finished.
    let (first_run, second_run) = (run.clone(), run);
    let tls_first = cluster.tls_of(Role::Framework, 1).expect("framework-1");
    let finished_before = runtime.block_on(async {
        let session = tokio::spawn(async move {
            run_session(jobs(), &tls_first, first_run, fifo(), 1, None).await
        });
        let started = Instant::now();
        while journal_lines(&journal, "finished").len() < 4
            && started.elapsed() < Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        session.abort();
        let _ = session.await;
        journal_lines(&journal, "finished")
    });
    assert!(
        (4..18).contains(&finished_before.len()),
        "the first process saw {} of 18 tasks finish before it died:\n{}",
        finished_before.len(),
        cluster.logs(20)
    );
    let launched_before = journal_lines(&journal, "launched");

    // The second takes the framework over and sees every job through.
    let reports = runtime
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                run_session(jobs(), &tls, second_run, fifo(), 1, None),
            )
            .await
        })
        .expect("the jobs finish within a minute")
        .expect("the session runs");
    let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["chain", "fan-in", "single"]);
    // Not `assert_all_finished`: a launch journalled but not yet sent when the first process
    // died is reported LOST to the second, which runs it again as a failed attempt.
    for report in &reports {
        assert!(
            matches!(report.outcome, JobOutcome::Finished { .. }),
            "{report:?}\n{}",
            cluster.logs(20)
        );
    }
    let subscribed = journal_lines(&journal, "subscribed");
    assert!(!subscribed.is_empty());
    assert!(
        subscribed.iter().all(|id| *id == subscribed[0]),
        "one framework, taken over: {subscribed:?}"
    );
    assert_eq!(
        reports[0].framework_id.as_deref(),
        Some(subscribed[0].as_str())
    );
    // Task ids are never used twice, every task finished once, and no task finished before
    // the takeover ran again.
    let launched = journal_lines(&journal, "launched");
    let mut distinct = launched.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), launched.len(), "{launched:?}");
    let finished = journal_lines(&journal, "finished");
    let task_of = |id: &str| id.rsplit_once('/').map(|(task, _)| task.to_string());
    let mut tasks: Vec<_> = finished.iter().filter_map(|id| task_of(id)).collect();
    tasks.sort();
    tasks.dedup();
    assert_eq!((tasks.len(), finished.len()), (18, 18), "{finished:?}");
    for id in &finished_before {
        let task = task_of(id);
        assert_eq!(
            launched.iter().filter(|l| task_of(l) == task).count(),
            1,
            "{id} finished before the takeover and ran again: {launched:?}"
        );
    }
    // The takeover adopted tasks the first process launched: they finished in the second.
    let adopted = launched_before
        .iter()
        .filter(|id| !finished_before.contains(id) && finished.contains(id))
        .count();
    assert!(
        adopted > 0,
        "no task launched before the takeover finished after it: {launched_before:?}"
    );
}

#[test]
fn dev_runs_its_sample_as_one_decima_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("session.jsonl");
    std::fs::write(&file, WORKLOAD).expect("write the workload");
    let cluster_dir = dir.path().join("cluster");
    let mut dev = fullerene();
    dev.env_remove("FULLERENE_POLICY")
        .env_remove("FULLERENE_MODEL")
        .env_remove("FULLERENE_TIME_SCALE")
        .args([
            "dev",
            "--policy",
            "decima",
            "--agents",
            "2",
            "--agent-resources",
            AGENT_RESOURCES,
            "--jobs",
            "3",
            "--job-order",
            "file",
            "--time-scale",
            "0.1",
            "--json",
        ])
        .arg("--workload")
        .arg(&file)
        .arg("--dir")
        .arg(&cluster_dir);
    let out = output_within(&mut dev, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "fullerene dev failed:\n{}",
        stderr(&out)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("the summary is JSON");
    assert_eq!(summary["policy"], "decima", "{summary:#}");
    assert_eq!(summary["finished"], 3, "{summary:#}");
    for job in summary["jobs"].as_array().expect("jobs") {
        assert_eq!(job["outcome"]["state"], "finished", "{job:#}");
    }
    let left = processes_using(&cluster_dir, None);
    assert!(left.is_empty(), "processes left running: {left:#?}");
}

#[test]
fn flags_session_mode_cannot_honour_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("session.jsonl");
    std::fs::write(&file, WORKLOAD).expect("write the workload");
    let file = file.to_str().expect("a UTF-8 path");
    let state = dir.path().join("state");
    let state = state.to_str().expect("a UTF-8 path");
    let job_run = |extra: &[&str]| {
        let out = fullerene()
            .env_remove("FULLERENE_POLICY")
            .env_remove("FULLERENE_JOB_STATE_DIR")
            .env_remove("FULLERENE_JOB_EVENT_LOG")
            .args(["job", "run", "--policy", "decima", "--workload", file])
            .args(["--master-addrs", "127.0.0.1:9"])
            .args(extra)
            .output()
            .expect("fullerene runs");
        assert!(!out.status.success());
        stderr(&out)
    };
    let err = job_run(&["--deadlines", "0.5"]);
    assert!(
        err.contains("--deadlines is not supported with --policy decima"),
        "{err}"
    );
    let err = job_run(&["--event-log", state]);
    assert!(
        err.contains("--event-log is not supported with --policy decima"),
        "{err}"
    );
    // A model that cannot be read is refused before anything runs.
    let missing = dir.path().join("missing.model");
    let err = job_run(&["--model", missing.to_str().expect("a UTF-8 path")]);
    assert!(err.contains("missing.model"), "{err}");

    let out = fullerene()
        .env_remove("FULLERENE_POLICY")
        .args([
            "dev",
            "--policy",
            "decima",
            "--reservations",
            "0.5",
            "--workload",
            file,
        ])
        .output()
        .expect("fullerene runs");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--reservations is not supported with --policy decima"),
        "{err}"
    );
}
