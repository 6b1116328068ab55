//! Agents and the master on real processes (the agents issue): registration through the
//! leader, liveness (unreachable, then lost, after the configured silences), and
//! re-registration with the same id after a restart.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::time::{Duration, Instant};

use fullerene_client::OperatorClient;
use fullerene_proto::messages::{AgentInfo, AgentState};
use fullerene_proto::AgentId;
use fullerene_tests::{MasterCluster, FAST_LIVENESS};

async fn agents(client: &mut OperatorClient) -> Vec<AgentInfo> {
    client.list_agents().await.unwrap_or_default()
}

/// Polls until agent `id` is in `state`, up to `timeout`.
async fn wait_for_agent(
    client: &mut OperatorClient,
    id: &AgentId,
    state: AgentState,
    timeout: Duration,
) -> Option<AgentInfo> {
    wait_for_agent_where(client, id, timeout, |agent| agent.state == state).await
}

/// Polls until agent `id` is as `wanted` says, up to `timeout`.
async fn wait_for_agent_where(
    client: &mut OperatorClient,
    id: &AgentId,
    timeout: Duration,
    wanted: impl Fn(&AgentInfo) -> bool,
) -> Option<AgentInfo> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if let Some(agent) = agents(client)
            .await
            .into_iter()
            .find(|a| &a.id == id && wanted(a))
        {
            return Some(agent);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_registers_is_declared_lost_when_silent_and_comes_back_with_its_id() {
    let mut cluster = MasterCluster::start_with(1, 1, 1, &FAST_LIVENESS);
    let mut client = cluster.operator_client(&[1], Duration::from_secs(10));
    cluster.spawn_agent(1, &["--resources", "cpus=4,mem_mib=4096,disk_mbps=100"]);
    let id = AgentId::from("agent-1");
    let Some(agent) = wait_for_agent(
        &mut client,
        &id,
        AgentState::Active,
        Duration::from_secs(20),
    )
    .await
    else {
        panic!("the agent did not register\n{}", cluster.logs());
    };
    assert_eq!(agent.total.get("cpus"), Some(4.0), "{agent:?}");
    assert!(
        agent.address.is_some_and(|a| a.ip().is_loopback()),
        "the leader does not show where the agent's session comes from: {agent:?}"
    );

    // The operator's view: `fullerene agents --json`.
    let output = std::process::Command::new(fullerene_tests::fullerene_binary())
        .args(["--json", "agents", "--master-addrs"])
        .arg(cluster.addrs[&1].to_string())
        .arg("--certs-dir")
        .arg(cluster.certs_dir())
        .output()
        .expect("run fullerene agents");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(listed[0]["id"], "agent-1", "{listed}");
    assert_eq!(listed[0]["state"], "Active", "{listed}");

    cluster.kill_agent(1);
    assert!(
        wait_for_agent(
            &mut client,
            &id,
            AgentState::Unreachable,
            Duration::from_secs(10)
        )
        .await
        .is_some(),
        "a silent agent was not marked unreachable\n{}",
        cluster.logs()
    );
    assert!(
        wait_for_agent(&mut client, &id, AgentState::Lost, Duration::from_secs(10))
            .await
            .is_some(),
        "a silent agent was not declared lost\n{}",
        cluster.logs()
    );

    cluster.spawn_agent(1, &["--resources", "cpus=4,mem_mib=4096,disk_mbps=100"]);
    assert!(
        wait_for_agent(
            &mut client,
            &id,
            AgentState::Active,
            Duration::from_secs(20)
        )
        .await
        .is_some(),
        "the restarted agent did not come back\n{}",
        cluster.logs()
    );
    assert_eq!(
        agents(&mut client).await.len(),
        1,
        "the agent came back under another id"
    );
}

/// An agent whose certificate comes from another cluster's CA is refused at the handshake and
/// never registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_a_foreign_certificate_is_refused() {
    let cluster = MasterCluster::start_with(1, 1, 1, &FAST_LIVENESS);
    let mut client = cluster.operator_client(&[1], Duration::from_secs(10));
    let foreign = cluster.dir().join("foreign-certs");
    fullerene_transport::certs::generate_dev_cluster(
        &foreign,
        fullerene_transport::certs::CertCounts {
            masters: 1,
            agents: 1,
            frameworks: 0,
            operators: 0,
        },
        false,
    )
    .expect("a second CA");
    let mut command = std::process::Command::new(fullerene_tests::fullerene_binary());
    command
        .args([
            "--log-level",
            "info",
            "agent",
            "--id",
            "1",
            "--master-addrs",
        ])
        .arg(cluster.addrs[&1].to_string())
        .arg("--work-dir")
        .arg(cluster.dir().join("foreign-agent-work"))
        .arg("--certs-dir")
        .arg(&foreign)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut agent = command.spawn().expect("start the foreign agent");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let registered = agents(&mut client).await;
    let _ = agent.kill();
    let output = agent.wait_with_output().expect("the agent's output");
    assert!(
        registered.is_empty(),
        "an agent with a foreign certificate registered: {registered:?}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.to_lowercase().contains("certificate") || stderr.to_lowercase().contains("tls"),
        "the agent does not say why it cannot connect: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drained_from_the_cli_stays_drained_across_a_leader_kill_until_undrained() {
    let mut cluster = MasterCluster::start_with(3, 3, 1, &[]);
    let mut client = cluster.operator_client(&[1, 2, 3], Duration::from_secs(10));
    cluster.spawn_agent(1, &["--resources", "cpus=4,mem_mib=4096"]);
    let id = AgentId::from("agent-1");
    assert!(
        wait_for_agent(
            &mut client,
            &id,
            AgentState::Active,
            Duration::from_secs(20)
        )
        .await
        .is_some(),
        "the agent did not register\n{}",
        cluster.logs()
    );

    let answer = cluster.operator_cli(&["agent", "drain", "1", "--deadline", "10m"]);
    assert_eq!(answer["done"], true, "{answer}");
    // Nothing runs on it: drained at once.
    let listed = cluster.operator_cli(&["agents"]);
    assert_eq!(listed[0]["drain"]["drained"], true, "{listed}");
    assert!(
        listed[0]["drain"]["deadline_ms"].as_u64().is_some(),
        "{listed}"
    );

    // The drain is replicated: a new leader still has it.
    let leader = cluster
        .wait_for_leader(Duration::from_secs(20))
        .expect("a leader");
    cluster.kill(leader);
    let drained_after_failover =
        wait_for_agent_where(&mut client, &id, Duration::from_secs(20), |a| {
            a.drain.is_some_and(|d| d.drained)
        })
        .await
        .is_some();
    assert!(
        drained_after_failover,
        "the new leader forgot the drain\n{}",
        cluster.logs()
    );

    let answer = cluster.operator_cli(&["agent", "undrain", "agent-1"]);
    assert_eq!(answer["done"], true, "{answer}");
    let listed = cluster.operator_cli(&["agents"]);
    assert!(listed[0]["drain"].is_null(), "{listed}");
}
