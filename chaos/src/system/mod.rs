//! The whole-system deterministic simulation: masters, agents and frameworks, all real cores,
//! in one thread, on a virtual clock, driven by one seed (the FoundationDB and TigerBeetle
//! style).
//!
//! Under test, unchanged: the masters' [`MasterCore`](fullerene_master::core::MasterCore)s
//! with their Raft nodes over [`MemStorage`](fullerene_master::storage::MemStorage); the
//! agents' [`AgentCore`](fullerene_agent::core::AgentCore)s; the SDK's
//! [`DriverCore`](fullerene_sdk::driver::DriverCore) with the DAG-job framework
//! ([`DagScheduler`](fullerene_sdk::dag::DagScheduler), Graphene + Carbyne), optionally one
//! session framework for several jobs
//! ([`SessionScheduler`](fullerene_sdk::session::SessionScheduler)), and the
//! leader-following [`Follower`](fullerene_client::follow::Follower). Simulated: the network
//! (Raft messages lost, delayed, duplicated and so reordered; sessions as ordered streams that
//! break on partitions and crashes and are noticed after an idle timeout), the agents'
//! checkpoint (records durable only once synced) and executors (processes that outlive their
//! agent), and the thin shells around the cores: the master's session tasks
//! (`master/src/server/sessions.rs`: the first frame opens the session, heartbeats are
//! acknowledged by the shell, a redirect ends the session), the agent's loop
//! (`agent/src/shell.rs`: sync before spawn and before sending, resend of unacknowledged
//! updates, heartbeats and the silence limit) and the driver's (`framework-sdk/src/driver/
//! shell.rs`). Those shell models are the one part written twice; each names the shell it
//! mirrors.
//!
//! Every random choice (latencies, faults, the order of simultaneous events) comes from one
//! ChaCha generator, and the cores read only the virtual clock, so a seed replays bit for bit.
//! raft-rs's own randomised election timeout is off; each master's tick interval is jittered
//! instead.
//!
//! The run records a [`history`] of facts; the [`checker`] reads only that history.

pub mod checker;
mod faults;
pub mod history;
mod net;
mod nodes;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fullerene_proto::{FrameworkId, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub use checker::{check, CheckReport, Invariant, Violation};
pub use faults::{FaultKind, FaultRates, FaultSet, UnknownFault};
use history::{Fact, Step};
use net::{Conn, Frame};
use nodes::{SimAgent, SimFramework, SimMaster};

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Masters (3 or 5).
    pub masters: usize,
    /// Agents.
    pub agents: usize,
    /// DAG jobs, each its own framework.
    pub jobs: usize,
    /// More DAG jobs, all run by one session framework beside the per-job frameworks: the
    /// SDK's [`SessionScheduler`](fullerene_sdk::session::SessionScheduler) around a
    /// [`SessionFramework`](fullerene_sdk::session::SessionFramework) (Decima's multi-job
    /// framework, here under the fair session policy, which interleaves the jobs most). A
    /// session that ends before its jobs do starts again with those not completed. 0: none.
    pub session_jobs: usize,
    /// The faults injected.
    pub faults: FaultSet,
    /// How often.
    pub rates: FaultRates,
    /// How long faults are injected.
    pub fault_phase: Duration,
    /// How long, after faults stop, every job has to complete.
    pub liveness_bound: Duration,
    /// Whether the history also records every frame frameworks send and receive (for a
    /// trace file; it makes runs slower).
    pub trace_frames: bool,
}

impl SimOptions {
    /// 3 masters, 8 agents, 6 jobs, every fault for 30 s of virtual time, and 120 s for the
    /// jobs to complete afterwards.
    pub fn new() -> SimOptions {
        SimOptions {
            masters: 3,
            agents: 8,
            jobs: 6,
            session_jobs: 0,
            faults: FaultSet::all(),
            rates: FaultRates::default(),
            fault_phase: Duration::from_secs(30),
            liveness_bound: Duration::from_secs(120),
            trace_frames: false,
        }
    }
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions::new()
    }
}

