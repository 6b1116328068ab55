//! The accept loop and the per-session tasks: peers, operators, agents and frameworks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fullerene_proto::ids::FrameworkId;
use fullerene_proto::messages::{
    AgentToMaster, ErrorCode, FrameworkCall, MasterToAgent, OperatorRequest, OperatorResponse,
    PeerMessage, SessionOpen, WireError,
};
use fullerene_proto::time::SystemClock;
use fullerene_transport::{Connection, PeerIdentity, Role, Server, Session, StreamErrorCode};
use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::sync::{mpsc, oneshot, watch};

use super::event_hub::EventHub;
use super::files::{
    read_task_file, AgentFiles, FileError, Reader, ReadsInFlight, MAX_READS_PER_AGENT,
};
use super::node_loop::Event;
use super::{LeaderView, MembershipView};
use crate::core::session_rules::{
    agent_must_register_first, call_cost, ends_agent_session, ends_framework_session,
    refuse_framework_call, refuse_rate_limited, subscribed_as, subscription, CallBudget,
    ClientLimits, ConnectionCounts,
};
use crate::core::{AgentRegistration, Input, SessionId};

/// What every session task needs.
#[derive(Debug)]
pub(crate) struct SessionContext {
    /// This master's Raft id.
    pub this: u64,
    /// Its ring of recent events (answers `Events` without the node loop).
    pub event_hub: Arc<EventHub>,
    /// The node loop's inbox for clients' events.
    pub events: mpsc::Sender<Event>,
    /// The node loop's inbox for peers' Raft messages, taken before the clients' events.
    pub peer_events: mpsc::Sender<Event>,
    /// Who leads.
    pub leader: watch::Receiver<LeaderView>,
    /// Who the members are.
    pub membership: watch::Receiver<MembershipView>,
    /// How long an operator request waits for the node's answer.
    pub request_timeout: Duration,
    /// What one framework or agent may ask.
    pub limits: ClientLimits,
    /// The clock the call budgets refill by.
    pub clock: SystemClock,
    /// Each principal's call budget (by role and id), shared by all its sessions.
    pub budgets: Mutex<HashMap<String, CallBudget>>,
    /// Open connections per certificate.
    pub connections: Mutex<ConnectionCounts>,
    /// The agents' sessions, for reads of their tasks' sandbox files.
    pub agent_files: AgentFiles,
}

impl SessionContext {
    /// Takes one call from `principal`'s budget; when it is spent, how long until a call is
    /// allowed again.
    fn take_call(&self, principal: &str, cost: u32) -> Result<(), Duration> {
        let now = self.clock.monotonic();
        let mut budgets = self
            .budgets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Looked up before inserting: every call comes here, a new principal rarely.
        if let Some(budget) = budgets.get_mut(principal) {
            return budget.take(now, cost);
        }
        budgets
            .entry(principal.to_string())
            .or_insert_with(|| CallBudget::new(&self.limits, now))
            .take(now, cost)
    }

    /// Admits a connection of `peer`, or says why it is refused (frameworks' and agents'
    /// certificates are limited; the cluster's own, operators' and masters', are not).
    fn admit(&self, peer: &PeerIdentity) -> Result<Option<ConnectionGuard<'_>>, String> {
        if !matches!(peer.role, Role::Framework | Role::Agent) {
            return Ok(None);
        }
        let key = peer.to_string();
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(&key, self.limits.connections_per_certificate)?;
        Ok(Some(ConnectionGuard { context: self, key }))
    }
}

/// An admitted connection: released when dropped, however its task ends.
struct ConnectionGuard<'a> {
    context: &'a SessionContext,
    key: String,
}

impl Drop for ConnectionGuard<'_> {
    fn drop(&mut self) {
        self.context
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(&self.key);
    }
}

/// Accepts connections until `stop` fires, then closes the endpoint (every connection is
/// closed with an orderly close code).
pub(crate) async fn accept_loop(
    mut server: Server,
    context: Arc<SessionContext>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = server.accept() => match accepted {
                Some(Ok(connection)) => {
                    tokio::spawn(serve_connection(connection, Arc::clone(&context)));
                }
                Some(Err(error)) => tracing::debug!(%error, "connection refused"),
                None => break,
            },
        }
    }
    server.close();
    // Bounded: a peer that never acknowledges the close must not hold up the exit.
    let _ = tokio::time::timeout(Duration::from_millis(500), server.wait_idle()).await;
}

