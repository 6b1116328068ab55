//! The [`RaftStore`] of real masters, on RocksDB (feature `rocksdb-storage`).
//!
//! # Layout
//!
//! Three column families:
//!
//! * `log`: one key per entry, the index as 8 big-endian bytes (so keys sort by index and a
//!   range of entries is a range of keys); the value is the entry's term (8 big-endian bytes,
//!   so that `term()` need not decode the entry) followed by the protobuf-encoded entry.
//! * `meta`: `format_version` (u32 BE), `hard_state`, `conf_state` and `snapshot_meta`
//!   (protobuf), `applied` (u64 BE, the snapshot's index) and `truncated` (index and term of
//!   the last compacted entry, u64 BE each).
//! * `state`: `snapshot`, the encoded `ClusterState` at the snapshot's index.
//!
//! Every write is one `WriteBatch` written with `sync` on, except the commit-index-only writes
//! the driver marks [`Durability::Ordered`], which go to the write-ahead log without an fsync
//! (RocksDB keeps the log's order, so the next synced write makes them durable too).
//!
//! # Refusing damaged data
//!
//! A master that serves from a damaged log can vote twice or forget committed commands, so
//! [`RocksStorage::open`] checks everything it can before Raft starts: RocksDB's own checks
//! (paranoid checks, SST file sizes checked against the manifest at open, WAL sizes tracked in
//! the manifest, block checksums on every read) and then the store's invariants, reading every key: the
//! format version; every metadata record decodes; the log is contiguous from the compaction
//! point, each key matches its entry's index and term, terms never decrease; the snapshot is
//! not behind the compaction point and its state is present; the commit index lies between the
//! snapshot and the last entry. Any failure is a [`StorageError`] naming the directory.
//!
//! The WAL is recovered with `TolerateCorruptedTailRecords`: a torn record at the very end can
//! only come from a write that never completed (every write is synced before it is
//! acknowledged), so dropping it loses nothing anyone was told; damage anywhere else fails.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState};
use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DBRecoveryMode, Direction, IteratorMode, Options,
    WriteBatch, WriteOptions, DB,
};

use super::{
    check_compact, check_write, Compaction, Durability, DurableWriter, RaftStore, ReadFault,
    ReadyWrite, StorageError,
};

/// Version of the on-disk layout. Bumped whenever it changes.
pub const STORAGE_FORMAT_VERSION: u32 = 1;

const CF_LOG: &str = "log";
const CF_META: &str = "meta";
const CF_STATE: &str = "state";

const KEY_FORMAT: &[u8] = b"format_version";
const KEY_HARD_STATE: &[u8] = b"hard_state";
const KEY_CONF_STATE: &[u8] = b"conf_state";
const KEY_SNAPSHOT_META: &[u8] = b"snapshot_meta";
const KEY_APPLIED: &[u8] = b"applied";
const KEY_TRUNCATED: &[u8] = b"truncated";
const KEY_STATE: &[u8] = b"snapshot";

fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn u64_from(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// A Raft store in a RocksDB directory.
pub struct RocksStorage {
    db: Arc<DB>,
    path: PathBuf,
    /// Whether writes that must be durable are synced (off only with
    /// [`RocksStorage::set_unsafe_no_fsync`]).
    sync: bool,
    // Caches of what is on disk, so that raft-rs's frequent reads of indexes need no I/O.
    hard_state: HardState,
    snapshot_meta: SnapshotMetadata,
    truncated_index: u64,
    truncated_term: u64,
    last_index: u64,
    /// The newest entries, contiguous up to `last_index`: what the leader sends followers and
    /// what raft-rs asks terms of, served without a RocksDB read (and without walking the
    /// range tombstones compaction leaves behind). It also holds every staged entry the
    /// writer has not written yet: raft-rs reads those from here.
    tail: TailCache,
    /// Staged writes not yet durable: their ticket and the first entry index they carry (the
    /// tail cache keeps every entry from the oldest of them on).
    staged: VecDeque<(u64, Option<u64>)>,
    /// Tickets handed out by `stage`.
    tickets: u64,
    /// The first read raft-rs made that failed ([`RaftStore::read_fault`]).
    read_fault: ReadFault,
}

/// The writer of a [`RocksStorage`]: the same database, written from another thread.
pub struct RocksWriter {
    db: Arc<DB>,
    path: PathBuf,
    sync: bool,
}

/// A write staged on a [`RocksStorage`]: its RocksDB batch, and whether it must be synced.
pub struct RocksWrite {
    batch: WriteBatch,
    durability: Durability,
}

impl std::fmt::Debug for RocksWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksWrite")
            .field("bytes", &self.batch.size_in_bytes())
            .field("durability", &self.durability)
            .finish()
    }
}

/// Recent log entries, contiguous, ending at the last index.
#[derive(Debug, Default)]
struct TailCache {
    entries: std::collections::VecDeque<Entry>,
    bytes: usize,
}

/// Most entries and bytes the tail cache holds.
const TAIL_MAX_ENTRIES: usize = 16_384;
const TAIL_MAX_BYTES: usize = 32 << 20;