/// What one seed's run did.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Virtual time simulated.
    pub sim_time_s: f64,
    /// Events handled.
    pub events: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Checks run, by invariant.
    pub checks: BTreeMap<Invariant, u64>,
    /// Broken promises.
    pub violations: Vec<Violation>,
    /// Jobs submitted and completed.
    pub jobs: usize,
    /// Of them, completed.
    pub jobs_completed: usize,
    /// The recorded history (the trace), kept only when asked for.
    #[serde(skip)]
    pub history: Vec<Step>,
}

/// The trace around a violation: the last `context` steps up to it that concern the same
/// processes, as lines.
pub fn trace_excerpt(history: &[Step], step: usize, context: usize) -> Vec<String> {
    let start = step.saturating_sub(context);
    history[start..=step.min(history.len().saturating_sub(1))]
        .iter()
        .enumerate()
        .map(|(i, s)| format!("#{:<7} {s}", start + i))
        .collect()
}

/// Runs one seed and checks its history.
pub fn run_seed(seed: u64, options: &SimOptions, keep_history: bool) -> RunReport {
    let mut world = World::new(seed, options.clone());
    world.run();
    let report = check(&world.history);
    let jobs_completed = world
        .history
        .iter()
        .filter(|s| matches!(s.fact, Fact::JobCompleted { .. }))
        .count();
    RunReport {
        seed,
        sim_time_s: world.now.as_secs_f64(),
        events: world.events_handled,
        faults: world.injected.clone(),
        checks: report.checks,
        violations: report.violations,
        jobs: options.jobs + options.session_jobs,
        jobs_completed,
        history: if keep_history {
            world.history
        } else {
            Vec::new()
        },
    }
}

/// A process of the simulated cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Node {
    Master(u64),
    Agent(usize),
    Framework(usize),
}

/// A timer of an agent's shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AgentTimer {
    /// A session attempt is due.
    Attempt,
    /// Heartbeat (and check the master's silence).
    Heartbeat,
    /// Resend unacknowledged updates if nothing was acknowledged since the last retry.
    Retry,
    /// The registration on this connection was not answered in time.
    JoinTimeout(u64),
}

/// What happens at an instant.
#[derive(Debug)]
pub(crate) enum Event {
    MasterTick(u64, u64),
    /// Master (id, incarnation)'s disk finishes the store jobs queued so far.
    MasterDisk(u64, u64),
    Raft {
        from: u64,
        message: Box<raft::eraftpb::Message>,
    },
    /// A frame arrives at its receiver's end of a connection.
    Frame {
        conn: u64,
        to_master: bool,
        frame: Box<Frame>,
    },
    /// A side notices that its connection broke (idle timeout).
    Broken {
        conn: u64,
        to_master: bool,
    },
    /// The master's session task ended: the core is told (after a shell-side close).
    SessionEnded {
        conn: u64,
    },
    Agent {
        agent: usize,
        incarnation: u64,
        timer: AgentTimer,
    },
    /// A process exits on its own.
    ProcessExit {
        pid: u64,
    },
    /// A killed process is gone.
    ProcessKilled {
        pid: u64,
    },
    /// The agent's executor reports a process's end.
    ExecEnded {
        agent: usize,
        incarnation: u64,
        pid: u64,
        signaled: bool,
    },
    /// A framework's connection attempt is due.
    FrameworkConnect {
        framework: usize,
        incarnation: u64,
        addr: std::net::SocketAddr,
    },
    /// A framework's connection opened (`true`) or timed out.
    FrameworkOpened {
        framework: usize,
        incarnation: u64,
        conn: u64,
        opened: bool,
    },
    /// A job is submitted (again) as a new framework.
    Submit {
        job: usize,
    },
    /// The session jobs not completed are submitted (again) as a new session framework.
    SubmitSession,
    Restart(Node),
    PartitionHeals,
    FaultTick,
    Sample,
}

