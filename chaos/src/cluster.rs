//! Real `fullerene master` processes on loopback, for failure tests and benchmarks.
//!
//! [`LocalMasters`] lays out development certificates, one data directory and one log file per
//! master under a directory (a temporary one unless told otherwise), gives each master a
//! loopback UDP port the OS just handed out, and SIGKILLs every process it started when
//! dropped. It starts, kills and restarts masters by Raft id; what the processes do is the
//! real binary's business, so nothing is mocked.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fullerene_client::OperatorClient;
use fullerene_master::server::http::auth::{generate_token, token_line, Scope};
use fullerene_transport::certs::{generate_dev_cluster, CertCounts, CertPaths};
use fullerene_transport::{Client, Role, TlsMaterial, TransportConfig};
use tempfile::TempDir;

use crate::api::ApiClient;

/// Why a local cluster could not be set up or driven.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The certificates could not be made or loaded.
    #[error("certificates: {0}")]
    Certs(String),
    /// No master with this id was set up.
    #[error("master {0} is not part of this cluster (ids 1..={1})")]
    UnknownMaster(u64, u64),
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// The token file's name in a local cluster's directory.
const TOKENS_FILE: &str = "http-tokens";

/// Writes a token file with a new `read` token and a new `write` token; the tokens.
fn write_token_file(path: &Path) -> Result<HttpTokens, ClusterError> {
    let new = || {
        generate_token()
            .map_err(|_| ClusterError::Certs("no random numbers for a token".to_string()))
    };
    let tokens = HttpTokens {
        read: new()?,
        write: new()?,
    };
    let line = |name, scope, token: &str| {
        token_line(name, scope, token, None).map_err(ClusterError::Certs)
    };
    let text = format!(
        "# The HTTP API's tokens of this local cluster (hashes only).\n{}\n{}\n",
        line("reader", Scope::Read, &tokens.read)?,
        line("writer", Scope::Write, &tokens.write)?
    );
    fullerene_transport::certs::write_file(path, text.as_bytes(), true)
        .map_err(|e| ClusterError::Certs(e.to_string()))?;
    Ok(tokens)
}

/// Listening ports are drawn from below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768-60999 by default), where the OS never puts the
/// sockets that clients, agents and other tests bind to port 0: a port handed out by the OS
/// and freed again could be taken by such a socket before the master binds it (a dual-stack
/// `[::]:0` client socket takes the IPv4 port too), and the master would exit at start.
const LISTEN_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback address with a free UDP port for a listener (see [`LISTEN_PORTS`]).
pub fn free_loopback_addr() -> Result<SocketAddr, ClusterError> {
    free_listen_addr("bind a loopback UDP socket", |addr| {
        UdpSocket::bind(addr)?.local_addr()
    })
}

/// A loopback address with a free TCP port for a listener (see [`LISTEN_PORTS`]).
pub fn free_loopback_tcp_addr() -> Result<SocketAddr, ClusterError> {
    free_listen_addr("bind a loopback TCP socket", |addr| {
        TcpListener::bind(addr)?.local_addr()
    })
}

