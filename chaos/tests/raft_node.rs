//! Tests of the node driver: a single master's Ready cycle, restart from storage, and the
//! seeded in-memory clusters of 3 and 5 masters ([`fullerene_chaos::raft_sim`]).

use fullerene_proto::Time;

use fullerene_chaos::raft_sim::{run_chaos, Sim, SimConfig, SimStats};
use fullerene_master::raft_node::{
    run_store_jobs, MembershipChange, NodeConfig, NodeError, NodeOutput, Persistence, ProposeError,
    RaftNode, ReadError, StoreWork, Token,
};
use fullerene_master::state::{ClusterSettings, Command, CommandError};
use fullerene_master::storage::{MemStorage, RaftStore, StorageError};
use fullerene_master::testkit::register_agent;

fn register(n: u64) -> Command {
    register_agent(
        &format!("agent-{n}"),
        &format!("host-{n}"),
        "cpus=8",
        &["sleep"],
        n,
    )
}

fn config(id: u64) -> NodeConfig {
    NodeConfig {
        snapshot_interval: 50,
        snapshot_entries_per_record: 0,
        log_retention: 10,
        ..NodeConfig::new(id)
    }
}

/// A single master that has elected itself.
fn single(store: MemStorage) -> RaftNode<MemStorage> {
    let mut node = RaftNode::bootstrap(config(1), store, &[1], ClusterSettings::default()).unwrap();
    node.campaign().unwrap();
    let mut became_leader = false;
    for _ in 0..10 {
        let out = node.advance(Time::ZERO).unwrap();
        became_leader |= out.leader_changed.is_some_and(|c| c.is_self);
        if node.is_leader() && !node.has_ready() {
            break;
        }
    }
    assert!(became_leader && node.is_leader());
    node
}

/// Advances until nothing is left to do, collecting the answers.
fn drain(node: &mut RaftNode<MemStorage>) -> NodeOutput {
    let mut all = NodeOutput::default();
    for _ in 0..100 {
        if !node.has_ready() {
            break;
        }
        let mut out = node.advance(Time::ZERO).unwrap();
        all.applied.append(&mut out.applied);
        all.dropped.append(&mut out.dropped);
        all.reads_ready.append(&mut out.reads_ready);
        all.reads_failed.append(&mut out.reads_failed);
    }
    all
}

#[test]
fn proposals_are_batched_into_one_synced_write_and_answered_in_order() {
    let store = MemStorage::new("single");
    let mut node = single(store.clone());
    let writes_before = store.persist_count();
    for n in 0..500 {
        node.propose(&register(n), Token(n)).unwrap();
    }
    // A duplicate registration: committed, refused by the state machine.
    node.propose(&register(7), Token(1_000)).unwrap();
    let out = drain(&mut node);
    assert_eq!(out.applied.len(), 501);
    assert!(out.dropped.is_empty());
    let tokens: Vec<u64> = out.applied.iter().map(|(t, _)| t.0).collect();
    let mut expected: Vec<u64> = (0..500).collect();
    expected.push(1_000);
    assert_eq!(tokens, expected, "answers come in log order");
    assert!(out.applied[..500].iter().all(|(_, r)| r.is_ok()));
    assert!(matches!(
        out.applied[500].1,
        Err(CommandError::AgentAlreadyRegistered(_))
    ));
    assert_eq!(node.state().agents().len(), 500);
    // One batch for the entries and hard state, one for the commit index: not one per command.
    let writes = store.persist_count() - writes_before;
    assert!(
        writes <= 3,
        "{writes} synced writes for one batch of 501 proposals"
    );
}

/// A single master whose store jobs are handed out ([`Persistence::Offloaded`]), elected,
/// with every job so far written.
fn offloaded_single(store: &MemStorage) -> RaftNode<MemStorage> {
    let config = NodeConfig {
        persistence: Persistence::Offloaded,
        ..config(1)
    };
    let mut node =
        RaftNode::bootstrap(config, store.clone(), &[1], ClusterSettings::default()).unwrap();
    node.campaign().unwrap();
    for _ in 0..20 {
        drain(&mut node);
        let jobs = node.take_store_jobs();
        if jobs.is_empty() && !node.has_ready() {
            break;
        }
        node.store_report(run_store_jobs(&mut store.writer(), jobs));
    }
    assert!(node.is_leader());
    node
}

