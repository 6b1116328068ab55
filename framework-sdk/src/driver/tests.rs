use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::messages::{
    CallOk, DemandSummary, ErrorCode, FrameworkRequest, LeaderInfo, Leftover, MasterToFramework,
    Offer, Redirect, StatusAck, StatusUpdate, TaskState, WireError, MAX_ACKS_PER_CALL,
};
use fullerene_proto::time::Time;
use fullerene_proto::{FrameworkId, MasterId, OfferId};

use super::core::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The time of the tests whose decisions do not depend on it.
const T0: Time = Time::ZERO;

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// `millis` milliseconds on the driver's clock.
fn t(millis: u64) -> Time {
    Time::from_millis(millis)
}

fn core() -> DriverCore {
    let mut config = DriverConfig::new(vec![addr(1), addr(2), addr(3)], "fw", "g");
    config.backoff_initial = ms(100);
    config.backoff_max = ms(1_000);
    DriverCore::new(config).unwrap()
}

fn sends(actions: &[Action]) -> Vec<(u64, FrameworkRequest)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(call) => Some((call.call_id, call.call.clone())),
            _ => None,
        })
        .collect()
}

fn events(actions: &[Action]) -> Vec<DriverEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deliver(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn connects(actions: &[Action]) -> Vec<(SocketAddr, Duration)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Connect { addr, delay } => Some((*addr, *delay)),
            _ => None,
        })
        .collect()
}

fn subscribed(id: &str) -> Result<CallOk, WireError> {
    Ok(CallOk::Subscribed {
        framework_id: FrameworkId::from(id),
        group: "default".into(),
        heartbeat_interval_ms: 1_000,
    })
}

/// Connects and subscribes; returns the actions that followed the subscription.
fn subscribe(core: &mut DriverCore, id: &str) -> Vec<Action> {
    let sent = sends(&core.connected());
    let (call_id, FrameworkRequest::Subscribe { .. }) = sent[0].clone() else {
        panic!("first call is not Subscribe: {sent:?}");
    };
    core.received(
        MasterToFramework::CallResult {
            call_id,
            result: subscribed(id),
        },
        T0,
    )
}

/// The `Subscribe` the test driver sends, naming `framework_id` once it has one.
fn subscribe_call(framework_id: Option<&str>) -> FrameworkRequest {
    FrameworkRequest::Subscribe {
        framework_id: framework_id.map(FrameworkId::from),
        name: "fw".into(),
        group: "g".into(),
        failover_timeout_ms: 60_000,
    }
}

fn offer(id: u64, agent: &str) -> Offer {
    fullerene_proto::testkit::offer(id, "f1", agent, agent, "cpus=4", 0)
}

fn update(task: &str, seq: u64, state: TaskState) -> StatusUpdate {
    fullerene_proto::testkit::status_update(task, "f1", "a1", state, seq)
}

#[test]
fn no_masters_is_an_error() {
    let config = DriverConfig::new(vec![], "fw", "g");
    assert_eq!(DriverCore::new(config).err(), Some(DriverError::NoMasters));
}

#[test]
fn first_subscription_registers_reconciles_and_numbers_calls() {
    let mut c = core();
    assert_eq!(connects(&c.start(T0)), vec![(addr(1), Duration::ZERO)]);
    let sent = sends(&c.connected());
    assert_eq!(sent[0].1, subscribe_call(None));
    let actions = c.received(
        MasterToFramework::CallResult {
            call_id: sent[0].0,
            result: subscribed("f1"),
        },
        T0,
    );
    assert_eq!(
        events(&actions),
        vec![DriverEvent::Registered {
            framework_id: "f1".into()
        }]
    );
    let after = sends(&actions);
    assert_eq!(after[0].1, FrameworkRequest::Reconcile { task_ids: vec![] });
    assert!(after[0].0 > sent[0].0, "call ids grow");
    assert!(c.is_subscribed());
    assert_eq!(c.framework_id(), Some(&FrameworkId::from("f1")));
}

