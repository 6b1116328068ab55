//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared helpers.
//!
//! [`MasterCluster`] runs real `fullerene master` processes on loopback, each on an OS-chosen
//! port, with development certificates and data directories in a temporary directory, and
//! kills every process it started when dropped.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fullerene_master::server::OperatorClient;
use fullerene_proto::certs::{generate_dev_cluster, CertCounts, CertPaths};
use fullerene_proto::transport::{Client, Role, TlsMaterial, TransportConfig};
use tempfile::TempDir;

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

/// A loopback address with a UDP port the OS just handed out (and that is free again).
pub fn free_loopback_addr() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket");
    socket.local_addr().expect("a bound socket has an address")
}

/// Real master processes on loopback, stopped (SIGKILL) when dropped.
pub struct MasterCluster {
    dir: TempDir,
    /// Every master's address, by Raft id (those added later too).
    pub addrs: BTreeMap<u64, SocketAddr>,
    /// The ids bootstrapped as the initial voters.
    pub founders: Vec<u64>,
    processes: BTreeMap<u64, Child>,
}

impl MasterCluster {
    /// Certificates for `max_masters` masters and one operator, and `founders` masters
    /// started (ids 1..=founders) as a new group.
    pub fn start(founders: u64, max_masters: u64) -> MasterCluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let counts = CertCounts {
            masters: usize::try_from(max_masters).expect("a small number"),
            agents: 0,
            frameworks: 0,
            operators: 1,
        };
        generate_dev_cluster(&dir.path().join("certs"), counts, false).expect("certificates");
        let addrs = (1..=max_masters)
            .map(|id| (id, free_loopback_addr()))
            .collect();
        let mut cluster = MasterCluster {
            dir,
            addrs,
            founders: (1..=founders).collect(),
            processes: BTreeMap::new(),
        };
        for id in 1..=founders {
            cluster.spawn(id, false);
        }
        cluster
    }

    /// The temporary directory holding certificates, data directories and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Master `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("master-{id}-data"))
    }

    /// Master `id`'s log file (its standard error; appended to across restarts).
    pub fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("master-{id}.log"))
    }

    /// The command line that runs master `id` (`join` for a master added later).
    pub fn master_command(&self, id: u64, join: bool) -> Command {
        let peers: Vec<String> = self
            .founders
            .iter()
            .chain(join.then_some(&id))
            .map(|member| format!("{member}={}", self.addrs[member]))
            .collect();
        let mut command = Command::new(fullerene_binary());
        command
            .arg("--log-level")
            .arg("info")
            .arg("master")
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(self.addrs[&id].to_string())
            .arg("--peers")
            .arg(peers.join(","))
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .arg("--certs")
            .arg(self.dir.path().join("certs"));
        if join {
            command.arg("--join");
        }
        command
    }

    /// Starts master `id` (again, after a kill: on the same data directory).
    pub fn spawn(&mut self, id: u64, join: bool) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .expect("a log file");
        let child = self
            .master_command(id, join)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start fullerene master");
        self.processes.insert(id, child);
    }

    /// SIGKILLs master `id` and waits for it.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.processes.remove(&id) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for master `id` to exit by itself; its exit success if it did.
    pub fn wait_exit(&mut self, id: u64, timeout: Duration) -> Option<bool> {
        let started = std::time::Instant::now();
        while started.elapsed() < timeout {
            let child = self.processes.get_mut(&id)?;
            if let Ok(Some(status)) = child.try_wait() {
                self.processes.remove(&id);
                return Some(status.success());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// An operator client for the masters `ids` (must be called inside a tokio runtime).
    pub fn operator_client(&self, ids: &[u64], deadline: Duration) -> OperatorClient {
        let certs = self.dir.path().join("certs");
        let paths = CertPaths::of_member(&certs, Role::Operator, 1);
        let tls = TlsMaterial::load(&certs.join("ca.pem"), &paths.cert, &paths.key)
            .expect("operator TLS material");
        let client = Client::new(&tls, TransportConfig::default()).expect("a QUIC client");
        let masters = ids.iter().map(|id| self.addrs[id]).collect();
        OperatorClient::new(client, masters, deadline)
    }

    /// Every master's log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for id in self.addrs.keys() {
            if let Ok(log) = std::fs::read_to_string(self.log_path(*id)) {
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                text.push_str(&format!("--- master {id} (last lines) ---\n"));
                for line in tail.into_iter().rev() {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        text
    }
}

impl Drop for MasterCluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.processes.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}
