//! `fullerene agents`, `fullerene frameworks`, `fullerene tasks`: what the leader knows, for
//! operators (linearizable reads; any master answers, followers redirect).

use anyhow::Result;
use clap::Args;
use fullerene_client::{OperatorClient, OperatorClientError};
use fullerene_proto::messages::{
    AgentInfo, AgentState, Enforcement, FinishedTaskInfo, FrameworkInfo, TaskInfo, TaskIsolation,
};
use fullerene_proto::{FrameworkId, ResourceKind, Resources};

use crate::commands::cluster::{operator_client, ClusterArgs};
use crate::commands::runtime;
use crate::output::{table, JsonOutput};

/// Flags of `fullerene tasks`.
#[derive(Args, Debug)]
pub(crate) struct TasksArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Only this framework's tasks.
    #[arg(long, value_name = "ID")]
    pub framework: Option<String>,
    /// Also the finished tasks the cluster keeps (the last ones of each framework within a
    /// time window, see `fullerene master --history-tasks-per-framework`), with how and when
    /// they ended.
    #[arg(long)]
    pub all: bool,
}

/// What `fullerene tasks --all --json` prints.
#[derive(Debug, serde::Serialize)]
struct AllTasks {
    /// The tasks the masters track.
    tasks: Vec<TaskInfo>,
    /// The finished tasks kept, oldest first.
    finished: Vec<FinishedTaskInfo>,
}

/// Runs `list` with an operator client for `args`' masters.
fn with_client<T>(
    args: &ClusterArgs,
    list: impl AsyncFnOnce(&mut OperatorClient) -> Result<T, OperatorClientError>,
) -> Result<T> {
    runtime()?.block_on(async {
        let mut client = operator_client(args)?;
        // The client's errors say what happened (no leader in time, a refused certificate).
        Ok(list(&mut client).await?)
    })
}

/// `fullerene agents`.
pub(crate) fn agents(args: ClusterArgs, json: &JsonOutput) -> Result<()> {
    let agents = with_client(&args, OperatorClient::list_agents)?;
    json.emit(&agents, || {
        render_agents(&agents, fullerene_proto::time::wall_clock().as_millis())
    })
}

/// `fullerene frameworks`.
pub(crate) fn frameworks(args: ClusterArgs, json: &JsonOutput) -> Result<()> {
    let frameworks = with_client(&args, OperatorClient::list_frameworks)?;
    json.emit(&frameworks, || render_frameworks(&frameworks))
}

/// `fullerene tasks`.
pub(crate) fn tasks(args: TasksArgs, json: &JsonOutput) -> Result<()> {
    let framework = args.framework.map(FrameworkId);
    if args.all {
        let all = with_client(&args.cluster, async |client| {
            Ok(AllTasks {
                tasks: client.list_tasks(framework.clone()).await?,
                finished: client.list_finished_tasks(framework).await?,
            })
        })?;
        return json.emit(&all, || {
            format!(
                "{}\n{}",
                render_tasks(&all.tasks),
                render_finished(&all.finished)
            )
        });
    }
    let tasks = with_client(&args.cluster, async |client| {
        client.list_tasks(framework).await
    })?;
    json.emit(&tasks, || render_tasks(&tasks))
}

fn render_finished(tasks: &[FinishedTaskInfo]) -> String {
    if tasks.is_empty() {
        return "no finished tasks kept".to_string();
    }
    let mut out = table(&[
        "finished task",
        "framework",
        "agent",
        "end",
        "reason",
        "ended (UTC)",
        "ran",
        "job/stage",
    ]);
    for task in tasks {
        let origin = task
            .origin
            .as_ref()
            .map_or_else(|| "-".to_string(), |o| format!("{}/{}", o.job, o.stage));
        out.add_row(vec![
            task.task_id.to_string(),
            task.framework_id.to_string(),
            task.agent_id.to_string(),
            format!("{:?}", task.state).to_uppercase(),
            task.reason
                .as_ref()
                .map_or_else(|| "-".to_string(), |reason| format!("{reason:?}")),
            crate::commands::events::utc_time(task.ended_at_ms),
            format!(
                "{:.1} s",
                task.ended_at_ms.saturating_sub(task.launched_at_ms) as f64 / 1000.0
            ),
            origin,
        ]);
    }
    out.to_string()
}

