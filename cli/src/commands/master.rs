//! `fullerene master`: one replicated master process (Raft over RocksDB, mutual-TLS QUIC).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use fullerene_master::core::session_rules::ClientLimits;
use fullerene_master::core::AllocationPlanning;
use fullerene_master::raft_node::{NodeConfig, Persistence, RaftNode};
use fullerene_master::server::http::HttpConfig;
use fullerene_master::server::{self, MasterExit, ShellConfig};
use fullerene_master::state::ClusterSettings;
use fullerene_master::storage::{RaftStore, RocksStorage};
use fullerene_transport::certs::CertPaths;
use fullerene_transport::{Role, Server, TlsMaterial};

use super::parse_allowance;

/// Flags of `fullerene master` (all of them also under `[master]` in the config file).
#[derive(Args, Debug)]
pub(crate) struct MasterArgs {
    /// This master's Raft id (its certificate must be `master-<ID>`).
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_ID", value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,
    /// Address to serve peers, agents, frameworks and operators on (QUIC over UDP).
    #[arg(long, env = "FULLERENE_MASTER_LISTEN", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The masters of the group, this one included: `1=127.0.0.1:5050,2=...`. With
    /// `--bootstrap` on a fresh data directory, the new group's voters are exactly these.
    #[arg(long, env = "FULLERENE_MASTER_PEERS", value_name = "ID=HOST:PORT,...", value_delimiter = ',', value_parser = parse_peer)]
    pub peers: Vec<(u64, SocketAddr)>,
    /// The RocksDB directory of this master's Raft log and state.
    #[arg(long, env = "FULLERENE_MASTER_DATA_DIR", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Start empty and wait to be added by `fullerene cluster add-master` (a master added to a
    /// running group).
    #[arg(long, conflicts_with = "bootstrap")]
    pub join: bool,
    /// Create a new group from `--peers` if the data directory is empty. Give it only when the
    /// group is first created, to each of its first masters: a master of a running group whose
    /// data directory was lost must rejoin (`cluster remove-master`, then `--join` and
    /// `cluster add-master`), because a fresh bootstrap would forget the votes it cast and
    /// could elect a second leader in a term. Ignored when the directory already holds state.
    #[arg(long, env = "FULLERENE_MASTER_BOOTSTRAP")]
    pub bootstrap: bool,
    /// Directory laid out by `fullerene certs init`: `ca.pem`, `master-<ID>.pem`,
    /// `master-<ID>-key.pem`. Overridden file by file by `--ca`, `--cert`, `--key`.
    #[arg(long = "certs-dir", env = "FULLERENE_CERTS_DIR", value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// The cluster CA certificate.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// This master's certificate.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// This master's private key.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Serve the HTTP API on this address, over HTTPS with this master's certificate: reads
    /// (`GET /state`, `/agents`, `/frameworks`, `/tasks`, `/groups`, `/cluster`, `/metrics`)
    /// and operator writes (`PUT /groups/{group}/weight`, `POST /masters`, `DELETE
    /// /masters/{id}`). Clients authenticate with an operator certificate or a bearer token
    /// (`--http-tokens`); followers redirect to the leader. `GET /health` and `/ready` are
    /// liveness and readiness probes for load balancers, served without credentials.
    #[arg(
        long,
        alias = "metrics-listen",
        env = "FULLERENE_MASTER_HTTP_LISTEN",
        value_name = "ADDR"
    )]
    pub http_listen: Option<SocketAddr>,
    /// The HTTP API's token file: one token a line, `NAME read|write sha256:HASH
    /// [expires=RFC3339]` (`fullerene token new` makes them). Reloaded on SIGHUP and when it
    /// changes. Without it, only operators' client certificates authenticate.
    #[arg(long, env = "FULLERENE_HTTP_TOKENS", value_name = "FILE")]
    pub http_tokens: Option<PathBuf>,
    /// Let unauthenticated clients read `/metrics` (counts and timings only; every other
    /// endpoint still needs credentials).
    #[arg(long, env = "FULLERENE_MASTER_HTTP_METRICS_OPEN")]
    pub http_metrics_open: bool,
    /// Serve the HTTP API over plain HTTP instead of HTTPS: only on a loopback address (for a
    /// TLS-terminating proxy or a scraper on the same machine); tokens then cross unencrypted.
    #[arg(long)]
    pub http_plaintext: bool,
    /// The least time between two builds of the leader's view that HTTP reads are served
    /// from, in milliseconds; a read sees the state at most this old (and every operator
    /// write answered before it).
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_HTTP_VIEW_INTERVAL_MS", default_value_t = fullerene_master::server::http::DEFAULT_VIEW_INTERVAL.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub http_view_interval_ms: u64,
    /// The most tasks the HTTP view holds (the first by framework and task id; documents say
    /// how many were left out).
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_HTTP_VIEW_MAX_TASKS", default_value_t = fullerene_master::server::http::DEFAULT_MAX_VIEW_TASKS as u64, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub http_view_max_tasks: u64,
    /// Raft tick interval in milliseconds (25 ms suits a LAN: failover in about half a
    /// second; raise it on slower networks).
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_TICK_MS", default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    pub tick_ms: u64,
    /// Ticks between the leader's heartbeats.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_ticks: u64,
    /// Ticks without a heartbeat before a follower campaigns (randomised in [N, 2N)).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
    pub election_ticks: u64,
    /// Applied entries between state snapshots (and log compactions).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_interval_entries: u64,
    /// With a large state, at least this many applied entries between snapshots per record of
    /// the state (agents, frameworks, tasks, finished tasks kept), so that encoding snapshots
    /// costs a bounded share of the work per entry; 0 keeps `--snapshot-interval-entries` fixed.
    #[arg(long, value_name = "N", default_value_t = fullerene_master::raft_node::DEFAULT_SNAPSHOT_ENTRIES_PER_RECORD)]
    pub snapshot_entries_per_record: u64,
    /// Entries kept in the log behind the latest snapshot, so that a follower only a little
    /// behind catches up from the log rather than with a whole snapshot.
    #[arg(long, value_name = "N", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub log_retention_entries: u64,
    /// How often agents heartbeat, in milliseconds.
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_AGENT_HEARTBEAT_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub agent_heartbeat_ms: u64,
    /// Silence after which an agent is marked unreachable (no new launches on it), in ms.
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_AGENT_UNREACHABLE_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub agent_unreachable_ms: u64,
    /// Silence after which an agent is marked lost (its tasks LOST, its resources leave the
    /// pool), in ms; counted from the last heartbeat, so it must exceed the unreachable one.
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_AGENT_LOST_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub agent_lost_ms: u64,
    /// How often the leader runs an allocation cycle, in milliseconds.
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_ALLOCATION_INTERVAL_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub allocation_interval_ms: u64,
    /// How long an offer stays valid before it is rescinded and offered again, in milliseconds
    /// (at most a day: resources held longer by an idle framework are lost to everyone else).
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_OFFER_TTL_MS", default_value_t = fullerene_master::offers::DEFAULT_OFFER_TTL_MS, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub offer_ttl_ms: u64,
    /// How long a reservation's jobs must be short of what the plan guarantees them, with no
    /// agent free enough to hold one of their tasks, before the leader kills best-effort tasks
    /// for them (where a task of theirs then fits, newest first; then tasks other reservations'
    /// jobs run beyond their own stage's allocation, for a stage the plan gives bundles now),
    /// in seconds. Tasks that end
    /// within it free the capacity without a kill.
    #[arg(long, value_name = "SECS", env = "FULLERENE_MASTER_RESERVATION_GRACE_SECS", default_value_t = fullerene_master::core::DEFAULT_RESERVATION_GRACE.as_secs(), value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub reservation_grace_secs: u64,
    /// Admission control: while this many of the leader's writes wait to commit and apply, it
    /// refuses accepts (Unavailable, the offers taken back for a later cycle), so that an
    /// overloaded leader keeps its commit latency and heartbeats in bounds instead of
    /// queueing until the group fails over.
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_ACCEPT_BACKLOG_LIMIT", default_value_t = fullerene_master::core::DEFAULT_ACCEPT_BACKLOG_LIMIT as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub accept_backlog_limit: u64,
    /// Calls per second one framework principal (or frames one agent) may send this master,
    /// on average; a framework's calls past it are refused (RateLimited, saying when to
    /// retry), an agent's are slowed down. Counted per certificate across its connections.
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_CALLS_PER_SECOND", default_value_t = ClientLimits::default().calls_per_second, value_parser = clap::value_parser!(u32).range(1..))]
    pub calls_per_second: u32,
    /// Calls one principal may send at once above `--calls-per-second`.
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_CALL_BURST", default_value_t = ClientLimits::default().call_burst, value_parser = clap::value_parser!(u32).range(1..))]
    pub call_burst: u32,
    /// Connections one framework's or agent's certificate may hold open to this master; more
    /// are closed at once with the reason.
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_CONNECTIONS_PER_CERTIFICATE", default_value_t = ClientLimits::default().connections_per_certificate, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections_per_certificate: u32,
    /// Agent shards: each allocation cycle plans them concurrently (on up to as many threads
    /// as the machine has cores, off the node loop) from one snapshot and commits them in
    /// order. One shard plans the cycle exactly as one sequential pass would; more use more
    /// cores on large clusters (see the README's "Performance").
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_ALLOCATOR_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub allocator_shards: u64,
    /// How far launches may overbook an agent's disk and network bandwidth, as a fraction of
    /// its total (Graphene §5). Part of the replicated settings: used when `--bootstrap`
    /// creates the group, ignored afterwards. Keep the agents' `--overbook-allowance` equal.
    #[arg(long, value_name = "FRACTION", default_value_t = fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE, value_parser = parse_allowance)]
    pub overbook_allowance: f64,
    /// How long an operator request waits for a commit or a read confirmation, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_ms: u64,
    /// How many recent events this master keeps for `GET /events` and `fullerene events`
    /// (a few hundred bytes each); a client asking for older ones is told they are gone.
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_EVENTS_KEPT", default_value_t = fullerene_master::state::events::DEFAULT_EVENTS_KEPT as u64, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub events_kept: u64,
    /// Finished tasks the cluster keeps per framework (`fullerene tasks --all`, `/tasks?all=true`);
    /// 0 keeps none. Part of the replicated settings: used when `--bootstrap` creates the
    /// group, ignored afterwards.
    #[arg(long, value_name = "N", env = "FULLERENE_MASTER_HISTORY_TASKS_PER_FRAMEWORK", default_value_t = fullerene_master::state::HistoryLimits::DEFAULT.tasks_per_framework)]
    pub history_tasks_per_framework: u32,
    /// How long the cluster keeps a finished task after it ended, in milliseconds (default 24
    /// hours). Part of the replicated settings, like `--history-tasks-per-framework`.
    #[arg(long, value_name = "MS", env = "FULLERENE_MASTER_HISTORY_WINDOW_MS", default_value_t = fullerene_master::state::HistoryLimits::DEFAULT.window_ms, value_parser = clap::value_parser!(u64).range(1..))]
    pub history_window_ms: u64,
    /// Never fsync the Raft log (etcd's flag of the same name; for benchmarks compared with
    /// systems run the same way). Writes still reach the operating system in order, so a
    /// master process that crashes loses nothing, but a machine that crashes can lose
    /// acknowledged commands and let this master vote twice in a term. Never in production.
    #[arg(long, env = "FULLERENE_MASTER_UNSAFE_NO_FSYNC")]
    pub unsafe_no_fsync: bool,
    #[command(flatten)]
    pub quic: super::QuicArgs,
}