#[test]
fn redirect_to_a_leader_goes_there_at_once_and_unknown_leader_backs_off() {
    let mut c = core();
    c.start(T0);
    c.connected();
    let leader = LeaderInfo {
        id: MasterId(3),
        addr: addr(9),
        term: 4,
    };
    let actions = c.received(
        MasterToFramework::Redirect(Redirect {
            leader: Some(leader),
        }),
        T0,
    );
    assert!(actions.contains(&Action::CloseSession));
    assert_eq!(connects(&actions), vec![(addr(9), Duration::ZERO)]);
    c.connected();
    let actions = c.received(MasterToFramework::Redirect(Redirect { leader: None }), T0);
    let next = connects(&actions);
    assert_eq!(next.len(), 1);
    assert!(
        next[0].1 > Duration::ZERO,
        "no leader known: back off, got {next:?}"
    );
}

#[test]
fn not_leader_answer_to_subscribe_moves_on_and_a_refusal_is_fatal() {
    let mut c = core();
    c.start(T0);
    let sent = sends(&c.connected());
    let actions = c.received(
        MasterToFramework::CallResult {
            call_id: sent[0].0,
            result: Err(WireError::new(ErrorCode::NotLeader, "follower")),
        },
        T0,
    );
    assert_eq!(connects(&actions)[0].0, addr(2));
    let sent = sends(&c.connected());
    let actions = c.received(
        MasterToFramework::CallResult {
            call_id: sent[0].0,
            result: Err(WireError::new(ErrorCode::Unauthorized, "not a framework")),
        },
        T0,
    );
    assert!(actions.contains(&Action::Stop));
    assert!(matches!(
        events(&actions)[..],
        [DriverEvent::Fatal(DriverError::SubscriptionRefused { .. })]
    ));
    assert!(c.is_stopped());
}

#[test]
fn backoff_grows_is_capped_and_jittered_within_bounds() {
    let mut c = core();
    c.start(T0);
    let mut delays = Vec::new();
    let mut masters = Vec::new();
    for _ in 0..8 {
        let next = connects(&c.connect_failed("refused", T0));
        masters.push(next[0].0);
        delays.push(next[0].1);
    }
    // Nominal 100, 200, 400, 800, then capped at 1000; each in [nominal/2, nominal].
    let nominal = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
    for (d, n) in delays.iter().zip(nominal) {
        assert!(
            (ms(n / 2)..=ms(n)).contains(d),
            "delay {d:?} outside [{}, {n}] ms",
            n / 2
        );
    }
    assert_eq!(&masters[..3], &[addr(2), addr(3), addr(1)], "round robin");
    // Deterministic for a seed.
    let mut again = core();
    again.start(T0);
    let first: Vec<Duration> = (0..8)
        .map(|_| connects(&again.connect_failed("refused", T0))[0].1)
        .collect();
    assert_eq!(first, delays);
}

#[test]
fn offers_are_held_until_answered_rescinded_or_voided() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let actions = c.received(
        MasterToFramework::Offers(vec![offer(1, "a1"), offer(2, "a2"), offer(3, "a3")]),
        T0,
    );
    assert_eq!(events(&actions).len(), 1);
    assert_eq!(c.offers().count(), 3);
    c.received(
        MasterToFramework::Rescind {
            offer_ids: vec![OfferId(2)],
        },
        T0,
    );
    let actions = c.call(FrameworkRequest::Decline {
        offer_ids: vec![OfferId(1)],
        refuse_ms: 10,
    });
    assert_eq!(sends(&actions).len(), 1);
    let held: Vec<OfferId> = c.offers().map(|o| o.id).collect();
    assert_eq!(held, vec![OfferId(3)]);
    c.session_lost("idle timeout", T0);
    assert_eq!(c.offers().count(), 0);
}

#[test]
fn updates_are_delivered_once_and_always_acknowledged_together() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let ack = |task: &str, seq: u64| StatusAck {
        task_id: task.into(),
        framework_id: "f1".into(),
        seq,
    };
    let first = c.received(
        MasterToFramework::Update(update("t1", 1, TaskState::Running)),
        T0,
    );
    assert_eq!(
        events(&first),
        vec![DriverEvent::Update(update("t1", 1, TaskState::Running))]
    );
    // Delivered at once, acknowledged once the shell has received what waits.
    assert!(sends(&first).is_empty());
    assert!(c.acks_waiting());
    let dup = c.received(
        MasterToFramework::Update(update("t1", 1, TaskState::Running)),
        T0,
    );
    assert!(events(&dup).is_empty(), "duplicate delivered: {dup:?}");
    let next = c.received(
        MasterToFramework::Update(update("t1", 3, TaskState::Finished)),
        T0,
    );
    assert_eq!(
        events(&next).len(),
        1,
        "a gap (after reconciliation) is delivered"
    );
    // One call for all three, the duplicate acknowledged again (the master resends until it
    // hears the ack); acknowledgements are not pending calls.
    let before = c.pending_calls();
    let flushed = c.flush_acks();
    assert_eq!(
        sends(&flushed),
        vec![(
            sends(&flushed)[0].0,
            FrameworkRequest::Acknowledge(vec![ack("t1", 1), ack("t1", 1), ack("t1", 3)])
        )]
    );
    assert_eq!(c.pending_calls(), before);
    assert!(!c.acks_waiting() && c.flush_acks().is_empty());
    // Acknowledgements not sent when the session is lost are not sent to the next one: the
    // master sends the updates again.
    c.received(
        MasterToFramework::Update(update("t2", 1, TaskState::Running)),
        T0,
    );
    c.session_lost("idle timeout", T0);
    assert!(!c.acks_waiting());
}

