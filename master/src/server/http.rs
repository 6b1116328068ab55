//! The HTTP API every master serves: `GET /state`, the cluster
//! state as JSON, and `GET /metrics`, the Prometheus exposition of the process's metrics.
//!
//! `/state` is a linearizable read on the leader (the same ReadIndex path as the operator's
//! `State` request). A follower answers `307 Temporary Redirect` to the leader's `/state` when
//! the leader announced its HTTP address in the replicated state, and `503` naming the
//! leader's QUIC address (or saying none is known) otherwise. `/metrics` is served by every
//! master from its own registry.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fullerene_proto::messages::{OperatorRequest, OperatorResponse};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, LOCATION};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

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

/// Serves the HTTP API on `listener` until `stop` fires.
pub(crate) async fn serve(
    listener: TcpListener,
    context: Arc<HttpContext>,
    mut stop: watch::Receiver<bool>,
) {
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
                let context = Arc::clone(&context);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let context = Arc::clone(&context);
                        async move { Ok::<_, Infallible>(route(request, &context).await) }
                    });
                    if let Err(error) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(%peer, %error, "HTTP connection ended");
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
