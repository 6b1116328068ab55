//! Fairness groups, quotas and client limits on real masters (issue 14): an operator places a
//! principal in a group with `fullerene groups set`, its framework joins it and another
//! principal's cannot; quotas set with `fullerene quotas set` refuse what goes past them; a
//! framework that floods calls is answered `RateLimited` past its rate and keeps its session;
//! a certificate's connections past the limit are closed with the reason.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::net::SocketAddr;
use std::process::Output;
use std::time::Duration;

use fullerene_proto::messages::{
    CallOk, ErrorCode, FrameworkCall, FrameworkRequest, MasterToFramework, OperatorRequest,
    OperatorResponse, SessionOpen, WireError,
};
use fullerene_tests::{fullerene_binary, MasterCluster};
use fullerene_transport::{Client, Connection, Session, TransportConfig};

const WAIT: Duration = Duration::from_secs(20);

/// Runs `fullerene <args> --master-addrs <leader> --certs-dir <dir>` and returns its output.
fn cli(cluster: &MasterCluster, args: &[&str]) -> Output {
    let masters = cluster
        .addrs
        .values()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    std::process::Command::new(fullerene_binary())
        .args(args)
        .arg("--master-addrs")
        .arg(masters)
        .arg("--certs-dir")
        .arg(cluster.certs_dir())
        .output()
        .expect("run fullerene")
}

