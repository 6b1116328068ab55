//! The task that drives the [`MasterCore`]: it turns what the session tasks report into the
//! core's inputs, reads the clocks, ticks, and carries the core's outputs to peers, sessions
//! and operators. Every decision is the core's; this loop only moves bytes and time.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fullerene_proto::ids::{AgentId, TaskKey};
use fullerene_proto::messages::{
    MasterToAgent, MasterToFramework, OperatorRequest, OperatorResponse,
};
use fullerene_proto::time::SystemClock;
use fullerene_proto::Time;
use fullerene_transport::Client;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;

use super::event_hub::EventHub;
use super::files::TaskLocation;
use super::http::board::ViewPublisher;
use super::metrics::{self as metrics_names, ClusterGauges};
use super::peer::{self, PeerBatch, PeerHandle};
use super::planner::{Planned, Planner};
use super::store_writer::StoreWriterThread;
use super::{MasterExit, ServerError, ShellConfig};
use crate::core::{
    AgentRegistration, Input, LeaderView, MasterCore, MembershipView, OfferTally, Output,
    RequestId, SessionId, Subscription,
};
use crate::raft_node::StoreReport;
use crate::storage::RaftStore;

/// Events queued for the node loop before senders wait (peer sessions then apply backpressure
/// to their QUIC streams).
pub(crate) const EVENT_QUEUE: usize = 8192;

/// Raft messages from peers queued for the node loop, apart from the clients' events: they are
/// taken first, so that no client's flood delays heartbeats and votes (a leader whose
/// heartbeats waited behind thousands of framework calls lost its followers to elections).
pub(crate) const PEER_EVENT_QUEUE: usize = 4096;

/// Client events handled per wake-up before `advance` runs: bounds the latency one burst adds
/// to ticks and to the peers' messages.
const MAX_EVENTS_PER_CYCLE: usize = 256;

/// Peer messages handled per wake-up (a catch-up's burst of appends is taken in large steps).
const MAX_PEER_EVENTS_PER_CYCLE: usize = 4096;

/// A node loop step this long is logged: ticks and heartbeats wait for it (by default a tick
/// is 25 ms, a heartbeat goes every 2 ticks, and an election starts after 10 to 20 silent ones).
const SLOW_STEP: Duration = Duration::from_millis(100);

/// What the session tasks tell the node loop: the core's inputs, with the channels that
/// answers and pushes go back on.
#[derive(Debug)]
pub(crate) enum Event {
    /// An input that needs no channel.
    Input(Input),
    /// An operator request, who asks (see [`Input::Operator`]) and where to answer it.
    Operator {
        /// The caller's principal.
        principal: String,
        /// The request.
        request: OperatorRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<OperatorResponse>,
    },
    /// An agent's session opened with a registration.
    AgentRegister {
        /// The agent, from its certificate.
        agent_id: AgentId,
        /// The session.
        session: SessionId,
        /// Where the session comes from.
        address: std::net::SocketAddr,
        /// What it registered with.
        registration: AgentRegistration,
        /// The session's outbound queue.
        outbound: mpsc::Sender<MasterToAgent>,
    },
    /// A framework's session opened with a subscription.
    FrameworkSubscribe {
        /// The session.
        session: SessionId,
        /// The subscription.
        subscription: Subscription,
        /// The session's outbound queue.
        outbound: mpsc::Sender<MasterToFramework>,
    },
    /// A session ended without the core knowing it (a framework that never subscribed): its
    /// queue is dropped.
    SessionEnded(SessionId),
    /// The HTTP API's `/health` and `/ready` ask where this node's Raft stands; that the loop
    /// answers at all is the liveness the probes report.
    Probe(oneshot::Sender<NodeProbe>),
    /// A read of a task's files asks where the task runs and who owns it (one lookup; the
    /// read itself never passes through the loop, see [`super::files`]).
    LocateTask(TaskKey, oneshot::Sender<TaskLocation>),
}

/// Where this node's Raft stands, as the node loop answered a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeProbe {
    /// This master's Raft id.
    pub this: u64,
    /// The leader this node follows (itself when it leads), if it knows one.
    pub leader: Option<u64>,
    /// Its term.
    pub term: u64,
    /// Its commit index.
    pub commit: u64,
    /// Its applied index.
    pub applied: u64,
}

