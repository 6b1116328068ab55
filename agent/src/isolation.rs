//! Task isolation on Linux: each task runs as its own unprivileged user.
//!
//! When the agent runs as root and `setpriv` (util-linux) is installed, every command task gets
//! a uid (and the gid of the same number) leased from a range (`--task-ids FIRST-LAST`, by
//! default [`DEFAULT_TASK_IDS`]) for as long as it runs:
//!
//! - its sandbox is `0700` and owned by that uid, so no other task can read it; the agent's work
//!   directory is `0711` (tasks pass through it to their sandboxes but cannot list it), and the
//!   checkpoint, the lock file and the exit-code directory in it are root's alone (`0600` and
//!   `0700`), as is the agent's TLS key (written `0600` by `fullerene certs init`);
//! - the task's wrapper stays root: it joins the cgroup, then runs the program through
//!   `setpriv --reuid=U --regid=U --clear-groups --inh-caps=-all --bounding-set=-all
//!   --no-new-privs`, and writes the program's exit code into `<work-dir>/exit-codes/`, which
//!   the task cannot write. A task cannot forge its exit code, nor signal its wrapper.
//!
//! No mount namespace is used: file permissions alone keep the work directory, the key and
//! other sandboxes out of reach. What a task writes outside its sandbox (say, in `/tmp`) stays
//! owned by its uid after it ends and is readable by the next task that leases the uid; leases
//! go round the range to make that rare, and every process left running under a uid is killed
//! when its task ends and before the uid is leased again.
//!
//! Two agents on one machine never share a uid: a lease is an `flock` on `<lock-dir>/<uid>`
//! (default [`DEFAULT_LOCK_DIR`]), and a uid under which any process runs is never leased. A
//! restarted agent takes the leases of its running tasks again; the uid of a task is the owner
//! of its sandbox, which only root can change (so the checkpoint format did not change).
//!
//! Where the agent cannot isolate (not root, no `setpriv`), tasks run as the agent's own user,
//! and the agent says so at start, in every RUNNING update and in its registration (`fullerene
//! agents` shows it); `--require-isolation` makes it refuse to start instead.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

/// The uids (and gids) tasks run as when the agent is root and none are configured.
pub const DEFAULT_TASK_IDS: IdRange = IdRange {
    first: 200_000,
    last: 265_535,
};
/// Where the per-uid lease files live when none is configured.
pub const DEFAULT_LOCK_DIR: &str = "/run/fullerene/task-ids";
/// The program that drops a task's privileges.
pub const DEFAULT_SETPRIV: &str = "/usr/bin/setpriv";

/// What `setpriv` is told besides the uid and gid: no supplementary groups, no capabilities
/// to inherit or ever regain, and no privileges from set-uid programs.
pub const SETPRIV_FLAGS: [&str; 5] = [
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
    "--",
];

/// A range of uids (`FIRST-LAST`, both included); each is also used as the gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    /// The first uid.
    pub first: u32,
    /// The last uid (included).
    pub last: u32,
}

/// Why an id range does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdRangeError {
    /// Not of the form `FIRST-LAST` with two numbers.
    #[error("`{0}` is not a uid range FIRST-LAST (e.g. 200000-265535)")]
    Syntax(String),
    /// A range that includes root or system accounts, or is empty or reversed.
    #[error("uid range {first}-{last} must start at 1000 or above and not end before it starts")]
    Bounds {
        /// The first uid.
        first: u32,
        /// The last uid.
        last: u32,
    },
}

impl FromStr for IdRange {
    type Err = IdRangeError;

    fn from_str(text: &str) -> Result<IdRange, IdRangeError> {
        let syntax = || IdRangeError::Syntax(text.to_string());
        let (first, last) = text.trim().split_once('-').ok_or_else(syntax)?;
        let first: u32 = first.trim().parse().map_err(|_| syntax())?;
        let last: u32 = last.trim().parse().map_err(|_| syntax())?;
        // Never root or a system account, and never the "no uid" value (u32::MAX).
        if first < 1000 || last < first || last == u32::MAX {
            return Err(IdRangeError::Bounds { first, last });
        }
        Ok(IdRange { first, last })
    }
}

