//! Executors: how tasks run, are killed, and are found again after an agent restart.
//!
//! - `command` runs the task's program in its sandbox directory
//!   (`<work-dir>/sandboxes/<framework>/<task>`), with stdout and stderr in the files `stdout`
//!   and `stderr` there, and a clean environment (`PATH`, `LANG`, `LC_ALL` and `TZ` from the
//!   agent; `HOME` the sandbox; then the task's own variables; then, which the task cannot
//!   override, `FULLERENE_SANDBOX`, `FULLERENE_TASK_ID` and `FULLERENE_FRAMEWORK_ID`), under a
//!   small `/bin/sh` wrapper that leads its own process group and writes the program's exit
//!   code to `<work-dir>/exit-codes/<framework>%2F<task>` (see [`exit_code_path`]): the code
//!   survives an agent crash. With cgroups v2 the wrapper joins the task's cgroup before it
//!   starts the program ([`crate::cgroups`]). The wrapper runs with the agent's user and a
//!   clean environment; the program gets its environment from `env -i` and, when the agent
//!   isolates tasks, runs as a uid of its own through `setpriv` ([`crate::isolation`]), so the
//!   task can neither write its exit code nor signal its wrapper.
//! - `sleep` runs no process and finishes at a wall-clock deadline, which the core checkpoints,
//!   so a restarted agent finishes it on time.
//!
//! A kill sends SIGTERM to the task's process group, waits the grace period for the group to
//! empty, then sends SIGKILL. After a restart the agent re-attaches to a wrapper by pid, checking
//! its start time (`/proc/<pid>/stat`, field 22) so that a reused pid is never taken for the
//! task, and polls it until it ends.
//!
//! Exit codes follow the shell's convention: a program ended by signal N shows as code 128+N
//! and is reported as [`Outcome::Signaled`].

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use fullerene_proto::ids::{FrameworkId, TaskId, TaskKey};
use fullerene_proto::messages::{
    CommandSpec, Enforcement, Executor, TaskIsolation, TaskSpec, UnixMillis,
};
use fullerene_proto::time::Now;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cgroups::{component, Limits};
use crate::core::{Outcome, Resume, Runtime};
use crate::isolation::{self, Isolation, Lease};

/// The file in a sandbox that receives the task's standard output.
pub const STDOUT_FILE: &str = "stdout";
/// The file in a sandbox that receives the task's standard error.
pub const STDERR_FILE: &str = "stderr";
/// The directory under the work directory where wrappers write their programs' exit codes:
/// the agent's alone (`0700`), so that a task cannot write its own (or another's) code. Until
/// this release the code was written to `.fullerene-exit-code` in the sandbox, where the task
/// could rewrite it; that file is no longer read (a task of an older agent that ends while the
/// upgraded agent is down is reported gone rather than with its code).
pub const EXIT_CODES_DIR: &str = "exit-codes";

/// The wrapper: join the cgroup if there is one, run the program (its arguments: `setpriv`
/// when isolated, `env -i` with the task's environment, the program), record its exit code.
/// Only shell built-ins after the program runs, so nothing of the task's can break the
/// recording; the wrapper's own environment is the agent's, not the task's.
const WRAPPER: &str = r#"if [ -n "${FULLERENE_CGROUP_PROCS:-}" ]; then
  echo $$ > "$FULLERENE_CGROUP_PROCS" || { echo "fullerene: cannot join cgroup $FULLERENE_CGROUP_PROCS" >&2; exit 125; }
fi
exit_file=$FULLERENE_EXIT_CODE_FILE
unset FULLERENE_CGROUP_PROCS FULLERENE_EXIT_CODE_FILE
"$@"
code=$?
echo "$code" > "$exit_file"
exit "$code"
"#;

/// Where `env` is looked for (the program that gives the task its environment).
const ENV_PROGRAMS: [&str; 2] = ["/usr/bin/env", "/bin/env"];

/// How often a re-attached process (not the agent's child) and a group being killed are polled.
const POLL: Duration = Duration::from_millis(50);
/// How long to wait for a group to vanish after SIGKILL before giving up on it.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// The longest grace period honoured (a day): anything longer is as good as never.
const MAX_GRACE: Duration = Duration::from_secs(24 * 3600);
/// How much of a failed task's stderr goes into its status message.
const STDERR_TAIL_BYTES: u64 = 512;

/// A task's execution ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecEvent {
    /// The task.
    pub task: TaskKey,
    /// How it ended.
    pub outcome: Outcome,
    /// Details for humans (stderr tail, escalation to SIGKILL).
    pub detail: String,
}

