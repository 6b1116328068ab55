//! Validation, idempotence and snapshot tests of the state machine.

use std::collections::BTreeMap;

use fullerene_proto::messages::{
    AgentState, GroupPlacement, GroupRemoval, StatusReason, StatusUpdate, TaskSpec, TaskState,
};
use fullerene_proto::{AgentId, ResourceVec, Resources};
use fullerene_scheduling::testkit::{res, resources};
use proptest::prelude::*;

use super::*;

fn register_with(agent: &str, resources: &str, executors: &[&str]) -> Command {
    crate::testkit::register_agent(
        agent,
        &format!("{agent}.example"),
        resources,
        executors,
        1_000,
    )
}

fn register(agent: &str, resources: &str) -> Command {
    register_with(agent, resources, &["command", "sleep"])
}

fn reregister(agent: &str, resources: &str, running: Vec<TaskKey>) -> Command {
    Command::ReregisterAgent {
        agent_id: agent.into(),
        hostname: format!("{agent}.example"),
        resources: fullerene_scheduling::testkit::resources(resources),
        attributes: BTreeMap::new(),
        executors: vec!["command".into(), "sleep".into()],
        running,
        at_ms: 9_000,
    }
}

fn subscribe(framework: &str, principal: &str, group: &str) -> Command {
    crate::testkit::subscribe_framework(framework, principal, framework, group, 60_000, 2_000)
}

fn spec(id: &str, resources: &str) -> TaskSpec {
    fullerene_proto::testkit::sleep_task(id, 10, resources, 500)
}

fn launch(framework: &str, principal: &str, agent: &str, tasks: Vec<TaskSpec>) -> Command {
    crate::testkit::launch_tasks(framework, principal, agent, tasks, 3_000)
}

fn status(agent: &str, framework: &str, task: &str, state: TaskState, seq: u64) -> Command {
    Command::UpdateStatus {
        agent_id: agent.into(),
        update: StatusUpdate {
            timestamp_ms: 4_000,
            ..fullerene_proto::testkit::status_update(task, framework, agent, state, seq)
        },
        at_ms: 4_000,
    }
}

fn ack(framework: &str, principal: &str, task: &str, seq: u64) -> Command {
    Command::AcknowledgeStatus {
        framework_id: framework.into(),
        principal: principal.into(),
        acks: vec![Acknowledged {
            task_id: task.into(),
            seq,
        }],
    }
}

fn unreachable(agent: &str, at_ms: u64) -> Command {
    Command::MarkAgentUnreachable {
        agent_id: agent.into(),
        at_ms,
    }
}

fn lost(agent: &str, at_ms: u64) -> Command {
    Command::MarkAgentLost {
        agent_id: agent.into(),
        at_ms,
    }
}

/// Launches `tasks` (id, resources) for f1 (alice) on a1, which must succeed.
fn launch_on_a1(st: &mut ClusterState, tasks: &[(&str, &str)]) {
    let specs = tasks.iter().map(|(id, res)| spec(id, res)).collect();
    st.apply(&launch("f1", "alice", "a1", specs))
        .expect("launch on a1");
}

fn key(framework: &str, task: &str) -> TaskKey {
    TaskKey::new(framework.into(), task.into())
}

/// An empty cluster where the operator placed alice in g1 and bob in g2.
fn grouped_state() -> ClusterState {
    let mut settings = ClusterSettings::default();
    for (principal, group) in [("alice", "g1"), ("bob", "g2")] {
        settings
            .principal_groups
            .insert(principal.to_string(), group.to_string());
    }
    ClusterState::new(settings)
}

/// A cluster with agents a1 (8 cpus), a2 (4 cpus) and frameworks f1 (alice, g1), f2 (bob, g2).
fn cluster() -> ClusterState {
    let mut st = grouped_state();
    for cmd in [
        register("a1", "cpus=8,mem_mib=8192"),
        register("a2", "cpus=4,mem_mib=4096"),
        subscribe("f1", "alice", "g1"),
        subscribe("f2", "bob", "g2"),
    ] {
        st.apply(&cmd).unwrap();
    }
    st
}

/// Applies `cmd`, expecting it to be refused without any change.
fn refused(st: &mut ClusterState, cmd: &Command) -> CommandError {
    let before = st.clone();
    let err = st.apply(cmd).expect_err("command should be refused");
    assert_eq!(*st, before, "a refused command changed the state: {err}");
    err
}

/// Applies `cmd`, expecting success without any change.
fn unchanged(st: &mut ClusterState, cmd: &Command) -> CommandOutcome {
    let before = st.clone();
    let outcome = st.apply(cmd).expect("command should succeed");
    assert_eq!(*st, before, "an idempotent command changed the state");
    outcome
}

#[test]
fn launch_charges_the_agent_the_framework_and_the_deficits() {
    let mut st = cluster();
    let outcome = st
        .apply(&launch(
            "f1",
            "alice",
            "a1",
            vec![spec("t1", "cpus=2,mem_mib=1024"), spec("t2", "cpus=2")],
        ))
        .unwrap();
    assert!(matches!(outcome, CommandOutcome::TasksLaunched { ref tasks, .. } if tasks.len() == 2));
    assert_eq!(st.agent_used(&"a1".into()), res("cpus=4,mem_mib=1024"));
    assert_eq!(st.task(&key("f1", "t1")).unwrap().state, TaskState::Staging);
    let deficits = st.allocation().deficits();
    assert!(
        deficits.deficit_of("g2") > 0.0,
        "g2 is owed after g1 launched"
    );
    assert!(deficits.deficit_of("g1") < 0.0);
    assert_eq!(st.framework_info(&"f1".into()).unwrap().active_tasks, 2);
    assert_eq!(st.agents()[&AgentId::from("a1")].tasks.len(), 2);
}

#[test]
fn an_idle_agent_shows_every_resource_it_has_as_used_zero() {
    let mut st = cluster();
    let names = |r: &Resources| {
        r.iter()
            .map(|(name, _)| name.to_string())
            .collect::<Vec<_>>()
    };
    let idle = st.agent_info(&"a1".into()).expect("a1 is known");
    assert_eq!(names(&idle.used), names(&idle.total), "{idle:?}");
    assert!(
        idle.used.iter().all(|(_, amount)| amount == 0.0),
        "{idle:?}"
    );
    st.apply(&launch("f1", "alice", "a1", vec![spec("t1", "cpus=2")]))
        .unwrap();
    let busy = st.agent_info(&"a1".into()).expect("a1 is known");
    assert_eq!(names(&busy.used), names(&busy.total), "{busy:?}");
    assert_eq!(busy.used.get("cpus"), Some(2.0));
    assert_eq!(busy.used.get("mem_mib"), Some(0.0));
}

#[test]
fn launch_validation_refuses_without_changing_anything() {
    let mut st = cluster();
    st.apply(&launch("f1", "alice", "a2", vec![spec("t1", "cpus=3")]))
        .unwrap();
    st.apply(&register_with("a3", "cpus=4", &["command"]))
        .unwrap();
    let unknown_kind = TaskSpec {
        resources: [("fpgas", 1.0)].into_iter().collect::<Resources>(),
        ..spec("t3", "cpus=1")
    };

    type Check = fn(&CommandError) -> bool;
    let cases: Vec<(Command, Check)> = vec![
        (
            launch("f1", "alice", "a2", vec![spec("t2", "cpus=2")]),
            |e| matches!(e, CommandError::InsufficientResources { .. }),
        ),
        (
            launch("f1", "alice", "a1", vec![spec("t1", "cpus=1")]),
            |e| matches!(e, CommandError::DuplicateTask(_)),
        ),
        (
            launch(
                "f1",
                "alice",
                "a1",
                vec![spec("t9", "cpus=1"), spec("t9", "cpus=1")],
            ),
            |e| matches!(e, CommandError::DuplicateTask(_)),
        ),
        (launch("f1", "alice", "a1", vec![]), |e| {
            matches!(e, CommandError::EmptyBundle)
        }),
        (
            launch("f1", "alice", "nope", vec![spec("t3", "cpus=1")]),
            |e| matches!(e, CommandError::UnknownAgent(_)),
        ),
        (
            launch("f9", "alice", "a1", vec![spec("t3", "cpus=1")]),
            |e| matches!(e, CommandError::UnknownFramework(_)),
        ),
        (launch("f1", "bob", "a1", vec![spec("t3", "cpus=1")]), |e| {
            matches!(e, CommandError::NotFrameworkOwner { .. })
        }),
        (
            launch("f1", "alice", "a1", vec![spec("t3", "cpus=0")]),
            |e| matches!(e, CommandError::InvalidResources(_)),
        ),
        (launch("f1", "alice", "a1", vec![unknown_kind]), |e| {
            matches!(e, CommandError::InvalidResources(_))
        }),
        // The second task does not fit once the first is counted: nothing is launched.
        (
            launch(
                "f1",
                "alice",
                "a1",
                vec![spec("t4", "cpus=6"), spec("t5", "cpus=3")],
            ),
            |e| matches!(e, CommandError::InsufficientResources { .. }),
        ),
        (
            launch("f1", "alice", "a3", vec![spec("t6", "cpus=1")]),
            |e| matches!(e, CommandError::UnknownExecutor { .. }),
        ),
    ];
    for (cmd, check) in cases {
        let err = refused(&mut st, &cmd);
        assert!(check(&err), "unexpected error {err:?}");
    }

    // Not on an unreachable agent, and not on a lost one.
    st.apply(&unreachable("a1", 5_000)).unwrap();
    let err = refused(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec("t7", "cpus=1")]),
    );
    assert!(matches!(
        err,
        CommandError::AgentNotActive {
            state: AgentState::Unreachable,
            ..
        }
    ));
    st.apply(&lost("a1", 6_000)).unwrap();
    let err = refused(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec("t7", "cpus=1")]),
    );
    assert!(matches!(err, CommandError::AgentLost(_)));
}

#[test]
fn overbooking_applies_to_fungible_resources_only() {
    let mut st = grouped_state();
    assert_eq!(
        st.settings().overbooking_allowance,
        0.25,
        "Graphene's default"
    );
    st.apply(&Command::SetOverbookingAllowance { allowance: 0.0 })
        .unwrap();
    st.apply(&register("a1", "cpus=4,net_mbps=100")).unwrap();
    st.apply(&subscribe("f1", "alice", "g1")).unwrap();
    let over_net = launch("f1", "alice", "a1", vec![spec("t1", "cpus=1,net_mbps=110")]);
    refused(&mut st, &over_net);
    refused(
        &mut st,
        &Command::SetOverbookingAllowance { allowance: -0.5 },
    );
    st.apply(&Command::SetOverbookingAllowance { allowance: 0.2 })
        .unwrap();
    st.apply(&over_net).unwrap();
    // CPUs are not fungible: never overbooked.
    refused(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec("t2", "cpus=3.5")]),
    );
}

#[test]
fn status_updates_follow_the_task_life_cycle_and_are_idempotent() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);

    let running = status("a1", "f1", "t1", TaskState::Running, 1);
    let outcome = st.apply(&running).unwrap();
    assert!(matches!(outcome, CommandOutcome::StatusRecorded(ref u) if u.seq == 1));
    // The agent retries until acknowledged: a duplicate changes nothing and succeeds.
    assert_eq!(unchanged(&mut st, &running), CommandOutcome::Unchanged);
    // An older update arriving late is a duplicate too.
    unchanged(&mut st, &status("a1", "f1", "t1", TaskState::Staging, 1));
    // RUNNING cannot go back to STAGING.
    let err = refused(&mut st, &status("a1", "f1", "t1", TaskState::Staging, 2));
    assert!(matches!(err, CommandError::BadTransition { .. }));
    // Only the task's agent reports on it, and the update must name its sender.
    let err = refused(&mut st, &status("a2", "f1", "t1", TaskState::Failed, 2));
    assert!(matches!(err, CommandError::TaskOnOtherAgent { .. }));
    let mut forged = status("a2", "f1", "t1", TaskState::Failed, 2);
    if let Command::UpdateStatus { agent_id, .. } = &mut forged {
        *agent_id = "a1".into();
    }
    let err = refused(&mut st, &forged);
    assert!(matches!(err, CommandError::StatusAgentMismatch { .. }));
    let err = refused(&mut st, &status("a1", "f1", "nope", TaskState::Running, 1));
    assert!(matches!(err, CommandError::UnknownTask(_)));

    // Finishing releases the charge and the deficit.
    let finished = status("a1", "f1", "t1", TaskState::Finished, 3);
    st.apply(&finished).unwrap();
    assert_eq!(st.agent_used(&"a1".into()), ResourceVec::ZERO);
    assert!(st.allocation().deficits().deficit_of("g2").abs() < 1e-12);
    assert_eq!(st.framework_info(&"f1".into()).unwrap().active_tasks, 0);
    unchanged(&mut st, &finished);
    // A terminal task never changes, LOST included.
    let err = refused(&mut st, &status("a1", "f1", "t1", TaskState::Lost, 4));
    assert!(matches!(err, CommandError::TerminalTask { .. }));
    let err = refused(&mut st, &status("a1", "f1", "t1", TaskState::Running, 4));
    assert!(matches!(err, CommandError::TerminalTask { .. }));
}