impl TailCache {
    fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.index)
    }

    fn get(&self, index: u64) -> Option<&Entry> {
        let first = self.first()?;
        let offset = usize::try_from(index.checked_sub(first)?).ok()?;
        self.entries.get(offset)
    }

    /// Appends `new` (contiguous), dropping any cached suffix it overwrites; a gap clears the
    /// cache first.
    fn append(&mut self, new: &[Entry]) {
        let Some(head) = new.first() else { return };
        while self.entries.back().is_some_and(|e| e.index >= head.index) {
            if let Some(e) = self.entries.pop_back() {
                self.bytes -= e.compute_size() as usize;
            }
        }
        if self
            .entries
            .back()
            .is_some_and(|e| e.index + 1 != head.index)
        {
            self.clear();
        }
        for entry in new {
            self.bytes += entry.compute_size() as usize;
            self.entries.push_back(entry.clone());
        }
    }

    /// Drops the oldest entries past the size bounds, but never one at or after `keep_from`
    /// (entries not yet durable, which only the cache can serve).
    fn trim(&mut self, keep_from: Option<u64>) {
        while self.entries.len() > TAIL_MAX_ENTRIES || self.bytes > TAIL_MAX_BYTES {
            let durable = self
                .entries
                .front()
                .is_some_and(|e| keep_from.is_none_or(|keep| e.index < keep));
            if !durable {
                break;
            }
            match self.entries.pop_front() {
                Some(e) => self.bytes -= e.compute_size() as usize,
                None => break,
            }
        }
    }

    /// Forgets entries below `to`.
    fn compact(&mut self, to: u64) {
        while self.entries.front().is_some_and(|e| e.index < to) {
            if let Some(e) = self.entries.pop_front() {
                self.bytes -= e.compute_size() as usize;
            }
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

impl std::fmt::Debug for RocksStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStorage")
            .field("path", &self.path)
            .field("first_index", &(self.truncated_index + 1))
            .field("last_index", &self.last_index)
            .field("applied", &self.snapshot_meta.index)
            .finish_non_exhaustive()
    }
}

fn db_options() -> Options {
    let mut options = Options::default();
    options.set_paranoid_checks(true);
    options.set_track_and_verify_wals_in_manifest(true);
    options.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
    // Keeps the three families' flushed files consistent with each other.
    options.set_atomic_flush(true);
    options.set_keep_log_file_num(5);
    options.set_max_total_wal_size(256 << 20);
    options
}

fn column_families() -> Vec<ColumnFamilyDescriptor> {
    [CF_LOG, CF_META, CF_STATE]
        .into_iter()
        .map(|name| ColumnFamilyDescriptor::new(name, Options::default()))
        .collect()
}

/// True when `path` does not exist or is an empty directory: a new store may be created there.
fn is_fresh(path: &Path) -> Result<bool, std::io::Error> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e),
    }
}

impl RocksStorage {
    /// Opens the store in `path`, creating an empty one if `path` does not exist or is an
    /// empty directory. An existing store is checked thoroughly (see the module
    /// documentation); a damaged, truncated or foreign directory is refused with an error that
    /// names it and says what is wrong.
    pub fn open(path: impl AsRef<Path>) -> Result<RocksStorage, StorageError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        let fresh = is_fresh(&path).map_err(|e| StorageError::Backend {
            location: location.clone(),
            detail: format!("cannot read the directory: {e}"),
        })?;
        let mut options = db_options();
        options.create_if_missing(fresh);
        options.create_missing_column_families(fresh);
        let db = DB::open_cf_descriptors(&options, &path, column_families()).map_err(|e| {
            StorageError::Corrupt {
                location: location.clone(),
                detail: format!(
                    "RocksDB cannot open it (damaged, or not a master's data directory): {e}"
                ),
            }
        })?;
        let mut store = RocksStorage {
            db: Arc::new(db),
            path,
            sync: true,
            hard_state: HardState::default(),
            snapshot_meta: SnapshotMetadata::default(),
            truncated_index: 0,
            truncated_term: 0,
            last_index: 0,
            tail: TailCache::default(),
            staged: VecDeque::new(),
            tickets: 0,
            read_fault: ReadFault::default(),
        };
        if fresh {
            let mut batch = WriteBatch::default();
            batch.put_cf(
                store.cf(CF_META)?,
                KEY_FORMAT,
                STORAGE_FORMAT_VERSION.to_be_bytes(),
            );
            store.write(batch)?;
        } else {
            store.load_and_check()?;
        }
        Ok(store)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes RocksDB's memtables of every column family to table files (e.g. before copying
    /// the directory); everything is durable without it, in the write-ahead log.
    pub fn flush(&self) -> Result<(), StorageError> {
        let cfs = [self.cf(CF_LOG)?, self.cf(CF_META)?, self.cf(CF_STATE)?];
        self.db
            .flush_cfs_opt(&cfs, &rocksdb::FlushOptions::default())
            .map_err(|e| self.backend(e))
    }

    /// Turns off every fsync (etcd's `--unsafe-no-fsync`): writes reach the operating
    /// system in order but are not synced, so a machine crash (not a process crash) can lose
    /// acknowledged commands and let a master vote twice in a term. For benchmarks that
    /// compare with other systems run the same way; never for data anyone needs.
    pub fn set_unsafe_no_fsync(&mut self, no_fsync: bool) {
        self.sync = !no_fsync;
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily, StorageError> {
        column_family(&self.db, &self.path, name)
    }

    fn backend(&self, e: rocksdb::Error) -> StorageError {
        backend_error(&self.path, e)
    }

    fn corrupt(&self, detail: String) -> StorageError {
        StorageError::Corrupt {
            location: self.location(),
            detail,
        }
    }

    fn invalid(&self, detail: String) -> StorageError {
        StorageError::InvalidWrite {
            location: self.location(),
            detail,
        }
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        write_batch(&self.db, &self.path, batch, self.sync)
    }

    fn get_meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.db
            .get_cf(self.cf(CF_META)?, key)
            .map_err(|e| self.backend(e))
    }

    fn decode_meta<M: protobuf::Message>(&self, key: &[u8]) -> Result<Option<M>, StorageError> {
        match self.get_meta(key)? {
            None => Ok(None),
            Some(bytes) => M::parse_from_bytes(&bytes).map(Some).map_err(|e| {
                self.corrupt(format!(
                    "metadata `{}` does not decode: {e}",
                    String::from_utf8_lossy(key)
                ))
            }),
        }
    }

