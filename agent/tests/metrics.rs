//! The agent's Prometheus endpoint, scraped over HTTP while the agent runs tasks. In its own
//! test binary: the metrics recorder is global to the process.

mod common;

use std::time::Duration;

use common::*;
use fullerene_proto::messages::TaskState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).await.expect("response");
    body
}

fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_shows_tasks_launches_backlog_and_limits() {
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        probe.local_addr().expect("addr")
    };
    fullerene_agent::shell::install_prometheus(addr).expect("metrics endpoint");

    let certs = certs();
    let mut master = FakeMaster::bind(&certs, 1);
    let (_tmp, work) = work_dir();
    let agent = RunningAgent::start(&certs, vec![master.addr()], &work);
    let mut session = next_registration(&mut master).await.accept(vec![]).await;
    session
        .launch(vec![sleep_task("long", 60_000), sleep_task("short", 1)])
        .await;
    let mut updates = Vec::new();
    while updates.len() < 3 {
        updates.push(session.status().await);
    }
    assert!(updates.iter().any(|u| u.state == TaskState::Finished));
    // Let the loop publish after the last update.
    let mut text = String::new();
    for _ in 0..100 {
        text = scrape(addr).await;
        if value(&text, "fullerene_agent_status_backlog") == Some(3.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        value(&text, "fullerene_agent_status_backlog"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "fullerene_agent_tasks_running"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "fullerene_agent_launches_total"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "fullerene_agent_connected"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "fullerene_agent_limits_enforced"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "fullerene_agent_reconnects_total"),
        Some(0.0),
        "{text}"
    );
    for update in &updates {
        session.ack(update).await;
    }
    for _ in 0..100 {
        text = scrape(addr).await;
        if value(&text, "fullerene_agent_status_backlog") == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        value(&text, "fullerene_agent_status_backlog"),
        Some(0.0),
        "{text}"
    );
    agent.stop().await;
}
