//! Durable Raft storage: the log, the Raft metadata and the state machine's snapshot.
//!
//! [`RaftStore`] is raft-rs's [`raft::Storage`] (what Raft reads) plus the writes the node driver
//! makes (what Raft needs made durable). Two implementations share it: [`MemStorage`] for the
//! deterministic cluster tests and the simulator, and `RocksStorage` (feature `rocksdb-storage`)
//! for real masters.
//!
//! # What is durable, and when
//!
//! * One [`ReadyWrite`] per Raft `Ready` holds the snapshot received from the leader, the new log
//!   entries and the new hard state. It is written as **one atomic batch, synced**, before any
//!   message that depends on it is sent (raft-rs's persisted messages; Raft thesis §3.8).
//! * The commit index learnt afterwards (raft-rs's `LightReady`) is written before the entries it
//!   commits are applied. That write, like a `Ready` that changes only the commit index, is
//!   ordered but not synced ([`Durability::Ordered`]): Raft does not need the commit index to
//!   survive a crash, and skipping that fsync halves the synced writes per commit.
//! * The state machine lives in memory and reaches the disk only as a *snapshot*
//!   ([`RaftStore::save_snapshot`]): the encoded `ClusterState`, the index and term it reflects
//!   and the membership ([`ConfState`]) at that index, written together. That index is the
//!   store's [`applied`](RaftStore::applied) index: a restart loads the snapshot and replays the
//!   committed entries after it. We chose this over persisting an applied index after every
//!   apply because the applied index is only meaningful next to the state it describes; writing
//!   a later index without the state would make a restart skip entries.
//! * [`RaftStore::compact`] drops log entries the snapshot covers.
//!
//! # Staged writes and the writer (off the node's thread)
//!
//! A leader that fsyncs on the thread that runs Raft makes every tick, heartbeat and client
//! answer wait for the disk. raft-rs 0.7 lets the application persist a `Ready`
//! asynchronously (`advance_append_async`, then `on_persist_ready` once it is durable), on one
//! condition: raft-rs must be able to *read* what it handed over before it is durable. So a
//! write is split in two:
//!
//! 1. [`RaftStore::stage`], on the node's thread, checks the write, makes it visible to
//!    raft-rs's reads at once (caches) and returns the store's [`RaftStore::Staged`] form of
//!    it, owned, with a ticket;
//! 2. the store's [`DurableWriter`] ([`RaftStore::writer`]), typically on a thread of its
//!    own, writes staged writes in order, several per fsync when they queue up (group commit),
//!    then saves state-machine snapshots and drops compacted entries. The node is told when
//!    each job is durable ([`RaftStore::durable_through`]), and only then sends the messages
//!    that promise it (votes, append acknowledgements).
//!
//! Compaction is split the same way: [`RaftStore::forget_before`] stops serving the entries
//! (on the node's thread, so raft-rs never reads an entry the writer is deleting) and the
//! writer deletes them later. A crash loses what was staged but not yet written, exactly as a
//! crash before a synchronous write returned would. [`RaftStore::persist`],
//! [`RaftStore::save_snapshot`] and [`RaftStore::compact`] run both halves at once.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};

pub mod memory;
#[cfg(feature = "rocksdb-storage")]
pub mod rocks;

pub use memory::{MemStorage, MemWrite, MemWriter};
#[cfg(feature = "rocksdb-storage")]
pub use rocks::{RocksStorage, RocksWrite, RocksWriter};

/// How durable a [`ReadyWrite`] is when [`RaftStore::persist`] returns.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On stable storage (synced) before `persist` returns.
    #[default]
    Synced,
    /// Ordered before every later write and durable with the next synced one, but lost (with
    /// everything written after it) if the machine crashes before that. Allowed only for
    /// writes that change nothing but the commit index: raft-rs's `Ready` with
    /// `must_sync() == false` and its `LightReady::commit_index`. Raft does not need the commit
    /// index on disk (a restarted master learns it again from the leader; entries acknowledged
    /// to clients are committed on a quorum's logs, which are synced); the one thing that must
    /// not run ahead of the durable commit index, the state-machine snapshot, is saved with a
    /// synced write, which makes every earlier write durable. Saves one fsync per commit.
    Ordered,
}