    /// Loads the caches and checks the invariants of an existing store.
    fn load_and_check(&mut self) -> Result<(), StorageError> {
        let format = self.get_meta(KEY_FORMAT)?.ok_or_else(|| {
            self.corrupt(
                "no format version: not a Fullerene master directory, or its metadata is lost"
                    .to_string(),
            )
        })?;
        let found = u32::from_be_bytes(
            format
                .as_slice()
                .try_into()
                .map_err(|_| self.corrupt("the format version is not 4 bytes".to_string()))?,
        );
        if found != STORAGE_FORMAT_VERSION {
            return Err(StorageError::FormatVersion {
                location: self.location(),
                found,
                expected: STORAGE_FORMAT_VERSION,
            });
        }

        self.hard_state = self.decode_meta(KEY_HARD_STATE)?.unwrap_or_default();
        self.snapshot_meta = self.decode_meta(KEY_SNAPSHOT_META)?.unwrap_or_default();
        let conf_state: ConfState = self.decode_meta(KEY_CONF_STATE)?.unwrap_or_default();
        if &conf_state != self.snapshot_meta.get_conf_state() {
            return Err(
                self.corrupt("the stored membership differs from the snapshot's".to_string())
            );
        }
        let applied = match self.get_meta(KEY_APPLIED)? {
            None => 0,
            Some(b) => u64_from(&b)
                .ok_or_else(|| self.corrupt("the applied index is not 8 bytes".to_string()))?,
        };
        if applied != self.snapshot_meta.index {
            return Err(self.corrupt(format!(
                "the applied index {applied} differs from the snapshot index {}",
                self.snapshot_meta.index
            )));
        }
        if let Some(b) = self.get_meta(KEY_TRUNCATED)? {
            if b.len() != 16 {
                return Err(self.corrupt("the compaction point is not 16 bytes".to_string()));
            }
            self.truncated_index = u64_from(&b[..8]).unwrap_or_default();
            self.truncated_term = u64_from(&b[8..]).unwrap_or_default();
        }

        // Every entry, in order: contiguous, keys matching contents, terms non-decreasing.
        let mut expected = self.truncated_index + 1;
        let mut previous_term = self.truncated_term;
        for item in self.db.iterator_cf(self.cf(CF_LOG)?, IteratorMode::Start) {
            let (key, value) = item.map_err(|e| self.backend(e))?;
            let index = u64_from(&key)
                .ok_or_else(|| self.corrupt(format!("log key {key:?} is not 8 bytes")))?;
            if index != expected {
                return Err(self.corrupt(format!(
                    "the log has index {index} where {expected} was expected (entries missing)"
                )));
            }
            let entry = decode_log_value(&value)
                .map_err(|detail| self.corrupt(format!("log entry {index}: {detail}")))?;
            if entry.index != index {
                return Err(self.corrupt(format!("log key {index} holds entry {}", entry.index)));
            }
            if entry.term < previous_term {
                return Err(self.corrupt(format!(
                    "log entry {index} has term {} after term {previous_term}",
                    entry.term
                )));
            }
            previous_term = entry.term;
            expected += 1;
        }
        self.last_index = expected - 1;

        let snapshot_index = self.snapshot_meta.index;
        let commit = self.hard_state.commit;
        if snapshot_index < self.truncated_index {
            return Err(self.corrupt(format!(
                "the log is compacted to {} but the snapshot is only at {snapshot_index}",
                self.truncated_index
            )));
        }
        if commit > self.last_index {
            return Err(self.corrupt(format!(
                "the commit index {commit} is beyond the last log entry {} (log truncated?)",
                self.last_index
            )));
        }
        if snapshot_index > commit {
            return Err(self.corrupt(format!(
                "the snapshot index {snapshot_index} is beyond the commit index {commit}"
            )));
        }
        if self.hard_state.term < previous_term {
            return Err(self.corrupt(format!(
                "the current term {} is behind the log's last term {previous_term}",
                self.hard_state.term
            )));
        }
        if snapshot_index > 0 {
            let state = self
                .db
                .get_pinned_cf(self.cf(CF_STATE)?, KEY_STATE)
                .map_err(|e| self.backend(e))?;
            match state {
                Some(data) if !data.is_empty() => {}
                _ => {
                    return Err(self.corrupt(format!(
                        "the state snapshot at index {snapshot_index} is missing"
                    )))
                }
            }
            if snapshot_index > self.truncated_index
                && self.term_of(snapshot_index)? != Some(self.snapshot_meta.term)
            {
                return Err(self.corrupt(format!(
                    "the snapshot's term {} disagrees with the log at index {snapshot_index}",
                    self.snapshot_meta.term
                )));
            }
        }
        Ok(())
    }

    fn term_of(&self, index: u64) -> Result<Option<u64>, StorageError> {
        if index == self.truncated_index {
            return Ok(Some(self.truncated_term));
        }
        if index < self.truncated_index || index > self.last_index {
            return Ok(None);
        }
        if let Some(entry) = self.tail.get(index) {
            return Ok(Some(entry.term));
        }
        let value = self
            .db
            .get_pinned_cf(self.cf(CF_LOG)?, log_key(index))
            .map_err(|e| self.backend(e))?
            .ok_or_else(|| self.corrupt(format!("log entry {index} is missing")))?;
        if value.len() < 8 {
            return Err(self.corrupt(format!("log entry {index} is too short")));
        }
        Ok(u64_from(&value[..8]))
    }

    /// The stored snapshot, its metadata and its data read at one point in time from the
    /// database: the writer may be saving a newer one meanwhile, and a snapshot whose data is
    /// not the state at its metadata's index would make its receiver apply entries twice.
    fn snapshot_with_data(&self) -> Result<Snapshot, StorageError> {
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(self.snapshot_meta.clone());
        if self.snapshot_meta.index == 0 {
            return Ok(snapshot);
        }
        let view = self.db.snapshot();
        let meta = view
            .get_cf(self.cf(CF_META)?, KEY_SNAPSHOT_META)
            .map_err(|e| self.backend(e))?
            .ok_or_else(|| self.corrupt("the snapshot metadata is missing".to_string()))?;
        let meta = SnapshotMetadata::parse_from_bytes(&meta)
            .map_err(|e| self.corrupt(format!("the snapshot metadata does not decode: {e}")))?;
        let data = view
            .get_cf(self.cf(CF_STATE)?, KEY_STATE)
            .map_err(|e| self.backend(e))?
            .ok_or_else(|| self.corrupt("the state snapshot is missing".to_string()))?;
        snapshot.set_metadata(meta);
        snapshot.data = data.into();
        Ok(snapshot)
    }