/// One job in `fullerene job status`: a framework and its tasks counted by state.
#[derive(Debug, serde::Serialize)]
pub(crate) struct JobStatus {
    /// The framework running the job.
    pub framework: String,
    /// Its name (the job's, for the DAG-job framework).
    pub name: String,
    /// Its fairness group.
    pub group: String,
    /// Whether its scheduler is connected.
    pub connected: bool,
    /// Whether it was torn down (the job ended, or its scheduler did not fail over in time).
    pub torn_down: bool,
    /// Tasks the master tracks, by state (terminal ones until acknowledged).
    pub tasks: std::collections::BTreeMap<String, u64>,
}

/// `fullerene job status`.
pub(crate) fn job_status(args: ClusterArgs, json: &JsonOutput) -> Result<()> {
    let (frameworks, tasks) = with_client(&args, async |client| {
        Ok((
            client.list_frameworks().await?,
            client.list_tasks(None).await?,
        ))
    })?;
    let jobs = job_statuses(&frameworks, &tasks);
    json.emit(&jobs, || render_jobs(&jobs))
}

fn job_statuses(frameworks: &[FrameworkInfo], tasks: &[TaskInfo]) -> Vec<JobStatus> {
    frameworks
        .iter()
        .map(|framework| {
            let mut counts = std::collections::BTreeMap::new();
            for task in tasks.iter().filter(|t| t.framework_id == framework.id) {
                *counts
                    .entry(format!("{:?}", task.state).to_lowercase())
                    .or_insert(0) += 1;
            }
            JobStatus {
                framework: framework.id.to_string(),
                name: framework.name.clone(),
                group: framework.group.clone(),
                connected: framework.connected,
                torn_down: framework.torn_down,
                tasks: counts,
            }
        })
        .collect()
}

