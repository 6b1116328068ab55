use fullerene_proto::messages::{
    ErrorCode, Executor, FrameworkRequest, Leftover, Offer, StatusReason, StatusUpdate, TaskSpec,
    TaskState, WireError,
};
use fullerene_proto::time::Time;
use fullerene_proto::{OfferId, Resources, TaskId};
use fullerene_scheduling::testkit::res;

use super::*;
use crate::dag::common::{ArrivalsError, MAX_REFUSED_ACCEPTS};
use crate::dag::{DagConfig, DagError, JobOutcome};
use crate::session::SessionPolicyKind;
use crate::testkit::{job, stage};

/// `millis` milliseconds on the framework's clock.
fn t(millis: u64) -> Time {
    Time::from_millis(millis)
}

/// `a`: stage 10, two 10 s tasks of 1 cpu; stage 20 (after 10), one 4 s task of 2 cpus.
fn job_a() -> Job {
    job(
        "a",
        "default",
        None,
        vec![
            stage(10, &[], &[10.0, 10.0], res("cpus=1,mem_mib=100")),
            stage(20, &[10], &[4.0], res("cpus=2,mem_mib=100")),
        ],
    )
}

/// `b`: stage 0, two 2 s tasks of 1 cpu.
fn job_b() -> Job {
    job(
        "b",
        "default",
        None,
        vec![stage(0, &[], &[2.0, 2.0], res("cpus=1,mem_mib=100"))],
    )
}

fn config() -> DagConfig {
    DagConfig {
        time_scale: 0.5,
        max_attempts: 2,
        ..DagConfig::default()
    }
}

