//! The agent's checkpoint: an append-only log of [`Record`]s under the work directory.
//!
//! Every status update is appended and fsynced before it is sent (Mesos' at-least-once status
//! updates), and acknowledgements are recorded, so that a restarted agent rebuilds its task table
//! and resends exactly what was not acknowledged.
//!
//! # Format
//!
//! `checkpoint.log` starts with the 8-byte magic `FLRNCKP2`; then each record is a frame:
//! length (`u32`, little endian), CRC-32 (IEEE) of the body (`u32`, little endian), and the body,
//! the record encoded with `fullerene_proto::codec` (a version byte and bincode).
//!
//! Format 1 (magic `FLRNCKP1`) named a task by its id alone in `Started`, `KillRequested` and
//! `Ack` records, which cannot tell apart two frameworks' tasks with the same id. An agent that
//! finds a format-1 log reads it (in that format a task id named one task, the one last
//! launched with it), and rewrites it in format 2 before it appends anything.
//!
//! The log is `0600`: tasks run on the same machine and must not read it.
//!
//! # Crashes
//!
//! A crash in the middle of an append leaves a short or garbled last frame. That record was never
//! fsynced, so its update was never sent: recovery drops it with a warning and truncates the file
//! to the last whole record. A bad frame that is *followed* by more data cannot come from a torn
//! append; it is damage, and recovery refuses the file with an error that names it rather than
//! guess which updates were lost.
//!
//! # Compaction
//!
//! Acknowledged history is dead weight. When the log has grown to several times the size of the
//! live state, [`Checkpoint::compact`] writes the live state ([`crate::core::AgentCore::snapshot`])
//! to a temporary file, fsyncs it, renames it over the log and fsyncs the directory: a crash at
//! any point leaves either the old log or the new one.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use fullerene_proto::codec;
use fullerene_proto::ids::{FrameworkId, TaskId, TaskKey};
use fullerene_proto::messages::StatusUpdate;
use serde::Deserialize;

use crate::core::{KillCause, Record, Runtime, TaskSnapshot};

/// The log's file name under the work directory.
pub const LOG_FILE: &str = "checkpoint.log";
const TMP_FILE: &str = "checkpoint.log.tmp";
const MAGIC: &[u8; 8] = b"FLRNCKP2";
const MAGIC_V1: &[u8; 8] = b"FLRNCKP1";
const HEADER_LEN: usize = 8;
/// Compaction is not worth it below this size.
const MIN_COMPACT_BYTES: u64 = 1 << 20;

/// Why the checkpoint cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An I/O error on a file of the checkpoint.
    #[error("checkpoint {path}: cannot {op}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The disk is full: the update cannot be made durable, so it is not sent.
    #[error("checkpoint {path}: the disk is full; free space under the work directory and restart the agent")]
    DiskFull {
        /// The file.
        path: PathBuf,
    },
    /// A record in the middle of the log is damaged: refusing to guess what was lost.
    #[error("checkpoint {path} is damaged at byte {offset}: {reason}; it was not torn by a crash (more records follow). Move it away to start this agent without its tasks")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The file does not start with the checkpoint magic.
    #[error("{path} is not an agent checkpoint (bad magic); is --work-dir right?")]
    NotACheckpoint {
        /// The file.
        path: PathBuf,
    },
    /// A record could not be encoded.
    #[error("cannot encode a checkpoint record: {0}")]
    Encode(#[from] codec::CodecError),
}

/// A torn last record that recovery dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where it started (the file was truncated there).
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes: u64,
    /// What was wrong with it.
    pub reason: String,
}

/// What [`Checkpoint::open`] found on disk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovered {
    /// The records, in the order they were written.
    pub records: Vec<Record>,
    /// The torn last record dropped, if any.
    pub torn_tail: Option<TornTail>,
}

/// The open log.
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    len: u64,
    unsynced: bool,
    /// Size right after the last compaction (or open): the live state's size, roughly.
    base_len: u64,
}

