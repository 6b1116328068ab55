//! The hostile side of the load test: framework clients that flood, send what no frame may
//! hold, send garbage, never read, or open connections by the hundred. Each keeps trying until
//! the bench stops it and tallies how the masters answered every attempt.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fullerene_client::{open, Link};
use fullerene_proto::limits::MAX_TASK_SPEC_BYTES;
use fullerene_proto::messages::{
    CallOk, CommandSpec, DemandSummary, Executor, FrameworkCall, FrameworkRequest, Leftover,
    MasterToFramework, Offer, PendingDemand, SessionOpen, TaskSpec, MAX_RECONCILE_TASK_IDS,
};
use fullerene_proto::{OfferId, ResourceKind, ResourceVec, Resources, TaskId};
use fullerene_transport::{
    Client, Connection, FramedRecv, FramedSend, TlsMaterial, TransportConfig,
};
use serde::Serialize;

/// The kinds of hostile client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostileKind {
    /// Calls as fast as the stream takes them: reconciliations of unknown tasks, revives,
    /// declines of offers that do not exist, reconciliations over the limit.
    Flood,
    /// Frames announcing more than any frame may hold (16 MiB), task specs over the limit
    /// inside a frame, and a reconciliation of 100,000 tasks.
    Oversized,
    /// Frames of random bytes where a framework call belongs.
    Garbage,
    /// Asks for more and more and never reads what the master sends.
    SlowReader,
    /// Opens sessions on hundreds of connections with one certificate and holds them.
    ConnectionFlood,
}

impl std::str::FromStr for HostileKind {
    type Err = String;

    /// The kind's name as reports print it (`flood`, `slow-reader`, ...).
    fn from_str(text: &str) -> Result<HostileKind, String> {
        HostileKind::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = HostileKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown hostile kind `{text}` (kinds: {})",
                    names.join(", ")
                )
            })
    }
}

impl HostileKind {
    /// The kind's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            HostileKind::Flood => "flood",
            HostileKind::Oversized => "oversized",
            HostileKind::Garbage => "garbage",
            HostileKind::SlowReader => "slow-reader",
            HostileKind::ConnectionFlood => "connection-flood",
        }
    }

    /// Every kind, in report order.
    pub const ALL: [HostileKind; 5] = [
        HostileKind::Flood,
        HostileKind::Oversized,
        HostileKind::Garbage,
        HostileKind::SlowReader,
        HostileKind::ConnectionFlood,
    ];
}

/// How the masters answered one kind of hostile client: attempts, and how many ended each way.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HostileTally {
    /// Calls, frames or connections tried.
    pub attempts: u64,
    /// How they ended, by a short description ("refused: TooLarge", "session ended by the
    /// master", ...).
    pub outcomes: BTreeMap<String, u64>,
}

/// A tally shared by the tasks of one kind.
#[derive(Clone, Default)]
pub struct Tally(Arc<Mutex<HostileTally>>);

impl Tally {
    fn attempt(&self) {
        if let Ok(mut t) = self.0.lock() {
            t.attempts += 1;
        }
    }

    fn outcome(&self, what: impl Into<String>) {
        if let Ok(mut t) = self.0.lock() {
            *t.outcomes.entry(what.into()).or_default() += 1;
        }
    }