fn render_jobs(jobs: &[JobStatus]) -> String {
    if jobs.is_empty() {
        return "no jobs (no frameworks subscribed)".to_string();
    }
    let mut out = table(&["job", "framework", "group", "connected", "tasks by state"]);
    for job in jobs {
        let tasks = if job.tasks.is_empty() {
            "-".to_string()
        } else {
            job.tasks
                .iter()
                .map(|(state, n)| format!("{state} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.add_row(vec![
            job.name.clone(),
            job.framework.clone(),
            job.group.clone(),
            if job.torn_down {
                "torn down".to_string()
            } else {
                job.connected.to_string()
            },
            tasks,
        ]);
    }
    out.to_string()
}

/// `used/total` of one resource, in the resource's unit.
fn usage(used: &Resources, total: &Resources, kind: ResourceKind) -> String {
    let name = kind.name();
    let of = |r: &Resources| r.get(name).unwrap_or(0.0);
    format!("{}/{}", trim(of(used)), trim(of(total)))
}

fn trim(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn render_agents(agents: &[AgentInfo], now_ms: u64) -> String {
    if agents.is_empty() {
        return "no agents registered".to_string();
    }
    let mut out = table(&[
        "agent",
        "address",
        "host",
        "state",
        "cpus",
        "mem MiB",
        "disk MB/s",
        "net Mb/s",
        "gpus",
        "isolation",
        "last heard",
    ]);
    let mut notes = Vec::new();
    for agent in agents {
        let state = match (agent.state, agent.address) {
            // Active in the replicated state, but not connected to this leader: just after a
            // failover or a restart, before the agent comes back or its timeouts mark it.
            (AgentState::Active, None) => "active?, no session",
            (AgentState::Active, Some(_)) => "active",
            (AgentState::Unreachable, _) => "unreachable",
            (AgentState::Lost, _) => "lost",
        };
        let state = match &agent.drain {
            None => state.to_string(),
            Some(drain) if drain.drained => format!("{state}, drained"),
            Some(drain) => match drain.deadline_ms {
                Some(deadline) => format!(
                    "{state}, draining (kills in {:.0} s)",
                    deadline.saturating_sub(now_ms) as f64 / 1000.0
                ),
                None => format!("{state}, draining"),
            },
        };
        let heard = now_ms.saturating_sub(agent.last_heartbeat_ms);
        out.add_row(vec![
            agent.id.to_string(),
            agent
                .address
                .map_or_else(|| "-".to_string(), |a| a.to_string()),
            agent.hostname.clone(),
            state,
            usage(&agent.used, &agent.total, ResourceKind::Cpus),
            usage(&agent.used, &agent.total, ResourceKind::MemMib),
            usage(&agent.used, &agent.total, ResourceKind::DiskMbps),
            usage(&agent.used, &agent.total, ResourceKind::NetMbps),
            usage(&agent.used, &agent.total, ResourceKind::Gpus),
            isolation_cell(agent.isolation.as_ref()),
            format!("{:.1} s ago", heard as f64 / 1000.0),
        ]);
        if let Some(isolation) = &agent.isolation {
            for (what, enforcement) in [
                ("tasks not isolated", &isolation.users),
                ("limits not enforced", &isolation.limits),
            ] {
                if let Enforcement::NotEnforced { reason } = enforcement {
                    notes.push(format!("{}: {what}: {reason}", agent.id));
                }
            }
        }
    }
    let mut text = out.to_string();
    for note in notes {
        text.push('\n');
        text.push_str(&note);
    }
    text
}

/// The isolation column: `users+limits` when the agent runs each task as its own user with
/// cgroup limits, what is missing in capitals otherwise, `-` until the agent has said.
fn isolation_cell(isolation: Option<&TaskIsolation>) -> String {
    let Some(isolation) = isolation else {
        return "-".to_string();
    };
    match (isolation.users.enforced(), isolation.limits.enforced()) {
        (true, true) => "users+limits",
        (true, false) => "users, NO limits",
        (false, true) => "limits, NO users",
        (false, false) => "NONE",
    }
    .to_string()
}

fn render_frameworks(frameworks: &[FrameworkInfo]) -> String {
    if frameworks.is_empty() {
        return "no frameworks subscribed".to_string();
    }
    let mut out = table(&[
        "framework",
        "name",
        "principal",
        "group",
        "connected",
        "active tasks",
        "cpus used",
    ]);
    for framework in frameworks {
        out.add_row(vec![
            framework.id.to_string(),
            framework.name.clone(),
            framework.principal.clone(),
            framework.group.clone(),
            if framework.torn_down {
                "torn down".to_string()
            } else {
                framework.connected.to_string()
            },
            framework.active_tasks.to_string(),
            trim(framework.used.get("cpus").unwrap_or(0.0)),
        ]);
    }
    out.to_string()
}

fn render_tasks(tasks: &[TaskInfo]) -> String {
    if tasks.is_empty() {
        return "no tasks".to_string();
    }
    let mut out = table(&["task", "framework", "agent", "state", "seq", "job/stage"]);
    for task in tasks {
        let origin = task
            .spec
            .origin
            .as_ref()
            .map_or_else(|| "-".to_string(), |o| format!("{}/{}", o.job, o.stage));
        out.add_row(vec![
            task.spec.id.to_string(),
            task.framework_id.to_string(),
            task.agent_id.to_string(),
            format!("{:?}", task.state).to_uppercase(),
            task.seq.to_string(),
            origin,
        ]);
    }
    out.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_proto::messages::DrainStatus;
    use fullerene_proto::AgentId;

    #[test]
    fn the_agents_table_shows_usage_state_and_age() {
        let resources = |cpus: f64| [("cpus", cpus)].into_iter().collect::<Resources>();
        let agent = AgentInfo {
            id: AgentId("agent-1".to_string()),
            hostname: "node1".to_string(),
            total: resources(8.0),
            used: resources(2.5),
            state: AgentState::Unreachable,
            attributes: Default::default(),
            last_heartbeat_ms: 1_000,
            address: None,
            isolation: None,
            drain: None,
        };
        let mut isolated = agent.clone();
        isolated.id = AgentId("agent-2".to_string());
        isolated.isolation = Some(TaskIsolation {
            users: Enforcement::Enforced,
            limits: Enforcement::NotEnforced {
                reason: "/sys/fs/cgroup is not a cgroup v2 hierarchy".to_string(),
            },
        });
        let text = render_agents(&[agent.clone(), isolated], 4_500);
        assert!(text.contains("users, NO limits"), "{text}");
        assert!(
            text.contains("agent-2: limits not enforced: /sys/fs/cgroup is not a cgroup v2"),
            "{text}"
        );
        let text = render_agents(std::slice::from_ref(&agent), 4_500);
        assert!(
            text.contains("agent-1") && text.contains("unreachable"),
            "{text}"
        );
        let mut silent = agent.clone();
        silent.state = AgentState::Active;
        let text = render_agents(std::slice::from_ref(&silent), 4_500);
        assert!(text.contains("active?, no session"), "{text}");
        silent.address = Some("127.0.0.1:7000".parse().expect("an address"));
        let text = render_agents(&[silent], 4_500);
        assert!(
            text.contains("active") && !text.contains("no session"),
            "{text}"
        );
        assert!(text.contains("2.50/8"), "{text}");
        assert!(text.contains("3.5 s ago"), "{text}");
        // Network bandwidth is in megabits per second (`net_mbps`), disk bandwidth in megabytes.
        assert!(
            text.contains("net Mb/s") && text.contains("disk MB/s"),
            "{text}"
        );
        assert_eq!(render_agents(&[], 0), "no agents registered");

        let mut draining = agent.clone();
        draining.drain = Some(DrainStatus {
            since_ms: 1_000,
            deadline_ms: Some(64_500),
            drained: false,
        });
        let text = render_agents(&[draining.clone()], 4_500);
        assert!(text.contains("draining (kills in 60 s)"), "{text}");
        draining.drain = Some(DrainStatus {
            since_ms: 1_000,
            deadline_ms: None,
            drained: true,
        });
        assert!(render_agents(&[draining], 4_500).contains("unreachable, drained"));
    }

    #[test]
    fn job_status_counts_each_frameworks_tasks_by_state() {
        use fullerene_proto::messages::{Executor, TaskSpec, TaskState};
        let framework = |id: &str| FrameworkInfo {
            id: FrameworkId(id.to_string()),
            name: format!("job-{id}"),
            principal: "framework-1".to_string(),
            group: "default".to_string(),
            connected: true,
            torn_down: false,
            used: Resources::default(),
            active_tasks: 0,
        };
        let task = |id: &str, framework: &str, state: TaskState| TaskInfo {
            spec: TaskSpec {
                id: fullerene_proto::TaskId(id.to_string()),
                name: id.to_string(),
                executor: Executor::Sleep { duration_ms: 1 },
                resources: Resources::default(),
                origin: None,
                kill_grace_ms: 0,
            },
            framework_id: FrameworkId(framework.to_string()),
            agent_id: AgentId("agent-1".to_string()),
            state,
            seq: 1,
        };
        let jobs = job_statuses(
            &[framework("a"), framework("b")],
            &[
                task("t1", "a", TaskState::Running),
                task("t2", "a", TaskState::Running),
                task("t3", "a", TaskState::Finished),
            ],
        );
        assert_eq!(jobs[0].tasks.get("running"), Some(&2));
        assert_eq!(jobs[0].tasks.get("finished"), Some(&1));
        assert!(jobs[1].tasks.is_empty());
        assert!(
            render_jobs(&jobs).contains("running 2, finished 1")
                || render_jobs(&jobs).contains("finished 1, running 2")
        );
    }
}
