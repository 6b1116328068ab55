//! `fullerene agent`: the agent of one machine (resources, task execution, status updates).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use fullerene_agent::core::{EXECUTOR_COMMAND, EXECUTOR_SLEEP};
use fullerene_agent::isolation::IdRange;
use fullerene_agent::machine::{self, MachineError};
use fullerene_agent::sandboxes::{self, GcPolicy};
use fullerene_agent::shell::{install_prometheus, AgentConfig, ResourceCheck};
use fullerene_client::event_log::EventLog;
use fullerene_proto::resources::ResourceKind;
use fullerene_transport::{Role, TlsMaterial};

use super::master::tls_paths;
use super::parse_allowance;

/// How often the agent re-measures the machine's cores and memory.
const RESOURCE_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// `fullerene agent`: runs this machine's agent, or, with a subcommand, an operator's action
/// on one (`drain`, `undrain`).
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct AgentCommand {
    /// An operator's action on an agent instead of running one.
    #[command(subcommand)]
    pub action: Option<crate::commands::control::AgentAction>,
    /// The agent to run. Its required flags are not required with a subcommand (clap's
    /// `subcommand_negates_reqs`), so the fields they fill are `Option`s or lists.
    #[command(flatten)]
    pub run: AgentArgs,
}

/// Flags of `fullerene agent` (all of them also under `[agent]` in the config file).
#[derive(Args, Debug)]
pub(crate) struct AgentArgs {
    #[command(flatten)]
    pub masters: crate::commands::MasterAddrs,
    /// The agent's directory: its checkpoint (`checkpoint.log`, every status update is written
    /// there before it is sent) and the task sandboxes (`sandboxes/<framework>/<task>`, with
    /// each task's `stdout` and `stderr`). Keep it across restarts: a restarted agent recovers
    /// its tasks from it and re-attaches to the processes still running.
    #[arg(
        long,
        env = "FULLERENE_AGENT_WORK_DIR",
        value_name = "DIR",
        required = true
    )]
    pub work_dir: Option<PathBuf>,
    /// This agent's number: with `--certs-dir`, its certificate is `agent-<ID>.pem`. The agent's id
    /// (`agent-<ID>`) comes from the certificate, so it stays the same across restarts.
    #[arg(long, env = "FULLERENE_AGENT_ID", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub id: Option<u64>,
    /// Directory laid out by `fullerene certs init`: `ca.pem`, `agent-<ID>.pem`,
    /// `agent-<ID>-key.pem`. Overridden file by file by `--ca`, `--cert`, `--key`.
    #[arg(long = "certs-dir", env = "FULLERENE_CERTS_DIR", value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// The cluster CA certificate.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// This agent's certificate (role `agent`).
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// This agent's private key.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Resources to offer, overriding what is detected (cores and memory are detected; disk and
    /// network bandwidth and GPUs are 0 unless given):
    /// `cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000,gpus=0`.
    #[arg(long, env = "FULLERENE_AGENT_RESOURCES", value_name = "KIND=AMOUNT,...", value_parser = parse_resources)]
    pub resources: Option<ResourceOverrides>,
    /// Placement attributes reported to the master: `rack=r1,zone=z1`.
    #[arg(long, env = "FULLERENE_AGENT_ATTRIBUTES", value_name = "KEY=VALUE,...", value_parser = parse_attributes)]
    pub attributes: Option<Attributes>,
    /// The executors to offer: `command` (real processes) and `sleep` (no process; finishes
    /// after the task's duration, for benchmarks and large tests).
    #[arg(long, env = "FULLERENE_AGENT_EXECUTORS", value_name = "NAME,...", value_delimiter = ',', default_values_t = [EXECUTOR_COMMAND.to_string(), EXECUTOR_SLEEP.to_string()])]
    pub executors: Vec<String>,
    /// The host name reported to the master (default: this machine's).
    #[arg(long, env = "FULLERENE_AGENT_HOSTNAME", value_name = "NAME")]
    pub hostname: Option<String>,
    /// Local address of the agent's QUIC socket (default: any address, a free port).
    #[arg(long, env = "FULLERENE_AGENT_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address: tasks running, launches,
    /// status-update backlog, reconnects, whether limits are enforced.
    #[arg(long, env = "FULLERENE_AGENT_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Where to look for a cgroup v2 hierarchy to enforce task limits (cpu.max, memory.max).
    /// Without a writable one with the cpu and memory controllers, limits are not enforced and
    /// the agent says so at start and in every task's RUNNING update.
    #[arg(long, env = "FULLERENE_AGENT_CGROUP_ROOT", value_name = "DIR", default_value = fullerene_agent::cgroups::DEFAULT_ROOT)]
    pub cgroup_root: PathBuf,
    /// The uids (each also a gid) tasks run as, one per running task, when the agent runs as
    /// root: `FIRST-LAST`. Keep the range free of real accounts; agents on one machine may
    /// share it (leases are locked in --task-id-lock-dir).
    #[arg(long, env = "FULLERENE_AGENT_TASK_IDS", value_name = "FIRST-LAST", default_value_t = fullerene_agent::isolation::DEFAULT_TASK_IDS)]
    pub task_ids: IdRange,
    /// Where the per-uid lease locks live: the same directory for every agent of the machine,
    /// so that no two tasks ever share a uid.
    #[arg(long, env = "FULLERENE_AGENT_TASK_ID_LOCK_DIR", value_name = "DIR", default_value = fullerene_agent::isolation::DEFAULT_LOCK_DIR)]
    pub task_id_lock_dir: PathBuf,
    /// Refuse to start unless tasks are fully isolated: each as its own user (the agent runs
    /// as root, setpriv is installed) and with cgroup v2 limits. Without it, an agent that
    /// cannot isolate warns at start and `fullerene agents` shows what is missing.
    #[arg(long, env = "FULLERENE_AGENT_REQUIRE_ISOLATION")]
    pub require_isolation: bool,
    /// How far disk and network bandwidth may be overbooked, as a fraction of the total (keep
    /// it equal to the masters' allowance).
    #[arg(long, value_name = "FRACTION", default_value_t = fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE, value_parser = parse_allowance)]
    pub overbook_allowance: f64,
    /// The longest delay between two attempts to reach a master, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub backoff_max_ms: u64,
    /// Status updates unacknowledged this long within a session are sent again, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub status_retry_ms: u64,
    /// How long the sandbox of an ended task (its stdout, stderr and other files) is kept after
    /// the task's last write, in seconds; then the garbage collection removes it.
    #[arg(long, env = "FULLERENE_AGENT_SANDBOX_RETENTION_SECS", value_name = "SECS", default_value_t = sandboxes::DEFAULT_RETENTION.as_secs())]
    pub sandbox_retention_secs: u64,
    /// Keep at least this percentage of the disk under --work-dir free: below it, the
    /// sandboxes of ended tasks are removed, oldest first, whatever their age (a running
    /// task's sandbox never is).
    #[arg(long, env = "FULLERENE_AGENT_SANDBOX_MIN_FREE_PERCENT", value_name = "PERCENT", default_value_t = sandboxes::DEFAULT_MIN_FREE_PERCENT, value_parser = parse_percent)]
    pub sandbox_min_free_percent: f64,
    /// How often the sandbox garbage collection runs, in seconds; a sandbox written to more
    /// recently than that is never removed.
    #[arg(long, env = "FULLERENE_AGENT_SANDBOX_GC_INTERVAL_SECS", value_name = "SECS", default_value_t = sandboxes::DEFAULT_GC_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub sandbox_gc_interval_secs: u64,
    /// Append what the agent does (registrations, task starts, status updates sent) to FILE,
    /// one JSON object per line, for `fullerene chaos run` and audits.
    #[arg(long, env = "FULLERENE_AGENT_EVENT_LOG", value_name = "FILE")]
    pub event_log: Option<PathBuf>,
    #[command(flatten)]
    pub quic: super::QuicArgs,
}

