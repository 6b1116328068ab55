//! The cluster's events and the history of finished tasks on real processes: `fullerene events
//! --follow --json` follows three masters' events across a leader kill, resuming on the new
//! leader after the last event it printed, without a gap or a repeat; a finished task stays
//! visible in `fullerene tasks --all` and `/tasks?all=true` once it ended.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fullerene_proto::http::{ClusterEvent, EventRecord, TasksDocument};
use fullerene_proto::messages::{FrameworkRequest, Leftover};
use fullerene_tests::{demand, resources, sleep_task, MasterCluster, KILL_GRACE_MS};

/// Generous: only a hang fails a test on a loaded machine.
const WAIT: Duration = Duration::from_secs(30);

/// A running `fullerene --json events --follow`, its lines read on a thread of their own.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<EventRecord>,
}

impl Follower {
    fn start(cluster: &MasterCluster) -> Follower {
        let mut child = cluster
            .operator_command(&["--json", "events", "--follow", "--limit", "1000"])
            .arg("--since")
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fullerene events --follow");
        let stdout = child.stdout.take().expect("its standard output");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads events until one satisfies `wanted`; panics with what it saw after `WAIT`.
    fn until(&mut self, cluster: &MasterCluster, wanted: impl Fn(&EventRecord) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                panic!(
                    "no wanted event in time; saw {:#?}\n{}",
                    self.seen,
                    cluster.logs()
                );
            };
            let record: EventRecord = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("`{line}` is not an event: {e}"));
            let found = wanted(&record);
            self.seen.push(record);
            if found {
                return;
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_followed_across_a_leader_kill_without_a_gap_and_finished_tasks_stay_visible() {
    let mut cluster = MasterCluster::start_with(3, 3, 1, &[]);
    let mut follower = Follower::start(&cluster);
    cluster.spawn_agent(1, &["--resources", "cpus=4,mem_mib=4096"]);
    follower.until(&cluster, |r| {
        matches!(&r.event, ClusterEvent::AgentRegistered { agent, .. } if agent.as_str() == "agent-1")
    });

    // A task runs to its end; once its framework acknowledged it, it is history.
    let mut framework = cluster.test_framework(1, "history");
    assert!(
        framework.registered(WAIT).await.is_some(),
        "{}",
        cluster.logs()
    );
    framework.call(FrameworkRequest::UpdateDemand(demand(
        &resources("cpus=1,mem_mib=64"),
        1,
    )));
    let Some(offers) = framework.offers(WAIT).await else {
        panic!("no offer\n{}", cluster.logs());
    };
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![offers[0].id],
        tasks: vec![sleep_task("short", 100, "cpus=1,mem_mib=64", KILL_GRACE_MS)],
        leftover: Leftover::Decline { refuse_ms: 0 },
    });
    let task = fullerene_proto::TaskId::from("short");
    assert!(
        framework.terminal_update(&task, WAIT).await.is_some(),
        "the task did not end\n{}",
        cluster.logs()
    );
    follower.until(&cluster, |r| {
        matches!(&r.event, ClusterEvent::TaskStateChanged { task, to, .. }
            if task.as_str() == "short" && to.is_terminal())
    });
    let started = Instant::now();
    let finished = loop {
        let listed: serde_json::Value =
            serde_json::from_str(&cluster.operator_output(&["--json", "tasks", "--all"]))
                .expect("JSON");
        if let Some(task) = listed["finished"]
            .as_array()
            .and_then(|tasks| tasks.iter().find(|t| t["task_id"] == "short"))
        {
            break task.clone();
        }
        assert!(
            started.elapsed() < WAIT,
            "the finished task never showed: {listed}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(finished["state"], "Finished", "{finished}");
    assert_eq!(finished["agent_id"], "agent-1", "{finished}");
    assert!(
        finished["ended_at_ms"].as_u64() >= finished["launched_at_ms"].as_u64(),
        "{finished}"
    );
    let table = cluster.operator_output(&["tasks", "--all"]);
    assert!(
        table.contains("short") && table.contains("FINISHED"),
        "{table}"
    );
    let api = cluster.api();
    let leader = cluster.wait_for_leader(WAIT).expect("a leader");
    let answer = api
        .get_following(cluster.http_addrs[&leader], "/tasks?all=true")
        .expect("an answer");
    assert_eq!(answer.code, 200, "{}", answer.body);
    let tasks: TasksDocument = answer.json().expect("a tasks document");
    assert!(
        tasks.finished.iter().any(|t| t.task_id.as_str() == "short"),
        "{tasks:?}"
    );

    // The leader dies; the follower goes on with the new one, from the same number.
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader(WAIT).expect("a new leader");
    assert_ne!(new_leader, leader, "only running masters are asked");
    let answer = cluster.operator_output(&["--json", "agent", "drain", "1"]);
    assert!(answer.contains("true"), "{answer}");
    follower.until(
        &cluster,
        |r| matches!(&r.event, ClusterEvent::AgentDrained { agent } if agent.as_str() == "agent-1"),
    );
    assert!(
        follower.seen.iter().any(|r| matches!(
            r.event,
            ClusterEvent::LeaderElected { leader: Some(id), .. } if id == new_leader
        )),
        "the new leader's election is not among the events: {:#?}",
        follower.seen
    );

    // No repeat, and no gap: what the follower printed is exactly the new leader's record of
    // the same span.
    let seqs: Vec<u64> = follower.seen.iter().map(|r| r.seq).collect();
    assert!(
        seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "events out of order or repeated: {seqs:?}"
    );
    let first = seqs[0];
    let last = *seqs.last().expect("events");
    let text = cluster.operator_output(&[
        "--json",
        "events",
        "--since",
        &(first - 1).to_string(),
        "--limit",
        "1000",
    ]);
    let recorded: Vec<u64> = text
        .lines()
        .map(|line| serde_json::from_str::<EventRecord>(line).expect("an event line"))
        .map(|record| record.seq)
        .filter(|seq| *seq <= last)
        .collect();
    assert_eq!(
        seqs,
        recorded,
        "the followed events differ from the new leader's\n{}",
        cluster.logs()
    );
}