impl std::fmt::Display for IdRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl IdRange {
    /// Whether `uid` is in the range.
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    fn len(&self) -> u64 {
        u64::from(self.last - self.first) + 1
    }
}

/// How the agent isolates tasks (flags `--task-ids`, `--task-id-lock-dir`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsolationConfig {
    /// The uids tasks run as.
    pub task_ids: IdRange,
    /// Where the per-uid lease files live (shared by every agent of the machine).
    pub lock_dir: PathBuf,
    /// The `setpriv` program.
    pub setpriv: PathBuf,
}

impl Default for IsolationConfig {
    fn default() -> IsolationConfig {
        IsolationConfig {
            task_ids: DEFAULT_TASK_IDS,
            lock_dir: PathBuf::from(DEFAULT_LOCK_DIR),
            setpriv: PathBuf::from(DEFAULT_SETPRIV),
        }
    }
}

/// Whether tasks run as users of their own.
#[derive(Clone, Debug)]
pub enum Isolation {
    /// Each task runs as a uid leased from the pool.
    Users(Arc<UserPool>),
    /// Tasks run as the agent's user, for this reason.
    Unavailable {
        /// Why (shown to operators and in task status messages).
        reason: String,
    },
}

impl Isolation {
    /// Isolation as `config` asks for it, or why the machine cannot give it.
    pub fn detect(config: &IsolationConfig) -> Isolation {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Isolation::Unavailable {
                reason: format!(
                    "the agent runs as uid {euid}, not root, so tasks run as the agent's own user"
                ),
            };
        }
        let executable = fs::metadata(&config.setpriv)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if !executable {
            return Isolation::Unavailable {
                reason: format!(
                    "{} (util-linux) is not installed, so tasks cannot drop to their own users",
                    config.setpriv.display()
                ),
            };
        }
        // A machine (a container without CAP_SETPCAP, say) may refuse part of it: better to
        // know at start than to fail every task.
        if let Err(why) = probe_setpriv(&config.setpriv, config.task_ids.first) {
            return Isolation::Unavailable { reason: why };
        }
        if let Err(e) = make_private_dir(&config.lock_dir) {
            return Isolation::Unavailable {
                reason: format!(
                    "cannot create the uid lock directory {}: {e}",
                    config.lock_dir.display()
                ),
            };
        }
        Isolation::Users(Arc::new(UserPool {
            range: config.task_ids,
            lock_dir: config.lock_dir.clone(),
            setpriv: config.setpriv.clone(),
            state: Mutex::new(PoolState {
                held: HashMap::new(),
                next: config.task_ids.first,
                busy: None,
            }),
        }))
    }

    /// Isolation that is off, for `reason`.
    pub fn unavailable(reason: impl Into<String>) -> Isolation {
        Isolation::Unavailable {
            reason: reason.into(),
        }
    }

    /// Whether tasks run as users of their own.
    pub fn enforced(&self) -> bool {
        matches!(self, Isolation::Users(_))
    }

    /// Why not, when not.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Isolation::Users(_) => None,
            Isolation::Unavailable { reason } => Some(reason),
        }
    }

    /// The sentence for a task's RUNNING update.
    pub fn note(&self) -> String {
        match self {
            Isolation::Users(pool) => format!(
                "runs as its own user (uids {}), sandbox readable by it alone",
                pool.range
            ),
            Isolation::Unavailable { reason } => {
                format!("tasks NOT isolated on this agent: {reason}")
            }
        }
    }
}

