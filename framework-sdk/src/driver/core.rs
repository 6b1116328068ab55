//! The driver's sans-IO core: what to send and whom to tell, given what the master said.
//!
//! The core holds the subscription (framework id, phase), the call ids and the calls waiting
//! for their answers, the offers held, the highest status sequence number seen per task, and
//! the demand and suppression the master must be told again after a reconnect. Which master to
//! connect to next and when is the [`Follower`]'s decision, the same leader-following state
//! machine agents and operators use. The core never touches a socket or reads a clock: the
//! shell ([`super::shell`]) feeds it events, with the time (a reading of its monotonic clock)
//! to the inputs whose decisions depend on it, and carries out the [`Action`]s it returns, in
//! order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use fullerene_client::follow::{Attempt, FollowConfig, Follower, Pacing, DEFAULT_PASS_OVER};
use fullerene_proto::messages::{
    CallOk, DemandSummary, ErrorCode, FrameworkCall, FrameworkRequest, MasterToFramework, Offer,
    Redirect, StatusAck, StatusUpdate, WireError, MAX_ACKS_PER_CALL,
};
use fullerene_proto::reservations::{ReservationCall, ReservationInfo, ReservationNotice};
use fullerene_proto::time::Time;
use fullerene_proto::{FrameworkId, OfferId};

/// What a driver needs to know to subscribe and to find the leader.
#[derive(Clone, Debug, PartialEq)]
pub struct DriverConfig {
    /// Masters to try, in order; the leader is found by following redirects.
    pub masters: Vec<SocketAddr>,
    /// The framework's human-readable name.
    pub name: String,
    /// The fairness group it expects to be in, or empty for its principal's: groups are the
    /// operator's to set (`fullerene groups set`), and the master refuses a subscription
    /// naming a group other than the principal's.
    pub group: String,
    /// How long the master keeps the framework's tasks after a disconnect.
    pub failover_timeout_ms: u64,
    /// First reconnection delay; doubles per failed attempt.
    pub backoff_initial: Duration,
    /// Largest reconnection delay.
    pub backoff_max: Duration,
    /// How long a master that failed (unreachable, session lost) is passed over: not tried
    /// while another is not, and redirects to it not followed (default
    /// [`DEFAULT_PASS_OVER`]: a dead leader is not tried again while the followers elect
    /// another). Zero: masters are tried in turn even if one just failed.
    pub pass_over: Duration,
    /// Seed of the jitter applied to reconnection delays (so that frameworks that lost the same
    /// master do not all come back at once).
    pub jitter_seed: u64,
    /// The id of a framework an earlier process ran, to take over (framework failover): the
    /// first subscription names it, and the master hands this driver that framework's tasks if
    /// it comes within the framework's failover timeout. `None`: a new framework.
    pub framework_id: Option<FrameworkId>,
}

impl DriverConfig {
    /// A configuration with the usual timings: 60 s failover, backoff from 100 ms to 5 s, a
    /// master that failed passed over for [`DEFAULT_PASS_OVER`].
    pub fn new(
        masters: Vec<SocketAddr>,
        name: impl Into<String>,
        group: impl Into<String>,
    ) -> DriverConfig {
        DriverConfig {
            masters,
            name: name.into(),
            group: group.into(),
            failover_timeout_ms: 60_000,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            pass_over: DEFAULT_PASS_OVER,
            jitter_seed: 0x5eed,
            framework_id: None,
        }
    }
}

/// Why a driver cannot go on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DriverError {
    /// The configuration lists no master.
    #[error("no master address given: pass at least one with --master-addrs")]
    NoMasters,
    /// The master refused the subscription for good (e.g. the framework id is unknown because
    /// its failover timeout passed, or the certificate is not a framework's).
    #[error("subscription of framework `{name}` refused: {error}")]
    SubscriptionRefused {
        /// The framework's name.
        name: String,
        /// The master's answer.
        error: WireError,
    },
    /// The masters tore the framework down (an operator's `fullerene job kill` or `framework
    /// teardown`): its tasks are killed and it cannot subscribe again.
    #[error("framework `{name}` was {reason}")]
    TornDown {
        /// The framework's name.
        name: String,
        /// What the masters said (who tore it down, and why).
        reason: String,
    },
    /// The TLS material or transport settings are unusable.
    #[error("transport setup failed: {0}")]
    Transport(String),
}

