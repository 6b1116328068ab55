//! The master's sans-IO core: every decision the leader makes, driven by explicit inputs and
//! returning explicit outputs (DESIGN.md, principle 1).
//!
//! [`MasterCore`] owns the [`RaftNode`] and everything the leader keeps beside the replicated
//! state: the sessions of agents and frameworks (by [`SessionId`]; the shell maps them to
//! connections), agents' liveness clocks, frameworks' failover clocks, the open offers, and the
//! requests waiting for a commit or a read confirmation. It opens no socket, spawns no task and
//! reads no clock: the time comes with every call as a [`Now`], and what must leave the process
//! comes back as [`Output`]s. The tokio/QUIC shell (`crate::server`) only moves bytes and time;
//! the whole-system simulation drives the same core with a virtual clock. The model is
//! `quinn-proto` under `quinn`, and raft-rs's `RawNode`/`Ready` loop.
//!
//! # Driving it
//!
//! ```
//! use std::time::Duration;
//! use fullerene_master::core::{CoreConfig, MasterCore, Output};
//! use fullerene_master::raft_node::{NodeConfig, RaftNode};
//! use fullerene_master::state::ClusterSettings;
//! use fullerene_master::storage::MemStorage;
//! use fullerene_proto::{Now, Time};
//!
//! let node = RaftNode::bootstrap(NodeConfig::new(1), MemStorage::new("m1"), &[1], ClusterSettings::default())?;
//! let mut core = MasterCore::new(node, CoreConfig::default());
//! let mut now = Now::at(Time::ZERO);
//! assert!(core.start(now).is_none(), "a member starts serving");
//! // The shell's loop: inputs and ticks in, `advance`, then the outputs out.
//! for _ in 0..100 {
//!     now = now.after(Duration::from_millis(25));
//!     core.tick(now);
//!     if let Some(exit) = core.advance(now)? {
//!         panic!("stopped: {exit:?}");
//!     }
//!     for output in core.drain_outputs() {
//!         // Send it: `Output::ToPeer`, `ToAgent`, `ToFramework`, `Answer`, ...
//!         let _ = output;
//!     }
//! }
//! assert!(core.node().is_leader(), "a single master elects itself");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod agents;
mod drains;
mod frameworks;
mod membership;
mod operators;
mod reservation_calls;
mod reservations;
pub mod session_rules;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::ids::{AgentId, FrameworkId};
use fullerene_proto::messages::{
    AgentState, ErrorCode, FrameworkCall, LeaderInfo, MasterToAgent, MasterToFramework, Offer,
    OperatorRequest, OperatorResponse, Redirect, StatusUpdate, TaskIsolation, TaskReport,
    WireError,
};
use fullerene_proto::{MasterId, Now, ResourceVec, Resources, Time};
use raft::eraftpb::Message;

pub use agents::AgentTimeouts;
use agents::{AgentLink, AgentPending, AgentSessions};
use frameworks::{FrameworkLink, FrameworkSessions};
pub use operators::BoundedView;
use operators::ReadQuery;
pub use reservations::{CLOSE_INTERVAL, DEFAULT_RESERVATION_GRACE, FOLLOW_INTERVAL};

use crate::offers::OfferManager;
use crate::raft_node::{
    NodeError, NodeOutput, ProposeError, RaftNode, StoreJob, StoreReport, Token,
};
use crate::state::{teardown_notice, Command, CommandError, CommandOutcome, TeardownCause};
use crate::storage::RaftStore;
use fullerene_scheduling::allocator::{CycleSnapshot, CycleStats};

/// A learner is promoted to voter once its log is within this many entries of the leader's.
const PROMOTION_LAG: u64 = 64;

/// One session of an agent, a framework or an operator, as the shell numbers them. Sessions of
/// the same peer get different ids, so the end of a stale session never drops a newer one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub u64);

