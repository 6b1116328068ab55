//! `fullerene bench raft`: the replicated masters' Raft under load and under leader kills,
//! optionally side by side with etcd.
//!
//! It starts three (by default) `fullerene master` processes on loopback (this very binary)
//! and measures, for each client count of `--clients`:
//!
//! * committed commands per second, with that many concurrent clients, each on its own
//!   connection sending one command at a time (an operator's `SetGroupWeight`, a replicated
//!   command answered once committed and applied): Raft batches concurrent proposals into one
//!   synced write, so the rate grows with the clients until a core or the disk is full;
//! * the commit latency each client sees (p50, p99, max).
//!
//! Then, over `--kills` SIGKILLs of the leader (restarted on its data directory after each),
//! the failover time in two ways:
//!
//! * **connected client**: a client already connected to the leader and writing when it is
//!   killed, which finds the new leader by itself (its transport notices the silent connection,
//!   the survivors redirect it): the time from the SIGKILL to the first write that commits
//!   afterwards, what a user of the cluster sees;
//! * **informed client**: a client told which member died, which polls the survivors every
//!   5 ms from the kill on: the time until a survivor commits its write, nearer the servers'
//!   own failover.
//!
//! With `--compare-etcd`, the masters are stopped and a 3-member etcd (the `etcd` on the PATH;
//! Debian's `etcd-server`) is measured the same way: mutual TLS on both its client and its
//! peer ports with certificates from the same cluster CA, the same fsync policy, the same Raft
//! timing, the same client counts, payload size, durations and kills, clients of equal
//! behaviour; both are printed side by side with the ratio fullerene/etcd.
//!
//! **Payload**: `--payload-bytes` is the size of the command each write replicates, before
//! each system's own envelope: for the masters, the encoded `Command::SetGroupWeight` (the
//! bytes of its Raft entry; the group name is padded to make it exactly that size, so at most
//! 139 bytes, a group name being at most 128); for etcd, the encoded `PutRequest` (key
//! `bench/<client>`, value padded to make it exactly that size), which etcd wraps in its
//! `InternalRaftRequest` with a request header of a few bytes.
//!
//! **Timing**: the masters run `--tick-ms` (25), heartbeat every `--heartbeat-ticks` (2)
//! ticks, and campaign after a random timeout in [`--election-ticks`, 2 × that) ticks (10:
//! 250–500 ms). etcd's Raft tick is its heartbeat interval, so it runs
//! `--heartbeat-interval` = tick × heartbeat ticks (50 ms) and `--election-timeout` = tick ×
//! election ticks (250 ms), which etcd's Raft randomises in [250, 500) ms in whole heartbeat
//! intervals; both sides run pre-vote and check-quorum.
//!
//! **fsync**: `--fsync always` (the default) syncs each batch of log entries before it counts
//! as written, on both; `--fsync never` passes `--unsafe-no-fsync` to the masters and to etcd.
//!
//! **Clients**: every client talks to the leader (the masters' clients are redirected to it;
//! etcd's are connected to it, since a follower would forward each put to it). A throughput
//! client gives up on a silent server after 5 s on both sides: the masters run with a QUIC
//! idle timeout of 5 s (keep-alives every second, as `fullerene bench launch` runs them) and
//! etcd's client gives up on an attempt after 5 s. With the masters' default of 500 ms, a
//! client starved of CPU for half a second (1,024 of them share this process and the cores
//! with the servers) found its connection timed out and reconnected, where etcd's TCP
//! connection simply waited. A failover client gives up after 500 ms on both sides: its own
//! QUIC idle timeout is the default 500 ms (QUIC keeps the smaller of the two sides'), and
//! etcd's client gives up on an attempt after the same 500 ms (without it, a put a follower
//! forwards to a dead leader would wait for etcd's request timeout of seconds). Both pause
//! 5 ms after a round of members without an answer. All of them run in this one process, on
//! the same cores as the servers: on a small machine the clients' CPU (QUIC and TLS in user
//! space for the masters, TCP in the kernel for etcd) is part of both figures. Every client
//! has made one write before the clock starts, so that the figures are those of a steady
//! load, not of a storm of connections (the masters refuse handshakes beyond 256 at once;
//! those clients retry).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use fullerene_chaos::bench::launch::relaxed_transport;
use fullerene_chaos::bench::probe::load_average;
use fullerene_chaos::bench::{master_flags, wait_for_healthy_within};
use fullerene_chaos::etcd::{
    etcd_on_path, etcd_version, grpc::put_request_len, EtcdSettings, EtcdWriter, LeaderSeeker,
    LocalEtcd, INSTALL_HINT,
};
use fullerene_chaos::LocalMasters;
use fullerene_client::OperatorClient;
use fullerene_master::state::Command;
use fullerene_proto::messages::{OperatorRequest, OperatorResponse};
use fullerene_sim::metrics::percentile_nearest_rank;
use fullerene_transport::Role;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::sync::{mpsc, watch, Barrier};

use crate::output::{table, JsonOutput};