/// A task the executor started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// How to find it again.
    pub runtime: Runtime,
    /// What its RUNNING update says (sandbox, whether limits are enforced).
    pub note: String,
}

struct Handle {
    kill: mpsc::UnboundedSender<Duration>,
    join: JoinHandle<()>,
}

/// The running tasks' supervisors. Each reports the end of its task once, as an [`ExecEvent`].
///
/// Dropping `Executors` stops supervising without touching the processes, which keep running
/// (as across an agent restart); [`Executors::resume`] finds them again.
pub struct Executors {
    work_dir: PathBuf,
    limits: Limits,
    isolation: Isolation,
    events: mpsc::UnboundedSender<ExecEvent>,
    tasks: HashMap<TaskKey, Handle>,
}

impl Executors {
    /// Executors with sandboxes under `<work_dir>/sandboxes`, and the receiver of their events.
    /// With [`Isolation::Users`], call [`prepare_work_dir`] first.
    pub fn new(
        work_dir: &Path,
        limits: Limits,
        isolation: Isolation,
    ) -> (Executors, mpsc::UnboundedReceiver<ExecEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let executors = Executors {
            // Sandbox paths are handed to tasks, which run elsewhere: never relative.
            work_dir: std::path::absolute(work_dir).unwrap_or_else(|_| work_dir.to_path_buf()),
            limits,
            isolation,
            events: tx,
            tasks: HashMap::new(),
        };
        (executors, rx)
    }

    /// Whether and how limits are enforced.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether tasks run as users of their own.
    pub fn isolation(&self) -> &Isolation {
        &self.isolation
    }

    /// What the agent reports of its isolation when it registers.
    pub fn task_isolation(&self) -> TaskIsolation {
        TaskIsolation {
            users: match &self.isolation {
                Isolation::Users(_) => Enforcement::Enforced,
                Isolation::Unavailable { reason } => Enforcement::NotEnforced {
                    reason: reason.clone(),
                },
            },
            limits: match &self.limits {
                Limits::Enforced(_) => Enforcement::Enforced,
                Limits::NotEnforced { reason } => Enforcement::NotEnforced {
                    reason: reason.clone(),
                },
            },
        }
    }

    /// Where the wrapper of this task writes its exit code.
    pub fn exit_code_path(&self, framework_id: &FrameworkId, task_id: &TaskId) -> PathBuf {
        exit_code_path(&self.work_dir, framework_id, task_id)
    }

    /// A task's sandbox directory.
    pub fn sandbox(&self, framework_id: &FrameworkId, task_id: &TaskId) -> PathBuf {
        self.work_dir
            .join("sandboxes")
            .join(component(framework_id.as_str()))
            .join(component(task_id.as_str()))
    }

    /// Whether a supervisor runs for this task.
    pub fn is_running(&self, task: &TaskKey) -> bool {
        self.tasks.contains_key(task)
    }

    /// Starts a task. `Err` says why it could not start (a LaunchFailed update).
    pub fn start(
        &mut self,
        framework_id: &FrameworkId,
        spec: &TaskSpec,
        now: Now,
    ) -> Result<Started, String> {
        match &spec.executor {
            Executor::Sleep { duration_ms } => {
                // On the wall clock: the deadline is checkpointed and must mean the same to
                // the agent that re-attaches to the task after a restart.
                let deadline_ms = now.wall_ms().saturating_add(*duration_ms);
                let task = TaskKey::new(framework_id.clone(), spec.id.clone());
                self.watch_sleep(&task, deadline_ms, now);
                Ok(Started {
                    runtime: Runtime::Sleep { deadline_ms },
                    note: format!("sleep executor: no process; ends after {duration_ms} ms"),
                })
            }
            Executor::Command(command) => self.start_command(framework_id, spec, command),
        }
    }

