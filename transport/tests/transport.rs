//! The mutual-TLS QUIC transport, end to end on loopback: real quinn endpoints on ports chosen by
//! the OS, certificates generated into a temporary directory by `fullerene_transport::certs`
//! (the testkit's `TestCerts`), sessions answered by the testkit's `EchoMaster`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fullerene_proto::messages::{AgentToMaster, ErrorCode, SessionOpen};
use fullerene_transport::certs::{self, CertCounts};
use fullerene_transport::testkit::{localhost, within, EchoMaster, EchoedSession, TestCerts};
use fullerene_transport::{
    Client, Connection, ConnectionError, PeerIdentity, Role, Server, StreamErrorCode, TlsMaterial,
    TransportConfig, TransportError, ALPN_PROTOCOL, MASTER_SERVER_NAME,
};
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType};
use tokio::net::UdpSocket;
use tokio::time::timeout;

/// A development cluster's certificates: enough of each role for every test here.
fn cluster_certs() -> TestCerts {
    TestCerts::new(CertCounts {
        masters: 2,
        agents: 2,
        frameworks: 1,
        operators: 1,
    })
}

/// The cluster CA's certificate (PEM).
fn ca_pem(certs: &TestCerts) -> String {
    std::fs::read_to_string(&certs.generated().ca_cert).unwrap()
}

/// Signs `params` with the cluster CA, bypassing `certs`' checks, for certificates `certs`
/// would never make. Returns (certificate PEM, key PEM).
fn sign(certs: &TestCerts, params: CertificateParams) -> (String, String) {
    let ca_key =
        KeyPair::from_pem(&std::fs::read_to_string(&certs.generated().ca_key).unwrap()).unwrap();
    let ca_params = CertificateParams::from_ca_cert_pem(&ca_pem(certs)).unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
    (cert.pem(), key.serialize_pem())
}

async fn round_trip(connection: &Connection, kind: SessionOpen, text: &str) -> String {
    let mut session = within(connection.open_session(kind)).await.unwrap();
    within(session.tx.send(&text.to_string())).await.unwrap();
    within(session.rx.recv::<String>()).await.unwrap().unwrap()
}

// -------------------------------------------------------------------------------------------
// (1) Certificates from another CA
// -------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_client_whose_certificate_comes_from_another_ca_is_refused() {
    let certs = cluster_certs();
    let mut echo = EchoMaster::start(&certs.tls(Role::Master, 1), TransportConfig::default());
    let addr = echo.addr;

    // The client trusts the cluster CA (so it would accept the master), but its own certificate
    // is signed by a foreign CA with the same kind of identity.
    let foreign_ca = certs::generate_ca().unwrap();
    let foreign = certs::issue_cert(&foreign_ca, Role::Agent, "agent-1").unwrap();
    let tls = TlsMaterial::from_pem(
        ca_pem(&certs).as_bytes(),
        foreign.cert_pem.as_bytes(),
        foreign.key_pem.as_bytes(),
    )
    .unwrap();
    let client = Client::new(&tls, TransportConfig::default()).unwrap();

    // In TLS 1.3 the client may finish its side of the handshake before the server has judged
    // its certificate, so the refusal shows either at connect or at the first session.
    let outcome = within(async {
        let connection = client.connect(addr).await?;
        connection.open_session(SessionOpen::Agent).await
    })
    .await;
    let error = outcome.expect_err("a foreign client certificate was accepted");
    assert!(
        matches!(
            error,
            TransportError::Handshake { .. } | TransportError::ConnectionLost(_)
        ),
        "unexpected error: {error}"
    );

    let server_saw = within(echo.reports.recv()).await.unwrap();
    let server_error = server_saw.expect_err("the server accepted a foreign certificate");
    assert!(
        server_error.contains("UnknownIssuer"),
        "the server's error should name the unknown issuer: {server_error}"
    );
    client.close();
}

