//! The file IO behind log reads and the sandbox garbage collection, run on tokio's blocking
//! threads so that the shell's event loop never waits on a disk. The decisions are
//! [`crate::sandboxes`]'s.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::UNIX_EPOCH;

use fullerene_proto::messages::{FileChunk, FileReadOutcome, FileRefusal, UnixMillis};

use crate::sandboxes::{clamp_range, Collected, DiskSpace, GcPolicy, GcReason, SandboxUse};

/// The sandboxes the collection removed lately, shared by the collection and the reads.
pub(super) type CollectedSandboxes = Arc<Mutex<Collected<PathBuf>>>;

/// How many removed sandboxes the agent remembers, to tell a read of one why it is gone.
pub(super) const COLLECTED_REMEMBERED: usize = 65_536;

/// Reads `length` bytes at `offset` of `name` in `sandbox` (both checked by the core). The
/// file is opened without following a link and read only if it is a regular file: the task
/// owns its sandbox and could have put a link to the agent's files, or a pipe, there.
pub(super) fn read_sandbox_file(
    sandbox: &Path,
    name: &str,
    offset: u64,
    length: u64,
    task_ended: bool,
    collected: &CollectedSandboxes,
) -> FileReadOutcome {
    match read_chunk(sandbox, name, offset, length, task_ended, collected) {
        Ok(chunk) => FileReadOutcome::Chunk(chunk),
        Err(refusal) => FileReadOutcome::Refused(refusal),
    }
}

fn read_chunk(
    sandbox: &Path,
    name: &str,
    offset: u64,
    length: u64,
    task_ended: bool,
    collected: &CollectedSandboxes,
) -> Result<FileChunk, FileRefusal> {
    let io = |error: std::io::Error| FileRefusal::Io(error.to_string());
    match fs::symlink_metadata(sandbox) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(FileRefusal::NoSandbox),
        Err(error) if error.kind() == ErrorKind::NotFound => {
            let removed = collected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&sandbox.to_path_buf());
            return Err(if removed {
                FileRefusal::Collected
            } else {
                FileRefusal::NoSandbox
            });
        }
        Err(error) => return Err(io(error)),
    }
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(sandbox.join(name))
    {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => {
            return Err(FileRefusal::NoSuchFile(name.to_string()))
        }
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err(FileRefusal::NotAFile(name.to_string()))
        }
        Err(error) => return Err(io(error)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(FileRefusal::NotAFile(name.to_string()));
    }
    let size = meta.len();
    let (start, length) = clamp_range(offset, length, size);
    let data = read_at(&file, start, length).map_err(io)?;
    Ok(FileChunk {
        offset: start,
        data,
        size,
        task_ended,
    })
}

/// Up to `length` bytes at `start` (fewer if the file shrank meanwhile).
fn read_at(file: &File, start: u64, length: u64) -> std::io::Result<Vec<u8>> {
    let mut data = vec![0; usize::try_from(length).unwrap_or(0)];
    let mut filled = 0;
    while filled < data.len() {
        match file.read_at(&mut data[filled..], start + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    data.truncate(filled);
    Ok(data)
}

/// One pass of the garbage collection over `<work-dir>/sandboxes`: measures the sandboxes
/// and the disk, removes what `policy` selects (never one of `running`), and logs each
/// removal. Returns how many sandboxes it removed.
pub(super) fn collect_sandboxes(
    root: &Path,
    running: &HashSet<PathBuf>,
    policy: GcPolicy,
    now_ms: UnixMillis,
    collected: &CollectedSandboxes,
) -> usize {
    let sandboxes = match scan_sandboxes(root, running) {
        Ok(sandboxes) => sandboxes,
        Err(error) => {
            tracing::warn!(dir = %root.display(), %error, "cannot list the sandboxes to collect them");
            return 0;
        }
    };
    let disk = match disk_space(root) {
        Ok(disk) => disk,
        Err(error) => {
            tracing::warn!(dir = %root.display(), %error, "cannot measure the free disk space");
            return 0;
        }
    };
    let mut removed = 0;
    for (sandbox, reason) in policy.select(&sandboxes, disk, now_ms) {
        // Remembered first, so that a read during the removal says why the files are gone.
        collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sandbox.clone());
        let why = match reason {
            GcReason::Expired => "its task ended longer ago than --sandbox-retention-secs",
            GcReason::LowDisk => "the disk had less free space than --sandbox-min-free-percent",
        };
        match fs::remove_dir_all(&sandbox) {
            Ok(()) => {
                removed += 1;
                tracing::info!(sandbox = %sandbox.display(), why, "sandbox removed by garbage collection");
            }
            Err(error) => {
                tracing::warn!(sandbox = %sandbox.display(), %error, "cannot remove a sandbox");
            }
        }
    }
    removed
}

/// Every sandbox (`<root>/<framework>/<task>`), with its latest modification and its size.
fn scan_sandboxes(
    root: &Path,
    running: &HashSet<PathBuf>,
) -> std::io::Result<Vec<SandboxUse<PathBuf>>> {
    let mut sandboxes = Vec::new();
    let frameworks = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(sandboxes),
        Err(error) => return Err(error),
    };
    for framework in frameworks.flatten() {
        if !framework.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let Ok(tasks) = fs::read_dir(framework.path()) else {
            continue;
        };
        for task in tasks.flatten() {
            let path = task.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let (modified_ms, bytes) = usage(&path, modified_ms(&meta), 0);
            sandboxes.push(SandboxUse {
                running: running.contains(&path),
                key: path,
                modified_ms,
                bytes,
            });
        }
    }
    Ok(sandboxes)
}

