//! The HTTP API of a real master (the server shell, the node loop and Raft on in-memory
//! storage, in this process) over real TLS on loopback: who may read and write, the limits on
//! bodies, the errors, plain HTTP on loopback only, and that a flood of readers costs the node
//! loop at most one view build per interval while commits keep flowing.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fullerene_master::raft_node::{NodeConfig, RaftNode};
use fullerene_master::server::http::auth::{generate_token, token_line, Scope};
use fullerene_master::server::http::{install_recorder, HttpLimits};
use fullerene_master::server::{self, MasterExit, ServerError, ShellConfig};
use fullerene_master::state::ClusterSettings;
use fullerene_master::storage::MemStorage;
use fullerene_proto::http::{ClusterDocument, GroupsDocument, StateDocument, TasksDocument};
use fullerene_transport::certs::{write_file, CertCounts};
use fullerene_transport::testkit::{localhost, TestCerts};
use fullerene_transport::{Role, Server, TlsMaterial, TransportConfig, MASTER_SERVER_NAME};
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderMap;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{client::TlsStream, TlsConnector};

/// Generous: only a hang fails a test on a loaded machine.
const WAIT: Duration = Duration::from_secs(20);

/// The tokens every test master accepts.
struct Tokens {
    read: String,
    write: String,
    expired: String,
}

/// One master on loopback with an HTTPS API.
struct Master {
    http: SocketAddr,
    certs: TestCerts,
    tokens: Tokens,
    tokens_file: PathBuf,
    _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<MasterExit, ServerError>>>,
}

/// The process's Prometheus recorder (one per process; tests may share a process).
fn recorder() -> Option<PrometheusHandle> {
    static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    RECORDER.get_or_init(|| install_recorder().ok()).clone()
}

fn free_tcp_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("an address")
}

impl Master {
    /// Starts a one-master group with `configure` applied to its shell config, and waits
    /// until its API serves `/state`.
    async fn start(configure: impl FnOnce(&mut ShellConfig)) -> Master {
        let master = Master::spawn(configure).await;
        master.wait_until_serving().await;
        master
    }