#[tokio::test]
async fn a_master_whose_certificate_comes_from_another_ca_is_refused_by_the_client() {
    let certs = cluster_certs();
    let foreign_ca = certs::generate_ca().unwrap();
    let foreign_master = certs::issue_cert(&foreign_ca, Role::Master, "master-1").unwrap();
    // The impostor trusts the cluster CA, so only the client's check can stop the connection.
    let impostor = TlsMaterial::from_pem(
        ca_pem(&certs).as_bytes(),
        foreign_master.cert_pem.as_bytes(),
        foreign_master.key_pem.as_bytes(),
    )
    .unwrap();
    let echo = EchoMaster::start(&impostor, TransportConfig::default());
    let addr = echo.addr;

    let client = Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).unwrap();
    let error = within(client.connect(addr))
        .await
        .expect_err("the client accepted a master from another CA");
    match &error {
        TransportError::Handshake { source, .. } => assert!(
            format!("{source:?}").contains("UnknownIssuer"),
            "unexpected handshake failure: {source:?}"
        ),
        other => panic!("expected a handshake failure, got {other}"),
    }
    client.close();
}

#[tokio::test]
async fn a_server_without_the_master_role_is_refused_by_the_client() {
    let certs = cluster_certs();
    // Server::bind itself refuses non-master material.
    match Server::bind(
        localhost(),
        &certs.tls(Role::Agent, 1),
        TransportConfig::default(),
    ) {
        Err(TransportError::NotAMaster(identity)) => assert_eq!(identity.role, Role::Agent),
        other => panic!("expected NotAMaster, got {other:?}"),
    }

    // A certificate of the right CA and server name but the agent role, served by a raw quinn
    // endpoint: the client's verifier must refuse it on the role alone.
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.subject_alt_names = vec![
        SanType::URI("fullerene://agent/agent-9".try_into().unwrap()),
        SanType::DnsName(MASTER_SERVER_NAME.try_into().unwrap()),
    ];
    let (cert_pem, key_pem) = sign(&certs, params);
    let rogue = TlsMaterial::from_pem(
        ca_pem(&certs).as_bytes(),
        cert_pem.as_bytes(),
        key_pem.as_bytes(),
    )
    .unwrap();
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(rogue.server_config().unwrap()).unwrap();
    let endpoint = quinn::Endpoint::server(
        quinn::ServerConfig::with_crypto(Arc::new(crypto)),
        localhost(),
    )
    .unwrap();
    let addr = endpoint.local_addr().unwrap();
    let server = tokio::spawn(async move {
        if let Some(incoming) = endpoint.accept().await {
            let _ = incoming.await;
        }
    });

    let client = Client::new(&certs.tls(Role::Operator, 1), TransportConfig::default()).unwrap();
    let error = within(client.connect(addr))
        .await
        .expect_err("the client accepted an agent as its master");
    assert!(
        error.to_string().contains("only masters serve"),
        "the error should say why: {error}"
    );
    client.close();
    server.abort();
}

#[tokio::test]
async fn a_certificate_without_an_identity_is_refused_on_both_sides() {
    let certs = cluster_certs();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.subject_alt_names = vec![SanType::URI("spiffe://cluster/agent-1".try_into().unwrap())];
    let (cert_pem, key_pem) = sign(&certs, params);

    // Our own loader refuses to use it.
    match TlsMaterial::from_pem(
        ca_pem(&certs).as_bytes(),
        cert_pem.as_bytes(),
        key_pem.as_bytes(),
    ) {
        Err(TransportError::NoIdentity(_)) => {}
        other => panic!("expected NoIdentity, got {other:?}"),
    }

    // A raw rustls client presenting it is refused by the master during the handshake.
    let mut echo = EchoMaster::start(&certs.tls(Role::Master, 1), TransportConfig::default());
    let addr = echo.addr;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem(&certs).as_bytes()).unwrap())
        .unwrap();
    let mut rustls_config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    rustls_config.alpn_protocols = vec![ALPN_PROTOCOL.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(rustls_config).unwrap();
    let endpoint = quinn::Endpoint::client(localhost()).unwrap();
    let outcome = within(async {
        let connection = endpoint
            .connect_with(
                quinn::ClientConfig::new(Arc::new(crypto)),
                addr,
                MASTER_SERVER_NAME,
            )
            .unwrap()
            .await?;
        let (mut send, _recv) = connection.open_bi().await?;
        send.write_all(b"hello").await?;
        Ok::<_, Box<dyn std::error::Error>>(connection.closed().await)
    })
    .await;
    // Either the handshake fails, or the connection the client thought it had is closed.
    if let Ok(reason) = outcome {
        assert!(
            !matches!(reason, ConnectionError::LocallyClosed),
            "the connection should have been closed by the master, not here"
        );
    }
    let server_error = within(echo.reports.recv())
        .await
        .unwrap()
        .expect_err("the master accepted a certificate without identity");
    assert!(
        server_error.contains("identity"),
        "the master's error should name the missing identity: {server_error}"
    );
    endpoint.close(0u32.into(), b"done");
}

