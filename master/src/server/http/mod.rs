//! The HTTP API every master serves: the cluster's state for operators and dashboards
//! (`GET /state`, `/agents`, `/frameworks`, `/tasks`, `/groups`, `/cluster`), its events
//! (`GET /events`, a document or a stream of server-sent events, see [`events`]), Prometheus
//! metrics (`GET /metrics`), liveness and readiness probes (`GET /health`, `/ready`, see
//! [`probes`]), and the operator writes that change state (`PUT
//! /groups/{group}/weight`, `POST /masters`, `DELETE /masters/{id}`, agent drains, task kills
//! and framework teardowns). The routes, their
//! answers and their errors are in [`routes`]'s table; the documents are
//! [`fullerene_proto::http`]'s. The web UI ([`ui`]) is served at `/` from the same listener,
//! behind the same authentication (with a session cookie for browsers).
//!
//! # Security
//!
//! - **HTTPS** with the master's own certificate (the one its QUIC endpoint serves), so clients
//!   verify the master with the cluster CA as every other client does. Plain HTTP only with
//!   [`HttpConfig::plaintext`] (`--http-plaintext`), only on a loopback address (for a local
//!   TLS-terminating proxy or a node-local scraper, where nothing crosses the network), and
//!   logged as a warning at start.
//! - **Authentication** on every request ([`auth`]): an operator's client certificate (mutual
//!   TLS, optional in the handshake), or a bearer token from the operator's token file, with a
//!   `read` or `write` scope. `/metrics` may be opened to unauthenticated scrapers
//!   ([`HttpConfig::metrics_open`], `--http-metrics-open`): it holds counts and timings, no
//!   task data or secrets, and scrapers are often configured without credentials. `/health`
//!   and `/ready` never need credentials (probes carry none; they only say whether this master
//!   runs and knows a leader, see [`probes`]); everything else always needs credentials.
//! - **Limits** ([`HttpLimits`]): TLS handshake and request headers within a timeout, a
//!   connection's life and buffer bounded, a cap on open connections, and writes' bodies
//!   bounded in size and in the time they take to arrive.
//! - **Secrets**: task environments are redacted in every document (names kept, values
//!   `<redacted>`); the QUIC operator session, which needs an operator certificate, still
//!   shows them.
//!
//! # Off the node loop
//!
//! The API runs on its own tasks. Reads are answered from a view the node loop publishes at
//! most once per [`HttpConfig::view_interval`] and only when a reader asked since the last one
//! ([`board`]), bounded to [`HttpConfig::max_view_tasks`] tasks: no client, however slow or
//! numerous, costs the leader more than that. Events are copied out of the master's ring
//! (`server::event_hub`), which the node loop fills without waiting on any reader. Writes are commands: they go through the node
//! loop's queue as the QUIC operator session's do, and are answered after commit. A follower
//! redirects (307) to the same path on the leader's API, whose address the leader announces
//! in the replicated state.

pub mod auth;
pub(crate) mod board;
mod events;
mod probes;
mod routes;
pub(crate) mod ui;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fullerene_transport::PeerIdentity;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use self::auth::TokenStore;
use self::board::StateBoard;
use self::routes::ResponseBody;
use super::sessions::SessionContext;

/// Installs a Prometheus recorder as the process's `metrics` recorder and returns the handle
/// that renders it; histograms are kept bounded by an upkeep task. Call it before anything
/// registers metrics (handles bind to the recorder present when they are created), inside a
/// tokio runtime.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| e.to_string())?;
    super::metrics::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// How a master serves its HTTP API (where it listens is
/// [`CoreConfig::http_addr`](crate::core::CoreConfig::http_addr)).
#[derive(Clone, Debug, PartialEq)]
pub struct HttpConfig {
    /// Serve plain HTTP instead of HTTPS: refused unless the address is a loopback one.
    pub plaintext: bool,
    /// The token file (see [`auth`]); without one, only operators' certificates authenticate.
    pub tokens: Option<PathBuf>,
    /// Let unauthenticated clients read `/metrics`.
    pub metrics_open: bool,
    /// The least time between two builds of the published view, and the most a view may be
    /// older than a request it answers.
    pub view_interval: Duration,
    /// The most tasks a published view holds.
    pub max_view_tasks: usize,
    /// What clients may hold.
    pub limits: HttpLimits,
}