/// With the writes offloaded, a single master (its own log is the quorum) commits a proposal
/// only once the writer reports its write, and the writes of several `Ready`s queued behind
/// one sync are written together (a group commit).
#[test]
fn offloaded_writes_commit_only_once_written_and_queue_into_one_group() {
    let store = MemStorage::new("offloaded");
    let mut node = offloaded_single(&store);
    let writes_before = store.persist_count();
    node.propose(&register(1), Token(1)).unwrap();
    let out = drain(&mut node);
    assert!(
        out.applied.is_empty(),
        "applied before its write was durable"
    );
    let mut jobs = node.take_store_jobs();
    node.propose(&register(2), Token(2)).unwrap();
    assert!(drain(&mut node).applied.is_empty());
    jobs.extend(node.take_store_jobs());
    let writes = jobs
        .iter()
        .filter(|job| matches!(job.work, StoreWork::Write(_)))
        .count();
    assert_eq!(writes, 2, "one staged write per Ready");
    assert_eq!(store.persist_count(), writes_before, "nothing written yet");
    let report = run_store_jobs(&mut store.writer(), jobs);
    assert_eq!(report.done.len(), 2);
    assert_eq!(report.syncs, 1, "both writes in one group");
    node.store_report(report);
    let out = drain(&mut node);
    let tokens: Vec<Token> = out.applied.iter().map(|(t, _)| *t).collect();
    assert_eq!(tokens, vec![Token(1), Token(2)]);
    assert_eq!(node.state().agents().len(), 2);
}

/// What the node staged and the writer never wrote is lost in a crash, as a write that never
/// returned is: the restarted master does not have it (and never acknowledged it).
#[test]
fn a_crash_before_the_writer_runs_loses_the_staged_proposals() {
    let store = MemStorage::new("offloaded-crash");
    let mut node = offloaded_single(&store);
    node.propose(&register(1), Token(1)).unwrap();
    assert!(drain(&mut node).applied.is_empty());
    let jobs = node.take_store_jobs();
    assert!(!jobs.is_empty());
    drop(node);
    let durable = store.crash();
    let report = run_store_jobs(&mut store.writer(), jobs);
    assert!(
        report.failed.is_some(),
        "the crashed process's writer is fenced off"
    );
    let mut restarted = RaftNode::open(config(1), durable).unwrap();
    restarted.campaign().unwrap();
    drain(&mut restarted);
    assert!(restarted.is_leader());
    assert!(restarted.state().agents().is_empty());
}

#[test]
fn only_the_leader_takes_proposals_and_reads_need_a_leader() {
    let store = MemStorage::new("follower");
    let mut node =
        RaftNode::bootstrap(config(1), store, &[1, 2, 3], ClusterSettings::default()).unwrap();
    assert_eq!(
        node.propose(&register(1), Token(1)),
        Err(ProposeError::NotLeader { leader: None })
    );
    assert_eq!(node.read_index(Token(2)), Err(ReadError::NoLeader));
    assert!(matches!(
        RaftNode::bootstrap(
            config(4),
            MemStorage::new("x"),
            &[1, 2, 3],
            ClusterSettings::default()
        ),
        Err(NodeError::Config(_))
    ));
}

#[test]
fn a_single_master_serves_linearizable_reads_after_its_writes() {
    let mut node = single(MemStorage::new("reads"));
    node.propose(&register(1), Token(1)).unwrap();
    node.read_index(Token(2)).unwrap();
    let out = drain(&mut node);
    assert_eq!(out.applied.len(), 1);
    assert_eq!(out.reads_ready, vec![Token(2)]);
    assert_eq!(node.state().agents().len(), 1);
}

#[test]
fn restart_from_storage_recovers_the_state_via_snapshot_and_log() {
    let store = MemStorage::new("restart");
    let mut node = single(store.clone());
    for n in 0..137 {
        node.propose(&register(n), Token(n)).unwrap();
        if n % 10 == 0 {
            drain(&mut node);
        }
    }
    drain(&mut node);
    let state = node.state().clone();
    let applied = node.applied_index();
    // Snapshots were taken and the log compacted behind them.
    assert!(store.latest_snapshot().get_metadata().index >= 100);
    assert!(raft::Storage::first_index(&store).unwrap() > 50);

    let durable = store.crash();
    drop(node);
    let mut restarted = RaftNode::open(config(1), durable.clone()).unwrap();
    // The entries after the snapshot are re-applied: those known committed at once, the rest
    // (whose commit index was written unsynced and lost with the crash) once the master has
    // led again and committed an entry of its new term.
    drain(&mut restarted);
    assert!(restarted.applied_index() >= durable.latest_snapshot().get_metadata().index);
    restarted.campaign().unwrap();
    drain(&mut restarted);
    assert!(restarted.is_leader());
    // One more entry: the new term's empty entry.
    assert_eq!(restarted.applied_index(), applied + 1);
    assert_eq!(*restarted.state(), state);
    assert_eq!(restarted.membership().voters, vec![1]);
}