// -------------------------------------------------------------------------------------------
// (2) Sessions are admitted by the role in the certificate
// -------------------------------------------------------------------------------------------

#[tokio::test]
async fn sessions_are_admitted_by_the_role_in_the_certificate() {
    let certs = cluster_certs();
    let mut echo = EchoMaster::start(&certs.tls(Role::Master, 1), TransportConfig::default());
    let addr = echo.addr;

    // A framework may not open an agent session...
    let framework =
        Client::new(&certs.tls(Role::Framework, 1), TransportConfig::default()).unwrap();
    let connection = within(framework.connect(addr)).await.unwrap();
    assert_eq!(
        connection.peer(),
        &PeerIdentity::new(Role::Master, "master-1").unwrap()
    );
    assert_eq!(connection.peer().master_id().map(|id| id.0), Some(1));
    assert_eq!(connection.local_identity().role, Role::Framework);
    match within(connection.open_session(SessionOpen::Agent)).await {
        Err(TransportError::SessionRefused(error)) => {
            assert_eq!(error.code, ErrorCode::Unauthorized);
            assert!(
                error.message.contains("framework framework-1"),
                "the refusal should name the certificate: {}",
                error.message
            );
        }
        other => panic!("expected an Unauthorized refusal, got {other:?}"),
    }
    // ... nor a Raft one; the refusals leave the connection usable for its own kind.
    assert!(matches!(
        within(connection.open_session(SessionOpen::Peer)).await,
        Err(TransportError::SessionRefused(_))
    ));
    assert_eq!(
        round_trip(&connection, SessionOpen::Framework, "subscribe").await,
        "framework-1:subscribe"
    );

    // An agent's certificate opens an agent session, and the master sees the certificate's
    // identity whatever the messages claim.
    let agent = Client::new(&certs.tls(Role::Agent, 2), TransportConfig::default()).unwrap();
    let connection = within(agent.connect(addr)).await.unwrap();
    let mut session = within(connection.open_session(SessionOpen::Agent))
        .await
        .unwrap();
    assert_eq!(session.peer.role, Role::Master);
    let claim = AgentToMaster::Register {
        hostname: "agent-1".into(),
        resources: Default::default(),
        attributes: [("agent_id".to_string(), "agent-1".to_string())].into(),
        tasks: vec![],
        executors: vec![],
        isolation: Default::default(),
    };
    // The echo server reads strings; the claim travels as one, like any spoofed field would.
    within(session.tx.send(&format!("{claim:?}")))
        .await
        .unwrap();
    let answer: String = within(session.rx.recv()).await.unwrap().unwrap();
    assert!(answer.starts_with("agent-2:"), "master saw: {answer}");

    // A master may open operator and peer sessions; an operator only operator sessions.
    let master_two = Client::new(&certs.tls(Role::Master, 2), TransportConfig::default()).unwrap();
    let connection = within(master_two.connect(addr)).await.unwrap();
    assert_eq!(
        round_trip(&connection, SessionOpen::Peer, "append").await,
        "master-2:append"
    );
    assert_eq!(
        round_trip(&connection, SessionOpen::Operator, "status").await,
        "master-2:status"
    );
    let operator = Client::new(&certs.tls(Role::Operator, 1), TransportConfig::default()).unwrap();
    let connection = within(operator.connect(addr)).await.unwrap();
    assert!(matches!(
        within(connection.open_session(SessionOpen::Peer)).await,
        Err(TransportError::SessionRefused(_))
    ));

    // Exactly the admitted sessions reached the server, each with the certificate's identity.
    let expected = [
        (Role::Framework, "framework-1", SessionOpen::Framework),
        (Role::Agent, "agent-2", SessionOpen::Agent),
        (Role::Master, "master-2", SessionOpen::Peer),
        (Role::Master, "master-2", SessionOpen::Operator),
    ];
    for (role, id, kind) in expected {
        let seen = within(echo.reports.recv()).await.unwrap().unwrap();
        let identity = PeerIdentity::new(role, id).unwrap();
        assert_eq!(
            seen,
            EchoedSession {
                connection_peer: identity.clone(),
                session_peer: identity,
                kind,
            }
        );
    }
    assert!(
        echo.reports.try_recv().is_err(),
        "a refused session reached the server"
    );
    for client in [framework, agent, master_two, operator] {
        client.close();
    }
}

