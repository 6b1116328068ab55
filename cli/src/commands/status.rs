//! `fullerene agents`, `fullerene frameworks`, `fullerene tasks`: what the leader knows, for
//! operators (linearizable reads; any master answers, followers redirect).

use std::collections::BTreeMap;

use anyhow::Result;
use clap::Args;
use fullerene_client::{OperatorClient, OperatorClientError};
use fullerene_proto::messages::{
    AgentInfo, AgentState, Enforcement, FinishedTaskInfo, FrameworkInfo, TaskInfo, TaskIsolation,
    TaskState,
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
    #[arg(long, short)]
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
    let framework = args.framework.map(FrameworkId::from);
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

/// One job in `fullerene job status`: a DAG job its framework described, or a framework that
/// described none.
#[derive(Debug, serde::Serialize)]
pub(crate) struct JobStatus {
    /// The job's name (the framework's, for a framework that described no job).
    pub job: String,
    /// The framework running it.
    pub framework: String,
    /// Its framework's fairness group.
    pub group: String,
    /// The reservation it runs in (`None`: best effort, or a framework that described no job).
    pub reservation: Option<String>,
    /// `running`, `finished`, `failed` or `killed` for a described job; for a framework that
    /// described none, `connected`, `disconnected` or `torn down`.
    pub state: String,
    /// Why it failed or was killed.
    pub reason: Option<String>,
    /// The policy ordering its tasks, when described.
    pub policy: Option<String>,
    /// Its completion time as the masters saw it (description to end), once finished.
    pub jct_s: Option<f64>,
    /// Stages all of whose tasks finished, and all its stages (described jobs).
    pub stages_done: Option<(usize, usize)>,
    /// Its tasks by state: live ones as the masters track them, and the attempts that ended
    /// (counted per stage as they end, so they outlive the task records).
    pub tasks: BTreeMap<String, u64>,
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
    let state_name = |state: TaskState| format!("{state:?}").to_lowercase();
    let mut statuses = Vec::new();
    for framework in frameworks {
        let its_tasks = tasks.iter().filter(|t| t.framework_id == framework.id);
        if framework.jobs.is_empty() {
            let mut counts = BTreeMap::new();
            for task in its_tasks {
                *counts.entry(state_name(task.state)).or_insert(0) += 1;
            }
            statuses.push(JobStatus {
                job: framework.name.clone(),
                framework: framework.id.to_string(),
                group: framework.group.clone(),
                reservation: None,
                state: if framework.torn_down {
                    "torn down"
                } else if framework.connected {
                    "connected"
                } else {
                    "disconnected"
                }
                .to_string(),
                reason: None,
                policy: None,
                jct_s: None,
                stages_done: None,
                tasks: counts,
            });
            continue;
        }
        let views = fullerene_proto::http::job_views(std::slice::from_ref(framework), tasks);
        for job in views {
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            for stage in &job.stages {
                for (state, n) in &stage.tasks {
                    *counts.entry(state.clone()).or_insert(0) += n;
                }
            }
            let done = job.stages.iter().filter(|stage| stage.done()).count();
            statuses.push(JobStatus {
                job: job.job,
                framework: framework.id.to_string(),
                group: framework.group.clone(),
                reservation: job.reservation,
                state: job.outcome.unwrap_or_else(|| "running".to_string()),
                reason: job.reason,
                policy: Some(job.policy),
                jct_s: job.jct_ms.map(|ms| ms as f64 / 1_000.0),
                stages_done: Some((done, job.stages.len())),
                tasks: counts,
            });
        }
    }
    statuses
}

fn render_jobs(jobs: &[JobStatus]) -> String {
    if jobs.is_empty() {
        return "no jobs (no frameworks subscribed)".to_string();
    }
    let mut out = table(&[
        "job",
        "framework",
        "group",
        "reservation",
        "state",
        "JCT",
        "stages done",
        "tasks by state",
    ]);
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
        let state = match &job.reason {
            Some(reason) => format!("{}: {reason}", job.state),
            None => job.state.clone(),
        };
        out.add_row(vec![
            job.job.clone(),
            job.framework.clone(),
            job.group.clone(),
            job.reservation.clone().unwrap_or_else(|| "-".to_string()),
            state,
            job.jct_s.map_or("-".to_string(), |s| format!("{s:.1} s")),
            job.stages_done
                .map_or("-".to_string(), |(done, all)| format!("{done}/{all}")),
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
            id: AgentId::from("agent-1"),
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
        isolated.id = AgentId::from("agent-2");
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
    fn job_status_shows_described_jobs_with_their_end_and_other_frameworks_by_name() {
        use fullerene_proto::jobs::{JobDescription, JobEnd, JobInfo, StageDescription, StageEnds};
        use fullerene_proto::messages::{Executor, TaskOrigin, TaskSpec};
        let framework = |id: &str, jobs: Vec<JobInfo>| FrameworkInfo {
            id: FrameworkId::from(id.to_string()),
            name: format!("job-{id}"),
            principal: "framework-1".to_string(),
            group: "default".to_string(),
            connected: true,
            torn_down: false,
            used: Resources::default(),
            active_tasks: 0,
            jobs,
        };
        let stage = |stage: u32, parents: Vec<u32>| StageDescription {
            stage,
            name: format!("s{stage}"),
            tasks: 2,
            parents,
        };
        let job = |name: &str, end: Option<JobEnd>, ends: [StageEnds; 2]| JobInfo {
            description: JobDescription {
                job: name.to_string(),
                policy: "graphene".to_string(),
                stages: vec![stage(0, vec![]), stage(1, vec![0])],
                reservation: None,
            },
            submitted_at_ms: 1_000,
            ended_at_ms: end.as_ref().map(|_| 3_500),
            end,
            stage_ends: ends.to_vec(),
        };
        let task = |id: &str, framework: &str, job: &str, state: TaskState| TaskInfo {
            spec: TaskSpec {
                id: fullerene_proto::TaskId::from(id.to_string()),
                name: id.to_string(),
                executor: Executor::Sleep { duration_ms: 1 },
                resources: Resources::default(),
                origin: Some(TaskOrigin {
                    job: job.to_string(),
                    stage: 1,
                    index: 0,
                    attempt: 0,
                }),
                kill_grace_ms: 0,
            },
            framework_id: FrameworkId::from(framework.to_string()),
            agent_id: AgentId::from("agent-1"),
            state,
            seq: 1,
        };
        let two_finished = StageEnds {
            finished: 2,
            ..StageEnds::default()
        };
        let jobs = job_statuses(
            &[
                framework(
                    "a",
                    vec![job("q1", None, [two_finished, StageEnds::default()])],
                ),
                framework(
                    "b",
                    vec![job("q2", Some(JobEnd::Finished), [two_finished; 2])],
                ),
                framework(
                    "c",
                    vec![job(
                        "q3",
                        Some(JobEnd::Killed {
                            reason: "killed by an operator".to_string(),
                        }),
                        [two_finished, StageEnds::default()],
                    )],
                ),
                framework("d", vec![]),
            ],
            &[
                task("t1", "a", "q1", TaskState::Running),
                // Ended and not yet acknowledged: counted once, from the stage's ends.
                task("t0", "a", "q1", TaskState::Finished),
                task("t2", "d", "other", TaskState::Staging),
            ],
        );
        assert_eq!(jobs.len(), 4);
        assert_eq!(
            (jobs[0].job.as_str(), jobs[0].state.as_str()),
            ("q1", "running")
        );
        assert_eq!(jobs[0].tasks.get("running"), Some(&1));
        assert_eq!(jobs[0].tasks.get("finished"), Some(&2));
        assert_eq!(jobs[0].stages_done, Some((1, 2)));
        assert_eq!(jobs[1].state, "finished");
        assert_eq!(jobs[1].jct_s, Some(2.5));
        assert_eq!(jobs[1].stages_done, Some((2, 2)));
        assert_eq!(jobs[2].state, "killed");
        assert_eq!(jobs[2].jct_s, None);
        assert_eq!(
            (jobs[3].job.as_str(), jobs[3].state.as_str()),
            ("job-d", "connected")
        );
        assert_eq!(jobs[3].tasks.get("staging"), Some(&1));
        let text = render_jobs(&jobs);
        assert!(text.contains("killed: killed by an operator"), "{text}");
        assert!(text.contains("2.5 s"), "{text}");
        assert!(text.contains("running 1"), "{text}");
    }
}