#[test]
fn acknowledging_the_final_update_forgets_the_task() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 1))
        .unwrap();
    let err = refused(&mut st, &ack("f1", "alice", "t1", 2));
    assert!(matches!(err, CommandError::AckBeyondLatest { .. }));
    let err = refused(&mut st, &ack("f1", "bob", "t1", 1));
    assert!(matches!(err, CommandError::NotFrameworkOwner { .. }));
    st.apply(&ack("f1", "alice", "t1", 1)).unwrap();
    assert_eq!(
        unchanged(&mut st, &ack("f1", "alice", "t1", 1)),
        CommandOutcome::Unchanged
    );
    assert_eq!(st.task(&key("f1", "t1")).unwrap().acked_seq, 1);
    st.apply(&status("a1", "f1", "t1", TaskState::Failed, 2))
        .unwrap();
    st.apply(&ack("f1", "alice", "t1", 2)).unwrap();
    assert!(st.task(&key("f1", "t1")).is_none());
    // Its id may be used again once forgotten.
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
}

#[test]
fn a_batch_of_acknowledgements_applies_whole_or_not_at_all() {
    let mut st = cluster();
    launch_on_a1(
        &mut st,
        &[("t1", "cpus=2"), ("t2", "cpus=1"), ("t3", "cpus=1")],
    );
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 1))
        .unwrap();
    st.apply(&status("a1", "f1", "t2", TaskState::Finished, 1))
        .unwrap();
    st.apply(&status("a1", "f1", "t3", TaskState::Running, 1))
        .unwrap();
    let batch = |acks: &[(&str, u64)]| Command::AcknowledgeStatus {
        framework_id: "f1".into(),
        principal: "alice".into(),
        acks: acks
            .iter()
            .map(|(task, seq)| Acknowledged {
                task_id: (*task).into(),
                seq: *seq,
            })
            .collect(),
    };
    // One acknowledgement beyond its task's latest update refuses the batch: nothing changes.
    let err = refused(&mut st, &batch(&[("t1", 1), ("t3", 2)]));
    assert!(matches!(err, CommandError::AckBeyondLatest { .. }));
    assert_eq!(st.task(&key("f1", "t1")).unwrap().acked_seq, 0);
    // A task no longer tracked is passed over; a task named twice keeps its highest; the
    // finished one is forgotten.
    st.apply(&batch(&[
        ("t1", 1),
        ("gone", 4),
        ("t2", 1),
        ("t2", 1),
        ("t3", 1),
        ("t3", 0),
    ]))
    .unwrap();
    assert_eq!(st.task(&key("f1", "t1")).unwrap().acked_seq, 1);
    assert_eq!(st.task(&key("f1", "t3")).unwrap().acked_seq, 1);
    assert!(st.task(&key("f1", "t2")).is_none());
    assert_eq!(
        unchanged(&mut st, &batch(&[("t1", 1), ("t2", 1)])),
        CommandOutcome::Unchanged
    );
}

#[test]
fn a_task_shares_its_ids_with_its_agent_framework_and_indexes() {
    // One copy of each id per task, however many indexes name it: a copy per index cost
    // about 200 bytes per task. So after a launch, and after a snapshot is read.
    fn check(st: &ClusterState) {
        let (key, record) = st.tasks().iter().next().expect("a task");
        let framework = &st.frameworks()[&key.framework_id];
        let agent = &st.agents()[&record.agent_id];
        assert!(Arc::ptr_eq(&key.framework_id.0, &framework.id.0));
        assert!(Arc::ptr_eq(&record.agent_id.0, &agent.id.0));
        assert!(Arc::ptr_eq(&key.task_id.0, &record.spec.id.0));
        let indexed = agent.tasks.iter().next().expect("indexed by its agent");
        assert!(Arc::ptr_eq(&indexed.task_id.0, &record.spec.id.0));
        assert!(Arc::ptr_eq(&indexed.framework_id.0, &framework.id.0));
        let active = framework.active_tasks.iter().next().expect("active");
        assert!(Arc::ptr_eq(&active.0, &record.spec.id.0));
    }
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2"), ("t2", "cpus=1")]);
    check(&st);
    check(&ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap());
    // A finished task kept in the history shares its framework's and agent's ids too.
    st.apply(&status("a1", "f1", "t2", TaskState::Finished, 1))
        .unwrap();
    st.apply(&ack("f1", "alice", "t2", 1)).unwrap();
    let check_finished = |st: &ClusterState| {
        let finished = st.finished_tasks().next().expect("t2 in the history");
        let framework = &st.frameworks()[&finished.framework_id];
        assert!(Arc::ptr_eq(&finished.framework_id.0, &framework.id.0));
        let agent = &st.agents()[&finished.agent_id];
        assert!(Arc::ptr_eq(&finished.agent_id.0, &agent.id.0));
    };
    check_finished(&st);
    check_finished(&ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap());
}

#[test]
fn a_running_task_acknowledged_holds_no_room_for_updates() {
    // Room for updates kept while a task runs would be about half of what the master keeps
    // for it. No copy of the state is taken here: a copy's records are shrunk by cloning.
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 1))
        .unwrap();
    assert_eq!(st.task(&key("f1", "t1")).unwrap().unacked.len(), 1);
    st.apply(&ack("f1", "alice", "t1", 1)).unwrap();
    let running = st.task(&key("f1", "t1")).unwrap();
    assert!(running.unacked.is_empty());
    assert_eq!(running.unacked.capacity(), 0);
}

#[test]
fn updates_are_kept_until_acknowledged_the_latest_of_each_state_in_order() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2"), ("t2", "cpus=1")]);
    let unacked = |st: &ClusterState| -> Vec<(String, TaskState, u64)> {
        st.unacked_updates(&"f1".into())
            .map(|u| (u.task_id.to_string(), u.state, u.seq))
            .collect()
    };
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 1))
        .unwrap();
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 2))
        .unwrap();
    st.apply(&status("a1", "f1", "t1", TaskState::Failed, 3))
        .unwrap();
    assert_eq!(
        unacked(&st),
        [
            ("t1".to_string(), TaskState::Running, 2),
            ("t1".to_string(), TaskState::Failed, 3)
        ]
    );
    st.apply(&ack("f1", "alice", "t1", 2)).unwrap();
    assert_eq!(unacked(&st), [("t1".to_string(), TaskState::Failed, 3)]);
    // The master's own updates are kept too.
    st.apply(&Command::MarkAgentLost {
        agent_id: "a1".into(),
        at_ms: 5_000,
    })
    .unwrap();
    assert_eq!(
        unacked(&st),
        [
            ("t1".to_string(), TaskState::Failed, 3),
            ("t2".to_string(), TaskState::Lost, 1)
        ]
    );
    assert!(st.unacked_updates(&"f2".into()).next().is_none());
    st.apply(&ack("f1", "alice", "t1", 3)).unwrap();
    st.apply(&ack("f1", "alice", "t2", 1)).unwrap();
    assert!(unacked(&st).is_empty());
    assert!(st.tasks().is_empty(), "ended and acknowledged: forgotten");
}

#[test]
fn kills_are_recorded_and_checked_for_ownership() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    let kill = Command::KillTask {
        framework_id: "f1".into(),
        principal: "alice".into(),
        task_id: "t1".into(),
        at_ms: 5_000,
    };
    let outcome = st.apply(&kill).unwrap();
    assert!(
        matches!(outcome, CommandOutcome::KillRequested(ref k) if k.agent_id.as_str() == "a1" && k.grace_ms == 500)
    );
    assert!(st.task(&key("f1", "t1")).unwrap().kill_requested);
    // Repeating it changes nothing but still says what to send.
    let before = st.clone();
    assert!(matches!(
        st.apply(&kill).unwrap(),
        CommandOutcome::KillRequested(_)
    ));
    assert_eq!(st, before);
    let err = refused(
        &mut st,
        &Command::KillTask {
            framework_id: "f1".into(),
            principal: "bob".into(),
            task_id: "t1".into(),
            at_ms: 5_000,
        },
    );
    assert!(matches!(err, CommandError::NotFrameworkOwner { .. }));
    st.apply(&status("a1", "f1", "t1", TaskState::Killed, 1))
        .unwrap();
    let err = refused(&mut st, &kill);
    assert!(matches!(err, CommandError::TerminalTask { .. }));
}

fn drain(agent: &str, deadline_ms: Option<u64>, at_ms: u64) -> Command {
    Command::DrainAgent {
        agent_id: agent.into(),
        deadline_ms,
        at_ms,
    }
}

#[test]
fn a_drained_agent_takes_no_launch_and_is_drained_once_its_tasks_end() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=1")]);
    assert!(st.agents().get(&"a1".into()).unwrap().takes_new_tasks());
    st.apply(&drain("a1", Some(60_000), 1_000)).unwrap();
    let entry = st.agents().get(&"a1".into()).unwrap();
    assert!(
        !entry.takes_new_tasks() && !entry.drained(),
        "draining, t1 runs"
    );
    let info = st.agent_info(&"a1".into()).unwrap().drain.unwrap();
    assert_eq!(
        (info.since_ms, info.deadline_ms, info.drained),
        (1_000, Some(60_000), false)
    );
    // The same drain again changes nothing; a new deadline moves it, not its start.
    unchanged(&mut st, &drain("a1", Some(60_000), 2_000));
    st.apply(&drain("a1", None, 3_000)).unwrap();
    let moved = st
        .agents()
        .get(&"a1".into())
        .unwrap()
        .drain
        .clone()
        .unwrap();
    assert_eq!((moved.since_ms, moved.deadline_ms), (1_000, None));

    let err = refused(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec("t2", "cpus=1")]),
    );
    assert_eq!(err, CommandError::AgentDraining("a1".into()));
    st.apply(&status("a1", "f1", "t1", TaskState::Finished, 1))
        .unwrap();
    assert!(st.agents().get(&"a1".into()).unwrap().drained());
    assert!(st.agent_info(&"a1".into()).unwrap().drain.unwrap().drained);

    // The drain is replicated state: a snapshot carries it.
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert!(restored.agents().get(&"a1".into()).unwrap().drained());

    st.apply(&Command::UndrainAgent {
        agent_id: "a1".into(),
    })
    .unwrap();
    assert!(st.agents().get(&"a1".into()).unwrap().takes_new_tasks());
    st.apply(&launch("f1", "alice", "a1", vec![spec("t2", "cpus=1")]))
        .unwrap();
    unchanged(
        &mut st,
        &Command::UndrainAgent {
            agent_id: "a1".into(),
        },
    );
    let err = refused(&mut st, &drain("nobody", None, 0));
    assert_eq!(err, CommandError::UnknownAgent("nobody".into()));
}

#[test]
fn operator_kills_need_no_owner_and_refuse_ended_or_unknown_tasks_as_a_whole() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=1"), ("t2", "cpus=1")]);
    let kill = |keys: &[&str]| Command::KillTasks {
        tasks: keys.iter().map(|t| key("f1", t)).collect(),
        at_ms: 5_000,
    };
    st.apply(&status("a1", "f1", "t2", TaskState::Failed, 1))
        .unwrap();
    // One ended task refuses the whole kill, and nothing is marked.
    let err = refused(&mut st, &kill(&["t1", "t2"]));
    assert!(matches!(err, CommandError::TerminalTask { .. }));
    assert!(!st.task(&key("f1", "t1")).unwrap().kill_requested);
    let err = refused(&mut st, &kill(&["t9"]));
    assert!(matches!(err, CommandError::UnknownTask(_)));
    assert!(matches!(
        refused(&mut st, &kill(&[])),
        CommandError::EmptyBundle
    ));
    match st.apply(&kill(&["t1"])).unwrap() {
        CommandOutcome::KillsRequested(kills) => {
            assert_eq!(kills.len(), 1);
            assert_eq!((kills[0].agent_id.as_str(), kills[0].grace_ms), ("a1", 500));
        }
        other => panic!("not a kill: {other:?}"),
    }
    assert!(st.task(&key("f1", "t1")).unwrap().kill_requested);
}