/// Parsed `--resources`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResourceOverrides(pub Vec<(ResourceKind, f64)>);

/// Parsed `--attributes`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Attributes(pub std::collections::BTreeMap<String, String>);

fn parse_resources(text: &str) -> Result<ResourceOverrides, String> {
    machine::parse_resources(text)
        .map(ResourceOverrides)
        .map_err(|e: MachineError| e.to_string())
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(percent) if (0.0..=100.0).contains(&percent) => Ok(percent),
        _ => Err(format!("`{text}` is not a percentage from 0 to 100")),
    }
}

fn parse_attributes(text: &str) -> Result<Attributes, String> {
    machine::parse_attributes(text)
        .map(Attributes)
        .map_err(|e: MachineError| e.to_string())
}

impl AgentArgs {
    /// The agent's configuration: detected resources with the overrides, and the flags.
    pub(crate) fn config(&self) -> Result<AgentConfig> {
        let mut executors = BTreeSet::new();
        for name in &self.executors {
            if name != EXECUTOR_COMMAND && name != EXECUTOR_SLEEP {
                bail!("unknown executor `{name}` in --executors (known: {EXECUTOR_COMMAND}, {EXECUTOR_SLEEP})");
            }
            executors.insert(name.clone());
        }
        let detected = machine::detect();
        let overrides = self
            .resources
            .as_ref()
            .map(|r| r.0.as_slice())
            .unwrap_or(&[]);
        let resources = machine::with_overrides(detected, overrides);
        let kept = overrides.to_vec();
        let work_dir = self.work_dir.clone().context("--work-dir is required")?;
        let mut config = AgentConfig::new(self.masters.addrs.clone(), work_dir, resources);
        if let Some(hostname) = &self.hostname {
            config.hostname = hostname.clone();
        }
        if let Some(attributes) = &self.attributes {
            config.attributes = attributes.0.clone();
        }
        config.executors = executors;
        config.bind = self.listen;
        config.cgroup_root = self.cgroup_root.clone();
        config.isolation.task_ids = self.task_ids;
        config.isolation.lock_dir = self.task_id_lock_dir.clone();
        config.require_isolation = self.require_isolation;
        config.overbook_allowance = self.overbook_allowance;
        config.backoff_max = Duration::from_millis(self.backoff_max_ms);
        config.backoff_min = config.backoff_min.min(config.backoff_max);
        config.status_retry = Duration::from_millis(self.status_retry_ms);
        config.transport = self.quic.config()?;
        config.sandbox_gc_interval = Duration::from_secs(self.sandbox_gc_interval_secs);
        config.sandbox_gc = GcPolicy {
            retention: Duration::from_secs(self.sandbox_retention_secs),
            min_free_percent: self.sandbox_min_free_percent,
            min_idle: config.sandbox_gc_interval,
        };
        if let Some(path) = &self.event_log {
            config.event_log = Some(Arc::new(
                EventLog::open(path).context("cannot open --event-log")?,
            ));
        }
        // Hot-plugged CPUs or memory are noticed and reported; what the operator fixed stays.
        config.resource_check = Some(ResourceCheck {
            interval: RESOURCE_CHECK_INTERVAL,
            measure: Arc::new(move || machine::with_overrides(machine::detect(), &kept)),
        });
        Ok(config)
    }

