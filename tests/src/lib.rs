//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared helpers.
//!
//! [`MasterCluster`] runs real `fullerene master` processes on loopback through
//! [`fullerene_chaos::LocalMasters`] (OS-chosen ports, development certificates and data
//! directories in a temporary directory, every process killed on drop), with the panicking
//! conveniences tests want.

pub mod webdriver;

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fullerene_chaos::{ApiClient, LocalMasters};
use fullerene_client::{OperatorClient, OperatorClientError};
use fullerene_proto::messages::{
    ClusterStatus, ErrorCode, FrameworkRequest, MemberStatus, Offer, OperatorRequest,
    OperatorResponse, StatusUpdate, WireError,
};
use fullerene_proto::{FrameworkId, MasterId, OfferId, TaskId};
use fullerene_sdk::driver::{run, DriverConfig, DriverError, DriverHandle, RunOptions, Scheduler};
use fullerene_transport::certs::CertPaths;
use fullerene_transport::{Role, TlsMaterial};
use tokio::sync::mpsc;

/// The `fullerene` binary the tests run.
///
/// Cargo provides `CARGO_BIN_EXE_<name>` only to the tests of the crate that defines the
/// binary, so from this crate it is found in this order: `$FULLERENE_BIN`; then
/// `fullerene` in the profile directory of the running test executable (tests run from
/// `<target>/<profile>/deps/`, the binary lives in `<target>/<profile>/`). Build it first:
/// `cargo build -p fullerene` (with the same profile and `CARGO_TARGET_DIR`).
pub fn fullerene_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FULLERENE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable has a path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in <target>/<profile>/deps");
    let binary = profile_dir.join(format!("fullerene{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} not found: run `cargo build -p fullerene` first, or set FULLERENE_BIN",
        binary.display()
    );
    binary
}

/// Master flags for quick liveness decisions in tests: heartbeats every 200 ms, unreachable
/// after 1 s and lost after 2.5 s of silence.
pub const FAST_LIVENESS: [&str; 6] = [
    "--agent-heartbeat-ms",
    "200",
    "--agent-unreachable-ms",
    "1000",
    "--agent-lost-ms",
    "2500",
];

/// Real master processes on loopback, stopped (SIGKILL) when dropped. Derefs to
/// [`LocalMasters`] for everything that cannot fail.
pub struct MasterCluster(LocalMasters);

impl MasterCluster {
    /// Certificates for `max_masters` masters and one operator, and `founders` masters
    /// started (ids 1..=founders) as a new group.
    pub fn start(founders: u64, max_masters: u64) -> MasterCluster {
        MasterCluster::start_with(founders, max_masters, 0, &[])
    }

    /// [`MasterCluster::start`] with certificates for `agents` agents (and as many
    /// frameworks), and `master_flags` added to every master's command line.
    pub fn start_with(
        founders: u64,
        max_masters: u64,
        agents: u64,
        master_flags: &[&str],
    ) -> MasterCluster {
        let mut masters =
            LocalMasters::prepare(fullerene_binary(), founders, max_masters, agents, None)
                .expect("set up a local cluster");
        masters.extra_args = master_flags.iter().map(ToString::to_string).collect();
        masters.start_founders().expect("start the founders");
        MasterCluster(masters)
    }

    /// The command line that runs master `id` (`join` for a master added later).
    pub fn master_command(&self, id: u64, join: bool) -> Command {
        self.0.master_command(id, join).expect("a known master")
    }

    /// The command line of master `id` with neither `--bootstrap` nor `--join`.
    pub fn plain_master_command(&self, id: u64, join: bool) -> Command {
        self.0
            .plain_master_command(id, join)
            .expect("a known master")
    }

    /// Starts master `id` (again, after a kill: on the same data directory).
    pub fn spawn(&mut self, id: u64, join: bool) {
        self.0.spawn(id, join).expect("start fullerene master");
    }

