//! The snapshot format of [`ClusterState`]: what followers receive and what the disk keeps.
//!
//! A snapshot is a sequence of *records*, each one [`fullerene_proto::codec`] message (version
//! byte, bincode, strict decoding), written in the order
//!
//! ```text
//! Header { format, agents, frameworks, tasks, finished, next_finished }
//! Core (the settings and the allocation accounting)
//! Agent × agents, Framework × frameworks, Task × tasks, Finished × finished
//! Reservations (the plan, the names, the rejected)
//! End
//! ```
//!
//! Every record is cut into *frames* of at most [`FRAME_BYTES`]: a 4-byte big-endian word
//! whose top bit says that the record goes on in the next frame and whose other bits give the
//! payload's length, then the payload. So no record has a size limit of its own (a task with a
//! long environment, or the accounting of a cluster with a million agents, is as good as a
//! small one) while no frame is larger than a megabyte, and a reader needs nothing but the
//! bytes it already holds: a claimed length is checked against what is left before anything
//! is allocated. A record's reassembled bytes are bounded by the codec's large limit
//! ([`codec::MAX_LARGE_BYTES`]).
//!
//! What can be derived is not written: an agent's set of live tasks and a framework's set of
//! active tasks are rebuilt from the task records when a snapshot is read, so a framework with
//! a hundred thousand running tasks costs a hundred thousand small records, not one huge one,
//! and the two can never disagree. The header's counts and the `End` record make a truncated
//! snapshot an error rather than a smaller, wrong state.

use std::sync::Arc;

use fullerene_proto::codec::{self, CodecError};
use fullerene_proto::messages::{AgentState, FinishedTaskInfo};
use fullerene_proto::FrameworkId;
use fullerene_scheduling::allocator::state::AllocationState;
use serde::{Deserialize, Serialize};

use super::history::FinishedTasks;
use super::records::{AgentEntry, ClusterSettings, FrameworkEntry, TaskRecord};
use super::reservations::Reservations;
use super::{ClusterState, TaskKey};

/// Version of the snapshot layout (independent of the codec's wire version). Bumped whenever
/// a record type changes. Version 4 cut every record into frames and stopped writing the
/// derived task sets of agents and frameworks; version 5 added the operator's principal-to-group
/// mapping and quotas to the settings; version 6 the operator's drain of each agent; version 7
/// the history of finished tasks and its limits in the settings, and the DAG jobs frameworks
/// describe; version 8 the reservations' plan (issue 17); version 9 the jobs' reservation tags,
/// the preempted tasks' reason and the closed reservations with their outcome; version 10 the
/// plan's quantum in the operator's reservation policy command (in the log beside the
/// snapshot) and the time of the plan's last capacity change; version 11 the frameworks'
/// acknowledgements in batches (`Command::AcknowledgeStatus`, in the log); version 12 the count
/// of reservations closed unused; version 13 the work each reservation's atoms held in the
/// quanta its plan has forgotten. A snapshot of another version is refused
/// ([`SnapshotError::FormatVersion`]): masters of one cluster run one version.
pub const STATE_FORMAT_VERSION: u32 = 13;

/// The largest payload of one frame (1 MiB): a record longer than this spans several frames.
pub const FRAME_BYTES: usize = 1 << 20;

/// The frame word's bit that says the record continues in the next frame.
const CONTINUES: u32 = 1 << 31;

/// Why a snapshot could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    /// A record could not be encoded (e.g. larger than the codec's large limit).
    #[error("cannot encode the {record} record of the state snapshot: {source}")]
    Encode {
        /// Which record.
        record: &'static str,
        /// The codec's error.
        source: CodecError,
    },
    /// The bytes end inside a frame, or before the `End` record.
    #[error("state snapshot is truncated at byte {offset} of {len}")]
    Truncated {
        /// Where the data ended.
        offset: usize,
        /// The snapshot's length.
        len: usize,
    },
    /// A frame longer than [`FRAME_BYTES`], or a record whose frames add up to more than the
    /// codec's large limit.
    #[error("state snapshot frame at byte {offset} claims {length} bytes (limit {limit})")]
    FrameTooLarge {
        /// The frame's offset.
        offset: usize,
        /// Its claimed length (for a record, the length reached with this frame).
        length: usize,
        /// The limit.
        limit: usize,
    },
    /// A record that does not decode.
    #[error("state snapshot record at byte {offset} is malformed: {source}")]
    Frame {
        /// The offset of the record's first frame.
        offset: usize,
        /// The codec's error.
        source: CodecError,
    },
    /// A snapshot written by an incompatible version.
    #[error("state snapshot has format version {found}, this build reads version {expected}")]
    FormatVersion {
        /// The version found.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// A record where another was expected, a duplicate, or counts that do not add up.
    #[error("state snapshot is inconsistent: {0}")]
    Inconsistent(String),
    /// Bytes after the `End` record.
    #[error("state snapshot has {0} bytes after its end")]
    TrailingBytes(usize),
}

