//! Mutual-TLS configuration: the cluster CA, this process's certificate, and the rustls configs
//! built from them.
//!
//! Every config is built with [`crypto_provider`] (ring) passed explicitly, never with the
//! process-default provider: a dependency that enables aws-lc-rs as well must neither change
//! which provider is used nor make rustls panic for want of a default.
//!
//! Only TLS 1.3 is offered (QUIC requires it). Servers demand a client certificate that chains
//! to the cluster CA and carries an identity; clients accept a server only if its certificate
//! chains to the cluster CA, names [`MASTER_SERVER_NAME`], and has the master role.
//!
//! The masters' HTTP API uses the same material over TLS on TCP
//! ([`TlsMaterial::https_server_config`], [`TlsMaterial::https_client_config`]): the same CA
//! and master certificates, HTTP/1.1 by ALPN, and a client certificate optional (operators may
//! use a bearer token instead).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, RootCertStore,
    SignatureScheme,
};

use crate::identity::{IdentityError, PeerIdentity, Role};
use crate::TransportError;

/// The ALPN protocol of Fullerene's transport, version 5. A peer that does not offer it fails
/// the handshake, so an incompatible version is refused before any frame is read.
///
/// Version 2 named tasks by framework and id in status acknowledgements and in the kill list
/// of `Registered` (version 1 named them by id alone). Version 3 bounds every message that
/// grows with the cluster: an agent reports its tasks as compact `TaskReport`s when it
/// registers, and operator listings come in pages (`fullerene_proto::limits`). Version 5 adds
/// reservations (`fullerene_proto::reservations`): operators' and frameworks' calls, their
/// answers and the cluster view's list, whose binary encoding older peers cannot read.
/// Version 7 acknowledges a framework's status updates in batches (`Acknowledge` carries a
/// list). Version 8 names the reservation an offer's guaranteed capacity comes from
/// (`Offer::reservation`) and tells frameworks when their principal's reservations end
/// (`MasterToFramework::ReservationEnded`). Version 9 carries a job's progress through its own
/// reservation in its demand summaries (`DemandSummary::reservation_progress`); version 10
/// counts that progress by the request's atoms finished rather than its steps.
pub const ALPN_PROTOCOL: &[u8] = b"fullerene/10";

/// The DNS name every master certificate carries and every client asks for.
///
/// Clients do not know which master they will reach (any master's address may be given, and
/// followers redirect), so they verify the server against this one fixed name and then read the
/// master's id from its certificate identity. Master certificates also carry a per-master name,
/// `<id>.fullerene-master` (e.g. `master-1.fullerene-master`), for tools that want to pin one.
pub const MASTER_SERVER_NAME: &str = "fullerene-master";

/// The ALPN protocol of the masters' HTTP API: HTTP/1.1 over TLS.
pub const HTTP_ALPN_PROTOCOL: &[u8] = b"http/1.1";

/// The crypto provider of every Fullerene TLS config: rustls' ring provider.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The cluster CA, this process's certificate chain and private key, and the identity the
/// certificate states.
pub struct TlsMaterial {
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    identity: PeerIdentity,
}