    /// An operator client for the masters `ids` (must be called inside a tokio runtime).
    pub fn operator_client(&self, ids: &[u64], deadline: Duration) -> OperatorClient {
        self.0
            .operator_client(ids, deadline)
            .expect("an operator client")
    }

    /// Starts agent `n` with `extra` flags.
    pub fn spawn_agent(&mut self, n: u64, extra: &[&str]) {
        self.0.spawn_agent(n, extra).expect("start fullerene agent");
    }

    /// Every master's log, for a failing test's message.
    pub fn logs(&self) -> String {
        self.0.logs(40)
    }

    /// `fullerene <args> --master-addrs <every master> --certs-dir <dir>`: an operator's command.
    pub fn operator_command(&self, args: &[&str]) -> Command {
        let masters: Vec<String> = self.0.addrs.values().map(ToString::to_string).collect();
        let mut command = Command::new(fullerene_binary());
        command
            .args(args)
            .arg("--master-addrs")
            .arg(masters.join(","))
            .arg("--certs-dir")
            .arg(self.0.certs_dir());
        command
    }
}

/// The group's status from the leader, or `None` if no leader answered.
pub async fn cluster_status(client: &mut OperatorClient) -> Option<ClusterStatus> {
    match client.request(&OperatorRequest::ClusterStatus).await {
        Ok(OperatorResponse::ClusterStatus(status)) => Some(status),
        _ => None,
    }
}

/// Waits until master `id` is a voter that has matched the leader's commit index, polling
/// every `poll`; its member status then.
pub async fn wait_caught_up(
    cluster: &MasterCluster,
    client: &mut OperatorClient,
    id: u64,
    timeout: Duration,
    poll: Duration,
) -> MemberStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = cluster_status(client).await {
            let member = status.members.iter().find(|m| m.id == MasterId(id));
            if let Some(member) = member.filter(|m| m.voter && m.matched >= status.commit) {
                return member.clone();
            }
        }
        assert!(
            started.elapsed() < timeout,
            "master {id} did not catch up\n{}",
            cluster.logs()
        );
        tokio::time::sleep(poll).await;
    }
}

impl MasterCluster {
    /// Adds master `id` (already spawned with `join`) to the group, as an operator would:
    /// an answer whose outcome is unknown (the leader changed or the connection broke after
    /// the request left) is settled by reading the membership, and the request is sent again
    /// only if the master is not a member. Panics with the answer and the logs on a refusal.
    pub async fn add_master(&self, client: &mut OperatorClient, id: u64) {
        let add = OperatorRequest::AddMaster {
            id: MasterId(id),
            addr: self.addrs[&id],
        };
        for _attempt in 0..5 {
            let answer = client.request(&add).await;
            let unknown = match &answer {
                Ok(OperatorResponse::Done) => return,
                Err(OperatorClientError::OutcomeUnknown { .. }) => true,
                Err(OperatorClientError::Refused(error)) => error.code == ErrorCode::OutcomeUnknown,
                _ => false,
            };
            assert!(unknown, "add-master {id}: {answer:?}\n{}", self.logs());
            let member = cluster_status(client)
                .await
                .is_some_and(|status| status.members.iter().any(|m| m.id == MasterId(id)));
            if member {
                return;
            }
            eprintln!("add-master {id}: {answer:?}; not a member yet, sending it again");
        }
        panic!(
            "master {id} could not be added in 5 attempts\n{}",
            self.logs()
        );
    }
}

impl Deref for MasterCluster {
    type Target = LocalMasters;

    fn deref(&self) -> &LocalMasters {
        &self.0
    }
}

impl DerefMut for MasterCluster {
    fn deref_mut(&mut self) -> &mut LocalMasters {
        &mut self.0
    }
}

impl MasterCluster {
    /// A client of the masters' HTTPS API with the operator's certificate (5 s per step).
    pub fn api(&self) -> ApiClient {
        self.0.api_client().expect("the operator's HTTP client")
    }