    fn start_command(
        &mut self,
        framework_id: &FrameworkId,
        spec: &TaskSpec,
        command: &CommandSpec,
    ) -> Result<Started, String> {
        let sandbox = self.sandbox(framework_id, &spec.id);
        let env_program = env_program()?;
        check_env(command)?;
        // The task's user, leased for as long as it runs (dropped, and so returned, with the
        // supervisor's context, or here if the start fails).
        let lease = match &self.isolation {
            Isolation::Users(pool) => Some(pool.lease()?),
            Isolation::Unavailable { .. } => None,
        };
        let uid = lease.as_ref().map(Lease::uid);
        make_sandbox(&sandbox, uid)?;
        let exit_file = self.exit_code_path(framework_id, &spec.id);
        if let Some(dir) = exit_file.parent() {
            isolation::make_private_dir(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        // A stale code from an earlier run of the same id must not be taken for this run's.
        match fs::remove_file(&exit_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot clear {}: {e}", exit_file.display())),
        }
        resolve_program(&command.program, &sandbox, command.env.get("PATH"))?;
        let stdout = output_file(&sandbox, STDOUT_FILE, uid)?;
        let stderr = output_file(&sandbox, STDERR_FILE, uid)?;
        let cgroup_key = cgroup_key(framework_id, &spec.id);
        let procs = match &self.limits {
            Limits::Enforced(cgroup) => {
                let resources = spec
                    .resources
                    .to_vec()
                    .map_err(|e| format!("invalid resources: {e}"))?;
                Some(cgroup.create_task(&cgroup_key, &resources)?)
            }
            Limits::NotEnforced { .. } => None,
        };
        // The program's environment, given by `env -i`: the wrapper itself (root when tasks
        // are isolated) never sees the task's variables (no LD_PRELOAD for it).
        let mut task_env: Vec<(String, String)> = inherited_env();
        task_env.push(("HOME".into(), sandbox.display().to_string()));
        task_env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        // After the spec's own variables, so that they mark the task's processes whatever
        // the spec says: a restarted agent finds its unrecorded processes by them.
        task_env.push((SANDBOX_VAR.into(), sandbox.display().to_string()));
        task_env.push((TASK_ID_VAR.into(), spec.id.as_str().into()));
        task_env.push((FRAMEWORK_ID_VAR.into(), framework_id.as_str().into()));
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c").arg(WRAPPER).arg("fullerene-task");
        if let (Isolation::Users(pool), Some(uid)) = (&self.isolation, uid) {
            cmd.arg(pool.setpriv())
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(isolation::SETPRIV_FLAGS);
        }
        cmd.arg(env_program).args(["-i", "--"]);
        for (k, v) in &task_env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg(&command.program)
            .args(&command.args)
            .current_dir(&sandbox)
            // A clean environment: the agent's own settings are none of the task's business.
            .env_clear()
            .envs(inherited_env())
            // The wrapper carries the marks too: it is one of the task's processes.
            .env(SANDBOX_VAR, &sandbox)
            .env(TASK_ID_VAR, spec.id.as_str())
            .env(FRAMEWORK_ID_VAR, framework_id.as_str())
            .env("FULLERENE_EXIT_CODE_FILE", &exit_file)
            .env(
                "FULLERENE_CGROUP_PROCS",
                procs.as_deref().map(Path::as_os_str).unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Its own group, so that a kill reaches everything the task started and a signal
            // to the agent's group (ctrl-c) does not reach the task.
            .process_group(0)
            .kill_on_drop(false);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start /bin/sh for {}: {e}", command.program))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| "the task's process ended before its pid was read".to_string())?;
        let start_ticks = proc_stat(pid)
            .map(|s| s.start_ticks)
            .ok_or_else(|| format!("cannot read /proc/{pid}/stat of the task's process"))?;
        let key = TaskKey::new(framework_id.clone(), spec.id.clone());
        let ctx = ProcessCtx {
            task: key.clone(),
            pid,
            start_ticks,
            sandbox: sandbox.clone(),
            exit_file,
            limits: self.limits.clone(),
            cgroup_key,
            user: self.task_user(lease),
        };
        let (kill_tx, kill_rx) = mpsc::unbounded_channel();
        let events = self.events.clone();
        let join = tokio::spawn(async move {
            let outcome = supervise_child(child, &ctx, kill_rx).await;
            ctx.finish(outcome, &events);
        });
        self.tasks.insert(
            key,
            Handle {
                kill: kill_tx,
                join,
            },
        );
        Ok(Started {
            runtime: Runtime::Process { pid, start_ticks },
            note: format!(
                "sandbox {}; {}; {}",
                sandbox.display(),
                match uid {
                    Some(uid) => format!("runs as uid {uid}, sandbox readable by it alone"),
                    None => self.isolation.note(),
                },
                self.limits.note()
            ),
        })
    }

    fn watch_sleep(&mut self, task: &TaskKey, deadline_ms: UnixMillis, now: Now) {
        let (kill_tx, mut kill_rx) = mpsc::unbounded_channel::<Duration>();
        let events = self.events.clone();
        let id = task.clone();
        let remaining = Duration::from_millis(deadline_ms.saturating_sub(now.wall_ms()));
        let join = tokio::spawn(async move {
            let outcome = tokio::select! {
                () = tokio::time::sleep(remaining) => Outcome::SleepDone,
                Some(_) = kill_rx.recv() => Outcome::Stopped,
            };
            let _ = events.send(ExecEvent {
                task: id,
                outcome,
                detail: String::new(),
            });
        });
        self.tasks.insert(
            task.clone(),
            Handle {
                kill: kill_tx,
                join,
            },
        );
    }

    /// Finds a recovered task again: re-attaches to its process or sleep, or reports at once
    /// (as an event) that it is gone. A kill that was under way is carried on.
    pub fn resume(&mut self, resume: &Resume, now: Now) {
        match &resume.runtime {
            None => {
                // Recorded as launched but not as started: the agent stopped between the spawn
                // and the sync of `Started`, or before the spawn. A process may run that nobody
                // supervises; it is killed, so that the task, reported gone and launched again
                // elsewhere, never runs twice (DESIGN.md: at most one instance of a task).
                let sandbox = self.sandbox(&resume.framework_id, &resume.task_id);
                let killed = kill_unrecorded(&sandbox, &resume.framework_id, &resume.task_id);
                // Under isolation its processes all run as the sandbox's owner, whatever they
                // did to their environment.
                if let Some(user) = self.task_user(self.sandbox_user(&sandbox)) {
                    user.clean_up(&sandbox);
                }
                if let Limits::Enforced(cgroup) = &self.limits {
                    cgroup.remove_task(&cgroup_key(&resume.framework_id, &resume.task_id));
                }
                let detail = match killed {
                    0 => "it had not been recorded as started".to_string(),
                    n => format!(
                        "it had not been recorded as started; {n} process group(s) it left were killed"
                    ),
                };
                let _ = self.events.send(ExecEvent {
                    task: resume.key(),
                    outcome: Outcome::Vanished,
                    detail,
                });
                return;
            }
            Some(Runtime::Sleep { deadline_ms }) => {
                self.watch_sleep(&resume.key(), *deadline_ms, now);
            }
            Some(Runtime::Process { pid, start_ticks }) => {
                let sandbox = self.sandbox(&resume.framework_id, &resume.task_id);
                let user = self.task_user(self.sandbox_user(&sandbox));
                let ctx = ProcessCtx {
                    task: resume.key(),
                    pid: *pid,
                    start_ticks: *start_ticks,
                    exit_file: self.exit_code_path(&resume.framework_id, &resume.task_id),
                    sandbox,
                    limits: self.limits.clone(),
                    cgroup_key: cgroup_key(&resume.framework_id, &resume.task_id),
                    user,
                };
                if process_alive(*pid, *start_ticks) {
                    tracing::info!(task = %resume.task_id, pid, "re-attached to a running task");
                } else {
                    tracing::info!(task = %resume.task_id, pid, "a recovered task's process has ended");
                }
                let (kill_tx, kill_rx) = mpsc::unbounded_channel();
                let events = self.events.clone();
                let join = tokio::spawn(async move {
                    let outcome = supervise_reattached(&ctx, kill_rx).await;
                    ctx.finish(outcome, &events);
                });
                self.tasks.insert(
                    resume.key(),
                    Handle {
                        kill: kill_tx,
                        join,
                    },
                );
            }
        }
        if let Some((_, grace)) = resume.kill {
            self.kill(&resume.key(), grace);
        }
    }

    /// Kills a task: SIGTERM to its group, `grace`, then SIGKILL. Returns false if no
    /// supervisor runs for it (it had not started or has already ended).
    pub fn kill(&mut self, task: &TaskKey, grace: Duration) -> bool {
        match self.tasks.get(task) {
            Some(handle) => handle.kill.send(grace).is_ok(),
            None => false,
        }
    }

    /// Forgets a task whose [`ExecEvent`] arrived.
    pub fn reap(&mut self, task: &TaskKey) {
        self.tasks.remove(task);
    }

    /// The lease of the user a recovered task's sandbox belongs to (its uid, which only root
    /// can change), taken again; `None` when tasks are not isolated or the sandbox is not a
    /// task user's (a task started before isolation, or one that has ended).
    fn sandbox_user(&self, sandbox: &Path) -> Option<TaskLease> {
        use std::os::unix::fs::MetadataExt;
        let Isolation::Users(pool) = &self.isolation else {
            return None;
        };
        let uid = fs::symlink_metadata(sandbox).ok()?.uid();
        if !pool.range().contains(uid) {
            return None;
        }
        match pool.retake(uid) {
            Ok(lease) => Some(TaskLease::Held(lease)),
            Err(why) => {
                // Still this task's uid: its processes are cleaned up all the same.
                tracing::warn!(uid, %why, sandbox = %sandbox.display(), "cannot take the lease of a recovered task's uid again");
                Some(TaskLease::Lost(uid))
            }
        }
    }

    fn task_user(&self, lease: Option<impl Into<TaskLease>>) -> Option<TaskUser> {
        let Isolation::Users(pool) = &self.isolation else {
            return None;
        };
        Some(TaskUser {
            lease: lease?.into(),
            setpriv: pool.setpriv().to_path_buf(),
        })
    }
}

/// A task's uid, leased (or, after a restart where the lease could not be taken again, only
/// known).
enum TaskLease {
    Held(Lease),
    Lost(u32),
}

impl From<Lease> for TaskLease {
    fn from(lease: Lease) -> TaskLease {
        TaskLease::Held(lease)
    }
}

/// The user a task runs as.
struct TaskUser {
    lease: TaskLease,
    setpriv: PathBuf,
}

impl TaskUser {
    fn uid(&self) -> u32 {
        match &self.lease {
            TaskLease::Held(lease) => lease.uid(),
            TaskLease::Lost(uid) => *uid,
        }
    }

    /// After the task: kills whatever still runs under its uid, and gives its sandbox back to
    /// root (`0700`), so that the next task to lease the uid cannot read it. The uid returns
    /// to the pool when `self` is dropped.
    fn clean_up(&self, sandbox: &Path) {
        let uid = self.uid();
        if isolation::kill_user(&self.setpriv, uid) {
            tracing::info!(
                uid,
                "killed the processes a task left running under its uid"
            );
        }
        if let Err(error) = std::os::unix::fs::lchown(sandbox, Some(0), Some(0)) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(sandbox = %sandbox.display(), %error, "cannot give a finished task's sandbox back to root");
            }
        }
    }
}

/// Where the wrapper of `task_id` of `framework_id` writes its exit code, under `work_dir`.
pub fn exit_code_path(work_dir: &Path, framework_id: &FrameworkId, task_id: &TaskId) -> PathBuf {
    work_dir
        .join(EXIT_CODES_DIR)
        .join(component(&cgroup_key(framework_id, task_id)))
}

/// Makes the agent's work directory ready for isolated tasks: `0711` (tasks pass through to
/// their sandboxes but cannot list it), `sandboxes` likewise, `exit-codes` the agent's alone.
pub fn prepare_work_dir(work_dir: &Path, isolation: &Isolation) -> std::io::Result<()> {
    isolation::make_private_dir(&work_dir.join(EXIT_CODES_DIR))?;
    if isolation.enforced() {
        isolation::make_passable_dir(work_dir)?;
        isolation::make_passable_dir(&work_dir.join("sandboxes"))?;
        if let Some(closed) = closed_ancestor(work_dir) {
            // Tasks still start (the wrapper enters the sandbox as root), but a task that
            // names its sandbox by absolute path ($HOME, $FULLERENE_SANDBOX) cannot reach it.
            tracing::warn!(
                work_dir = %work_dir.display(),
                closed = %closed.display(),
                "isolated tasks cannot pass through {} (no execute permission for others): a task \
                 that uses $HOME or $FULLERENE_SANDBOX will fail; chmod o+x it or move --work-dir",
                closed.display()
            );
        }
    }
    Ok(())
}

/// The first directory above `dir` that other users cannot pass through (no `o+x`), if any.
fn closed_ancestor(dir: &Path) -> Option<PathBuf> {
    let dir = fs::canonicalize(dir).ok()?;
    dir.ancestors().skip(1).find_map(|ancestor| {
        let mode = fs::metadata(ancestor).ok()?.permissions().mode();
        (mode & 0o001 == 0).then(|| ancestor.to_path_buf())
    })
}

/// Creates the sandbox: for an isolated task, its parents `0711` and the sandbox `0700`, owned
/// by the task's uid (a sandbox left by an earlier run of the id is taken over).
fn make_sandbox(sandbox: &Path, uid: Option<u32>) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot create sandbox {}: {e}", sandbox.display());
    let Some(uid) = uid else {
        return fs::create_dir_all(sandbox).map_err(fail);
    };
    if let Some(parent) = sandbox.parent() {
        isolation::make_passable_dir(parent).map_err(fail)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(sandbox) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(e)),
    }
    if !fs::symlink_metadata(sandbox).map_err(fail)?.is_dir() {
        return Err(format!("sandbox {} is not a directory", sandbox.display()));
    }
    std::os::unix::fs::lchown(sandbox, Some(uid), Some(uid)).map_err(fail)?;
    fs::set_permissions(sandbox, fs::Permissions::from_mode(0o700)).map_err(fail)
}