/// What the scheduler is told.
#[derive(Clone, Debug, PartialEq)]
pub enum DriverEvent {
    /// First subscription succeeded.
    Registered {
        /// The id the master assigned.
        framework_id: FrameworkId,
    },
    /// Subscribed again with the same id after a lost session; the driver has asked for
    /// reconciliation, so an update per task follows.
    Reconnected {
        /// The framework's id.
        framework_id: FrameworkId,
    },
    /// The session was lost: offers held are void, calls in flight have unknown outcomes.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// New offers.
    Offers(Vec<Offer>),
    /// Offers withdrawn.
    Rescinded(Vec<OfferId>),
    /// A task's new status (duplicates are filtered out; the driver acknowledges it after the
    /// scheduler saw it).
    Update(StatusUpdate),
    /// A call the scheduler made failed. `OutcomeUnknown` means the session was lost before the
    /// answer: the call may or may not have taken effect.
    CallFailed {
        /// The call as made.
        request: FrameworkRequest,
        /// Why.
        error: WireError,
    },
    /// A reservation call the scheduler made (Rayon §5.2: create, update, delete) was
    /// committed; a refusal comes as [`DriverEvent::CallFailed`] with the plan's reason.
    ReservationDone(ReservationCall),
    /// A description of the framework's job ([`FrameworkRequest::DescribeJob`] or
    /// [`FrameworkRequest::EndJob`]) was committed: what operators see of the job is in the
    /// masters' state. (Other calls' successes are not reported: they are many, and their
    /// effects show in offers and status updates.)
    JobRecorded(FrameworkRequest),
    /// The answer to [`FrameworkRequest::ListReservations`]: a page of the principal's
    /// accepted reservations.
    Reservations {
        /// This page, by name.
        reservations: Vec<ReservationInfo>,
        /// Set when more follow (ask again with `after` set to it).
        next: Option<String>,
    },
    /// A reservation of the framework's principal ended: the adapter rejected it after a loss
    /// of capacity (Rayon §5.2), or its time is over, with the masters' verdict.
    ReservationEnded(ReservationNotice),
    /// The driver stops: nothing more will happen.
    Fatal(DriverError),
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Connect to `addr` and open a framework session, after `delay`.
    Connect {
        /// The master.
        addr: SocketAddr,
        /// How long to wait first.
        delay: Duration,
    },
    /// Send a call on the current session.
    Send(FrameworkCall),
    /// Drop the current session (after a redirect).
    CloseSession,
    /// Tell the scheduler.
    Deliver(DriverEvent),
    /// Stop the driver.
    Stop,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting to connect (a `Connect` action is out).
    Connecting,
    /// Session open, `Subscribe` sent with this call id.
    Subscribing(u64),
    /// Subscribed: calls flow.
    Subscribed,
    /// Fatal error or teardown.
    Stopped,
}

#[derive(Clone, Debug)]
struct PendingCall {
    request: FrameworkRequest,
    /// Made by the scheduler (its failures are reported) rather than by the driver itself.
    from_scheduler: bool,
}

/// How many ended tasks a driver remembers the sequence numbers of (see
/// [`DriverCore::remembered_tasks`]).
pub const MAX_REMEMBERED_ENDS: usize = 1 << 16;