    /// What was tallied so far.
    pub fn snapshot(&self) -> HostileTally {
        self.0.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// What a hostile client needs: its certificate, the masters, and when to stop.
#[derive(Clone)]
pub struct HostileContext {
    /// The client's certificate (a framework's).
    pub tls: TlsMaterial,
    /// Every master.
    pub masters: Vec<SocketAddr>,
    /// Set when the bench ends.
    pub stop: Arc<AtomicBool>,
    /// How many connections a connection flood opens.
    pub connections: usize,
}

impl HostileContext {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    async fn pause(&self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Runs one hostile client of `kind` until `ctx.stop`, tallying into `tally`.
pub async fn run(kind: HostileKind, n: usize, ctx: HostileContext, tally: Tally) {
    let result = match kind {
        HostileKind::Flood => flood(n, &ctx, &tally).await,
        HostileKind::Oversized => oversized(n, &ctx, &tally).await,
        HostileKind::Garbage => garbage(n, &ctx, &tally).await,
        HostileKind::SlowReader => slow_reader(n, &ctx, &tally).await,
        HostileKind::ConnectionFlood => connection_flood(&ctx, &tally).await,
    };
    if let Err(e) = result {
        tally.outcome(format!("could not run: {e}"));
    }
}

/// A subscribed framework session, kept with its connection.
struct Subscribed {
    _connection: Connection,
    tx: FramedSend,
    rx: FramedRecv,
}

fn call(call_id: u64, call: FrameworkRequest) -> FrameworkCall {
    FrameworkCall { call_id, call }
}

/// A client endpoint with `max_frame_bytes` (hostile ones send past the masters' limit).
fn client(ctx: &HostileContext, max_frame_bytes: usize) -> Result<Client, String> {
    let config = TransportConfig {
        max_frame_bytes,
        ..TransportConfig::default()
    };
    Client::new(&ctx.tls, config).map_err(|e| e.to_string())
}

/// Subscribes a new framework named `name` with the leader, following one redirect.
async fn subscribe(
    client: &Client,
    ctx: &HostileContext,
    name: &str,
) -> Result<Subscribed, String> {
    let mut targets: Vec<SocketAddr> = ctx.masters.clone();
    let mut last = "no master answered".to_string();
    while let Some(addr) = targets.pop() {
        let Link {
            connection,
            session,
            ..
        } = match open(client, addr, SessionOpen::Framework, Duration::from_secs(2)).await {
            Ok(link) => link,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let (mut tx, mut rx) = (session.tx, session.rx);
        let hello = call(
            1,
            FrameworkRequest::Subscribe {
                framework_id: None,
                name: name.to_string(),
                group: String::new(),
                failover_timeout_ms: 0,
            },
        );
        tx.send(&hello).await.map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_secs(5), rx.recv::<MasterToFramework>()).await {
            Ok(Ok(Some(MasterToFramework::CallResult {
                result: Ok(CallOk::Subscribed { .. }),
                ..
            }))) => {
                return Ok(Subscribed {
                    _connection: connection,
                    tx,
                    rx,
                })
            }
            Ok(Ok(Some(MasterToFramework::Redirect(redirect)))) => {
                if let Some(leader) = redirect.leader {
                    targets.push(leader.addr);
                }
                last = "redirected".to_string();
            }
            Ok(Ok(other)) => last = format!("unexpected answer: {other:?}"),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "no answer within 5 s".to_string(),
        }
    }
    Err(last)
}

/// [`subscribe`], tallying a failure and pausing before the caller tries again.
async fn subscribe_or_tally(
    client: &Client,
    ctx: &HostileContext,
    tally: &Tally,
    name: &str,
) -> Option<Subscribed> {
    match subscribe(client, ctx, name).await {
        Ok(session) => Some(session),
        Err(e) => {
            tally.outcome(format!("could not subscribe: {e}"));
            ctx.pause(200).await;
            None
        }
    }
}

fn unknown_ids(count: usize, tag: &str) -> Vec<TaskId> {
    (0..count)
        .map(|i| TaskId::from(format!("{tag}-{i}")))
        .collect()
}

/// Names an answer or an end of the session for a tally.
fn describe(received: Result<Option<MasterToFramework>, impl std::fmt::Display>) -> String {
    match received {
        Ok(Some(MasterToFramework::CallResult {
            result: Err(error), ..
        })) => format!("refused: {:?}", error.code),
        Ok(Some(MasterToFramework::CallResult { result: Ok(_), .. })) => "answered".to_string(),
        Ok(Some(MasterToFramework::Redirect(_))) => "redirected".to_string(),
        Ok(Some(_)) => "other message".to_string(),
        Ok(None) => "session ended by the master".to_string(),
        Err(e) => format!("session ended by the master: {e}"),
    }
}

async fn flood(n: usize, ctx: &HostileContext, tally: &Tally) -> Result<(), String> {
    let client = client(ctx, fullerene_transport::framing::MAX_FRAME_BYTES)?;
    let mut round = 0u64;
    while !ctx.stopped() {
        let Some(Subscribed {
            _connection,
            mut tx,
            mut rx,
        }) = subscribe_or_tally(&client, ctx, tally, &format!("hostile-flood-{n}")).await
        else {
            continue;
        };
        let reader_tally = tally.clone();
        let reader = tokio::spawn(async move {
            loop {
                let received = rx.recv::<MasterToFramework>().await;
                let ended = !matches!(received, Ok(Some(_)));
                match &received {
                    Ok(Some(MasterToFramework::CallResult { .. }) | None) | Err(_) => {
                        reader_tally.outcome(describe(received));
                    }
                    _ => {}
                }
                if ended {
                    return;
                }
            }
        });
        let mut call_id = 1;
        while !ctx.stopped() && !reader.is_finished() {
            call_id += 1;
            round += 1;
            let request = match round % 4 {
                0 => FrameworkRequest::Reconcile {
                    task_ids: unknown_ids(MAX_RECONCILE_TASK_IDS, "flood"),
                },
                1 => FrameworkRequest::Revive,
                2 => FrameworkRequest::Decline {
                    offer_ids: vec![OfferId(u64::MAX - round)],
                    refuse_ms: 0,
                },
                _ => FrameworkRequest::Reconcile {
                    task_ids: unknown_ids(MAX_RECONCILE_TASK_IDS + 1, "flood"),
                },
            };
            tally.attempt();
            if let Err(e) = tx.send(&call(call_id, request)).await {
                tally.outcome(format!("send failed: {e}"));
                break;
            }
        }
        reader.abort();
        let _ = tx
            .send(&call(call_id + 1, FrameworkRequest::Teardown))
            .await;
    }
    Ok(())
}

async fn oversized(n: usize, ctx: &HostileContext, tally: &Tally) -> Result<(), String> {
    let client = client(ctx, fullerene_transport::framing::MAX_FRAME_BYTES)?;
    while !ctx.stopped() {
        let Some(mut session) =
            subscribe_or_tally(&client, ctx, tally, &format!("hostile-oversized-{n}")).await
        else {
            continue;
        };
        // Inside a frame but over the per-call limits: a reconciliation of 100,000 tasks, and
        // (on a real offer) a task spec over MAX_TASK_SPEC_BYTES.
        tally.attempt();
        let request = FrameworkRequest::Reconcile {
            task_ids: unknown_ids(100_000, "x"),
        };
        if let Err(e) = session.tx.send(&call(2, request)).await {
            tally.outcome(format!("send failed: {e}"));
            continue;
        }
        tally.outcome(answer_to(&mut session.rx, 2).await);
        if let Some(offer) = wait_for_offer(&mut session).await {
            tally.attempt();
            let accept = FrameworkRequest::Accept {
                offer_ids: vec![offer.id],
                tasks: vec![bloated_task(&offer, MAX_TASK_SPEC_BYTES + 1024)],
                leftover: Leftover::Decline { refuse_ms: 0 },
            };
            match session.tx.send(&call(3, accept)).await {
                Ok(()) => tally.outcome(answer_to(&mut session.rx, 3).await),
                Err(e) => tally.outcome(format!("send failed: {e}")),
            }
        }
        // Past any frame: the master must refuse the frame from its length alone, not read
        // or buffer it.
        tally.attempt();
        let body = vec![fullerene_proto::codec::WIRE_VERSION; 64 << 10];
        match session.tx.send_hostile_frame(16 << 20, &body).await {
            Ok(()) => tally.outcome(answer_to(&mut session.rx, 4).await),
            Err(e) => tally.outcome(format!("frame refused: {e}")),
        }
        ctx.pause(100).await;
    }
    Ok(())
}

/// A task whose environment makes its spec about `bytes` long, sized to fit `offer`.
fn bloated_task(offer: &Offer, bytes: usize) -> TaskSpec {
    let env = (0..bytes / 4096 + 1)
        .map(|i| (format!("PAD_{i}"), "x".repeat(4096)))
        .collect();
    let small = ResourceVec::from_pairs(&[(ResourceKind::Cpus, 0.1), (ResourceKind::MemMib, 16.0)]);
    let room = offer.resources.to_vec().unwrap_or(ResourceVec::ZERO);
    TaskSpec {
        id: TaskId::from(format!("bloated-{}", offer.id.0)),
        name: "bloated".to_string(),
        executor: Executor::Command(CommandSpec {
            program: "true".to_string(),
            args: Vec::new(),
            env,
        }),
        resources: Resources::from(small.min(&room)),
        origin: None,
        kill_grace_ms: 0,
    }
}

/// The answer to call `call_id` (other messages skipped), described for a tally.
async fn answer_to(rx: &mut FramedRecv, call_id: u64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let received = tokio::time::timeout_at(deadline, rx.recv::<MasterToFramework>()).await;
        match received {
            Err(_) => return "no answer within 10 s".to_string(),
            Ok(Ok(Some(MasterToFramework::CallResult { call_id: id, .. }))) if id != call_id => {}
            Ok(Ok(Some(message @ MasterToFramework::CallResult { .. }))) => {
                return describe(Ok::<_, String>(Some(message)))
            }
            Ok(Ok(Some(_))) => {}
            Ok(other) => return describe(other),
        }
    }
}

/// Asks for offers and waits up to 5 s for one.
async fn wait_for_offer(session: &mut Subscribed) -> Option<Offer> {
    let demand = DemandSummary {
        pending: vec![PendingDemand {
            resources: Resources::from(ResourceVec::from_pairs(&[(ResourceKind::Cpus, 0.1)])),
            count: 1,
            pri_score: 0.5,
        }],
        remaining_work: 1.0,
        srpt: 1.0,
        reservation_progress: None,
    };
    session
        .tx
        .send(&call(5, FrameworkRequest::UpdateDemand(demand)))
        .await
        .ok()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, session.rx.recv::<MasterToFramework>()).await {
            Ok(Ok(Some(MasterToFramework::Offers(offers)))) => {
                if let Some(offer) = offers.into_iter().next() {
                    return Some(offer);
                }
            }
            Ok(Ok(Some(_))) => {}
            _ => return None,
        }
    }
}

async fn garbage(n: usize, ctx: &HostileContext, tally: &Tally) -> Result<(), String> {
    let client = client(ctx, fullerene_transport::framing::MAX_FRAME_BYTES)?;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
    while !ctx.stopped() {
        let Some(mut session) =
            subscribe_or_tally(&client, ctx, tally, &format!("hostile-garbage-{n}")).await
        else {
            continue;
        };
        // A frame with the right version byte and random bytes after it (a serialized byte
        // string: its length, then the bytes), where a framework call belongs.
        let len = 1 + (xorshift(&mut seed) % 4096) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
        tally.attempt();
        match session.tx.send(&bytes).await {
            Ok(()) => {
                let received =
                    tokio::time::timeout(Duration::from_secs(5), session.rx.recv()).await;
                match received {
                    Ok(received) => tally.outcome(describe(received)),
                    Err(_) => tally.outcome("no answer within 5 s"),
                }
            }
            Err(e) => tally.outcome(format!("send failed: {e}")),
        }
        ctx.pause(50).await;
    }
    Ok(())
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

async fn slow_reader(n: usize, ctx: &HostileContext, tally: &Tally) -> Result<(), String> {
    let client = client(ctx, fullerene_transport::framing::MAX_FRAME_BYTES)?;
    while !ctx.stopped() {
        let Some(mut session) =
            subscribe_or_tally(&client, ctx, tally, &format!("hostile-slow-{n}")).await
        else {
            continue;
        };
        tally.attempt();
        // Every reconciliation makes the master queue an update per task; none is ever read.
        let mut call_id = 1;
        let ended = loop {
            if ctx.stopped() {
                break false;
            }
            call_id += 1;
            let request = FrameworkRequest::Reconcile {
                task_ids: unknown_ids(MAX_RECONCILE_TASK_IDS, "slow"),
            };
            let sent = tokio::time::timeout(
                Duration::from_secs(1),
                session.tx.send(&call(call_id, request)),
            )
            .await;
            match sent {
                Ok(Ok(())) => ctx.pause(20).await,
                // The master stopped reading us too (flow control): fine, keep not reading.
                Err(_) => ctx.pause(200).await,
                Ok(Err(e)) => {
                    tally.outcome(format!("session ended by the master: {e}"));
                    break true;
                }
            }
        };
        if !ended {
            // Whether the master had already given up on it.
            let state = tokio::time::timeout(Duration::from_millis(100), session.tx.stopped());
            match state.await {
                Ok(_) => tally.outcome("session ended by the master"),
                Err(_) => tally.outcome("still held when the bench ended"),
            }
        }
    }
    Ok(())
}

async fn connection_flood(ctx: &HostileContext, tally: &Tally) -> Result<(), String> {
    let client = client(ctx, fullerene_transport::framing::MAX_FRAME_BYTES)?;
    let mut held = Vec::new();
    let mut targets = ctx.masters.iter().cycle();
    for _ in 0..ctx.connections {
        if ctx.stopped() {
            break;
        }
        let Some(addr) = targets.next() else { break };
        tally.attempt();
        match open(
            &client,
            *addr,
            SessionOpen::Framework,
            Duration::from_secs(2),
        )
        .await
        {
            Ok(link) => held.push(link),
            Err(e) => tally.outcome(format!("refused: {e}")),
        }
    }
    while !ctx.stopped() {
        ctx.pause(100).await;
    }
    // Which of the held sessions the masters had closed by the end.
    for mut link in held {
        let probe = tokio::time::timeout(
            Duration::from_millis(50),
            link.session.rx.recv::<MasterToFramework>(),
        )
        .await;
        match probe {
            Ok(Ok(None) | Err(_)) => tally.outcome("opened, later closed by the master"),
            _ => tally.outcome("opened and held to the end"),
        }
    }
    Ok(())
}
