//! The HTTP API's routes, in one table ([`ROUTES`]): each names its method, path, the scope
//! its caller needs, the query parameters it takes, and what it does. A new endpoint is one
//! more row (and, for a write, one function turning the request into an operator request).
//!
//! # Reads and writes
//!
//! `GET`s never change anything and never reach the node loop: they are served from the
//! leader's published view ([`super::board`]), for `/events` from the master's ring of events
//! ([`super::events`]), or, for `/metrics`, from this process's registry. Writes (`PUT`, `POST`, `DELETE`) need the `write` scope, carry strict JSON bodies
//! (`Content-Type: application/json`, at most [`HttpLimits::max_body`] bytes, arriving within
//! [`HttpLimits::body_timeout`]), and become the same replicated operator requests as the QUIC
//! operator session's: they are answered once committed and applied, or with the reason they
//! were refused. Requiring `application/json` also keeps browsers from sending a write as a
//! cross-site form post with an operator's client certificate, and a browser's write (one with
//! the web UI's session cookie or an `Origin` header) must carry `X-Fullerene-CSRF: 1` (see
//! [`super::ui`]).
//!
//! # Answers
//!
//! | status | when |
//! | --- | --- |
//! | 200 | a document; a write committed (`{"committed": true}`); a probe passed |
//! | 307 | this master does not lead: `Location` is the same path on the leader's API |
//! | 400 | a bad query, path parameter or body (the message names what is wrong), or a write the cluster refused |
//! | 401 | no credentials, or a token that is unknown or expired (`WWW-Authenticate: Bearer`) |
//! | 403 | a certificate of a role other than `operator` (a framework's on its own tasks' files excepted), a `read` token on a write, or a browser's write without `X-Fullerene-CSRF: 1` |
//! | 404 | no such path; a task, framework, sandbox or file that is not there |
//! | 405 | the path does not take this method (`Allow` lists those it takes) |
//! | 410 | a task's sandbox file was removed by the agent's garbage collection |
//! | 408 | the body did not arrive in time |
//! | 413 | the body is too large |
//! | 415 | a write's body is not `application/json` |
//! | 503 | no leader, no view or no commit in time, or the outcome is unknown; retry; a probe failed |
//!
//! # Task files
//!
//! `GET /frameworks/{framework}/tasks/{task}/files/{name}?offset=N&length=N&follow=true&agent=ID`
//! serves a file of the task's sandbox (`name`: `stdout` or `stderr`, or any other plain file
//! name in it) as `application/octet-stream`, read from the task's agent through the leader
//! (see [`crate::server::files`] for why and how it stays off the node loop). `offset` (0)
//! and `length` (65536, also the most one read returns) choose the bytes; the answer's
//! headers give the file's size ([`FILE_SIZE_HEADER`], `X-Fullerene-File-Size`), where the
//! body starts ([`FILE_OFFSET_HEADER`], the offset clamped to the size) and whether the task
//! had ended ([`TASK_ENDED_HEADER`]). With `follow=true` the body is streamed (chunked): the
//! bytes from `offset` on, then new ones as they appear, asking the agent every
//! [`FOLLOW_POLL`] (500 ms) while nothing new came, until the task has ended and the file is
//! read to its end, the client goes away, or the connection's lifetime is up (a client then
//! asks again from where it got to). `agent` names the agent for a task the master no longer
//! tracks (ended and acknowledged). Operators with the `read` scope may read any task's
//! files, and a framework's certificate its own frameworks' tasks' files.
//!
//! Every error is a JSON object `{"error": "..."}`, except a failed probe's answer, which is the
//! same [`ProbeDocument`](fullerene_proto::http::ProbeDocument) as a passed one's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use fullerene_proto::http::{
    job_views, AddMasterBody, AgentsDocument, ClusterDocument, CreateReservationBody, DrainBody,
    ErrorDocument, FrameworksDocument, GroupWeightBody, GroupsDocument, JobsDocument,
    ReservationsDocument, SessionDocument, StateDocument, TasksDocument, UpdateReservationBody,
    ViewStamp, WriteDone, FILE_OFFSET_HEADER, FILE_SIZE_HEADER, TASK_ENDED_HEADER,
};
use fullerene_proto::ids::{AgentId, FrameworkId, MasterId, TaskId};
use fullerene_proto::messages::{
    ErrorCode, FileChunk, FileRefusal, OperatorRequest, OperatorResponse, TaskFileRead,
    MAX_FILE_READ_BYTES,
};
use fullerene_proto::reservations::ReservationCall;
use fullerene_transport::Role;
use http_body_util::channel::Channel;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use tokio::sync::oneshot;

use super::auth::{authenticate, AuthFailure, Caller, Scope};
use super::board::{Document, PublishedView};
use super::events::{self, EventStreamBody};
use super::probes::{self, Probe};
use super::ui::{self, Asset};
use super::{Api, ConnectionPeer, HttpLimits};
use crate::server::files::{read_task_file, FileError, Reader};
use crate::server::node_loop::Event;
use crate::server::LeaderView;

/// A response's body: whole, or streamed (a followed task file).
pub(crate) type Body = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// A whole body of `bytes`.
pub(crate) fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// How long a followed task file waits before asking the agent again when nothing new came:
/// a reader sees new lines within half a second, and a follower costs the agent at most two
/// small reads a second.
pub(crate) const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// What a connection answers with: a whole document, or an event stream.
pub(crate) type ResponseBody = http_body_util::Either<Body, EventStreamBody>;