    fn tls(&self) -> Result<TlsMaterial> {
        let n = match (self.id, &self.cert, &self.key) {
            (Some(id), _, _) => usize::try_from(id).context("agent id too large")?,
            // Explicit files: the number only names layout files, which are not used.
            (None, Some(_), Some(_)) => 0,
            (None, _, _) => bail!(
                "pass --id N to use agent-<N>.pem from --certs-dir, or --cert FILE and --key FILE"
            ),
        };
        let (ca, cert, key) = tls_paths(
            self.certs.as_deref(),
            self.ca.clone(),
            self.cert.clone(),
            self.key.clone(),
            Role::Agent,
            n,
        )?;
        let tls = TlsMaterial::load(&ca, &cert, &key).context("cannot load the TLS material")?;
        check_key_private(&key, self.require_isolation)?;
        if tls.identity().role != Role::Agent {
            bail!(
                "{} names {}, not an agent: use an agent certificate (e.g. agent-<N>.pem from `fullerene certs init`)",
                cert.display(),
                tls.identity()
            );
        }
        Ok(tls)
    }
}

/// Warns (or, with `--require-isolation`, refuses) when the agent's private key can be read by
/// users other than its owner: tasks run on this machine, and with their own uids only the
/// file's mode keeps the key from them (`fullerene certs init` writes keys `0600`).
fn check_key_private(key: &std::path::Path, require: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(key)
        .with_context(|| format!("cannot read {}", key.display()))?
        .permissions()
        .mode();
    if mode & 0o077 == 0 {
        return Ok(());
    }
    let what = format!(
        "the agent's key {} has mode {:o}: other users, tasks included, may read it; `chmod 600` it",
        key.display(),
        mode & 0o777
    );
    if require {
        bail!("{what} (--require-isolation)");
    }
    tracing::warn!("{what}");
    Ok(())
}

