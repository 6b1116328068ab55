//! The driver's thin tokio shell: opens framework sessions with the transport's QUIC [`Client`]
//! (through `fullerene-client`, where the core's master was chosen), carries out the core's
//! [`Action`]s, and calls the [`Scheduler`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fullerene_client::{open, Link, OpenError};
use fullerene_proto::messages::{
    DemandSummary, FrameworkRequest, Leftover, MasterToFramework, Offer, SessionOpen, StatusUpdate,
    TaskSpec, WireError,
};
use fullerene_proto::reservations::{ReservationCall, ReservationInfo, ReservationNotice};
use fullerene_proto::time::{SystemClock, Time};
use fullerene_proto::{FrameworkId, OfferId, TaskId};
use fullerene_transport::{
    Client, Connection, FramedRecv, FramedSend, TlsMaterial, TransportConfig,
};

use super::core::{Action, DriverConfig, DriverCore, DriverError, DriverEvent};

/// What a framework author implements: the driver calls it from one task, one event at a time,
/// with a [`DriverHandle`] to answer through. Every method but [`Scheduler::offers`] and
/// [`Scheduler::status_update`] has a default that does nothing.
pub trait Scheduler: Send {
    /// The first subscription succeeded.
    fn registered(&mut self, _driver: &mut DriverHandle, _framework_id: &FrameworkId) {}

    /// Subscribed again with the same id after a lost session; an update per task follows
    /// (reconciliation).
    fn reconnected(&mut self, _driver: &mut DriverHandle, _framework_id: &FrameworkId) {}

    /// The session was lost: offers held are void. The driver reconnects by itself.
    fn disconnected(&mut self, _driver: &mut DriverHandle, _reason: &str) {}

    /// New offers: answer each with accept, decline or yield.
    fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>);

    /// Offers withdrawn by the master.
    fn rescinded(&mut self, _driver: &mut DriverHandle, _offer_ids: &[OfferId]) {}

    /// A task's status changed. The driver acknowledges it when this returns.
    fn status_update(&mut self, driver: &mut DriverHandle, update: &StatusUpdate);

    /// A call failed (`OutcomeUnknown`: the session was lost before the answer).
    fn call_failed(
        &mut self,
        _driver: &mut DriverHandle,
        _request: &FrameworkRequest,
        _error: &WireError,
    ) {
    }

    /// A reservation call ([`DriverHandle::reservation`]) was committed: the reservation was
    /// created, updated or deleted. A refusal comes to [`Scheduler::call_failed`] with the
    /// plan's reason.
    fn reservation_done(&mut self, _driver: &mut DriverHandle, _call: &ReservationCall) {}

    /// The job's description or end ([`FrameworkRequest::DescribeJob`],
    /// [`FrameworkRequest::EndJob`]) was committed.
    fn job_recorded(&mut self, _driver: &mut DriverHandle, _request: &FrameworkRequest) {}

    /// A page of the principal's accepted reservations ([`DriverHandle::list_reservations`]);
    /// `next` is set when more follow.
    fn reservations(
        &mut self,
        _driver: &mut DriverHandle,
        _reservations: &[ReservationInfo],
        _next: Option<&str>,
    ) {
    }

    /// A reservation of the framework's principal ended: the masters' adapter rejected it
    /// after a loss of capacity (jobs running in it are best effort from now on), or its time
    /// is over and the masters judged it. Told once to each of the principal's frameworks
    /// connected to the leader when it happens (at least once: a leader change may repeat it);
    /// one that was away finds rejections in the masters' rejected list.
    fn reservation_ended(&mut self, _driver: &mut DriverHandle, _notice: &ReservationNotice) {}

    /// Called about every [`RunOptions::tick`], for the scheduler's own timers.
    fn tick(&mut self, _driver: &mut DriverHandle) {}

    /// The driver stops for good with this error.
    fn fatal(&mut self, _error: &DriverError) {}
}

/// The scheduler's way to talk to the master: calls are collected while a callback runs and
/// sent when it returns.
#[derive(Debug)]
pub struct DriverHandle {
    calls: Vec<FrameworkRequest>,
    stop: bool,
    now: Time,
    framework_id: Option<FrameworkId>,
}

