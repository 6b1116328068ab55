//! A DAG job's journal: what a framework process must remember to fail over to another
//! process of itself (Mesos' framework failover): its framework id, every task id it launched
//! (ids are never reused, so a new process must know which are taken) and every task that
//! finished. One line per record, appended before the call it covers is sent (a launch) or
//! once its outcome is known (a finish); one `write` per line on a file opened for appending,
//! so a process killed at any point leaves every complete line behind.
//!
//! A new process reads the journal back ([`Journal::open`]), gives the records to
//! [`DagJob::restore`](super::DagJob::restore), and subscribes with the framework id, within
//! the failover timeout: the master hands it its tasks' latest states, and the job adopts
//! the tasks still running instead of launching them again.

#[cfg(feature = "driver")]
use std::fs::File;
#[cfg(feature = "driver")]
use std::io::Write;
#[cfg(feature = "driver")]
use std::path::Path;
use std::path::PathBuf;

use fullerene_proto::{FrameworkId, TaskId};

/// One line of a journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The framework subscribed with this id.
    Subscribed(FrameworkId),
    /// A task launch is about to be asked for.
    Launched(TaskId),
    /// A task finished, and the job counted it.
    Finished(TaskId),
    /// A job ended (its end is about to be told to the masters). A session framework, which
    /// runs several jobs, needs it: one of its jobs may fail while the others go on, and a
    /// successor must not run it again.
    JobEnded(String),
}

impl Record {
    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    fn line(&self) -> String {
        match self {
            Record::Subscribed(id) => format!("subscribed {id}\n"),
            Record::Launched(id) => format!("launched {id}\n"),
            Record::Finished(id) => format!("finished {id}\n"),
            Record::JobEnded(job) => format!("ended {job}\n"),
        }
    }

    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    fn parse(line: &str) -> Option<Record> {
        let (kind, value) = line.split_once(' ')?;
        if value.is_empty() {
            return None;
        }
        match kind {
            "subscribed" => Some(Record::Subscribed(FrameworkId::from(value))),
            "launched" => Some(Record::Launched(TaskId::from(value))),
            "finished" => Some(Record::Finished(TaskId::from(value))),
            "ended" => Some(Record::JobEnded(value.to_string())),
            _ => None,
        }
    }
}

/// Why a journal could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file could not be opened, read or written.
    #[error("journal {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line (not the last, which a killed writer may have cut) is not a record.
    #[error("journal {path}, line {line}: `{text}` is not a record")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What it says.
        text: String,
    },
}

/// A job's journal, open for appending.
#[cfg(feature = "driver")]
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
}

#[cfg(feature = "driver")]
impl Journal {
    /// The journal of job `job` under `dir` (created if missing), and the records already in
    /// it. Lines follow [`fullerene_client::append_log`]'s rules.
    pub fn open(dir: &Path, job: &str) -> Result<(Journal, Vec<Record>), JournalError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(format!("{}.journal", file_name(job)));
        let mut records = Vec::new();
        if path.exists() {
            for (line, bytes) in
                fullerene_client::append_log::read_lines(&path).map_err(io(&path))?
            {
                let text = String::from_utf8_lossy(&bytes);
                let record = Record::parse(&text).ok_or_else(|| JournalError::Malformed {
                    path: path.clone(),
                    line,
                    text: text.to_string(),
                })?;
                records.push(record);
            }
        }
        let file = fullerene_client::append_log::open_append(&path).map_err(io(&path))?;
        Ok((Journal { path, file }, records))
    }

    /// Appends `record`.
    pub fn append(&self, record: &Record) -> Result<(), JournalError> {
        (&self.file)
            .write_all(record.line().as_bytes())
            .map_err(|source| JournalError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Empties the journal (the framework it remembered is gone; the job starts over).
    pub fn clear(&self) -> Result<(), JournalError> {
        self.file.set_len(0).map_err(|source| JournalError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A journal at `path` opened for reading only, so that every append fails (as on a full
    /// or broken disk): for the tests of what a framework does then.
    #[cfg(test)]
    pub(crate) fn unwritable(path: &Path) -> Journal {
        std::fs::write(path, "").expect("create the journal file");
        Journal {
            path: path.to_path_buf(),
            file: File::open(path).expect("open the journal file"),
        }
    }

    /// The journal of `name` under `dir` (none without a directory) for a process that may
    /// take a framework over: with `resume`, its records go to `restore`, which returns the
    /// framework id to subscribe with; otherwise it is emptied (the framework it remembered
    /// is gone, and the jobs start over). Shared by the per-job and the session frameworks.
    pub fn take_over<E: From<JournalError>>(
        dir: Option<&Path>,
        name: &str,
        resume: bool,
        restore: impl FnOnce(&[Record]) -> Result<Option<FrameworkId>, E>,
    ) -> Result<(Option<Journal>, Option<FrameworkId>), E> {
        let Some(dir) = dir else {
            return Ok((None, None));
        };
        let (journal, records) = Journal::open(dir, name)?;
        let framework_id = if resume {
            restore(&records)?
        } else {
            journal.clear()?;
            None
        };
        Ok((Some(journal), framework_id))
    }
}

/// A job name as a file name, one to one: letters, digits, `-`, `_` and `.` stay, every other
/// byte becomes `%XX` (so `a/b` and `a_b` get different files).
#[cfg(feature = "driver")]
fn file_name(job: &str) -> String {
    let mut name = String::with_capacity(job.len());
    for byte in job.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

#[cfg(all(test, feature = "driver"))]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reopen_and_a_torn_last_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (journal, records) = Journal::open(dir.path(), "q1/x").expect("opens");
        assert!(records.is_empty());
        assert!(journal.path().ends_with("q1%2Fx.journal"));
        assert_ne!(file_name("a/b"), file_name("a_b"));
        let written = [
            Record::Subscribed(FrameworkId::from("fw-1-1")),
            Record::Launched(TaskId::from("q1/x/0.0/0")),
            Record::Finished(TaskId::from("q1/x/0.0/0")),
            Record::JobEnded("q1 x".into()),
        ];
        for record in &written {
            journal.append(record).expect("appends");
        }
        drop(journal);
        let (journal, records) = Journal::open(dir.path(), "q1/x").expect("reopens");
        assert_eq!(records, written);

        // A process killed mid-line; the next one appends after the complete lines.
        std::fs::write(journal.path(), "launched a/0.0/0\nlaunch").expect("write");
        let (journal, records) = Journal::open(dir.path(), "q1/x").expect("reopens");
        assert_eq!(records, vec![Record::Launched(TaskId::from("a/0.0/0"))]);
        journal.append(&written[2]).expect("appends");
        let (_, records) = Journal::open(dir.path(), "q1/x").expect("reopens");
        assert_eq!(records.len(), 2, "{records:?}");

        std::fs::write(journal.path(), "garbage\nlaunched a/0.0/0\n").expect("write");
        let error = Journal::open(dir.path(), "q1/x").expect_err("refused");
        assert!(error.to_string().contains("line 1"), "{error}");

        let (journal, _) = Journal::open(dir.path(), "fresh").expect("opens");
        journal.append(&written[1]).expect("appends");
        journal.clear().expect("clears");
        assert!(Journal::open(dir.path(), "fresh")
            .expect("reopens")
            .1
            .is_empty());
    }
}
