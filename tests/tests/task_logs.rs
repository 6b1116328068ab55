//! Task logs read back through the leader from real agents: a task's stdout and stderr over
//! the HTTP API (whole, a range, and followed until the task ends), the same through
//! `fullerene task logs`, who may read them (operators and the task's own framework, not
//! another framework), and a sandbox the agent's garbage collection removed.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fullerene_chaos::api::{ApiAnswer, ApiClient};
use fullerene_proto::messages::{FrameworkRequest, Leftover, Offer, TaskState};
use fullerene_proto::{FrameworkId, TaskId};
use fullerene_tests::{
    demand, resources, shell_task, MasterCluster, TestFramework, FAST_LIVENESS, KILL_GRACE_MS,
};

const AGENT_RESOURCES: [&str; 2] = ["--resources", "cpus=4,mem_mib=4096,disk_mbps=100"];
const WAIT: Duration = Duration::from_secs(20);
const SMALL_TASK: &str = "cpus=1,mem_mib=64";

/// What the talking task writes: a line, a line to stderr, then a second line two seconds
/// later (so that a follower sees it arrive).
const TALKER: &str = "echo first-line; echo to-stderr >&2; sleep 2; echo second-line";

/// `GET path` from the leader (one redirect followed), on a blocking thread.
async fn get(api: &ApiClient, addr: SocketAddr, path: String) -> ApiAnswer {
    let api = api.clone();
    tokio::task::spawn_blocking(move || api.get_following(addr, &path))
        .await
        .expect("the request's thread")
        .expect("an HTTP answer")
}