/// The sans-IO driver (see the module documentation).
///
/// ```
/// use fullerene_proto::messages::{CallOk, FrameworkRequest, MasterToFramework};
/// use fullerene_proto::time::Time;
/// use fullerene_sdk::driver::core::{Action, DriverConfig, DriverCore, DriverEvent};
///
/// let master = "127.0.0.1:5051".parse()?;
/// let mut core = DriverCore::new(DriverConfig::new(vec![master], "etl", "prod"))?;
/// // The shell is told where to connect ...
/// let now = Time::ZERO;
/// assert!(matches!(core.start(now).as_slice(), [Action::Connect { addr, .. }] if *addr == master));
/// // ... and, once connected, to subscribe.
/// let subscribe = match core.connected().as_slice() {
///     [Action::Send(call)] if matches!(call.call, FrameworkRequest::Subscribe { .. }) => call.call_id,
///     other => panic!("{other:?}"),
/// };
/// let actions = core.received(
///     MasterToFramework::CallResult {
///         call_id: subscribe,
///         result: Ok(CallOk::Subscribed { framework_id: "fw-1-1".into(), group: "default".into(), heartbeat_interval_ms: 1_000 }),
///     },
///     now,
/// );
/// assert!(actions.iter().any(|a| matches!(a, Action::Deliver(DriverEvent::Registered { .. }))));
/// assert_eq!(core.framework_id().map(|id| id.as_str()), Some("fw-1-1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DriverCore {
    config: DriverConfig,
    phase: Phase,
    framework_id: Option<FrameworkId>,
    /// Whether a subscription ever succeeded (a later one is a reconnection).
    ever_subscribed: bool,
    next_call_id: u64,
    pending: BTreeMap<u64, PendingCall>,
    offers: BTreeMap<OfferId, Offer>,
    /// Highest status sequence number delivered per task: every live task, and the last
    /// [`MAX_REMEMBERED_ENDS`] that ended.
    seen_seq: HashMap<fullerene_proto::TaskId, u64>,
    /// The tasks whose end was delivered, oldest first, so that the oldest are forgotten.
    ended: VecDeque<fullerene_proto::TaskId>,
    /// The last demand the scheduler gave, re-sent after every subscription.
    demand: Option<DemandSummary>,
    suppressed: bool,
    /// Calls made while not subscribed that still make sense afterwards (kills, reconciles).
    queued: VecDeque<FrameworkRequest>,
    /// Acknowledgements of updates delivered this session, not sent yet: the shell sends them
    /// in one call ([`DriverCore::flush_acks`]) once it has nothing more waiting to receive.
    acks: Vec<StatusAck>,
    /// Which master to try next, and when.
    follower: Follower,
}

impl DriverCore {
    /// A driver that has not connected yet.
    pub fn new(config: DriverConfig) -> Result<DriverCore, DriverError> {
        let follow = FollowConfig {
            pacing: Pacing::Backoff {
                initial: config.backoff_initial,
                max: config.backoff_max,
            },
            // Two redirects in a row are followed at once; more go round in circles (a stale
            // view of the leader) and back off like any failure.
            redirects_at_once: 2,
            pass_over: config.pass_over,
            seed: config.jitter_seed,
        };
        let follower =
            Follower::new(config.masters.clone(), follow).map_err(|_| DriverError::NoMasters)?;
        let framework_id = config.framework_id.clone();
        Ok(DriverCore {
            config,
            phase: Phase::Connecting,
            framework_id,
            ever_subscribed: false,
            next_call_id: 1,
            pending: BTreeMap::new(),
            offers: BTreeMap::new(),
            seen_seq: HashMap::new(),
            ended: VecDeque::new(),
            demand: None,
            suppressed: false,
            queued: VecDeque::new(),
            acks: Vec::new(),
            follower,
        })
    }

    /// The first action, at `now`: connect to the first master at once.
    pub fn start(&mut self, now: Time) -> Vec<Action> {
        let first = self.follower.start(now);
        vec![self.connect(first)]
    }

    /// The framework's id, once subscribed.
    pub fn framework_id(&self) -> Option<&FrameworkId> {
        self.framework_id.as_ref()
    }

    /// True while subscribed (calls go out at once).
    pub fn is_subscribed(&self) -> bool {
        self.phase == Phase::Subscribed
    }