/// What a route needs of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// A `read` token or better.
    Read,
    /// A `write` token or an operator certificate.
    Write,
    /// A `read` token or better, or nothing when `/metrics` is opened to scrapers.
    Metrics,
    /// A `read` token or better, or a framework's certificate (whose principal must own the
    /// framework named in the path, which the handler checks).
    ReadOrOwner,
    /// Nothing: the liveness and readiness probes (see [`super::probes`] for why).
    Open,
}

/// What a write takes as its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    /// None: a body is refused.
    Empty,
    /// A JSON object like this example (shown when the body is wrong).
    Json(&'static str),
}

/// Turns a write's path parameters and body into the operator request it stands for.
type WriteFn = fn(&[&str], &[u8]) -> Result<OperatorRequest, ApiError>;

/// What a route does.
#[derive(Clone, Copy)]
enum Action {
    /// Serves a document of the published view.
    Document(Document),
    /// Serves the view's tasks, all or one framework's.
    Tasks,
    /// Serves this master's recent events, or streams them.
    Events,
    /// Renders this process's metrics.
    Metrics,
    /// Answers a liveness or readiness probe.
    Probe(Probe),
    /// Proposes an operator request, answered once committed.
    Write(Payload, WriteFn),
    /// Serves a file of the web UI (see [`super::ui`]).
    Ui(Asset),
    /// Exchanges the bearer token for a session cookie (see [`super::ui`]).
    Login,
    /// Says who the caller is and what it may do.
    Session,
    /// Clears the session cookie.
    Logout,
    /// Serves a file of a task's sandbox, read from its agent.
    TaskFile,
}

/// One endpoint.
struct Route {
    method: Method,
    /// Segments; `{name}` matches one non-empty segment.
    path: &'static str,
    access: Access,
    /// The query parameters it takes (each at most once).
    query: &'static [&'static str],
    action: Action,
}

