//! A real etcd cluster on loopback, for `fullerene bench raft --compare-etcd`.
//!
//! [`LocalEtcd`] starts `etcd` processes (the binary on the PATH: Debian's `etcd-server`, see
//! [`INSTALL_HINT`]) on free loopback ports with mutual TLS on both the client and the peer
//! side, every certificate issued by the Fullerene cluster's own CA, the Raft timing and
//! fsync policy it is given, kills members with SIGKILL, restarts them on their data
//! directories, and SIGKILLs every process it started when dropped, like
//! [`LocalMasters`](crate::LocalMasters) does for masters.
//!
//! Certificates: each member gets a *master* certificate of the cluster CA (`etcd-<n>`), which
//! is exactly what an etcd member needs, for its client port and its peer port alike: server
//! and client authentication, and the IP address 127.0.0.1 among its names (etcd's members
//! dial each other by IP). So the benchmark's clients verify etcd's members as they verify
//! masters ([`TlsMaterial::https_client_config`] with ALPN `h2`), and present the operator's
//! certificate, which etcd checks against the same CA (`--client-cert-auth`).
//!
//! [`EtcdWriter`] is a client that puts through whichever member answers, finding its way
//! after a member dies without being told which one did.

pub mod grpc;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_transport::certs::{
    issue_cert, CertPaths, CertificateAuthority, CA_CERT_FILE, CA_KEY_FILE,
};
use fullerene_transport::{Role, TlsMaterial};
use rustls::pki_types::ServerName;
use tokio::time::{sleep, timeout};

pub use grpc::{EtcdClient, GrpcError, MemberStatus, ResponseHeader};

use crate::cluster::{die_with_parent, free_loopback_tcp_addr, io, kill_and_reap, spawn_logged};
use crate::ClusterError;

/// What to do when `etcd` is not on the PATH.
pub const INSTALL_HINT: &str = "etcd is not on the PATH. Install Debian's etcd 3.4 with \
`scripts/install-etcd` (as root, or with sudo; it runs `apt-get install etcd-server`), or put \
an etcd 3.4 or newer binary on the PATH, then run this again";

/// Why a local etcd cluster could not be set up or driven.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// A file, certificate or process operation failed, or no port was free (as in the
    /// masters' harness).
    #[error(transparent)]
    Setup(#[from] ClusterError),
    /// etcd would refuse these settings.
    #[error("etcd settings: {0}")]
    Settings(String),
    /// No member with this number was set up.
    #[error("etcd member {0} is not part of this cluster")]
    UnknownMember(u64),
    /// A call to a member failed.
    #[error(transparent)]
    Grpc(#[from] GrpcError),
    /// The cluster did not reach a usable state in time.
    #[error("etcd did not become healthy within {timeout:?}: {last}")]
    NotHealthy {
        /// How long was waited.
        timeout: Duration,
        /// The last thing seen.
        last: String,
    },
    /// No member answered a put within the writer's deadline.
    #[error("no etcd member took a put within {deadline:?} (last problem: {last})")]
    NoAnswer {
        /// The deadline.
        deadline: Duration,
        /// The last failure seen.
        last: String,
    },
}

/// The `etcd` binary on the PATH, if there is one.
pub fn etcd_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    path.is_file()
}

/// The first line of `etcd --version` (`etcd Version: 3.4.23`).
pub fn etcd_version(binary: &Path) -> Result<String, EtcdError> {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(io(format!("run {} --version", binary.display())))?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .next()
        .unwrap_or("etcd (unknown version)")
        .to_string())
}

/// How the members run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// Members in the cluster.
    pub members: u64,
    /// `--heartbeat-interval`, in milliseconds (etcd's Raft tick is this interval).
    pub heartbeat_ms: u64,
    /// `--election-timeout`, in milliseconds: etcd's Raft waits a random whole number of
    /// heartbeat intervals in [this, 2 × this) before campaigning. etcd requires at least five
    /// heartbeat intervals.
    pub election_timeout_ms: u64,
    /// Whether the write-ahead log is fsynced (`false` passes `--unsafe-no-fsync`).
    pub fsync: bool,
}

