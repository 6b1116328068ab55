use super::*;
use fullerene_proto::time::Time;

/// The clocks `ms` milliseconds after the epoch: the core reads only the wall clock.
fn at(ms: u64) -> Now {
    Now::at(Time::from_millis(ms))
}

fn config() -> CoreConfig {
    CoreConfig::new(
        AgentId::from("agent-1"),
        "cpus=4,mem_mib=4096".parse().expect("resources"),
    )
}

fn fw(name: &str) -> FrameworkId {
    FrameworkId::from(name)
}

/// The key of task `id` of framework `f`, which most tests here launch as.
fn key(id: &str) -> TaskKey {
    TaskKey::new(fw("f"), TaskId::from(id))
}

fn spec(id: &str, resources: &str) -> TaskSpec {
    fullerene_proto::testkit::command_task(id, "true", &[], resources, 750)
}

fn sleep_spec(id: &str) -> TaskSpec {
    fullerene_proto::testkit::sleep_task(id, 10, "cpus=1", 750)
}

/// Runs actions the way the shell does, keeping the persisted records and the sent updates.
#[derive(Default)]
struct Log {
    records: Vec<Record>,
    sent: Vec<StatusUpdate>,
    starts: Vec<TaskId>,
    kills: Vec<(TaskKey, Duration)>,
}

impl Log {
    fn take(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Persist(record) => self.records.push(record),
                Action::Send(update) => {
                    // Invariant: the update was persisted before it is sent.
                    assert!(
                        self.records.contains(&Record::Update(update.clone())),
                        "sent before persisted: {update:?}"
                    );
                    self.sent.push(update);
                }
                Action::Start { spec, .. } => self.starts.push(spec.id),
                Action::Kill { task, grace } => self.kills.push((task, grace)),
            }
        }
    }
}

fn seqs(updates: &[StatusUpdate], task: &str) -> Vec<(u64, TaskState)> {
    updates
        .iter()
        .filter(|u| u.task_id.as_str() == task)
        .map(|u| (u.seq, u.state))
        .collect()
}

fn running(core: &mut AgentCore, log: &mut Log, id: &str, resources: &str) {
    log.take(core.launch(&fw("f"), vec![spec(id, resources)], at(1)));
    log.take(core.started(
        &key(id),
        Runtime::Process {
            pid: 100,
            start_ticks: 7,
        },
        String::new(),
        at(2),
    ));
}

#[test]
fn a_task_streams_running_then_finished_and_leaves_once_acked() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "t1", "cpus=1,mem_mib=100");
    assert_eq!(log.starts, vec![TaskId::from("t1")]);
    assert_eq!(core.used(), "cpus=1,mem_mib=100".parse().expect("r"));
    log.take(core.finished(&key("t1"), Outcome::Exited(0), String::new(), at(3)));
    assert_eq!(
        seqs(&log.sent, "t1"),
        vec![(1, TaskState::Running), (2, TaskState::Finished)]
    );
    assert_eq!(log.sent[1].reason, Some(StatusReason::Exited { code: 0 }));
    assert_eq!(log.sent[1].agent_id, AgentId::from("agent-1"));
    // Resources are free as soon as the task ended, acked or not.
    assert_eq!(core.used(), ResourceVec::ZERO);
    assert_eq!(core.backlog(), 2);

    let ack1 = core.ack(&StatusAck {
        task_id: TaskId::from("t1"),
        framework_id: fw("f"),
        seq: 1,
    });
    assert_eq!(ack1.len(), 1);
    assert_eq!(seqs(&core.unacked(), "t1"), vec![(2, TaskState::Finished)]);
    // A duplicate ack changes nothing and records nothing.
    assert!(core
        .ack(&StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: fw("f"),
            seq: 1
        })
        .is_empty());
    core.ack(&StatusAck {
        task_id: TaskId::from("t1"),
        framework_id: fw("f"),
        seq: 2,
    });
    assert!(core.task(&key("t1")).is_none());
    assert_eq!(core.backlog(), 0);
}

