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
use fullerene_tests::{demand, resources, shell_task, sleep_task, MasterCluster, KILL_GRACE_MS};
use fullerene_transport::Role;

/// Generous: only a hang fails a test on a loaded machine.
const WAIT: Duration = Duration::from_secs(20);

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
    assert_eq!(
        redirect_of(&api, &cluster, follower, "/"),
        format!("https://{leader_http}/"),
        "the web UI is the leader's, so that it reads the leader's API from its own origin"
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
    // The gauges read off the replicated state are a follower's too: the group the write
    // above created shows (they are recomputed once a second).
    let started = Instant::now();
    loop {
        let answer = api
            .get(cluster.http_addrs[&follower], "/metrics")
            .expect("GET /metrics");
        if labelled_sample(
            &answer.body,
            "fullerene_master_group_share",
            "group=\"batch\"",
        )
        .is_some()
        {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the follower's gauges lack the group: {}",
            answer.body
        );
        std::thread::sleep(Duration::from_millis(200));
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

/// The rows of the README's metrics table between `<!-- metrics:{which} -->` and its end:
/// each metric's name and type.
fn readme_metrics(which: &str) -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let start = format!("<!-- metrics:{which} -->");
    let end = format!("<!-- /metrics:{which} -->");
    let table = readme
        .split_once(&start)
        .and_then(|(_, rest)| rest.split_once(&end))
        .unwrap_or_else(|| panic!("README.md has no table between {start} and {end}"))
        .0;
    let rows: Vec<(String, String)> = table
        .lines()
        .filter_map(|line| {
            let mut cells = line.split('|').map(str::trim).skip(1);
            let name = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), cells.next()?.to_string()))
        })
        .collect();
    assert!(
        !rows.is_empty(),
        "README.md's {which} metrics table is empty"
    );
    rows
}

/// Every metric name a PromQL expression of the Grafana dashboard reads, with a summary's
/// `_sum` and `_count` series counted as the summary.
fn dashboard_metrics() -> std::collections::BTreeSet<String> {
    fn expressions(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", serde_json::Value::String(expr)) => into.push(expr.clone()),
                        _ => expressions(value, into),
                    }
                }
            }
            serde_json::Value::Array(values) => values.iter().for_each(|v| expressions(v, into)),
            _ => {}
        }
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/fullerene.json"
    );
    let text = std::fs::read_to_string(path).expect("the Grafana dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut exprs = Vec::new();
    expressions(&dashboard, &mut exprs);
    let mut names = std::collections::BTreeSet::new();
    for expr in exprs {
        for (at, _) in expr.match_indices("fullerene_") {
            let name: String = expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let summary = ["_sum", "_count"].iter().find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| base.ends_with("_seconds"))
            });
            names.insert(summary.unwrap_or(&name).to_string());
        }
    }
    names
}

#[test]
fn the_grafana_dashboard_charts_exactly_the_metrics_the_readme_lists() {
    let listed: std::collections::BTreeSet<String> = readme_metrics("master")
        .into_iter()
        .chain(readme_metrics("agent"))
        .map(|(name, _)| name)
        .collect();
    let charted = dashboard_metrics();
    let unlisted: Vec<_> = charted.difference(&listed).collect();
    let uncharted: Vec<_> = listed.difference(&charted).collect();
    assert!(
        unlisted.is_empty() && uncharted.is_empty(),
        "charted but not in README.md's tables: {unlisted:?}; listed but not charted: {uncharted:?}"
    );
}

/// The value of the first sample of `series` (a name with its labels, as rendered, or a name
/// alone for an unlabelled series) in a Prometheus scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// A sample of `name` with label `label` (e.g. `state="active"`) among its labels.
fn labelled_sample(text: &str, name: &str, label: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let labels = line.strip_prefix(name)?.strip_prefix('{')?;
        let (labels, value) = labels.split_once("} ")?;
        labels
            .split(',')
            .any(|l| l == label)
            .then(|| value.trim().parse().ok())?
    })
}

