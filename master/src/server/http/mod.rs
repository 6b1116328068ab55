//! The HTTP API every master serves: `GET /state`, the cluster
//! state as JSON, and `GET /metrics`, the Prometheus exposition of the process's metrics.
//!
//! `/state` is a linearizable read on the leader (the same ReadIndex path as the operator's
//! `State` request). A follower answers `307 Temporary Redirect` to the leader's `/state` when
//! the leader announced its HTTP address in the replicated state, and `503` naming the
//! leader's QUIC address (or saying none is known) otherwise. `/metrics` is served by every
//! master from its own registry.
//!
//! No client can hold the API ([`HttpLimits`]): headers must arrive within a timeout, a
//! connection's buffer and life are bounded, and connections beyond a cap are closed at once.
//! The node loop answers a `/state` read, not the HTTP connection, so a slow reader holds only
//! its own connection task.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fullerene_proto::messages::{OperatorRequest, OperatorResponse};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, LOCATION};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};

use super::node_loop::Event;
use super::sessions::SessionContext;
use super::LeaderView;

/// Installs a Prometheus recorder as the process's `metrics` recorder and returns the handle
/// that renders it; histograms are kept bounded by an upkeep task. Call it before anything
/// registers metrics (handles bind to the recorder present when they are created), inside a
/// tokio runtime.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| e.to_string())?;
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

/// What the HTTP tasks need.
pub(crate) struct HttpContext {
    pub sessions: Arc<SessionContext>,
    pub metrics: Option<PrometheusHandle>,
}

/// Bounds on what HTTP clients may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HttpLimits {
    /// Time a client has to send a request's headers.
    pub header_timeout: Duration,
    /// A connection's whole life, keep-alive included (a scraper simply reconnects).
    pub connection_lifetime: Duration,
    /// Bytes buffered per connection, headers included.
    pub max_buffer: usize,
    /// Connections served at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    /// 10 s for headers, a minute per connection, 64 KiB of buffer, 64 connections.
    fn default() -> HttpLimits {
        HttpLimits {
            header_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(60),
            max_buffer: 64 * 1024,
            max_connections: 64,
        }
    }
}

/// Serves the HTTP API on `listener` until `stop` fires.
pub(crate) async fn serve(
    listener: TcpListener,
    context: Arc<HttpContext>,
    stop: watch::Receiver<bool>,
) {
    let handler = move |request: Request<Incoming>| {
        let context = Arc::clone(&context);
        async move { Ok::<_, Infallible>(route(request, &context).await) }
    };
    serve_limited(listener, handler, HttpLimits::default(), stop).await;
}

/// Serves `handler` on `listener` within `limits` until `stop` fires.
async fn serve_limited<H, F>(
    listener: TcpListener,
    handler: H,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::debug!(%error, "HTTP accept failed");
                        continue;
                    }
                };
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    tracing::debug!(%peer, limit = limits.max_connections, "HTTP connection closed: too many open");
                    continue;
                };
                let handler = handler.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let connection = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(limits.header_timeout)
                        .max_buf_size(limits.max_buffer)
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handler));
                    match tokio::time::timeout(limits.connection_lifetime, connection).await {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::debug!(%peer, %error, "HTTP connection ended"),
                        Err(_) => tracing::debug!(%peer, "HTTP connection closed at the end of its lifetime"),
                    }
                });
            }
        }
    }
}

async fn route(request: Request<Incoming>, context: &HttpContext) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    match request.uri().path() {
        "/state" => state(context).await,
        "/metrics" => match &context.metrics {
            Some(handle) => {
                let mut response = text(StatusCode::OK, &handle.render());
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                response
            }
            None => text(
                StatusCode::NOT_FOUND,
                "this process has no Prometheus recorder installed\n",
            ),
        },
        other => text(
            StatusCode::NOT_FOUND,
            &format!("no such path: {other} (try /state or /metrics)\n"),
        ),
    }
}

async fn state(context: &HttpContext) -> Response<Full<Bytes>> {
    let sessions = &context.sessions;
    let (reply, answer) = oneshot::channel();
    if sessions
        .events
        .send(Event::Operator(OperatorRequest::State, reply))
        .await
        .is_err()
    {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the master is shutting down",
        );
    }
    let response = match tokio::time::timeout(sessions.request_timeout, answer).await {
        Ok(Ok(response)) => response,
        Ok(Err(_)) => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the master is shutting down",
            )
        }
        Err(_) => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no answer in time (no quorum, or the leader changed); retry",
            )
        }
    };
    match response {
        // The HTTP API is not authenticated: task environments (secrets) are redacted.
        OperatorResponse::State(view) => match serde_json::to_vec_pretty(&view.redacted()) {
            Ok(body) => {
                let mut response = Response::new(Full::new(Bytes::from(body)));
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(error) => json_error(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
        },
        OperatorResponse::Redirect(_) => redirect(&sessions.leader.borrow()),
        OperatorResponse::Error(error) => {
            json_error(StatusCode::SERVICE_UNAVAILABLE, &error.to_string())
        }
        other => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("unexpected answer {other:?}"),
        ),
    }
}

/// A follower's answer: to the leader's `/state` when its HTTP address is known.
fn redirect(view: &LeaderView) -> Response<Full<Bytes>> {
    match (view.leader_http, &view.leader) {
        (Some(http), _) => {
            let mut response = text(
                StatusCode::TEMPORARY_REDIRECT,
                &format!("the leader serves /state at http://{http}/state\n"),
            );
            if let Ok(location) = hyper::header::HeaderValue::from_str(&format!("http://{http}/state")) {
                response.headers_mut().insert(LOCATION, location);
            }
            response
        }
        (None, Some(leader)) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "this master does not lead; the leader is master {} at {} (QUIC) and announced no HTTP address",
                leader.id.0, leader.addr
            ),
        ),
        (None, None) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no leader is known yet (an election is running); retry",
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
}

fn json_error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
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
        };
        let handler = |_request: Request<Incoming>| async {
            Ok::<_, Infallible>(text(StatusCode::OK, "ok\n"))
        };
        let server = tokio::spawn(serve_limited(listener, handler, limits, stopped));

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
