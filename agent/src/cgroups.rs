//! Resource limits with cgroups v2, where the machine offers them.
//!
//! The agent enforces a task's `cpus` with `cpu.max` (quota = cpus × period), its `mem_mib`
//! with `memory.max` and, where the `pids` controller exists, bounds its processes with
//! `pids.max` ([`pids_max`]: 64 per requested core, at least 64), in a cgroup per task under
//! `<root>/fullerene-<agent>/`. A task that asks for zero of a resource gets the minimum, never
//! an unlimited value. It does so only when
//! `<root>` is a writable cgroup v2 hierarchy with the `cpu` and `memory` controllers. Otherwise
//! it says so plainly (a warning at start, a note in every RUNNING update, and the
//! `fullerene_agent_limits_enforced` gauge at 0) instead of pretending.

use std::fs;
use std::path::{Path, PathBuf};

use fullerene_proto::resources::{ResourceKind, ResourceVec};

/// Where cgroup v2 is normally mounted.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";
/// The CPU accounting period written to `cpu.max`, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel accepts, in microseconds: also what a task that asks for no
/// CPU gets (1% of a core), never an unlimited share.
const MIN_CPU_QUOTA_US: u64 = 1_000;
/// The smallest memory limit written, in MiB: what a task that asks for less, or for none,
/// gets (room for its wrapper shell), never an unlimited one.
const MIN_MEMORY_MIB: f64 = 16.0;
/// Processes allowed per requested core in `pids.max`.
const PIDS_PER_CPU: f64 = 64.0;
/// The smallest `pids.max` written: what a task that asks for no CPU gets (its wrapper and a
/// few helpers), never an unlimited number.
const MIN_PIDS: u64 = 64;

/// Whether and how task limits are enforced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limits {
    /// Each task gets a cgroup v2 under this directory.
    Enforced(CgroupV2),
    /// Limits are not enforced, for this reason.
    NotEnforced {
        /// Why (shown to operators and in task status messages).
        reason: String,
    },
}

impl Limits {
    /// Detects cgroup v2 under `root` and prepares the agent's parent cgroup `fullerene-<name>`.
    pub fn detect(root: &Path, name: &str) -> Limits {
        match CgroupV2::setup(root, name) {
            Ok(cgroup) => Limits::Enforced(cgroup),
            Err(reason) => Limits::NotEnforced { reason },
        }
    }

    /// Whether limits are enforced.
    pub fn enforced(&self) -> bool {
        matches!(self, Limits::Enforced(_))
    }

    /// The sentence for a task's RUNNING update.
    pub fn note(&self) -> String {
        match self {
            Limits::Enforced(cgroup) if cgroup.pids => {
                "limits enforced with cgroup v2 (cpu.max, memory.max, pids.max)".into()
            }
            Limits::Enforced(_) => {
                "limits enforced with cgroup v2 (cpu.max, memory.max; no pids controller)".into()
            }
            Limits::NotEnforced { reason } => {
                format!("resource limits NOT enforced on this agent: {reason}")
            }
        }
    }
}

/// The agent's parent cgroup in a cgroup v2 hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupV2 {
    base: PathBuf,
    /// Whether the `pids` controller is there (then `pids.max` is written too).
    pids: bool,
}

impl CgroupV2 {
    fn setup(root: &Path, name: &str) -> Result<CgroupV2, String> {
        let controllers_file = root.join("cgroup.controllers");
        let controllers = fs::read_to_string(&controllers_file).map_err(|_| {
            format!(
                "{} is not a cgroup v2 hierarchy (no cgroup.controllers)",
                root.display()
            )
        })?;
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        let missing: Vec<&str> = ["cpu", "memory"].into_iter().filter(|c| !has(c)).collect();
        if !missing.is_empty() {
            return Err(format!(
                "the cgroup v2 hierarchy at {} lacks the {} controller(s)",
                root.display(),
                missing.join(" and ")
            ));
        }
        let pids = has("pids");
        let base = root.join(format!("fullerene-{}", component(name)));
        fs::create_dir_all(&base)
            .map_err(|e| format!("cannot create cgroup {}: {e}", base.display()))?;
        let enable = if pids {
            "+cpu +memory +pids"
        } else {
            "+cpu +memory"
        };
        // Controllers must be enabled in the parent for the children to have their files. Writing
        // may fail where they are already on (or delegated differently); what counts is below.
        let _ = fs::write(root.join("cgroup.subtree_control"), enable);
        fs::write(base.join("cgroup.subtree_control"), enable).map_err(|e| {
            format!(
                "cannot enable the controllers ({enable}) in {}: {e}",
                base.display()
            )
        })?;
        Ok(CgroupV2 { base, pids })
    }