/// The default [`HttpConfig::view_interval`]: dashboards and `curl` see the state at most
/// half a second old, and the leader builds at most two views a second.
pub const DEFAULT_VIEW_INTERVAL: Duration = Duration::from_millis(500);

/// The default [`HttpConfig::max_view_tasks`]: a view of 10,000 tasks is a few megabytes of
/// JSON and a few milliseconds of the node loop's time to build.
pub const DEFAULT_MAX_VIEW_TASKS: usize = 10_000;

impl Default for HttpConfig {
    /// HTTPS, no token file (operators' certificates only), `/metrics` authenticated, views at
    /// most every [`DEFAULT_VIEW_INTERVAL`] of at most [`DEFAULT_MAX_VIEW_TASKS`] tasks,
    /// default limits.
    fn default() -> HttpConfig {
        HttpConfig {
            plaintext: false,
            tokens: None,
            metrics_open: false,
            view_interval: DEFAULT_VIEW_INTERVAL,
            max_view_tasks: DEFAULT_MAX_VIEW_TASKS,
            limits: HttpLimits::default(),
        }
    }
}

/// Bounds on what HTTP clients may hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HttpLimits {
    /// Time a client has to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time a client has to send a request's headers.
    pub header_timeout: Duration,
    /// Time a client has to send a write's body, once its headers are in.
    pub body_timeout: Duration,
    /// The largest body a write may carry.
    pub max_body: usize,
    /// A connection's whole life, keep-alive included (a scraper simply reconnects).
    pub connection_lifetime: Duration,
    /// An event stream's (`GET /events` following) whole life: its connection may outlive
    /// `connection_lifetime` by this much, and the stream ends by itself this long after it
    /// began (the client reconnects and resumes after the last event it has).
    pub stream_lifetime: Duration,
    /// Bytes buffered per connection, headers included (at least 8 KiB).
    pub max_buffer: usize,
    /// Connections served at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    /// 10 s for the handshake, the headers and a body each; bodies of at most 16 KiB (the
    /// writes take a few fields); a minute per connection, ten minutes per event stream (each
    /// holds one of the connections), 64 KiB of buffer, 64 connections.
    fn default() -> HttpLimits {
        HttpLimits {
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_body: 16 * 1024,
            connection_lifetime: Duration::from_secs(60),
            stream_lifetime: Duration::from_secs(600),
            max_buffer: 64 * 1024,
            max_connections: 64,
        }
    }
}

/// What the HTTP tasks share.
pub(crate) struct Api {
    /// The node loop's inbox, who leads, the request timeout.
    pub sessions: Arc<SessionContext>,
    /// The published view.
    pub board: Arc<StateBoard>,
    /// The Prometheus recorder `/metrics` renders.
    pub metrics: Option<PrometheusHandle>,
    /// The tokens, if a token file is configured.
    pub tokens: Option<Arc<TokenStore>>,
    /// Whether `/metrics` needs no credentials.
    pub metrics_open: bool,
    /// The limits.
    pub limits: HttpLimits,
    /// `https` or `http`, for redirects.
    pub scheme: &'static str,
}

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionPeer {
    /// Its address.
    pub addr: SocketAddr,
    /// The identity of the certificate it presented (verified against the cluster CA in the
    /// handshake), if it presented one.
    pub identity: Option<PeerIdentity>,
    /// Raised when a request on it became an event stream: the connection then gets
    /// [`HttpLimits::stream_lifetime`] more past its ordinary lifetime.
    pub streaming: Arc<AtomicBool>,
}

/// Serves the HTTP API on `listener` (over TLS with `tls`) until `stop` fires.
pub(crate) async fn serve(
    listener: TcpListener,
    api: Arc<Api>,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let limits = api.limits;
    let handler = move |request: Request<Incoming>, peer: Arc<ConnectionPeer>| {
        let api = Arc::clone(&api);
        async move { routes::handle(&api, &peer, request).await }
    };
    serve_limited(listener, tls, handler, limits, stop).await;
}

