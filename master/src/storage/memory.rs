//! An in-memory [`RaftStore`] for deterministic tests and the simulator.
//!
//! It keeps exactly what a disk would: what its writer wrote is "durable" (it survives the
//! node that made it), and nothing else is. Two copies of the store's contents model that:
//! the *visible* one, which raft-rs reads and which every staged write changes at once
//! ([`RaftStore::stage`]), and the *disk*, which only the [`MemWriter`] changes, in the order
//! the writes were staged. A test crashes a master by dropping its
//! [`RaftNode`](crate::raft_node::RaftNode) and calling [`MemStorage::crash`], which returns the
//! disk as a fresh store for the restarted master (whatever was staged and not yet written is
//! lost) and fences off the old handle, so that a zombie of the crashed process cannot write
//! any more. [`MemStorage::fail_next_persist`] makes the next write fail as a whole, as a
//! crash in the middle of an atomic write would.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState};

use super::{
    check_compact, check_write, Compaction, Durability, DurableWriter, RaftStore, ReadyWrite,
    StorageError,
};

/// The contents of a [`MemStorage`]: its visible copy, or its disk.
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
}

/// What only the disk has: its failure switches and counters.
#[derive(Debug, Default)]
struct MemDisk {
    contents: MemCore,
    fail_next_persist: bool,
    /// Set on the old handle by [`MemStorage::crash`]: writes through it fail.
    fenced: bool,
    persist_count: u64,
}

/// What only the visible copy has: the read failures raft-rs sees.
#[derive(Debug, Default)]
struct MemVisible {
    contents: MemCore,
    /// Set by [`MemStorage::fail_reads`]: raft-rs's reads of entries and terms fail.
    fail_reads: bool,
    /// The first read that failed ([`RaftStore::read_fault`]).
    read_fault: Option<StorageError>,
    /// Staged writes so far (the tickets of [`RaftStore::stage`]).
    staged: u64,
}

/// A write staged on a [`MemStorage`], owned, for its [`MemWriter`].
#[derive(Debug, Clone)]
pub struct MemWrite {
    durability: Durability,
    snapshot: Option<Snapshot>,
    entries: Vec<Entry>,
    hard_state: Option<HardState>,
    commit: Option<u64>,
}

impl MemWrite {
    fn of(write: &ReadyWrite<'_>) -> MemWrite {
        MemWrite {
            durability: write.durability,
            snapshot: write.snapshot.cloned(),
            entries: write.entries.to_vec(),
            hard_state: write.hard_state.cloned(),
            commit: write.commit,
        }
    }

    fn as_ready_write(&self) -> ReadyWrite<'_> {
        ReadyWrite {
            durability: self.durability,
            snapshot: self.snapshot.as_ref(),
            entries: &self.entries,
            hard_state: self.hard_state.as_ref(),
            commit: self.commit,
        }
    }
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

    /// Checks `write` against these contents and applies it, or changes nothing (the visible
    /// copy and the disk apply the same writes in the same order).
    fn apply(&mut self, write: &ReadyWrite<'_>) -> Result<(), String> {
        let commit = check_write(
            write,
            &self.hard_state,
            self.first_index(),
            self.last_index(),
            self.snapshot.get_metadata().index,
        )?
        .commit;
        if let Some(snapshot) = write.snapshot {
            let meta = snapshot.get_metadata();
            self.entries.clear();
            self.truncated_index = meta.index;
            self.truncated_term = meta.term;
            self.hard_state.term = self.hard_state.term.max(meta.term);
            self.snapshot = snapshot.clone();
        }
        if let Some(head) = write.entries.first() {
            let keep = (head.index - self.first_index()) as usize;
            self.entries.truncate(keep);
            self.entries.extend_from_slice(write.entries);
        }
        if let Some(hs) = write.hard_state {
            self.hard_state = hs.clone();
        }
        self.hard_state.commit = commit;
        if write.durability == Durability::Synced {
            self.synced_commit = commit;
        }
        Ok(())
    }

    /// Drops the entries before `to` (checked by the caller), keeping the matching point.
    fn drop_before(&mut self, to: u64, term: u64) {
        let drop = to.saturating_sub(self.first_index()) as usize;
        self.entries.drain(..drop.min(self.entries.len()));
        self.truncated_index = to - 1;
        self.truncated_term = term;
    }
}

/// An in-memory Raft store. Clones share the same contents (like two handles on one disk).
#[derive(Debug, Clone)]
pub struct MemStorage {
    name: Arc<str>,
    visible: Arc<Mutex<MemVisible>>,
    disk: Arc<Mutex<MemDisk>>,
}

/// The writer of a [`MemStorage`]: it changes only the disk.
#[derive(Debug, Clone)]
pub struct MemWriter {
    name: Arc<str>,
    disk: Arc<Mutex<MemDisk>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the contents half-written: every mutation
    // is validated before it starts.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemStorage {
    /// An empty store, named `name` in error messages.
    pub fn new(name: impl Into<String>) -> MemStorage {
        MemStorage {
            name: name.into().into(),
            visible: Arc::new(Mutex::new(MemVisible::default())),
            disk: Arc::new(Mutex::new(MemDisk::default())),
        }
    }