/// With a large state, snapshots come further apart: at least `snapshot_entries_per_record`
/// applied entries per record of the state, so that encoding them costs a bounded share of the
/// work per entry.
#[test]
fn snapshots_come_further_apart_as_the_state_grows() {
    let snapshot_index = |store: &MemStorage| store.latest_snapshot().get_metadata().index;
    let store = MemStorage::new("growing");
    let mut node = RaftNode::bootstrap(
        NodeConfig {
            snapshot_entries_per_record: 4,
            ..config(1)
        },
        store.clone(),
        &[1],
        ClusterSettings::default(),
    )
    .unwrap();
    node.campaign().unwrap();
    drain(&mut node);
    // Each snapshot index, with the state's records when it was taken.
    let mut snapshots = vec![(snapshot_index(&store), node.state().record_count())];
    for n in 0..400 {
        // The first 50 register agents; the rest are refused duplicates, entries all the same.
        node.propose(&register(n % 50), Token(n)).unwrap();
        drain(&mut node);
        let index = snapshot_index(&store);
        if index != snapshots.last().map_or(0, |s| s.0) {
            snapshots.push((index, node.state().record_count()));
        }
    }
    let indexes: Vec<u64> = snapshots.iter().map(|s| s.0).collect();
    // Never closer than the fixed interval (50), nor than 4 entries per record: 200 once the
    // 50 agents are registered.
    assert!(indexes.len() >= 3, "snapshots at {indexes:?}");
    for pair in snapshots.windows(2) {
        let ((from, records), (to, _)) = (pair[0], pair[1]);
        let interval = 50.max(4 * records);
        assert!(to - from >= interval, "snapshots at {indexes:?}");
    }
    let (last, records) = snapshots[snapshots.len() - 1];
    assert_eq!(records, 50);
    assert!(
        last - snapshots[snapshots.len() - 2].0 >= 200,
        "snapshots at {indexes:?}"
    );
}

#[test]
fn a_failed_write_is_fatal_and_leaves_the_store_as_it_was() {
    let store = MemStorage::new("failing");
    let mut node = single(store.clone());
    node.propose(&register(1), Token(1)).unwrap();
    drain(&mut node);
    let last = raft::Storage::last_index(&store).unwrap();
    node.propose(&register(2), Token(2)).unwrap();
    store.fail_next_persist();
    assert!(matches!(
        node.advance(Time::ZERO),
        Err(NodeError::Storage(StorageError::Injected { .. }))
    ));
    drop(node);
    let durable = store.crash();
    assert_eq!(raft::Storage::last_index(&durable).unwrap(), last);
    let mut restarted = RaftNode::open(config(1), durable).unwrap();
    restarted.campaign().unwrap();
    drain(&mut restarted);
    assert_eq!(restarted.state().agents().len(), 1);
}

/// raft-rs gives up with a panic when a read of its log fails; the node turns that into a
/// fatal error naming the store, and makes no further call into raft-rs.
#[test]
fn a_failed_read_halts_the_node_with_an_error_instead_of_a_panic() {
    let store = MemStorage::new("unreadable");
    let mut node = single(store.clone());
    node.propose(&register(1), Token(1)).unwrap();
    drain(&mut node);
    store.fail_reads();
    node.propose(&register(2), Token(2)).unwrap();
    let mut failure = None;
    for _ in 0..10 {
        if let Err(error) = node.advance(Time::ZERO) {
            failure = Some(error);
            break;
        }
    }
    let failure = failure.expect("the node noticed the failed read");
    assert!(
        matches!(&failure, NodeError::Storage(StorageError::Injected { location }) if location == "memory:unreadable"),
        "{failure}"
    );
    // Halted: every later call says so, and none reaches raft-rs.
    assert!(node.has_ready());
    assert_eq!(node.advance(Time::ZERO).unwrap_err(), failure);
    assert!(matches!(
        node.propose(&register(3), Token(3)),
        Err(ProposeError::Halted(_))
    ));
    assert!(matches!(
        node.read_index(Token(4)),
        Err(ReadError::Halted(_))
    ));
    node.tick();
    // What was written survives: a restart on the store's durable contents serves again.
    drop(node);
    let mut restarted = RaftNode::open(config(1), store.crash()).unwrap();
    restarted.campaign().unwrap();
    drain(&mut restarted);
    assert!(restarted.is_leader());
    assert!(!restarted.state().agents().is_empty());
}

