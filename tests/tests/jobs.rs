//! DAG jobs end to end on real processes (the offers issue, #6): three masters, agents with
//! the `sleep` executor, and the DAG-job framework (`fullerene job run --json`, a subprocess)
//! run small TPC-H jobs to completion; so they do when an agent, or the leading master, is
//! killed with SIGKILL mid-job. Afterwards the leader's `/state` shows nothing running and
//! every resource free.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fullerene_sdk::dag::{
    run_jobs, DagConfig, JobOutcome, JobProgress, JobReport, ProgressFn, RunError, RunJobsOptions,
};
use fullerene_tests::{MasterCluster, FAST_LIVENESS};

/// The reference machine of the workload files.
const AGENT_RESOURCES: [&str; 4] = [
    "--resources",
    "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000",
    "--executors",
    "sleep",
];

/// Five of the smallest TPC-H jobs (2 GB inputs; 13 to 418 tasks each, 1,278 in all).
const FIVE_JOBS: [&str; 5] = [
    "tpch-q6-2g",
    "tpch-q14-2g",
    "tpch-q19-2g",
    "tpch-q1-2g",
    "tpch-q3-2g",
];

/// Real seconds per second of the workload's durations.
const TIME_SCALE: f64 = 0.005;

/// The time scale of the tests that kill a process mid-run: slow enough that the jobs run for
/// several of the leader's view intervals (half a second), so that the test sees tasks on the
/// agents and kills while they are still there.
const KILL_TIME_SCALE: f64 = 4.0 * TIME_SCALE;

/// The longest a `job run` may take before the test gives up on it.
const JOB_TIMEOUT: Duration = Duration::from_secs(50);

/// Writes the named jobs of `tpch-decima.jsonl` to a workload file in the cluster's directory.
fn workload(cluster: &MasterCluster, names: &[&str]) -> PathBuf {
    cluster.tpch_workload("jobs.jsonl", names)
}

/// Starts `fullerene --json job run` on `file` against every master; its JSON goes to
/// `job-run.json` and its log to `job-run.log` in the cluster's directory.
fn start_job_run(cluster: &MasterCluster, file: &Path) -> Child {
    start_job_run_scaled(cluster, file, TIME_SCALE)
}

/// [`start_job_run`] at `time_scale`.
fn start_job_run_scaled(cluster: &MasterCluster, file: &Path, time_scale: f64) -> Child {
    let stdout = File::create(cluster.dir().join("job-run.json")).expect("create job-run.json");
    let stderr = File::create(cluster.dir().join("job-run.log")).expect("create job-run.log");
    cluster
        .job_run_command(file, time_scale)
        // The SDK's debug lines name every refused call, which is what a stalled job shows.
        .args(["--log-level", "info,fullerene_sdk=debug", "--json"])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("start fullerene job run")
}

/// Jobs run by the SDK's DAG-job framework in this process ([`start_jobs_in_process`]).
struct InProcessRun {
    handle: JoinHandle<Result<Vec<JobReport>, RunError>>,
    /// Each job's latest progress as its framework reported it.
    progress: Arc<Mutex<BTreeMap<usize, JobProgress>>>,
}

impl InProcessRun {
    /// What the frameworks say of their jobs, one line each, for a failure message.
    fn describe(&self) -> String {
        let ended = if self.handle.is_finished() {
            "the run has ended"
        } else {
            "the run goes on"
        };
        let progress = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = format!("{ended}; the jobs as their frameworks see them:\n");
        if progress.is_empty() {
            text.push_str("  (no progress reported yet)\n");
        }
        for (index, p) in progress.iter() {
            text.push_str(&format!(
                "  job {index} {}: {} tasks, {} running, {} finished, {} failed attempts, {:?}\n",
                p.name, p.tasks, p.running, p.finished, p.failed_attempts, p.outcome
            ));
        }
        text
    }
}

