//! A deterministic in-memory cluster of [`RaftNode`]s over [`MemStorage`], driven by a seed.
//!
//! Everything random (which messages are lost, duplicated or delayed and so reordered, which
//! links are cut, which master crashes and when it restarts, which commands clients propose,
//! when each master ticks) comes from one ChaCha RNG seeded by the caller, so a failing seed
//! replays exactly. raft-rs's own randomised election timeout is turned off
//! ([`NodeConfig::randomized_election_timeout`]); the jitter comes from ticking each master
//! with probability < 1 per round instead.
//!
//! While it runs, the simulation checks Raft's safety properties as it observes them:
//! * **election safety**: at most one leader per term;
//! * **state machine safety**: every master that applies index `i` applies the same entry (an
//!   oracle collects every applied entry, through [`RaftNode::take_apply_trace`]);
//! * **linearizable reads**: a read released by a master reflects every command acknowledged
//!   before the read was asked.
//!
//! After the fault phase it heals the cluster (restarts crashed masters, removes partitions
//! and loss), waits for every master to apply the whole log, and checks:
//! * every live master has the same state, equal to replaying the committed log from the
//!   beginning;
//! * every proposal acknowledged as applied is in the log exactly once, with the result the
//!   replay gives, and a refused command changed nothing;
//! * no proposal reported as superseded or dropped is in the log;
//! * every proposal made to a master that stayed up was answered.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use fullerene_proto::Time;

use fullerene_master::raft_node::{
    decode_conf_change, record_membership_change, run_store_jobs, NodeConfig, NodeOutput,
    Persistence, ProposeError, RaftNode, ReadError, StoreJob, Token,
};
use fullerene_master::state::{
    Acknowledged, ClusterSettings, ClusterState, Command, CommandError, CommandOutcome, TaskKey,
};
use fullerene_master::storage::{MemStorage, MemWrite, RaftStore};
use fullerene_proto::codec;
use fullerene_proto::messages::{Executor, GroupPlacement, StatusUpdate, TaskSpec, TaskState};
use fullerene_proto::{ResourceKind, ResourceVec, Resources};
use raft::eraftpb::{ConfChangeV2, ConfState, EntryType, Message, MessageType};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The knobs of a simulation run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Founding voters (3 or 5 in the tests).
    pub voters: usize,
    /// Rounds of the fault phase.
    pub fault_rounds: u64,
    /// Most rounds the healing phase may take before the run fails as not converging.
    pub max_heal_rounds: u64,
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplication: f64,
    /// Messages are delayed by 0..=this many rounds (so reordered).
    pub max_delay: u64,
    /// Per round, probability that a live master crashes.
    pub crash: f64,
    /// A crashed master restarts after this many rounds (min, max).
    pub downtime: (u64, u64),
    /// Per round, probability that a storage write of a random master fails (it then
    /// crashes, as a master whose fsync fails does).
    pub persist_failure: f64,
    /// Per round, probability that a random master's store stops answering reads of the log
    /// (the node then halts on its next read, as raft-rs cannot carry on without the entry, and
    /// the master is restarted like a crashed one).
    pub read_failure: f64,
    /// Per round without a partition, probability that one starts.
    pub partition: f64,
    /// A partition lasts this many rounds (min, max).
    pub partition_length: (u64, u64),
    /// Per round, probability that clients propose (1 to 4 commands).
    pub propose: f64,
    /// Per round, probability that a client asks a random master for a linearizable read.
    pub read: f64,
    /// Per round, probability that a master ticks (the election jitter).
    pub tick: f64,
    /// Under [`Persistence::Offloaded`], a store job runs 0..=this many rounds after the
    /// node handed it out (the disk's latency; jobs still run in order).
    pub max_persist_delay: u64,
    /// The masters' Raft configuration (ids are set per master).
    pub node: NodeConfig,
}

impl SimConfig {
    /// A run with every fault enabled, sized to finish in a few milliseconds.
    pub fn with_voters(voters: usize) -> SimConfig {
        let mut node = NodeConfig::new(1);
        node.randomized_election_timeout = false;
        node.heartbeat_ticks = 2;
        node.election_ticks = 10;
        // Small values so that runs exercise snapshots, compaction and paging.
        node.snapshot_interval = 40;
        node.snapshot_entries_per_record = 0;
        node.log_retention = 8;
        node.max_size_per_msg = 2048;
        node.max_inflight_msgs = 8;
        node.read_timeout_ticks = 15;
        // Writes made durable off the node's thread, a few rounds late, as the masters' shell
        // does: votes and acknowledgements must wait for them, and a crash loses them.
        node.persistence = Persistence::Offloaded;
        SimConfig {
            voters,
            fault_rounds: 250,
            max_heal_rounds: 3_000,
            loss: 0.05,
            duplication: 0.03,
            max_delay: 3,
            crash: 0.01,
            downtime: (5, 60),
            persist_failure: 0.004,
            read_failure: 0.002,
            partition: 0.02,
            partition_length: (15, 80),
            propose: 0.5,
            read: 0.1,
            tick: 0.85,
            max_persist_delay: 3,
            node,
        }
    }
}