/// Runs `fullerene agent` until SIGTERM or ctrl-c. Its tasks keep running after it stops.
pub(crate) fn run(args: AgentArgs) -> Result<()> {
    let config = args.config()?;
    let tls = args.tls()?;
    tracing::info!(
        resources = %config.resources,
        attributes = ?config.attributes,
        "offering"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if let Some(addr) = args.metrics_listen {
        let _entered = runtime.enter();
        install_prometheus(addr)?;
        tracing::info!(%addr, "serving Prometheus metrics");
    }
    let work_dir = config.work_dir.clone();
    runtime
        .block_on(fullerene_agent::run(config, tls, shutdown_signal()))
        .with_context(|| format!("agent with work directory {} failed", work_dir.display()))?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Completes on SIGTERM or ctrl-c (SIGINT).
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use clap::{CommandFactory, Parser};

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Sub {
        Agent(AgentArgs),
    }

    fn parse(words: &[&str]) -> Result<AgentArgs, clap::Error> {
        let mut args = vec!["fullerene", "agent"];
        args.extend_from_slice(words);
        Cli::try_parse_from(args).map(|cli| match cli.command {
            Sub::Agent(args) => args,
        })
    }

    #[test]
    fn flags_give_the_agent_its_configuration() {
        let args = parse(&[
            "--master-addrs",
            "127.0.0.1:5051,127.0.0.1:5052",
            "--work-dir",
            "/var/lib/fullerene",
            "--resources",
            "cpus=16,disk_mbps=1000",
            "--attributes",
            "rack=r1,zone=z1",
            "--executors",
            "sleep",
        ])
        .expect("parses");
        let config = args.config().expect("config");
        assert_eq!(config.masters.len(), 2);
        assert_eq!(config.resources[ResourceKind::Cpus], 16.0);
        assert_eq!(config.resources[ResourceKind::DiskMbps], 1000.0);
        // Memory was not overridden: it is the machine's.
        assert_eq!(
            config.resources[ResourceKind::MemMib],
            machine::detect()[ResourceKind::MemMib]
        );
        assert_eq!(
            config.attributes.get("zone").map(String::as_str),
            Some("z1")
        );
        assert_eq!(
            config
                .executors
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            vec!["sleep"]
        );
    }

    #[test]
    fn bad_values_are_refused_naming_them() {
        let base = ["--master-addrs", "127.0.0.1:5051", "--work-dir", "w"];
        let with = |extra: &[&str]| {
            let mut words = base.to_vec();
            words.extend_from_slice(extra);
            parse(&words)
        };
        let error = with(&["--resources", "cpus=4,gpu=1"])
            .expect_err("bad key")
            .to_string();
        assert!(error.contains("unknown resource `gpu`"), "{error}");
        let error = with(&["--resources", "mem_mib=-5"])
            .expect_err("bad value")
            .to_string();
        assert!(error.contains("`mem_mib` has value `-5`"), "{error}");
        let error = with(&["--attributes", "rack"])
            .expect_err("bad attr")
            .to_string();
        assert!(error.contains("`rack` is not KEY=VALUE"), "{error}");
        let error = parse(&["--master-addrs", "nowhere", "--work-dir", "w"])
            .expect_err("bad address")
            .to_string();
        assert!(
            error.contains("nowhere") && error.contains("HOST:PORT"),
            "{error}"
        );
        // Host names resolve (once, at start), as addresses do.
        let named = parse(&["-m", "localhost:5051,127.0.0.2:5052", "--work-dir", "w"])
            .expect("a host name parses");
        assert_eq!(named.masters.addrs[0].port(), 5051);
        assert!(
            named.masters.addrs[0].ip().is_loopback(),
            "{:?}",
            named.masters.addrs
        );
        assert_eq!(
            named.masters.addrs[1],
            "127.0.0.2:5052".parse().expect("addr")
        );
        let error = parse(&[
            "--master-addrs",
            "no-such-host.invalid:5051",
            "--work-dir",
            "w",
        ])
        .expect_err("an unknown name")
        .to_string();
        assert!(error.contains("no-such-host.invalid:5051"), "{error}");
        let args = with(&["--executors", "docker"]).expect("parses");
        let error = args.config().expect_err("unknown executor").to_string();
        assert!(error.contains("unknown executor `docker`"), "{error}");
        // No certificate named: the error says what to pass.
        let args = with(&[]).expect("parses");
        let error = args.tls().expect_err("no tls").to_string();
        assert!(error.contains("--id"), "{error}");
    }

    #[test]
    fn the_config_file_agent_table_fills_the_flags() {
        let file = tempfile::NamedTempFile::new().expect("file");
        std::fs::write(
            file.path(),
            "[agent]\nmaster_addrs = [\"127.0.0.1:5051\", \"127.0.0.1:5052\"]\nwork_dir = \"/tmp/w\"\nresources = \"cpus=3\"\nattributes = \"rack=r9\"\n",
        )
        .expect("write");
        let argv: Vec<OsString> = ["fullerene", "agent", "--resources", "cpus=5"]
            .iter()
            .map(OsString::from)
            .collect();
        let argv = crate::config::apply_config_file(&Cli::command(), argv, file.path())
            .expect("config applies");
        let cli = Cli::try_parse_from(argv).expect("parses");
        let Sub::Agent(args) = cli.command;
        assert_eq!(args.masters.addrs.len(), 2);
        assert_eq!(args.work_dir, Some(PathBuf::from("/tmp/w")));
        // The flag beats the file.
        assert_eq!(
            args.resources,
            Some(ResourceOverrides(vec![(ResourceKind::Cpus, 5.0)]))
        );
        assert_eq!(
            args.attributes.map(|a| a.0.get("rack").cloned()),
            Some(Some("r9".to_string()))
        );
    }
}