    fn visible(&self) -> MutexGuard<'_, MemVisible> {
        lock(&self.visible)
    }

    fn disk(&self) -> MutexGuard<'_, MemDisk> {
        lock(&self.disk)
    }

    fn invalid(&self, detail: String) -> StorageError {
        StorageError::InvalidWrite {
            location: self.location(),
            detail,
        }
    }

    /// Makes the next write of the writer fail without writing anything.
    pub fn fail_next_persist(&self) {
        self.disk().fail_next_persist = true;
    }

    /// Makes every later read of log entries and terms through [`raft::Storage`] fail, as a
    /// disk that stopped answering would (until [`MemStorage::crash`] gives a fresh handle).
    pub fn fail_reads(&self) {
        self.visible().fail_reads = true;
    }

    /// Cancels failures armed by [`MemStorage::fail_next_persist`] and
    /// [`MemStorage::fail_reads`] that have not happened yet (a read that already failed stays
    /// latched in [`RaftStore::read_fault`]).
    pub fn cancel_injected_failure(&self) {
        self.disk().fail_next_persist = false;
        self.visible().fail_reads = false;
    }

    /// Simulates a crash of the process using this store: returns a new store holding what
    /// the writer wrote (staged writes it had not run are lost), for the restarted process,
    /// and makes every later write through this handle (and its clones and writers) fail.
    pub fn crash(&self) -> MemStorage {
        let mut disk = self.disk();
        let mut durable = disk.contents.clone();
        // Unsynced commit-index writes are lost with the machine.
        durable.hard_state.commit = durable.synced_commit;
        disk.fenced = true;
        MemStorage {
            name: self.name.clone(),
            visible: Arc::new(Mutex::new(MemVisible {
                contents: durable.clone(),
                ..MemVisible::default()
            })),
            disk: Arc::new(Mutex::new(MemDisk {
                contents: durable,
                persist_count: disk.persist_count,
                ..MemDisk::default()
            })),
        }
    }

    /// How many writes the writer has made (each one a write batch on a real disk), for
    /// tests of batching.
    pub fn persist_count(&self) -> u64 {
        self.disk().persist_count
    }

    /// Bytes of heap this store holds that a master on RocksDB keeps on disk only, which
    /// memory benchmarks of a master on this store leave out: the saved snapshot, and the
    /// second copy of the log's entry list (this store keeps the log twice, sharing the
    /// payloads). The log itself is not counted: RocksStorage keeps its newest entries in
    /// memory too (its tail cache, up to 16,384 entries), and a master compacts its log to
    /// fewer than that.
    pub fn disk_only_bytes(&self) -> u64 {
        let disk = self.disk();
        let snapshot = disk.contents.snapshot.data.len();
        let list = disk.contents.entries.capacity() * std::mem::size_of::<Entry>();
        (snapshot + list) as u64
    }

    /// Number of log entries currently served (after compaction).
    pub fn stored_entries(&self) -> usize {
        self.visible().contents.entries.len()
    }

    /// The failure of a read while [`MemStorage::fail_reads`] holds, kept for
    /// [`RaftStore::read_fault`].
    fn failed_read(&self, visible: &mut MemVisible) -> raft::Error {
        let error = StorageError::Injected {
            location: self.location(),
        };
        visible.read_fault.get_or_insert_with(|| error.clone());
        error.into_raft()
    }
}

impl MemWriter {
    fn location(&self) -> String {
        format!("memory:{}", self.name)
    }

    /// The disk, unless it fails this write (fenced after a crash, or a failure armed).
    fn writable(&self) -> Result<MutexGuard<'_, MemDisk>, StorageError> {
        let mut disk = lock(&self.disk);
        if disk.fenced || std::mem::take(&mut disk.fail_next_persist) {
            return Err(StorageError::Injected {
                location: self.location(),
            });
        }
        Ok(disk)
    }
}

impl DurableWriter for MemWriter {
    type Staged = MemWrite;

    fn write(&mut self, staged: Vec<MemWrite>) -> Result<(), StorageError> {
        for write in staged {
            let mut disk = self.writable()?;
            disk.contents
                .apply(&write.as_ready_write())
                .map_err(|detail| StorageError::InvalidWrite {
                    location: self.location(),
                    detail,
                })?;
            disk.persist_count += 1;
        }
        Ok(())
    }

    fn save_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StorageError> {
        let mut disk = self.writable()?;
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(meta.clone());
        snapshot.data = data.to_vec().into();
        disk.contents.snapshot = snapshot;
        // A synced write makes the earlier, ordered ones durable too.
        disk.contents.synced_commit = disk.contents.hard_state.commit;
        Ok(())
    }