/// Asserts that a scrape has HELP and TYPE lines and a sample for each of `metrics` (names
/// and types).
fn assert_lists(text: &str, metrics: &[(String, String)]) {
    for (name, kind) in metrics {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# HELP {name} "))),
            "no HELP for {name}:\n{text}"
        );
        assert!(
            text.lines().any(|l| l == format!("# TYPE {name} {kind}")),
            "no `# TYPE {name} {kind}`:\n{text}"
        );
        assert!(
            text.lines()
                .any(|l| !l.starts_with('#') && l.starts_with(name.as_str())),
            "no sample of {name}:\n{text}"
        );
    }
}

/// `GET /metrics` over plain HTTP (an agent's endpoint); the response, headers included.
fn scrape_plain(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the agent's metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("response");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_exports_every_listed_metric_with_help_and_values_that_move() {
    let mut cluster = MasterCluster::start_with(1, 1, 1, &[]);
    assert_eq!(cluster.wait_for_leader(WAIT), Some(1), "{}", cluster.logs());
    let api = cluster.api();
    let http = cluster.http_addrs[&1];
    let scrape = |api: &ApiClient| {
        let answer = api.get(http, "/metrics").expect("GET /metrics");
        assert_eq!(answer.code, 200, "{answer:?}");
        answer.body
    };
    let before = scrape(&api);
    assert_eq!(
        labelled_sample(&before, "fullerene_master_agents", "state=\"active\"").unwrap_or(0.0),
        0.0,
        "an active agent before any registered:\n{before}"
    );

    let agent_metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|probe| probe.local_addr())
        .expect("a free port");
    cluster.spawn_agent(
        1,
        &[
            "--resources",
            "cpus=4,mem_mib=4096,disk_mbps=100",
            "--metrics-listen",
            &agent_metrics.to_string(),
        ],
    );
    let mut framework = cluster.test_framework(1, "metrics");
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
    framework.call(FrameworkRequest::Decline {
        offer_ids: offers.iter().map(|o| o.id).collect(),
        refuse_ms: 0,
    });
    let Some(offers) = framework.offers(WAIT).await else {
        panic!("no offer after a decline\n{}", cluster.logs());
    };
    framework.call(FrameworkRequest::Accept {
        offer_ids: vec![offers[0].id],
        tasks: vec![sleep_task(
            "charted",
            200,
            "cpus=1,mem_mib=64",
            KILL_GRACE_MS,
        )],
        leftover: Leftover::Decline { refuse_ms: 0 },
    });
    let task = fullerene_proto::TaskId::from("charted");
    assert!(
        framework.terminal_update(&task, WAIT).await.is_some(),
        "the task did not end\n{}",
        cluster.logs()
    );

    // The gauges are recomputed once a second.
    let started = Instant::now();
    let text = loop {
        let text = scrape(&api);
        let active = labelled_sample(&text, "fullerene_master_agents", "state=\"active\"");
        let cpus = labelled_sample(
            &text,
            "fullerene_master_resources_capacity",
            "kind=\"cpus\"",
        );
        if active == Some(1.0) && cpus == Some(4.0) {
            break text;
        }
        assert!(
            started.elapsed() < WAIT,
            "the agent never showed in the gauges:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    assert_lists(&text, &readme_metrics("master"));
    let agent_text = scrape_plain(agent_metrics);
    assert_lists(&agent_text, &readme_metrics("agent"));
    assert_eq!(
        sample(&agent_text, "fullerene_agent_launches_total"),
        Some(1.0),
        "{agent_text}"
    );
    // Each counter moved past what the decline, the accept and the launch make it.
    for (name, above) in [
        ("fullerene_master_offers_made_total", 1.0),
        ("fullerene_master_offers_declined_total", 0.0),
        ("fullerene_master_offers_accepted_total", 0.0),
        ("fullerene_master_tasks_launched_total", 0.0),
        ("fullerene_master_launch_latency_seconds_count", 0.0),
    ] {
        let value = sample(&text, name).unwrap_or(0.0);
        assert!(
            value > above,
            "{name} is {value}, not above {above}:\n{text}"
        );
    }
    assert!(
        labelled_sample(
            &text,
            "fullerene_raft_apply_latency_seconds_sum",
            "node=\"1\""
        )
        .is_some_and(|s| s > 0.0),
        "the apply latency reads 0:\n{text}"
    );
    assert!(
        labelled_sample(&text, "fullerene_master_group_share", "group=\"default\"")
            .is_some_and(|s| s > 0.0),
        "the framework's group has no share:\n{text}"
    );
    framework.teardown(WAIT).await;
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
