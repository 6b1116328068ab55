//! The simulated processes: masters, agents (with their executors and checkpoint) and
//! frameworks, each a real core in a model of its shell.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use fullerene_agent::core::{
    session_silence_limit, Action as AgentAction, AgentCore, CoreConfig as AgentConfig, FromMaster,
    Outcome, Record, Runtime,
};
use fullerene_client::follow::{Attempt, FollowConfig, Follower, Pacing};
use fullerene_master::core::{AgentTimeouts, CoreConfig, Input, MasterCore, Output};
use fullerene_master::raft_node::{run_store_jobs, NodeConfig, Persistence, RaftNode, StoreJob};
use fullerene_master::state::{ClusterSettings, ClusterState};
use fullerene_master::storage::{MemStorage, MemWrite, RaftStore};
use fullerene_proto::messages::{
    AgentState, AgentToMaster, Executor, FrameworkCall, FrameworkRequest, Leftover, MasterToAgent,
    StatusUpdate, TaskState,
};
use fullerene_proto::{AgentId, FrameworkId, Now, OfferId, ResourceVec, TaskKey, Time};
use fullerene_scheduling::allocator::DEFAULT_KAPPA;
use fullerene_sdk::dag::{DagConfig, DagJob, DagScheduler, JobOutcome};
use fullerene_sdk::driver::{
    deliver, Action as DriverAction, DriverConfig, DriverCore, DriverEvent, DriverHandle,
};
use fullerene_sdk::job::Job;
use fullerene_sdk::session::{SessionFramework, SessionPolicyKind, SessionScheduler};
use fullerene_sdk::testkit::{cpus_and_mem, job as make_job, stage};
use rand::Rng;

use super::history::{Accounting, AgentAccount, Fact};
use super::net::{master_addr, master_of, Frame};
use super::{AgentTimer, Event, FaultKind, Node, World};

/// Wall clocks start here (2026), so that a clock jumped back stays positive.
const WALL_EPOCH: Duration = Duration::from_secs(1_780_000_000);
/// How long an agent waits for `Registered`.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an agent resends updates nothing acknowledged.
const STATUS_RETRY: Duration = Duration::from_secs(2);
/// How long a framework's connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the master keeps a disconnected framework's tasks.
const FAILOVER_TIMEOUT_MS: u64 = 10_000;
/// How long a job waits before it is submitted again after its framework ended.
const RESUBMIT_DELAY: Duration = Duration::from_secs(1);

/// A master: its core (none while crashed) and its store, which survives crashes.
pub(crate) struct SimMaster {
    pub(crate) core: Option<MasterCore<MemStorage>>,
    pub(crate) store: MemStorage,
    pub(crate) incarnation: u64,
    pub(crate) clock_offset_ms: i64,
    /// The highest term this master was recorded leading.
    led: u64,
    tick_interval: Duration,
    /// Store jobs handed to the disk, written by the next `MasterDisk` event (together: a
    /// group commit); lost in a crash.
    disk: Vec<StoreJob<MemWrite>>,
    /// Whether a `MasterDisk` event is scheduled.
    disk_busy: bool,
}

/// A process the simulated executor started: it outlives its agent's crash.
#[derive(Clone, Debug)]
pub(crate) struct Process {
    agent: usize,
    task: TaskKey,
    alive: bool,
    /// Set once it was killed, so that its natural exit does not count.
    killed: bool,
}

/// An agent: its core (none while crashed), its checkpoint and its shell's session state.
pub(crate) struct SimAgent {
    pub(crate) id: AgentId,
    pub(crate) core: Option<AgentCore>,
    config: AgentConfig,
    /// Checkpoint records; the first `durable` survive a crash.
    checkpoint: Vec<Record>,
    durable: usize,
    follower: Follower,
    session: AgentSession,
    pub(crate) incarnation: u64,
    pub(crate) clock_offset_ms: i64,
    /// The processes the executor supervises, by task.
    supervised: BTreeMap<TaskKey, u64>,
    /// Where the next session attempt goes, once due.
    next_attempt: Option<SocketAddr>,
    heartbeat_seq: u64,
    acked_since_retry: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum AgentSession {
    Idle,
    Joining {
        conn: u64,
        addr: SocketAddr,
        /// When the registration was sent.
        since: Time,
    },
    Joined {
        conn: u64,
        last_heard: Time,
        period: Duration,
        /// `session_silence_limit` of the period and the master's lost timeout.
        silence_limit: Duration,
    },
}

/// A framework: the SDK's driver core and its scheduler, the DAG framework's for one job or
/// the session framework's for several.
pub(crate) struct SimFramework {
    /// Its job's name, or [`SESSION`].
    pub(crate) name: String,
    role: FrameworkRole,
    pub(crate) principal: String,
    pub(crate) core: DriverCore,
    pub(crate) alive: bool,
    pub(crate) stopping: bool,
    incarnation: u64,
    pub(crate) live: Option<u64>,
}

/// What a framework runs.
enum FrameworkRole {
    /// Job `.0` ([`JobSlot`] index), as its own framework.
    Job(usize, Box<DagScheduler>),
    /// The session jobs (`.0`, [`JobSlot`] indexes, in the session's order) not completed
    /// when it was submitted.
    Session(Vec<usize>, Box<SessionScheduler>),
}

/// The session framework's name, and its principal's.
const SESSION: &str = "session";

/// A job and whether it completed.
pub(crate) struct JobSlot {
    job: Job,
    pub(crate) completed: bool,
    submitted: bool,
    /// Run by the session framework.
    in_session: bool,
}

impl World {
    pub(crate) fn build(&mut self) {
        let voters: Vec<u64> = (1..=self.options.masters as u64).collect();
        // The operator's placement of each job's framework in its group, from the start, as
        // a real cluster's would be set with `fullerene groups set` before the jobs run.
        let mut settings = ClusterSettings::default();
        for j in 0..self.options.jobs {
            settings
                .principal_groups
                .insert(framework_principal(j), job_group(j).to_string());
        }
        settings
            .principal_groups
            .insert(SESSION.to_string(), job_group(0).to_string());
        for &id in &voters {
            let store = MemStorage::new(format!("master-{id}"));
            let tick_interval = NodeConfig::new(id).tick_interval;
            let node =
                RaftNode::bootstrap(node_config(id), store.clone(), &voters, settings.clone())
                    .expect("bootstrapping a fresh in-memory store cannot fail");
            self.masters.insert(
                id,
                SimMaster {
                    core: None,
                    store,
                    incarnation: 0,
                    clock_offset_ms: 0,
                    led: 0,
                    tick_interval,
                    disk: Vec::new(),
                    disk_busy: false,
                },
            );
            self.start_master(id, node);
        }
        for i in 0..self.options.agents {
            let id = AgentId::from(format!("agent-{i}").as_str());
            let total = cpus_and_mem(4.0, 8192.0);
            let config = AgentConfig::new(id.clone(), total);
            self.record(Fact::AgentCapacity {
                agent: id.clone(),
                total,
                allowance: config.overbook_allowance,
            });
            let follower = self.new_follower(i as u64);
            self.agents.push(SimAgent {
                id,
                core: None,
                config,
                checkpoint: Vec::new(),
                durable: 0,
                follower,
                session: AgentSession::Idle,
                incarnation: 0,
                clock_offset_ms: 0,
                supervised: BTreeMap::new(),
                next_attempt: None,
                heartbeat_seq: 0,
                acked_since_retry: true,
            });
            self.start_agent(i);
        }
        let submit_window = self.options.fault_phase / 2;
        for j in 0..self.options.jobs {
            let job = self.random_job(j);
            self.jobs.push(JobSlot {
                job,
                completed: false,
                submitted: false,
                in_session: false,
            });
            let at = self.between((Duration::ZERO, submit_window));
            self.after(at, Event::Submit { job: j });
        }
        // Drawn after the others, so that a run without session jobs replays as before.
        for j in self.options.jobs..self.options.jobs + self.options.session_jobs {
            let job = self.random_job(j);
            self.jobs.push(JobSlot {
                job,
                completed: false,
                submitted: false,
                in_session: true,
            });
        }
        if self.options.session_jobs > 0 {
            let at = self.between((Duration::ZERO, submit_window));
            self.after(at, Event::SubmitSession);
        }
    }

