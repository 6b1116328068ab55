//! The JSON documents of the masters' HTTP API: what its `GET` endpoints serve and what its
//! writes take as bodies. The routes, their authentication and their limits are the master's
//! (`fullerene_master::server::http`); these are only the shapes, shared with its clients (the
//! chaos run's observer, the integration tests).
//!
//! Every read is served from the leader's last published view of the cluster state, never
//! computed for the request: each document says which view it comes from ([`ViewStamp`]:
//! the leader, its term, the applied index the view is exact for, when it was built and its
//! sequence number on that master), so a client can tell how fresh it is.
//!
//! Bodies are decoded strictly: an unknown field, a missing one, a value of the wrong type or
//! anything after the JSON value is refused with a message naming it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::ids::{FrameworkId, MasterId};
use crate::messages::{AgentInfo, ClusterStatus, ClusterView, FrameworkInfo, GroupInfo, TaskInfo};

/// Which view of the cluster state a document comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewStamp {
    /// The leader that built the view.
    pub leader: MasterId,
    /// Its term when it built the view.
    pub term: u64,
    /// The log index the view is exact for: everything committed up to it, nothing after.
    pub applied: u64,
    /// When the view was built, in milliseconds since the Unix epoch (the leader's clock).
    pub built_at_ms: u64,
    /// The view's sequence number on this leader's process (1 for the first view it built):
    /// consecutive documents with the same number come from one build.
    pub build: u64,
}

/// `GET /state`: the whole view, with task environments redacted (names kept, values
/// [`REDACTED`](crate::messages::REDACTED)) and at most the leader's bound of tasks (the
/// first ones by framework and task id; `tasks_omitted` says how many were left out).
///
/// The view's own fields (`leader`, `applied`, `agents`, `frameworks`, `offers`, `tasks`,
/// `groups`) sit at the top level of the JSON object, beside the others, so a client that
/// reads a [`ClusterView`] from it reads the same object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateDocument {
    /// The leader's term when it built the view.
    pub term: u64,
    /// When the view was built, in milliseconds since the Unix epoch.
    pub built_at_ms: u64,
    /// The view's sequence number on this leader's process.
    pub build: u64,
    /// Tasks the leader tracks in all.
    pub tasks_total: u64,
    /// Tasks left out of `tasks` by the bound.
    pub tasks_omitted: u64,
    /// The view.
    #[serde(flatten)]
    pub view: ClusterView,
}

impl StateDocument {
    /// The stamp of the view this document comes from.
    pub fn stamp(&self) -> ViewStamp {
        ViewStamp {
            leader: self.view.leader,
            term: self.term,
            applied: self.view.applied,
            built_at_ms: self.built_at_ms,
            build: self.build,
        }
    }
}

/// `GET /agents`: every agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentsDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The agents.
    pub agents: Vec<AgentInfo>,
}

/// `GET /frameworks`: every framework (torn-down ones included until forgotten).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameworksDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The frameworks.
    pub frameworks: Vec<FrameworkInfo>,
}

/// `GET /tasks` and `GET /tasks?framework=ID`: the view's tasks, all or one framework's,
/// redacted like `/state`'s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TasksDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The framework asked for, if any.
    pub framework: Option<FrameworkId>,
    /// Its tasks (or all) that the view holds.
    pub tasks: Vec<TaskInfo>,
    /// Its tasks (or all) that the view's bound left out.
    pub tasks_omitted: u64,
}

/// `GET /groups`: the fairness groups with their deficit counters, and the weights operators
/// set (a group not listed there weighs 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupsDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The groups with frameworks or weights.
    pub groups: Vec<GroupInfo>,
    /// The weights set by operators.
    pub weights: BTreeMap<String, f64>,
}

/// `GET /cluster`: the Raft group as the leader sees it (members, their replication lag).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterDocument {
    /// The view it comes from.
    #[serde(flatten)]
    pub stamp: ViewStamp,
    /// The group.
    pub cluster: ClusterStatus,
}