/// A random port of [`LISTEN_PORTS`] that `bind` takes (returning the bound address), or the
/// OS's choice when none of a few hundred tries is free.
fn free_listen_addr(
    what: &'static str,
    bind: impl Fn(SocketAddr) -> std::io::Result<SocketAddr>,
) -> Result<SocketAddr, ClusterError> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..256 {
        let addr = SocketAddr::from(([127, 0, 0, 1], rng.gen_range(LISTEN_PORTS)));
        if bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bind(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(io(what))
}

/// Where the cluster's files live: a temporary directory removed on drop, or a kept one.
enum Home {
    Temporary(TempDir),
    Kept(PathBuf),
}

impl Home {
    fn path(&self) -> &Path {
        match self {
            Home::Temporary(dir) => dir.path(),
            Home::Kept(path) => path,
        }
    }
}

/// The HTTP API tokens of a local cluster, one per scope.
#[derive(Clone, Debug)]
pub struct HttpTokens {
    /// A token with the `read` scope (named `reader`).
    pub read: String,
    /// A token with the `write` scope (named `writer`).
    pub write: String,
}

/// The timeout of each step of the harnesses' HTTP requests.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Real master processes on loopback, stopped (SIGKILL) when dropped.
pub struct LocalMasters {
    home: Home,
    binary: PathBuf,
    /// Every master's address, by Raft id (those added later too).
    pub addrs: BTreeMap<u64, SocketAddr>,
    /// Every master's HTTP API address (`/state`, `/metrics`), by Raft id.
    pub http_addrs: BTreeMap<u64, SocketAddr>,
    /// Where peers and agents are told a master is, when not at its own address (a fault
    /// proxy in front of it, [`crate::live::proxy`]); a master still listens on `addrs`.
    pub advertised: BTreeMap<u64, SocketAddr>,
    /// The ids bootstrapped as the initial voters.
    pub founders: Vec<u64>,
    /// Bearer tokens every master's HTTP API accepts (from [`LocalMasters::tokens_path`]).
    pub http_tokens: HttpTokens,
    /// Flags added to every `fullerene master` command line (Raft timing, for instance).
    pub extra_args: Vec<String>,
    /// Start every process in a process group of its own, so that a terminal's ctrl-c reaches
    /// only the parent, which then stops them itself (`fullerene dev`); off by default, so
    /// that tests interrupted from a terminal take their masters with them.
    pub own_process_group: bool,
    /// SIGKILL every process started when the thread that started it dies (Linux's parent
    /// death signal), so that a harness killed outright leaves nothing behind; off by default
    /// (`fullerene dev`'s processes outlive nothing, but tests' threads end early).
    pub die_with_parent: bool,
    /// How many agent certificates there are (`agent-1` ..).
    agent_certs: u64,
    processes: BTreeMap<u64, Child>,
    agents: BTreeMap<u64, Child>,
}

impl LocalMasters {
    /// Certificates for `max_masters` masters, `agents` agents, as many frameworks and one
    /// operator under `home` (a new temporary directory when `None`), a token file for the
    /// masters' HTTP API with a `read` and a `write` token, and addresses for every master; no
    /// process is started yet (see [`LocalMasters::start_founders`]).
    pub fn prepare(
        binary: PathBuf,
        founders: u64,
        max_masters: u64,
        agents: u64,
        home: Option<PathBuf>,
    ) -> Result<LocalMasters, ClusterError> {
        let home = match home {
            Some(path) => {
                std::fs::create_dir_all(&path).map_err(io(format!("create {}", path.display())))?;
                Home::Kept(path)
            }
            None => {
                Home::Temporary(tempfile::tempdir().map_err(io("create a temporary directory"))?)
            }
        };
        let counts = CertCounts {
            masters: usize::try_from(max_masters)
                .map_err(|_| ClusterError::Certs("too many masters".to_string()))?,
            agents: usize::try_from(agents)
                .map_err(|_| ClusterError::Certs("too many agents".to_string()))?,
            frameworks: usize::try_from(agents)
                .map_err(|_| ClusterError::Certs("too many frameworks".to_string()))?,
            operators: 1,
        };
        generate_dev_cluster(&home.path().join("certs"), counts, true)
            .map_err(|e| ClusterError::Certs(e.to_string()))?;
        let http_tokens = write_token_file(&home.path().join(TOKENS_FILE))?;
        let mut addrs = BTreeMap::new();
        let mut http_addrs = BTreeMap::new();
        for id in 1..=max_masters {
            addrs.insert(id, free_loopback_addr()?);
            http_addrs.insert(id, free_loopback_tcp_addr()?);
        }
        Ok(LocalMasters {
            home,
            binary,
            addrs,
            http_addrs,
            advertised: BTreeMap::new(),
            founders: (1..=founders).collect(),
            http_tokens,
            extra_args: Vec::new(),
            own_process_group: false,
            die_with_parent: false,
            agent_certs: agents,
            processes: BTreeMap::new(),
            agents: BTreeMap::new(),
        })
    }

    /// Starts every founder as a new group.
    pub fn start_founders(&mut self) -> Result<(), ClusterError> {
        for id in self.founders.clone() {
            self.spawn(id, false)?;
        }
        Ok(())
    }

    /// The directory holding certificates, data directories and logs.
    pub fn dir(&self) -> &Path {
        self.home.path()
    }

    /// The certificates directory (`fullerene certs init` layout).
    pub fn certs_dir(&self) -> PathBuf {
        self.home.path().join("certs")
    }

    /// The token file of the masters' HTTP API (`--http-tokens`).
    pub fn tokens_path(&self) -> PathBuf {
        self.home.path().join(TOKENS_FILE)
    }

    /// A client of the masters' HTTP API with the operator's certificate (`operator-1`).
    pub fn api_client(&self) -> Result<ApiClient, ClusterError> {
        ApiClient::with_certificate(&self.tls_of(Role::Operator, 1)?, HTTP_TIMEOUT)
            .map_err(|e| ClusterError::Certs(e.to_string()))
    }

    /// A client of the masters' HTTP API with the bearer token `token` and no certificate.
    pub fn token_client(&self, token: &str) -> Result<ApiClient, ClusterError> {
        ApiClient::with_token(&self.tls_of(Role::Operator, 1)?, token, HTTP_TIMEOUT)
            .map_err(|e| ClusterError::Certs(e.to_string()))
    }

    /// The TLS material of certificate `<role>-<n>`.
    pub fn tls_of(&self, role: Role, n: usize) -> Result<TlsMaterial, ClusterError> {
        let certs = self.certs_dir();
        let paths = CertPaths::of_member(&certs, role, n);
        TlsMaterial::load(&certs.join("ca.pem"), &paths.cert, &paths.key)
            .map_err(|e| ClusterError::Certs(e.to_string()))
    }

    /// Master `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.home.path().join(format!("master-{id}-data"))
    }

    /// Master `id`'s log file (its standard error; appended to across restarts).
    pub fn log_path(&self, id: u64) -> PathBuf {
        self.home.path().join(format!("master-{id}.log"))
    }

    /// The command line that runs master `id` (`join` for a master added later).
    pub fn master_command(&self, id: u64, join: bool) -> Result<Command, ClusterError> {
        // Founders always pass --bootstrap: it only acts on an empty data directory, which a
        // restarted founder never has here.
        let mut command = self.plain_master_command(id, join)?;
        command.arg(if join { "--join" } else { "--bootstrap" });
        Ok(command)
    }

    /// The command line of master `id` with neither `--bootstrap` nor `--join`: how an
    /// operator restarts a member.
    pub fn plain_master_command(&self, id: u64, join: bool) -> Result<Command, ClusterError> {
        let addr = self.addr(id)?;
        let mut peers = Vec::new();
        for member in self.founders.iter().chain(join.then_some(&id)) {
            peers.push(format!("{member}={}", self.advertised_addr(*member)?));
        }
        let mut command = Command::new(&self.binary);
        command
            .arg("--log-level")
            .arg("info")
            .arg("master")
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--peers")
            .arg(peers.join(","))
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .arg("--certs-dir")
            .arg(self.certs_dir());
        if let Some(http) = self.http_addrs.get(&id) {
            command
                .arg("--http-listen")
                .arg(http.to_string())
                .arg("--http-tokens")
                .arg(self.tokens_path());
        }
        command.args(&self.extra_args);
        Ok(command)
    }

    /// Where master `id` is reached by its peers and agents.
    pub fn advertised_addr(&self, id: u64) -> Result<SocketAddr, ClusterError> {
        match self.advertised.get(&id) {
            Some(addr) => Ok(*addr),
            None => self.addr(id),
        }
    }

    fn addr(&self, id: u64) -> Result<SocketAddr, ClusterError> {
        self.addrs
            .get(&id)
            .copied()
            .ok_or(ClusterError::UnknownMaster(id, self.addrs.len() as u64))
    }

    /// Starts master `id` (again, after a kill: on the same data directory).
    pub fn spawn(&mut self, id: u64, join: bool) -> Result<(), ClusterError> {
        let mut command = self.master_command(id, join)?;
        self.detach_if_asked(&mut command);
        let child = spawn_logged(&mut command, &self.log_path(id))?;
        self.processes.insert(id, child);
        Ok(())
    }

    fn detach_if_asked(&self, command: &mut Command) {
        #[cfg(unix)]
        if self.own_process_group {
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        if self.die_with_parent {
            die_with_parent(command);
        }
        #[cfg(not(unix))]
        let _ = command;
    }

    /// Keeps the directory when `self` is dropped, even a temporary one, and returns its path.
    pub fn keep_dir(&mut self) -> PathBuf {
        let path = self.home.path().to_path_buf();
        if let Home::Temporary(_) = self.home {
            let kept = std::mem::replace(&mut self.home, Home::Kept(path.clone()));
            if let Home::Temporary(dir) = kept {
                // Only the removal on drop is given up: the directory stays where it is.
                let _ = dir.keep();
            }
        }
        path
    }

    /// The processes (masters and agents) that exited by themselves since the last call,
    /// which are no longer tracked; a crashed master's or agent's log says why.
    pub fn reap_exited(&mut self) -> Vec<Exited> {
        let mut out = Vec::new();
        let masters: Vec<u64> = self.processes.keys().copied().collect();
        for id in masters {
            if let Some(status) = exited(&mut self.processes, id) {
                out.push(Exited {
                    name: format!("master {id}"),
                    log: self.log_path(id),
                    status,
                });
            }
        }
        let agents: Vec<u64> = self.agents.keys().copied().collect();
        for n in agents {
            if let Some(status) = exited(&mut self.agents, n) {
                out.push(Exited {
                    name: format!("agent {n}"),
                    log: self.agent_log_path(n),
                    status,
                });
            }
        }
        out
    }

    /// How many masters and agents are running (started, not killed, not seen exiting).
    pub fn running(&self) -> (usize, usize) {
        (self.processes.len(), self.agents.len())
    }

    /// Whether master `id` was started and has not been killed or seen exiting.
    pub fn is_running(&self, id: u64) -> bool {
        self.processes.contains_key(&id)
    }

    /// Master `id`'s process id, while it runs.
    pub fn master_pid(&self, id: u64) -> Option<u32> {
        self.processes.get(&id).map(Child::id)
    }

    /// Agent `n`'s process id, while it runs.
    pub fn agent_pid(&self, n: u64) -> Option<u32> {
        self.agents.get(&n).map(Child::id)
    }

    /// SIGKILLs master `id` and waits for it (nothing happens if it is not running).
    pub fn kill(&mut self, id: u64) {
        if let Some(child) = self.processes.remove(&id) {
            kill_and_reap(child);
        }
    }

    /// Waits up to `timeout` for master `id` to exit by itself; its exit success if it did.
    pub fn wait_exit(&mut self, id: u64, timeout: Duration) -> Option<bool> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            let child = self.processes.get_mut(&id)?;
            if let Ok(Some(status)) = child.try_wait() {
                self.processes.remove(&id);
                return Some(status.success());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Agent `n`'s work directory.
    pub fn agent_work_dir(&self, n: u64) -> PathBuf {
        self.home.path().join(format!("agent-{n}-work"))
    }

    /// Agent `n`'s log file (its standard error; appended to across restarts).
    pub fn agent_log_path(&self, n: u64) -> PathBuf {
        self.home.path().join(format!("agent-{n}.log"))
    }

    /// The command line that runs agent `n` (certificate `agent-<n>`) against every master,
    /// with `extra` flags (resources, executors, ...).
    pub fn agent_command(&self, n: u64, extra: &[&str]) -> Command {
        let masters: Vec<String> = self
            .addrs
            .keys()
            .filter_map(|id| self.advertised_addr(*id).ok())
            .map(|addr| addr.to_string())
            .collect();
        let mut command = Command::new(&self.binary);
        command
            .arg("--log-level")
            .arg("info")
            .arg("agent")
            .arg("--id")
            .arg(n.to_string())
            .arg("--master-addrs")
            .arg(masters.join(","))
            .arg("--work-dir")
            .arg(self.agent_work_dir(n))
            .arg("--certs-dir")
            .arg(self.certs_dir())
            .args(extra);
        command
    }

    /// Starts agent `n` (again, after a kill: on the same work directory).
    pub fn spawn_agent(&mut self, n: u64, extra: &[&str]) -> Result<(), ClusterError> {
        let mut command = self.agent_command(n, extra);
        self.detach_if_asked(&mut command);
        let child = spawn_logged(&mut command, &self.agent_log_path(n))?;
        self.agents.insert(n, child);
        Ok(())
    }

    /// SIGKILLs agent `n` and waits for it (its tasks' processes keep running, as they would
    /// if the agent crashed).
    pub fn kill_agent(&mut self, n: u64) {
        if let Some(child) = self.agents.remove(&n) {
            kill_and_reap(child);
        }
    }

    /// An operator client for the masters `ids`; must be called inside a tokio runtime.
    pub fn operator_client(
        &self,
        ids: &[u64],
        deadline: Duration,
    ) -> Result<OperatorClient, ClusterError> {
        self.operator_client_with(ids, deadline, TransportConfig::default())
    }

    /// [`LocalMasters::operator_client`] with QUIC settings of its own (QUIC keeps the smaller
    /// idle timeout of the two sides).
    pub fn operator_client_with(
        &self,
        ids: &[u64],
        deadline: Duration,
        transport: TransportConfig,
    ) -> Result<OperatorClient, ClusterError> {
        let tls = self.tls_of(Role::Operator, 1)?;
        let client =
            Client::new(&tls, transport).map_err(|e| ClusterError::Certs(e.to_string()))?;
        let mut masters = Vec::new();
        for id in ids {
            masters.push(self.addr(*id)?);
        }
        Ok(OperatorClient::new(client, masters, deadline))
    }

    /// The last `lines` lines of every master's log, for an error message.
    pub fn logs(&self, lines: usize) -> String {
        let mut text = String::new();
        let masters = self
            .addrs
            .keys()
            .map(|id| (format!("master {id}"), self.log_path(*id)));
        let agents = (1..=self.agent_certs).map(|n| (format!("agent {n}"), self.agent_log_path(n)));
        for (name, path) in masters.chain(agents) {
            if let Ok(log) = std::fs::read_to_string(path) {
                let tail: Vec<&str> = log.lines().rev().take(lines).collect();
                text.push_str(&format!("--- {name} (last lines) ---\n"));
                for line in tail.into_iter().rev() {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        text
    }
}

/// Starts `command` with standard input and output closed and standard error appended to the
/// file at `log` (created if missing): how the harnesses run every server process.
pub(crate) fn spawn_logged(command: &mut Command, log: &Path) -> Result<Child, ClusterError> {
    let file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(format!("open {}", log.display())))?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(io(format!(
            "start {}",
            command.get_program().to_string_lossy()
        )))
}

/// SIGKILLs `child` and waits for it, so that no zombie is left (errors mean it had already
/// exited and been reaped).
pub(crate) fn kill_and_reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Makes the process `command` starts receive SIGKILL when the thread that starts it dies
/// (Linux's `PR_SET_PDEATHSIG`; elsewhere nothing).
pub fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl(2) with PR_SET_PDEATHSIG is async-signal-safe and touches no memory
        // of the parent; it runs in the child between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// Raises this process's soft limit on open files to its hard limit (a benchmark with a
/// thousand clients holds a socket each, past the common soft limit of 1,024); the limit now
/// in force.
pub fn raise_open_file_limit() -> Result<libc::rlim_t, ClusterError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io("read the open-file limit")(
                std::io::Error::last_os_error(),
            ));
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(io("raise the open-file limit")(
                    std::io::Error::last_os_error(),
                ));
            }
        }
    }
    Ok(limit.rlim_cur)
}