#[test]
fn resend_is_every_unacked_update_in_per_task_order() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "a", "cpus=1");
    running(&mut core, &mut log, "b", "cpus=1");
    log.take(core.finished(&key("a"), Outcome::Exited(3), "boom".into(), at(5)));
    log.take(core.finished(&key("b"), Outcome::Signaled(9), String::new(), at(6)));
    core.ack(&StatusAck {
        task_id: TaskId::from("b"),
        framework_id: fw("f"),
        seq: 1,
    });
    let resend = core.unacked();
    assert_eq!(
        seqs(&resend, "a"),
        vec![(1, TaskState::Running), (2, TaskState::Failed)]
    );
    assert_eq!(seqs(&resend, "b"), vec![(2, TaskState::Failed)]);
    let failed_a = &resend[1];
    assert_eq!(failed_a.reason, Some(StatusReason::Exited { code: 3 }));
    assert!(failed_a.message.contains("boom"), "{}", failed_a.message);
    // An ack for everything acks only what was sent: no future seq is pre-acknowledged.
    core.ack(&StatusAck {
        task_id: TaskId::from("a"),
        framework_id: fw("f"),
        seq: 99,
    });
    assert!(core.task(&key("a")).is_none());
    // Registration lists what is left, with its latest seq.
    let tasks = core.register_tasks();
    assert_eq!(tasks.len(), 1);
    assert_eq!((tasks[0].task.task_id.as_str(), tasks[0].seq), ("b", 2));
}

#[test]
fn duplicate_launch_and_duplicate_executor_reports_are_harmless() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "t", "cpus=1");
    assert!(core
        .launch(&fw("f"), vec![spec("t", "cpus=1")], at(9))
        .is_empty());
    let runtime = Runtime::Sleep { deadline_ms: 5 };
    // A second `started` records the runtime but sends no second RUNNING.
    let again = core.started(&key("t"), runtime, String::new(), at(9));
    assert!(again.iter().all(|a| !matches!(a, Action::Send(_))));
    log.take(core.finished(&key("t"), Outcome::Exited(0), String::new(), at(10)));
    assert!(core
        .finished(&key("t"), Outcome::Exited(1), String::new(), at(11))
        .is_empty());
    assert_eq!(
        seqs(&log.sent, "t"),
        vec![(1, TaskState::Running), (2, TaskState::Finished)]
    );
}

#[test]
fn insufficient_resources_fail_the_task_and_change_nothing_else() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "big", "cpus=3,mem_mib=1000");
    let before_used = core.used();
    let before_other = core.task(&key("big")).cloned();
    let actions = core.launch(
        &fw("f"),
        vec![spec("too-big", "cpus=2"), spec("fits", "cpus=1")],
        at(4),
    );
    log.take(actions);
    let failed = seqs(&log.sent, "too-big");
    assert_eq!(failed, vec![(1, TaskState::Failed)]);
    let update = log.sent.iter().find(|u| u.task_id.as_str() == "too-big");
    let update = update.expect("update");
    assert_eq!(update.reason, Some(StatusReason::InsufficientResources));
    assert!(update.message.contains("cpus=2"), "{}", update.message);
    assert!(update.message.contains("cpus=1"), "{}", update.message);
    // The refused task holds nothing; the next task of the bundle still fits.
    assert_eq!(log.starts, vec![TaskId::from("big"), TaskId::from("fits")]);
    assert_eq!(core.used(), before_used + "cpus=1".parse().expect("r"));
    assert_eq!(core.task(&key("big")).cloned(), before_other);
}

#[test]
fn bandwidth_may_be_overbooked_within_the_allowance_but_memory_not() {
    let mut core = AgentCore::new(CoreConfig::new(
        AgentId::from("agent-1"),
        "cpus=8,mem_mib=1000,net_mbps=100".parse().expect("r"),
    ));
    let mut log = Log::default();
    log.take(core.launch(&fw("f"), vec![spec("n1", "net_mbps=120")], at(1)));
    log.take(core.launch(&fw("f"), vec![spec("n2", "net_mbps=10")], at(1)));
    log.take(core.launch(&fw("f"), vec![spec("m", "mem_mib=1001")], at(1)));
    assert_eq!(log.starts, vec![TaskId::from("n1")]);
    assert_eq!(seqs(&log.sent, "n2"), vec![(1, TaskState::Failed)]);
    assert_eq!(seqs(&log.sent, "m"), vec![(1, TaskState::Failed)]);
}