async fn serve_connection(connection: Connection, context: Arc<SessionContext>) {
    let _admitted = match context.admit(connection.peer()) {
        Ok(guard) => guard,
        Err(why) => {
            tracing::warn!(peer = %connection.peer(), why, "connection refused: too many connections");
            metrics::counter!("fullerene_master_connections_refused_total", "reason" => "per_certificate").increment(1);
            connection.close(&format!("refused: {why}"));
            return;
        }
    };
    loop {
        match connection.accept_session().await {
            Ok(session) => {
                tokio::spawn(serve_session(
                    session,
                    connection.remote_address(),
                    Arc::clone(&context),
                ));
            }
            Err(error) => {
                tracing::debug!(peer = %connection.peer(), %error, "connection ended");
                return;
            }
        }
    }
}

async fn serve_session(
    session: Session,
    remote: std::net::SocketAddr,
    context: Arc<SessionContext>,
) {
    match session.kind {
        SessionOpen::Peer => serve_peer(session, &context).await,
        SessionOpen::Operator => serve_operator(session, &context).await,
        SessionOpen::Agent => serve_agent(session, remote, &context).await,
        SessionOpen::Framework => serve_framework(session, &context).await,
    }
}

/// Raft traffic from another master. The transport admits `Peer` sessions from master
/// certificates only; each message's `from` must be the id in that certificate, so a master
/// cannot speak for another. A message too large for one frame (a big snapshot) arrives as
/// consecutive `RaftPart`s. A master that is not a member is told so on its own session
/// (`NotAMember`), so that one which missed its removal stops serving.
async fn serve_peer(mut session: Session, context: &SessionContext) {
    let Some(from) = session.peer.master_id() else {
        tracing::warn!(peer = %session.peer, "peer session from a certificate without a master id");
        session.rx.stop(StreamErrorCode::SessionRefused);
        return;
    };
    let mut assembling: Option<(usize, Vec<u8>)> = None;
    loop {
        let frame = match session.rx.recv::<PeerMessage>().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(peer = from.0, %error, "peer session ended");
                return;
            }
        };
        let messages = match frame {
            PeerMessage::Raft(messages) if assembling.is_none() => messages,
            PeerMessage::RaftPart { total, bytes } => {
                match add_part(&mut assembling, total, bytes) {
                    Ok(Some(whole)) => vec![whole],
                    Ok(None) => continue,
                    Err(problem) => {
                        tracing::warn!(
                            peer = from.0,
                            problem,
                            "bad multi-part raft message; closing the session"
                        );
                        session.rx.stop(StreamErrorCode::MalformedFrame);
                        return;
                    }
                }
            }
            PeerMessage::Raft(_) | PeerMessage::NotAMember { .. } => {
                tracing::warn!(peer = from.0, "unexpected peer frame; closing the session");
                session.rx.stop(StreamErrorCode::MalformedFrame);
                return;
            }
        };
        let not_a_member = {
            let view = context.membership.borrow();
            (!view.members.is_empty() && !view.members.contains(&from.0)).then_some(view.as_of)
        };
        if let Some(as_of) = not_a_member {
            tracing::info!(
                peer = from.0,
                as_of,
                "raft traffic from a master that is not a member; telling it"
            );
            if session
                .tx
                .send(&PeerMessage::NotAMember { as_of })
                .await
                .is_ok()
            {
                let _ = session.tx.finish().await;
            }
            session.rx.stop(StreamErrorCode::SessionRefused);
            return;
        }
        for bytes in messages {
            let message = match Message::parse_from_bytes(&bytes) {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!(peer = from.0, %error, "undecodable raft message; closing the session");
                    session.rx.stop(StreamErrorCode::MalformedFrame);
                    return;
                }
            };
            if message.from != from.0 || message.to != context.this {
                tracing::warn!(
                    peer = from.0,
                    claimed_from = message.from,
                    to = message.to,
                    "raft message with a foreign sender or recipient; closing the session"
                );
                session.rx.stop(StreamErrorCode::SessionRefused);
                return;
            }
            if context
                .peer_events
                .send(Event::Input(Input::Raft(message)))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Adds one `RaftPart` to the message being assembled; returns the whole message once its