/// An operator request waiting for its answer ([`Output::Answer`]), as the shell numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What the leader decides with, besides the replicated state.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreConfig {
    /// Where each master is reached, by Raft id, as the command line says (members added later
    /// are learned from their membership change; these win over the replicated addresses).
    pub members: BTreeMap<u64, SocketAddr>,
    /// Agents' heartbeat interval and when silent agents are marked unreachable and lost.
    pub agent_timeouts: AgentTimeouts,
    /// Where this master's HTTP API listens, announced in the replicated state when it leads.
    pub http_addr: Option<SocketAddr>,
    /// How often the leader runs an allocation cycle when nothing happens (offers that
    /// expired or were declined come back on it).
    pub allocation_interval: Duration,
    /// Allocation is driven by events: when resources free up (a task ends, an agent
    /// registers or grows, a framework is torn down) or demand arrives, a cycle runs at once,
    /// but at most one per this gap, so that a burst of events costs one cycle, not one each.
    pub min_allocation_gap: Duration,
    /// How long an offer stays valid before it is rescinded and offered again.
    pub offer_ttl: Duration,
    /// Agent shards, planned concurrently from one snapshot and committed in order (Omega's
    /// shared state; `fullerene_scheduling::allocator`'s `cycle` module).
    pub allocator_shards: usize,
    /// Where the shards of an allocation cycle are planned: in line, inside the step that
    /// runs the cycle, or by the shell, off the node loop (see [`AllocationPlanning`]).
    pub allocation_planning: AllocationPlanning,
    /// How often the leader sends connected frameworks the status updates they have not
    /// acknowledged (an update pushed into a full queue, or lost with its session, is sent
    /// again; the framework ignores what it has seen and acknowledges it again).
    pub status_resend_interval: Duration,
    /// How long a reservation's jobs must be short of what the plan guarantees them (with
    /// no free capacity to cover it) before tasks are preempted for them.
    pub reservation_grace: Duration,
    /// Admission control: while this many of the leader's writes wait to be applied (proposed
    /// and not yet committed and applied), it refuses accepts, `Unavailable`, and takes the
    /// offers back for the next cycle. Launches are the one call that brings more work (each
    /// is followed by status updates and acknowledgements); refusing them is how a leader
    /// overloaded keeps its commit latency, and its heartbeats, in bounds instead of queueing
    /// until elections fail over. See [`DEFAULT_ACCEPT_BACKLOG_LIMIT`].
    pub accept_backlog_limit: usize,
}

/// The default of [`CoreConfig::accept_backlog_limit`] (counted by
/// [`RaftNode::pending_proposals`]): a few tens of milliseconds of writes
/// at the rates `fullerene bench launch` reaches on two cores (10,000 launches a second, each
/// followed by its updates and acknowledgements). Without admission control, frameworks that
/// accept as fast as they are offered drove three masters on two cores into elections, with
/// thousands of tasks failed and a p99 of 18 s; with 1,024 or 2,048 there were still
/// elections; with 512, none over five runs (10,200-11,300 launches a second).
pub const DEFAULT_ACCEPT_BACKLOG_LIMIT: usize = 512;

/// Where an allocation cycle's shards are planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllocationPlanning {
    /// Inside the step that runs the cycle: snapshot, plans and commit at once (tests and the
    /// simulations that need no threads).
    #[default]
    Inline,
    /// By the shell: when a cycle is due, [`MasterCore::begin_allocation`] takes the snapshot
    /// and hands out an [`AllocationJob`]; the shell plans its shards on threads of its own
    /// while the node loop goes on, and [`MasterCore::allocation_planned`] commits the plans
    /// against the state as it is by then. One cycle is in flight at a time.
    Offloaded,
}

/// An allocation cycle's shards to plan off the node loop
/// ([`AllocationPlanning::Offloaded`]): plan every shard of `snapshot` (on any threads, in any
/// order) and hand the plans to [`MasterCore::allocation_planned`] with `id`.
#[derive(Debug)]
pub struct AllocationJob {
    /// The cycle's number, echoed with its plans.
    pub id: u64,
    /// What the shards plan from.
    pub snapshot: CycleSnapshot,
}

/// A planned cycle not answered in this long is given up (its plans, should they come, are
/// ignored) and the next one starts: a shell that lost a job must not stop allocation.
const PLANNING_TIMEOUT: Duration = Duration::from_secs(2);

/// The default [`CoreConfig::min_allocation_gap`]: a quarter of the periodic interval, one
/// Raft tick (a burst of completions and the summaries frameworks send after them costs a few
/// cycles a tick, not one each).
pub const DEFAULT_MIN_ALLOCATION_GAP: Duration = Duration::from_millis(25);

/// The default [`CoreConfig::status_resend_interval`]: long enough that a framework busy with
/// a burst of updates has acknowledged them before they are sent again, short enough that a
/// dropped update costs its job seconds, not minutes.
pub const DEFAULT_STATUS_RESEND_INTERVAL: Duration = Duration::from_secs(5);

impl Default for CoreConfig {
    /// No addresses, default agent timeouts, an allocation cycle every 100 ms, offers valid for
    /// the offer book's default, one shard, unacknowledged updates sent again every 5 s,
    /// tasks preempted for a reservation after 30 s.
    fn default() -> CoreConfig {
        CoreConfig {
            members: BTreeMap::new(),
            agent_timeouts: AgentTimeouts::default(),
            http_addr: None,
            allocation_interval: Duration::from_millis(100),
            min_allocation_gap: DEFAULT_MIN_ALLOCATION_GAP,
            offer_ttl: Duration::from_millis(crate::offers::DEFAULT_OFFER_TTL_MS),
            allocator_shards: 1,
            allocation_planning: AllocationPlanning::Inline,
            status_resend_interval: DEFAULT_STATUS_RESEND_INTERVAL,
            reservation_grace: DEFAULT_RESERVATION_GRACE,
            accept_backlog_limit: DEFAULT_ACCEPT_BACKLOG_LIMIT,
        }
    }
}

