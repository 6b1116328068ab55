//! Real-process tests of the replicated master (the replicated-master issue's tests): three
//! `fullerene master` processes on loopback; the leader is SIGKILLed under a stream of
//! proposals; a new leader takes over, no acknowledged proposal is lost, and the killed master
//! catches up after its restart. A damaged data directory is refused at start.
//!
//! Needs the binary: `cargo build -p fullerene` first (see `fullerene_tests::fullerene_binary`).

use std::collections::BTreeMap;
use std::io::Read;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fullerene_client::OperatorClient;
use fullerene_proto::ids::MasterId;
use fullerene_proto::messages::{ClusterStatus, OperatorRequest, OperatorResponse};
use fullerene_tests::{cluster_status, wait_caught_up, MasterCluster};

/// Polls until a leader answers, up to `timeout`.
async fn wait_for_leader(client: &mut OperatorClient, timeout: Duration) -> Option<ClusterStatus> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if let Some(status) = cluster_status(client).await {
            if status.leader.is_some() {
                return Some(status);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Waits up to 20 s for a leader, panicking with `failure` and the masters' logs if none
/// answers.
async fn expect_leader(
    cluster: &MasterCluster,
    client: &mut OperatorClient,
    failure: &str,
) -> ClusterStatus {
    match wait_for_leader(client, Duration::from_secs(20)).await {
        Some(status) => status,
        None => panic!("{failure}\n{}", cluster.logs()),
    }
}

/// Sets `group`'s weight through the leader, which must answer `Done`.
async fn set_group_weight(client: &mut OperatorClient, group: &str, weight: f64) {
    let request = OperatorRequest::SetGroupWeight {
        group: group.to_string(),
        weight,
    };
    assert!(matches!(
        client.request(&request).await,
        Ok(OperatorResponse::Done)
    ));
}

async fn wait_until(acked: &Mutex<Vec<(String, f64)>>, count: usize, timeout: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if acked.lock().expect("not poisoned").len() >= count {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_loses_no_acknowledged_proposal_and_the_master_catches_up() {
    let mut cluster = MasterCluster::start(3, 3);
    let all = [1, 2, 3];
    let mut client = cluster.operator_client(&all, Duration::from_secs(5));
    let status = expect_leader(&cluster, &mut client, "no leader was elected").await;
    let old_leader = status.leader.expect("a leader").id.0;

    // A stream of proposals; only those answered `Done` count as acknowledged.
    let acked: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut proposer_client = cluster.operator_client(&all, Duration::from_secs(3));
    let proposer = {
        let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut attempts = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let group = format!("group-{attempts:05}");
                let weight = f64::from(attempts) + 0.5;
                attempts += 1;
                let request = OperatorRequest::SetGroupWeight {
                    group: group.clone(),
                    weight,
                };
                if let Ok(OperatorResponse::Done) = proposer_client.request(&request).await {
                    acked.lock().expect("not poisoned").push((group, weight));
                }
            }
            attempts
        })
    };
    assert!(
        wait_until(&acked, 30, Duration::from_secs(20)).await,
        "proposals were not acknowledged\n{}",
        cluster.logs()
    );

    cluster.kill(old_leader);
    let killed_at = Instant::now();
    let acked_at_kill = acked.lock().expect("not poisoned").len();
    let survivors: Vec<u64> = all.iter().copied().filter(|id| *id != old_leader).collect();
    let mut survivor_client = cluster.operator_client(&survivors, Duration::from_secs(2));
    let new_leader = loop {
        if let Some(status) = cluster_status(&mut survivor_client).await {
            if let Some(leader) = status.leader.filter(|l| l.id.0 != old_leader) {
                break leader.id.0;
            }
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(10),
            "no new leader within 10 s of killing master {old_leader}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(new_leader, old_leader);
    assert!(
        wait_until(&acked, acked_at_kill + 30, Duration::from_secs(20)).await,
        "the new leader did not acknowledge proposals\n{}",
        cluster.logs()
    );
    stop.store(true, Ordering::Relaxed);
    let attempts = proposer.await.expect("the proposer task");
    let acked = acked.lock().expect("not poisoned").clone();
    assert!(acked.len() as u32 <= attempts);

    // Every acknowledged proposal is in the replicated state (a linearizable read).
    let weights: BTreeMap<String, f64> = match survivor_client
        .request(&OperatorRequest::GroupWeights)
        .await
    {
        Ok(OperatorResponse::GroupWeights(weights)) => weights,
        other => panic!(
            "cannot read the group weights: {other:?}\n{}",
            cluster.logs()
        ),
    };
    for (group, weight) in &acked {
        assert_eq!(
            weights.get(group),
            Some(weight),
            "acknowledged proposal {group}={weight} is missing after the failover"
        );
    }

    // The killed master restarts from its data directory and catches up.
    cluster.spawn(old_leader, false);
    let Some(status) = cluster_status(&mut survivor_client).await else {
        panic!("no status after the restart\n{}", cluster.logs());
    };
    let target = status.commit;
    let started = Instant::now();
    loop {
        if let Some(status) = cluster_status(&mut survivor_client).await {
            let member = status
                .members
                .iter()
                .find(|m| m.id == MasterId(old_leader))
                .expect("the restarted master is still a member");
            if member.matched >= target {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "master {old_leader} did not catch up to index {target}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Truncates every file below `dir` to zero bytes: a torn copy of a data directory.
fn truncate_all_files(dir: &std::path::Path) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir(dir).expect("the data directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            count += truncate_all_files(&path);
        } else {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_len(0))
                .expect("truncate a file");
            count += 1;
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_data_directory_is_refused_with_an_error_naming_it() {
    let mut cluster = MasterCluster::start(1, 1);
    let mut client = cluster.operator_client(&[1], Duration::from_secs(5));
    expect_leader(&cluster, &mut client, "the single master did not lead").await;
    set_group_weight(&mut client, "batch", 2.0).await;
    cluster.kill(1);

    let data_dir = cluster.data_dir(1);
    assert!(truncate_all_files(&data_dir) > 0);
    let (status, stderr) = run_to_exit(cluster.master_command(1, false)).await;
    assert!(
        !status.success(),
        "the master exited 0 on a damaged data directory"
    );
    assert!(
        stderr.contains(&data_dir.display().to_string()),
        "the error does not name the data directory: {stderr}"
    );
}

/// Runs `command` until it exits (it must, within 20 s) and returns its stderr.
async fn run_to_exit(mut command: std::process::Command) -> (std::process::ExitStatus, String) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fullerene master");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the master") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the master kept running");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr)
            .expect("read the master's error output");
    }
    (status, stderr)
}

/// A member whose data directory is gone must not bootstrap a new group on its own (it could
/// vote twice in a term): without `--bootstrap` or `--join` an empty directory is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_data_directory_is_refused_without_an_explicit_bootstrap() {
    let mut cluster = MasterCluster::start(1, 1);
    let mut client = cluster.operator_client(&[1], Duration::from_secs(5));
    expect_leader(&cluster, &mut client, "the single master did not lead").await;
    cluster.kill(1);
    let data_dir = cluster.data_dir(1);
    std::fs::remove_dir_all(&data_dir).expect("wipe the data directory");

    let (status, stderr) = run_to_exit(cluster.plain_master_command(1, false)).await;
    assert!(
        !status.success(),
        "the master started on a wiped data directory"
    );
    assert!(
        stderr.contains("--bootstrap") && stderr.contains(&data_dir.display().to_string()),
        "the error does not say what to do about which directory: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_is_added_and_a_removed_master_stops_serving() {
    let mut cluster = MasterCluster::start(3, 4);
    let mut client = cluster.operator_client(&[1, 2, 3], Duration::from_secs(10));
    expect_leader(&cluster, &mut client, "no leader was elected").await;
    set_group_weight(&mut client, "before-the-change", 3.0).await;

    // Master 4 starts empty, is added, and receives the state (a snapshot, then the log).
    cluster.spawn(4, true);
    cluster.add_master(&mut client, 4).await;
    let added = wait_caught_up(
        &cluster,
        &mut client,
        4,
        Duration::from_secs(20),
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(added.addr, cluster.addrs[&4]);

    // Remove the leader itself: it answers, leaves, and its process exits 0.
    let Some(status) = cluster_status(&mut client).await else {
        panic!("no status\n{}", cluster.logs());
    };
    let leader = status.leader.expect("a leader").id;
    let answer = client
        .request(&OperatorRequest::RemoveMaster { id: leader })
        .await;
    assert!(
        matches!(answer, Ok(OperatorResponse::Done)),
        "remove-master: {answer:?}\n{}",
        cluster.logs()
    );
    assert_eq!(
        cluster.wait_exit(leader.0, Duration::from_secs(10)),
        Some(true),
        "the removed master did not exit 0\n{}",
        cluster.logs()
    );
    let remaining: Vec<u64> = [1, 2, 3, 4]
        .into_iter()
        .filter(|id| *id != leader.0)
        .collect();
    let mut client = cluster.operator_client(&remaining, Duration::from_secs(10));
    let Some(status) = wait_for_leader(&mut client, Duration::from_secs(20)).await else {
        panic!("no leader after the removal\n{}", cluster.logs());
    };
    let mut members: Vec<u64> = status.members.iter().map(|m| m.id.0).collect();
    members.sort_unstable();
    assert_eq!(members, remaining);
    let weights = match client.request(&OperatorRequest::GroupWeights).await {
        Ok(OperatorResponse::GroupWeights(weights)) => weights,
        other => panic!("cannot read the group weights: {other:?}"),
    };
    assert_eq!(weights.get("before-the-change"), Some(&3.0));
}

/// A follower removed while it was down never sees its removal committed; when it restarts,
/// the members it contacts tell it so, and it stops serving instead of campaigning forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_removed_while_down_stops_when_it_restarts() {
    let mut cluster = MasterCluster::start(3, 3);
    let mut client = cluster.operator_client(&[1, 2, 3], Duration::from_secs(10));
    let status = expect_leader(&cluster, &mut client, "no leader was elected").await;
    let leader = status.leader.expect("a leader").id.0;
    let victim = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.kill(victim);
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != victim).collect();
    let mut client = cluster.operator_client(&others, Duration::from_secs(10));
    let answer = client
        .request(&OperatorRequest::RemoveMaster {
            id: MasterId(victim),
        })
        .await;
    assert!(
        matches!(answer, Ok(OperatorResponse::Done)),
        "remove-master: {answer:?}\n{}",
        cluster.logs()
    );
    // More entries after the removal, so the members' view is newer than the victim's log.
    set_group_weight(&mut client, "after-the-removal", 1.5).await;

    cluster.spawn(victim, false);
    assert_eq!(
        cluster.wait_exit(victim, Duration::from_secs(20)),
        Some(true),
        "the master removed while down kept running (or failed)\n{}",
        cluster.logs()
    );
    let log = std::fs::read_to_string(cluster.log_path(victim)).expect("the victim's log");
    assert!(
        log.contains("a member says this master was removed"),
        "the victim did not stop on a member's word\n{log}"
    );
    let Some(status) = wait_for_leader(&mut client, Duration::from_secs(10)).await else {
        panic!(
            "the remaining masters lost their leader\n{}",
            cluster.logs()
        );
    };
    let mut members: Vec<u64> = status.members.iter().map(|m| m.id.0).collect();
    members.sort_unstable();
    assert_eq!(members, others);
}
