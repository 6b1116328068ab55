//! A conformance suite for [`RaftStore`]: the contract every Raft store keeps, checked the same
//! way on each of them.
//!
//! Each test is a function generic over a [`StoreFactory`], which makes fresh, empty stores;
//! it runs one scenario and panics, naming the broken rule, if the store does not keep it.
//! [`raft_store_conformance!`](crate::raft_store_conformance) expands to one `#[test]` per
//! function, so a test module runs the whole suite on a store with one line; chaos's tests run
//! it on [`MemStorage`](fullerene_master::storage::MemStorage) and on the RocksDB store.
//!
//! What a store does with its own medium (the in-memory store's crash simulation, RocksDB's
//! reopen, damage detection and torn tails) is tested beside that store.

use fullerene_master::storage::{DurableWriter, RaftStore, ReadyWrite, StorageError};
use fullerene_master::testkit::{log_entry, snapshot};
use raft::eraftpb::{Entry, HardState};
use raft::{GetEntriesContext, Storage as _};

/// Makes the stores a conformance test runs on.
pub trait StoreFactory {
    /// The store under test.
    type Store: RaftStore;

    /// A new, empty store (as [`RaftStore::bootstrap`] expects it).
    fn fresh(&mut self) -> Self::Store;
}

/// Any closure that returns a fresh store is a factory.
impl<S: RaftStore, F: FnMut() -> S> StoreFactory for F {
    type Store = S;

    fn fresh(&mut self) -> S {
        self()
    }
}

/// Expands to one `#[test]` per test of the suite, each running it on stores made by
/// `$factory`: an expression whose value implements [`StoreFactory`], evaluated anew by each
/// test. Use it inside a test module, one module per store:
///
/// ```ignore
/// mod memory {
///     fullerene_chaos::raft_store_conformance!(|| MemStorage::new("conformance"));
/// }
/// ```
#[macro_export]
macro_rules! raft_store_conformance {
    ($factory:expr) => {
        $crate::raft_store_conformance!(@tests $factory;
            bootstrap_starts_the_log_after_an_initial_snapshot,
            persist_overwrites_conflicting_tail_and_refuses_gaps,
            a_batch_with_a_commit_beyond_the_log_is_refused_whole,
            compaction_keeps_the_term_of_the_last_dropped_entry,
            received_snapshot_replaces_the_log,
            staged_writes_are_read_at_once_and_written_in_order,
            forgotten_entries_are_not_served_before_the_writer_deletes_them,
            a_snapshot_is_served_whole_while_the_writer_saves_a_newer_one,
        );
    };
    (@tests $factory:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let mut factory = $factory;
                $crate::storage_suite::$name(&mut factory);
            }
        )*
    };
}

/// A log entry at `index` in `term`, with 16 bytes of data.
pub fn entry(index: u64, term: u64) -> Entry {
    log_entry(index, term, 16)
}

/// A fresh store bootstrapped as a founding member of a group of masters 1, 2 and 3.
pub fn bootstrapped<F: StoreFactory>(factory: &mut F) -> F::Store {
    let mut store = factory.fresh();
    store
        .bootstrap(&[1, 2, 3], b"state")
        .expect("bootstrap of a fresh store");
    store
}

/// Writes `entries` with `hard_state` in one synced batch, as a leader's Ready does.
pub fn persist_synced<S: RaftStore>(store: &mut S, entries: &[Entry], hard_state: &HardState) {
    store
        .persist(ReadyWrite {
            entries,
            hard_state: Some(hard_state),
            ..Default::default()
        })
        .expect("a synced write of entries and hard state");
}

/// A founding master's log starts after the bootstrap snapshot (index 1, term 1), and a store
/// is bootstrapped once.
pub fn bootstrap_starts_the_log_after_an_initial_snapshot<F: StoreFactory>(factory: &mut F) {
    let mut store = bootstrapped(factory);
    assert_eq!(store.first_index().unwrap(), 2);
    assert_eq!(store.last_index().unwrap(), 1);
    assert_eq!(store.term(1).unwrap(), 1);
    assert_eq!(store.applied(), 1);
    let state = store.initial_state().unwrap();
    assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
    assert_eq!(state.hard_state.commit, 1);
    assert!(matches!(
        store.bootstrap(&[1], b"again"),
        Err(StorageError::AlreadyInitialized { .. })
    ));
}