    fn put_snapshot(
        &self,
        batch: &mut WriteBatch,
        meta: &SnapshotMetadata,
        data: &[u8],
    ) -> Result<(), StorageError> {
        put_snapshot(&self.db, &self.path, batch, meta, data)
    }

    fn put_truncated(
        &self,
        batch: &mut WriteBatch,
        index: u64,
        term: u64,
    ) -> Result<(), StorageError> {
        put_truncated(&self.db, &self.path, batch, index, term)
    }

    /// The first entry index the tail cache must keep: that of the oldest staged write the
    /// writer has not written yet.
    fn keep_from(&self) -> Option<u64> {
        self.staged.iter().filter_map(|(_, first)| *first).min()
    }
}

fn column_family<'a>(
    db: &'a DB,
    path: &Path,
    name: &str,
) -> Result<&'a ColumnFamily, StorageError> {
    db.cf_handle(name).ok_or_else(|| StorageError::Corrupt {
        location: path.display().to_string(),
        detail: format!("column family `{name}` is missing"),
    })
}

fn backend_error(path: &Path, e: rocksdb::Error) -> StorageError {
    let location = path.display().to_string();
    if e.kind() == rocksdb::ErrorKind::Corruption {
        StorageError::Corrupt {
            location,
            detail: format!("RocksDB reports corruption: {e}"),
        }
    } else {
        StorageError::Backend {
            location,
            detail: e.to_string(),
        }
    }
}

fn write_batch(db: &DB, path: &Path, batch: WriteBatch, sync: bool) -> Result<(), StorageError> {
    let mut options = WriteOptions::default();
    options.set_sync(sync);
    db.write_opt(batch, &options)
        .map_err(|e| backend_error(path, e))
}

fn put_snapshot(
    db: &DB,
    path: &Path,
    batch: &mut WriteBatch,
    meta: &SnapshotMetadata,
    data: &[u8],
) -> Result<(), StorageError> {
    let invalid = |detail: String| StorageError::InvalidWrite {
        location: path.display().to_string(),
        detail,
    };
    let meta_bytes = meta.write_to_bytes().map_err(|e| invalid(e.to_string()))?;
    let conf_bytes = meta
        .get_conf_state()
        .write_to_bytes()
        .map_err(|e| invalid(e.to_string()))?;
    let cf_meta = column_family(db, path, CF_META)?;
    batch.put_cf(cf_meta, KEY_SNAPSHOT_META, meta_bytes);
    batch.put_cf(cf_meta, KEY_CONF_STATE, conf_bytes);
    batch.put_cf(cf_meta, KEY_APPLIED, meta.index.to_be_bytes());
    batch.put_cf(column_family(db, path, CF_STATE)?, KEY_STATE, data);
    Ok(())
}

fn put_truncated(
    db: &DB,
    path: &Path,
    batch: &mut WriteBatch,
    index: u64,
    term: u64,
) -> Result<(), StorageError> {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&index.to_be_bytes());
    value[8..].copy_from_slice(&term.to_be_bytes());
    batch.put_cf(column_family(db, path, CF_META)?, KEY_TRUNCATED, value);
    Ok(())
}

impl DurableWriter for RocksWriter {
    type Staged = RocksWrite;

    fn write(&mut self, staged: Vec<RocksWrite>) -> Result<(), StorageError> {
        // One sync at the end makes every write before it durable (RocksDB keeps the order of
        // its write-ahead log): a group commit when several `Ready`s queued up.
        let needs_sync = self.sync && staged.iter().any(|w| w.durability == Durability::Synced);
        let count = staged.len();
        for (i, write) in staged.into_iter().enumerate() {
            let last = i + 1 == count;
            write_batch(&self.db, &self.path, write.batch, needs_sync && last)?;
        }
        Ok(())
    }

    fn save_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        put_snapshot(&self.db, &self.path, &mut batch, meta, data)?;
        write_batch(&self.db, &self.path, batch, self.sync)
    }

    fn compact(&mut self, compaction: &Compaction) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            column_family(&self.db, &self.path, CF_LOG)?,
            log_key(compaction.first),
            log_key(compaction.to),
        );
        put_truncated(
            &self.db,
            &self.path,
            &mut batch,
            compaction.to - 1,
            compaction.term,
        )?;
        // Lost in a crash, the entries are simply still there: no sync needed.
        write_batch(&self.db, &self.path, batch, false)
    }
}

fn decode_log_value(value: &[u8]) -> Result<Entry, String> {
    if value.len() < 8 {
        return Err(format!("value of {} bytes is too short", value.len()));
    }
    let term = u64_from(&value[..8]).unwrap_or_default();
    let entry =
        Entry::parse_from_bytes(&value[8..]).map_err(|e| format!("does not decode: {e}"))?;
    if entry.term != term {
        return Err(format!(
            "stored term {term} differs from the entry's term {}",
            entry.term
        ));
    }
    Ok(entry)
}

fn encode_log_value(entry: &Entry) -> Result<Vec<u8>, String> {
    let mut value = Vec::with_capacity(8 + entry.compute_size() as usize);
    value.extend_from_slice(&entry.term.to_be_bytes());
    entry.write_to_vec(&mut value).map_err(|e| e.to_string())?;
    Ok(value)
}