/// What a run did, for the tests' own assertions and for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Proposals accepted by a leader.
    pub proposed: u64,
    /// Proposals answered with the state machine's result.
    pub acknowledged: u64,
    /// Of those, refused by the state machine (invalid commands).
    pub rejected: u64,
    /// Proposals answered as not applied (or unknown).
    pub dropped: u64,
    /// Distinct leaders elected (term, id).
    pub leaders: u64,
    /// Crashes (including failed writes).
    pub crashes: u64,
    /// Partitions started.
    pub partitions: u64,
    /// Snapshots installed from a leader.
    pub snapshots_installed: u64,
    /// Reads released.
    pub reads_ok: u64,
    /// Reads failed (no leader, timeout).
    pub reads_failed: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages lost (dropped, cut link, or to a crashed master).
    pub lost: u64,
    /// Index of the last entry every master applied at the end.
    pub final_index: u64,
}

#[derive(Debug, Clone)]
enum Answer {
    Applied {
        index: u64,
        result: Result<CommandOutcome, CommandError>,
    },
    Dropped(ProposeError),
}

#[derive(Debug)]
struct Proposal {
    node: u64,
    incarnation: u64,
    data: Vec<u8>,
    answer: Option<Answer>,
}

#[derive(Debug)]
struct Slot {
    node: Option<RaftNode<MemStorage>>,
    store: MemStorage,
    incarnation: u64,
    down_until: Option<u64>,
    injected_failure: bool,
    removed: bool,
    /// Store jobs the node handed out, with the round from which its writer may run them
    /// (in order): the disk's latency. A crash loses them.
    store_jobs: VecDeque<(u64, StoreJob<MemWrite>)>,
}

#[derive(Debug)]
struct Envelope {
    deliver_at: u64,
    seq: u64,
    from: u64,
    message: Message,
}

#[derive(Debug, Clone, PartialEq)]
struct OracleEntry {
    term: u64,
    entry_type: EntryType,
    data: Vec<u8>,
}

/// Generates plausible commands, valid and invalid, from a master's view of the state (as a
/// leader's endpoints would), so that most are valid and some are refused, as they should be.
#[derive(Debug, Default)]
struct CommandGen {
    agents: Vec<String>,
    frameworks: Vec<(String, String)>,
    /// (framework, task, agent, seq, state) of the tasks the observed master tracks.
    tasks: Vec<(String, String, String, u64, TaskState)>,
    next_agent: u64,
    next_framework: u64,
    stamp: u64,
}