/// Every endpoint of the API.
static ROUTES: [Route; 29] = [
    Route {
        method: Method::GET,
        path: "/",
        access: Access::Open,
        query: &[],
        action: Action::Ui(Asset::Index),
    },
    Route {
        method: Method::GET,
        path: "/ui/app.js",
        access: Access::Open,
        query: &[],
        action: Action::Ui(Asset::Script),
    },
    Route {
        method: Method::GET,
        path: "/ui/app.css",
        access: Access::Open,
        query: &[],
        action: Action::Ui(Asset::Style),
    },
    Route {
        method: Method::POST,
        path: "/ui/session",
        access: Access::Read,
        query: &[],
        action: Action::Login,
    },
    Route {
        method: Method::GET,
        path: "/ui/session",
        access: Access::Read,
        query: &[],
        action: Action::Session,
    },
    Route {
        method: Method::DELETE,
        path: "/ui/session",
        access: Access::Open,
        query: &[],
        action: Action::Logout,
    },
    Route {
        method: Method::GET,
        path: "/state",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::State),
    },
    Route {
        method: Method::GET,
        path: "/agents",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::Agents),
    },
    Route {
        method: Method::GET,
        path: "/frameworks",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::Frameworks),
    },
    Route {
        method: Method::GET,
        path: "/tasks",
        access: Access::Read,
        query: &["framework", "all"],
        action: Action::Tasks,
    },
    Route {
        method: Method::GET,
        path: "/jobs",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::Jobs),
    },
    Route {
        method: Method::GET,
        path: "/reservations",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::Reservations),
    },
    Route {
        method: Method::GET,
        path: "/events",
        access: Access::Read,
        query: &["since", "limit", "follow"],
        action: Action::Events,
    },
    Route {
        method: Method::GET,
        path: "/groups",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::Groups),
    },
    Route {
        method: Method::GET,
        path: "/cluster",
        access: Access::Read,
        query: &[],
        action: Action::Document(Document::Cluster),
    },
    Route {
        method: Method::GET,
        path: "/metrics",
        access: Access::Metrics,
        query: &[],
        action: Action::Metrics,
    },
    Route {
        method: Method::GET,
        path: "/health",
        access: Access::Open,
        query: &[],
        action: Action::Probe(Probe::Health),
    },
    Route {
        method: Method::GET,
        path: "/ready",
        access: Access::Open,
        query: &[],
        action: Action::Probe(Probe::Ready),
    },
    Route {
        method: Method::PUT,
        path: "/groups/{group}/weight",
        access: Access::Write,
        query: &[],
        action: Action::Write(Payload::Json(r#"{"weight": 2.0}"#), set_group_weight),
    },
    Route {
        method: Method::POST,
        path: "/masters",
        access: Access::Write,
        query: &[],
        action: Action::Write(
            Payload::Json(r#"{"id": 4, "addr": "10.0.0.4:5050"}"#),
            add_master,
        ),
    },
    Route {
        method: Method::DELETE,
        path: "/masters/{id}",
        access: Access::Write,
        query: &[],
        action: Action::Write(Payload::Empty, remove_master),
    },
    Route {
        method: Method::POST,
        path: "/agents/{agent}/drain",
        access: Access::Write,
        query: &[],
        action: Action::Write(
            Payload::Json(r#"{"deadline_after_ms": 600000}"#),
            drain_agent,
        ),
    },
    Route {
        method: Method::DELETE,
        path: "/agents/{agent}/drain",
        access: Access::Write,
        query: &[],
        action: Action::Write(Payload::Empty, undrain_agent),
    },
    Route {
        method: Method::POST,
        path: "/frameworks/{framework}/tasks/{task}/kill",
        access: Access::Write,
        query: &[],
        action: Action::Write(Payload::Empty, kill_task),
    },
    Route {
        method: Method::POST,
        path: "/frameworks/{framework}/teardown",
        access: Access::Write,
        query: &[],
        action: Action::Write(Payload::Empty, teardown_framework),
    },
    Route {
        method: Method::POST,
        path: "/reservations",
        access: Access::Write,
        query: &[],
        action: Action::Write(
            Payload::Json(CREATE_RESERVATION_EXAMPLE),
            create_reservation,
        ),
    },
    Route {
        method: Method::PUT,
        path: "/reservations/{name}",
        access: Access::Write,
        query: &[],
        action: Action::Write(
            Payload::Json(UPDATE_RESERVATION_EXAMPLE),
            update_reservation,
        ),
    },
    Route {
        method: Method::DELETE,
        path: "/reservations/{name}",
        access: Access::Write,
        query: &[],
        action: Action::Write(Payload::Empty, delete_reservation),
    },
    Route {
        method: Method::GET,
        path: "/frameworks/{framework}/tasks/{task}/files/{name}",
        access: Access::ReadOrOwner,
        query: &["offset", "length", "follow", "agent"],
        action: Action::TaskFile,
    },
];

fn set_group_weight(params: &[&str], body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let group = path_param(params, 0, "group")?;
    let body: GroupWeightBody = json_body(body, r#"{"weight": 2.0}"#)?;
    Ok(OperatorRequest::SetGroupWeight {
        group,
        weight: body.weight,
    })
}

fn add_master(_params: &[&str], body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let body: AddMasterBody = json_body(body, r#"{"id": 4, "addr": "10.0.0.4:5050"}"#)?;
    Ok(OperatorRequest::AddMaster {
        id: MasterId(body.id),
        addr: body.addr,
    })
}

fn remove_master(params: &[&str], _body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let id = path_param(params, 0, "id")?;
    let id: u64 = id.parse().map_err(|_| {
        ApiError::bad_request(format!("`{id}` in the path is not a master id (a number)"))
    })?;
    Ok(OperatorRequest::RemoveMaster { id: MasterId(id) })
}

fn drain_agent(params: &[&str], body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let agent_id = AgentId::from(path_param(params, 0, "agent")?);
    let body: DrainBody = json_body(body, r#"{"deadline_after_ms": 600000}"#)?;
    Ok(OperatorRequest::DrainAgent {
        agent_id,
        deadline_after_ms: body.deadline_after_ms,
    })
}

fn undrain_agent(params: &[&str], _body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let agent_id = AgentId::from(path_param(params, 0, "agent")?);
    Ok(OperatorRequest::UndrainAgent { agent_id })
}

fn kill_task(params: &[&str], _body: &[u8]) -> Result<OperatorRequest, ApiError> {
    Ok(OperatorRequest::KillTask {
        framework_id: FrameworkId::from(path_param(params, 0, "framework")?),
        task_id: TaskId::from(path_param(params, 1, "task")?),
    })
}

fn teardown_framework(params: &[&str], _body: &[u8]) -> Result<OperatorRequest, ApiError> {
    Ok(OperatorRequest::TeardownFramework {
        framework_id: FrameworkId::from(path_param(params, 0, "framework")?),
    })
}

/// The example body of `POST /reservations`: two bundle-hours of 4-cpu bundles, at most two at
/// once, within the next six hours.
const CREATE_RESERVATION_EXAMPLE: &str = r#"{"name": "etl-nightly", "rdl": "window(atom(cpus=4,mem_mib=8192; g=1, h=2, l=10m, w=2h), s=0, f=6h)"}"#;

/// The example body of `PUT /reservations/{name}`.
const UPDATE_RESERVATION_EXAMPLE: &str =
    r#"{"rdl": "window(atom(cpus=4,mem_mib=8192; g=1, h=2, l=10m, w=3h), s=0, f=6h)"}"#;

fn create_reservation(_params: &[&str], body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let body: CreateReservationBody = json_body(body, CREATE_RESERVATION_EXAMPLE)?;
    Ok(OperatorRequest::Reservation(ReservationCall::Create {
        name: body.name,
        rdl: body.rdl,
    }))
}

fn update_reservation(params: &[&str], body: &[u8]) -> Result<OperatorRequest, ApiError> {
    let name = path_param(params, 0, "name")?;
    let body: UpdateReservationBody = json_body(body, UPDATE_RESERVATION_EXAMPLE)?;
    Ok(OperatorRequest::Reservation(ReservationCall::Update {
        name,
        rdl: body.rdl,
    }))
}

fn delete_reservation(params: &[&str], _body: &[u8]) -> Result<OperatorRequest, ApiError> {
    Ok(OperatorRequest::Reservation(ReservationCall::Delete {
        name: path_param(params, 0, "name")?,
    }))
}

/// A refusal or failure, answered as `{"error": ...}` with its status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    /// `WWW-Authenticate`, for 401 and 403.
    challenge: Option<String>,
    /// `Allow`, for 405.
    allow: Option<String>,
    /// `Location`, for 307.
    location: Option<String>,
    /// Whether to close the connection after (a body left unread).
    close: bool,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            challenge: None,
            allow: None,
            location: None,
            close: false,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    fn challenge(mut self, value: String) -> ApiError {
        self.challenge = Some(value);
        self
    }

    fn closing(mut self) -> ApiError {
        self.close = true;
        self
    }

    fn into_response(self) -> Response<Body> {
        let mut response = json(
            self.status,
            &ErrorDocument {
                error: self.message,
            },
        );
        let headers = response.headers_mut();
        if let Some(value) = self.challenge.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(WWW_AUTHENTICATE, value);
        }
        if let Some(value) = self.allow.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(ALLOW, value);
        }
        if let Some(value) = self.location.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(LOCATION, value);
        }
        if self.close {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The realm of every challenge.
const REALM: &str = "Bearer realm=\"fullerene\"";

/// A challenge's parameter value: quoted-string content without quotes or backslashes.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '\''
            } else {
                c
            }
        })
        .collect()
}

/// Answers one request.
pub(crate) async fn handle(
    api: &Api,
    peer: &ConnectionPeer,
    request: Request<Incoming>,
) -> Response<ResponseBody> {
    let response = match respond(api, peer, request).await {
        Ok(Answer::Whole(response)) => response.map(ResponseBody::Left),
        Ok(Answer::Stream(response)) => response.map(ResponseBody::Right),
        Err(error) => error.into_response().map(ResponseBody::Left),
    };
    metrics::counter!("fullerene_http_responses_total", "status" => response.status().as_u16().to_string())
        .increment(1);
    response
}

/// A route's answer: a whole document, or an event stream.
enum Answer {
    Whole(Response<Body>),
    Stream(Response<EventStreamBody>),
}

async fn respond(
    api: &Api,
    peer: &ConnectionPeer,
    request: Request<Incoming>,
) -> Result<Answer, ApiError> {
    if let Some(route) = ROUTES
        .iter()
        .find(|route| matches!(route.action, Action::Events) && route.path == request.uri().path())
    {
        if request.method() == route.method {
            authorize(api, peer, route, &request)?;
            let query = query_params(request.uri().query(), route.query)?;
            return serve_events(api, peer, &request, &query);
        }
    }
    respond_whole(api, peer, request).await.map(Answer::Whole)
}

async fn respond_whole(
    api: &Api,
    peer: &ConnectionPeer,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let path = request.uri().path().to_string();
    let matching: Vec<(&Route, Vec<&str>)> = ROUTES
        .iter()
        .filter_map(|route| path_params(route.path, &path).map(|params| (route, params)))
        .collect();
    if matching.is_empty() {
        let mut paths: Vec<&str> = ROUTES.iter().map(|route| route.path).collect();
        paths.dedup();
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no such path: {path} (the API serves {})", paths.join(", ")),
        ));
    }
    let Some((route, params)) = matching
        .iter()
        .find(|(route, _)| route.method == request.method())
    else {
        let allowed: Vec<&str> = matching
            .iter()
            .map(|(route, _)| route.method.as_str())
            .collect();
        let mut error = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "{path} does not take {}; it takes {}",
                request.method(),
                allowed.join(", ")
            ),
        );
        error.allow = Some(allowed.join(", "));
        return Err(error);
    };

    let framework_reader = peer
        .identity
        .as_ref()
        .filter(|identity| route.access == Access::ReadOrOwner && identity.role == Role::Framework);
    // A framework's certificate may read its own tasks' files only: the handler checks the
    // task's owner, everything else refuses it as authorize does.
    let (reader, caller, by_cookie) = match framework_reader {
        Some(identity) => (
            Reader::Framework(identity.id.clone()),
            Caller {
                who: identity.to_string(),
                principal: identity.id.clone(),
                scope: None,
            },
            false,
        ),
        None => {
            let (caller, by_cookie) = authorize(api, peer, route, &request)?;
            (Reader::Operator, caller, by_cookie)
        }
    };
    let query = query_params(request.uri().query(), route.query)?;
    let changes_state = matches!(route.action, Action::Write(..) | Action::Login);
    if changes_state && !ui::cross_site_safe(request.headers(), by_cookie) {
        metrics::counter!("fullerene_http_auth_refusals_total").increment(1);
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "a browser's {} {} must carry `X-Fullerene-CSRF: 1` (cross-site requests are \
                 refused)",
                request.method(),
                route.path
            ),
        ));
    }
    let secure = api.scheme == "https";
    match route.action {
        Action::Ui(asset) => {
            let leader = api.sessions.leader.borrow().clone();
            match (leader.is_self, leader.leader_http) {
                // The page reads the leader's API: served from the leader, it is same-origin.
                (false, Some(_)) => Err(redirect(&leader, api.scheme, request.uri())),
                // No leader known: the page still loads, and says so when it reads.
                _ => Ok(ui::asset(asset)),
            }
        }
        Action::Session => Ok(json(StatusCode::OK, &session_document(&caller, by_cookie))),
        Action::Logout => Ok(ui::with_cookie(
            json(StatusCode::OK, &WriteDone { committed: true }),
            ui::cleared_cookie(secure),
        )),
        Action::Login => {
            let presented = request
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.split_once(' '))
                .map(|(_, token)| token.trim());
            match presented {
                // A certificate (or an existing cookie) needs no new cookie.
                None => Ok(json(StatusCode::OK, &session_document(&caller, by_cookie))),
                Some(token) => match ui::session_cookie(token, secure) {
                    Some(cookie) => Ok(ui::with_cookie(
                        json(StatusCode::OK, &session_document(&caller, true)),
                        cookie,
                    )),
                    None => Err(ApiError::bad_request(
                        "this token cannot be stored in a cookie",
                    )),
                },
            }
        }
        Action::TaskFile => {
            let leader = api.sessions.leader.borrow().clone();
            if !leader.is_self {
                return Err(redirect(&leader, api.scheme, request.uri()));
            }
            tracing::debug!(who = %caller.who, path = %path, "task file read");
            task_file(api, &reader, params, &query, request.uri()).await
        }
        Action::Metrics => Ok(metrics(api)),
        Action::Probe(probe) => Ok(probes::answer(api, probe).await),
        Action::Document(document) => {
            let view = leader_view(api, &request).await?;
            Ok(json_bytes(
                view.encoded(document, |view| encode(view, document)),
            ))
        }
        Action::Tasks => {
            let all = match query.get("all").map(String::as_str) {
                None | Some("false") => false,
                Some("true") => true,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "`all={other}`: the query parameter `all` is `true` or `false`"
                    )))
                }
            };
            let view = leader_view(api, &request).await?;
            match (query.get("framework"), all) {
                (None, false) => {
                    Ok(json_bytes(view.encoded(Document::Tasks, |view| {
                        encode(view, Document::Tasks)
                    })))
                }
                (framework, _) => Ok(json(
                    StatusCode::OK,
                    &tasks_of(&view, framework.map(String::as_str), all),
                )),
            }
        }
        // Answered by `respond` before the view is looked at.
        Action::Events => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the events route was not dispatched",
        )),
        Action::Write(payload, parse) => {
            let leader = api.sessions.leader.borrow().clone();
            if !leader.is_self {
                return Err(redirect(&leader, api.scheme, request.uri()));
            }
            let (parts, body) = request.into_parts();
            let body = read_body(&parts.headers, body, payload, &api.limits).await?;
            let operator_request = parse(params, &body)?;
            write(api, &caller, operator_request, &parts.uri).await
        }
    }
}

