//! The masters' HTTP API on real processes: the leader serves its view over HTTPS to an
//! operator's certificate or a bearer token, a follower redirects reads and writes to the
//! same path on the leader, every master serves Prometheus `/metrics`, a write through the API
//! is committed and seen by the next read, task environments are redacted, and the
//! unauthenticated `/health` and `/ready` probes tell a master that lost its quorum (healthy,
//! not ready) from one that can serve.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::time::{Duration, Instant};

use fullerene_chaos::{ApiAnswer, ApiClient};
use fullerene_proto::http::{GroupsDocument, ProbeDocument, StateDocument};
use fullerene_proto::messages::{
    Executor, FrameworkRequest, Leftover, OperatorRequest, OperatorResponse, REDACTED,
};
use fullerene_tests::{demand, resources, shell_task, MasterCluster, KILL_GRACE_MS};
use fullerene_transport::Role;

/// Three masters (certificates for an agent and a framework too), and a write committed through the QUIC operator session (so a leader is
/// elected and has announced its HTTP address); the leader's id and a follower's.
async fn cluster_with_a_leader() -> (MasterCluster, u64, u64) {
    let cluster = MasterCluster::start_with(3, 3, 1, &[]);
    let mut client = cluster.operator_client(&[1, 2, 3], Duration::from_secs(20));
    let request = OperatorRequest::SetGroupWeight {
        group: "batch".to_string(),
        weight: 2.0,
    };
    assert!(
        matches!(client.request(&request).await, Ok(OperatorResponse::Done)),
        "no leader took a write\n{}",
        cluster.logs()
    );
    let Ok(OperatorResponse::ClusterStatus(status)) =
        client.request(&OperatorRequest::ClusterStatus).await
    else {
        panic!("no cluster status\n{}", cluster.logs());
    };
    let leader = status.leader.expect("a leader").id.0;
    let follower = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    (cluster, leader, follower)
}