/// The fields of an agent's `Register` frame.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRegistration {
    /// The machine's name.
    pub hostname: String,
    /// Its capacity.
    pub resources: Resources,
    /// Its attributes (rack, zone, ...).
    pub attributes: BTreeMap<String, String>,
    /// The tasks it runs or has ended without an acknowledgement.
    pub tasks: Vec<TaskReport>,
    /// The executors it offers.
    pub executors: Vec<String>,
    /// How it isolates its tasks (kept by the leader for operators; not replicated).
    pub isolation: TaskIsolation,
}

/// A framework's `Subscribe` call.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscription {
    /// The call to answer.
    pub call_id: u64,
    /// The id to fail over, or `None` for a new framework.
    pub framework_id: Option<FrameworkId>,
    /// Its name.
    pub name: String,
    /// Its fairness group.
    pub group: String,
    /// How long its tasks survive a disconnection.
    pub failover_timeout_ms: u64,
    /// The principal of the session's certificate.
    pub principal: String,
}

/// What reaches the core from outside: one message, or the end of a session or a delivery.
#[derive(Debug)]
pub enum Input {
    /// A Raft message from a peer whose certificate names `message.from`.
    Raft(Message),
    /// An operator request (from the QUIC operator session, or a write of the HTTP API),
    /// answered with [`Output::Answer`].
    Operator {
        /// The id its answer carries.
        request_id: RequestId,
        /// Who asks: the operator certificate's principal, or `token:NAME` for a bearer token
        /// of the HTTP API. It owns the reservations it creates.
        principal: String,
        /// The request.
        request: OperatorRequest,
    },
    /// Messages to this peer could not be delivered.
    PeerUnreachable(u64),
    /// A `MsgSnapshot` to this peer was delivered (`true`) or not.
    SnapshotReport(u64, bool),
    /// An agent's session opened with a registration.
    AgentRegister {
        /// The agent, from its certificate.
        agent_id: AgentId,
        /// The session it opened.
        session: SessionId,
        /// Where the session comes from.
        address: SocketAddr,
        /// What it registered with.
        registration: AgentRegistration,
    },
    /// An agent heartbeated.
    AgentHeartbeat(AgentId),
    /// An agent reported a task's status.
    AgentStatus(AgentId, StatusUpdate),
    /// An agent's capacity changed.
    AgentResources(AgentId, Resources),
    /// An agent's session ended.
    AgentGone(AgentId, SessionId),
    /// A framework's session opened with a subscription.
    FrameworkSubscribe(SessionId, Subscription),
    /// A subscribed framework's call, on one of its sessions.
    FrameworkCall {
        /// The framework.
        framework_id: FrameworkId,
        /// The session it came on.
        session: SessionId,
        /// The call.
        call: FrameworkCall,
    },
    /// A framework's session ended.
    FrameworkGone(FrameworkId, SessionId),
    /// Master `from` says this master was not a member as of log index `as_of`.
    NotAMember {
        /// The master that said so.
        from: u64,
        /// The committed index its membership view holds at.
        as_of: u64,
    },
}

/// Who leads, as far as this master knows (published for the session tasks, which redirect).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaderView {
    /// The leader and its address, when known (an address is needed to redirect).
    pub leader: Option<LeaderInfo>,
    /// Whether this master leads.
    pub is_self: bool,
    /// The leader's HTTP API, when it announced one.
    pub leader_http: Option<SocketAddr>,
}

/// The members, and the log index at which this master's view of them was last set (a conf
/// change applied, a snapshot installed, or the restart point). Empty for a master waiting to
/// be added.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MembershipView {
    /// Voters and learners.
    pub members: BTreeSet<u64>,
    /// The index this view is true at (and after, until the next change).
    pub as_of: u64,
}

/// What the core asks the shell to do, in the order it must be done.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// Raft messages for one peer (from one `advance`).
    ToPeer {
        /// The peer's Raft id.
        to: u64,
        /// The messages, in order.
        messages: Vec<Message>,
    },
    /// A frame for an agent's session.
    ToAgent {
        /// The session.
        session: SessionId,
        /// The frame.
        message: MasterToAgent,
    },
    /// A frame for a framework's session.
    ToFramework {
        /// The session.
        session: SessionId,
        /// The frame.
        message: MasterToFramework,
    },
    /// Close a session once what was sent on it before has left.
    Close(SessionId),
    /// The answer to an operator request.
    Answer(RequestId, OperatorResponse),
    /// Who leads changed (or its address did).
    Leader(LeaderView),
    /// The membership view changed.
    Membership(MembershipView),
    /// A master left the group: drop its connection.
    ForgetPeer(u64),
}

/// The outputs of the steps since the shell last drained them.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    outputs: Vec<Output>,
}