impl EtcdSettings {
    /// The settings etcd would refuse, or `None`.
    pub fn problem(&self) -> Option<String> {
        if self.members == 0 {
            return Some("an etcd cluster needs at least one member".to_string());
        }
        if self.heartbeat_ms == 0 || self.election_timeout_ms < 5 * self.heartbeat_ms {
            return Some(format!(
                "etcd's election timeout ({} ms) must be at least five heartbeat intervals ({} ms)",
                self.election_timeout_ms, self.heartbeat_ms
            ));
        }
        None
    }
}

/// Real etcd members on loopback, stopped (SIGKILL) when dropped.
pub struct LocalEtcd {
    binary: PathBuf,
    dir: PathBuf,
    settings: EtcdSettings,
    ca_cert: PathBuf,
    client_addrs: BTreeMap<u64, SocketAddr>,
    peer_addrs: BTreeMap<u64, SocketAddr>,
    cluster_token: String,
    tls: Arc<rustls::ClientConfig>,
    /// etcd's member ids (learned from their answers) to member numbers.
    member_numbers: BTreeMap<u64, u64>,
    processes: BTreeMap<u64, Child>,
    /// SIGKILL every member when the thread that started it dies (see
    /// [`die_with_parent`]); off by default.
    pub die_with_parent: bool,
}

/// How long one status call may take while waiting for the cluster.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// How far (in log entries) a member may trail the leader and still count as caught up.
const CAUGHT_UP_ENTRIES: u64 = 64;