/// Opens the sandbox's `name` (`stdout`, `stderr`) afresh for the task: whatever was there
/// (a file of an earlier run, or a link an earlier run left to trick the agent) is removed
/// first, and the new file is never reached through a link.
fn output_file(sandbox: &Path, name: &str, uid: Option<u32>) -> Result<File, String> {
    let path = sandbox.join(name);
    let fail = |e: std::io::Error| format!("cannot create {}: {e}", path.display());
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(fail)?;
    if let Some(uid) = uid {
        std::os::unix::fs::fchown(&file, Some(uid), Some(uid)).map_err(fail)?;
    }
    Ok(file)
}

/// The `env` program.
fn env_program() -> Result<&'static str, String> {
    ENV_PROGRAMS
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| format!("no env program (looked for {})", ENV_PROGRAMS.join(", ")))
}

/// Checks what `env -i` could misread: a variable's name must be a name, and the program must
/// not look like an assignment.
fn check_env(command: &CommandSpec) -> Result<(), String> {
    for name in command.env.keys() {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(format!("invalid environment variable name {name:?}"));
        }
    }
    if command.program.contains('=') {
        return Err(format!(
            "the program {:?} contains `=`, which cannot be run",
            command.program
        ));
    }
    Ok(())
}

impl Drop for Executors {
    fn drop(&mut self) {
        // Stop supervising; the processes go on and are found again by `resume`.
        for handle in self.tasks.values() {
            handle.join.abort();
        }
    }
}