    /// True once the driver stopped.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The offers held (received, not yet answered, rescinded or voided).
    pub fn offers(&self) -> impl Iterator<Item = &Offer> {
        self.offers.values()
    }

    /// Calls sent and not yet answered.
    pub fn pending_calls(&self) -> usize {
        self.pending.len()
    }

    /// Tasks whose delivered sequence numbers are remembered (to drop duplicates).
    pub fn remembered_tasks(&self) -> usize {
        self.seen_seq.len()
    }

    /// Keeps what a task that ended last saw, forgetting the oldest end past
    /// [`MAX_REMEMBERED_ENDS`]: a driver that runs for months must not remember every task it
    /// ever ran, and duplicates of an end come only while the master resends it, which stops
    /// once the acknowledgement commits, long before that many other tasks have ended.
    fn remember_end(&mut self, task_id: fullerene_proto::TaskId) {
        self.ended.push_back(task_id);
        if self.ended.len() > MAX_REMEMBERED_ENDS {
            if let Some(oldest) = self.ended.pop_front() {
                self.seen_seq.remove(&oldest);
            }
        }
    }

    /// The master being connected to, or connected.
    pub fn current_master(&self) -> Option<SocketAddr> {
        self.follower.current()
    }

    /// The session to the master chosen by the last `Connect` is open: subscribe.
    pub fn connected(&mut self) -> Vec<Action> {
        if self.phase == Phase::Stopped {
            return vec![Action::CloseSession];
        }
        let call = FrameworkRequest::Subscribe {
            framework_id: self.framework_id.clone(),
            name: self.config.name.clone(),
            group: self.config.group.clone(),
            failover_timeout_ms: self.config.failover_timeout_ms,
        };
        let (id, send) = self.make_call(call, false);
        self.phase = Phase::Subscribing(id);
        vec![send]
    }

    /// Connecting (or opening the session) failed at `now`: try the next master after a
    /// backoff.
    pub fn connect_failed(&mut self, _reason: &str, now: Time) -> Vec<Action> {
        if self.phase == Phase::Stopped {
            return Vec::new();
        }
        let next = self.follower.failed(now);
        vec![self.connect(next)]
    }

    /// The session ended at `now` (closed, reset, idle timeout, leader gone): offers are void
    /// and calls in flight have unknown outcomes; reconnect.
    pub fn session_lost(&mut self, reason: &str, now: Time) -> Vec<Action> {
        if self.phase == Phase::Stopped {
            return Vec::new();
        }
        let was_subscribed = self.phase == Phase::Subscribed;
        let mut actions = self.void_session();
        if was_subscribed {
            actions.push(Action::Deliver(DriverEvent::Disconnected {
                reason: reason.to_string(),
            }));
        }
        // A leader that just died is usually replaced by another master: the next one of the
        // list, with the backoff started over if the session had worked.
        let next = if was_subscribed {
            self.follower.lost(now)
        } else {
            self.follower.failed(now)
        };
        actions.push(self.connect(next));
        actions
    }

    /// A message from the master, received at `now`.
    pub fn received(&mut self, message: MasterToFramework, now: Time) -> Vec<Action> {
        if self.phase == Phase::Stopped {
            return Vec::new();
        }
        match message {
            MasterToFramework::CallResult { call_id, result } => {
                self.call_result(call_id, result, now)
            }
            MasterToFramework::Redirect(redirect) => self.redirected(redirect, now),
            MasterToFramework::Offers(offers) => {
                if self.phase != Phase::Subscribed {
                    return Vec::new();
                }
                for offer in &offers {
                    self.offers.insert(offer.id, offer.clone());
                }
                vec![Action::Deliver(DriverEvent::Offers(offers))]
            }
            MasterToFramework::Rescind { offer_ids } => {
                for id in &offer_ids {
                    self.offers.remove(id);
                }
                vec![Action::Deliver(DriverEvent::Rescinded(offer_ids))]
            }
            MasterToFramework::Update(update) => self.update(update),
            MasterToFramework::ReservationEnded(notice) => {
                vec![Action::Deliver(DriverEvent::ReservationEnded(notice))]
            }
            MasterToFramework::TornDown { reason } => {
                // The framework is gone with everything it held: calls in flight are moot (the
                // masters ended its tasks), and failing them one by one would only have the
                // scheduler answer with calls a stopped driver fails again.
                self.offers.clear();
                self.pending.clear();
                self.queued.clear();
                self.phase = Phase::Stopped;
                vec![
                    Action::CloseSession,
                    Action::Deliver(DriverEvent::Fatal(DriverError::TornDown {
                        name: self.config.name.clone(),
                        reason,
                    })),
                    Action::Stop,
                ]
            }
        }
    }

