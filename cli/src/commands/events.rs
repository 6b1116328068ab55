//! `fullerene events`: what happened in the cluster (leader changes, agents, frameworks, task
//! state changes), from the leader's ring of events, over the operator session like the other
//! reads. `--follow` keeps asking for what comes after the last event it printed; when the
//! leader changes it goes on with the new one from the same number, so nothing is printed
//! twice or skipped.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use fullerene_client::OperatorClientError;
use fullerene_proto::http::{ClusterEvent, EventRecord, EventsDocument};

use crate::commands::cluster::{operator_client, ClusterArgs};
use crate::commands::runtime;
use crate::output::{table, JsonOutput};

/// Flags of `fullerene events`.
#[derive(Args, Debug)]
pub(crate) struct EventsArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Keep printing events as they happen (across leader changes) until interrupted.
    #[arg(long, short)]
    pub follow: bool,
    /// Only events numbered after SEQ (the `seq` of the last event you have).
    #[arg(long, value_name = "SEQ")]
    pub since: Option<u64>,
    /// At most N events (without `--since`, the latest N).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
}

/// How long the leader holds a `--follow` request open when nothing new has happened.
const FOLLOW_WAIT: Duration = Duration::from_secs(1);

/// `fullerene events`.
pub(crate) fn run(args: EventsArgs, json: &JsonOutput) -> Result<()> {
    let lines = match json {
        JsonOutput::Off => false,
        JsonOutput::Stdout => true,
        JsonOutput::File(_) => {
            bail!("`fullerene events` prints JSON lines on standard output: use `--json` alone")
        }
    };
    runtime()?.block_on(async {
        let mut client = operator_client(&args.cluster)?;
        let first = client
            .events(args.since, args.limit, Duration::ZERO)
            .await?;
        let mut since = print_page(&first, args.since, lines, !args.follow)?;
        if !args.follow {
            if first.more {
                eprintln!(
                    "more events follow: `fullerene events --since {}`",
                    since.unwrap_or(first.last)
                );
            }
            return Ok(());
        }
        let mut since_value = since.unwrap_or(first.last);
        loop {
            match client
                .events(Some(since_value), args.limit, FOLLOW_WAIT)
                .await
            {
                Ok(page) => {
                    since = print_page(&page, Some(since_value), lines, false)?;
                    since_value = since.unwrap_or(since_value);
                }
                // The leader is gone and no other answered yet: keep trying, from the same
                // number, until one does.
                Err(error @ OperatorClientError::NoLeader { .. }) => {
                    eprintln!("{error}; still trying");
                }
                Err(error) => return Err(error.into()),
            }
        }
    })
}

/// Prints one page of events (a table when `whole`, one line per event otherwise); returns the
/// number of the last event printed.
fn print_page(
    page: &EventsDocument,
    since: Option<u64>,
    lines: bool,
    whole: bool,
) -> Result<Option<u64>> {
    if page.missed {
        eprintln!(
            "events after {} up to {} are no longer kept by the leader (master {}): it keeps \
             only the latest; re-read the state with `fullerene agents`, `frameworks`, `tasks`",
            since.unwrap_or(0),
            page.floor,
            page.master.0
        );
    }
    if lines {
        for event in &page.events {
            println!("{}", serde_json::to_string(event)?);
        }
    } else if whole {
        println!("{}", render_events(&page.events));
    } else {
        for event in &page.events {
            let (time, kind, subject, detail) = columns(event);
            println!("{time}  {kind:<22} {subject:<28} {detail}");
        }
    }
    Ok(page.events.last().map(|event| event.seq))
}

/// The events as a table: time, kind, subject, detail.
pub(crate) fn render_events(events: &[EventRecord]) -> String {
    if events.is_empty() {
        return "no events".to_string();
    }
    let mut out = table(&["time", "kind", "subject", "detail"]);
    for event in events {
        let (time, kind, subject, detail) = columns(event);
        out.add_row(vec![time, kind.to_string(), subject, detail]);
    }
    out.to_string()
}