    fn new_follower(&mut self, salt: u64) -> Follower {
        let masters = (1..=self.options.masters as u64).map(master_addr).collect();
        let seed = self.rng.gen::<u64>() ^ salt;
        Follower::new(
            masters,
            FollowConfig {
                pacing: Pacing::Backoff {
                    initial: Duration::from_millis(100),
                    max: Duration::from_secs(2),
                },
                redirects_at_once: 3,
                pass_over: Duration::ZERO,
                seed,
            },
        )
        .expect("the masters are listed")
    }

    /// A small DAG job: a chain or a diamond of 2 to 4 stages of 1 to 5 tasks of 0.5 to 4 s.
    fn random_job(&mut self, j: usize) -> Job {
        let stages = self.rng.gen_range(2..=4u32);
        let mut specs = Vec::new();
        for s in 0..stages {
            let parents: Vec<u32> = match s {
                0 => vec![],
                _ if stages == 4 && s == 3 => vec![1, 2],
                _ if stages == 4 && s == 2 => vec![0],
                _ => vec![s - 1],
            };
            let tasks = self.rng.gen_range(1..=5usize);
            let durations: Vec<f64> = (0..tasks)
                .map(|_| f64::from(self.rng.gen_range(5..=40u32)) / 10.0)
                .collect();
            let cpus = f64::from(self.rng.gen_range(1..=4u32)) / 2.0;
            let mem = f64::from(self.rng.gen_range(1..=8u32)) * 256.0;
            specs.push(stage(s, &parents, &durations, cpus_and_mem(cpus, mem)));
        }
        make_job(&format!("job-{j}"), job_group(j), None, specs)
    }

    // ---- masters ----

    fn start_master(&mut self, id: u64, node: RaftNode<MemStorage>) {
        let members = (1..=self.options.masters as u64)
            .map(|m| (m, master_addr(m)))
            .collect();
        let config = CoreConfig {
            members,
            agent_timeouts: AgentTimeouts {
                heartbeat_interval: Duration::from_millis(250),
                unreachable_after: Duration::from_millis(1500),
                lost_after: Duration::from_secs(4),
            },
            status_resend_interval: Duration::from_secs(1),
            ..CoreConfig::default()
        };
        let mut core = MasterCore::new(node, config);
        let now = self.master_now(id);
        let _ = core.start(now);
        let master = self.masters.get_mut(&id).expect("known master");
        master.core = Some(core);
        master.incarnation += 1;
        let incarnation = master.incarnation;
        let first = self.between((Duration::ZERO, Duration::from_millis(25)));
        self.after(first, Event::MasterTick(id, incarnation));
    }

    fn master_now(&self, id: u64) -> Now {
        let offset = self.masters.get(&id).map_or(0, |m| m.clock_offset_ms);
        wall_now(self.now, offset)
    }

    pub(crate) fn master_tick(&mut self, id: u64, incarnation: u64) {
        let Some(master) = self.masters.get(&id) else {
            return;
        };
        if master.incarnation != incarnation || master.core.is_none() {
            return;
        }
        // ±20% jitter: election timeouts differ without raft-rs's own random generator.
        let interval = master.tick_interval;
        let now = self.master_now(id);
        self.step_master(id, |core| core.tick(now));
        let jitter = self.rng.gen_range(0.8..1.2);
        self.after(interval.mul_f64(jitter), Event::MasterTick(id, incarnation));
    }

    /// Hands master `id` one input.
    pub(crate) fn master_input(&mut self, id: u64, input: Input) {
        let now = self.master_now(id);
        self.step_master(id, |core| core.handle(input, now));
    }

    /// Runs `step` on master `id`'s core, then its `Ready` cycles, then carries out its
    /// outputs (or crashes it, for a storage fault or a crash between persist and send).
    fn step_master(&mut self, id: u64, step: impl FnOnce(&mut MasterCore<MemStorage>)) {
        let now = self.master_now(id);
        let Some(core) = self.masters.get_mut(&id).and_then(|m| m.core.as_mut()) else {
            return;
        };
        step(core);
        let advanced = core.advance(now);
        let trace = core_trace(core);
        let leading = core.node().is_leader().then(|| core.node().term());
        // Read on the leader only, and only when it applied something: a lagging follower
        // would report an agent lost again after it registered again.
        let lost_agents: Vec<AgentId> = if leading.is_some() && !trace.is_empty() {
            lost_agents(core.node().state())
        } else {
            Vec::new()
        };
        let outputs = core.drain_outputs();
        let jobs = core.take_store_jobs();
        self.queue_disk_jobs(id, jobs);
        for (index, term, digest) in trace {
            self.record(Fact::Applied {
                master: id,
                index,
                term,
                digest,
            });
        }
        for agent in lost_agents {
            if self.reported_lost.insert(agent.clone()) {
                self.record(Fact::AgentLost { agent });
            }
        }
        if let Some(term) = leading {
            let master = self.masters.get_mut(&id).expect("known master");
            if term > master.led {
                master.led = term;
                self.record(Fact::Leader { master: id, term });
            }
        }
        match advanced {
            Err(error) => {
                // A failed write (an injected storage fault) stops the master, as in production.
                self.note(Node::Master(id), format!("stops: {error}"));
                self.crash_master(id);
                return;
            }
            Ok(Some(exit)) => {
                self.note(Node::Master(id), format!("stops: {exit:?}"));
                self.crash_master(id);
                return;
            }
            Ok(None) => {}
        }
        let p = self.options.rates.crash_before_send;
        if !outputs.is_empty() && self.chance(FaultKind::MasterCrashBeforeSend, p) {
            self.fault(
                FaultKind::MasterCrashBeforeSend,
                format!("master {id}, {} outputs unsent", outputs.len()),
            );
            self.crash_master(id);
            return;
        }
        for output in outputs {
            match output {
                Output::ToPeer { messages, .. } => self.send_raft(id, messages),
                Output::ToAgent { session, message } => self.push_to_agent(session.0, message),
                Output::ToFramework { session, message } => {
                    self.push_to_framework(session.0, message);
                }
                Output::Close(session) => self.close_session(session.0),
                Output::Answer(..)
                | Output::Leader(_)
                | Output::Membership(_)
                | Output::ForgetPeer(_) => {}
            }
        }
    }