    /// A call by the scheduler. While not subscribed, demand and suppression are remembered
    /// and sent after the next subscription, kills and reconciles are queued, and answers to
    /// offers fail at once (offers do not survive a session).
    pub fn call(&mut self, request: FrameworkRequest) -> Vec<Action> {
        match self.phase {
            Phase::Stopped => {
                return vec![Action::Deliver(DriverEvent::CallFailed {
                    request,
                    error: WireError::new(ErrorCode::Unavailable, "the driver has stopped"),
                })]
            }
            Phase::Subscribed => {}
            Phase::Connecting | Phase::Subscribing(_) => {
                return self.call_while_disconnected(request);
            }
        }
        self.remember(&request);
        if let FrameworkRequest::Accept { offer_ids, .. }
        | FrameworkRequest::Decline { offer_ids, .. }
        | FrameworkRequest::Yield { offer_ids } = &request
        {
            for id in offer_ids {
                self.offers.remove(id);
            }
        }
        let teardown = matches!(request, FrameworkRequest::Teardown);
        // What was received is acknowledged first before a teardown (the driver stops with
        // it), and before an accept: a task whose end is acknowledged leaves the masters'
        // table, and an accept may reuse its id (the masters apply calls in order).
        let mut actions = if teardown || matches!(request, FrameworkRequest::Accept { .. }) {
            self.flush_acks()
        } else {
            Vec::new()
        };
        let (_, send) = self.make_call(request, true);
        actions.push(send);
        if teardown {
            self.phase = Phase::Stopped;
            actions.push(Action::Stop);
        }
        actions
    }

    fn call_while_disconnected(&mut self, request: FrameworkRequest) -> Vec<Action> {
        match request {
            FrameworkRequest::UpdateDemand(_)
            | FrameworkRequest::Suppress
            | FrameworkRequest::Revive => {
                self.remember(&request);
                Vec::new()
            }
            FrameworkRequest::Kill { .. }
            | FrameworkRequest::Reconcile { .. }
            | FrameworkRequest::DescribeJob(_)
            | FrameworkRequest::EndJob { .. }
            | FrameworkRequest::Reservation(_)
            | FrameworkRequest::ListReservations { .. }
            | FrameworkRequest::Teardown => {
                self.queued.push_back(request);
                Vec::new()
            }
            FrameworkRequest::Accept { .. }
            | FrameworkRequest::Decline { .. }
            | FrameworkRequest::Yield { .. } => vec![Action::Deliver(DriverEvent::CallFailed {
                request,
                error: WireError::new(
                    ErrorCode::UnknownOffer,
                    "not connected to the leader: offers held before the disconnect are void",
                ),
            })],
            // Subscriptions and acknowledgements are the driver's own business.
            FrameworkRequest::Subscribe { .. } | FrameworkRequest::Acknowledge(_) => Vec::new(),
        }
    }

    fn remember(&mut self, request: &FrameworkRequest) {
        match request {
            FrameworkRequest::UpdateDemand(demand) => self.demand = Some(demand.clone()),
            FrameworkRequest::Suppress => self.suppressed = true,
            FrameworkRequest::Revive => self.suppressed = false,
            _ => {}
        }
    }