/// A leader whose store stops answering reads halts; the other masters elect a new leader and
/// nothing committed is lost (the simulation's oracle checks every applied entry).
#[test]
fn a_leader_whose_reads_fail_stops_and_another_master_takes_over() {
    let mut sim = Sim::new(3, SimConfig::with_voters(3)).unwrap();
    sim.set_faults(false);
    sim.run_until(500, |s| s.leader().is_some()).unwrap();
    let old = sim.leader().unwrap();
    let first = sim.propose_command(&register(1)).unwrap();
    sim.run_until(500, |s| s.answer(first).is_some()).unwrap();
    sim.fail_reads(old);
    // Its answer may die with the halted leader, as with a crash: the client would not know
    // whether it committed (the oracle checks that, if it did, it is never lost).
    let _second = sim.propose_command(&register(2)).unwrap();
    sim.run_until(1_000, |s| s.leader().is_some_and(|l| l != old))
        .unwrap();
    let third = sim.propose_command(&register(3)).unwrap();
    sim.run_until(1_000, |s| s.answer(third).is_some() && s.converged())
        .unwrap();
    assert!(matches!(sim.answer(third), Some(Ok(Ok(_)))));
    assert!(
        sim.stats().crashes >= 1,
        "the halted leader was not restarted"
    );
    sim.heal_and_check().unwrap();
}

#[test]
fn a_store_whose_state_snapshot_does_not_decode_is_refused() {
    let mut store = MemStorage::new("garbled");
    store.bootstrap(&[1], b"not a state").unwrap();
    let err = RaftNode::open(config(1), store).unwrap_err();
    assert!(
        matches!(&err, NodeError::Storage(StorageError::Corrupt { location, .. }) if location == "memory:garbled"),
        "{err}"
    );
}

/// Seeds to run: `FULLERENE_RAFT_SEEDS=N` if set, else many more with
/// `FULLERENE_LONG_TESTS=1`, else `default`.
fn seed_count(default: u64) -> u64 {
    if let Some(n) = std::env::var("FULLERENE_RAFT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var("FULLERENE_LONG_TESTS").is_ok_and(|v| v == "1") {
        return default * 20;
    }
    default
}

/// Runs every seed `s` in `0..count` with `s % shards == shard`, so that the seeds spread
/// over the test harness's threads.
fn chaos_shard(voters: usize, default_seeds: u64, shard: u64, shards: u64) {
    let count = seed_count(default_seeds);
    let mut totals = SimStats::default();
    for seed in (0..count).filter(|s| s % shards == shard) {
        let stats =
            run_chaos(seed, SimConfig::with_voters(voters)).unwrap_or_else(|e| panic!("{e}"));
        totals.acknowledged += stats.acknowledged;
        totals.rejected += stats.rejected;
        totals.crashes += stats.crashes;
        totals.partitions += stats.partitions;
        totals.snapshots_installed += stats.snapshots_installed;
        totals.reads_ok += stats.reads_ok;
        totals.leaders += stats.leaders;
        totals.proposed += stats.proposed;
        totals.dropped += stats.dropped;
        totals.reads_failed += stats.reads_failed;
        totals.delivered += stats.delivered;
        totals.lost += stats.lost;
        totals.final_index += stats.final_index;
    }
    eprintln!("{voters} voters, shard {shard}/{shards}: {totals:?}");
    // The runs must exercise what they claim to: faults happened, commands (valid and
    // invalid) were acknowledged, snapshots were sent, reads were served.
    if count / shards >= 20 {
        assert!(totals.crashes > 0, "{totals:?}");
        assert!(totals.partitions > 0, "{totals:?}");
        assert!(
            totals.acknowledged > totals.rejected && totals.rejected > 0,
            "{totals:?}"
        );
        assert!(totals.snapshots_installed > 0, "{totals:?}");
        assert!(totals.reads_ok > 0, "{totals:?}");
        assert!(totals.leaders > count / shards, "{totals:?}");
    }
}

