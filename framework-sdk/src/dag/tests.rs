use fullerene_proto::messages::ReservationProgress;
use fullerene_proto::messages::{
    ErrorCode, Executor, FrameworkRequest, Leftover, Offer, StatusReason, StatusUpdate, TaskSpec,
    TaskState, WireError,
};
use fullerene_proto::time::Time;
use fullerene_proto::{Resources, TaskId};

use super::job::*;
use crate::job::{Job, StageSpec};
use crate::policy::PolicyKind;

use fullerene_scheduling::testkit::res;

/// `millis` milliseconds on the framework's clock.
fn t(millis: u64) -> Time {
    Time::from_millis(millis)
}

/// Stage 0: two 10 s tasks of 1 cpu; stage 1 (after 0): one 4 s task of 2 cpus.
fn two_stage_job() -> Job {
    Job::new(
        "q1",
        "analytics",
        None,
        vec![
            StageSpec {
                id: 10,
                name: "scan".into(),
                parents: vec![],
                durations: vec![10.0, 10.0],
                demand: res("cpus=1,mem_mib=100"),
            },
            StageSpec {
                id: 20,
                name: "join".into(),
                parents: vec![10],
                durations: vec![4.0],
                demand: res("cpus=2,mem_mib=100"),
            },
        ],
    )
    .expect("job")
}

fn config(policy: PolicyKind) -> DagConfig {
    DagConfig {
        policy,
        time_scale: 0.5,
        ..DagConfig::default()
    }
}

fn offer(id: u64, agent: &str, resources: &str) -> Offer {
    fullerene_proto::testkit::offer(id, "f1", agent, agent, resources, u64::MAX)
}

fn update(task: &TaskId, state: TaskState, reason: Option<StatusReason>) -> StatusUpdate {
    StatusUpdate {
        reason,
        message: "exit 1".into(),
        ..fullerene_proto::testkit::status_update(&task.0, "f1", "a1", state, 1)
    }
}