impl DriverHandle {
    /// A handle for one callback at `now`, for the framework `framework_id` (once subscribed).
    /// Shells make one per callback; see [`deliver`].
    pub fn new(now: Time, framework_id: Option<FrameworkId>) -> DriverHandle {
        DriverHandle {
            calls: Vec::new(),
            stop: false,
            now,
            framework_id,
        }
    }

    /// What the callback asked for: its calls, in order, and whether the driver must stop.
    pub fn into_calls(self) -> (Vec<FrameworkRequest>, bool) {
        (self.calls, self.stop)
    }

    /// When the callback was called: a reading of the driver's monotonic clock
    /// ([`RunOptions::clock`]).
    pub fn now(&self) -> Time {
        self.now
    }

    /// The framework's id, once subscribed.
    pub fn framework_id(&self) -> Option<&FrameworkId> {
        self.framework_id.as_ref()
    }

    /// Any call, as is.
    pub fn call(&mut self, request: FrameworkRequest) {
        self.calls.push(request);
    }

    /// Launches `tasks` on the agent of `offer_ids`.
    pub fn accept(&mut self, offer_ids: Vec<OfferId>, tasks: Vec<TaskSpec>, leftover: Leftover) {
        self.call(FrameworkRequest::Accept {
            offer_ids,
            tasks,
            leftover,
        });
    }

    /// Declines offers, refusing them for `refuse_ms`.
    pub fn decline(&mut self, offer_ids: Vec<OfferId>, refuse_ms: u64) {
        self.call(FrameworkRequest::Decline {
            offer_ids,
            refuse_ms,
        });
    }

    /// Yields offers for redistribution (Carbyne §3.3.4).
    pub fn yield_offers(&mut self, offer_ids: Vec<OfferId>) {
        self.call(FrameworkRequest::Yield { offer_ids });
    }

    /// Kills a task.
    pub fn kill(&mut self, task_id: TaskId) {
        self.call(FrameworkRequest::Kill { task_id });
    }

    /// Tells the master the pending demand.
    pub fn update_demand(&mut self, demand: DemandSummary) {
        self.call(FrameworkRequest::UpdateDemand(demand));
    }

    /// Stops the driver after the calls made so far are sent (tasks keep running until the
    /// failover timeout; call [`DriverHandle::teardown`] to end them at once).
    pub fn stop(&mut self) {
        self.stop = true;
    }

    /// Creates, updates or deletes a reservation owned by the framework's principal (Rayon
    /// §5.2); answered by [`Scheduler::reservation_done`] or [`Scheduler::call_failed`].
    pub fn reservation(&mut self, call: ReservationCall) {
        self.call(FrameworkRequest::Reservation(call));
    }

    /// Asks for a page of the principal's accepted reservations after `after` (Rayon's
    /// `listRes`), answered by [`Scheduler::reservations`].
    pub fn list_reservations(&mut self, after: Option<String>) {
        self.call(FrameworkRequest::ListReservations { after });
    }

    /// Unregisters the framework (its tasks are killed) and stops the driver.
    pub fn teardown(&mut self) {
        self.call(FrameworkRequest::Teardown);
        self.stop = true;
    }
}

