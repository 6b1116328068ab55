//! An operator's client for the masters: finds the leader by following redirects.

use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::messages::{OperatorRequest, OperatorResponse, SessionOpen, WireError};
use fullerene_proto::transport::{Client, Connection, Session};
use tokio::time::{sleep, timeout, Instant};

/// Why an operator request could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum OperatorClientError {
    /// No master was given.
    #[error("no master address given")]
    NoMasters,
    /// The masters answered with an error.
    #[error("the master refused the request: {0}")]
    Refused(WireError),
    /// No leader could be reached before the deadline.
    #[error("no leader answered within {timeout:?} (last problem: {last})")]
    NoLeader {
        /// The deadline.
        timeout: Duration,
        /// The last failure seen.
        last: String,
    },
}

/// Sends operator requests to whichever master leads.
///
/// A follower's redirect is followed at once; `Redirect { leader: None }` (an election is
/// running), `Unavailable` answers and unreachable masters are retried, cycling through the
/// known addresses with a short pause, until the deadline. The session to the master that
/// answered last is reused.
#[derive(Debug)]
pub struct OperatorClient {
    client: Client,
    masters: Vec<SocketAddr>,
    deadline: Duration,
    current: Option<Link>,
}

/// How long connecting to one master may take: a master that is down must not use up the
/// whole deadline while the others are up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause between rounds of attempts while no leader answers.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl OperatorClient {
    /// A client for the masters at `masters` (any of them; redirects lead to the leader), giving
    /// up on a request after `deadline`.
    pub fn new(client: Client, masters: Vec<SocketAddr>, deadline: Duration) -> OperatorClient {
        OperatorClient {
            client,
            masters,
            deadline,
            current: None,
        }
    }

    /// The address of the master that answered the last request.
    pub fn last_master(&self) -> Option<SocketAddr> {
        self.current.as_ref().map(|link| link.addr)
    }

    /// Sends `request` to the leader and returns its answer (never a `Redirect`; an `Error`
    /// answer other than `Unavailable` is returned as [`OperatorClientError::Refused`]).
    pub async fn request(
        &mut self,
        request: &OperatorRequest,
    ) -> Result<OperatorResponse, OperatorClientError> {
        if self.masters.is_empty() {
            return Err(OperatorClientError::NoMasters);
        }
        let started = Instant::now();
        let mut last = String::from("no attempt");
        let mut next_candidate = 0usize;
        let mut redirect_to: Option<SocketAddr> = None;
        while started.elapsed() < self.deadline {
            let target = match (&self.current, redirect_to.take()) {
                (_, Some(addr)) => addr,
                (Some(link), None) => link.addr,
                (None, None) => {
                    let addr = self.masters[next_candidate % self.masters.len()];
                    next_candidate += 1;
                    if next_candidate % self.masters.len() == 0 {
                        sleep(RETRY_PAUSE).await;
                    }
                    addr
                }
            };
            let remaining = self.deadline.saturating_sub(started.elapsed());
            match timeout(remaining, self.exchange(target, request)).await {
                Err(_) => {
                    last = format!("{target} did not answer in time");
                    self.current = None;
                }
                Ok(Err(error)) => {
                    last = format!("{target}: {error}");
                    self.current = None;
                }
                Ok(Ok(OperatorResponse::Redirect(redirect))) => {
                    self.current = None;
                    match redirect.leader {
                        Some(leader) if leader.addr != target => {
                            if !self.masters.contains(&leader.addr) {
                                self.masters.push(leader.addr);
                            }
                            redirect_to = Some(leader.addr);
                        }
                        _ => {
                            last = format!("{target} knows no leader yet");
                            sleep(RETRY_PAUSE).await;
                        }
                    }
                }
                Ok(Ok(OperatorResponse::Error(error)))
                    if error.code == fullerene_proto::messages::ErrorCode::Unavailable =>
                {
                    last = format!("{target}: {error}");
                    sleep(RETRY_PAUSE).await;
                }
                Ok(Ok(OperatorResponse::Error(error))) => {
                    return Err(OperatorClientError::Refused(error))
                }
                Ok(Ok(response)) => return Ok(response),
            }
        }
        Err(OperatorClientError::NoLeader {
            timeout: self.deadline,
            last,
        })
    }

    /// One request and its answer on the session to `target` (opened if needed); the error
    /// says what failed, for the caller's last-problem message.
    async fn exchange(
        &mut self,
        target: SocketAddr,
        request: &OperatorRequest,
    ) -> Result<OperatorResponse, String> {
        let link = match self.current.take() {
            Some(link) if link.addr == target => link,
            _ => {
                let open = async {
                    let connection = self.client.connect(target).await?;
                    let session = connection.open_session(SessionOpen::Operator).await?;
                    Ok::<_, fullerene_proto::transport::TransportError>((connection, session))
                };
                let (connection, session) = timeout(CONNECT_TIMEOUT, open)
                    .await
                    .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
                    .map_err(|e| e.to_string())?;
                Link {
                    addr: target,
                    _connection: connection,
                    session,
                }
            }
        };
        let link = self.current.insert(link);
        link.session
            .tx
            .send(request)
            .await
            .map_err(|e| e.to_string())?;
        match link.session.rx.recv::<OperatorResponse>().await {
            Ok(Some(response)) => Ok(response),
            Ok(None) => Err("the master closed the session".to_string()),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// An open operator session (the connection is held so that it stays open).
#[derive(Debug)]
struct Link {
    addr: SocketAddr,
    _connection: Connection,
    session: Session,
}
