//! Who may use the HTTP API: operators' client certificates, and bearer tokens from a file the
//! operator keeps.
//!
//! # Credentials
//!
//! - **A client certificate** of role `operator`, verified against the cluster CA during the
//!   TLS handshake: the same identity the QUIC operator session admits, so it may read and
//!   write. A verified certificate of another role (an agent's, a framework's, a master's) is
//!   refused with 403 even if a token comes with it: those keys live on machines that run
//!   tasks, and a leaked agent key must not become an operator's.
//! - **A bearer token** (`Authorization: Bearer <token>`), listed in the token file with a
//!   scope: `read` (every `GET`) or `write` (reads and the writes that change state).
//!
//! # The token file
//!
//! One token a line, `#` comments and blank lines ignored:
//!
//! ```text
//! # name   scope  hash                                                                     [expires=RFC 3339]
//! deploy   write  sha256:5d5b09f6dcb2d53a5fffc60c4ac0d55fabdf556069d6631545f42aa6e3500f2e
//! grafana  read   sha256:0b6e6d7e0ba2cd4a6ba4eb6bc4a3ed3f8d1a2c1b8f1f9a5ef1b8e6a4b0b1e2f3 expires=2026-12-31T00:00:00Z
//! ```
//!
//! Only the SHA-256 of each token is stored, so the file is no secret worth stealing. A plain
//! hash (no salt, no slow hash) is enough because tokens are 256 random bits
//! ([`generate_token`], `fullerene token new`), not passwords: there is no dictionary to try.
//! A presented token is hashed and compared with every entry in constant time, and the loop
//! does not stop at a match, so timing tells nothing about the stored hashes. Names must be
//! unique (they appear in the audit log); an expired token is refused like an unknown one,
//! with a message saying it expired.
//!
//! The file is read at start (a bad file stops the master with the line and what is wrong), and
//! again on SIGHUP and when it changes on disk (checked every [`RELOAD_CHECK`]): adding or
//! revoking a token needs no restart. A file that no longer parses is not taken: the master
//! keeps the tokens it had and logs the error.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use fullerene_transport::{PeerIdentity, Role};
use ring::digest;
use subtle::ConstantTimeEq;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::sync::watch;

/// How often the token file's modification is checked.
pub const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// The longest token accepted in a header (a generated one has 69 characters).
const MAX_TOKEN_LEN: usize = 512;

/// The prefix of generated tokens, so that secret scanners can recognise a leaked one.
pub const TOKEN_PREFIX: &str = "fullerene_";

/// What a caller may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every `GET`.
    Read,
    /// Reads, and the writes that change the cluster's state.
    Write,
}

impl Scope {
    /// The scope's name in the token file.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(text: &str) -> Result<Scope, String> {
        match text {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            other => Err(format!("unknown scope `{other}` (read or write)")),
        }
    }
}

/// One line of the token file.
#[derive(Clone, PartialEq, Eq)]
struct TokenEntry {
    name: String,
    scope: Scope,
    hash: [u8; 32],
    /// Seconds since the Unix epoch after which the token is refused.
    expires: Option<i64>,
}

impl fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenEntry")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// A bad line of a token file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TokenLineError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// It could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is wrong.
    #[error("token file {path}, {error}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The line and what is wrong.
        error: TokenLineError,
    },
}

/// The tokens of a token file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenSet {
    entries: Vec<TokenEntry>,
}

/// A token that was accepted: its name and scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The token's name in the file.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
}

/// Why a presented token was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// No entry has its hash.
    #[error("the bearer token is not valid")]
    Unknown,
    /// Its entry expired.
    #[error("the bearer token `{name}` expired at {expired}")]
    Expired {
        /// The token's name.
        name: String,
        /// When, RFC 3339.
        expired: String,
    },
}

/// The SHA-256 of a token, as the file stores it.
pub fn hash_token(token: &str) -> [u8; 32] {
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest::digest(&digest::SHA256, token.as_bytes()).as_ref());
    hash
}