    /// The agent's parent cgroup.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The cgroup of the task with this key (see [`component`]).
    pub fn task_path(&self, key: &str) -> PathBuf {
        self.base.join(component(key))
    }

    /// Creates the task's cgroup with its limits; returns the `cgroup.procs` file the task's
    /// wrapper joins.
    pub fn create_task(&self, key: &str, resources: &ResourceVec) -> Result<PathBuf, String> {
        let dir = self.task_path(key);
        fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create cgroup {}: {e}", dir.display()))?;
        let write = |file: &str, value: String| {
            fs::write(dir.join(file), &value).map_err(|e| {
                format!(
                    "cannot write {value:?} to {}: {e}",
                    dir.join(file).display()
                )
            })
        };
        write("cpu.max", cpu_max(resources[ResourceKind::Cpus]))?;
        write("memory.max", memory_max(resources[ResourceKind::MemMib]))?;
        if self.pids {
            write("pids.max", pids_max(resources[ResourceKind::Cpus]))?;
        }
        Ok(dir.join("cgroup.procs"))
    }

    /// How many times the kernel's OOM killer ended a process of the task (`oom_kill` in
    /// `memory.events`); 0 when unknown.
    pub fn oom_kills(&self, key: &str) -> u64 {
        fs::read_to_string(self.task_path(key).join("memory.events"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Removes a finished task's cgroup (best effort: a cgroup with processes cannot go).
    pub fn remove_task(&self, key: &str) {
        let dir = self.task_path(key);
        if let Err(error) = fs::remove_dir(&dir) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(cgroup = %dir.display(), %error, "cgroup not removed");
            }
        }
    }
}

/// `cpu.max` for `cpus` cores: `quota period`, at least the kernel's smallest quota (a task
/// that asks for no CPU gets that, not an unlimited share).
pub fn cpu_max(cpus: f64) -> String {
    let cpus = if cpus.is_finite() { cpus.max(0.0) } else { 0.0 };
    let quota = ((cpus * CPU_PERIOD_US as f64).round() as u64).max(MIN_CPU_QUOTA_US);
    format!("{quota} {CPU_PERIOD_US}")
}

/// `memory.max` for `mem_mib`, in bytes, at least 16 MiB (a task that asks for no
/// memory gets that, not an unlimited amount).
pub fn memory_max(mem_mib: f64) -> String {
    let mem_mib = if mem_mib.is_finite() { mem_mib } else { 0.0 };
    format!(
        "{}",
        (mem_mib.max(MIN_MEMORY_MIB) * 1024.0 * 1024.0).round() as u64
    )
}

/// `pids.max` for `cpus` cores: [`PIDS_PER_CPU`] per core, at least [`MIN_PIDS`] (a task that
/// asks for no CPU gets that, never an unlimited number of processes).
pub fn pids_max(cpus: f64) -> String {
    let cpus = if cpus.is_finite() { cpus.max(0.0) } else { 0.0 };
    let pids = ((cpus * PIDS_PER_CPU).ceil() as u64).max(MIN_PIDS);
    format!("{pids}")
}

/// A string made safe as one path component: ASCII letters, digits, `.`, `_` and `-` stay; any
/// other byte becomes `%XX`; `.` and `..` and the empty string are escaped whole, so that no id
/// from the outside can name another directory.
pub fn component(id: &str) -> String {
    if id.is_empty() || id == "." || id == ".." {
        return id.bytes().map(|b| format!("%{b:02X}")).collect::<String>() + "%";
    }
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_escape_their_directory() {
        assert_eq!(component("task-1.a_b"), "task-1.a_b");
        assert_eq!(component("../etc"), "..%2Fetc");
        assert_eq!(component(".."), "%2E%2E%");
        assert_eq!(component("."), "%2E%");
        assert_eq!(component(""), "%");
        assert_eq!(component("a b%"), "a%20b%25");
        for id in ["..", ".", "", "/", "a/../../b"] {
            let c = component(id);
            assert!(
                !c.contains('/') && c != "." && c != ".." && !c.is_empty(),
                "{id}"
            );
        }
    }

    #[test]
    fn limits_translate_to_cgroup_values() {
        assert_eq!(cpu_max(1.5), "150000 100000");
        assert_eq!(cpu_max(0.001), "1000 100000");
        // Asking for none (or nonsense) is the minimum, never unlimited.
        assert_eq!(cpu_max(0.0), "1000 100000");
        assert_eq!(cpu_max(f64::NAN), "1000 100000");
        assert_eq!(memory_max(256.0), "268435456");
        assert_eq!(memory_max(0.0), "16777216");
        assert_eq!(memory_max(-1.0), "16777216");
        assert_eq!(pids_max(0.0), "64");
        assert_eq!(pids_max(f64::INFINITY), "64");
        assert_eq!(pids_max(0.5), "64");
        assert_eq!(pids_max(4.0), "256");
        assert_eq!(pids_max(2.5), "160");
    }

    #[test]
    fn a_machine_without_cgroup_v2_is_reported_not_enforced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = Limits::detect(dir.path(), "agent-1");
        assert!(!limits.enforced());
        assert!(limits.note().contains("NOT enforced"), "{}", limits.note());
        assert!(
            limits.note().contains("not a cgroup v2"),
            "{}",
            limits.note()
        );

        std::fs::write(dir.path().join("cgroup.controllers"), "cpuset io pids\n").expect("write");
        let limits = Limits::detect(dir.path(), "agent-1");
        assert!(
            limits.note().contains("lacks the cpu and memory"),
            "{}",
            limits.note()
        );
    }

