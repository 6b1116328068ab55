//! The task that owns the [`RaftNode`]: ticks, inbound events, `advance`, and the answers.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use fullerene_proto::ids::{AgentId, FrameworkId, MasterId};
use fullerene_proto::messages::{
    CallOk, ClusterStatus, ClusterView, ErrorCode, FrameworkCall, FrameworkRequest, GroupInfo,
    LeaderInfo, MasterToAgent, MasterToFramework, MemberStatus, OperatorRequest, OperatorResponse,
    Redirect, StatusReason, StatusUpdate, TaskInfo, TaskState, UnixMillis, WireError,
};
use fullerene_proto::Resources;
use fullerene_transport::Client;
use protobuf::Message as _;
use raft::eraftpb::{ConfChangeType, Message, MessageType};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;

use super::agents::{ack_of, AgentLink, AgentLinks, AgentPending};
use super::frameworks::{FrameworkLink, FrameworkLinks};
use super::peer::{self, PeerBatch, PeerHandle};
use super::{LeaderView, MasterExit, MembershipView, ServerError, ShellConfig};
use crate::offers::OfferManager;
use crate::raft_node::{MembershipChange, ProposeError, RaftNode, ReadError, Token};
use crate::state::{Command, CommandError, CommandOutcome, TaskKey};
use crate::storage::RaftStore;

/// Events queued for the node loop before senders wait (peer sessions then apply backpressure
/// to their QUIC streams).
pub(crate) const EVENT_QUEUE: usize = 8192;

/// Events handled per wake-up before `advance` runs: bounds the latency one burst adds to
/// ticks and to the other peers' messages.
const MAX_EVENTS_PER_CYCLE: usize = 4096;

/// A learner is promoted to voter once its log is within this many entries of the leader's.
const PROMOTION_LAG: u64 = 64;

/// What the other tasks tell the node loop.
#[derive(Debug)]
pub(crate) enum Event {
    /// A Raft message from a peer whose certificate names `message.from`.
    Raft(Message),
    /// An operator request and where to answer it.
    Operator(OperatorRequest, oneshot::Sender<OperatorResponse>),
    /// A batch to this peer could not be delivered.
    Unreachable(u64),
    /// A `MsgSnapshot` to this peer was delivered (`true`) or not.
    SnapshotReport(u64, bool),
    /// An agent's session opened with a registration.
    AgentRegister {
        /// The agent, from its certificate.
        agent_id: AgentId,
        /// What it registered with.
        registration: AgentRegistration,
        /// Its session's outbound queue.
        link: AgentLink,
    },
    /// An agent heartbeated.
    AgentHeartbeat(AgentId),
    /// An agent reported a task's status.
    AgentStatus(AgentId, StatusUpdate),
    /// An agent's capacity changed.
    AgentResources(AgentId, Resources),
    /// An agent's session `1` ended.
    AgentGone(AgentId, u64),
    /// A framework's session opened with a subscription.
    FrameworkSubscribe {
        /// The call to answer.
        call_id: u64,
        /// The id to fail over, or `None` for a new framework.
        framework_id: Option<FrameworkId>,
        /// Its name.
        name: String,
        /// Its fairness group.
        group: String,
        /// How long its tasks survive a disconnection.
        failover_timeout_ms: u64,
        /// Its session's outbound queue (and principal).
        link: FrameworkLink,
    },
    /// A subscribed framework's call, on session `session`.
    FrameworkCall {
        /// The framework.
        framework_id: FrameworkId,
        /// The session it came on.
        session: u64,
        /// The call.
        call: FrameworkCall,
    },
    /// A framework's session ended.
    FrameworkGone(FrameworkId, u64),
    /// Master `from` says this master was not a member as of log index `as_of`.
    NotAMember {
        /// The master that said so.
        from: u64,
        /// The committed index its membership view holds at.
        as_of: u64,
    },
}

/// The fields of an agent's `Register` frame.
#[derive(Debug)]
pub(crate) struct AgentRegistration {
    pub hostname: String,
    pub resources: Resources,
    pub attributes: BTreeMap<String, String>,
    pub tasks: Vec<TaskInfo>,
    pub executors: Vec<String>,
}

/// A read waiting for its ReadIndex confirmation.
#[derive(Debug)]
enum ReadQuery {
    ClusterStatus,
    ListAgents,
    ListFrameworks,
    ListTasks(Option<FrameworkId>),
    GroupWeights,
    State,
}

/// A request waiting for the node's answer.
#[derive(Debug)]
enum Pending {
    /// A command or a membership change: answered `Done` once applied.
    Write(oneshot::Sender<OperatorResponse>),
    /// A linearizable read.
    Read(ReadQuery, oneshot::Sender<OperatorResponse>),
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
        launching: fullerene_proto::ResourceVec,
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

/// The leader's clock for the commands it stamps.
fn now_ms() -> UnixMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The node loop's state.
pub(crate) struct Shell<S: RaftStore> {
    node: RaftNode<S>,
    config: ShellConfig,
    /// Every known member's address (peers and clients use the same one).
    addresses: BTreeMap<u64, SocketAddr>,
    peers: BTreeMap<u64, PeerHandle>,
    client: Arc<Client>,
    events: mpsc::Sender<Event>,
    leader_view: watch::Sender<LeaderView>,
    membership_view: watch::Sender<MembershipView>,
    /// Set when a member reported that this master was removed (see [`Event::NotAMember`]).
    removed_notice: bool,
    pending: HashMap<Token, Pending>,
    next_token: u64,
    agents: AgentLinks,
    frameworks: FrameworkLinks,
    /// Whether a learner's promotion is proposed and not yet applied.
    promotion_in_flight: bool,
    /// The offers, while this master leads.
    offers: Option<OfferManager>,
    /// When the next allocation cycle is due.
    next_allocation: Instant,
    /// Frameworks subscribed by this leader (new ids are `fw-<term>-<n>`).
    next_framework: u64,
    /// Peers with no known address, already warned about (one log line each).
    warned_no_address: std::collections::BTreeSet<u64>,
}

impl<S: RaftStore> Shell<S> {
    pub(crate) fn new(
        node: RaftNode<S>,
        config: ShellConfig,
        client: Arc<Client>,
        events: mpsc::Sender<Event>,
        leader_view: watch::Sender<LeaderView>,
        membership_view: watch::Sender<MembershipView>,
    ) -> Shell<S> {
        // The replicated addresses cover every member ever added; the command line's win
        // where both name one (an operator moving a master).
        let mut addresses = node.state().settings().master_addresses.clone();
        addresses.extend(config.members.iter().map(|(id, addr)| (*id, *addr)));
        Shell {
            agents: AgentLinks::new(config.agent_timeouts),
            frameworks: FrameworkLinks::default(),
            promotion_in_flight: false,
            offers: None,
            next_allocation: Instant::now(),
            next_framework: 1,
            membership_view,
            removed_notice: false,
            node,
            addresses,
            config,
            peers: BTreeMap::new(),
            client,
            events,
            leader_view,
            pending: HashMap::new(),
            next_token: 1,
            warned_no_address: Default::default(),
        }
    }