impl raft::Storage for RocksStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.snapshot_meta.get_conf_state().clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.truncated_index {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last_index + 1 || low > high {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let max_size = max_size.into();
        if self.tail.first().is_some_and(|first| first <= low) && high <= self.last_index + 1 {
            let mut entries: Vec<Entry> = (low..high)
                .map_while(|index| self.tail.get(index).cloned())
                .collect();
            if entries.len() as u64 == high - low {
                raft::util::limit_size(&mut entries, max_size);
                return Ok(entries);
            }
        }
        // Entries from the tail cache's first on are read from the cache: the newest of them
        // may be staged and not yet written.
        let disk_high = self.tail.first().map_or(high, |first| high.min(first));
        let cf = self.cf(CF_LOG).map_err(|e| self.read_fault.record(e))?;
        let mut entries = Vec::with_capacity((high - low).min(1024) as usize);
        let mut size = 0u64;
        let mut stopped_by_size = false;
        let iter = self
            .db
            .iterator_cf(cf, IteratorMode::From(&log_key(low), Direction::Forward));
        for item in iter {
            let (key, value) = item.map_err(|e| self.read_fault.record(self.backend(e)))?;
            let index = u64_from(&key).unwrap_or(u64::MAX);
            if index >= disk_high {
                break;
            }
            let entry = decode_log_value(&value).map_err(|d| {
                self.read_fault
                    .record(self.corrupt(format!("log entry {index}: {d}")))
            })?;
            size += value.len() as u64;
            entries.push(entry);
            // Stop reading once the limit is certainly passed; `limit_size` trims exactly.
            if max_size.is_some_and(|max| size > max) {
                stopped_by_size = true;
                break;
            }
        }
        if !stopped_by_size {
            entries.extend((disk_high..high).map_while(|index| self.tail.get(index).cloned()));
        }
        let contiguous = entries
            .iter()
            .enumerate()
            .all(|(i, e)| e.index == low + i as u64);
        let complete = stopped_by_size || entries.len() as u64 == high - low;
        if !contiguous || !complete {
            return Err(self
                .read_fault
                .record(self.corrupt(format!("log entries in [{low}, {high}) are missing"))));
        }
        raft::util::limit_size(&mut entries, max_size);
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.truncated_index {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        match self.term_of(idx).map_err(|e| self.read_fault.record(e))? {
            Some(term) => Ok(term),
            None => Err(raft::Error::Store(raft::StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.truncated_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index)
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_meta.index < request_index
            || !super::snapshot_covers(&self.snapshot_meta, to)
        {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        self.snapshot_with_data()
            .map_err(|e| self.read_fault.record(e))
    }
}

impl RaftStore for RocksStorage {
    type Staged = RocksWrite;
    type Writer = RocksWriter;

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn bootstrap(&mut self, voters: &[u64], initial_state: &[u8]) -> Result<(), StorageError> {
        if self.snapshot_meta.index > 0
            || self.hard_state != HardState::default()
            || self.last_index > 0
        {
            return Err(StorageError::AlreadyInitialized {
                location: self.location(),
            });
        }
        let snapshot = super::bootstrap_snapshot(voters, initial_state);
        let hard_state = super::bootstrap_hard_state();
        let meta = snapshot.get_metadata();
        let mut batch = WriteBatch::default();
        self.put_snapshot(&mut batch, meta, initial_state)?;
        self.put_truncated(&mut batch, meta.index, meta.term)?;
        let hs_bytes = hard_state
            .write_to_bytes()
            .map_err(|e| self.invalid(e.to_string()))?;
        batch.put_cf(self.cf(CF_META)?, KEY_HARD_STATE, hs_bytes);
        self.write(batch)?;
        self.truncated_index = meta.index;
        self.truncated_term = meta.term;
        self.last_index = meta.index;
        self.snapshot_meta = meta.clone();
        self.hard_state = hard_state;
        Ok(())
    }

    fn stage(&mut self, write: ReadyWrite<'_>) -> Result<(u64, RocksWrite), StorageError> {
        // Validate against the state the batch produces (as MemStorage does) so that an
        // invalid batch is refused whole.
        let checked = check_write(
            &write,
            &self.hard_state,
            self.truncated_index + 1,
            self.last_index,
            self.snapshot_meta.index,
        )
        .map_err(|d| self.invalid(d))?;
        let new_last = checked.last;
        let mut hard_state = write
            .hard_state
            .cloned()
            .unwrap_or_else(|| self.hard_state.clone());
        hard_state.commit = checked.commit;
        if let Some(snapshot) = write.snapshot {
            hard_state.term = hard_state.term.max(snapshot.get_metadata().term);
        }

        let mut batch = WriteBatch::default();
        let cf_log = self.cf(CF_LOG)?;
        if let Some(snapshot) = write.snapshot {
            let meta = snapshot.get_metadata();
            if self.last_index > self.truncated_index {
                batch.delete_range_cf(
                    cf_log,
                    log_key(self.truncated_index + 1),
                    log_key(self.last_index + 1),
                );
            }
            self.put_snapshot(&mut batch, meta, &snapshot.data)?;
            self.put_truncated(&mut batch, meta.index, meta.term)?;
        }
        if let Some(head) = write.entries.first() {
            // The stored entries the new ones overwrite (none after a received snapshot,
            // which replaces the whole log).
            let last = write
                .snapshot
                .map_or(self.last_index, |s| s.get_metadata().index);
            if head.index <= last {
                batch.delete_range_cf(cf_log, log_key(head.index), log_key(last + 1));
            }
            for entry in write.entries {
                let value = encode_log_value(entry).map_err(|d| self.invalid(d))?;
                batch.put_cf(cf_log, log_key(entry.index), value);
            }
        }
        if hard_state != self.hard_state {
            let bytes = hard_state
                .write_to_bytes()
                .map_err(|e| self.invalid(e.to_string()))?;
            batch.put_cf(self.cf(CF_META)?, KEY_HARD_STATE, bytes);
        }

        if let Some(snapshot) = write.snapshot {
            let meta = snapshot.get_metadata();
            self.snapshot_meta = meta.clone();
            self.truncated_index = meta.index;
            self.truncated_term = meta.term;
            self.tail.clear();
        }
        self.tail.append(write.entries);
        self.last_index = new_last;
        self.hard_state = hard_state;
        self.tickets += 1;
        let first_entry = write.entries.first().map(|e| e.index);
        self.staged.push_back((self.tickets, first_entry));
        Ok((
            self.tickets,
            RocksWrite {
                batch,
                durability: write.durability,
            },
        ))
    }

    fn writer(&self) -> RocksWriter {
        RocksWriter {
            db: Arc::clone(&self.db),
            path: self.path.clone(),
            sync: self.sync,
        }
    }

    fn durable_through(&mut self, ticket: u64) {
        while self.staged.front().is_some_and(|(t, _)| *t <= ticket) {
            self.staged.pop_front();
        }
        let keep_from = self.keep_from();
        self.tail.trim(keep_from);
    }

    fn check_snapshot(&self, meta: &SnapshotMetadata) -> Result<(), StorageError> {
        let log_term = self.term_of(meta.index)?;
        super::check_local_snapshot(
            meta.index,
            meta.term,
            self.snapshot_meta.index,
            self.hard_state.commit,
            log_term,
        )
        .map_err(|d| self.invalid(d))
    }

    fn snapshot_saved(&mut self, meta: &SnapshotMetadata) {
        self.snapshot_meta = meta.clone();
    }

    fn forget_before(&mut self, to: u64) -> Result<Option<Compaction>, StorageError> {
        let first = self.truncated_index + 1;
        if !check_compact(to, first, self.last_index, self.snapshot_meta.index)
            .map_err(|d| self.invalid(d))?
        {
            return Ok(None);
        }
        let term = self
            .term_of(to - 1)?
            .ok_or_else(|| self.invalid(format!("no term for index {}", to - 1)))?;
        self.truncated_index = to - 1;
        self.truncated_term = term;
        self.tail.compact(to);
        Ok(Some(Compaction { first, to, term }))
    }

    fn applied(&self) -> u64 {
        self.snapshot_meta.index
    }

    fn read_fault(&self) -> Option<StorageError> {
        self.read_fault.get()
    }

    fn latest_snapshot(&self) -> Snapshot {
        match self.snapshot_with_data() {
            Ok(snapshot) => snapshot,
            Err(e) => {
                // Only reachable if the disk fails after `open` checked the snapshot; the
                // metadata alone makes `RaftNode::open` report the decode failure.
                tracing::error!(location = %self.location(), error = %e, "cannot read the state snapshot");
                let mut snapshot = Snapshot::default();
                snapshot.set_metadata(self.snapshot_meta.clone());
                snapshot
            }
        }
    }

    fn hard_state(&self) -> HardState {
        self.hard_state.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.snapshot_meta.get_conf_state().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, OpenOptions};
    use std::io::{Seek, SeekFrom, Write};

    use raft::Storage;

    use super::*;
    use crate::raft_node::{NodeConfig, RaftNode, Token};
    use crate::state::{ClusterSettings, Command};
    use crate::testkit::{log_entry, snapshot};

    /// A store with a bootstrap snapshot, 300 entries of 1 KiB (commit 250), a snapshot at
    /// 200 and the log compacted to 150; flushed so that the data is in table files.
    fn populated(dir: &Path) -> RocksStorage {
        let mut store = RocksStorage::open(dir).unwrap();
        store.bootstrap(&[1, 2, 3], b"initial state").unwrap();
        for chunk in (2..=301).collect::<Vec<u64>>().chunks(50) {
            let ents: Vec<Entry> = chunk
                .iter()
                .map(|&i| log_entry(i, 2 + i / 100, 1024))
                .collect();
            let hs = HardState {
                term: 5,
                vote: 2,
                commit: (*chunk.last().unwrap()).min(250),
                ..Default::default()
            };
            store
                .persist(ReadyWrite {
                    entries: &ents,
                    hard_state: Some(&hs),
                    ..Default::default()
                })
                .unwrap();
        }
        let snap = snapshot(200, store.term(200).unwrap(), &[1, 2, 3], b"state at 200");
        store.save_snapshot(&snap).unwrap();
        store.compact(150).unwrap();
        store.flush().unwrap();
        store
    }

    fn files_with(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(suffix))
            .collect();
        files.sort_by_key(|p| std::cmp::Reverse(fs::metadata(p).unwrap().len()));
        files
    }

    fn assert_refused(dir: &Path, what: &str) -> StorageError {
        let err = RocksStorage::open(dir).expect_err(what);
        let message = err.to_string();
        assert!(
            message.contains(&dir.display().to_string()),
            "{what}: the error must name the directory: {message}"
        );
        err
    }

    #[test]
    fn the_tail_cache_stays_contiguous_through_overwrites_gaps_and_compaction() {
        let mut tail = TailCache::default();
        tail.append(&[
            log_entry(1, 1, 10),
            log_entry(2, 1, 10),
            log_entry(3, 1, 10),
        ]);
        assert_eq!(tail.first(), Some(1));
        assert_eq!(tail.get(3).map(|e| e.term), Some(1));
        // A new leader's entries overwrite the suffix from index 2.
        tail.append(&[
            log_entry(2, 2, 10),
            log_entry(3, 2, 10),
            log_entry(4, 2, 10),
        ]);
        assert_eq!(tail.get(2).map(|e| e.term), Some(2));
        assert_eq!(tail.get(4).map(|e| e.term), Some(2));
        assert_eq!(tail.get(1).map(|e| e.term), Some(1));
        tail.compact(3);
        assert_eq!(tail.first(), Some(3));
        assert!(tail.get(2).is_none());
        // A gap (entries after a snapshot) restarts the cache.
        tail.append(&[log_entry(10, 3, 10)]);
        assert_eq!(tail.first(), Some(10));
        assert!(tail.get(4).is_none());
        let big: Vec<Entry> = (11..11 + TAIL_MAX_ENTRIES as u64 + 5)
            .map(|i| log_entry(i, 3, 1))
            .collect();
        tail.append(&big);
        // Appending keeps everything (what is not yet durable only the cache can serve);
        // trimming bounds it, but never drops what is kept.
        assert_eq!(tail.entries.len(), big.len() + 1);
        tail.trim(Some(big[3].index));
        assert_eq!(tail.first(), Some(big[3].index));
        tail.trim(None);
        assert_eq!(tail.entries.len(), TAIL_MAX_ENTRIES);
        assert_eq!(
            tail.entries.back().map(|e| e.index),
            big.last().map(|e| e.index)
        );
    }

    #[test]
    fn everything_written_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = populated(dir.path());
        let before = (
            store.first_index().unwrap(),
            store.last_index().unwrap(),
            store.hard_state(),
            store
                .entries(150, 302, None, GetEntriesContext::empty(false))
                .unwrap(),
        );
        assert_eq!((before.0, before.1), (150, 301));
        drop(store);
        let store = RocksStorage::open(dir.path()).unwrap();
        assert_eq!(store.first_index().unwrap(), before.0);
        assert_eq!(store.last_index().unwrap(), before.1);
        assert_eq!(store.hard_state(), before.2);
        assert_eq!(
            store
                .entries(150, 302, None, GetEntriesContext::empty(false))
                .unwrap(),
            before.3
        );
        assert_eq!(store.term(149).unwrap(), 3);
        assert!(matches!(
            store.term(148),
            Err(raft::Error::Store(raft::StorageError::Compacted))
        ));
        assert_eq!(store.applied(), 200);
        assert_eq!(&store.latest_snapshot().data[..], b"state at 200");
        assert_eq!(store.conf_state().voters, vec![1, 2, 3]);
        // Paging by size returns a prefix, never nothing.
        let page = store
            .entries(150, 302, Some(5_000), GetEntriesContext::empty(false))
            .unwrap();
        assert!(!page.is_empty() && page.len() < 10, "{}", page.len());
        assert_eq!(page[0].index, 150);
    }

    /// Entries staged and not yet written are served from the tail cache (beyond its size
    /// bounds too: only the cache has them) and read across the cache's edge with written
    /// ones; a restart keeps what the writer wrote and nothing else.
    #[test]
    fn staged_entries_are_served_until_written_and_lost_if_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = populated(dir.path());
        let big: Vec<Entry> = (302..302 + TAIL_MAX_ENTRIES as u64 + 10)
            .map(|i| log_entry(i, 5, 8))
            .collect();
        let last = big.last().unwrap().index;
        let (ticket, staged) = store
            .stage(ReadyWrite {
                entries: &big,
                ..Default::default()
            })
            .unwrap();
        store.durable_through(ticket - 1);
        let across = store
            .entries(290, last + 1, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(across.len() as u64, last + 1 - 290);
        assert_eq!(across.last().unwrap().index, last);
        assert_eq!(store.term(302).unwrap(), 5);
        drop(store);
        // Never written: a restart does not have them.
        let mut store = RocksStorage::open(dir.path()).unwrap();
        assert_eq!(store.last_index().unwrap(), 301);
        let (ticket, again) = store
            .stage(ReadyWrite {
                entries: &big,
                ..Default::default()
            })
            .unwrap();
        drop(staged);
        store.writer().write(vec![again]).unwrap();
        store.durable_through(ticket);
        assert!(store.tail.entries.len() <= TAIL_MAX_ENTRIES);
        drop(store);
        let store = RocksStorage::open(dir.path()).unwrap();
        assert_eq!(store.last_index().unwrap(), last);
        assert_eq!(
            store
                .entries(302, last + 1, None, GetEntriesContext::empty(false))
                .unwrap(),
            big
        );
    }

    #[test]
    fn a_received_snapshot_and_a_conflicting_tail_are_written_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = populated(dir.path());
        // A new leader overwrites the uncommitted tail from 260.
        let ents: Vec<Entry> = (260..=265).map(|i| log_entry(i, 9, 16)).collect();
        store
            .persist(ReadyWrite {
                entries: &ents,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(store.last_index().unwrap(), 265);
        assert_eq!(store.term(259).unwrap(), 4);
        assert_eq!(store.term(260).unwrap(), 9);
        // A snapshot from the leader replaces everything.
        let snap = snapshot(400, 10, &[1, 2, 3, 4], b"leader state");
        let hs = HardState {
            term: 10,
            commit: 400,
            ..Default::default()
        };
        store
            .persist(ReadyWrite {
                snapshot: Some(&snap),
                hard_state: Some(&hs),
                entries: &[log_entry(401, 10, 8)],
                ..Default::default()
            })
            .unwrap();
        drop(store);
        let store = RocksStorage::open(dir.path()).unwrap();
        assert_eq!(store.first_index().unwrap(), 401);
        assert_eq!(store.last_index().unwrap(), 401);
        assert_eq!(store.applied(), 400);
        assert_eq!(store.conf_state().voters, vec![1, 2, 3, 4]);
        assert_eq!(&store.latest_snapshot().data[..], b"leader state");
        // A snapshot is served only to a member it covers.
        assert!(store.snapshot(0, 4).is_ok());
        assert!(matches!(
            store.snapshot(0, 5),
            Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable
            ))
        ));
    }