impl Outbox {
    fn push(&mut self, output: Output) {
        self.outputs.push(output);
    }

    pub(crate) fn send_agent(&mut self, session: SessionId, message: MasterToAgent) {
        self.push(Output::ToAgent { session, message });
    }

    pub(crate) fn send_framework(&mut self, session: SessionId, message: MasterToFramework) {
        self.push(Output::ToFramework { session, message });
    }

    pub(crate) fn close(&mut self, session: SessionId) {
        self.push(Output::Close(session));
    }

    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Output> {
        self.outputs.drain(..)
    }
}

/// Why the core stopped serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MasterExit {
    /// The shell shut it down (SIGTERM, ctrl-c, or a test).
    Shutdown,
    /// This master was removed from the group by a membership change: it stops serving.
    Removed,
}

/// A request waiting for the node's answer.
#[derive(Debug)]
enum Pending {
    /// An operator's command or membership change: answered `Done` once applied.
    Write {
        /// The request to answer.
        request: RequestId,
        /// For an operator's teardown, the framework whose session closes once it applies.
        closes: Option<FrameworkId>,
    },
    /// A linearizable read.
    Read(ReadQuery, RequestId),
    /// A command proposed for an agent (registration, status update).
    Agent(AgentPending),
    /// A command the leader proposed on its own (liveness marks, resource updates).
    Internal(Command),
    /// The promotion of this learner to voter.
    Promotion(u64),
    /// A framework's call, answered once its command is applied.
    Framework {
        /// The call to answer.
        call_id: u64,
        /// Where to answer.
        link: FrameworkLink,
        /// What the answer does besides.
        kind: FrameworkPending,
    },
}

/// What a framework's proposal does when it is applied, besides answering the call.
#[derive(Debug)]
enum FrameworkPending {
    /// A (re)subscription: the session becomes the framework's.
    Subscribe(FrameworkId),
    /// A teardown the framework asked for.
    Teardown(FrameworkId),
    /// A launch from an accept: its resources are held back as launching until it settles.
    Launch {
        /// The agent.
        agent: AgentId,
        /// The tasks' summed demand.
        launching: ResourceVec,
    },
    /// Anything else: just answer.
    Answer,
}

/// How a proposal ended.
enum Settled {
    Applied(CommandOutcome),
    Refused(CommandError),
    Dropped(ProposeError),
}

/// What frameworks did with a leader's offers, counted by the core for the shell's metrics
/// (the core records no metric itself; the shell publishes the growth).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OfferTally {
    /// Offers taken by accepts the leader found valid (each offer of an accept counts).
    pub accepted: u64,
    /// Offers declined.
    pub declined: u64,
    /// Accepts refused by admission control ([`CoreConfig::accept_backlog_limit`]).
    pub refused_busy: u64,
}

/// Launch latencies kept for the shell at most (it takes them after every step, so only a
/// shell that never does reaches this).
const MAX_UNTAKEN_LAUNCH_LATENCIES: usize = 4_096;

/// The leader's decisions around one master's [`RaftNode`]. See the module documentation.
#[derive(Debug)]
pub struct MasterCore<S: RaftStore> {
    node: RaftNode<S>,
    config: CoreConfig,
    /// Every known member's address (peers and clients use the same one).
    addresses: BTreeMap<u64, SocketAddr>,
    /// Set when a member reported that this master was removed (see [`Input::NotAMember`]).
    removed_notice: bool,
    pending: HashMap<Token, Pending>,
    next_token: u64,
    agents: AgentSessions,
    drains: drains::DrainDeadlines,
    following: reservations::Following,
    frameworks: FrameworkSessions,
    /// Whether a learner's promotion is proposed and not yet applied.
    promotion_in_flight: bool,
    /// The offers, while this master leads.
    offers: Option<OfferManager>,
    /// When the next allocation cycle is due.
    next_allocation: Time,
    /// When the last one ran.
    last_allocation: Time,
    /// Under [`AllocationPlanning::Offloaded`]: a cycle is due, for the shell's next
    /// [`MasterCore::begin_allocation`].
    allocation_due: bool,
    /// The cycle whose plans are awaited, and when it was handed out.
    planning: Option<(u64, Time)>,
    /// Numbers the allocation jobs.
    allocation_jobs: u64,
    /// What the commits of allocation cycles did, since this master started.
    allocation_stats: CycleStats,
    /// What frameworks did with this master's offers, since it started.
    offer_tally: OfferTally,
    /// Reservation requests this master proposed that the plan refused (Rayon §5.1's
    /// admission), for the shell's metrics.
    reservations_refused: u64,
    /// Accept-to-RUNNING times of the tasks that started since the shell last took them.
    launch_latencies: Vec<Duration>,
    /// Frameworks subscribed by this leader (new ids are `fw-<term>-<n>`).
    next_framework: u64,
    /// The views last published, so that only changes are.
    leader_view: LeaderView,
    membership_view: MembershipView,
    out: Outbox,
}