/// The variables of the agent's environment a task gets: where to find programs, and locale
/// and time zone.
fn inherited_env() -> Vec<(String, String)> {
    ["PATH", "LANG", "LC_ALL", "TZ"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

fn cgroup_key(framework_id: &FrameworkId, task_id: &TaskId) -> String {
    format!("{framework_id}/{task_id}")
}

/// Checks that the program can be run, so that a typo is a clear LaunchFailed, not exit 127.
fn resolve_program(program: &str, sandbox: &Path, path_var: Option<&String>) -> Result<(), String> {
    let executable = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return Err("the command's program is empty".into());
    }
    if program.contains('/') {
        let path = sandbox.join(program);
        return if executable(&path) {
            Ok(())
        } else {
            Err(format!(
                "program {program} does not exist or is not executable"
            ))
        };
    }
    let search = path_var
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    if search
        .split(':')
        .filter(|d| !d.is_empty())
        .any(|dir| executable(&Path::new(dir).join(program)))
    {
        Ok(())
    } else {
        Err(format!("program `{program}` not found in PATH ({search})"))
    }
}

/// What a process supervisor knows about its task.
struct ProcessCtx {
    task: TaskKey,
    pid: i32,
    start_ticks: u64,
    sandbox: PathBuf,
    /// Where the wrapper writes the exit code (the agent's, not the task's).
    exit_file: PathBuf,
    limits: Limits,
    cgroup_key: String,
    /// The task's own user, when tasks are isolated.
    user: Option<TaskUser>,
}

/// How a supervised process ended.
enum Ended {
    /// It ended by itself (or by a signal from elsewhere).
    Outcome(Outcome),
    /// A kill ended it; `escalated` when SIGTERM was not enough.
    Killed { outcome: Outcome, escalated: bool },
}

impl ProcessCtx {
    /// Cleans up after the wrapper has ended and reports the outcome.
    fn finish(&self, ended: Ended, events: &mpsc::UnboundedSender<ExecEvent>) {
        // Whatever the task left behind in its group goes with it.
        if !group_members(self.pid).is_empty() {
            signal_group(self.pid, self.start_ticks, libc::SIGKILL);
        }
        // And whatever it left under its uid, in its group or not.
        if let Some(user) = &self.user {
            user.clean_up(&self.sandbox);
        }
        let mut oom_killed = false;
        if let Limits::Enforced(cgroup) = &self.limits {
            oom_killed = cgroup.oom_kills(&self.cgroup_key) > 0;
            cgroup.remove_task(&self.cgroup_key);
        }
        let (outcome, detail) = match ended {
            // A kill by the OOM killer is the memory limit at work, not a crash of the task.
            Ended::Outcome(Outcome::Signaled(libc::SIGKILL)) if oom_killed => (
                Outcome::LimitExceeded("memory (memory.max)".into()),
                stderr_tail(&self.sandbox),
            ),
            Ended::Outcome(outcome) => {
                let detail = match outcome {
                    Outcome::Exited(0) => String::new(),
                    _ => stderr_tail(&self.sandbox),
                };
                (outcome, detail)
            }
            Ended::Killed {
                outcome,
                escalated: true,
            } => (
                outcome,
                "it did not stop within its grace period after SIGTERM; SIGKILL sent".into(),
            ),
            Ended::Killed { outcome, .. } => (outcome, String::new()),
        };
        if let Err(error) = fs::remove_file(&self.exit_file) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(file = %self.exit_file.display(), %error, "exit code file not removed");
            }
        }
        let _ = events.send(ExecEvent {
            task: self.task.clone(),
            outcome,
            detail,
        });
    }

    fn recorded_outcome(&self) -> Option<Outcome> {
        let text = fs::read_to_string(&self.exit_file).ok()?;
        text.trim().parse::<i32>().ok().map(outcome_of_code)
    }
}