#[test]
fn chaos_three_masters_shard_0() {
    chaos_shard(3, 160, 0, 2);
}

#[test]
fn chaos_three_masters_shard_1() {
    chaos_shard(3, 160, 1, 2);
}

#[test]
fn chaos_five_masters_shard_0() {
    chaos_shard(5, 80, 0, 2);
}

#[test]
fn chaos_five_masters_shard_1() {
    chaos_shard(5, 80, 1, 2);
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let a = run_chaos(42, SimConfig::with_voters(3)).unwrap();
    let b = run_chaos(42, SimConfig::with_voters(3)).unwrap();
    assert_eq!(a, b);
    let c = run_chaos(43, SimConfig::with_voters(3)).unwrap();
    assert_ne!(a, c);
}

#[test]
fn an_isolated_leader_steps_down_and_rejoins_without_disrupting() {
    let mut sim = Sim::new(7, SimConfig::with_voters(3)).unwrap();
    sim.run_until(500, |s| s.leader().is_some()).unwrap();
    let old = sim.leader().unwrap();
    let old_term = sim.node(old).unwrap().term();
    sim.isolate(old);
    // Check-quorum: the isolated leader steps down; the others elect a new one.
    sim.run_until(500, |s| {
        !s.node(old).unwrap().is_leader() && s.leader().is_some_and(|l| l != old)
    })
    .unwrap();
    let new = sim.leader().unwrap();
    let new_term = sim.node(new).unwrap().term();
    assert!(new_term > old_term);
    // Pre-vote: while cut off, the old leader cannot raise its term by campaigning.
    sim.run_rounds(100).unwrap();
    assert_eq!(sim.node(old).unwrap().term(), old_term);
    sim.set_faults(false);
    let token = sim.propose_command(&register(1)).unwrap();
    sim.run_until(500, |s| s.answer(token).is_some() && s.converged())
        .unwrap();
    assert_eq!(
        sim.leader(),
        Some(new),
        "the rejoining master did not depose the leader"
    );
    assert!(matches!(sim.answer(token), Some(Ok(Ok(_)))));
    sim.heal_and_check().unwrap();
}

#[test]
fn membership_add_a_learner_promote_it_and_remove_a_master() {
    let mut sim = Sim::new(11, SimConfig::with_voters(3)).unwrap();
    sim.run_until(500, |s| s.leader().is_some()).unwrap();
    // Enough commands that the log is compacted: the newcomer needs a snapshot.
    for n in 0..60 {
        sim.propose_command(&register(n)).unwrap();
        sim.round(false).unwrap();
    }
    sim.add_empty_master(4).unwrap();
    let add = sim
        .propose_membership(MembershipChange::to_conf_change(
            &[MembershipChange::AddLearner(4)],
            b"10.0.0.4:7000".to_vec(),
        ))
        .unwrap();
    sim.run_until(500, |s| s.membership_result(add).is_some())
        .unwrap();
    let cs = sim.membership_result(add).unwrap().clone().unwrap();
    assert_eq!(
        (cs.voters.clone(), cs.learners.clone()),
        (vec![1, 2, 3], vec![4])
    );
    sim.run_until(1_000, |s| {
        s.node(4)
            .is_some_and(|n| n.applied_index() >= 60 && n.state().agents().len() == 60)
    })
    .unwrap();

    let promote = sim
        .propose_membership(MembershipChange::to_conf_change(
            &[MembershipChange::AddVoter(4)],
            Vec::new(),
        ))
        .unwrap();
    sim.run_until(500, |s| s.membership_result(promote).is_some())
        .unwrap();
    let cs = sim.membership_result(promote).unwrap().clone().unwrap();
    assert_eq!(
        (cs.voters.clone(), cs.learners.clone()),
        (vec![1, 2, 3, 4], vec![])
    );

    // Remove a follower: it reports removed_self and stops.
    let leader = sim.leader().unwrap();
    let victim = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let remove = sim
        .propose_membership(MembershipChange::to_conf_change(
            &[MembershipChange::Remove(victim)],
            Vec::new(),
        ))
        .unwrap();
    sim.run_until(500, |s| {
        s.membership_result(remove).is_some() && s.is_removed(victim)
    })
    .unwrap();
    assert!(sim.node(victim).is_none());
    let cs = sim.membership_result(remove).unwrap().clone().unwrap();
    assert!(!cs.voters.contains(&victim) && cs.voters.len() == 3);

    // A change while another is pending is refused, not silently lost.
    let first = sim
        .propose_membership(MembershipChange::to_conf_change(
            &[MembershipChange::AddLearner(9)],
            Vec::new(),
        ))
        .unwrap();
    let second = sim
        .propose_membership(MembershipChange::to_conf_change(
            &[MembershipChange::AddLearner(10)],
            Vec::new(),
        ))
        .unwrap();
    sim.run_until(500, |s| {
        s.membership_result(first).is_some() && s.membership_result(second).is_some()
    })
    .unwrap();
    assert!(sim.membership_result(first).unwrap().is_ok());
    // ... as retryable (an operator's client sends it again), and it then goes through.
    assert_eq!(
        sim.membership_result(second).unwrap(),
        &Err(ProposeError::ConfChangePending.to_string())
    );
    let again = sim
        .propose_membership(MembershipChange::to_conf_change(
            &[MembershipChange::AddLearner(10)],
            Vec::new(),
        ))
        .unwrap();
    sim.run_until(500, |s| s.membership_result(again).is_some())
        .unwrap();
    let cs = sim.membership_result(again).unwrap().clone().unwrap();
    assert_eq!(cs.learners, vec![9, 10]);
    sim.heal_and_check().unwrap();
}

