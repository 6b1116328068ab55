//! An operator's client for the masters: sends each request to the leader, following
//! redirects, within a deadline.

use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::http::EventsDocument;
use fullerene_proto::messages::{
    AgentInfo, ErrorCode, FileChunk, FinishedTaskInfo, FrameworkInfo, OperatorRequest,
    OperatorResponse, SessionOpen, TaskFileRead, TaskInfo, WireError,
};
use fullerene_proto::time::SystemClock;
use fullerene_proto::FrameworkId;
use fullerene_transport::{Client, TransportError};
use tokio::time::{sleep, timeout, Instant};

use crate::follow::{Attempt, FollowConfig, Follower, Pacing};
use crate::link::{open, Link, OpenError};

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
    /// The master answered with a response of another kind than the request asks for.
    #[error("the master answered {request} with {answer}")]
    Unexpected {
        /// The request.
        request: String,
        /// The start of the answer.
        answer: String,
    },
    /// A master refused to open an operator session for this certificate (its role may not
    /// open one): every master would, so this comes at once rather than after the deadline.
    #[error(
        "master {master} refused an operator session: {error}; an operator's certificate is needed"
    )]
    SessionRefused {
        /// The master that refused.
        master: SocketAddr,
        /// Its reason (the certificate's role).
        error: WireError,
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
/// known addresses with a short pause per round, until the deadline. A master that failed to
/// answer is passed over for a second, redirects to it included: after a leader dies,
/// followers keep redirecting to it until they time out, and following them would cost a
/// connection timeout per redirect. The session to the master that answered last is reused.
/// Where to go next is the [`Follower`]'s decision ([`Pacing::Rounds`]).
///
/// Retries are safe because a redirect or an `Unavailable` answer means nothing was proposed.
/// A request that is not [idempotent](OperatorRequest::is_idempotent) is never sent twice
/// once a master may have proposed it: a lost answer after it was sent, or an `OutcomeUnknown`
/// answer, ends with [`OperatorClientError::OutcomeUnknown`].
#[derive(Debug)]
pub struct OperatorClient {
    client: Client,
    /// `None` when no master was given.
    follower: Option<Follower>,
    deadline: Duration,
    current: Option<Link>,
    /// The follower's clock.
    clock: SystemClock,
}

/// How long a master that failed to answer is passed over.
const PASS_OVER: Duration = crate::follow::DEFAULT_PASS_OVER;

/// How long connecting to one master may take: a master that is down must not use up the
/// whole deadline while the others are up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Default pause between rounds of attempts while no leader answers.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl OperatorClient {
    /// A client for the masters at `masters` (any of them; redirects lead to the leader), giving
    /// up on a request after `deadline`.
    pub fn new(client: Client, masters: Vec<SocketAddr>, deadline: Duration) -> OperatorClient {
        let config = FollowConfig {
            pacing: Pacing::Rounds { pause: RETRY_PAUSE },
            // The deadline bounds the redirects followed.
            redirects_at_once: u32::MAX,
            pass_over: PASS_OVER,
            seed: 0,
        };
        OperatorClient {
            client,
            follower: Follower::new(masters, config).ok(),
            deadline,
            current: None,
            clock: SystemClock::new(),
        }
    }

    /// Pauses `pause` (instead of 100 ms) between rounds of attempts while no leader answers:
    /// shorter for a benchmark that times failovers, so the pause does not blur the figure.
    pub fn with_retry_pause(mut self, pause: Duration) -> OperatorClient {
        if let Some(follower) = &mut self.follower {
            follower.set_pacing(Pacing::Rounds { pause });
        }
        self
    }

    /// Passes over `addr` for `duration`, as if it had just failed to answer (for a caller
    /// that knows a master is down, such as a benchmark that killed it).
    pub fn avoid(&mut self, addr: SocketAddr, duration: Duration) {
        let now = self.clock.monotonic();
        if let Some(follower) = &mut self.follower {
            follower.pass_over(addr, now, duration);
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
        let Some(follower) = self.follower.as_mut() else {
            return Err(OperatorClientError::NoMasters);
        };
        // Each request goes round the list from the top, after the master that answered last.
        follower.rewind();
        let mut next = match &self.current {
            Some(link) => Attempt {
                addr: link.addr,
                delay: Duration::ZERO,
            },
            None => follower.start(self.clock.monotonic()),
        };
        let started = Instant::now();
        let mut last = String::from("no attempt");
        loop {
            if !next.delay.is_zero() {
                sleep(next.delay).await;
            }
            if started.elapsed() >= self.deadline {
                break;
            }
            let target = next.addr;
            let remaining = self.deadline.saturating_sub(started.elapsed());
            let mut sent = false;
            let outcome_unknown = |detail: String| OperatorClientError::OutcomeUnknown {
                master: target,
                detail,
            };
            let result = timeout(
                remaining,
                exchange(&self.client, &mut self.current, target, request, &mut sent),
            )
            .await;
            let now = self.clock.monotonic();
            next = match result {
                Err(_) => {
                    self.current = None;
                    let next = follower.failed(now);
                    if sent && !request.is_idempotent() {
                        return Err(outcome_unknown("no answer in time".to_string()));
                    }
                    last = format!("{target} did not answer in time");
                    next
                }
                Ok(Err(ExchangeError::Refused(error))) => {
                    return Err(OperatorClientError::SessionRefused {
                        master: target,
                        error,
                    });
                }
                Ok(Err(ExchangeError::Failed(error))) => {
                    self.current = None;
                    let next = follower.failed(now);
                    if sent && !request.is_idempotent() {
                        return Err(outcome_unknown(error));
                    }
                    last = format!("{target}: {error}");
                    next
                }
                Ok(Ok(OperatorResponse::Error(error)))
                    if error.code == ErrorCode::OutcomeUnknown =>
                {
                    if !request.is_idempotent() {
                        return Err(outcome_unknown(error.message));
                    }
                    last = format!("{target}: {error}");
                    follower.wait()
                }
                Ok(Ok(OperatorResponse::Redirect(redirect))) => {
                    self.current = None;
                    let leader = redirect.leader.map(|leader| leader.addr);
                    let next = follower.redirected(leader, now);
                    if leader != Some(next.addr) || !next.delay.is_zero() {
                        last = format!("{target} knows no leader yet");
                    }
                    next
                }
                Ok(Ok(OperatorResponse::Error(error))) if error.code == ErrorCode::Unavailable => {
                    last = format!("{target}: {error}");
                    follower.wait()
                }
                Ok(Ok(OperatorResponse::Error(error))) => {
                    return Err(OperatorClientError::Refused(error))
                }
                Ok(Ok(response)) => {
                    follower.joined();
                    return Ok(response);
                }
            };
        }
        Err(OperatorClientError::NoLeader {
            timeout: self.deadline,
            last,
        })
    }
}

impl OperatorClient {
    /// Every agent, page by page ([`OperatorRequest::ListAgents`]). Pages are separate reads:
    /// an agent registered between two of them may be missing, never listed twice.
    pub async fn list_agents(&mut self) -> Result<Vec<AgentInfo>, OperatorClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            match self.request(&OperatorRequest::ListAgents { after }).await? {
                OperatorResponse::Agents { agents, next } => {
                    all.extend(agents);
                    match next {
                        Some(next) => after = Some(next),
                        None => return Ok(all),
                    }
                }
                other => return Err(unexpected("ListAgents", &other)),
            }
        }
    }

    /// Every framework, page by page ([`OperatorRequest::ListFrameworks`]).
    pub async fn list_frameworks(&mut self) -> Result<Vec<FrameworkInfo>, OperatorClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            match self
                .request(&OperatorRequest::ListFrameworks { after })
                .await?
            {
                OperatorResponse::Frameworks { frameworks, next } => {
                    all.extend(frameworks);
                    match next {
                        Some(next) => after = Some(next),
                        None => return Ok(all),
                    }
                }
                other => return Err(unexpected("ListFrameworks", &other)),
            }
        }
    }

    /// Every task (of `framework_id`, when given), page by page
    /// ([`OperatorRequest::ListTasks`]).
    pub async fn list_tasks(
        &mut self,
        framework_id: Option<FrameworkId>,
    ) -> Result<Vec<TaskInfo>, OperatorClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let request = OperatorRequest::ListTasks {
                framework_id: framework_id.clone(),
                after,
            };
            match self.request(&request).await? {
                OperatorResponse::Tasks { tasks, next } => {
                    all.extend(tasks);
                    match next {
                        Some(next) => after = Some(next),
                        None => return Ok(all),
                    }
                }
                other => return Err(unexpected("ListTasks", &other)),
            }
        }
    }
}

