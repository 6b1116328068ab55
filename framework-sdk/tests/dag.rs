//! The DAG-job framework end to end over the driver and real QUIC, against a scripted master
//! that plays the cluster: it offers one agent, "runs" every accepted task at once (RUNNING
//! then FINISHED), fails the first attempt of one task, and re-offers after every answer.
//! Two jobs run as two frameworks at once; both must finish, the failed task retried once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fullerene_client::event_log::{read_events, Event, EventLog};
use fullerene_proto::messages::{
    CallOk, FrameworkCall, FrameworkRequest, MasterToFramework, Offer, StatusReason, StatusUpdate,
    TaskState,
};
use fullerene_proto::{AgentId, FrameworkId, TaskId};
use fullerene_sdk::dag::{run_jobs, DagConfig, JobOutcome, RunJobsOptions};
use fullerene_sdk::parse_workload;
use fullerene_sdk::policy::PolicyKind;
use fullerene_transport::certs::CertCounts;
use fullerene_transport::testkit::{FakeMaster, FrameworkPeer, PeerSession, TestCerts};
use fullerene_transport::Role;
use tokio::time::timeout;

const WORKLOAD: &str = r#"{"name":"a","group":"g1","stages":[{"id":0,"name":"scan","parents":[],"tasks":3,"duration_s":1.0,"demand":{"cpus":1,"mem_mib":100}},{"id":1,"name":"agg","parents":[0],"tasks":1,"duration_s":1.0,"demand":{"cpus":2,"mem_mib":100}}]}
{"name":"b","group":"g2","stages":[{"id":0,"name":"scan","parents":[],"tasks":2,"duration_s":1.0,"demand":{"cpus":1,"mem_mib":100}}]}
"#;

#[derive(Default)]
struct Seen {
    teardowns: Vec<String>,
    launched: Vec<String>,
    acks: usize,
    /// Drop the session instead of answering the first accept.
    drop_first_accept: bool,
    resubscribed: Vec<String>,
    reconciled: Vec<String>,
}

fn offer(id: u64, framework: &str) -> Offer {
    fullerene_proto::testkit::offer(
        id,
        framework,
        "agent-1",
        "h1",
        "cpus=4,mem_mib=4000",
        u64::MAX,
    )
}

fn update(task: &TaskId, framework: &str, seq: u64, state: TaskState) -> MasterToFramework {
    MasterToFramework::Update(StatusUpdate {
        reason: (state == TaskState::Failed).then_some(StatusReason::Exited { code: 1 }),
        ..fullerene_proto::testkit::status_update(&task.0, framework, "agent-1", state, seq)
    })
}

/// Plays the cluster for one framework session.
async fn serve(
    mut session: PeerSession<FrameworkPeer>,
    mut framework: String,
    seen: Arc<Mutex<Seen>>,
) {
    let mut next_offer = 1u64;
    loop {
        let Some(FrameworkCall { call_id, call }) = session.recv_until_end().await else {
            return;
        };
        if let FrameworkRequest::Subscribe {
            framework_id: Some(id),
            ..
        } = &call
        {
            seen.lock().unwrap().resubscribed.push(id.to_string());
            framework = id.to_string();
        }
        if matches!(call, FrameworkRequest::Accept { .. }) {
            let mut seen = seen.lock().unwrap();
            if seen.drop_first_accept {
                // The leader dies with the accept unanswered and never launched.
                seen.drop_first_accept = false;
                return;
            }
        }
        let result = match &call {
            FrameworkRequest::Subscribe { .. } => CallOk::Subscribed {
                framework_id: FrameworkId::from(framework.as_str()),
                group: "default".into(),
                heartbeat_interval_ms: 1_000,
            },
            _ => CallOk::Done,
        };
        let mut out = vec![MasterToFramework::CallResult {
            call_id,
            result: Ok(result),
        }];
        let mut reoffer = false;
        match call {
            FrameworkRequest::Subscribe { .. } => reoffer = true,
            FrameworkRequest::Accept { tasks, .. } => {
                for task in tasks {
                    let origin = task.origin.clone().expect("DAG tasks carry their origin");
                    seen.lock().unwrap().launched.push(task.id.to_string());
                    // The first attempt of job a's task 0.1 fails.
                    if origin.job == "a"
                        && origin.stage == 0
                        && origin.index == 1
                        && origin.attempt == 0
                    {
                        out.push(update(&task.id, &framework, 1, TaskState::Failed));
                    } else {
                        out.push(update(&task.id, &framework, 1, TaskState::Running));
                        out.push(update(&task.id, &framework, 2, TaskState::Finished));
                    }
                }
                reoffer = true;
            }
            FrameworkRequest::Decline { .. } | FrameworkRequest::Yield { .. } => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                reoffer = true;
            }
            FrameworkRequest::Acknowledge(acks) => seen.lock().unwrap().acks += acks.len(),
            // Nothing was launched before the failure: every task asked about is unknown.
            FrameworkRequest::Reconcile { task_ids } => {
                for task_id in task_ids {
                    seen.lock().unwrap().reconciled.push(task_id.to_string());
                    out.push(MasterToFramework::Update(StatusUpdate {
                        task_id,
                        framework_id: FrameworkId::from(framework.as_str()),
                        agent_id: AgentId::from("agent-1"),
                        state: TaskState::Lost,
                        seq: 0,
                        reason: Some(StatusReason::UnknownTask),
                        message: "reconciliation".into(),
                        timestamp_ms: 0,
                    }));
                }
            }
            FrameworkRequest::Teardown => {
                seen.lock().unwrap().teardowns.push(framework.clone());
                let _ = session.try_send(&out[0]).await;
                return;
            }
            _ => {}
        }
        if reoffer {
            out.push(MasterToFramework::Offers(vec![offer(
                next_offer, &framework,
            )]));
            next_offer += 1;
        }
        for message in out {
            if session.try_send(&message).await.is_err() {
                return;
            }
        }
    }
}

