//! The Raft node's metrics, through the `metrics` crate (the CLI installs the Prometheus
//! exporter; without a recorder they cost nothing). Every series has a `node` label, the
//! master's Raft id, so that several masters in one process (tests) stay apart.
//!
//! | name | kind | meaning |
//! | --- | --- | --- |
//! | `fullerene_raft_term` | gauge | current Raft term |
//! | `fullerene_raft_commit_index` | gauge | highest index known committed |
//! | `fullerene_raft_applied_index` | gauge | highest index applied to the state machine |
//! | `fullerene_raft_is_leader` | gauge | 1 while this master leads, else 0 |
//! | `fullerene_raft_leader_changes_total` | counter | times the known leader changed |
//! | `fullerene_raft_proposals_total` | counter | commands proposed (entered the log) |
//! | `fullerene_raft_proposals_failed_total` | counter | proposals refused or dropped |
//! | `fullerene_raft_proposal_batch_size` | histogram | commands per flushed batch |
//! | `fullerene_raft_commands_applied_total` | counter | commands applied, label `result` = `ok` or `rejected` |
//! | `fullerene_raft_apply_latency_seconds` | histogram | proposal flush to apply, for this master's own proposals: recorded by the server's shell from [`RaftNode::take_applied_flush_times`](super::RaftNode::take_applied_flush_times) |
//! | `fullerene_raft_persist_batches_total` | counter | synced write batches (one per `Ready`, plus commit-index writes) |
//! | `fullerene_raft_entries_persisted_total` | counter | log entries written |
//! | `fullerene_raft_snapshots_total` | counter | state-machine snapshots taken locally |
//! | `fullerene_raft_snapshots_installed_total` | counter | snapshots received from a leader and installed |
//! | `fullerene_raft_snapshot_bytes` | gauge | size of the latest snapshot taken or installed |
//! | `fullerene_raft_read_index_timeouts_total` | counter | linearizable reads that timed out |

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

/// Metric handles of one node, resolved once.
pub(crate) struct NodeMetrics {
    pub term: Gauge,
    pub commit_index: Gauge,
    pub applied_index: Gauge,
    pub is_leader: Gauge,
    pub leader_changes: Counter,
    pub proposals: Counter,
    pub proposals_failed: Counter,
    pub batch_size: Histogram,
    pub applied_ok: Counter,
    pub applied_rejected: Counter,
    pub persist_batches: Counter,
    pub entries_persisted: Counter,
    pub snapshots: Counter,
    pub snapshots_installed: Counter,
    pub snapshot_bytes: Gauge,
    pub read_timeouts: Counter,
}

impl NodeMetrics {
    pub(super) fn new(id: u64) -> NodeMetrics {
        let node = id.to_string();
        NodeMetrics {
            term: gauge!("fullerene_raft_term", "node" => node.clone()),
            commit_index: gauge!("fullerene_raft_commit_index", "node" => node.clone()),
            applied_index: gauge!("fullerene_raft_applied_index", "node" => node.clone()),
            is_leader: gauge!("fullerene_raft_is_leader", "node" => node.clone()),
            leader_changes: counter!("fullerene_raft_leader_changes_total", "node" => node.clone()),
            proposals: counter!("fullerene_raft_proposals_total", "node" => node.clone()),
            proposals_failed: counter!(
                "fullerene_raft_proposals_failed_total", "node" => node.clone()
            ),
            batch_size: histogram!("fullerene_raft_proposal_batch_size", "node" => node.clone()),
            applied_ok: counter!(
                "fullerene_raft_commands_applied_total", "node" => node.clone(), "result" => "ok"
            ),
            applied_rejected: counter!(
                "fullerene_raft_commands_applied_total", "node" => node.clone(), "result" => "rejected"
            ),
            persist_batches: counter!(
                "fullerene_raft_persist_batches_total", "node" => node.clone()
            ),
            entries_persisted: counter!(
                "fullerene_raft_entries_persisted_total", "node" => node.clone()
            ),
            snapshots: counter!("fullerene_raft_snapshots_total", "node" => node.clone()),
            snapshots_installed: counter!(
                "fullerene_raft_snapshots_installed_total", "node" => node.clone()
            ),
            snapshot_bytes: gauge!("fullerene_raft_snapshot_bytes", "node" => node.clone()),
            read_timeouts: counter!("fullerene_raft_read_index_timeouts_total", "node" => node),
        }
    }
}