/// The session document of `caller`.
fn session_document(caller: &Caller, by_cookie: bool) -> SessionDocument {
    SessionDocument {
        who: caller.who.clone(),
        scope: caller.scope.map(|scope| scope.to_string()),
        cookie: by_cookie,
    }
}

/// Who the caller is, if the route lets it in, and whether it was known by the web UI's
/// session cookie (a token in a cookie, used only when no `Authorization` header comes).
fn authorize(
    api: &Api,
    peer: &ConnectionPeer,
    route: &Route,
    request: &Request<Incoming>,
) -> Result<(Caller, bool), ApiError> {
    let anonymous = || Caller {
        who: "anonymous".to_string(),
        principal: "anonymous".to_string(),
        scope: None,
    };
    if route.access == Access::Open {
        return Ok((anonymous(), false));
    }
    let tokens = api.tokens.as_ref().map(|store| store.current());
    let header = request.headers().get(hyper::header::AUTHORIZATION);
    let cookie = match header {
        Some(_) => None,
        None if peer.identity.is_some() => None,
        None => ui::session_token(request.headers()).map(|token| format!("Bearer {token}")),
    };
    let by_cookie = cookie.is_some();
    let authenticated = authenticate(
        peer.identity.as_ref(),
        header
            .map(HeaderValue::as_bytes)
            .or(cookie.as_deref().map(str::as_bytes)),
        tokens.as_deref(),
        unix_now(),
    );
    let open = route.access == Access::Metrics && api.metrics_open;
    let caller = match authenticated {
        Ok(caller) => caller,
        Err(_) if open => return Ok((anonymous(), false)),
        Err(failure) => {
            metrics::counter!("fullerene_http_auth_refusals_total").increment(1);
            tracing::debug!(peer = %peer.addr, ?failure, path = route.path, "HTTP request refused");
            return Err(match failure {
                AuthFailure::Missing => ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "authentication required: an operator client certificate, or \
                     `Authorization: Bearer <token>`",
                )
                .challenge(REALM.to_string()),
                AuthFailure::Invalid(reason) => {
                    let challenge = format!(
                        "{REALM}, error=\"invalid_token\", error_description=\"{}\"",
                        quoted(&reason)
                    );
                    ApiError::new(StatusCode::UNAUTHORIZED, reason).challenge(challenge)
                }
                AuthFailure::WrongRole(identity) => ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "the client certificate belongs to {identity}; only operators' \
                         certificates may use the HTTP API"
                    ),
                ),
            });
        }
    };
    let needed = match route.access {
        Access::Read | Access::Metrics | Access::ReadOrOwner => Scope::Read,
        Access::Write => Scope::Write,
        Access::Open => return Ok((caller, by_cookie)),
    };
    if caller.scope.is_none_or(|scope| scope < needed) {
        metrics::counter!("fullerene_http_auth_refusals_total").increment(1);
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "{} may not {} {}: it needs the `{needed}` scope",
                caller.who,
                request.method(),
                route.path
            ),
        )
        .challenge(format!(
            "{REALM}, error=\"insufficient_scope\", scope=\"{needed}\""
        )));
    }
    Ok((caller, by_cookie))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// The path's parameters if it matches `pattern`, raw (percent-encoded).