/// The uids an agent leases to its tasks.
#[derive(Debug)]
pub struct UserPool {
    range: IdRange,
    lock_dir: PathBuf,
    setpriv: PathBuf,
    state: Mutex<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    /// The uids leased, with their locked files (closing one releases its lock).
    held: HashMap<u32, File>,
    /// Where the next search starts: leases go round the range.
    next: u32,
    /// The uids processes ran under at the last scan of `/proc`, and when it was made.
    busy: Option<(std::time::Instant, BTreeSet<u32>)>,
}

/// How long a scan of the uids in use serves leases. A scan reads every process's status,
/// which with thousands of tasks costs tens of milliseconds: done per lease, a burst of
/// launches cost the machine seconds of CPU (enough to starve a master beside the agent). The
/// scan only guards against leftovers of other programs: other agents hold lock files, and a
/// task's own leftovers are killed when it ends.
const BUSY_SCAN_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// A uid leased to a task; dropping it returns the uid to the pool.
#[derive(Debug)]
pub struct Lease {
    uid: u32,
    pool: Arc<UserPool>,
}

impl Lease {
    /// The task's uid (and gid).
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut state) = self.pool.state.lock() {
            state.held.remove(&self.uid);
        }
    }
}

impl UserPool {
    /// The range leased from.
    pub fn range(&self) -> IdRange {
        self.range
    }

    /// The `setpriv` program.
    pub fn setpriv(&self) -> &Path {
        &self.setpriv
    }

    /// Leases a uid no task of this or another agent holds and under which no process runs.
    pub fn lease(self: &Arc<Self>) -> Result<Lease, String> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| "the uid pool is poisoned".to_string())?;
        let fresh = state
            .busy
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < BUSY_SCAN_REUSE);
        if !fresh {
            state.busy = Some((std::time::Instant::now(), uids_in_use()));
        }
        let busy = state
            .busy
            .as_ref()
            .map(|(_, busy)| busy.clone())
            .unwrap_or_default();
        let mut uid = state.next;
        for _ in 0..self.range.len() {
            let candidate = uid;
            uid = if uid >= self.range.last {
                self.range.first
            } else {
                uid + 1
            };
            if state.held.contains_key(&candidate) || busy.contains(&candidate) {
                continue;
            }
            if let Some(file) = self.try_lock(candidate)? {
                state.held.insert(candidate, file);
                state.next = uid;
                return Ok(Lease {
                    uid: candidate,
                    pool: Arc::clone(self),
                });
            }
        }
        Err(format!(
            "every task uid in {} is in use (by this or another agent on the machine)",
            self.range
        ))
    }

    /// Takes the lease of a running task's `uid` again (after an agent restart).
    pub fn retake(self: &Arc<Self>, uid: u32) -> Result<Lease, String> {
        if !self.range.contains(uid) {
            return Err(format!("uid {uid} is not in the task range {}", self.range));
        }
        let mut state = self
            .state
            .lock()
            .map_err(|_| "the uid pool is poisoned".to_string())?;
        if state.held.contains_key(&uid) {
            return Err(format!("uid {uid} is already leased to another task"));
        }
        match self.try_lock(uid)? {
            Some(file) => {
                state.held.insert(uid, file);
                Ok(Lease {
                    uid,
                    pool: Arc::clone(self),
                })
            }
            None => Err(format!("uid {uid} is leased by another agent")),
        }
    }

    /// Locks `<lock-dir>/<uid>`: `None` if another holds it.
    fn try_lock(&self, uid: u32) -> Result<Option<File>, String> {
        let path = self.lock_dir.join(uid.to_string());
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| format!("cannot open the uid lock {}: {e}", path.display()))?;
        // SAFETY: flock on a file descriptor owned here; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        Ok((rc == 0).then_some(file))
    }
}