    /// Runs until `shutdown`, removal, or a fatal node error.
    pub(crate) async fn run<F: Future<Output = ()>>(
        &mut self,
        mut events: mpsc::Receiver<Event>,
        shutdown: F,
    ) -> Result<MasterExit, ServerError> {
        let mut ticker = tokio::time::interval(self.node.config().tick_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let restart_point = self.node.applied_index();
        self.publish_membership(restart_point);
        let view = self.membership_view.borrow().clone();
        if !view.members.is_empty() && !view.members.contains(&self.node.id()) {
            // Restarted after its removal was applied: it must not serve again.
            tracing::info!(master = self.node.id(), members = ?view.members, "this master is no longer a member; it stops serving");
            return Ok(MasterExit::Removed);
        }
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    tracing::info!(master = self.node.id(), "shutting down");
                    self.fail_pending("the master is shutting down");
                    return Ok(MasterExit::Shutdown);
                }
                _ = ticker.tick() => {
                    self.node.tick();
                    self.propose_agent_marks();
                    self.propose_framework_teardowns();
                    self.promote_learners();
                    self.allocate();
                }
                event = events.recv() => {
                    // The shell holds a sender, so the channel never closes while it runs.
                    if let Some(event) = event {
                        self.handle_event(event);
                    }
                    let mut handled = 1;
                    while handled < MAX_EVENTS_PER_CYCLE {
                        match events.try_recv() {
                            Ok(event) => self.handle_event(event),
                            Err(_) => break,
                        }
                        handled += 1;
                    }
                }
            }
            if self.removed_notice {
                self.fail_pending("this master was removed from the group");
                return Ok(MasterExit::Removed);
            }
            while self.node.has_ready() {
                let output = self.node.advance(Instant::now())?;
                if self.handle_output(output) {
                    tracing::info!(
                        master = self.node.id(),
                        "this master was removed from the group; it stops serving"
                    );
                    self.fail_pending("this master was removed from the group");
                    return Ok(MasterExit::Removed);
                }
            }
        }
    }

    /// Stops every peer sender task.
    pub(crate) fn stop_peers(&mut self) {
        self.peers.clear();
    }

    fn token(&mut self) -> Token {
        let token = Token(self.next_token);
        self.next_token += 1;
        token
    }

    fn handle_event(&mut self, event: Event) {
        match event {
            Event::Raft(message) => {
                let from = message.from;
                if let Err(error) = self.node.step(message) {
                    tracing::debug!(master = self.node.id(), from, %error, "raft message not stepped");
                }
            }
            Event::Operator(request, reply) => self.handle_operator(request, reply),
            Event::Unreachable(peer) => self.node.report_unreachable(peer),
            Event::SnapshotReport(peer, delivered) => self.node.report_snapshot(peer, delivered),
            Event::AgentRegister {
                agent_id,
                registration,
                link,
            } => self.handle_agent_register(agent_id, registration, link),
            Event::AgentHeartbeat(agent_id) => {
                if self.node.is_leader() {
                    let command =
                        self.agents
                            .heard(self.node.state(), &agent_id, Instant::now(), now_ms());
                    if let Some(command) = command {
                        self.propose_internal(command);
                    }
                }
            }
            Event::AgentStatus(agent_id, update) => self.handle_agent_status(agent_id, update),
            Event::AgentResources(agent_id, resources) => {
                if self.node.is_leader() && self.agents.link(&agent_id).is_some() {
                    self.propose_internal(Command::UpdateAgentResources {
                        agent_id,
                        resources,
                        at_ms: now_ms(),
                    });
                }
            }
            Event::AgentGone(agent_id, session) => self.agents.detach(&agent_id, session),
            Event::FrameworkSubscribe {
                call_id,
                framework_id,
                name,
                group,
                failover_timeout_ms,
                link,
            } => self.handle_subscribe(
                call_id,
                framework_id,
                name,
                group,
                failover_timeout_ms,
                link,
            ),
            Event::FrameworkCall {
                framework_id,
                session,
                call,
            } => self.handle_framework_call(framework_id, session, call),
            Event::FrameworkGone(framework_id, session) => {
                if self
                    .frameworks
                    .detach(&framework_id, session, Instant::now())
                    && self.node.is_leader()
                {
                    self.propose_internal(Command::DisconnectFramework {
                        framework_id,
                        at_ms: now_ms(),
                    });
                }
            }
            Event::NotAMember { from, as_of } => {
                // Only a view newer than ours can tell us anything: an older one may predate
                // our own addition.
                if as_of > self.node.applied_index() {
                    tracing::info!(
                        master = self.node.id(),
                        from,
                        as_of,
                        applied = self.node.applied_index(),
                        "a member says this master was removed after what it has applied; it stops serving"
                    );
                    self.removed_notice = true;
                }
            }
        }
    }

    /// The redirect a follower answers with.
    fn redirect(&self) -> OperatorResponse {
        OperatorResponse::Redirect(Redirect {
            leader: self.leader_info(),
        })
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

    fn handle_operator(
        &mut self,
        request: OperatorRequest,
        reply: oneshot::Sender<OperatorResponse>,
    ) {
        if !self.node.is_leader() {
            let _ = reply.send(self.redirect());
            return;
        }
        let token = self.token();
        let query = match request {
            OperatorRequest::ClusterStatus => ReadQuery::ClusterStatus,
            OperatorRequest::ListAgents => ReadQuery::ListAgents,
            OperatorRequest::ListFrameworks => ReadQuery::ListFrameworks,
            OperatorRequest::ListTasks { framework_id } => ReadQuery::ListTasks(framework_id),
            OperatorRequest::GroupWeights => ReadQuery::GroupWeights,
            OperatorRequest::State => ReadQuery::State,
            OperatorRequest::SetGroupWeight { group, weight } => {
                let command = Command::SetGroupWeight { group, weight };
                match self.node.propose(&command, token) {
                    Ok(()) => {
                        self.pending.insert(token, Pending::Write(reply));
                    }
                    Err(error) => {
                        let _ = reply.send(self.propose_error_response(&error));
                    }
                }
                return;
            }
            OperatorRequest::AddMaster { id, addr } => {
                let membership = self.node.membership();
                if membership.voters.contains(&id.0) || membership.learners.contains(&id.0) {
                    let _ = reply.send(OperatorResponse::Error(WireError::new(
                        ErrorCode::InvalidRequest,
                        format!("master {} is already a member", id.0),
                    )));
                    return;
                }
                // A new master joins as a learner and is promoted to voter once it has caught
                // up (see `promote_learners`): added as a voter at once, it would count in the
                // quorum while it still fetches the snapshot, and one more failure would stop
                // the group. The address travels in the change's context, so every master
                // (and any master that replays this entry later) learns where it is.
                let change = MembershipChange::to_conf_change(
                    &[MembershipChange::AddLearner(id.0)],
                    addr.to_string().into_bytes(),
                );
                self.propose_change(change, token, reply);
                return;
            }
            OperatorRequest::RemoveMaster { id } => {
                let membership = self.node.membership();
                if !membership.voters.contains(&id.0) && !membership.learners.contains(&id.0) {
                    let _ = reply.send(OperatorResponse::Error(WireError::new(
                        ErrorCode::InvalidRequest,
                        format!("master {} is not a member", id.0),
                    )));
                    return;
                }
                let change =
                    MembershipChange::to_conf_change(&[MembershipChange::Remove(id.0)], Vec::new());
                self.propose_change(change, token, reply);
                return;
            }
        };
        match self.node.read_index(token) {
            Ok(()) => {
                self.pending.insert(token, Pending::Read(query, reply));
            }
            Err(error) => {
                let _ = reply.send(self.read_error_response(&error));
            }
        }
    }

    fn propose_change(
        &mut self,
        change: raft::eraftpb::ConfChangeV2,
        token: Token,
        reply: oneshot::Sender<OperatorResponse>,
    ) {
        match self.node.propose_conf_change(change, token) {
            Ok(()) => {
                self.pending.insert(token, Pending::Write(reply));
            }
            Err(error) => {
                let _ = reply.send(self.propose_error_response(&error));
            }
        }
    }

    fn propose_error_response(&self, error: &ProposeError) -> OperatorResponse {
        match error {
            ProposeError::NotLeader { .. } => self.redirect(),
            ProposeError::ConfChangeRefused(detail) => OperatorResponse::Error(WireError::new(
                ErrorCode::InvalidRequest,
                format!("membership change refused: {detail}"),
            )),
            ProposeError::Encode(_) => OperatorResponse::Error(WireError::new(
                ErrorCode::InvalidRequest,
                error.to_string(),
            )),
            ProposeError::OutcomeUnknown => OperatorResponse::Error(WireError::new(
                ErrorCode::OutcomeUnknown,
                error.to_string(),
            )),
            _ => OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, error.to_string())),
        }
    }

    fn read_error_response(&self, error: &ReadError) -> OperatorResponse {
        match error {
            ReadError::NoLeader => OperatorResponse::Redirect(Redirect { leader: None }),
            _ => OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, error.to_string())),
        }
    }

    fn answer(&mut self, token: Token, response: OperatorResponse) {
        match self.pending.remove(&token) {
            Some(Pending::Write(reply)) | Some(Pending::Read(_, reply)) => {
                // The client may have given up (timeout); nothing to do then.
                let _ = reply.send(response);
            }
            Some(Pending::Promotion(learner)) => {
                self.promotion_in_flight = false;
                tracing::info!(learner, result = ?response, "learner promotion settled");
            }
            Some(Pending::Agent(_))
            | Some(Pending::Internal(_))
            | Some(Pending::Framework { .. }) => {
                tracing::debug!(token = token.0, "an operator answer for an agent proposal")
            }
            None => tracing::debug!(token = token.0, "answer for an unknown request"),
        }
    }

    /// Ends a command proposal: answers its operator, or acts for its agent.
    fn settle(&mut self, token: Token, settled: Settled) {
        let Some(pending) = self.pending.remove(&token) else {
            tracing::debug!(token = token.0, "result for an unknown request");
            return;
        };
        match pending {
            Pending::Write(reply) | Pending::Read(_, reply) => {
                let response = match &settled {
                    Settled::Applied(_) => OperatorResponse::Done,
                    Settled::Refused(error) => command_error_response(error),
                    Settled::Dropped(error) => self.propose_error_response(error),
                };
                let _ = reply.send(response);
            }
            Pending::Agent(pending) => self.settle_agent(pending, settled),
            Pending::Internal(command) => {
                if let Settled::Refused(error) = &settled {
                    tracing::debug!(command = command.kind(), %error, "a leader's own command was refused");
                }
                self.agents.mark_settled(&command);
                if let Command::TeardownFramework { framework_id, .. } = &command {
                    let applied = matches!(settled, Settled::Applied(_));
                    if applied {
                        tracing::info!(framework = %framework_id, "framework did not fail over in time; torn down");
                    }
                    self.frameworks.teardown_settled(framework_id, applied);
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

    fn settle_agent(&mut self, pending: AgentPending, settled: Settled) {
        match pending {
            AgentPending::Register { agent_id, link } => match settled {
                Settled::Applied(outcome) => {
                    let kill = match outcome {
                        CommandOutcome::AgentRegistered { kill, .. } => {
                            kill.into_iter().map(|k| k.task.task_id).collect()
                        }
                        _ => Vec::new(),
                    };
                    tracing::info!(agent = %agent_id, "agent registered");
                    let interval = self.agents.timeouts().heartbeat_interval;
                    link.push(MasterToAgent::Registered {
                        agent_id: agent_id.clone(),
                        heartbeat_interval_ms: u64::try_from(interval.as_millis())
                            .unwrap_or(u64::MAX),
                        kill,
                    });
                    self.agents.attach(agent_id, link, Instant::now());
                }
                Settled::Refused(error) => {
                    tracing::warn!(agent = %agent_id, %error, "agent registration refused");
                    link.push(MasterToAgent::Error(WireError::new(
                        ErrorCode::InvalidRequest,
                        error.to_string(),
                    )));
                }
                Settled::Dropped(error) => {
                    // Not committed (leadership changed): the agent registers again.
                    let redirect = Redirect {
                        leader: self.leader_info().filter(|_| !self.node.is_leader()),
                    };
                    tracing::info!(agent = %agent_id, %error, "agent registration not committed");
                    link.push(MasterToAgent::Redirect(redirect));
                }
            },
            AgentPending::Status { agent_id, ack } => {
                match &settled {
                    Settled::Applied(_) => {}
                    Settled::Refused(error) => {
                        // Retrying cannot change the answer: acknowledge so the agent stops.
                        tracing::warn!(agent = %agent_id, task = %ack.task_id, seq = ack.seq, %error, "status update refused");
                    }
                    // Not committed: no ack, the agent resends it.
                    Settled::Dropped(_) => return,
                }
                if let Some(link) = self.agents.link(&agent_id) {
                    link.push(MasterToAgent::StatusAck(ack));
                }
            }
        }
    }

    fn handle_agent_register(
        &mut self,
        agent_id: AgentId,
        registration: AgentRegistration,
        link: AgentLink,
    ) {
        if !self.node.is_leader() {
            link.push(MasterToAgent::Redirect(Redirect {
                leader: self.leader_info(),
            }));
            return;
        }
        let at_ms = now_ms();
        let AgentRegistration {
            hostname,
            resources,
            attributes,
            tasks,
            executors,
        } = registration;
        let command = if self.node.state().agents().contains_key(&agent_id) {
            let running = tasks
                .iter()
                .filter(|task| !task.state.is_terminal())
                .map(|task| TaskKey::new(task.framework_id.clone(), task.spec.id.clone()))
                .collect();
            Command::ReregisterAgent {
                agent_id: agent_id.clone(),
                hostname,
                resources,
                attributes,
                executors,
                running,
                at_ms,
            }
        } else {
            Command::RegisterAgent {
                agent_id: agent_id.clone(),
                hostname,
                resources,
                attributes,
                executors,
                at_ms,
            }
        };
        let token = self.token();
        match self.node.propose(&command, token) {
            Ok(()) => {
                self.pending.insert(
                    token,
                    Pending::Agent(AgentPending::Register { agent_id, link }),
                );
            }
            Err(error) => {
                let response = match self.propose_error_response(&error) {
                    OperatorResponse::Redirect(redirect) => MasterToAgent::Redirect(redirect),
                    _ => MasterToAgent::Error(WireError::new(
                        ErrorCode::Unavailable,
                        error.to_string(),
                    )),
                };
                link.push(response);
            }
        }
    }

    fn handle_agent_status(&mut self, agent_id: AgentId, update: StatusUpdate) {
        // Updates count only on the leader, from an agent whose registration committed here;
        // otherwise the agent resends them after it registers.
        if !self.node.is_leader() || self.agents.link(&agent_id).is_none() {
            return;
        }
        let ack = ack_of(&update);
        let command = Command::UpdateStatus {
            agent_id: agent_id.clone(),
            update,
            at_ms: now_ms(),
        };
        let token = self.token();
        if self.node.propose(&command, token).is_ok() {
            self.pending.insert(
                token,
                Pending::Agent(AgentPending::Status { agent_id, ack }),
            );
        }
    }

    fn handle_subscribe(
        &mut self,
        call_id: u64,
        framework_id: Option<FrameworkId>,
        name: String,
        group: String,
        failover_timeout_ms: u64,
        link: FrameworkLink,
    ) {
        if !self.node.is_leader() {
            link.push(MasterToFramework::Redirect(Redirect {
                leader: self.leader_info(),
            }));
            return;
        }
        let at_ms = now_ms();
        let principal = link.principal.clone();
        let (id, command) = match framework_id {
            Some(id) => (
                id.clone(),
                Command::FailoverFramework {
                    framework_id: id,
                    principal,
                    name,
                    failover_timeout_ms,
                    at_ms,
                },
            ),
            None => {
                // Unique across leaders: a term has one leader, and it counts.
                let id = FrameworkId(format!("fw-{}-{}", self.node.term(), self.next_framework));
                self.next_framework += 1;
                (
                    id.clone(),
                    Command::SubscribeFramework {
                        framework_id: id,
                        principal,
                        name,
                        group,
                        failover_timeout_ms,
                        at_ms,
                    },
                )
            }
        };
        self.propose_for_framework(command, call_id, link, FrameworkPending::Subscribe(id));
    }

    fn handle_framework_call(
        &mut self,
        framework_id: FrameworkId,
        session: u64,
        call: FrameworkCall,
    ) {
        let Some(link) = self
            .frameworks
            .link(&framework_id)
            .filter(|link| link.session == session)
            .cloned()
        else {
            // A stale session (replaced, or from before a leader change): it is being closed.
            return;
        };
        let call_id = call.call_id;
        let answer = |result: Result<CallOk, WireError>| {
            link.push(MasterToFramework::CallResult { call_id, result });
        };
        let principal = link.principal.clone();
        let at_ms = now_ms();
        match call.call {
            FrameworkRequest::Subscribe { .. } => answer(Err(WireError::new(
                ErrorCode::InvalidRequest,
                "already subscribed on this session",
            ))),
            FrameworkRequest::Kill { task_id } => {
                let command = Command::KillTask {
                    framework_id,
                    principal,
                    task_id,
                    at_ms,
                };
                self.propose_for_framework(command, call_id, link, FrameworkPending::Answer);
            }
            FrameworkRequest::Acknowledge(ack) => {
                let command = Command::AcknowledgeStatus {
                    framework_id,
                    principal,
                    task_id: ack.task_id,
                    seq: ack.seq,
                };
                self.propose_for_framework(command, call_id, link, FrameworkPending::Answer);
            }
            FrameworkRequest::Teardown => {
                let command = Command::TeardownFramework {
                    framework_id: framework_id.clone(),
                    principal: Some(principal),
                    at_ms,
                };
                self.propose_for_framework(
                    command,
                    call_id,
                    link,
                    FrameworkPending::Teardown(framework_id),
                );
            }
            FrameworkRequest::Reconcile { task_ids } => {
                for update in self.reconcile(&framework_id, &task_ids) {
                    link.push(MasterToFramework::Update(update));
                }
                answer(Ok(CallOk::Done));
            }
            FrameworkRequest::UpdateDemand(summary) => {
                let result = match self.offers.as_mut() {
                    Some(offers) => offers
                        .update_demand(self.node.state(), &framework_id, &summary)
                        .map(|()| CallOk::Done),
                    None => Err(no_offers()),
                };
                answer(result);
            }
            FrameworkRequest::Revive | FrameworkRequest::Suppress => {
                let suppress = matches!(call.call, FrameworkRequest::Suppress);
                let result = match self.offers.as_mut() {
                    Some(offers) => offers
                        .set_suppressed(self.node.state(), &framework_id, suppress)
                        .map(|()| CallOk::Done),
                    None => Err(no_offers()),
                };
                answer(result);
            }
            FrameworkRequest::Decline {
                offer_ids,
                refuse_ms,
            } => {
                let result = self.give_back(
                    &framework_id,
                    &offer_ids,
                    fullerene_proto::messages::Leftover::Decline { refuse_ms },
                );
                answer(result.map(|()| CallOk::Done));
            }
            FrameworkRequest::Yield { offer_ids } => {
                let result = self.give_back(
                    &framework_id,
                    &offer_ids,
                    fullerene_proto::messages::Leftover::Yield,
                );
                answer(result.map(|()| CallOk::Done));
            }
            FrameworkRequest::Accept {
                offer_ids,
                tasks,
                leftover,
            } => {
                let Some(offers) = self.offers.as_mut() else {
                    answer(Err(no_offers()));
                    return;
                };
                let accepted = match offers.accept(
                    self.node.state(),
                    &framework_id,
                    &offer_ids,
                    &tasks,
                    leftover,
                    at_ms,
                ) {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        answer(Err(error));
                        return;
                    }
                };
                if let Some(reoffer) = accepted.reoffer {
                    self.push_offers(vec![reoffer]);
                }
                let command = Command::LaunchTasks {
                    framework_id,
                    principal,
                    agent_id: accepted.agent.clone(),
                    tasks,
                    at_ms,
                };
                let kind = FrameworkPending::Launch {
                    agent: accepted.agent,
                    launching: accepted.launching,
                };
                self.propose_for_framework(command, call_id, link, kind);
            }
        }
    }

    /// The latest update of each task asked about (all of the framework's when `task_ids` is
    /// empty); a task the master does not know is reported LOST with reason `UnknownTask`.
    fn reconcile(
        &self,
        framework_id: &FrameworkId,
        task_ids: &[fullerene_proto::ids::TaskId],
    ) -> Vec<StatusUpdate> {
        let state = self.node.state();
        let latest = |key: &TaskKey| {
            state.tasks().get(key).map(|record| StatusUpdate {
                task_id: key.task_id.clone(),
                framework_id: key.framework_id.clone(),
                agent_id: record.agent_id.clone(),
                state: record.state,
                seq: record.seq,
                reason: record.reason.clone(),
                message: String::from("reconciliation"),
                timestamp_ms: record.updated_at_ms,
            })
        };
        if task_ids.is_empty() {
            return state
                .tasks()
                .keys()
                .filter(|key| &key.framework_id == framework_id)
                .filter_map(latest)
                .collect();
        }
        task_ids
            .iter()
            .map(|task_id| {
                let key = TaskKey::new(framework_id.clone(), task_id.clone());
                latest(&key).unwrap_or_else(|| StatusUpdate {
                    task_id: task_id.clone(),
                    framework_id: framework_id.clone(),
                    agent_id: AgentId(String::new()),
                    state: TaskState::Lost,
                    seq: 0,
                    reason: Some(StatusReason::UnknownTask),
                    message: "the master does not know this task".to_string(),
                    timestamp_ms: now_ms(),
                })
            })
            .collect()
    }

    fn propose_for_framework(
        &mut self,
        command: Command,
        call_id: u64,
        link: FrameworkLink,
        kind: FrameworkPending,
    ) {
        let token = self.token();
        match self.node.propose(&command, token) {
            Ok(()) => {
                self.pending.insert(
                    token,
                    Pending::Framework {
                        call_id,
                        link,
                        kind,
                    },
                );
            }
            Err(error) => {
                if let FrameworkPending::Launch { agent, launching } = &kind {
                    if let Some(offers) = self.offers.as_mut() {
                        offers.launch_settled(self.node.state(), agent, *launching);
                    }
                }
                let message = match self.propose_error_response(&error) {
                    OperatorResponse::Redirect(redirect) => MasterToFramework::Redirect(redirect),
                    _ => MasterToFramework::CallResult {
                        call_id,
                        result: Err(WireError::new(ErrorCode::Unavailable, error.to_string())),
                    },
                };
                link.push(message);
            }
        }
    }

    fn settle_framework(
        &mut self,
        call_id: u64,
        link: FrameworkLink,
        kind: FrameworkPending,
        settled: Settled,
    ) {
        if let FrameworkPending::Launch { agent, launching } = &kind {
            // Charged (applied) or not (refused, dropped): either way no longer held back.
            if let Some(offers) = self.offers.as_mut() {
                offers.launch_settled(self.node.state(), agent, *launching);
            }
        }
        let result = match settled {
            Settled::Applied(_) => match kind {
                FrameworkPending::Subscribe(framework_id) => {
                    tracing::info!(framework = %framework_id, principal = link.principal, "framework subscribed");
                    self.frameworks.attach(framework_id.clone(), link.clone());
                    let interval = self.agents.timeouts().heartbeat_interval;
                    Ok(CallOk::Subscribed {
                        framework_id,
                        heartbeat_interval_ms: u64::try_from(interval.as_millis())
                            .unwrap_or(u64::MAX),
                    })
                }
                FrameworkPending::Teardown(framework_id) => {
                    self.frameworks.teardown_settled(&framework_id, true);
                    Ok(CallOk::Done)
                }
                FrameworkPending::Answer | FrameworkPending::Launch { .. } => Ok(CallOk::Done),
            },
            Settled::Refused(error) => Err(command_wire_error(&error)),
            Settled::Dropped(error) => {
                if !self.node.is_leader() {
                    // Leadership moved: the framework follows the redirect it gets.
                    return;
                }
                let code = match error {
                    ProposeError::OutcomeUnknown => ErrorCode::OutcomeUnknown,
                    _ => ErrorCode::Unavailable,
                };
                Err(WireError::new(code, error.to_string()))
            }
        };
        link.push(MasterToFramework::CallResult { call_id, result });
    }

    /// On the leader: proposes promoting to voter each learner whose log is within
    /// [`PROMOTION_LAG`] entries of the leader's. One membership change is in flight at a
    /// time (raft-rs refuses a second); a refused promotion is tried again on a later tick.
    fn promote_learners(&mut self) {
        if !self.node.is_leader() || self.promotion_in_flight {
            return;
        }
        let last_index = self.node.last_index();
        let ready = {
            let status = self.node.status();
            let membership = self.node.membership();
            membership.learners.iter().copied().find(|id| {
                status
                    .progress
                    .and_then(|progress| progress.get(*id))
                    .is_some_and(|p| p.matched + PROMOTION_LAG >= last_index && p.matched > 0)
            })
        };
        let Some(learner) = ready else { return };
        let change =
            MembershipChange::to_conf_change(&[MembershipChange::AddVoter(learner)], Vec::new());
        let token = self.token();
        match self.node.propose_conf_change(change, token) {
            Ok(()) => {
                tracing::info!(
                    master = self.node.id(),
                    learner,
                    "promoting a caught-up learner to voter"
                );
                self.promotion_in_flight = true;
                self.pending.insert(token, Pending::Promotion(learner));
            }
            Err(error) => {
                tracing::debug!(learner, %error, "promotion not proposed yet");
            }
        }
    }

    /// Declines or yields offers; yielded resources are re-offered at once.
    fn give_back(
        &mut self,
        framework_id: &FrameworkId,
        offer_ids: &[fullerene_proto::OfferId],
        leftover: fullerene_proto::messages::Leftover,
    ) -> Result<(), WireError> {
        let Some(offers) = self.offers.as_mut() else {
            return Err(no_offers());
        };
        let reoffers = offers.give_back(
            self.node.state(),
            framework_id,
            offer_ids,
            leftover,
            now_ms(),
        )?;
        self.push_offers(reoffers);
        Ok(())
    }

    /// Sends offers to their frameworks, one frame per framework.
    fn push_offers(&self, offers: Vec<fullerene_proto::messages::Offer>) {
        let mut by_framework: BTreeMap<FrameworkId, Vec<fullerene_proto::messages::Offer>> =
            BTreeMap::new();
        for offer in offers {
            by_framework
                .entry(offer.framework_id.clone())
                .or_default()
                .push(offer);
        }
        for (framework_id, offers) in by_framework {
            if let Some(link) = self.frameworks.link(&framework_id) {
                link.push(MasterToFramework::Offers(offers));
            }
        }
    }

    /// On the leader, every allocation interval: rescinds what is stale and makes new offers.
    fn allocate(&mut self) {
        let now = Instant::now();
        if now < self.next_allocation {
            return;
        }
        self.next_allocation = now + self.config.allocation_interval;
        let Some(offers) = self.offers.as_mut() else {
            return;
        };
        let frameworks = &self.frameworks;
        let (made, rescinded) = offers.cycle(
            self.node.state(),
            |framework| frameworks.link(framework).is_some(),
            now_ms(),
        );
        let mut rescinds: BTreeMap<FrameworkId, Vec<fullerene_proto::OfferId>> = BTreeMap::new();
        for offer in rescinded {
            rescinds
                .entry(offer.framework_id)
                .or_default()
                .push(offer.id);
        }
        for (framework_id, offer_ids) in rescinds {
            if let Some(link) = self.frameworks.link(&framework_id) {
                link.push(MasterToFramework::Rescind { offer_ids });
            }
        }
        self.push_offers(made);
    }

    /// On the leader: tears down the frameworks absent past their failover timeout.
    fn propose_framework_teardowns(&mut self) {
        if !self.node.is_leader() {
            return;
        }
        let due = self
            .frameworks
            .due_teardowns(self.node.state(), Instant::now(), now_ms());
        for command in due {
            self.propose_internal(command);
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
            }
        }
    }

    /// On the leader: proposes the liveness marks that are due.
    fn propose_agent_marks(&mut self) {
        if !self.node.is_leader() {
            return;
        }
        let marks = self
            .agents
            .due_marks(self.node.state(), Instant::now(), now_ms());
        for command in marks {
            tracing::info!(command = command.kind(), "agent silent too long");
            self.propose_internal(command);
        }
    }

    /// Acts on one `advance`'s output; returns true when this master was removed.
    fn handle_output(&mut self, output: crate::raft_node::NodeOutput) -> bool {
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
                self.answer(token, response);
            }
        }
        for (token, result) in output.applied {
            let settled = match result {
                Ok(outcome) => {
                    if self.node.is_leader() {
                        self.agents.push_outcome(&outcome);
                        self.frameworks.push_outcome(&outcome);
                    }
                    Settled::Applied(outcome)
                }
                Err(error) => Settled::Refused(error),
            };
            self.settle(token, settled);
        }
        for (token, error) in output.dropped {
            self.settle(token, Settled::Dropped(error));
        }
        for token in output.reads_ready {
            if let Some(Pending::Read(query, reply)) = self.pending.remove(&token) {
                let _ = reply.send(self.serve_read(query));
            }
        }
        for (token, error) in output.reads_failed {
            let response = self.read_error_response(&error);
            self.answer(token, response);
        }
        if let Some(change) = output.leader_changed {
            tracing::info!(
                master = self.node.id(),
                leader = ?change.leader,
                term = change.term,
                "leader changed"
            );
            self.publish_leader();
            self.promotion_in_flight = false;
            if self.node.is_leader() {
                self.agents.on_leadership(self.node.state(), Instant::now());
                self.frameworks
                    .on_leadership(self.node.state(), Instant::now());
                match OfferManager::new(
                    self.node.state().settings(),
                    self.config.allocator_shards,
                    self.node.term(),
                    u64::try_from(self.config.offer_ttl.as_millis()).unwrap_or(u64::MAX),
                ) {
                    Ok(offers) => self.offers = Some(offers),
                    Err(error) => {
                        tracing::error!(%error, "cannot start the allocator; no offers will be made")
                    }
                }
                let announced = self
                    .node
                    .state()
                    .settings()
                    .master_http_addresses
                    .get(&self.node.id())
                    .copied();
                if announced != self.config.http_addr {
                    self.propose_internal(Command::AnnounceMasterHttp {
                        master: self.node.id(),
                        addr: self.config.http_addr,
                    });
                }
            } else {
                // No offer outlives its leader; frameworks void theirs on the redirect.
                self.offers = None;
                let redirect = Redirect {
                    leader: self.leader_info(),
                };
                self.agents.on_lost_leadership(redirect.clone());
                self.frameworks.on_lost_leadership(redirect);
            }
        }
        if let Some(index) = output.snapshot_installed {
            self.publish_membership(index);
            for (id, addr) in &self.node.state().settings().master_addresses {
                self.addresses.entry(*id).or_insert(*addr);
            }
            let view = self.membership_view.borrow().clone();
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

    fn publish_leader(&self) {
        let leader_http = self.node.leader().and_then(|leader| {
            self.node
                .state()
                .settings()
                .master_http_addresses
                .get(&leader)
                .copied()
        });
        let view = LeaderView {
            leader: self.leader_info(),
            is_self: self.node.is_leader(),
            leader_http,
        };
        self.leader_view.send_if_modified(|current| {
            let changed = *current != view;
            *current = view;
            changed
        });
    }

    /// Publishes the current members, true as of log index `as_of`.
    fn publish_membership(&self, as_of: u64) {
        let membership = self.node.membership();
        let members = membership
            .voters
            .iter()
            .chain(&membership.learners)
            .copied()
            .collect();
        self.membership_view
            .send_replace(MembershipView { members, as_of });
    }

    /// Records the addresses a membership change carries, and forgets removed masters.
    fn learn_membership(&mut self, change: &raft::eraftpb::ConfChangeV2) {
        let context_addr = std::str::from_utf8(&change.context)
            .ok()
            .and_then(|text| text.parse::<SocketAddr>().ok());
        for single in &change.changes {
            match single.get_change_type() {
                ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                    if let Some(addr) = context_addr {
                        self.addresses.insert(single.node_id, addr);
                    }
                }
                ConfChangeType::RemoveNode => {
                    if single.node_id != self.node.id() {
                        self.addresses.remove(&single.node_id);
                        self.peers.remove(&single.node_id);
                    }
                }
            }
        }
        // A new address may be the leader's (a master that joined and was elected).
        self.publish_leader();
    }

    fn send_messages(&mut self, messages: Vec<Message>) {
        let mut batches: BTreeMap<u64, PeerBatch> = BTreeMap::new();
        for message in messages {
            let to = message.to;
            let is_snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
            let bytes = match message.write_to_bytes() {
                Ok(bytes) => bytes,
                Err(error) => {
                    tracing::error!(to, %error, "cannot encode a raft message");
                    continue;
                }
            };
            let batch = batches.entry(to).or_default();
            batch.messages.push(bytes);
            batch.has_snapshot |= is_snapshot;
        }
        for (to, batch) in batches {
            let has_snapshot = batch.has_snapshot;
            let delivered = match self.peer_handle(to) {
                Some(handle) => handle.try_send(batch),
                None => false,
            };
            if !delivered {
                self.node.report_unreachable(to);
                if has_snapshot {
                    self.node.report_snapshot(to, false);
                }
            }
        }
    }

    fn peer_handle(&mut self, to: u64) -> Option<&PeerHandle> {
        if !self.peers.contains_key(&to) {
            let Some(&addr) = self.addresses.get(&to) else {
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

    fn serve_read(&self, query: ReadQuery) -> OperatorResponse {
        let state = self.node.state();
        match query {
            ReadQuery::ClusterStatus => OperatorResponse::ClusterStatus(self.cluster_status()),
            ReadQuery::ListAgents => OperatorResponse::Agents(self.agent_infos()),
            ReadQuery::ListFrameworks => OperatorResponse::Frameworks(
                state
                    .frameworks()
                    .keys()
                    .filter_map(|framework| state.framework_info(framework))
                    .collect(),
            ),
            ReadQuery::ListTasks(framework) => OperatorResponse::Tasks(
                state
                    .tasks()
                    .keys()
                    .filter(|key| framework.as_ref().is_none_or(|f| &key.framework_id == f))
                    .filter_map(|key| state.task_info(key))
                    .collect(),
            ),
            ReadQuery::GroupWeights => {
                OperatorResponse::GroupWeights(state.settings().group_weights.clone())
            }
            ReadQuery::State => OperatorResponse::State(ClusterView {
                leader: MasterId(self.node.id()),
                applied: self.node.applied_index(),
                agents: self.agent_infos(),
                frameworks: state
                    .frameworks()
                    .keys()
                    .filter_map(|framework| state.framework_info(framework))
                    .collect(),
                offers: self
                    .offers
                    .as_ref()
                    .map(|offers| offers.offers().cloned().collect())
                    .unwrap_or_default(),
                tasks: state
                    .tasks()
                    .keys()
                    .filter_map(|key| state.task_info(key))
                    .collect(),
                groups: state
                    .allocation()
                    .deficits()
                    .iter()
                    .map(|(_, group)| GroupInfo {
                        name: group.name.clone(),
                        weight: group.weight,
                        frameworks: group.frameworks,
                        share: group.share,
                        held: group.held,
                        deficit: group.deficit,
                    })
                    .collect(),
            }),
        }
    }

    /// Every agent as operators see it, with the leader's session details.
    fn agent_infos(&self) -> Vec<fullerene_proto::messages::AgentInfo> {
        let state = self.node.state();
        state
            .agents()
            .keys()
            .filter_map(|agent| state.agent_info(agent))
            .map(|mut info| {
                self.agents.decorate(&mut info);
                info
            })
            .collect()
    }

    /// The leader's view of the group: each member's matched index comes from the leader's
    /// progress tracker; its lag is how far that is behind the leader's last index.
    fn cluster_status(&self) -> ClusterStatus {
        let status = self.node.status();
        let membership = self.node.membership();
        let last_index = self.node.last_index();
        let unknown_addr = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut members = Vec::new();
        let voters = membership.voters.iter().map(|id| (*id, true));
        let learners = membership.learners.iter().map(|id| (*id, false));
        for (id, voter) in voters.chain(learners) {
            let matched = if id == self.node.id() {
                last_index
            } else {
                status
                    .progress
                    .and_then(|progress| progress.get(id))
                    .map_or(0, |progress| progress.matched)
            };
            members.push(MemberStatus {
                id: MasterId(id),
                addr: self.addresses.get(&id).copied().unwrap_or(unknown_addr),
                matched,
                lag: last_index.saturating_sub(matched),
                voter,
            });
        }
        ClusterStatus {
            this: MasterId(self.node.id()),
            leader: self.leader_info(),
            term: self.node.term(),
            commit: self.node.commit_index(),
            applied: self.node.applied_index(),
            members,
        }
    }

    /// Answers every waiting request: reads simply failed, but a write already in the log
    /// may still commit under the next leader, so its outcome is unknown.
    fn fail_pending(&mut self, why: &str) {
        for (_, pending) in self.pending.drain() {
            let (code, reply) = match pending {
                Pending::Write(reply) => (ErrorCode::OutcomeUnknown, reply),
                Pending::Read(_, reply) => (ErrorCode::Unavailable, reply),
                // Agents reconnect and resend on their own.
                Pending::Agent(_) | Pending::Internal(_) | Pending::Promotion(_) => continue,
                Pending::Framework { call_id, link, .. } => {
                    link.push(MasterToFramework::CallResult {
                        call_id,
                        result: Err(WireError::new(ErrorCode::OutcomeUnknown, why)),
                    });
                    continue;
                }
            };
            let _ = reply.send(OperatorResponse::Error(WireError::new(code, why)));
        }
    }
}

fn command_error_response(error: &CommandError) -> OperatorResponse {
    OperatorResponse::Error(WireError::new(ErrorCode::InvalidRequest, error.to_string()))
}

/// The answer to offer calls on a master that makes none (not leading, or its allocator could
/// not start).
fn no_offers() -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        "this master makes no offers now (it is not leading); retry",
    )
}

/// The wire error a framework gets for a refused command.
fn command_wire_error(error: &CommandError) -> WireError {
    let code = match error {
        CommandError::UnknownAgent(_)
        | CommandError::AgentLost(_)
        | CommandError::AgentNotActive { .. } => ErrorCode::UnknownAgent,
        CommandError::UnknownFramework(_) | CommandError::FrameworkTornDown(_) => {
            ErrorCode::UnknownFramework
        }
        CommandError::NotFrameworkOwner { .. } => ErrorCode::Unauthorized,
        CommandError::UnknownTask(_) => ErrorCode::UnknownTask,
        CommandError::DuplicateTask(_) => ErrorCode::DuplicateTask,
        CommandError::InsufficientResources { .. } => ErrorCode::InsufficientResources,
        CommandError::UnknownExecutor { .. } => ErrorCode::UnknownExecutor,
        CommandError::Accounting(_) => ErrorCode::Internal,
        _ => ErrorCode::InvalidRequest,
    };
    WireError::new(code, error.to_string())
}