impl OperatorClient {
    /// Every finished task the cluster keeps (of `framework_id`, when given), oldest first,
    /// page by page ([`OperatorRequest::ListFinishedTasks`]).
    pub async fn list_finished_tasks(
        &mut self,
        framework_id: Option<FrameworkId>,
    ) -> Result<Vec<FinishedTaskInfo>, OperatorClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let request = OperatorRequest::ListFinishedTasks {
                framework_id: framework_id.clone(),
                after,
            };
            match self.request(&request).await? {
                OperatorResponse::FinishedTasks { tasks, next } => {
                    all.extend(tasks);
                    match next {
                        Some(next) => after = Some(next),
                        None => return Ok(all),
                    }
                }
                other => return Err(unexpected("ListFinishedTasks", &other)),
            }
        }
    }

    /// The leader's events after `since` (the latest when `None`), at most `limit`, waiting
    /// up to `wait` for one when there is none yet ([`OperatorRequest::Events`]).
    pub async fn events(
        &mut self,
        since: Option<u64>,
        limit: u32,
        wait: Duration,
    ) -> Result<EventsDocument, OperatorClientError> {
        let request = OperatorRequest::Events {
            since,
            limit,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        match self.request(&request).await? {
            OperatorResponse::Events(json) => {
                serde_json::from_str(&json).map_err(|error| OperatorClientError::Unexpected {
                    request: "Events".to_string(),
                    answer: format!("a document that does not decode: {error}"),
                })
            }
            other => Err(unexpected("Events", &other)),
        }
    }

    /// Part of a task's sandbox file, read from its agent through the leader
    /// ([`OperatorRequest::ReadTaskFile`]).
    pub async fn read_task_file(
        &mut self,
        read: TaskFileRead,
    ) -> Result<FileChunk, OperatorClientError> {
        match self.request(&OperatorRequest::ReadTaskFile(read)).await? {
            OperatorResponse::File(chunk) => Ok(chunk),
            other => Err(unexpected("ReadTaskFile", &other)),
        }
    }
}