fn parse_peer(text: &str) -> Result<(u64, SocketAddr), String> {
    let (id, addr) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not ID=HOST:PORT"))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|e| format!("`{id}` is not a master id: {e}"))?;
    if id == 0 {
        return Err("master ids start at 1".to_string());
    }
    Ok((id, super::parse_host_port(addr)?))
}

/// The CA, certificate and key paths: explicit flags, else the `--certs-dir` layout.
pub(crate) fn tls_paths(
    certs: Option<&Path>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    role: Role,
    n: usize,
) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let layout = certs.map(|dir| (dir.join("ca.pem"), CertPaths::of_member(dir, role, n)));
    let pick = |given: Option<PathBuf>, from_layout: Option<PathBuf>, what: &str| {
        given.or(from_layout).with_context(|| {
            format!("no {what} given: pass --certs-dir DIR (a `fullerene certs init` directory) or --{what} FILE")
        })
    };
    Ok((
        pick(ca, layout.as_ref().map(|(ca, _)| ca.clone()), "ca")?,
        pick(cert, layout.as_ref().map(|(_, p)| p.cert.clone()), "cert")?,
        pick(key, layout.as_ref().map(|(_, p)| p.key.clone()), "key")?,
    ))
}

/// Runs `fullerene master` until SIGTERM/ctrl-c or until this master is removed.
pub(crate) fn run(args: MasterArgs) -> Result<()> {
    let mut members = BTreeMap::new();
    for (id, addr) in &args.peers {
        if members.insert(*id, *addr).is_some() {
            bail!("--peers names master {id} twice");
        }
    }
    if !args.join && !members.contains_key(&args.id) {
        bail!(
            "--peers must include this master ({}={}), or pass --join for a master added later",
            args.id,
            args.listen
        );
    }
    members.entry(args.id).or_insert(args.listen);
    let id_usize = usize::try_from(args.id).context("master id too large")?;
    let (ca, cert, key) = tls_paths(
        args.certs.as_deref(),
        args.ca.clone(),
        args.cert.clone(),
        args.key.clone(),
        Role::Master,
        id_usize,
    )?;
    let tls = TlsMaterial::load(&ca, &cert, &key).context("cannot load the TLS material")?;

    let mut node_config = NodeConfig::new(args.id);
    node_config.tick_interval = Duration::from_millis(args.tick_ms);
    node_config.heartbeat_ticks = usize::try_from(args.heartbeat_ticks)?;
    node_config.election_ticks = usize::try_from(args.election_ticks)?;
    node_config.snapshot_interval = args.snapshot_interval_entries;
    node_config.snapshot_entries_per_record = args.snapshot_entries_per_record;
    node_config.log_retention = args.log_retention_entries;
    // The shell's writer thread makes the log durable: the node loop never waits for an fsync.
    node_config.persistence = Persistence::Offloaded;
    // A read waits as long as an operator request may (rounded up to whole ticks).
    node_config.read_timeout_ticks =
        usize::try_from(args.request_timeout_ms.div_ceil(args.tick_ms).max(1))?;
    if node_config.election_ticks <= node_config.heartbeat_ticks {
        bail!("--election-ticks must be larger than --heartbeat-ticks");
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The recorder must be installed before the node registers its gauges and counters:
    // `metrics` binds each handle to the recorder present when it is created.
    let metrics = match args.http_listen {
        Some(_) => {
            let _entered = runtime.enter();
            Some(
                server::http::install_recorder()
                    .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?,
            )
        }
        None => None,
    };

    tracing::info!(
        master = args.id,
        listen = %args.listen,
        http = %args.http_listen.map_or_else(|| "off".to_string(), |addr| addr.to_string()),
        data_dir = %args.data_dir.display(),
        "master starting"
    );
    let mut store = RocksStorage::open(&args.data_dir).with_context(|| {
        format!(
            "master {} refuses to start on data directory {}",
            args.id,
            args.data_dir.display()
        )
    })?;
    if args.unsafe_no_fsync {
        tracing::warn!(master = args.id, "--unsafe-no-fsync: the Raft log is never synced; a machine crash can lose acknowledged commands");
        store.set_unsafe_no_fsync(true);
    }
    let fresh = store.latest_snapshot().get_metadata().index == 0
        && store.hard_state() == Default::default();
    if fresh && !args.join && !args.bootstrap {
        bail!(
            "master {} has no state in {}: pass --bootstrap to create a new group (only when the \
             group is first set up), or --join to be added to a running one with \
             `fullerene cluster add-master`; a master that lost its data directory must rejoin, \
             never bootstrap again",
            args.id,
            args.data_dir.display()
        );
    }
    let node = if fresh && args.bootstrap {
        let voters: Vec<u64> = members.keys().copied().collect();
        tracing::info!(master = args.id, ?voters, dir = %args.data_dir.display(), "bootstrapping a new group");
        let settings = ClusterSettings {
            master_addresses: members.clone(),
            overbooking_allowance: args.overbook_allowance,
            history: fullerene_master::state::HistoryLimits {
                tasks_per_framework: args.history_tasks_per_framework,
                window_ms: args.history_window_ms,
            },
            ..ClusterSettings::default()
        };
        RaftNode::bootstrap(node_config, store, &voters, settings)
    } else {
        if fresh {
            tracing::info!(master = args.id, "starting empty; waiting to be added to the group");
        }
        RaftNode::open(node_config, store)
    }
    .with_context(|| {
        format!(
            "master {} cannot start on data directory {}",
            args.id,
            args.data_dir.display()
        )
    })?;

    if args.agent_lost_ms <= args.agent_unreachable_ms
        || args.agent_unreachable_ms <= args.agent_heartbeat_ms
    {
        bail!(
            "agent timeouts must grow: --agent-heartbeat-ms ({}) < --agent-unreachable-ms ({}) < --agent-lost-ms ({})",
            args.agent_heartbeat_ms,
            args.agent_unreachable_ms,
            args.agent_lost_ms
        );
    }
    let mut shell = ShellConfig::new(members);
    shell.request_timeout = Duration::from_millis(args.request_timeout_ms);
    shell.events_kept = usize::try_from(args.events_kept)?;
    shell.transport = args.quic.config()?;
    shell.core.http_addr = args.http_listen;
    shell.http = HttpConfig {
        plaintext: args.http_plaintext,
        tokens: args.http_tokens.clone(),
        metrics_open: args.http_metrics_open,
        view_interval: Duration::from_millis(args.http_view_interval_ms),
        max_view_tasks: usize::try_from(args.http_view_max_tasks)?,
        ..HttpConfig::default()
    };
    if args.http_plaintext {
        // Loud on purpose: the log may go unread.
        eprintln!(
            "warning: the HTTP API is served over PLAIN HTTP (--http-plaintext); bearer tokens \
             cross unencrypted"
        );
    }
    shell.client_limits = ClientLimits {
        calls_per_second: args.calls_per_second,
        call_burst: args.call_burst,
        connections_per_certificate: args.connections_per_certificate,
    };
    shell.core.allocation_interval = Duration::from_millis(args.allocation_interval_ms);
    shell.core.offer_ttl = Duration::from_millis(args.offer_ttl_ms);
    shell.core.reservation_grace = Duration::from_secs(args.reservation_grace_secs);
    shell.core.accept_backlog_limit = usize::try_from(args.accept_backlog_limit)?;
    shell.core.allocator_shards = usize::try_from(args.allocator_shards)?;
    // The shards are planned on the shell's planner threads, off the node loop.
    shell.core.allocation_planning = AllocationPlanning::Offloaded;
    shell.metrics = metrics;
    shell.core.agent_timeouts = server::AgentTimeouts {
        heartbeat_interval: Duration::from_millis(args.agent_heartbeat_ms),
        unreachable_after: Duration::from_millis(args.agent_unreachable_ms),
        lost_after: Duration::from_millis(args.agent_lost_ms),
    };
    let exit = runtime.block_on(async {
        let endpoint = Server::bind(args.listen, &tls, shell.transport.clone())
            .with_context(|| format!("cannot serve on {}", args.listen))?;
        let exit = server::serve(node, endpoint, &tls, shell, shutdown_signal()).await?;
        anyhow::Ok(exit)
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    match exit {
        MasterExit::Shutdown => tracing::info!(master = args.id, "stopped"),
        MasterExit::Removed => {
            tracing::warn!(master = args.id, "removed from the group; exiting");
            eprintln!("master {} was removed from the group; exiting", args.id);
        }
    }
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
    #[cfg(unix)]
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
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_as_id_equals_address() {
        assert_eq!(
            parse_peer("2=127.0.0.1:5051"),
            Ok((2, "127.0.0.1:5051".parse().expect("an address")))
        );
        assert!(parse_peer("0=127.0.0.1:5051").is_err());
        assert!(parse_peer("127.0.0.1:5051").is_err());
        assert!(parse_peer("x=127.0.0.1:5051").is_err());
        assert!(
            parse_peer("1=localhost").is_err(),
            "a host name needs its port"
        );
        let (id, addr) = parse_peer("3=localhost:5053").expect("a host name");
        assert_eq!((id, addr.port()), (3, 5053));
        assert!(addr.ip().is_loopback());
    }

    #[test]
    fn certificate_paths_follow_the_certs_layout_unless_given() {
        let dir = Path::new("/etc/fullerene/certs");
        let (ca, cert, key) =
            tls_paths(Some(dir), None, None, None, Role::Master, 2).expect("paths");
        assert_eq!(ca, dir.join("ca.pem"));
        assert_eq!(cert, dir.join("master-2.pem"));
        assert_eq!(key, dir.join("master-2-key.pem"));
        let own = PathBuf::from("/tmp/mine.pem");
        let (_, cert, _) =
            tls_paths(Some(dir), None, Some(own.clone()), None, Role::Master, 2).expect("paths");
        assert_eq!(cert, own);
        assert!(tls_paths(None, None, None, None, Role::Master, 2).is_err());
    }
}