#[test]
fn unknown_executor_and_invalid_resources_fail_clearly() {
    let mut config = config();
    config.executors.remove(EXECUTOR_SLEEP);
    let mut core = AgentCore::new(config);
    let mut log = Log::default();
    let mut bad = spec("bad", "cpus=1");
    bad.resources.insert("unicorns", 1.0);
    log.take(core.launch(&fw("f"), vec![sleep_spec("s"), bad], at(1)));
    assert!(log.starts.is_empty());
    assert_eq!(log.sent.len(), 2);
    assert_eq!(log.sent[0].task_id.as_str(), "s");
    assert_eq!(log.sent[0].reason, Some(StatusReason::UnknownExecutor));
    assert!(
        log.sent[0].message.contains("`sleep`"),
        "{}",
        log.sent[0].message
    );
    assert_eq!(log.sent[1].reason, Some(StatusReason::LaunchFailed));
    assert!(
        log.sent[1].message.contains("unicorns"),
        "{}",
        log.sent[1].message
    );
    assert_eq!(core.used(), ResourceVec::ZERO);
    assert_eq!(core.active_count(), 0);
}

#[test]
fn registered_kill_list_kills_running_tasks_as_agent_lost() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "keep", "cpus=1");
    running(&mut core, &mut log, "lost", "cpus=1");
    log.take(core.registered(&[key("lost"), key("never-heard-of")]));
    assert_eq!(log.kills, vec![(key("lost"), Duration::from_millis(750))]);
    // Asking again while the kill runs does not start a second one.
    assert!(core.registered(&[key("lost")]).is_empty());
    log.take(core.finished(&key("lost"), Outcome::Signaled(15), String::new(), at(9)));
    let last = log.sent.last().expect("update");
    assert_eq!((last.state, last.seq), (TaskState::Killed, 2));
    assert_eq!(last.reason, Some(StatusReason::AgentLost));
    assert_eq!(
        core.task(&key("keep")).map(|e| e.state),
        Some(TaskState::Running)
    );
}

#[test]
fn kill_needs_the_tasks_own_framework_and_ends_as_killed() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "t", "cpus=1");
    assert!(core
        .kill(
            &TaskKey::new(fw("other"), TaskId::from("t")),
            Duration::from_millis(5)
        )
        .is_empty());
    assert!(core.kill(&key("nope"), Duration::from_millis(5)).is_empty());
    log.take(core.kill(&key("t"), Duration::from_millis(5)));
    assert_eq!(log.kills, vec![(key("t"), Duration::from_millis(5))]);
    // Even if the process exits 0 during the grace period, the task was killed.
    log.take(core.finished(&key("t"), Outcome::Exited(0), String::new(), at(9)));
    let last = log.sent.last().expect("update");
    assert_eq!(last.state, TaskState::Killed);
    assert_eq!(last.reason, Some(StatusReason::KilledByFramework));
}

#[test]
fn recovery_from_records_or_from_a_snapshot_gives_the_same_table() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "a", "cpus=1");
    running(&mut core, &mut log, "b", "cpus=1");
    log.take(core.launch(&fw("f"), vec![spec("refused", "cpus=9")], at(3)));
    log.take(core.kill(&key("b"), Duration::from_millis(40)));
    log.take(core.launch(&fw("f"), vec![sleep_spec("c")], at(3)));
    log.take(core.finished(&key("a"), Outcome::Exited(0), String::new(), at(4)));
    log.take(core.ack(&StatusAck {
        task_id: TaskId::from("a"),
        framework_id: fw("f"),
        seq: 1,
    }));

    let from_log = AgentCore::recover(config(), log.records.clone());
    let from_snapshot = AgentCore::recover(config(), core.snapshot());
    for recovered in [&from_log, &from_snapshot] {
        assert_eq!(recovered.tasks, core.tasks);
        assert_eq!(recovered.unacked(), core.unacked());
        assert_eq!(recovered.used(), core.used());
    }
    let resume = from_log.to_resume();
    let ids: Vec<&str> = resume.iter().map(|r| r.task_id.as_str()).collect();
    assert_eq!(ids, vec!["b", "c"]);
    assert_eq!(
        resume[0].kill,
        Some((KillCause::Framework, Duration::from_millis(40)))
    );
    assert_eq!(
        resume[0].runtime,
        Some(Runtime::Process {
            pid: 100,
            start_ticks: 7
        })
    );
    assert_eq!(resume[1].runtime, None);
    // The next update of a recovered task continues its sequence.
    let mut recovered = from_snapshot;
    let actions = recovered.finished(&key("b"), Outcome::Signaled(9), String::new(), at(9));
    let sent: Vec<_> = actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Send(u) => Some((u.seq, u.state)),
            _ => None,
        })
        .collect();
    assert_eq!(sent, vec![(2, TaskState::Killed)]);
}