fn unexpected(request: &str, answer: &OperatorResponse) -> OperatorClientError {
    OperatorClientError::Unexpected {
        request: request.to_string(),
        answer: format!("{answer:?}").chars().take(200).collect(),
    }
}

/// Why one exchange with a master failed.
enum ExchangeError {
    /// The master refused the session for this certificate's role.
    Refused(WireError),
    /// Anything else, said for the caller's last-problem message: another master may answer.
    Failed(String),
}

impl<E: std::fmt::Display> From<E> for ExchangeError {
    fn from(error: E) -> ExchangeError {
        ExchangeError::Failed(error.to_string())
    }
}

/// One request and its answer on the session to `target` (`current`, or opened in its
/// place). `sent` is set once the request may have reached the master.
async fn exchange(
    client: &Client,
    current: &mut Option<Link>,
    target: SocketAddr,
    request: &OperatorRequest,
    sent: &mut bool,
) -> Result<OperatorResponse, ExchangeError> {
    let link = match current.take() {
        Some(link) if link.addr == target => link,
        _ => match open(client, target, SessionOpen::Operator, CONNECT_TIMEOUT).await {
            Ok(link) => link,
            Err(OpenError::Transport(TransportError::SessionRefused(error))) => {
                return Err(ExchangeError::Refused(error))
            }
            Err(error) => return Err(error.into()),
        },
    };
    let link = current.insert(link);
    *sent = true;
    link.session.tx.send(request).await?;
    match link.session.rx.recv::<OperatorResponse>().await {
        Ok(Some(response)) => Ok(response),
        Ok(None) => Err(ExchangeError::Failed(
            "the master closed the session".to_string(),
        )),
        Err(error) => Err(error.into()),
    }
}