/// Hands one event of the core to the scheduler's callback for it; returns the error when the
/// event is the driver's end. The sans-IO half of a shell's `Deliver`: the tokio shell and the
/// whole-system simulation both call it, then feed the handle's calls to [`DriverCore::call`].
pub fn deliver<S: Scheduler + ?Sized>(
    scheduler: &mut S,
    handle: &mut DriverHandle,
    event: DriverEvent,
) -> Option<DriverError> {
    match event {
        DriverEvent::Registered { framework_id } => scheduler.registered(handle, &framework_id),
        DriverEvent::Reconnected { framework_id } => scheduler.reconnected(handle, &framework_id),
        DriverEvent::Disconnected { reason } => scheduler.disconnected(handle, &reason),
        DriverEvent::Offers(offers) => scheduler.offers(handle, offers),
        DriverEvent::Rescinded(ids) => scheduler.rescinded(handle, &ids),
        DriverEvent::Update(update) => scheduler.status_update(handle, &update),
        DriverEvent::CallFailed { request, error } => {
            scheduler.call_failed(handle, &request, &error);
        }
        DriverEvent::ReservationDone(call) => scheduler.reservation_done(handle, &call),
        DriverEvent::JobRecorded(request) => scheduler.job_recorded(handle, &request),
        DriverEvent::Reservations { reservations, next } => {
            scheduler.reservations(handle, &reservations, next.as_deref());
        }
        DriverEvent::ReservationEnded(notice) => scheduler.reservation_ended(handle, &notice),
        DriverEvent::Fatal(error) => {
            scheduler.fatal(&error);
            return Some(error);
        }
    }
    None
}

/// How the shell runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Transport settings (keep-alive, idle timeout, frame limit).
    pub transport: TransportConfig,
    /// The clock the driver reads (drivers that share one share [`DriverHandle::now`]'s
    /// epoch).
    pub clock: SystemClock,
    /// How often [`Scheduler::tick`] is called.
    pub tick: Duration,
    /// How long a connection and session open may take before it counts as failed.
    pub connect_timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            transport: TransportConfig::default(),
            clock: SystemClock::new(),
            tick: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

struct Live {
    // Kept so that the connection stays open while the session is used.
    _connection: Connection,
    tx: FramedSend,
    rx: FramedRecv,
}

/// Runs a driver until the scheduler stops it or the subscription is refused for good;
/// returns the scheduler.
pub async fn run<S: Scheduler>(
    config: DriverConfig,
    tls: &TlsMaterial,
    options: RunOptions,
    scheduler: S,
) -> Result<S, DriverError> {
    let client = Client::new(tls, options.transport.clone())
        .map_err(|e| DriverError::Transport(e.to_string()))?;
    let result = run_with_client(&client, config, options, scheduler).await;
    client.close();
    result
}

/// [`run`] over an existing client endpoint (several drivers may share one).
pub async fn run_with_client<S: Scheduler>(
    client: &Client,
    config: DriverConfig,
    options: RunOptions,
    mut scheduler: S,
) -> Result<S, DriverError> {
    let mut core = DriverCore::new(config)?;
    let mut shell = Shell {
        live: None,
        connect: None,
        stopping: false,
        fatal: None,
        clock: options.clock,
    };
    let actions = core.start(shell.now());
    shell.carry_out(&mut core, &mut scheduler, actions).await;
    let mut tick = tokio::time::interval(options.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if shell.stopping {
            break;
        }
        if let Some(live) = shell.live.as_mut() {
            let event = if core.acks_waiting() {
                // What has arrived is handled first; the acknowledgements of all of it then go
                // in one call.
                tokio::select! {
                    biased;
                    received = live.rx.recv::<MasterToFramework>() => Some(received),
                    () = std::future::ready(()) => {
                        let actions = core.flush_acks();
                        shell.carry_out(&mut core, &mut scheduler, actions).await;
                        continue;
                    }
                }
            } else {
                tokio::select! {
                    received = live.rx.recv::<MasterToFramework>() => Some(received),
                    _ = tick.tick() => None,
                }
            };
            let actions = match event {
                Some(Ok(Some(message))) => core.received(message, shell.now()),
                Some(Ok(None)) => {
                    shell.live = None;
                    tracing::info!("the master closed the session; reconnecting");
                    core.session_lost("the master closed the session", shell.now())
                }
                Some(Err(e)) => {
                    shell.live = None;
                    tracing::info!(error = %e, "session with the master lost; reconnecting");
                    core.session_lost(&e.to_string(), shell.now())
                }
                None => shell.tick(&mut scheduler, &mut core),
            };
            shell.carry_out(&mut core, &mut scheduler, actions).await;
            continue;
        }
        let Some((addr, at)) = shell.connect else {
            // Nothing to connect to and no session: only a stop gets here.
            break;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {
                shell.connect = None;
                let outcome =
                    open(client, addr, SessionOpen::Framework, options.connect_timeout).await;
                let actions = match outcome {
                    Ok(Link { connection, session, .. }) => {
                        tracing::debug!(%addr, "connected; subscribing");
                        shell.live = Some(Live {
                            _connection: connection,
                            tx: session.tx,
                            rx: session.rx,
                        });
                        core.connected()
                    }
                    Err(OpenError::TimedOut(_)) => {
                        tracing::debug!(%addr, "could not reach a master: timed out");
                        core.connect_failed("timed out", shell.now())
                    }
                    Err(e) => {
                        tracing::debug!(%addr, error = %e, "could not reach a master");
                        core.connect_failed(&e.to_string(), shell.now())
                    }
                };
                shell.carry_out(&mut core, &mut scheduler, actions).await;
            }
            _ = tick.tick() => {
                let actions = shell.tick(&mut scheduler, &mut core);
                shell.carry_out(&mut core, &mut scheduler, actions).await;
            }
        }
    }
    if let Some(mut live) = shell.live.take() {
        // Lets the last calls (a teardown) reach the master and be answered before the
        // connection goes: the master's side ends when it has read everything, or we give up
        // after a second.
        let _ = live.tx.finish().await;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Ok(Some(_)) = live.rx.recv::<MasterToFramework>().await {}
        })
        .await;
    }
    match shell.fatal {
        Some(error) => Err(error),
        None => Ok(scheduler),
    }
}