    /// The leader's `/state` (HTTPS, operator certificate), asked of every running master in
    /// turn (a follower's redirect is followed once); `None` while no master answers with it.
    pub fn http_state(&self) -> Option<serde_json::Value> {
        self.http_get("/state")
    }

    /// Runs `fullerene --json ARGS --master-addrs (all) --certs-dir (the cluster's)` as the operator
    /// and returns its JSON answer; fails the test, with its stderr and the cluster's logs,
    /// if the command fails.
    pub fn operator_cli(&self, args: &[&str]) -> serde_json::Value {
        let output = self.operator_output(&[&["--json"], args].concat());
        serde_json::from_str(&output).expect("JSON")
    }

    /// Runs an operator command (see [`MasterCluster::operator_command`]) to its end and
    /// returns its standard output; fails the test, with its stderr and the cluster's logs, if
    /// the command fails.
    pub fn operator_output(&self, args: &[&str]) -> String {
        let output = self.operator_command(args).output().expect("run fullerene");
        assert!(
            output.status.success(),
            "fullerene {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The leader's document at `path` (HTTPS, operator certificate), asked of every running
    /// master in turn (a follower's redirect is followed once); `None` while no master answers
    /// it with 200 and JSON.
    pub fn http_get(&self, path: &str) -> Option<serde_json::Value> {
        let api = self.api();
        for (id, addr) in &self.0.http_addrs {
            if !self.0.is_running(*id) {
                continue;
            }
            let Ok(answer) = api.get_following(*addr, path) else {
                continue;
            };
            if answer.code == 200 {
                if let Ok(state) = answer.json() {
                    return Some(state);
                }
            }
        }
        None
    }

    /// The leader's id as `/state` names it, polled up to `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Option<u64> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if let Some(leader) = self.http_state().and_then(|s| s["leader"].as_u64()) {
                return Some(leader);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Waits up to `timeout` until `count` agents are `Active` in the leader's `/state`.
    pub fn wait_for_active_agents(&self, count: usize, timeout: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < timeout {
            let active = self.http_state().map_or(0, |state| {
                state["agents"].as_array().map_or(0, |agents| {
                    agents.iter().filter(|a| a["state"] == "Active").count()
                })
            });
            if active >= count {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The TLS material of framework certificate `n` (`framework-<n>`).
    pub fn framework_tls(&self, n: usize) -> TlsMaterial {
        let certs = self.0.certs_dir();
        let paths = CertPaths::of_member(&certs, Role::Framework, n);
        TlsMaterial::load(&certs.join("ca.pem"), &paths.cert, &paths.key)
            .expect("the framework's certificate and key")
    }

    /// Starts a [`TestFramework`] named `name` with certificate `framework-<n>`, subscribed
    /// through every master (must be called inside a tokio runtime).
    pub fn test_framework(&self, n: usize, name: &str) -> TestFramework {
        let masters = self.0.addrs.values().copied().collect();
        TestFramework::start(masters, &self.framework_tls(n), name)
    }
}

impl MasterCluster {
    /// Writes the jobs named `names` of the shared `tpch-decima.jsonl` (beside the checkout)
    /// to `file` in the cluster's directory; its path.
    pub fn tpch_workload(&self, file: &str, names: &[&str]) -> PathBuf {
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/workloads/tpch-decima.jsonl");
        let text = std::fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
        let mut picked = Vec::new();
        for name in names {
            let needle = format!("\"name\":\"{name}\"");
            let line = text
                .lines()
                .find(|line| line.contains(&needle))
                .unwrap_or_else(|| panic!("{name} is not in {}", source.display()));
            picked.push(line);
        }
        let path = self.0.dir().join(file);
        std::fs::write(&path, picked.join("\n") + "\n").expect("write the workload");
        path
    }

    /// `fullerene job run FILE` against every master, as framework certificate 1, at
    /// `time_scale` real seconds per workload second; global flags and standard streams are
    /// the caller's to add.
    pub fn job_run_command(&self, file: &Path, time_scale: f64) -> Command {
        let masters: Vec<String> = self.0.addrs.values().map(ToString::to_string).collect();
        let mut command = Command::new(fullerene_binary());
        command
            .args(["job", "run", "--workload"])
            .arg(file)
            .arg("--master-addrs")
            .arg(masters.join(","))
            .arg("--certs-dir")
            .arg(self.0.certs_dir())
            .args([
                "--framework-cert",
                "1",
                "--time-scale",
                &time_scale.to_string(),
            ]);
        command
    }
}

/// What a [`TestFramework`]'s scheduler was told, in order.
#[derive(Clone, Debug)]
pub enum FrameworkEvent {
    /// First subscription.
    Registered(FrameworkId),
    /// Subscribed again after a lost session.
    Reconnected(FrameworkId),
    /// The session was lost.
    Disconnected(String),
    /// New offers (left unanswered until the test answers them).
    Offers(Vec<Offer>),
    /// Offers withdrawn.
    Rescinded(Vec<OfferId>),
    /// A task's status (duplicates already filtered by the driver).
    Update(StatusUpdate),
    /// A call the test made was refused.
    CallFailed(FrameworkRequest, WireError),
}

/// The scheduler behind a [`TestFramework`]: relays every callback to the test and sends
/// the test's calls on the next tick; tears the framework down when the test drops its side.
struct Relay {
    events: mpsc::UnboundedSender<FrameworkEvent>,
    calls: mpsc::UnboundedReceiver<FrameworkRequest>,
}

impl Relay {
    fn tell(&self, event: FrameworkEvent) {
        // The test may have stopped listening; the event then has nobody to matter to.
        let _ = self.events.send(event);
    }
}

impl Scheduler for Relay {
    fn registered(&mut self, _driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.tell(FrameworkEvent::Registered(framework_id.clone()));
    }

    fn reconnected(&mut self, _driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.tell(FrameworkEvent::Reconnected(framework_id.clone()));
    }

    fn disconnected(&mut self, _driver: &mut DriverHandle, reason: &str) {
        self.tell(FrameworkEvent::Disconnected(reason.to_string()));
    }

    fn offers(&mut self, _driver: &mut DriverHandle, offers: Vec<Offer>) {
        self.tell(FrameworkEvent::Offers(offers));
    }

    fn rescinded(&mut self, _driver: &mut DriverHandle, offer_ids: &[OfferId]) {
        self.tell(FrameworkEvent::Rescinded(offer_ids.to_vec()));
    }

    fn status_update(&mut self, _driver: &mut DriverHandle, update: &StatusUpdate) {
        self.tell(FrameworkEvent::Update(update.clone()));
    }

    fn call_failed(
        &mut self,
        _driver: &mut DriverHandle,
        request: &FrameworkRequest,
        error: &WireError,
    ) {
        self.tell(FrameworkEvent::CallFailed(request.clone(), error.clone()));
    }

    fn tick(&mut self, driver: &mut DriverHandle) {
        loop {
            match self.calls.try_recv() {
                Ok(call) => driver.call(call),
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    driver.teardown();
                    return;
                }
            }
        }
    }
}

/// A framework the test drives by hand over the SDK driver (a real QUIC session to the
/// masters): every callback is recorded as a [`FrameworkEvent`], and calls are sent as the
/// test makes them. Dropping it (or [`TestFramework::teardown`]) tears the framework down.
pub struct TestFramework {
    events: mpsc::UnboundedReceiver<FrameworkEvent>,
    calls: Option<mpsc::UnboundedSender<FrameworkRequest>>,
    driver: Option<tokio::task::JoinHandle<Result<(), DriverError>>>,
    /// Every event received so far, in order.
    pub history: Vec<FrameworkEvent>,
}

impl TestFramework {
    /// Starts the driver (must be called inside a tokio runtime).
    pub fn start(masters: Vec<SocketAddr>, tls: &TlsMaterial, name: &str) -> TestFramework {
        let (event_tx, events) = mpsc::unbounded_channel();
        let (calls, call_rx) = mpsc::unbounded_channel();
        let mut config = DriverConfig::new(masters, name, "");
        config.failover_timeout_ms = 60_000;
        let options = RunOptions {
            tick: Duration::from_millis(20),
            ..RunOptions::default()
        };
        let relay = Relay {
            events: event_tx,
            calls: call_rx,
        };
        let tls = tls.clone();
        let driver = tokio::spawn(async move { run(config, &tls, options, relay).await.map(drop) });
        TestFramework {
            events,
            calls: Some(calls),
            driver: Some(driver),
            history: Vec::new(),
        }
    }

    /// Sends `request` (on the driver's next tick).
    pub fn call(&self, request: FrameworkRequest) {
        if let Some(calls) = &self.calls {
            let _ = calls.send(request);
        }
    }

    /// Waits up to `timeout` for an event `pick` selects (every event is kept in
    /// [`TestFramework::history`], picked or not).
    pub async fn wait_for<T>(
        &mut self,
        timeout: Duration,
        mut pick: impl FnMut(&FrameworkEvent) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .ok()??;
            let picked = pick(&event);
            self.history.push(event);
            if picked.is_some() {
                return picked;
            }
        }
    }

    /// Waits for the first subscription; the framework's id.
    pub async fn registered(&mut self, timeout: Duration) -> Option<FrameworkId> {
        self.wait_for(timeout, |e| match e {
            FrameworkEvent::Registered(id) => Some(id.clone()),
            _ => None,
        })
        .await
    }

    /// Waits for offers.
    pub async fn offers(&mut self, timeout: Duration) -> Option<Vec<Offer>> {
        self.wait_for(timeout, |e| match e {
            FrameworkEvent::Offers(offers) => Some(offers.clone()),
            _ => None,
        })
        .await
    }

    /// Waits for a refused call.
    pub async fn call_failed(
        &mut self,
        timeout: Duration,
    ) -> Option<(FrameworkRequest, WireError)> {
        self.wait_for(timeout, |e| match e {
            FrameworkEvent::CallFailed(request, error) => Some((request.clone(), error.clone())),
            _ => None,
        })
        .await
    }

    /// Waits for an update of `task` in a terminal state; that update.
    pub async fn terminal_update(
        &mut self,
        task: &TaskId,
        timeout: Duration,
    ) -> Option<StatusUpdate> {
        self.wait_for(timeout, |e| match e {
            FrameworkEvent::Update(u) if &u.task_id == task && u.state.is_terminal() => {
                Some(u.clone())
            }
            _ => None,
        })
        .await
    }

    /// Moves every event already received into [`TestFramework::history`], without waiting.
    pub fn drain(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.history.push(event);
        }
    }

    /// Every status update of `task` received so far, in order.
    pub fn updates_of(&mut self, task: &TaskId) -> Vec<StatusUpdate> {
        self.drain();
        self.history
            .iter()
            .filter_map(|e| match e {
                FrameworkEvent::Update(u) if &u.task_id == task => Some(u.clone()),
                _ => None,
            })
            .collect()
    }

    /// Tears the framework down (its tasks are killed) and waits up to `timeout` for the
    /// driver to stop.
    pub async fn teardown(mut self, timeout: Duration) {
        self.calls = None;
        if let Some(driver) = self.driver.take() {
            let _ = tokio::time::timeout(timeout, driver).await;
        }
    }
}

impl Drop for TestFramework {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abort();
        }
    }
}

/// The task builders and resource parsers the tests share: `resources("cpus=1,mem_mib=64")`,
/// `shell_task(id, script, resources, kill_grace_ms)`, `sleep_task(..)` and `demand(shape,
/// count)`, a demand summary of `count` pending tasks of one shape, so that the allocator
/// offers a framework something.
pub use fullerene_proto::testkit::{demand, resources, shell_task, sleep_task};

/// The kill grace period of the tests' tasks.
pub const KILL_GRACE_MS: u64 = 500;
