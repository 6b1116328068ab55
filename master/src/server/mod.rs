//! The master process's I/O shell around the sans-IO [`MasterCore`]: the QUIC server, peer
//! transport between masters, the sessions of agents, frameworks and operators, and the HTTP
//! API.
//!
//! The shell is thin on purpose (DESIGN.md, principle 1): every decision belongs to the core
//! (and, below it, to [`RaftNode`]); the shell only moves bytes and time.
//!
//! # Tasks
//!
//! - **The node loop** ([`serve`]) owns the core. It wakes on the tick interval
//!   ([`NodeConfig::tick_interval`](crate::raft_node::NodeConfig)), on inbound peer messages,
//!   on client requests and on delivery reports, drains whatever else is queued (so a burst of
//!   proposals becomes one Raft batch), runs [`MasterCore::advance`], and carries out the
//!   core's outputs.
//! - **The store writer** (a thread of its own, `store_writer`) makes the node's staged
//!   writes durable, in order, one fsync for whatever queued up meanwhile, and reports back to
//!   the node loop; the node loop never waits for the disk (see
//!   [`Persistence`](crate::raft_node::Persistence)).
//! - **The allocation planner** (a thread of its own, `planner`) plans each allocation cycle's
//!   shards from the snapshot the core takes, on as many threads as the machine has cores,
//!   and hands the plans back for the core to commit (see
//!   [`AllocationPlanning`](crate::core::AllocationPlanning)).
//! - **One sender task per peer** ([`peer`]) keeps one QUIC connection and one `Peer` session
//!   to that master, reconnecting with exponential backoff. Messages for an unreachable peer
//!   are dropped and reported with [`RaftNode::report_unreachable`]: Raft retransmits, so a
//!   queue of stale messages would only delay the fresh ones.
//! - **The accept loop** ([`sessions`]) admits connections and dispatches sessions by kind:
//!   `Peer` (masters only: the transport admits it for master certificates alone), `Operator`,
//!   `Agent` and `Framework`.
//! - **The HTTP API** ([`http`]) has its own accept loop and a task per connection. Its reads
//!   are served from the view the node loop publishes at most once per interval when asked
//!   (`http::board`), never by a round trip to the node loop per request; its writes are
//!   operator requests queued to the node loop like the QUIC operator session's.
//!
//! # Leader routing
//!
//! Any master answers. Requests only the leader serves are answered by followers with a
//! [`Redirect`](fullerene_proto::messages::Redirect) naming the leader's address, or `None`
//! while no leader is known. Reads on the leader are linearizable: they go through ReadIndex
//! (Raft thesis §6.4) and fail after a timeout (ReadIndex requests are not queued while there
//! is no leader).

pub(crate) mod event_hub;
mod files;
pub mod http;
pub mod metrics;
mod node_loop;
pub mod peer;
mod planner;
pub mod sessions;
mod store_writer;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fullerene_transport::{Client, Server, TlsMaterial, TransportConfig, TransportError};
use tokio::sync::{mpsc, watch};

use crate::core::{CoreConfig, MasterCore};
use crate::raft_node::{NodeError, RaftNode};
use crate::storage::RaftStore;

pub use crate::core::{AgentTimeouts, LeaderView, MasterExit, MembershipView};

/// How long a removed master keeps its connections open before it exits.
const REMOVED_LINGER: Duration = Duration::from_millis(500);

/// How the shell runs, besides the node's own [`NodeConfig`](crate::raft_node::NodeConfig).
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// What the core decides with: members' addresses, agent timeouts, the HTTP address it
    /// announces, the allocation cycle, offers' validity, shards.
    pub core: CoreConfig,
    /// Transport settings for outbound peer connections.
    pub transport: TransportConfig,
    /// How long an operator request may wait for its answer (a commit or a ReadIndex
    /// confirmation) before the client is told the cluster is unavailable.
    pub request_timeout: Duration,
    /// Batches of Raft messages queued per peer before new ones are dropped (and the peer
    /// reported unreachable).
    pub peer_queue: usize,
    /// Longest wait between reconnection attempts to an unreachable peer.
    pub max_reconnect_backoff: Duration,
    /// The Prometheus recorder `/metrics` renders (see [`http::install_recorder`]).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// How the HTTP API is served, when [`CoreConfig::http_addr`] says where.
    pub http: http::HttpConfig,
    /// Call rates and connections one framework or agent may use.
    pub client_limits: crate::core::session_rules::ClientLimits,
    /// How many recent events this master keeps for `/events` and `fullerene events`
    /// (`--events-kept`); older ones are gone from it, and a client asking for them is told.
    pub events_kept: usize,
}