/// The body of a chunked answer, its chunks joined.
fn dechunk(body: &str) -> String {
    let mut rest = body;
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// A subscribed framework and one offer from each of `agents` agents.
async fn framework_with_offers(
    cluster: &MasterCluster,
    n: usize,
    agents: usize,
) -> (TestFramework, FrameworkId, Vec<Offer>) {
    let mut framework = cluster.test_framework(n, "logs");
    let Some(id) = framework.registered(WAIT).await else {
        panic!("the framework did not subscribe\n{}", cluster.logs());
    };
    framework.call(FrameworkRequest::UpdateDemand(demand(
        &resources(SMALL_TASK),
        2,
    )));
    let mut held: Vec<Offer> = Vec::new();
    let started = Instant::now();
    while held.len() < agents {
        let Some(offers) = framework
            .offers(WAIT.saturating_sub(started.elapsed()))
            .await
        else {
            panic!("no offers from {agents} agents\n{}", cluster.logs());
        };
        for offer in offers {
            if !held.iter().any(|o| o.agent_id == offer.agent_id) {
                held.push(offer);
            }
        }
    }
    (framework, id, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_stdout_and_stderr_are_read_through_the_leader_by_whom_may() {
    let mut cluster = MasterCluster::start_with(1, 1, 2, &FAST_LIVENESS);
    cluster.spawn_agent(1, &AGENT_RESOURCES);
    // Agent 2 keeps an ended task's sandbox one second only.
    let mut quick_gc = AGENT_RESOURCES.to_vec();
    quick_gc.extend([
        "--sandbox-retention-secs",
        "1",
        "--sandbox-gc-interval-secs",
        "1",
    ]);
    cluster.spawn_agent(2, &quick_gc);
    let (mut framework, framework_id, offers) = framework_with_offers(&cluster, 1, 2).await;
    let talker_offer = offers
        .iter()
        .find(|o| o.agent_id.as_str() == "agent-1")
        .expect("an offer of agent 1");
    let collected_offer = offers
        .iter()
        .find(|o| o.agent_id.as_str() == "agent-2")
        .expect("an offer of agent 2");
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![talker_offer.id],
        tasks: vec![shell_task("talker", TALKER, SMALL_TASK, KILL_GRACE_MS)],
        leftover: Leftover::Decline { refuse_ms: 500 },
    });
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![collected_offer.id],
        tasks: vec![shell_task(
            "collected",
            "echo gone-soon",
            SMALL_TASK,
            KILL_GRACE_MS,
        )],
        leftover: Leftover::Decline { refuse_ms: 500 },
    });

    let api = cluster.api();
    let addr = cluster.http_addrs[&1];
    let files = format!("/frameworks/{framework_id}/tasks/talker/files");

    // While it runs: its first line, then, followed, everything until it ends.
    let started = Instant::now();
    loop {
        let answer = get(&api, addr, format!("{files}/stdout")).await;
        if answer.code == 200 && answer.body.starts_with("first-line") {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the running task's stdout was not served: {answer:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let followed = get(&api, addr, format!("{files}/stdout?follow=true")).await;
    assert_eq!(followed.code, 200, "{followed:?}");
    assert_eq!(followed.header("x-fullerene-task-ended"), Some("false"));
    assert_eq!(
        dechunk(&followed.body),
        "first-line\nsecond-line\n",
        "the follow did not end with the task's whole output: {followed:?}\n{}",
        cluster.logs()
    );
    let Some(end) = framework
        .terminal_update(&TaskId::from("talker"), WAIT)
        .await
    else {
        panic!("the talker did not end\n{}", cluster.logs());
    };
    assert_eq!(end.state, TaskState::Finished, "{end:?}");

    // Once ended (and perhaps forgotten by the master, so the agent is named): a range, the
    // file's size in a header, and stderr.
    let range = get(
        &api,
        addr,
        format!("{files}/stdout?offset=6&length=4&agent=agent-1"),
    )
    .await;
    assert_eq!(range.code, 200, "{range:?}");
    assert_eq!(range.body, "line");
    assert_eq!(range.header("x-fullerene-file-size"), Some("23"));
    assert_eq!(range.header("x-fullerene-file-offset"), Some("6"));
    assert_eq!(range.header("x-fullerene-task-ended"), Some("true"));
    let stderr = get(&api, addr, format!("{files}/stderr?agent=agent-1")).await;
    assert_eq!(
        (stderr.code, stderr.body.as_str()),
        (200, "to-stderr\n"),
        "{stderr:?}"
    );

    // A name that is a path is refused; the task's framework may read, another may not.
    let path = get(
        &api,
        addr,
        format!("{files}/..%2F..%2Fcheckpoint.log?agent=agent-1"),
    )
    .await;
    assert_eq!(path.code, 400, "{path:?}");
    let tls_of = |n: usize| {
        ApiClient::with_certificate(&cluster.framework_tls(n), Duration::from_secs(5))
            .expect("a framework's HTTP client")
    };
    let own = get(&tls_of(1), addr, format!("{files}/stdout?agent=agent-1")).await;
    assert_eq!(
        (own.code, own.body.as_str()),
        (200, "first-line\nsecond-line\n"),
        "{own:?}"
    );
    let other = get(&tls_of(2), addr, format!("{files}/stdout?agent=agent-1")).await;
    assert_eq!(other.code, 403, "{other:?}");

    // The same through the CLI: all of stdout, and the end of stderr.
    let cli = |extra: &[&str]| {
        let output = std::process::Command::new(fullerene_tests::fullerene_binary())
            .args(["task", "logs", "talker", "--framework"])
            .arg(framework_id.to_string())
            .args(["--agent", "1", "--master-addrs"])
            .arg(cluster.addrs[&1].to_string())
            .arg("--certs-dir")
            .arg(cluster.certs_dir())
            .args(extra)
            .output()
            .expect("run fullerene task logs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("UTF-8 output")
    };
    assert_eq!(cli(&[]), "first-line\nsecond-line\n");
    assert_eq!(cli(&["--stderr", "--tail", "7"]), "stderr\n");

    // Agent 2 collects the other task's sandbox a second after it ended: a read says so.
    let gone = format!("/frameworks/{framework_id}/tasks/collected/files/stdout?agent=agent-2");
    let started = Instant::now();
    loop {
        let answer = get(&api, addr, gone.clone()).await;
        if answer.code == 410 {
            assert!(
                answer
                    .body
                    .contains("sandbox removed by garbage collection"),
                "{answer:?}"
            );
            break;
        }
        assert!(
            started.elapsed() < WAIT && answer.code == 200,
            "the collected sandbox was not reported as such: {answer:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A task the master does not know, with no agent named, is a clear 404.
    let unknown = get(
        &api,
        addr,
        format!("/frameworks/{framework_id}/tasks/never-ran/files/stdout"),
    )
    .await;
    assert_eq!(unknown.code, 404, "{unknown:?}");
    assert!(unknown.body.contains("name the agent"), "{unknown:?}");
    framework.teardown(WAIT).await;
}