async fn supervise_child(
    mut child: tokio::process::Child,
    ctx: &ProcessCtx,
    mut kill_rx: mpsc::UnboundedReceiver<Duration>,
) -> Ended {
    tokio::select! {
        status = child.wait() => Ended::Outcome(outcome_of_status(status, ctx)),
        Some(grace) = kill_rx.recv() => {
            let escalated = terminate_group(ctx.pid, ctx.start_ticks, grace).await;
            let status = child.wait().await;
            let outcome = if escalated {
                Outcome::Signaled(libc::SIGKILL)
            } else {
                outcome_of_status(status, ctx)
            };
            Ended::Killed { outcome, escalated }
        }
    }
}

async fn supervise_reattached(
    ctx: &ProcessCtx,
    mut kill_rx: mpsc::UnboundedReceiver<Duration>,
) -> Ended {
    loop {
        if !process_alive(ctx.pid, ctx.start_ticks) {
            return Ended::Outcome(ctx.recorded_outcome().unwrap_or(Outcome::Vanished));
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            Some(grace) = kill_rx.recv() => {
                let escalated = terminate_group(ctx.pid, ctx.start_ticks, grace).await;
                let outcome = if escalated {
                    Outcome::Signaled(libc::SIGKILL)
                } else {
                    ctx.recorded_outcome().unwrap_or(Outcome::Signaled(libc::SIGTERM))
                };
                return Ended::Killed { outcome, escalated };
            }
        }
    }
}