#[test]
fn a_lost_agent_loses_its_tasks_and_must_kill_them_when_it_returns() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2"), ("t2", "cpus=1")]);
    st.apply(&launch("f2", "bob", "a2", vec![spec("u1", "cpus=1")]))
        .unwrap();
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 1))
        .unwrap();

    let outcome = st.apply(&lost("a1", 7_000)).unwrap();
    let CommandOutcome::TasksEnded { updates, kill } = outcome else {
        panic!("expected TasksEnded");
    };
    assert_eq!(updates.len(), 2);
    assert_eq!(kill.len(), 2);
    let t1 = updates.iter().find(|u| u.task_id.as_str() == "t1").unwrap();
    assert_eq!((t1.state, t1.seq), (TaskState::Lost, 2));
    assert_eq!(t1.reason, Some(StatusReason::AgentLost));
    assert_eq!(st.agents()[&AgentId::from("a1")].state, AgentState::Lost);
    assert_eq!(st.agent_used(&"a1".into()), ResourceVec::ZERO);
    assert!(st.allocation().agent_by_id(&"a1".into()).is_none());
    // Only f2's task is held now.
    assert!(st.allocation().deficits().deficit_of("g1") > 0.0);
    // Marking it lost again changes nothing; an unreachable mark is refused.
    unchanged(&mut st, &lost("a1", 8_000));
    refused(&mut st, &unreachable("a1", 8_000));
    // The agent's late update about a LOST task is refused: a terminal task never changes.
    let err = refused(&mut st, &status("a1", "f1", "t1", TaskState::Finished, 3));
    assert!(matches!(err, CommandError::TerminalTask { .. }));
    // A first registration of a known id is refused: it must re-register.
    refused(&mut st, &register("a1", "cpus=8"));

    // It comes back still running t1 and a task nobody knows: it must kill both.
    let outcome = st
        .apply(&reregister(
            "a1",
            "cpus=8,mem_mib=8192",
            vec![key("f1", "t1"), key("f1", "ghost")],
        ))
        .unwrap();
    let CommandOutcome::AgentRegistered { kill, updates } = outcome else {
        panic!("expected AgentRegistered");
    };
    assert_eq!(kill.len(), 2);
    assert_eq!(kill[0].grace_ms, 500);
    assert!(updates.is_empty());
    assert_eq!(st.agents()[&AgentId::from("a1")].state, AgentState::Active);
    assert!(st.allocation().agent_by_id(&"a1".into()).is_some());
    launch_on_a1(&mut st, &[("t3", "cpus=8")]);
}

#[test]
fn reregistration_loses_tasks_the_agent_no_longer_runs() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2"), ("t2", "cpus=1")]);
    let outcome = st
        .apply(&reregister(
            "a1",
            "cpus=8,mem_mib=8192",
            vec![key("f1", "t1")],
        ))
        .unwrap();
    let CommandOutcome::AgentRegistered { kill, updates } = outcome else {
        panic!("expected AgentRegistered");
    };
    assert!(kill.is_empty());
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].task_id.as_str(), "t2");
    assert_eq!(updates[0].state, TaskState::Lost);
    assert_eq!(st.agent_used(&"a1".into()), res("cpus=2"));
    assert_eq!(st.task(&key("f1", "t1")).unwrap().state, TaskState::Staging);
}

#[test]
fn capacity_changes_keep_running_tasks_charged() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2"), ("t2", "cpus=3")]);
    st.apply(&Command::UpdateAgentResources {
        agent_id: "a1".into(),
        resources: resources("cpus=16,mem_mib=8192"),
        at_ms: 5_000,
    })
    .unwrap();
    assert_eq!(st.agent_used(&"a1".into()), res("cpus=5"));
    assert_eq!(
        st.agents()[&AgentId::from("a1")].total,
        res("cpus=16,mem_mib=8192")
    );
    assert_eq!(
        st.allocation()
            .agent_by_id(&"a1".into())
            .unwrap()
            .tasks
            .len(),
        2
    );
    // The same totals again: nothing to do.
    unchanged(
        &mut st,
        &Command::UpdateAgentResources {
            agent_id: "a1".into(),
            resources: resources("cpus=16,mem_mib=8192"),
            at_ms: 6_000,
        },
    );
    // Releasing a task after the change still finds its charge.
    st.apply(&status("a1", "f1", "t2", TaskState::Finished, 1))
        .unwrap();
    assert_eq!(st.agent_used(&"a1".into()), res("cpus=2"));
}

#[test]
fn status_sequence_numbers_are_bounded_so_a_bad_agent_cannot_exhaust_them() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    // The last number there is: refused, and the state (and every replica's) unchanged.
    let err = refused(
        &mut st,
        &status("a1", "f1", "t1", TaskState::Running, u64::MAX),
    );
    assert!(
        matches!(
            err,
            CommandError::SeqOutOfRange {
                seq: u64::MAX,
                latest: 0,
                ..
            }
        ),
        "{err}"
    );
    let err = refused(
        &mut st,
        &status("a1", "f1", "t1", TaskState::Running, MAX_STATUS_SEQ_GAP + 1),
    );
    assert!(matches!(err, CommandError::SeqOutOfRange { .. }), "{err}");
    // A gap within the bound is accepted (the master may have used numbers itself).
    st.apply(&status(
        "a1",
        "f1",
        "t1",
        TaskState::Running,
        MAX_STATUS_SEQ_GAP,
    ))
    .unwrap();
    // Whatever the agent did, the master can still number the task's end.
    let outcome = st
        .apply(&Command::MarkAgentLost {
            agent_id: "a1".into(),
            at_ms: 5_000,
        })
        .unwrap();
    let CommandOutcome::TasksEnded { updates, .. } = outcome else {
        panic!("expected TasksEnded");
    };
    assert_eq!(updates[0].seq, MAX_STATUS_SEQ_GAP + 1);
}

#[test]
fn an_agent_back_with_less_capacity_sheds_its_newest_tasks_until_the_rest_fits() {
    let mut st = cluster();
    for (task, cpus, at_ms) in [("t1", 3, 3_000), ("t2", 2, 4_000), ("t3", 2, 5_000)] {
        let mut cmd = launch(
            "f1",
            "alice",
            "a1",
            vec![spec(task, &format!("cpus={cpus}"))],
        );
        if let Command::LaunchTasks { at_ms: at, .. } = &mut cmd {
            *at = at_ms;
        }
        st.apply(&cmd).unwrap();
    }
    assert_eq!(st.agent_used(&"a1".into()), res("cpus=7"));
    // Back with 4 cpus instead of 8: t3 and t2 (the newest) end, t1 stays.
    let outcome = st
        .apply(&reregister(
            "a1",
            "cpus=4,mem_mib=8192",
            vec![key("f1", "t1"), key("f1", "t2"), key("f1", "t3")],
        ))
        .unwrap();
    let CommandOutcome::AgentRegistered { kill, updates } = outcome else {
        panic!("expected AgentRegistered");
    };
    let ended: Vec<&str> = updates.iter().map(|u| u.task_id.as_str()).collect();
    assert_eq!(ended, ["t3", "t2"]);
    assert!(updates
        .iter()
        .all(|u| u.state == TaskState::Lost && u.reason == Some(StatusReason::AgentShrunk)));
    let killed: Vec<&str> = kill.iter().map(|k| k.task.task_id.as_str()).collect();
    assert_eq!(
        killed,
        ["t3", "t2"],
        "the agent still runs them: it must kill them"
    );
    assert_eq!(st.agent_used(&"a1".into()), res("cpus=3"));
    check_accounting(&st);

    // The same through a resource report: down to 2 cpus, t1 goes too.
    let outcome = st
        .apply(&Command::UpdateAgentResources {
            agent_id: "a1".into(),
            resources: resources("cpus=2,mem_mib=8192"),
            at_ms: 6_000,
        })
        .unwrap();
    let CommandOutcome::TasksEnded { updates, kill } = outcome else {
        panic!("expected TasksEnded");
    };
    assert_eq!((updates.len(), kill.len()), (1, 1));
    assert_eq!(updates[0].task_id.as_str(), "t1");
    assert_eq!(st.agent_used(&"a1".into()), ResourceVec::ZERO);
    check_accounting(&st);
}

#[test]
fn a_kill_not_yet_done_is_asked_again_when_the_agent_registers_again() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=1"), ("t2", "cpus=1")]);
    st.apply(&Command::KillTask {
        framework_id: "f1".into(),
        principal: "alice".into(),
        task_id: "t1".into(),
        at_ms: 4_000,
    })
    .unwrap();
    let outcome = st
        .apply(&reregister(
            "a1",
            "cpus=8,mem_mib=8192",
            vec![key("f1", "t1"), key("f1", "t2")],
        ))
        .unwrap();
    let CommandOutcome::AgentRegistered { kill, updates } = outcome else {
        panic!("expected AgentRegistered");
    };
    let killed: Vec<&str> = kill.iter().map(|k| k.task.task_id.as_str()).collect();
    assert_eq!(killed, ["t1"]);
    assert!(updates.is_empty());
    assert_eq!(st.task(&key("f1", "t1")).unwrap().state, TaskState::Staging);
}

#[test]
fn unreachable_agents_come_back_with_a_heartbeat() {
    let mut st = cluster();
    let mark = unreachable("a2", 5_000);
    st.apply(&mark).unwrap();
    unchanged(&mut st, &mark);
    st.apply(&Command::AgentHeartbeat {
        agent_id: "a2".into(),
        at_ms: 6_000,
    })
    .unwrap();
    let agent = &st.agents()[&AgentId::from("a2")];
    assert_eq!(
        (agent.state, agent.last_heartbeat_ms),
        (AgentState::Active, 6_000)
    );
    refused(
        &mut st,
        &Command::AgentHeartbeat {
            agent_id: "zz".into(),
            at_ms: 6_000,
        },
    );
}

#[test]
fn frameworks_fail_over_only_with_their_principal_and_teardown_kills_their_tasks() {
    let mut st = cluster();
    refused(&mut st, &subscribe("f1", "alice", "g1"));
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    let disconnect = Command::DisconnectFramework {
        framework_id: "f1".into(),
        at_ms: 5_000,
    };
    st.apply(&disconnect).unwrap();
    unchanged(&mut st, &disconnect);
    assert!(!st.frameworks()[&"f1".into()].connected);

    let failover = |principal: &str| Command::FailoverFramework {
        framework_id: "f1".into(),
        principal: principal.into(),
        name: "f1-v2".into(),
        failover_timeout_ms: 30_000,
        at_ms: 6_000,
    };
    let err = refused(&mut st, &failover("mallory"));
    assert!(matches!(err, CommandError::NotFrameworkOwner { .. }));
    st.apply(&failover("alice")).unwrap();
    let entry = &st.frameworks()[&"f1".into()];
    assert!(entry.connected && entry.disconnected_at_ms.is_none());
    assert_eq!(entry.name, "f1-v2");

    let err = refused(
        &mut st,
        &Command::TeardownFramework {
            framework_id: "f1".into(),
            principal: Some("bob".into()),
            cause: TeardownCause::OwnRequest,
            at_ms: 7_000,
        },
    );
    assert!(matches!(err, CommandError::NotFrameworkOwner { .. }));
    let outcome = st
        .apply(&Command::TeardownFramework {
            framework_id: "f1".into(),
            principal: None,
            cause: TeardownCause::Operator,
            at_ms: 7_000,
        })
        .unwrap();
    let CommandOutcome::TasksEnded { updates, kill } = outcome else {
        panic!("expected TasksEnded");
    };
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].state, TaskState::Killed);
    assert_eq!(kill[0].agent_id.as_str(), "a1");
    assert_eq!(st.agent_used(&"a1".into()), ResourceVec::ZERO);
    assert!(st.task(&key("f1", "t1")).is_none());
    // The id is a tombstone: no failover, no new subscription, no launch.
    assert!(matches!(
        refused(&mut st, &failover("alice")),
        CommandError::FrameworkTornDown(_)
    ));
    refused(&mut st, &subscribe("f1", "alice", "g1"));
    refused(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec("t2", "cpus=1")]),
    );
    // The agent's report of the kill is about a forgotten task.
    refused(&mut st, &status("a1", "f1", "t1", TaskState::Killed, 2));
}

fn group_of(st: &ClusterState, framework: &str) -> String {
    st.frameworks()[&FrameworkId::from(framework)].group.clone()
}

fn set_group(group: &str, weight: Option<f64>, principals: &[&str]) -> Command {
    Command::SetGroup(GroupPlacement {
        group: group.to_string(),
        weight,
        principals: principals
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
    })
}

