//! Operators' control of what runs: `fullerene agent drain|undrain`, `fullerene task kill`,
//! `fullerene job kill`, `fullerene framework teardown`. Each is a replicated command: the leader answers once it
//! is committed, so it survives a failover from then on.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_proto::messages::{
    FrameworkInfo, OperatorRequest, TaskFileRead, MAX_FILE_READ_BYTES,
};
use fullerene_proto::{AgentId, FrameworkId, TaskId};

use crate::commands::cluster::{change, operator_client, ClusterArgs};
use crate::commands::runtime;
use crate::output::JsonOutput;

/// `fullerene agent drain|undrain`: maintenance of the machine an agent runs on.
#[derive(Subcommand, Debug)]
pub(crate) enum AgentAction {
    /// Drain an agent for maintenance: it is offered nothing and takes no new task; its
    /// tasks run until they end or, with `--deadline`, until the deadline, when the leader
    /// kills them; then it is drained (`fullerene agents` shows which). Draining an agent
    /// already draining moves its deadline. It stays out of offers, across restarts and
    /// failovers, until `fullerene agent undrain`.
    ///
    /// Example: `fullerene agent drain agent-3 --deadline 10m --master-addrs 127.0.0.1:5050`.
    Drain(DrainArgs),
    /// End an agent's drain: it is offered again.
    Undrain(UndrainArgs),
}

/// Flags of `fullerene agent drain`.
#[derive(Args, Debug)]
pub(crate) struct DrainArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The agent: its id (`agent-3`) or its number (`3`).
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// How long its tasks may still run before they are killed: `90s`, `10m`, `2h`, or
    /// seconds. Without it, tasks end on their own.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub deadline: Option<Duration>,
}

/// Flags of `fullerene agent undrain`.
#[derive(Args, Debug)]
pub(crate) struct UndrainArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The agent: its id (`agent-3`) or its number (`3`).
    #[arg(value_name = "AGENT")]
    pub agent: String,
}

/// `fullerene task ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum TaskCommand {
    /// Print a task's stdout (or `--stderr`) as the task wrote it, read from its agent
    /// through the leader: all of it, the last `--tail` bytes, or, with `--follow`, what it
    /// writes next too, until it ends.
    Logs(TaskLogsArgs),
    /// Kill a task, as its framework could: the agent stops it (its grace period first) and
    /// the framework learns of it through the task's KILLED status (a DAG job retries the
    /// task, as after any failure; kill the job's framework to stop the job).
    Kill(TaskKillArgs),
}

/// The task a `fullerene task` subcommand acts on, and how to reach the masters.
#[derive(Args, Debug)]
pub(crate) struct TaskTarget {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The task's id.
    #[arg(value_name = "TASK")]
    pub task: String,
    /// The task's framework; needed only when several frameworks have a task of that id
    /// (default: the one framework the masters know with such a task).
    #[arg(long, value_name = "ID")]
    pub framework: Option<String>,
}

impl TaskTarget {
    /// The task's id and its framework's, asking the masters for the framework when none was
    /// given.
    async fn resolve(&self) -> Result<(TaskId, FrameworkId)> {
        let task_id = TaskId::from(self.task.clone());
        let framework_id = match &self.framework {
            Some(framework) => FrameworkId::from(framework.clone()),
            None => framework_of(&self.cluster, &task_id).await?,
        };
        Ok((task_id, framework_id))
    }
}

/// Flags of `fullerene task kill`.
#[derive(Args, Debug)]
pub(crate) struct TaskKillArgs {
    #[command(flatten)]
    pub target: TaskTarget,
}

/// Flags of `fullerene task logs`.
#[derive(Args, Debug)]
pub(crate) struct TaskLogsArgs {
    #[command(flatten)]
    pub target: TaskTarget,
    /// The agent the task ran on, for a task the masters no longer track (it ended and its
    /// framework acknowledged it).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Print its stderr instead of its stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Keep printing what the task writes, until it ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Start this many bytes before the end of the file.
    #[arg(long, value_name = "BYTES")]
    pub tail: Option<u64>,
}

/// How long `task logs --follow` waits before asking again when nothing new came (as the HTTP
/// API's follow does).
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// `fullerene framework ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum FrameworkCommand {
    /// Tear a framework down: its tasks are killed and its id can never be used again; its
    /// scheduler's session is closed.
    Teardown(TeardownArgs),
}

/// Flags of `fullerene framework teardown`.
#[derive(Args, Debug)]
pub(crate) struct TeardownArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The framework's id.
    #[arg(value_name = "FRAMEWORK")]
    pub framework: String,
}

