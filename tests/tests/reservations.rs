//! Reservations on real processes (issue 17, Rayon §5.2's calls): an operator reserves with
//! `fullerene reservation`, a token holder through the HTTP API; each owns what it created;
//! refusals name their reason (a syntax error its column, a full plan the atom that did not
//! fit); `list`, `show`, `GET /reservations` and `/state` show what the plan holds.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::time::Duration;

use fullerene_proto::http::ReservationsDocument;
use fullerene_tests::MasterCluster;

/// Generous: only a hang fails a test on a loaded machine.
const WAIT: Duration = Duration::from_secs(30);

/// One bundle of 4 cpus for an hour, within the 61 minutes that start a minute after the request
/// (the plan counts an agent's capacity from the next whole minute after it registers).
const ONE_HOUR: &str = "window(atom(cpus=4,mem_mib=1024; g=1, h=1, l=1m, w=1h), s=1m, f=62m)";

/// `masters` masters and one agent of 8 cpus, registered.
fn cluster_of(masters: u64) -> MasterCluster {
    let mut cluster = MasterCluster::start_with(masters, masters, 1, &[]);
    cluster.spawn_agent(1, &["--resources", "cpus=8,mem_mib=8192"]);
    assert!(
        cluster.wait_for_active_agents(1, WAIT),
        "no agent\n{}",
        cluster.logs()
    );
    cluster
}