/// Flags of `fullerene bench raft`.
#[derive(Args, Debug)]
pub(crate) struct RaftBenchArgs {
    /// Members in each group (the masters, and etcd's with --compare-etcd).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub masters: u64,
    /// Client counts to measure, one after the other: concurrent clients, each with its own
    /// connection, sending one command at a time.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,16,256,1024",
        value_name = "N,...",
        value_parser = clap::value_parser!(u64).range(1..=4096)
    )]
    pub clients: Vec<u64>,
    /// Seconds of measured load per client count (after the warm-up).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_secs: u64,
    /// Seconds of load before measuring, per client count.
    #[arg(long, value_name = "SECS", default_value_t = 2)]
    pub warmup_secs: u64,
    /// Leader kills to time (0 skips the failover part).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub kills: u64,
    /// Size of each replicated command in bytes (see the module documentation: the masters'
    /// encoded command, etcd's encoded PutRequest).
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub payload_bytes: usize,
    /// Whether the log is synced before a write counts: `never` passes --unsafe-no-fsync to
    /// the masters and to etcd.
    #[arg(long, value_enum, default_value_t = Fsync::Always)]
    pub fsync: Fsync,
    /// Raft tick of the masters, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    pub tick_ms: u64,
    /// Ticks between the leader's heartbeats.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_ticks: u64,
    /// Election timeout of the masters, in ticks (randomised in [N, 2N)).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
    pub election_ticks: u64,
    /// Measure a 3-member etcd (the `etcd` on the PATH) the same way, and print both side by
    /// side with their ratio.
    #[arg(long)]
    pub compare_etcd: bool,
    /// Keep the certificates, data and logs in this directory (default: a temporary
    /// directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Whether the Raft log is synced to disk before a write counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Fsync {
    /// Every batch of log entries is synced before it is acknowledged.
    Always,
    /// Nothing is synced (`--unsafe-no-fsync`): a crash of every member loses writes.
    Never,
}

impl Fsync {
    fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Never => "never (--unsafe-no-fsync)",
        }
    }
}

/// How long a throughput client waits for one write (the masters' client's deadline, and
/// etcd's client's attempt timeout); a write past it counts as failed.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// How long a failover client keeps trying one write.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(30);

/// How long etcd's failover client waits on one member before trying the next: the masters'
/// transport idle timeout, after which their client gives up on a silent master.
const ETCD_ATTEMPT_TIMEOUT: Duration = fullerene_transport::DEFAULT_IDLE_TIMEOUT;

/// The failover clients' pause after a round of members without an answer, and the informed
/// client's polling interval.
const FAILOVER_POLL: Duration = Duration::from_millis(5);

/// How long the group may take to be healthy (a leader, every member caught up).
const HEALTHY_WITHIN: Duration = Duration::from_secs(60);

/// The figures `bench raft` prints.
#[derive(Serialize, Debug)]
struct RaftBenchReport {
    members: u64,
    payload_bytes: usize,
    fsync: Fsync,
    timing: Timing,
    duration_secs: u64,
    warmup_secs: u64,
    /// /proc/loadavg's three figures when the bench started and when it ended.
    load_average_start: Option<[f64; 3]>,
    load_average_end: Option<[f64; 3]>,
    /// Fullerene's masters first, then etcd with --compare-etcd.
    systems: Vec<SystemReport>,
    /// fullerene / etcd, with --compare-etcd.
    comparison: Option<Comparison>,
}

/// The Raft timing both sides run.
#[derive(Serialize, Debug, Clone, Copy)]
struct Timing {
    tick_ms: u64,
    heartbeat_ms: u64,
    /// The masters' election timeout is random in [this, 2 × this).
    election_timeout_ms: u64,
    /// etcd's `--heartbeat-interval` and `--election-timeout`.
    etcd_heartbeat_interval_ms: u64,
    etcd_election_timeout_ms: u64,
}

/// One system's figures.
#[derive(Serialize, Debug)]
struct SystemReport {
    system: &'static str,
    version: String,
    fsync: &'static str,
    throughput: Vec<ThroughputRow>,
    failover: FailoverReport,
}

/// Commits and latency at one client count.
#[derive(Serialize, Debug, Clone)]
struct ThroughputRow {
    clients: u64,
    measured_secs: f64,
    commits: u64,
    commits_per_sec: f64,
    commit_p50_ms: f64,
    commit_p99_ms: f64,
    commit_max_ms: f64,
    failed_requests: u64,
    /// Why the failed requests failed: each distinct error and how many times it came.
    failure_reasons: BTreeMap<String, u64>,
}

/// Leader kills and the time until a write commits again.
#[derive(Serialize, Debug, Default)]
struct FailoverReport {
    kills: Vec<KillSample>,
    /// A client connected to the leader and writing when it was killed, finding the new
    /// leader by itself.
    connected_client: Spread,
    /// A client told which member died, polling the survivors every 5 ms.
    informed_client: Spread,
}

/// p50, p99 and max of a set of times, in milliseconds (`None` without samples).
#[derive(Serialize, Debug, Default, Clone, Copy)]
struct Spread {
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

impl Spread {
    /// p50, p99 and max, in this order.
    fn quantiles(self) -> [Option<f64>; 3] {
        [self.p50_ms, self.p99_ms, self.max_ms]
    }

    fn of(mut values: Vec<f64>) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_by(f64::total_cmp);
        Spread {
            p50_ms: Some(percentile_nearest_rank(&values, 50.0)),
            p99_ms: Some(percentile_nearest_rank(&values, 99.0)),
            max_ms: values.last().copied(),
        }
    }
}

