//! How fast one agent turns launches into acknowledged status updates: a scripted master on
//! loopback launches `N` sleep tasks of 0 ms in bundles and acks every update as it arrives.
//! Every update is checkpointed (fsynced) before it is sent, so this mostly measures the
//! checkpoint's fsyncs and the QUIC round trips.
//!
//! `cargo run -p fullerene-agent --example launch_rate -- [TASKS] [BUNDLE]` (defaults 2000, 50).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::*;
use fullerene_proto::messages::{TaskSpec, TaskState};
use fullerene_proto::resources::{ResourceVec, Resources};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let bundle: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(50)
        .max(1);

    let certs = certs();
    let mut master = FakeMaster::bind(&certs, 1);
    let (_tmp, work) = work_dir();
    let agent = RunningAgent::start(&certs, vec![master.addr()], &work);
    let mut session = next_registration(&mut master).await.accept(vec![]).await;

    let started = Instant::now();
    let mut launched = 0;
    let mut finished = 0;
    let mut updates = 0;
    while finished < tasks {
        // Keep two bundles in flight.
        while launched < tasks && launched < finished + 2 * bundle {
            let n = bundle.min(tasks - launched);
            let specs = (launched..launched + n)
                .map(|i| TaskSpec {
                    // Small enough that every task in flight fits on the agent.
                    resources: Resources::from("cpus=0.001".parse::<ResourceVec>().expect("r")),
                    ..sleep_task(&format!("t{i}"), 0)
                })
                .collect();
            session.launch(specs).await;
            launched += n;
        }
        let update = session.status().await;
        updates += 1;
        match update.state {
            TaskState::Finished => finished += 1,
            TaskState::Running => {}
            other => panic!(
                "task {} ended {other:?}: {}",
                update.task_id, update.message
            ),
        }
        session.ack(&update).await;
    }
    let elapsed = started.elapsed();
    let checkpoint = std::fs::metadata(work.join("checkpoint.log"))
        .map(|m| m.len())
        .unwrap_or(0);
    agent.stop().await;
    println!(
        "{tasks} sleep tasks in bundles of {bundle}: {:.2} s, {:.0} tasks/s, {:.0} acked updates/s; checkpoint {} bytes at the end",
        elapsed.as_secs_f64(),
        tasks as f64 / elapsed.as_secs_f64(),
        updates as f64 / elapsed.as_secs_f64(),
        checkpoint
    );
}
