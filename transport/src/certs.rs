//! Development certificates: a cluster CA and one certificate per master, agent, framework and
//! operator, made with rcgen (`fullerene certs init`). Production deployments bring their own
//! PEM files and pass their paths to [`TlsMaterial::load`](crate::TlsMaterial::load).
//!
//! # Layout
//!
//! [`generate_dev_cluster`] writes into one directory:
//!
//! | file | content |
//! | --- | --- |
//! | `ca.pem` | the cluster CA certificate (every process trusts it) |
//! | `ca-key.pem` | the CA's private key (mode 0600; only needed to issue more certificates) |
//! | `<role>-<n>.pem` | the certificate of the `n`-th (from 1) member of `role`, e.g. `master-1.pem`, `agent-3.pem`, `framework-1.pem`, `operator-1.pem` |
//! | `<role>-<n>-key.pem` | its private key (PKCS#8, mode 0600) |
//!
//! The certificate of `<role>-<n>` states the identity `fullerene://<role>/<role>-<n>` (see
//! [`crate::identity`]), so `agent-3.pem` is the agent whose id is `agent-3`, and
//! `master-2.pem` the master whose Raft id is 2.
//!
//! # Contents
//!
//! Keys are ECDSA P-256. The CA (`CN=Fullerene development CA <12 hex digits>`, unique per CA)
//! is valid for ten years and may issue only end-entity
//! certificates (path length 0). Member certificates are valid for two years (never past the
//! CA), may authenticate TLS clients, and, for masters, TLS servers: master certificates carry
//! the DNS names [`MASTER_SERVER_NAME`] and `<id>.fullerene-master`, plus `localhost`,
//! `127.0.0.1` and `::1` so that a development cluster on one machine verifies. Validity starts
//! an hour in the past to tolerate clock skew between machines.

use std::fmt;
use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::identity::{IdentityError, PeerIdentity, Role};
use crate::MASTER_SERVER_NAME;

/// The CA certificate's file name.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA private key's file name.
pub const CA_KEY_FILE: &str = "ca-key.pem";

const CA_VALIDITY: Duration = Duration::days(10 * 365);
const MEMBER_VALIDITY: Duration = Duration::days(2 * 365);
const CLOCK_SKEW_ALLOWANCE: Duration = Duration::hours(1);
const ORGANIZATION: &str = "Fullerene";