    /// Hands store jobs to master `id`'s disk, which writes what queued up after a seeded
    /// latency (a fraction of a millisecond to a few, as an SSD's fsync).
    fn queue_disk_jobs(&mut self, id: u64, jobs: Vec<StoreJob<MemWrite>>) {
        if jobs.is_empty() {
            return;
        }
        let Some(master) = self.masters.get_mut(&id) else {
            return;
        };
        master.disk.extend(jobs);
        if master.disk_busy {
            return;
        }
        master.disk_busy = true;
        let incarnation = master.incarnation;
        let latency = self.between((Duration::from_micros(200), Duration::from_millis(4)));
        self.after(latency, Event::MasterDisk(id, incarnation));
    }

    /// Master `id`'s disk wrote what was queued: the core hears the report.
    pub(crate) fn master_disk(&mut self, id: u64, incarnation: u64) {
        let Some(master) = self.masters.get_mut(&id) else {
            return;
        };
        if master.incarnation != incarnation || master.core.is_none() {
            return;
        }
        master.disk_busy = false;
        let jobs = std::mem::take(&mut master.disk);
        let report = run_store_jobs(&mut master.store.writer(), jobs);
        self.step_master(id, |core| core.store_report(report));
    }

    pub(crate) fn crash_master(&mut self, id: u64) {
        let Some(master) = self.masters.get_mut(&id) else {
            return;
        };
        if master.core.take().is_none() {
            return;
        }
        master.disk.clear();
        master.disk_busy = false;
        master.store = master.store.crash();
        master.store.cancel_injected_failure();
        self.record(Fact::MasterCrashed { master: id });
        let ends: Vec<u64> = self
            .conns
            .values()
            .filter(|c| c.master == id)
            .map(|c| c.id)
            .collect();
        for conn in ends {
            self.break_conn(conn);
        }
        let downtime = self.between(self.options.rates.downtime);
        self.after(downtime, Event::Restart(Node::Master(id)));
    }

    pub(crate) fn restart_master(&mut self, id: u64) {
        let Some(master) = self.masters.get(&id) else {
            return;
        };
        if master.core.is_some() {
            return;
        }
        let node = RaftNode::open(node_config(id), master.store.clone())
            .expect("a master's in-memory store reopens");
        self.start_master(id, node);
    }

    /// Samples the leaders' accounting: charges, open offers and deficit counters.
    pub(crate) fn sample_accounting(&mut self) {
        let mut samples = Vec::new();
        for (&id, master) in &self.masters {
            let Some(core) = master.core.as_ref() else {
                continue;
            };
            if !core.node().is_leader() {
                continue;
            }
            let state = core.node().state();
            let mut offered: BTreeMap<AgentId, ResourceVec> = BTreeMap::new();
            for offer in core.open_offers() {
                let amount = offer.resources.to_vec().unwrap_or(ResourceVec::ZERO);
                *offered
                    .entry(offer.agent_id.clone())
                    .or_insert(ResourceVec::ZERO) += amount;
            }
            let agents = state
                .agents()
                .values()
                .filter(|a| a.state != AgentState::Lost)
                .map(|a| AgentAccount {
                    agent: a.id.clone(),
                    total: a.total,
                    used: state.agent_used(&a.id),
                    offered: offered.get(&a.id).copied().unwrap_or(ResourceVec::ZERO),
                })
                .collect();
            let allocation = state.allocation();
            let deficits = allocation
                .deficits()
                .iter()
                .map(|(_, g)| (g.name.clone(), g.deficit))
                .collect();
            // One task's factor is at most 1 (a slot; or a whole cluster's dominant share).
            let deficit_bound = DEFAULT_KAPPA * allocation.capacity_units() + 1.0;
            let plan = state.reservations().plan();
            let points: BTreeSet<u64> = plan
                .used()
                .change_points()
                .chain(plan.capacity().change_points())
                .collect();
            let plan_excess = points.iter().find_map(|&q| {
                let (used, capacity) = (plan.used().at(q), plan.capacity().at(q));
                (!used.fits_in(&capacity)).then_some((q, used, capacity))
            });
            let reservations_owed = core
                .follower_decision()
                .shares
                .iter()
                .filter(|share| !share.offer_first.is_zero())
                .map(|share| {
                    let name = state.reservations().name_of(share.id).unwrap_or("?");
                    (name.to_string(), share.offer_first)
                })
                .collect();
            samples.push(Accounting {
                master: id,
                term: core.node().term(),
                agents,
                allowance: state.settings().overbooking_allowance,
                deficits,
                deficit_bound,
                plan_excess,
                reservations_owed,
                reservation_grace_ms: fullerene_proto::time::whole_millis(
                    core.config().reservation_grace,
                ),
            });
        }
        for sample in samples {
            self.record(Fact::Accounting(sample));
        }
    }

    // ---- agents ----

    fn agent_now(&self, i: usize) -> Now {
        wall_now(self.now, self.agents[i].clock_offset_ms)
    }