#[test]
fn a_full_batch_of_acknowledgements_goes_at_once() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let mut sent = Vec::new();
    for n in 0..MAX_ACKS_PER_CALL + 1 {
        let actions = c.received(
            MasterToFramework::Update(update(&format!("t{n}"), 1, TaskState::Running)),
            T0,
        );
        sent.extend(sends(&actions).into_iter().map(|(_, call)| call));
    }
    assert!(
        matches!(sent.as_slice(), [FrameworkRequest::Acknowledge(acks)] if acks.len() == MAX_ACKS_PER_CALL),
        "{} calls",
        sent.len()
    );
    assert!(c.acks_waiting(), "the last one waits for the next flush");
}

#[test]
fn only_the_latest_ends_are_remembered_so_a_long_run_does_not_grow_without_bound() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    c.received(
        MasterToFramework::Update(update("live", 1, TaskState::Running)),
        T0,
    );
    let ends = MAX_REMEMBERED_ENDS + 10;
    for n in 0..ends {
        let id = format!("t{n}");
        c.received(
            MasterToFramework::Update(update(&id, 1, TaskState::Finished)),
            T0,
        );
    }
    assert_eq!(
        c.remembered_tasks(),
        MAX_REMEMBERED_ENDS + 1,
        "the live task and the latest ends"
    );
    // A late duplicate of a recent end, or of the live task, is still dropped.
    let recent = format!("t{}", ends - 1);
    for (id, state) in [
        (recent.as_str(), TaskState::Finished),
        ("live", TaskState::Running),
    ] {
        let dup = c.received(MasterToFramework::Update(update(id, 1, state)), T0);
        assert!(events(&dup).is_empty(), "{id}: {dup:?}");
    }
    // One of the oldest is forgotten: the bound's price, paid only by a duplicate arriving
    // after that many other tasks ended.
    let old = c.received(
        MasterToFramework::Update(update("t0", 1, TaskState::Finished)),
        T0,
    );
    assert_eq!(events(&old).len(), 1);
}

#[test]
fn reconnect_resubscribes_with_the_id_reconciles_and_resends_demand() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let demand = DemandSummary {
        pending: vec![],
        remaining_work: 7.0,
        srpt: 7.0,
        reservation_progress: None,
    };
    c.call(FrameworkRequest::UpdateDemand(demand.clone()));
    c.call(FrameworkRequest::Suppress);
    let accept = FrameworkRequest::Accept {
        offer_ids: vec![OfferId(1)],
        tasks: vec![],
        leftover: Leftover::Yield,
    };
    c.call(accept.clone());
    let lost = c.session_lost("connection lost", T0);
    let evs = events(&lost);
    assert!(evs.contains(&DriverEvent::CallFailed {
        request: accept.clone(),
        error: WireError::new(
            ErrorCode::OutcomeUnknown,
            "the session to the master was lost before the answer"
        )
    }));
    assert!(evs
        .iter()
        .any(|e| matches!(e, DriverEvent::Disconnected { .. })));
    assert_eq!(connects(&lost).len(), 1);
    // Calls while disconnected: answers to offers fail, kills wait.
    let failed = c.call(accept);
    assert!(matches!(
        &events(&failed)[..],
        [DriverEvent::CallFailed { error, .. }] if error.code == ErrorCode::UnknownOffer
    ));
    assert!(c
        .call(FrameworkRequest::Kill {
            task_id: "t9".into()
        })
        .is_empty());

    let sent = sends(&c.connected());
    assert_eq!(sent[0].1, subscribe_call(Some("f1")));
    let actions = c.received(
        MasterToFramework::CallResult {
            call_id: sent[0].0,
            result: subscribed("f1"),
        },
        T0,
    );
    assert_eq!(
        events(&actions),
        vec![DriverEvent::Reconnected {
            framework_id: "f1".into()
        }]
    );
    let calls: Vec<FrameworkRequest> = sends(&actions).into_iter().map(|(_, c)| c).collect();
    assert_eq!(
        calls,
        vec![
            FrameworkRequest::Reconcile { task_ids: vec![] },
            FrameworkRequest::UpdateDemand(demand),
            FrameworkRequest::Suppress,
            FrameworkRequest::Kill {
                task_id: "t9".into()
            },
        ]
    );
}