/// One leader kill.
#[derive(Serialize, Debug)]
struct KillSample {
    killed: u64,
    /// The member that answered the connected client's first write after the kill (for etcd
    /// a follower may answer: it forwards puts to the leader).
    answered_by: Option<u64>,
    /// From the SIGKILL to the first write of the connected client that committed.
    connected_client_ms: f64,
    /// From the SIGKILL to the informed client's first committed write.
    informed_client_ms: f64,
}

/// fullerene / etcd.
#[derive(Serialize, Debug)]
struct Comparison {
    throughput: Vec<RatioRow>,
    failover_connected_p99_ratio: Option<f64>,
    failover_informed_p99_ratio: Option<f64>,
}

/// fullerene / etcd at one client count (`None` where etcd's figure is zero).
#[derive(Serialize, Debug)]
struct RatioRow {
    clients: u64,
    commits_per_sec_ratio: Option<f64>,
    p50_ratio: Option<f64>,
    p99_ratio: Option<f64>,
}

/// Runs `fullerene bench raft`.
pub(crate) fn run(args: RaftBenchArgs, json: &JsonOutput) -> Result<()> {
    let binary = std::env::current_exe().context("cannot find this executable")?;
    // Refuse what cannot run before starting anything.
    if args.clients.is_empty() {
        bail!("--clients needs at least one count");
    }
    if args.kills > 0 && args.masters < 3 {
        bail!(
            "leader kills need at least 3 members, so that a majority survives (or pass --kills 0)"
        );
    }
    group_for(0, args.payload_bytes)?;
    etcd_value_len(args.payload_bytes)?;
    let timing = timing_of(&args);
    let etcd_binary = if args.compare_etcd {
        let Some(binary) = etcd_on_path() else {
            bail!("--compare-etcd: {INSTALL_HINT}");
        };
        if let Some(problem) = etcd_settings(&args, &timing).problem() {
            bail!("--compare-etcd with this timing: {problem} (raise --election-ticks)");
        }
        Some(binary)
    } else {
        None
    };
    let most_clients = args.clients.iter().copied().max().unwrap_or(1);
    let open_files = fullerene_chaos::raise_open_file_limit()?;
    if open_files < 2 * most_clients + 256 {
        eprintln!(
            "warning: {open_files} open files allowed, {most_clients} clients may need more \
             (raise `ulimit -n`)"
        );
    }
    // Removed at the end, when no --dir was given.
    let temporary: tempfile::TempDir;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
            temporary.path().to_path_buf()
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let load_average_start = load_average();
    let systems = runtime.block_on(async {
        tokio::select! {
            result = measure_all(&args, &timing, binary, etcd_binary, &dir) => result,
            _ = tokio::signal::ctrl_c() => {
                Err(anyhow!("interrupted; every process the bench started is stopped"))
            }
        }
    });
    // Client tasks still running hold connections; stop them before the report.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let systems = systems?;
    let comparison = match systems.as_slice() {
        [ours, etcd] => Some(compare(ours, etcd)),
        _ => None,
    };
    let report = RaftBenchReport {
        members: args.masters,
        payload_bytes: args.payload_bytes,
        fsync: args.fsync,
        timing,
        duration_secs: args.duration_secs,
        warmup_secs: args.warmup_secs,
        load_average_start,
        load_average_end: load_average(),
        systems,
        comparison,
    };
    json.emit(&report, || render(&report))
}

fn timing_of(args: &RaftBenchArgs) -> Timing {
    let heartbeat_ms = args.tick_ms * args.heartbeat_ticks;
    let election_timeout_ms = args.tick_ms * args.election_ticks;
    Timing {
        tick_ms: args.tick_ms,
        heartbeat_ms,
        election_timeout_ms,
        etcd_heartbeat_interval_ms: heartbeat_ms,
        etcd_election_timeout_ms: election_timeout_ms,
    }
}

fn etcd_settings(args: &RaftBenchArgs, timing: &Timing) -> EtcdSettings {
    EtcdSettings {
        members: args.masters,
        heartbeat_ms: timing.etcd_heartbeat_interval_ms,
        election_timeout_ms: timing.etcd_election_timeout_ms,
        fsync: args.fsync == Fsync::Always,
    }
}

/// Measures the masters, then (when `etcd` is given) etcd; each group is stopped before the
/// next starts, so that they never share the cores.
async fn measure_all(
    args: &RaftBenchArgs,
    timing: &Timing,
    binary: PathBuf,
    etcd_binary: Option<PathBuf>,
    dir: &Path,
) -> Result<Vec<SystemReport>> {
    let mut reports = Vec::new();
    let mut masters = LocalMasters::prepare(
        binary,
        args.masters,
        args.masters,
        0,
        Some(dir.join("fullerene")),
    )?;
    masters.extra_args = master_flags(
        &relaxed_transport(),
        &[
            "--tick-ms".to_string(),
            args.tick_ms.to_string(),
            "--heartbeat-ticks".to_string(),
            args.heartbeat_ticks.to_string(),
            "--election-ticks".to_string(),
            args.election_ticks.to_string(),
        ],
    );
    if args.fsync == Fsync::Never {
        masters.extra_args.push("--unsafe-no-fsync".to_string());
    }
    // Masters are started and restarted from this thread (block_on runs here), so they die
    // with the bench even if it is killed outright.
    masters.die_with_parent = true;
    masters.start_founders()?;
    let certs = masters.certs_dir();
    let operator = masters.tls_of(Role::Operator, 1)?;
    let version = format!("fullerene {}", env!("CARGO_PKG_VERSION"));
    reports.push(measure_system(args, System::Fullerene(masters), version).await?);

    if let Some(etcd_binary) = etcd_binary {
        let version = etcd_version(&etcd_binary)?;
        let mut etcd = LocalEtcd::prepare(
            etcd_binary,
            &dir.join("etcd"),
            &certs,
            &operator,
            etcd_settings(args, timing),
        )?;
        etcd.die_with_parent = true;
        etcd.start()?;
        reports.push(measure_system(args, System::Etcd(etcd), version).await?);
    }
    Ok(reports)
}