fn accepted(calls: &[FrameworkRequest]) -> Vec<TaskSpec> {
    calls
        .iter()
        .filter_map(|c| match c {
            FrameworkRequest::Accept { tasks, .. } => Some(tasks.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn runs_a_dag_stage_by_stage_to_completion_and_measures_the_jct() {
    for policy in PolicyKind::ALL {
        let mut dag = DagJob::new(two_stage_job(), config(policy), t(1_000)).expect("dag");
        let first = dag.on_subscribed();
        assert!(
            matches!(&first[..], [FrameworkRequest::UpdateDemand(d)] if d.pending[0].count == 2),
            "{policy}: {first:?}"
        );
        let calls = dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(1_100));
        let tasks = accepted(&calls);
        assert_eq!(tasks.len(), 2, "{policy}: both scans fit: {calls:?}");
        for (spec, index) in tasks.iter().zip([0u32, 1]) {
            assert!(spec.id.as_str().starts_with("q1/10."), "{}", spec.id);
            let origin = spec.origin.clone().expect("origin");
            assert_eq!((origin.stage, origin.attempt), (10, 0));
            assert!(origin.index <= 1);
            let _ = index;
            // 10 s scaled by 0.5.
            assert_eq!(spec.executor, Executor::Sleep { duration_ms: 5_000 });
            assert_eq!(spec.resources, Resources::from(res("cpus=1,mem_mib=100")));
        }
        // The join cannot run yet: an offer now is declined or yielded, never accepted.
        let calls = dag.on_offers(&[offer(2, "a2", "cpus=4,mem_mib=1000")], t(1_200));
        assert!(accepted(&calls).is_empty(), "{policy}: {calls:?}");
        assert!(
            calls.iter().any(|c| matches!(
                c,
                FrameworkRequest::Decline { .. } | FrameworkRequest::Yield { .. }
            )),
            "{policy}: {calls:?}"
        );
        dag.on_update(&update(&tasks[0].id, TaskState::Running, None), t(1_300));
        dag.on_update(&update(&tasks[0].id, TaskState::Finished, None), t(6_000));
        let calls = dag.on_update(&update(&tasks[1].id, TaskState::Finished, None), t(6_100));
        assert!(
            calls.contains(&FrameworkRequest::Revive),
            "{policy}: the join became runnable: {calls:?}"
        );
        let calls = dag.on_offers(&[offer(3, "a1", "cpus=4,mem_mib=1000")], t(6_200));
        let join = accepted(&calls);
        assert_eq!(join.len(), 1, "{policy}: {calls:?}");
        assert_eq!(join[0].origin.as_ref().map(|o| o.stage), Some(20));
        assert_eq!(dag.progress().finished, 2);
        let calls = dag.on_update(&update(&join[0].id, TaskState::Finished, None), t(8_500));
        assert!(calls.contains(&FrameworkRequest::Suppress));
        assert_eq!(dag.outcome(), &JobOutcome::Finished { jct_ms: 7_500 });
        // Finished jobs decline everything.
        let calls = dag.on_offers(&[offer(4, "a1", "cpus=4")], t(9_000));
        assert!(matches!(&calls[..], [FrameworkRequest::Decline { .. }]));
    }
}

#[test]
fn failed_tasks_are_retried_with_new_ids_then_the_job_fails_with_the_reason() {
    let mut cfg = config(PolicyKind::Fifo);
    cfg.max_attempts = 2;
    let mut dag = DagJob::new(two_stage_job(), cfg, t(0)).expect("dag");
    let tasks = accepted(&dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(10)));
    assert_eq!(tasks.len(), 2);
    let (failing, other) = (&tasks[0], &tasks[1]);
    let calls = dag.on_update(&update(&failing.id, TaskState::Failed, None), t(20));
    assert!(calls
        .iter()
        .any(|c| matches!(c, FrameworkRequest::UpdateDemand(_))));
    assert_eq!(dag.outcome(), &JobOutcome::Running);
    let retry = accepted(&dag.on_offers(&[offer(2, "a1", "cpus=1,mem_mib=1000")], t(30)));
    assert_eq!(retry.len(), 1);
    assert_ne!(retry[0].id, failing.id, "a retry gets a new id");
    let (o1, o2) = (
        failing.origin.clone().unwrap(),
        retry[0].origin.clone().unwrap(),
    );
    assert_eq!((o1.stage, o1.index), (o2.stage, o2.index), "same task");
    assert_eq!(o2.attempt, 1);
    // A late report of the first attempt changes nothing.
    assert!(dag
        .on_update(&update(&failing.id, TaskState::Finished, None), t(35))
        .is_empty());
    assert_eq!(dag.progress().finished, 0);
    // The second failure is the last allowed: the job fails and kills what still runs.
    let calls = dag.on_update(&update(&retry[0].id, TaskState::Lost, None), t(40));
    assert!(calls.contains(&FrameworkRequest::Kill {
        task_id: other.id.clone()
    }));
    match dag.outcome() {
        JobOutcome::Failed { reason } => {
            assert!(reason.contains("stage `scan`"), "{reason}");
            assert!(reason.contains("2 times"), "{reason}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(dag.progress().failed_attempts, 2);
}

/// A task preempted for a reservation runs again without a failed attempt counted: with one
/// attempt allowed, three preemptions in a row leave the job running (the newest best-effort
/// task is the victim of every reclaim, found by `fullerene dev --reservations`).
#[test]
fn preempted_tasks_run_again_without_counting_as_failures() {
    let mut cfg = config(PolicyKind::Fifo);
    cfg.max_attempts = 1;
    let mut dag = DagJob::new(two_stage_job(), cfg, t(0)).expect("dag");
    let mut victim = accepted(&dag.on_offers(&[offer(1, "a1", "cpus=1,mem_mib=1000")], t(10)));
    for k in 0..3u64 {
        assert_eq!(victim.len(), 1, "round {k}");
        let preempted = StatusReason::Preempted {
            reservation: "etl".into(),
        };
        dag.on_update(
            &update(&victim[0].id, TaskState::Killed, Some(preempted)),
            t(20 + k * 10),
        );
        assert_eq!(dag.outcome(), &JobOutcome::Running, "round {k}");
        victim =
            accepted(&dag.on_offers(&[offer(2 + k, "a1", "cpus=1,mem_mib=1000")], t(25 + k * 10)));
    }
    let progress = dag.progress();
    assert_eq!(
        (progress.failed_attempts, progress.preempted_attempts),
        (0, 3)
    );
    // A real failure still counts: the one attempt allowed is used up.
    dag.on_update(&update(&victim[0].id, TaskState::Failed, None), t(90));
    assert!(matches!(dag.outcome(), JobOutcome::Failed { .. }));
}

/// A demand summary the master did not take (rate-limited, say) is sent again at once: the
/// framework sends a summary only when it changes, and without this one the allocator would
/// offer the job nothing (found by the TPC-H cluster test under event-driven allocation).
#[test]
fn a_refused_demand_summary_is_sent_again() {
    let mut dag = DagJob::new(two_stage_job(), config(PolicyKind::Bfs), t(0)).expect("dag");
    let calls = dag.on_offers(&[], t(1));
    let mut summary = calls
        .iter()
        .find(|c| matches!(c, FrameworkRequest::UpdateDemand(_)))
        .cloned();
    if summary.is_none() {
        summary = dag
            .on_call_failed(
                &FrameworkRequest::UpdateDemand(Default::default()),
                &WireError::new(ErrorCode::RateLimited, "slow down"),
            )
            .into_iter()
            .find(|c| matches!(c, FrameworkRequest::UpdateDemand(_)));
    }
    let summary = summary.expect("the job sends its demand");
    let again = dag.on_call_failed(
        &summary,
        &WireError::new(ErrorCode::RateLimited, "slow down"),
    );
    assert!(again.contains(&summary), "{again:?}");
    // An accepted one is not sent again while nothing changes.
    assert!(!dag.on_offers(&[], t(2)).contains(&summary));
}

/// A job whose tasks use disk bandwidth, offered only agents whose disk was all in use: its
/// demand summary stays finite (a kind no offer showed counts as the job's largest task has
/// it), so the masters take it. It was infinite, refused, and sent again at once, for ever,
/// and the job never ran (a stall seen after a leader failover).
#[test]
fn a_kind_no_offer_showed_leaves_the_demand_summary_finite_and_a_refused_one_is_not_resent() {
    let job = Job::new(
        "q6",
        "analytics",
        None,
        vec![StageSpec {
            id: 1,
            name: "scan".into(),
            parents: vec![],
            durations: vec![3.0; 4],
            demand: res("cpus=1,mem_mib=100,disk_mbps=200"),
        }],
    )
    .expect("job");
    // A configured planning cluster that lacks the kind too: the largest task stands in.
    let mut configured = config(PolicyKind::Bfs);
    configured.plan_cluster = Some(crate::planner::PlanCluster::new(
        2,
        res("cpus=4,mem_mib=1000"),
    ));
    let mut planned = DagJob::new(job.clone(), configured, t(0)).expect("dag");
    for call in planned
        .on_subscribed()
        .iter()
        .chain(&planned.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(10)))
    {
        if let FrameworkRequest::UpdateDemand(summary) = call {
            assert!(summary.remaining_work.is_finite(), "{summary:?}");
        }
    }
    let mut dag = DagJob::new(job, config(PolicyKind::Bfs), t(0)).expect("dag");
    dag.on_subscribed();
    let calls = dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(10));
    let summaries: Vec<_> = calls
        .iter()
        .chain(
            dag.on_offers(&[offer(2, "a2", "cpus=4,mem_mib=1000")], t(20))
                .iter(),
        )
        .filter_map(|c| match c {
            FrameworkRequest::UpdateDemand(d) => Some(d.clone()),
            _ => None,
        })
        .collect();
    for summary in &summaries {
        assert!(
            summary.remaining_work.is_finite() && summary.srpt.is_finite(),
            "{summary:?}"
        );
    }
    // A summary refused for good is not sent again as it is (it would be refused again).
    let sent = dag
        .on_call_failed(
            &FrameworkRequest::UpdateDemand(Default::default()),
            &WireError::new(ErrorCode::RateLimited, "slow down"),
        )
        .into_iter()
        .find(|c| matches!(c, FrameworkRequest::UpdateDemand(_)))
        .expect("sent again after a transient refusal");
    let again = dag.on_call_failed(
        &sent,
        &WireError::new(ErrorCode::InvalidRequest, "demand summary: bad"),
    );
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn refused_accepts_return_tasks_and_unknown_outcomes_are_reconciled() {
    let mut dag = DagJob::new(two_stage_job(), config(PolicyKind::Bfs), t(0)).expect("dag");
    let calls = dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(10));
    let accept = calls
        .iter()
        .find(|c| matches!(c, FrameworkRequest::Accept { .. }))
        .cloned()
        .expect("an accept");
    let refused = WireError::new(ErrorCode::InsufficientResources, "taken");
    dag.on_call_failed(&accept, &refused);
    assert_eq!(dag.progress().running, 0);
    assert_eq!(dag.progress().failed_attempts, 0, "no attempt ran");
    let again = dag.on_offers(&[offer(2, "a1", "cpus=4,mem_mib=1000")], t(20));
    let tasks = accepted(&again);
    assert_eq!(tasks.len(), 2);
    let accept = again
        .iter()
        .find(|c| matches!(c, FrameworkRequest::Accept { .. }))
        .cloned()
        .expect("an accept");
    let calls = dag.on_call_failed(
        &accept,
        &WireError::new(ErrorCode::OutcomeUnknown, "session lost"),
    );
    let mut ids: Vec<TaskId> = tasks.iter().map(|t| t.id.clone()).collect();
    ids.sort();
    assert!(calls.contains(&FrameworkRequest::Reconcile { task_ids: ids }));
    assert_eq!(dag.progress().running, 2, "still possibly running");
    // The master never launched one: LOST / UnknownTask does not count as an attempt.
    dag.on_update(
        &update(
            &tasks[0].id,
            TaskState::Lost,
            Some(StatusReason::UnknownTask),
        ),
        t(30),
    );
    assert_eq!(dag.progress().failed_attempts, 0);
    assert_eq!(dag.progress().running, 1);
    // The explicit reconcile goes out on the next session (the driver holds it): that
    // subscription does not ask twice. It may be lost with that session too: every later
    // subscription asks again about what is still unconfirmed, until an update for it comes
    // (found by the whole-system simulation, seed 149: the job waited for ever on a task
    // nobody knew).
    let reconciles = |calls: &[FrameworkRequest]| {
        calls
            .iter()
            .filter(|c| matches!(c, FrameworkRequest::Reconcile { .. }))
            .count()
    };
    assert_eq!(reconciles(&dag.on_subscribed()), 0, "asked already");
    let still_unknown = vec![tasks[1].id.clone()];
    let calls = dag.on_subscribed();
    assert!(calls.contains(&FrameworkRequest::Reconcile {
        task_ids: still_unknown.clone()
    }));
    dag.on_update(
        &update(
            &tasks[1].id,
            TaskState::Lost,
            Some(StatusReason::UnknownTask),
        ),
        t(40),
    );
    assert_eq!(reconciles(&dag.on_subscribed()), 0, "confirmed");
}

#[test]
fn leftover_follows_the_policy_and_bad_configs_are_refused() {
    let mut dag = DagJob::new(two_stage_job(), config(PolicyKind::Tetris), t(0)).expect("dag");
    let calls = dag.on_offers(&[offer(1, "a1", "cpus=8,mem_mib=1000")], t(0));
    assert!(calls.iter().any(|c| matches!(
        c,
        FrameworkRequest::Accept {
            leftover: Leftover::Decline { .. },
            ..
        }
    )));
    let mut bad = config(PolicyKind::Fifo);
    bad.time_scale = 0.0;
    assert_eq!(
        DagJob::new(two_stage_job(), bad, t(0)).err(),
        Some(DagError::TimeScale(0.0))
    );
    let mut bad = config(PolicyKind::Fifo);
    bad.max_attempts = 0;
    assert_eq!(
        DagJob::new(two_stage_job(), bad, t(0)).err(),
        Some(DagError::MaxAttempts)
    );
}

#[test]
fn command_template_is_expanded() {
    let mut cfg = config(PolicyKind::Fifo);
    cfg.executor =
        ExecutorTemplate::Command("run {job} {stage_name} {stage}.{index} {duration_ms}".into());
    let mut dag = DagJob::new(two_stage_job(), cfg, t(0)).expect("dag");
    let tasks = accepted(&dag.on_offers(&[offer(1, "a1", "cpus=1,mem_mib=1000")], t(0)));
    assert_eq!(tasks.len(), 1);
    match &tasks[0].executor {
        Executor::Command(spec) => {
            assert_eq!(spec.program, "sh");
            assert_eq!(
                spec.args,
                vec!["-c".to_string(), "run 'q1' 'scan' 10.0 5000".into()]
            );
        }
        other => panic!("expected a command, got {other:?}"),
    }
    // A name in double quotes would lose its quoting: the job is refused, saying why.
    let mut quoted = config(PolicyKind::Fifo);
    quoted.executor = ExecutorTemplate::Command("echo \"{stage_name}\"".into());
    match DagJob::new(two_stage_job(), quoted, t(0)) {
        Err(DagError::Template(error)) => {
            assert!(error.to_string().contains("{stage_name}"), "{error}");
        }
        other => panic!("a double-quoted name was not refused: {:?}", other.err()),
    }
}

#[test]
fn lost_tasks_are_replanned_and_run_again_under_graphene() {
    let mut dag =
        DagJob::new(two_stage_job(), config(PolicyKind::GrapheneCarbyne), t(0)).expect("dag");
    let tasks = accepted(&dag.on_offers(&[offer(1, "a1", "cpus=2,mem_mib=1000")], t(0)));
    assert_eq!(tasks.len(), 2);
    dag.on_update(&update(&tasks[0].id, TaskState::Finished, None), t(5_000));
    dag.on_update(
        &update(&tasks[1].id, TaskState::Lost, Some(StatusReason::AgentLost)),
        t(5_000),
    );
    // The lost scan runs again on another agent, then the join.
    let retry = accepted(&dag.on_offers(&[offer(2, "a2", "cpus=2,mem_mib=1000")], t(5_100)));
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].origin.as_ref().map(|o| o.attempt), Some(1));
    dag.on_update(&update(&retry[0].id, TaskState::Finished, None), t(10_000));
    let join = accepted(&dag.on_offers(&[offer(3, "a2", "cpus=2,mem_mib=1000")], t(10_100)));
    assert_eq!(join.len(), 1);
    dag.on_update(&update(&join[0].id, TaskState::Finished, None), t(12_000));
    assert_eq!(dag.outcome(), &JobOutcome::Finished { jct_ms: 12_000 });
}

#[test]
fn a_job_whose_accepts_are_always_refused_fails_with_the_reason() {
    let mut dag = DagJob::new(two_stage_job(), config(PolicyKind::Bfs), t(0)).expect("dag");
    // Refusals for a while (a leader election, a rate limit) count nothing, however many.
    for (round, code) in [
        ErrorCode::NotLeader,
        ErrorCode::RateLimited,
        ErrorCode::Unavailable,
    ]
    .into_iter()
    .cycle()
    .take(2 * MAX_REFUSED_ACCEPTS as usize)
    .enumerate()
    {
        let calls = dag.on_offers(
            &[offer(1000 + round as u64, "a1", "cpus=4,mem_mib=1000")],
            t(5),
        );
        let accept = calls
            .iter()
            .find(|c| matches!(c, FrameworkRequest::Accept { .. }))
            .cloned()
            .expect("an accept");
        dag.on_call_failed(&accept, &WireError::new(code, "not now"));
        assert_eq!(dag.outcome(), &JobOutcome::Running, "round {round}");
    }
    let refused = WireError::new(ErrorCode::InsufficientResources, "the tasks ask for more");
    for round in 0..MAX_REFUSED_ACCEPTS {
        assert_eq!(dag.outcome(), &JobOutcome::Running, "round {round}");
        let calls = dag.on_offers(
            &[offer(u64::from(round) + 1, "a1", "cpus=4,mem_mib=1000")],
            t(10),
        );
        let accept = calls
            .iter()
            .find(|c| matches!(c, FrameworkRequest::Accept { .. }))
            .cloned()
            .expect("an accept");
        dag.on_call_failed(&accept, &refused);
    }
    match dag.outcome() {
        JobOutcome::Failed { reason } => {
            assert!(reason.contains("refused"), "{reason}");
            assert!(reason.contains("the tasks ask for more"), "{reason}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_new_process_takes_over_from_the_journal_adopting_what_still_runs() {
    use super::journal::Record;
    use fullerene_proto::FrameworkId;

    // The earlier process: subscribed, launched both scans (q1/10.0/0 and q1/10.1/0), saw
    // q1/10.0/0 finish, relaunched nothing; then it died.
    let records = vec![
        Record::Subscribed(FrameworkId::from("fw-1-1")),
        Record::Launched(TaskId::from("q1/10.0/0")),
        Record::Launched(TaskId::from("q1/10.1/0")),
        Record::Finished(TaskId::from("q1/10.0/0")),
        Record::Launched(TaskId::from("q2/10.0/0")),
    ];
    let mut dag = DagJob::new(
        two_stage_job(),
        config(PolicyKind::GrapheneCarbyne),
        t(1_000),
    )
    .expect("dag");
    assert_eq!(dag.restore(&records), Some(FrameworkId::from("fw-1-1")));
    assert_eq!(dag.progress().finished, 1, "the finished scan counts");

    // The new subscription reconciles the launch whose end was not recorded.
    let first = dag.on_subscribed();
    let reconciled: Vec<TaskId> = first
        .iter()
        .filter_map(|c| match c {
            FrameworkRequest::Reconcile { task_ids } => Some(task_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(reconciled, vec![TaskId::from("q1/10.1/0")]);

    // Until the master answers, the second scan counts as running: offers launch nothing.
    assert_eq!(dag.progress().running, 1);
    let calls = dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(1_050));
    assert!(accepted(&calls).is_empty(), "nothing runs twice: {calls:?}");
    // It still runs.
    dag.on_update(
        &update(&TaskId::from("q1/10.1/0"), TaskState::Running, None),
        t(1_100),
    );
    assert_eq!(dag.progress().running, 1);
    let calls = dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(1_200));
    assert!(accepted(&calls).is_empty(), "nothing runs twice: {calls:?}");

    // It finishes: the join runs, as launch 0 of its own id.
    dag.on_update(
        &update(&TaskId::from("q1/10.1/0"), TaskState::Finished, None),
        t(2_000),
    );
    let calls = dag.on_offers(&[offer(2, "a1", "cpus=4,mem_mib=1000")], t(2_100));
    let join = accepted(&calls);
    assert_eq!(join.len(), 1, "{calls:?}");
    assert_eq!(join[0].id, TaskId::from("q1/20.0/0"));
    dag.on_update(&update(&join[0].id, TaskState::Finished, None), t(3_000));
    assert!(matches!(dag.outcome(), JobOutcome::Finished { .. }));
}

#[test]
fn a_launch_the_master_never_saw_is_launched_again_under_a_new_id() {
    use super::journal::Record;

    let records = vec![Record::Launched(TaskId::from("q1/10.0/0"))];
    let mut dag = DagJob::new(
        two_stage_job(),
        config(PolicyKind::GrapheneCarbyne),
        t(1_000),
    )
    .expect("dag");
    assert_eq!(dag.restore(&records), None);
    dag.on_subscribed();
    dag.on_update(
        &update(
            &TaskId::from("q1/10.0/0"),
            TaskState::Lost,
            Some(StatusReason::UnknownTask),
        ),
        t(1_100),
    );
    let calls = dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(1_200));
    let ids: Vec<String> = accepted(&calls).iter().map(|s| s.id.to_string()).collect();
    assert!(ids.contains(&"q1/10.0/1".to_string()), "{ids:?}");
    assert!(ids.contains(&"q1/10.1/0".to_string()), "{ids:?}");
}

#[test]
fn the_description_names_the_reservation_the_job_runs_in() {
    let dag = DagJob::new(two_stage_job(), config(PolicyKind::Graphene), t(0)).expect("dag");
    let best_effort = dag.description();
    assert_eq!(best_effort.reservation, None);
    let reserved = dag.with_reservation(Some("etl".to_string()));
    assert_eq!(reserved.reservation(), Some("etl"));
    let description = reserved.description();
    assert_eq!(description.reservation.as_deref(), Some("etl"));
    // The rest of the description is the best-effort one's.
    assert_eq!(
        (description.job, description.stages),
        (best_effort.job, best_effort.stages)
    );
}

/// The demand summaries of a job in its own reservation (its atoms the DAG's stages) say which
/// atoms it has finished, so that the masters owe the reservation only the atoms left; in a
/// reservation it was only given the name of, they say nothing (its atoms are not the DAG's).
#[test]
fn a_job_in_its_own_reservation_reports_the_atoms_it_has_finished() {
    let progress = |calls: &[FrameworkRequest]| {
        calls.iter().find_map(|c| match c {
            FrameworkRequest::UpdateDemand(d) => Some(d.reservation_progress.clone()),
            _ => None,
        })
    };
    // order(scan, join): an atom each.
    let own_request = crate::reserve::job_reservation(
        &two_stage_job(),
        &crate::planner::PlanCluster::new(1, res("cpus=4,mem_mib=1000")),
        1.0,
        60_000,
        0,
        1_000,
        fullerene_reservation::PolicyKind::Gree,
    );
    let of_two = |finished: &[u32]| {
        Some(ReservationProgress {
            finished_atoms: finished.to_vec(),
            atoms: 2,
            request: own_request.fingerprint(),
        })
    };
    for own in [true, false] {
        let mut dag =
            DagJob::new(two_stage_job(), config(PolicyKind::CriticalPath), t(0)).expect("dag");
        if own {
            dag.set_own_reservation("q1.fw-7".into(), &own_request);
        } else {
            dag.set_reservation(Some("etl".into()));
        }
        let expected = |finished: &[u32]| if own { of_two(finished) } else { None };
        assert_eq!(
            progress(&dag.on_subscribed()),
            Some(expected(&[])),
            "own: {own}"
        );
        let tasks = accepted(&dag.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(100)));
        assert_eq!(tasks.len(), 2);
        // One scan left: the scan's atom is not finished yet.
        let calls = dag.on_update(&update(&tasks[0].id, TaskState::Finished, None), t(5_000));
        assert_eq!(
            progress(&calls).unwrap_or(expected(&[])),
            expected(&[]),
            "own: {own}"
        );
        let calls = dag.on_update(&update(&tasks[1].id, TaskState::Finished, None), t(5_100));
        assert_eq!(
            progress(&calls),
            Some(expected(&[0])),
            "own: {own}: {calls:?}"
        );
    }
}

/// A job with a deadline asks for its reservation on subscription and describes itself once
/// answered: in the reservation if accepted (also when a retry after a lost session finds its
/// first attempt), as best effort if refused; it starts on offers meanwhile.
#[test]
fn a_job_with_a_deadline_reserves_before_it_describes_itself() {
    use super::run::DagScheduler;
    use crate::driver::{DriverHandle, Scheduler};
    use crate::reserve::{Admission, DeadlineRequest};
    use fullerene_proto::reservations::ReservationCall;
    use fullerene_proto::FrameworkId;

    let framework = FrameworkId::from("fw-7");
    let request = DeadlineRequest {
        window_ms: 30_000,
        expr: fullerene_reservation::parse(
            "window(atom(cpus=1; g=1, h=2, l=5s, w=10s), s=0, f=30s)",
        )
        .expect("rdl"),
    };
    let scheduler = |request: Option<DeadlineRequest>| {
        let dag = DagJob::new(two_stage_job(), config(PolicyKind::Graphene), t(0)).expect("dag");
        DagScheduler::new(dag, 0, None).with_deadline(request)
    };
    let calls = |run: &mut dyn FnMut(&mut DriverHandle)| {
        let mut handle = DriverHandle::new(t(0), Some(framework.clone()));
        run(&mut handle);
        handle.into_calls().0
    };
    let describes = |calls: &[FrameworkRequest]| {
        calls.iter().find_map(|c| match c {
            FrameworkRequest::DescribeJob(d) => Some(d.reservation.clone()),
            _ => None,
        })
    };

    // Accepted: the create comes first, the description only after the answer, tagged.
    let mut s = scheduler(Some(request.clone()));
    let first = calls(&mut |h| s.registered(h, &framework));
    let create = first
        .iter()
        .find_map(|c| match c {
            FrameworkRequest::Reservation(call @ ReservationCall::Create { .. }) => {
                Some(call.clone())
            }
            _ => None,
        })
        .expect("a create");
    let ReservationCall::Create { name, rdl } = &create else {
        unreachable!()
    };
    assert_eq!(name, "q1.fw-7");
    assert_eq!(
        fullerene_reservation::parse(rdl).expect("parses"),
        request.expr
    );
    assert_eq!(
        describes(&first),
        None,
        "no description before the answer: {first:?}"
    );
    assert!(
        first
            .iter()
            .any(|c| matches!(c, FrameworkRequest::UpdateDemand(_))),
        "the job starts meanwhile: {first:?}"
    );
    let answered = calls(&mut |h| s.reservation_done(h, &create));
    assert_eq!(describes(&answered), Some(Some("q1.fw-7".to_string())));
    assert_eq!(
        s.deadline_report().map(|d| d.admission),
        Some(Admission::Accepted {
            name: "q1.fw-7".into()
        })
    );
    // A reconnection neither asks again nor untags the job.
    let again = calls(&mut |h| s.reconnected(h, &framework));
    assert_eq!(describes(&again), Some(Some("q1.fw-7".to_string())));
    assert!(!again
        .iter()
        .any(|c| matches!(c, FrameworkRequest::Reservation(_))));
    // Another reservation of the principal ending changes nothing; the adapter rejecting the
    // job's own after a loss of capacity withdraws it, and the job goes on as best effort.
    use fullerene_proto::reservations::{ReservationNotice, ReservationVerdict};
    let rejected = |name: &str| ReservationNotice {
        name: name.into(),
        verdict: ReservationVerdict::Rejected {
            reason: "agent lost: no room".into(),
        },
        at_ms: 1,
    };
    assert!(calls(&mut |h| s.reservation_ended(h, &rejected("q2.fw-8"))).is_empty());
    assert!(matches!(
        s.deadline_report().map(|d| d.admission),
        Some(Admission::Accepted { .. })
    ));
    assert!(calls(&mut |h| s.reservation_ended(h, &rejected("q1.fw-7"))).is_empty());
    assert_eq!(
        s.deadline_report().map(|d| d.admission),
        Some(Admission::Withdrawn {
            name: "q1.fw-7".into(),
            reason: "agent lost: no room".into()
        })
    );
    // Its description no longer names it (the masters would refuse one that does).
    assert_eq!(s.dag().reservation(), None);
    assert!(!s.dag().is_done());

    // Lost with the session: asked again on reconnection; the retry finds the first attempt.
    let mut s = scheduler(Some(request.clone()));
    calls(&mut |h| s.registered(h, &framework));
    let lost = WireError::new(ErrorCode::OutcomeUnknown, "session lost");
    let none =
        calls(&mut |h| s.call_failed(h, &FrameworkRequest::Reservation(create.clone()), &lost));
    assert!(none.is_empty(), "{none:?}");
    let retry = calls(&mut |h| s.reconnected(h, &framework));
    assert!(
        retry.contains(&FrameworkRequest::Reservation(create.clone())),
        "{retry:?}"
    );
    assert_eq!(describes(&retry), None);
    let exists = WireError::new(ErrorCode::ReservationExists, "q1.fw-7 exists");
    let found =
        calls(&mut |h| s.call_failed(h, &FrameworkRequest::Reservation(create.clone()), &exists));
    assert_eq!(describes(&found), Some(Some("q1.fw-7".to_string())));

    // Refused: described as best effort, the reason kept, and the job is not failed.
    let mut s = scheduler(Some(request));
    calls(&mut |h| s.registered(h, &framework));
    let no_room = WireError::new(ErrorCode::InvalidRequest, "atom 0 does not fit");
    let refused =
        calls(&mut |h| s.call_failed(h, &FrameworkRequest::Reservation(create.clone()), &no_room));
    assert_eq!(describes(&refused), Some(None));
    assert_eq!(
        s.deadline_report().map(|d| d.admission),
        Some(Admission::Refused {
            reason: "atom 0 does not fit".into()
        })
    );
    assert!(!s.dag().is_done());

    // Without a deadline: described at once, nothing reserved.
    let mut s = scheduler(None);
    let plain = calls(&mut |h| s.registered(h, &framework));
    assert_eq!(describes(&plain), Some(None));
    assert!(s.deadline_report().is_none());
}

/// A job's end is recorded before its framework is torn down: an end the masters refuse for a
/// while (a principal's calls rate-limited) is sent again on the next tick, and the teardown
/// follows the masters' record of it (found by the five-job cluster test, whose job showed no
/// end in `/jobs` when its end was rate-limited and the driver already stopped).
#[test]
fn a_job_is_torn_down_only_once_the_masters_recorded_its_end() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::run::DagScheduler;
    use crate::driver::{DriverHandle, Scheduler};
    use fullerene_proto::FrameworkId;

    let framework = FrameworkId::from("fw-1");
    let stop = Arc::new(AtomicBool::new(false));
    let dag = DagJob::new(two_stage_job(), config(PolicyKind::Graphene), t(0)).expect("dag");
    let mut s = DagScheduler::new(dag, 0, None).with_stop(Some(Arc::clone(&stop)));
    let mut calls = |run: &mut dyn FnMut(&mut DriverHandle, &mut DagScheduler)| {
        let mut handle = DriverHandle::new(t(0), Some(framework.clone()));
        run(&mut handle, &mut s);
        handle.into_calls()
    };
    calls(&mut |h, s| s.registered(h, &framework));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (first, stopping) = calls(&mut |h, s| s.tick(h));
    let end = first
        .iter()
        .find(|c| matches!(c, FrameworkRequest::EndJob { .. }))
        .cloned()
        .unwrap_or_else(|| panic!("the end is told: {first:?}"));
    assert!(
        !stopping && !first.contains(&FrameworkRequest::Teardown),
        "{first:?}"
    );
    // Rate-limited: nothing at once, the end again on the next tick, still no teardown.
    let limited = WireError::new(ErrorCode::RateLimited, "slow down");
    let (now, _) = calls(&mut |h, s| s.call_failed(h, &end, &limited));
    assert!(now.is_empty(), "{now:?}");
    let (again, stopping) = calls(&mut |h, s| s.tick(h));
    assert!(again.contains(&end), "{again:?}");
    assert!(!stopping, "{again:?}");
    // Recorded: torn down, once.
    let (recorded, stopping) = calls(&mut |h, s| s.job_recorded(h, &end));
    assert_eq!(recorded, vec![FrameworkRequest::Teardown]);
    assert!(stopping);
    let (later, _) = calls(&mut |h, s| s.tick(h));
    assert!(later.is_empty(), "{later:?}");
}
