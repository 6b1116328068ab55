use std::net::SocketAddr;

use fullerene_proto::messages::{
    CallOk, DemandSummary, ErrorCode, FrameworkRequest, LeaderInfo, Leftover, MasterToFramework,
    Offer, Redirect, StatusAck, StatusUpdate, TaskState, WireError,
};
use fullerene_proto::{FrameworkId, MasterId, OfferId};

use super::core::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn core() -> DriverCore {
    let mut config = DriverConfig::new(vec![addr(1), addr(2), addr(3)], "fw", "g");
    config.backoff_initial_ms = 100;
    config.backoff_max_ms = 1_000;
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

fn connects(actions: &[Action]) -> Vec<(SocketAddr, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Connect { addr, delay_ms } => Some((*addr, *delay_ms)),
            _ => None,
        })
        .collect()
}

fn subscribed(id: &str) -> Result<CallOk, WireError> {
    Ok(CallOk::Subscribed {
        framework_id: FrameworkId::from(id),
        heartbeat_interval_ms: 1_000,
    })
}

/// Connects and subscribes; returns the actions that followed the subscription.
fn subscribe(core: &mut DriverCore, id: &str) -> Vec<Action> {
    let sent = sends(&core.connected());
    let (call_id, FrameworkRequest::Subscribe { .. }) = sent[0].clone() else {
        panic!("first call is not Subscribe: {sent:?}");
    };
    core.received(MasterToFramework::CallResult {
        call_id,
        result: subscribed(id),
    })
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
    assert_eq!(connects(&c.start()), vec![(addr(1), 0)]);
    let sent = sends(&c.connected());
    assert_eq!(sent[0].1, subscribe_call(None));
    let actions = c.received(MasterToFramework::CallResult {
        call_id: sent[0].0,
        result: subscribed("f1"),
    });
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
    c.start();
    c.connected();
    let leader = LeaderInfo {
        id: MasterId(3),
        addr: addr(9),
        term: 4,
    };
    let actions = c.received(MasterToFramework::Redirect(Redirect {
        leader: Some(leader),
    }));
    assert!(actions.contains(&Action::CloseSession));
    assert_eq!(connects(&actions), vec![(addr(9), 0)]);
    c.connected();
    let actions = c.received(MasterToFramework::Redirect(Redirect { leader: None }));
    let next = connects(&actions);
    assert_eq!(next.len(), 1);
    assert!(next[0].1 > 0, "no leader known: back off, got {next:?}");
}

#[test]
fn not_leader_answer_to_subscribe_moves_on_and_a_refusal_is_fatal() {
    let mut c = core();
    c.start();
    let sent = sends(&c.connected());
    let actions = c.received(MasterToFramework::CallResult {
        call_id: sent[0].0,
        result: Err(WireError::new(ErrorCode::NotLeader, "follower")),
    });
    assert_eq!(connects(&actions)[0].0, addr(2));
    let sent = sends(&c.connected());
    let actions = c.received(MasterToFramework::CallResult {
        call_id: sent[0].0,
        result: Err(WireError::new(ErrorCode::Unauthorized, "not a framework")),
    });
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
    c.start();
    let mut delays = Vec::new();
    let mut masters = Vec::new();
    for _ in 0..8 {
        let next = connects(&c.connect_failed("refused"));
        masters.push(next[0].0);
        delays.push(next[0].1);
    }
    // Nominal 100, 200, 400, 800, then capped at 1000; each in [nominal/2, nominal].
    let nominal = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
    for (d, n) in delays.iter().zip(nominal) {
        assert!(*d >= n / 2 && *d <= n, "delay {d} outside [{}, {n}]", n / 2);
    }
    assert_eq!(&masters[..3], &[addr(2), addr(3), addr(1)], "round robin");
    // Deterministic for a seed.
    let mut again = core();
    again.start();
    let first: Vec<u64> = (0..8)
        .map(|_| connects(&again.connect_failed("refused"))[0].1)
        .collect();
    assert_eq!(first, delays);
}

