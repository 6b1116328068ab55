//! Sans-IO decisions about task sandboxes once tasks have written to them: which file a log
//! read may open and which bytes it returns ([`check_file_name`], [`clamp_range`]), and which
//! sandboxes the garbage collection removes ([`GcPolicy::select`]). The shell
//! ([`crate::shell`]) does the file IO off its event loop and passes the time in.
//!
//! # Reads
//!
//! A read names a file of one task's sandbox by a plain name (`stdout`, `stderr`), never a
//! path: one component, no `..`, nothing hidden, no separator or NUL. The shell opens it
//! without following a link (a task owns its sandbox and could put a link to the agent's own
//! files there) and only if it is a regular file (a pipe would block the read). The range is
//! clamped to the file as it is, and to [`MAX_FILE_READ_BYTES`], so that no read costs the
//! agent more than one bounded chunk.
//!
//! # Garbage collection
//!
//! Sandboxes of ended tasks are removed once they have been left alone for the retention
//! period, and, while the disk under the work directory has less free space than the
//! threshold, oldest first until it has enough. A running task's sandbox is never removed,
//! nor one modified within the last [`GcPolicy::min_idle`] (a task may just have started in it,
//! after the shell took its list of running tasks). A sandbox's age is the latest modification
//! time of the directory and the files in it: the agent forgets a task once its end is
//! acknowledged, but the last write to its sandbox stays on disk across agent restarts.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use fullerene_proto::messages::{FileRefusal, UnixMillis, MAX_FILE_READ_BYTES};

/// The longest file name a read may name (Linux's `NAME_MAX`).
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// `name` if it names a file directly in a sandbox; otherwise the refusal that says why not.
pub fn check_file_name(name: &str) -> Result<&str, FileRefusal> {
    let plain = !name.is_empty()
        && name.len() <= MAX_FILE_NAME_BYTES
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0']);
    if plain {
        Ok(name)
    } else {
        Err(FileRefusal::BadName(name.chars().take(64).collect()))
    }
}

/// The bytes a read returns from a file of `size` bytes: from `offset` (at most `size`) for
/// at most `length` bytes, never past the end nor more than [`MAX_FILE_READ_BYTES`].
pub fn clamp_range(offset: u64, length: u64, size: u64) -> (u64, u64) {
    let start = offset.min(size);
    let length = length.min(MAX_FILE_READ_BYTES).min(size - start);
    (start, length)
}

/// What the garbage collection is told about one sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxUse<K> {
    /// Which sandbox (the shell uses its path).
    pub key: K,
    /// Whether its task still runs (or has not started yet): never removed.
    pub running: bool,
    /// The latest modification of the sandbox or a file in it.
    pub modified_ms: UnixMillis,
    /// The bytes it holds.
    pub bytes: u64,
}

/// The free space of the disk under the work directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskSpace {
    /// Bytes available to the agent.
    pub free: u64,
    /// The disk's size in bytes.
    pub total: u64,
}

/// Why a sandbox is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcReason {
    /// Its task ended longer ago than the retention period.
    Expired,
    /// The disk had less free space than the threshold, and it was the oldest left.
    LowDisk,
}

/// When sandboxes of ended tasks are removed (the agent's `--sandbox-*` flags).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GcPolicy {
    /// How long a sandbox is kept after its task's last write.
    pub retention: Duration,
    /// Below this percentage of the disk free (0 to 100), the oldest ended sandboxes go first,
    /// whatever their age, until it is free again.
    pub min_free_percent: f64,
    /// A sandbox modified this recently is never removed, even when the disk is low.
    pub min_idle: Duration,
}

/// [`GcPolicy::retention`] by default: a day, time enough to read a failed task's logs.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// [`GcPolicy::min_free_percent`] by default: 10% of the disk.
pub const DEFAULT_MIN_FREE_PERCENT: f64 = 10.0;
/// How often the agent runs the collection by default.
pub const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(60);

