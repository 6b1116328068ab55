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
    /// A request that is not idempotent reached a master, but no answer says whether it was
    /// applied (the connection dropped, the leader changed, or the time ran out): it is not
    /// retried, since applying it twice differs from once. Read the state to find out.
    #[error("master {master} took the request but its outcome is unknown ({detail}); check `fullerene cluster status` before retrying")]
    OutcomeUnknown {
        /// The master that took the request.
        master: SocketAddr,
        /// What happened.
        detail: String,
    },
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
///
/// Retries are safe because a redirect or an `Unavailable` answer means nothing was proposed.
/// A request that is not [idempotent](OperatorRequest::is_idempotent) is never sent twice
/// once a master may have proposed it: a lost answer after it was sent, or an `OutcomeUnknown`
/// answer, ends with [`OperatorClientError::OutcomeUnknown`].
#[derive(Debug)]
pub struct OperatorClient {
    client: Client,
    masters: Vec<SocketAddr>,
    deadline: Duration,
    retry_pause: Duration,
    current: Option<Link>,
    /// Masters that failed to answer recently, and until when they are passed over: after a
    /// leader dies, followers keep redirecting to it until they time out, and following them
    /// would cost a connection timeout per redirect.
    shunned: std::collections::HashMap<SocketAddr, Instant>,
}

/// How long a master that failed to answer is passed over.
const SHUN_FOR: Duration = Duration::from_secs(1);

/// How long connecting to one master may take: a master that is down must not use up the
/// whole deadline while the others are up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Default pause between rounds of attempts while no leader answers.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl OperatorClient {
    /// A client for the masters at `masters` (any of them; redirects lead to the leader), giving
    /// up on a request after `deadline`.
    pub fn new(client: Client, masters: Vec<SocketAddr>, deadline: Duration) -> OperatorClient {
        OperatorClient {
            client,
            masters,
            deadline,
            retry_pause: RETRY_PAUSE,
            current: None,
            shunned: Default::default(),
        }
    }

    /// Pauses `pause` (instead of 100 ms) between rounds of attempts while no leader answers:
    /// shorter for a benchmark that times failovers, so the pause does not blur the figure.
    pub fn with_retry_pause(mut self, pause: Duration) -> OperatorClient {
        self.retry_pause = pause;
        self
    }

    fn is_shunned(&self, addr: SocketAddr) -> bool {
        self.shunned
            .get(&addr)
            .is_some_and(|until| Instant::now() < *until)
    }

    fn shun(&mut self, addr: SocketAddr) {
        self.shunned.insert(addr, Instant::now() + SHUN_FOR);
    }

    /// Passes over `addr` for `duration`, as if it had just failed to answer (for a caller
    /// that knows a master is down, such as a benchmark that killed it).
    pub fn avoid(&mut self, addr: SocketAddr, duration: Duration) {
        self.shunned.insert(addr, Instant::now() + duration);
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
                    // The next master not recently failed (any, when all have).
                    let count = self.masters.len();
                    let mut addr = self.masters[next_candidate % count];
                    for step in 0..count {
                        let candidate = self.masters[(next_candidate + step) % count];
                        if !self.is_shunned(candidate) {
                            addr = candidate;
                            next_candidate += step;
                            break;
                        }
                    }
                    next_candidate += 1;
                    if next_candidate % count == 0 {
                        sleep(self.retry_pause).await;
                    }
                    addr
                }
            };
            let remaining = self.deadline.saturating_sub(started.elapsed());
            let mut sent = false;
            let outcome_unknown = |detail: String| OperatorClientError::OutcomeUnknown {
                master: target,
                detail,
            };
            let result = timeout(remaining, self.exchange(target, request, &mut sent)).await;
            match result {
                Err(_) => {
                    self.current = None;
                    self.shun(target);
                    if sent && !request.is_idempotent() {
                        return Err(outcome_unknown("no answer in time".to_string()));
                    }
                    last = format!("{target} did not answer in time");
                }
                Ok(Err(error)) => {
                    self.current = None;
                    self.shun(target);
                    if sent && !request.is_idempotent() {
                        return Err(outcome_unknown(error));
                    }
                    last = format!("{target}: {error}");
                }
                Ok(Ok(OperatorResponse::Error(error)))
                    if error.code == fullerene_proto::messages::ErrorCode::OutcomeUnknown =>
                {
                    if !request.is_idempotent() {
                        return Err(outcome_unknown(error.message));
                    }
                    last = format!("{target}: {error}");
                    sleep(self.retry_pause).await;
                }
                Ok(Ok(OperatorResponse::Redirect(redirect))) => {
                    self.current = None;
                    match redirect.leader {
                        Some(leader) if leader.addr != target && !self.is_shunned(leader.addr) => {
                            if !self.masters.contains(&leader.addr) {
                                self.masters.push(leader.addr);
                            }
                            redirect_to = Some(leader.addr);
                        }
                        _ => {
                            last = format!("{target} knows no leader yet");
                            sleep(self.retry_pause).await;
                        }
                    }
                }
                Ok(Ok(OperatorResponse::Error(error)))
                    if error.code == fullerene_proto::messages::ErrorCode::Unavailable =>
                {
                    last = format!("{target}: {error}");
                    sleep(self.retry_pause).await;
                }
                Ok(Ok(OperatorResponse::Error(error))) => {
                    return Err(OperatorClientError::Refused(error))
                }
                Ok(Ok(response)) => {
                    self.shunned.remove(&target);
                    return Ok(response);
                }
            }
        }
        Err(OperatorClientError::NoLeader {
            timeout: self.deadline,
            last,
        })
    }

    /// One request and its answer on the session to `target` (opened if needed); the error
    /// says what failed, for the caller's last-problem message. `sent` is set once the request
    /// may have reached the master.
    async fn exchange(
        &mut self,
        target: SocketAddr,
        request: &OperatorRequest,
        sent: &mut bool,
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
        *sent = true;
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