/// Both jobs under FIFO, arriving as `arrivals_s` says, started at 1 s.
fn framework(arrivals_s: &[f64]) -> SessionFramework {
    SessionFramework::new(
        vec![job_a(), job_b()],
        config(),
        SessionPolicyKind::Fifo.build(),
        arrivals_s,
        t(1_000),
    )
    .expect("a valid session")
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

/// The accepts among `calls`: their offers and tasks.
fn accepts(calls: &[FrameworkRequest]) -> Vec<(Vec<OfferId>, Vec<TaskSpec>)> {
    calls
        .iter()
        .filter_map(|c| match c {
            FrameworkRequest::Accept {
                offer_ids, tasks, ..
            } => Some((offer_ids.clone(), tasks.clone())),
            _ => None,
        })
        .collect()
}

fn ids(tasks: &[TaskSpec]) -> Vec<&str> {
    let mut ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    ids
}

fn all_ids(calls: &[FrameworkRequest]) -> Vec<String> {
    let mut all: Vec<String> = accepts(calls)
        .into_iter()
        .flat_map(|(_, tasks)| tasks.into_iter().map(|t| t.id.to_string()))
        .collect();
    all.sort();
    all
}

/// Offers of agents a1 (two offers, 1 cpu each), a2 and a3 (1 cpu each) and a4 (no cpu), at
/// 1.1 s; the calls.
fn first_offers(f: &mut SessionFramework) -> Vec<FrameworkRequest> {
    f.on_offers(
        &[
            offer(1, "a1", "cpus=1,mem_mib=1000"),
            offer(2, "a1", "cpus=1,mem_mib=1000"),
            offer(3, "a2", "cpus=1,mem_mib=1000"),
            offer(4, "a3", "cpus=1,mem_mib=1000"),
            offer(5, "a4", "mem_mib=1000"),
        ],
        t(1_100),
    )
}

#[test]
fn offers_are_accepted_per_agent_with_the_tasks_the_session_placed_there() {
    let mut f = framework(&[]);
    let subscribed = f.on_subscribed();
    let described: Vec<&str> = subscribed
        .iter()
        .filter_map(|c| match c {
            FrameworkRequest::DescribeJob(d) => Some(d.job.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(described, ["a", "b"], "{subscribed:?}");
    assert!(
        subscribed.iter().any(
            |c| matches!(c, FrameworkRequest::UpdateDemand(d) if d.pending.iter().map(|p| p.count).sum::<u32>() == 4)
        ),
        "both jobs' scans are the framework's one demand: {subscribed:?}"
    );

    let calls = first_offers(&mut f);
    // Executors: the cluster's cpus as offered (a1's two offers together).
    assert_eq!(f.session().max_limit(), 4);
    let accepted = accepts(&calls);
    assert_eq!(accepted.len(), 3, "{calls:?}");
    // FIFO: job a first, both its scans on a1, whose two offers are accepted together.
    assert_eq!(accepted[0].0, vec![OfferId(1), OfferId(2)]);
    assert_eq!(ids(&accepted[0].1), ["a/10.0/0", "a/10.1/0"]);
    for spec in &accepted[0].1 {
        // 10 s at a time scale of 0.5, the stage's demand, the task's origin.
        assert_eq!(spec.executor, Executor::Sleep { duration_ms: 5_000 });
        assert_eq!(spec.resources, Resources::from(res("cpus=1,mem_mib=100")));
        let origin = spec.origin.as_ref().expect("an origin");
        assert_eq!(
            (origin.job.as_str(), origin.stage, origin.attempt),
            ("a", 10, 0)
        );
    }
    // Then b, one task on each of a2 and a3.
    assert_eq!(accepted[1].0, vec![OfferId(3)]);
    assert_eq!(accepted[2].0, vec![OfferId(4)]);
    assert_eq!(
        all_ids(&calls),
        ["a/10.0/0", "a/10.1/0", "b/0.0/0", "b/0.1/0"]
    );
    assert!(calls.iter().all(|c| !matches!(
        c,
        FrameworkRequest::Accept { leftover, .. } if *leftover != Leftover::Decline { refuse_ms: 0 }
    )));
    // a4 holds nothing that fits, and nothing is left to run: declined for a while.
    assert!(
        calls.contains(&FrameworkRequest::Decline {
            offer_ids: vec![OfferId(5)],
            refuse_ms: config().idle_refuse_ms,
        }),
        "{calls:?}"
    );
    let progress = f.progress(0).expect("job a");
    assert_eq!((progress.running, progress.finished), (2, 0));
}

#[test]
fn finished_tasks_advance_their_job_and_the_last_gives_its_jct() {
    let mut f = framework(&[]);
    f.on_subscribed();
    first_offers(&mut f);
    let id = |s: &str| TaskId::from(s);
    assert!(f
        .on_update(&update(&id("a/10.0/0"), TaskState::Running, None), t(1_200))
        .is_empty());
    f.on_update(
        &update(&id("a/10.0/0"), TaskState::Finished, None),
        t(6_000),
    );
    assert_eq!(f.progress(0).expect("a").finished, 1);
    let calls = f.on_update(
        &update(&id("a/10.1/0"), TaskState::Finished, None),
        t(6_100),
    );
    assert!(
        calls.contains(&FrameworkRequest::Revive),
        "the join became runnable: {calls:?}"
    );
    // A report of a task this framework never launched changes nothing.
    assert!(f
        .on_update(&update(&id("c/0.0/0"), TaskState::Finished, None), t(6_150))
        .is_empty());
    let calls = f.on_offers(&[offer(6, "a2", "cpus=2,mem_mib=1000")], t(6_200));
    let accepted = accepts(&calls);
    assert_eq!(accepted.len(), 1, "{calls:?}");
    assert_eq!(ids(&accepted[0].1), ["a/20.0/0"]);
    let calls = f.on_update(
        &update(&id("a/20.0/0"), TaskState::Finished, None),
        t(8_500),
    );
    assert_eq!(
        f.progress(0).expect("a").outcome,
        JobOutcome::Finished { jct_ms: 7_500 },
        "from its arrival at 1 s"
    );
    assert!(
        calls.contains(&FrameworkRequest::EndJob {
            job: "a".into(),
            end: JobEnd::Finished
        }),
        "{calls:?}"
    );
    assert!(!f.is_done(), "b still runs");
}

#[test]
fn a_lost_task_is_offered_again_and_one_out_of_attempts_fails_only_its_job() {
    let mut f = framework(&[]);
    f.on_subscribed();
    first_offers(&mut f);
    let id = |s: &str| TaskId::from(s);
    // b's first scan is lost with its agent: it runs again under a new id.
    f.on_update(
        &update(
            &id("b/0.0/0"),
            TaskState::Lost,
            Some(StatusReason::AgentLost),
        ),
        t(1_500),
    );
    assert_eq!(f.progress(1).expect("b").failed_attempts, 1);
    let calls = f.on_offers(&[offer(7, "a3", "cpus=1,mem_mib=1000")], t(1_600));
    assert_eq!(all_ids(&calls), ["b/0.0/1"], "{calls:?}");
    // A late report of the lost attempt is ignored.
    assert!(f
        .on_update(&update(&id("b/0.0/0"), TaskState::Finished, None), t(1_650))
        .is_empty());
    // Its second failure is its last (max_attempts 2): b fails with DagJob's reason, its other
    // scan is killed, and the masters are told. Job a runs on.
    let calls = f.on_update(
        &update(
            &id("b/0.0/1"),
            TaskState::Failed,
            Some(StatusReason::Exited { code: 1 }),
        ),
        t(1_700),
    );
    let JobOutcome::Failed { reason } = f.progress(1).expect("b").outcome else {
        panic!("b did not fail: {calls:?}");
    };
    assert_eq!(
        reason,
        "task 0.0 of stage `s0` ended without success 2 times (the limit); last: Failed \
         (Exited { code: 1 }): exit 1"
    );
    assert!(
        calls.contains(&FrameworkRequest::Kill {
            task_id: id("b/0.1/0")
        }),
        "{calls:?}"
    );
    assert!(calls.iter().any(
        |c| matches!(c, FrameworkRequest::EndJob { job, end: JobEnd::Failed { .. } } if job == "b")
    ));
    assert_eq!(f.progress(0).expect("a").outcome, JobOutcome::Running);
    assert_eq!(f.session().jobs().len(), 1, "b left the session");
    // What followed b's tasks went with it; its counts stay, and the report of its killed
    // scan is ignored as that of an unknown task.
    assert!(
        f.owners.keys().all(|id| !id.as_str().starts_with("b/")),
        "{:?}",
        f.owners
    );
    assert_eq!(f.by_key.len(), 1);
    assert!(f
        .on_update(&update(&id("b/0.1/0"), TaskState::Killed, None), t(1_800))
        .is_empty());
    assert_eq!(f.progress(1).expect("b").failed_attempts, 2);
}

#[test]
fn every_job_reports_and_the_framework_ends_once_the_masters_recorded_every_end() {
    let mut f = framework(&[]);
    f.on_subscribed();
    first_offers(&mut f);
    let id = |s: &str| TaskId::from(s);
    for task in ["a/10.0/0", "a/10.1/0", "b/0.0/0", "b/0.1/0"] {
        f.on_update(&update(&id(task), TaskState::Finished, None), t(3_000));
    }
    f.on_offers(&[offer(8, "a1", "cpus=2,mem_mib=1000")], t(3_100));
    let calls = f.on_update(
        &update(&id("a/20.0/0"), TaskState::Finished, None),
        t(5_000),
    );
    assert!(f.is_done());
    assert!(!f.is_finished(), "the ends are not recorded yet");
    assert!(
        calls.contains(&FrameworkRequest::Suppress),
        "nothing left to offer: {calls:?}"
    );
    let progress: Vec<_> = (0..2).map(|i| f.progress(i).expect("a job")).collect();
    assert_eq!(progress[0].outcome, JobOutcome::Finished { jct_ms: 4_000 });
    assert_eq!(progress[1].outcome, JobOutcome::Finished { jct_ms: 2_000 });
    assert_eq!((progress[1].finished, progress[1].tasks), (2, 2));
    // An end refused for a while is told again on the next tick.
    let end_b = FrameworkRequest::EndJob {
        job: "b".into(),
        end: JobEnd::Finished,
    };
    f.on_call_failed(&end_b, &WireError::new(ErrorCode::RateLimited, "busy"));
    assert_eq!(f.on_tick(t(5_100)), vec![end_b.clone()]);
    f.on_job_recorded(&end_b);
    f.on_job_recorded(&FrameworkRequest::EndJob {
        job: "a".into(),
        end: JobEnd::Finished,
    });
    assert!(f.is_finished());
    // Offers that come now are declined.
    let calls = f.on_offers(&[offer(9, "a1", "cpus=2")], t(5_200));
    assert!(
        matches!(&calls[..], [FrameworkRequest::Decline { .. }]),
        "{calls:?}"
    );
}

#[test]
fn a_job_joins_the_session_at_its_arrival_and_its_jct_counts_from_there() {
    // b arrives 10 workload seconds in: 5 real seconds at a time scale of 0.5.
    let mut f = framework(&[0.0, 10.0]);
    f.on_subscribed();
    assert_eq!(f.session().jobs().len(), 1);
    assert!(f.on_tick(t(5_900)).is_empty());
    // The tick that notices it comes after its nominal arrival (6 s): its JCT counts from 6 s.
    let calls = f.on_tick(t(6_150));
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, FrameworkRequest::DescribeJob(d) if d.job == "b")),
        "{calls:?}"
    );
    assert_eq!(f.session().jobs().len(), 2);
    let calls = f.on_offers(&[offer(1, "a1", "cpus=8,mem_mib=1000")], t(6_200));
    assert_eq!(
        all_ids(&calls),
        ["a/10.0/0", "a/10.1/0", "b/0.0/0", "b/0.1/0"]
    );
    f.on_update(
        &update(&TaskId::from("b/0.0/0"), TaskState::Finished, None),
        t(7_000),
    );
    f.on_update(
        &update(&TaskId::from("b/0.1/0"), TaskState::Finished, None),
        t(7_000),
    );
    assert_eq!(
        f.progress(1).expect("b").outcome,
        JobOutcome::Finished { jct_ms: 1_000 }
    );
}

#[test]
fn a_refused_accept_runs_its_tasks_again_and_an_unknown_one_is_reconciled() {
    let mut f = framework(&[]);
    f.on_subscribed();
    let calls = first_offers(&mut f);
    let accept = calls
        .iter()
        .find(|c| matches!(c, FrameworkRequest::Accept { offer_ids, .. } if offer_ids[0] == OfferId(1)))
        .expect("a1's accept")
        .clone();
    f.on_call_failed(&accept, &WireError::new(ErrorCode::InvalidRequest, "no"));
    assert_eq!(f.progress(0).expect("a").running, 0);
    assert_eq!(f.progress(0).expect("a").failed_attempts, 0, "nothing ran");
    let calls = f.on_offers(&[offer(10, "a1", "cpus=2,mem_mib=1000")], t(1_300));
    assert_eq!(all_ids(&calls), ["a/10.0/1", "a/10.1/1"]);

    // The session was lost before this accept's answer: its tasks are asked about.
    let accept = calls
        .iter()
        .find(|c| matches!(c, FrameworkRequest::Accept { .. }))
        .expect("an accept")
        .clone();
    let calls = f.on_call_failed(&accept, &WireError::new(ErrorCode::OutcomeUnknown, "lost"));
    let asked: Vec<&TaskId> = calls
        .iter()
        .filter_map(|c| match c {
            FrameworkRequest::Reconcile { task_ids } => Some(task_ids),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(asked.len(), 2, "{calls:?}");
    // The master never launched them: LOST, unknown task; no attempt counted, run again.
    for task in ["a/10.0/1", "a/10.1/1"] {
        f.on_update(
            &update(
                &TaskId::from(task),
                TaskState::Lost,
                Some(StatusReason::UnknownTask),
            ),
            t(1_400),
        );
    }
    assert_eq!(f.progress(0).expect("a").failed_attempts, 0);
    let calls = f.on_offers(&[offer(11, "a1", "cpus=2,mem_mib=1000")], t(1_500));
    assert_eq!(all_ids(&calls), ["a/10.0/2", "a/10.1/2"]);
}

#[test]
fn a_stop_fails_every_job_kills_what_runs_and_tells_the_ends() {
    let mut f = framework(&[0.0, 100.0]);
    f.on_subscribed();
    f.on_offers(&[offer(1, "a1", "cpus=1,mem_mib=1000")], t(1_100));
    let calls = f.stop("stopped");
    assert!(f.is_done());
    assert_eq!(
        calls,
        vec![
            FrameworkRequest::Kill {
                task_id: TaskId::from("a/10.0/0")
            },
            FrameworkRequest::EndJob {
                job: "a".into(),
                end: JobEnd::Failed {
                    reason: "stopped".into()
                }
            },
        ],
        "b never arrived: the masters never heard of it"
    );
    f.on_job_recorded(&calls[1]);
    assert!(f.is_finished());
}

#[test]
fn jobs_of_one_name_and_bad_settings_are_refused() {
    let refused = SessionFramework::new(
        vec![job_a(), job_a()],
        config(),
        SessionPolicyKind::Fifo.build(),
        &[],
        t(0),
    )
    .unwrap_err();
    assert_eq!(refused, SessionRefusal::DuplicateJob("a".into()));
    let refused = SessionFramework::new(
        vec![job_a()],
        DagConfig {
            max_attempts: 0,
            ..config()
        },
        SessionPolicyKind::Fifo.build(),
        &[],
        t(0),
    )
    .unwrap_err();
    assert_eq!(refused, SessionRefusal::Config(DagError::MaxAttempts));
    // Arrival times as `run_jobs` checks them: one per job, each a finite time >= 0.
    for (arrivals, why) in [
        (&[0.0][..], "1 arrival times for 2 jobs"),
        (&[0.0, -1.0][..], "arrival time -1 is not"),
        (&[f64::NAN, 0.0][..], "arrival time NaN is not"),
    ] {
        let refused = SessionFramework::new(
            vec![job_a(), job_b()],
            config(),
            SessionPolicyKind::Fifo.build(),
            arrivals,
            t(0),
        )
        .unwrap_err();
        assert!(
            matches!(&refused, SessionRefusal::Arrivals(ArrivalsError(error)) if error.starts_with(why)),
            "{refused:?}"
        );
    }
}

#[test]
fn the_demand_is_finite_before_any_offer_and_a_refused_one_is_sent_again_on_the_next_tick() {
    let mut f = framework(&[]);
    let calls = f.on_subscribed();
    let demand = calls
        .iter()
        .find_map(|c| match c {
            FrameworkRequest::UpdateDemand(d) => Some(d.clone()),
            _ => None,
        })
        .expect("a demand");
    // The master refuses a summary whose work is not a finite number.
    assert!(
        demand.remaining_work.is_finite() && demand.srpt.is_finite(),
        "{demand:?}"
    );
    let refused = FrameworkRequest::UpdateDemand(demand.clone());
    assert!(
        f.on_call_failed(&refused, &WireError::new(ErrorCode::InvalidRequest, "no"))
            .is_empty(),
        "not at once: a summary refused for good would loop"
    );
    assert_eq!(f.on_tick(t(1_200)), vec![refused]);
    assert!(f.on_tick(t(1_400)).is_empty());
}

#[test]
fn accepts_refused_in_a_row_fail_only_the_jobs_they_held_and_transient_refusals_do_not_count() {
    // b arrives late: it must not fail with a's refusals.
    let mut f = framework(&[0.0, 100.0]);
    f.on_subscribed();
    let refused = WireError::new(ErrorCode::InsufficientResources, "the tasks ask for more");
    let busy = WireError::new(ErrorCode::RateLimited, "busy");
    let mut next_offer = 0;
    let mut refuse = |f: &mut SessionFramework, error: &WireError| {
        next_offer += 1;
        let calls = f.on_offers(&[offer(next_offer, "a1", "cpus=1,mem_mib=1000")], t(1_100));
        let accept = calls
            .iter()
            .find(|c| matches!(c, FrameworkRequest::Accept { .. }))
            .cloned()
            .expect("an accept");
        f.on_call_failed(&accept, error)
    };
    for round in 1..MAX_REFUSED_ACCEPTS {
        refuse(&mut f, &refused);
        // Refusals for a while say nothing of the tasks: never counted.
        refuse(&mut f, &busy);
        assert_eq!(
            f.progress(0).expect("a").outcome,
            JobOutcome::Running,
            "round {round}"
        );
    }
    let calls = refuse(&mut f, &refused);
    assert_eq!(
        f.progress(0).expect("a").outcome,
        JobOutcome::Failed {
            reason: format!(
                "the master refused {MAX_REFUSED_ACCEPTS} accepts in a row with no task making \
                 progress; last: {refused}"
            )
        }
    );
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, FrameworkRequest::EndJob { job, .. } if job == "a")),
        "{calls:?}"
    );
    assert_eq!(
        f.progress(1).expect("b").outcome,
        JobOutcome::Running,
        "b held no task of those accepts"
    );
    assert!(!f.is_done());
}