// -------------------------------------------------------------------------------------------
// (3) Frames over the limit, or that do not decode, close their stream only
// -------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_oversized_frame_closes_its_stream_and_the_other_sessions_go_on() {
    let certs = cluster_certs();
    const SERVER_LIMIT: usize = 1024;
    let server_config = TransportConfig {
        max_frame_bytes: SERVER_LIMIT,
        ..TransportConfig::default()
    };
    let mut server = Server::bind(localhost(), &certs.tls(Role::Master, 1), server_config).unwrap();
    let addr = server.local_addr();
    // The client's own limit is the default (4 MiB), so it sends what the server will refuse.
    let client = Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).unwrap();

    let (client_connection, server_connection) =
        within(async { tokio::join!(client.connect(addr), server.accept()) }).await;
    let client_connection = client_connection.unwrap();
    let server_connection = server_connection.unwrap().unwrap();

    let (first, first_accepted) = within(async {
        tokio::join!(
            client_connection.open_session(SessionOpen::Agent),
            server_connection.accept_session()
        )
    })
    .await;
    let (mut first, mut first_accepted) = (first.unwrap(), first_accepted.unwrap());
    let (second, second_accepted) = within(async {
        tokio::join!(
            client_connection.open_session(SessionOpen::Agent),
            server_connection.accept_session()
        )
    })
    .await;
    let (mut second, mut second_accepted) = (second.unwrap(), second_accepted.unwrap());

    // The oversized frame leaves the client (its limit allows it)...
    let oversized = vec![7u8; 10 * SERVER_LIMIT];
    within(first.tx.send(&oversized)).await.unwrap();
    // ... and the server refuses it by its announced length, naming sizes and limit.
    match within(first_accepted.rx.recv::<Vec<u8>>()).await {
        Err(TransportError::FrameTooLarge { len, limit }) => {
            assert!(
                len > oversized.len(),
                "length {len} should include the encoding"
            );
            assert_eq!(limit, SERVER_LIMIT);
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    assert!(matches!(
        within(first_accepted.rx.recv::<Vec<u8>>()).await,
        Err(TransportError::StreamFailed(StreamErrorCode::FrameTooLarge))
    ));
    // The sender learns why its stream was stopped, and can no longer write to it.
    assert_eq!(
        within(first.tx.stopped()).await.unwrap(),
        Some(StreamErrorCode::FrameTooLarge)
    );
    match within(first.tx.send(&"more".to_string())).await {
        Err(error @ TransportError::StreamStopped(StreamErrorCode::FrameTooLarge)) => {
            assert!(error.to_string().contains("frame too large"), "{error}");
        }
        other => panic!("expected StreamStopped(FrameTooLarge), got {other:?}"),
    }

    // The other session of the same connection goes on, both ways.
    within(second.tx.send(&"still here".to_string()))
        .await
        .unwrap();
    let got: String = within(second_accepted.rx.recv()).await.unwrap().unwrap();
    assert_eq!(got, "still here");
    within(second_accepted.tx.send(&"and here".to_string()))
        .await
        .unwrap();
    let got: String = within(second.rx.recv()).await.unwrap().unwrap();
    assert_eq!(got, "and here");
    // So does the connection: new sessions open.
    let (third, third_accepted) = within(async {
        tokio::join!(
            client_connection.open_session(SessionOpen::Agent),
            server_connection.accept_session()
        )
    })
    .await;
    assert!(third.is_ok() && third_accepted.is_ok());
    assert!(client_connection.close_reason().is_none());

    // A frame the receiver's own side would refuse is not sent at all.
    match within(first_accepted.tx.send(&oversized)).await {
        Err(TransportError::FrameTooLarge { limit, .. }) => assert_eq!(limit, SERVER_LIMIT),
        other => panic!("expected a local FrameTooLarge, got {other:?}"),
    }

    // Clean end of a session: finish, and the peer reads `None`.
    within(second.tx.finish()).await.unwrap();
    assert!(within(second_accepted.rx.recv::<String>())
        .await
        .unwrap()
        .is_none());

    client.close();
    server.close();
}

#[tokio::test]
async fn a_frame_that_does_not_decode_closes_its_stream_with_malformed_frame() {
    let certs = cluster_certs();
    let mut server = Server::bind(
        localhost(),
        &certs.tls(Role::Master, 1),
        TransportConfig::default(),
    )
    .unwrap();
    let addr = server.local_addr();
    let client = Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).unwrap();
    let (client_connection, server_connection) =
        within(async { tokio::join!(client.connect(addr), server.accept()) }).await;
    let (client_connection, server_connection) = (
        client_connection.unwrap(),
        server_connection.unwrap().unwrap(),
    );
    let (session, accepted) = within(async {
        tokio::join!(
            client_connection.open_session(SessionOpen::Agent),
            server_connection.accept_session()
        )
    })
    .await;
    let (mut session, mut accepted) = (session.unwrap(), accepted.unwrap());

    // A variant index no `SessionOpen` has.
    within(session.tx.send(&200u32)).await.unwrap();
    match within(accepted.rx.recv::<SessionOpen>()).await {
        Err(TransportError::MalformedFrame(_)) => {}
        other => panic!("expected MalformedFrame, got {other:?}"),
    }
    assert_eq!(
        within(session.tx.stopped()).await.unwrap(),
        Some(StreamErrorCode::MalformedFrame)
    );
    client.close();
    server.close();
}