    fn start_agent(&mut self, i: usize) {
        let agent = &mut self.agents[i];
        agent.checkpoint.truncate(agent.durable);
        let core = AgentCore::recover(agent.config.clone(), agent.checkpoint.iter().cloned());
        agent.core = Some(core);
        agent.incarnation += 1;
        agent.supervised.clear();
        agent.session = AgentSession::Idle;
        agent.acked_since_retry = true;
        // The executor finds its tasks again (`Executors::resume`).
        let resumes = self.agents[i]
            .core
            .as_ref()
            .map(AgentCore::to_resume)
            .unwrap_or_default();
        for resume in resumes {
            match resume.runtime {
                None => {
                    // Launched, never recorded as started: kill what it may have left.
                    let pids: Vec<u64> = self
                        .processes
                        .iter()
                        .filter(|(_, p)| p.alive && p.agent == i && p.task == resume.key())
                        .map(|(pid, _)| *pid)
                        .collect();
                    for pid in pids {
                        self.end_process(pid, true);
                    }
                    self.agent_finished(i, &resume.key(), Outcome::Vanished);
                }
                Some(Runtime::Process { pid, .. }) => {
                    let pid = pid as u64;
                    let alive = self.processes.get(&pid).is_some_and(|p| p.alive);
                    if alive {
                        self.agents[i].supervised.insert(resume.key(), pid);
                        if let Some((_, grace)) = resume.kill {
                            self.executor_kill(i, &resume.key(), grace);
                        }
                    } else {
                        // The wrapper wrote the exit code to the sandbox: it is known.
                        let killed = self.processes.get(&pid).is_some_and(|p| p.killed);
                        let outcome = if killed {
                            Outcome::Signaled(15)
                        } else {
                            Outcome::Exited(0)
                        };
                        self.agent_finished(i, &resume.key(), outcome);
                    }
                }
                Some(Runtime::Sleep { .. }) => {
                    // The simulated executor runs every task as a process.
                    self.agent_finished(i, &resume.key(), Outcome::Vanished);
                }
            }
        }
        let now = self.now;
        let first = self.agents[i].follower.start(now);
        self.schedule_attempt(i, first);
        self.agent_timer_after(i, STATUS_RETRY, AgentTimer::Retry);
    }

    /// Sets one of agent `i`'s timers, for its current incarnation.
    fn agent_timer_after(&mut self, i: usize, delay: Duration, timer: AgentTimer) {
        let incarnation = self.agents[i].incarnation;
        self.after(
            delay,
            Event::Agent {
                agent: i,
                incarnation,
                timer,
            },
        );
    }

    fn schedule_attempt(&mut self, i: usize, attempt: Attempt) {
        self.agents[i].session = AgentSession::Idle;
        self.agents[i].next_attempt = Some(attempt.addr);
        self.agent_timer_after(i, attempt.delay, AgentTimer::Attempt);
    }

    pub(crate) fn agent_timer(&mut self, i: usize, incarnation: u64, timer: AgentTimer) {
        let agent = &self.agents[i];
        if agent.incarnation != incarnation || agent.core.is_none() {
            return;
        }
        match timer {
            AgentTimer::Attempt => {
                if agent.session != AgentSession::Idle {
                    return;
                }
                let Some(addr) = self.agents[i].next_attempt.take() else {
                    return;
                };
                self.agent_attempt(i, addr);
            }
            AgentTimer::JoinTimeout(conn) => {
                if matches!(agent.session, AgentSession::Joining { conn: c, .. } if c == conn) {
                    self.client_closes(conn);
                    let next = self.agents[i].follower.failed(self.now);
                    self.schedule_attempt(i, next);
                }
            }
            AgentTimer::Heartbeat => {
                let AgentSession::Joined {
                    conn,
                    last_heard,
                    period,
                    silence_limit,
                } = agent.session
                else {
                    return;
                };
                if self.now.saturating_duration_since(last_heard) > silence_limit {
                    self.agent_loses_session(i);
                    return;
                }
                self.agents[i].heartbeat_seq += 1;
                let seq = self.agents[i].heartbeat_seq;
                self.send_frame(conn, true, Frame::AgentUp(AgentToMaster::Heartbeat { seq }));
                self.agent_timer_after(i, period, AgentTimer::Heartbeat);
            }
            AgentTimer::Retry => {
                let backlog = agent.core.as_ref().map_or(0, AgentCore::backlog);
                if matches!(agent.session, AgentSession::Joined { .. })
                    && !agent.acked_since_retry
                    && backlog > 0
                {
                    self.agent_resend_unacked(i);
                }
                self.agents[i].acked_since_retry = false;
                self.agent_timer_after(i, STATUS_RETRY, AgentTimer::Retry);
            }
        }
    }

    /// Opens a session to `addr` with a `Register` saying what is true now.
    fn agent_attempt(&mut self, i: usize, addr: SocketAddr) {
        let Some(master) = master_of(addr) else {
            return;
        };
        let core = self.agents[i].core.as_ref().expect("checked by the caller");
        let register = AgentToMaster::Register {
            hostname: format!("host-{i}"),
            resources: core.config().total.into(),
            attributes: BTreeMap::new(),
            tasks: core.register_tasks(),
            executors: core.config().executors.iter().cloned().collect(),
            // The simulated agents run no processes.
            isolation: Default::default(),
        };
        let conn = self.open_conn(master, Node::Agent(i));
        self.send_frame(conn, true, Frame::AgentUp(register));
        self.agents[i].session = AgentSession::Joining {
            conn,
            addr,
            since: self.now,
        };
        self.agent_timer_after(i, REGISTER_TIMEOUT, AgentTimer::JoinTimeout(conn));
    }

    fn agent_loses_session(&mut self, i: usize) {
        if let AgentSession::Joining { conn, .. } | AgentSession::Joined { conn, .. } =
            self.agents[i].session
        {
            self.client_closes(conn);
            let next = self.agents[i].follower.lost(self.now);
            self.schedule_attempt(i, next);
        }
    }