fn path_params<'a>(pattern: &str, path: &'a str) -> Option<Vec<&'a str>> {
    let mut params = Vec::new();
    let mut pattern_segments = pattern.split('/');
    let mut path_segments = path.split('/');
    loop {
        match (pattern_segments.next(), path_segments.next()) {
            (None, None) => return Some(params),
            (Some(want), Some(got)) if want.starts_with('{') => {
                if got.is_empty() {
                    return None;
                }
                params.push(got);
            }
            (Some(want), Some(got)) if want == got => {}
            _ => return None,
        }
    }
}

/// Path parameter `index`, percent-decoded.
fn path_param(params: &[&str], index: usize, name: &str) -> Result<String, ApiError> {
    let raw = params.get(index).ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("no `{name}` in the path"),
        )
    })?;
    percent_decode(raw).ok_or_else(|| {
        ApiError::bad_request(format!(
            "the {name} `{raw}` in the path is not valid percent-encoded UTF-8"
        ))
    })
}

/// Decodes `%XX` escapes; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The query's parameters; each must be one `allowed`, given once, with a value.
fn query_params(
    query: Option<&str>,
    allowed: &[&str],
) -> Result<BTreeMap<String, String>, ApiError> {
    let mut params = BTreeMap::new();
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let bad = |what: &str| {
            ApiError::bad_request(format!(
                "the query parameter `{pair}` is not valid percent-encoded UTF-8 ({what})"
            ))
        };
        let key = percent_decode(key).ok_or_else(|| bad("name"))?;
        let value = percent_decode(value).ok_or_else(|| bad("value"))?;
        if !allowed.contains(&key.as_str()) {
            return Err(ApiError::bad_request(if allowed.is_empty() {
                format!("unknown query parameter `{key}`: this endpoint takes none")
            } else {
                format!(
                    "unknown query parameter `{key}`: this endpoint takes {}",
                    allowed.join(", ")
                )
            }));
        }
        if value.is_empty() {
            return Err(ApiError::bad_request(format!(
                "the query parameter `{key}` needs a value (`{key}=...`)"
            )));
        }
        if params.insert(key.clone(), value).is_some() {
            return Err(ApiError::bad_request(format!(
                "the query parameter `{key}` is given twice"
            )));
        }
    }
    Ok(params)
}