#[tokio::test]
async fn recv_is_cancel_safe_across_a_partly_received_frame() {
    let certs = cluster_certs();
    let mut server = Server::bind(
        localhost(),
        &certs.tls(Role::Master, 1),
        TransportConfig::default(),
    )
    .unwrap();
    let addr = server.local_addr();
    let client = Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).unwrap();
    let (client_connection, server_connection) =
        within(async { tokio::join!(client.connect(addr), server.accept()) }).await;
    let (client_connection, server_connection) = (
        client_connection.unwrap(),
        server_connection.unwrap().unwrap(),
    );
    let (session, accepted) = within(async {
        tokio::join!(
            client_connection.open_session(SessionOpen::Agent),
            server_connection.accept_session()
        )
    })
    .await;
    let (mut session, mut accepted) = (session.unwrap(), accepted.unwrap());

    // Polled repeatedly with a deadline far shorter than the transfer of a large frame, `recv`
    // is cancelled many times mid-frame; the frame must still arrive whole and intact.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let expected = big.clone();
    let sender = tokio::spawn(async move {
        session.tx.send(&big).await.unwrap();
        session.tx.send(&"after".to_string()).await.unwrap();
        session
    });
    let mut cancelled = 0u32;
    let received: Vec<u8> = within(async {
        loop {
            match timeout(Duration::from_micros(200), accepted.rx.recv()).await {
                Ok(result) => break result.unwrap().unwrap(),
                Err(_) => cancelled += 1,
            }
        }
    })
    .await;
    assert!(
        cancelled > 0,
        "recv was never cancelled; the test proved nothing"
    );
    assert_eq!(received, expected);
    let after: String = within(accepted.rx.recv()).await.unwrap().unwrap();
    assert_eq!(after, "after");
    drop(within(sender).await.unwrap());
    client.close();
    server.close();
}

// -------------------------------------------------------------------------------------------
// (4) A peer that vanishes is noticed within the idle timeout
// -------------------------------------------------------------------------------------------

/// A UDP relay between a client and a server that can be switched to drop everything, which
/// makes the peers vanish for each other without any close being sent.
struct Relay {
    addr: SocketAddr,
    blackhole: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(server: SocketAddr) -> Relay {
        let front = UdpSocket::bind(localhost()).await.unwrap();
        let back = UdpSocket::bind(localhost()).await.unwrap();
        back.connect(server).await.unwrap();
        let addr = front.local_addr().unwrap();
        let blackhole = Arc::new(AtomicBool::new(false));
        let dropping = Arc::clone(&blackhole);
        let task = tokio::spawn(async move {
            let mut client = None;
            let mut from_client = vec![0u8; 65_536];
            let mut from_server = vec![0u8; 65_536];
            loop {
                tokio::select! {
                    received = front.recv_from(&mut from_client) => {
                        let Ok((n, from)) = received else { continue };
                        client = Some(from);
                        if !dropping.load(Ordering::SeqCst) {
                            let _ = back.send(&from_client[..n]).await;
                        }
                    }
                    received = back.recv(&mut from_server) => {
                        let Ok(n) = received else { continue };
                        if let (Some(client), false) = (client, dropping.load(Ordering::SeqCst)) {
                            let _ = front.send_to(&from_server[..n], client).await;
                        }
                    }
                }
            }
        });
        Relay {
            addr,
            blackhole,
            task,
        }
    }
}