    pub(crate) fn agent_frame(&mut self, i: usize, conn: u64, frame: Frame) {
        if self.agents[i].core.is_none() {
            return;
        }
        match self.agents[i].session {
            AgentSession::Joining { conn: c, since, .. } if c == conn => match frame {
                Frame::AgentDown(MasterToAgent::Registered {
                    heartbeat_interval_ms,
                    lost_after_ms,
                    kill,
                    ..
                }) => {
                    self.agents[i].follower.joined();
                    let period = Duration::from_millis(heartbeat_interval_ms)
                        .clamp(Duration::from_millis(10), Duration::from_secs(3_600));
                    let silence_limit =
                        session_silence_limit(period, Duration::from_millis(lost_after_ms));
                    if self.now.saturating_duration_since(since) > silence_limit {
                        // `Shell::on_registered`: an answer that old is not acted upon.
                        self.agent_loses_session(i);
                        return;
                    }
                    self.agents[i].session = AgentSession::Joined {
                        conn,
                        last_heard: self.now,
                        period,
                        silence_limit,
                    };
                    self.agents[i].acked_since_retry = true;
                    self.agent_timer_after(i, period, AgentTimer::Heartbeat);
                    self.agent_resend_unacked(i);
                    let actions = self.agents[i]
                        .core
                        .as_mut()
                        .map(|core| core.registered(&kill))
                        .unwrap_or_default();
                    self.agent_apply(i, actions);
                    if self.reported_lost.remove(&self.agents[i].id) {
                        let agent = self.agents[i].id.clone();
                        self.record(Fact::AgentRejoined {
                            agent,
                            killing: kill.clone(),
                        });
                    }
                }
                Frame::AgentDown(MasterToAgent::Redirect(redirect)) => {
                    self.client_closes(conn);
                    let next = self.agents[i]
                        .follower
                        .redirected(redirect.leader.map(|l| l.addr), self.now);
                    self.schedule_attempt(i, next);
                }
                Frame::AgentDown(MasterToAgent::Error(_)) | Frame::End => {
                    self.client_closes(conn);
                    let next = self.agents[i].follower.failed(self.now);
                    self.schedule_attempt(i, next);
                }
                _ => {}
            },
            AgentSession::Joined {
                conn: c,
                period,
                last_heard,
                silence_limit,
            } if c == conn => {
                if self.now.saturating_duration_since(last_heard) > silence_limit {
                    // `Shell::run_loop`: a frame read after that long a silence is not acted
                    // upon; the session is given up.
                    self.agent_loses_session(i);
                    return;
                }
                self.agents[i].session = AgentSession::Joined {
                    conn,
                    last_heard: self.now,
                    period,
                    silence_limit,
                };
                let Frame::AgentDown(message) = frame else {
                    // The master closed the session.
                    self.agent_loses_session(i);
                    return;
                };
                self.agent_message(i, conn, message);
            }
            _ => {}
        }
    }

    /// `Shell::on_master`.
    fn agent_message(&mut self, i: usize, conn: u64, message: MasterToAgent) {
        let now = self.agent_now(i);
        let Some(core) = self.agents[i].core.as_mut() else {
            return;
        };
        let actions = match core.on_master(message, now) {
            FromMaster::Act {
                actions,
                acknowledged,
            } => {
                if acknowledged {
                    self.agents[i].acked_since_retry = true;
                }
                actions
            }
            // Simulated agents have no sandboxes; nothing here reads logs.
            FromMaster::Error(_) | FromMaster::ReadFile(_) => Vec::new(),
            FromMaster::Redirect(redirect) => {
                self.client_closes(conn);
                let next = self.agents[i]
                    .follower
                    .redirected(redirect.leader.map(|l| l.addr), self.now);
                self.schedule_attempt(i, next);
                return;
            }
        };
        self.agent_apply(i, actions);
    }

    fn agent_resend_unacked(&mut self, i: usize) {
        let AgentSession::Joined { conn, .. } = self.agents[i].session else {
            return;
        };
        let unacked = self.agents[i]
            .core
            .as_ref()
            .map(AgentCore::unacked)
            .unwrap_or_default();
        for update in unacked {
            self.send_frame(conn, true, Frame::AgentUp(AgentToMaster::Status(update)));
        }
    }

    /// `Shell::apply`: records persisted, synced before a spawn, a kill and the sends.
    fn agent_apply(&mut self, i: usize, actions: Vec<AgentAction>) {
        let incarnation = self.agents[i].incarnation;
        let mut queue: VecDeque<AgentAction> = actions.into();
        let mut outbox: Vec<StatusUpdate> = Vec::new();
        while let Some(action) = queue.pop_front() {
            if self.agents[i].incarnation != incarnation || self.agents[i].core.is_none() {
                return;
            }
            match action {
                AgentAction::Persist(record) => {
                    self.agents[i].checkpoint.push(record);
                    let p = self.options.rates.torn_write;
                    if self.chance(FaultKind::TornWrite, p) {
                        let name = self.agents[i].id.to_string();
                        self.fault(FaultKind::TornWrite, format!("{name}'s last record"));
                        self.crash_agent(i);
                        return;
                    }
                }
                AgentAction::Send(update) => outbox.push(update),
                AgentAction::Start { framework_id, spec } => {
                    self.sync_checkpoint(i);
                    let pid = self.spawn(i, &framework_id, &spec);
                    let p = self.options.rates.crash_before_sync;
                    if self.chance(FaultKind::AgentCrashBeforeSync, p) {
                        let name = self.agents[i].id.to_string();
                        self.fault(
                            FaultKind::AgentCrashBeforeSync,
                            format!("{name} after spawning {}", spec.id),
                        );
                        self.crash_agent(i);
                        return;
                    }
                    let now = self.agent_now(i);
                    let runtime = Runtime::Process {
                        pid: pid as i32,
                        start_ticks: pid,
                    };
                    let more = self.agents[i]
                        .core
                        .as_mut()
                        .map(|core| {
                            let task = TaskKey::new(framework_id.clone(), spec.id.clone());
                            core.started(&task, runtime, String::new(), now)
                        })
                        .unwrap_or_default();
                    for (k, action) in more.into_iter().enumerate() {
                        queue.insert(k, action);
                    }
                }
                AgentAction::Kill { task, grace } => {
                    self.sync_checkpoint(i);
                    if !self.executor_kill(i, &task, grace) {
                        let now = self.agent_now(i);
                        let more = self.agents[i]
                            .core
                            .as_mut()
                            .map(|core| {
                                core.finished(&task, Outcome::NotRunning, String::new(), now)
                            })
                            .unwrap_or_default();
                        for (k, action) in more.into_iter().enumerate() {
                            queue.insert(k, action);
                        }
                    }
                }
            }
        }
        self.sync_checkpoint(i);
        let agent = self.agents[i].id.clone();
        for update in outbox {
            self.record(Fact::UpdateSent {
                agent: agent.clone(),
                framework_id: update.framework_id.clone(),
                task_id: update.task_id.clone(),
                seq: update.seq,
                state: update.state,
            });
            if let AgentSession::Joined { conn, .. } = self.agents[i].session {
                self.send_frame(conn, true, Frame::AgentUp(AgentToMaster::Status(update)));
            }
        }
    }

    fn sync_checkpoint(&mut self, i: usize) {
        let agent = &mut self.agents[i];
        agent.durable = agent.checkpoint.len();
    }

    /// Starts a task's process; it exits by itself after the task's duration.
    fn spawn(
        &mut self,
        i: usize,
        framework_id: &FrameworkId,
        spec: &fullerene_proto::messages::TaskSpec,
    ) -> u64 {
        let pid = self.next_pid;
        self.next_pid += 1;
        let task = TaskKey::new(framework_id.clone(), spec.id.clone());
        self.processes.insert(
            pid,
            Process {
                agent: i,
                task: task.clone(),
                alive: true,
                killed: false,
            },
        );
        self.agents[i].supervised.insert(task, pid);
        let demand = spec.resources.to_vec().unwrap_or(ResourceVec::ZERO);
        let agent = self.agents[i].id.clone();
        self.record(Fact::Spawned {
            agent,
            framework_id: framework_id.clone(),
            task_id: spec.id.clone(),
            demand,
        });
        let duration = match &spec.executor {
            Executor::Sleep { duration_ms } => Duration::from_millis(*duration_ms),
            Executor::Command(_) => Duration::from_secs(1),
        };
        self.after(duration, Event::ProcessExit { pid });
        pid
    }