impl<S: RaftStore> MasterCore<S> {
    /// A core around `node`, which it owns from now on.
    pub fn new(node: RaftNode<S>, config: CoreConfig) -> MasterCore<S> {
        // The replicated addresses cover every member ever added; the command line's win
        // where both name one (an operator moving a master).
        let mut addresses = node.state().settings().master_addresses.clone();
        addresses.extend(config.members.iter().map(|(id, addr)| (*id, *addr)));
        MasterCore {
            agents: AgentSessions::new(config.agent_timeouts),
            drains: drains::DrainDeadlines::default(),
            following: reservations::Following::new(config.reservation_grace),
            frameworks: FrameworkSessions::new(config.status_resend_interval),
            promotion_in_flight: false,
            offers: None,
            next_allocation: Time::ZERO,
            last_allocation: Time::ZERO,
            allocation_due: false,
            planning: None,
            allocation_jobs: 0,
            allocation_stats: CycleStats::default(),
            offer_tally: OfferTally::default(),
            reservations_refused: 0,
            launch_latencies: Vec::new(),
            next_framework: 1,
            removed_notice: false,
            node,
            addresses,
            config,
            pending: HashMap::new(),
            next_token: 1,
            leader_view: LeaderView::default(),
            membership_view: MembershipView::default(),
            out: Outbox::default(),
        }
    }

    /// The Raft node (for reads of the replicated state and of Raft's status).
    pub fn node(&self) -> &RaftNode<S> {
        &self.node
    }

    /// The events derived from what was applied since the last call (see
    /// [`crate::state::events`]), for the shell's ring.
    pub fn take_events(&mut self) -> crate::state::events::EventBatch {
        self.node.take_events()
    }