#[test]
fn a_job_ended_while_its_description_was_refused_is_not_described_again() {
    let mut f = framework(&[]);
    let calls = f.on_subscribed();
    let describe_b = calls
        .iter()
        .find(|c| matches!(c, FrameworkRequest::DescribeJob(d) if d.job == "b"))
        .expect("b's description")
        .clone();
    f.on_call_failed(&describe_b, &WireError::new(ErrorCode::RateLimited, "busy"));
    f.stop("stopped");
    let calls = f.on_tick(t(1_200));
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, FrameworkRequest::DescribeJob(_))),
        "its end is in flight: {calls:?}"
    );
}

#[test]
fn an_agent_declared_lost_leaves_the_sessions_cluster() {
    let mut f = framework(&[]);
    f.on_subscribed();
    first_offers(&mut f);
    assert_eq!(f.session().max_limit(), 4);
    // A task on a2 is LOST with its agent: a2's cpu no longer counts.
    let lost = StatusUpdate {
        agent_id: "a2".into(),
        ..update(
            &TaskId::from("b/0.0/0"),
            TaskState::Lost,
            Some(StatusReason::AgentLost),
        )
    };
    f.on_update(&lost, t(1_200));
    f.on_offers(&[offer(20, "a1", "cpus=1,mem_mib=1000")], t(1_300));
    assert_eq!(f.session().max_limit(), 3);
    // An agent that comes back is a machine again, under a new index.
    f.on_offers(&[offer(21, "a2", "cpus=1,mem_mib=1000")], t(1_400));
    assert_eq!(f.session().max_limit(), 4);
    assert_eq!(f.machines.get(&"a2".into()).expect("a2").index, 4);
}