    /// Starts a one-master group without waiting for it.
    async fn spawn(configure: impl FnOnce(&mut ShellConfig)) -> Master {
        // Before the node registers its metrics: they bind to the recorder present then.
        let metrics = recorder();
        let certs = TestCerts::new(CertCounts {
            masters: 1,
            agents: 1,
            frameworks: 1,
            operators: 1,
        });
        let dir = tempfile::tempdir().expect("a directory");
        let tokens = Tokens {
            read: generate_token().expect("a token"),
            write: generate_token().expect("a token"),
            expired: generate_token().expect("a token"),
        };
        let tokens_file = dir.path().join("tokens");
        let text = [
            token_line("reader", Scope::Read, &tokens.read, None),
            token_line("writer", Scope::Write, &tokens.write, None),
            token_line("old", Scope::Write, &tokens.expired, Some(1_000_000_000)),
        ]
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("lines")
        .join("\n");
        write_file(&tokens_file, text.as_bytes(), true).expect("the token file");

        let tls = certs.tls(Role::Master, 1);
        let server =
            Server::bind(localhost(), &tls, TransportConfig::default()).expect("the QUIC endpoint");
        let quic = server.local_addr();
        let http = free_tcp_addr();
        let members: BTreeMap<u64, SocketAddr> = [(1, quic)].into_iter().collect();
        let node = RaftNode::bootstrap(
            NodeConfig::new(1),
            MemStorage::new("m1"),
            &[1],
            ClusterSettings {
                master_addresses: members.clone(),
                ..ClusterSettings::default()
            },
        )
        .expect("bootstrap");
        let mut shell = ShellConfig::new(members);
        shell.core.http_addr = Some(http);
        shell.http.tokens = Some(tokens_file.clone());
        shell.metrics = metrics;
        configure(&mut shell);
        let http = shell.core.http_addr.unwrap_or(http);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            server::serve(node, server, &tls, shell, shutdown).await
        });
        Master {
            http,
            certs,
            tokens,
            tokens_file,
            _dir: dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// How the master's task ended, once it has (a master refused at start ends at once).
    async fn ended(mut self) -> Result<MasterExit, ServerError> {
        let task = self.task.take().expect("a running master");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the master ended in time")
            .expect("the master's task")
    }

    async fn wait_until_serving(&self) {
        let operator = self.client(Credentials::Operator);
        let started = Instant::now();
        loop {
            if let Ok(answer) = operator.try_get(self.http, "/state").await {
                if answer.status == StatusCode::OK {
                    return;
                }
            }
            assert!(started.elapsed() < WAIT, "the master never served /state");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn tls(&self, role: Role) -> TlsMaterial {
        self.certs.tls(role, 1)
    }

    fn client(&self, credentials: Credentials) -> Client {
        let (present, token) = match &credentials {
            Credentials::Operator | Credentials::Certificate(_) => (true, None),
            Credentials::Token(token) => (false, Some(token.clone())),
            Credentials::None => (false, None),
        };
        let tls = match credentials {
            Credentials::Certificate(role) => self.tls(role),
            _ => self.tls(Role::Operator),
        };
        Client {
            connector: TlsConnector::from(Arc::new(
                tls.https_client_config(present).expect("a client config"),
            )),
            token,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let exit = tokio::time::timeout(WAIT, task).await;
            assert!(
                matches!(exit, Ok(Ok(Ok(MasterExit::Shutdown)))),
                "the master did not stop cleanly: {exit:?}"
            );
        }
    }
}

enum Credentials {
    /// The operator's certificate.
    Operator,
    /// The certificate of another role.
    Certificate(Role),
    /// A bearer token, no certificate.
    Token(String),
    None,
}

/// An HTTPS client (a new connection per request unless [`Client::connect`] is used).
struct Client {
    connector: TlsConnector,
    token: Option<String>,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// A kept-alive connection.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    token: Option<String>,
}

impl Connection {
    async fn send(&mut self, method: Method, path: &str, body: Option<&str>) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "fullerene-master");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
            .expect("a request");
        self.sender.ready().await.expect("the connection is ready");
        let response = self.sender.send_request(request).await.expect("a response");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the body")
            .to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}

impl Client {
    async fn tls_stream(&self, addr: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(MASTER_SERVER_NAME).expect("a server name");
        self.connector.connect(name, tcp).await
    }

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<Connection> {
        let stream = self.tls_stream(addr).await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        Ok(Connection {
            sender,
            token: self.token.clone(),
        })
    }

    async fn try_get(&self, addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
        let mut connection = self.connect(addr).await?;
        Ok(connection.send(Method::GET, path, None).await)
    }

    async fn send(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        body: Option<&str>,
    ) -> Answer {
        let mut connection = tokio::time::timeout(WAIT, self.connect(addr))
            .await
            .expect("connected in time")
            .expect("a connection");
        tokio::time::timeout(WAIT, connection.send(method, path, body))
            .await
            .expect("an answer in time")
    }

    async fn get(&self, addr: SocketAddr, path: &str) -> Answer {
        self.send(addr, Method::GET, path, None).await
    }

    /// Sends `raw` bytes on a new TLS connection, then waits for the answer's first line.
    async fn raw(&self, addr: SocketAddr, raw: &[u8], then_wait: bool) -> String {
        let mut stream = self.tls_stream(addr).await.expect("a TLS connection");
        stream.write_all(raw).await.expect("write");
        stream.flush().await.expect("flush");
        if !then_wait {
            let _ = stream.shutdown().await;
        }
        let mut got = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut got)).await;
        String::from_utf8_lossy(&got).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_read_and_write_over_https_and_other_roles_are_refused() {
    let master = Master::start(|_| {}).await;
    let operator = master.client(Credentials::Operator);

    let answer = operator.get(master.http, "/state").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.header("content-type"), "application/json");
    let state: StateDocument = answer.json();
    assert_eq!(state.view.leader.0, 1);
    assert!(state.term >= 1 && state.build >= 1, "{}", answer.body);
    assert_eq!((state.tasks_total, state.tasks_omitted), (0, 0));

    for role in [Role::Agent, Role::Framework] {
        let answer = master
            .client(Credentials::Certificate(role))
            .get(master.http, "/state")
            .await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{role}: {}",
            answer.body
        );
        assert!(
            answer.body.contains(&format!("{role} {role}-1")),
            "{}",
            answer.body
        );
    }
    let answer = master
        .client(Credentials::None)
        .get(master.http, "/state")
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    assert_eq!(
        answer.header("www-authenticate"),
        "Bearer realm=\"fullerene\""
    );

    // A write, then a read that sees it (read-your-writes, whatever the view's interval).
    let answer = operator
        .send(
            master.http,
            Method::PUT,
            "/groups/batch%20jobs/weight",
            Some(r#"{"weight": 2.5}"#),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        answer.body.replace(char::is_whitespace, ""),
        r#"{"committed":true}"#
    );
    let groups: GroupsDocument = operator.get(master.http, "/groups").await.json();
    assert_eq!(groups.weights.get("batch jobs"), Some(&2.5), "{groups:?}");
    // The state machine's own refusal comes back as a 400 naming it.
    let answer = operator
        .send(
            master.http,
            Method::PUT,
            "/groups/batch/weight",
            Some(r#"{"weight": -1}"#),
        )
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(answer.body.contains("weight"), "{}", answer.body);

    // Membership: a learner added and removed through the API.
    let learner = free_tcp_addr();
    let body = format!(r#"{{"id": 2, "addr": "{learner}"}}"#);
    let answer = operator
        .send(master.http, Method::POST, "/masters", Some(&body))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let cluster: ClusterDocument = operator.get(master.http, "/cluster").await.json();
    assert!(
        cluster
            .cluster
            .members
            .iter()
            .any(|m| m.id.0 == 2 && !m.voter),
        "{cluster:?}"
    );
    let answer = operator
        .send(master.http, Method::DELETE, "/masters/2", None)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let answer = operator
        .send(master.http, Method::DELETE, "/masters/9", None)
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(answer.body.contains("not a member"), "{}", answer.body);

    // Control: each route reaches the leader's state machine, which names what it refused.
    for (method, path, body, refusal) in [
        (
            Method::POST,
            "/agents/agent-9/drain",
            Some(r#"{"deadline_after_ms": 60000}"#),
            "unknown agent `agent-9`",
        ),
        (
            Method::DELETE,
            "/agents/agent-9/drain",
            None,
            "unknown agent `agent-9`",
        ),
        (
            Method::POST,
            "/frameworks/f9/tasks/t9/kill",
            None,
            "unknown task `f9/t9`",
        ),
        (
            Method::POST,
            "/frameworks/f9/teardown",
            None,
            "unknown framework `f9`",
        ),
    ] {
        let answer = operator.send(master.http, method, path, body).await;
        assert!(answer.status.is_client_error(), "{path}: {}", answer.body);
        assert!(answer.body.contains(refusal), "{path}: {}", answer.body);
    }
    let answer = operator
        .send(
            master.http,
            Method::POST,
            "/agents/agent-9/drain",
            Some(r#"{"deadline": 1}"#),
        )
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(answer.body.contains("deadline_after_ms"), "{}", answer.body);

    // The other documents.
    for path in ["/agents", "/frameworks", "/tasks", "/tasks?framework=f%201"] {
        let answer = operator.get(master.http, path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
    }
    let tasks: TasksDocument = operator
        .get(master.http, "/tasks?framework=f%201")
        .await
        .json();
    assert_eq!(
        tasks.framework.map(|f| f.as_str().to_string()),
        Some("f 1".to_string())
    );
    master.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_for_scope_and_expiry_and_reloaded() {
    let master = Master::start(|_| {}).await;
    let reader = master.client(Credentials::Token(master.tokens.read.clone()));
    let writer = master.client(Credentials::Token(master.tokens.write.clone()));
    let weight = |w: f64| format!(r#"{{"weight": {w}}}"#);

    assert_eq!(
        reader.get(master.http, "/state").await.status,
        StatusCode::OK
    );
    let answer = reader
        .send(
            master.http,
            Method::PUT,
            "/groups/g/weight",
            Some(&weight(3.0)),
        )
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
    assert!(answer
        .header("www-authenticate")
        .contains("insufficient_scope"));
    assert!(answer.body.contains("token reader"), "{}", answer.body);
    let answer = writer
        .send(
            master.http,
            Method::PUT,
            "/groups/g/weight",
            Some(&weight(3.0)),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let groups: GroupsDocument = reader.get(master.http, "/groups").await.json();
    assert_eq!(groups.weights.get("g"), Some(&3.0));

    for (token, expect) in [
        (master.tokens.expired.clone(), "expired"),
        (generate_token().expect("a token"), "not valid"),
        ("short".to_string(), "not valid"),
    ] {
        let answer = master
            .client(Credentials::Token(token))
            .get(master.http, "/state")
            .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
        assert!(answer.body.contains(expect), "{}", answer.body);
        assert!(answer.header("www-authenticate").contains("invalid_token"));
    }
    let answer = master
        .client(Credentials::None)
        .raw(
            master.http,
            b"GET /state HTTP/1.1\r\nhost: x\r\nauthorization: Basic YTpi\r\nconnection: close\r\n\r\n",
            true,
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");

    // A token added to the file works without a restart; one removed stops working.
    let added = generate_token().expect("a token");
    let text = [
        token_line("writer", Scope::Write, &master.tokens.write, None),
        token_line("added", Scope::Read, &added, None),
    ]
    .into_iter()
    .collect::<Result<Vec<_>, _>>()
    .expect("lines")
    .join("\n");
    write_file(&master.tokens_file, text.as_bytes(), true).expect("the token file");
    let added_client = master.client(Credentials::Token(added));
    let started = Instant::now();
    while added_client.get(master.http, "/state").await.status != StatusCode::OK {
        assert!(started.elapsed() < WAIT, "the new token was never accepted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        reader.get(master.http, "/state").await.status,
        StatusCode::UNAUTHORIZED,
        "the removed token still works"
    );
    master.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_bounded_in_size_and_time_and_decoded_strictly() {
    let master = Master::start(|shell| {
        shell.http.limits = HttpLimits {
            body_timeout: Duration::from_secs(1),
            max_body: 1024,
            ..HttpLimits::default()
        };
    })
    .await;
    let writer = master.client(Credentials::Token(master.tokens.write.clone()));
    let token = &master.tokens.write;
    let put = |extra_headers: &str, body: &str| {
        format!(
            "PUT /groups/g/weight HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n{extra_headers}\r\n{body}"
        )
        .into_bytes()
    };

    // Too large, by its length...
    let answer = writer
        .raw(
            master.http,
            &put(
                "content-type: application/json\r\ncontent-length: 100000\r\n",
                "",
            ),
            false,
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // ... or as it streams in (chunked: no length given).
    let chunk = format!("{:x}\r\n{}\r\n", 600, " ".repeat(600));
    let chunked = format!("{chunk}{chunk}0\r\n\r\n");
    let answer = writer
        .raw(
            master.http,
            &put(
                "content-type: application/json\r\ntransfer-encoding: chunked\r\n",
                &chunked,
            ),
            false,
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // A body that stops arriving is cut by the timeout.
    let slow = Instant::now();
    let answer = writer
        .raw(
            master.http,
            &put(
                "content-type: application/json\r\ncontent-length: 40\r\n",
                "{\"wei",
            ),
            true,
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(slow.elapsed() < WAIT);

    for (content_type, body, status, expect) in [
        ("text/plain", r#"{"weight": 1}"#, 415, "application/json"),
        ("application/json", "", 400, "empty"),
        (
            "application/json",
            r#"{"weight": 1, "colour": 2}"#,
            400,
            "unknown field `colour`",
        ),
        ("application/json", r#"{"wieght": 1}"#, 400, "wieght"),
        (
            "application/json",
            r#"{"weight": "1"}"#,
            400,
            "invalid type",
        ),
        ("application/json", r#"{"weight": 1} x"#, 400, "trailing"),
        (
            "application/json; charset=utf-8",
            r#"{"weight": 1}"#,
            200,
            "committed",
        ),
    ] {
        let raw = put(
            &format!(
                "content-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            ),
            body,
        );
        let answer = writer.raw(master.http, &raw, true).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{body}: {answer}"
        );
        assert!(answer.contains(expect), "{body}: {answer} lacks {expect}");
    }

    let operator = master.client(Credentials::Operator);
    let answer = operator
        .send(master.http, Method::POST, "/state", Some("{}"))
        .await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.header("allow"), "GET");
    let answer = operator
        .send(master.http, Method::GET, "/groups/g/weight", None)
        .await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.header("allow"), "PUT");
    let answer = operator.get(master.http, "/nowhere").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(answer.body.contains("/state"), "{}", answer.body);
    let answer = operator.get(master.http, "/state?verbose=1").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("verbose"), "{}", answer.body);
    let answer = operator
        .get(master.http, "/tasks?framework=a&framework=b")
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("twice"), "{}", answer.body);
    let answer = operator
        .send(master.http, Method::DELETE, "/masters/two", None)
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("`two`"), "{}", answer.body);
    let answer = operator
        .send(master.http, Method::DELETE, "/masters/2", Some("{}"))
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("no body"), "{}", answer.body);
    master.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_authenticated_unless_opened_to_scrapers() {
    let closed = Master::start(|_| {}).await;
    let anonymous = closed.client(Credentials::None);
    assert_eq!(
        anonymous.get(closed.http, "/metrics").await.status,
        StatusCode::UNAUTHORIZED
    );
    let answer = closed
        .client(Credentials::Token(closed.tokens.read.clone()))
        .get(closed.http, "/metrics")
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    closed.stop().await;

    let open = Master::start(|shell| shell.http.metrics_open = true).await;
    let anonymous = open.client(Credentials::None);
    let answer = anonymous.get(open.http, "/metrics").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(
        answer.body.contains("fullerene_raft_term"),
        "{}",
        answer.body
    );
    assert_eq!(
        anonymous.get(open.http, "/state").await.status,
        StatusCode::UNAUTHORIZED,
        "only /metrics is opened"
    );
    open.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_is_served_on_loopback_only() {
    let master = Master::spawn(|shell| shell.http.plaintext = true).await;
    let request = format!(
        "GET /state HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nconnection: close\r\n\r\n",
        master.tokens.read
    );
    let started = Instant::now();
    loop {
        let mut got = Vec::new();
        if let Ok(mut tcp) = TcpStream::connect(master.http).await {
            if tcp.write_all(request.as_bytes()).await.is_ok() {
                let _ = tokio::time::timeout(WAIT, tcp.read_to_end(&mut got)).await;
            }
        }
        let answer = String::from_utf8_lossy(&got);
        if answer.starts_with("HTTP/1.1 200") {
            assert!(answer.contains("\"tasks_total\""), "{answer}");
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "no answer over plain HTTP: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    master.stop().await;

    let refused = Master::spawn(|shell| {
        shell.http.plaintext = true;
        shell.core.http_addr = Some(SocketAddr::from(([0, 0, 0, 0], 0)));
    })
    .await;
    let ended = refused.ended().await;
    assert!(
        matches!(ended, Err(ServerError::PlaintextNotLoopback(_))),
        "plain HTTP on every interface was not refused: {ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_readers_costs_one_view_build_per_interval_while_commits_flow() {
    const INTERVAL: Duration = Duration::from_millis(200);
    const READERS: usize = 16;
    const READS_EACH: usize = 25;
    const WRITES: usize = 20;
    let master = Master::start(|shell| shell.http.view_interval = INTERVAL).await;
    let build_of = |answer: &Answer| answer.json::<StateDocument>().build;
    let operator = master.client(Credentials::Operator);
    let first = build_of(&operator.get(master.http, "/state").await);

    let flood_started = Instant::now();
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let client = master.client(Credentials::Token(master.tokens.read.clone()));
        let http = master.http;
        readers.push(tokio::spawn(async move {
            let mut connection = client.connect(http).await.expect("a connection");
            let mut builds = Vec::new();
            for _ in 0..READS_EACH {
                let answer = connection.send(Method::GET, "/state", None).await;
                assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
                builds.push(answer.json::<StateDocument>().build);
            }
            builds
        }));
    }
    let writer = master.client(Credentials::Token(master.tokens.write.clone()));
    let http = master.http;
    let writes = tokio::spawn(async move {
        let mut connection = writer.connect(http).await.expect("a connection");
        for i in 0..WRITES {
            let body = format!(r#"{{"weight": {}}}"#, i + 1);
            let answer = connection
                .send(Method::PUT, "/groups/flood/weight", Some(&body))
                .await;
            assert_eq!(answer.status, StatusCode::OK, "write {i}: {}", answer.body);
        }
    });
    let mut seen = Vec::new();
    for reader in readers {
        seen.extend(
            tokio::time::timeout(WAIT * 3, reader)
                .await
                .expect("in time")
                .expect("reads"),
        );
    }
    tokio::time::timeout(WAIT, writes)
        .await
        .expect("in time")
        .expect("the writes committed");
    let flood = flood_started.elapsed();

    let last = seen.iter().copied().max().unwrap_or(first);
    let builds = last - first;
    // Builds are at least an interval apart, and the first counted one came at least an
    // interval after `first`, which was at most an interval (plus one answer) old when the
    // flood started: so at most one per interval of the flood, plus two at its edges.
    let allowed = u64::try_from(flood.as_millis() / INTERVAL.as_millis()).unwrap_or(u64::MAX) + 2;
    eprintln!(
        "{} reads and {WRITES} writes in {flood:?}: {builds} view builds (at most {allowed} allowed)",
        seen.len()
    );
    assert_eq!(seen.len(), READERS * READS_EACH);
    assert!(
        builds <= allowed,
        "{builds} builds in {flood:?} at one per {INTERVAL:?}"
    );
    // The last write is in the view a read after it gets.
    let groups: GroupsDocument = operator.get(master.http, "/groups").await.json();
    assert_eq!(groups.weights.get("flood"), Some(&(WRITES as f64)));

    // Idle costs nothing: no build between two reads far apart but the one the second asks for.
    tokio::time::sleep(INTERVAL * 2).await;
    let before = build_of(&operator.get(master.http, "/state").await);
    tokio::time::sleep(INTERVAL * 3).await;
    let after = build_of(&operator.get(master.http, "/state").await);
    assert_eq!(after, before + 1, "views were built while nobody asked");
    master.stop().await;
}

/// The value of the series `series` (name and labels, exactly as rendered) in a scrape.
fn scraped(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Under inline persistence a write is committed and applied within the step that flushed
/// it; the latency measured against the step's own clock reading read 0 s every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apply_latency_of_a_committed_write_is_measured() {
    let master = Master::start(|_| {}).await;
    let operator = master.client(Credentials::Operator);
    for weight in 1..=3 {
        let answer = operator
            .send(
                master.http,
                Method::PUT,
                "/groups/batch/weight",
                Some(&format!(r#"{{"weight": {weight}}}"#)),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let text = operator.get(master.http, "/metrics").await.body;
    let count = scraped(
        &text,
        "fullerene_raft_apply_latency_seconds_count{node=\"1\"}",
    );
    let sum = scraped(
        &text,
        "fullerene_raft_apply_latency_seconds_sum{node=\"1\"}",
    );
    assert!(count.is_some_and(|c| c >= 3.0), "{text}");
    assert!(sum.is_some_and(|s| s > 0.0), "{text}");
    master.stop().await;
}

/// Reads an event stream's chunks until `done` says the text so far is enough.
async fn read_stream_until(
    body: &mut hyper::body::Incoming,
    text: &mut String,
    done: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + WAIT;
    while !done(text) {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = tokio::time::timeout(left, body.frame())
            .await
            .unwrap_or_else(|_| panic!("the stream sent no more in time; so far:\n{text}"))
            .expect("the stream goes on")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

/// Opens `GET path` as an event stream (`Accept: text/event-stream`), with `last_event_id`.
async fn open_stream(
    client: &Client,
    addr: SocketAddr,
    path: &str,
    last_event_id: Option<u64>,
) -> hyper::Response<hyper::body::Incoming> {
    let stream = client.tls_stream(addr).await.expect("a TLS connection");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("a handshake");
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header("host", "fullerene-master")
        .header("accept", "text/event-stream");
    if let Some(token) = &client.token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let request = request.body(Full::new(Bytes::new())).expect("a request");
    tokio::time::timeout(WAIT, sender.send_request(request))
        .await
        .expect("an answer in time")
        .expect("a response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_served_as_a_document_and_as_a_stream_that_resumes() {
    use fullerene_proto::http::{ClusterEvent, EventsDocument};
    let master = Master::start(|shell| shell.events_kept = 4).await;
    let reader = master.client(Credentials::Token(master.tokens.read.clone()));
    let operator = master.client(Credentials::Operator);

    // The election that made this master leader is the first event of its log.
    let events: EventsDocument = reader.get(master.http, "/events").await.json();
    assert_eq!(events.master.0, 1);
    assert!(!events.missed);
    assert!(
        matches!(
            events.events.first().map(|e| &e.event),
            Some(ClusterEvent::LeaderElected {
                leader: Some(1),
                ..
            })
        ),
        "{events:?}"
    );
    let after_election = events.last;

    // A stream from there sees a write's event, numbered, with its kind and JSON.
    let response = open_stream(
        &reader,
        master.http,
        &format!("/events?since={after_election}"),
        None,
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .map(hyper::header::HeaderValue::as_bytes),
        Some(&b"text/event-stream"[..])
    );
    let mut body = response.into_body();
    let answer = operator
        .send(
            master.http,
            Method::PUT,
            "/groups/etl/weight",
            Some(r#"{"weight": 3.0}"#),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let mut text = String::new();
    read_stream_until(&mut body, &mut text, |t| {
        t.contains("\n\n") && t.contains("data: ")
    })
    .await;
    assert!(text.starts_with("retry: 1000\n\n"), "{text}");
    let frame = text
        .split("\n\n")
        .find(|frame| frame.contains("event: group_weight_changed"))
        .unwrap_or_else(|| panic!("no weight event in:\n{text}"));
    let id: u64 = frame
        .lines()
        .find_map(|line| line.strip_prefix("id: "))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no id in {frame}"));
    assert!(id > after_election);
    let data = frame
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .expect("a data line");
    let record: fullerene_proto::http::EventRecord =
        serde_json::from_str(data).expect("an event record");
    assert_eq!(record.seq, id);
    assert_eq!(
        record.event,
        ClusterEvent::GroupWeightChanged {
            group: "etl".to_string(),
            weight: 3.0
        }
    );
    drop(body);

    // Resuming with Last-Event-ID gives what came after it, and nothing before.
    for weight in [4.0, 5.0] {
        let answer = operator
            .send(
                master.http,
                Method::PUT,
                "/groups/etl/weight",
                Some(&format!(r#"{{"weight": {weight}}}"#)),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let mut body = open_stream(&reader, master.http, "/events", Some(id))
        .await
        .into_body();
    let mut text = String::new();
    read_stream_until(&mut body, &mut text, |t| t.contains("\"weight\":5.0")).await;
    assert!(!text.contains(&format!("id: {id}\n")), "{text}");
    assert!(text.contains("\"weight\":4.0"), "{text}");
    drop(body);

    // The ring keeps 4 events: a client asking from the start is told what it missed.
    for weight in [6.0, 7.0, 8.0] {
        operator
            .send(
                master.http,
                Method::PUT,
                "/groups/etl/weight",
                Some(&format!(r#"{{"weight": {weight}}}"#)),
            )
            .await;
    }
    let events: EventsDocument = reader
        .get(
            master.http,
            &format!("/events?since={after_election}&limit=2"),
        )
        .await
        .json();
    assert!(events.missed, "{events:?}");
    assert!(events.floor > after_election);
    assert_eq!(events.events.len(), 2);
    assert!(events.more);
    assert!(events.events.iter().all(|e| e.seq > events.floor));
    let mut body = open_stream(
        &reader,
        master.http,
        &format!("/events?since={after_election}"),
        None,
    )
    .await
    .into_body();
    let mut text = String::new();
    read_stream_until(&mut body, &mut text, |t| t.contains("\"weight\":8.0")).await;
    assert!(text.contains("event: lagged\n"), "{text}");
    drop(body);

    // Bad queries are refused naming what is wrong; `/tasks?all=true` lists finished tasks.
    for (path, needle) in [
        ("/events?since=x", "since"),
        ("/events?limit=0", "limit"),
        ("/events?follow=maybe", "follow"),
        ("/tasks?all=yes", "all"),
    ] {
        let answer = reader.get(master.http, path).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(answer.body.contains(needle), "{path}: {}", answer.body);
    }
    let tasks: TasksDocument = reader.get(master.http, "/tasks?all=true").await.json();
    assert!(tasks.finished.is_empty() && tasks.finished_omitted == 0);
    let answer = master
        .client(Credentials::None)
        .get(master.http, "/events")
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    master.stop().await;
}