/// Entries overwrite the log's tail from their first index on (a new leader's log wins), and
/// a batch that would leave a gap is refused without changing the log.
pub fn persist_overwrites_conflicting_tail_and_refuses_gaps<F: StoreFactory>(factory: &mut F) {
    let mut store = bootstrapped(factory);
    let ents: Vec<Entry> = (2..=6).map(|i| entry(i, 2)).collect();
    store
        .persist(ReadyWrite {
            entries: &ents,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(store.last_index().unwrap(), 6);
    store
        .persist(ReadyWrite {
            entries: &[entry(4, 3)],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(store.last_index().unwrap(), 4);
    assert_eq!(store.term(4).unwrap(), 3);
    assert_eq!(store.term(3).unwrap(), 2);
    assert!(store
        .persist(ReadyWrite {
            entries: &[entry(9, 3)],
            ..Default::default()
        })
        .is_err());
    assert_eq!(store.last_index().unwrap(), 4);
}

/// A batch whose commit index passes the log it leaves is refused as a whole: its entries
/// and hard state are not written either.
pub fn a_batch_with_a_commit_beyond_the_log_is_refused_whole<F: StoreFactory>(factory: &mut F) {
    let mut store = bootstrapped(factory);
    let hs = HardState {
        term: 2,
        vote: 1,
        commit: 9,
        ..Default::default()
    };
    let ents = [entry(2, 2)];
    let err = store
        .persist(ReadyWrite {
            entries: &ents,
            hard_state: Some(&hs),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidWrite { .. }));
    assert_eq!(store.last_index().unwrap(), 1);
    assert_eq!(store.hard_state().term, 1);
}

/// Compaction never passes the snapshot, keeps the term of the last entry it drops (Raft
/// matches logs there), and answers reads below it with `Compacted`; a local snapshot older
/// than the stored one is refused.
pub fn compaction_keeps_the_term_of_the_last_dropped_entry<F: StoreFactory>(factory: &mut F) {
    let mut store = bootstrapped(factory);
    let ents: Vec<Entry> = (2..=10).map(|i| entry(i, 2 + i / 5)).collect();
    let hs = HardState {
        term: 4,
        commit: 10,
        ..Default::default()
    };
    persist_synced(&mut store, &ents, &hs);
    // Compaction may not pass the snapshot.
    assert!(store.compact(5).is_err());
    let mut snap = snapshot(8, store.term(8).unwrap(), &[], b"state at 8");
    store.save_snapshot(&snap).unwrap();
    assert_eq!(store.applied(), 8);
    store.compact(6).unwrap();
    assert_eq!(store.first_index().unwrap(), 6);
    assert_eq!(store.term(5).unwrap(), 3);
    assert!(matches!(
        store.term(4),
        Err(raft::Error::Store(raft::StorageError::Compacted))
    ));
    assert!(matches!(
        store.entries(5, 7, None, GetEntriesContext::empty(false)),
        Err(raft::Error::Store(raft::StorageError::Compacted))
    ));
    assert_eq!(
        store
            .entries(6, 11, None, GetEntriesContext::empty(false))
            .unwrap()
            .len(),
        5
    );
    // An older snapshot than the stored one is refused.
    snap.mut_metadata().index = 7;
    snap.mut_metadata().term = store.term(7).unwrap();
    assert!(store.save_snapshot(&snap).is_err());
}

/// A snapshot received from the leader replaces the whole log, the stored state machine and
/// the membership.
pub fn received_snapshot_replaces_the_log<F: StoreFactory>(factory: &mut F) {
    let mut store = bootstrapped(factory);
    let ents: Vec<Entry> = (2..=4).map(|i| entry(i, 2)).collect();
    store
        .persist(ReadyWrite {
            entries: &ents,
            ..Default::default()
        })
        .unwrap();
    let snap = snapshot(20, 5, &[1, 2, 3, 4], b"leader state");
    let hs = HardState {
        term: 5,
        commit: 20,
        ..Default::default()
    };
    store
        .persist(ReadyWrite {
            snapshot: Some(&snap),
            hard_state: Some(&hs),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(store.first_index().unwrap(), 21);
    assert_eq!(store.last_index().unwrap(), 20);
    assert_eq!(store.term(20).unwrap(), 5);
    assert_eq!(store.applied(), 20);
    assert_eq!(store.conf_state().voters, vec![1, 2, 3, 4]);
    assert_eq!(&store.latest_snapshot().data[..], b"leader state");
}

/// What [`RaftStore::stage`] hands over is read at once (raft-rs reads it before it is
/// durable), including an overwrite of a staged tail; the writer then writes the staged
/// writes in order and the reads do not change.
pub fn staged_writes_are_read_at_once_and_written_in_order<F: StoreFactory>(factory: &mut F) {
    let mut store = bootstrapped(factory);
    let first: Vec<Entry> = (2..=6).map(|i| entry(i, 2)).collect();
    let hs = HardState {
        term: 3,
        vote: 1,
        commit: 3,
        ..Default::default()
    };
    let (_, a) = store
        .stage(ReadyWrite {
            entries: &first,
            ..Default::default()
        })
        .unwrap();
    let (_, b) = store
        .stage(ReadyWrite {
            entries: &[entry(5, 3), entry(6, 3), entry(7, 3)],
            hard_state: Some(&hs),
            ..Default::default()
        })
        .unwrap();
    let read = |store: &F::Store| {
        let terms: Vec<u64> = (2..=7).map(|i| store.term(i).unwrap()).collect();
        let entries = store
            .entries(2, 8, None, GetEntriesContext::empty(false))
            .unwrap();
        (
            store.last_index().unwrap(),
            terms,
            entries,
            store.hard_state(),
        )
    };
    let staged = read(&store);
    assert_eq!(staged.0, 7, "a staged append is read at once");
    assert_eq!(staged.1, vec![2, 2, 2, 3, 3, 3], "a staged overwrite wins");
    assert_eq!(staged.3, hs, "a staged hard state is read at once");
    let (ticket, c) = store
        .stage(ReadyWrite {
            entries: &[entry(8, 3)],
            ..Default::default()
        })
        .unwrap();
    // A staged write that would leave a gap is refused and changes nothing.
    assert!(store
        .stage(ReadyWrite {
            entries: &[entry(10, 3)],
            ..Default::default()
        })
        .is_err());
    store.writer().write(vec![a, b, c]).unwrap();
    store.durable_through(ticket);
    let written = read(&store);
    assert_eq!(staged.1, written.1);
    assert_eq!(staged.2, written.2);
    assert_eq!(store.last_index().unwrap(), 8);
}

/// A bootstrapped store with entries 2 to 10 of term 2 written and committed.
fn committed_through_10<F: StoreFactory>(factory: &mut F) -> F::Store {
    let mut store = bootstrapped(factory);
    let ents: Vec<Entry> = (2..=10).map(|i| entry(i, 2)).collect();
    let hs = HardState {
        term: 2,
        commit: 10,
        ..Default::default()
    };
    persist_synced(&mut store, &ents, &hs);
    store
}

/// [`RaftStore::forget_before`] stops serving entries at once (raft-rs must never read an
/// entry the writer may be deleting) and keeps the matching term; the writer's deletion
/// changes nothing raft-rs sees.
pub fn forgotten_entries_are_not_served_before_the_writer_deletes_them<F: StoreFactory>(
    factory: &mut F,
) {
    let mut store = committed_through_10(factory);
    store
        .save_snapshot(&snapshot(8, 2, &[1, 2, 3], b"state at 8"))
        .unwrap();
    assert!(store.forget_before(10).is_err(), "past the snapshot");
    let compaction = store
        .forget_before(7)
        .unwrap()
        .expect("entries 2..7 are to go");
    assert_eq!(
        (compaction.first, compaction.to, compaction.term),
        (2, 7, 2)
    );
    assert_eq!(store.first_index().unwrap(), 7);
    assert_eq!(store.term(6).unwrap(), 2);
    assert!(matches!(
        store.entries(5, 8, None, GetEntriesContext::empty(false)),
        Err(raft::Error::Store(raft::StorageError::Compacted))
    ));
    assert!(
        store.forget_before(7).unwrap().is_none(),
        "nothing more to go"
    );
    store.writer().compact(&compaction).unwrap();
    assert_eq!(store.first_index().unwrap(), 7);
    assert_eq!(
        store
            .entries(7, 11, None, GetEntriesContext::empty(false))
            .unwrap()
            .len(),
        4
    );
}

/// While the writer saves a newer state-machine snapshot, the store serves a whole snapshot,
/// the old or the new, never one's metadata with the other's state (its receiver would apply
/// entries twice); once told it is saved, the new one.
pub fn a_snapshot_is_served_whole_while_the_writer_saves_a_newer_one<F: StoreFactory>(
    factory: &mut F,
) {
    let mut store = committed_through_10(factory);
    store
        .save_snapshot(&snapshot(6, 2, &[1, 2, 3], b"state at 6"))
        .unwrap();
    let newer = snapshot(9, 2, &[1, 2, 3], b"state at 9");
    store.check_snapshot(newer.get_metadata()).unwrap();
    store
        .writer()
        .save_snapshot(newer.get_metadata(), &newer.data)
        .unwrap();
    let served = store.snapshot(0, 1).unwrap();
    let whole = match served.get_metadata().index {
        6 => &served.data[..] == b"state at 6",
        9 => &served.data[..] == b"state at 9",
        _ => false,
    };
    assert!(
        whole,
        "served a mixed snapshot: {:?}",
        served.get_metadata()
    );
    store.snapshot_saved(newer.get_metadata());
    assert_eq!(store.applied(), 9);
    assert_eq!(&store.latest_snapshot().data[..], b"state at 9");
    assert_eq!(store.snapshot(0, 1).unwrap().get_metadata().index, 9);
}