/// The published view, on the leader; a redirect on a follower.
async fn leader_view(
    api: &Api,
    request: &Request<Incoming>,
) -> Result<std::sync::Arc<PublishedView>, ApiError> {
    let leader = api.sessions.leader.borrow().clone();
    if !leader.is_self {
        return Err(redirect(&leader, api.scheme, request.uri()));
    }
    api.board
        .fresh_view(api.sessions.request_timeout)
        .await
        .map_err(|no_view| ApiError::unavailable(no_view.to_string()))
}

/// A follower's answer: the same request to the leader, when its HTTP address is known.
fn redirect(view: &LeaderView, scheme: &str, uri: &hyper::Uri) -> ApiError {
    let target = uri.path_and_query().map_or("/", |path| path.as_str());
    match (view.leader_http, &view.leader) {
        (Some(http), _) => {
            let location = format!("{scheme}://{http}{target}");
            let mut error = ApiError::new(
                StatusCode::TEMPORARY_REDIRECT,
                format!("this master does not lead; the leader serves {location}"),
            );
            error.location = Some(location);
            error
        }
        (None, Some(leader)) => ApiError::unavailable(format!(
            "this master does not lead; the leader is master {} at {} (QUIC) and announced no \
             HTTP address",
            leader.id.0, leader.addr
        )),
        (None, None) => {
            ApiError::unavailable("no leader is known yet (an election is running); retry")
        }
    }
}

fn metrics(api: &Api) -> Response<Body> {
    match &api.metrics {
        Some(handle) => {
            let mut response = Response::new(full_body(handle.render()));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "this process has no Prometheus recorder installed",
        )
        .into_response(),
    }
}

fn stamp(view: &PublishedView) -> ViewStamp {
    ViewStamp {
        leader: view.bounded.view.leader,
        term: view.bounded.term,
        applied: view.bounded.view.applied,
        built_at_ms: view.built_at_ms,
        build: view.build,
    }
}

/// Encodes `document` of `view` (once per view: the caller caches it).
fn encode(view: &PublishedView, document: Document) -> Bytes {
    let bounded = &view.bounded;
    let encoded = match document {
        Document::State => to_json(&StateDocument {
            term: bounded.term,
            built_at_ms: view.built_at_ms,
            build: view.build,
            tasks_total: bounded.tasks_total,
            tasks_omitted: bounded.tasks_omitted,
            finished_tasks: bounded.finished.clone(),
            finished_total: bounded.finished_total,
            view: bounded.view.clone(),
        }),
        Document::Agents => to_json(&AgentsDocument {
            stamp: stamp(view),
            agents: bounded.view.agents.clone(),
        }),
        Document::Frameworks => to_json(&FrameworksDocument {
            stamp: stamp(view),
            frameworks: bounded.view.frameworks.clone(),
        }),
        Document::Tasks => to_json(&TasksDocument {
            stamp: stamp(view),
            framework: None,
            tasks: bounded.view.tasks.clone(),
            tasks_omitted: bounded.tasks_omitted,
            finished: Vec::new(),
            finished_omitted: 0,
        }),
        Document::Groups => to_json(&GroupsDocument {
            stamp: stamp(view),
            groups: bounded.view.groups.clone(),
            weights: bounded.weights.clone(),
        }),
        Document::Cluster => to_json(&ClusterDocument {
            stamp: stamp(view),
            cluster: bounded.cluster.clone(),
        }),
        Document::Jobs => to_json(&JobsDocument {
            stamp: stamp(view),
            jobs: job_views(&bounded.view.frameworks, &bounded.view.tasks),
            tasks_omitted: bounded.tasks_omitted,
        }),
        Document::Reservations => to_json(&ReservationsDocument {
            stamp: stamp(view),
            accepted: bounded.view.reservations.clone(),
            rejected: bounded.rejected_reservations.clone(),
            rejected_total: bounded.rejected_reservations_total,
        }),
    };
    Bytes::from(encoded)
}

/// One framework's tasks in `view` (all frameworks' when `None`), with the finished ones
/// when `all`.
fn tasks_of(view: &PublishedView, framework: Option<&str>, all: bool) -> TasksDocument {
    let framework = framework.map(FrameworkId::from);
    let wanted = |id: &FrameworkId| framework.as_ref().is_none_or(|f| f == id);
    let bounded = &view.bounded;
    let omitted = |counts: &BTreeMap<FrameworkId, u64>| match &framework {
        Some(framework) => counts.get(framework).copied().unwrap_or(0),
        None => counts.values().sum(),
    };
    TasksDocument {
        stamp: stamp(view),
        tasks: bounded
            .view
            .tasks
            .iter()
            .filter(|task| wanted(&task.framework_id))
            .cloned()
            .collect(),
        tasks_omitted: omitted(&bounded.omitted_by_framework),
        finished: if all {
            bounded
                .finished
                .iter()
                .filter(|task| wanted(&task.framework_id))
                .cloned()
                .collect()
        } else {
            Vec::new()
        },
        finished_omitted: if all {
            omitted(&bounded.finished_omitted_by_framework)
        } else {
            0
        },
        framework,
    }
}