/// Serves `handler` on `listener` within `limits` until `stop` fires.
async fn serve_limited<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>, Arc<ConnectionPeer>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => {
                let (stream, addr) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::debug!(%error, "HTTP accept failed");
                        continue;
                    }
                };
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    tracing::debug!(peer = %addr, limit = limits.max_connections, "HTTP connection closed: too many open");
                    continue;
                };
                let handler = handler.clone();
                let tls = tls.clone();
                let streaming = Arc::new(AtomicBool::new(false));
                tokio::spawn(async move {
                    let _slot = slot;
                    let flag = Arc::clone(&streaming);
                    let connection = async move {
                        let streaming = flag;
                        match tls {
                            Some(acceptor) => {
                                let stream = match tokio::time::timeout(
                                    limits.handshake_timeout,
                                    acceptor.accept(stream),
                                )
                                .await
                                {
                                    Ok(Ok(stream)) => stream,
                                    Ok(Err(error)) => {
                                        tracing::debug!(peer = %addr, %error, "HTTPS handshake failed");
                                        return;
                                    }
                                    Err(_) => {
                                        tracing::debug!(peer = %addr, "HTTPS handshake not completed in time");
                                        return;
                                    }
                                };
                                let identity = stream
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|chain| chain.first())
                                    .and_then(|leaf| PeerIdentity::from_certificate(leaf).ok());
                                let peer = Arc::new(ConnectionPeer { addr, identity, streaming });
                                serve_io(stream, peer, handler, limits).await;
                            }
                            None => {
                                let peer = Arc::new(ConnectionPeer { addr, identity: None, streaming });
                                serve_io(stream, peer, handler, limits).await;
                            }
                        }
                    };
                    tokio::pin!(connection);
                    let mut lifetime = limits.connection_lifetime;
                    let mut extended = false;
                    loop {
                        if tokio::time::timeout(lifetime, &mut connection).await.is_ok() {
                            break;
                        }
                        // An event stream ends by itself within its own lifetime; its
                        // connection is given that much more, once.
                        if !extended && streaming.load(Ordering::SeqCst) {
                            extended = true;
                            lifetime = limits.stream_lifetime;
                            continue;
                        }
                        tracing::debug!(peer = %addr, "HTTP connection closed at the end of its lifetime");
                        break;
                    }
                });
            }
        }
    }
}

/// Serves HTTP/1.1 on one connection.
async fn serve_io<IO, H, F>(io: IO, peer: Arc<ConnectionPeer>, handler: H, limits: HttpLimits)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>, Arc<ConnectionPeer>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let addr = peer.addr;
    let service = hyper::service::service_fn(move |request| {
        let response = handler(request, Arc::clone(&peer));
        async move { Ok::<_, Infallible>(response.await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_buffer.max(8192))
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(peer = %addr, %error, "HTTP connection ended");
    }
}

/// Binds the HTTP API's listener (so a bad address fails at start, not later).
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    /// Reads until the server closes the connection; what it sent before.
    async fn until_closed(stream: &mut TcpStream) -> String {
        let mut got = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut got))
            .await
            .expect("the server closed the connection")
            .ok();
        String::from_utf8_lossy(&got).into_owned()
    }

    #[tokio::test]
    async fn silent_clients_and_connections_beyond_the_cap_are_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = watch::channel(false);
        let limits = HttpLimits {
            header_timeout: Duration::from_secs(1),
            connection_lifetime: Duration::from_secs(30),
            max_buffer: 8192,
            max_connections: 1,
            ..HttpLimits::default()
        };
        let handler = |_request: Request<Incoming>, _peer: Arc<ConnectionPeer>| async {
            Response::new(ResponseBody::Left(routes::full_body(
                bytes::Bytes::from_static(b"ok\n"),
            )))
        };
        let server = tokio::spawn(serve_limited(listener, None, handler, limits, stopped));

        // The first connection takes the one slot and says nothing; the second is closed at
        // once, unanswered.
        let mut silent = TcpStream::connect(addr).await.expect("connect");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut second = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(until_closed(&mut second).await, "");
        // The silent one is closed once its time for headers is up.
        let answer = until_closed(&mut silent).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );

        // Its slot is free again: a client that asks is answered.
        let mut client = TcpStream::connect(addr).await.expect("connect");
        client
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let answer = until_closed(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        stop.send(true).expect("stop");
        server.await.expect("server");
    }
}