impl LocalEtcd {
    /// Issues a certificate for each member from the CA in `ca_dir` (`ca.pem`, `ca-key.pem`:
    /// the layout of `fullerene certs init`), into `dir/certs`, and picks free loopback ports;
    /// data directories and logs go under `dir` too (the caller removes it). `client` is the
    /// certificate the benchmark's clients present (an operator's). No process is started yet
    /// (see [`LocalEtcd::start`]).
    pub fn prepare(
        binary: PathBuf,
        dir: &Path,
        ca_dir: &Path,
        client: &TlsMaterial,
        settings: EtcdSettings,
    ) -> Result<LocalEtcd, EtcdError> {
        if let Some(problem) = settings.problem() {
            return Err(EtcdError::Settings(problem));
        }
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).map_err(io(format!("create {}", certs.display())))?;
        let ca_cert = ca_dir.join(CA_CERT_FILE);
        let ca = CertificateAuthority::load(&ca_cert, &ca_dir.join(CA_KEY_FILE))
            .map_err(|e| ClusterError::Certs(e.to_string()))?;
        let mut client_addrs = BTreeMap::new();
        let mut peer_addrs = BTreeMap::new();
        for n in 1..=settings.members {
            issue_cert(&ca, Role::Master, &member_name(n))
                .and_then(|issued| issued.write(&member_cert_paths(&certs, n)))
                .map_err(|e| ClusterError::Certs(e.to_string()))?;
            client_addrs.insert(n, free_loopback_tcp_addr()?);
            peer_addrs.insert(n, free_loopback_tcp_addr()?);
        }
        let mut tls = client
            .https_client_config(true)
            .map_err(|e| ClusterError::Certs(e.to_string()))?;
        tls.alpn_protocols = vec![b"h2".to_vec()];
        // A token of its own per cluster, so that members of another run never join this one.
        let cluster_token = format!(
            "fullerene-bench-{}-{}",
            std::process::id(),
            client_addrs.values().next().map_or(0, SocketAddr::port)
        );
        Ok(LocalEtcd {
            binary,
            dir: dir.to_path_buf(),
            settings,
            ca_cert,
            client_addrs,
            peer_addrs,
            cluster_token,
            tls: Arc::new(tls),
            member_numbers: BTreeMap::new(),
            processes: BTreeMap::new(),
            die_with_parent: false,
        })
    }

    /// Starts every member as a new cluster.
    pub fn start(&mut self) -> Result<(), EtcdError> {
        for n in 1..=self.settings.members {
            self.spawn(n)?;
        }
        Ok(())
    }

    /// The members' numbers, 1 ..= members.
    pub fn members(&self) -> Vec<u64> {
        self.client_addrs.keys().copied().collect()
    }

    /// Member `n`'s client address (`https://<this>`).
    pub fn client_addr(&self, n: u64) -> Option<SocketAddr> {
        self.client_addrs.get(&n).copied()
    }

    /// Every member's client address, by number.
    pub fn client_addrs(&self) -> &BTreeMap<u64, SocketAddr> {
        &self.client_addrs
    }

    /// The TLS configuration the benchmark's clients connect with (ALPN `h2`, the operator's
    /// certificate, members verified against the cluster CA).
    pub fn client_tls(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(&self.tls)
    }

    /// The name the members' certificates are verified for: the loopback address they listen
    /// on (etcd's members dial each other by address too, so their certificates carry it).
    pub fn server_name() -> ServerName<'static> {
        ServerName::IpAddress(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST).into())
    }

    /// Member `n`'s data directory.
    pub fn data_dir(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{}-data", member_name(n)))
    }

    /// Member `n`'s log file (its standard error; appended to across restarts).
    pub fn log_path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{}.log", member_name(n)))
    }

    /// The command line of member `n`.
    pub fn member_command(&self, n: u64) -> Command {
        let url = |addr: Option<&SocketAddr>| {
            addr.map_or_else(String::new, |addr| format!("https://{addr}"))
        };
        let client_url = url(self.client_addrs.get(&n));
        let peer_url = url(self.peer_addrs.get(&n));
        let initial_cluster: Vec<String> = self
            .peer_addrs
            .iter()
            .map(|(member, addr)| format!("{}=https://{addr}", member_name(*member)))
            .collect();
        let paths = member_cert_paths(&self.dir.join("certs"), n);
        let mut command = Command::new(&self.binary);
        command
            .arg("--name")
            .arg(member_name(n))
            .arg("--data-dir")
            .arg(self.data_dir(n))
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(initial_cluster.join(","))
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.cluster_token)
            .arg("--cert-file")
            .arg(&paths.cert)
            .arg("--key-file")
            .arg(&paths.key)
            .arg("--trusted-ca-file")
            .arg(&self.ca_cert)
            .arg("--client-cert-auth")
            .arg("--peer-cert-file")
            .arg(&paths.cert)
            .arg("--peer-key-file")
            .arg(&paths.key)
            .arg("--peer-trusted-ca-file")
            .arg(&self.ca_cert)
            .arg("--peer-client-cert-auth")
            .arg("--heartbeat-interval")
            .arg(self.settings.heartbeat_ms.to_string())
            .arg("--election-timeout")
            .arg(self.settings.election_timeout_ms.to_string())
            // Fullerene's masters run raft-rs with pre-vote (and check-quorum, which etcd
            // always enables): the same election protocol on both sides.
            .arg("--pre-vote=true")
            .arg("--logger")
            .arg("zap")
            .arg("--log-outputs")
            .arg("stderr");
        if !self.settings.fsync {
            command.arg("--unsafe-no-fsync");
        }
        command
    }

    /// Starts member `n` (again, after a kill: on the same data directory, which makes etcd
    /// ignore the initial-cluster flags and rejoin).
    pub fn spawn(&mut self, n: u64) -> Result<(), EtcdError> {
        let mut command = self.member_command(n);
        if self.die_with_parent {
            die_with_parent(&mut command);
        }
        let child = spawn_logged(&mut command, &self.log_path(n))?;
        self.processes.insert(n, child);
        Ok(())
    }

    /// SIGKILLs member `n` and waits for it (nothing happens if it is not running).
    pub fn kill(&mut self, n: u64) {
        if let Some(child) = self.processes.remove(&n) {
            kill_and_reap(child);
        }
    }

    /// Whether member `n` was started and has not been killed.
    pub fn is_running(&self, n: u64) -> bool {
        self.processes.contains_key(&n)
    }

    /// A new connection to member `n`; must be called inside a tokio runtime.
    pub async fn connect(&self, n: u64) -> Result<EtcdClient, EtcdError> {
        let addr = self
            .client_addrs
            .get(&n)
            .copied()
            .ok_or(EtcdError::UnknownMember(n))?;
        Ok(EtcdClient::connect(addr, self.client_tls(), Self::server_name()).await?)
    }

    /// The member number of etcd's member id `member_id`, once that member has answered a
    /// [`LocalEtcd::wait_healthy`].
    pub fn member_number(&self, member_id: u64) -> Option<u64> {
        self.member_numbers.get(&member_id).copied()
    }

    /// Waits until every running member answers, all of them know the same leader, and none
    /// trails it by more than a few entries (a restarted member has caught up); the leader's
    /// member number.
    pub async fn wait_healthy(&mut self, within: Duration) -> Result<u64, EtcdError> {
        let started = Instant::now();
        let mut last = String::from("no answer yet");
        while started.elapsed() < within {
            match self.leader_if_healthy().await {
                Ok(leader) => return Ok(leader),
                Err(problem) => last = problem,
            }
            sleep(Duration::from_millis(20)).await;
        }
        Err(EtcdError::NotHealthy {
            timeout: within,
            last,
        })
    }

    async fn leader_if_healthy(&mut self) -> Result<u64, String> {
        let running: Vec<u64> = self.processes.keys().copied().collect();
        if running.is_empty() {
            return Err("no member is running".to_string());
        }
        let mut statuses = Vec::new();
        for n in running {
            let status = timeout(STATUS_TIMEOUT, async {
                self.connect(n)
                    .await?
                    .status()
                    .await
                    .map_err(EtcdError::from)
            })
            .await
            .map_err(|_| format!("member {n} did not answer within {STATUS_TIMEOUT:?}"))?
            .map_err(|e| format!("member {n}: {e}"))?;
            self.member_numbers.insert(status.header.member_id, n);
            statuses.push(status);
        }
        let leader = statuses[0].leader;
        if leader == 0 || statuses.iter().any(|status| status.leader != leader) {
            return Err(format!(
                "members know leaders {:?}",
                statuses.iter().map(|s| s.leader).collect::<Vec<_>>()
            ));
        }
        let Some(leader_number) = self.member_number(leader) else {
            return Err(format!("the leader {leader:x} is not a running member"));
        };
        let highest = statuses.iter().map(|s| s.raft_index).max().unwrap_or(0);
        let lowest = statuses.iter().map(|s| s.raft_index).min().unwrap_or(0);
        if highest - lowest > CAUGHT_UP_ENTRIES {
            return Err(format!("a member trails by {} entries", highest - lowest));
        }
        Ok(leader_number)
    }

    /// A client that puts through whichever of `survivors` (member numbers) first says it
    /// leads (see [`LeaderSeeker`]).
    pub fn leader_seeker(
        &self,
        survivors: &[u64],
        attempt_timeout: Duration,
        poll: Duration,
        deadline: Duration,
    ) -> LeaderSeeker {
        LeaderSeeker {
            survivors: survivors
                .iter()
                .filter_map(|n| self.client_addrs.get(n).copied())
                .collect(),
            tls: self.client_tls(),
            attempt_timeout,
            poll,
            deadline,
        }
    }

    /// The last `lines` lines of every member's log, for an error message.
    pub fn logs(&self, lines: usize) -> String {
        let mut text = String::new();
        for n in self.client_addrs.keys() {
            text.push_str(&format!("--- etcd member {n} (last lines) ---\n"));
            text.push_str(&crate::cluster::tail(&self.log_path(*n), lines));
        }
        text
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        let members: Vec<u64> = self.processes.keys().copied().collect();
        for n in members {
            self.kill(n);
        }
    }
}