struct Shell {
    live: Option<Live>,
    connect: Option<(SocketAddr, Instant)>,
    stopping: bool,
    fatal: Option<DriverError>,
    clock: SystemClock,
}

impl Shell {
    /// The time given to the core and the scheduler: a reading of the monotonic clock.
    fn now(&self) -> Time {
        self.clock.monotonic()
    }

    fn handle(&self, core: &DriverCore) -> DriverHandle {
        DriverHandle::new(self.now(), core.framework_id().cloned())
    }

    fn tick<S: Scheduler>(&mut self, scheduler: &mut S, core: &mut DriverCore) -> Vec<Action> {
        let mut handle = self.handle(core);
        scheduler.tick(&mut handle);
        self.drain(core, handle)
    }

    /// Feeds what the scheduler asked for in one callback to the core, in order.
    fn drain(&mut self, core: &mut DriverCore, handle: DriverHandle) -> Vec<Action> {
        let (calls, stop) = handle.into_calls();
        let mut actions: Vec<Action> = calls
            .into_iter()
            .flat_map(|request| core.call(request))
            .collect();
        if stop {
            // What was received is acknowledged before the driver stops.
            actions.extend(core.flush_acks());
            self.stopping = true;
        }
        actions
    }

    async fn carry_out<S: Scheduler>(
        &mut self,
        core: &mut DriverCore,
        scheduler: &mut S,
        actions: Vec<Action>,
    ) {
        let mut queue: std::collections::VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::Connect { addr, delay } => {
                    self.connect = Some((addr, Instant::now() + delay));
                }
                Action::Send(call) => {
                    let Some(live) = self.live.as_mut() else {
                        continue;
                    };
                    if let Err(e) = live.tx.send(&call).await {
                        self.live = None;
                        queue.extend(core.session_lost(&e.to_string(), self.now()));
                    }
                }
                Action::CloseSession => {
                    if let Some(mut live) = self.live.take() {
                        let _ = live.tx.finish().await;
                    }
                }
                Action::Stop => {
                    self.stopping = true;
                }
                Action::Deliver(event) => {
                    let mut handle = self.handle(core);
                    if let Some(error) = deliver(scheduler, &mut handle, event) {
                        self.fatal = Some(error);
                    }
                    // After what the core already queued: the reconciliation after a
                    // subscription before the scheduler's calls. Acknowledgements wait for the
                    // flush once nothing more is received, except that they go before an
                    // accept (which may reuse the id of a task whose end it acknowledges) and
                    // before a teardown or a stop.
                    let more = self.drain(core, handle);
                    queue.extend(more);
                }
            }
        }
    }
}