#[test]
fn offers_are_held_until_answered_rescinded_or_voided() {
    let mut c = core();
    c.start();
    subscribe(&mut c, "f1");
    let actions = c.received(MasterToFramework::Offers(vec![
        offer(1, "a1"),
        offer(2, "a2"),
        offer(3, "a3"),
    ]));
    assert_eq!(events(&actions).len(), 1);
    assert_eq!(c.offers().count(), 3);
    c.received(MasterToFramework::Rescind {
        offer_ids: vec![OfferId(2)],
    });
    let actions = c.call(FrameworkRequest::Decline {
        offer_ids: vec![OfferId(1)],
        refuse_ms: 10,
    });
    assert_eq!(sends(&actions).len(), 1);
    let held: Vec<OfferId> = c.offers().map(|o| o.id).collect();
    assert_eq!(held, vec![OfferId(3)]);
    c.session_lost("idle timeout");
    assert_eq!(c.offers().count(), 0);
}

#[test]
fn updates_are_delivered_once_and_always_acknowledged() {
    let mut c = core();
    c.start();
    subscribe(&mut c, "f1");
    let first = c.received(MasterToFramework::Update(update(
        "t1",
        1,
        TaskState::Running,
    )));
    assert_eq!(
        events(&first),
        vec![DriverEvent::Update(update("t1", 1, TaskState::Running))]
    );
    // Delivered before acknowledged.
    assert!(matches!(first[0], Action::Deliver(_)));
    assert_eq!(
        sends(&first)[0].1,
        FrameworkRequest::Acknowledge(StatusAck {
            task_id: "t1".into(),
            seq: 1
        })
    );
    let dup = c.received(MasterToFramework::Update(update(
        "t1",
        1,
        TaskState::Running,
    )));
    assert!(events(&dup).is_empty(), "duplicate delivered: {dup:?}");
    assert_eq!(sends(&dup).len(), 1, "duplicates are acknowledged again");
    let next = c.received(MasterToFramework::Update(update(
        "t1",
        3,
        TaskState::Finished,
    )));
    assert_eq!(
        events(&next).len(),
        1,
        "a gap (after reconciliation) is delivered"
    );
    // Acknowledgements are not pending calls.
    let before = c.pending_calls();
    c.received(MasterToFramework::Update(update(
        "t2",
        1,
        TaskState::Running,
    )));
    assert_eq!(c.pending_calls(), before);
}

#[test]
fn reconnect_resubscribes_with_the_id_reconciles_and_resends_demand() {
    let mut c = core();
    c.start();
    subscribe(&mut c, "f1");
    let demand = DemandSummary {
        pending: vec![],
        remaining_work: 7.0,
    };
    c.call(FrameworkRequest::UpdateDemand(demand.clone()));
    c.call(FrameworkRequest::Suppress);
    let accept = FrameworkRequest::Accept {
        offer_ids: vec![OfferId(1)],
        tasks: vec![],
        leftover: Leftover::Yield,
    };
    c.call(accept.clone());
    let lost = c.session_lost("connection lost");
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
    let actions = c.received(MasterToFramework::CallResult {
        call_id: sent[0].0,
        result: subscribed("f1"),
    });
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
    c.start();
    subscribe(&mut c, "f1");
    let request = FrameworkRequest::Kill {
        task_id: "t1".into(),
    };
    let call_id = sends(&c.call(request.clone()))[0].0;
    let error = WireError::new(ErrorCode::UnknownTask, "no such task");
    let actions = c.received(MasterToFramework::CallResult {
        call_id,
        result: Err(error.clone()),
    });
    assert_eq!(
        events(&actions),
        vec![DriverEvent::CallFailed { request, error }]
    );
    // An answer to an unknown call id is ignored.
    assert!(c
        .received(MasterToFramework::CallResult {
            call_id: 9_999,
            result: Ok(CallOk::Done)
        })
        .is_empty());
}

#[test]
fn teardown_stops_the_driver() {
    let mut c = core();
    c.start();
    subscribe(&mut c, "f1");
    let actions = c.call(FrameworkRequest::Teardown);
    assert_eq!(sends(&actions)[0].1, FrameworkRequest::Teardown);
    assert_eq!(actions.last(), Some(&Action::Stop));
    assert!(c.session_lost("closed").is_empty());
}
