//! Membership: learners promoted once caught up, the addresses membership changes carry, and
//! the leader and membership views published for the session tasks.

use std::net::SocketAddr;

use raft::eraftpb::{ConfChangeType, ConfChangeV2};

use fullerene_proto::time::whole_millis;

use super::{LeaderView, MasterCore, MembershipView, Now, Output, Pending, PROMOTION_LAG};
use crate::offers::OfferManager;
use crate::raft_node::MembershipChange;
use crate::state::Command;
use crate::storage::RaftStore;

impl<S: RaftStore> MasterCore<S> {
    /// On the leader: proposes promoting to voter each learner whose log is within
    /// [`PROMOTION_LAG`] entries of the leader's. One membership change is in flight at a
    /// time (raft-rs refuses a second); a refused promotion is tried again on a later tick.
    pub(super) fn promote_learners(&mut self) {
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

    /// This master became leader: liveness and failover clocks start now, a new offer book
    /// opens, and the HTTP address is announced if the replicated one differs.
    pub(super) fn on_leadership(&mut self, now: Now) {
        self.agents.on_leadership(self.node.state(), now.monotonic);
        self.drains.on_leadership();
        self.following.on_leadership(self.node.state());
        self.frameworks
            .on_leadership(self.node.state(), now.monotonic);
        // Plans of an earlier term's cycle are for another allocator: never committed.
        self.planning = None;
        self.allocation_due = false;
        match OfferManager::new(
            self.node.state().settings(),
            self.config.allocator_shards,
            self.node.term(),
            whole_millis(self.config.offer_ttl),
        ) {
            Ok(offers) => self.offers = Some(offers),
            Err(error) => {
                tracing::error!(%error, "cannot start the allocator; no offers will be made");
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
    }

    pub(super) fn publish_leader(&mut self) {
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
        if view != self.leader_view {
            self.leader_view = view.clone();
            self.out.push(Output::Leader(view));
        }
    }

    /// Publishes the current members, true as of log index `as_of`.
    pub(super) fn publish_membership(&mut self, as_of: u64) {
        let membership = self.node.membership();
        let members = membership
            .voters
            .iter()
            .chain(&membership.learners)
            .copied()
            .collect();
        let view = MembershipView { members, as_of };
        self.membership_view = view.clone();
        self.out.push(Output::Membership(view));
    }

    /// Records the addresses a membership change carries, and forgets removed masters.
    pub(super) fn learn_membership(&mut self, change: &ConfChangeV2) {
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
                        self.out.push(Output::ForgetPeer(single.node_id));
                    }
                }
            }
        }
        // A new address may be the leader's (a master that joined and was elected).
        self.publish_leader();
    }
}