/// Where the core's pushes to a session go.
#[derive(Debug)]
enum SessionQueue {
    Agent(mpsc::Sender<MasterToAgent>),
    Framework(mpsc::Sender<MasterToFramework>),
}

/// The node loop's state.
pub(crate) struct Shell<S: RaftStore> {
    core: MasterCore<S>,
    clock: SystemClock,
    config: ShellConfig,
    peers: BTreeMap<u64, PeerHandle>,
    client: Arc<Client>,
    events: mpsc::Sender<Event>,
    leader_view: watch::Sender<LeaderView>,
    membership_view: watch::Sender<MembershipView>,
    sessions: HashMap<SessionId, SessionQueue>,
    replies: HashMap<RequestId, oneshot::Sender<OperatorResponse>>,
    next_request: u64,
    /// Peers with no known address, already warned about (one log line each).
    warned_no_address: std::collections::BTreeSet<u64>,
    /// Builds the HTTP API's view when it is wanted.
    publisher: ViewPublisher,
    /// The ring of recent events the HTTP API and operator sessions read.
    event_hub: Arc<EventHub>,
    /// The store's writer thread, which runs the node's store jobs.
    store: StoreWriterThread<S::Staged>,
    /// The allocation cycles' shard planners.
    planner: Planner,
    /// The shell's own metrics.
    metrics: ShellMetrics,
}

/// Where the node loop publishes what the rest of the master reads.
pub(crate) struct Views {
    /// Who leads, for the session handlers' redirects.
    pub(crate) leader: watch::Sender<LeaderView>,
    /// The membership, for the peer sessions.
    pub(crate) membership: watch::Sender<MembershipView>,
    /// The HTTP API's view, built when it is wanted.
    pub(crate) publisher: ViewPublisher,
    /// The ring of recent events.
    pub(crate) event_hub: Arc<EventHub>,
}

/// The threads the node loop hands work to, so that it never waits on it.
pub(crate) struct Workers<T: Send + 'static> {
    /// Runs the node's store jobs (fsyncs).
    pub(crate) store: StoreWriterThread<T>,
    /// Plans the allocation cycles' shards.
    pub(crate) planner: Planner,
}

/// What the shell measures of the core's work (the core reads no clock and records nothing):
/// allocation cycles and what the outputs carry.
struct ShellMetrics {
    snapshot_seconds: metrics::Histogram,
    plan_seconds: metrics::Histogram,
    commit_seconds: metrics::Histogram,
    cycle_seconds: metrics::Histogram,
    /// One turn of the node loop: the event's handling, then `advance` and the outputs.
    step_seconds: metrics::Histogram,
    offers_made: metrics::Counter,
    offers_rescinded: metrics::Counter,
    tasks_launched: metrics::Counter,
    offers_accepted: metrics::Counter,
    offers_declined: metrics::Counter,
    accepts_refused_busy: metrics::Counter,
    reservations_refused: metrics::Counter,
    /// The count of refused reservations already published.
    published_reservations_refused: u64,
    launch_latency: metrics::Histogram,
    /// This master's proposals' flush into the log to their apply (the node hands out the
    /// flush times; the latency is measured here, against the clock read after the step).
    apply_latency: metrics::Histogram,
    /// The offer tally already published.
    published_offers: OfferTally,
    /// The gauges read off the replicated state.
    gauges: ClusterGauges,
    /// The last cycle's snapshot time, added to its planning and commit times.
    last_snapshot: std::time::Duration,
    /// The allocation stats already published.
    published: fullerene_scheduling::allocator::CycleStats,
}

