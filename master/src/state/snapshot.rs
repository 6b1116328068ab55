//! The snapshot format of [`ClusterState`]: what followers receive and what the disk keeps.
//!
//! A snapshot is a sequence of frames, each a 4-byte big-endian length followed by one
//! [`fullerene_proto::codec`] message (version byte, bincode, size limit, strict decoding):
//!
//! ```text
//! Header { format, agents, frameworks, tasks, core_bytes }
//! CorePart × ⌈core_bytes / 1 MiB⌉
//! Agent × agents, Framework × frameworks, Task × tasks
//! End
//! ```
//!
//! One frame per record rather than one message for the whole state keeps every message far
//! below the codec's 4 MiB limit however many tasks the cluster runs. The core, the settings
//! (group weights, member addresses) and the allocation accounting (tens of bytes per running
//! task and per group), is one value, encoded with the codec's large limit and cut into 1 MiB
//! parts, so a cluster with millions of running tasks or groups still snapshots. The header's counts and the `End` frame make a truncated snapshot an error
//! rather than a smaller, wrong state.

use fullerene_proto::codec::{self, CodecError, MAX_MESSAGE_BYTES};
use fullerene_proto::FrameworkId;
use fullerene_scheduling::allocator::state::AllocationState;
use serde::{Deserialize, Serialize};

use super::records::{AgentEntry, ClusterSettings, FrameworkEntry, TaskRecord};
use super::{ClusterState, TaskKey};

/// Version of the snapshot layout (independent of the codec's wire version). Bumped whenever
/// a record type changes.
pub const STATE_FORMAT_VERSION: u32 = 3;

/// Bytes of the encoded core (settings and allocation) per `CorePart` frame.
const CORE_PART_BYTES: usize = 1 << 20;

/// Why a snapshot could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    /// A record could not be encoded (e.g. larger than the codec's limit).
    #[error("cannot encode the {record} record of the state snapshot: {source}")]
    Encode {
        /// Which record.
        record: &'static str,
        /// The codec's error.
        source: CodecError,
    },
    /// The bytes end inside a frame, or before the `End` frame.
    #[error("state snapshot is truncated at byte {offset} of {len}")]
    Truncated {
        /// Where the data ended.
        offset: usize,
        /// The snapshot's length.
        len: usize,
    },
    /// A frame longer than any message may be.
    #[error("state snapshot frame at byte {offset} claims {length} bytes (limit {limit})")]
    FrameTooLarge {
        /// The frame's offset.
        offset: usize,
        /// Its claimed length.
        length: usize,
        /// The codec's limit.
        limit: usize,
    },
    /// A frame that does not decode.
    #[error("state snapshot frame at byte {offset} is malformed: {source}")]
    Frame {
        /// The frame's offset.
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
    /// Bytes after the `End` frame.
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
        core_bytes: u64,
    },
    CorePart(&'a [u8]),
    Agent(&'a AgentEntry),
    Framework(&'a FrameworkEntry),
    Task(&'a FrameworkId, &'a TaskRecord),
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
        core_bytes: u64,
    },
    CorePart(Vec<u8>),
    Agent(AgentEntry),
    Framework(FrameworkEntry),
    Task(FrameworkId, TaskRecord),
    End,
}

impl Record {
    fn name(&self) -> &'static str {
        match self {
            Record::Header { .. } => "header",
            Record::CorePart(_) => "core part",
            Record::Agent(_) => "agent",
            Record::Framework(_) => "framework",
            Record::Task(..) => "task",
            Record::End => "end",
        }
    }
}

fn push_frame(
    out: &mut Vec<u8>,
    record: &RecordRef<'_>,
    name: &'static str,
) -> Result<(), SnapshotError> {
    let bytes = codec::encode(record).map_err(|source| SnapshotError::Encode {
        record: name,
        source,
    })?;
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    Ok(())
}

struct FrameReader<'a> {
    data: &'a [u8],
    offset: usize,
}