/// The body of `POST /agents/{agent}/drain` (may be `{}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainBody {
    /// How long the agent's tasks may still run before the leader kills them, in
    /// milliseconds; absent: until they end on their own.
    #[serde(default)]
    pub deadline_after_ms: Option<u64>,
}

/// The body of `PUT /groups/{group}/weight`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupWeightBody {
    /// The group's weight: finite and at least 0.
    pub weight: f64,
}

/// The body of `POST /masters`: a master to add to the group (as a learner, promoted once it
/// has caught up).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMasterBody {
    /// Its Raft id (at least 1).
    pub id: u64,
    /// Its peer address (QUIC).
    pub addr: SocketAddr,
}

/// What a write answers once its change is committed and applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteDone {
    /// Always `true`.
    pub committed: bool,
}

/// What `GET /health` and `GET /ready` answer: 200 with `ok: true`, or 503 with `ok: false`,
/// and `reason` saying why either way. Only this master's own Raft position, never cluster
/// data: the probes are served without credentials (load balancers and Kubernetes send none).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeDocument {
    /// Whether the probe passed.
    pub ok: bool,
    /// Why it passed or failed, for a person to read.
    pub reason: String,
    /// This master's Raft id, once its node loop answered.
    pub master: Option<u64>,
    /// The leader it follows (itself when it leads), if it knows one.
    pub leader: Option<u64>,
    /// Its Raft term.
    pub term: Option<u64>,
    /// Entries it knows are committed but has not applied yet.
    pub apply_lag: Option<u64>,
}

/// What every refusal and failure answers, with the status code saying which.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDocument {
    /// What was wrong, for a person to read.
    pub error: String,
}

/// The response header of `GET /frameworks/{framework}/tasks/{task}/files/{name}` holding the
/// file's whole size in bytes when it was read (a log viewer pages and tails with it).
pub const FILE_SIZE_HEADER: &str = "x-fullerene-file-size";

/// The response header of the same route holding the offset the body starts at: the one
/// asked for, clamped to the file's size.
pub const FILE_OFFSET_HEADER: &str = "x-fullerene-file-offset";

/// The response header of the same route saying (`true` or `false`) whether the task had
/// ended when the file was read: once it has and the reader has reached the size, nothing
/// more will come.
pub const TASK_ENDED_HEADER: &str = "x-fullerene-task-ended";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_document_reads_as_a_cluster_view_too() {
        let document = StateDocument {
            term: 3,
            built_at_ms: 1_700_000_000_000,
            build: 9,
            tasks_total: 0,
            tasks_omitted: 0,
            view: ClusterView {
                leader: MasterId(2),
                applied: 41,
                agents: Vec::new(),
                frameworks: Vec::new(),
                offers: Vec::new(),
                tasks: Vec::new(),
                groups: Vec::new(),
            },
        };
        let json = serde_json::to_string(&document).expect("encode");
        let back: StateDocument = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, document);
        let view: ClusterView = serde_json::from_str(&json).expect("a cluster view");
        assert_eq!(view, document.view);
        assert_eq!(back.stamp().applied, 41);
        assert_eq!(back.stamp().leader, MasterId(2));
    }

    #[test]
    fn bodies_are_strict() {
        let ok: GroupWeightBody = serde_json::from_str(r#"{"weight": 2.5}"#).expect("a body");
        assert_eq!(ok.weight, 2.5);
        for bad in [
            r#"{"weight": 2.5, "extra": 1}"#,
            r#"{}"#,
            r#"{"weight": "2"}"#,
            r#"{"weight": 2} {"#,
        ] {
            assert!(
                serde_json::from_str::<GroupWeightBody>(bad).is_err(),
                "{bad} was accepted"
            );
        }
        let error = serde_json::from_str::<AddMasterBody>(r#"{"id": 4, "adr": "x"}"#)
            .expect_err("a misspelt field");
        assert!(error.to_string().contains("adr"), "{error}");
    }
}