/// Measures `system`, then stops it (dropping it kills its processes); an error comes with
/// the last lines of its members' logs.
async fn measure_system(
    args: &RaftBenchArgs,
    mut system: System,
    version: String,
) -> Result<SystemReport> {
    let (throughput, failover) = measure(args, &mut system)
        .await
        .map_err(|error| anyhow!("{error:#}\n{}", system.logs(20)))?;
    Ok(SystemReport {
        system: system.name(),
        version,
        fsync: args.fsync.name(),
        throughput,
        failover,
    })
}

/// Every client count, then the kills, on one group.
async fn measure(
    args: &RaftBenchArgs,
    system: &mut System,
) -> Result<(Vec<ThroughputRow>, FailoverReport)> {
    system
        .wait_healthy()
        .await
        .with_context(|| format!("{} did not elect a leader", system.name()))?;
    let mut rows = Vec::new();
    for &clients in &args.clients {
        let row = throughput(args, system, clients)
            .await
            .with_context(|| format!("{} with {clients} clients", system.name()))?;
        rows.push(row);
    }
    let failover = failover(args, system)
        .await
        .with_context(|| format!("{}: leader kills", system.name()))?;
    Ok((rows, failover))
}

/// A group under test: the masters or etcd.
enum System {
    Fullerene(LocalMasters),
    Etcd(LocalEtcd),
}

impl System {
    fn name(&self) -> &'static str {
        match self {
            System::Fullerene(_) => "fullerene",
            System::Etcd(_) => "etcd",
        }
    }

    /// Every member's client address, by member number.
    fn addrs(&self) -> BTreeMap<u64, SocketAddr> {
        match self {
            System::Fullerene(masters) => masters.addrs.clone(),
            System::Etcd(etcd) => etcd.client_addrs().clone(),
        }
    }

    /// Waits for a leader with every member caught up; the leader's number.
    async fn wait_healthy(&mut self) -> Result<u64> {
        match self {
            System::Fullerene(masters) => {
                let members = masters.addrs.len();
                let ids: Vec<u64> = masters.addrs.keys().copied().collect();
                let mut probe = masters.operator_client(&ids, Duration::from_secs(5))?;
                let status =
                    wait_for_healthy_within(&mut probe, members, HEALTHY_WITHIN, || Ok(())).await?;
                status
                    .leader
                    .map(|leader| leader.id.0)
                    .ok_or_else(|| anyhow!("no leader"))
            }
            System::Etcd(etcd) => Ok(etcd.wait_healthy(HEALTHY_WITHIN).await?),
        }
    }

    /// A client writing `payload_bytes` per command as client number `index`, trying the
    /// leader first; `failover` clients pause only briefly between rounds of members and try
    /// for longer.
    fn writer(
        &self,
        index: u64,
        leader: u64,
        payload_bytes: usize,
        failover: bool,
    ) -> Result<Writer> {
        let addrs = self.addrs();
        let members: Arc<BTreeMap<SocketAddr, u64>> =
            Arc::new(addrs.iter().map(|(id, addr)| (*addr, *id)).collect());
        // The leader first, then the others.
        let mut order: Vec<u64> = vec![leader];
        order.extend(addrs.keys().copied().filter(|id| *id != leader));
        match self {
            System::Fullerene(masters) => {
                let deadline = if failover {
                    FAILOVER_DEADLINE
                } else {
                    WRITE_DEADLINE
                };
                let client = if failover {
                    masters
                        .operator_client(&order, deadline)?
                        .with_retry_pause(FAILOVER_POLL)
                } else {
                    masters.operator_client_with(&order, deadline, relaxed_transport())?
                };
                Ok(Writer::Fullerene {
                    client: Box::new(client),
                    group: group_for(index, payload_bytes)?,
                    written: 0,
                    members,
                })
            }
            System::Etcd(etcd) => {
                let endpoints: Vec<SocketAddr> = order
                    .iter()
                    .filter_map(|id| addrs.get(id).copied())
                    .collect();
                let writer = if failover {
                    EtcdWriter::new(
                        endpoints,
                        etcd.client_tls(),
                        ETCD_ATTEMPT_TIMEOUT,
                        FAILOVER_POLL,
                        FAILOVER_DEADLINE,
                    )
                } else {
                    EtcdWriter::new(
                        endpoints,
                        etcd.client_tls(),
                        WRITE_DEADLINE,
                        Duration::from_millis(100),
                        WRITE_DEADLINE,
                    )
                };
                Ok(Writer::Etcd {
                    writer,
                    key: etcd_key(index).into_bytes(),
                    value: vec![b'x'; etcd_value_len(payload_bytes)?],
                    members,
                })
            }
        }
    }

    fn kill(&mut self, member: u64) {
        match self {
            System::Fullerene(masters) => masters.kill(member),
            System::Etcd(etcd) => etcd.kill(member),
        }
    }

    fn restart(&mut self, member: u64) -> Result<()> {
        match self {
            System::Fullerene(masters) => masters.spawn(member, false)?,
            System::Etcd(etcd) => etcd.spawn(member)?,
        }
        Ok(())
    }

    /// A client that knows `killed` died and will poll the survivors for a new leader.
    fn informed_client(&self, killed: u64, payload_bytes: usize) -> Result<InformedClient> {
        let addrs = self.addrs();
        let survivors: Vec<u64> = addrs.keys().copied().filter(|id| *id != killed).collect();
        match self {
            System::Fullerene(masters) => {
                let mut client = masters
                    .operator_client(&survivors, FAILOVER_DEADLINE)?
                    .with_retry_pause(FAILOVER_POLL);
                // It knows which master died, so it does not follow the survivors' stale
                // redirects to it.
                if let Some(dead) = addrs.get(&killed) {
                    client.avoid(*dead, Duration::from_secs(60));
                }
                Ok(InformedClient::Fullerene {
                    client: Box::new(client),
                    group: group_for(u64::from(u16::MAX), payload_bytes)?,
                })
            }
            System::Etcd(etcd) => Ok(InformedClient::Etcd {
                seeker: etcd.leader_seeker(
                    &survivors,
                    ETCD_ATTEMPT_TIMEOUT,
                    FAILOVER_POLL,
                    FAILOVER_DEADLINE,
                ),
                key: etcd_key(u64::from(u16::MAX)).into_bytes(),
                value: vec![b'x'; etcd_value_len(payload_bytes)?],
            }),
        }
    }

    fn logs(&self, lines: usize) -> String {
        match self {
            System::Fullerene(masters) => masters.logs(lines),
            System::Etcd(etcd) => etcd.logs(lines),
        }
    }
}

