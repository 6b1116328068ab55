//! Builders for tests and benchmarks; not for production use.
//!
//! One copy of each replicated-command and Raft-storage builder the master's and the test
//! harness's tests share. Each takes the fields that tests vary, so that every test still
//! builds exactly the command it built before. Enabled by this crate's `testkit` feature (and
//! in its own unit tests).

use std::collections::BTreeMap;

use fullerene_proto::messages::TaskSpec;
use fullerene_proto::{AgentId, FrameworkId};

use raft::eraftpb::{Entry, Snapshot};

use crate::state::Command;

/// `RegisterAgent` of `agent` on `hostname` with `resources` (`kind=amount` text), no
/// attributes, the named `executors`, at `at_ms`.
///
/// # Panics
///
/// When `resources` does not parse.
#[must_use]
pub fn register_agent(
    agent: &str,
    hostname: &str,
    resources: &str,
    executors: &[&str],
    at_ms: u64,
) -> Command {
    Command::RegisterAgent {
        agent_id: AgentId::from(agent),
        hostname: hostname.to_string(),
        resources: fullerene_proto::testkit::resources(resources),
        attributes: BTreeMap::new(),
        executors: executors.iter().map(ToString::to_string).collect(),
        at_ms,
    }
}

/// `SubscribeFramework` of `framework` by `principal`, named `name`, in `group`, with
/// `failover_timeout_ms`, at `at_ms`.
#[must_use]
pub fn subscribe_framework(
    framework: &str,
    principal: &str,
    name: &str,
    group: &str,
    failover_timeout_ms: u64,
    at_ms: u64,
) -> Command {
    Command::SubscribeFramework {
        framework_id: FrameworkId::from(framework),
        principal: principal.to_string(),
        name: name.to_string(),
        group: group.to_string(),
        failover_timeout_ms,
        at_ms,
    }
}

/// `LaunchTasks` of `tasks` on `agent` by `framework` (acting as `principal`), at `at_ms`.
#[must_use]
pub fn launch_tasks(
    framework: &str,
    principal: &str,
    agent: &str,
    tasks: Vec<TaskSpec>,
    at_ms: u64,
) -> Command {
    Command::LaunchTasks {
        framework_id: FrameworkId::from(framework),
        principal: principal.to_string(),
        agent_id: AgentId::from(agent),
        tasks,
        at_ms,
    }
}

/// A Raft log entry at `index` in `term` carrying `size` bytes of data, each `index` modulo
/// 251, so that neighbouring entries differ.
#[must_use]
pub fn log_entry(index: u64, term: u64, size: usize) -> Entry {
    Entry {
        index,
        term,
        data: vec![(index % 251) as u8; size].into(),
        ..Default::default()
    }
}

/// A snapshot at (`index`, `term`) of the state `data`, whose membership is `voters` (none
/// recorded when `voters` is empty).
#[must_use]
pub fn snapshot(index: u64, term: u64, voters: &[u64], data: &[u8]) -> Snapshot {
    crate::storage::snapshot_at(index, term, voters, data)
}