/// A time as operators read it: UTC, to the millisecond.
pub(crate) fn utc_time(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|time| {
            time.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// One event's columns: when, what kind, about whom, and what else.
fn columns(record: &EventRecord) -> (String, &'static str, String, String) {
    let time = record.at_ms.map_or_else(|| "-".to_string(), utc_time);
    let (subject, detail) = describe(&record.event);
    (time, record.event.kind(), subject, detail)
}

/// What an event is about, and the rest of what it says.
pub(crate) fn describe(event: &ClusterEvent) -> (String, String) {
    let state = |state: &fullerene_proto::messages::TaskState| format!("{state:?}").to_uppercase();
    match event {
        ClusterEvent::LeaderElected { term, leader } => (
            leader.map_or_else(|| "master ?".to_string(), |id| format!("master {id}")),
            format!("term {term}"),
        ),
        ClusterEvent::AgentRegistered { agent, hostname } => {
            (format!("agent {agent}"), format!("host {hostname}"))
        }
        ClusterEvent::AgentReregistered {
            agent,
            hostname,
            was_lost,
        } => (
            format!("agent {agent}"),
            if *was_lost {
                format!("host {hostname}, back from lost")
            } else {
                format!("host {hostname}")
            },
        ),
        ClusterEvent::AgentReachable { agent }
        | ClusterEvent::AgentUnreachable { agent }
        | ClusterEvent::AgentDrained { agent }
        | ClusterEvent::AgentUndrained { agent } => (format!("agent {agent}"), String::new()),
        ClusterEvent::AgentLost { agent, tasks_lost } => {
            (format!("agent {agent}"), format!("{tasks_lost} tasks lost"))
        }
        ClusterEvent::AgentDraining { agent, deadline_ms } => (
            format!("agent {agent}"),
            deadline_ms.map_or_else(
                || "tasks end on their own".to_string(),
                |deadline| format!("kills at {}", utc_time(deadline)),
            ),
        ),
        ClusterEvent::FrameworkSubscribed {
            framework,
            name,
            principal,
            group,
        } => (
            format!("framework {framework}"),
            format!("{name} ({principal}, group {group})"),
        ),
        ClusterEvent::FrameworkReconnected { framework, name } => {
            (format!("framework {framework}"), name.clone())
        }
        ClusterEvent::FrameworkDisconnected { framework } => {
            (format!("framework {framework}"), String::new())
        }
        ClusterEvent::FrameworkTornDown {
            framework,
            cause,
            tasks_killed,
        } => (
            format!("framework {framework}"),
            format!(
                "{}, {tasks_killed} tasks killed",
                match cause {
                    fullerene_proto::http::TeardownCause::Operator => "by an operator",
                    fullerene_proto::http::TeardownCause::FailoverTimeout =>
                        "failover timeout passed",
                    fullerene_proto::http::TeardownCause::OwnRequest => "at its own request",
                }
            ),
        ),
        ClusterEvent::TaskStateChanged {
            framework,
            task,
            agent,
            from,
            to,
            reason,
            message,
        } => {
            let mut detail = match from {
                Some(from) => format!("{} -> {}", state(from), state(to)),
                None => format!("launched ({})", state(to)),
            };
            detail.push_str(&format!(" on {agent}"));
            if let Some(reason) = reason {
                detail.push_str(&format!(", {reason:?}"));
            }
            if !message.is_empty() {
                detail.push_str(&format!(": {message}"));
            }
            (format!("task {framework}/{task}"), detail)
        }
        ClusterEvent::MasterAdded { master, addr } => (
            format!("master {master}"),
            addr.map_or_else(String::new, |addr| format!("at {addr}")),
        ),
        ClusterEvent::MasterRemoved { master } => (format!("master {master}"), String::new()),
        ClusterEvent::GroupWeightChanged { group, weight } => {
            (format!("group {group}"), format!("weight {weight}"))
        }
        ClusterEvent::ReservationAccepted {
            reservation,
            principal,
            updated,
        } => (
            format!("reservation {reservation}"),
            format!(
                "{} for {principal}",
                if *updated { "updated" } else { "accepted" }
            ),
        ),
        ClusterEvent::ReservationDeleted { reservation } => {
            (format!("reservation {reservation}"), "deleted".to_string())
        }
        ClusterEvent::ReservationRejected {
            reservation,
            principal,
            reason,
        } => (
            format!("reservation {reservation}"),
            format!("rejected for {principal}: {reason}"),
        ),
        ClusterEvent::ReservationClosed {
            reservation,
            principal,
            outcome,
            jobs,
            late_jobs,
        } => (
            format!("reservation {reservation}"),
            if *late_jobs > 0 {
                format!("closed {outcome} for {principal}: {late_jobs} of {jobs} jobs late")
            } else {
                format!("closed {outcome} for {principal}: {jobs} jobs")
            },
        ),
        ClusterEvent::EventsOmitted { count } => {
            (String::new(), format!("{count} more events of this entry"))
        }
    }
}

#[cfg(test)]
mod tests {
    use fullerene_proto::http::TeardownCause;
    use fullerene_proto::messages::{StatusReason, TaskState};

    use super::*;

    #[test]
    fn events_read_as_subject_and_detail() {
        let ended = ClusterEvent::TaskStateChanged {
            framework: "fw-1".into(),
            task: "t7".into(),
            agent: "agent-2".into(),
            from: Some(TaskState::Running),
            to: TaskState::Failed,
            reason: Some(StatusReason::Exited { code: 3 }),
            message: "exit 3".to_string(),
        };
        let (subject, detail) = describe(&ended);
        assert_eq!(subject, "task fw-1/t7");
        assert_eq!(
            detail,
            "RUNNING -> FAILED on agent-2, Exited { code: 3 }: exit 3"
        );
        let (subject, detail) = describe(&ClusterEvent::FrameworkTornDown {
            framework: "fw-1".into(),
            cause: TeardownCause::FailoverTimeout,
            tasks_killed: 2,
        });
        assert_eq!(subject, "framework fw-1");
        assert_eq!(detail, "failover timeout passed, 2 tasks killed");
        let (subject, detail) = describe(&ClusterEvent::ReservationClosed {
            reservation: "etl".into(),
            principal: "alice".into(),
            outcome: "late".into(),
            jobs: 3,
            late_jobs: 1,
        });
        assert_eq!(subject, "reservation etl");
        assert_eq!(detail, "closed late for alice: 1 of 3 jobs late");
        let record = EventRecord {
            seq: 5_000_001,
            index: 5,
            at_ms: Some(1_764_190_000_123),
            event: ClusterEvent::LeaderElected {
                term: 3,
                leader: Some(2),
            },
        };
        let text = render_events(&[record]);
        assert!(text.contains("2025-11-26T20:46:40.123Z"), "{text}");
        assert!(
            text.contains("leader_elected") && text.contains("master 2"),
            "{text}"
        );
        assert!(text.contains("term 3"), "{text}");
        assert_eq!(render_events(&[]), "no events");
    }
}
