//! The task that owns the [`RaftNode`]: ticks, inbound events, `advance`, and the answers.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use fullerene_proto::ids::{FrameworkId, MasterId};
use fullerene_proto::messages::{
    ClusterStatus, ErrorCode, LeaderInfo, MemberStatus, OperatorRequest, OperatorResponse,
    Redirect, WireError,
};
use fullerene_proto::transport::Client;
use protobuf::Message as _;
use raft::eraftpb::{ConfChangeType, Message, MessageType};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;

use super::peer::{self, PeerBatch, PeerHandle};
use super::{LeaderView, MasterExit, ServerError, ShellConfig};
use crate::raft_node::{MembershipChange, ProposeError, RaftNode, ReadError, Token};
use crate::state::{Command, CommandError};
use crate::storage::RaftStore;

/// Events queued for the node loop before senders wait (peer sessions then apply backpressure
/// to their QUIC streams).
pub(crate) const EVENT_QUEUE: usize = 8192;

/// Events handled per wake-up before `advance` runs: bounds the latency one burst adds to
/// ticks and to the other peers' messages.
const MAX_EVENTS_PER_CYCLE: usize = 4096;

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
}

/// A read waiting for its ReadIndex confirmation.
#[derive(Debug)]
enum ReadQuery {
    ClusterStatus,
    ListAgents,
    ListFrameworks,
    ListTasks(Option<FrameworkId>),
    GroupWeights,
}

/// A request waiting for the node's answer.
#[derive(Debug)]
enum Pending {
    /// A command or a membership change: answered `Done` once applied.
    Write(oneshot::Sender<OperatorResponse>),
    /// A linearizable read.
    Read(ReadQuery, oneshot::Sender<OperatorResponse>),
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
    pending: HashMap<Token, Pending>,
    next_token: u64,
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
    ) -> Shell<S> {
        Shell {
            node,
            addresses: config.members.clone(),
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
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    tracing::info!(master = self.node.id(), "shutting down");
                    self.fail_pending("the master is shutting down");
                    return Ok(MasterExit::Shutdown);
                }
                _ = ticker.tick() => self.node.tick(),
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
                if self.node.membership().voters.contains(&id.0) {
                    let _ = reply.send(OperatorResponse::Error(WireError::new(
                        ErrorCode::InvalidRequest,
                        format!("master {} is already a member", id.0),
                    )));
                    return;
                }
                // The address travels in the change's context, so every master (and any
                // master that replays this entry later) learns where the new one is.
                let change = MembershipChange::to_conf_change(
                    &[MembershipChange::AddVoter(id.0)],
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
            None => tracing::debug!(token = token.0, "answer for an unknown request"),
        }
    }

    /// Acts on one `advance`'s output; returns true when this master was removed.
    fn handle_output(&mut self, output: crate::raft_node::NodeOutput) -> bool {
        self.send_messages(output.messages_to_send);
        for applied in output.membership {
            self.learn_membership(&applied.change);
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
            let response = match result {
                Ok(_) => OperatorResponse::Done,
                Err(error) => command_error_response(&error),
            };
            self.answer(token, response);
        }
        for (token, error) in output.dropped {
            let response = self.propose_error_response(&error);
            self.answer(token, response);
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
        }
        if let Some(index) = output.snapshot_installed {
            tracing::info!(
                master = self.node.id(),
                index,
                "installed a snapshot from the leader"
            );
        }
        output.removed_self
    }

    fn publish_leader(&self) {
        let view = LeaderView {
            leader: self.leader_info(),
            is_self: self.node.is_leader(),
        };
        self.leader_view.send_if_modified(|current| {
            let changed = *current != view;
            *current = view;
            changed
        });
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
            ReadQuery::ListAgents => OperatorResponse::Agents(
                state
                    .agents()
                    .keys()
                    .filter_map(|agent| state.agent_info(agent))
                    .collect(),
            ),
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
        }
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

    fn fail_pending(&mut self, why: &str) {
        for (_, pending) in self.pending.drain() {
            let (Pending::Write(reply) | Pending::Read(_, reply)) = pending;
            let _ = reply.send(OperatorResponse::Error(WireError::new(
                ErrorCode::Unavailable,
                why,
            )));
        }
    }
}

fn command_error_response(error: &CommandError) -> OperatorResponse {
    OperatorResponse::Error(WireError::new(ErrorCode::InvalidRequest, error.to_string()))
}