/// Runs the jobs of `file` with the SDK's DAG-job framework in this process (on its own
/// thread and runtime, so that the test can kill processes meanwhile), with the SDK's
/// defaults. The SDK's log goes to `job-run.log` in the cluster's directory, as a
/// subprocess's does.
fn start_jobs_in_process(cluster: &MasterCluster, file: &Path, time_scale: f64) -> InProcessRun {
    log_in_process_to(&cluster.dir().join("job-run.log"));
    let jobs = fullerene_sdk::read_workload(file).expect("a valid workload");
    let tls = cluster.framework_tls(1);
    let dag = DagConfig {
        time_scale,
        ..DagConfig::default()
    };
    let options = RunJobsOptions::new(cluster.addrs.values().copied().collect(), dag);
    let progress = Arc::new(Mutex::new(BTreeMap::new()));
    let record = Arc::clone(&progress);
    let report: ProgressFn = Arc::new(move |index, p: &JobProgress| {
        record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, p.clone());
    });
    let handle = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(run_jobs(jobs, &tls, options, Some(report)))
    });
    InProcessRun { handle, progress }
}

/// Sends this process's `tracing` log (the in-process SDK's) to `path`, at the level a job
/// run's subprocess logs at; once per process (each test is its own process under nextest;
/// under `cargo test` the first test's file keeps it).
fn log_in_process_to(path: &Path) {
    let Ok(file) = File::create(path) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,fullerene_sdk=debug",
        ))
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init();
}