#[cfg(feature = "driver")]
#[test]
fn a_driver_that_stops_for_good_keeps_the_outcomes_of_the_jobs_that_ended() {
    use std::sync::{Arc, Mutex};

    use crate::driver::{DriverError, Scheduler};
    use crate::session::SessionScheduler;

    let mut f = framework(&[]);
    f.on_subscribed();
    first_offers(&mut f);
    for task in ["b/0.0/0", "b/0.1/0"] {
        f.on_update(
            &update(&TaskId::from(task), TaskState::Finished, None),
            t(2_000),
        );
    }
    let slot = Arc::new(Mutex::new(None));
    let mut scheduler =
        SessionScheduler::new(f, None).with_fatal_reports("g".into(), Arc::clone(&slot));
    scheduler.fatal(&DriverError::Transport("gone".into()));
    let reports = slot.lock().expect("slot").take().expect("the reports");
    assert_eq!(reports.len(), 2);
    assert!(
        matches!(&reports[0].outcome, JobOutcome::Failed { reason } if reason.contains("gone")),
        "{:?}",
        reports[0]
    );
    assert_eq!(reports[1].outcome, JobOutcome::Finished { jct_ms: 1_000 });
    assert_eq!(reports[1].group, "g");
}

#[test]
fn a_new_process_takes_the_session_over_from_its_journal_adopting_what_still_runs() {
    use crate::dag::journal::Record;
    use fullerene_proto::FrameworkId;

    // The earlier process: subscribed, launched both of a's scans and both of b's tasks, saw
    // a/10.0 and all of b finish (and ended b), lost a/10.1's first attempt and launched its
    // second; then it died.
    let id = |s: &str| TaskId::from(s);
    let records = vec![
        Record::Subscribed(FrameworkId::from("fw-1")),
        Record::Launched(id("a/10.0/0")),
        Record::Launched(id("a/10.1/0")),
        Record::Launched(id("b/0.0/0")),
        Record::Launched(id("b/0.1/0")),
        Record::Finished(id("a/10.0/0")),
        Record::Finished(id("b/0.0/0")),
        Record::Finished(id("b/0.1/0")),
        Record::JobEnded("b".into()),
        Record::Launched(id("a/10.1/1")),
    ];
    // Another run's journal (a job this workload does not hold) is refused, not taken over.
    let mut foreign = records.clone();
    foreign.push(Record::Launched(id("zzz/0.0/0")));
    assert!(matches!(
        framework(&[]).restore(&foreign),
        Err(SessionRefusal::ForeignJournal(what)) if what.contains("zzz/0.0/0")
    ));
    let mut f = framework(&[]);
    assert_eq!(
        f.restore(&records).expect("the session's own journal"),
        Some(FrameworkId::from("fw-1"))
    );
    let b = f.progress(1).expect("b");
    assert_eq!(b.outcome, JobOutcome::Finished { jct_ms: 0 });
    assert_eq!(b.finished, 2);
    let a = f.progress(0).expect("a");
    assert_eq!((a.finished, a.running), (1, 1));
    assert_eq!(a.outcome, JobOutcome::Running);

    // Once subscribed, the open launch (its latest attempt only) is reconciled, and b's end
    // is told.
    let calls = f.on_subscribed();
    assert!(
        calls.contains(&FrameworkRequest::Reconcile {
            task_ids: vec![id("a/10.1/1")]
        }),
        "{calls:?}"
    );
    let calls = f.on_tick(t(1_050));
    assert!(
        calls.contains(&FrameworkRequest::EndJob {
            job: "b".into(),
            end: JobEnd::Finished
        }),
        "{calls:?}"
    );
    // While a/10.1/1 may run, nothing is launched again: the join waits for it.
    let calls = f.on_offers(&[offer(1, "a1", "cpus=4,mem_mib=1000")], t(1_100));
    assert!(all_ids(&calls).is_empty(), "{calls:?}");
    // A late report of the attempt given up on changes nothing; the adopted one finishing
    // runs the join, whose launch ids go on from those taken.
    f.on_update(
        &update(&id("a/10.1/0"), TaskState::Finished, None),
        t(1_200),
    );
    assert_eq!(f.progress(0).expect("a").finished, 1);
    f.on_update(&update(&id("a/10.1/1"), TaskState::Running, None), t(1_250));
    f.on_update(
        &update(&id("a/10.1/1"), TaskState::Finished, None),
        t(1_300),
    );
    assert_eq!(f.tasks_finished(), 1);
    let calls = f.on_offers(&[offer(2, "a1", "cpus=4,mem_mib=1000")], t(1_400));
    assert_eq!(all_ids(&calls), ["a/20.0/0"]);
    f.on_update(
        &update(&id("a/20.0/0"), TaskState::Finished, None),
        t(4_000),
    );
    assert_eq!(
        f.progress(0).expect("a").outcome,
        JobOutcome::Finished { jct_ms: 3_000 },
        "from this process's start"
    );
}