    fn make_call(&mut self, request: FrameworkRequest, from_scheduler: bool) -> (u64, Action) {
        let call_id = self.next_call_id;
        self.next_call_id += 1;
        // Acknowledgements are fire-and-forget: a lost one only makes the master resend the
        // update, which the sequence numbers absorb.
        if !matches!(request, FrameworkRequest::Acknowledge(_)) {
            self.pending.insert(
                call_id,
                PendingCall {
                    request: request.clone(),
                    from_scheduler,
                },
            );
        }
        (
            call_id,
            Action::Send(FrameworkCall {
                call_id,
                call: request,
            }),
        )
    }

    fn call_result(
        &mut self,
        call_id: u64,
        result: Result<CallOk, WireError>,
        now: Time,
    ) -> Vec<Action> {
        let Some(call) = self.pending.remove(&call_id) else {
            return Vec::new();
        };
        if self.phase == Phase::Subscribing(call_id) {
            return self.subscribe_result(result, now);
        }
        match result {
            Ok(CallOk::Reservations { reservations, next }) => {
                vec![Action::Deliver(DriverEvent::Reservations {
                    reservations,
                    next,
                })]
            }
            Ok(_) => match call.request {
                FrameworkRequest::Reservation(reservation) => {
                    vec![Action::Deliver(DriverEvent::ReservationDone(reservation))]
                }
                request @ (FrameworkRequest::DescribeJob(_) | FrameworkRequest::EndJob { .. })
                    if call.from_scheduler =>
                {
                    vec![Action::Deliver(DriverEvent::JobRecorded(request))]
                }
                _ => Vec::new(),
            },
            Err(error) if call.from_scheduler => vec![Action::Deliver(DriverEvent::CallFailed {
                request: call.request,
                error,
            })],
            Err(error) => {
                tracing::debug!(%error, ?call.request, "a driver call failed");
                Vec::new()
            }
        }
    }

    fn subscribe_result(&mut self, result: Result<CallOk, WireError>, now: Time) -> Vec<Action> {
        match result {
            Ok(CallOk::Subscribed {
                framework_id,
                group,
                ..
            }) => {
                self.phase = Phase::Subscribed;
                self.follower.joined();
                let reconnected = self.ever_subscribed;
                self.ever_subscribed = true;
                tracing::info!(framework = %framework_id, name = %self.config.name, group, reconnected, "subscribed");
                self.framework_id = Some(framework_id.clone());
                let event = if reconnected {
                    DriverEvent::Reconnected { framework_id }
                } else {
                    DriverEvent::Registered { framework_id }
                };
                let mut actions = vec![Action::Deliver(event)];
                // Reconcile first, so that the scheduler learns what became of its tasks
                // (the master sends them a page per tick: a framework with many tasks may
                // hear of the last ones after its first offers).
                let (_, send) =
                    self.make_call(FrameworkRequest::Reconcile { task_ids: vec![] }, false);
                actions.push(send);
                if let Some(demand) = self.demand.clone() {
                    let (_, send) = self.make_call(FrameworkRequest::UpdateDemand(demand), false);
                    actions.push(send);
                }
                if self.suppressed {
                    let (_, send) = self.make_call(FrameworkRequest::Suppress, false);
                    actions.push(send);
                }
                while let Some(request) = self.queued.pop_front() {
                    actions.extend(self.call(request));
                }
                actions
            }
            Ok(CallOk::Done | CallOk::Reservations { .. }) => {
                // Not an answer to Subscribe: the master is confused; try elsewhere.
                self.try_elsewhere(now)
            }
            Err(error) => match error.code {
                ErrorCode::NotLeader
                | ErrorCode::Unavailable
                | ErrorCode::OutcomeUnknown
                | ErrorCode::Internal => self.try_elsewhere(now),
                _ => {
                    self.phase = Phase::Stopped;
                    vec![
                        Action::CloseSession,
                        Action::Deliver(DriverEvent::Fatal(DriverError::SubscriptionRefused {
                            name: self.config.name.clone(),
                            error,
                        })),
                        Action::Stop,
                    ]
                }
            },
        }
    }