#[test]
fn frameworks_join_their_principals_group_and_cannot_choose_another() {
    let mut st = grouped_state();
    st.apply(&subscribe("f1", "alice", "")).unwrap();
    assert_eq!(group_of(&st, "f1"), "g1", "no group asked: the principal's");
    st.apply(&subscribe("f2", "alice", "g1")).unwrap();
    assert_eq!(group_of(&st, "f2"), "g1", "its own group may be named");
    match refused(&mut st, &subscribe("f3", "alice", "g2")) {
        CommandError::GroupNotAssigned {
            principal,
            requested,
            assigned,
        } => assert_eq!(
            (principal.as_str(), requested.as_str(), assigned.as_str()),
            ("alice", "g2", "g1")
        ),
        other => panic!("expected GroupNotAssigned, got {other:?}"),
    }
    st.apply(&subscribe("f4", "carol", "")).unwrap();
    assert_eq!(group_of(&st, "f4"), DEFAULT_GROUP, "an unmapped principal");
    let error = refused(&mut st, &subscribe("f5", "carol", "g1"));
    assert_eq!(
        error.code(),
        fullerene_proto::messages::ErrorCode::Unauthorized
    );
    assert!(
        error.to_string().contains("fullerene groups set g1"),
        "{error}"
    );

    // The operator moves carol to g2 (a new group, weight 2): her next framework joins it;
    // the one already subscribed keeps its group (deficits are accounted per group).
    st.apply(&set_group("g3", Some(2.0), &["carol"])).unwrap();
    st.apply(&subscribe("f5", "carol", "")).unwrap();
    assert_eq!(group_of(&st, "f5"), "g3");
    assert_eq!(group_of(&st, "f4"), DEFAULT_GROUP);
    assert_eq!(st.settings().group_weights["g3"], 2.0);
    // Moving a principal between groups leaves one placement.
    st.apply(&set_group("g1", None, &["carol"])).unwrap();
    assert_eq!(st.settings().group_of("carol"), "g1");
    assert_eq!(
        st.settings().group_weights.get("g1"),
        Some(&1.0),
        "a new group's weight is recorded"
    );

    // Removing a principal from a group it is not in is refused; removing it again after it
    // left is a retry and changes nothing.
    assert!(matches!(
        refused(
            &mut st,
            &Command::RemoveGroup(GroupRemoval {
                group: "g2".into(),
                principals: vec!["carol".into()]
            })
        ),
        CommandError::InvalidGroup(_)
    ));
    let remove_carol = Command::RemoveGroup(GroupRemoval {
        group: "g1".into(),
        principals: vec!["carol".into()],
    });
    st.apply(&remove_carol).unwrap();
    assert_eq!(st.settings().group_of("carol"), DEFAULT_GROUP);
    assert_eq!(unchanged(&mut st, &remove_carol), CommandOutcome::Unchanged);
    // Removing a whole group sends its principals to the default group.
    st.apply(&Command::RemoveGroup(GroupRemoval {
        group: "g1".into(),
        principals: vec![],
    }))
    .unwrap();
    assert_eq!(st.settings().group_of("alice"), DEFAULT_GROUP);
    assert!(!st.settings().group_weights.contains_key("g1"));
    assert_eq!(
        group_of(&st, "f1"),
        "g1",
        "subscribed frameworks keep their group"
    );

    // Bad requests: empty names, too many principals at once.
    for bad in [
        set_group("", None, &["x"]),
        set_group("g", None, &[""]),
        Command::SetGroup(GroupPlacement {
            group: "g".into(),
            weight: None,
            principals: (0..=fullerene_proto::limits::MAX_PAGE_ITEMS)
                .map(|n| format!("p{n}"))
                .collect(),
        }),
        set_group("g", Some(-1.0), &[]),
    ] {
        refused(&mut st, &bad);
    }
    // The mapping survives a snapshot.
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
}

#[test]
fn the_number_of_groups_is_bounded() {
    let mut st = ClusterState::default();
    for n in 0..MAX_GROUPS {
        st.apply(&Command::SetGroupWeight {
            group: format!("g{n}"),
            weight: 1.0,
        })
        .unwrap();
    }
    assert!(matches!(
        refused(&mut st, &set_group("one-more", None, &["p"])),
        CommandError::TooManyGroups { .. }
    ));
    assert!(matches!(
        refused(
            &mut st,
            &Command::SetGroupWeight {
                group: "one-more".into(),
                weight: 1.0
            }
        ),
        CommandError::TooManyGroups { .. }
    ));
    // A known group can still be changed, and frameworks join known groups.
    st.apply(&set_group("g7", Some(3.0), &["alice"])).unwrap();
    st.apply(&subscribe("f1", "alice", "")).unwrap();
    // An unmapped principal's frameworks would create the default group: refused too.
    assert!(matches!(
        refused(&mut st, &subscribe("f2", "bob", "")),
        CommandError::TooManyGroups { .. }
    ));
}

#[test]
fn quotas_bound_frameworks_per_principal_and_tasks_per_framework() {
    let mut st = grouped_state();
    st.apply(&register("a1", "cpus=64,mem_mib=65536")).unwrap();
    let quotas = fullerene_proto::messages::Quotas {
        frameworks_per_principal: 2,
        tasks_per_framework: 3,
        pending_offers_per_framework: 1,
    };
    st.apply(&Command::SetQuotas(quotas)).unwrap();
    assert_eq!(st.settings().quotas, quotas);
    assert_eq!(
        unchanged(&mut st, &Command::SetQuotas(quotas)),
        CommandOutcome::Unchanged
    );

    st.apply(&subscribe("f1", "alice", "")).unwrap();
    st.apply(&subscribe("f2", "alice", "")).unwrap();
    let error = refused(&mut st, &subscribe("f3", "alice", ""));
    assert!(matches!(error, CommandError::QuotaExceeded(_)), "{error:?}");
    assert_eq!(
        error.code(),
        fullerene_proto::messages::ErrorCode::QuotaExceeded
    );
    assert!(
        error.to_string().contains("frameworks per principal"),
        "{error}"
    );
    // Another principal has its own count.
    st.apply(&subscribe("f4", "bob", "")).unwrap();
    // A torn-down framework no longer counts, also after a snapshot (the count is an index
    // rebuilt from the frameworks, tombstones left out).
    st.apply(&Command::TeardownFramework {
        framework_id: "f2".into(),
        principal: None,
        cause: TeardownCause::FailoverTimeout,
        at_ms: 5_000,
    })
    .unwrap();
    let mut st = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    st.apply(&subscribe("f3", "alice", "")).unwrap();
    refused(&mut st, &subscribe("f5", "alice", ""));

    // Tasks per framework counts live tasks, the bundle included.
    st.apply(&launch(
        "f1",
        "alice",
        "a1",
        vec![spec("t1", "cpus=1"), spec("t2", "cpus=1")],
    ))
    .unwrap();
    let error = refused(
        &mut st,
        &launch(
            "f1",
            "alice",
            "a1",
            vec![spec("t3", "cpus=1"), spec("t4", "cpus=1")],
        ),
    );
    assert!(error.to_string().contains("tasks per framework"), "{error}");
    st.apply(&launch("f1", "alice", "a1", vec![spec("t3", "cpus=1")]))
        .unwrap();
    // An ended task frees its place.
    st.apply(&status("a1", "f1", "t1", TaskState::Finished, 1))
        .unwrap();
    st.apply(&launch("f1", "alice", "a1", vec![spec("t4", "cpus=1")]))
        .unwrap();

    // A quota of zero would stop the cluster: refused.
    for zero in [
        fullerene_proto::messages::Quotas {
            frameworks_per_principal: 0,
            ..quotas
        },
        fullerene_proto::messages::Quotas {
            tasks_per_framework: 0,
            ..quotas
        },
        fullerene_proto::messages::Quotas {
            pending_offers_per_framework: 0,
            ..quotas
        },
    ] {
        assert!(matches!(
            refused(&mut st, &Command::SetQuotas(zero)),
            CommandError::InvalidQuota(_)
        ));
    }
}

#[test]
fn group_weights_are_validated_and_shift_the_shares() {
    let mut st = cluster();
    refused(
        &mut st,
        &Command::SetGroupWeight {
            group: "g1".into(),
            weight: f64::NAN,
        },
    );
    st.apply(&Command::SetGroupWeight {
        group: "g1".into(),
        weight: 3.0,
    })
    .unwrap();
    let deficits = st.allocation().deficits();
    let g1 = deficits.find("g1").unwrap();
    assert!((deficits.share(g1) - 0.75).abs() < 1e-12);
    assert_eq!(st.settings().group_weights["g1"], 3.0);
}

#[test]
fn snapshots_round_trip_and_reject_damage() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2"), ("t2", "cpus=1")]);
    st.apply(&status("a1", "f1", "t1", TaskState::Running, 1))
        .unwrap();
    let bytes = st.encode_snapshot().unwrap();
    let decoded = ClusterState::decode_snapshot(&bytes).unwrap();
    assert_eq!(decoded, st);

    // Every strict prefix is refused (truncation), as is any extra byte.
    for cut in [0, 1, 4, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            ClusterState::decode_snapshot(&bytes[..cut]).is_err(),
            "prefix of {cut} bytes accepted"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        ClusterState::decode_snapshot(&longer),
        Err(SnapshotError::TrailingBytes(1))
    ));
    // A garbled length or version byte is refused.
    let mut garbled = bytes.clone();
    garbled[4] ^= 0xff;
    assert!(ClusterState::decode_snapshot(&garbled).is_err());
    let mut huge = bytes.clone();
    huge[0] = 0xff;
    assert!(matches!(
        ClusterState::decode_snapshot(&huge),
        Err(SnapshotError::FrameTooLarge { .. })
    ));
}

/// Task ids are unique within a framework only: agents key tasks by framework and id, so two
/// frameworks may run tasks with one id on one agent at once, each its own task.
#[test]
fn two_frameworks_may_run_one_task_id_on_one_agent() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=1")]);
    st.apply(&launch("f2", "bob", "a1", vec![spec("t1", "cpus=1")]))
        .unwrap();
    let on_a1: Vec<String> = st
        .tasks()
        .iter()
        .filter(|(_, t)| t.agent_id.as_str() == "a1")
        .map(|(key, _)| key.to_string())
        .collect();
    assert_eq!(on_a1, vec!["f1/t1".to_string(), "f2/t1".to_string()]);
    // Within one framework the id stays unique.
    let refused = st.apply(&launch("f2", "bob", "a2", vec![spec("t1", "cpus=1")]));
    assert!(
        matches!(refused, Err(CommandError::DuplicateTask(_))),
        "{refused:?}"
    );
}

/// The allocation accounting grows with the cluster; past the codec's 4 MiB message limit it
/// is split into parts, so a large cluster still snapshots (and restores exactly).
#[test]
fn a_snapshot_larger_than_one_message_round_trips() {
    let mut st = ClusterState::new(ClusterSettings::default());
    let mut agents = 0;
    loop {
        st.apply(&register(
            &format!("agent-{agents:06}"),
            "cpus=16,mem_mib=65536",
        ))
        .unwrap();
        agents += 1;
        if agents % 5_000 == 0 {
            let allocation = fullerene_proto::codec::encode_large(st.allocation()).unwrap();
            if allocation.len() > fullerene_proto::codec::MAX_MESSAGE_BYTES + (1 << 20) {
                break;
            }
        }
    }
    let bytes = st.encode_snapshot().unwrap();
    let decoded = ClusterState::decode_snapshot(&bytes).unwrap();
    assert_eq!(decoded, st);
    // Cutting out one of the middle parts is refused, not read as a smaller cluster.
    assert!(ClusterState::decode_snapshot(&bytes[..bytes.len() / 2]).is_err());
}

/// A task `id` whose environment makes its encoding `bytes` long (within a few bytes).
fn task_of_size(id: &str, bytes: usize) -> TaskSpec {
    let mut spec = fullerene_proto::testkit::command_task(id, "true", &[], "cpus=0.1", 500);
    let base = fullerene_proto::codec::encoded_size(&spec).unwrap();
    if let fullerene_proto::messages::Executor::Command(command) = &mut spec.executor {
        // One byte of key, a two- or three-byte length, and the value.
        command
            .env
            .insert("X".to_string(), "x".repeat(bytes.saturating_sub(base + 5)));
    }
    spec
}