fn succeeded(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "fullerene failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A framework session with certificate `framework-<n>` to the leader at `leader`.
async fn framework_session(
    cluster: &MasterCluster,
    n: usize,
    leader: SocketAddr,
) -> (Connection, Session) {
    let client =
        Client::new(&cluster.framework_tls(n), TransportConfig::default()).expect("a client");
    let connection = client.connect(leader).await.expect("connected");
    let session = connection
        .open_session(SessionOpen::Framework)
        .await
        .expect("a framework session");
    (connection, session)
}

/// The next call answer on `session` (offers and other pushes are skipped).
async fn answer(session: &mut Session) -> Result<CallOk, WireError> {
    loop {
        match tokio::time::timeout(WAIT, session.rx.recv::<MasterToFramework>()).await {
            Ok(Ok(Some(MasterToFramework::CallResult { result, .. }))) => return result,
            Ok(Ok(Some(_))) => continue,
            other => panic!("no answer: {other:?}"),
        }
    }
}

/// Subscribes a new framework named `name` asking for `group`; the answer.
async fn subscribe(session: &mut Session, name: &str, group: &str) -> Result<CallOk, WireError> {
    let call = FrameworkCall {
        call_id: 1,
        call: FrameworkRequest::Subscribe {
            framework_id: None,
            name: name.to_string(),
            group: group.to_string(),
            failover_timeout_ms: 60_000,
        },
    };
    session.tx.send(&call).await.expect("sent");
    answer(session).await
}

/// The leader's id and address.
async fn leader(cluster: &MasterCluster) -> SocketAddr {
    let id = cluster.wait_for_leader(WAIT).expect("a leader");
    cluster.addrs[&id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_set_by_operators_and_quotas_refuse_what_goes_past_them() {
    let cluster = MasterCluster::start_with(1, 1, 3, &[]);
    let leader = leader(&cluster).await;

    let out = succeeded(&cli(
        &cluster,
        &[
            "groups",
            "set",
            "etl",
            "--weight",
            "2",
            "--principal",
            "framework-1",
        ],
    ));
    assert!(
        out.contains("group etl weighs 2; 1 principal(s) placed in it"),
        "{out}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&succeeded(&cli(&cluster, &["--json", "groups", "list"])))
            .expect("JSON");
    let etl = listed["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["name"] == "etl")
        .unwrap_or_else(|| panic!("etl not listed: {listed}"));
    assert_eq!(etl["principals"], serde_json::json!(["framework-1"]));
    assert_eq!(etl["weight"], 2.0);
    assert_eq!(listed["default_group"], "default");

    // framework-1's framework joins etl without asking; framework-2's cannot ask for it.
    let (_c1, mut s1) = framework_session(&cluster, 1, leader).await;
    match subscribe(&mut s1, "etl-job", "").await {
        Ok(CallOk::Subscribed { group, .. }) => assert_eq!(group, "etl"),
        other => panic!("framework-1 not subscribed: {other:?}"),
    }
    let (_c2, mut s2) = framework_session(&cluster, 2, leader).await;
    match subscribe(&mut s2, "intruder", "etl").await {
        Err(error) => {
            assert_eq!(error.code, ErrorCode::Unauthorized, "{error:?}");
            assert!(error.message.contains("framework-2"), "{}", error.message);
        }
        other => panic!("framework-2 joined etl: {other:?}"),
    }
    let mut operator = cluster.operator_client(&[1], WAIT);
    let frameworks = operator.list_frameworks().await.expect("frameworks");
    assert_eq!(frameworks.len(), 1, "{frameworks:?}");
    assert_eq!(frameworks[0].group, "etl");

    // One framework per principal: framework-1's second is refused, naming the quota.
    succeeded(&cli(
        &cluster,
        &["quotas", "set", "--frameworks-per-principal", "1"],
    ));
    let shown: serde_json::Value =
        serde_json::from_str(&succeeded(&cli(&cluster, &["--json", "quotas", "show"])))
            .expect("JSON");
    assert_eq!(shown["frameworks_per_principal"], 1);
    assert_eq!(shown["tasks_per_framework"], 100_000, "the others are kept");
    let (_c3, mut s3) = framework_session(&cluster, 1, leader).await;
    match subscribe(&mut s3, "second", "").await {
        Err(error) => {
            assert_eq!(error.code, ErrorCode::QuotaExceeded, "{error:?}");
            assert!(
                error.message.contains("frameworks per principal"),
                "{}",
                error.message
            );
        }
        other => panic!("a second framework past the quota: {other:?}"),
    }
    // Bad input is refused by the CLI with the reason.
    let bad = cli(&cluster, &["quotas", "set", "--tasks-per-framework", "0"]);
    assert!(!bad.status.success());
    let bad = cli(&cluster, &["groups", "set", "etl"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("nothing to set"));
    match operator.request(&OperatorRequest::Quotas).await {
        Ok(OperatorResponse::Quotas(quotas)) => assert_eq!(quotas.frameworks_per_principal, 1),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_flood_is_rate_limited_and_extra_connections_are_refused() {
    let cluster = MasterCluster::start_with(
        1,
        1,
        3,
        &[
            "--calls-per-second",
            "50",
            "--call-burst",
            "50",
            "--connections-per-certificate",
            "2",
        ],
    );
    let leader = leader(&cluster).await;
    let (_connection, mut session) = framework_session(&cluster, 3, leader).await;
    assert!(matches!(
        subscribe(&mut session, "flooder", "").await,
        Ok(CallOk::Subscribed { .. })
    ));
    const CALLS: u64 = 400;
    for call_id in 2..2 + CALLS {
        let call = FrameworkCall {
            call_id,
            call: FrameworkRequest::Revive,
        };
        session.tx.send(&call).await.expect("sent");
    }
    let (mut done, mut limited) = (0, 0);
    for _ in 0..CALLS {
        match answer(&mut session).await {
            Ok(CallOk::Done) => done += 1,
            Err(error) if error.code == ErrorCode::RateLimited => {
                assert!(
                    error.message.contains("50 calls per second"),
                    "{}",
                    error.message
                );
                limited += 1;
            }
            other => panic!("unexpected answer: {other:?}"),
        }
    }
    assert!(done >= 50, "the burst is served: {done} done");
    assert!(
        limited > 0 && done < CALLS,
        "{done} done, {limited} limited"
    );
    // The session stays, and once the budget refills its calls are served again.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    session
        .tx
        .send(&FrameworkCall {
            call_id: 10_000,
            call: FrameworkRequest::Revive,
        })
        .await
        .expect("sent");
    assert_eq!(answer(&mut session).await, Ok(CallOk::Done));

    // Certificate framework-2 may hold two connections; a third is closed with the reason.
    let client =
        Client::new(&cluster.framework_tls(2), TransportConfig::default()).expect("a client");
    let first = client.connect(leader).await.expect("first");
    let second = client.connect(leader).await.expect("second");
    first
        .open_session(SessionOpen::Framework)
        .await
        .expect("a session on the first");
    second
        .open_session(SessionOpen::Framework)
        .await
        .expect("a session on the second");
    let third = client
        .connect(leader)
        .await
        .expect("the handshake completes");
    let closed = tokio::time::timeout(WAIT, third.closed())
        .await
        .expect("closed in time");
    let reason = closed.to_string();
    assert!(
        reason.contains("refused") && reason.contains("limit is 2"),
        "the third connection: {reason}"
    );
    // When one closes, a new one is admitted.
    first.close("done");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = client.connect(leader).await.expect("connected");
    again
        .open_session(SessionOpen::Framework)
        .await
        .expect("a session once a connection closed");
}