#[test]
fn failed_scheduler_calls_are_reported_with_the_request() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let request = FrameworkRequest::Kill {
        task_id: "t1".into(),
    };
    let call_id = sends(&c.call(request.clone()))[0].0;
    let error = WireError::new(ErrorCode::UnknownTask, "no such task");
    let actions = c.received(
        MasterToFramework::CallResult {
            call_id,
            result: Err(error.clone()),
        },
        T0,
    );
    assert_eq!(
        events(&actions),
        vec![DriverEvent::CallFailed { request, error }]
    );
    // An answer to an unknown call id is ignored.
    assert!(c
        .received(
            MasterToFramework::CallResult {
                call_id: 9_999,
                result: Ok(CallOk::Done)
            },
            T0
        )
        .is_empty());
}

#[test]
fn teardown_stops_the_driver() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let actions = c.call(FrameworkRequest::Teardown);
    assert_eq!(sends(&actions)[0].1, FrameworkRequest::Teardown);
    assert_eq!(actions.last(), Some(&Action::Stop));
    assert!(c.session_lost("closed", T0).is_empty());
}

#[test]
fn torn_down_by_the_masters_the_driver_drops_its_calls_says_why_and_stops_for_good() {
    let mut c = core();
    c.start(T0);
    subscribe(&mut c, "f1");
    let kill = FrameworkRequest::Kill {
        task_id: "t1".into(),
    };
    c.call(kill);
    let actions = c.received(
        MasterToFramework::TornDown {
            reason: "torn down by an operator".to_string(),
        },
        T0,
    );
    // Only why it stops: the kill in flight is moot, and failing it would have the scheduler
    // answer a stopped driver.
    assert_eq!(
        events(&actions),
        vec![DriverEvent::Fatal(DriverError::TornDown {
            name: "fw".to_string(),
            reason: "torn down by an operator".to_string(),
        })]
    );
    assert_eq!(c.pending_calls(), 0);
    assert_eq!(actions.last(), Some(&Action::Stop));
    assert!(c.is_stopped());
    // The session closing next is no cue to reconnect: the framework is gone.
    assert!(c.session_lost("closed", T0).is_empty());
    assert!(matches!(
        events(&c.call(FrameworkRequest::Revive)).as_slice(),
        [DriverEvent::CallFailed { .. }]
    ));
}

#[test]
fn a_master_passed_over_is_tried_again_once_its_pass_over_has_elapsed() {
    let mut config = DriverConfig::new(vec![addr(1), addr(2), addr(3)], "fw", "g");
    config.pass_over = Duration::from_secs(1);
    let mut c = DriverCore::new(config).unwrap();
    assert_eq!(connects(&c.start(t(0))), vec![(addr(1), Duration::ZERO)]);
    // 1 is unreachable: it is passed over for a second.
    assert_eq!(connects(&c.connect_failed("refused", t(0)))[0].0, addr(2));
    c.connected();
    let to_1 = || {
        MasterToFramework::Redirect(Redirect {
            leader: Some(LeaderInfo {
                id: MasterId(1),
                addr: addr(1),
                term: 2,
            }),
        })
    };
    // 2 names 1 as the leader while 1 is passed over: not followed, the next master instead.
    assert_eq!(connects(&c.received(to_1(), t(500)))[0].0, addr(3));
    c.connected();
    // Once the second is over, the same redirect is followed at once.
    assert_eq!(
        connects(&c.received(to_1(), t(1_000))),
        vec![(addr(1), Duration::ZERO)]
    );
}
