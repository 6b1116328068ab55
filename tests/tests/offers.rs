//! Offer validation on real processes: an accept of another framework's
//! offer, of more than an offer holds, or of an offer that does not exist is refused with a
//! typed error, and the cluster state is left as it was.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::time::Duration;

use fullerene_proto::messages::{
    ClusterView, ErrorCode, FrameworkRequest, Leftover, OperatorRequest, OperatorResponse,
    TaskSpec, TaskState,
};
use fullerene_proto::{OfferId, TaskId};
use fullerene_tests::{demand, resources, sleep_task, MasterCluster, TestFramework, KILL_GRACE_MS};

const WAIT: Duration = Duration::from_secs(20);

/// A task of `cpus` cpus that sleeps 200 ms.
fn short_sleep(id: &str, cpus: f64) -> TaskSpec {
    sleep_task(id, 200, &format!("cpus={cpus},mem_mib=64"), KILL_GRACE_MS)
}

async fn state(cluster: &MasterCluster) -> ClusterView {
    let mut client = cluster.operator_client(&[1], WAIT);
    match client.request(&OperatorRequest::State).await {
        Ok(OperatorResponse::State(view)) => view,
        other => panic!("no cluster state: {other:?}\n{}", cluster.logs()),
    }
}

/// Asserts that nothing runs and nothing is charged: no task tracked, every agent's `used`
/// zero.
fn assert_untouched(view: &ClusterView, after: &str) {
    assert!(
        view.tasks.is_empty(),
        "after {after}, the master tracks tasks: {:?}",
        view.tasks
    );
    for agent in &view.agents {
        assert!(
            agent.used.iter().all(|(_, v)| v.abs() < 1e-9),
            "after {after}, {} has {:?} in use",
            agent.id,
            agent.used
        );
    }
    for framework in &view.frameworks {
        assert_eq!(framework.active_tasks, 0, "after {after}: {framework:?}");
    }
}

/// Sends `accept` and waits for its refusal; its error code.
async fn refused(
    framework: &mut TestFramework,
    accept: FrameworkRequest,
    cluster: &MasterCluster,
) -> ErrorCode {
    framework.call(accept.clone());
    let Some((request, error)) = framework.call_failed(WAIT).await else {
        panic!(
            "{accept:?} was not refused: {:?}\n{}",
            framework.history,
            cluster.logs()
        );
    };
    assert_eq!(request, accept, "another call failed: {error}");
    assert!(
        !error.message.is_empty(),
        "the refusal does not say what was wrong"
    );
    error.code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_of_foreign_oversized_or_unknown_offers_are_refused_and_change_nothing() {
    // Certificates for two agents give two framework certificates; one agent runs.
    let mut cluster = MasterCluster::start_with(1, 1, 2, &[]);
    cluster.spawn_agent(1, &["--resources", "cpus=4,mem_mib=4096,disk_mbps=100"]);
    let mut owner = cluster.test_framework(1, "owner");
    let mut thief = cluster.test_framework(2, "thief");
    assert!(owner.registered(WAIT).await.is_some(), "{}", cluster.logs());
    assert!(thief.registered(WAIT).await.is_some(), "{}", cluster.logs());
    // Only the owner wants anything, so only it is offered the agent.
    owner.call(FrameworkRequest::UpdateDemand(demand(
        &resources("cpus=1,mem_mib=64"),
        1,
    )));
    let Some(offers) = owner.offers(WAIT).await else {
        panic!("the owner got no offer\n{}", cluster.logs());
    };
    let offer = offers[0].clone();
    let offered_cpus = offer.resources.get("cpus").unwrap_or(0.0);
    assert!(offered_cpus >= 1.0, "an offer without a CPU: {offer:?}");

    let steal = FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: vec![short_sleep("stolen", 1.0)],
        leftover: Leftover::Decline { refuse_ms: 0 },
    };
    assert_eq!(
        refused(&mut thief, steal, &cluster).await,
        ErrorCode::OfferNotYours
    );
    assert_untouched(&state(&cluster).await, "an accept of another's offer");

    let unknown = FrameworkRequest::Accept {
        offer_ids: vec![OfferId(u64::MAX)],
        tasks: vec![short_sleep("nowhere", 1.0)],
        leftover: Leftover::Decline { refuse_ms: 0 },
    };
    assert_eq!(
        refused(&mut owner, unknown, &cluster).await,
        ErrorCode::UnknownOffer
    );
    assert_untouched(&state(&cluster).await, "an accept of an unknown offer");

    let greedy = FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: vec![short_sleep("greedy", offered_cpus + 1.0)],
        leftover: Leftover::Decline { refuse_ms: 0 },
    };
    assert_eq!(
        refused(&mut owner, greedy, &cluster).await,
        ErrorCode::InsufficientResources
    );
    assert_untouched(&state(&cluster).await, "an accept of more than offered");

    // The refusals left the owner able to use its resources.
    let offer = match owner.offers(WAIT).await {
        Some(offers) => offers[0].clone(),
        None => panic!("no offer after the refusals\n{}", cluster.logs()),
    };
    owner.call(FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: vec![short_sleep("honest", 1.0)],
        leftover: Leftover::Decline { refuse_ms: 0 },
    });
    let Some(end) = owner.terminal_update(&TaskId::from("honest"), WAIT).await else {
        panic!(
            "a valid accept did not run: {:?}\n{}",
            owner.history,
            cluster.logs()
        );
    };
    assert_eq!(end.state, TaskState::Finished, "{end:?}");
    thief.drain();
    assert!(
        thief.updates_of(&TaskId::from("stolen")).is_empty(),
        "the thief's task ran"
    );
    owner.teardown(Duration::from_secs(5)).await;
    thief.teardown(Duration::from_secs(5)).await;
}