impl TlsMaterial {
    /// Loads PEM files: the cluster CA certificate(s), this process's certificate (leaf first,
    /// then any intermediates), and its private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// Fails if a file is unreadable, holds no item of the right kind, the certificate carries no
    /// well-formed identity, or the key does not belong to the certificate.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<TlsMaterial, TransportError> {
        let read = |what, path: &Path| {
            std::fs::read(path).map_err(|source| TransportError::FileUnreadable {
                what,
                path: path.to_path_buf(),
                source,
            })
        };
        TlsMaterial::from_named_pem(
            (&read(CA_WHAT, ca)?, &ca.display().to_string()),
            (&read(CERT_WHAT, cert)?, &cert.display().to_string()),
            (&read(KEY_WHAT, key)?, &key.display().to_string()),
        )
    }

    /// Like [`TlsMaterial::load`], from PEM text already in memory.
    pub fn from_pem(
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<TlsMaterial, TransportError> {
        TlsMaterial::from_named_pem(
            (ca_pem, "memory"),
            (cert_pem, "memory"),
            (key_pem, "memory"),
        )
    }

    fn from_named_pem(
        (ca_pem, ca_origin): (&[u8], &str),
        (cert_pem, cert_origin): (&[u8], &str),
        (key_pem, key_origin): (&[u8], &str),
    ) -> Result<TlsMaterial, TransportError> {
        let invalid = |what, origin: &str, reason: String| TransportError::InvalidPem {
            what,
            origin: origin.to_string(),
            reason,
        };

        let ca_certs = CertificateDer::pem_slice_iter(ca_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(CA_WHAT, ca_origin, e.to_string()))?;
        if ca_certs.is_empty() {
            return Err(invalid(CA_WHAT, ca_origin, "no CERTIFICATE block".into()));
        }
        let mut roots = RootCertStore::empty();
        for ca in ca_certs {
            roots
                .add(ca)
                .map_err(|e| invalid(CA_WHAT, ca_origin, e.to_string()))?;
        }

        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(CERT_WHAT, cert_origin, e.to_string()))?;
        let leaf = chain
            .first()
            .ok_or_else(|| invalid(CERT_WHAT, cert_origin, "no CERTIFICATE block".into()))?;
        let identity = PeerIdentity::from_certificate(leaf)?;

        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| invalid(KEY_WHAT, key_origin, e.to_string()))?;
        // Refuses a key that ring cannot use or that belongs to another certificate, here rather
        // than as an obscure handshake failure later.
        CertifiedKey::from_der(chain.clone(), key.clone_key(), &crypto_provider())?;

        Ok(TlsMaterial {
            roots: Arc::new(roots),
            chain,
            key,
            identity,
        })
    }

    /// The identity this process's own certificate states.
    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }

    /// The rustls config a master serves with: TLS 1.3, ALPN [`ALPN_PROTOCOL`], client
    /// certificates mandatory and verified against the cluster CA, and required to carry an
    /// identity.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TransportError> {
        self.server_config_with(true, &[&rustls::version::TLS13], ALPN_PROTOCOL)
    }

    /// The rustls config of a master's HTTP API: TLS 1.2 or 1.3 (HTTP clients such as curl and
    /// Prometheus are not all on 1.3; rustls offers only forward-secret AEAD suites for 1.2),
    /// ALPN [`HTTP_ALPN_PROTOCOL`], and client certificates optional: a client may
    /// authenticate with a bearer token instead, but a certificate it presents must chain to
    /// the cluster CA and carry an identity, or the handshake fails. Which roles may use the
    /// API is the API's decision (it reads the identity from the verified certificate).
    pub fn https_server_config(&self) -> Result<rustls::ServerConfig, TransportError> {
        self.server_config_with(false, rustls::ALL_VERSIONS, HTTP_ALPN_PROTOCOL)
    }

    fn server_config_with(
        &self,
        client_certificate_required: bool,
        versions: &[&'static rustls::SupportedProtocolVersion],
        alpn: &[u8],
    ) -> Result<rustls::ServerConfig, TransportError> {
        let provider = crypto_provider();
        let mut builder = WebPkiClientVerifier::builder_with_provider(
            Arc::clone(&self.roots),
            Arc::clone(&provider),
        );
        if !client_certificate_required {
            builder = builder.allow_unauthenticated();
        }
        let webpki = builder.build().map_err(|e| TransportError::InvalidPem {
            what: CA_WHAT,
            origin: "the loaded CA".into(),
            reason: e.to_string(),
        })?;
        let verifier = Arc::new(ClusterClientVerifier {
            webpki,
            mandatory: client_certificate_required,
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(config)
    }

    /// The rustls config a client connects with: TLS 1.3, ALPN [`ALPN_PROTOCOL`], this
    /// process's certificate as client certificate, and servers accepted only if they chain to
    /// the cluster CA, are valid for [`MASTER_SERVER_NAME`] and have the master role.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TransportError> {
        self.client_config_with(true, &[&rustls::version::TLS13], ALPN_PROTOCOL)
    }

    /// The rustls config of a client of a master's HTTP API: TLS 1.2 or 1.3, ALPN
    /// [`HTTP_ALPN_PROTOCOL`], servers accepted as by [`TlsMaterial::client_config`] (connect
    /// with the server name [`MASTER_SERVER_NAME`]), and this process's certificate presented
    /// only when `present_certificate` (a client that authenticates with a bearer token
    /// presents none).
    pub fn https_client_config(
        &self,
        present_certificate: bool,
    ) -> Result<rustls::ClientConfig, TransportError> {
        self.client_config_with(
            present_certificate,
            rustls::ALL_VERSIONS,
            HTTP_ALPN_PROTOCOL,
        )
    }

    fn client_config_with(
        &self,
        present_certificate: bool,
        versions: &[&'static rustls::SupportedProtocolVersion],
        alpn: &[u8],
    ) -> Result<rustls::ClientConfig, TransportError> {
        let provider = crypto_provider();
        let webpki = WebPkiServerVerifier::builder_with_provider(
            Arc::clone(&self.roots),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|e| TransportError::InvalidPem {
            what: CA_WHAT,
            origin: "the loaded CA".into(),
            reason: e.to_string(),
        })?;
        let verifier = Arc::new(MasterServerVerifier { webpki });
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = if present_certificate {
            builder.with_client_auth_cert(self.chain.clone(), self.key.clone_key())?
        } else {
            builder.with_no_client_auth()
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(config)
    }
}

impl Clone for TlsMaterial {
    fn clone(&self) -> TlsMaterial {
        TlsMaterial {
            roots: Arc::clone(&self.roots),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            identity: self.identity.clone(),
        }
    }
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The private key stays out of logs.
        f.debug_struct("TlsMaterial")
            .field("identity", &self.identity)
            .field("ca_certificates", &self.roots.len())
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

const CA_WHAT: &str = "CA certificate";
const CERT_WHAT: &str = "certificate";
const KEY_WHAT: &str = "private key";

/// Why a certificate that chains to the cluster CA is refused anyway. rustls shows the error
/// inside `OtherError` with `Debug`, so `Debug` prints the explanation, not a struct.
struct CertificateRefusal(String);

impl fmt::Debug for CertificateRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for CertificateRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CertificateRefusal {}

fn identity_refused(error: IdentityError) -> rustls::Error {
    certificate_refused(format_args!("no usable Fullerene identity: {error}"))
}

fn certificate_refused(reason: impl fmt::Display) -> rustls::Error {
    let refusal = CertificateRefusal(reason.to_string());
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(refusal))))
}

/// WebPKI verification against the cluster CA, plus: the client certificate must carry an
/// identity. Refusing here, rather than after the handshake, tells the client in a TLS alert.
/// A certificate is mandatory on the transport and optional on the HTTP API.
#[derive(Debug)]
struct ClusterClientVerifier {
    webpki: Arc<dyn ClientCertVerifier>,
    mandatory: bool,
}

impl ClientCertVerifier for ClusterClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .webpki
            .verify_client_cert(end_entity, intermediates, now)?;
        PeerIdentity::from_certificate(end_entity).map_err(identity_refused)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// WebPKI verification against the cluster CA and [`MASTER_SERVER_NAME`], plus: the server's
/// certificate must state the master role.
#[derive(Debug)]
struct MasterServerVerifier {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for MasterServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let identity = PeerIdentity::from_certificate(end_entity).map_err(identity_refused)?;
        if identity.role != Role::Master {
            return Err(certificate_refused(format_args!(
                "the server's certificate belongs to {identity}; only masters serve"
            )));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