/// Member `n`'s name (`etcd-<n>`), which is also its certificate's id.
fn member_name(n: u64) -> String {
    format!("etcd-{n}")
}

fn member_cert_paths(certs: &Path, n: u64) -> CertPaths {
    CertPaths {
        cert: certs.join(format!("{}.pem", member_name(n))),
        key: certs.join(format!("{}-key.pem", member_name(n))),
    }
}

/// Puts through whichever member answers, as etcd's own client balances between its
/// endpoints: it stays on the member that answered last; after an error, or an attempt with no
/// answer within `attempt_timeout`, it goes on to the next endpoint, pausing `round_pause`
/// after a whole round without success; it gives up after `deadline`. Nothing tells it which
/// member died: a dead member shows as a refused connection or a silent one.
///
/// The attempt timeout matters because a follower forwards a put to the leader it knows: when
/// that leader has just died, the put waits on the follower for the server's own request
/// timeout (seconds), and a client that did not give up on it would measure that instead of
/// the failover.
pub struct EtcdWriter {
    endpoints: Vec<SocketAddr>,
    tls: Arc<rustls::ClientConfig>,
    current: usize,
    client: Option<EtcdClient>,
    attempt_timeout: Duration,
    round_pause: Duration,
    deadline: Duration,
}

impl EtcdWriter {
    /// A writer over `endpoints` (every member's client address), starting with the first.
    pub fn new(
        endpoints: Vec<SocketAddr>,
        tls: Arc<rustls::ClientConfig>,
        attempt_timeout: Duration,
        round_pause: Duration,
        deadline: Duration,
    ) -> EtcdWriter {
        EtcdWriter {
            endpoints,
            tls,
            current: 0,
            client: None,
            attempt_timeout,
            round_pause,
            deadline,
        }
    }

