//! `GET /health` and `GET /ready`, for load balancers, Kubernetes and service managers.
//!
//! - **Health** (liveness): the process is up and its node loop answers a probe within the
//!   request timeout (`--request-timeout-ms`). A master that fails it should be restarted: its
//!   node loop is stuck or gone.
//! - **Readiness**: this master can serve: it knows a leader (itself when it leads, or the
//!   leader it follows, which answers or redirects to it) and has applied all but at most
//!   [`MAX_READY_APPLY_LAG`] of the entries it knows are committed. A master with no leader
//!   (an election is running, or its group lost quorum: a leader cut off steps down within an
//!   election timeout, by check-quorum, and a follower forgets its leader when its election
//!   timer fires) is healthy but not ready; a load balancer should send clients elsewhere.
//!
//! Both answer 200 or 503 with a [`ProbeDocument`] saying why.
//!
//! # No credentials
//!
//! Unlike every other route, the probes need no certificate or token: probes from load
//! balancers and kubelets carry none, and a probe that needed a token would make the token a
//! liveness dependency. They are safe to open because they only say whether this master runs
//! and where its own Raft stands (id, leader id, term, apply lag: numbers `/metrics` also
//! carries), never cluster state, tasks or secrets, and they change nothing. They are served
//! on the same HTTPS listener (a client certificate stays optional in the handshake), so no
//! second, plain listener is opened.

use std::time::Duration;

use fullerene_proto::http::ProbeDocument;
use hyper::{Response, StatusCode};
use tokio::sync::oneshot;

use super::routes::{json, Body};
use super::Api;
use crate::server::node_loop::{Event, NodeProbe};

/// The most committed entries a ready master may have left to apply. A master this far behind
/// (catching up after a restart or a snapshot) would answer from a state minutes old.
pub(crate) const MAX_READY_APPLY_LAG: u64 = 1000;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Liveness: `/health`.
    Health,
    /// Readiness: `/ready`.
    Ready,
}

/// Answers `probe`.
pub(crate) async fn answer(api: &Api, probe: Probe) -> Response<Body> {
    let node = ask_node_loop(api, api.sessions.request_timeout).await;
    let document = match (node, probe) {
        (Err(reason), _) => ProbeDocument {
            ok: false,
            reason,
            master: None,
            leader: None,
            term: None,
            apply_lag: None,
        },
        (Ok(node), Probe::Health) => document(&node, Ok("the node loop answers".to_string())),
        (Ok(node), Probe::Ready) => document(&node, readiness(&node)),
    };
    let status = if document.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(status, &document)
}

/// The node loop's answer to a probe, or why there is none.
async fn ask_node_loop(api: &Api, patience: Duration) -> Result<NodeProbe, String> {
    let (reply, answer) = oneshot::channel();
    let asked = async {
        api.sessions.events.send(Event::Probe(reply)).await.ok()?;
        answer.await.ok()
    };
    match tokio::time::timeout(patience, asked).await {
        Ok(Some(node)) => Ok(node),
        Ok(None) => Err("the node loop has stopped (the master is shutting down)".to_string()),
        Err(_) => Err(format!(
            "the node loop did not answer within {} ms",
            patience.as_millis()
        )),
    }
}

/// Whether a master standing at `node` is ready, and why.
fn readiness(node: &NodeProbe) -> Result<String, String> {
    let lag = node.commit.saturating_sub(node.applied);
    let Some(leader) = node.leader else {
        return Err(
            "no leader is known: an election is running or the group has lost its quorum"
                .to_string(),
        );
    };
    if lag > MAX_READY_APPLY_LAG {
        return Err(format!(
            "{lag} committed entries are not applied yet (ready at {MAX_READY_APPLY_LAG} or fewer)"
        ));
    }
    Ok(if leader == node.this {
        "this master leads".to_string()
    } else {
        format!("this master follows master {leader}")
    })
}

fn document(node: &NodeProbe, verdict: Result<String, String>) -> ProbeDocument {
    let ok = verdict.is_ok();
    ProbeDocument {
        ok,
        reason: verdict.unwrap_or_else(|reason| reason),
        master: Some(node.this),
        leader: node.leader,
        term: Some(node.term),
        apply_lag: Some(node.commit.saturating_sub(node.applied)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(leader: Option<u64>, commit: u64, applied: u64) -> NodeProbe {
        NodeProbe {
            this: 1,
            leader,
            term: 3,
            commit,
            applied,
        }
    }

    #[test]
    fn ready_needs_a_leader_and_little_left_to_apply() {
        assert_eq!(
            readiness(&node(Some(1), 10, 10)),
            Ok("this master leads".to_string())
        );
        assert_eq!(
            readiness(&node(Some(2), 10 + MAX_READY_APPLY_LAG, 10)),
            Ok("this master follows master 2".to_string())
        );
        let no_leader = readiness(&node(None, 10, 10)).unwrap_err();
        assert!(no_leader.contains("no leader"), "{no_leader}");
        let behind = readiness(&node(Some(2), 11 + MAX_READY_APPLY_LAG, 10)).unwrap_err();
        assert!(behind.contains("not applied yet"), "{behind}");
    }
}