/// The durable part of one Raft `Ready`, written by [`RaftStore::persist`] as one atomic batch.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadyWrite<'a> {
    /// Synced (the default), or only ordered for commit-index-only writes.
    pub durability: Durability,
    /// A snapshot received from the leader. It replaces the whole log and the stored state
    /// machine; its data is the encoded `ClusterState` and becomes the store's snapshot.
    pub snapshot: Option<&'a Snapshot>,
    /// Log entries to append; they overwrite any stored entries from the first one's index on
    /// (a new leader's log wins over uncommitted entries, Raft §5.3).
    pub entries: &'a [Entry],
    /// The new term, vote and commit index.
    pub hard_state: Option<&'a HardState>,
    /// A commit index learnt after the last hard state (raft-rs's `LightReady::commit_index`).
    pub commit: Option<u64>,
}

impl ReadyWrite<'_> {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none()
            && self.entries.is_empty()
            && self.hard_state.is_none()
            && self.commit.is_none()
    }
}

/// Why a storage operation failed.
///
/// Every variant that concerns data on disk names the store's location (its directory for
/// RocksDB), so that an operator knows which data directory to inspect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The stored data is damaged or inconsistent; the master must not serve from it.
    #[error("storage at {location} is corrupt: {detail}")]
    Corrupt {
        /// The store's location.
        location: String,
        /// What is wrong.
        detail: String,
    },
    /// The store was written by an incompatible version of Fullerene.
    #[error(
        "storage at {location} has format version {found}, this build reads version {expected}"
    )]
    FormatVersion {
        /// The store's location.
        location: String,
        /// The version found on disk.
        found: u32,
        /// The version this build writes and reads.
        expected: u32,
    },
    /// The underlying engine failed (I/O error, disk full, ...).
    #[error("storage at {location} failed: {detail}")]
    Backend {
        /// The store's location.
        location: String,
        /// The engine's error.
        detail: String,
    },
    /// [`RaftStore::bootstrap`] on a store that already holds a Raft group.
    #[error("storage at {location} is already initialised")]
    AlreadyInitialized {
        /// The store's location.
        location: String,
    },
    /// A write that would break the log's invariants: a bug in the caller, refused so that the
    /// store stays consistent.
    #[error("storage at {location} refused an invalid write: {detail}")]
    InvalidWrite {
        /// The store's location.
        location: String,
        /// What was wrong with it.
        detail: String,
    },
    /// A failure injected by a test ([`MemStorage::fail_next_persist`],
    /// [`MemStorage::fail_reads`]).
    #[error("storage at {location}: injected failure")]
    Injected {
        /// The store's location.
        location: String,
    },
}

impl StorageError {
    /// Wraps this error for raft-rs, whose [`raft::Storage`] methods return [`raft::Error`].
    pub fn into_raft(self) -> raft::Error {
        raft::Error::Store(raft::StorageError::Other(Box::new(self)))
    }
}

/// raft-rs's [`raft::Storage`] plus the durable writes of the node driver.
///
/// Implementations must make each method's effect durable before returning `Ok` (a synced
/// write) and atomic (all or nothing), so that a crash at any point leaves the store as it was
/// after the last successful call.
pub trait RaftStore: raft::Storage {
    /// A write [`RaftStore::stage`] made visible, in the form the writer makes durable.
    type Staged: Send + 'static;
    /// What makes staged writes, snapshots and compactions durable (see the module
    /// documentation).
    type Writer: DurableWriter<Staged = Self::Staged>;

    /// Where the data lives, for error messages (a directory, or `memory:<name>`).
    fn location(&self) -> String;