/// Issue 17: a leader failover in the middle of a plan loses no reservation. The plan is in
/// the replicated state: the new leader holds the same reservations with the same pieces (it
/// refuses what they leave no room for), and the reservations' closing is judged alike on
/// every master, the crashed one included once it is back.
#[test]
fn a_leader_failover_in_the_middle_of_a_plan_loses_no_reservation() {
    let reserve = |name: &str, at_ms: u64| Command::CreateReservation {
        name: name.to_string(),
        principal: "alice".to_string(),
        // 8 cpus for the hour from when asked: the whole of one agent.
        expr: fullerene_reservation::parse("window(atom(cpus=4; g=1, h=2, l=1m, w=2h), s=0, f=1h)")
            .unwrap(),
        at_ms,
    };
    let mut sim = Sim::new(17, SimConfig::with_voters(3)).unwrap();
    sim.run_until(500, |s| s.leader().is_some()).unwrap();
    let applied = |sim: &mut Sim, command: &Command| {
        let token = sim.propose_command(command).unwrap();
        sim.run_until(2_000, |s| s.answer(token).is_some() && s.converged())
            .unwrap();
        sim.answer(token)
            .map(|answer| answer.cloned().map_err(ToString::to_string))
    };
    // One 8-cpu agent; `etl` takes all of it for an hour, from minute 1 to 61.
    assert!(matches!(applied(&mut sim, &register(1)), Some(Ok(Ok(_)))));
    assert!(matches!(
        applied(&mut sim, &reserve("etl", 60_000)),
        Some(Ok(Ok(_)))
    ));
    let old = sim.leader().unwrap();
    let before = sim.node(old).unwrap().state().reservations().clone();
    assert!(before.get("etl").is_some());

    sim.crash(old);
    sim.run_until(1_000, |s| s.leader().is_some_and(|l| l != old))
        .unwrap();
    let new = sim.leader().unwrap();
    assert_eq!(*sim.node(new).unwrap().state().reservations(), before);
    // The new leader's plan holds etl's pieces: another hour of the same is refused.
    let refused = applied(&mut sim, &reserve("etl2", 120_000));
    assert!(
        matches!(
            refused,
            Some(Ok(Err(CommandError::ReservationRefused { .. })))
        ),
        "{refused:?}"
    );
    // Its time over, etl is judged (unused: no job ran in it) and forgotten on every master.
    let close = Command::CloseReservations { at_ms: 62 * 60_000 };
    assert!(matches!(applied(&mut sim, &close), Some(Ok(Ok(_)))));
    sim.heal_and_check().unwrap();
    for id in sim.ids() {
        let reservations = sim.node(id).unwrap().state().reservations();
        assert!(reservations.get("etl").is_none(), "master {id}");
        assert_eq!(reservations.closed().len(), 1, "master {id}");
        assert_eq!(reservations.closed()[0].name, "etl");
    }
}