/// One client writing commands of the benchmark's payload size, one at a time.
enum Writer {
    Fullerene {
        // Boxed: a client with its QUIC endpoint is many times the size of etcd's writer.
        client: Box<OperatorClient>,
        group: String,
        written: u64,
        members: Arc<BTreeMap<SocketAddr, u64>>,
    },
    Etcd {
        writer: EtcdWriter,
        key: Vec<u8>,
        value: Vec<u8>,
        members: Arc<BTreeMap<SocketAddr, u64>>,
    },
}

impl Writer {
    /// Writes one command and waits for its commit; the member that answered.
    async fn write(&mut self) -> Result<Option<u64>, String> {
        match self {
            Writer::Fullerene {
                client,
                group,
                written,
                members,
            } => {
                *written += 1;
                let request = OperatorRequest::SetGroupWeight {
                    group: group.clone(),
                    // Every weight encodes to the same 8 bytes.
                    weight: (*written % 1000) as f64 + 1.0,
                };
                match client.request(&request).await {
                    Ok(OperatorResponse::Done) => Ok(client
                        .last_master()
                        .and_then(|addr| members.get(&addr).copied())),
                    Ok(other) => Err(format!("answered {other:?}")),
                    Err(error) => Err(error.to_string()),
                }
            }
            Writer::Etcd {
                writer,
                key,
                value,
                members,
            } => match writer.put(key, value).await {
                Ok((addr, _header)) => Ok(members.get(&addr).copied()),
                Err(error) => Err(error.to_string()),
            },
        }
    }

    /// Sends the next writes to member `addr` (etcd's client; the masters' client follows
    /// redirects to the leader by itself).
    fn aim_at(&mut self, addr: SocketAddr) {
        if let Writer::Etcd { writer, .. } = self {
            writer.aim_at(addr);
        }
    }
}

/// A client told which member died (see [`System::informed_client`]).
enum InformedClient {
    Fullerene {
        client: Box<OperatorClient>,
        group: String,
    },
    Etcd {
        seeker: LeaderSeeker,
        key: Vec<u8>,
        value: Vec<u8>,
    },
}

impl InformedClient {
    /// Writes until a survivor commits; when it did.
    async fn run(self) -> Result<Instant> {
        match self {
            InformedClient::Fullerene { mut client, group } => {
                let request = OperatorRequest::SetGroupWeight { group, weight: 1.0 };
                match client.request(&request).await {
                    Ok(OperatorResponse::Done) => Ok(Instant::now()),
                    other => bail!("no survivor took a write: {other:?}"),
                }
            }
            InformedClient::Etcd { seeker, key, value } => {
                seeker.put(&key, &value).await?;
                Ok(Instant::now())
            }
        }
    }
}

/// One write's outcome, as the failover writer reports it.
struct Ack {
    at: Instant,
    answered_by: Option<u64>,
}

