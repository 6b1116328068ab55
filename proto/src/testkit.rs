//! Builders for tests and benchmarks; not for production use.
//!
//! One copy of each wire-message builder the workspace's tests share. Each takes the fields
//! that tests vary (resources as `kind=amount` text, the kill grace period) so that every test
//! still builds exactly the message it built before. The resource builders are
//! `fullerene_scheduling::testkit`'s, re-exported. Enabled by this crate's `testkit` feature.

use std::collections::BTreeMap;

pub use fullerene_scheduling::testkit::*;

use crate::ids::{AgentId, FrameworkId, OfferId, TaskId};
use crate::messages::{CommandSpec, Executor, Offer, OfferKind, StatusUpdate, TaskSpec, TaskState};

/// A task named after its id, running `executor` with `resources` (`kind=amount` text), no
/// DAG origin, and a kill grace period of `kill_grace_ms`.
///
/// # Panics
///
/// When `resources` does not parse.
#[must_use]
pub fn task(id: &str, executor: Executor, resources: &str, kill_grace_ms: u64) -> TaskSpec {
    TaskSpec {
        id: TaskId::from(id),
        name: id.to_string(),
        executor,
        resources: fullerene_scheduling::testkit::resources(resources),
        origin: None,
        kill_grace_ms,
    }
}

/// A task that sleeps `duration_ms` (see [`task`]).
///
/// # Panics
///
/// When `resources` does not parse.
#[must_use]
pub fn sleep_task(id: &str, duration_ms: u64, resources: &str, kill_grace_ms: u64) -> TaskSpec {
    task(
        id,
        Executor::Sleep { duration_ms },
        resources,
        kill_grace_ms,
    )
}

/// A task running `program` with `args` and no extra environment (see [`task`]).
///
/// # Panics
///
/// When `resources` does not parse.
#[must_use]
pub fn command_task(
    id: &str,
    program: &str,
    args: &[&str],
    resources: &str,
    kill_grace_ms: u64,
) -> TaskSpec {
    let executor = Executor::Command(CommandSpec {
        program: program.to_string(),
        args: args.iter().map(ToString::to_string).collect(),
        env: BTreeMap::new(),
    });
    task(id, executor, resources, kill_grace_ms)
}

/// A task running `sh -c script` (see [`command_task`]).
///
/// # Panics
///
/// When `resources` does not parse.
#[must_use]
pub fn shell_task(id: &str, script: &str, resources: &str, kill_grace_ms: u64) -> TaskSpec {
    command_task(id, "sh", &["-c", script], resources, kill_grace_ms)
}

/// A regular offer `id` to `framework` of `agent`'s `resources` (`kind=amount` text), on a
/// host named `hostname` with no attributes, expiring at `expires_at_ms`.
///
/// # Panics
///
/// When `resources` does not parse.
#[must_use]
pub fn offer(
    id: u64,
    framework: &str,
    agent: &str,
    hostname: &str,
    resources: &str,
    expires_at_ms: u64,
) -> Offer {
    Offer {
        id: OfferId(id),
        framework_id: FrameworkId::from(framework),
        agent_id: AgentId::from(agent),
        hostname: hostname.to_string(),
        attributes: BTreeMap::new(),
        resources: fullerene_scheduling::testkit::resources(resources),
        kind: OfferKind::Regular,
        expires_at_ms,
        fair_share: crate::Resources::default(),
        reservation: None,
    }
}

/// Update `seq` of `task` of `framework` on `agent` to `state`, with no reason, no message
/// and timestamp 0.
#[must_use]
pub fn status_update(
    task: &str,
    framework: &str,
    agent: &str,
    state: TaskState,
    seq: u64,
) -> StatusUpdate {
    StatusUpdate {
        task_id: TaskId::from(task),
        framework_id: FrameworkId::from(framework),
        agent_id: AgentId::from(agent),
        state,
        seq,
        reason: None,
        message: String::new(),
        timestamp_ms: 0,
    }
}