impl ShellMetrics {
    fn new(node: u64) -> ShellMetrics {
        ShellMetrics {
            apply_latency: metrics::histogram!(
                "fullerene_raft_apply_latency_seconds", "node" => node.to_string()
            ),
            snapshot_seconds: metrics::histogram!("fullerene_master_allocation_snapshot_seconds"),
            plan_seconds: metrics::histogram!("fullerene_master_allocation_plan_seconds"),
            commit_seconds: metrics::histogram!("fullerene_master_allocation_commit_seconds"),
            cycle_seconds: metrics::histogram!("fullerene_master_allocation_cycle_seconds"),
            step_seconds: metrics::histogram!("fullerene_master_node_loop_step_seconds"),
            offers_made: metrics::counter!("fullerene_master_offers_made_total"),
            offers_rescinded: metrics::counter!("fullerene_master_offers_rescinded_total"),
            tasks_launched: metrics::counter!("fullerene_master_tasks_launched_total"),
            offers_accepted: metrics::counter!(metrics_names::OFFERS_ACCEPTED),
            offers_declined: metrics::counter!(metrics_names::OFFERS_DECLINED),
            accepts_refused_busy: metrics::counter!(metrics_names::ACCEPTS_REFUSED_BUSY),
            reservations_refused: metrics::counter!(metrics_names::RESERVATIONS_REFUSED),
            published_reservations_refused: 0,
            launch_latency: metrics::histogram!(metrics_names::LAUNCH_LATENCY),
            published_offers: OfferTally::default(),
            gauges: ClusterGauges::new(),
            last_snapshot: std::time::Duration::ZERO,
            published: Default::default(),
        }
    }

    /// Records one turn of the node loop, and warns of one long enough to hold heartbeats up
    /// ([`SLOW_STEP`]).
    fn step_done(&self, woken_by: &str, handled: Duration, advanced: Duration, after: Duration) {
        let step = handled + after;
        self.step_seconds.record(step.as_secs_f64());
        if step >= SLOW_STEP {
            tracing::warn!(
                woken_by,
                handled_ms = handled.as_millis() as u64,
                advance_ms = advanced.as_millis() as u64,
                outputs_ms = (after - advanced).as_millis() as u64,
                "a node loop step held Raft's ticks and heartbeats up"
            );
        }
    }

    /// Publishes what the core counted since the last step (apply and launch latencies, the
    /// offers' fate; `advanced_at` is when the step's `advance` returned) and, once per
    /// interval, the gauges read off the state.
    fn publish_core<S: RaftStore>(&mut self, core: &mut MasterCore<S>, advanced_at: Time) {
        for flushed_at in core.take_applied_flush_times() {
            self.apply_latency.record(
                advanced_at
                    .saturating_duration_since(flushed_at)
                    .as_secs_f64(),
            );
        }
        let tally = core.offer_tally();
        self.offers_accepted.increment(
            tally
                .accepted
                .saturating_sub(self.published_offers.accepted),
        );
        self.offers_declined.increment(
            tally
                .declined
                .saturating_sub(self.published_offers.declined),
        );
        self.accepts_refused_busy.increment(
            tally
                .refused_busy
                .saturating_sub(self.published_offers.refused_busy),
        );
        self.published_offers = tally;
        let refused = core.reservations_refused();
        self.reservations_refused
            .increment(refused.saturating_sub(self.published_reservations_refused));
        self.published_reservations_refused = refused;
        for latency in core.take_launch_latencies() {
            self.launch_latency.record(latency.as_secs_f64());
        }
        self.gauges.maybe_update(core);
    }

    /// Publishes the growth of the core's allocation stats (the shards' conflicts).
    fn publish_allocation(&mut self, now: fullerene_scheduling::allocator::CycleStats) {
        let before = self.published;
        for (outcome, total, seen) in [
            ("committed", now.committed, before.committed),
            ("task_taken", now.task_taken, before.task_taken),
            ("fairness_bound", now.fairness_bound, before.fairness_bound),
            ("agent_changed", now.agent_changed, before.agent_changed),
            (
                "framework_changed",
                now.framework_changed,
                before.framework_changed,
            ),
            (
                "guarantee_spent",
                now.guarantee_spent,
                before.guarantee_spent,
            ),
            ("rematched", now.rematched, before.rematched),
        ] {
            if total > seen {
                metrics::counter!("fullerene_master_allocation_picks_total", "outcome" => outcome)
                    .increment(total - seen);
            }
        }
        if now.planned > before.planned {
            metrics::counter!("fullerene_master_allocation_picks_planned_total")
                .increment(now.planned - before.planned);
        }
        self.published = now;
    }
}