/// Why certificates could not be generated, loaded or written.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file exists and overwriting was not asked for.
    #[error("{path} already exists; replacing it would stop every certificate of the old CA from working")]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// rcgen could not generate a key or certificate.
    #[error("certificate generation failed: {0}")]
    Generation(#[from] rcgen::Error),
    /// A CA file could not be used to issue certificates.
    #[error("cannot use CA {path}: {reason}")]
    InvalidCa {
        /// The certificate or key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The requested identity is not well formed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// How many certificates of each role [`generate_dev_cluster`] makes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CertCounts {
    /// Masters (1, 3 or 5 in a real cluster).
    pub masters: usize,
    /// Agents.
    pub agents: usize,
    /// Frameworks.
    pub frameworks: usize,
    /// Operators.
    pub operators: usize,
}

impl CertCounts {
    /// How many of `role`.
    pub fn of(&self, role: Role) -> usize {
        match role {
            Role::Master => self.masters,
            Role::Agent => self.agents,
            Role::Framework => self.frameworks,
            Role::Operator => self.operators,
        }
    }
}

/// A CA able to issue member certificates.
pub struct CertificateAuthority {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl CertificateAuthority {
    /// Loads a CA from its PEM certificate and private key, to issue more certificates (an
    /// added agent, a replaced framework) without replacing the CA.
    pub fn load(cert: &Path, key: &Path) -> Result<CertificateAuthority, CertsError> {
        let read = |path: &Path| {
            fs::read_to_string(path).map_err(|source| CertsError::Io {
                path: path.to_path_buf(),
                source,
            })
        };
        let invalid = |path: &Path, reason: String| CertsError::InvalidCa {
            path: path.to_path_buf(),
            reason,
        };
        let cert_pem = read(cert)?;
        let key_pair = KeyPair::from_pem(&read(key)?).map_err(|e| invalid(key, e.to_string()))?;
        let params = CertificateParams::from_ca_cert_pem(&cert_pem)
            .map_err(|e| invalid(cert, e.to_string()))?;
        if !matches!(params.is_ca, IsCa::Ca(_)) {
            return Err(invalid(cert, "not a CA certificate".into()));
        }
        let cert_spki = spki_of_pem(&cert_pem).map_err(|reason| invalid(cert, reason))?;
        if cert_spki != key_pair.public_key_der() {
            return Err(invalid(
                key,
                "the key does not belong to the CA certificate".into(),
            ));
        }
        // rcgen issues from a `Certificate` value. Self-signing the parsed parameters with the
        // CA's own key gives one with the original subject, key identifier and validity, which
        // is all that issuing reads from it; the original certificate file stays the trust root.
        let cert = params.self_signed(&key_pair)?;
        Ok(CertificateAuthority {
            cert,
            key: key_pair,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA private key, PEM (PKCS#8).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issues a certificate stating `identity`, with a fresh key.
    pub fn issue(&self, identity: &PeerIdentity) -> Result<IssuedCert, CertsError> {
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(&format!("{identity}"));
        params.not_before = now - CLOCK_SKEW_ALLOWANCE;
        params.not_after = (now + MEMBER_VALIDITY).min(self.cert.params().not_after);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        params.subject_alt_names = vec![SanType::URI(identity.to_uri().try_into()?)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if identity.role == Role::Master {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
            let mut dns_names = vec![MASTER_SERVER_NAME.to_string()];
            if is_dns_label(&identity.id) {
                dns_names.push(format!("{}.{MASTER_SERVER_NAME}", identity.id));
            }
            dns_names.push("localhost".to_string());
            for name in dns_names {
                params
                    .subject_alt_names
                    .push(SanType::DnsName(name.try_into()?));
            }
            params.subject_alt_names.extend([
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            ]);
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(IssuedCert {
            identity: identity.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.debug_struct("CertificateAuthority")
            .field("subject", &self.cert.params().distinguished_name)
            .finish_non_exhaustive()
    }
}

/// A member certificate and its key, PEM.
#[derive(Clone)]
pub struct IssuedCert {
    /// The identity the certificate states.
    pub identity: PeerIdentity,
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl IssuedCert {
    /// Writes the certificate and key to `paths` (key mode 0600), replacing existing files.
    pub fn write(&self, paths: &CertPaths) -> Result<(), CertsError> {
        write_file(&paths.cert, self.cert_pem.as_bytes(), false)?;
        write_file(&paths.key, self.key_pem.as_bytes(), true)
    }
}

/// A fresh development CA (ECDSA P-256, ten years, path length 0).
pub fn generate_ca() -> Result<CertificateAuthority, CertsError> {
    let key = KeyPair::generate()?;
    let now = OffsetDateTime::now_utc();
    let mut params = CertificateParams::default();
    // Each CA gets its own name: verifiers find a certificate's issuer by name, so two
    // development clusters with one CA name would report each other's certificates as badly
    // signed instead of as coming from an unknown issuer. The suffix is taken from the (random)
    // public key.
    let suffix: String = key
        .public_key_raw()
        .iter()
        .skip(1)
        .take(6)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    params.distinguished_name = distinguished_name(&format!("Fullerene development CA {suffix}"));
    params.not_before = now - CLOCK_SKEW_ALLOWANCE;
    params.not_after = now + CA_VALIDITY;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key)?;
    Ok(CertificateAuthority { cert, key })
}

/// Issues a certificate for `role` and `id` from `ca` (see [`CertificateAuthority::issue`]).
pub fn issue_cert(
    ca: &CertificateAuthority,
    role: Role,
    id: &str,
) -> Result<IssuedCert, CertsError> {
    ca.issue(&PeerIdentity::new(role, id)?)
}

/// Where a member's certificate and key live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPaths {
    /// The certificate (`<role>-<n>.pem`).
    pub cert: PathBuf,
    /// The private key (`<role>-<n>-key.pem`).
    pub key: PathBuf,
}

impl CertPaths {
    /// The paths of the `n`-th member of `role` in `dir`, following the layout above.
    pub fn of_member(dir: &Path, role: Role, n: usize) -> CertPaths {
        let stem = dev_id(role, n);
        CertPaths {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}-key.pem")),
        }
    }
}

/// The id of the `n`-th member of `role` in a development cluster: `<role>-<n>`.
pub fn dev_id(role: Role, n: usize) -> String {
    format!("{role}-{n}")
}

/// One generated member certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedMember {
    /// The identity its certificate states.
    pub identity: PeerIdentity,
    /// Its files.
    pub paths: CertPaths,
}

/// What [`generate_dev_cluster`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedCerts {
    /// The directory.
    pub dir: PathBuf,
    /// `ca.pem`.
    pub ca_cert: PathBuf,
    /// `ca-key.pem`.
    pub ca_key: PathBuf,
    /// Every member, masters first, then agents, frameworks and operators, each by number.
    pub members: Vec<GeneratedMember>,
}

impl GeneratedCerts {
    /// The `n`-th (from 1) member of `role`.
    pub fn member(&self, role: Role, n: usize) -> Option<&GeneratedMember> {
        let id = dev_id(role, n);
        self.members
            .iter()
            .find(|member| member.identity.role == role && member.identity.id == id)
    }
}

/// Generates a CA and `counts` member certificates into `dir` (created if missing), following
/// the layout in the module documentation.
///
/// Without `overwrite`, refuses to replace any existing file, an existing CA above all: a new
/// CA invalidates every certificate of the old one. With `overwrite`, files of the layout are
/// replaced; other files in `dir` (e.g. `agent-9.pem` from an earlier, larger run, now signed
/// by a CA no one trusts) are left alone.
pub fn generate_dev_cluster(
    dir: &Path,
    counts: CertCounts,
    overwrite: bool,
) -> Result<GeneratedCerts, CertsError> {
    let ca_cert = dir.join(CA_CERT_FILE);
    let ca_key = dir.join(CA_KEY_FILE);
    let mut members = Vec::new();
    for role in Role::ALL {
        for n in 1..=counts.of(role) {
            members.push(GeneratedMember {
                identity: PeerIdentity::new(role, dev_id(role, n))?,
                paths: CertPaths::of_member(dir, role, n),
            });
        }
    }
    if !overwrite {
        let targets = [&ca_cert, &ca_key].into_iter().chain(
            members
                .iter()
                .flat_map(|member| [&member.paths.cert, &member.paths.key]),
        );
        for path in targets {
            if path.exists() {
                return Err(CertsError::AlreadyExists { path: path.clone() });
            }
        }
    }
    fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.to_path_buf(),
        source,
    })?;

    let ca = generate_ca()?;
    // The key first: a directory with a CA certificate but no key could not issue more.
    write_file(&ca_key, ca.key_pem().as_bytes(), true)?;
    write_file(&ca_cert, ca.cert_pem().as_bytes(), false)?;
    for member in &members {
        ca.issue(&member.identity)?.write(&member.paths)?;
    }
    Ok(GeneratedCerts {
        dir: dir.to_path_buf(),
        ca_cert,
        ca_key,
        members,
    })
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, ORGANIZATION);
    name.push(DnType::CommonName, common_name);
    name
}

/// Whether `s` can be one label of a DNS name (RFC 1123): the per-master DNS name is added only
/// for ids that are, so that no certificate carries a malformed DNS SAN.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn spki_of_pem(pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| e.to_string())?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    Ok(cert.tbs_certificate.subject_pki.raw.to_vec())
}

/// Writes `contents` to `path` through a temporary file and a rename, so that a crash leaves the
/// old file or the new one, never half of one, and a process watching the file never reads
/// half of one. Private files (keys, token files) are created with mode 0600.
pub fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), CertsError> {
    let io_error = |source| CertsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{file_name}.tmp"));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(&temporary).map_err(io_error)?;
    // `mode` applies only when the file is created; a temporary left by a crash keeps its old
    // mode, so set it again.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = if private { 0o600 } else { 0o644 };
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io_error)?;
    }
    file.write_all(contents).map_err(io_error)?;
    file.sync_all().map_err(io_error)?;
    drop(file);
    fs::rename(&temporary, path).map_err(io_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TlsMaterial;

    #[test]
    fn dev_cluster_follows_the_layout_and_every_certificate_loads() {
        let dir = tempfile::tempdir().unwrap();
        let counts = CertCounts {
            masters: 3,
            agents: 2,
            frameworks: 2,
            operators: 1,
        };
        let generated = generate_dev_cluster(dir.path(), counts, false).unwrap();
        assert_eq!(generated.members.len(), 8);
        assert_eq!(generated.ca_cert, dir.path().join("ca.pem"));
        for (role, n, file) in [
            (Role::Master, 3, "master-3.pem"),
            (Role::Agent, 2, "agent-2.pem"),
            (Role::Framework, 1, "framework-1.pem"),
            (Role::Operator, 1, "operator-1.pem"),
        ] {
            let member = generated.member(role, n).unwrap();
            assert_eq!(member.paths.cert, dir.path().join(file));
            let tls = TlsMaterial::load(&generated.ca_cert, &member.paths.cert, &member.paths.key)
                .unwrap();
            assert_eq!(tls.identity(), &member.identity);
            assert_eq!(tls.identity().id, dev_id(role, n));
        }
        assert!(generated.member(Role::Operator, 2).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn private_keys_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let counts = CertCounts {
            masters: 1,
            agents: 1,
            ..CertCounts::default()
        };
        let generated = generate_dev_cluster(dir.path(), counts, false).unwrap();
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&generated.ca_key), 0o600);
        for member in &generated.members {
            assert_eq!(mode(&member.paths.key), 0o600);
            assert_eq!(mode(&member.paths.cert), 0o644);
        }
    }

    #[test]
    fn an_existing_ca_is_replaced_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let counts = CertCounts {
            masters: 1,
            ..CertCounts::default()
        };
        generate_dev_cluster(dir.path(), counts, false).unwrap();
        let first_ca = fs::read(dir.path().join(CA_CERT_FILE)).unwrap();
        match generate_dev_cluster(dir.path(), counts, false) {
            Err(CertsError::AlreadyExists { path }) => {
                assert_eq!(path, dir.path().join(CA_CERT_FILE));
            }
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        assert_eq!(fs::read(dir.path().join(CA_CERT_FILE)).unwrap(), first_ca);
        generate_dev_cluster(dir.path(), counts, true).unwrap();
        assert_ne!(fs::read(dir.path().join(CA_CERT_FILE)).unwrap(), first_ca);
    }

    #[test]
    fn a_loaded_ca_issues_certificates_its_cluster_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let generated = generate_dev_cluster(
            dir.path(),
            CertCounts {
                masters: 1,
                ..CertCounts::default()
            },
            false,
        )
        .unwrap();
        let ca = CertificateAuthority::load(&generated.ca_cert, &generated.ca_key).unwrap();
        let issued = issue_cert(&ca, Role::Agent, "agent-7").unwrap();
        let paths = CertPaths::of_member(dir.path(), Role::Agent, 7);
        issued.write(&paths).unwrap();
        let tls = TlsMaterial::load(&generated.ca_cert, &paths.cert, &paths.key).unwrap();
        assert_eq!(
            tls.identity(),
            &PeerIdentity::new(Role::Agent, "agent-7").unwrap()
        );

        // The issued certificate chains to the CA on disk.
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(&generated.ca_cert).unwrap())
            .unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            crate::tls::crypto_provider(),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
        verifier
            .verify_client_cert(&leaf, &[], UnixTime::now())
            .unwrap();
    }

    #[test]
    fn a_ca_key_that_does_not_match_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one");
        let two = dir.path().join("two");
        let counts = CertCounts::default();
        let first = generate_dev_cluster(&one, counts, false).unwrap();
        let second = generate_dev_cluster(&two, counts, false).unwrap();
        assert!(matches!(
            CertificateAuthority::load(&first.ca_cert, &second.ca_key),
            Err(CertsError::InvalidCa { .. })
        ));
        // A member certificate is not a CA.
        let ca = generate_ca().unwrap();
        let issued = issue_cert(&ca, Role::Master, "master-1").unwrap();
        let paths = CertPaths::of_member(dir.path(), Role::Master, 1);
        issued.write(&paths).unwrap();
        assert!(matches!(
            CertificateAuthority::load(&paths.cert, &paths.key),
            Err(CertsError::InvalidCa { .. })
        ));
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("master-1"));
        assert!(!is_dns_label("Master-1"));
        assert!(!is_dns_label("master_1"));
        assert!(!is_dns_label("-m"));
        assert!(!is_dns_label(""));
    }
}
