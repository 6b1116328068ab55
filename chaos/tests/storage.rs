//! The [`RaftStore`](fullerene_master::storage::RaftStore) conformance suite
//! ([`fullerene_chaos::storage_suite`]) on both stores, and the in-memory store's own tests: its
//! crash simulation, which keeps exactly what was durably written.

mod memory {
    use fullerene_chaos::storage_suite::{bootstrapped, entry, persist_synced};
    use fullerene_master::storage::{
        Durability, DurableWriter, MemStorage, RaftStore, ReadyWrite, StorageError,
    };
    use raft::eraftpb::{Entry, HardState};
    use raft::Storage;

    fn fresh() -> MemStorage {
        MemStorage::new("test")
    }

    fullerene_chaos::raft_store_conformance!(fresh);

    /// A refused batch (here one that would leave a gap in the log) is not written: it costs
    /// no write.
    #[test]
    fn a_refused_batch_is_not_counted_as_a_write() {
        let mut store = bootstrapped(&mut fresh);
        let before = store.persist_count();
        assert!(store
            .persist(ReadyWrite {
                entries: &[entry(9, 3)],
                ..Default::default()
            })
            .is_err());
        assert_eq!(store.persist_count(), before);
    }

    #[test]
    fn an_unsynced_commit_index_is_lost_in_a_crash_until_a_synced_write() {
        let mut store = bootstrapped(&mut fresh);
        let ents: Vec<Entry> = (2..=5).map(|i| entry(i, 2)).collect();
        let hs = HardState {
            term: 2,
            vote: 1,
            commit: 2,
            ..Default::default()
        };
        persist_synced(&mut store, &ents, &hs);
        let ordered = |commit| ReadyWrite {
            durability: Durability::Ordered,
            commit: Some(commit),
            ..Default::default()
        };
        store.persist(ordered(4)).unwrap();
        assert_eq!(store.hard_state().commit, 4);
        assert_eq!(store.crash().hard_state().commit, 2);

        let mut store = bootstrapped(&mut fresh);
        persist_synced(&mut store, &ents, &hs);
        store.persist(ordered(4)).unwrap();
        // An unsynced write may change nothing but the commit index.
        let vote = HardState {
            term: 3,
            vote: 2,
            commit: 4,
            ..Default::default()
        };
        assert!(store
            .persist(ReadyWrite {
                durability: Durability::Ordered,
                hard_state: Some(&vote),
                ..Default::default()
            })
            .is_err());
        assert!(store
            .persist(ReadyWrite {
                durability: Durability::Ordered,
                entries: &[entry(6, 2)],
                ..Default::default()
            })
            .is_err());
        // A later synced write makes it durable.
        store
            .persist(ReadyWrite {
                entries: &[entry(6, 2)],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(store.crash().hard_state().commit, 4);
    }

    /// What was staged and not yet written is lost in a crash; what the writer wrote is
    /// kept, and the old handle's writer is fenced off.
    #[test]
    fn a_crash_loses_staged_writes_the_writer_did_not_run() {
        let mut store = bootstrapped(&mut fresh);
        let (_, written) = store
            .stage(ReadyWrite {
                entries: &[entry(2, 2), entry(3, 2)],
                ..Default::default()
            })
            .unwrap();
        let (_, staged_only) = store
            .stage(ReadyWrite {
                entries: &[entry(4, 2)],
                ..Default::default()
            })
            .unwrap();
        let mut writer = store.writer();
        writer.write(vec![written]).unwrap();
        assert_eq!(
            store.last_index().unwrap(),
            4,
            "staged entries are read at once"
        );
        let restarted = store.crash();
        assert_eq!(restarted.last_index().unwrap(), 3);
        assert!(matches!(
            writer.write(vec![staged_only]),
            Err(StorageError::Injected { .. })
        ));
    }

    #[test]
    fn crash_keeps_durable_writes_and_fences_the_old_handle() {
        let mut store = bootstrapped(&mut fresh);
        store
            .persist(ReadyWrite {
                entries: &[entry(2, 2)],
                ..Default::default()
            })
            .unwrap();
        store.fail_next_persist();
        assert!(matches!(
            store.persist(ReadyWrite {
                entries: &[entry(3, 2)],
                ..Default::default()
            }),
            Err(StorageError::Injected { .. })
        ));
        let mut restarted = store.crash();
        assert_eq!(restarted.last_index().unwrap(), 2);
        assert!(store
            .persist(ReadyWrite {
                entries: &[entry(3, 2)],
                ..Default::default()
            })
            .is_err());
        restarted
            .persist(ReadyWrite {
                entries: &[entry(3, 2)],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(restarted.last_index().unwrap(), 3);
    }
}

/// The RocksDB store, each test's stores in temporary directories.
mod rocks {
    use fullerene_chaos::storage_suite::StoreFactory;
    use fullerene_master::storage::RocksStorage;
    use tempfile::TempDir;

    /// Opens each store in a new temporary directory, removed when the factory is dropped.
    #[derive(Default)]
    struct TempStores(Vec<TempDir>);

    impl StoreFactory for TempStores {
        type Store = RocksStorage;

        fn fresh(&mut self) -> RocksStorage {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = RocksStorage::open(dir.path()).expect("a new store");
            self.0.push(dir);
            store
        }
    }

    fullerene_chaos::raft_store_conformance!(TempStores::default());
}