/// The deepest directory level measured: what a task nests deeper is removed with the rest
/// but not counted.
const MAX_DEPTH: usize = 32;

/// The latest modification under `dir` (at least `modified`) and the bytes of its files,
/// without following links.
fn usage(dir: &Path, mut modified: UnixMillis, depth: usize) -> (UnixMillis, u64) {
    let mut bytes = 0;
    let Ok(entries) = fs::read_dir(dir) else {
        return (modified, bytes);
    };
    for entry in entries.flatten() {
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue;
        };
        modified = modified.max(modified_ms(&meta));
        if meta.is_dir() {
            if depth < MAX_DEPTH {
                let (inner, inner_bytes) = usage(&entry.path(), modified, depth + 1);
                modified = inner;
                bytes += inner_bytes;
            }
        } else {
            bytes += meta.len();
        }
    }
    (modified, bytes)
}

fn modified_ms(meta: &fs::Metadata) -> UnixMillis {
    meta.modified()
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The free and total bytes of the file system holding `dir`.
fn disk_space(dir: &Path) -> std::io::Result<DiskSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|error| std::io::Error::new(ErrorKind::InvalidInput, error))?;
    // SAFETY: statvfs fills the zeroed struct it is given; the path is a valid C string that
    // outlives the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let block = stat.f_frsize as u64;
    Ok(DiskSpace {
        free: (stat.f_bavail as u64).saturating_mul(block),
        total: (stat.f_blocks as u64).saturating_mul(block),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collected() -> CollectedSandboxes {
        Arc::new(Mutex::new(Collected::new(16)))
    }

    #[test]
    fn a_link_or_a_pipe_in_the_sandbox_is_not_read_and_a_removed_sandbox_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sandbox = dir.path().join("fw").join("t1");
        fs::create_dir_all(&sandbox).expect("sandbox");
        fs::write(sandbox.join("stdout"), b"hello, world\n").expect("stdout");
        fs::write(dir.path().join("secret"), b"the agent's").expect("secret");
        std::os::unix::fs::symlink(dir.path().join("secret"), sandbox.join("stderr"))
            .expect("link");
        let none = collected();

        let outcome = read_sandbox_file(&sandbox, "stdout", 7, 100, true, &none);
        assert_eq!(
            outcome,
            FileReadOutcome::Chunk(FileChunk {
                offset: 7,
                data: b"world\n".to_vec(),
                size: 13,
                task_ended: true,
            })
        );
        assert_eq!(
            read_sandbox_file(&sandbox, "stderr", 0, 100, true, &none),
            FileReadOutcome::Refused(FileRefusal::NotAFile("stderr".into()))
        );
        assert_eq!(
            read_sandbox_file(&sandbox, "missing", 0, 100, true, &none),
            FileReadOutcome::Refused(FileRefusal::NoSuchFile("missing".into()))
        );

        let running = HashSet::new();
        let policy = GcPolicy {
            retention: std::time::Duration::ZERO,
            min_free_percent: 0.0,
            min_idle: std::time::Duration::ZERO,
        };
        let gone = collected();
        let removed = collect_sandboxes(dir.path(), &running, policy, u64::MAX, &gone);
        assert_eq!(removed, 1);
        assert!(!sandbox.exists());
        assert_eq!(
            read_sandbox_file(&sandbox, "stdout", 0, 100, true, &gone),
            FileReadOutcome::Refused(FileRefusal::Collected)
        );
        assert_eq!(
            read_sandbox_file(&sandbox, "stdout", 0, 100, true, &none),
            FileReadOutcome::Refused(FileRefusal::NoSandbox)
        );
    }

    #[test]
    fn a_running_tasks_sandbox_is_never_collected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sandbox = dir.path().join("fw").join("t1");
        fs::create_dir_all(&sandbox).expect("sandbox");
        fs::write(sandbox.join("stdout"), b"still going").expect("stdout");
        let running: HashSet<PathBuf> = [sandbox.clone()].into();
        let policy = GcPolicy {
            retention: std::time::Duration::ZERO,
            min_free_percent: 100.0,
            min_idle: std::time::Duration::ZERO,
        };
        assert_eq!(
            collect_sandboxes(dir.path(), &running, policy, u64::MAX, &collected()),
            0
        );
        assert!(sandbox.join("stdout").exists());
    }
}