    /// Uses `endpoint` from the next put on (a caller that connects its client to the leader
    /// before a measurement, as the masters' clients reach it through redirects).
    pub fn aim_at(&mut self, endpoint: SocketAddr) {
        if let Some(index) = self.endpoints.iter().position(|addr| *addr == endpoint) {
            if index != self.current {
                self.current = index;
                self.client = None;
            }
        }
    }

    /// Puts `value` under `key`; the address of the member that answered, and its header.
    pub async fn put(
        &mut self,
        key: &[u8],
        value: &[u8],
    ) -> Result<(SocketAddr, ResponseHeader), EtcdError> {
        let started = Instant::now();
        let mut failed_in_round = 0;
        let mut last = String::from("no attempt");
        while started.elapsed() < self.deadline && !self.endpoints.is_empty() {
            let addr = self.endpoints[self.current];
            let limit = self
                .attempt_timeout
                .min(self.deadline.saturating_sub(started.elapsed()));
            let tls = Arc::clone(&self.tls);
            let client = &mut self.client;
            let attempt = timeout(limit, async move {
                let connected = match client.take() {
                    Some(connected) => connected,
                    None => EtcdClient::connect(addr, tls, LocalEtcd::server_name()).await?,
                };
                client.insert(connected).put(key, value).await
            })
            .await;
            match attempt {
                Ok(Ok(header)) => return Ok((addr, header)),
                Ok(Err(error)) => last = error.to_string(),
                Err(_) => last = format!("{addr} did not answer within {limit:?}"),
            }
            self.client = None;
            self.current = (self.current + 1) % self.endpoints.len();
            failed_in_round += 1;
            if failed_in_round >= self.endpoints.len() {
                failed_in_round = 0;
                sleep(self.round_pause).await;
            }
        }
        Err(EtcdError::NoAnswer {
            deadline: self.deadline,
            last,
        })
    }
}

/// A client told which members survived a kill: it asks each of them every `poll` whether it
/// leads, and puts through the first that does (a put to a follower that still follows the
/// dead leader would wait for etcd's request timeout). It measures the servers' failover, not a
/// client's discovery of it.
pub struct LeaderSeeker {
    survivors: Vec<SocketAddr>,
    tls: Arc<rustls::ClientConfig>,
    attempt_timeout: Duration,
    poll: Duration,
    deadline: Duration,
}