    /// Checks one `Ready`'s write as [`RaftStore::persist`] does and makes it visible to
    /// raft-rs's reads at once (what `advance_append_async` requires); returns its ticket and
    /// the write for [`DurableWriter::write`]. Nothing is durable until the writer has run it;
    /// an invalid write is refused whole and changes nothing.
    fn stage(&mut self, write: ReadyWrite<'_>) -> Result<(u64, Self::Staged), StorageError>;

    /// A writer on the same data, to be moved to the thread that writes.
    fn writer(&self) -> Self::Writer;

    /// Every staged write up to `ticket` is durable (the writer ran it): caches may let go of
    /// what they kept only because it was not.
    fn durable_through(&mut self, ticket: u64);

    /// Checks a snapshot of the state machine taken locally at `meta` (not behind the stored
    /// one, not beyond the commit index, its term the log's) before it is handed to the
    /// writer.
    fn check_snapshot(&self, meta: &SnapshotMetadata) -> Result<(), StorageError>;

    /// The writer saved the snapshot of `meta`: serve it from now on, and restart from it.
    fn snapshot_saved(&mut self, meta: &SnapshotMetadata);

    /// Stops serving the log entries before `to` (which must not pass the snapshot), and
    /// returns what the writer must delete, or `None` when nothing is to go.
    fn forget_before(&mut self, to: u64) -> Result<Option<Compaction>, StorageError>;

    /// Initialises an empty store as a member of a new Raft group whose initial voters are
    /// `voters`, with `initial_state` (the encoded empty `ClusterState`) as the snapshot at
    /// index 1, term 1. Every founding master must be bootstrapped identically. Masters added
    /// later start empty and receive a snapshot from the leader instead: starting the log at
    /// index 1 makes the leader's first index 2, so a newcomer can never replay the log from
    /// the beginning with a membership it never had (raft-rs's `five_mem_node` does the same).
    fn bootstrap(&mut self, voters: &[u64], initial_state: &[u8]) -> Result<(), StorageError>;

    /// Writes one `Ready`'s snapshot, entries, hard state and commit index as one atomic
    /// batch, synced unless `write.durability` says otherwise (see [`Durability`]): stage and
    /// write at once.
    fn persist(&mut self, write: ReadyWrite<'_>) -> Result<(), StorageError> {
        let (ticket, staged) = self.stage(write)?;
        self.writer().write(vec![staged])?;
        self.durable_through(ticket);
        Ok(())
    }

    /// Saves a snapshot of the state machine taken locally after applying up to
    /// `snapshot.metadata.index`; it becomes what [`raft::Storage::snapshot`] serves and the
    /// restart point, and [`applied`](Self::applied) moves to its index. The index must not be
    /// beyond the persisted commit index nor behind the current snapshot.
    fn save_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), StorageError> {
        let meta = snapshot.get_metadata();
        self.check_snapshot(meta)?;
        self.writer().save_snapshot(meta, &snapshot.data)?;
        self.snapshot_saved(meta);
        Ok(())
    }

    /// Discards the log entries before `to` (so that `to` becomes the first index). `to` must
    /// not exceed the snapshot's index + 1: entries the snapshot does not cover are never
    /// dropped. Compacting to an index at or below the first index does nothing.
    fn compact(&mut self, to: u64) -> Result<(), StorageError> {
        if let Some(compaction) = self.forget_before(to)? {
            self.writer().compact(&compaction)?;
        }
        Ok(())
    }

    /// The index the stored state-machine snapshot reflects: where a restart resumes applying.
    fn applied(&self) -> u64;

    /// The stored snapshot (metadata, membership at its index, and the encoded state machine).
    /// Its index is 0 for a store that joined a group and has not yet received a snapshot.
    fn latest_snapshot(&self) -> Snapshot;

    /// The conf state (membership) at [`applied`](Self::applied).
    fn conf_state(&self) -> ConfState {
        self.latest_snapshot()
            .get_metadata()
            .get_conf_state()
            .clone()
    }

    /// The persisted hard state.
    fn hard_state(&self) -> HardState;

    /// The first failure of a read raft-rs made through [`raft::Storage`], kept until the node
    /// stops. raft-rs cannot report a failed read to its caller (it gives up with a panic, or
    /// carries on without the entries): the node driver asks after each step, so that a read
    /// error stops the master with this error instead.
    fn read_fault(&self) -> Option<StorageError>;
}

/// Log entries a store stopped serving ([`RaftStore::forget_before`]) that the writer deletes:
/// `[first, to)`, and the term of entry `to - 1`, which becomes the log's matching point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// The first index deleted.
    pub first: u64,
    /// The new first index.
    pub to: u64,
    /// The term of entry `to - 1`.
    pub term: u64,
}

/// Makes a store's staged writes, snapshots and compactions durable, in the order it is given
/// them (see the module documentation). It holds no Raft state: the node's thread keeps that,
/// so a writer can run on a thread of its own.
pub trait DurableWriter: Send + 'static {
    /// The store's staged writes.
    type Staged: Send + 'static;

    /// Writes `staged` in order, each atomically, and returns once all are durable: one sync
    /// at the end covers every one that needs it (a group commit), and none is needed when
    /// every write was [`Durability::Ordered`] (or when the store does not sync at all).
    fn write(&mut self, staged: Vec<Self::Staged>) -> Result<(), StorageError>;

    /// Saves a state-machine snapshot (`data`, with `meta`), synced; it makes every earlier
    /// write durable too. The store checked it ([`RaftStore::check_snapshot`]) when it was
    /// taken.
    fn save_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StorageError>;

    /// Deletes the entries of `compaction` and records its matching point.
    fn compact(&mut self, compaction: &Compaction) -> Result<(), StorageError>;
}

