//! The agent's Prometheus metrics (served with `--metrics-listen`).

use metrics::{counter, describe_counter, describe_gauge, gauge};

/// Tasks whose process (or sleep) runs now.
pub const TASKS_RUNNING: &str = "fullerene_agent_tasks_running";
/// Tasks started since the agent started.
pub const LAUNCHES: &str = "fullerene_agent_launches_total";
/// Status updates checkpointed but not yet acknowledged by the master.
pub const STATUS_BACKLOG: &str = "fullerene_agent_status_backlog";
/// Sessions with the master lost (and re-opened) since the agent started.
pub const RECONNECTS: &str = "fullerene_agent_reconnects_total";
/// 1 when registered with a master.
pub const CONNECTED: &str = "fullerene_agent_connected";
/// 1 when task limits are enforced with cgroups v2, 0 when they are not.
pub const LIMITS_ENFORCED: &str = "fullerene_agent_limits_enforced";
/// 1 when each task runs as a user of its own, 0 when tasks run as the agent's user.
pub const TASKS_ISOLATED: &str = "fullerene_agent_tasks_isolated";
/// CPUs held by the agent's staging and running tasks.
pub const USED_CPUS: &str = "fullerene_agent_used_cpus";

/// Registers the descriptions with the installed recorder.
pub fn describe() {
    describe_gauge!(TASKS_RUNNING, "Tasks whose process (or sleep) runs now");
    describe_counter!(LAUNCHES, "Tasks started since the agent started");
    describe_gauge!(
        STATUS_BACKLOG,
        "Status updates checkpointed but not yet acknowledged by the master"
    );
    describe_counter!(
        RECONNECTS,
        "Sessions with the master lost since the agent started"
    );
    describe_gauge!(CONNECTED, "1 when registered with a master");
    describe_gauge!(
        LIMITS_ENFORCED,
        "1 when task limits are enforced with cgroups v2, 0 when they are not"
    );
    describe_gauge!(
        TASKS_ISOLATED,
        "1 when each task runs as a user of its own, 0 when tasks run as the agent's user"
    );
    describe_gauge!(USED_CPUS, "CPUs held by staging and running tasks");
    // Counters show up at 0 rather than only after their first event.
    counter!(LAUNCHES).increment(0);
    counter!(RECONNECTS).increment(0);
}

pub(crate) fn tasks_running(n: usize) {
    gauge!(TASKS_RUNNING).set(n as f64);
}

pub(crate) fn backlog(n: usize) {
    gauge!(STATUS_BACKLOG).set(n as f64);
}

pub(crate) fn connected(yes: bool) {
    gauge!(CONNECTED).set(if yes { 1.0 } else { 0.0 });
}

pub(crate) fn limits_enforced(yes: bool) {
    gauge!(LIMITS_ENFORCED).set(if yes { 1.0 } else { 0.0 });
}

pub(crate) fn tasks_isolated(yes: bool) {
    gauge!(TASKS_ISOLATED).set(if yes { 1.0 } else { 0.0 });
}

pub(crate) fn used_cpus(cpus: f64) {
    gauge!(USED_CPUS).set(cpus);
}

pub(crate) fn launched() {
    counter!(LAUNCHES).increment(1);
}

pub(crate) fn reconnect() {
    counter!(RECONNECTS).increment(1);
}