/// parts add up to its announced length.
fn add_part(
    assembling: &mut Option<(usize, Vec<u8>)>,
    total: u64,
    bytes: Vec<u8>,
) -> Result<Option<Vec<u8>>, String> {
    let total = usize::try_from(total)
        .ok()
        .filter(|&total| total <= fullerene_proto::codec::MAX_LARGE_BYTES)
        .ok_or_else(|| format!("a raft message of {total} bytes is over the limit"))?;
    let (expected, buffer) = assembling.get_or_insert_with(|| (total, Vec::new()));
    if *expected != total {
        return Err(format!(
            "a part announces {total} bytes inside a message of {expected}"
        ));
    }
    if bytes.is_empty() || buffer.len() + bytes.len() > total {
        return Err(format!("parts overrun the announced {total} bytes"));
    }
    buffer.extend_from_slice(&bytes);
    if buffer.len() < total {
        return Ok(None);
    }
    Ok(assembling.take().map(|(_, whole)| whole))
}

async fn serve_operator(mut session: Session, context: &SessionContext) {
    loop {
        let request = match session.rx.recv::<OperatorRequest>().await {
            Ok(Some(request)) => request,
            Ok(None) => break,
            Err(error) => {
                tracing::debug!(peer = %session.peer, %error, "operator session ended");
                return;
            }
        };
        // A write that was handed to the node may commit even if no answer comes in time.
        let lost_answer = if request.is_idempotent() {
            ErrorCode::Unavailable
        } else {
            ErrorCode::OutcomeUnknown
        };
        if let OperatorRequest::Events {
            since,
            limit,
            wait_ms,
        } = request
        {
            let response = events_page(context, since, limit, wait_ms).await;
            if let Err(error) = session.tx.send(&within_frame(response)).await {
                tracing::debug!(peer = %session.peer, %error, "cannot answer the operator");
                return;
            }
            continue;
        }
        if let OperatorRequest::ReadTaskFile(read) = request {
            let response = read_for_operator(context, read).await;
            if let Err(error) = session.tx.send(&response).await {
                tracing::debug!(peer = %session.peer, %error, "cannot answer the operator");
                return;
            }
            continue;
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        let response = if context
            .events
            .send(Event::Operator {
                principal: session.peer.id.clone(),
                request,
                reply: reply_tx,
            })
            .await
            .is_err()
        {
            unavailable("the master is shutting down")
        } else {
            match tokio::time::timeout(context.request_timeout, reply_rx).await {
                Ok(Ok(response)) => response,
                Ok(Err(_)) => OperatorResponse::Error(WireError::new(
                    lost_answer,
                    "the master is shutting down",
                )),
                Err(_) => OperatorResponse::Error(WireError::new(
                    lost_answer,
                    format!(
                        "no answer within {:?} (no quorum, or the leader changed)",
                        context.request_timeout
                    ),
                )),
            }
        };
        let response = within_frame(response);
        if let Err(error) = session.tx.send(&response).await {
            tracing::debug!(peer = %session.peer, %error, "cannot answer the operator");
            return;
        }
    }
    let _ = session.tx.finish().await;
}

/// The answer to an operator's `Events` request, from this master's ring, off the node loop:
/// a redirect on a follower (as every read), else the events after `since`, waiting up to
/// `wait_ms` (at most half the request timeout) when there is none yet.
async fn events_page(
    context: &SessionContext,
    since: Option<u64>,
    limit: u32,
    wait_ms: u64,
) -> OperatorResponse {
    let leader = context.leader.borrow().clone();
    if !leader.is_self {
        return OperatorResponse::Redirect(fullerene_proto::messages::Redirect {
            leader: leader.leader,
        });
    }
    let limit = (limit as usize).clamp(1, fullerene_proto::limits::MAX_PAGE_ITEMS);
    let mut document = context.event_hub.read(since, limit);
    if let (Some(since), true) = (since, document.events.is_empty() && !document.missed) {
        let patience = Duration::from_millis(wait_ms).min(context.request_timeout / 2);
        if context.event_hub.wait_after(since, patience).await {
            document = context.event_hub.read(Some(since), limit);
        }
    }
    match serde_json::to_string(&document) {
        Ok(json) => OperatorResponse::Events(json),
        Err(error) => OperatorResponse::Error(WireError::new(
            ErrorCode::Internal,
            format!("the events cannot be encoded: {error}"),
        )),
    }
}

/// A sandbox file read for an operator's session, with the QUIC session's answers: a
/// redirect from a follower, a typed error otherwise.
async fn read_for_operator(
    context: &SessionContext,
    read: fullerene_proto::messages::TaskFileRead,
) -> OperatorResponse {
    match read_task_file(context, &Reader::Operator, read).await {
        Ok((_, chunk)) => OperatorResponse::File(chunk),
        Err(FileError::NotLeader) => {
            OperatorResponse::Redirect(fullerene_proto::messages::Redirect {
                leader: context.leader.borrow().leader.clone(),
            })
        }
        Err(error) => {
            let code = match &error {
                FileError::UnknownFramework(_) => ErrorCode::UnknownFramework,
                FileError::UnknownTask(_) => ErrorCode::UnknownTask,
                FileError::NotOwner(..) => ErrorCode::Unauthorized,
                FileError::NoSandbox(_) | FileError::Refused(_) => ErrorCode::InvalidRequest,
                FileError::AgentGone(_)
                | FileError::Busy(_)
                | FileError::Timeout(_)
                | FileError::ShuttingDown
                | FileError::NotLeader => ErrorCode::Unavailable,
            };
            OperatorResponse::Error(WireError::new(code, error.to_string()))
        }
    }
}

/// `response`, or an error saying why it cannot be sent when it is over the frame limit: the
/// listings are paged, so only an answer that cannot be paged (the whole cluster's `State` of
/// a large cluster) gets here, and its session must not be closed for it (the client would
/// retry into the same failure).
fn within_frame(response: OperatorResponse) -> OperatorResponse {
    match fullerene_proto::codec::encoded_size(&response) {
        Ok(size) if size <= fullerene_proto::codec::MAX_MESSAGE_BYTES => response,
        Ok(size) => OperatorResponse::Error(WireError::new(
            ErrorCode::TooLarge,
            format!(
                "the answer is {size} bytes, over the {}-byte message limit: list agents, \
                 frameworks and tasks page by page instead",
                fullerene_proto::codec::MAX_MESSAGE_BYTES
            ),
        )),
        Err(error) => OperatorResponse::Error(WireError::new(
            ErrorCode::Internal,
            format!("the answer cannot be encoded: {error}"),
        )),
    }
}

fn unavailable(message: &str) -> OperatorResponse {
    OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, message))
}