/// `clients` concurrent clients for the warm-up and the measured seconds.
async fn throughput(
    args: &RaftBenchArgs,
    system: &mut System,
    clients: u64,
) -> Result<ThroughputRow> {
    let leader = system.wait_healthy().await?;
    let spinner = phase_bar(
        system.name(),
        clients,
        args.warmup_secs + args.duration_secs,
    );
    spinner.set_message("connecting");
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(clients as usize + 1));
    let mut tasks = Vec::new();
    for index in 0..clients {
        let mut writer = system.writer(index, leader, args.payload_bytes, false)?;
        let stop = Arc::clone(&stop);
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            // Every client has made a write before the clock starts, so that the figures are
            // those of a steady load and not of a connection storm (the masters accept a
            // bounded number of handshakes at once and refuse the rest, which retry).
            let connected = first_write(&mut writer).await;
            barrier.wait().await;
            connected?;
            let mut samples: Vec<(Instant, Duration)> = Vec::new();
            let mut failures: Vec<(Instant, String)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                match writer.write().await {
                    Ok(_) => samples.push((sent, sent.elapsed())),
                    Err(reason) => failures.push((sent, reason)),
                }
            }
            Ok::<_, String>((samples, failures))
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup_secs);
    let measure_until = measure_from + Duration::from_secs(args.duration_secs);
    spinner.set_message(format!("{} s warm-up", args.warmup_secs));
    while Instant::now() < measure_until {
        tokio::time::sleep(Duration::from_millis(200)).await;
        spinner.set_position(started.elapsed().as_secs());
        if Instant::now() >= measure_from {
            spinner.set_message("measuring");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    let mut failed_requests = 0u64;
    let mut failure_reasons = BTreeMap::new();
    let window = |sent: Instant| sent >= measure_from && sent < measure_until;
    for task in tasks {
        let (samples, failures) = task
            .await
            .context("a client task failed")?
            .map_err(|reason| anyhow!("a client could not make its first write: {reason}"))?;
        latencies.extend(
            samples
                .into_iter()
                .filter(|(sent, _)| window(*sent))
                .map(|(_, latency)| millis(latency)),
        );
        for (_, reason) in failures.into_iter().filter(|(sent, _)| window(*sent)) {
            failed_requests += 1;
            *failure_reasons.entry(reason).or_insert(0) += 1;
        }
    }
    spinner.finish_and_clear();
    latencies.sort_by(f64::total_cmp);
    let measured_secs = (measure_until - measure_from).as_secs_f64();
    let commits = latencies.len() as u64;
    Ok(ThroughputRow {
        clients,
        measured_secs,
        commits,
        commits_per_sec: commits as f64 / measured_secs,
        commit_p50_ms: percentile_nearest_rank(&latencies, 50.0),
        commit_p99_ms: percentile_nearest_rank(&latencies, 99.0),
        commit_max_ms: latencies.last().copied().unwrap_or(0.0),
        failed_requests,
        failure_reasons,
    })
}

/// Writes until one write commits, for at most [`HEALTHY_WITHIN`]; the last error if none did.
async fn first_write(writer: &mut Writer) -> Result<(), String> {
    let deadline = Instant::now() + HEALTHY_WITHIN;
    loop {
        match writer.write().await {
            Ok(_) => return Ok(()),
            Err(reason) if Instant::now() >= deadline => return Err(reason),
            Err(_) => tokio::time::sleep(FAILOVER_POLL).await,
        }
    }
}

/// A progress bar over a phase's seconds.
fn phase_bar(system: &str, clients: u64, secs: u64) -> ProgressBar {
    let bar = ProgressBar::new(secs).with_style(
        ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(format!("{system}, {clients} clients"));
    bar
}

/// `--kills` leader kills, each timed by the connected and the informed client.
async fn failover(args: &RaftBenchArgs, system: &mut System) -> Result<FailoverReport> {
    if args.kills == 0 {
        return Ok(FailoverReport::default());
    }
    let bar = ProgressBar::new(args.kills).with_style(
        ProgressStyle::with_template("{prefix} leader kills {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(system.name());
    let leader = system.wait_healthy().await?;
    let addrs = system.addrs();
    // The connected client: writes one command after the other for the whole phase, in a
    // task of its own, and reports each outcome.
    let mut writer = system.writer(u64::from(u16::MAX) - 1, leader, args.payload_bytes, true)?;
    let (ack_tx, mut acks) = mpsc::unbounded_channel::<Ack>();
    let (aim_tx, mut aim) = watch::channel::<Option<SocketAddr>>(None);
    let stop = Arc::new(AtomicBool::new(false));
    let writing = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if aim.has_changed().unwrap_or(false) {
                    if let Some(addr) = *aim.borrow_and_update() {
                        writer.aim_at(addr);
                    }
                }
                let answered_by = writer.write().await.ok().flatten();
                let ack = Ack {
                    at: Instant::now(),
                    answered_by,
                };
                if ack_tx.send(ack).is_err() {
                    break;
                }
            }
        })
    };
    let mut kills = Vec::new();
    for round in 1..=args.kills {
        let leader = system
            .wait_healthy()
            .await
            .with_context(|| format!("the group did not recover before kill {round}"))?;
        let leader_addr = addrs
            .get(&leader)
            .copied()
            .ok_or_else(|| anyhow!("the leader {leader} is not a member"))?;
        aim_tx.send_replace(Some(leader_addr));
        // The client is connected to the leader and its writes commit.
        let since = Instant::now();
        next_ack(&mut acks, |ack| {
            ack.at > since && ack.answered_by == Some(leader)
        })
        .await
        .with_context(|| format!("the connected client's writes did not reach leader {leader}"))?;
        let informed = system.informed_client(leader, args.payload_bytes)?;
        system.kill(leader);
        let killed_at = Instant::now();
        let informed = tokio::spawn(informed.run());
        let ack = next_ack(&mut acks, |ack| {
            ack.at > killed_at && ack.answered_by.is_some_and(|member| member != leader)
        })
        .await
        .with_context(|| format!("no write committed after kill {round}"))?;
        let informed_at = informed
            .await
            .context("the informed client's task failed")??;
        let sample = KillSample {
            killed: leader,
            answered_by: ack.answered_by,
            connected_client_ms: millis(ack.at - killed_at),
            informed_client_ms: millis(informed_at - killed_at),
        };
        bar.set_message(format!(
            "last: connected {:.0} ms, informed {:.0} ms",
            sample.connected_client_ms, sample.informed_client_ms
        ));
        bar.inc(1);
        kills.push(sample);
        system.restart(leader)?;
    }
    stop.store(true, Ordering::Relaxed);
    writing.abort();
    bar.finish_and_clear();
    Ok(FailoverReport {
        connected_client: Spread::of(kills.iter().map(|k| k.connected_client_ms).collect()),
        informed_client: Spread::of(kills.iter().map(|k| k.informed_client_ms).collect()),
        kills,
    })
}