/// Keeps the first read failure of a store for [`RaftStore::read_fault`] (reads take `&self`,
/// so the latch is shared-mutable).
#[derive(Debug, Default)]
pub struct ReadFault(std::sync::Mutex<Option<StorageError>>);

impl ReadFault {
    /// Records `error` (unless an earlier failure is already kept) and returns it for raft-rs.
    pub fn record(&self, error: StorageError) -> raft::Error {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.get_or_insert_with(|| error.clone());
        error.into_raft()
    }

    /// The failure kept, if any.
    pub fn get(&self) -> Option<StorageError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The index and term of the snapshot every founding master starts from
/// ([`RaftStore::bootstrap`]).
pub const BOOTSTRAP_INDEX: u64 = 1;
/// See [`BOOTSTRAP_INDEX`].
pub const BOOTSTRAP_TERM: u64 = 1;

/// The initial snapshot of a new group: index 1, term 1, `voters`, and the encoded empty state.
pub(crate) fn bootstrap_snapshot(voters: &[u64], initial_state: &[u8]) -> Snapshot {
    snapshot_at(BOOTSTRAP_INDEX, BOOTSTRAP_TERM, voters, initial_state)
}

/// A snapshot at (`index`, `term`) of the state `data`, whose membership is `voters` (none
/// recorded when `voters` is empty).
pub(crate) fn snapshot_at(index: u64, term: u64, voters: &[u64], data: &[u8]) -> Snapshot {
    let mut snapshot = Snapshot::default();
    let meta = snapshot.mut_metadata();
    meta.index = index;
    meta.term = term;
    if !voters.is_empty() {
        meta.mut_conf_state().voters = voters.to_vec();
    }
    snapshot.data = data.to_vec().into();
    snapshot
}

/// The hard state that goes with [`bootstrap_snapshot`]: term 1, no vote, index 1 committed.
pub(crate) fn bootstrap_hard_state() -> HardState {
    HardState {
        term: BOOTSTRAP_TERM,
        vote: 0,
        commit: BOOTSTRAP_INDEX,
        ..Default::default()
    }
}

/// Checks a locally taken snapshot at (`index`, `term`) against the stored snapshot index,
/// the persisted commit index and the log's term at `index` (`None` when the log no longer or
/// not yet holds it).
pub(crate) fn check_local_snapshot(
    index: u64,
    term: u64,
    current: u64,
    commit: u64,
    log_term: Option<u64>,
) -> Result<(), String> {
    if index < current {
        return Err(format!(
            "snapshot at index {index} is older than the stored one at {current}"
        ));
    }
    if index > commit {
        return Err(format!(
            "snapshot at index {index} is beyond the persisted commit index {commit}"
        ));
    }
    match log_term {
        Some(t) if t == term => Ok(()),
        Some(t) => Err(format!(
            "snapshot at index {index} has term {term} but the log has term {t} there"
        )),
        None => Err(format!(
            "snapshot at index {index} is outside the stored log"
        )),
    }
}

/// Whether a snapshot with this metadata may be sent to master `to`: raft-rs refuses to
/// restore a snapshot whose membership does not include the receiver, so a snapshot taken
/// before a master was added is useless to it. The stores answer `SnapshotTemporarilyUnavailable`
/// then, and the leader retries after its next snapshot, which the driver takes right after
/// applying every membership change.
pub(crate) fn snapshot_covers(meta: &raft::eraftpb::SnapshotMetadata, to: u64) -> bool {
    let cs = meta.get_conf_state();
    cs.voters.contains(&to)
        || cs.learners.contains(&to)
        || cs.voters_outgoing.contains(&to)
        || cs.learners_next.contains(&to)
}

/// What a [`ReadyWrite`] that passed [`check_write`] leaves in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckedWrite {
    /// The log's last index after the write.
    pub(crate) last: u64,
    /// The commit index after the write.
    pub(crate) commit: u64,
}