fn outcome_of_status(status: std::io::Result<ExitStatus>, ctx: &ProcessCtx) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => outcome_of_code(code),
            (None, Some(signal)) => Outcome::Signaled(signal),
            (None, None) => ctx.recorded_outcome().unwrap_or(Outcome::Vanished),
        },
        Err(error) => {
            tracing::warn!(task = %ctx.task, %error, "cannot wait for the task's process");
            ctx.recorded_outcome().unwrap_or(Outcome::Vanished)
        }
    }
}

/// The shell's convention: 128+N means "ended by signal N".
fn outcome_of_code(code: i32) -> Outcome {
    if (129..=128 + 64).contains(&code) {
        Outcome::Signaled(code - 128)
    } else {
        Outcome::Exited(code)
    }
}

/// SIGTERM to the group, up to `grace` for it to empty, then SIGKILL. True if SIGKILL was
/// needed.
async fn terminate_group(pgid: i32, start_ticks: u64, grace: Duration) -> bool {
    signal_group(pgid, start_ticks, libc::SIGTERM);
    // The grace period comes from the master: a huge one must not overflow the clock.
    let grace = grace.min(MAX_GRACE);
    let deadline = Instant::now() + grace;
    loop {
        if group_members(pgid).is_empty() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(POLL.min(deadline - now)).await;
    }
    signal_group(pgid, start_ticks, libc::SIGKILL);
    let give_up = Instant::now() + KILL_WAIT;
    while !group_members(pgid).is_empty() && Instant::now() < give_up {
        tokio::time::sleep(POLL).await;
    }
    true
}