#[test]
fn operators_and_tokens_reserve_and_every_view_shows_the_plan() {
    let cluster = cluster_of(1);

    // The operator's certificate: accepted, owned by its principal.
    let created = cluster.operator_cli(&["reservation", "create", "nightly", "--rdl", ONE_HOUR]);
    assert_eq!(created["done"], true, "{created}");
    // A syntax error is caught by the CLI before anything is sent, with its column.
    let typo = cluster
        .operator_command(&["reservation", "create", "typo", "--rdl", "atom(cpus=1; g=1"])
        .output()
        .expect("run fullerene");
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(!typo.status.success());
    assert!(stderr.contains("1:17"), "{stderr}");

    // A bearer token with the write scope, through the HTTP API: the second half of the cpus.
    let leader = cluster.wait_for_leader(WAIT).expect("a leader");
    let leader_http = cluster.http_addrs[&leader];
    let writer = cluster
        .token_client(&cluster.http_tokens.write)
        .expect("a writer");
    let body = format!(r#"{{"name": "etl", "rdl": "{ONE_HOUR}"}}"#);
    let answer = writer
        .request("POST", leader_http, "/reservations", Some(&body))
        .expect("POST");
    assert_eq!(answer.code, 200, "{answer:?}");
    // The plan is full for that hour: a third is refused with the plan's reason.
    let full = format!(r#"{{"name": "adhoc", "rdl": "{ONE_HOUR}"}}"#);
    let answer = writer
        .request("POST", leader_http, "/reservations", Some(&full))
        .expect("POST");
    assert_eq!(answer.code, 400, "{answer:?}");
    assert!(answer.body.contains("no room"), "{answer:?}");

    let document: ReservationsDocument = writer
        .get(leader_http, "/reservations")
        .expect("GET /reservations")
        .json()
        .expect("a reservations document");
    let owners: Vec<(&str, &str)> = document
        .accepted
        .iter()
        .map(|r| (r.name.as_str(), r.owner.as_str()))
        .collect();
    assert_eq!(owners.len(), 2, "{document:?}");
    assert_eq!(owners[0].0, "etl");
    assert!(owners[0].1.starts_with("token:"), "{owners:?}");
    assert_eq!(owners[1].0, "nightly");
    assert!(
        document.accepted.iter().all(|r| r.rdl.contains("cpus=4")),
        "{document:?}"
    );

    // The metrics: two planned, one refused (the gauges are recomputed once a second).
    let started = std::time::Instant::now();
    loop {
        let metrics = writer
            .get(leader_http, "/metrics")
            .expect("GET /metrics")
            .body;
        let has = |line: &str| metrics.lines().any(|l| l == line);
        if has("fullerene_master_reservations{phase=\"planned\"} 2")
            && has("fullerene_master_reservations_refused_total 1")
        {
            break;
        }
        assert!(started.elapsed() < WAIT, "{metrics}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // `show`: the hour the plan holds for it, 4 cpus throughout.
    let shown = cluster.operator_cli(&["reservation", "show", "nightly"]);
    let steps = shown["allocation"].as_array().expect("allocation steps");
    assert_eq!(steps.len(), 1, "{shown}");
    let length = steps[0]["end_ms"].as_u64().unwrap() - steps[0]["start_ms"].as_u64().unwrap();
    assert_eq!(length, 3_600_000, "{shown}");
    assert_eq!(shown["phase"], "planned");

    // The operator may delete the token holder's reservation; then the third fits.
    let answer = writer
        .request("DELETE", leader_http, "/reservations/etl", None)
        .expect("DELETE");
    assert_eq!(answer.code, 200, "{answer:?}");
    let answer = writer
        .request("DELETE", leader_http, "/reservations/etl", None)
        .expect("DELETE");
    assert_eq!(answer.code, 404, "{answer:?}");
    let deleted = cluster.operator_cli(&["reservation", "delete", "nightly"]);
    assert_eq!(deleted["done"], true, "{deleted}");
    let answer = writer
        .request("POST", leader_http, "/reservations", Some(&full))
        .expect("POST");
    assert_eq!(answer.code, 200, "{answer:?}");

    let listed = cluster.operator_cli(&["reservation", "list"]);
    let names: Vec<&str> = listed["accepted"]
        .as_array()
        .expect("accepted")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["adhoc"], "{listed}");
    let state = cluster.http_state().expect("the state");
    assert_eq!(state["reservations"][0]["name"], "adhoc", "{state}");
    let table = cluster.operator_output(&["reservation", "list"]);
    assert!(
        table.contains("adhoc") && table.contains("planned"),
        "{table}"
    );
    // The operator's policy: GREE-L and a quarter of the cluster at most per principal. The
    // plan has room for another 4 cpus, but that is half the cluster: the cap refuses it.
    cluster.operator_cli(&[
        "reservation",
        "policy",
        "set",
        "--placement",
        "gree-l",
        "--instantaneous-percent",
        "25",
    ]);
    let policy = cluster.operator_cli(&["reservation", "policy", "show"]);
    assert_eq!(policy["placement"], "gree-l", "{policy}");
    assert_eq!(policy["default_caps"]["instantaneous"], 0.25, "{policy}");
    let capped = cluster
        .operator_command(&["reservation", "create", "capped", "--rdl", ONE_HOUR])
        .output()
        .expect("run fullerene");
    let stderr = String::from_utf8_lossy(&capped.stderr);
    assert!(!capped.status.success());
    assert!(stderr.contains("sharing policy"), "{stderr}");
    // The quantum changes only in an empty plan: refused while `adhoc` is accepted, then
    // taken once it is deleted.
    let requantize = ["reservation", "policy", "set", "--quantum", "100ms"];
    let refused = cluster
        .operator_command(&requantize)
        .output()
        .expect("run fullerene");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("no reservation"), "{stderr}");
    cluster.operator_cli(&["reservation", "delete", "adhoc"]);
    cluster.operator_cli(&requantize);
    let policy = cluster.operator_cli(&["reservation", "policy", "show"]);
    assert_eq!(policy["quantum_ms"], 100, "{policy}");
    assert_eq!(policy["placement"], "gree-l", "the rest stays: {policy}");
}

/// Issue 17's target: a leader failover in the middle of a plan loses no reservation. Three
/// masters accept a reservation; the leader is killed; the new leader shows the same
/// reservation with the same allocation, and keeps admitting against the same plan.
#[test]
fn a_leader_failover_loses_no_reservation() {
    let mut cluster = cluster_of(3);
    let created = cluster.operator_cli(&["reservation", "create", "nightly", "--rdl", ONE_HOUR]);
    assert_eq!(created["done"], true, "{created}");
    let before = cluster.operator_cli(&["reservation", "show", "nightly"]);

    let old_leader = cluster.wait_for_leader(WAIT).expect("a leader");
    cluster.kill(old_leader);
    let started = std::time::Instant::now();
    let new_leader = loop {
        match cluster.wait_for_leader(WAIT) {
            Some(leader) if leader != old_leader => break leader,
            _ => {}
        }
        assert!(
            started.elapsed() < WAIT,
            "no new leader after master {old_leader} was killed\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_ne!(new_leader, old_leader);

    let after = cluster.operator_cli(&["reservation", "show", "nightly"]);
    for field in [
        "owner",
        "rdl",
        "anchor_ms",
        "admitted_at_ms",
        "start_ms",
        "end_ms",
        "allocation",
    ] {
        assert_eq!(
            after[field], before[field],
            "{field}: {before} then {after}"
        );
    }
    let listed = cluster.operator_cli(&["reservation", "list"]);
    assert_eq!(
        listed["accepted"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(
        listed["rejected"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
}