impl Checkpoint {
    /// Opens (or creates) the log in `dir`, reading every record. A torn last record is dropped
    /// (logged as a warning and reported in [`Recovered::torn_tail`]); damage elsewhere is an
    /// error naming the file.
    pub fn open(dir: &Path) -> Result<(Checkpoint, Recovered), CheckpointError> {
        let path = dir.join(LOG_FILE);
        fs::create_dir_all(dir).map_err(io_error(dir, "create the directory"))?;
        // A temporary file is a compaction that did not finish: the log is still whole.
        let tmp = dir.join(TMP_FILE);
        if tmp.exists() {
            fs::remove_file(&tmp).map_err(io_error(&tmp, "remove"))?;
        }
        if !path.exists() {
            write_new_log(dir, &path, &[])?;
        }
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io_error(&path, "read"))?;
        let (records, mut good_len, torn_tail, format) = parse(&path, &bytes)?;
        if let Some(torn) = &torn_tail {
            tracing::warn!(
                path = %path.display(),
                offset = torn.offset,
                bytes = torn.bytes,
                reason = %torn.reason,
                "dropping a torn last checkpoint record (the agent crashed while writing it; it was never sent)"
            );
        }
        if format == Format::V1 {
            // Appends must be in the format the whole file is in; the rewrite drops any torn
            // tail too.
            tracing::info!(path = %path.display(), records = records.len(), "rewriting a format-1 checkpoint in format 2");
            good_len = write_new_log(dir, &path, &records)?;
        }
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io_error(&path, "open for writing"))?;
        // The agent's alone: tasks run on this machine and must not read it (a log written by
        // an older agent may have been readable by all).
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io_error(&path, "make private (0600)"))?;
        if torn_tail.is_some() && format == Format::V2 {
            file.set_len(good_len)
                .and_then(|()| file.sync_all())
                .map_err(io_error(&path, "truncate the torn record"))?;
        }
        let checkpoint = Checkpoint {
            dir: dir.to_path_buf(),
            path,
            file,
            len: good_len,
            unsynced: false,
            base_len: good_len,
        };
        Ok((checkpoint, Recovered { records, torn_tail }))
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The log's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.len <= HEADER_LEN as u64
    }

    /// Appends a record (buffered by the OS until [`Checkpoint::sync`]). On failure the log is
    /// cut back to its previous length, so a failed append leaves no partial record.
    pub fn append(&mut self, record: &Record) -> Result<(), CheckpointError> {
        let frame = frame(record)?;
        if let Err(source) = write_at_end(&mut self.file, self.len, &frame) {
            // Best effort: if even the truncation fails, recovery drops the torn tail.
            let _ = self.file.set_len(self.len);
            return Err(classify(&self.path, "append", source));
        }
        self.len += frame.len() as u64;
        self.unsynced = true;
        Ok(())
    }

    /// Makes every appended record durable (fdatasync). Cheap when nothing is pending.
    pub fn sync(&mut self) -> Result<(), CheckpointError> {
        if self.unsynced {
            self.file
                .sync_data()
                .map_err(|e| classify(&self.path, "fsync", e))?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Whether the log has grown enough past the live state to be worth compacting.
    pub fn should_compact(&self) -> bool {
        self.len > MIN_COMPACT_BYTES.max(self.base_len.saturating_mul(4))
    }

    /// Replaces the log with `records` (the live state), atomically.
    pub fn compact(&mut self, records: &[Record]) -> Result<(), CheckpointError> {
        let len = write_new_log(&self.dir, &self.path, records)?;
        self.file = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(io_error(&self.path, "reopen after compaction"))?;
        tracing::debug!(path = %self.path.display(), before = self.len, after = len, "checkpoint compacted");
        self.len = len;
        self.base_len = len;
        self.unsynced = false;
        Ok(())
    }
}

fn write_at_end(file: &mut File, at: u64, bytes: &[u8]) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(at))?;
    file.write_all(bytes)
}

/// Writes a fresh log holding `records` through a temporary file, an fsync and a rename, then
/// fsyncs the directory so that the rename itself is durable.
fn write_new_log(dir: &Path, path: &Path, records: &[Record]) -> Result<u64, CheckpointError> {
    let tmp = dir.join(TMP_FILE);
    let mut bytes = MAGIC.to_vec();
    for record in records {
        bytes.extend_from_slice(&frame(record)?);
    }
    let result = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
        .map_err(|e| classify(&tmp, "write", e));
    if let Err(error) = result {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    fs::rename(&tmp, path).map_err(io_error(path, "rename the new log into place"))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir, "fsync the directory"))?;
    Ok(bytes.len() as u64)
}

fn frame<R: serde::Serialize>(record: &R) -> Result<Vec<u8>, CheckpointError> {
    let body = codec::encode(record)?;
    let len = u32::try_from(body.len()).map_err(|_| codec::CodecError::TooLarge {
        size: body.len(),
        limit: u32::MAX as usize,
    })?;
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The on-disk format of a log, told by its magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `FLRNCKP1`: tasks named by id alone.
    V1,
    /// `FLRNCKP2`: tasks named by framework and id.
    V2,
}

/// What a parse returns: the records, the length of the good prefix, a torn tail if any, and
/// the format the log was in.
type Parsed = (Vec<Record>, u64, Option<TornTail>, Format);

/// Parses a whole log (either format; format-1 records are converted).
fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed, CheckpointError> {
    let format = match bytes.get(..MAGIC.len()) {
        Some(magic) if magic == MAGIC => Format::V2,
        Some(magic) if magic == MAGIC_V1 => Format::V1,
        _ => {
            return Err(CheckpointError::NotACheckpoint {
                path: path.to_path_buf(),
            })
        }
    };
    let mut records = Vec::new();
    let mut v1_owners = V1Owners::default();
    let mut pos = MAGIC.len();
    while pos < bytes.len() {
        let parsed = match format {
            Format::V2 => parse_one::<Record>(&bytes[pos..]).map(|(r, used)| (Some(r), used)),
            Format::V1 => parse_one::<RecordV1>(&bytes[pos..])
                .map(|(record, used)| (v1_owners.convert(record), used)),
        };
        match parsed {
            Ok((record, used)) => {
                records.extend(record);
                pos += used;
            }
            Err(bad) => {
                let rest = &bytes[pos..];
                // A torn append: the frame runs past the end, ends exactly at it, or the tail is
                // zeros (a file extended by the crash but never written).
                let torn = match bad.end {
                    None => true,
                    Some(end) => end == rest.len(),
                } || rest.iter().all(|b| *b == 0);
                if !torn || bad.decode_error {
                    return Err(CheckpointError::Damaged {
                        path: path.to_path_buf(),
                        offset: pos as u64,
                        reason: bad.reason,
                    });
                }
                let torn = TornTail {
                    offset: pos as u64,
                    bytes: rest.len() as u64,
                    reason: bad.reason,
                };
                return Ok((records, pos as u64, Some(torn), format));
            }
        }
    }
    Ok((records, pos as u64, None, format))
}