    #[test]
    fn invalid_writes_are_refused_and_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = populated(dir.path());
        let hs = HardState {
            term: 5,
            commit: 400,
            ..Default::default()
        };
        assert!(matches!(
            store.persist(ReadyWrite {
                hard_state: Some(&hs),
                ..Default::default()
            }),
            Err(StorageError::InvalidWrite { .. })
        ));
        assert!(store
            .persist(ReadyWrite {
                entries: &[log_entry(100, 9, 8)],
                ..Default::default()
            })
            .is_err());
        assert!(store.compact(250).is_err(), "compaction past the snapshot");
        drop(store);
        let store = RocksStorage::open(dir.path()).unwrap();
        assert_eq!(store.hard_state().commit, 250);
        assert_eq!(store.last_index().unwrap(), 301);
    }

    #[test]
    fn a_master_restarts_from_rocksdb_with_its_state() {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig {
            snapshot_interval: 40,
            snapshot_entries_per_record: 0,
            log_retention: 10,
            ..NodeConfig::new(1)
        };
        let mut node = RaftNode::bootstrap(
            config.clone(),
            RocksStorage::open(dir.path()).unwrap(),
            &[1],
            ClusterSettings::default(),
        )
        .unwrap();
        node.campaign().unwrap();
        let mut answered = 0;
        for n in 0..100u64 {
            node.propose(
                &Command::SetGroupWeight {
                    group: format!("g{n}"),
                    weight: 1.0 + n as f64,
                },
                Token(n),
            )
            .ok();
            answered += node
                .advance(fullerene_proto::Time::ZERO)
                .unwrap()
                .applied
                .len();
        }
        while node.has_ready() {
            answered += node
                .advance(fullerene_proto::Time::ZERO)
                .unwrap()
                .applied
                .len();
        }
        assert!(answered >= 99, "{answered}");
        let state = node.state().clone();
        let applied = node.applied_index();
        drop(node);
        let mut node = RaftNode::open(config, RocksStorage::open(dir.path()).unwrap()).unwrap();
        while node.has_ready() {
            node.advance(fullerene_proto::Time::ZERO).unwrap();
        }
        assert_eq!(node.applied_index(), applied);
        assert_eq!(*node.state(), state);
    }