    fn redirected(&mut self, redirect: Redirect, now: Time) -> Vec<Action> {
        let was_subscribed = self.phase == Phase::Subscribed;
        let mut actions = self.void_session();
        actions.push(Action::CloseSession);
        if was_subscribed {
            actions.push(Action::Deliver(DriverEvent::Disconnected {
                reason: "the master is no longer the leader".to_string(),
            }));
        }
        let leader = redirect.leader.map(|leader| leader.addr);
        let next = self.follower.redirected(leader, now);
        tracing::debug!(?leader, next = %next.addr, delay = ?next.delay, "redirected");
        actions.push(self.connect(next));
        actions
    }

    fn update(&mut self, update: StatusUpdate) -> Vec<Action> {
        let ack = StatusAck {
            task_id: update.task_id.clone(),
            framework_id: update.framework_id.clone(),
            seq: update.seq,
        };
        let duplicate = self
            .seen_seq
            .get(&update.task_id)
            .is_some_and(|&seen| update.seq <= seen);
        let mut actions = Vec::with_capacity(2);
        if !duplicate {
            self.seen_seq.insert(update.task_id.clone(), update.seq);
            if update.state.is_terminal() {
                self.remember_end(update.task_id.clone());
            }
            actions.push(Action::Deliver(DriverEvent::Update(update)));
        }
        // Acknowledged after delivery (the shell carries actions out in order, and flushes
        // after them), and again for a duplicate: the master resends until it hears the ack.
        if self.phase == Phase::Subscribed {
            self.acks.push(ack);
            if self.acks.len() >= MAX_ACKS_PER_CALL {
                actions.extend(self.flush_acks());
            }
        }
        actions
    }

    /// Whether acknowledgements wait to be sent ([`DriverCore::flush_acks`]).
    pub fn acks_waiting(&self) -> bool {
        !self.acks.is_empty()
    }

    /// Sends the acknowledgements of the updates delivered since the last flush, in one call,
    /// so that a burst of updates costs one call of the principal's budget, not one per
    /// update. A shell must call it once it has nothing more waiting to receive (while
    /// [`DriverCore::acks_waiting`]): the core itself sends them only when
    /// [`MAX_ACKS_PER_CALL`] are waiting, before an accept and before a teardown.
    pub fn flush_acks(&mut self) -> Vec<Action> {
        if self.acks.is_empty() || self.phase != Phase::Subscribed {
            self.acks.clear();
            return Vec::new();
        }
        let acks = std::mem::take(&mut self.acks);
        let (_, send) = self.make_call(FrameworkRequest::Acknowledge(acks), false);
        vec![send]
    }

    /// Forgets what does not survive a session: offers, and calls in flight (those of the
    /// scheduler are reported with `OutcomeUnknown`).
    fn void_session(&mut self) -> Vec<Action> {
        self.offers.clear();
        // The master sends unacknowledged updates again to the next session.
        self.acks.clear();
        self.phase = Phase::Connecting;
        let pending = std::mem::take(&mut self.pending);
        pending
            .into_values()
            .filter(|call| call.from_scheduler)
            .map(|call| {
                Action::Deliver(DriverEvent::CallFailed {
                    request: call.request,
                    error: WireError::new(
                        ErrorCode::OutcomeUnknown,
                        "the session to the master was lost before the answer",
                    ),
                })
            })
            .collect()
    }

    /// The master did not subscribe the framework but another may: drop the session and try
    /// the next master after a backoff.
    fn try_elsewhere(&mut self, now: Time) -> Vec<Action> {
        let mut actions = self.void_session();
        actions.push(Action::CloseSession);
        let next = self.follower.failed(now);
        actions.push(self.connect(next));
        actions
    }

    fn connect(&mut self, attempt: Attempt) -> Action {
        self.phase = Phase::Connecting;
        Action::Connect {
            addr: attempt.addr,
            delay: attempt.delay,
        }
    }
}
