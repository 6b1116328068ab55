//! Who a peer is: its [`Role`] and id, read from its verified certificate (DESIGN.md, principle 4).
//!
//! # Encoding
//!
//! A Fullerene certificate carries exactly one subject-alternative-name URI of the form
//! `fullerene://<role>/<id>`, e.g. `fullerene://agent/agent-3` or `fullerene://master/master-1`.
//! A SAN URI was chosen over the subject's common name because SANs are typed, can be matched
//! without parsing free-form distinguished names, and are what SPIFFE-style workload identities
//! use; the subject is left for humans (`CN=agent agent-3`). A certificate with no such URI, with
//! two of them, with an unknown role or with an id outside the allowed alphabet is refused: an
//! ambiguous identity is treated like no identity.
//!
//! Ids are 1 to [`MAX_ID_LEN`] characters of ASCII letters, digits, `-`, `_` and `.`: enough for
//! host names and the `<role>-<n>` ids of development certificates, and nothing that needs
//! escaping in a URI, a file name or a log line.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use x509_parser::extensions::GeneralName;

use fullerene_proto::ids::{AgentId, MasterId};

/// The URI scheme of identity SANs.
pub const IDENTITY_URI_SCHEME: &str = "fullerene";

/// The longest id accepted in a certificate.
pub const MAX_ID_LEN: usize = 128;

/// What a process is allowed to be in the cluster, fixed by its certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// A master: the only role that may accept connections, and the only one allowed Raft
    /// (`Peer`) sessions.
    Master,
    /// An agent: may open agent sessions only.
    Agent,
    /// A framework scheduler: may open framework sessions only.
    Framework,
    /// A human or tool using the command line: may open operator sessions only.
    Operator,
}

impl Role {
    /// Every role, in a fixed order.
    pub const ALL: [Role; 4] = [Role::Master, Role::Agent, Role::Framework, Role::Operator];

    /// The role's name as it appears in identity URIs and certificate file names.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Agent => "agent",
            Role::Framework => "framework",
            Role::Operator => "operator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Role, IdentityError> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| IdentityError::UnknownRole(s.to_string()))
    }
}

/// Why a certificate or URI does not name a well-formed Fullerene identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The certificate is not valid DER X.509.
    #[error("certificate cannot be parsed: {0}")]
    UnparsableCertificate(String),
    /// No `fullerene://` SAN URI.
    #[error(
        "certificate carries no `{IDENTITY_URI_SCHEME}://<role>/<id>` subject-alternative-name URI"
    )]
    NoIdentity,
    /// More than one `fullerene://` SAN URI: ambiguous, so refused.
    #[error("certificate carries {count} `{IDENTITY_URI_SCHEME}://` identity URIs; exactly one is required")]
    MultipleIdentities {
        /// How many were found.
        count: usize,
    },
    /// A `fullerene://` URI that is not `fullerene://<role>/<id>`.
    #[error("identity URI `{uri}` is malformed: {reason}")]
    MalformedUri {
        /// The URI as found.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A role that is not one of `master`, `agent`, `framework`, `operator`.
    #[error("unknown role `{0}` (expected master, agent, framework or operator)")]
    UnknownRole(String),
    /// An id that is empty, too long, or uses characters outside `[A-Za-z0-9._-]`.
    #[error("invalid id `{id}`: {reason}")]
    InvalidId {
        /// The id as found.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A peer's role and id, as its verified certificate states them.
///
/// Constructed only through [`PeerIdentity::new`] (and the parsers built on it), so every value
/// holds a valid id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeerIdentity {
    /// What the peer may do.
    pub role: Role,
    /// Its name within the role, e.g. `agent-3`.
    pub id: String,
}

impl PeerIdentity {
    /// An identity, after checking the id's alphabet and length.
    pub fn new(role: Role, id: impl Into<String>) -> Result<PeerIdentity, IdentityError> {
        let id = id.into();
        validate_id(&id)?;
        Ok(PeerIdentity { role, id })
    }

    /// The SAN URI that encodes this identity, `fullerene://<role>/<id>`.
    pub fn to_uri(&self) -> String {
        format!("{IDENTITY_URI_SCHEME}://{}/{}", self.role, self.id)
    }

    /// Parses `fullerene://<role>/<id>`.
    pub fn from_uri(uri: &str) -> Result<PeerIdentity, IdentityError> {
        let malformed = |reason| IdentityError::MalformedUri {
            uri: uri.to_string(),
            reason,
        };
        let rest = uri
            .strip_prefix(IDENTITY_URI_SCHEME)
            .and_then(|rest| rest.strip_prefix("://"))
            .ok_or_else(|| malformed("does not start with `fullerene://`"))?;
        let (role, id) = rest
            .split_once('/')
            .ok_or_else(|| malformed("expected `fullerene://<role>/<id>`"))?;
        let role: Role = role.parse()?;
        // `/`, `?` and `#` are outside the id alphabet, so extra path segments, queries and
        // fragments are all refused here by the id check.
        PeerIdentity::new(role, id)
    }

    /// Reads the identity of a DER-encoded X.509 certificate.
    ///
    /// This checks only the identity's presence and form; that the certificate chains to the
    /// cluster CA is the TLS verifier's job, done before this is called on a peer's certificate.
    pub fn from_certificate(der: &[u8]) -> Result<PeerIdentity, IdentityError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| IdentityError::UnparsableCertificate(e.to_string()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| IdentityError::UnparsableCertificate(e.to_string()))?;
        let uris: Vec<&str> = san
            .iter()
            .flat_map(|ext| ext.value.general_names.iter())
            .filter_map(|name| match name {
                GeneralName::URI(uri) => Some(*uri),
                _ => None,
            })
            .filter(|uri| uri.starts_with(&format!("{IDENTITY_URI_SCHEME}:")))
            .collect();
        match uris.as_slice() {
            [] => Err(IdentityError::NoIdentity),
            [uri] => PeerIdentity::from_uri(uri),
            many => Err(IdentityError::MultipleIdentities { count: many.len() }),
        }
    }

    /// The Raft id of a master whose certificate id is `master-<n>` (`n` non-zero), the
    /// convention of [`crate::certs`]; `None` for other roles or ids.
    pub fn master_id(&self) -> Option<MasterId> {
        if self.role != Role::Master {
            return None;
        }
        let n: u64 = self.id.strip_prefix("master-")?.parse().ok()?;
        (n != 0).then_some(MasterId(n))
    }

    /// The agent id of an agent (its certificate id); `None` for other roles.
    pub fn agent_id(&self) -> Option<AgentId> {
        (self.role == Role::Agent).then(|| AgentId::from(self.id.clone()))
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role, self.id)
    }
}