/// A new token: [`TOKEN_PREFIX`] and 256 random bits from the operating system, in hex.
pub fn generate_token() -> Result<String, ring::error::Unspecified> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)?;
    Ok(format!("{TOKEN_PREFIX}{}", to_hex(&bytes)))
}

/// The token file's line for `token`, named `name`, with `scope`, expiring at `expires`
/// (seconds since the Unix epoch); refuses a name the file would refuse.
pub fn token_line(
    name: &str,
    scope: Scope,
    token: &str,
    expires: Option<i64>,
) -> Result<String, String> {
    check_name(name)?;
    let mut line = format!("{name} {scope} sha256:{}", to_hex(&hash_token(token)));
    if let Some(expires) = expires {
        line.push_str(" expires=");
        line.push_str(&rfc3339(expires)?);
    }
    Ok(line)
}

/// Parses an RFC 3339 time (`2026-12-31T00:00:00Z`) into seconds since the Unix epoch.
pub fn parse_time(text: &str) -> Result<i64, String> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map(OffsetDateTime::unix_timestamp)
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2026-12-31T00:00:00Z: {e}"))
}

fn rfc3339(seconds: i64) -> Result<String, String> {
    OffsetDateTime::from_unix_timestamp(seconds)
        .map_err(|e| e.to_string())?
        .format(&Rfc3339)
        .map_err(|e| e.to_string())
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn from_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Names are what the audit log shows: 1 to 64 ASCII letters, digits, `-`, `_` and `.`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "token name `{name}` must be 1 to 64 ASCII letters, digits, `-`, `_` or `.`"
        ))
    }
}

impl TokenSet {
    /// Parses a token file's text (see the module's format).
    pub fn parse(text: &str) -> Result<TokenSet, TokenLineError> {
        let mut entries: Vec<TokenEntry> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let fail = |reason: String| TokenLineError { line, reason };
            let content = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
            if content.is_empty() {
                continue;
            }
            let mut fields = content.split_whitespace();
            let (Some(name), Some(scope), Some(hash)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(fail(
                    "expected `NAME SCOPE sha256:HASH [expires=TIME]`".to_string(),
                ));
            };
            check_name(name).map_err(fail)?;
            let scope: Scope = scope.parse().map_err(fail)?;
            let hash = hash
                .strip_prefix("sha256:")
                .and_then(from_hex)
                .ok_or_else(|| {
                    fail(format!(
                        "`{hash}` is not `sha256:` and 64 hex digits (store the token's hash, never the token)"
                    ))
                })?;
            let mut expires = None;
            for option in fields {
                match option.split_once('=') {
                    Some(("expires", time)) if expires.is_none() => {
                        expires = Some(parse_time(time).map_err(fail)?);
                    }
                    Some(("expires", _)) => return Err(fail("`expires` given twice".to_string())),
                    _ => {
                        return Err(fail(format!(
                            "unknown option `{option}` (the only option is expires=TIME)"
                        )))
                    }
                }
            }
            if entries.iter().any(|entry| entry.name == name) {
                return Err(fail(format!("token name `{name}` is used twice")));
            }
            if entries.iter().any(|entry| entry.hash == hash) {
                return Err(fail(format!(
                    "token `{name}` has the same hash as another: one token, two entries"
                )));
            }
            entries.push(TokenEntry {
                name: name.to_string(),
                scope,
                hash,
                expires,
            });
        }
        Ok(TokenSet { entries })
    }

    /// How many tokens it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The grant of `presented` at `now` (seconds since the Unix epoch).
    pub fn verify(&self, presented: &str, now: i64) -> Result<Grant, TokenRefusal> {
        if presented.is_empty() || presented.len() > MAX_TOKEN_LEN {
            return Err(TokenRefusal::Unknown);
        }
        let hash = hash_token(presented);
        let mut found: Option<&TokenEntry> = None;
        // Every entry is compared, each in constant time: no early exit tells where a match is.
        for entry in &self.entries {
            let same: bool = hash.ct_eq(&entry.hash).into();
            if same && found.is_none() {
                found = Some(entry);
            }
        }
        let entry = found.ok_or(TokenRefusal::Unknown)?;
        if let Some(expires) = entry.expires {
            if now >= expires {
                return Err(TokenRefusal::Expired {
                    name: entry.name.clone(),
                    expired: rfc3339(expires).unwrap_or_else(|_| expires.to_string()),
                });
            }
        }
        Ok(Grant {
            name: entry.name.clone(),
            scope: entry.scope,
        })
    }
}

