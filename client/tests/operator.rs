//! The operator client against a master on loopback that refuses its certificate's role.

use std::time::Duration;

use fullerene_client::{OperatorClient, OperatorClientError};
use fullerene_proto::messages::{ErrorCode, OperatorRequest};
use fullerene_transport::certs::CertCounts;
use fullerene_transport::testkit::{AgentPeer, FakeMaster, TestCerts};
use fullerene_transport::{Client, Role, TransportConfig};

/// An agent's certificate may not open an operator session: the client says so, naming the
/// role, instead of retrying until its deadline and blaming the leader (which would be
/// `NoLeader` here, after the 60 s deadline).
#[tokio::test]
async fn a_certificate_whose_role_is_refused_is_reported_as_such() {
    let certs = TestCerts::new(CertCounts {
        masters: 1,
        agents: 1,
        ..CertCounts::default()
    });
    let master = FakeMaster::bind(&certs, 1);
    let addr = master.addr();
    let serving = master
        .serve_each(|_peer: fullerene_transport::testkit::PeerSession<AgentPeer>, _| async {});
    let client =
        Client::new(&certs.tls(Role::Agent, 1), TransportConfig::default()).expect("a client");
    let mut operator = OperatorClient::new(client, vec![addr], Duration::from_secs(60));
    let error = operator
        .request(&OperatorRequest::ClusterStatus)
        .await
        .expect_err("the session is refused");
    match &error {
        OperatorClientError::SessionRefused { master, error } => {
            assert_eq!(*master, addr);
            assert_eq!(error.code, ErrorCode::Unauthorized);
        }
        other => panic!("not a refusal: {other}"),
    }
    let text = error.to_string();
    assert!(text.contains("role agent"), "{text}");
    serving.abort();
}