/// Asks `path` of `follower` until it redirects (it learns the leader's HTTP address from the
/// log); the `Location`.
fn redirect_of(api: &ApiClient, cluster: &MasterCluster, follower: u64, path: &str) -> String {
    let started = Instant::now();
    loop {
        let answer = api
            .get(cluster.http_addrs[&follower], path)
            .expect("GET from the follower");
        if answer.code == 307 {
            return answer.header("location").expect("a Location").to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the follower did not redirect: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_serves_its_view_over_https_and_followers_redirect_to_it() {
    let (cluster, leader, follower) = cluster_with_a_leader().await;
    let api = cluster.api();
    let leader_http = cluster.http_addrs[&leader];

    let answer = api.get(leader_http, "/state").expect("GET /state");
    assert_eq!(answer.code, 200, "the leader's /state: {answer:?}");
    let state: StateDocument = answer.json().expect("a state document");
    assert_eq!(state.view.leader.0, leader);
    assert!(state.term >= 1 && state.view.applied >= 1);
    // The write above was answered before this read: the view holds it.
    assert!(
        state
            .view
            .groups
            .iter()
            .any(|g| g.name == "batch" && g.weight == 2.0),
        "the weight set is not in /state: {}",
        answer.body
    );

    assert_eq!(
        redirect_of(&api, &cluster, follower, "/state"),
        format!("https://{leader_http}/state")
    );
    assert_eq!(
        redirect_of(&api, &cluster, follower, "/tasks?framework=f-1"),
        format!("https://{leader_http}/tasks?framework=f-1"),
        "the query goes along"
    );
    let followed = api
        .get_following(cluster.http_addrs[&follower], "/state")
        .expect("GET /state, redirect followed");
    assert_eq!(followed.code, 200, "{followed:?}");

    for id in [leader, follower] {
        let answer = api
            .get(cluster.http_addrs[&id], "/metrics")
            .expect("GET /metrics");
        assert_eq!(answer.code, 200);
        assert!(
            answer.body.contains("fullerene_raft_term"),
            "master {id}'s /metrics lacks the Raft term: {}",
            answer.body
        );
    }
    assert_eq!(api.get(leader_http, "/nowhere").expect("GET").code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_read_and_write_and_other_callers_are_refused() {
    let (cluster, leader, follower) = cluster_with_a_leader().await;
    let leader_http = cluster.http_addrs[&leader];
    let reader = cluster
        .token_client(&cluster.http_tokens.read)
        .expect("a reader");
    let writer = cluster
        .token_client(&cluster.http_tokens.write)
        .expect("a writer");
    let body = Some(r#"{"weight": 4}"#);

    assert_eq!(reader.get(leader_http, "/state").expect("GET").code, 200);
    let answer = reader
        .request("PUT", leader_http, "/groups/web/weight", body)
        .expect("PUT");
    assert_eq!(answer.code, 403, "{answer:?}");

    // A write sent to a follower is redirected, method and path kept.
    let started = Instant::now();
    let location = loop {
        let answer = writer
            .request(
                "PUT",
                cluster.http_addrs[&follower],
                "/groups/web/weight",
                body,
            )
            .expect("PUT");
        if answer.code == 307 {
            break answer.header("location").unwrap_or_default().to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{answer:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(location, format!("https://{leader_http}/groups/web/weight"));
    let answer = writer
        .request("PUT", leader_http, "/groups/web/weight", body)
        .expect("PUT");
    assert_eq!(answer.code, 200, "{answer:?}");
    let groups: GroupsDocument = reader
        .get(leader_http, "/groups")
        .expect("GET /groups")
        .json()
        .expect("a groups document");
    assert_eq!(groups.weights.get("web"), Some(&4.0), "{groups:?}");

    let tls = cluster.tls_of(Role::Operator, 1).expect("the CA");
    let anonymous = ApiClient::anonymous(&tls, Duration::from_secs(5)).expect("a client");
    let answer = anonymous.get(leader_http, "/state").expect("GET");
    assert_eq!(answer.code, 401, "{answer:?}");
    assert!(answer
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Bearer")));
    let agent = ApiClient::with_certificate(
        &cluster
            .tls_of(Role::Framework, 1)
            .expect("a framework's certificate"),
        Duration::from_secs(5),
    )
    .expect("a client");
    assert_eq!(agent.get(leader_http, "/state").expect("GET").code, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_environments_are_redacted_in_every_document() {
    let mut cluster = MasterCluster::start_with(1, 1, 1, &[]);
    cluster.spawn_agent(1, &["--resources", "cpus=2,mem_mib=1024,disk_mbps=100"]);
    let mut framework = cluster.test_framework(1, "secrets");
    let wait = Duration::from_secs(20);
    let framework_id = framework.registered(wait).await.expect("subscribed");
    framework.call(FrameworkRequest::UpdateDemand(demand(
        &resources("cpus=1,mem_mib=64"),
        1,
    )));
    let offer = framework
        .offers(wait)
        .await
        .and_then(|offers| offers.into_iter().next())
        .unwrap_or_else(|| panic!("no offer\n{}", cluster.logs()));
    let mut task = shell_task("holder", "sleep 30", "cpus=1,mem_mib=64", KILL_GRACE_MS);
    if let Executor::Command(command) = &mut task.executor {
        command
            .env
            .insert("DB_PASSWORD".to_string(), "hunter2".to_string());
    }
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: vec![task],
        leftover: Leftover::Decline { refuse_ms: 500 },
    });

    let api = cluster.api();
    let http = cluster.http_addrs[&1];
    let started = Instant::now();
    let state = loop {
        let answer = api.get(http, "/state").expect("GET /state");
        if answer.code == 200 && answer.body.contains("DB_PASSWORD") {
            break answer.body;
        }
        assert!(
            started.elapsed() < wait,
            "the task never showed: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        !state.contains("hunter2") && state.contains(REDACTED),
        "{state}"
    );
    let tasks = api
        .get(http, &format!("/tasks?framework={framework_id}"))
        .expect("GET /tasks");
    assert!(
        tasks.body.contains("DB_PASSWORD") && !tasks.body.contains("hunter2"),
        "{tasks:?}"
    );
    // The operator's QUIC session, with its certificate, still shows the value.
    let mut operator = cluster.operator_client(&[1], wait);
    match operator.request(&OperatorRequest::State).await {
        Ok(OperatorResponse::State(view)) => {
            assert!(format!("{:?}", view.tasks).contains("hunter2"));
        }
        other => panic!("{other:?}"),
    }
    framework.teardown(Duration::from_secs(5)).await;
}

/// `path` of master `id` as an anonymous client (no certificate, no token): the code and the
/// probe document.
fn probe(api: &ApiClient, cluster: &MasterCluster, id: u64, path: &str) -> (u16, ProbeDocument) {
    let answer: ApiAnswer = api
        .get(cluster.http_addrs[&id], path)
        .unwrap_or_else(|error| panic!("GET {path} from master {id}: {error}"));
    let document = answer.json().unwrap_or_else(|error| {
        panic!("{path} of master {id} is not a probe document ({error}): {answer:?}")
    });
    (answer.code, document)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_need_no_credentials_and_a_master_without_quorum_is_healthy_but_not_ready() {
    let (mut cluster, leader, follower) = cluster_with_a_leader().await;
    let anonymous = ApiClient::anonymous(
        &cluster.tls_of(Role::Operator, 1).expect("the CA"),
        Duration::from_secs(5),
    )
    .expect("an anonymous client");
    // Every other route refuses the anonymous client: the probes are the exception.
    assert_eq!(
        anonymous
            .get(cluster.http_addrs[&leader], "/state")
            .expect("GET /state")
            .code,
        401
    );

    let (code, health) = probe(&anonymous, &cluster, leader, "/health");
    assert_eq!(
        (code, health.ok, health.master),
        (200, true, Some(leader)),
        "{health:?}"
    );
    let (code, ready) = probe(&anonymous, &cluster, leader, "/ready");
    assert_eq!(
        (code, ready.ok, ready.leader),
        (200, true, Some(leader)),
        "{ready:?}"
    );
    assert!(ready.reason.contains("leads"), "{ready:?}");
    let (code, health) = probe(&anonymous, &cluster, follower, "/health");
    assert_eq!((code, health.ok), (200, true), "{health:?}");
    let (code, ready) = probe(&anonymous, &cluster, follower, "/ready");
    assert_eq!(
        (code, ready.ok, ready.leader),
        (200, true, Some(leader)),
        "{ready:?}"
    );
    assert!(
        ready.reason.contains(&format!("follows master {leader}")),
        "{ready:?}"
    );

    // Two of three gone: the one left has no quorum. It stops being ready once it forgets
    // its leader (check-quorum or its election timer, well under a few seconds), and stays
    // healthy: its process and node loop still run.
    let survivor = follower;
    for id in [1, 2, 3] {
        if id != survivor {
            cluster.kill(id);
        }
    }
    let started = Instant::now();
    let not_ready = loop {
        let (code, ready) = probe(&anonymous, &cluster, survivor, "/ready");
        if code == 503 {
            break ready;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the master without quorum is still ready: {ready:?}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!not_ready.ok && not_ready.leader.is_none(), "{not_ready:?}");
    assert!(not_ready.reason.contains("no leader"), "{not_ready:?}");
    let (code, health) = probe(&anonymous, &cluster, survivor, "/health");
    assert_eq!(
        (code, health.ok, health.master),
        (200, true, Some(survivor)),
        "{health:?}"
    );
}