/// Flags of `fullerene job kill`.
#[derive(Args, Debug)]
pub(crate) struct JobKillArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The job: its name, as `fullerene job status` shows it, or its framework's id.
    #[arg(value_name = "JOB")]
    pub job: String,
}

/// Runs `fullerene job kill`: tears down the framework that runs the job (each job of `job
/// run` is its own framework), which kills its tasks, marks the job killed in the replicated
/// state and tells its scheduler, so that `job run` reports it killed rather than waiting.
pub(crate) fn run_job_kill(args: JobKillArgs, json: &JsonOutput) -> Result<()> {
    runtime()?.block_on(async {
        let frameworks = operator_client(&args.cluster)?
            .list_frameworks()
            .await
            .context("cannot list the frameworks to find the job's")?;
        let framework_id = framework_of_job(&frameworks, &args.job)?;
        let message = format!(
            "job {} (framework {framework_id}) killed: its tasks are killed and its scheduler told",
            args.job
        );
        let request = OperatorRequest::TeardownFramework { framework_id };
        change(&args.cluster, request, json, message).await
    })
}

/// The live framework that runs the unended job `job` (a job's name, or a framework's id),
/// and runs no other unended job: killing a job tears its framework down, which must not
/// stop another job by surprise.
fn framework_of_job(frameworks: &[FrameworkInfo], job: &str) -> Result<FrameworkId> {
    let running = |f: &FrameworkInfo| -> Vec<String> {
        f.jobs
            .iter()
            .filter(|j| j.end.is_none())
            .map(|j| j.description.job.clone())
            .collect()
    };
    let live: Vec<&FrameworkInfo> = frameworks.iter().filter(|f| !f.torn_down).collect();
    let framework = match live.iter().find(|f| f.id.as_str() == job) {
        Some(by_id) => *by_id,
        None => {
            let named: Vec<&&FrameworkInfo> = live
                .iter()
                .filter(|f| running(f).iter().any(|name| name == job))
                .collect();
            match named.as_slice() {
                [one] => **one,
                [] => bail!(
                    "no running job is named `{job}` and no live framework has that id                      (`fullerene job status` lists them)"
                ),
                several => bail!(
                    "{} frameworks run a job named `{job}` ({}): name the one to kill by its                      framework id",
                    several.len(),
                    several
                        .iter()
                        .map(|f| f.id.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    let others: Vec<String> = running(framework)
        .into_iter()
        .filter(|name| name != job)
        .collect();
    if others.len() > usize::from(framework.id.as_str() == job) {
        bail!(
            "framework {} runs other jobs too ({}): `fullerene framework teardown {}` stops              them all",
            framework.id,
            others.join(", "),
            framework.id
        );
    }
    Ok(framework.id.clone())
}

/// Runs `fullerene agent drain|undrain`.
pub(crate) fn run_agent_action(action: AgentAction, json: &JsonOutput) -> Result<()> {
    let (cluster, request, message) = match action {
        AgentAction::Drain(args) => {
            let agent_id = agent_id(&args.agent);
            let message = match args.deadline {
                Some(span) => format!(
                    "{agent_id} is draining: offered nothing; what still runs in {} is killed",
                    show_span(span)
                ),
                None => {
                    format!("{agent_id} is draining: offered nothing; its tasks run until they end")
                }
            };
            let deadline_after_ms = args
                .deadline
                .map(|span| u64::try_from(span.as_millis()).unwrap_or(u64::MAX));
            let request = OperatorRequest::DrainAgent {
                agent_id,
                deadline_after_ms,
            };
            (args.cluster, request, message)
        }
        AgentAction::Undrain(args) => {
            let agent_id = agent_id(&args.agent);
            let message = format!("{agent_id} is no longer drained: it is offered again");
            (
                args.cluster,
                OperatorRequest::UndrainAgent { agent_id },
                message,
            )
        }
    };
    runtime()?.block_on(change(&cluster, request, json, message))
}

/// Runs `fullerene task kill`.
pub(crate) fn run_task(command: TaskCommand, json: &JsonOutput) -> Result<()> {
    let args = match command {
        TaskCommand::Kill(args) => args,
        TaskCommand::Logs(args) => return runtime()?.block_on(task_logs(args)),
    };
    runtime()?.block_on(async {
        let (task_id, framework_id) = args.target.resolve().await?;
        let message = format!(
            "kill of task {} (framework {}) recorded: the agent stops it",
            task_id, framework_id
        );
        let request = OperatorRequest::KillTask {
            framework_id,
            task_id,
        };
        change(&args.target.cluster, request, json, message).await
    })
}

/// Runs `fullerene framework teardown`.
pub(crate) fn run_framework(command: FrameworkCommand, json: &JsonOutput) -> Result<()> {
    let FrameworkCommand::Teardown(args) = command;
    let framework_id = FrameworkId::from(args.framework);
    let message = format!("framework {framework_id} torn down: its tasks are killed");
    let request = OperatorRequest::TeardownFramework { framework_id };
    runtime()?.block_on(change(&args.cluster, request, json, message))
}

/// The framework of the one live task named `task_id`.
/// `fullerene task logs`: the file's bytes, raw, to stdout.
async fn task_logs(args: TaskLogsArgs) -> Result<()> {
    use std::io::Write;
    let (task_id, framework_id) = args.target.resolve().await?;
    let name = if args.stderr { "stderr" } else { "stdout" };
    let mut client = operator_client(&args.target.cluster)?;
    // The task's agent, named in every read, so that a follow goes on reading after the task
    // ended and the masters forgot it.
    let agent = match args.agent.as_deref() {
        Some(agent) => Some(agent_id(agent)),
        None => client
            .list_tasks(Some(framework_id.clone()))
            .await
            .context("cannot list the tasks to find the task's agent")?
            .into_iter()
            .find(|task| task.spec.id == task_id)
            .map(|task| task.agent_id),
    };
    let mut read = TaskFileRead {
        framework_id,
        task_id,
        name: name.to_string(),
        offset: 0,
        length: MAX_FILE_READ_BYTES,
        agent_id: agent,
    };
    let what = |read: &TaskFileRead| {
        format!(
            "cannot read the {} of task {} (framework {})",
            read.name, read.task_id, read.framework_id
        )
    };
    if let Some(tail) = args.tail {
        let size = client
            .read_task_file(TaskFileRead {
                length: 0,
                ..read.clone()
            })
            .await
            .with_context(|| what(&read))?
            .size;
        read.offset = size.saturating_sub(tail);
    }
    let mut stdout = std::io::stdout().lock();
    loop {
        let chunk = client
            .read_task_file(read.clone())
            .await
            .with_context(|| what(&read))?;
        stdout.write_all(&chunk.data)?;
        stdout.flush()?;
        read.offset = chunk.offset + chunk.data.len() as u64;
        if read.offset >= chunk.size {
            if !args.follow || chunk.task_ended {
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}

async fn framework_of(cluster: &ClusterArgs, task_id: &TaskId) -> Result<FrameworkId> {
    let mut client = operator_client(cluster)?;
    let tasks = client
        .list_tasks(None)
        .await
        .context("cannot list the tasks to find the task's framework")?;
    let mut owners: Vec<FrameworkId> = tasks
        .into_iter()
        .filter(|task| &task.spec.id == task_id)
        .map(|task| task.framework_id)
        .collect();
    owners.dedup();
    match owners.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no framework has a task `{task_id}` (`fullerene tasks` lists them)"),
        several => bail!(
            "several frameworks have a task `{task_id}` ({}): say which with --framework",
            several
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `agent-3` as given, or `3` as `agent-3` (the id `fullerene certs` gives agent number 3).
fn agent_id(given: &str) -> AgentId {
    if given.bytes().all(|b| b.is_ascii_digit()) && !given.is_empty() {
        AgentId::from(format!("agent-{given}"))
    } else {
        AgentId::from(given.to_string())
    }
}

/// A span of time as `500ms`, `90s`, `10m`, `2h`, `1d`, or bare seconds.
pub(crate) fn parse_span(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a span of time: use 90s, 10m, 2h or 1d"))?;
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3_600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use ms, s, m, h or d"
            ))
        }
    };
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("`{text}` is not a span of time this clock can hold"))
}

fn show_span(span: Duration) -> String {
    let secs = span.as_secs();
    if secs >= 3_600 && secs % 3_600 == 0 {
        format!("{}h", secs / 3_600)
    } else if secs >= 60 && secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{:.3}s", span.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_take_units_and_refuse_nonsense() {
        assert_eq!(parse_span("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_span("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_span("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_span("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_span("1.5h"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_span("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_span("10x").unwrap_err().contains("unknown unit `x`"));
        assert!(parse_span("soon").unwrap_err().contains("not a span"));
        assert!(parse_span("-5s").is_err());
    }

    #[test]
    fn agents_are_named_by_id_or_number() {
        assert_eq!(agent_id("3"), AgentId::from("agent-3"));
        assert_eq!(agent_id("agent-3"), AgentId::from("agent-3"));
        assert_eq!(agent_id("rack1-node7"), AgentId::from("rack1-node7"));
    }
}