impl FrameReader<'_> {
    fn next(&mut self) -> Result<Record, SnapshotError> {
        let len = self.data.len();
        let header_end = self.offset + 4;
        if header_end > len {
            return Err(SnapshotError::Truncated {
                offset: self.offset,
                len,
            });
        }
        let mut length_bytes = [0u8; 4];
        length_bytes.copy_from_slice(&self.data[self.offset..header_end]);
        let length = u32::from_be_bytes(length_bytes) as usize;
        if length > MAX_MESSAGE_BYTES {
            return Err(SnapshotError::FrameTooLarge {
                offset: self.offset,
                length,
                limit: MAX_MESSAGE_BYTES,
            });
        }
        let end = header_end + length;
        if end > len {
            return Err(SnapshotError::Truncated {
                offset: self.offset,
                len,
            });
        }
        let record =
            codec::decode(&self.data[header_end..end]).map_err(|source| SnapshotError::Frame {
                offset: self.offset,
                source,
            })?;
        self.offset = end;
        Ok(record)
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
        let core = codec::encode_large(&(&self.settings, &self.allocation)).map_err(|source| {
            SnapshotError::Encode {
                record: "core",
                source,
            }
        })?;
        let mut out = Vec::new();
        push_frame(
            &mut out,
            &RecordRef::Header {
                format: STATE_FORMAT_VERSION,
                agents: self.agents.len() as u64,
                frameworks: self.frameworks.len() as u64,
                tasks: self.tasks.len() as u64,
                core_bytes: core.len() as u64,
            },
            "header",
        )?;
        for part in core.chunks(CORE_PART_BYTES) {
            push_frame(&mut out, &RecordRef::CorePart(part), "core part")?;
        }
        for agent in self.agents.values() {
            push_frame(&mut out, &RecordRef::Agent(agent), "agent")?;
        }
        for framework in self.frameworks.values() {
            push_frame(&mut out, &RecordRef::Framework(framework), "framework")?;
        }
        for (key, task) in &self.tasks {
            push_frame(&mut out, &RecordRef::Task(&key.framework_id, task), "task")?;
        }
        push_frame(&mut out, &RecordRef::End, "end")?;
        Ok(out)
    }

    /// Decodes a snapshot made by [`ClusterState::encode_snapshot`], strictly: a wrong format
    /// version, a truncated or malformed frame, records out of order or duplicated, counts that
    /// disagree with the header, or bytes after the end are all errors.
    pub fn decode_snapshot(data: &[u8]) -> Result<ClusterState, SnapshotError> {
        let mut reader = FrameReader { data, offset: 0 };
        let (format, agents, frameworks, tasks, core_bytes) =
            reader.expect("header", |r| match r {
                Record::Header {
                    format,
                    agents,
                    frameworks,
                    tasks,
                    core_bytes,
                } => Some((format, agents, frameworks, tasks, core_bytes)),
                _ => None,
            })?;
        if format != STATE_FORMAT_VERSION {
            return Err(SnapshotError::FormatVersion {
                found: format,
                expected: STATE_FORMAT_VERSION,
            });
        }
        let core_bytes = usize::try_from(core_bytes)
            .ok()
            .filter(|&n| n <= codec::MAX_LARGE_BYTES)
            .ok_or_else(|| {
                SnapshotError::Inconsistent(format!(
                    "the header claims {core_bytes} bytes of settings and accounting (limit {})",
                    codec::MAX_LARGE_BYTES
                ))
            })?;
        // Grown as parts arrive, so a lying header cannot make us allocate up front.
        let mut encoded = Vec::new();
        while encoded.len() < core_bytes {
            let part = reader.expect("core part", |r| match r {
                Record::CorePart(p) => Some(p),
                _ => None,
            })?;
            if part.is_empty() || encoded.len() + part.len() > core_bytes {
                return Err(SnapshotError::Inconsistent(format!(
                    "core parts do not add up to the header's {core_bytes} bytes"
                )));
            }
            encoded.extend_from_slice(&part);
        }
        let (settings, allocation): (ClusterSettings, AllocationState) =
            codec::decode_large(&encoded).map_err(|source| SnapshotError::Frame {
                offset: reader.offset,
                source,
            })?;
        let mut state = ClusterState {
            settings,
            allocation,
            agents: Default::default(),
            frameworks: Default::default(),
            tasks: Default::default(),
        };
        for _ in 0..agents {
            let agent = reader.expect("agent", |r| match r {
                Record::Agent(a) => Some(a),
                _ => None,
            })?;
            let id = agent.id.clone();
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
            if !state.frameworks.contains_key(&framework_id) {
                return Err(SnapshotError::Inconsistent(format!(
                    "task `{}` belongs to unknown framework `{framework_id}`",
                    task.spec.id
                )));
            }
            if !state.agents.contains_key(&task.agent_id) {
                return Err(SnapshotError::Inconsistent(format!(
                    "task `{}` runs on unknown agent `{}`",
                    task.spec.id, task.agent_id
                )));
            }
            let key = TaskKey::new(framework_id, task.spec.id.clone());
            if state.tasks.contains_key(&key) {
                return Err(SnapshotError::Inconsistent(format!(
                    "task `{key}` appears twice"
                )));
            }
            state.tasks.insert(key, task);
        }
        reader.expect("end", |r| match r {
            Record::End => Some(()),
            _ => None,
        })?;
        if reader.offset != data.len() {
            return Err(SnapshotError::TrailingBytes(data.len() - reader.offset));
        }
        Ok(state)
    }
}
