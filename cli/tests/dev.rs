//! `fullerene dev` end to end: a real local cluster (masters and agents are processes of the
//! binary under test) running TPC-H jobs, and nothing left running afterwards.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::processes_using;

fn fullerene() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fullerene"));
    cmd.env_remove("FULLERENE_CONFIG")
        .env_remove("FULLERENE_WORKLOAD")
        .env_remove("FULLERENE_LOG")
        .env_remove("FULLERENE_TIME_SCALE")
        .env_remove("FULLERENE_POLICY");
    cmd
}

fn workload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl")
}

/// Runs `fullerene dev` on 2 agents with the file's first jobs, `flags` added, to its end;
/// fails the test unless it succeeds. Its JSON summary and its standard error.
fn run_dev(flags: &[&str]) -> (serde_json::Value, String) {
    let out = fullerene()
        .args(["dev", "--agents", "2", "--job-order", "file", "--json"])
        .arg("--workload")
        .arg(workload())
        .args(flags)
        .output()
        .expect("fullerene dev runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "fullerene dev failed:\n{stderr}");
    let summary = serde_json::from_slice(&out.stdout).expect("the summary is JSON");
    (summary, stderr)
}

#[test]
fn dev_runs_two_jobs_to_completion_and_stops_its_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster_dir = dir.path().join("cluster");
    let (summary, stderr) = run_dev(&[
        "--jobs",
        "2",
        "--time-scale",
        "0.02",
        "--dir",
        cluster_dir.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(summary["finished"], 2, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(summary["time_scale"], 0.02);
    let jobs = summary["jobs"].as_array().expect("jobs");
    let names: Vec<&str> = jobs.iter().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names, ["tpch-q1-2g", "tpch-q2-2g"]);
    for job in jobs {
        assert_eq!(job["outcome"]["state"], "finished", "{job:#}");
    }
    assert!(stderr.contains("/state"), "the HTTP API is shown: {stderr}");
    // `--dir` is kept, with the masters' and agents' logs; nothing of the cluster still runs.
    assert!(cluster_dir.join("agent-2.log").is_file());
    // A log file gets no colors, and a master says at start, at its default level, who it is,
    // where it listens and where its data is, then that it leads.
    let log = std::fs::read_to_string(cluster_dir.join("master-1.log")).expect("master-1.log");
    assert!(!log.contains('\u{1b}'), "escape codes in the log:\n{log}");
    let start = log
        .lines()
        .find(|l| l.contains("master starting"))
        .unwrap_or_else(|| panic!("no start line:\n{log}"));
    assert!(
        start.contains("INFO") && start.contains("listen=") && start.contains("data_dir="),
        "{start}"
    );
    assert!(
        log.contains("role=\"leader\"") || log.contains("role=leader"),
        "{log}"
    );
    let left = processes_using(&cluster_dir, None);
    assert!(left.is_empty(), "processes left running: {left:#?}");
}

/// Issue 17 in `dev`: jobs with deadlines reserve capacity before they run, the masters answer
/// each, and the summary says per job whether it was reserved and met its deadline.
#[test]
fn dev_runs_jobs_under_reservations_and_says_whether_each_met_its_deadline() {
    let (summary, _) = run_dev(&[
        "--jobs",
        "3",
        "--time-scale",
        "1",
        "--reservations",
        "1",
        "--deadline-slack",
        "2",
    ]);
    assert_eq!(summary["finished"], 3, "{summary:#}");
    let deadlines = &summary["deadlines"];
    assert_eq!(deadlines["jobs"], 3, "{summary:#}");
    let accepted = deadlines["accepted"].as_u64().expect("accepted");
    assert!(
        accepted >= 1,
        "the plan has room for the first job: {summary:#}"
    );
    for job in summary["jobs"].as_array().expect("jobs") {
        let deadline = &job["deadline"];
        let answer = deadline["admission"]["answer"].as_str().expect("an answer");
        assert!(
            answer == "accepted" || answer == "refused",
            "every reservation is answered: {job:#}"
        );
        // The job finished: whether it met its deadline is known, and is its JCT against
        // its window. (Whether reserved jobs meet their deadlines is the simulation's
        // invariant, on a virtual clock: here a debug build shares two cores with the whole
        // cluster, and per-task overheads the plan does not see can make one late.)
        let jct_ms = job["outcome"]["jct_ms"].as_u64().expect("a JCT");
        let window_ms = deadline["window_ms"].as_u64().expect("a window");
        assert_eq!(deadline["met"], jct_ms <= window_ms, "{job:#}");
        if answer == "accepted" {
            // Named after the job and its framework.
            let name = deadline["admission"]["name"].as_str().expect("name");
            let job_name = job["name"].as_str().expect("job name");
            assert!(name.starts_with(&format!("{job_name}.")), "{job:#}");
        }
    }
    assert!(deadlines["met_accepted"].as_u64().expect("met") <= accepted);
}

/// `fullerene dev` started by a test, interrupted (then killed) if the test fails before it
/// ends, so that a failing test leaves no cluster behind.
struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = Command::new("kill")
                .args(["-INT", &self.0.id().to_string()])
                .status();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = self.0.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `fullerene dev` with `flags`, waits until its jobs run (its masters and agents are
/// up), sends it `signal` (a `kill` name) and checks that it stopped every process it started,
/// said so on its way out, removed a temporary directory, and exited with 128 + the signal's
/// number. Returns the directory the cluster used.
fn dev_stops_its_cluster_on(signal: &str, exit_code: i32, said: &str, flags: &[&str]) -> PathBuf {
    let mut dev = Dev(fullerene()
        .args(["dev", "--jobs", "3", "--time-scale", "1"])
        .args(flags)
        .arg("--workload")
        .arg(workload())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fullerene dev starts"));
    let child = &mut dev.0;
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let mut cluster_dir = None;
    // The jobs start once every master and agent is up.
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                seen.push_str(&line);
                seen.push('\n');
                if let Some(dir) = line.trim().strip_prefix("directory: ") {
                    cluster_dir = Some(PathBuf::from(dir));
                }
                if line.starts_with("running ") {
                    break;
                }
            }
            _ => panic!("fullerene dev ended before running jobs:\n{seen}"),
        }
    }
    let cluster_dir = cluster_dir.unwrap_or_else(|| panic!("no directory shown:\n{seen}"));
    let running = processes_using(&cluster_dir, Some(child.id()));
    assert!(!running.is_empty(), "no master or agent runs:\n{seen}");
    let sent = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "fullerene dev did not stop within 30 s of SIG{signal}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(status.code(), Some(exit_code), "{}", rest.join("\n"));
    assert!(
        rest.iter().any(|l| l.contains(said)),
        "no `{said}` in:\n{}",
        rest.join("\n")
    );
    let left = processes_using(&cluster_dir, None);
    assert!(left.is_empty(), "processes left running: {left:#?}");
    cluster_dir
}

#[test]
fn dev_stops_its_cluster_on_ctrl_c() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster_dir = dir.path().join("cluster");
    let cluster_dir = cluster_dir.to_str().expect("a UTF-8 path");
    let used = dev_stops_its_cluster_on(
        "INT",
        130,
        "interrupted: stopped 3 masters and 2 agents",
        &["--masters", "3", "--agents", "2", "--dir", cluster_dir],
    );
    assert!(used.join("master-1.log").is_file(), "--dir is kept");
}

/// A closed terminal or a dropped ssh session hangs `dev` up: the cluster stops as on ctrl-c,
/// and its temporary directory goes with it.
#[test]
fn dev_stops_its_cluster_and_removes_its_directory_on_hangup() {
    let used = dev_stops_its_cluster_on(
        "HUP",
        129,
        "hung up: stopped 1 master and 2 agents",
        &["--masters", "1", "--agents", "2"],
    );
    assert!(!used.exists(), "{} is left behind", used.display());
}

#[test]
fn dev_stops_its_cluster_on_sigterm() {
    dev_stops_its_cluster_on(
        "TERM",
        143,
        "terminated: stopped 1 master and 1 agent",
        &["--masters", "1", "--agents", "1"],
    );
}