impl<S: RaftStore> Shell<S> {
    pub(crate) fn new(
        core: MasterCore<S>,
        config: ShellConfig,
        client: Arc<Client>,
        events: mpsc::Sender<Event>,
        views: Views,
        workers: Workers<S::Staged>,
    ) -> Shell<S> {
        let node_id = core.node().id();
        let Views {
            leader: leader_view,
            membership: membership_view,
            publisher,
            event_hub,
        } = views;
        Shell {
            core,
            clock: SystemClock::new(),
            config,
            peers: BTreeMap::new(),
            client,
            events,
            leader_view,
            membership_view,
            sessions: HashMap::new(),
            replies: HashMap::new(),
            next_request: 1,
            warned_no_address: Default::default(),
            publisher,
            event_hub,
            store: workers.store,
            planner: workers.planner,
            metrics: ShellMetrics::new(node_id),
        }
    }

    /// Runs until `shutdown`, removal, or a fatal node error.
    pub(crate) async fn run<F: Future<Output = ()>>(
        &mut self,
        mut events: mpsc::Receiver<Event>,
        mut peer_events: mpsc::Receiver<Event>,
        mut store_reports: mpsc::UnboundedReceiver<StoreReport>,
        mut planned: mpsc::UnboundedReceiver<Planned>,
        shutdown: F,
    ) -> Result<MasterExit, ServerError> {
        let mut ticker = tokio::time::interval(self.core.node().config().tick_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let started = self.core.start(self.clock.now());
        self.carry_outputs();
        self.publisher.after_step(&self.core);
        self.event_hub.publish(self.core.take_events());
        if let Some(exit) = started {
            return Ok(exit);
        }
        let mut peers_closed = false;
        loop {
            let (woken_by, handled): (&str, Duration);
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    self.core.shutdown();
                    self.carry_outputs();
                    return Ok(MasterExit::Shutdown);
                }
                _ = ticker.tick() => {
                    let started = Instant::now();
                    self.core.tick(self.clock.now());
                    (woken_by, handled) = ("tick", started.elapsed());
                }
                // What the disk made durable releases votes, acknowledgements and commits.
                Some(report) = store_reports.recv() => {
                    let started = Instant::now();
                    self.core.store_report(report);
                    while let Ok(report) = store_reports.try_recv() {
                        self.core.store_report(report);
                    }
                    (woken_by, handled) = ("store report", started.elapsed());
                }
                Some(plans) = planned.recv() => {
                    let started = Instant::now();
                    self.commit_allocation(plans);
                    (woken_by, handled) = ("allocation commit", started.elapsed());
                }
                event = peer_events.recv(), if !peers_closed => {
                    // The session context holds the sender until the accept loop stops,
                    // after this loop; should it close, it is not polled again.
                    let Some(event) = event else {
                        peers_closed = true;
                        continue;
                    };
                    let started = Instant::now();
                    self.handle_event(event);
                    self.handle_queued(&mut peer_events, MAX_PEER_EVENTS_PER_CYCLE - 1);
                    (woken_by, handled) = ("peer messages", started.elapsed());
                }
                event = events.recv() => {
                    // The shell holds a sender, so the channel never closes while it runs.
                    let started = Instant::now();
                    if let Some(event) = event {
                        self.handle_event(event);
                    }
                    self.handle_queued(&mut events, MAX_EVENTS_PER_CYCLE - 1);
                    (woken_by, handled) = ("client and agent events", started.elapsed());
                }
            }
            let started = Instant::now();
            let exit = self.core.advance(self.clock.now());
            let advanced = started.elapsed();
            let advanced_at = self.clock.monotonic();
            self.start_allocation();
            self.carry_outputs();
            // At most one bounded build per interval, and only when an HTTP reader asked.
            self.publisher.after_step(&self.core);
            // Readers copy from the ring on their own tasks: this never waits on them.
            self.event_hub.publish(self.core.take_events());
            self.metrics.publish_core(&mut self.core, advanced_at);
            self.metrics
                .step_done(woken_by, handled, advanced, started.elapsed());
            if let Some(exit) = exit? {
                return Ok(exit);
            }
        }
    }

    /// Hands the allocation cycle that is due, if any, to the planner (its snapshot is taken
    /// here, on the node loop; the shards are planned off it).
    fn start_allocation(&mut self) {
        let started = std::time::Instant::now();
        let Some(job) = self.core.begin_allocation(self.clock.now()) else {
            return;
        };
        self.metrics.last_snapshot = started.elapsed();
        self.metrics
            .snapshot_seconds
            .record(self.metrics.last_snapshot.as_secs_f64());
        if !self.planner.submit(job) {
            tracing::error!("the allocation planner stopped; no offers will be made");
        }
    }

    /// Commits a cycle's plans (on the node loop) and sends its offers.
    fn commit_allocation(&mut self, planned: Planned) {
        let started = std::time::Instant::now();
        self.core
            .allocation_planned(planned.id, planned.plans, self.clock.now());
        let commit = started.elapsed();
        self.metrics
            .plan_seconds
            .record(planned.planning.as_secs_f64());
        self.metrics.commit_seconds.record(commit.as_secs_f64());
        self.metrics
            .cycle_seconds
            .record((self.metrics.last_snapshot + planned.planning + commit).as_secs_f64());
        self.metrics
            .publish_allocation(self.core.allocation_stats());
    }

    /// Stops every peer sender task.
    pub(crate) fn stop_peers(&mut self) {
        self.peers.clear();
    }

    /// Handles up to `most` events already queued on `queue`, without waiting for more.
    fn handle_queued(&mut self, queue: &mut mpsc::Receiver<Event>, most: usize) {
        for _ in 0..most {
            match queue.try_recv() {
                Ok(event) => self.handle_event(event),
                Err(_) => return,
            }
        }
    }

    fn handle_event(&mut self, event: Event) {
        let input = match event {
            Event::Input(input) => input,
            Event::Operator {
                principal,
                request,
                reply,
            } => {
                let request_id = RequestId(self.next_request);
                self.next_request += 1;
                self.replies.insert(request_id, reply);
                Input::Operator {
                    request_id,
                    principal,
                    request,
                }
            }
            Event::AgentRegister {
                agent_id,
                session,
                address,
                registration,
                outbound,
            } => {
                self.sessions.insert(session, SessionQueue::Agent(outbound));
                Input::AgentRegister {
                    agent_id,
                    session,
                    address,
                    registration,
                }
            }
            Event::FrameworkSubscribe {
                session,
                subscription,
                outbound,
            } => {
                self.sessions
                    .insert(session, SessionQueue::Framework(outbound));
                Input::FrameworkSubscribe(session, subscription)
            }
            Event::SessionEnded(session) => {
                self.sessions.remove(&session);
                return;
            }
            Event::Probe(reply) => {
                let node = self.core.node();
                // The prober may have given up waiting; nothing to do then.
                let _ = reply.send(NodeProbe {
                    this: node.id(),
                    leader: node.leader(),
                    term: node.term(),
                    commit: node.commit_index(),
                    applied: node.applied_index(),
                });
                return;
            }
            Event::LocateTask(key, reply) => {
                let node = self.core.node();
                let state = node.state();
                let task = state.task(&key);
                let _ = reply.send(TaskLocation {
                    leads: node.is_leader(),
                    principal: state
                        .frameworks()
                        .get(&key.framework_id)
                        .map(|framework| framework.principal.clone()),
                    task: task.map(|task| (task.agent_id.clone(), task.state)),
                    sleeps: task.is_some_and(|task| {
                        matches!(
                            task.spec.executor,
                            fullerene_proto::messages::Executor::Sleep { .. }
                        )
                    }),
                });
                return;
            }
        };
        match &input {
            Input::AgentGone(_, session) | Input::FrameworkGone(_, session) => {
                self.sessions.remove(session);
            }
            _ => {}
        }
        self.core.handle(input, self.clock.now());
    }

    /// A session whose queue is full is ended rather than skipped: a message dropped in the
    /// middle of a stream (a launch, a kill, a status update) would leave a hole that nothing
    /// fills, while a session that ends makes its peer register or subscribe again, and that
    /// resynchronises everything (the agent's tasks are reconciled, the framework is sent what
    /// it has not acknowledged). The queue is dropped, so the session ends after what it holds.
    fn end_stuck_session(&mut self, session: SessionId, role: &'static str) {
        tracing::warn!(?session, role, "session queue full: the peer is too slow; ending the session so that it resynchronises");
        metrics::counter!("fullerene_master_stuck_sessions_ended_total", "role" => role)
            .increment(1);
        self.sessions.remove(&session);
    }

    /// Carries out what the core asked for, in order; its store jobs first, so that the disk
    /// starts on them while the messages go out.
    fn carry_outputs(&mut self) {
        let jobs = self.core.take_store_jobs();
        if !jobs.is_empty() && !self.store.submit(jobs) {
            // The writer stopped after a failure it reported; the node halts on that report.
            tracing::debug!("store jobs after the writer stopped are dropped");
        }
        let mut undelivered = Vec::new();
        for output in self.core.drain_outputs() {
            match output {
                Output::ToPeer { to, messages } => {
                    if let Some(report) = self.send_to_peer(to, messages) {
                        undelivered.push(report);
                    }
                }
                Output::ToAgent { session, message } => {
                    if let MasterToAgent::Launch { tasks, .. } = &message {
                        self.metrics.tasks_launched.increment(tasks.len() as u64);
                    }
                    if let Some(SessionQueue::Agent(queue)) = self.sessions.get(&session) {
                        if let Err(TrySendError::Full(_)) = queue.try_send(message) {
                            self.end_stuck_session(session, "agent");
                        }
                    }
                }
                Output::ToFramework { session, message } => {
                    match &message {
                        MasterToFramework::Offers(offers) => {
                            self.metrics.offers_made.increment(offers.len() as u64);
                        }
                        MasterToFramework::Rescind { offer_ids } => {
                            self.metrics
                                .offers_rescinded
                                .increment(offer_ids.len() as u64);
                        }
                        _ => {}
                    }
                    if let Some(SessionQueue::Framework(queue)) = self.sessions.get(&session) {
                        if let Err(TrySendError::Full(_)) = queue.try_send(message) {
                            self.end_stuck_session(session, "framework");
                        }
                    }
                }
                // Dropping the queue ends the session once it has sent what is queued.
                Output::Close(session) => {
                    self.sessions.remove(&session);
                }
                Output::Answer(request, response) => {
                    if response == OperatorResponse::Done {
                        // Before the answer leaves: an HTTP read that follows it needs a view
                        // built after this write.
                        self.publisher.board().note_write();
                    }
                    if let Some(reply) = self.replies.remove(&request) {
                        // The client may have given up (timeout); nothing to do then.
                        let _ = reply.send(response);
                    }
                }
                Output::Leader(view) => {
                    self.leader_view.send_if_modified(|current| {
                        let changed = *current != view;
                        *current = view;
                        changed
                    });
                }
                Output::Membership(view) => {
                    self.membership_view.send_replace(view);
                }
                Output::ForgetPeer(id) => {
                    self.peers.remove(&id);
                }
            }
        }
        let now = self.clock.now();
        for (to, had_snapshot) in undelivered {
            self.core.handle(Input::PeerUnreachable(to), now);
            if had_snapshot {
                self.core.handle(Input::SnapshotReport(to, false), now);
            }
        }
    }

    /// Queues one peer's messages on its sender task; returns the peer (and whether a snapshot
    /// was among them) when they could not be queued.
    fn send_to_peer(&mut self, to: u64, messages: Vec<Message>) -> Option<(u64, bool)> {
        let mut batch = PeerBatch::default();
        for message in messages {
            let is_snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
            match message.write_to_bytes() {
                Ok(bytes) => batch.messages.push(bytes),
                Err(error) => {
                    tracing::error!(to, %error, "cannot encode a raft message");
                    continue;
                }
            }
            batch.has_snapshot |= is_snapshot;
        }
        if batch.messages.is_empty() {
            return None;
        }
        let has_snapshot = batch.has_snapshot;
        let delivered = match self.peer_handle(to) {
            Some(handle) => handle.try_send(batch),
            None => false,
        };
        (!delivered).then_some((to, has_snapshot))
    }

    fn peer_handle(&mut self, to: u64) -> Option<&PeerHandle> {
        if !self.peers.contains_key(&to) {
            let Some(addr) = self.core.peer_address(to) else {
                if self.warned_no_address.insert(to) {
                    tracing::warn!(
                        peer = to,
                        "no address known for this master; its messages are dropped"
                    );
                }
                return None;
            };
            let handle = peer::spawn_sender(
                to,
                addr,
                Arc::clone(&self.client),
                self.events.clone(),
                self.config.peer_queue,
                self.config.max_reconnect_backoff,
            );
            self.peers.insert(to, handle);
        }
        self.peers.get(&to)
    }
}