/// Who made a request, once authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Caller {
    /// For the audit log: `operator operator-1`, `token deploy`, `anonymous`.
    pub who: String,
    /// The principal its writes are made as (the owner of the reservations it creates): the
    /// certificate's id (`operator-1`), or `token:NAME` for a bearer token.
    pub principal: String,
    /// What it may do; `None` for an anonymous caller (open `/metrics` only).
    pub scope: Option<Scope>,
}

/// Why a request was not authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No credentials (401, with the challenge).
    Missing,
    /// A malformed `Authorization` header, or a token refused (401, `invalid_token`).
    Invalid(String),
    /// A verified certificate of a role that may not use the API (403).
    WrongRole(PeerIdentity),
}

/// Authenticates a request from its connection's verified certificate (`certificate`) and its
/// `Authorization` header, with `tokens` (none configured: certificates only) at `now`.
pub(crate) fn authenticate(
    certificate: Option<&PeerIdentity>,
    authorization: Option<&[u8]>,
    tokens: Option<&TokenSet>,
    now: i64,
) -> Result<Caller, AuthFailure> {
    if let Some(identity) = certificate {
        if identity.role != Role::Operator {
            return Err(AuthFailure::WrongRole(identity.clone()));
        }
        return Ok(Caller {
            who: identity.to_string(),
            principal: identity.id.clone(),
            scope: Some(Scope::Write),
        });
    }
    let Some(header) = authorization else {
        return Err(AuthFailure::Missing);
    };
    let header = std::str::from_utf8(header)
        .map_err(|_| AuthFailure::Invalid("the Authorization header is not text".to_string()))?;
    let token = match header.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => {
            return Err(AuthFailure::Invalid(
                "the Authorization header must be `Bearer <token>`".to_string(),
            ))
        }
    };
    let Some(tokens) = tokens else {
        return Err(AuthFailure::Invalid(
            "this master accepts no tokens (no token file); use an operator certificate"
                .to_string(),
        ));
    };
    let grant = tokens
        .verify(token, now)
        .map_err(|refusal| AuthFailure::Invalid(refusal.to_string()))?;
    Ok(Caller {
        who: format!("token {}", grant.name),
        principal: format!("token:{}", grant.name),
        scope: Some(grant.scope),
    })
}

/// The token file and the tokens last read from it.
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    tokens: RwLock<Arc<TokenSet>>,
}

/// What tells two versions of a file apart without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        #[cfg(unix)]
        inode: std::os::unix::fs::MetadataExt::ino(&metadata),
    })
}

fn read_tokens(path: &Path) -> Result<TokenSet, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    TokenSet::parse(&text).map_err(|error| TokenFileError::Invalid {
        path: path.to_path_buf(),
        error,
    })
}

impl TokenStore {
    /// Reads `path`; fails if it cannot be read or a line is wrong.
    pub fn load(path: &Path) -> Result<TokenStore, TokenFileError> {
        let tokens = read_tokens(path)?;
        if tokens.is_empty() {
            tracing::warn!(path = %path.display(), "the HTTP API's token file lists no token");
        }
        Ok(TokenStore {
            path: path.to_path_buf(),
            tokens: RwLock::new(Arc::new(tokens)),
        })
    }