/// The next ack that `wanted` accepts (older ones are dropped), within the failover deadline.
async fn next_ack(
    acks: &mut mpsc::UnboundedReceiver<Ack>,
    wanted: impl Fn(&Ack) -> bool,
) -> Result<Ack> {
    let deadline = tokio::time::Instant::now() + FAILOVER_DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, acks.recv()).await {
            Ok(Some(ack)) if wanted(&ack) => return Ok(ack),
            Ok(Some(_)) => {}
            Ok(None) => bail!("the writing client stopped"),
            Err(_) => bail!("none within {FAILOVER_DEADLINE:?}"),
        }
    }
}

/// The group name that makes client `index`'s `SetGroupWeight` command encode to exactly
/// `payload_bytes` bytes.
fn group_for(index: u64, payload_bytes: usize) -> Result<String> {
    let encoded_len = |group: &str| -> Result<usize> {
        let command = Command::SetGroupWeight {
            group: group.to_string(),
            weight: 1.0,
        };
        Ok(fullerene_proto::codec::encode(&command)?.len())
    };
    let prefix = format!("bench-{index:05}-");
    let smallest = encoded_len(&prefix)?;
    let largest = smallest + fullerene_proto::limits::MAX_ID_BYTES - prefix.len();
    if payload_bytes < smallest || payload_bytes > largest {
        bail!(
            "--payload-bytes {payload_bytes}: the masters' command is between {smallest} and \
             {largest} bytes (a group name is at most {} bytes)",
            fullerene_proto::limits::MAX_ID_BYTES
        );
    }
    let group = format!("{prefix}{}", "x".repeat(payload_bytes - smallest));
    let size = encoded_len(&group)?;
    if size != payload_bytes {
        bail!(
            "a group name of {} bytes encodes to {size} bytes, not {payload_bytes}",
            group.len()
        );
    }
    Ok(group)
}

/// Client `index`'s etcd key.
fn etcd_key(index: u64) -> String {
    format!("bench/{index:05}")
}

/// The value length that makes a `PutRequest` with an [`etcd_key`] exactly `payload_bytes`.
fn etcd_value_len(payload_bytes: usize) -> Result<usize> {
    let key = etcd_key(0).len();
    (0..=payload_bytes)
        .rev()
        .find(|value| put_request_len(key, *value) == payload_bytes)
        .ok_or_else(|| {
            anyhow!(
                "--payload-bytes {payload_bytes}: etcd's put is at least {} bytes",
                put_request_len(key, 0)
            )
        })
}