/// Distinguishes the sessions of one agent or framework (a reconnect may overlap the old
/// session's end).
static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn new_session() -> SessionId {
    SessionId(SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// How long a push may wait for the peer to read (QUIC flow control) before the session is
/// ended: a peer that stops reading would otherwise hold what was pushed to it (offers,
/// above all) while the master waits, and it resynchronises when it comes back.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends a pushed frame; `false` when it failed or the peer did not take it within
/// [`SEND_TIMEOUT`] (the session then ends).
async fn sent_in_time<T: serde::Serialize>(session: &mut Session, message: &T) -> bool {
    match tokio::time::timeout(SEND_TIMEOUT, session.tx.send(message)).await {
        Ok(result) => result.is_ok(),
        Err(_) => {
            tracing::warn!(peer = %session.peer, timeout = ?SEND_TIMEOUT, "the peer does not read what is sent to it; ending its session");
            metrics::counter!("fullerene_master_sessions_ended_not_reading_total").increment(1);
            session.rx.stop(StreamErrorCode::SessionRefused);
            false
        }
    }
}

/// Frames queued for one agent before pushes are dropped (the agent then re-registers).
const AGENT_QUEUE: usize = 4096;

/// An agent's session. The first frame must be `Register`; the node loop answers it once the
/// registration commits (or redirects). Heartbeats are answered here; status updates and
/// resource changes go to the node loop, which acknowledges updates after they commit and
/// pushes launches and kills through the session's queue.
async fn serve_agent(mut session: Session, remote: std::net::SocketAddr, context: &SessionContext) {
    let Some(agent_id) = session.peer.agent_id() else {
        tracing::warn!(peer = %session.peer, "agent session from a certificate without an agent id");
        session.rx.stop(StreamErrorCode::SessionRefused);
        return;
    };
    let registration = match session.rx.recv::<AgentToMaster>().await {
        Ok(Some(AgentToMaster::Register {
            hostname,
            resources,
            attributes,
            tasks,
            executors,
            isolation,
        })) => AgentRegistration {
            hostname,
            resources,
            attributes,
            tasks,
            executors,
            isolation,
        },
        Ok(Some(_)) => {
            if session.tx.send(&agent_must_register_first()).await.is_ok() {
                let _ = session.tx.finish().await;
            }
            return;
        }
        Ok(None) | Err(_) => return,
    };
    let id = new_session();
    let budget_key = session.peer.to_string();
    let (outbound, mut queue) = mpsc::channel(AGENT_QUEUE);
    // Reads of the agent's sandbox files come straight to this task, not through the node
    // loop (see `super::files`).
    let (reads_tx, mut reads) = mpsc::channel(MAX_READS_PER_AGENT);
    let mut in_flight = ReadsInFlight::default();
    context.agent_files.opened(agent_id.clone(), id, reads_tx);
    let registered = context
        .events
        .send(Event::AgentRegister {
            agent_id: agent_id.clone(),
            session: id,
            address: remote,
            registration,
            outbound,
        })
        .await;
    if registered.is_err() {
        context.agent_files.closed(&agent_id, id);
        return;
    }
    loop {
        tokio::select! {
            Some(pending) = reads.recv() => {
                if let Some(message) = in_flight.start(pending) {
                    if !sent_in_time(&mut session, &message).await {
                        break;
                    }
                }
            }
            pushed = queue.recv() => {
                let Some(message) = pushed else { break };
                let ends = ends_agent_session(&message);
                if !sent_in_time(&mut session, &message).await || ends {
                    break;
                }
            }
            frame = session.rx.recv::<AgentToMaster>() => {
                // Over its rate an agent is slowed, not refused: its frames are status updates
                // that must not be lost, so the session waits before taking them on.
                if let Err(retry_after) = context.take_call(&budget_key, 1) {
                    metrics::counter!("fullerene_master_calls_rate_limited_total", "role" => "agent").increment(1);
                    tokio::time::sleep(retry_after).await;
                }
                let event = match frame {
                    Ok(Some(AgentToMaster::Heartbeat { seq })) => {
                        if session.tx.send(&MasterToAgent::HeartbeatAck { seq }).await.is_err() {
                            break;
                        }
                        Input::AgentHeartbeat(agent_id.clone())
                    }
                    Ok(Some(AgentToMaster::Status(update))) => {
                        if update.agent_id != agent_id {
                            tracing::warn!(agent = %agent_id, claimed = %update.agent_id, "status update for another agent; closing the session");
                            session.rx.stop(StreamErrorCode::SessionRefused);
                            break;
                        }
                        Input::AgentStatus(agent_id.clone(), update)
                    }
                    Ok(Some(AgentToMaster::UpdateResources { resources })) => {
                        Input::AgentResources(agent_id.clone(), resources)
                    }
                    Ok(Some(AgentToMaster::FileRead(answer))) => {
                        in_flight.answered(answer.request, answer.outcome);
                        continue;
                    }
                    Ok(Some(AgentToMaster::Register { .. })) => {
                        tracing::warn!(agent = %agent_id, "a second Register on one session; closing it");
                        session.rx.stop(StreamErrorCode::SessionRefused);
                        break;
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(agent = %agent_id, %error, "agent session ended");
                        break;
                    }
                };
                if context.events.send(Event::Input(event)).await.is_err() {
                    break;
                }
            }
        }
    }
    context.agent_files.closed(&agent_id, id);
    let _ = session.tx.finish().await;
    let _ = context
        .events
        .send(Event::Input(Input::AgentGone(agent_id, id)))
        .await;
}

/// Frames queued for one framework before pushes are dropped (it reconciles when it
/// reconnects).
const FRAMEWORK_QUEUE: usize = 4096;

/// How long an ending framework session waits for the framework to receive its last frames
/// before the connection closes.
const FRAMEWORK_LINGER: Duration = Duration::from_secs(2);

/// A framework's session. The first call must be `Subscribe`; the node loop answers it once
/// the subscription commits (or redirects). Later calls are passed to the node loop with the
/// framework's id, which is known from the `Subscribed` answer; pushes (offers, rescinds,
/// updates, answers) arrive through the session's queue.
async fn serve_framework(mut session: Session, context: &SessionContext) {
    let principal = session.peer.id.clone();
    let budget_key = session.peer.to_string();
    let Ok(Some(first)) = session.rx.recv::<FrameworkCall>().await else {
        return;
    };
    let subscription = match subscription(first, principal.clone()) {
        Ok(subscription) => subscription,
        Err(reply) => {
            if session.tx.send(&*reply).await.is_ok() {
                let _ = session.tx.finish().await;
            }
            return;
        }
    };
    let id = new_session();
    let (outbound, mut queue) = mpsc::channel(FRAMEWORK_QUEUE);
    let subscribe = Event::FrameworkSubscribe {
        session: id,
        subscription,
        outbound,
    };
    if context.events.send(subscribe).await.is_err() {
        return;
    }
    let mut subscribed: Option<FrameworkId> = None;
    loop {
        tokio::select! {
            pushed = queue.recv() => {
                let Some(message) = pushed else { break };
                if let Some(framework_id) = subscribed_as(&message) {
                    subscribed = Some(framework_id.clone());
                }
                let ends = ends_framework_session(subscribed.is_some(), &message);
                if !sent_in_time(&mut session, &message).await || ends {
                    break;
                }
            }
            frame = session.rx.recv::<FrameworkCall>() => {
                let call = match frame {
                    Ok(Some(call)) => call,
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(principal, %error, "framework session ended");
                        break;
                    }
                };
                if let Some(reply) = refuse_framework_call(subscribed.is_some(), &call) {
                    if session.tx.send(&reply).await.is_err() {
                        break;
                    }
                    continue;
                }
                if let Err(retry_after) = context.take_call(&budget_key, call_cost(&call.call)) {
                    metrics::counter!("fullerene_master_calls_rate_limited_total", "role" => "framework").increment(1);
                    let reply = refuse_rate_limited(call.call_id, &principal, &context.limits, retry_after);
                    if session.tx.send(&reply).await.is_err() {
                        break;
                    }
                    continue;
                }
                let Some(framework_id) = subscribed.clone() else { continue };
                let event = Input::FrameworkCall {
                    framework_id,
                    session: id,
                    call,
                };
                if context.events.send(Event::Input(event)).await.is_err() {
                    break;
                }
            }
        }
    }
    if session.tx.finish().await.is_ok() {
        // Closing the connection at once would drop what the peer has not acknowledged yet:
        // the answer to its teardown, or the notice that an operator tore it down, which is
        // what tells its scheduler to stop rather than subscribe again.
        let _ = tokio::time::timeout(FRAMEWORK_LINGER, session.tx.stopped()).await;
    }
    let ended = match subscribed {
        Some(framework_id) => Event::Input(Input::FrameworkGone(framework_id, id)),
        None => Event::SessionEnded(id),
    };
    let _ = context.events.send(ended).await;
}

#[cfg(test)]
mod tests {
    use super::add_part;

    #[test]
    fn parts_reassemble_a_message_and_refuse_overruns_and_mixed_totals() {
        let mut assembling = None;
        assert_eq!(add_part(&mut assembling, 5, vec![1, 2]), Ok(None));
        assert_eq!(
            add_part(&mut assembling, 5, vec![3, 4, 5]),
            Ok(Some(vec![1, 2, 3, 4, 5]))
        );
        assert!(
            assembling.is_none(),
            "a finished message leaves nothing behind"
        );

        assert_eq!(add_part(&mut assembling, 3, vec![1, 2]), Ok(None));
        assert!(
            add_part(&mut assembling, 4, vec![3]).is_err(),
            "another total mid-message"
        );
        let mut assembling = None;
        assert!(
            add_part(&mut assembling, 2, vec![1, 2, 3]).is_err(),
            "an overrun"
        );
        let mut assembling = None;
        assert!(
            add_part(&mut assembling, 2, Vec::new()).is_err(),
            "an empty part"
        );
        let mut assembling = None;
        assert!(
            add_part(&mut assembling, u64::MAX, vec![1]).is_err(),
            "a total over the limit"
        );
    }
}