/// A task whose record is longer than a snapshot frame spans several frames and comes back
/// whole; so do a framework's and an agent's task sets, which are rebuilt, not written.
#[test]
fn a_task_record_larger_than_a_frame_round_trips() {
    use fullerene_proto::limits::MAX_TASK_SPEC_BYTES;
    let mut st = cluster();
    let big = task_of_size("big", MAX_TASK_SPEC_BYTES - 16);
    assert!(fullerene_proto::codec::encoded_size(&big).unwrap() <= MAX_TASK_SPEC_BYTES);
    st.apply(&launch(
        "f1",
        "alice",
        "a1",
        vec![big, spec("small", "cpus=1")],
    ))
    .unwrap();
    st.apply(&status("a1", "f1", "small", TaskState::Finished, 1))
        .unwrap();
    let bytes = st.encode_snapshot().unwrap();
    assert!(bytes.len() > FRAME_BYTES, "the snapshot fits one frame");
    let decoded = ClusterState::decode_snapshot(&bytes).unwrap();
    assert_eq!(decoded, st);
    // Only the live task is in the sets; the finished one is kept until acknowledged.
    assert_eq!(decoded.agents()[&AgentId::from("a1")].tasks.len(), 1);
    assert_eq!(decoded.frameworks()[&"f1".into()].active_tasks.len(), 1);
    assert_eq!(decoded.tasks().len(), 2);
    // A record cut short inside its continuation frames is refused.
    assert!(ClusterState::decode_snapshot(&bytes[..bytes.len() - FRAME_BYTES / 2]).is_err());
}

/// What the protocol's limits refuse at launch, each with an error naming the limit.
#[test]
fn launches_beyond_the_protocol_limits_are_refused() {
    use fullerene_proto::limits::{MAX_ID_BYTES, MAX_TASKS_PER_AGENT, MAX_TASK_SPEC_BYTES};
    let mut st = cluster();
    let long_id = "t".repeat(MAX_ID_BYTES + 1);
    let err = refused(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec(&long_id, "cpus=1")]),
    );
    assert!(matches!(err, CommandError::TooLarge(_)), "{err}");
    assert_eq!(err.code(), fullerene_proto::messages::ErrorCode::TooLarge);
    let huge = task_of_size("huge", MAX_TASK_SPEC_BYTES + 64);
    let err = refused(&mut st, &launch("f1", "alice", "a1", vec![huge]));
    assert!(
        err.to_string().contains(&MAX_TASK_SPEC_BYTES.to_string()),
        "{err}"
    );
    let many: Vec<TaskSpec> = (0..=MAX_TASKS_PER_AGENT)
        .map(|n| spec(&format!("t{n}"), "cpus=0.0001"))
        .collect();
    let err = refused(&mut st, &launch("f1", "alice", "a1", many));
    assert!(
        matches!(
            err,
            CommandError::AgentFull {
                limit: MAX_TASKS_PER_AGENT,
                ..
            }
        ),
        "{err}"
    );
    // At the limit itself the bundle is taken.
    let most: Vec<TaskSpec> = (0..MAX_TASKS_PER_AGENT)
        .map(|n| spec(&format!("t{n}"), "cpus=0.0001"))
        .collect();
    st.apply(&launch("f1", "alice", "a1", most)).unwrap();
    let err = refused(
        &mut st,
        &launch("f2", "bob", "a1", vec![spec("one-more", "cpus=0.0001")]),
    );
    assert!(
        matches!(
            err,
            CommandError::AgentFull {
                running: MAX_TASKS_PER_AGENT,
                ..
            }
        ),
        "{err}"
    );
}

// -------------------------------------------------------------------------------------------
// Property: whatever the command sequence, a refused command changes nothing, accounting stays
// consistent with the task table, and replaying the same sequence gives the same state.
// -------------------------------------------------------------------------------------------

fn arb_command() -> impl Strategy<Value = Command> {
    let agent = prop::sample::select(vec!["a1", "a2", "a3"]);
    let framework = prop::sample::select(vec![("f1", "alice"), ("f2", "bob")]);
    let task = prop::sample::select(vec!["t1", "t2", "t3", "t4"]);
    let state = prop::sample::select(TaskState::ALL.to_vec());
    let cpus = prop::sample::select(vec![0.0, 0.5, 1.0, 2.0, 5.0]);
    prop_oneof![
        (agent.clone(), 1u32..8).prop_map(|(a, c)| register(a, &format!("cpus={c},mem_mib=4096"))),
        (
            agent.clone(),
            1u32..8,
            prop::collection::vec((framework.clone(), task.clone()), 0..3)
        )
            .prop_map(|(a, c, running)| reregister(
                a,
                &format!("cpus={c},mem_mib=4096"),
                running.into_iter().map(|((f, _), t)| key(f, t)).collect()
            )),
        agent.clone().prop_map(|a| lost(a, 5)),
        agent.clone().prop_map(|a| unreachable(a, 5)),
        agent.clone().prop_map(|a| Command::AgentHeartbeat {
            agent_id: a.into(),
            at_ms: 6
        }),
        (agent.clone(), 1u32..8).prop_map(|(a, c)| Command::UpdateAgentResources {
            agent_id: a.into(),
            resources: resources(&format!("cpus={c}")),
            at_ms: 7
        }),
        framework
            .clone()
            .prop_map(|(f, p)| subscribe(f, p, if f == "f1" { "g1" } else { "g2" })),
        framework
            .clone()
            .prop_map(|(f, _)| Command::TeardownFramework {
                framework_id: f.into(),
                principal: None,
                cause: TeardownCause::Operator,
                at_ms: 8
            }),
        (
            framework.clone(),
            agent.clone(),
            prop::collection::vec((task.clone(), cpus), 0..3),
            any::<bool>()
        )
            .prop_map(|((f, p), a, tasks, wrong_principal)| launch(
                f,
                if wrong_principal { "mallory" } else { p },
                a,
                tasks
                    .into_iter()
                    .map(|(t, c)| spec(t, &format!("cpus={c}")))
                    .collect()
            )),
        (
            agent.clone(),
            framework.clone(),
            task.clone(),
            state,
            prop_oneof![0u64..6, Just(u64::MAX), Just(MAX_STATUS_SEQ_GAP + 1)]
        )
            .prop_map(|(a, (f, _), t, s, seq)| status(a, f, t, s, seq)),
        (framework.clone(), task.clone()).prop_map(|((f, p), t)| Command::KillTask {
            framework_id: f.into(),
            principal: p.into(),
            task_id: t.into(),
            at_ms: 9
        }),
        (framework, task, 0u64..4).prop_map(|((f, p), t, seq)| ack(f, p, t, seq)),
    ]
}

/// The allocation accounting must agree with the task table.
fn check_accounting(st: &ClusterState) {
    for (id, agent) in st.agents() {
        let mut used = ResourceVec::ZERO;
        for key in &agent.tasks {
            let task = &st.tasks()[key];
            assert!(!task.state.is_terminal());
            assert_eq!(&task.agent_id, id);
            used += task.demand;
        }
        let charged = st.agent_used(id);
        for (a, b) in used.0.iter().zip(charged.0.iter()) {
            assert!(
                (a - b).abs() < 1e-9,
                "agent {id}: tasks {used} vs charged {charged}"
            );
        }
        if agent.state == AgentState::Lost {
            assert!(agent.tasks.is_empty());
        }
        let allowance = Overbooking(st.settings().overbooking_allowance);
        assert!(
            allowance.admits(&charged, &agent.total),
            "agent {id}: charged {charged} beyond its total {} (allowance {})",
            agent.total,
            allowance.0
        );
    }
    for task in st.tasks().values() {
        let seqs: Vec<u64> = task.unacked.iter().map(|u| u.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1])
                && seqs.iter().all(|&seq| seq > task.acked_seq && seq <= task.seq),
            "unacknowledged updates out of order or already acknowledged: {seqs:?}, acked {}, latest {}",
            task.acked_seq,
            task.seq
        );
        if !task.state.is_terminal() {
            assert!(st.agents()[&task.agent_id]
                .tasks
                .iter()
                .any(|k| k.task_id == task.spec.id));
        }
    }
    let held: f64 = st.allocation().deficits().iter().map(|(_, g)| g.held).sum();
    assert!((held - st.allocation().deficits().total_held()).abs() < 1e-9);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn refused_commands_change_nothing_and_replay_is_deterministic(
        commands in prop::collection::vec(arb_command(), 1..60)
    ) {
        let mut st = grouped_state();
        let mut results = Vec::new();
        for cmd in &commands {
            let before = st.clone();
            let result = st.apply(cmd);
            if result.is_err() || result == Ok(CommandOutcome::Unchanged) {
                prop_assert_eq!(&st, &before, "{:?} -> {:?}", cmd, result);
            }
            check_accounting(&st);
            results.push(result);
        }
        // A second replica, restored from a snapshot halfway, applies the rest alike and
        // derives the same events from it.
        let mut replay = grouped_state();
        let half = commands.len() / 2;
        let mut events_here = Vec::new();
        let mut events_there = Vec::new();
        let mut here = grouped_state();
        for (i, (cmd, result)) in commands.iter().zip(&results).enumerate() {
            if i == half {
                replay = ClusterState::decode_snapshot(&replay.encode_snapshot().unwrap()).unwrap();
            }
            let probe = events::EventProbe::before(&replay, cmd);
            let applied = replay.apply(cmd);
            events_there.push(probe.events(&replay, cmd, &applied));
            prop_assert_eq!(&applied, result);
            let probe = events::EventProbe::before(&here, cmd);
            let applied = here.apply(cmd);
            events_here.push(probe.events(&here, cmd, &applied));
        }
        prop_assert_eq!(&replay, &st);
        prop_assert_eq!(events_here, events_there);
        let decoded = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
        prop_assert_eq!(decoded, st);
    }
}

// ---------------------------------------------------------------------------------------------
// DAG jobs
// ---------------------------------------------------------------------------------------------

fn job_description(job: &str) -> fullerene_proto::jobs::JobDescription {
    use fullerene_proto::jobs::{JobDescription, StageDescription};
    JobDescription {
        job: job.to_string(),
        policy: "graphene".to_string(),
        stages: vec![
            StageDescription {
                stage: 0,
                name: "map".to_string(),
                tasks: 2,
                parents: vec![],
            },
            StageDescription {
                stage: 1,
                name: "reduce".to_string(),
                tasks: 1,
                parents: vec![0],
            },
        ],
        reservation: None,
    }
}

fn describe(framework: &str, principal: &str, job: &str, at_ms: u64) -> Command {
    Command::DescribeJob {
        framework_id: framework.into(),
        principal: principal.into(),
        description: job_description(job),
        at_ms,
    }
}

fn end_job(framework: &str, job: &str, end: fullerene_proto::jobs::JobEnd) -> Command {
    Command::EndJob {
        framework_id: framework.into(),
        principal: "alice".into(),
        job: job.into(),
        end,
        at_ms: 9_000,
    }
}

/// A task of `job`'s stage `stage`.
fn stage_task(id: &str, job: &str, stage: u32) -> TaskSpec {
    TaskSpec {
        origin: Some(fullerene_proto::messages::TaskOrigin {
            job: job.to_string(),
            stage,
            index: 0,
            attempt: 0,
        }),
        ..spec(id, "cpus=1")
    }
}

fn jobs_of(st: &ClusterState, framework: &str) -> Vec<fullerene_proto::jobs::JobInfo> {
    st.frameworks()[&framework.into()].jobs.clone()
}

#[test]
fn described_jobs_count_their_stages_ends_and_record_how_they_ended() {
    use fullerene_proto::jobs::{JobEnd, StageEnds};
    let mut st = cluster();
    st.apply(&describe("f1", "alice", "q1", 2_500)).unwrap();
    // Again, the same: no change (a driver re-describes after every reconnection).
    unchanged(&mut st, &describe("f1", "alice", "q1", 2_600));
    // Only the owner describes, and only a DAG.
    assert!(matches!(
        refused(&mut st, &describe("f1", "bob", "q2", 2_600)),
        CommandError::NotFrameworkOwner { .. }
    ));
    let mut cyclic = job_description("q2");
    cyclic.stages[0].parents = vec![1];
    let err = refused(
        &mut st,
        &Command::DescribeJob {
            framework_id: "f1".into(),
            principal: "alice".into(),
            description: cyclic,
            at_ms: 2_600,
        },
    );
    assert!(err.to_string().contains("is not a DAG"), "{err}");
    assert_eq!(
        err.code(),
        fullerene_proto::messages::ErrorCode::InvalidRequest
    );

    st.apply(&launch(
        "f1",
        "alice",
        "a1",
        vec![
            stage_task("m0", "q1", 0),
            stage_task("m1", "q1", 0),
            stage_task("other", "not-described", 0),
        ],
    ))
    .unwrap();
    st.apply(&status("a1", "f1", "m0", TaskState::Finished, 1))
        .unwrap();
    st.apply(&status("a1", "f1", "m1", TaskState::Failed, 1))
        .unwrap();
    st.apply(&status("a1", "f1", "other", TaskState::Finished, 1))
        .unwrap();
    // Ends are counted once, when reached: acknowledging (which forgets the record) adds none.
    st.apply(&ack("f1", "alice", "m0", 1)).unwrap();
    let jobs = jobs_of(&st, "f1");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].submitted_at_ms, 2_500);
    assert_eq!(
        jobs[0].stage_ends,
        vec![
            StageEnds {
                finished: 1,
                failed: 1,
                ..StageEnds::default()
            },
            StageEnds::default()
        ]
    );

    st.apply(&end_job("f1", "q1", JobEnd::Finished)).unwrap();
    unchanged(
        &mut st,
        &end_job(
            "f1",
            "q1",
            JobEnd::Failed {
                reason: "late".to_string(),
            },
        ),
    );
    let jobs = jobs_of(&st, "f1");
    assert_eq!(jobs[0].end, Some(JobEnd::Finished));
    assert_eq!(jobs[0].jct_ms(), Some(6_500));
    assert!(matches!(
        refused(&mut st, &end_job("f1", "q9", JobEnd::Finished)),
        CommandError::BadJob(_)
    ));
    // An ended job's name is not reused.
    let err = refused(&mut st, &describe("f1", "alice", "q1", 9_500));
    assert!(err.to_string().contains("already ended"), "{err}");

    // The framework info carries them; a snapshot keeps them.
    assert_eq!(st.framework_info(&"f1".into()).unwrap().jobs, jobs);
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
}