impl CommandGen {
    fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        1_000_000 + self.stamp
    }

    fn resources(cpus: f64, mem: f64) -> Resources {
        Resources::from(ResourceVec::from_pairs(&[
            (ResourceKind::Cpus, cpus),
            (ResourceKind::MemMib, mem),
        ]))
    }

    /// Refreshes what the generator knows from a master's state.
    fn observe(&mut self, state: &ClusterState) {
        self.agents = state.agents().keys().map(ToString::to_string).collect();
        self.frameworks = state
            .frameworks()
            .values()
            .filter(|f| f.torn_down_at_ms.is_none())
            .map(|f| (f.id.to_string(), f.principal.clone()))
            .collect();
        self.tasks = state
            .tasks()
            .iter()
            .map(|(key, t)| {
                (
                    key.framework_id.to_string(),
                    key.task_id.to_string(),
                    t.agent_id.to_string(),
                    t.seq,
                    t.state,
                )
            })
            .collect();
    }

    fn generate(&mut self, rng: &mut ChaCha8Rng) -> Command {
        let at_ms = self.next_stamp();
        let roll = rng.gen_range(0..100);
        if self.agents.is_empty() || roll < 5 {
            self.next_agent += 1;
            let name = format!("agent-{}", self.next_agent);
            return Command::RegisterAgent {
                agent_id: name.as_str().into(),
                hostname: name,
                resources: Self::resources(16.0, 65536.0),
                attributes: BTreeMap::new(),
                executors: vec!["command".into(), "sleep".into()],
                at_ms,
            };
        }
        if self.frameworks.is_empty() || roll < 9 {
            self.next_framework += 1;
            let n = self.next_framework;
            let id = format!("fw-{n}");
            return Command::SubscribeFramework {
                framework_id: id.as_str().into(),
                principal: format!("principal-{n}"),
                name: id,
                // The principal's group, whatever the operator set (the sim's operator
                // places principals with `SetGroup` among its random commands).
                group: String::new(),
                failover_timeout_ms: 60_000,
                at_ms,
            };
        }
        let agent = self.agents[rng.gen_range(0..self.agents.len())].clone();
        let (framework, principal) =
            self.frameworks[rng.gen_range(0..self.frameworks.len())].clone();
        match roll {
            9..=44 => {
                let count = rng.gen_range(1..=3);
                let mut tasks = Vec::with_capacity(count);
                for i in 0..count {
                    // Now and then reuse an id (refused as a duplicate).
                    let id = match self.tasks.is_empty() || !rng.gen_bool(0.03) {
                        true => format!("task-{at_ms}-{i}"),
                        false => self.tasks[rng.gen_range(0..self.tasks.len())].1.clone(),
                    };
                    // Now and then more than any agent has (refused).
                    let cpus =
                        [0.5, 1.0, 1.0, 2.0, 4.0, 0.5, 1.0, 2.0, 1.0, 40.0][rng.gen_range(0..10)];
                    tasks.push(TaskSpec {
                        id: id.as_str().into(),
                        name: id,
                        executor: Executor::Sleep { duration_ms: 100 },
                        resources: Self::resources(cpus, 1024.0),
                        origin: None,
                        kill_grace_ms: 100,
                    });
                }
                let agent_id = if rng.gen_bool(0.03) {
                    "agent-unknown".into()
                } else {
                    agent.as_str().into()
                };
                let principal = if rng.gen_bool(0.03) {
                    "mallory".to_string()
                } else {
                    principal
                };
                Command::LaunchTasks {
                    framework_id: framework.as_str().into(),
                    principal,
                    agent_id,
                    tasks,
                    at_ms,
                }
            }
            45..=79 if !self.tasks.is_empty() => {
                let live: Vec<usize> = (0..self.tasks.len())
                    .filter(|&i| !self.tasks[i].4.is_terminal())
                    .collect();
                let i = match live.choose(rng) {
                    Some(&i) if rng.gen_bool(0.9) => i,
                    _ => rng.gen_range(0..self.tasks.len()),
                };
                let (framework, task, agent, seq, current) = self.tasks[i].clone();
                // Mostly the next number, sometimes a duplicate (an agent's retry).
                let seq = if rng.gen_bool(0.1) { seq } else { seq + 1 };
                let state = match (current, rng.gen_range(0..10)) {
                    (TaskState::Staging, 0..=5) => TaskState::Running,
                    (TaskState::Running, 0..=1) => TaskState::Running,
                    // Backwards (refused).
                    (TaskState::Running, 2) => TaskState::Staging,
                    (_, 0..=6) => TaskState::Finished,
                    (_, 7..=8) => TaskState::Failed,
                    _ => TaskState::Lost,
                };
                Command::UpdateStatus {
                    agent_id: agent.as_str().into(),
                    update: StatusUpdate {
                        task_id: task.as_str().into(),
                        framework_id: framework.as_str().into(),
                        agent_id: agent.as_str().into(),
                        state,
                        seq,
                        reason: None,
                        message: String::new(),
                        timestamp_ms: at_ms,
                    },
                    at_ms,
                }
            }
            80..=85 if !self.tasks.is_empty() => {
                let (framework, task, _, seq, state) =
                    self.tasks[rng.gen_range(0..self.tasks.len())].clone();
                let principal = self
                    .frameworks
                    .iter()
                    .find(|(f, _)| *f == framework)
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default();
                if state.is_terminal() {
                    // Acknowledging the final update forgets the task.
                    Command::AcknowledgeStatus {
                        framework_id: framework.as_str().into(),
                        principal,
                        acks: vec![Acknowledged {
                            task_id: task.as_str().into(),
                            seq,
                        }],
                    }
                } else {
                    Command::KillTask {
                        framework_id: framework.as_str().into(),
                        principal,
                        task_id: task.as_str().into(),
                        at_ms,
                    }
                }
            }
            86..=87 => Command::MarkAgentUnreachable {
                agent_id: agent.as_str().into(),
                at_ms,
            },
            88..=91 => Command::AgentHeartbeat {
                agent_id: agent.as_str().into(),
                at_ms,
            },
            92 => Command::MarkAgentLost {
                agent_id: agent.as_str().into(),
                at_ms,
            },
            93..=95 => Command::ReregisterAgent {
                agent_id: agent.as_str().into(),
                hostname: agent.clone(),
                resources: Self::resources(16.0, 65536.0),
                attributes: BTreeMap::new(),
                executors: vec!["command".into(), "sleep".into()],
                running: self
                    .tasks
                    .iter()
                    .filter(|t| t.2 == agent && rng.gen_bool(0.8))
                    .map(|t| TaskKey::new(t.0.as_str().into(), t.1.as_str().into()))
                    .collect(),
                at_ms,
            },
            96 => Command::TeardownFramework {
                framework_id: framework.as_str().into(),
                principal: Some(principal),
                cause: fullerene_master::state::TeardownCause::OwnRequest,
                at_ms,
            },
            97 => Command::UpdateAgentResources {
                agent_id: agent.as_str().into(),
                resources: Self::resources(rng.gen_range(4..=32) as f64, 65536.0),
                at_ms,
            },
            98 => Command::DisconnectFramework {
                framework_id: framework.as_str().into(),
                at_ms,
            },
            // An operator places a principal in a group (later frameworks of it join there).
            _ if rng.gen_bool(0.5) => Command::SetGroup(GroupPlacement {
                group: format!("group-{}", rng.gen_range(0..3)),
                // The stamp keeps every command's bytes unique.
                weight: Some(1.0 + at_ms as f64 / 1e9),
                principals: vec![format!(
                    "principal-{}",
                    rng.gen_range(1..=self.next_framework + 1)
                )],
            }),
            _ => Command::SetGroupWeight {
                group: format!("group-{}", rng.gen_range(0..3)),
                // The stamp keeps every command's bytes unique.
                weight: 1.0 + at_ms as f64 / 1e9,
            },
        }
    }
}

/// A simulated cluster. Build one with [`Sim::new`]; drive it with [`Sim::round`] or run a
/// whole seeded scenario with [`run_chaos`].
pub struct Sim {
    rng: ChaCha8Rng,
    config: SimConfig,
    settings: ClusterSettings,
    slots: BTreeMap<u64, Slot>,
    network: Vec<Envelope>,
    envelope_seq: u64,
    round: u64,
    base: Time,
    blocked: BTreeSet<(u64, u64)>,
    partition_until: Option<u64>,
    faults: bool,
    oracle: BTreeMap<u64, OracleEntry>,
    data_index: BTreeMap<Vec<u8>, BTreeSet<u64>>,
    next_token: u64,
    proposals: BTreeMap<Token, Proposal>,
    proposed_data: BTreeSet<Vec<u8>>,
    reads: BTreeMap<(u64, Token), u64>,
    leaders_by_term: BTreeMap<u64, u64>,
    max_acked_index: u64,
    generator: CommandGen,
    membership: BTreeMap<Token, Result<ConfState, String>>,
    membership_tokens: BTreeSet<Token>,
    stats: SimStats,
}