fn validate_id(id: &str) -> Result<(), IdentityError> {
    let invalid = |reason| IdentityError::InvalidId {
        id: id.to_string(),
        reason,
    };
    if id.is_empty() {
        return Err(invalid("empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(invalid("longer than 128 characters"));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(invalid(
            "only ASCII letters, digits, `-`, `_` and `.` are allowed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        for role in Role::ALL {
            let identity = PeerIdentity::new(role, format!("{role}-7")).unwrap();
            assert_eq!(
                PeerIdentity::from_uri(&identity.to_uri()).unwrap(),
                identity
            );
        }
        assert_eq!(
            PeerIdentity::new(Role::Agent, "agent-3").unwrap().to_uri(),
            "fullerene://agent/agent-3"
        );
    }

    #[test]
    fn malformed_uris_are_refused() {
        for uri in [
            "https://agent/agent-3",
            "fullerene:agent/agent-3",
            "fullerene://agent",
            "fullerene://agent/",
            "fullerene://agent/a/b",
            "fullerene://agent/a?x=1",
            "fullerene://agent/a b",
            "fullerene://Agent/agent-3",
            "fullerene://scheduler/s-1",
        ] {
            assert!(PeerIdentity::from_uri(uri).is_err(), "{uri} was accepted");
        }
        assert!(PeerIdentity::new(Role::Agent, "x".repeat(MAX_ID_LEN)).is_ok());
        assert!(PeerIdentity::new(Role::Agent, "x".repeat(MAX_ID_LEN + 1)).is_err());
    }

    #[test]
    fn master_ids_follow_the_development_convention() {
        let master = |id: &str| PeerIdentity::new(Role::Master, id).unwrap();
        assert_eq!(master("master-3").master_id(), Some(MasterId(3)));
        assert_eq!(master("master-0").master_id(), None);
        assert_eq!(master("db-3").master_id(), None);
        let agent = PeerIdentity::new(Role::Agent, "master-3").unwrap();
        assert_eq!(agent.master_id(), None);
        assert_eq!(agent.agent_id(), Some(AgentId::from("master-3")));
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(matches!(
            PeerIdentity::from_certificate(b"not a certificate"),
            Err(IdentityError::UnparsableCertificate(_))
        ));
    }
}
