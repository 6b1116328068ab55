//! The event log: what an agent or a framework did that a test of the whole cluster must know,
//! one JSON object per line, appended as it happens.
//!
//! `fullerene agent --event-log FILE` and `fullerene job run --event-log FILE` write one;
//! `fullerene chaos run` reads them (with what the masters' HTTP API and the machine's process
//! table show) into the history its invariant checker reads. Lines follow
//! [`append_log`](crate::append_log)'s rules and nothing is buffered, so a SIGKILL loses
//! nothing already logged. Times are the machine's wall clock in microseconds since the Unix epoch, the one
//! clock every process on a machine shares.
//!
//! An event log is a record for tests and audits, not a source of truth: a write that fails
//! (a full disk) is reported once in the process's log and the process goes on.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use fullerene_proto::messages::{StatusReason, TaskState};
use fullerene_proto::{AgentId, FrameworkId, ResourceVec, TaskKey};
use serde::{Deserialize, Serialize};

/// One line of an event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoggedEvent {
    /// When, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// What.
    pub event: Event,
}

/// What an agent or a framework logs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// An agent handled its `Registered`: it joins the leader, and kills what it lists.
    AgentRegistered {
        /// The agent.
        agent: AgentId,
        /// The tasks the master gave up on while the agent was away.
        killing: Vec<TaskKey>,
    },
    /// An agent is about to start a task's process.
    TaskStarting {
        /// The agent.
        agent: AgentId,
        /// The task.
        task: TaskKey,
        /// What it was granted.
        resources: ResourceVec,
    },
    /// An agent sent a status update (the first time or again).
    UpdateSent {
        /// The agent.
        agent: AgentId,
        /// The task.
        task: TaskKey,
        /// Its sequence number.
        seq: u64,
        /// The state.
        state: TaskState,
    },
    /// The master acknowledged a task's updates up to `seq` to an agent (the framework
    /// acknowledged them and the master committed that).
    UpdateAcked {
        /// The agent.
        agent: AgentId,
        /// The task.
        task: TaskKey,
        /// The highest sequence number acknowledged.
        seq: u64,
    },
    /// A framework told the master how many of its tasks are runnable now (its demand).
    DemandChanged {
        /// The framework.
        framework_id: FrameworkId,
        /// Runnable tasks.
        runnable: u64,
    },
    /// A framework asked for a task's launch (an accept is about to be sent).
    LaunchRequested {
        /// The framework.
        framework_id: FrameworkId,
        /// The task.
        task: TaskKey,
    },
    /// A framework subscribed for the first time in this process (a process that took it
    /// over from another logs it again).
    FrameworkSubscribed {
        /// The job it runs.
        job: String,
        /// Its id.
        framework_id: FrameworkId,
    },
    /// A framework was handed offers.
    OffersReceived {
        /// The framework.
        framework_id: FrameworkId,
        /// How many.
        offers: usize,
    },
    /// A framework's scheduler was handed a status update (after the driver's deduplication).
    UpdateDelivered {
        /// The task.
        task: TaskKey,
        /// The agent the update names.
        agent: AgentId,
        /// Its sequence number.
        seq: u64,
        /// The state.
        state: TaskState,
        /// Why, when there is a reason.
        reason: Option<StatusReason>,
        /// When its producer (the agent, or the master for a task it gave up on) made it, in
        /// milliseconds since the Unix epoch.
        made_ms: u64,
    },
    /// A framework an earlier process ran could not be taken over (the master no longer knows
    /// it: its failover timeout passed); its job starts over as a new framework.
    FrameworkGone {
        /// The framework.
        framework_id: FrameworkId,
    },
    /// A job's every task finished.
    JobCompleted {
        /// The job.
        job: String,
        /// The framework that ran it.
        framework_id: FrameworkId,
    },
    /// A job failed.
    JobFailed {
        /// The job.
        job: String,
        /// The framework that ran it, if it subscribed.
        framework_id: Option<FrameworkId>,
        /// Why.
        reason: String,
    },
}

/// Why an event log could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    /// The file could not be opened or read.
    #[error("event log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line is not an event.
    #[error("event log {path}, line {line}: {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What was wrong.
        why: String,
    },
}

/// An event log open for appending.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: File,
    failed: AtomicBool,
}

impl EventLog {
    /// Opens `path` for appending (creating it).
    pub fn open(path: &Path) -> Result<EventLog, EventLogError> {
        let file = crate::append_log::open_append(path).map_err(|source| EventLogError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(EventLog {
            path: path.to_path_buf(),
            file,
            failed: AtomicBool::new(false),
        })
    }

    /// Appends `event`, stamped now.
    pub fn log(&self, event: Event) {
        let record = LoggedEvent {
            at_us: unix_micros(SystemTime::now()),
            event,
        };
        let Ok(mut line) = serde_json::to_vec(&record) else {
            return;
        };
        line.push(b'\n');
        // One write of the whole line: O_APPEND makes it land whole at the end.
        if let Err(error) = (&self.file).write_all(&line) {
            // Said once; later events are still tried (the disk may have room again).
            if !self.failed.swap(true, Ordering::Relaxed) {
                tracing::warn!(path = %self.path.display(), %error, "cannot write the event log; events are lost while this lasts");
            }
        }
    }
}

/// Reads every event of the log at `path`, in order. A last line cut short (the writer was
/// killed in the middle of it) is ignored; any other bad line is an error.
pub fn read_events(path: &Path) -> Result<Vec<LoggedEvent>, EventLogError> {
    let lines = crate::append_log::read_lines(path).map_err(|source| EventLogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut events = Vec::with_capacity(lines.len());
    for (line, bytes) in lines {
        let event = serde_json::from_slice(&bytes).map_err(|error| EventLogError::Malformed {
            path: path.to_path_buf(),
            line,
            why: error.to_string(),
        })?;
        events.push(event);
    }
    Ok(events)
}

/// Microseconds since the Unix epoch (0 before it).
pub fn unix_micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use fullerene_proto::TaskId;

    use super::*;

    #[test]
    fn events_round_trip_and_a_torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("events.jsonl");
        let log = EventLog::open(&path).expect("opens");
        let key = TaskKey::new(FrameworkId::from("fw-1"), TaskId::from("job/1.0/1"));
        log.log(Event::UpdateSent {
            agent: AgentId::from("agent-1"),
            task: key.clone(),
            seq: 2,
            state: TaskState::Finished,
        });
        log.log(Event::UpdateDelivered {
            task: key.clone(),
            agent: AgentId::from("agent-1"),
            seq: 2,
            state: TaskState::Finished,
            reason: Some(StatusReason::Exited { code: 0 }),
            made_ms: 7,
        });
        let events = read_events(&path).expect("reads");
        assert_eq!(events.len(), 2);
        assert!(
            matches!(&events[1].event, Event::UpdateDelivered { task, seq: 2, .. } if *task == key)
        );
        assert!(events[0].at_us <= events[1].at_us);

        // A writer killed mid-line leaves a torn last line: ignored.
        std::fs::write(
            &path,
            format!(
                "{}\n{{\"at_us\":1,\"ev",
                serde_json::to_string(&events[0]).expect("encodes")
            ),
        )
        .expect("write");
        assert_eq!(read_events(&path).expect("reads").len(), 1);

        // A bad line in the middle is an error naming it.
        std::fs::write(&path, "not json\n{}\n").expect("write");
        let error = read_events(&path).expect_err("refused").to_string();
        assert!(error.contains("line 1"), "{error}");
    }
}