    /// Starts killing a supervised task's process; false when the executor has none.
    fn executor_kill(&mut self, i: usize, task: &TaskKey, grace: Duration) -> bool {
        let Some(&pid) = self.agents[i].supervised.get(task) else {
            return false;
        };
        let delay = grace.min(Duration::from_millis(50));
        self.after(delay, Event::ProcessKilled { pid });
        true
    }

    /// A process ends: on its own, or killed. The agent's executor hears of it if it still
    /// supervises it.
    pub(crate) fn process_exits(&mut self, pid: u64, killed: bool) {
        let Some(process) = self.processes.get(&pid) else {
            return;
        };
        if !process.alive {
            return;
        }
        let agent = process.agent;
        self.end_process(pid, killed);
        let incarnation = self.agents[agent].incarnation;
        self.after(
            Duration::ZERO,
            Event::ExecEnded {
                agent,
                incarnation,
                pid,
                signaled: killed,
            },
        );
    }

    fn end_process(&mut self, pid: u64, killed: bool) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        if !process.alive {
            return;
        }
        process.alive = false;
        process.killed = killed;
        let fact = Fact::ProcessEnded {
            agent: self.agents[process.agent].id.clone(),
            framework_id: process.task.framework_id.clone(),
            task_id: process.task.task_id.clone(),
        };
        self.record(fact);
    }

    pub(crate) fn exec_ended(&mut self, i: usize, incarnation: u64, pid: u64, signaled: bool) {
        if self.agents[i].incarnation != incarnation || self.agents[i].core.is_none() {
            return;
        }
        let Some(task) = self.processes.get(&pid).map(|p| p.task.clone()) else {
            return;
        };
        if self.agents[i].supervised.get(&task) != Some(&pid) {
            return;
        }
        self.agents[i].supervised.remove(&task);
        let outcome = if signaled {
            Outcome::Signaled(15)
        } else {
            Outcome::Exited(0)
        };
        self.agent_finished(i, &task, outcome);
    }

    fn agent_finished(&mut self, i: usize, task: &TaskKey, outcome: Outcome) {
        let now = self.agent_now(i);
        let actions = self.agents[i]
            .core
            .as_mut()
            .map(|core| core.finished(task, outcome, String::new(), now))
            .unwrap_or_default();
        self.agent_apply(i, actions);
    }