/// Waits for in-process jobs to end; their reports. Fails the test if they do not end in
/// time or any job did not finish.
fn finish_in_process(
    cluster: &MasterCluster,
    run: InProcessRun,
    started: Instant,
) -> Vec<JobReport> {
    while !run.handle.is_finished() {
        assert!(
            started.elapsed() < JOB_TIMEOUT,
            "the jobs did not finish within {JOB_TIMEOUT:?}; {}state: {}\n{}",
            run.describe(),
            cluster.http_state().unwrap_or_default(),
            logs(cluster)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let reports = match run.handle.join() {
        Ok(Ok(reports)) => reports,
        Ok(Err(e)) => panic!("the jobs could not run: {e}\n{}", logs(cluster)),
        Err(_) => panic!("the jobs' thread panicked\n{}", logs(cluster)),
    };
    assert_eq!(reports.len(), FIVE_JOBS.len(), "{reports:?}");
    for report in &reports {
        assert!(
            matches!(report.outcome, JobOutcome::Finished { .. }),
            "a job did not finish: {report:?}\n{}",
            logs(cluster)
        );
    }
    reports
}

/// Everything a failing test should show: the masters' and agents' logs and the job run's.
fn logs(cluster: &MasterCluster) -> String {
    let run = std::fs::read_to_string(cluster.dir().join("job-run.log")).unwrap_or_default();
    let tail: Vec<&str> = run.lines().rev().take(40).collect();
    let mut text = cluster.logs();
    text.push_str("--- job run (last lines) ---\n");
    for line in tail.into_iter().rev() {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Waits for `child` (a job run) to exit; its status. Kills it and fails the test, naming
/// what it should have done, if it is still running after `timeout`.
fn wait_for_exit(
    cluster: &MasterCluster,
    mut child: Child,
    timeout: Duration,
    should: &str,
) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "job run did not {should} within {timeout:?}; state: {}\n{}",
                cluster.http_state().unwrap_or_default(),
                logs(cluster)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for the job run to exit; its JSON summary. Fails the test if it does not end in
/// time, or if any job did not finish.
fn finish_job_run(cluster: &MasterCluster, child: Child, started: Instant) -> serde_json::Value {
    let status = wait_for_exit(
        cluster,
        child,
        JOB_TIMEOUT.saturating_sub(started.elapsed()),
        "finish the jobs",
    );
    let output = std::fs::read_to_string(cluster.dir().join("job-run.json")).unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(&output).unwrap_or_else(|e| {
        panic!(
            "job run ({status}) wrote no JSON summary ({e}): {output}\n{}",
            logs(cluster)
        )
    });
    assert!(
        status.success(),
        "job run failed ({status}): {summary:#}\n{}",
        logs(cluster)
    );
    let jobs = summary["jobs"].as_array().expect("a job list");
    assert_eq!(jobs.len(), FIVE_JOBS.len(), "{summary:#}");
    for job in jobs {
        assert_eq!(
            job["outcome"]["state"],
            "finished",
            "a job did not finish: {job}\n{}",
            logs(cluster)
        );
    }
    assert_eq!(summary["finished"], FIVE_JOBS.len(), "{summary:#}");
    summary
}

/// Waits until the leader's `/state` shows nothing left: no task that has not ended, no
/// framework with active tasks, every agent's `used` zero; fails the test with the state
/// otherwise. The state.
fn assert_all_free(cluster: &MasterCluster) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let state = cluster.http_state();
        if let Some(state) = &state {
            let active_task = state["tasks"].as_array().and_then(|tasks| {
                tasks
                    .iter()
                    .find(|t| {
                        !matches!(
                            t["state"].as_str(),
                            Some("Finished" | "Failed" | "Killed" | "Lost")
                        )
                    })
                    .cloned()
            });
            let busy_framework = state["frameworks"].as_array().and_then(|frameworks| {
                frameworks
                    .iter()
                    .find(|f| f["active_tasks"].as_u64() != Some(0))
                    .cloned()
            });
            let busy_agent = state["agents"].as_array().and_then(|agents| {
                agents
                    .iter()
                    .find(|a| {
                        a["used"].as_object().is_none_or(|used| {
                            used.values()
                                .any(|v| v.as_f64().is_none_or(|v| v.abs() > 1e-9))
                        })
                    })
                    .cloned()
            });
            let agents = state["agents"].as_array().map_or(0, Vec::len);
            if active_task.is_none()
                && busy_framework.is_none()
                && busy_agent.is_none()
                && agents > 0
            {
                return state.clone();
            }
            if started.elapsed() > Duration::from_secs(10) {
                panic!(
                    "resources not all free after the jobs: task {active_task:?}, framework \
                     {busy_framework:?}, agent {busy_agent:?}\nstate: {state}\n{}",
                    logs(cluster)
                );
            }
        } else if started.elapsed() > Duration::from_secs(10) {
            panic!("no leader serves /state\n{}", logs(cluster));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the leader's `/state` shows tasks on agents (launched there and not ended:
/// staging or running) and returns the agent with the most of them (its number); fails the
/// test if none shows within `timeout`. The view is rebuilt at most every half second, and a
/// short task spends most of its life staging, so staging tasks count too.
fn wait_for_busiest_agent(
    cluster: &MasterCluster,
    timeout: Duration,
    run: Option<&InProcessRun>,
) -> u64 {
    let started = Instant::now();
    let mut last_state = None;
    while started.elapsed() < timeout {
        let mut on_agent: BTreeMap<String, usize> = BTreeMap::new();
        if let Some(state) = cluster.http_state() {
            for task in state["tasks"].as_array().into_iter().flatten() {
                if task["state"] == "Running" || task["state"] == "Staging" {
                    if let Some(agent) = task["agent_id"].as_str() {
                        *on_agent.entry(agent.to_string()).or_default() += 1;
                    }
                }
            }
            last_state = Some(state);
        }
        let busiest = on_agent
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .and_then(|(agent, _)| agent.strip_prefix("agent-")?.parse().ok());
        if let Some(n) = busiest {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "no task was launched within {timeout:?}; {}{}\n{}",
        summarize_state(last_state.as_ref()),
        run.map(InProcessRun::describe).unwrap_or_default(),
        logs(cluster)
    );
}

/// The leader's `/state` in a few lines (how many frameworks, agents by state, tasks by
/// state), for a failure message whose logs may be cut.
fn summarize_state(state: Option<&serde_json::Value>) -> String {
    let Some(state) = state else {
        return "no master ever answered /state\n".into();
    };
    let count_by = |list: &str, field: &str| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for item in state[list].as_array().into_iter().flatten() {
            *counts.entry(item[field].to_string()).or_default() += 1;
        }
        counts
    };
    format!(
        "the leader's last /state: {} frameworks, agents by state {:?}, tasks by state {:?}\n",
        state["frameworks"].as_array().map_or(0, Vec::len),
        count_by("agents", "state"),
        count_by("tasks", "state"),
    )
}

/// Three masters and `agents` agents, all registered.
fn cluster(agents: u64) -> MasterCluster {
    let mut cluster = MasterCluster::start_with(3, 3, agents, &FAST_LIVENESS);
    for n in 1..=agents {
        cluster.spawn_agent(n, &AGENT_RESOURCES);
    }
    assert!(
        cluster.wait_for_active_agents(agents as usize, Duration::from_secs(20)),
        "the agents did not all register\n{}",
        cluster.logs()
    );
    cluster
}

#[test]
fn five_tpch_jobs_finish_on_three_masters_and_three_agents_and_free_everything() {
    let cluster = cluster(3);
    let file = workload(&cluster, &FIVE_JOBS);
    let started = Instant::now();
    let child = start_job_run(&cluster, &file);
    let summary = finish_job_run(&cluster, child, started);
    eprintln!(
        "five jobs in {:.1} s, JCT avg {} s",
        started.elapsed().as_secs_f64(),
        summary["jct_avg_s"]
    );
    let state = assert_all_free(&cluster);
    let agents = state["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 3, "{state}");
    assert!(agents.iter().all(|a| a["state"] == "Active"), "{state}");
    // The masters keep each job's shape and end after its framework is gone.
    let jobs = wait_for_jobs(&cluster, FIVE_JOBS.len(), |job| {
        job["outcome"] == "finished"
    });
    for job in &jobs {
        assert!(job["jct_ms"].as_u64().is_some(), "{job}");
        let stages = job["stages"].as_array().expect("stages");
        assert!(!stages.is_empty(), "{job}");
        for stage in stages {
            assert!(
                stage["tasks"]["finished"].as_u64() >= stage["total"].as_u64(),
                "a stage of a finished job is not done: {job}"
            );
        }
    }
}

#[test]
fn jobs_finish_on_the_remaining_agents_after_an_agent_is_killed() {
    let mut cluster = cluster(3);
    let file = workload(&cluster, &FIVE_JOBS);
    let started = Instant::now();
    let run = start_jobs_in_process(&cluster, &file, KILL_TIME_SCALE);
    // Task at a time packs the agents it visits first, so which agent runs tasks is not known
    // in advance: the agent killed is the one the leader shows with the most tasks.
    let victim = wait_for_busiest_agent(&cluster, Duration::from_secs(20), Some(&run));
    cluster.kill_agent(victim);
    let reports = finish_in_process(&cluster, run, started);
    let lost: u64 = reports.iter().map(|r| r.failed_attempts).sum();
    assert!(
        lost > 0,
        "no task attempt was lost with the agent: {reports:?}\n{}",
        logs(&cluster)
    );
    eprintln!(
        "five jobs across an agent kill in {:.1} s ({lost} attempts lost)",
        started.elapsed().as_secs_f64()
    );
    let state = assert_all_free(&cluster);
    let agents = state["agents"].as_array().expect("agents");
    let victim_id = format!("agent-{victim}");
    let killed = agents
        .iter()
        .find(|a| a["id"] == victim_id.as_str())
        .unwrap_or_else(|| panic!("{victim_id} is not in /state: {state}"));
    assert_ne!(
        killed["state"], "Active",
        "the killed agent is still active: {state}"
    );
}

#[test]
fn jobs_finish_after_the_leading_master_is_killed() {
    let mut cluster = cluster(2);
    let file = workload(&cluster, &FIVE_JOBS);
    let started = Instant::now();
    let run = start_jobs_in_process(&cluster, &file, KILL_TIME_SCALE);
    wait_for_busiest_agent(&cluster, Duration::from_secs(20), Some(&run));
    let Some(leader) = cluster.wait_for_leader(Duration::from_secs(5)) else {
        panic!("no leader\n{}", logs(&cluster));
    };
    cluster.kill(leader);
    assert!(
        !run.handle.is_finished(),
        "the jobs ended before the leader was killed: {}",
        run.describe()
    );
    let reports = finish_in_process(&cluster, run, started);
    let Some(new_leader) = cluster.wait_for_leader(Duration::from_secs(10)) else {
        panic!("no new leader\n{}", logs(&cluster));
    };
    assert_ne!(new_leader, leader, "the killed master still leads");
    assert_all_free(&cluster);
    // Each agent's session is on the new leader (it shows where the session comes from).
    let since = Instant::now();
    loop {
        let state = cluster.http_state().unwrap_or_default();
        let followed = state["agents"].as_array().is_some_and(|agents| {
            agents.len() == 2
                && agents
                    .iter()
                    .all(|a| a["state"] == "Active" && !a["address"].is_null())
        });
        if followed {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "the agents did not follow the new leader: {state}\n{}",
            logs(&cluster)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "five jobs across a leader kill in {:.1} s ({} failed attempts)",
        started.elapsed().as_secs_f64(),
        reports.iter().map(|r| r.failed_attempts).sum::<u64>()
    );
}

/// A task larger than every agent could never be offered room: `job run` refuses the workload
/// at once, naming the stage, instead of waiting for offers forever.
#[test]
fn a_task_larger_than_every_agent_is_refused_before_the_jobs_start() {
    let mut cluster = MasterCluster::start_with(1, 1, 1, &FAST_LIVENESS);
    cluster.spawn_agent(1, &AGENT_RESOURCES);
    assert!(
        cluster.wait_for_active_agents(1, Duration::from_secs(20)),
        "the agent did not register\n{}",
        cluster.logs()
    );
    let file = cluster.dir().join("huge.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"name":"huge","stages":[{"id":0,"name":"fits","parents":[],"tasks":1,"duration_s":1.0,"demand":{"cpus":1}},"#,
            r#"{"id":1,"name":"wide","parents":[0],"tasks":2,"duration_s":1.0,"demand":{"cpus":64}}]}"#,
            "\n"
        ),
    )
    .expect("write the workload");
    let child = start_job_run(&cluster, &file);
    let status = wait_for_exit(&cluster, child, Duration::from_secs(20), "refuse the jobs");
    let log = std::fs::read_to_string(cluster.dir().join("job-run.log")).unwrap_or_default();
    assert!(!status.success(), "job run succeeded:\n{log}");
    assert!(
        log.contains("larger than every agent") && log.contains("stage 1 (`wide`)"),
        "{log}"
    );
    assert!(log.contains("cpus=16"), "the agents' size is shown: {log}");
    let state = cluster.http_state().unwrap_or_default();
    assert_eq!(
        state["frameworks"].as_array().map(Vec::len),
        Some(0),
        "nothing was submitted: {state}"
    );
}

/// Interrupting `job run` tears its frameworks down: the masters kill the running tasks at
/// once instead of keeping them for the failover timeout (60 s here).
#[test]
fn ctrl_c_on_job_run_tears_its_frameworks_down_and_frees_the_agents() {
    let mut cluster = MasterCluster::start_with(1, 1, 2, &FAST_LIVENESS);
    for n in 1..=2 {
        cluster.spawn_agent(n, &AGENT_RESOURCES);
    }
    assert!(
        cluster.wait_for_active_agents(2, Duration::from_secs(20)),
        "the agents did not register\n{}",
        cluster.logs()
    );
    let file = workload(&cluster, &["tpch-q1-2g", "tpch-q3-2g"]);
    // Tasks of seconds: the jobs are still running when the signal comes.
    let child = start_job_run_scaled(&cluster, &file, 1.0);
    wait_for_busiest_agent(&cluster, Duration::from_secs(20), None);
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let status = wait_for_exit(&cluster, child, Duration::from_secs(15), "stop on SIGINT");
    assert_eq!(status.code(), Some(130), "{}", logs(&cluster));
    let output = std::fs::read_to_string(cluster.dir().join("job-run.json")).unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(&output)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {output}\n{}", logs(&cluster)));
    assert_eq!(summary["failed"], 2, "{summary:#}");
    // Within assert_all_free's 10 s, far below the failover timeout.
    let state = assert_all_free(&cluster);
    // Torn down by the job run on its way out (the master forgets a torn-down framework's
    // tasks), not left to fail over.
    let frameworks = state["frameworks"].as_array().expect("frameworks");
    assert_eq!(frameworks.len(), 2, "{state}");
    assert!(frameworks.iter().all(|f| f["torn_down"] == true), "{state}");
    // And each job says why it ended: the run told the masters before it left.
    let jobs = wait_for_jobs(&cluster, 2, |job| job["outcome"] == "failed");
    for job in &jobs {
        assert!(
            job["reason"]
                .as_str()
                .is_some_and(|r| r.contains("stopped")),
            "{job}"
        );
    }
}

/// The leader's `/jobs` once `count` jobs satisfy `ended` (polled for 10 s; the view is
/// published at intervals); fails the test with the document otherwise.
fn wait_for_jobs(
    cluster: &MasterCluster,
    count: usize,
    ended: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let started = Instant::now();
    loop {
        let document = cluster.http_get("/jobs").unwrap_or_default();
        let jobs: Vec<serde_json::Value> = document["jobs"]
            .as_array()
            .map(|jobs| jobs.iter().filter(|job| ended(job)).cloned().collect())
            .unwrap_or_default();
        if jobs.len() == count {
            return jobs;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not {count} such jobs in /jobs: {document:#}\n{}",
            logs(cluster)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `fullerene job kill` stops a running job: its framework is torn down (tasks killed, the
/// agents freed), the `job run` running it hears of it at once and exits saying so, and the
/// masters record the job as killed, which `fullerene job status` shows.
#[test]
fn a_job_killed_from_the_cli_stops_its_run_and_is_recorded_killed() {
    let cluster = cluster(1);
    let file = workload(&cluster, &["tpch-q1-2g"]);
    // Tasks of seconds: the job is still running when it is killed.
    let child = start_job_run_scaled(&cluster, &file, 1.0);
    let running = wait_for_jobs(&cluster, 1, |job| {
        job["outcome"].is_null()
            && job["stages"].as_array().is_some_and(|stages| {
                stages
                    .iter()
                    .any(|stage| stage["tasks"]["running"].as_u64().is_some_and(|n| n > 0))
            })
    });
    assert_eq!(running[0]["job"], "tpch-q1-2g", "{running:?}");
    assert!(
        running[0]["stages"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "the job's stages are described: {running:?}"
    );

    let answer = cluster.operator_cli(&["job", "kill", "tpch-q1-2g"]);
    assert_eq!(answer["done"], true, "{answer}");
    let status = wait_for_exit(&cluster, child, Duration::from_secs(15), "stop on the kill");
    assert!(!status.success(), "{}", logs(&cluster));
    let output = std::fs::read_to_string(cluster.dir().join("job-run.json")).unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(&output)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {output}\n{}", logs(&cluster)));
    let reason = summary["jobs"][0]["outcome"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("torn down by an operator"),
        "{summary:#}\n{}",
        logs(&cluster)
    );

    let killed = wait_for_jobs(&cluster, 1, |job| job["outcome"] == "killed");
    assert!(killed[0]["jct_ms"].is_null(), "{killed:?}");
    assert_all_free(&cluster);
    let listed = cluster.operator_cli(&["job", "status"]);
    assert_eq!(listed[0]["state"], "killed", "{listed:#}");
    // Killing it again names what is wrong.
    let again = cluster
        .operator_command(&["job", "kill", "tpch-q1-2g"])
        .output()
        .expect("run fullerene");
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("no running job is named `tpch-q1-2g`"),
        "{stderr}"
    );
}