/// Checks a [`ReadyWrite`] against a store whose log spans `[first, last]` (empty when
/// `first == last + 1`), whose snapshot is at `snapshot_index` and whose hard state is `stored`,
/// before anything is written, so that an invalid batch is refused whole: an unsynced write
/// changes nothing but the commit index, a received snapshot is not older than the stored one,
/// the entries extend or overwrite the log without a gap, and the commit index does not pass
/// the log's end. Every store calls it first in [`RaftStore::persist`].
pub(crate) fn check_write(
    write: &ReadyWrite<'_>,
    stored: &HardState,
    first: u64,
    last: u64,
    snapshot_index: u64,
) -> Result<CheckedWrite, String> {
    check_ordered(write, stored)?;
    let (mut first, mut last) = (first, last);
    if let Some(snapshot) = write.snapshot {
        let index = snapshot.get_metadata().index;
        if index < snapshot_index || index == 0 {
            return Err(format!(
                "received snapshot at index {index} is older than the stored one at {snapshot_index}"
            ));
        }
        first = index + 1;
        last = index;
    }
    check_append(first, last, write.entries)?;
    if let Some(e) = write.entries.last() {
        last = e.index;
    }
    let mut commit = write.hard_state.map_or(stored.commit, |hs| hs.commit);
    if let Some(c) = write.commit {
        commit = commit.max(c);
    }
    if let Some(snapshot) = write.snapshot {
        commit = commit.max(snapshot.get_metadata().index);
    }
    if commit > last {
        return Err(format!(
            "commit index {commit} is beyond the last log index {last}"
        ));
    }
    Ok(CheckedWrite { last, commit })
}

/// Checks a compaction to `to` ([`RaftStore::compact`]) of a log whose entries span
/// `[first, last]` and whose snapshot is at `snapshot_index`: `Ok(false)` when there is
/// nothing to drop (`to` at or below the first index), `Ok(true)` when the entries from
/// `first` to `to - 1` may go, an error when `to` passes the snapshot or the log.
pub(crate) fn check_compact(
    to: u64,
    first: u64,
    last: u64,
    snapshot_index: u64,
) -> Result<bool, String> {
    if to <= first {
        return Ok(false);
    }
    if to > snapshot_index + 1 || to > last + 1 {
        return Err(format!(
            "cannot compact to {to}: the snapshot covers up to {snapshot_index}, the log up to {last}"
        ));
    }
    Ok(true)
}

/// Checks that an [`Durability::Ordered`] write changes nothing but the commit index.
fn check_ordered(write: &ReadyWrite<'_>, stored: &HardState) -> Result<(), String> {
    if write.durability == Durability::Synced {
        return Ok(());
    }
    if write.snapshot.is_some() || !write.entries.is_empty() {
        return Err("an unsynced write may not carry a snapshot or entries".to_string());
    }
    if let Some(hs) = write.hard_state {
        if hs.term != stored.term || hs.vote != stored.vote {
            return Err(format!(
                "an unsynced write may not change the term or vote ({}/{} to {}/{})",
                stored.term, stored.vote, hs.term, hs.vote
            ));
        }
    }
    Ok(())
}

/// Checks that `entries` can be appended to a log whose entries span `[first, last]` (empty
/// when `first == last + 1`), returning a description of the problem if not.
fn check_append(first: u64, last: u64, entries: &[Entry]) -> Result<(), String> {
    let Some(head) = entries.first() else {
        return Ok(());
    };
    if head.index < first {
        return Err(format!(
            "appending entries from index {} would overwrite compacted entries (first index {first})",
            head.index
        ));
    }
    if head.index > last + 1 {
        return Err(format!(
            "appending entries from index {} would leave a gap after the last index {last}",
            head.index
        ));
    }
    for pair in entries.windows(2) {
        if pair[1].index != pair[0].index + 1 || pair[1].term < pair[0].term {
            return Err(format!(
                "entries are not contiguous: index {} (term {}) follows index {} (term {})",
                pair[1].index, pair[1].term, pair[0].index, pair[0].term
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        crate::testkit::log_entry(index, term, 0)
    }

    #[test]
    fn append_checks_reject_gaps_overlaps_with_compacted_entries_and_disorder() {
        assert!(check_append(5, 9, &[entry(10, 2), entry(11, 2)]).is_ok());
        assert!(check_append(5, 9, &[entry(7, 3)]).is_ok());
        assert!(check_append(5, 9, &[]).is_ok());
        assert!(check_append(5, 9, &[entry(4, 1)])
            .unwrap_err()
            .contains("compacted"));
        assert!(check_append(5, 9, &[entry(11, 2)])
            .unwrap_err()
            .contains("gap"));
        assert!(check_append(5, 9, &[entry(8, 2), entry(10, 2)])
            .unwrap_err()
            .contains("contiguous"));
        assert!(check_append(5, 9, &[entry(8, 3), entry(9, 2)])
            .unwrap_err()
            .contains("contiguous"));
    }
}