    fn compact(&mut self, compaction: &Compaction) -> Result<(), StorageError> {
        let mut disk = self.writable()?;
        disk.contents.drop_before(compaction.to, compaction.term);
        disk.contents.synced_commit = disk.contents.hard_state.commit;
        Ok(())
    }
}

fn raft_err(e: raft::StorageError) -> raft::Error {
    raft::Error::Store(e)
}

impl raft::Storage for MemStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let visible = self.visible();
        let core = &visible.contents;
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
        let mut visible = self.visible();
        if visible.fail_reads {
            return Err(self.failed_read(&mut visible));
        }
        let core = &visible.contents;
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
        let mut visible = self.visible();
        if visible.fail_reads {
            return Err(self.failed_read(&mut visible));
        }
        let core = &visible.contents;
        if idx < core.truncated_index {
            return Err(raft_err(raft::StorageError::Compacted));
        }
        core.term(idx)
            .ok_or_else(|| raft_err(raft::StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.visible().contents.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.visible().contents.last_index())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let visible = self.visible();
        let snapshot = &visible.contents.snapshot;
        if snapshot.get_metadata().index < request_index
            || !super::snapshot_covers(snapshot.get_metadata(), to)
        {
            return Err(raft_err(raft::StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(snapshot.clone())
    }
}

impl RaftStore for MemStorage {
    type Staged = MemWrite;
    type Writer = MemWriter;

    fn location(&self) -> String {
        format!("memory:{}", self.name)
    }

    fn bootstrap(&mut self, voters: &[u64], initial_state: &[u8]) -> Result<(), StorageError> {
        let mut disk = self.disk();
        if disk.fenced {
            return Err(StorageError::Injected {
                location: self.location(),
            });
        }
        if disk.contents.is_initialized() || self.visible().contents.is_initialized() {
            return Err(StorageError::AlreadyInitialized {
                location: self.location(),
            });
        }
        let snapshot = super::bootstrap_snapshot(voters, initial_state);
        let core = &mut disk.contents;
        core.truncated_index = snapshot.get_metadata().index;
        core.truncated_term = snapshot.get_metadata().term;
        core.hard_state = super::bootstrap_hard_state();
        core.synced_commit = core.hard_state.commit;
        core.snapshot = snapshot;
        disk.persist_count += 1;
        self.visible().contents = disk.contents.clone();
        Ok(())
    }

    fn stage(&mut self, write: ReadyWrite<'_>) -> Result<(u64, MemWrite), StorageError> {
        let mut visible = self.visible();
        // Validated against what the write produces before anything changes, so that a
        // refused write leaves the store untouched (atomicity).
        visible
            .contents
            .apply(&write)
            .map_err(|d| self.invalid(d))?;
        visible.staged += 1;
        Ok((visible.staged, MemWrite::of(&write)))
    }

    fn writer(&self) -> MemWriter {
        MemWriter {
            name: self.name.clone(),
            disk: Arc::clone(&self.disk),
        }
    }

    fn durable_through(&mut self, _ticket: u64) {
        // The visible copy keeps everything it serves; nothing to let go of.
    }

    fn check_snapshot(&self, meta: &SnapshotMetadata) -> Result<(), StorageError> {
        let visible = self.visible();
        let core = &visible.contents;
        super::check_local_snapshot(
            meta.index,
            meta.term,
            core.snapshot.get_metadata().index,
            core.hard_state.commit,
            core.term(meta.index),
        )
        .map_err(|d| self.invalid(d))
    }

    fn snapshot_saved(&mut self, meta: &SnapshotMetadata) {
        // The visible copy serves the snapshot the disk holds (its data included).
        let data = self.disk().contents.snapshot.data.clone();
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(meta.clone());
        snapshot.data = data;
        self.visible().contents.snapshot = snapshot;
    }

    fn forget_before(&mut self, to: u64) -> Result<Option<Compaction>, StorageError> {
        let mut visible = self.visible();
        let core = &mut visible.contents;
        let first = core.first_index();
        let snapshot_index = core.snapshot.get_metadata().index;
        if !check_compact(to, first, core.last_index(), snapshot_index)
            .map_err(|d| self.invalid(d))?
        {
            return Ok(None);
        }
        let term = core
            .term(to - 1)
            .ok_or_else(|| self.invalid(format!("no term for index {}", to - 1)))?;
        core.drop_before(to, term);
        Ok(Some(Compaction { first, to, term }))
    }

    fn applied(&self) -> u64 {
        self.visible().contents.snapshot.get_metadata().index
    }

    fn latest_snapshot(&self) -> Snapshot {
        self.visible().contents.snapshot.clone()
    }

    fn hard_state(&self) -> HardState {
        self.visible().contents.hard_state.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.visible()
            .contents
            .snapshot
            .get_metadata()
            .get_conf_state()
            .clone()
    }

    fn read_fault(&self) -> Option<StorageError> {
        self.visible().read_fault.clone()
    }
}