impl Default for GcPolicy {
    /// A day's retention, 10% of the disk kept free, a minute's idleness before removal.
    fn default() -> GcPolicy {
        GcPolicy {
            retention: DEFAULT_RETENTION,
            min_free_percent: DEFAULT_MIN_FREE_PERCENT,
            min_idle: DEFAULT_GC_INTERVAL,
        }
    }
}

impl GcPolicy {
    /// The sandboxes to remove now, oldest first, each with why: every ended one past the
    /// retention period, then, while the disk would still be below the threshold, the oldest
    /// ended ones left. Running sandboxes and those idle less than `min_idle` stay.
    pub fn select<K: Clone>(
        &self,
        sandboxes: &[SandboxUse<K>],
        disk: DiskSpace,
        now_ms: UnixMillis,
    ) -> Vec<(K, GcReason)> {
        let age = |sandbox: &SandboxUse<K>| {
            Duration::from_millis(now_ms.saturating_sub(sandbox.modified_ms))
        };
        let mut candidates: Vec<&SandboxUse<K>> = sandboxes
            .iter()
            .filter(|sandbox| !sandbox.running && age(sandbox) >= self.min_idle)
            .collect();
        candidates.sort_by_key(|sandbox| sandbox.modified_ms);
        // Clamped so that a bad value cannot ask for more than the disk.
        let wanted = (disk.total as f64 * self.min_free_percent.clamp(0.0, 100.0) / 100.0) as u64;
        let mut free = disk.free;
        let mut chosen = Vec::new();
        for sandbox in candidates {
            let reason = if age(sandbox) >= self.retention {
                GcReason::Expired
            } else if free < wanted {
                GcReason::LowDisk
            } else {
                // Younger ones follow, and the disk has room.
                break;
            };
            free = free.saturating_add(sandbox.bytes);
            chosen.push((sandbox.key.clone(), reason));
        }
        chosen
    }
}

/// The sandboxes the collection removed lately, so that a read of one says so rather than
/// that there is none. Bounded: the oldest are forgotten first, and all on an agent restart
/// (a read then says the agent has no sandbox).
#[derive(Debug)]
pub struct Collected<K> {
    order: VecDeque<K>,
    keys: HashSet<K>,
    capacity: usize,
}

impl<K: Clone + Eq + Hash> Collected<K> {
    /// Remembers at most `capacity` sandboxes.
    pub fn new(capacity: usize) -> Collected<K> {
        Collected {
            order: VecDeque::new(),
            keys: HashSet::new(),
            capacity,
        }
    }