#[tokio::test]
async fn a_peer_that_vanishes_is_noticed_within_the_idle_timeout() {
    let certs = cluster_certs();
    let config = TransportConfig {
        keep_alive_interval: Duration::from_millis(100),
        idle_timeout: Duration::from_millis(800),
        handshake_timeout: Duration::from_secs(5),
        ..TransportConfig::default()
    };
    let mut server =
        Server::bind(localhost(), &certs.tls(Role::Master, 1), config.clone()).unwrap();
    let relay = Relay::start(server.local_addr()).await;
    let client = Client::new(&certs.tls(Role::Agent, 1), config.clone()).unwrap();
    let (client_connection, server_connection) =
        within(async { tokio::join!(client.connect(relay.addr), server.accept()) }).await;
    let (client_connection, server_connection) = (
        client_connection.unwrap(),
        server_connection.unwrap().unwrap(),
    );

    // Keep-alives keep a silent but live connection open well past the idle timeout.
    tokio::time::sleep(config.idle_timeout * 3).await;
    assert!(client_connection.close_reason().is_none());
    assert!(server_connection.close_reason().is_none());
    let (session, accepted) = within(async {
        tokio::join!(
            client_connection.open_session(SessionOpen::Agent),
            server_connection.accept_session()
        )
    })
    .await;
    assert!(session.is_ok() && accepted.is_ok());

    // Now every packet is lost, and neither side is told. Both notice within the idle timeout
    // (plus a generous margin for a loaded machine).
    relay.blackhole.store(true, Ordering::SeqCst);
    let deadline = config.idle_timeout + Duration::from_secs(3);
    let (client_reason, server_reason) = timeout(deadline, async {
        tokio::join!(client_connection.closed(), server_connection.closed())
    })
    .await
    .expect("a vanished peer was not noticed within the idle timeout");
    assert_eq!(client_reason, ConnectionError::TimedOut);
    assert_eq!(server_reason, ConnectionError::TimedOut);
    // Sessions fail with the reason.
    match client_connection.open_session(SessionOpen::Agent).await {
        Err(TransportError::ConnectionLost(ConnectionError::TimedOut)) => {}
        other => panic!("expected ConnectionLost(TimedOut), got {other:?}"),
    }

    relay.task.abort();
    client.close();
    server.close();
}

// -------------------------------------------------------------------------------------------
// (5) The ring provider is used explicitly
// -------------------------------------------------------------------------------------------

#[tokio::test]
async fn configs_use_ring_explicitly_whatever_the_process_default() {
    use rustls::crypto::CryptoProvider;

    // Nothing in this process has installed a default provider; building configs and
    // connecting must not need one (rustls would panic if it looked for it).
    assert!(CryptoProvider::get_default().is_none());
    let certs = cluster_certs();
    let master = certs.tls(Role::Master, 1);
    master.server_config().unwrap();
    master.client_config().unwrap();
    let echo = EchoMaster::start(&master, TransportConfig::default());
    let addr = echo.addr;
    let client = Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).unwrap();
    let connection = within(client.connect(addr)).await.unwrap();
    assert_eq!(
        round_trip(&connection, SessionOpen::Agent, "no default").await,
        "agent-1:no default"
    );
    assert!(CryptoProvider::get_default().is_none());

    // A useless process default (no cipher suites, no key exchange) changes nothing: it is
    // never consulted. Other tests of this binary may run while it is installed; they pass for
    // the same reason.
    let useless = CryptoProvider {
        cipher_suites: vec![],
        kx_groups: vec![],
        ..rustls::crypto::ring::default_provider()
    };
    assert!(useless.install_default().is_ok());
    let client_after = Client::new(&certs.tls(Role::Agent, 2), TransportConfig::default()).unwrap();
    let connection = within(client_after.connect(addr)).await.unwrap();
    assert_eq!(
        round_trip(&connection, SessionOpen::Agent, "useless default").await,
        "agent-2:useless default"
    );
    client.close();
    client_after.close();
}