#[test]
fn a_teardown_ends_unended_jobs_by_its_cause_and_keeps_them_in_the_history() {
    use fullerene_proto::jobs::JobEnd;
    let mut st = cluster();
    st.apply(&describe("f1", "alice", "q1", 2_500)).unwrap();
    st.apply(&describe("f2", "bob", "q2", 2_500)).unwrap();
    st.apply(&launch(
        "f1",
        "alice",
        "a1",
        vec![stage_task("m0", "q1", 0)],
    ))
    .unwrap();
    st.apply(&Command::TeardownFramework {
        framework_id: "f1".into(),
        principal: None,
        cause: TeardownCause::Operator,
        at_ms: 8_000,
    })
    .unwrap();
    st.apply(&Command::TeardownFramework {
        framework_id: "f2".into(),
        principal: None,
        cause: TeardownCause::FailoverTimeout,
        at_ms: 8_500,
    })
    .unwrap();
    let killed = &jobs_of(&st, "f1")[0];
    assert!(
        matches!(killed.end, Some(JobEnd::Killed { .. })),
        "{killed:?}"
    );
    assert_eq!(killed.ended_at_ms, Some(8_000));
    // Its running task was killed with the framework, and counted so.
    assert_eq!(killed.stage_ends[0].killed, 1);
    let failed = &jobs_of(&st, "f2")[0];
    assert!(
        matches!(&failed.end, Some(JobEnd::Failed { reason }) if reason.contains("failover timeout")),
        "{failed:?}"
    );
    // The tombstones keep their jobs, across a snapshot, and the index is rebuilt the same.
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
}

#[test]
fn jobs_are_bounded_per_framework_and_across_torn_down_frameworks() {
    use fullerene_proto::jobs::{JobEnd, MAX_JOBS_PER_FRAMEWORK};
    let mut st = cluster();
    for n in 0..MAX_JOBS_PER_FRAMEWORK {
        st.apply(&describe("f1", "alice", &format!("q{n}"), 3_000))
            .unwrap();
    }
    // Full of unended jobs: one more is refused, naming the bound.
    let err = refused(&mut st, &describe("f1", "alice", "one-more", 3_000));
    assert!(err.to_string().contains("have not ended"), "{err}");
    // Once one ended, a new job takes the oldest ended one's place.
    st.apply(&end_job("f1", "q3", JobEnd::Finished)).unwrap();
    st.apply(&describe("f1", "alice", "one-more", 3_000))
        .unwrap();
    let names: Vec<String> = jobs_of(&st, "f1")
        .iter()
        .map(|j| j.description.job.clone())
        .collect();
    assert_eq!(names.len(), MAX_JOBS_PER_FRAMEWORK);
    assert!(!names.contains(&"q3".to_string()), "{names:?}");
    assert_eq!(names.last().map(String::as_str), Some("one-more"));

    // Torn-down frameworks keep their jobs for the last MAX_TORN_DOWN_WITH_JOBS teardowns,
    // the oldest (by teardown time, then id) dropped first. Many principals, as each may have
    // only so many live frameworks.
    let mut st = grouped_state();
    let total = MAX_TORN_DOWN_WITH_JOBS + 2;
    for n in 0..total {
        let framework = format!("fw{n:05}");
        let principal = format!("p{n}");
        st.apply(&subscribe(&framework, &principal, "")).unwrap();
        st.apply(&describe(&framework, &principal, "q", 3_000))
            .unwrap();
        st.apply(&Command::TeardownFramework {
            framework_id: framework.as_str().into(),
            principal: None,
            cause: TeardownCause::Operator,
            at_ms: 10_000 + n as u64,
        })
        .unwrap();
    }
    assert!(jobs_of(&st, "fw00000").is_empty());
    assert!(jobs_of(&st, "fw00001").is_empty());
    assert_eq!(jobs_of(&st, "fw00002").len(), 1);
    assert_eq!(jobs_of(&st, &format!("fw{:05}", total - 1)).len(), 1);
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
}

// -------------------------------------------------------------------------------------------
// The history of finished tasks and the events
// -------------------------------------------------------------------------------------------

/// Runs `task` of f1 on a1 to `end` and has alice acknowledge it, at `at_ms`.
fn finish_on_a1(st: &mut ClusterState, task: &str, end: TaskState, at_ms: u64) {
    st.apply(&launch("f1", "alice", "a1", vec![spec(task, "cpus=1")]))
        .expect("launch");
    st.apply(&Command::UpdateStatus {
        agent_id: "a1".into(),
        update: fullerene_proto::testkit::status_update(task, "f1", "a1", end, 1),
        at_ms,
    })
    .expect("the end");
    st.apply(&ack("f1", "alice", task, 1)).expect("the ack");
}

fn finished_ids(st: &ClusterState) -> Vec<String> {
    st.finished_tasks().map(|t| t.task_id.to_string()).collect()
}

#[test]
fn a_finished_task_is_kept_with_how_it_ended_once_acknowledged() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    st.apply(&status("a1", "f1", "t1", TaskState::Failed, 1))
        .unwrap();
    assert_eq!(st.finished_count(), 0, "not acknowledged yet");
    st.apply(&ack("f1", "alice", "t1", 1)).unwrap();
    assert!(st.task(&key("f1", "t1")).is_none());
    let kept: Vec<&FinishedTaskInfo> = st.finished_tasks().collect();
    assert_eq!(kept.len(), 1);
    let task = kept[0];
    assert_eq!(task.task_id, "t1".into());
    assert_eq!(task.agent_id, "a1".into());
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.launched_at_ms, 3_000);
    assert_eq!(task.ended_at_ms, 4_000);
    assert_eq!(task.resources.get("cpus"), Some(2.0));
    // Its id may be used again; both runs are kept.
    launch_on_a1(&mut st, &[("t1", "cpus=2")]);
    st.apply(&status("a1", "f1", "t1", TaskState::Finished, 1))
        .unwrap();
    st.apply(&ack("f1", "alice", "t1", 1)).unwrap();
    let states: Vec<TaskState> = st.finished_tasks().map(|t| t.state).collect();
    assert_eq!(states, [TaskState::Failed, TaskState::Finished]);
}

#[test]
fn the_history_keeps_the_last_n_per_framework() {
    let mut settings = grouped_state().settings().clone();
    settings.history = HistoryLimits {
        tasks_per_framework: 3,
        window_ms: u64::MAX,
    };
    let mut st = ClusterState::new(settings);
    for cmd in [
        register("a1", "cpus=8,mem_mib=8192"),
        subscribe("f1", "alice", "g1"),
        subscribe("f2", "bob", "g2"),
    ] {
        st.apply(&cmd).unwrap();
    }
    for (i, task) in ["t1", "t2", "t3", "t4", "t5"].into_iter().enumerate() {
        finish_on_a1(&mut st, task, TaskState::Finished, 10_000 + i as u64);
    }
    assert_eq!(finished_ids(&st), ["t3", "t4", "t5"]);
    // Another framework's tasks count apart.
    st.apply(&launch("f2", "bob", "a1", vec![spec("u1", "cpus=1")]))
        .unwrap();
    st.apply(&status("a1", "f2", "u1", TaskState::Killed, 1))
        .unwrap();
    st.apply(&ack("f2", "bob", "u1", 1)).unwrap();
    assert_eq!(finished_ids(&st), ["t3", "t4", "t5", "u1"]);
    let f2 = FrameworkId::from("f2");
    let of_f2: Vec<String> = st
        .finished_tasks_after(Some(&f2), None)
        .map(|t| t.task_id.to_string())
        .collect();
    assert_eq!(of_f2, ["u1"]);
    // Pages resume after an ordinal.
    let t4 = st.finished_tasks().nth(1).unwrap().ordinal;
    let after: Vec<String> = st
        .finished_tasks_after(None, Some(t4))
        .map(|t| t.task_id.to_string())
        .collect();
    assert_eq!(after, ["t5", "u1"]);
}

#[test]
fn the_history_forgets_what_ended_before_the_window_by_the_commands_time() {
    let mut settings = grouped_state().settings().clone();
    settings.history = HistoryLimits {
        tasks_per_framework: 100,
        window_ms: 60_000,
    };
    let mut st = ClusterState::new(settings);
    for cmd in [register("a1", "cpus=8"), subscribe("f1", "alice", "g1")] {
        st.apply(&cmd).unwrap();
    }
    finish_on_a1(&mut st, "old", TaskState::Finished, 10_000);
    finish_on_a1(&mut st, "new", TaskState::Finished, 50_000);
    assert_eq!(finished_ids(&st), ["old", "new"]);
    // A command without a time, or one that changes nothing, moves nothing.
    st.apply(&Command::SetGroupWeight {
        group: "g1".into(),
        weight: 2.0,
    })
    .unwrap();
    st.apply(&unreachable("a1", 20_000)).unwrap();
    unchanged(&mut st, &unreachable("a1", 1_000_000));
    assert_eq!(finished_ids(&st), ["old", "new"]);
    // The next command stamped 70.001 s puts "old" (ended at 10 s) out of the 60 s window.
    st.apply(&Command::AgentHeartbeat {
        agent_id: "a1".into(),
        at_ms: 70_001,
    })
    .unwrap();
    assert_eq!(finished_ids(&st), ["new"]);
    // The history and its pruning survive a snapshot.
    let mut restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
    for state in [&mut st, &mut restored] {
        finish_on_a1(state, "newer", TaskState::Lost, 80_000);
        state
            .apply(&Command::AgentHeartbeat {
                agent_id: "a1".into(),
                at_ms: 110_001,
            })
            .unwrap();
    }
    assert_eq!(finished_ids(&st), ["newer"]);
    assert_eq!(restored, st, "the ordinals go on alike after a restore");
}

#[test]
fn a_torn_down_frameworks_tasks_go_to_the_history() {
    let mut st = cluster();
    launch_on_a1(&mut st, &[("t1", "cpus=1"), ("t2", "cpus=1")]);
    st.apply(&status("a1", "f1", "t2", TaskState::Finished, 1))
        .unwrap();
    st.apply(&Command::TeardownFramework {
        framework_id: "f1".into(),
        principal: None,
        cause: TeardownCause::Operator,
        at_ms: 5_000,
    })
    .unwrap();
    let ended: Vec<(String, TaskState)> = st
        .finished_tasks()
        .map(|t| (t.task_id.to_string(), t.state))
        .collect();
    assert_eq!(
        ended,
        [
            ("t1".to_string(), TaskState::Killed),
            ("t2".to_string(), TaskState::Finished)
        ]
    );
}

/// Applies `cmd` and returns its events, as the Raft driver derives them.
fn events_of(st: &mut ClusterState, cmd: &Command) -> Vec<fullerene_proto::http::ClusterEvent> {
    let probe = events::EventProbe::before(st, cmd);
    let result = st.apply(cmd);
    probe.events(st, cmd, &result)
}