/// Events answered by `GET /events` without `limit`, and sent first by a stream without
/// `since`.
const DEFAULT_EVENTS_LIMIT: usize = 100;

/// `GET /events`: this master's recent events as a document, or as a stream of server-sent
/// events (`Accept: text/event-stream`, or `?follow=true`), resuming after `?since=` or the
/// `Last-Event-ID` header. Served from the ring without the node loop; a follower redirects.
fn serve_events(
    api: &Api,
    peer: &ConnectionPeer,
    request: &Request<Incoming>,
    query: &BTreeMap<String, String>,
) -> Result<Answer, ApiError> {
    let leader = api.sessions.leader.borrow().clone();
    if !leader.is_self {
        return Err(redirect(&leader, api.scheme, request.uri()));
    }
    let number = |name: &str, text: &str| {
        text.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("`{name}={text}`: `{name}` is an event number"))
        })
    };
    let last_event_id = request
        .headers()
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .filter(|value| !value.trim().is_empty());
    let since = match (query.get("since"), last_event_id) {
        (Some(since), _) => Some(number("since", since)?),
        (None, Some(id)) => Some(number("Last-Event-ID", id.trim())?),
        (None, None) => None,
    };
    let limit = match query.get("limit") {
        Some(limit) => {
            let limit = number("limit", limit)? as usize;
            if limit == 0 || limit > fullerene_proto::limits::MAX_PAGE_ITEMS {
                return Err(ApiError::bad_request(format!(
                    "`limit={limit}`: `limit` is between 1 and {}",
                    fullerene_proto::limits::MAX_PAGE_ITEMS
                )));
            }
            limit
        }
        None => DEFAULT_EVENTS_LIMIT,
    };
    let wants_stream = request
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    let follow = match query.get("follow").map(String::as_str) {
        None => wants_stream,
        Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`follow={other}`: the query parameter `follow` is `true` or `false`"
            )))
        }
    };
    let hub = &api.sessions.event_hub;
    if !follow {
        return Ok(Answer::Whole(json(StatusCode::OK, &hub.read(since, limit))));
    }
    peer.streaming
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let body = events::start(
        std::sync::Arc::clone(hub),
        api.sessions.leader.clone(),
        since,
        limit,
        api.limits.stream_lifetime,
    );
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    Ok(Answer::Stream(response))
}

/// A write's body, within the limits; refused when it is not what `payload` takes.
async fn read_body(
    headers: &hyper::HeaderMap,
    body: Incoming,
    payload: Payload,
    limits: &HttpLimits,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {} bytes", limits.max_body),
        )
        .closing()
    };
    if let Some(length) = headers.get(CONTENT_LENGTH) {
        let length: u64 = length
            .to_str()
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| {
                ApiError::bad_request("the Content-Length header is not a number").closing()
            })?;
        if length > limits.max_body as u64 {
            return Err(too_large());
        }
    }
    if let Payload::Json(_) = payload {
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        let media_type = content_type.split(';').next().unwrap_or("").trim();
        if !media_type.eq_ignore_ascii_case("application/json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "the body must be JSON with `Content-Type: application/json` (got `{content_type}`)"
                ),
            )
            .closing());
        }
    }
    let collected = tokio::time::timeout(
        limits.body_timeout,
        Limited::new(body, limits.max_body).collect(),
    )
    .await;
    let bytes = match collected {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} ms",
                    limits.body_timeout.as_millis()
                ),
            )
            .closing())
        }
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(too_large())
        }
        Ok(Err(error)) => {
            return Err(
                ApiError::bad_request(format!("the body could not be read: {error}")).closing(),
            )
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    if payload == Payload::Empty && !bytes.is_empty() {
        return Err(ApiError::bad_request("this request takes no body"));
    }
    Ok(bytes)
}

/// Decodes a strict JSON body (no unknown or missing field, nothing after the value).
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8], example: &str) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(format!(
            "the body is empty; expected a JSON object like {example}"
        )));
    }
    serde_json::from_slice(body).map_err(|error| {
        ApiError::bad_request(format!(
            "the body is not what this request takes ({error}); expected a JSON object like {example}"
        ))
    })
}

/// Proposes `request` and answers once the node loop does.
async fn write(
    api: &Api,
    caller: &Caller,
    request: OperatorRequest,
    uri: &hyper::Uri,
) -> Result<Response<Body>, ApiError> {
    tracing::info!(who = %caller.who, ?request, "HTTP API write");
    let shutting_down = || ApiError::unavailable("the master is shutting down");
    let (reply, answer) = oneshot::channel();
    let asked = async {
        api.sessions
            .events
            .send(Event::Operator {
                principal: caller.principal.clone(),
                request,
                reply,
            })
            .await
            .map_err(|_| shutting_down())?;
        answer.await.map_err(|_| shutting_down())
    };
    let response = tokio::time::timeout(api.sessions.request_timeout, asked)
        .await
        .map_err(|_| {
            ApiError::unavailable(
                "no answer in time (no quorum, or the leader changed); the write may or may not \
                 have been committed: read before you retry",
            )
        })??;
    match response {
        OperatorResponse::Done => Ok(json(StatusCode::OK, &WriteDone { committed: true })),
        OperatorResponse::Redirect(_) => {
            let leader = api.sessions.leader.borrow().clone();
            Err(redirect(&leader, api.scheme, uri))
        }
        OperatorResponse::Error(error) => {
            let status = match error.code {
                ErrorCode::InvalidRequest
                | ErrorCode::Malformed
                | ErrorCode::UnknownExecutor
                | ErrorCode::UnknownOffer
                | ErrorCode::OfferNotYours
                | ErrorCode::MixedAgents => StatusCode::BAD_REQUEST,
                ErrorCode::Unauthorized => StatusCode::FORBIDDEN,
                ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::QuotaExceeded
                | ErrorCode::DuplicateTask
                | ErrorCode::ReservationExists
                | ErrorCode::InsufficientResources => StatusCode::CONFLICT,
                ErrorCode::UnknownTask
                | ErrorCode::UnknownAgent
                | ErrorCode::UnknownFramework
                | ErrorCode::UnknownReservation => StatusCode::NOT_FOUND,
                ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::Unavailable | ErrorCode::OutcomeUnknown => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            Err(ApiError::new(status, error.message))
        }
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unexpected answer {other:?}"),
        )),
    }
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(value).unwrap_or_else(|error| {
        serde_json::to_vec(&ErrorDocument {
            error: format!("cannot encode the document: {error}"),
        })
        .unwrap_or_default()
    })
}