/// The whole simulated cluster.
pub(crate) struct World {
    pub(crate) options: SimOptions,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) now: Time,
    queue: BTreeMap<(Time, u32, u64), Event>,
    next_seq: u64,
    pub(crate) events_handled: u64,
    pub(crate) history: Vec<Step>,
    pub(crate) injected: BTreeMap<FaultKind, u64>,
    pub(crate) faults_on: bool,
    pub(crate) masters: BTreeMap<u64, SimMaster>,
    pub(crate) agents: Vec<SimAgent>,
    pub(crate) frameworks: Vec<SimFramework>,
    pub(crate) jobs: Vec<nodes::JobSlot>,
    pub(crate) conns: BTreeMap<u64, Conn>,
    pub(crate) next_conn: u64,
    pub(crate) processes: BTreeMap<u64, nodes::Process>,
    pub(crate) next_pid: u64,
    /// Directed links that drop everything.
    pub(crate) cut: BTreeSet<(Node, Node)>,
    pub(crate) partition: Option<FaultKind>,
    /// Agents the history has seen lost (until they register again).
    pub(crate) reported_lost: BTreeSet<fullerene_proto::AgentId>,
    pub(crate) paused: BTreeMap<Node, Time>,
}

/// Usual one-way latency of a message: a LAN's.
const LATENCY: (Duration, Duration) = (Duration::from_micros(200), Duration::from_millis(3));
/// How long after a connection broke its ends notice (QUIC's idle timeout).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the leader's accounting is sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// How often faults are drawn.
const FAULT_TICK: Duration = Duration::from_millis(100);
/// How long the run goes on after the last job completed, for acknowledgements to settle.
const SETTLE: Duration = Duration::from_secs(5);
/// How long past the liveness bound masters have to catch up with the committed log.
const CATCH_UP: Duration = Duration::from_secs(10);

impl World {
    fn new(seed: u64, options: SimOptions) -> World {
        let mut world = World {
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: Time::ZERO,
            queue: BTreeMap::new(),
            next_seq: 0,
            events_handled: 0,
            history: Vec::new(),
            injected: BTreeMap::new(),
            faults_on: false,
            masters: BTreeMap::new(),
            agents: Vec::new(),
            frameworks: Vec::new(),
            jobs: Vec::new(),
            conns: BTreeMap::new(),
            next_conn: 1,
            processes: BTreeMap::new(),
            next_pid: 1,
            cut: BTreeSet::new(),
            partition: None,
            reported_lost: BTreeSet::new(),
            paused: BTreeMap::new(),
            options,
        };
        world.build();
        world
    }

    /// Records a fact.
    pub(crate) fn record(&mut self, fact: Fact) {
        self.history.push(Step { at: self.now, fact });
    }

    /// Records a shell's doing (for the trace).
    pub(crate) fn note(&mut self, process: Node, event: String) {
        let process = match process {
            Node::Master(id) => format!("master {id}"),
            Node::Agent(i) => format!("agent-{i}"),
            Node::Framework(f) => format!("framework {f}"),
        };
        self.record(Fact::Shell { process, event });
    }

    /// Records an injected fault.
    pub(crate) fn fault(&mut self, kind: FaultKind, detail: String) {
        *self.injected.entry(kind).or_default() += 1;
        self.record(Fact::Fault { kind, detail });
    }

    /// Whether `kind` may strike now.
    pub(crate) fn fault_on(&self, kind: FaultKind) -> bool {
        self.faults_on && self.options.faults.has(kind)
    }

    /// Draws whether a fault of probability `p` strikes.
    pub(crate) fn chance(&mut self, kind: FaultKind, p: f64) -> bool {
        self.fault_on(kind) && p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }

    /// A uniform duration in `range`.
    pub(crate) fn between(&mut self, range: (Duration, Duration)) -> Duration {
        let (lo, hi) = (range.0.as_micros() as u64, range.1.as_micros() as u64);
        Duration::from_micros(self.rng.gen_range(lo..=hi.max(lo)))
    }

    /// A message's one-way latency, sometimes delayed further (a [`FaultKind::Delay`]).
    pub(crate) fn latency(&mut self) -> Duration {
        let base = self.between(LATENCY);
        let delay = self.options.rates.delay;
        if self.chance(FaultKind::Delay, delay) {
            *self.injected.entry(FaultKind::Delay).or_default() += 1;
            let max = self.options.rates.max_delay;
            base + self.between((Duration::ZERO, max))
        } else {
            base
        }
    }

    /// Schedules `event` at `at`; simultaneous events run in a seeded random order.
    pub(crate) fn at(&mut self, at: Time, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let shuffle = self.rng.gen::<u32>();
        self.queue.insert((at.max(self.now), shuffle, seq), event);
    }

    /// Schedules `event` at `at` after every event scheduled there the same way before it,
    /// and before those in the seeded random order.
    fn at_in_order(&mut self, at: Time, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.insert((at.max(self.now), 0, seq), event);
    }

    /// Schedules `event` after `span`.
    pub(crate) fn after(&mut self, span: Duration, event: Event) {
        let at = self.now.saturating_add(span);
        self.at(at, event);
    }

    /// Whether `from` can reach `to` now.
    pub(crate) fn reachable(&self, from: Node, to: Node) -> bool {
        !self.cut.contains(&(from, to))
    }

    /// The process an event is for, when it is one process's (deferred while it is paused).
    fn owner(&self, event: &Event) -> Option<Node> {
        Some(match event {
            Event::MasterTick(id, _) | Event::MasterDisk(id, _) => Node::Master(*id),
            Event::Raft { message, .. } => Node::Master(message.to),
            Event::Frame {
                conn, to_master, ..
            }
            | Event::Broken { conn, to_master } => {
                let conn = self.conns.get(conn)?;
                if *to_master {
                    Node::Master(conn.master)
                } else {
                    conn.client
                }
            }
            Event::SessionEnded { conn } => Node::Master(self.conns.get(conn)?.master),
            Event::Agent { agent, .. } | Event::ExecEnded { agent, .. } => Node::Agent(*agent),
            Event::FrameworkConnect { framework, .. }
            | Event::FrameworkOpened { framework, .. } => Node::Framework(*framework),
            _ => return None,
        })
    }

    fn run(&mut self) {
        self.after(Duration::ZERO, Event::FaultTick);
        self.after(SAMPLE_INTERVAL, Event::Sample);
        self.faults_on = true;
        let fault_end = Time::ZERO.saturating_add(self.options.fault_phase);
        let deadline = fault_end.saturating_add(self.options.liveness_bound);
        let mut settle_until: Option<Time> = None;
        let catch_up_bound = deadline.saturating_add(CATCH_UP);
        let mut healed = false;
        while let Some(((at, _, _), event)) = self.queue.pop_first() {
            if !healed && at >= fault_end {
                self.now = fault_end;
                self.heal();
                healed = true;
            }
            let settled = settle_until.is_some_and(|until| at > until);
            // Once settled, a master that is up may still be applying the last entries: the
            // run ends when every one caught up (no committed change is lost), or at the bound.
            if at > deadline || (settled && (self.masters_caught_up() || at > catch_up_bound)) {
                break;
            }
            self.now = at;
            if let Some(node) = self.owner(&event) {
                if let Some(&until) = self.paused.get(&node) {
                    if until > self.now {
                        // In the order they came: a paused process reads its sockets in order.
                        self.at_in_order(until, event);
                        continue;
                    }
                    self.paused.remove(&node);
                }
            }
            self.events_handled += 1;
            self.handle(event);
            if healed && settle_until.is_none() && self.all_jobs_completed() {
                settle_until = Some(self.now.saturating_add(SETTLE));
            }
        }
        self.finish();
    }