#[test]
fn events_say_what_each_command_did() {
    use fullerene_proto::http::{ClusterEvent as E, TeardownCause};
    let mut st = grouped_state();
    assert_eq!(
        events_of(&mut st, &register("a1", "cpus=8")),
        [E::AgentRegistered {
            agent: "a1".into(),
            hostname: "a1.example".into()
        }]
    );
    assert!(
        events_of(&mut st, &register("a1", "cpus=8")).is_empty(),
        "a refused command has no events"
    );
    assert_eq!(
        events_of(&mut st, &subscribe("f1", "alice", "g1")),
        [E::FrameworkSubscribed {
            framework: "f1".into(),
            name: "f1".into(),
            principal: "alice".into(),
            group: "g1".into()
        }]
    );
    let launched = events_of(
        &mut st,
        &launch("f1", "alice", "a1", vec![spec("t1", "cpus=1")]),
    );
    assert_eq!(
        launched,
        [E::TaskStateChanged {
            framework: "f1".into(),
            task: "t1".into(),
            agent: "a1".into(),
            from: None,
            to: TaskState::Staging,
            reason: None,
            message: String::new()
        }]
    );
    let running = events_of(&mut st, &status("a1", "f1", "t1", TaskState::Running, 1));
    assert!(matches!(
        running.as_slice(),
        [E::TaskStateChanged {
            from: Some(TaskState::Staging),
            to: TaskState::Running,
            ..
        }]
    ));
    assert!(
        events_of(&mut st, &status("a1", "f1", "t1", TaskState::Running, 1)).is_empty(),
        "a repeated update has none"
    );
    assert_eq!(
        events_of(&mut st, &drain("a1", None, 4_500)),
        [E::AgentDraining {
            agent: "a1".into(),
            deadline_ms: None
        }]
    );
    assert_eq!(
        events_of(&mut st, &unreachable("a1", 5_000)),
        [E::AgentUnreachable { agent: "a1".into() }]
    );
    assert!(events_of(&mut st, &unreachable("a1", 5_001)).is_empty());
    assert_eq!(
        events_of(
            &mut st,
            &Command::AgentHeartbeat {
                agent_id: "a1".into(),
                at_ms: 5_500
            }
        ),
        [E::AgentReachable { agent: "a1".into() }]
    );
    // The last task of a draining agent ends: the drain is done.
    let ended = events_of(&mut st, &status("a1", "f1", "t1", TaskState::Finished, 2));
    assert!(
        matches!(
            ended.as_slice(),
            [
                E::TaskStateChanged {
                    from: Some(TaskState::Running),
                    to: TaskState::Finished,
                    ..
                },
                E::AgentDrained { .. }
            ]
        ),
        "{ended:?}"
    );
    assert_eq!(
        events_of(
            &mut st,
            &Command::UndrainAgent {
                agent_id: "a1".into()
            }
        ),
        [E::AgentUndrained { agent: "a1".into() }]
    );
    st.apply(&launch("f1", "alice", "a1", vec![spec("t2", "cpus=1")]))
        .unwrap();
    let lost_events = events_of(&mut st, &lost("a1", 6_000));
    assert!(
        matches!(
            lost_events.as_slice(),
            [
                E::AgentLost { tasks_lost: 1, .. },
                E::TaskStateChanged {
                    from: Some(TaskState::Staging),
                    to: TaskState::Lost,
                    ..
                }
            ]
        ),
        "{lost_events:?}"
    );
    let back = events_of(&mut st, &reregister("a1", "cpus=8", Vec::new()));
    assert!(matches!(
        back.as_slice(),
        [E::AgentReregistered { was_lost: true, .. }]
    ));
    // Teardowns say why: a disconnected framework past its failover timeout, an operator, or
    // the framework itself.
    st.apply(&Command::DisconnectFramework {
        framework_id: "f1".into(),
        at_ms: 7_000,
    })
    .unwrap();
    let timed_out = events_of(
        &mut st.clone(),
        &Command::TeardownFramework {
            framework_id: "f1".into(),
            principal: None,
            cause: TeardownCause::FailoverTimeout,
            at_ms: 7_000 + 60_000,
        },
    );
    assert!(
        matches!(
            timed_out.as_slice(),
            [E::FrameworkTornDown {
                cause: TeardownCause::FailoverTimeout,
                tasks_killed: 0,
                ..
            }]
        ),
        "{timed_out:?}"
    );
    let by_operator = events_of(
        &mut st.clone(),
        &Command::TeardownFramework {
            framework_id: "f1".into(),
            principal: None,
            cause: TeardownCause::Operator,
            at_ms: 8_000,
        },
    );
    assert!(matches!(
        by_operator.as_slice(),
        [E::FrameworkTornDown {
            cause: TeardownCause::Operator,
            ..
        }]
    ));
    let own = events_of(
        &mut st,
        &Command::TeardownFramework {
            framework_id: "f1".into(),
            principal: Some("alice".into()),
            cause: TeardownCause::OwnRequest,
            at_ms: 8_000,
        },
    );
    assert!(matches!(
        own.as_slice(),
        [E::FrameworkTornDown {
            cause: TeardownCause::OwnRequest,
            ..
        }]
    ));
    assert_eq!(
        events_of(
            &mut st,
            &Command::SetGroupWeight {
                group: "g1".into(),
                weight: 3.0
            }
        ),
        [E::GroupWeightChanged {
            group: "g1".into(),
            weight: 3.0
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Reservations (issue 17)
// ---------------------------------------------------------------------------------------------

/// Two bundle-hours of 4-cpu bundles, at most 2 at once, within the hour from when asked.
const TWO_BUNDLE_HOURS: &str = "window(atom(cpus=4,mem_mib=1024; g=1, h=2, l=1m, w=2h), s=0, f=1h)";

fn create_reservation(name: &str, principal: &str, rdl: &str, at_ms: u64) -> Command {
    Command::CreateReservation {
        name: name.into(),
        principal: principal.into(),
        expr: fullerene_reservation::parse(rdl).unwrap(),
        at_ms,
    }
}

/// A cluster of one 8-cpu agent, registered at 1 s: the plan has its capacity from the
/// first whole minute on.
fn cluster_with_plan() -> ClusterState {
    let mut st = ClusterState::new(ClusterSettings::default());
    st.apply(&register("a1", "cpus=8,mem_mib=8192")).unwrap();
    st
}

/// [`cluster_with_plan`] in which alice reserved [`TWO_BUNDLE_HOURS`] as `etl` at one minute.
fn cluster_with_etl() -> ClusterState {
    let mut st = cluster_with_plan();
    st.apply(&create_reservation(
        "etl",
        "alice",
        TWO_BUNDLE_HOURS,
        60_000,
    ))
    .unwrap();
    st
}

#[test]
fn a_reservation_that_fits_is_accepted_and_held_in_the_plan() {
    let st = cluster_with_etl();
    let accepted = st.reservations().get("etl").expect("accepted");
    assert_eq!(accepted.user, "alice");
    // GREE procrastinates: two bundles over the window's last hour, 8 cpus in all.
    let id = accepted.id;
    let last_minute = 60_000 + 59 * 60_000;
    assert_eq!(
        st.reservations()
            .plan()
            .guaranteed_at(id, last_minute)
            .get(fullerene_proto::ResourceKind::Cpus),
        8.0
    );
    assert_eq!(
        st.reservations()
            .accepted()
            .map(|(name, _)| name)
            .collect::<Vec<_>>(),
        vec!["etl"]
    );
}

#[test]
fn a_refused_reservation_leaves_the_plan_unchanged() {
    let mut st = cluster_with_etl();
    let before = st.clone();
    // The hour is full: another two bundle-hours cannot fit.
    let err = refused(
        &mut st,
        &create_reservation("etl2", "bob", TWO_BUNDLE_HOURS, 60_000),
    );
    assert!(
        matches!(&err, CommandError::ReservationRefused { name, refusal: fullerene_reservation::Refusal::NoRoom(_) } if name == "etl2"),
        "{err}"
    );
    assert_eq!(
        err.code(),
        fullerene_proto::messages::ErrorCode::InvalidRequest
    );
    // A name taken, a bad name, and another's reservation are refused alike.
    assert_eq!(
        refused(
            &mut st,
            &create_reservation("etl", "alice", "atom(cpus=1; g=1, h=1, l=1m, w=1m)", 60_000)
        ),
        CommandError::ReservationExists("etl".into())
    );
    assert!(matches!(
        refused(
            &mut st,
            &create_reservation(
                "no space",
                "alice",
                "atom(cpus=1; g=1, h=1, l=1m, w=1m)",
                60_000
            )
        ),
        CommandError::InvalidReservationName(_)
    ));
    assert!(matches!(
        refused(
            &mut st,
            &Command::DeleteReservation {
                name: "etl".into(),
                by: Requester::Principal("bob".into()),
                at_ms: 60_000
            }
        ),
        CommandError::NotReservationOwner { .. }
    ));
    assert_eq!(st, before);
}

#[test]
fn deleting_a_reservation_frees_its_room_and_update_replaces_it() {
    let mut st = cluster_with_etl();
    // Halved, the first leaves room for a one-bundle-hour second.
    let smaller = "window(atom(cpus=4,mem_mib=1024; g=1, h=1, l=1m, w=1h), s=0, f=1h)";
    st.apply(&Command::UpdateReservation {
        name: "etl".into(),
        by: Requester::Principal("alice".into()),
        expr: fullerene_reservation::parse(smaller).unwrap(),
        at_ms: 60_000,
    })
    .unwrap();
    st.apply(&create_reservation("etl2", "bob", smaller, 60_000))
        .unwrap();
    refused(&mut st, &create_reservation("etl3", "bob", smaller, 60_000));
    st.apply(&Command::DeleteReservation {
        name: "etl".into(),
        by: Requester::Principal("alice".into()),
        at_ms: 60_000,
    })
    .unwrap();
    assert!(st.reservations().get("etl").is_none());
    st.apply(&create_reservation("etl3", "bob", smaller, 60_000))
        .unwrap();
}

#[test]
fn the_reservation_plan_survives_a_snapshot_and_follows_agents_lost() {
    let mut st = cluster_with_plan();
    st.apply(&register("a2", "cpus=8,mem_mib=8192")).unwrap();
    // 16 cpus: a reservation with an hour of slack, then one with none.
    let slack = "window(atom(cpus=4,mem_mib=1024; g=1, h=2, l=1m, w=2h), s=0, f=2h)";
    st.apply(&create_reservation("old", "alice", slack, 60_000))
        .unwrap();
    st.apply(&create_reservation(
        "young",
        "bob",
        TWO_BUNDLE_HOURS,
        120_000,
    ))
    .unwrap();
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
    assert!(restored.reservations().get("young").is_some());
    // Losing an agent halves the capacity: the adapter moves the oldest within its slack and
    // rejects the youngest, which stays visible with its reason.
    let lose_a2 = lost("a2", 180_000);
    let probe = events::EventProbe::before(&st, &lose_a2);
    let result = st.apply(&lose_a2);
    let reported = probe.events(&st, &lose_a2, &result);
    assert!(
        reported.contains(&fullerene_proto::http::ClusterEvent::ReservationRejected {
            reservation: "young".into(),
            principal: "bob".into(),
            reason: st.reservations().rejected()[0].reason.clone(),
        }),
        "{reported:?}"
    );
    assert!(st.reservations().get("old").is_some());
    assert!(st.reservations().get("young").is_none());
    let rejected = st.reservations().rejected();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].name, "young");
    assert_eq!(rejected[0].rejected_at_ms, 180_000);
    assert!(
        rejected[0].reason.contains("no room"),
        "{}",
        rejected[0].reason
    );
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
}

#[test]
fn the_reservation_policy_is_checked_and_applies_to_later_admissions() {
    use fullerene_reservation::{PolicyKind, SharingPolicy, UserCaps};
    let mut st = cluster_with_etl();
    let caps = |instantaneous: f64, window_ms: u64| SharingPolicy {
        default_caps: UserCaps {
            instantaneous,
            integral: 1.0,
            window_ms,
        },
        users: Default::default(),
    };
    let set = |sharing: SharingPolicy| Command::SetReservationPolicy {
        placement: PolicyKind::GreeL,
        sharing,
        quantum_ms: 60_000,
    };
    // Out of range: a cap above 1, a window shorter than a quantum. Nothing changes.
    for bad in [caps(1.5, 86_400_000), caps(0.5, 10)] {
        assert!(matches!(
            refused(&mut st, &set(bad)),
            CommandError::InvalidReservationPolicy(_)
        ));
    }
    // Half the cluster at most: etl (8 of 8 cpus) stays, a new 8-cpu hour is refused by the cap.
    st.apply(&set(caps(0.5, 86_400_000))).unwrap();
    assert_eq!(st.reservations().plan().config().policy, PolicyKind::GreeL);
    assert!(st.reservations().get("etl").is_some());
    let err = refused(
        &mut st,
        &create_reservation("later", "bob", TWO_BUNDLE_HOURS, 3 * 3_600_000),
    );
    assert!(
        matches!(
            &err,
            CommandError::ReservationRefused {
                refusal: fullerene_reservation::Refusal::Sharing(_),
                ..
            }
        ),
        "{err}"
    );
    // The quantum changes only in an empty plan, and a refused change changes nothing else.
    let tenths = Command::SetReservationPolicy {
        placement: PolicyKind::Gree,
        sharing: caps(1.0, 60_000),
        quantum_ms: 100,
    };
    let err = refused(&mut st, &tenths);
    assert!(
        matches!(&err, CommandError::InvalidReservationPolicy(m) if m.contains("no reservation")),
        "{err}"
    );
    assert_eq!(st.reservations().plan().config().policy, PolicyKind::GreeL);
    assert_eq!(st.reservations().plan().config().limits.quantum_ms, 60_000);
    st.apply(&Command::DeleteReservation {
        name: "etl".into(),
        by: Requester::Operator("ops".into()),
        at_ms: 0,
    })
    .unwrap();
    st.apply(&tenths).unwrap();
    assert_eq!(st.reservations().plan().config().limits.quantum_ms, 100);
    assert_eq!(st.reservations().plan().config().policy, PolicyKind::Gree);
}

/// [`describe`] of a job that runs in `reservation`.
fn describe_in(framework: &str, principal: &str, job: &str, reservation: &str) -> Command {
    let mut command = describe(framework, principal, job, 70_000);
    if let Command::DescribeJob { description, .. } = &mut command {
        description.reservation = Some(reservation.into());
    }
    command
}

fn end_job_at(framework: &str, principal: &str, job: &str, at_ms: u64) -> Command {
    Command::EndJob {
        framework_id: framework.into(),
        principal: principal.into(),
        job: job.into(),
        end: fullerene_proto::jobs::JobEnd::Finished,
        at_ms,
    }
}

#[test]
fn jobs_run_in_an_accepted_reservation_and_one_naming_another_is_refused_with_its_name() {
    let mut st = cluster_with_etl();
    st.apply(&subscribe("f1", "alice", "default")).unwrap();
    st.apply(&subscribe("f2", "bob", "default")).unwrap();
    let err = refused(&mut st, &describe_in("f1", "alice", "q1", "nightly"));
    assert!(
        matches!(&err, CommandError::BadJob(message) if message.contains("reservation `nightly`")),
        "{err}"
    );
    // Two frameworks' jobs share one reservation.
    st.apply(&describe_in("f1", "alice", "q1", "etl")).unwrap();
    st.apply(&describe_in("f2", "bob", "q2", "etl")).unwrap();
    for framework in ["f1", "f2"] {
        let jobs = jobs_of(&st, framework);
        assert_eq!(jobs[0].description.reservation.as_deref(), Some("etl"));
    }
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);
}

#[test]
fn a_preempted_task_is_killed_and_its_end_names_the_reservation() {
    let mut st = cluster_with_etl();
    st.apply(&subscribe("f2", "bob", "default")).unwrap();
    st.apply(&launch("f2", "bob", "a1", vec![spec("t1", "cpus=2")]))
        .unwrap();
    st.apply(&status("a1", "f2", "t1", TaskState::Running, 1))
        .unwrap();
    let preempt = |tasks: Vec<TaskKey>| Command::PreemptTasks {
        reservation: "etl".into(),
        tasks,
        at_ms: 80_000,
    };
    // A task unknown or already ended is skipped, not a reason to refuse the others.
    let outcome = st
        .apply(&preempt(vec![key("f2", "t1"), key("f2", "gone")]))
        .unwrap();
    match outcome {
        CommandOutcome::KillsRequested(kills) => {
            assert_eq!(kills.len(), 1);
            assert_eq!(kills[0].task, key("f2", "t1"));
        }
        other => panic!("{other:?}"),
    }
    let record = st.task(&key("f2", "t1")).unwrap();
    assert!(record.kill_requested);
    assert_eq!(record.preempted_for.as_deref(), Some("etl"));
    // The agent's KILLED update is recorded, and forwarded, as a preemption.
    let outcome = st
        .apply(&status("a1", "f2", "t1", TaskState::Killed, 2))
        .unwrap();
    let CommandOutcome::StatusRecorded(update) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        update.reason,
        Some(StatusReason::Preempted {
            reservation: "etl".into()
        })
    );
    assert!(
        update
            .message
            .starts_with("preempted for reservation `etl`"),
        "{}",
        update.message
    );
    assert_eq!(st.task(&key("f2", "t1")).unwrap().reason, update.reason);
    assert_eq!(
        st.apply(&preempt(vec![key("f2", "t1")])).unwrap(),
        CommandOutcome::Unchanged
    );
}