#[test]
fn an_adopted_task_the_master_reports_lost_runs_again_as_its_next_attempt() {
    use crate::dag::journal::Record;

    let id = |s: &str| TaskId::from(s);
    let mut f = framework(&[]);
    assert_eq!(f.restore(&[Record::Launched(id("b/0.0/0"))]), Ok(None));
    f.on_subscribed();
    // The master reports the adopted task lost (its agent died meanwhile): it runs again,
    // as the next attempt.
    f.on_update(&update(&id("b/0.0/0"), TaskState::Lost, None), t(1_100));
    let calls = f.on_offers(&[offer(1, "a1", "cpus=8,mem_mib=1000")], t(1_200));
    let launched = all_ids(&calls);
    assert!(launched.contains(&"b/0.0/1".to_string()), "{calls:?}");
    assert!(!launched.contains(&"b/0.0/0".to_string()), "{calls:?}");
}

#[test]
fn a_job_that_failed_before_the_takeover_is_not_run_again() {
    use crate::dag::journal::Record;

    // b failed in the earlier process (out of attempts) with b/0.1/0 still open, and ended;
    // a went on.
    let id = |s: &str| TaskId::from(s);
    let mut f = framework(&[]);
    let records = [
        Record::Launched(id("a/10.0/0")),
        Record::Launched(id("b/0.0/0")),
        Record::Launched(id("b/0.1/0")),
        Record::Finished(id("b/0.0/0")),
        Record::JobEnded("b".into()),
    ];
    f.restore(&records).expect("the session's own journal");
    let b = f.progress(1).expect("b");
    assert!(
        matches!(&b.outcome, JobOutcome::Failed { reason } if reason.contains("before")),
        "{b:?}"
    );
    assert_eq!((b.finished, b.running), (1, 0));
    assert_eq!(f.progress(0).expect("a").running, 1);
    let calls = f.on_subscribed();
    assert!(
        calls.contains(&FrameworkRequest::Reconcile {
            task_ids: vec![id("a/10.0/0")]
        }),
        "only a's open launch is reconciled: {calls:?}"
    );
    let calls = f.on_tick(t(1_050));
    assert!(
        calls.iter().any(|c| matches!(
            c,
            FrameworkRequest::EndJob { job, end: JobEnd::Failed { .. } } if job == "b"
        )),
        "{calls:?}"
    );
    // b's tasks never run again.
    let calls = f.on_offers(&[offer(1, "a1", "cpus=8,mem_mib=1000")], t(1_100));
    assert!(
        all_ids(&calls).iter().all(|task| !task.starts_with("b/")),
        "{calls:?}"
    );
}