    pub(crate) fn crash_agent(&mut self, i: usize) {
        let agent = &mut self.agents[i];
        if agent.core.take().is_none() {
            return;
        }
        agent.incarnation += 1;
        agent.supervised.clear();
        let session = std::mem::replace(&mut agent.session, AgentSession::Idle);
        match session {
            AgentSession::Joining { conn, .. } | AgentSession::Joined { conn, .. } => {
                // The process is gone: no end is sent; the master notices the silence.
                self.break_conn(conn);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.client_open = false;
                }
            }
            AgentSession::Idle => {}
        }
        let downtime = self.between(self.options.rates.downtime);
        self.after(downtime, Event::Restart(Node::Agent(i)));
    }

    pub(crate) fn restart_agent(&mut self, i: usize) {
        if self.agents[i].core.is_some() {
            return;
        }
        let follower = self.new_follower(i as u64);
        self.agents[i].follower = follower;
        self.start_agent(i);
    }

    // ---- frameworks ----

    pub(crate) fn submit(&mut self, j: usize) {
        if self.jobs[j].completed {
            return;
        }
        let job = self.jobs[j].job.clone();
        self.mark_submitted(j);
        let config = self.driver_config(&job.name, &job.group);
        let dag_config = DagConfig {
            concurrent_jobs: self.options.jobs.max(1),
            ..relaunch_until_done()
        };
        let now = self.now;
        let name = job.name.clone();
        let dag = DagJob::new(job, dag_config, now).expect("generated jobs are valid");
        let role = FrameworkRole::Job(j, Box::new(DagScheduler::new(dag, j, None)));
        self.start_framework(name, framework_principal(j), config, role);
    }

    /// Submits the session jobs not completed yet as one session framework.
    pub(crate) fn submit_session(&mut self) {
        let slots: Vec<usize> = (0..self.jobs.len())
            .filter(|&j| self.jobs[j].in_session && !self.jobs[j].completed)
            .collect();
        if slots.is_empty() {
            return;
        }
        for &j in &slots {
            self.mark_submitted(j);
        }
        let config = self.driver_config(SESSION, job_group(0));
        let dag_config = relaunch_until_done();
        let jobs: Vec<Job> = slots.iter().map(|&j| self.jobs[j].job.clone()).collect();
        let core = SessionFramework::new(
            jobs,
            dag_config,
            SessionPolicyKind::Fair.build(),
            &[],
            self.now,
        )
        .expect("generated jobs are valid and distinctly named");
        let role = FrameworkRole::Session(slots, Box::new(SessionScheduler::new(core, None)));
        self.start_framework(SESSION.to_string(), SESSION.to_string(), config, role);
    }

    /// Records job `j`'s first submission (a resubmission is not one).
    fn mark_submitted(&mut self, j: usize) {
        if !self.jobs[j].submitted {
            self.jobs[j].submitted = true;
            let job = self.jobs[j].job.name.clone();
            self.record(Fact::JobSubmitted { job });
        }
    }

    /// The driver settings of a framework named `name` in `group`, its reconnect jitter drawn
    /// from the run's generator.
    fn driver_config(&mut self, name: &str, group: &str) -> DriverConfig {
        let masters = (1..=self.options.masters as u64).map(master_addr).collect();
        let mut config = DriverConfig::new(masters, name.to_string(), group.to_string());
        config.failover_timeout_ms = FAILOVER_TIMEOUT_MS;
        config.backoff_max = Duration::from_secs(2);
        config.jitter_seed = self.rng.gen();
        config
    }

    fn start_framework(
        &mut self,
        name: String,
        principal: String,
        config: DriverConfig,
        role: FrameworkRole,
    ) {
        let core = DriverCore::new(config).expect("the masters are listed");
        let f = self.frameworks.len();
        self.frameworks.push(SimFramework {
            name,
            role,
            principal,
            core,
            alive: true,
            stopping: false,
            incarnation: 0,
            live: None,
        });
        let actions = self.frameworks[f].core.start(self.now);
        self.framework_carry_out(f, actions);
    }

    pub(crate) fn framework_connect(&mut self, f: usize, incarnation: u64, addr: SocketAddr) {
        let fw = &self.frameworks[f];
        if !fw.alive || fw.incarnation != incarnation || fw.live.is_some() {
            return;
        }
        let Some(master) = master_of(addr) else {
            return;
        };
        let conn = self.open_conn(master, Node::Framework(f));
        let up = self.masters.get(&master).is_some_and(|m| m.core.is_some());
        let reachable = self.reachable(Node::Framework(f), Node::Master(master))
            && self.reachable(Node::Master(master), Node::Framework(f));
        let (opened, after) = if up && reachable {
            let rtt = self.latency() * 2;
            (true, rtt)
        } else {
            (false, CONNECT_TIMEOUT)
        };
        self.after(
            after,
            Event::FrameworkOpened {
                framework: f,
                incarnation,
                conn,
                opened,
            },
        );
    }

    pub(crate) fn framework_opened(&mut self, f: usize, incarnation: u64, conn: u64, opened: bool) {
        let fw = &self.frameworks[f];
        if !fw.alive || fw.incarnation != incarnation {
            return;
        }
        let actions = if opened && self.conns.contains_key(&conn) {
            self.frameworks[f].live = Some(conn);
            self.frameworks[f].core.connected()
        } else {
            self.conns.remove(&conn);
            self.frameworks[f]
                .core
                .connect_failed("timed out", self.now)
        };
        self.framework_carry_out(f, actions);
    }

    pub(crate) fn framework_frame(&mut self, f: usize, conn: u64, frame: Frame) {
        if !self.frameworks[f].alive || self.frameworks[f].live != Some(conn) {
            return;
        }
        let now = self.now;
        if self.options.trace_frames {
            self.note(Node::Framework(f), format!("receives on {conn}: {frame:?}"));
        }
        let actions = match frame {
            Frame::FrameworkDown(message) => self.frameworks[f].core.received(message, now),
            Frame::End => {
                self.frameworks[f].live = None;
                self.frameworks[f]
                    .core
                    .session_lost("the master closed the session", now)
            }
            _ => Vec::new(),
        };
        self.framework_carry_out(f, actions);
        // Each frame is an event of its own here: once it is handled nothing more waits to
        // be received, and the shell sends the acknowledgements that wait.
        if self.frameworks[f].alive {
            let flushed = self.frameworks[f].core.flush_acks();
            self.framework_carry_out(f, flushed);
        }
    }

    /// `Shell::carry_out` of the driver.
    fn framework_carry_out(&mut self, f: usize, actions: Vec<DriverAction>) {
        let mut queue: VecDeque<DriverAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            if !self.frameworks[f].alive {
                return;
            }
            match action {
                DriverAction::Connect { addr, delay } => {
                    let incarnation = self.frameworks[f].incarnation;
                    self.after(
                        delay,
                        Event::FrameworkConnect {
                            framework: f,
                            incarnation,
                            addr,
                        },
                    );
                }
                DriverAction::Send(call) => {
                    if let Some(conn) = self.frameworks[f].live {
                        if self.options.trace_frames {
                            let event = format!("sends on {conn}: {:?}", call.call);
                            self.note(Node::Framework(f), event);
                        }
                        self.send_frame(conn, true, Frame::FrameworkUp(call));
                    }
                }
                DriverAction::CloseSession => {
                    if let Some(conn) = self.frameworks[f].live.take() {
                        self.client_closes(conn);
                    }
                }
                DriverAction::Stop => self.frameworks[f].stopping = true,
                DriverAction::Deliver(event) => {
                    let more = self.framework_deliver(f, event);
                    queue.extend(more);
                }
            }
        }
        if self.frameworks[f].stopping {
            self.framework_stops(f);
        }
    }

    fn framework_deliver(&mut self, f: usize, event: DriverEvent) -> Vec<DriverAction> {
        match &event {
            DriverEvent::Update(update) => self.record(Fact::UpdateDelivered {
                framework_id: update.framework_id.clone(),
                task_id: update.task_id.clone(),
                seq: update.seq,
                state: update.state,
            }),
            DriverEvent::Registered { framework_id } => {
                let job = self.frameworks[f].name.clone();
                self.record(Fact::FrameworkRegistered {
                    job,
                    framework_id: framework_id.clone(),
                });
            }
            _ => {}
        }
        let fw = &mut self.frameworks[f];
        let mut handle = DriverHandle::new(self.now, fw.core.framework_id().cloned());
        let fatal = match &mut fw.role {
            FrameworkRole::Job(_, scheduler) => deliver(scheduler.as_mut(), &mut handle, event),
            FrameworkRole::Session(_, scheduler) => deliver(scheduler.as_mut(), &mut handle, event),
        };
        let (calls, stop) = handle.into_calls();
        if stop {
            fw.stopping = true;
        }
        let mut actions: Vec<DriverAction> = calls
            .into_iter()
            .flat_map(|call| fw.core.call(call))
            .collect();
        if let Some(error) = fatal {
            fw.stopping = true;
            let framework_id = fw.core.framework_id().cloned();
            self.framework_ended(f, framework_id, error.to_string());
            actions.clear();
        }
        actions
    }

    /// The driver stopped: a done job completed; any other end submits the job again.
    fn framework_stops(&mut self, f: usize) {
        if !self.frameworks[f].alive {
            return;
        }
        let fw = &mut self.frameworks[f];
        fw.alive = false;
        // The shell finishes its stream: the teardown sent before reaches the master.
        if let Some(conn) = fw.live.take() {
            self.client_closes(conn);
        }
        let fw = &self.frameworks[f];
        let framework_id = fw.core.framework_id().cloned();
        // Each job's slot and outcome.
        let outcomes: Vec<(usize, JobOutcome)> = match &fw.role {
            FrameworkRole::Job(j, scheduler) => vec![(*j, scheduler.dag().outcome().clone())],
            FrameworkRole::Session(slots, scheduler) => slots
                .iter()
                .enumerate()
                .map(|(index, &j)| {
                    let outcome = scheduler
                        .core()
                        .progress(index)
                        .map_or(JobOutcome::Running, |p| p.outcome);
                    (j, outcome)
                })
                .collect(),
        };
        let mut unfinished = None;
        for (j, outcome) in outcomes {
            match (outcome, &framework_id) {
                (JobOutcome::Finished { .. }, Some(framework_id)) => {
                    self.jobs[j].completed = true;
                    let job = self.jobs[j].job.name.clone();
                    let framework_id = framework_id.clone();
                    self.record(Fact::JobCompleted { job, framework_id });
                }
                (outcome, _) => {
                    unfinished.get_or_insert(format!(
                        "stopped with {} {outcome:?}",
                        self.jobs[j].job.name
                    ));
                }
            }
        }
        if let Some(why) = unfinished {
            self.framework_ended(f, framework_id, why);
        }
    }

    fn framework_ended(&mut self, f: usize, framework_id: Option<FrameworkId>, why: String) {
        self.record(Fact::FrameworkEnded { framework_id, why });
        self.frameworks[f].alive = false;
        let again = match &self.frameworks[f].role {
            FrameworkRole::Job(j, _) => Event::Submit { job: *j },
            FrameworkRole::Session(..) => Event::SubmitSession,
        };
        self.after(RESUBMIT_DELAY, again);
    }

    pub(crate) fn crash_framework(&mut self, f: usize, why: String) {
        let fw = &mut self.frameworks[f];
        if !fw.alive {
            return;
        }
        fw.incarnation += 1;
        if let Some(conn) = fw.live.take() {
            self.break_conn(conn);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.client_open = false;
            }
        }
        let framework_id = self.frameworks[f].core.framework_id().cloned();
        self.framework_ended(f, framework_id, why);
    }

    // ---- bad peers ----

    /// A peer sends what it must not, through a real session of the cluster.
    pub(crate) fn bad_peer(&mut self) {
        match self.rng.gen_range(0..3) {
            0 => {
                // An agent reports a status with the largest sequence number.
                let joined: Vec<(usize, u64)> = self
                    .agents
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| match a.session {
                        AgentSession::Joined { conn, .. } => Some((i, conn)),
                        _ => None,
                    })
                    .collect();
                if joined.is_empty() {
                    return;
                }
                let (i, conn) = joined[self.rng.gen_range(0..joined.len())];
                let Some(entry) = self.agents[i].core.as_ref().and_then(|c| c.tasks().next())
                else {
                    return;
                };
                let update = StatusUpdate {
                    task_id: entry.spec.id.clone(),
                    framework_id: entry.framework_id.clone(),
                    agent_id: self.agents[i].id.clone(),
                    state: TaskState::Running,
                    seq: u64::MAX,
                    reason: None,
                    message: "bad peer".into(),
                    timestamp_ms: 0,
                };
                let detail = format!(
                    "{} sends seq u64::MAX for {}",
                    self.agents[i].id, update.task_id
                );
                self.fault(FaultKind::BadPeer, detail);
                self.send_frame(conn, true, Frame::AgentUp(AgentToMaster::Status(update)));
            }
            kind => {
                // A framework accepts another framework's offer, or an offer on an agent
                // that does not exist.
                let Some(leader) = self.leader() else { return };
                let offers = self.masters[&leader]
                    .core
                    .as_ref()
                    .map(MasterCore::open_offers)
                    .unwrap_or_default();
                let live: Vec<(usize, u64, FrameworkId)> = self
                    .frameworks
                    .iter()
                    .enumerate()
                    .filter_map(|(f, fw)| {
                        let id = fw.core.framework_id()?.clone();
                        Some((f, fw.live?, id))
                    })
                    .collect();
                if live.is_empty() {
                    return;
                }
                let (f, conn, id) = live[self.rng.gen_range(0..live.len())].clone();
                let (offer_ids, detail) = if kind == 1 {
                    let Some(foreign) = offers.iter().find(|o| o.framework_id != id) else {
                        return;
                    };
                    (
                        vec![foreign.id],
                        format!(
                            "{id} accepts {}'s offer {:?}",
                            foreign.framework_id, foreign.id
                        ),
                    )
                } else {
                    (
                        vec![OfferId(u64::MAX - self.next_pid)],
                        format!("{id} launches on an unknown agent's offer"),
                    )
                };
                let task = fullerene_proto::testkit::sleep_task(
                    &format!("bad/{f}.{}/0", self.next_pid),
                    500,
                    "cpus=0.5,mem_mib=128",
                    100,
                );
                self.fault(FaultKind::BadPeer, detail);
                // A call id the driver never made: its answer is ignored.
                let call = FrameworkCall {
                    call_id: u64::MAX - self.next_pid,
                    call: FrameworkRequest::Accept {
                        offer_ids,
                        tasks: vec![task],
                        leftover: Leftover::Decline { refuse_ms: 0 },
                    },
                };
                self.send_frame(conn, true, Frame::FrameworkUp(call));
            }
        }
    }
}