impl ShellConfig {
    /// Defaults: the core's ([`CoreConfig::default`]) with `members`' addresses, a 2 s request
    /// timeout (a ReadIndex waits that long for a quorum), 1,024 queued batches per peer,
    /// reconnection backoff up to 1 s (so that a restarted peer is found again within about a
    /// second), the HTTP API's defaults ([`http::HttpConfig::default`]).
    pub fn new(members: BTreeMap<u64, SocketAddr>) -> ShellConfig {
        ShellConfig {
            core: CoreConfig {
                members,
                ..CoreConfig::default()
            },
            transport: TransportConfig::default(),
            request_timeout: Duration::from_secs(2),
            peer_queue: 1024,
            max_reconnect_backoff: Duration::from_secs(1),
            metrics: None,
            http: http::HttpConfig::default(),
            client_limits: Default::default(),
            events_kept: crate::state::events::DEFAULT_EVENTS_KEPT,
        }
    }
}

/// A failure that stops the master.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The QUIC transport could not be set up.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The Raft node failed (storage damage, an undecodable committed entry, ...).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The certificate does not name this master.
    #[error("the certificate names {identity}, but this is master {id} (expected id master-{id})")]
    IdentityMismatch {
        /// The certificate's identity.
        identity: String,
        /// The node's Raft id.
        id: u64,
    },
    /// The HTTP API could not listen.
    #[error("cannot serve the HTTP API on {addr}: {source}")]
    Http {
        /// The requested address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Plain HTTP was asked for on an address other machines can reach.
    #[error("plain HTTP is served on loopback addresses only (for a local TLS-terminating proxy or scraper), not on {0}: serve HTTPS there")]
    PlaintextNotLoopback(SocketAddr),
    /// The HTTP API's token file is unusable.
    #[error(transparent)]
    HttpTokens(#[from] http::auth::TokenFileError),
    /// A thread of the shell (the store's writer, the allocation planner) could not be
    /// started.
    #[error("cannot start a thread of the master: {0}")]
    Thread(std::io::Error),
}

/// Runs the master until `shutdown` completes or this master is removed from the group.
///
/// `server` is the bound QUIC endpoint (its certificate must name `master-<id>` of `node`);
/// `tls` is the same material, used for outbound peer connections. On return every task the
/// shell started is stopped and the endpoint closed.
pub async fn serve<S, F>(
    node: RaftNode<S>,
    server: Server,
    tls: &TlsMaterial,
    config: ShellConfig,
    shutdown: F,
) -> Result<MasterExit, ServerError>
where
    S: RaftStore,
    F: Future<Output = ()>,
{
    let id = node.id();
    if server.identity().master_id().map(|m| m.0) != Some(id) {
        return Err(ServerError::IdentityMismatch {
            identity: server.identity().to_string(),
            id,
        });
    }
    let client = Arc::new(Client::new(tls, config.transport.clone())?);
    let (events_tx, events_rx) = mpsc::channel(node_loop::EVENT_QUEUE);
    let (peer_events_tx, peer_events_rx) = mpsc::channel(node_loop::PEER_EVENT_QUEUE);
    let (leader_tx, leader_rx) = watch::channel(LeaderView::default());
    let (membership_tx, membership_rx) = watch::channel(MembershipView::default());
    let event_hub = Arc::new(event_hub::EventHub::new(
        id,
        config.events_kept,
        node.applied_index(),
    ));
    let context = Arc::new(sessions::SessionContext {
        event_hub: Arc::clone(&event_hub),
        this: id,
        events: events_tx.clone(),
        peer_events: peer_events_tx,
        leader: leader_rx,
        membership: membership_rx,
        request_timeout: config.request_timeout,
        limits: config.client_limits,
        clock: fullerene_proto::time::SystemClock::new(),
        budgets: Default::default(),
        connections: Default::default(),
        agent_files: Default::default(),
    });
    let local_addr = server.local_addr();
    let (stop_http, http_stopped) = watch::channel(false);
    let board = Arc::new(http::board::StateBoard::new(config.http.view_interval));
    let mut http_tasks = Vec::new();
    if let Some(addr) = config.core.http_addr {
        let settings = &config.http;
        if settings.plaintext && !addr.ip().is_loopback() {
            return Err(ServerError::PlaintextNotLoopback(addr));
        }
        let tokens = match &settings.tokens {
            Some(path) => Some(Arc::new(http::auth::TokenStore::load(path)?)),
            None => None,
        };
        let acceptor = if settings.plaintext {
            None
        } else {
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(
                tls.https_server_config()?,
            )))
        };
        let listener = http::bind(addr)
            .await
            .map_err(|source| ServerError::Http { addr, source })?;
        let scheme = if settings.plaintext { "http" } else { "https" };
        if settings.plaintext {
            tracing::warn!(master = id, %addr, "serving the HTTP API over PLAIN HTTP (--http-plaintext): bearer tokens cross the loopback unencrypted and no client certificate can be used");
        }
        tracing::info!(
            master = id,
            url = %format!("{scheme}://{addr}"),
            tokens = tokens.as_ref().map_or(0, |t| t.current().len()),
            metrics_open = settings.metrics_open,
            "serving the HTTP API"
        );
        if let Some(tokens) = &tokens {
            http_tasks.push(tokio::spawn(Arc::clone(tokens).watch(http_stopped.clone())));
        }
        let api = Arc::new(http::Api {
            sessions: Arc::clone(&context),
            board: Arc::clone(&board),
            metrics: config.metrics.clone(),
            tokens,
            metrics_open: settings.metrics_open,
            limits: settings.limits,
            scheme,
        });
        http_tasks.push(tokio::spawn(http::serve(
            listener,
            api,
            acceptor,
            http_stopped,
        )));
    }
    let (stop_accepting, stop_rx) = tokio::sync::oneshot::channel();
    let accept = tokio::spawn(sessions::accept_loop(server, Arc::clone(&context), stop_rx));
    tracing::info!(master = id, %local_addr, "master serving");
    let (reports_tx, reports_rx) = mpsc::unbounded_channel();
    let store = store_writer::StoreWriterThread::spawn(id, node.store().writer(), reports_tx)
        .map_err(ServerError::Thread)?;
    let (planned_tx, planned_rx) = mpsc::unbounded_channel();
    let planner_threads = std::thread::available_parallelism().map_or(1, usize::from);
    let planner =
        planner::Planner::spawn(planner_threads, planned_tx).map_err(ServerError::Thread)?;
    let core = MasterCore::new(node, config.core.clone());
    let publisher = http::board::ViewPublisher::new(board, config.http.max_view_tasks);
    let mut shell = node_loop::Shell::new(
        core,
        config,
        Arc::clone(&client),
        events_tx,
        node_loop::Views {
            leader: leader_tx,
            membership: membership_tx,
            publisher,
            event_hub,
        },
        node_loop::Workers { store, planner },
    );
    let result = shell
        .run(events_rx, peer_events_rx, reports_rx, planned_rx, shutdown)
        .await;
    if matches!(result, Ok(MasterExit::Removed)) {
        // Lets the answer to the removal and the commit messages for the others leave
        // before the connections close.
        tokio::time::sleep(REMOVED_LINGER).await;
    }
    shell.stop_peers();
    // The accept loop closes the endpoint, which tells clients and peers at once rather than
    // after their idle timeout.
    let _ = stop_accepting.send(());
    if let Err(error) = accept.await {
        tracing::warn!(%error, "the accept loop ended abnormally");
    }
    client.close();
    let _ = stop_http.send(true);
    for task in http_tasks {
        let _ = task.await;
    }
    result
}
