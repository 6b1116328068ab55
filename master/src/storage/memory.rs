//! An in-memory [`RaftStore`] for deterministic tests and the simulator.
//!
//! It keeps exactly what a disk would: every successful write is "durable" (it survives the
//! node that made it), and nothing else is. A test crashes a master by dropping its
//! [`RaftNode`](crate::raft_node::RaftNode) and calling [`MemStorage::crash`], which returns the
//! durable contents as a fresh store for the restarted master and fences off the old handle, so
//! that a zombie of the crashed process cannot write any more. [`MemStorage::fail_next_persist`]
//! makes the next batch fail as a whole, as a crash in the middle of an atomic write would.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState};

use super::{check_compact, check_write, Durability, RaftStore, ReadyWrite, StorageError};

/// The durable contents of a [`MemStorage`].
#[derive(Debug, Clone, Default)]
struct MemCore {
    hard_state: HardState,
    /// The latest state-machine snapshot, with the membership at its index.
    snapshot: Snapshot,
    /// Index and term of the entry just before the first stored one (the last compacted entry,
    /// or the snapshot's), kept so that Raft can match logs at the first index.
    truncated_index: u64,
    truncated_term: u64,
    /// `entries[i].index == truncated_index + 1 + i`.
    entries: Vec<Entry>,
    /// The commit index as of the last synced write: what survives a crash
    /// (`hard_state.commit` may be ahead after [`Durability::Ordered`] writes).
    synced_commit: u64,
    fail_next_persist: bool,
    /// Set by [`MemStorage::fail_reads`]: raft-rs's reads of entries and terms fail.
    fail_reads: bool,
    /// The first read that failed ([`RaftStore::read_fault`]).
    read_fault: Option<StorageError>,
    /// Set on the old handle by [`MemStorage::crash`]: writes through it fail.
    fenced: bool,
    persist_count: u64,
}

impl MemCore {
    fn first_index(&self) -> u64 {
        self.truncated_index + 1
    }

    fn last_index(&self) -> u64 {
        self.truncated_index + self.entries.len() as u64
    }

    fn term(&self, index: u64) -> Option<u64> {
        if index == self.truncated_index {
            return Some(self.truncated_term);
        }
        if index < self.first_index() || index > self.last_index() {
            return None;
        }
        Some(self.entries[(index - self.first_index()) as usize].term)
    }

    fn is_initialized(&self) -> bool {
        self.snapshot.get_metadata().index > 0
            || self.hard_state != HardState::default()
            || !self.entries.is_empty()
    }
}

/// An in-memory Raft store. Clones share the same contents (like two handles on one disk).
#[derive(Debug, Clone)]
pub struct MemStorage {
    name: Arc<str>,
    core: Arc<Mutex<MemCore>>,
}

impl MemStorage {
    /// An empty store, named `name` in error messages.
    pub fn new(name: impl Into<String>) -> MemStorage {
        MemStorage {
            name: name.into().into(),
            core: Arc::new(Mutex::new(MemCore::default())),
        }
    }

    fn core(&self) -> MutexGuard<'_, MemCore> {
        // A panic while holding the lock cannot leave the core half-written: every mutation is
        // validated before it starts.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_writable(&self, core: &mut MemCore) -> Result<(), StorageError> {
        if core.fenced {
            return Err(StorageError::Injected {
                location: self.location(),
            });
        }
        Ok(())
    }

    fn invalid(&self, detail: String) -> StorageError {
        StorageError::InvalidWrite {
            location: self.location(),
            detail,
        }
    }

    /// Makes the next [`RaftStore::persist`] fail without writing anything.
    pub fn fail_next_persist(&self) {
        self.core().fail_next_persist = true;
    }

    /// Makes every later read of log entries and terms through [`raft::Storage`] fail, as a
    /// disk that stopped answering would (until [`MemStorage::crash`] gives a fresh handle).
    pub fn fail_reads(&self) {
        self.core().fail_reads = true;
    }

    /// Cancels failures armed by [`MemStorage::fail_next_persist`] and
    /// [`MemStorage::fail_reads`] that have not happened yet (a read that already failed stays
    /// latched in [`RaftStore::read_fault`]).
    pub fn cancel_injected_failure(&self) {
        let mut core = self.core();
        core.fail_next_persist = false;
        core.fail_reads = false;
    }

    /// Simulates a crash of the process using this store: returns a new store holding what
    /// was durably written (everything that returned `Ok`), for the restarted process, and
    /// makes every later write through this handle (and its clones) fail.
    pub fn crash(&self) -> MemStorage {
        let mut core = self.core();
        let mut durable = core.clone();
        // Unsynced commit-index writes are lost with the machine.
        durable.hard_state.commit = durable.synced_commit;
        durable.fail_next_persist = false;
        durable.fail_reads = false;
        durable.read_fault = None;
        durable.fenced = false;
        core.fenced = true;
        MemStorage {
            name: self.name.clone(),
            core: Arc::new(Mutex::new(durable)),
        }
    }

    /// How many batches [`RaftStore::persist`] has written (each one a synced write on a real
    /// disk), for tests of batching.
    pub fn persist_count(&self) -> u64 {
        self.core().persist_count
    }

    /// Number of log entries currently stored (after compaction).
    pub fn stored_entries(&self) -> usize {
        self.core().entries.len()
    }
}

fn raft_err(e: raft::StorageError) -> raft::Error {
    raft::Error::Store(e)
}