    /// The entries applied since the last call (see
    /// [`RaftNode::take_apply_trace`]): empty unless the node traces them.
    pub fn take_apply_trace(&mut self) -> Vec<crate::raft_node::AppliedTrace> {
        self.node.take_apply_trace()
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Where master `id` is reached, when known.
    pub fn peer_address(&self, id: u64) -> Option<SocketAddr> {
        self.addresses.get(&id).copied()
    }

    /// The offers open now (empty unless leading).
    pub fn open_offers(&self) -> Vec<Offer> {
        self.offers
            .as_ref()
            .map(|offers| offers.offers().cloned().collect())
            .unwrap_or_default()
    }

    /// Takes the outputs of the steps so far, in the order they must be carried out.
    pub fn drain_outputs(&mut self) -> Vec<Output> {
        self.out.drain().collect()
    }

    /// The store jobs the steps so far queued (empty unless the node's persistence is
    /// [`Persistence::Offloaded`](crate::raft_node::Persistence)): the shell runs them in order
    /// with the store's writer, off the node loop, and reports with
    /// [`MasterCore::store_report`].
    pub fn take_store_jobs(&mut self) -> Vec<StoreJob<S::Staged>> {
        self.node.take_store_jobs()
    }

    /// The writer's report on store jobs taken with [`MasterCore::take_store_jobs`]; what it
    /// releases goes out with the next [`MasterCore::advance`], which also returns a failure.
    pub fn store_report(&mut self, report: StoreReport) {
        self.node.store_report(report);
    }

    /// Publishes the views at the restart point; returns [`MasterExit::Removed`] when this
    /// master's removal was applied before it stopped (it must not serve again).
    pub fn start(&mut self, now: Now) -> Option<MasterExit> {
        self.next_allocation = now.monotonic;
        let restart_point = self.node.applied_index();
        self.publish_membership(restart_point);
        let view = &self.membership_view;
        if !view.members.is_empty() && !view.members.contains(&self.node.id()) {
            tracing::info!(master = self.node.id(), members = ?view.members, "this master is no longer a member; it stops serving");
            return Some(MasterExit::Removed);
        }
        None
    }

    /// Starts an election at once, without waiting for the election timeout (an operator's
    /// forced election, and tests: raft-rs draws election timeouts from its own random
    /// generator, so only a forced election happens at a known step).
    pub fn campaign(&mut self) -> Result<(), NodeError> {
        self.node.campaign()
    }

    /// The tick: Raft's logical clock, then the leader's timers (liveness marks, failover
    /// teardowns, learner promotion, the allocation cycle). The shell calls it every
    /// [`NodeConfig::tick_interval`](crate::raft_node::NodeConfig).
    pub fn tick(&mut self, now: Now) {
        self.node.tick();
        self.propose_agent_marks(now);
        self.propose_drain_kills(now);
        self.propose_reservation_close(now);
        self.propose_framework_teardowns(now);
        self.resend_status_updates(now);
        self.promote_learners();
        self.allocate(now);
    }

    /// Handles one input.
    pub fn handle(&mut self, input: Input, now: Now) {
        match input {
            Input::Raft(message) => {
                let from = message.from;
                if let Err(error) = self.node.step(message) {
                    tracing::debug!(master = self.node.id(), from, %error, "raft message not stepped");
                }
            }
            Input::Operator {
                request_id,
                principal,
                request,
            } => {
                self.handle_operator(request_id, &principal, request, now);
            }
            Input::PeerUnreachable(peer) => self.node.report_unreachable(peer),
            Input::SnapshotReport(peer, delivered) => self.node.report_snapshot(peer, delivered),
            Input::AgentRegister {
                agent_id,
                session,
                address,
                registration,
            } => self.handle_agent_register(
                agent_id,
                AgentLink { session, address },
                registration,
                now,
            ),
            Input::AgentHeartbeat(agent_id) => {
                let lost = self
                    .node
                    .state()
                    .agents()
                    .get(&agent_id)
                    .is_some_and(|entry| entry.state == AgentState::Lost);
                if self.node.is_leader() && lost {
                    self.agents.send_back_lost(&agent_id, &mut self.out);
                } else if self.node.is_leader() {
                    let command = self.agents.heard(
                        self.node.state(),
                        &agent_id,
                        now.monotonic,
                        now.wall_ms(),
                    );
                    if let Some(command) = command {
                        self.propose_internal(command);
                    }
                }
            }
            Input::AgentStatus(agent_id, update) => self.handle_agent_status(agent_id, update, now),
            Input::AgentResources(agent_id, resources) => {
                if self.node.is_leader() && self.agents.link(&agent_id).is_some() {
                    self.propose_internal(Command::UpdateAgentResources {
                        agent_id,
                        resources,
                        at_ms: now.wall_ms(),
                    });
                }
            }
            Input::AgentGone(agent_id, session) => self.agents.detach(&agent_id, session),
            Input::FrameworkSubscribe(session, subscription) => {
                self.handle_subscribe(session, subscription, now);
            }
            Input::FrameworkCall {
                framework_id,
                session,
                call,
            } => self.handle_framework_call(framework_id, session, call, now),
            Input::FrameworkGone(framework_id, session) => {
                if self
                    .frameworks
                    .detach(&framework_id, session, now.monotonic)
                    && self.node.is_leader()
                {
                    self.propose_internal(Command::DisconnectFramework {
                        framework_id,
                        at_ms: now.wall_ms(),
                    });
                }
            }
            Input::NotAMember { from, as_of } => {
                // Only a view newer than ours can tell us anything: an older one may predate
                // our own addition. A removal this master has already seen committed is left
                // to its own apply, which answers the request that asked for it (a leader
                // removing itself hears from the members, which applied the removal first,
                // while its own log write is still on the way to disk).
                let applied = self.node.applied_index();
                if as_of <= applied {
                    return;
                }
                if as_of <= self.node.commit_index() {
                    tracing::info!(
                        master = self.node.id(),
                        from,
                        as_of,
                        applied,
                        "a member says this master was removed; it stops once it applies its removal"
                    );
                } else {
                    tracing::info!(
                        master = self.node.id(),
                        from,
                        as_of,
                        applied,
                        "a member says this master was removed after what it has applied; it stops serving"
                    );
                    self.removed_notice = true;
                }
            }
        }
    }

    /// Runs the node's `Ready` cycles while it has work and acts on what they produce, then an
    /// allocation cycle if an event made one due ([`CoreConfig::min_allocation_gap`]).
    /// Returns why the core stopped serving, if it did; an error is fatal (storage damage,
    /// an undecodable committed entry).
    pub fn advance(&mut self, now: Now) -> Result<Option<MasterExit>, NodeError> {
        if self.removed_notice {
            self.fail_pending("this master was removed from the group");
            return Ok(Some(MasterExit::Removed));
        }
        let result = self.advance_node(now);
        if matches!(result, Ok(None)) && self.node.is_leader() {
            self.allocate(now);
        }
        result
    }

    /// Resources freed up or demand arrived: the next allocation cycle runs as soon as the
    /// minimum gap since the last one allows (at the end of this step, or on a tick).
    pub(super) fn allocation_wanted(&mut self) {
        let soon = self.last_allocation + self.config.min_allocation_gap;
        if soon < self.next_allocation {
            self.next_allocation = soon;
        }
    }

    fn advance_node(&mut self, now: Now) -> Result<Option<MasterExit>, NodeError> {
        while self.node.has_ready() {
            let output = self.node.advance(now.monotonic)?;
            if self.handle_output(output, now) {
                tracing::info!(
                    master = self.node.id(),
                    "this master was removed from the group; it stops serving"
                );
                self.fail_pending("this master was removed from the group");
                return Ok(Some(MasterExit::Removed));
            }
        }
        Ok(None)
    }

    /// The shell is stopping: every waiting request is answered.
    pub fn shutdown(&mut self) {
        tracing::info!(master = self.node.id(), "shutting down");
        self.fail_pending("the master is shutting down");
    }

    fn token(&mut self) -> Token {
        let token = Token(self.next_token);
        self.next_token += 1;
        token
    }

    /// The redirect a follower answers with.
    fn redirect(&self) -> Redirect {
        Redirect {
            leader: self.leader_info(),
        }
    }

    fn leader_info(&self) -> Option<LeaderInfo> {
        let leader = self.node.leader()?;
        let addr = *self.addresses.get(&leader)?;
        Some(LeaderInfo {
            id: MasterId(leader),
            addr,
            term: self.node.term(),
        })
    }

    fn answer(&mut self, request: RequestId, response: OperatorResponse) {
        self.out.push(Output::Answer(request, response));
    }

    /// Answers what waits on `token` with an operator response.
    fn answer_token(&mut self, token: Token, response: OperatorResponse) {
        match self.pending.remove(&token) {
            Some(Pending::Write { request, .. } | Pending::Read(_, request)) => {
                self.answer(request, response);
            }
            Some(Pending::Promotion(learner)) => {
                self.promotion_in_flight = false;
                tracing::info!(learner, result = ?response, "learner promotion settled");
            }
            Some(Pending::Agent(_) | Pending::Internal(_) | Pending::Framework { .. }) => {
                tracing::debug!(token = token.0, "an operator answer for an agent proposal");
            }
            None => tracing::debug!(token = token.0, "answer for an unknown request"),
        }
    }

    /// Ends a command proposal: answers its operator, or acts for its agent or framework.
    fn settle(&mut self, token: Token, settled: Settled, now: Now) {
        let Some(pending) = self.pending.remove(&token) else {
            tracing::debug!(token = token.0, "result for an unknown request");
            return;
        };
        match pending {
            Pending::Write { request, closes } => {
                if let Some(framework_id) = closes {
                    let applied = matches!(settled, Settled::Applied(_));
                    if applied {
                        tracing::info!(framework = %framework_id, "framework torn down by an operator");
                    }
                    self.frameworks.teardown_settled(
                        &framework_id,
                        applied,
                        teardown_notice(TeardownCause::Operator),
                        &mut self.out,
                    );
                }
                let response = self.write_response(&settled);
                self.answer(request, response);
            }
            Pending::Read(_, request) => {
                let response = self.write_response(&settled);
                self.answer(request, response);
            }
            Pending::Agent(pending) => self.settle_agent(pending, settled, now),
            Pending::Internal(command) => {
                if let Settled::Refused(error) = &settled {
                    tracing::debug!(command = command.kind(), %error, "a leader's own command was refused");
                }
                self.agents.mark_settled(&command);
                self.drains.settled(&command);
                self.following.settled(&command);
                if let (Command::MarkAgentLost { agent_id, .. }, Settled::Applied(_)) =
                    (&command, &settled)
                {
                    self.agents.send_back_lost(agent_id, &mut self.out);
                }
                if let Command::TeardownFramework {
                    framework_id,
                    cause,
                    ..
                } = &command
                {
                    let applied = matches!(settled, Settled::Applied(_));
                    if applied {
                        tracing::info!(framework = %framework_id, "framework did not fail over in time; torn down");
                    }
                    self.frameworks.teardown_settled(
                        framework_id,
                        applied,
                        teardown_notice(*cause),
                        &mut self.out,
                    );
                }
            }
            Pending::Framework {
                call_id,
                link,
                kind,
            } => self.settle_framework(call_id, link, kind, settled),
            Pending::Promotion(_) => self.promotion_in_flight = false,
        }
    }

    /// What an operator is told when the command it wrote settles.
    fn write_response(&self, settled: &Settled) -> OperatorResponse {
        match settled {
            Settled::Applied(_) => OperatorResponse::Done,
            Settled::Refused(error) => operators::command_error_response(error),
            Settled::Dropped(error) => self.propose_error_response(error),
        }
    }

    fn propose_internal(&mut self, command: Command) {
        let token = self.token();
        match self.node.propose(&command, token) {
            Ok(()) => {
                self.pending.insert(token, Pending::Internal(command));
            }
            Err(error) => {
                tracing::debug!(command = command.kind(), %error, "the leader could not propose");
                self.agents.mark_settled(&command);
                self.drains.settled(&command);
                self.following.settled(&command);
            }
        }
    }

    /// Acts on one `advance`'s output; returns true when this master was removed.
    fn handle_output(&mut self, output: NodeOutput, now: Now) -> bool {
        self.send_messages(output.messages_to_send);
        for applied in output.membership {
            self.learn_membership(&applied.change);
            self.publish_membership(applied.index);
            if let Some(token) = applied.token {
                let response = match applied.result {
                    Ok(_) => OperatorResponse::Done,
                    Err(detail) => OperatorResponse::Error(WireError::new(
                        ErrorCode::InvalidRequest,
                        format!("membership change refused: {detail}"),
                    )),
                };
                self.answer_token(token, response);
            }
        }
        for (token, result) in output.applied {
            let settled = match result {
                Ok(outcome) => {
                    if self.node.is_leader() {
                        if frees_resources(&outcome) {
                            self.allocation_wanted();
                        }
                        self.agents.push_outcome(&outcome, &mut self.out);
                        self.frameworks.push_outcome(&outcome, &mut self.out);
                    }
                    Settled::Applied(outcome)
                }
                Err(error) => {
                    if matches!(error, CommandError::ReservationRefused { .. }) {
                        self.reservations_refused += 1;
                    }
                    Settled::Refused(error)
                }
            };
            self.settle(token, settled, now);
        }
        if self.node.is_leader() {
            self.tell_reservation_owners();
        }
        for (token, error) in output.dropped {
            self.settle(token, Settled::Dropped(error), now);
        }
        for token in output.reads_ready {
            if let Some(Pending::Read(query, request)) = self.pending.remove(&token) {
                let response = self.serve_read(query);
                self.answer(request, response);
            }
        }
        for (token, error) in output.reads_failed {
            let response = operators::read_error_response(&error);
            self.answer_token(token, response);
        }
        if let Some(change) = output.leader_changed {
            tracing::info!(
                master = self.node.id(),
                leader = ?change.leader,
                term = change.term,
                role = if self.node.is_leader() { "leader" } else { "follower" },
                "leader changed"
            );
            self.publish_leader();
            self.promotion_in_flight = false;
            if self.node.is_leader() {
                self.on_leadership(now);
            } else {
                // No offer outlives its leader; frameworks void theirs on the redirect.
                self.offers = None;
                self.planning = None;
                self.allocation_due = false;
                let redirect = self.redirect();
                self.agents.on_lost_leadership(&redirect, &mut self.out);
                self.frameworks.on_lost_leadership(&redirect, &mut self.out);
            }
        }
        if let Some(index) = output.snapshot_installed {
            self.publish_membership(index);
            for (id, addr) in &self.node.state().settings().master_addresses {
                self.addresses.entry(*id).or_insert(*addr);
            }
            let view = &self.membership_view;
            if !view.members.is_empty() && !view.members.contains(&self.node.id()) {
                tracing::info!(
                    master = self.node.id(),
                    index,
                    "a snapshot from the leader no longer lists this master"
                );
                return true;
            }
            tracing::info!(
                master = self.node.id(),
                index,
                "installed a snapshot from the leader"
            );
        }
        // An applied announcement may have changed the leader's HTTP address.
        self.publish_leader();
        output.removed_self
    }

    /// Groups one `advance`'s Raft messages by peer, in order.
    fn send_messages(&mut self, messages: Vec<Message>) {
        let mut batches: BTreeMap<u64, Vec<Message>> = BTreeMap::new();
        for message in messages {
            batches.entry(message.to).or_default().push(message);
        }
        for (to, messages) in batches {
            self.out.push(Output::ToPeer { to, messages });
        }
    }

    /// Answers every waiting request: reads simply failed, but a write already in the log
    /// may still commit under the next leader, so its outcome is unknown.
    fn fail_pending(&mut self, why: &str) {
        let mut pending: Vec<(Token, Pending)> = self.pending.drain().collect();
        // In token order, so that the same inputs give the same outputs.
        pending.sort_by_key(|(token, _)| token.0);
        for (_, pending) in pending {
            match pending {
                Pending::Write { request, .. } => self.answer(
                    request,
                    OperatorResponse::Error(WireError::new(ErrorCode::OutcomeUnknown, why)),
                ),
                Pending::Read(_, request) => self.answer(
                    request,
                    OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, why)),
                ),
                // Agents reconnect and resend on their own.
                Pending::Agent(_) | Pending::Internal(_) | Pending::Promotion(_) => {}
                Pending::Framework { call_id, link, .. } => {
                    self.answer_call(
                        &link,
                        call_id,
                        Err(WireError::new(ErrorCode::OutcomeUnknown, why)),
                    );
                }
            }
        }
    }
}

/// Whether an applied command may have freed resources (or added some) that the next
/// allocation cycle could offer: a task ended, an agent (re)registered, tasks ended on the
/// master's decision.
fn frees_resources(outcome: &CommandOutcome) -> bool {
    match outcome {
        CommandOutcome::StatusRecorded(update) => update.state.is_terminal(),
        CommandOutcome::AgentRegistered { .. } | CommandOutcome::TasksEnded { .. } => true,
        CommandOutcome::Applied
        | CommandOutcome::Unchanged
        | CommandOutcome::TasksLaunched { .. }
        | CommandOutcome::KillRequested(_)
        | CommandOutcome::KillsRequested(_) => false,
    }
}