    /// The tokens in force.
    pub fn current(&self) -> Arc<TokenSet> {
        match self.tokens.read() {
            Ok(tokens) => Arc::clone(&tokens),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Reads the file again; on an error the tokens in force stay (and the error is returned).
    pub fn reload(&self) -> Result<usize, TokenFileError> {
        let tokens = read_tokens(&self.path)?;
        let count = tokens.len();
        let mut slot = match self.tokens.write() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = Arc::new(tokens);
        Ok(count)
    }

    fn reload_and_log(&self, why: &str) {
        match self.reload() {
            Ok(count) => {
                tracing::info!(path = %self.path.display(), tokens = count, why, "HTTP API tokens reloaded");
            }
            Err(error) => {
                tracing::error!(%error, why, "HTTP API tokens not reloaded: the tokens in force stay");
            }
        }
    }

    /// Reloads on SIGHUP and when the file changes (checked every [`RELOAD_CHECK`]), until
    /// `stop` fires.
    pub(crate) async fn watch(self: Arc<TokenStore>, mut stop: watch::Receiver<bool>) {
        #[cfg(unix)]
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; the token file is reloaded when it changes only");
                None
            }
        };
        let mut last = stamp(&self.path);
        let mut every = tokio::time::interval(RELOAD_CHECK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hung_up = async {
                match hangup.as_mut() {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let hung_up = std::future::pending::<()>();
            tokio::select! {
                _ = stop.changed() => return,
                () = hung_up => {
                    last = stamp(&self.path);
                    self.reload_and_log("SIGHUP");
                }
                _ = every.tick() => {
                    let now = stamp(&self.path);
                    if now != last {
                        last = now;
                        self.reload_and_log("the file changed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn file(lines: &[String]) -> String {
        lines.join("\n")
    }

    #[test]
    fn generated_tokens_verify_with_their_scope_and_only_their_line() {
        let read = generate_token().expect("a token");
        let write = generate_token().expect("a token");
        assert!(read.starts_with(TOKEN_PREFIX) && read.len() == TOKEN_PREFIX.len() + 64);
        assert_ne!(read, write);
        let text = file(&[
            "# the operators' tokens".to_string(),
            String::new(),
            token_line("grafana", Scope::Read, &read, None).expect("a line"),
            format!(
                "{}   # the deploy job",
                token_line("deploy", Scope::Write, &write, None).expect("a line")
            ),
        ]);
        assert!(
            !text.contains(&read) && !text.contains(&write),
            "only hashes are stored"
        );
        let tokens = TokenSet::parse(&text).expect("a token file");
        assert_eq!(tokens.len(), 2);
        assert_eq!(
            tokens.verify(&read, NOW),
            Ok(Grant {
                name: "grafana".into(),
                scope: Scope::Read
            })
        );
        assert_eq!(
            tokens.verify(&write, NOW).map(|g| g.scope),
            Ok(Scope::Write)
        );
        for wrong in [
            "",
            "fullerene_00",
            &read[..read.len() - 1],
            &"x".repeat(10_000),
        ] {
            assert_eq!(
                tokens.verify(wrong, NOW),
                Err(TokenRefusal::Unknown),
                "{wrong}"
            );
        }
    }

    #[test]
    fn an_expired_token_is_refused_saying_so() {
        let token = generate_token().expect("a token");
        let expires = parse_time("2027-01-15T08:00:00Z").expect("a time");
        let line = token_line("ci", Scope::Write, &token, Some(expires)).expect("a line");
        assert!(line.ends_with("expires=2027-01-15T08:00:00Z"), "{line}");
        let tokens = TokenSet::parse(&line).expect("a token file");
        assert!(tokens.verify(&token, expires - 1).is_ok());
        let refusal = tokens.verify(&token, expires).expect_err("expired");
        assert_eq!(
            refusal,
            TokenRefusal::Expired {
                name: "ci".into(),
                expired: "2027-01-15T08:00:00Z".into()
            }
        );
        assert!(refusal.to_string().contains("expired"), "{refusal}");
    }

    #[test]
    fn bad_lines_are_refused_with_their_number_and_reason() {
        let token = generate_token().expect("a token");
        let good = token_line("a", Scope::Read, &token, None).expect("a line");
        let hash = good.split_whitespace().nth(2).expect("a hash").to_string();
        for (text, expected) in [
            ("justone".to_string(), "expected `NAME SCOPE"),
            (format!("a admin {hash}"), "unknown scope `admin`"),
            (format!("a read {token}"), "never the token"),
            (format!("a read sha256:{}", "0".repeat(63)), "64 hex digits"),
            (format!("a/b read {hash}"), "token name"),
            (format!("a read {hash} expires=tomorrow"), "RFC 3339"),
            (format!("a read {hash} colour=red"), "unknown option"),
            (format!("{good}\n{good}"), "used twice"),
            (format!("{good}\nb read {hash}"), "same hash as another"),
        ] {
            let error = TokenSet::parse(&text).expect_err(&text);
            assert!(
                error.to_string().contains(expected),
                "{text}: {error} lacks {expected}"
            );
        }
        let error = TokenSet::parse(&format!("# ok\n{good}\nbroken")).expect_err("line 3");
        assert_eq!(error.line, 3);
        assert!(TokenSet::parse("# nothing\n\n").expect("empty").is_empty());
    }

    #[test]
    fn callers_are_operators_by_certificate_or_token_holders() {
        let read = generate_token().expect("a token");
        let tokens = TokenSet::parse(&token_line("r", Scope::Read, &read, None).expect("a line"))
            .expect("tokens");
        let operator = PeerIdentity::new(Role::Operator, "operator-1").expect("an identity");
        let agent = PeerIdentity::new(Role::Agent, "agent-1").expect("an identity");
        let bearer = format!("Bearer {read}");

        let by_certificate = authenticate(Some(&operator), None, Some(&tokens), NOW);
        assert_eq!(by_certificate.map(|c| c.scope), Ok(Some(Scope::Write)));
        // Another role's certificate is refused even with a good token.
        assert_eq!(
            authenticate(Some(&agent), Some(bearer.as_bytes()), Some(&tokens), NOW),
            Err(AuthFailure::WrongRole(agent))
        );
        let by_token = authenticate(None, Some(bearer.as_bytes()), Some(&tokens), NOW);
        assert_eq!(
            by_token,
            Ok(Caller {
                who: "token r".into(),
                principal: "token:r".into(),
                scope: Some(Scope::Read)
            })
        );
        assert_eq!(
            authenticate(
                None,
                Some(format!("bearer   {read}").as_bytes()),
                Some(&tokens),
                NOW
            )
            .map(|c| c.scope),
            Ok(Some(Scope::Read)),
            "the scheme is case-insensitive"
        );
        assert_eq!(
            authenticate(None, None, Some(&tokens), NOW),
            Err(AuthFailure::Missing)
        );
        for header in [
            format!("Basic {read}"),
            read.clone(),
            "Bearer nope".to_string(),
        ] {
            assert!(
                matches!(
                    authenticate(None, Some(header.as_bytes()), Some(&tokens), NOW),
                    Err(AuthFailure::Invalid(_))
                ),
                "{header}"
            );
        }
        assert!(matches!(
            authenticate(None, Some(bearer.as_bytes()), None, NOW),
            Err(AuthFailure::Invalid(reason)) if reason.contains("no token file")
        ));
    }

    #[test]
    fn a_store_reloads_and_keeps_its_tokens_when_the_file_breaks() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("tokens");
        let first = generate_token().expect("a token");
        let second = generate_token().expect("a token");
        std::fs::write(
            &path,
            token_line("one", Scope::Read, &first, None).expect("a line"),
        )
        .expect("write");
        let store = TokenStore::load(&path).expect("a store");
        assert!(store.current().verify(&first, NOW).is_ok());

        std::fs::write(
            &path,
            token_line("two", Scope::Write, &second, None).expect("a line"),
        )
        .expect("write");
        assert_eq!(store.reload().expect("reloaded"), 1);
        assert!(store.current().verify(&first, NOW).is_err(), "revoked");
        assert!(store.current().verify(&second, NOW).is_ok());

        std::fs::write(&path, "garbage").expect("write");
        assert!(matches!(
            store.reload(),
            Err(TokenFileError::Invalid { .. })
        ));
        assert!(store.current().verify(&second, NOW).is_ok(), "kept");

        assert!(matches!(
            TokenStore::load(&dir.path().join("missing")),
            Err(TokenFileError::Unreadable { .. })
        ));
    }
}