/// A process's clocks at virtual time `now`, its wall clock off by `offset_ms`.
fn wall_now(now: Time, offset_ms: i64) -> Now {
    let micros = (WALL_EPOCH + now.elapsed()).as_micros() as i128 + i128::from(offset_ms) * 1_000;
    Now {
        monotonic: now,
        wall: Time::from_micros(u64::try_from(micros.max(0)).unwrap_or(u64::MAX)),
    }
}

/// A master's Raft configuration in the simulation: the defaults, no random election
/// timeout (the tick jitter makes elections differ), every applied entry traced, store jobs
/// run by the simulated disk.
fn node_config(id: u64) -> NodeConfig {
    NodeConfig {
        randomized_election_timeout: false,
        trace_applied: true,
        // As the masters' shell runs them: store writes off the node loop, after the disk's
        // latency (`World::master_disk`).
        persistence: Persistence::Offloaded,
        ..NodeConfig::new(id)
    }
}

/// The entries a master applied since the last call: (index, term, digest).
fn core_trace(core: &mut MasterCore<MemStorage>) -> Vec<(u64, u64, u64)> {
    core.take_apply_trace()
        .into_iter()
        .map(|t| {
            let kind = [t.entry_type as u8];
            (
                t.index,
                t.term,
                fullerene_proto::ids::stable_digest(&[&kind, &t.data]),
            )
        })
        .collect()
}

/// The agents a state shows lost.
fn lost_agents(state: &ClusterState) -> Vec<AgentId> {
    state
        .agents()
        .values()
        .filter(|a| a.state == AgentState::Lost)
        .map(|a| a.id.clone())
        .collect()
}

/// The DAG settings of every simulated framework: tasks lost to faults are relaunched as
/// often as it takes, since the liveness check wants every job to complete once faults stop.
fn relaunch_until_done() -> DagConfig {
    DagConfig {
        max_attempts: u32::MAX,
        ..DagConfig::default()
    }
}

/// The fairness group of job `j`: jobs alternate between two groups.
fn job_group(j: usize) -> &'static str {
    if j % 2 == 0 {
        "a"
    } else {
        "b"
    }
}

/// The principal of job `j`'s framework (its certificate's).
fn framework_principal(j: usize) -> String {
    format!("framework-{j}")
}