#[test]
fn a_task_that_vanished_across_a_restart_fails_as_agent_restarted() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    running(&mut core, &mut log, "t", "cpus=1");
    log.take(core.finished(&key("t"), Outcome::Vanished, String::new(), at(3)));
    let last = log.sent.last().expect("update");
    assert_eq!(last.state, TaskState::Failed);
    assert_eq!(last.reason, Some(StatusReason::AgentRestarted));
}

#[test]
fn an_oversized_spec_fails_and_is_recorded_stripped() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    let mut huge = spec("huge", "cpus=1");
    if let Executor::Command(c) = &mut huge.executor {
        c.args.push("x".repeat(2 * MAX_SPEC_BYTES));
    }
    log.take(core.launch(&fw("f"), vec![huge], at(1)));
    assert!(log.starts.is_empty());
    let failed = log.sent.last().expect("update");
    assert_eq!(
        (failed.task_id.as_str(), failed.state),
        ("huge", TaskState::Failed)
    );
    assert_eq!(failed.reason, Some(StatusReason::LaunchFailed));
    assert!(
        failed.message.contains("over the agent's limit"),
        "{}",
        failed.message
    );
    // Every record it produced fits in a checkpoint record.
    for record in &log.records {
        let size = codec::encode(record).expect("encodes").len();
        assert!(size < MAX_SPEC_BYTES, "{size}");
    }
    assert_eq!(core.used(), ResourceVec::ZERO);
}

/// Issue 12, defect 5: a job resubmitted under a new framework reuses its task ids. While the
/// old framework's task waits for its terminal update to be acknowledged, the new framework's
/// task of the same id is another task: it is started, streamed, killed and acknowledged on
/// its own, and survives recovery as such.
#[test]
fn tasks_of_two_frameworks_with_one_id_are_two_tasks() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    let old = key("t");
    let new = TaskKey::new(fw("g"), TaskId::from("t"));
    running(&mut core, &mut log, "t", "cpus=1");
    log.take(core.finished(&old, Outcome::Exited(1), String::new(), at(3)));
    assert_eq!(core.task(&old).map(|e| e.state), Some(TaskState::Failed));

    log.take(core.launch(&fw("g"), vec![spec("t", "cpus=1")], at(4)));
    assert_eq!(log.starts, vec![TaskId::from("t"), TaskId::from("t")]);
    log.take(core.started(
        &new,
        Runtime::Process {
            pid: 200,
            start_ticks: 9,
        },
        String::new(),
        at(5),
    ));
    let streams: Vec<(String, u64, TaskState)> = log
        .sent
        .iter()
        .map(|u| (u.framework_id.to_string(), u.seq, u.state))
        .collect();
    assert_eq!(
        streams,
        vec![
            ("f".to_string(), 1, TaskState::Running),
            ("f".to_string(), 2, TaskState::Failed),
            ("g".to_string(), 1, TaskState::Running),
        ]
    );
    assert_eq!(core.used(), "cpus=1".parse().expect("r"));

    // The old task's ack forgets the old task only; a kill for the old (ended) task does not
    // touch the new one.
    log.take(core.ack(&StatusAck {
        task_id: TaskId::from("t"),
        framework_id: fw("f"),
        seq: 2,
    }));
    assert!(core.task(&old).is_none());
    assert!(core.kill(&old, Duration::from_millis(5)).is_empty());
    assert_eq!(core.task(&new).map(|e| e.state), Some(TaskState::Running));
    assert_eq!(
        AgentCore::recover(config(), log.records.clone()).tasks,
        core.tasks
    );

    // The lost-agent kill list names tasks by framework too.
    log.take(core.registered(std::slice::from_ref(&new)));
    assert_eq!(log.kills, vec![(new.clone(), Duration::from_millis(750))]);
}