/// `etl` ([`TWO_BUNDLE_HOURS`] from one minute) holds the plan's quanta 1 to 61: it ends at
/// 61 minutes.
const ETL_END_MS: u64 = 61 * 60_000;

#[test]
fn a_closed_reservation_is_fulfilled_when_its_jobs_ended_by_its_end_and_late_otherwise() {
    let close = |st: &mut ClusterState, at_ms: u64| {
        st.apply(&Command::CloseReservations { at_ms }).unwrap();
    };
    // Fulfilled: its one job ended a minute before its end.
    let mut st = cluster_with_etl();
    st.apply(&subscribe("f1", "alice", "default")).unwrap();
    st.apply(&describe_in("f1", "alice", "q1", "etl")).unwrap();
    st.apply(&end_job_at("f1", "alice", "q1", ETL_END_MS - 60_000))
        .unwrap();
    // Before its end nothing is judged (the plan only forgets the past).
    close(&mut st, ETL_END_MS - 1);
    assert!(st.reservations().get("etl").is_some());
    assert!(st.reservations().closed().is_empty());
    close(&mut st, ETL_END_MS + 30_000);
    assert!(st.reservations().get("etl").is_none(), "forgotten");
    let closed = &st.reservations().closed()[0];
    assert_eq!(
        (
            closed.name.as_str(),
            closed.end_ms,
            closed.jobs,
            closed.late_jobs
        ),
        ("etl", ETL_END_MS, 1, 0)
    );
    assert_eq!(closed.outcome, ReservationOutcome::Fulfilled);
    assert_eq!(
        (
            st.reservations().fulfilled_total(),
            st.reservations().late_total()
        ),
        (1, 0)
    );
    let restored = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
    assert_eq!(restored, st);

    // Late: of two jobs sharing it, one still ran at its end; and a reservation no job ran in
    // is unused.
    let mut st = cluster_with_etl();
    st.apply(&register("a2", "cpus=8,mem_mib=8192")).unwrap();
    st.apply(&create_reservation(
        "spare",
        "bob",
        "window(atom(cpus=1; g=1, h=1, l=1m, w=1m), s=0, f=1h)",
        60_000,
    ))
    .unwrap();
    st.apply(&subscribe("f1", "alice", "default")).unwrap();
    st.apply(&subscribe("f2", "bob", "default")).unwrap();
    st.apply(&describe_in("f1", "alice", "q1", "etl")).unwrap();
    st.apply(&describe_in("f2", "bob", "q2", "etl")).unwrap();
    st.apply(&end_job_at("f1", "alice", "q1", ETL_END_MS - 60_000))
        .unwrap();
    let closing = Command::CloseReservations {
        at_ms: ETL_END_MS + 30_000,
    };
    let probe = events::EventProbe::before(&st, &closing);
    let result = st.apply(&closing);
    let reported = probe.events(&st, &closing, &result);
    use fullerene_proto::http::ClusterEvent;
    for (reservation, principal, outcome, jobs, late_jobs) in [
        ("etl", "alice", "late", 2, 1),
        ("spare", "bob", "unused", 0, 0),
    ] {
        let event = ClusterEvent::ReservationClosed {
            reservation: reservation.into(),
            principal: principal.into(),
            outcome: outcome.into(),
            jobs,
            late_jobs,
        };
        assert!(reported.contains(&event), "{event:?} not in {reported:?}");
    }
    // What the owners' frameworks are told: each once, with its owner.
    let ended = st.reservations().ended_since(0, 0);
    let told: Vec<(&str, &str, &str)> = ended
        .iter()
        .map(|(owner, notice)| (*owner, notice.name.as_str(), notice.verdict.name()))
        .collect();
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(told.contains(&("alice", "etl", "late")), "{told:?}");
    assert!(told.contains(&("bob", "spare", "unused")), "{told:?}");
    assert_eq!(st.reservations().closed_total(), 2);
    assert!(st.reservations().ended_since(0, 2).is_empty());
    let outcomes: Vec<(&str, ReservationOutcome, u32)> = st
        .reservations()
        .closed()
        .iter()
        .map(|c| (c.name.as_str(), c.outcome, c.late_jobs))
        .collect();
    assert!(
        outcomes.contains(&("etl", ReservationOutcome::Late, 1)),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&("spare", ReservationOutcome::Unused, 0)),
        "{outcomes:?}"
    );
    assert_eq!(
        (
            st.reservations().fulfilled_total(),
            st.reservations().late_total()
        ),
        (0, 1)
    );
    // The name is free again.
    st.apply(&create_reservation(
        "etl",
        "alice",
        "window(atom(cpus=1; g=1, h=1, l=1m, w=1m), s=0, f=1h)",
        ETL_END_MS + 60_000,
    ))
    .unwrap();
}

/// A new leader whose clock is behind the old one's loses an agent "before" the old leader
/// gained it: the plan's time does not go back, so its capacity never goes below zero (found
/// by the whole-system simulation's plan invariant, seed 9).
#[test]
fn an_agent_lost_on_a_clock_behind_its_registration_leaves_the_plan_capacity_whole() {
    let mut st = ClusterState::default();
    let mut at = register("a1", "cpus=8,mem_mib=16384");
    if let Command::RegisterAgent { at_ms, .. } = &mut at {
        *at_ms = 600_000;
    }
    st.apply(&at).unwrap();
    st.apply(&lost("a1", 30_000)).unwrap();
    let plan = st.reservations().plan();
    for (start, end, value) in plan.capacity().runs(0, 1_000) {
        assert!(
            fullerene_proto::ResourceKind::ALL
                .iter()
                .all(|&kind| value[kind] >= 0.0),
            "capacity {value} on quanta [{start}, {end})"
        );
    }
    assert_eq!(plan.capacity().at(1_000), ResourceVec::ZERO);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The live agents' capacity the reservations' plan follows is kept as agents register,
    /// change their resources, are lost and come back: bit for bit the walk of every live
    /// agent it replaced, from the index while every amount is a whole number of 2⁻¹⁰ (cores,
    /// MiB, quarters) and from the walk while an agent with another amount (0.1 of a core) is
    /// live; a state read back from its snapshot holds the same index.
    #[test]
    fn live_capacity_follows_agents_coming_changing_and_lost(
        ops in proptest::collection::vec((0u8..4, 0usize..5, 0usize..4), 1..60),
    ) {
        let totals = [
            "cpus=16,mem_mib=65536",
            "cpus=0.5,mem_mib=1000.25",
            "cpus=8,gpus=2,net_mbps=10000",
            "cpus=0.1,mem_mib=1000.1",
        ];
        let mut st = ClusterState::new(ClusterSettings::default());
        for (step, &(op, agent, total)) in ops.iter().enumerate() {
            let id = format!("a{agent}");
            let at_ms = 10_000 + step as u64;
            let command = match op {
                0 => register(&id, totals[total]),
                1 => reregister(&id, totals[total], Vec::new()),
                2 => Command::UpdateAgentResources {
                    agent_id: id.as_str().into(),
                    resources: resources(totals[total]),
                    at_ms,
                },
                _ => lost(&id, at_ms),
            };
            // Refused commands (an unknown agent, a lost one updated) change nothing.
            let _ = st.apply(&command);
            let live: Vec<&AgentEntry> = st
                .agents()
                .values()
                .filter(|agent| agent.state != AgentState::Lost)
                .collect();
            let walked = live
                .iter()
                .fold(ResourceVec::ZERO, |sum, agent| sum + agent.total);
            prop_assert_eq!(st.reservations().followed_capacity(), walked, "step {}", step);
            let inexact = live.iter().any(|agent| agent.total.0.iter().any(|a| (a * 1024.0).fract() != 0.0));
            match st.live_capacity.total() {
                Some(indexed) => prop_assert_eq!(indexed, walked, "step {}", step),
                None => prop_assert!(inexact, "step {}: the index gave up without cause", step),
            }
        }
        let decoded = ClusterState::decode_snapshot(&st.encode_snapshot().unwrap()).unwrap();
        prop_assert_eq!(decoded.live_capacity, st.live_capacity);
        prop_assert_eq!(decoded, st);
    }
}