/// Signals the process group `pgid`, unless its leader's pid now belongs to another process.
///
/// While any process of the group lives, the kernel does not reuse `pgid` as a pid; so if the
/// leader's pid is taken by a process with another start time, the task's group is gone.
fn signal_group(pgid: i32, start_ticks: u64, signal: i32) {
    if let Some(stat) = proc_stat(pgid) {
        if stat.start_ticks != start_ticks {
            return;
        }
    }
    kill_group(pgid, signal);
}

/// Sends `signal` to process group `pgid` (a group already gone is not an error).
fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, signal, %error, "cannot signal a task's process group");
        }
    }
}

/// The fields of `/proc/<pid>/stat` the executor needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// The process group.
    pub pgrp: i32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Reads `/proc/<pid>/stat`; `None` if there is no such process.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` is the live (not zombie) process that started at `start_ticks`.
pub fn process_alive(pid: i32, start_ticks: u64) -> bool {
    proc_stat(pid).is_some_and(|s| s.start_ticks == start_ticks && !matches!(s.state, 'Z' | 'X'))
}

/// The variable that marks a task's processes with its id (set after the spec's own
/// variables, which cannot override it).
const TASK_ID_VAR: &str = "FULLERENE_TASK_ID";
/// The variable that marks a task's processes with its framework's id.
const FRAMEWORK_ID_VAR: &str = "FULLERENE_FRAMEWORK_ID";
/// The variable that marks a task's processes with its sandbox, which is under one agent's
/// work directory: two agents on one machine may both have run the task (lost on one,
/// launched again on the other), and each kills only its own.
const SANDBOX_VAR: &str = "FULLERENE_SANDBOX";

/// Kills the process groups of the processes marked as `task_id` of `framework_id` run in
/// `sandbox` (by their environment; see [`TASK_ID_VAR`]); returns how many groups. For a task
/// whose process was spawned but whose start was never recorded. A process that rewrote its
/// own environment (`exec env -i ...`) is not found this way; with cgroups enforced, it is
/// still in the task's cgroup, which the caller removes. A child the agent forked but that had
/// not yet exec'd when the agent stopped still shows the agent's environment; the agent's own
/// restart takes far longer than that exec.
fn kill_unrecorded(sandbox: &Path, framework_id: &FrameworkId, task_id: &TaskId) -> usize {
    use std::os::unix::ffi::OsStrExt;
    let mut sandbox_mark = format!("{SANDBOX_VAR}=").into_bytes();
    sandbox_mark.extend_from_slice(sandbox.as_os_str().as_bytes());
    let wanted = [
        format!("{TASK_ID_VAR}={task_id}").into_bytes(),
        format!("{FRAMEWORK_ID_VAR}={framework_id}").into_bytes(),
        sandbox_mark,
    ];
    let mut groups = std::collections::BTreeSet::new();
    for pid in pids() {
        let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let marked = wanted.iter().all(|var| {
            environ
                .split(|&b| b == 0)
                .any(|item| item == var.as_slice())
        });
        if !marked {
            continue;
        }
        if let Some(stat) = proc_stat(pid).filter(|s| !matches!(s.state, 'Z' | 'X')) {
            groups.insert(stat.pgrp);
        }
    }
    // Never our own group (an agent that itself runs as a task carries the marks too).
    if let Some(own) = proc_stat(std::process::id() as i32) {
        groups.remove(&own.pgrp);
    }
    for &pgid in &groups {
        tracing::warn!(task = %task_id, pgid, "killing the processes of a task whose start was not recorded");
        // The group has a live member (just read), so its id is not reused.
        kill_group(pgid, libc::SIGKILL);
    }
    groups.len()
}

/// The pids in `/proc` (none if it cannot be read).
pub fn pids() -> impl Iterator<Item = i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
}

/// The live (not zombie) processes of group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    pids()
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|s| s.pgrp == pgid && !matches!(s.state, 'Z' | 'X'))
        })
        .collect()
}

fn stderr_tail(sandbox: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    // The task may have replaced its stderr with a link to a file it cannot read, or a pipe
    // that would block: only a regular file, never through a link, and never waiting.
    let Ok(mut file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(sandbox.join(STDERR_FILE))
    else {
        return String::new();
    };
    let Ok(metadata) = file.metadata() else {
        return String::new();
    };
    if !metadata.is_file() {
        return String::new();
    }
    let len = metadata.len();
    let start = len.saturating_sub(STDERR_TAIL_BYTES);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!("stderr: {text}")
    }
}

#[cfg(test)]
mod tests;