/// fullerene / etcd for each figure.
fn compare(ours: &SystemReport, etcd: &SystemReport) -> Comparison {
    let ratio = |a: f64, b: f64| (b > 0.0 && a.is_finite()).then(|| a / b);
    let ratio_opt = |a: Option<f64>, b: Option<f64>| a.zip(b).and_then(|(a, b)| ratio(a, b));
    Comparison {
        throughput: ours
            .throughput
            .iter()
            .zip(&etcd.throughput)
            .map(|(a, b)| RatioRow {
                clients: a.clients,
                commits_per_sec_ratio: ratio(a.commits_per_sec, b.commits_per_sec),
                p50_ratio: ratio(a.commit_p50_ms, b.commit_p50_ms),
                p99_ratio: ratio(a.commit_p99_ms, b.commit_p99_ms),
            })
            .collect(),
        failover_connected_p99_ratio: ratio_opt(
            ours.failover.connected_client.p99_ms,
            etcd.failover.connected_client.p99_ms,
        ),
        failover_informed_p99_ratio: ratio_opt(
            ours.failover.informed_client.p99_ms,
            etcd.failover.informed_client.p99_ms,
        ),
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn render(report: &RaftBenchReport) -> String {
    let ms = |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.1} ms"));
    let times = |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.2}×"));
    let timing = &report.timing;
    let mut text = format!(
        "{} members each, {}-byte commands, fsync {}; Raft timing: tick {} ms, heartbeat {} ms, \
         election timeout random in [{}, {}) ms (etcd: --heartbeat-interval {} \
         --election-timeout {}); a silent server is given up after 5 s by throughput clients, \
         500 ms by failover clients, on both\n",
        report.members,
        report.payload_bytes,
        report
            .systems
            .iter()
            .map(|s| format!("{} {}", s.system, s.fsync))
            .collect::<Vec<_>>()
            .join(", "),
        timing.tick_ms,
        timing.heartbeat_ms,
        timing.election_timeout_ms,
        2 * timing.election_timeout_ms,
        timing.etcd_heartbeat_interval_ms,
        timing.etcd_election_timeout_ms,
    );
    for system in &report.systems {
        text.push_str(&format!("{}: {}\n", system.system, system.version));
    }
    let load = |value: Option<[f64; 3]>| {
        value.map_or_else(
            || "unknown".to_string(),
            |[one, five, fifteen]| format!("{one:.2} {five:.2} {fifteen:.2}"),
        )
    };
    text.push_str(&format!(
        "load average {} at the start, {} at the end; {} s measured per client count after {} s \
         of warm-up\n",
        load(report.load_average_start),
        load(report.load_average_end),
        report.duration_secs,
        report.warmup_secs
    ));

    let mut header = vec!["clients".to_string()];
    for system in &report.systems {
        header.extend([
            format!("{} commits/s", system.system),
            "p50".to_string(),
            "p99".to_string(),
            "failed".to_string(),
        ]);
    }
    if report.comparison.is_some() {
        header.extend(["commits/s ratio".to_string(), "p99 ratio".to_string()]);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut throughput = table(&header);
    let counts = report.systems.first().map_or(0, |s| s.throughput.len());
    for row_index in 0..counts {
        let mut row = Vec::new();
        for (n, system) in report.systems.iter().enumerate() {
            let Some(figures) = system.throughput.get(row_index) else {
                continue;
            };
            if n == 0 {
                row.push(figures.clients.to_string());
            }
            row.extend([
                format!("{:.0}", figures.commits_per_sec),
                ms(Some(figures.commit_p50_ms)),
                ms(Some(figures.commit_p99_ms)),
                figures.failed_requests.to_string(),
            ]);
        }
        if let Some(ratios) = report
            .comparison
            .as_ref()
            .and_then(|c| c.throughput.get(row_index))
        {
            row.push(times(ratios.commits_per_sec_ratio));
            row.push(times(ratios.p99_ratio));
        }
        throughput.add_row(row);
    }
    text.push_str(&format!("{throughput}\n"));
    for system in &report.systems {
        for figures in &system.throughput {
            for (reason, count) in &figures.failure_reasons {
                text.push_str(&format!(
                    "{} at {} clients: {count} failed: {reason}\n",
                    system.system, figures.clients
                ));
            }
        }
    }

    let kills = report.systems.first().map_or(0, |s| s.failover.kills.len());
    if kills > 0 {
        let mut header = vec!["leader kill -9 → a write commits again".to_string()];
        header.extend(report.systems.iter().map(|s| s.system.to_string()));
        if report.comparison.is_some() {
            header.push("ratio".to_string());
        }
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut failover = table(&header);
        let spreads = |pick: fn(&FailoverReport) -> Spread| -> Vec<Spread> {
            report.systems.iter().map(|s| pick(&s.failover)).collect()
        };
        let figures = [
            (
                "connected client (finds the new leader itself)",
                spreads(|f| f.connected_client),
            ),
            (
                "informed client (told who died, polls every 5 ms)",
                spreads(|f| f.informed_client),
            ),
        ];
        for (name, spreads) in figures {
            for (index, quantile) in ["p50", "p99", "max"].into_iter().enumerate() {
                let mut row = vec![format!("{name} {quantile}")];
                let values: Vec<Option<f64>> = spreads
                    .iter()
                    .map(|spread| spread.quantiles()[index])
                    .collect();
                row.extend(values.iter().map(|v| ms(*v)));
                if let [Some(ours), Some(etcd)] = values.as_slice() {
                    row.push(times((*etcd > 0.0).then(|| ours / etcd)));
                } else if report.comparison.is_some() {
                    row.push("-".to_string());
                }
                failover.add_row(row);
            }
        }
        text.push_str(&format!("{kills} leader kills each\n{failover}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_systems_replicate_commands_of_the_payload_size() {
        for payload in [24, 64, 139] {
            for index in [0, 7, 1023, u64::from(u16::MAX)] {
                let group = group_for(index, payload).unwrap();
                let command = Command::SetGroupWeight { group, weight: 1.0 };
                assert_eq!(
                    fullerene_proto::codec::encode(&command).unwrap().len(),
                    payload
                );
            }
            let value = etcd_value_len(payload).unwrap();
            assert_eq!(put_request_len(etcd_key(3).len(), value), payload);
        }
        assert!(group_for(0, 10).is_err());
        assert!(group_for(0, 140).is_err());
        assert!(etcd_value_len(5).is_err());
    }
}