    #[test]
    fn a_truncated_table_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(populated(dir.path()));
        let sst = files_with(dir.path(), ".sst").remove(0);
        let len = fs::metadata(&sst).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&sst)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        assert_refused(dir.path(), "truncated table file");
    }

    #[test]
    fn a_garbled_table_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(populated(dir.path()));
        let sst = files_with(dir.path(), ".sst").remove(0);
        let len = fs::metadata(&sst).unwrap().len();
        let mut file = OpenOptions::new().write(true).open(&sst).unwrap();
        file.seek(SeekFrom::Start(len / 3)).unwrap();
        file.write_all(&[0xA5; 512]).unwrap();
        drop(file);
        let err = assert_refused(dir.path(), "garbled table file");
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_damaged_manifest_or_missing_current_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(populated(dir.path()));
        let manifest = files_with(dir.path(), "")
            .into_iter()
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("MANIFEST-")
            })
            .unwrap();
        let len = fs::metadata(&manifest).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&manifest)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        assert_refused(dir.path(), "truncated manifest");

        let dir = tempfile::tempdir().unwrap();
        drop(populated(dir.path()));
        fs::remove_file(dir.path().join("CURRENT")).unwrap();
        assert_refused(dir.path(), "missing CURRENT");
    }

    #[test]
    fn a_directory_that_is_not_a_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
        assert_refused(dir.path(), "foreign directory");
    }

    /// Opens the raw database of a closed store, to damage it logically.
    fn raw(dir: &Path) -> DB {
        DB::open_cf_descriptors(&db_options(), dir, column_families()).unwrap()
    }

    #[test]
    fn logical_damage_is_refused() {
        type Damage = fn(&DB);
        let cases: Vec<(&str, Damage, &str)> = vec![
            (
                "an entry missing from the middle of the log",
                |db| {
                    db.delete_cf(db.cf_handle(CF_LOG).unwrap(), log_key(170))
                        .unwrap();
                },
                "entries missing",
            ),
            (
                "the tail of the log lost below the commit index",
                |db| {
                    let cf = db.cf_handle(CF_LOG).unwrap();
                    db.delete_range_cf(cf, log_key(240), log_key(400)).unwrap();
                },
                "beyond the last log entry",
            ),
            (
                "an entry under the wrong key",
                |db| {
                    let cf = db.cf_handle(CF_LOG).unwrap();
                    let value = encode_log_value(&log_entry(999, 3, 8)).unwrap();
                    db.put_cf(cf, log_key(180), value).unwrap();
                },
                "holds entry",
            ),
            (
                "another format version",
                |db| {
                    let cf = db.cf_handle(CF_META).unwrap();
                    db.put_cf(cf, KEY_FORMAT, 7u32.to_be_bytes()).unwrap();
                },
                "format version 7",
            ),
            (
                "no format version",
                |db| {
                    db.delete_cf(db.cf_handle(CF_META).unwrap(), KEY_FORMAT)
                        .unwrap();
                },
                "no format version",
            ),
            (
                "a hard state that does not decode",
                |db| {
                    let cf = db.cf_handle(CF_META).unwrap();
                    db.put_cf(cf, KEY_HARD_STATE, [0xff, 0xff, 0xff]).unwrap();
                },
                "does not decode",
            ),
            (
                "the state snapshot lost",
                |db| {
                    db.delete_cf(db.cf_handle(CF_STATE).unwrap(), KEY_STATE)
                        .unwrap();
                },
                "state snapshot at index 200 is missing",
            ),
            (
                "an applied index that disagrees with the snapshot",
                |db| {
                    let cf = db.cf_handle(CF_META).unwrap();
                    db.put_cf(cf, KEY_APPLIED, 7u64.to_be_bytes()).unwrap();
                },
                "applied index 7",
            ),
        ];
        for (what, damage, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            drop(populated(dir.path()));
            {
                let db = raw(dir.path());
                damage(&db);
            }
            let err = assert_refused(dir.path(), what);
            assert!(err.to_string().contains(expected), "{what}: {err}");
        }
    }

    #[test]
    fn a_state_snapshot_that_does_not_decode_stops_the_master() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RocksStorage::open(dir.path()).unwrap();
        store
            .bootstrap(&[1], b"garbage, not a ClusterState")
            .unwrap();
        drop(store);
        let err = RaftNode::open(NodeConfig::new(1), RocksStorage::open(dir.path()).unwrap())
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(&dir.path().display().to_string()),
            "{message}"
        );
        assert!(message.contains("does not decode"), "{message}");
    }
}