    #[test]
    fn a_cgroup_v2_hierarchy_gets_a_cgroup_per_task_with_its_limits() {
        // A directory shaped like cgroupfs: the agent only reads and writes its files.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("cgroup.controllers"),
            "cpu io memory pids\n",
        )
        .expect("write");
        let Limits::Enforced(cgroup) = Limits::detect(dir.path(), "agent-1") else {
            panic!("a hierarchy with cpu and memory must be used");
        };
        assert_eq!(cgroup.base(), dir.path().join("fullerene-agent-1"));
        let enabled = std::fs::read_to_string(cgroup.base().join("cgroup.subtree_control"))
            .expect("subtree_control");
        assert_eq!(enabled, "+cpu +memory +pids");
        let resources: ResourceVec = "cpus=2,mem_mib=512".parse().expect("resources");
        let procs = cgroup.create_task("f/t1", &resources).expect("task cgroup");
        let task_dir = cgroup.task_path("f/t1");
        assert_eq!(procs, task_dir.join("cgroup.procs"));
        assert_eq!(
            std::fs::read_to_string(task_dir.join("cpu.max")).expect("cpu.max"),
            "200000 100000"
        );
        assert_eq!(
            std::fs::read_to_string(task_dir.join("memory.max")).expect("memory.max"),
            "536870912"
        );
        assert_eq!(
            std::fs::read_to_string(task_dir.join("pids.max")).expect("pids.max"),
            "128"
        );
        assert!(limits_note(&cgroup).contains("pids.max"));
    }

    fn limits_note(cgroup: &CgroupV2) -> String {
        Limits::Enforced(cgroup.clone()).note()
    }

    /// The files a task's cgroup holds after `create_task`, by name.
    fn written(cgroup: &CgroupV2, key: &str) -> std::collections::BTreeMap<String, String> {
        std::fs::read_dir(cgroup.task_path(key))
            .expect("task cgroup")
            .map(|e| {
                let e = e.expect("entry");
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(e.path()).expect("read"))
            })
            .collect()
    }

    #[test]
    fn a_task_that_asks_for_nothing_gets_the_minimums_never_unlimited() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .expect("write");
        let Limits::Enforced(cgroup) = Limits::detect(dir.path(), "agent-1") else {
            panic!("a hierarchy with cpu and memory must be used");
        };
        let resources: ResourceVec = "cpus=0,mem_mib=0".parse().expect("resources");
        cgroup
            .create_task("f/zero", &resources)
            .expect("task cgroup");
        let files = written(&cgroup, "f/zero");
        let expected: std::collections::BTreeMap<String, String> = [
            ("cpu.max", "1000 100000"),
            ("memory.max", "16777216"),
            ("pids.max", "64"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(files, expected);
        assert!(files.values().all(|v| !v.contains("max")));
    }

    #[test]
    fn without_the_pids_controller_no_pids_max_is_written_and_the_note_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory\n").expect("write");
        let Limits::Enforced(cgroup) = Limits::detect(dir.path(), "agent-1") else {
            panic!("a hierarchy with cpu and memory must be used");
        };
        assert_eq!(
            std::fs::read_to_string(cgroup.base().join("cgroup.subtree_control"))
                .expect("subtree_control"),
            "+cpu +memory"
        );
        let resources: ResourceVec = "cpus=1,mem_mib=64".parse().expect("resources");
        cgroup.create_task("f/t", &resources).expect("task cgroup");
        let files = written(&cgroup, "f/t");
        assert_eq!(
            files.keys().map(String::as_str).collect::<Vec<_>>(),
            ["cpu.max", "memory.max"]
        );
        assert!(limits_note(&cgroup).contains("no pids controller"));
    }
}