fn failure(seed_note: &str, what: String) -> String {
    format!("{seed_note}: {what}")
}

impl Sim {
    /// A cluster of `config.voters` founding masters (ids 1..=voters), bootstrapped alike.
    pub fn new(seed: u64, config: SimConfig) -> Result<Sim, String> {
        let settings = ClusterSettings::default();
        let voters: Vec<u64> = (1..=config.voters as u64).collect();
        let mut slots = BTreeMap::new();
        for &id in &voters {
            let store = MemStorage::new(format!("master-{id}"));
            let node = RaftNode::bootstrap(
                Self::node_config(&config, id),
                store.clone(),
                &voters,
                settings.clone(),
            )
            .map_err(|e| format!("bootstrap of master {id}: {e}"))?;
            slots.insert(
                id,
                Slot {
                    node: Some(node),
                    store,
                    incarnation: 0,
                    down_until: None,
                    injected_failure: false,
                    removed: false,
                    store_jobs: VecDeque::new(),
                },
            );
        }
        Ok(Sim {
            rng: ChaCha8Rng::seed_from_u64(seed),
            config,
            settings,
            slots,
            network: Vec::new(),
            envelope_seq: 0,
            round: 0,
            base: Time::ZERO,
            blocked: BTreeSet::new(),
            partition_until: None,
            faults: false,
            oracle: BTreeMap::new(),
            data_index: BTreeMap::new(),
            next_token: 0,
            proposals: BTreeMap::new(),
            proposed_data: BTreeSet::new(),
            reads: BTreeMap::new(),
            leaders_by_term: BTreeMap::new(),
            max_acked_index: 0,
            generator: CommandGen::default(),
            membership: BTreeMap::new(),
            membership_tokens: BTreeSet::new(),
            stats: SimStats::default(),
        })
    }

    /// Master `id`'s configuration: the run's, keeping every applied entry for the oracle.
    fn node_config(config: &SimConfig, id: u64) -> NodeConfig {
        NodeConfig {
            id,
            trace_applied: true,
            ..config.node.clone()
        }
    }

    /// What the run did so far.
    pub fn stats(&self) -> &SimStats {
        &self.stats
    }

    /// A live master.
    pub fn node(&self, id: u64) -> Option<&RaftNode<MemStorage>> {
        self.slots.get(&id)?.node.as_ref()
    }

    /// Ids of every master ever created (crashed and removed ones included).
    pub fn ids(&self) -> Vec<u64> {
        self.slots.keys().copied().collect()
    }

    /// Whether master `id` reported that it was removed from the group.
    pub fn is_removed(&self, id: u64) -> bool {
        self.slots.get(&id).is_some_and(|s| s.removed)
    }

    /// The live master that leads, if exactly one live master believes it leads in the
    /// highest term among live leaders.
    pub fn leader(&self) -> Option<u64> {
        self.slots
            .iter()
            .filter_map(|(id, s)| {
                s.node
                    .as_ref()
                    .filter(|n| n.is_leader())
                    .map(|n| (n.term(), *id))
            })
            .max()
            .map(|(_, id)| id)
    }