/// Runs `true` through `setpriv` as `uid`, with the flags tasks get.
fn probe_setpriv(setpriv: &Path, uid: u32) -> Result<(), String> {
    let output = std::process::Command::new(setpriv)
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(SETPRIV_FLAGS)
        .arg("/bin/sh")
        .args(["-c", "exit 0"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", setpriv.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} cannot drop a task's privileges here ({}): {}",
            setpriv.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Creates `dir` (and its parents) if missing and makes it root's alone (`0700`).
pub fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    make_dir_with_mode(dir, 0o700)
}

/// Creates `dir` if missing with mode `0711` (others may pass through, not list).
pub fn make_passable_dir(dir: &Path) -> std::io::Result<()> {
    make_dir_with_mode(dir, 0o711)
}

/// Creates `dir` (and its parents) if missing, and sets its mode to `mode` whatever it was.
fn make_dir_with_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
}

/// Every uid (real, effective, saved or filesystem) some process runs under.
pub fn uids_in_use() -> BTreeSet<u32> {
    crate::executor::pids()
        .filter_map(process_uids)
        .flatten()
        .collect()
}

/// The real, effective, saved and filesystem uids of `pid` (`Uid:` in `/proc/<pid>/status`).
fn process_uids(pid: i32) -> Option<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect(),
    )
}

/// Kills every process running under `uid` (a task's leftovers, which may have left its
/// process group), by sending SIGKILL to -1 as that user: the kernel signals every process
/// the user may signal (those whose real or saved uid is `uid`), in one sweep that a fork
/// cannot outrun. Returns whether any such process was found.
pub fn kill_user(setpriv: &Path, uid: u32) -> bool {
    let found = crate::executor::pids()
        .filter(|pid| {
            process_uids(*pid)
                .is_some_and(|uids| uids.first() == Some(&uid) || uids.get(2) == Some(&uid))
        })
        .count();
    if found == 0 {
        return false;
    }
    let status = std::process::Command::new(setpriv)
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "--", "/bin/sh", "-c", "kill -9 -1"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    // `kill -1` also reaches the shell itself, which then ends by SIGKILL: not a failure.
    if let Err(error) = status {
        tracing::warn!(uid, %error, "cannot kill the processes a task left behind");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_ranges_parse_and_refuse_system_ids() {
        assert_eq!(
            "200000-200009".parse::<IdRange>(),
            Ok(IdRange {
                first: 200_000,
                last: 200_009
            })
        );
        assert!(matches!(
            "0-100".parse::<IdRange>(),
            Err(IdRangeError::Bounds { .. })
        ));
        assert!(matches!(
            "5000-4000".parse::<IdRange>(),
            Err(IdRangeError::Bounds { .. })
        ));
        assert!(matches!(
            "5000".parse::<IdRange>(),
            Err(IdRangeError::Syntax(_))
        ));
        assert_eq!(DEFAULT_TASK_IDS.to_string(), "200000-265535");
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn two_pools_on_one_lock_dir_never_lease_the_same_uid() {
        if !root() {
            eprintln!("skipped: leasing uids needs root");
            return;
        }
        let locks = tempfile::tempdir().expect("tempdir");
        let config = IsolationConfig {
            task_ids: "310000-310002".parse().expect("range"),
            lock_dir: locks.path().join("ids"),
            setpriv: PathBuf::from(DEFAULT_SETPRIV),
        };
        let (Isolation::Users(a), Isolation::Users(b)) =
            (Isolation::detect(&config), Isolation::detect(&config))
        else {
            eprintln!("skipped: setpriv is not installed");
            return;
        };
        let a1 = a.lease().expect("a1");
        let b1 = b.lease().expect("b1");
        let a2 = a.lease().expect("a2");
        let mut uids = vec![a1.uid(), b1.uid(), a2.uid()];
        uids.sort_unstable();
        uids.dedup();
        assert_eq!(uids.len(), 3, "{uids:?}");
        assert!(b.lease().is_err(), "the range is exhausted");
        // A retake of a uid another pool holds fails; a released one can be retaken.
        assert!(a.retake(b1.uid()).is_err());
        let freed = b1.uid();
        drop(b1);
        let again = a.retake(freed).expect("retake a released uid");
        assert_eq!(again.uid(), freed);
    }
}