    /// `key` was removed.
    pub fn insert(&mut self, key: K) {
        if !self.keys.insert(key.clone()) {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
    }

    /// `key` is in use again (a task of the same id started in it).
    pub fn remove(&mut self, key: &K) {
        if self.keys.remove(key) {
            self.order.retain(|kept| kept != key);
        }
    }

    /// Whether `key` was removed by the collection.
    pub fn contains(&self, key: &K) -> bool {
        self.keys.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    fn sandbox(
        key: &'static str,
        running: bool,
        modified_ms: u64,
        bytes: u64,
    ) -> SandboxUse<&'static str> {
        SandboxUse {
            key,
            running,
            modified_ms,
            bytes,
        }
    }

    fn policy() -> GcPolicy {
        GcPolicy {
            retention: Duration::from_secs(24 * 3600),
            min_free_percent: 10.0,
            min_idle: Duration::from_secs(60),
        }
    }

    const ROOMY: DiskSpace = DiskSpace {
        free: 500,
        total: 1_000,
    };

    #[test]
    fn plain_names_pass_and_paths_hidden_files_and_odd_bytes_are_refused() {
        assert_eq!(check_file_name("stdout"), Ok("stdout"));
        assert_eq!(check_file_name("stderr"), Ok("stderr"));
        assert_eq!(check_file_name("result.csv"), Ok("result.csv"));
        for bad in [
            "",
            ".",
            "..",
            "../stdout",
            "/etc/passwd",
            "a/b",
            "a\\b",
            ".fullerene-exit-code",
            "nul\0byte",
        ] {
            assert!(
                matches!(check_file_name(bad), Err(FileRefusal::BadName(_))),
                "{bad:?} was let through"
            );
        }
        let long = "x".repeat(MAX_FILE_NAME_BYTES + 1);
        assert!(check_file_name(&long).is_err());
        assert!(check_file_name(&long[1..]).is_ok());
    }

    #[test]
    fn ranges_are_clamped_to_the_file_and_to_one_chunk() {
        assert_eq!(clamp_range(0, 10, 100), (0, 10));
        assert_eq!(clamp_range(95, 10, 100), (95, 5));
        // Past the end: an empty read at the end, which a follower retries later.
        assert_eq!(clamp_range(150, 10, 100), (100, 0));
        assert_eq!(clamp_range(0, 0, 100), (0, 0));
        assert_eq!(clamp_range(0, u64::MAX, u64::MAX), (0, MAX_FILE_READ_BYTES));
        assert_eq!(clamp_range(u64::MAX, u64::MAX, 7), (7, 0));
    }

    #[test]
    fn ended_sandboxes_go_after_the_retention_and_running_ones_never() {
        let now = 100 * HOUR_MS;
        let sandboxes = [
            sandbox("old-ended", false, now - 25 * HOUR_MS, 10),
            sandbox("old-running", true, now - 48 * HOUR_MS, 10),
            sandbox("young-ended", false, now - HOUR_MS, 10),
        ];
        assert_eq!(
            policy().select(&sandboxes, ROOMY, now),
            vec![("old-ended", GcReason::Expired)]
        );
        // Exactly at the retention period counts as past it.
        let edge = [sandbox("edge", false, now - 24 * HOUR_MS, 1)];
        assert_eq!(
            policy().select(&edge, ROOMY, now),
            vec![("edge", GcReason::Expired)]
        );
    }

    #[test]
    fn a_low_disk_removes_the_oldest_ended_sandboxes_until_enough_is_free() {
        let now = 100 * HOUR_MS;
        let sandboxes = [
            sandbox("newer", false, now - 2 * HOUR_MS, 40),
            sandbox("running", true, now - 10 * HOUR_MS, 500),
            sandbox("oldest", false, now - 5 * HOUR_MS, 30),
            sandbox("middle", false, now - 3 * HOUR_MS, 30),
            sandbox("just-written", false, now - 1_000, 500),
        ];
        // 100 of 1000 must be free; 50 is: the oldest (30) then the middle (30) make 110.
        let low = DiskSpace {
            free: 50,
            total: 1_000,
        };
        assert_eq!(
            policy().select(&sandboxes, low, now),
            vec![("oldest", GcReason::LowDisk), ("middle", GcReason::LowDisk)]
        );
        // However low the disk, running and just-written sandboxes stay.
        let full = DiskSpace {
            free: 0,
            total: 1_000_000,
        };
        let removed: Vec<_> = policy()
            .select(&sandboxes, full, now)
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(removed, vec!["oldest", "middle", "newer"]);
        // With room on the disk, none of them is old enough.
        assert!(policy().select(&sandboxes, ROOMY, now).is_empty());
    }

    #[test]
    fn expired_sandboxes_count_toward_the_free_space() {
        let now = 100 * HOUR_MS;
        let sandboxes = [
            sandbox("expired", false, now - 30 * HOUR_MS, 60),
            sandbox("recent", false, now - 2 * HOUR_MS, 60),
        ];
        let low = DiskSpace {
            free: 50,
            total: 1_000,
        };
        // Removing the expired one frees 60: 110 ≥ 100, so the recent one stays.
        assert_eq!(
            policy().select(&sandboxes, low, now),
            vec![("expired", GcReason::Expired)]
        );
    }

    #[test]
    fn the_collected_set_is_bounded_and_forgets_reused_sandboxes() {
        let mut collected = Collected::new(2);
        collected.insert("a");
        collected.insert("b");
        collected.insert("b");
        collected.insert("c");
        assert!(!collected.contains(&"a"), "the oldest is forgotten first");
        assert!(collected.contains(&"b") && collected.contains(&"c"));
        collected.remove(&"b");
        assert!(!collected.contains(&"b"));
        collected.insert("d");
        assert!(collected.contains(&"c") && collected.contains(&"d"));
    }
}