/// Starts the scripted master; returns its address and the task serving it. The framework of
/// the `n`-th connection is `fw-<n>`.
fn start_master(
    certs: &TestCerts,
    seen: Arc<Mutex<Seen>>,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let master = FakeMaster::bind(certs, 1);
    let addr = master.addr();
    let task =
        master.serve_each(move |session, n| serve(session, format!("fw-{n}"), Arc::clone(&seen)));
    (addr, task)
}

/// One master and one framework.
fn certs() -> TestCerts {
    TestCerts::new(CertCounts {
        masters: 1,
        frameworks: 1,
        ..CertCounts::default()
    })
}

fn options(addr: std::net::SocketAddr) -> RunJobsOptions {
    let dag = DagConfig {
        policy: PolicyKind::GrapheneCarbyne,
        time_scale: 0.01,
        ..DagConfig::default()
    };
    RunJobsOptions {
        failover_timeout_ms: 10_000,
        ..RunJobsOptions::new(vec![addr], dag)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_run_to_completion_with_a_retry() {
    let certs = certs();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (addr, master) = start_master(&certs, Arc::clone(&seen));
    let jobs = parse_workload(WORKLOAD, std::path::Path::new("test.jsonl")).expect("workload");
    let progress_calls = Arc::new(Mutex::new(0usize));
    let counter = Arc::clone(&progress_calls);
    let log_dir = tempfile::tempdir().expect("temp dir");
    let log_path = log_dir.path().join("events.jsonl");
    let mut options = options(addr);
    options.event_log = Some(Arc::new(
        EventLog::open(&log_path).expect("event log opens"),
    ));
    let reports = timeout(
        Duration::from_secs(30),
        run_jobs(
            jobs,
            &certs.tls(Role::Framework, 1),
            options,
            Some(Arc::new(move |_, _| *counter.lock().unwrap() += 1)),
        ),
    )
    .await
    .expect("jobs finish in time")
    .expect("jobs run");

    assert_eq!(reports.len(), 2);
    for report in &reports {
        assert!(
            matches!(report.outcome, JobOutcome::Finished { .. }),
            "{report:?}"
        );
    }
    assert_eq!(reports[0].name, "a");
    // The workload's groups are the simulator's: on a cluster a job asks for no group and
    // joins its principal's (the operator's to set).
    assert_eq!(reports[0].group, "");
    assert_eq!(reports[0].failed_attempts, 1);
    assert_eq!(reports[1].failed_attempts, 0);
    let seen = seen.lock().unwrap();
    let mut teardowns = seen.teardowns.clone();
    teardowns.sort();
    assert_eq!(teardowns, vec!["fw-1", "fw-2"]);
    // 4 + 2 tasks, plus the retry, each launched once under its own id.
    assert_eq!(seen.launched.len(), 7, "{:?}", seen.launched);
    let mut ids = seen.launched.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 7);
    assert!(seen.launched.contains(&"a/0.1/1".to_string()));
    assert!(seen.acks >= 11, "every update acknowledged: {}", seen.acks);
    assert!(*progress_calls.lock().unwrap() > 0);
    // The event log tells the same story: two subscriptions, two completions, offers, and
    // every task's end delivered (7 attempts, one of them failed).
    let events = read_events(&log_path).expect("the event log reads");
    let count = |f: &dyn Fn(&Event) -> bool| events.iter().filter(|e| f(&e.event)).count();
    assert_eq!(
        count(&|e| matches!(e, Event::FrameworkSubscribed { .. })),
        2
    );
    assert_eq!(count(&|e| matches!(e, Event::JobCompleted { .. })), 2);
    assert!(count(&|e| matches!(e, Event::OffersReceived { .. })) >= 2);
    let ends = count(&|e| matches!(e, Event::UpdateDelivered { state, .. } if state.is_terminal()));
    assert_eq!(ends, 7, "{events:?}");
    master.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_accept_is_reconciled_after_reconnecting_and_the_job_completes() {
    let certs = certs();
    let seen = Arc::new(Mutex::new(Seen {
        drop_first_accept: true,
        ..Seen::default()
    }));
    let (addr, master) = start_master(&certs, Arc::clone(&seen));
    let mut jobs = parse_workload(WORKLOAD, std::path::Path::new("test.jsonl")).expect("workload");
    jobs.truncate(1);
    let reports = timeout(
        Duration::from_secs(30),
        run_jobs(jobs, &certs.tls(Role::Framework, 1), options(addr), None),
    )
    .await
    .expect("the job finishes in time")
    .expect("the job runs");
    assert!(
        matches!(reports[0].outcome, JobOutcome::Finished { .. }),
        "{:?}",
        reports[0]
    );
    // The LOST / UnknownTask answers count no attempt (and the scripted failure of 0.1's
    // attempt 0 never happens: that attempt was in the lost accept).
    assert_eq!(reports[0].failed_attempts, 0);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.resubscribed, vec!["fw-1"], "re-subscribed with its id");
    let mut reconciled = seen.reconciled.clone();
    reconciled.sort();
    assert_eq!(
        reconciled,
        vec!["a/0.0/0", "a/0.1/0", "a/0.2/0"],
        "the accept's tasks are reconciled explicitly"
    );
    // The scans were launched again under new ids; the second session used the same
    // framework, whose teardown ends the run.
    assert!(
        seen.launched.contains(&"a/0.0/1".to_string()),
        "{:?}",
        seen.launched
    );
    assert_eq!(seen.teardowns, vec!["fw-1"]);
    master.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_subscribes_at_its_arrival_and_its_jct_counts_from_there() {
    let certs = certs();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (addr, master) = start_master(&certs, Arc::clone(&seen));
    let jobs = parse_workload(WORKLOAD, std::path::Path::new("test.jsonl")).expect("workload");
    let log_dir = tempfile::tempdir().expect("temp dir");
    let log_path = log_dir.path().join("events.jsonl");
    let mut options = options(addr);
    // Workload seconds; at the time scale of 0.01, job b arrives 1.5 s after job a.
    options.arrivals_s = vec![0.0, 150.0];
    options.event_log = Some(Arc::new(
        EventLog::open(&log_path).expect("event log opens"),
    ));
    let reports = timeout(
        Duration::from_secs(30),
        run_jobs(jobs, &certs.tls(Role::Framework, 1), options, None),
    )
    .await
    .expect("jobs finish in time")
    .expect("jobs run");

    let subscribed_at = |job: &str| {
        read_events(&log_path)
            .expect("the event log reads")
            .iter()
            .find(|e| matches!(&e.event, Event::FrameworkSubscribed { job: j, .. } if j == job))
            .map(|e| e.at_us)
            .expect("the job subscribed")
    };
    let gap_us = subscribed_at("b").saturating_sub(subscribed_at("a"));
    assert!(gap_us >= 1_400_000, "b subscribed {gap_us} µs after a");
    // b's JCT runs from its arrival: its two 1 s tasks, not the 150 s it waited.
    match reports[1].outcome {
        JobOutcome::Finished { jct_ms } => assert!(jct_ms < 150_000, "{jct_ms}"),
        ref other => panic!("{other:?}"),
    }

    let mut bad = options_with_arrivals(addr, vec![0.0, -1.0]);
    let jobs = parse_workload(WORKLOAD, std::path::Path::new("test.jsonl")).expect("workload");
    let refused = run_jobs(jobs.clone(), &certs.tls(Role::Framework, 1), bad, None).await;
    assert!(
        matches!(&refused, Err(fullerene_sdk::dag::RunError::Arrivals(why)) if why.contains("-1")),
        "{refused:?}"
    );
    bad = options_with_arrivals(addr, vec![0.0]);
    let refused = run_jobs(jobs, &certs.tls(Role::Framework, 1), bad, None).await;
    assert!(
        matches!(&refused, Err(fullerene_sdk::dag::RunError::Arrivals(why)) if why.contains("1 arrival times for 2 jobs")),
        "{refused:?}"
    );
    master.abort();
}

fn options_with_arrivals(addr: std::net::SocketAddr, arrivals_s: Vec<f64>) -> RunJobsOptions {
    RunJobsOptions {
        arrivals_s,
        ..options(addr)
    }
}