fn json_bytes(body: Bytes) -> Response<Body> {
    let mut response = Response::new(full_body(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON response of `value` with `status`.
pub(super) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let mut response = json_bytes(Bytes::from(to_json(value)));
    *response.status_mut() = status;
    response
}

/// `GET /frameworks/{framework}/tasks/{task}/files/{name}`: one chunk, or with `follow=true`
/// a stream until the task has ended and the file is read to its end.
async fn task_file(
    api: &Api,
    reader: &Reader,
    params: &[&str],
    query: &BTreeMap<String, String>,
    uri: &hyper::Uri,
) -> Result<Response<Body>, ApiError> {
    let number = |name: &str, default: u64| -> Result<u64, ApiError> {
        query.get(name).map_or(Ok(default), |text| {
            text.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "`{name}` must be a whole number of bytes, not `{text}`"
                ))
            })
        })
    };
    let follow = match query.get("follow").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`follow` is `true` or `false`, not `{other}`"
            )))
        }
    };
    let read = TaskFileRead {
        framework_id: FrameworkId::from(path_param(params, 0, "framework")?),
        task_id: TaskId::from(path_param(params, 1, "task")?),
        name: path_param(params, 2, "name")?,
        offset: number("offset", 0)?,
        length: number("length", MAX_FILE_READ_BYTES)?,
        agent_id: query.get("agent").map(|agent| AgentId::from(agent.clone())),
    };
    let (agent, first) = read_task_file(&api.sessions, reader, read.clone())
        .await
        .map_err(|error| file_error(api, error, uri))?;
    let mut response = if follow {
        let read = TaskFileRead {
            agent_id: Some(agent),
            ..read
        };
        Response::new(follow_body(
            Arc::clone(&api.sessions),
            reader.clone(),
            read,
            first.clone(),
        ))
    } else {
        Response::new(full_body(first.data.clone()))
    };
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(FILE_SIZE_HEADER, HeaderValue::from(first.size));
    headers.insert(FILE_OFFSET_HEADER, HeaderValue::from(first.offset));
    headers.insert(
        TASK_ENDED_HEADER,
        HeaderValue::from_static(if first.task_ended { "true" } else { "false" }),
    );
    Ok(response)
}

/// The streamed body of a followed file: `first`'s bytes, then what the agent reads from
/// where they end, every [`FOLLOW_POLL`] while nothing new comes, until the task has ended and
/// the end is reached, a read fails, or the client goes away (the body is dropped).
fn follow_body(
    sessions: Arc<crate::server::sessions::SessionContext>,
    reader: Reader,
    mut read: TaskFileRead,
    first: FileChunk,
) -> Body {
    let (mut sender, body) = Channel::<Bytes, std::convert::Infallible>::new(4);
    tokio::spawn(async move {
        let mut chunk = first;
        read.length = MAX_FILE_READ_BYTES;
        loop {
            let got = chunk.data.len() as u64;
            read.offset = chunk.offset + got;
            let done = chunk.task_ended && read.offset >= chunk.size;
            if got > 0 && sender.send_data(Bytes::from(chunk.data)).await.is_err() {
                return;
            }
            if done {
                return;
            }
            if got == 0 {
                tokio::time::sleep(FOLLOW_POLL).await;
            }
            chunk = match read_task_file(&sessions, &reader, read.clone()).await {
                Ok((_, chunk)) => chunk,
                Err(error) => {
                    tracing::warn!(%error, "a followed task file ended early");
                    return;
                }
            };
        }
    });
    body.boxed_unsync()
}

/// The HTTP answer to a failed task file read.
fn file_error(api: &Api, error: FileError, uri: &hyper::Uri) -> ApiError {
    let status = match &error {
        FileError::NotLeader => {
            let leader = api.sessions.leader.borrow().clone();
            return redirect(&leader, api.scheme, uri);
        }
        FileError::NotOwner(..) => StatusCode::FORBIDDEN,
        FileError::UnknownFramework(_) | FileError::UnknownTask(_) | FileError::NoSandbox(_) => {
            StatusCode::NOT_FOUND
        }
        FileError::Refused(refusal) => match refusal {
            FileRefusal::BadName(_) => StatusCode::BAD_REQUEST,
            FileRefusal::NoSandbox | FileRefusal::NoSuchFile(_) | FileRefusal::NotAFile(_) => {
                StatusCode::NOT_FOUND
            }
            FileRefusal::Collected => StatusCode::GONE,
            FileRefusal::Busy | FileRefusal::Io(_) => StatusCode::SERVICE_UNAVAILABLE,
        },
        FileError::AgentGone(_)
        | FileError::Busy(_)
        | FileError::Timeout(_)
        | FileError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, error.to_string())
}