/// Every message of the master's session goes through one dispatch: launches and kills reach
/// the table, an acknowledgement that retires updates says so (the shell's resend timer
/// restarts), a stale one does not, and a redirect or an error is handed back to the shell.
#[test]
fn messages_of_the_master_are_dispatched_in_one_place() {
    let mut core = AgentCore::new(config());
    let mut log = Log::default();
    let act = |outcome: FromMaster| match outcome {
        FromMaster::Act {
            actions,
            acknowledged,
        } => (actions, acknowledged),
        other => panic!("expected actions, got {other:?}"),
    };
    let launch = MasterToAgent::Launch {
        framework_id: fw("f"),
        tasks: vec![sleep_spec("t1")],
    };
    let (actions, acknowledged) = act(core.on_master(launch, at(1)));
    assert!(!acknowledged);
    log.take(actions);
    assert_eq!(log.starts, vec![TaskId::from("t1")]);
    log.take(core.started(
        &key("t1"),
        Runtime::Sleep { deadline_ms: 11 },
        String::new(),
        at(1),
    ));
    let seq = log.sent.last().expect("RUNNING sent").seq;
    let ack = || {
        MasterToAgent::StatusAck(StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: fw("f"),
            seq,
        })
    };
    let (actions, acknowledged) = act(core.on_master(ack(), at(2)));
    assert!(acknowledged && !actions.is_empty());
    let (actions, acknowledged) = act(core.on_master(ack(), at(2)));
    assert!(
        !acknowledged && actions.is_empty(),
        "a stale ack records nothing"
    );
    let kill = MasterToAgent::Kill {
        task_id: TaskId::from("t1"),
        framework_id: fw("f"),
        grace_ms: 5,
    };
    log.take(act(core.on_master(kill, at(3))).0);
    assert_eq!(log.kills, vec![(key("t1"), Duration::from_millis(5))]);
    let (actions, _) = act(core.on_master(MasterToAgent::HeartbeatAck { seq: 1 }, at(4)));
    assert!(actions.is_empty());
    let redirect = MasterToAgent::Redirect(Redirect { leader: None });
    assert!(matches!(
        core.on_master(redirect, at(5)),
        FromMaster::Redirect(_)
    ));
}

#[test]
fn file_reads_are_planned_for_plain_names_and_say_whether_the_task_ended() {
    let mut core = AgentCore::new(config());
    core.launch(&fw("f"), vec![spec("t1", "cpus=1")], at(1_000));
    let read = |name: &str, task: &str| FileRead {
        request: 7,
        framework_id: fw("f"),
        task_id: TaskId::from(task),
        name: name.to_string(),
        offset: 0,
        length: 10,
    };
    let plan = core
        .plan_file_read(&read("stdout", "t1"))
        .expect("a plain name");
    assert_eq!(plan.task, key("t1"));
    assert_eq!(plan.name, "stdout");
    assert!(!plan.task_ended, "a launched task has not ended");
    assert_eq!(
        core.plan_file_read(&read("../t2/stdout", "t1")),
        Err(FileRefusal::BadName("../t2/stdout".into()))
    );
    // A task the agent no longer holds (ended and acknowledged, or never here) has ended.
    let forgotten = core
        .plan_file_read(&read("stderr", "t9"))
        .expect("a plain name");
    assert!(forgotten.task_ended);
    core.finished(&key("t1"), Outcome::Exited(0), String::new(), at(2_000));
    assert!(
        core.plan_file_read(&read("stdout", "t1"))
            .expect("plain")
            .task_ended
    );
}