impl LeaderSeeker {
    /// Puts `value` under `key` through the first survivor that leads; its address.
    pub async fn put(self, key: &[u8], value: &[u8]) -> Result<SocketAddr, EtcdError> {
        let started = Instant::now();
        let mut clients: Vec<Option<EtcdClient>> = self.survivors.iter().map(|_| None).collect();
        let mut last = String::from("no survivor leads yet");
        while started.elapsed() < self.deadline {
            for (addr, slot) in self.survivors.iter().zip(clients.iter_mut()) {
                let tls = Arc::clone(&self.tls);
                let attempt = timeout(self.attempt_timeout, async {
                    let connected = match slot.take() {
                        Some(connected) => connected,
                        None => EtcdClient::connect(*addr, tls, LocalEtcd::server_name()).await?,
                    };
                    let client = slot.insert(connected);
                    if !client.status().await?.is_leader() {
                        return Ok(false);
                    }
                    client.put(key, value).await?;
                    Ok::<bool, GrpcError>(true)
                })
                .await;
                match attempt {
                    Ok(Ok(true)) => return Ok(*addr),
                    Ok(Ok(false)) => {}
                    Ok(Err(error)) => {
                        last = error.to_string();
                        *slot = None;
                    }
                    Err(_) => {
                        last = format!("{addr} did not answer within {:?}", self.attempt_timeout);
                        *slot = None;
                    }
                }
            }
            sleep(self.poll).await;
        }
        Err(EtcdError::NoAnswer {
            deadline: self.deadline,
            last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_refuses_an_election_timeout_under_five_heartbeats() {
        let settings = EtcdSettings {
            members: 3,
            heartbeat_ms: 50,
            election_timeout_ms: 250,
            fsync: true,
        };
        assert_eq!(settings.problem(), None);
        let short = EtcdSettings {
            election_timeout_ms: 200,
            ..settings.clone()
        };
        assert!(short.problem().is_some());
        let none = EtcdSettings {
            members: 0,
            ..settings
        };
        assert!(none.problem().is_some());
    }

    #[test]
    fn members_are_started_with_mutual_tls_the_timing_and_the_fsync_policy() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        fullerene_transport::certs::generate_dev_cluster(
            &ca_dir,
            fullerene_transport::certs::CertCounts {
                operators: 1,
                ..Default::default()
            },
            false,
        )
        .unwrap();
        let paths = CertPaths::of_member(&ca_dir, Role::Operator, 1);
        let client =
            TlsMaterial::load(&ca_dir.join(CA_CERT_FILE), &paths.cert, &paths.key).unwrap();
        let settings = EtcdSettings {
            members: 3,
            heartbeat_ms: 50,
            election_timeout_ms: 250,
            fsync: false,
        };
        let etcd = LocalEtcd::prepare(
            PathBuf::from("etcd"),
            &dir.path().join("etcd"),
            &ca_dir,
            &client,
            settings,
        )
        .unwrap();
        let command = etcd.member_command(2);
        let args: Vec<String> = command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        let value = |flag: &str| {
            let at = args.iter().position(|arg| arg == flag).unwrap();
            args[at + 1].clone()
        };
        assert_eq!(value("--name"), "etcd-2");
        assert_eq!(value("--heartbeat-interval"), "50");
        assert_eq!(value("--election-timeout"), "250");
        assert!(args.contains(&"--unsafe-no-fsync".to_string()));
        assert!(args.contains(&"--client-cert-auth".to_string()));
        assert!(args.contains(&"--peer-client-cert-auth".to_string()));
        assert!(value("--listen-client-urls").starts_with("https://127.0.0.1:"));
        assert_eq!(
            value("--initial-cluster")
                .matches("=https://127.0.0.1:")
                .count(),
            3
        );
        // The member's certificate chains to the cluster CA and is a master's (server and
        // client authentication, 127.0.0.1 among its names).
        let member = TlsMaterial::load(
            &ca_dir.join(CA_CERT_FILE),
            Path::new(&value("--cert-file")),
            Path::new(&value("--key-file")),
        )
        .unwrap();
        assert_eq!(member.identity().role, Role::Master);
        assert_eq!(member.identity().id, "etcd-2");
    }
}