/// A master or agent that exited by itself (see [`LocalMasters::reap_exited`]).
#[derive(Debug)]
pub struct Exited {
    /// `master N` or `agent N`.
    pub name: String,
    /// Its log file.
    pub log: PathBuf,
    /// How it ended.
    pub status: ExitStatus,
}

/// Removes and returns the exit status of `id`'s process if it has exited.
fn exited(processes: &mut BTreeMap<u64, Child>, id: u64) -> Option<ExitStatus> {
    let status = processes.get_mut(&id)?.try_wait().ok().flatten()?;
    processes.remove(&id);
    Some(status)
}

/// The last `lines` lines of the file at `path` (empty if it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    let tail: Vec<&str> = text.lines().rev().take(lines).collect();
    let mut out = String::new();
    for line in tail.into_iter().rev() {
        out.push_str(line);
        out.push('\n');
    }
    out
}

impl Drop for LocalMasters {
    fn drop(&mut self) {
        let agents: Vec<u64> = self.agents.keys().copied().collect();
        for n in agents {
            self.kill_agent(n);
        }
        let ids: Vec<u64> = self.processes.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
        // Tasks outlive a killed agent (as they would a crashed one): stop the processes of
        // every sandbox under this cluster's directory too.
        crate::live::kill_task_processes(self.home.path());
    }
}
