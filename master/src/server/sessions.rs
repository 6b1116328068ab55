//! The accept loop and the per-session tasks: peers, operators, agents and frameworks.

use std::sync::Arc;
use std::time::Duration;

use fullerene_proto::messages::{
    AgentToMaster, ErrorCode, FrameworkCall, MasterToAgent, MasterToFramework, OperatorRequest,
    OperatorResponse, PeerMessage, Redirect, SessionOpen, WireError,
};
use fullerene_proto::transport::{Connection, Server, Session, StreamErrorCode};
use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::sync::{mpsc, oneshot, watch};

use super::node_loop::Event;
use super::LeaderView;

/// What every session task needs.
#[derive(Debug)]
pub(crate) struct SessionContext {
    /// This master's Raft id.
    pub this: u64,
    /// The node loop's inbox.
    pub events: mpsc::Sender<Event>,
    /// Who leads.
    pub leader: watch::Receiver<LeaderView>,
    /// How long an operator request waits for the node's answer.
    pub request_timeout: Duration,
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
    loop {
        match connection.accept_session().await {
            Ok(session) => {
                tokio::spawn(serve_session(session, Arc::clone(&context)));
            }
            Err(error) => {
                tracing::debug!(peer = %connection.peer(), %error, "connection ended");
                return;
            }
        }
    }
}

async fn serve_session(session: Session, context: Arc<SessionContext>) {
    match session.kind {
        SessionOpen::Peer => serve_peer(session, &context).await,
        SessionOpen::Operator => serve_operator(session, &context).await,
        SessionOpen::Agent => serve_agent(session, &context).await,
        SessionOpen::Framework => serve_framework(session, &context).await,
    }
}

/// Raft traffic from another master. The transport admits `Peer` sessions from master
/// certificates only; each message's `from` must be the id in that certificate, so a master
/// cannot speak for another.
async fn serve_peer(mut session: Session, context: &SessionContext) {
    let Some(from) = session.peer.master_id() else {
        tracing::warn!(peer = %session.peer, "peer session from a certificate without a master id");
        session.rx.stop(StreamErrorCode::SessionRefused);
        return;
    };
    loop {
        let frame = match session.rx.recv::<PeerMessage>().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(peer = from.0, %error, "peer session ended");
                return;
            }
        };
        let PeerMessage::Raft(messages) = frame;
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
            if context.events.send(Event::Raft(message)).await.is_err() {
                return;
            }
        }
    }
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
        let (reply_tx, reply_rx) = oneshot::channel();
        let response = if context
            .events
            .send(Event::Operator(request, reply_tx))
            .await
            .is_err()
        {
            unavailable("the master is shutting down")
        } else {
            match tokio::time::timeout(context.request_timeout, reply_rx).await {
                Ok(Ok(response)) => response,
                Ok(Err(_)) => unavailable("the master is shutting down"),
                Err(_) => unavailable(&format!(
                    "no answer within {:?} (no quorum, or the leader changed); retry",
                    context.request_timeout
                )),
            }
        };
        if let Err(error) = session.tx.send(&response).await {
            tracing::debug!(peer = %session.peer, %error, "cannot answer the operator");
            return;
        }
    }
    let _ = session.tx.finish().await;
}

fn unavailable(message: &str) -> OperatorResponse {
    OperatorResponse::Error(WireError::new(ErrorCode::Unavailable, message))
}

/// The message agents and frameworks get from the leader until their endpoints exist.
const NOT_IMPLEMENTED: &str = "not implemented until the agent/offer issues";

/// Agents: a follower redirects to the leader; the leader does not serve agents yet.
async fn serve_agent(mut session: Session, context: &SessionContext) {
    match session.rx.recv::<AgentToMaster>().await {
        Ok(Some(_)) => {}
        Ok(None) | Err(_) => return,
    }
    let view = context.leader.borrow().clone();
    let reply = if view.is_self {
        MasterToAgent::Error(WireError::new(ErrorCode::Unavailable, NOT_IMPLEMENTED))
    } else {
        MasterToAgent::Redirect(Redirect {
            leader: view.leader,
        })
    };
    if session.tx.send(&reply).await.is_ok() {
        let _ = session.tx.finish().await;
    }
}

/// Frameworks: a follower redirects to the leader; the leader does not serve frameworks yet.
async fn serve_framework(mut session: Session, context: &SessionContext) {
    let call_id = match session.rx.recv::<FrameworkCall>().await {
        Ok(Some(call)) => call.call_id,
        Ok(None) | Err(_) => return,
    };
    let view = context.leader.borrow().clone();
    let reply = if view.is_self {
        MasterToFramework::CallResult {
            call_id,
            result: Err(WireError::new(ErrorCode::Unavailable, NOT_IMPLEMENTED)),
        }
    } else {
        MasterToFramework::Redirect(Redirect {
            leader: view.leader,
        })
    };
    if session.tx.send(&reply).await.is_ok() {
        let _ = session.tx.finish().await;
    }
}