/// A record as format 1 wrote it: the same variants in the same order, with `Started`,
/// `KillRequested` and `Ack` naming the task by id alone.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
enum RecordV1 {
    Launched {
        framework_id: FrameworkId,
        spec: fullerene_proto::messages::TaskSpec,
        accepted: bool,
    },
    Started {
        task_id: TaskId,
        runtime: Runtime,
    },
    KillRequested {
        task_id: TaskId,
        cause: KillCause,
        grace_ms: u64,
    },
    Update(StatusUpdate),
    Ack {
        task_id: TaskId,
        seq: u64,
    },
    Snapshot(TaskSnapshot),
}

/// Whose each task id was, as a format-1 log is read: a format-1 agent kept one task per id,
/// the one launched (or snapshotted) last with it.
#[derive(Default)]
struct V1Owners {
    owner: BTreeMap<TaskId, FrameworkId>,
}

impl V1Owners {
    /// The record in format 2; `None` for a record about a task the log never launched, which
    /// recovery would have ignored anyway.
    fn convert(&mut self, record: RecordV1) -> Option<Record> {
        let key = |owners: &Self, task_id: TaskId| {
            let framework_id = owners.owner.get(&task_id)?.clone();
            Some(TaskKey::new(framework_id, task_id))
        };
        Some(match record {
            RecordV1::Launched {
                framework_id,
                spec,
                accepted,
            } => {
                self.owner.insert(spec.id.clone(), framework_id.clone());
                Record::Launched {
                    framework_id,
                    spec,
                    accepted,
                }
            }
            RecordV1::Snapshot(snapshot) => {
                self.owner
                    .insert(snapshot.spec.id.clone(), snapshot.framework_id.clone());
                Record::Snapshot(snapshot)
            }
            RecordV1::Update(update) => Record::Update(update),
            RecordV1::Started { task_id, runtime } => Record::Started {
                task: key(self, task_id)?,
                runtime,
            },
            RecordV1::KillRequested {
                task_id,
                cause,
                grace_ms,
            } => Record::KillRequested {
                task: key(self, task_id)?,
                cause,
                grace_ms,
            },
            RecordV1::Ack { task_id, seq } => Record::Ack {
                task: key(self, task_id)?,
                seq,
            },
        })
    }
}

struct BadFrame {
    /// Where the frame claims to end, if within the data.
    end: Option<usize>,
    reason: String,
    /// The checksum matched but the body did not decode: not a torn write.
    decode_error: bool,
}

fn parse_one<R: serde::de::DeserializeOwned>(rest: &[u8]) -> Result<(R, usize), BadFrame> {
    let bad = |end, reason: String| BadFrame {
        end,
        reason,
        decode_error: false,
    };
    if rest.len() < HEADER_LEN {
        return Err(bad(
            None,
            format!("{} bytes, shorter than a record header", rest.len()),
        ));
    }
    let mut word = [0u8; 4];
    word.copy_from_slice(&rest[..4]);
    let len = u32::from_le_bytes(word) as usize;
    word.copy_from_slice(&rest[4..8]);
    let crc = u32::from_le_bytes(word);
    if len == 0 || len > codec::MAX_MESSAGE_BYTES {
        return Err(bad(
            Some(HEADER_LEN),
            format!("impossible record length {len}"),
        ));
    }
    let end = HEADER_LEN + len;
    if end > rest.len() {
        return Err(bad(
            None,
            format!(
                "record of {len} bytes with only {} present",
                rest.len() - HEADER_LEN
            ),
        ));
    }
    let body = &rest[HEADER_LEN..end];
    if crc32(body) != crc {
        return Err(bad(Some(end), "checksum mismatch".to_string()));
    }
    match codec::decode::<R>(body) {
        Ok(record) => Ok((record, end)),
        Err(e) => Err(BadFrame {
            end: Some(end),
            reason: format!("record does not decode: {e}"),
            decode_error: true,
        }),
    }
}

fn io_error<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| classify(path, op, source)
}

fn classify(path: &Path, op: &'static str, source: io::Error) -> CheckpointError {
    if source.raw_os_error() == Some(libc::ENOSPC) || source.raw_os_error() == Some(libc::EDQUOT) {
        CheckpointError::DiskFull {
            path: path.to_path_buf(),
        }
    } else {
        CheckpointError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected), the checksum of zlib and Ethernet.
fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests;
