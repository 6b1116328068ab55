//! The masters' HTTP API on real processes: the leader serves `/state` as JSON, a follower
//! redirects to the leader's `/state`, and every master serves Prometheus `/metrics`.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::time::{Duration, Instant};

use fullerene_proto::messages::{OperatorRequest, OperatorResponse};
use fullerene_tests::{http_get, MasterCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_serves_state_and_followers_redirect_to_it() {
    let cluster = MasterCluster::start(3, 3);
    let mut client = cluster.operator_client(&[1, 2, 3], Duration::from_secs(20));
    // A committed write: once it is answered, a leader is elected and has announced itself.
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

    let (code, _, body) = http_get(cluster.http_addrs[&leader], "/state").expect("GET /state");
    assert_eq!(code, 200, "the leader's /state: {body}");
    let state: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(state["leader"], leader);
    assert!(state["agents"].is_array() && state["tasks"].is_array());
    assert!(state["offers"].is_array() && state["frameworks"].is_array());
    let groups = state["groups"].as_array().expect("groups");
    assert!(
        groups
            .iter()
            .any(|g| g["name"] == "batch" && g["weight"] == 2.0),
        "the weight set is not in /state: {body}"
    );

    // The follower learns the leader's HTTP address from the log; allow it to apply it.
    let started = Instant::now();
    let location = loop {
        let (code, head, body) = http_get(cluster.http_addrs[&follower], "/state").expect("GET");
        if code == 307 {
            break head
                .lines()
                .find_map(|line| line.strip_prefix("location: "))
                .map(str::to_string)
                .expect("a Location header");
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the follower did not redirect: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        location,
        format!("http://{}/state", cluster.http_addrs[&leader])
    );

    for id in [leader, follower] {
        let (code, _, body) = http_get(cluster.http_addrs[&id], "/metrics").expect("GET /metrics");
        assert_eq!(code, 200);
        assert!(
            body.contains("fullerene_raft_term"),
            "master {id}'s /metrics lacks the Raft term: {body}"
        );
    }
    let (code, _, _) = http_get(cluster.http_addrs[&leader], "/nowhere").expect("GET");
    assert_eq!(code, 404);
}