impl MemStorage {
    /// The failure of a read while [`MemStorage::fail_reads`] holds, kept for
    /// [`RaftStore::read_fault`].
    fn failed_read(&self, core: &mut MemCore) -> raft::Error {
        let error = StorageError::Injected {
            location: self.location(),
        };
        core.read_fault.get_or_insert_with(|| error.clone());
        error.into_raft()
    }
}

impl raft::Storage for MemStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let core = self.core();
        Ok(RaftState::new(
            core.hard_state.clone(),
            core.snapshot.get_metadata().get_conf_state().clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let mut core = self.core();
        if core.fail_reads {
            return Err(self.failed_read(&mut core));
        }
        if low < core.first_index() {
            return Err(raft_err(raft::StorageError::Compacted));
        }
        if high > core.last_index() + 1 || low > high {
            return Err(raft_err(raft::StorageError::Unavailable));
        }
        let offset = core.first_index();
        let mut entries = core.entries[(low - offset) as usize..(high - offset) as usize].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let mut core = self.core();
        if core.fail_reads {
            return Err(self.failed_read(&mut core));
        }
        if idx < core.truncated_index {
            return Err(raft_err(raft::StorageError::Compacted));
        }
        core.term(idx)
            .ok_or_else(|| raft_err(raft::StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.core().first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.core().last_index())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let core = self.core();
        if core.snapshot.get_metadata().index < request_index
            || !super::snapshot_covers(core.snapshot.get_metadata(), to)
        {
            return Err(raft_err(raft::StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(core.snapshot.clone())
    }
}

impl RaftStore for MemStorage {
    fn location(&self) -> String {
        format!("memory:{}", self.name)
    }

    fn bootstrap(&mut self, voters: &[u64], initial_state: &[u8]) -> Result<(), StorageError> {
        let mut core = self.core();
        self.check_writable(&mut core)?;
        if core.is_initialized() {
            return Err(StorageError::AlreadyInitialized {
                location: self.location(),
            });
        }
        let snapshot = super::bootstrap_snapshot(voters, initial_state);
        core.truncated_index = snapshot.get_metadata().index;
        core.truncated_term = snapshot.get_metadata().term;
        core.hard_state = super::bootstrap_hard_state();
        core.synced_commit = core.hard_state.commit;
        core.snapshot = snapshot;
        core.persist_count += 1;
        Ok(())
    }

    fn persist(&mut self, write: ReadyWrite<'_>) -> Result<(), StorageError> {
        let mut core = self.core();
        self.check_writable(&mut core)?;
        if std::mem::take(&mut core.fail_next_persist) {
            return Err(StorageError::Injected {
                location: self.location(),
            });
        }
        if write.is_empty() {
            return Ok(());
        }

        // Validate the whole batch against the state it produces before changing anything,
        // so that a refused batch leaves the store untouched (atomicity).
        let commit = check_write(
            &write,
            &core.hard_state,
            core.first_index(),
            core.last_index(),
            core.snapshot.get_metadata().index,
        )
        .map_err(|d| self.invalid(d))?
        .commit;

        if let Some(snapshot) = write.snapshot {
            let meta = snapshot.get_metadata();
            core.entries.clear();
            core.truncated_index = meta.index;
            core.truncated_term = meta.term;
            core.hard_state.term = core.hard_state.term.max(meta.term);
            core.snapshot = snapshot.clone();
        }
        if let Some(head) = write.entries.first() {
            let keep = (head.index - core.first_index()) as usize;
            core.entries.truncate(keep);
            core.entries.extend_from_slice(write.entries);
        }
        if let Some(hs) = write.hard_state {
            core.hard_state = hs.clone();
        }
        core.hard_state.commit = commit;
        if write.durability == Durability::Synced {
            core.synced_commit = commit;
        }
        core.persist_count += 1;
        Ok(())
    }

    fn save_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StorageError> {
        let mut core = self.core();
        self.check_writable(&mut core)?;
        let meta = snapshot.get_metadata();
        let current = core.snapshot.get_metadata().index;
        super::check_local_snapshot(
            meta.index,
            meta.term,
            current,
            core.hard_state.commit,
            core.term(meta.index),
        )
        .map_err(|d| self.invalid(d))?;
        core.snapshot = snapshot.clone();
        // A synced write makes the earlier, ordered ones durable too.
        core.synced_commit = core.hard_state.commit;
        Ok(())
    }

    fn compact(&mut self, to: u64) -> Result<(), StorageError> {
        let mut core = self.core();
        self.check_writable(&mut core)?;
        let snapshot_index = core.snapshot.get_metadata().index;
        if !check_compact(to, core.first_index(), core.last_index(), snapshot_index)
            .map_err(|d| self.invalid(d))?
        {
            return Ok(());
        }
        let term = core
            .term(to - 1)
            .ok_or_else(|| self.invalid(format!("no term for index {}", to - 1)))?;
        let drop = (to - core.first_index()) as usize;
        core.entries.drain(..drop);
        core.truncated_index = to - 1;
        core.truncated_term = term;
        core.synced_commit = core.hard_state.commit;
        Ok(())
    }

    fn applied(&self) -> u64 {
        self.core().snapshot.get_metadata().index
    }

    fn latest_snapshot(&self) -> Snapshot {
        self.core().snapshot.clone()
    }

    fn hard_state(&self) -> HardState {
        self.core().hard_state.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.core().snapshot.get_metadata().get_conf_state().clone()
    }

    fn read_fault(&self) -> Option<StorageError> {
        self.core().read_fault.clone()
    }
}