/// The records, as encoded (borrowing from the state).
#[derive(Serialize)]
enum RecordRef<'a> {
    Header {
        format: u32,
        agents: u64,
        frameworks: u64,
        tasks: u64,
        finished: u64,
        next_finished: u64,
    },
    Core(&'a ClusterSettings, &'a AllocationState),
    Agent(&'a AgentEntry),
    Framework(&'a FrameworkEntry),
    Task(&'a FrameworkId, &'a TaskRecord),
    Finished(&'a FinishedTaskInfo),
    Reservations(&'a Reservations),
    End,
}

/// The records, as decoded. Same variants in the same order as [`RecordRef`].
#[derive(Deserialize)]
enum Record {
    Header {
        format: u32,
        agents: u64,
        frameworks: u64,
        tasks: u64,
        finished: u64,
        next_finished: u64,
    },
    /// Boxed (the same bytes as unboxed): the settings and the accounting are far larger
    /// than the other records.
    Core(Box<ClusterSettings>, Box<AllocationState>),
    Agent(AgentEntry),
    Framework(FrameworkEntry),
    Task(FrameworkId, TaskRecord),
    Finished(FinishedTaskInfo),
    Reservations(Box<Reservations>),
    End,
}

impl Record {
    fn name(&self) -> &'static str {
        match self {
            Record::Header { .. } => "header",
            Record::Core(..) => "core",
            Record::Agent(_) => "agent",
            Record::Framework(_) => "framework",
            Record::Task(..) => "task",
            Record::Finished(_) => "finished task",
            Record::Reservations(_) => "reservations",
            Record::End => "end",
        }
    }
}

/// Encodes `record` and appends it as frames of at most [`FRAME_BYTES`].
fn push_record(
    out: &mut Vec<u8>,
    record: &RecordRef<'_>,
    name: &'static str,
) -> Result<(), SnapshotError> {
    // The record is encoded in place after room for its frame word (most records are one
    // frame): a snapshot of tens of thousands of records is written once, not copied again.
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let len = match codec::encode_large_into(record, out) {
        Ok(len) => len,
        Err(source) => {
            out.truncate(start);
            return Err(SnapshotError::Encode {
                record: name,
                source,
            });
        }
    };
    if len <= FRAME_BYTES {
        // At most FRAME_BYTES (2^20), so its length never reaches the flag bit.
        out[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
        return Ok(());
    }
    let bytes = out.split_off(start + 4);
    out.truncate(start);
    let mut pieces = bytes.chunks(FRAME_BYTES).peekable();
    while let Some(piece) = pieces.next() {
        let mut word = piece.len() as u32;
        if pieces.peek().is_some() {
            word |= CONTINUES;
        }
        out.extend_from_slice(&word.to_be_bytes());
        out.extend_from_slice(piece);
    }
    Ok(())
}

struct RecordReader<'a> {
    data: &'a [u8],
    offset: usize,
}

impl RecordReader<'_> {
    /// Reads one frame: its payload, and whether the record continues after it.
    fn frame(&mut self) -> Result<(&[u8], bool), SnapshotError> {
        let len = self.data.len();
        let truncated = SnapshotError::Truncated {
            offset: self.offset,
            len,
        };
        let header_end = self.offset.checked_add(4).filter(|&end| end <= len);
        let Some(header_end) = header_end else {
            return Err(truncated);
        };
        let mut word = [0u8; 4];
        word.copy_from_slice(&self.data[self.offset..header_end]);
        let word = u32::from_be_bytes(word);
        let length = (word & !CONTINUES) as usize;
        if length > FRAME_BYTES {
            return Err(SnapshotError::FrameTooLarge {
                offset: self.offset,
                length,
                limit: FRAME_BYTES,
            });
        }
        let end = header_end + length;
        if end > len {
            return Err(truncated);
        }
        self.offset = end;
        Ok((&self.data[header_end..end], word & CONTINUES != 0))
    }

    fn next(&mut self) -> Result<Record, SnapshotError> {
        let start = self.offset;
        let (first, mut continues) = self.frame()?;
        let record = if !continues {
            codec::decode_large(first)
        } else {
            // Grown as frames arrive, so a lying flag cannot make us allocate up front.
            let mut bytes = first.to_vec();
            while continues {
                let frame_offset = self.offset;
                let (piece, more) = self.frame()?;
                if bytes.len() + piece.len() > codec::MAX_LARGE_BYTES {
                    return Err(SnapshotError::FrameTooLarge {
                        offset: frame_offset,
                        length: bytes.len() + piece.len(),
                        limit: codec::MAX_LARGE_BYTES,
                    });
                }
                bytes.extend_from_slice(piece);
                continues = more;
            }
            codec::decode_large(&bytes)
        };
        record.map_err(|source| SnapshotError::Frame {
            offset: start,
            source,
        })
    }

    fn expect<T>(
        &mut self,
        what: &str,
        pick: impl FnOnce(Record) -> Option<T>,
    ) -> Result<T, SnapshotError> {
        let record = self.next()?;
        let found = record.name();
        pick(record).ok_or_else(|| {
            SnapshotError::Inconsistent(format!("expected a {what} record, found {found}"))
        })
    }
}

impl ClusterState {
    /// Encodes the whole state as a snapshot (see the module documentation for the layout).
    pub fn encode_snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        let mut out = Vec::new();
        push_record(
            &mut out,
            &RecordRef::Header {
                format: STATE_FORMAT_VERSION,
                agents: self.agents.len() as u64,
                frameworks: self.frameworks.len() as u64,
                tasks: self.tasks.len() as u64,
                finished: self.finished.len() as u64,
                next_finished: self.finished.next_ordinal(),
            },
            "header",
        )?;
        push_record(
            &mut out,
            &RecordRef::Core(&self.settings, &self.allocation),
            "core",
        )?;
        for agent in self.agents.values() {
            push_record(&mut out, &RecordRef::Agent(agent), "agent")?;
        }
        for framework in self.frameworks.values() {
            push_record(&mut out, &RecordRef::Framework(framework), "framework")?;
        }
        for (key, task) in &self.tasks {
            push_record(&mut out, &RecordRef::Task(&key.framework_id, task), "task")?;
        }
        for finished in self.finished.iter() {
            push_record(&mut out, &RecordRef::Finished(finished), "finished task")?;
        }
        push_record(
            &mut out,
            &RecordRef::Reservations(&self.reservations),
            "reservations",
        )?;
        push_record(&mut out, &RecordRef::End, "end")?;
        Ok(out)
    }

    /// Decodes a snapshot made by [`ClusterState::encode_snapshot`], strictly: a wrong format
    /// version, a truncated or malformed frame or record, records out of order or duplicated,
    /// counts that disagree with the header, or bytes after the end are all errors. The task
    /// sets of agents and frameworks are rebuilt from the task records.
    pub fn decode_snapshot(data: &[u8]) -> Result<ClusterState, SnapshotError> {
        let mut reader = RecordReader { data, offset: 0 };
        let (format, agents, frameworks, tasks, finished, next_finished) =
            reader.expect("header", |r| match r {
                Record::Header {
                    format,
                    agents,
                    frameworks,
                    tasks,
                    finished,
                    next_finished,
                } => Some((format, agents, frameworks, tasks, finished, next_finished)),
                _ => None,
            })?;
        if format != STATE_FORMAT_VERSION {
            return Err(SnapshotError::FormatVersion {
                found: format,
                expected: STATE_FORMAT_VERSION,
            });
        }
        let (settings, allocation) = reader.expect("core", |r| match r {
            Record::Core(settings, allocation) => Some((settings, allocation)),
            _ => None,
        })?;
        let mut state = ClusterState {
            settings: *settings,
            allocation: *allocation,
            agents: Default::default(),
            frameworks: Default::default(),
            tasks: Default::default(),
            live_frameworks_by_principal: Default::default(),
            torn_down_with_jobs: Default::default(),
            finished: FinishedTasks::starting_at(next_finished),
            reservations: Default::default(),
            live_capacity: Default::default(),
        };
        for _ in 0..agents {
            let agent = reader.expect("agent", |r| match r {
                Record::Agent(a) => Some(a),
                _ => None,
            })?;
            let id = agent.id.clone();
            if agent.state != AgentState::Lost {
                state.live_capacity.add(&agent.total, 1);
            }
            if state.agents.insert(id.clone(), agent).is_some() {
                return Err(SnapshotError::Inconsistent(format!(
                    "agent `{id}` appears twice"
                )));
            }
        }
        for _ in 0..frameworks {
            let framework = reader.expect("framework", |r| match r {
                Record::Framework(f) => Some(f),
                _ => None,
            })?;
            let id = framework.id.clone();
            if let (Some(at_ms), false) = (framework.torn_down_at_ms, framework.jobs.is_empty()) {
                state.torn_down_with_jobs.insert((at_ms, id.clone()));
            }
            if framework.torn_down_at_ms.is_none() {
                *state
                    .live_frameworks_by_principal
                    .entry(framework.principal.clone())
                    .or_default() += 1;
            }
            if state.frameworks.insert(id.clone(), framework).is_some() {
                return Err(SnapshotError::Inconsistent(format!(
                    "framework `{id}` appears twice"
                )));
            }
        }
        for _ in 0..tasks {
            let (framework_id, task) = reader.expect("task", |r| match r {
                Record::Task(f, t) => Some((f, t)),
                _ => None,
            })?;
            state.insert_snapshot_task(framework_id, task)?;
        }
        for _ in 0..finished {
            let mut task = reader.expect("finished task", |r| match r {
                Record::Finished(t) => Some(t),
                _ => None,
            })?;
            // Shared with the entries, as when the task was retired (and its agent or
            // framework may be gone: then the record keeps its own copy).
            task.framework_id = state.shared_framework_id(&task.framework_id);
            task.agent_id = state.shared_agent_id(&task.agent_id);
            let ordinal = task.ordinal;
            if !state.finished.insert(task) {
                return Err(SnapshotError::Inconsistent(format!(
                    "finished task {ordinal} appears twice"
                )));
            }
        }
        let reservations = reader.expect("reservations", |r| match r {
            Record::Reservations(reservations) => Some(reservations),
            _ => None,
        })?;
        state.reservations = Arc::new(*reservations);
        reader.expect("end", |r| match r {
            Record::End => Some(()),
            _ => None,
        })?;
        if reader.offset != data.len() {
            return Err(SnapshotError::TrailingBytes(data.len() - reader.offset));
        }
        Ok(state)
    }

    /// Adds a task read from a snapshot, and to the task sets of its agent and framework while
    /// it is live (the sets hold exactly the non-terminal tasks, see [`AgentEntry::tasks`]).
    fn insert_snapshot_task(
        &mut self,
        framework_id: FrameworkId,
        mut task: TaskRecord,
    ) -> Result<(), SnapshotError> {
        let Some(framework) = self.frameworks.get_mut(&framework_id) else {
            return Err(SnapshotError::Inconsistent(format!(
                "task `{framework_id}/{}` belongs to an unknown framework",
                task.spec.id
            )));
        };
        // The key and the indexes share the framework's id and the record's task id, as
        // they do when a launch is applied (see `ClusterState::launch_tasks`).
        let key = TaskKey::new(framework.id.clone(), task.spec.id.clone());
        let live = !task.state.is_terminal();
        if live {
            framework.active_tasks.insert(key.task_id.clone());
        }
        let Some(agent) = self.agents.get_mut(&task.agent_id) else {
            return Err(SnapshotError::Inconsistent(format!(
                "task `{key}` runs on unknown agent `{}`",
                task.agent_id
            )));
        };
        task.agent_id = agent.id.clone();
        if live {
            agent.tasks.insert(key.clone());
        }
        if self.tasks.insert(key.clone(), Arc::new(task)).is_some() {
            return Err(SnapshotError::Inconsistent(format!(
                "task `{key}` appears twice"
            )));
        }
        Ok(())
    }
}