    /// Turns faults (loss, duplication, partitions, crashes) on or off.
    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
        if !on {
            self.blocked.clear();
            self.partition_until = None;
            for slot in self.slots.values_mut() {
                slot.store.cancel_injected_failure();
                // A store that already failed a read has halted its node, which must still be
                // restarted.
                slot.injected_failure = slot.store.read_fault().is_some();
            }
        }
    }

    /// Makes master `id`'s store fail every read of the log from now on: its node halts on the
    /// next read raft-rs makes, and the master is restarted (on what its store had written)
    /// as a crashed one is.
    pub fn fail_reads(&mut self, id: u64) {
        // A master that is down has no process whose reads could fail (its store is replaced
        // when it restarts).
        if let Some(slot) = self.slots.get_mut(&id).filter(|s| s.node.is_some()) {
            slot.store.fail_reads();
            slot.injected_failure = true;
        }
    }

    /// Cuts every link to and from master `id` until faults are switched off.
    pub fn isolate(&mut self, id: u64) {
        for other in self.ids() {
            if other != id {
                self.blocked.insert((id, other));
                self.blocked.insert((other, id));
            }
        }
    }

    /// Runs `rounds` rounds without client traffic.
    pub fn run_rounds(&mut self, rounds: u64) -> Result<(), String> {
        for _ in 0..rounds {
            self.round(false)?;
        }
        Ok(())
    }

    /// Adds a master with an empty store: it joins once a membership change adds it and the
    /// leader sends it a snapshot.
    pub fn add_empty_master(&mut self, id: u64) -> Result<(), String> {
        let store = MemStorage::new(format!("master-{id}"));
        let node = RaftNode::open(Self::node_config(&self.config, id), store.clone())
            .map_err(|e| format!("start of master {id}: {e}"))?;
        self.slots.insert(
            id,
            Slot {
                node: Some(node),
                store,
                incarnation: 0,
                down_until: None,
                injected_failure: false,
                removed: false,
                store_jobs: VecDeque::new(),
            },
        );
        Ok(())
    }

    /// Proposes a membership change at the leader; its result appears in
    /// [`Sim::membership_result`].
    pub fn propose_membership(&mut self, change: ConfChangeV2) -> Result<Token, String> {
        let leader = self.leader().ok_or("no leader")?;
        let token = self.new_token();
        let node = self
            .slots
            .get_mut(&leader)
            .and_then(|s| s.node.as_mut())
            .ok_or("no leader")?;
        node.propose_conf_change(change, token)
            .map_err(|e| format!("membership proposal refused: {e}"))?;
        self.membership_tokens.insert(token);
        Ok(token)
    }

    /// The result of a membership change proposed with [`Sim::propose_membership`], once
    /// applied (or refused).
    pub fn membership_result(&self, token: Token) -> Option<&Result<ConfState, String>> {
        self.membership.get(&token)
    }

    /// Proposes `command` at the leader; the answer is checked at the end like every other.
    pub fn propose_command(&mut self, command: &Command) -> Result<Token, String> {
        let leader = self.leader().ok_or("no leader")?;
        self.propose_at(leader, command)
            .ok_or_else(|| "the leader refused the proposal".to_string())
    }

    /// The answer to a proposal, once known: `Ok` with the state machine's result, or the
    /// error that says it was not applied.
    pub fn answer(
        &self,
        token: Token,
    ) -> Option<Result<&Result<CommandOutcome, CommandError>, &ProposeError>> {
        match self.proposals.get(&token)?.answer.as_ref()? {
            Answer::Applied { result, .. } => Some(Ok(result)),
            Answer::Dropped(e) => Some(Err(e)),
        }
    }

    fn new_token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    fn propose_at(&mut self, id: u64, command: &Command) -> Option<Token> {
        let data = codec::encode(command).ok()?;
        if !self.proposed_data.insert(data.clone()) {
            return None;
        }
        let token = self.new_token();
        let slot = self.slots.get_mut(&id)?;
        let node = slot.node.as_mut()?;
        match node.propose(command, token) {
            Ok(()) => {
                self.stats.proposed += 1;
                self.proposals.insert(
                    token,
                    Proposal {
                        node: id,
                        incarnation: slot.incarnation,
                        data,
                        answer: None,
                    },
                );
                Some(token)
            }
            Err(_) => None,
        }
    }

    /// Runs one round: faults (if on), restarts, ticks, deliveries, client requests (when
    /// `clients`), and one `advance` of every live master.
    pub fn round(&mut self, clients: bool) -> Result<(), String> {
        self.round += 1;
        if self.faults {
            self.inject_faults();
        }
        self.restart_due()?;
        let ids = self.ids();
        for &id in &ids {
            let tick = self.rng.gen_bool(self.config.tick);
            if let Some(node) = self.slots.get_mut(&id).and_then(|s| s.node.as_mut()) {
                if tick {
                    node.tick();
                }
            }
        }
        self.deliver_due();
        if clients {
            self.clients();
        }
        for &id in &ids {
            self.advance(id)?;
        }
        Ok(())
    }

    fn inject_faults(&mut self) {
        let ids = self.ids();
        let live: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| self.slots[id].node.is_some())
            .collect();
        if !live.is_empty() && self.rng.gen_bool(self.config.crash) {
            let id = *live.choose(&mut self.rng).unwrap_or(&live[0]);
            self.crash(id);
        }
        if !live.is_empty() && self.rng.gen_bool(self.config.persist_failure) {
            let id = *live.choose(&mut self.rng).unwrap_or(&live[0]);
            if let Some(slot) = self.slots.get_mut(&id) {
                slot.store.fail_next_persist();
                slot.injected_failure = true;
            }
        }
        if !live.is_empty() && self.rng.gen_bool(self.config.read_failure) {
            let id = *live.choose(&mut self.rng).unwrap_or(&live[0]);
            self.fail_reads(id);
        }
        match self.partition_until {
            Some(until) if until <= self.round => {
                self.blocked.clear();
                self.partition_until = None;
            }
            Some(_) => {}
            None if self.rng.gen_bool(self.config.partition) => {
                self.start_partition(&ids);
            }
            None => {}
        }
    }

    fn start_partition(&mut self, ids: &[u64]) {
        self.stats.partitions += 1;
        let (lo, hi) = self.config.partition_length;
        self.partition_until = Some(self.round + self.rng.gen_range(lo..=hi));
        let kind = self.rng.gen_range(0..3);
        let isolated: Vec<u64> = match (kind, self.leader()) {
            // The leader alone on one side: check-quorum must make it step down, and pre-vote
            // must keep it from disrupting the new leader when it comes back.
            (0, Some(leader)) => vec![leader],
            _ => {
                let mut shuffled = ids.to_vec();
                shuffled.shuffle(&mut self.rng);
                let size = self.rng.gen_range(1..ids.len().max(2));
                shuffled.truncate(size);
                shuffled
            }
        };
        let one_way = kind == 2;
        for &a in &isolated {
            for &b in ids {
                if !isolated.contains(&b) {
                    self.blocked.insert((a, b));
                    if !one_way {
                        self.blocked.insert((b, a));
                    }
                }
            }
        }
    }

    /// Crashes master `id`: its process state is lost, its store keeps what was written.
    pub fn crash(&mut self, id: u64) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if slot.node.take().is_none() {
            return;
        }
        self.stats.crashes += 1;
        slot.store = slot.store.crash();
        slot.store_jobs.clear();
        slot.injected_failure = false;
        let (lo, hi) = self.config.downtime;
        slot.down_until = Some(self.round + self.rng.gen_range(lo..=hi));
        // Answers to its proposals died with it.
        let incarnation = slot.incarnation;
        slot.incarnation += 1;
        self.reads.retain(|(node, _), _| *node != id);
        for p in self.proposals.values_mut() {
            if p.node == id && p.incarnation == incarnation && p.answer.is_none() {
                p.incarnation = u64::MAX;
            }
        }
    }

    fn restart_due(&mut self) -> Result<(), String> {
        let round = self.round;
        let faults = self.faults;
        for (&id, slot) in self.slots.iter_mut() {
            let due = slot
                .down_until
                .is_some_and(|until| until <= round || !faults);
            if slot.node.is_none() && due && !slot.removed {
                let node = RaftNode::open(Self::node_config(&self.config, id), slot.store.clone())
                    .map_err(|e| format!("restart of master {id} from its store: {e}"))?;
                slot.node = Some(node);
                slot.down_until = None;
            }
        }
        Ok(())
    }

    fn send(&mut self, from: u64, message: Message) {
        let to = message.to;
        let is_snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
        let lost = self.faults && self.rng.gen_bool(self.config.loss);
        let reachable = self.slots.get(&to).is_some_and(|s| !s.removed);
        if lost || !reachable {
            self.stats.lost += 1;
            if is_snapshot {
                self.report_snapshot(from, to, false);
            }
            return;
        }
        let copies = if self.faults && !is_snapshot && self.rng.gen_bool(self.config.duplication) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = if self.faults {
                self.rng.gen_range(0..=self.config.max_delay)
            } else {
                0
            };
            self.envelope_seq += 1;
            self.network.push(Envelope {
                deliver_at: self.round + delay,
                seq: self.envelope_seq,
                from,
                message: message.clone(),
            });
        }
    }

    fn report_snapshot(&mut self, from: u64, to: u64, delivered: bool) {
        if let Some(node) = self.slots.get_mut(&from).and_then(|s| s.node.as_mut()) {
            node.report_snapshot(to, delivered);
        }
    }

    fn deliver_due(&mut self) {
        let round = self.round;
        let (mut due, rest): (Vec<Envelope>, Vec<Envelope>) = std::mem::take(&mut self.network)
            .into_iter()
            .partition(|e| e.deliver_at <= round);
        self.network = rest;
        due.sort_by_key(|e| (e.deliver_at, e.seq));
        for envelope in due {
            let to = envelope.message.to;
            let is_snapshot = envelope.message.get_msg_type() == MessageType::MsgSnapshot;
            let cut = self.blocked.contains(&(envelope.from, to));
            let delivered = match self.slots.get_mut(&to).and_then(|s| s.node.as_mut()) {
                Some(node) if !cut => {
                    // Step errors (responses from removed peers, ...) are the transport's to
                    // log; they change nothing.
                    let _ = node.step(envelope.message);
                    true
                }
                _ => false,
            };
            if delivered {
                self.stats.delivered += 1;
            } else {
                self.stats.lost += 1;
            }
            if is_snapshot {
                self.report_snapshot(envelope.from, to, delivered);
            }
        }
    }

    fn clients(&mut self) {
        if self.rng.gen_bool(self.config.propose) {
            let target = match self.leader() {
                Some(leader) if self.rng.gen_bool(0.9) => leader,
                _ => {
                    let ids = self.ids();
                    *ids.choose(&mut self.rng).unwrap_or(&1)
                }
            };
            if let Some(node) = self.slots.get(&target).and_then(|s| s.node.as_ref()) {
                self.generator.observe(node.state());
            }
            for _ in 0..self.rng.gen_range(1..=4) {
                let command = self.generator.generate(&mut self.rng);
                self.propose_at(target, &command);
            }
        }
        if self.rng.gen_bool(self.config.read) {
            let ids = self.ids();
            let id = *ids.choose(&mut self.rng).unwrap_or(&1);
            let token = self.new_token();
            let must_see = self.max_acked_index;
            if let Some(node) = self.slots.get_mut(&id).and_then(|s| s.node.as_mut()) {
                match node.read_index(token) {
                    Ok(()) => {
                        self.reads.insert((id, token), must_see);
                    }
                    Err(_) => self.stats.reads_failed += 1,
                }
            }
        }
    }

    fn advance(&mut self, id: u64) -> Result<(), String> {
        let now = self.base + Duration::from_millis(50 * self.round);
        let Some(slot) = self.slots.get_mut(&id) else {
            return Ok(());
        };
        let injected = slot.injected_failure;
        let Some(node) = slot.node.as_mut() else {
            return Ok(());
        };
        let round = self.round;
        let mut due = Vec::new();
        while slot.store_jobs.front().is_some_and(|(at, _)| *at <= round) {
            if let Some((_, job)) = slot.store_jobs.pop_front() {
                due.push(job);
            }
        }
        if !due.is_empty() {
            node.store_report(run_store_jobs(&mut slot.store.writer(), due));
        }
        let result = node.advance(now);
        for job in node.take_store_jobs() {
            let at = round + self.rng.gen_range(0..=self.config.max_persist_delay);
            // In order: a job never runs before one handed out earlier.
            let at = slot.store_jobs.back().map_or(at, |(last, _)| at.max(*last));
            slot.store_jobs.push_back((at, job));
        }
        let trace = node.take_apply_trace();
        let applied = node.applied_index();
        for entry in trace {
            self.record_applied(id, entry.index, entry.term, entry.entry_type, entry.data)?;
        }
        match result {
            Err(_) if injected => {
                self.crash(id);
                Ok(())
            }
            Err(e) => Err(format!("master {id} failed: {e}")),
            Ok(out) => self.handle_output(id, applied, out),
        }
    }

    fn record_applied(
        &mut self,
        id: u64,
        index: u64,
        term: u64,
        entry_type: EntryType,
        data: Vec<u8>,
    ) -> Result<(), String> {
        let entry = OracleEntry {
            term,
            entry_type,
            data,
        };
        match self.oracle.get(&index) {
            Some(existing) if *existing != entry => Err(format!(
                "state machine safety: master {id} applied term {term} at index {index}, \
                 another master applied term {} there",
                existing.term
            )),
            Some(_) => Ok(()),
            None => {
                self.data_index
                    .entry(entry.data.clone())
                    .or_default()
                    .insert(index);
                self.oracle.insert(index, entry);
                Ok(())
            }
        }
    }

    fn handle_output(&mut self, id: u64, applied: u64, out: NodeOutput) -> Result<(), String> {
        for message in out.messages_to_send {
            self.send(id, message);
        }
        if let Some(change) = out.leader_changed {
            if change.is_self {
                match self.leaders_by_term.insert(change.term, id) {
                    Some(other) if other != id => {
                        return Err(format!(
                            "election safety: masters {other} and {id} both lead term {}",
                            change.term
                        ))
                    }
                    Some(_) => {}
                    None => self.stats.leaders += 1,
                }
            }
        }
        if out.snapshot_installed.is_some() {
            self.stats.snapshots_installed += 1;
        }
        for (token, result) in out.applied {
            let Some(proposal) = self.proposals.get_mut(&token) else {
                return Err(format!("master {id} answered unknown token {token:?}"));
            };
            if proposal.answer.is_some() {
                return Err(format!("master {id} answered token {token:?} twice"));
            }
            let indexes = self
                .data_index
                .get(&proposal.data)
                .cloned()
                .unwrap_or_default();
            if indexes.len() != 1 {
                return Err(format!(
                    "proposal {token:?} acknowledged by master {id} is in the log at {indexes:?}, \
                     not exactly once"
                ));
            }
            let index = indexes.into_iter().next().unwrap_or_default();
            self.max_acked_index = self.max_acked_index.max(index);
            self.stats.acknowledged += 1;
            if result.is_err() {
                self.stats.rejected += 1;
            }
            proposal.answer = Some(Answer::Applied { index, result });
        }
        for (token, error) in out.dropped {
            if self.membership_tokens.contains(&token) {
                self.membership.insert(token, Err(error.to_string()));
                continue;
            }
            if let Some(proposal) = self.proposals.get_mut(&token) {
                self.stats.dropped += 1;
                proposal.answer = Some(Answer::Dropped(error));
            }
        }
        for token in out.reads_ready {
            if let Some(must_see) = self.reads.remove(&(id, token)) {
                if applied < must_see {
                    return Err(format!(
                        "linearizability: master {id} released read {token:?} at applied index \
                         {applied}, but index {must_see} was acknowledged before it was asked"
                    ));
                }
                self.stats.reads_ok += 1;
            }
        }
        for (token, error) in out.reads_failed {
            if self.reads.remove(&(id, token)).is_some() {
                debug_assert!(matches!(
                    error,
                    ReadError::Timeout(_) | ReadError::NoLeader | ReadError::Removed
                ));
                self.stats.reads_failed += 1;
            }
        }
        for applied in out.membership {
            if let Some(token) = applied.token {
                self.membership.entry(token).or_insert(applied.result);
            }
        }
        if out.removed_self {
            if let Some(slot) = self.slots.get_mut(&id) {
                slot.removed = true;
                slot.node = None;
            }
        }
        Ok(())
    }

    /// Runs rounds (without client traffic and faults) until `done` holds, for at most
    /// `max_rounds`.
    pub fn run_until(
        &mut self,
        max_rounds: u64,
        mut done: impl FnMut(&Sim) -> bool,
    ) -> Result<(), String> {
        for _ in 0..max_rounds {
            if done(self) {
                return Ok(());
            }
            self.round(false)?;
        }
        if done(self) {
            Ok(())
        } else {
            Err(format!(
                "condition not reached within {max_rounds} rounds; {}",
                self.describe()
            ))
        }
    }

    /// One line per master: role, term, indexes, pending work.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        for (id, slot) in &self.slots {
            match &slot.node {
                None if slot.removed => lines.push(format!("master {id}: removed")),
                None => lines.push(format!("master {id}: down until {:?}", slot.down_until)),
                Some(n) => lines.push(format!(
                    "master {id}: leader={} term={} leader_id={:?} applied={} commit={} last={} pending={} has_ready={} membership={:?}",
                    n.is_leader(),
                    n.term(),
                    n.leader(),
                    n.applied_index(),
                    n.commit_index(),
                    n.last_index(),
                    n.pending_proposals(),
                    n.has_ready(),
                    n.membership().voters,
                )),
            }
        }
        format!("round {}: {}", self.round, lines.join("; "))
    }

    /// Whether every live, non-removed master has applied everything the leader has and has
    /// no proposal pending. (Heartbeats are always in flight, so the network is not checked.)
    pub fn converged(&self) -> bool {
        let Some(leader) = self.leader().and_then(|id| self.node(id)) else {
            return false;
        };
        let target = leader.last_index();
        if leader.commit_index() != target {
            return false;
        }
        self.slots.values().all(|slot| {
            slot.removed
                || slot.node.as_ref().is_some_and(|n| {
                    n.applied_index() == target && n.pending_proposals() == 0 && !n.has_ready()
                })
        })
    }

    /// Heals the cluster and checks everything listed in the module documentation.
    pub fn heal_and_check(&mut self) -> Result<(), String> {
        self.set_faults(false);
        // A last command through the healed cluster: proves liveness, and makes the leader
        // commit an entry of its own term, which commits everything before it.
        self.run_until(self.config.max_heal_rounds, |sim| sim.leader().is_some())?;
        let marker = Command::SetOverbookingAllowance { allowance: 0.0 };
        let token = loop {
            match self.propose_command(&marker) {
                Ok(token) => break token,
                Err(_) => self.round(false)?,
            }
        };
        let max_rounds = self.config.max_heal_rounds;
        self.run_until(max_rounds, |sim| {
            sim.proposals
                .get(&token)
                .is_some_and(|p| p.answer.is_some())
                && sim.converged()
        })
        .map_err(|e| format!("{e}; marker {token:?}: {:?}", self.proposals.get(&token)))?;
        self.check_final()
    }

    fn check_final(&mut self) -> Result<(), String> {
        let live: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, s)| !s.removed && s.node.is_some())
            .map(|(id, _)| *id)
            .collect();
        let final_index = live
            .iter()
            .filter_map(|id| {
                self.node(*id)
                    .map(fullerene_master::raft_node::RaftNode::applied_index)
            })
            .max()
            .unwrap_or(0);
        self.stats.final_index = final_index;

        // Replay the committed log from the beginning (index 1 is the bootstrap snapshot).
        let mut replay = ClusterState::new(self.settings.clone());
        let mut results = BTreeMap::new();
        let mut checked_refusals = 0;
        for index in 2..=final_index {
            let entry = self
                .oracle
                .get(&index)
                .ok_or_else(|| format!("no master was seen applying index {index}"))?;
            if entry.entry_type != EntryType::EntryNormal {
                // Membership changes record the added masters' addresses in the state.
                if let Ok(change) = decode_conf_change(entry.entry_type, &entry.data) {
                    record_membership_change(&mut replay, &change);
                }
                continue;
            }
            if entry.data.is_empty() {
                continue;
            }
            let command: Command = codec::decode(&entry.data)
                .map_err(|e| format!("entry {index} does not decode: {e}"))?;
            // That a refused command changes nothing is checked for the first few of each
            // run (cloning the state for all of them would dominate the run's cost; the
            // state machine's property test checks it exhaustively).
            let before = (checked_refusals < 8).then(|| replay.clone());
            let result = replay.apply(&command);
            if let (Err(e), Some(before)) = (&result, before) {
                checked_refusals += 1;
                if replay != before {
                    return Err(format!(
                        "refused command at index {index} ({e}) changed the state"
                    ));
                }
            }
            results.insert(index, result);
        }
        for id in &live {
            let node = self.node(*id).ok_or("live master vanished")?;
            if node.applied_index() != final_index {
                return Err(format!(
                    "master {id} applied {} of {final_index}",
                    node.applied_index()
                ));
            }
            if *node.state() != replay {
                return Err(format!(
                    "master {id}'s state differs from the replay of the committed log"
                ));
            }
        }
        for (token, proposal) in &self.proposals {
            let in_log = self
                .data_index
                .get(&proposal.data)
                .map_or(0, std::collections::BTreeSet::len);
            match &proposal.answer {
                Some(Answer::Applied { index, result }) => {
                    if in_log != 1 {
                        return Err(format!(
                            "acknowledged {token:?} is in the log {in_log} times"
                        ));
                    }
                    if results.get(index) != Some(result) {
                        return Err(format!(
                            "acknowledged {token:?} at index {index} answered {result:?}, the \
                             replay gives {:?}",
                            results.get(index)
                        ));
                    }
                }
                Some(Answer::Dropped(ProposeError::OutcomeUnknown)) => {
                    if in_log > 1 {
                        return Err(format!("{token:?} is in the log {in_log} times"));
                    }
                }
                Some(Answer::Dropped(error)) => {
                    if in_log != 0 {
                        return Err(format!(
                            "{token:?} was reported as not applied ({error}) but is in the log"
                        ));
                    }
                }
                None if proposal.incarnation == u64::MAX => {}
                None => {
                    return Err(format!(
                        "{token:?} proposed to master {} was never answered",
                        proposal.node
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Runs one seeded scenario: `config.fault_rounds` rounds with faults and client traffic,
/// then healing and the final checks. The error names the seed.
pub fn run_chaos(seed: u64, config: SimConfig) -> Result<SimStats, String> {
    let note = format!("seed {seed} ({} voters)", config.voters);
    let mut sim = Sim::new(seed, config).map_err(|e| failure(&note, e))?;
    sim.set_faults(true);
    for _ in 0..sim.config.fault_rounds {
        sim.round(true).map_err(|e| failure(&note, e))?;
    }
    sim.heal_and_check().map_err(|e| failure(&note, e))?;
    Ok(sim.stats.clone())
}