    /// Whether every master that is up has applied the whole committed log (as far as any
    /// master applied it).
    fn masters_caught_up(&self) -> bool {
        let applied: Vec<u64> = self
            .masters
            .values()
            .filter_map(|m| Some(m.core.as_ref()?.node().applied_index()))
            .collect();
        let highest = applied.iter().copied().max().unwrap_or(0);
        applied.iter().all(|&a| a == highest)
    }

    fn all_jobs_completed(&self) -> bool {
        self.jobs.iter().all(|job| job.completed)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::MasterTick(id, incarnation) => self.master_tick(id, incarnation),
            Event::MasterDisk(id, incarnation) => self.master_disk(id, incarnation),
            Event::Raft { from, message } => self.raft_arrives(from, *message),
            Event::Frame {
                conn,
                to_master,
                frame,
            } => {
                if to_master {
                    self.master_frame(conn, *frame);
                } else {
                    self.client_frame(conn, *frame);
                }
            }
            Event::Broken { conn, to_master } => {
                if to_master {
                    self.master_side_ends(conn);
                } else {
                    self.client_frame(conn, Frame::End);
                }
            }
            Event::SessionEnded { conn } => self.session_ended(conn),
            Event::Agent {
                agent,
                incarnation,
                timer,
            } => self.agent_timer(agent, incarnation, timer),
            Event::ProcessExit { pid } => self.process_exits(pid, false),
            Event::ProcessKilled { pid } => self.process_exits(pid, true),
            Event::ExecEnded {
                agent,
                incarnation,
                pid,
                signaled,
            } => self.exec_ended(agent, incarnation, pid, signaled),
            Event::FrameworkConnect {
                framework,
                incarnation,
                addr,
            } => self.framework_connect(framework, incarnation, addr),
            Event::FrameworkOpened {
                framework,
                incarnation,
                conn,
                opened,
            } => self.framework_opened(framework, incarnation, conn, opened),
            Event::Submit { job } => self.submit(job),
            Event::SubmitSession => self.submit_session(),
            Event::Restart(node) => self.restart(node),
            Event::PartitionHeals => {
                self.cut.clear();
                self.partition = None;
            }
            Event::FaultTick => {
                if self.faults_on {
                    self.inject_faults();
                    self.after(FAULT_TICK, Event::FaultTick);
                }
            }
            Event::Sample => {
                self.sample_accounting();
                self.after(SAMPLE_INTERVAL, Event::Sample);
            }
        }
    }

    /// Faults stop: partitions heal, crashed and paused processes come back.
    fn heal(&mut self) {
        self.faults_on = false;
        self.record(Fact::FaultsStopped);
        self.cut.clear();
        self.partition = None;
        // A paused process's deferred events already wait for the pause's end (at most a
        // pause's length away): it resumes then, with its stale beliefs, as it would.
        self.paused.clear();
        let mut down: Vec<Node> = Vec::new();
        for (id, master) in &self.masters {
            if master.core.is_none() {
                down.push(Node::Master(*id));
            }
        }
        for (i, agent) in self.agents.iter().enumerate() {
            if agent.core.is_none() {
                down.push(Node::Agent(i));
            }
        }
        for node in down {
            self.restart(node);
        }
    }

    fn finish(&mut self) {
        let applied = self
            .masters
            .iter()
            .filter_map(|(id, m)| Some((*id, m.core.as_ref()?.node().applied_index())))
            .collect();
        let live_frameworks: Vec<FrameworkId> = self
            .frameworks
            .iter()
            .filter(|f| f.alive && !f.stopping)
            .filter_map(|f| f.core.framework_id().cloned())
            .collect();
        self.record(Fact::End {
            applied,
            live_frameworks,
        });
    }

    /// Draws this fault tick's faults.
    fn inject_faults(&mut self) {
        let tick = FAULT_TICK.as_secs_f64();
        let rates = self.options.rates.clone();
        if self.partition.is_none() {
            let kinds: Vec<FaultKind> = FaultKind::ALL
                .into_iter()
                .filter(|k| k.is_partition() && self.fault_on(*k))
                .collect();
            if !kinds.is_empty() && self.rng.gen_bool((rates.partition_per_s * tick).min(1.0)) {
                let kind = kinds[self.rng.gen_range(0..kinds.len())];
                self.start_partition(kind);
            }
        }
        if self.chance(FaultKind::MasterCrash, rates.master_crash_per_s * tick) {
            let id = self.rng.gen_range(1..=self.options.masters as u64);
            if self.masters[&id].core.is_some() {
                self.fault(FaultKind::MasterCrash, format!("master {id}"));
                self.crash_master(id);
            }
        }
        if self.chance(FaultKind::AgentCrash, rates.agent_crash_per_s * tick) {
            let i = self.rng.gen_range(0..self.agents.len());
            if self.agents[i].core.is_some() {
                let name = self.agents[i].id.to_string();
                self.fault(FaultKind::AgentCrash, name);
                self.crash_agent(i);
            }
        }
        if self.chance(
            FaultKind::FrameworkCrash,
            rates.framework_crash_per_s * tick,
        ) {
            let live: Vec<usize> = (0..self.frameworks.len())
                .filter(|&f| self.frameworks[f].alive && !self.frameworks[f].stopping)
                .collect();
            if !live.is_empty() {
                let f = live[self.rng.gen_range(0..live.len())];
                let detail = format!("framework of {}", self.frameworks[f].name);
                self.fault(FaultKind::FrameworkCrash, detail);
                self.crash_framework(f, "crashed".to_string());
            }
        }
        if self.chance(FaultKind::Pause, rates.pause_per_s * tick) {
            let node = self.random_node();
            if !self.paused.contains_key(&node) {
                let length = self.between(rates.pause_length);
                self.fault(FaultKind::Pause, format!("{node:?} for {length:?}"));
                self.paused.insert(node, self.now.saturating_add(length));
            }
        }
        if self.chance(FaultKind::ClockJump, rates.clock_jump_per_s * tick) {
            let node = self.random_node();
            let max = rates.max_clock_jump.as_millis() as i64;
            let jump = self.rng.gen_range(-max..=max);
            self.fault(FaultKind::ClockJump, format!("{node:?} by {jump} ms"));
            self.jump_clock(node, jump);
        }
        if self.chance(
            FaultKind::StorageWriteError,
            rates.storage_error_per_s * tick,
        ) {
            let id = self.rng.gen_range(1..=self.options.masters as u64);
            if self.masters[&id].core.is_some() {
                self.fault(
                    FaultKind::StorageWriteError,
                    format!("master {id}'s next write"),
                );
                self.masters[&id].store.fail_next_persist();
            }
        }
        if self.chance(FaultKind::BadPeer, rates.bad_peer_per_s * tick) {
            self.bad_peer();
        }
    }

    fn random_node(&mut self) -> Node {
        let masters = self.options.masters;
        let total = masters + self.agents.len() + self.frameworks.len();
        let pick = self.rng.gen_range(0..total);
        if pick < masters {
            Node::Master(pick as u64 + 1)
        } else if pick < masters + self.agents.len() {
            Node::Agent(pick - masters)
        } else {
            Node::Framework(pick - masters - self.agents.len())
        }
    }

    fn clients(&self) -> Vec<Node> {
        (0..self.agents.len())
            .map(Node::Agent)
            .chain((0..self.frameworks.len()).map(Node::Framework))
            .collect()
    }

    /// Cuts `a` from `b`, both ways.
    fn cut_both(&mut self, a: Node, b: Node) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    fn start_partition(&mut self, kind: FaultKind) {
        let masters: Vec<u64> = (1..=self.options.masters as u64).collect();
        let leader = self.leader();
        let detail = match kind {
            FaultKind::Partition => {
                let mut side: BTreeMap<Node, bool> = BTreeMap::new();
                for &m in &masters {
                    side.insert(Node::Master(m), self.rng.gen_bool(0.5));
                }
                for c in self.clients() {
                    side.insert(c, self.rng.gen_bool(0.5));
                }
                let nodes: Vec<(Node, bool)> = side.into_iter().collect();
                for &(a, sa) in &nodes {
                    for &(b, sb) in &nodes {
                        if sa != sb {
                            self.cut.insert((a, b));
                        }
                    }
                }
                let left: Vec<Node> = nodes.iter().filter(|n| n.1).map(|n| n.0).collect();
                format!("{left:?} apart from the rest")
            }
            FaultKind::AsymmetricPartition => {
                let from = masters[self.rng.gen_range(0..masters.len())];
                let to = masters[self.rng.gen_range(0..masters.len())];
                if from == to {
                    return;
                }
                self.cut.insert((Node::Master(from), Node::Master(to)));
                format!("master {from} cannot send to master {to}")
            }
            FaultKind::LeaderIsolation => {
                let Some(leader) = leader else { return };
                let others: Vec<Node> = masters
                    .iter()
                    .filter(|&&m| m != leader)
                    .map(|&m| Node::Master(m))
                    .chain(self.clients())
                    .collect();
                for other in others {
                    self.cut_both(Node::Master(leader), other);
                }
                format!("leader {leader} isolated")
            }
            FaultKind::AgentsCutFromLeader => {
                let Some(leader) = leader else { return };
                let mut cut = Vec::new();
                for i in 0..self.agents.len() {
                    if self.rng.gen_bool(0.4) {
                        self.cut_both(Node::Master(leader), Node::Agent(i));
                        cut.push(i);
                    }
                }
                format!("agents {cut:?} cut from leader {leader}")
            }
            _ => return,
        };
        self.partition = Some(kind);
        self.fault(kind, detail);
        // Connections across the cut break; both ends notice after the idle timeout.
        let crossing: Vec<u64> = self
            .conns
            .values()
            .filter(|c| {
                !self.reachable(c.client, Node::Master(c.master))
                    || !self.reachable(Node::Master(c.master), c.client)
            })
            .map(|c| c.id)
            .collect();
        for conn in crossing {
            self.break_conn(conn);
        }
        let length = self.between(self.options.rates.partition_length);
        self.after(length, Event::PartitionHeals);
    }

    /// The master that believes it leads in the highest term, if any.
    pub(crate) fn leader(&self) -> Option<u64> {
        self.masters
            .iter()
            .filter_map(|(id, m)| {
                let node = m.core.as_ref()?.node();
                node.is_leader().then(|| (node.term(), *id))
            })
            .max()
            .map(|(_, id)| id)
    }

    fn restart(&mut self, node: Node) {
        match node {
            Node::Master(id) => self.restart_master(id),
            Node::Agent(i) => self.restart_agent(i),
            Node::Framework(_) => {}
        }
    }

    fn jump_clock(&mut self, node: Node, jump_ms: i64) {
        match node {
            Node::Master(id) => {
                if let Some(m) = self.masters.get_mut(&id) {
                    m.clock_offset_ms += jump_ms;
                }
            }
            Node::Agent(i) => self.agents[i].clock_offset_ms += jump_ms,
            Node::Framework(_) => {
                // Frameworks read only their monotonic clock.
            }
        }
    }
}

impl World {
    /// Opens a connection from `client` to `master`; returns its id.
    pub(crate) fn open_conn(&mut self, master: u64, client: Node) -> u64 {
        let id = self.next_conn;
        self.next_conn += 1;
        let master_incarnation = self.masters[&master].incarnation;
        self.note(client, format!("opens connection {id} to master {master}"));
        self.conns.insert(
            id,
            Conn::new(id, master, master_incarnation, client, self.now),
        );
        id
    }
}
