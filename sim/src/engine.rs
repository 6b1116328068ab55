//! The event loop: virtual time, a deterministic event queue, the machines, and the exchange of
//! offers and answers between the master's allocator ([`StandaloneAllocator`]) and the frameworks' policies.
//!
//! # Events and cycles
//!
//! Time is virtual, in scheduling seconds (`f64`): the very value the allocator and the
//! policies compute with, with no conversion on the way in or out. It is deliberately not a
//! [`fullerene_proto::Time`]: a task slowed down by overbooking progresses at a rate `C / D`,
//! and its completion falls between microseconds; rounding it to `Time`'s whole microseconds
//! would move completions, then the order of events, and so the simulator's figures. Where
//! virtual seconds must meet a `Time` they go through the one pair of conversions,
//! [`Time::as_secs_f64`](fullerene_proto::Time::as_secs_f64) and
//! [`Time::from_secs_f64`](fullerene_proto::Time::from_secs_f64), which the master core also
//! uses when it calls the allocator. Events are job arrivals, task completions and allocation ticks,
//! kept in the SDK's [`TimedQueue`] (by time, then by a sequence number given at insertion), so
//! that simultaneous events are handled in the order they were created, identically on every
//! run. All events of one time are handled as a batch (a completion frees resources, updates the
//! job's state and marks its demand summary stale; an arrival registers a framework), and then
//! an allocation cycle runs: stale demand summaries are sent, the allocator decides its offers,
//! each offer goes to its framework's policy, and the answer is applied (launches charged to the
//! machine, the leftover declined or yielded; a yield is redistributed at once through
//! [`StandaloneAllocator::offer_answered`], whose re-offer is handed on before the cycle ends). Cycles
//! repeat at the same instant until one launches nothing. With
//! [`SimConfig::offer_interval_s`] > 0 cycles run instead on ticks at multiples of the interval.
//!
//! # Overbooking and slowdown
//!
//! Graphene §5 lets the matcher overbook fungible resources (disk and network bandwidth); the
//! paper says tasks then slow down but not by how much. We model a fair-shared link: while a
//! machine's charged demand `D` of a fungible resource exceeds its capacity `C`, every task using
//! that resource progresses at rate `C / D` (each gets the same fraction of its demand), and a
//! task using several overbooked resources progresses at the slowest of those rates. Rates are
//! recomputed, and completions rescheduled, whenever a launch or a completion on the machine
//! changes its load. Utilisation counts at most the capacity: an overbooked link carries no more
//! than its bandwidth.
//!
//! An offer's resources are the machine's free resources floored at zero (the wire cannot carry
//! less). A policy that overbooks must know how far the machine is overbooked already, or its
//! bundle pushes the machine past the allowance; so the [`OfferContext::free`] the engine hands
//! the policy is the offer capped by `capacity − charged`, which is negative on a fungible kind
//! the machine has overbooked (Graphene's matcher documents that it accounts for a negative
//! `free` there). Only overbooking policies ever make it negative.
//!
//! # Stalls
//!
//! Declines may set filters in the allocator (Mesos' `refuse_seconds`,
//! [`SimConfig::decline_filter_s`]), so a cycle may offer nothing although work is pending and
//! resources are free; a framework revives (clears its filters) when a completion makes new
//! tasks runnable, as Mesos frameworks do when new work arrives. When no event is left but jobs are
//! unfinished, the engine schedules a retry tick once the filters have expired; if a few retries
//! in a row launch nothing, the run fails with [`SimError::Stalled`] rather than spinning.
//!
//! # Session mode
//!
//! With [`Scheduling::Session`] every job joins, at its arrival, one framework that runs a
//! multi-job [`Session`] (Decima §5.2; [`crate::scheduling::SessionScheduling`]). The allocator
//! offers to it as to any framework, from its demand summary (the sum of its live jobs',
//! [`Session::demand_summary`]), whole agents at a time (see `Engine::with_queues`); the
//! offers of one allocation cycle are one scheduling event, handed to [`Session::schedule`]
//! together. Its launches are checked and charged offer by offer
//! on the paths every framework's bundles take (`settle_offer`, `start_tasks`), and what an
//! offer keeps is declined. Completions and losses go back to the session, which reports when a
//! job's last task finished. Reservations and SLA queues are per-job features: a session run
//! refuses them ([`SimError::SessionWithQueues`]).

use std::collections::{BTreeSet, VecDeque};

use fullerene_proto::{AgentId, FrameworkId, ResourceKind, ResourceVec};
use fullerene_reservation::{
    packed_bundle, AgentRoom, Candidates, PreemptibleTask, ReservationId, TaggedJob,
};
use fullerene_scheduling::allocator::{
    AgentMatching, AllocatorConfig, AllocatorError, InterJobPolicy,
    OfferDecision as AllocatorOffer, StandaloneAllocator,
};
use fullerene_scheduling::fit::{fits, within};
use fullerene_scheduling::{TaskId, TaskKey};
use fullerene_sdk::planner::Plan;
use fullerene_sdk::policy::{build, LeftoverAction, OfferContext, PolicyKind, PolicyParams};
use fullerene_sdk::reserve::ReservationAtoms;
use fullerene_sdk::session::{JobKey, Session, SessionOffer};
use fullerene_sdk::timed_queue::TimedQueue;
use fullerene_sdk::{Job, TaskRef};

use crate::config::SimConfig;
use crate::error::SimError;
use crate::framework::{check_bundle, describe, SessionFramework, SimFramework};
use crate::metrics::UsageRecorder;
use crate::policies::allocator_policy;
use crate::reserved::{Following, QueueSetup};
use crate::runner::{Progress, ProgressFn};
use crate::scheduling::Scheduling;
use crate::sla::seconds_to_ms;
use crate::workload::SimJob;

/// How many retry ticks in a row may launch nothing before a run is declared stalled.
const MAX_IDLE_RETRIES: u32 = 3;

/// Machine `m` registers as agent `agent-{m:05}`, job `j`'s framework as `job-{j:06}`: the
/// number in an id is its index, so an offer's ids lead back to the machine and the job
/// without a map ([`numbered_position`]).
const AGENT_PREFIX: &str = "agent-";
const FRAMEWORK_PREFIX: &str = "job-";

/// The session framework's id and fairness group, in session mode ([`Mode::Session`]).
const SESSION_FRAMEWORK: &str = "session";
const SESSION_GROUP: &str = "session";

/// The index of `id` among `ids`, which the engine numbered `{prefix}{index}`: the number,
/// once the id at that index (as `name` spells it) is checked to be `id`.
fn numbered_position<T>(
    ids: &[T],
    name: impl Fn(&T) -> &str,
    prefix: &str,
    id: &str,
) -> Option<usize> {
    let index: usize = id.strip_prefix(prefix)?.parse().ok()?;
    (name(ids.get(index)?) == id).then_some(index)
}

/// One task's run, as recorded when [`SimConfig::record_trace`] is set.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TaskRecord {
    /// Index of the job in the run's job list.
    pub job: usize,
    /// The task.
    pub task: TaskRef,
    /// The machine it ran on.
    pub machine: usize,
    /// Its demand, charged to the machine while it ran.
    pub demand: ResourceVec,
    /// Launch time, seconds.
    pub start_s: f64,
    /// Completion time, seconds (its duration after it, longer if it was slowed down), or
    /// when it was killed.
    pub finish_s: f64,
    /// Killed for a reservation ([`RunStats::preemptions`]): the task ran again later.
    pub preempted: bool,
}

/// Counters of what the engine did, for performance reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunStats {
    /// Events handled: arrivals, completions (stale ones of rescheduled tasks excluded) and
    /// allocation ticks.
    pub events: u64,
    /// Allocation cycles that produced at least one offer.
    pub allocation_cycles: u64,
    /// Offers handed to frameworks (re-offers of yielded leftovers included).
    pub offers: u64,
    /// Tasks launched.
    pub tasks: u64,
    /// Task completions rescheduled because a machine's overbooking changed.
    pub reschedules: u64,
    /// Best-effort tasks killed so that reservations got their guarantees (runs under a plan,
    /// [`crate::reserved`]); they went back to pending and ran again.
    #[serde(default)]
    pub preemptions: u64,
    /// Seconds of work the killed tasks had done and lost.
    #[serde(default)]
    pub preempted_work_s: f64,
    /// Checks of the reservation invariants passed (runs under a plan).
    #[serde(default)]
    pub reservation_checks: u64,
}

/// What a run produced, before it is summarised into a report.
pub(crate) struct EngineOutput {
    /// Per job of the run, its completion time.
    pub finish_s: Vec<f64>,
    /// The integrated usage.
    pub recorder: UsageRecorder,
    /// Every task's run, when recorded.
    pub trace: Vec<TaskRecord>,
    /// Counters.
    pub stats: RunStats,
}

#[derive(Clone, Copy, Debug)]
enum EventKind {
    Arrival {
        job: usize,
    },
    /// Valid while the task in `slot` still expects the completion pushed with `seq` (a
    /// reschedule or a reused slot makes older completions stale).
    Completion {
        slot: usize,
    },
    AllocationTick,
}

struct Machine {
    capacity: ResourceVec,
    /// Σ demand of the running tasks (may exceed `capacity` on fungible kinds).
    allocated: ResourceVec,
    /// Slots of the running tasks.
    running: Vec<usize>,
}

impl Machine {
    fn overloaded(&self) -> bool {
        ResourceKind::ALL
            .into_iter()
            .any(|k| k.is_fungible() && !within(self.allocated[k], self.capacity[k]))
    }

    /// What the machine's tasks actually use: their demand, capped at the capacity.
    fn used(&self) -> ResourceVec {
        self.allocated.min(&self.capacity)
    }

    /// The progress rate of a task with `demand` here (see the module's documentation).
    fn rate_for(&self, demand: &ResourceVec) -> f64 {
        let mut rate: f64 = 1.0;
        for k in ResourceKind::ALL {
            if k.is_fungible() && demand[k] > 0.0 && !within(self.allocated[k], self.capacity[k]) {
                rate = rate.min(self.capacity[k] / self.allocated[k]);
            }
        }
        rate
    }
}

struct RunningTask {
    framework: usize,
    task: TaskRef,
    machine: usize,
    demand: ResourceVec,
    /// Seconds of work left at full speed, as of `since_s`.
    remaining_s: f64,
    rate: f64,
    since_s: f64,
    /// Sequence number of its pending completion event (0: none yet).
    completion_seq: u64,
    trace: Option<usize>,
}

/// A reserved job the follower found owed resources, with the machines where one of its
/// runnable tasks fits (what the cycle must offer it, [`Engine::check_guarantees_offered`]).
struct OwedJob {
    reservation: ReservationId,
    job: usize,
    machines: Vec<usize>,
}

/// How the run's jobs meet the allocator.
enum Mode {
    /// Each job is its own framework (`Engine::frameworks`) with this intra-job policy.
    PerJob(PolicyKind),
    /// Every job is in the one session framework.
    Session(Box<SessionFramework>),
}

/// Job `sim_job`'s priScores, from the plan of its source (`plans` is indexed by source), for
/// a policy that reads them.
fn planned_pri_scores<'p>(
    plans: &'p [Option<Plan>],
    sim_job: &SimJob,
) -> Result<&'p [Vec<f64>], SimError> {
    match plans.get(sim_job.source).and_then(Option::as_ref) {
        Some(plan) => Ok(plan.pri_scores.as_slice()),
        None => Err(SimError::MissingPlan {
            job: sim_job.name.clone(),
        }),
    }
}

/// After a completion that did not finish its job: a framework (a job's, or the session) whose
/// runnable tasks grew from `runnable_before` to `runnable_after` revives, as a Mesos framework
/// does when new work arrives, should declines have filtered agents.
fn revive_on_new_work(
    allocator: &mut StandaloneAllocator,
    config: &SimConfig,
    id: &FrameworkId,
    runnable_before: usize,
    runnable_after: usize,
) -> Result<(), SimError> {
    if runnable_after > runnable_before && config.decline_filter_s > 0.0 {
        allocator.revive(id)?;
    }
    Ok(())
}

/// Why an answer to an offer cannot be applied.
enum Rejection {
    /// The bundle is invalid: a defect of the policy that chose it, this reason.
    Invalid(String),
    /// The allocator refused the call.
    Sim(SimError),
}

/// One simulation run of one policy.
pub(crate) struct Engine<'a> {
    config: &'a SimConfig,
    /// Per job or in a session, and the run's policy.
    mode: Mode,
    /// The policy's name, for progress reports.
    policy_name: String,
    file_jobs: &'a [Job],
    jobs: &'a [SimJob],
    plans: &'a [Option<Plan>],
    params: PolicyParams,
    progress: Option<&'a ProgressFn<'a>>,

    allocator: StandaloneAllocator,
    cluster_capacity: ResourceVec,
    machines: Vec<Machine>,
    agent_ids: Vec<AgentId>,
    frameworks: Vec<Option<SimFramework<'a>>>,
    /// The jobs that arrived and have not finished, in no particular order, and each one's
    /// position in it: the scans over the running frameworks skip the finished ones.
    live: Vec<usize>,
    live_position: Vec<usize>,
    framework_ids: Vec<FrameworkId>,
    job_groups: Vec<usize>,
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,

    queue: TimedQueue<EventKind>,
    now_s: f64,
    tick_pending: bool,
    /// The earliest due-time cycle queued for a framework's next start (event-driven re-offers).
    wake_at: Option<f64>,
    idle_retries: u32,
    /// Some framework yielded resources in the current allocation.
    yielded: bool,

    tasks: Vec<Option<RunningTask>>,
    free_slots: Vec<usize>,
    /// Completions [`Engine::rerate`] is about to queue, kept to reuse its allocation.
    schedule_scratch: Vec<(f64, usize)>,

    recorder: UsageRecorder,
    trace: Vec<TaskRecord>,
    finish_s: Vec<f64>,
    finished: usize,
    stats: RunStats,
    /// The plan this run follows, if any ([`crate::reserved`]).
    following: Option<Following>,
    /// When the next tick queued for the plan follower is due.
    follow_tick_at: Option<f64>,
    /// When the follower last killed tasks for a reservation.
    killed_at: Option<f64>,
}

impl<'a> Engine<'a> {
    /// Sets up the cluster and queues the arrivals. `plans` is indexed by the job's source in
    /// `file_jobs` and must hold a plan for every source the Graphene kinds (and sessions that
    /// read priScores) use. `queues` sets the allocator's policy and queue weights and, for
    /// Rayon, the plan to follow ([`crate::reserved`]); `None`: the allocator policy the kind
    /// pairs with, every group at weight 1. A session run takes no queues
    /// ([`SimError::SessionWithQueues`]); its allocator runs DRF, Mesos' default, which with
    /// one framework has no one to arbitrate between, and offers whole agents
    /// ([`AgentMatching::WholeAgent`], Mesos' rule, whatever [`SimConfig::matching`] says): task
    /// at a time, each offer would be the sum of the allocator's picks among the session's
    /// summary shapes (the most numerous first, at most 32), sized for tasks the session's
    /// policy may not choose; the session sees instead every free resource of the agents its
    /// summary fits, as Decima's scheduling events see every free executor. (On the default
    /// TPC-H scenario this took a session FIFO's average JCT from 71.0 s to 58.6 s on seed 1,
    /// where per-job FIFO takes 50.4 s: measured with the session's rule that the room a
    /// finished task frees keeps working on that task's stage.)
    pub(crate) fn with_queues(
        config: &'a SimConfig,
        scheduling: &Scheduling,
        file_jobs: &'a [Job],
        jobs: &'a [SimJob],
        plans: &'a [Option<Plan>],
        progress: Option<&'a ProgressFn<'a>>,
        queues: Option<QueueSetup>,
    ) -> Result<Engine<'a>, SimError> {
        let (policy, weights, following) = match (queues, scheduling) {
            (Some(_), Scheduling::Session(session)) => {
                return Err(SimError::SessionWithQueues {
                    policy: session.name().to_string(),
                })
            }
            (Some(queues), Scheduling::PerJob(_)) => {
                (queues.policy, queues.weights, queues.following)
            }
            (None, Scheduling::PerJob(kind)) => {
                (allocator_policy(*kind, config.kappa), Vec::new(), None)
            }
            (None, Scheduling::Session(_)) => (InterJobPolicy::Drf, Vec::new(), None),
        };
        let matching = match scheduling {
            Scheduling::PerJob(_) => config.matching,
            Scheduling::Session(_) => AgentMatching::WholeAgent,
        };
        let allocator_config = AllocatorConfig {
            policy,
            overbook_allowance: config.overbook_allowance,
            decline_filter_s: config.decline_filter_s,
            matching,
            eta: config.eta_rule,
            fair_share: config.fair_share_rule,
            leftover: config.leftover_rule,
            ..AllocatorConfig::default()
        };
        let mut allocator = StandaloneAllocator::new(allocator_config)?;
        for (group, weight) in &weights {
            allocator.set_group_weight(group, *weight)?;
        }
        let mut machines = Vec::with_capacity(config.machines);
        let mut agent_ids = Vec::with_capacity(config.machines);
        for m in 0..config.machines {
            let id = AgentId::from(format!("{AGENT_PREFIX}{m:05}"));
            allocator.add_agent(id.clone(), config.machine)?;
            agent_ids.push(id);
            machines.push(Machine {
                capacity: config.machine,
                allocated: ResourceVec::ZERO,
                running: Vec::new(),
            });
        }
        let cluster_capacity = config.machine.scale(config.machines as f64);

        let groups: Vec<&str> = {
            let mut g: Vec<&str> = jobs.iter().map(|j| j.group.as_str()).collect();
            g.sort_unstable();
            g.dedup();
            g
        };
        let job_groups: Vec<usize> = jobs
            .iter()
            .map(|j| groups.binary_search(&j.group.as_str()).unwrap_or(0))
            .collect();
        let framework_ids: Vec<FrameworkId> = (0..jobs.len())
            .map(|i| FrameworkId::from(format!("{FRAMEWORK_PREFIX}{i:06}")))
            .collect();
        let origin = jobs
            .iter()
            .map(|j| j.arrival_s)
            .fold(f64::INFINITY, f64::min);
        let origin = if origin.is_finite() { origin } else { 0.0 };

        let mut params = PolicyParams::default();
        // The matcher overbooks by the same allowance the allocator and the machines enforce.
        params.matcher.overbook_allowance = config.overbook_allowance;
        params.matcher.remote_penalty = config.remote_penalty;
        params.carbyne.seed = config.seed;
        // A task due before the next allocation cycle must start now (CarbyneParams); with
        // cycles at the due times themselves, nothing is started early.
        params.carbyne.lookahead_s = config.offer_interval_s.max(config.reoffer_interval_s);

        let mode = match scheduling {
            Scheduling::PerJob(kind) => Mode::PerJob(*kind),
            Scheduling::Session(session) => {
                let id = FrameworkId::from(SESSION_FRAMEWORK.to_string());
                allocator.add_framework(id.clone(), SESSION_GROUP, origin)?;
                let max_limit = fullerene_sdk::session::largest_limit(
                    &cluster_capacity,
                    jobs.iter()
                        .flat_map(|j| &file_jobs[j.source].stages)
                        .map(|stage| (stage.demand, stage.num_tasks())),
                );
                Mode::Session(Box::new(SessionFramework::new(
                    id,
                    Session::new(session.build(config.seed), max_limit, cluster_capacity),
                    session.needs_pri_scores(),
                    file_jobs.len(),
                    jobs.len(),
                )))
            }
        };
        let mut engine = Engine {
            config,
            mode,
            policy_name: scheduling.name().to_string(),
            file_jobs,
            jobs,
            plans,
            params,
            progress,
            allocator,
            cluster_capacity,
            machines,
            agent_ids,
            frameworks: (0..jobs.len()).map(|_| None).collect(),
            live: Vec::new(),
            live_position: vec![usize::MAX; jobs.len()],
            framework_ids,
            job_groups,
            dirty: Vec::new(),
            is_dirty: vec![false; jobs.len()],
            queue: TimedQueue::new(),
            now_s: origin,
            tick_pending: false,
            wake_at: None,
            idle_retries: 0,
            yielded: false,
            tasks: Vec::new(),
            free_slots: Vec::new(),
            schedule_scratch: Vec::new(),
            recorder: UsageRecorder::new(groups.len(), cluster_capacity, origin),
            trace: Vec::new(),
            finish_s: vec![f64::NAN; jobs.len()],
            finished: 0,
            stats: RunStats::default(),
            following,
            follow_tick_at: None,
            killed_at: None,
        };
        for (i, job) in jobs.iter().enumerate() {
            engine.push(job.arrival_s, EventKind::Arrival { job: i });
        }
        Ok(engine)
    }

    /// Runs until every job has finished.
    pub(crate) fn run(mut self) -> Result<EngineOutput, SimError> {
        while let Some(first) = self.queue.pop() {
            let now = first.time;
            self.recorder.advance_to(now);
            self.now_s = now;
            let mut changed = false;
            let mut tick = false;
            let mut next = Some(first);
            while let Some(event) = next {
                match event.kind {
                    EventKind::Arrival { job } => {
                        self.arrive(job)?;
                        self.stats.events += 1;
                        changed = true;
                    }
                    EventKind::Completion { slot } => {
                        if self.complete(slot, event.seq)? {
                            self.stats.events += 1;
                            changed = true;
                        }
                    }
                    EventKind::AllocationTick => {
                        self.stats.events += 1;
                        self.tick_pending = false;
                        tick = true;
                    }
                }
                next = self.queue.pop_at(now);
            }
            if self.config.offer_interval_s > 0.0 {
                if tick {
                    self.allocate()?;
                }
                if changed && !self.tick_pending {
                    let at = self.next_tick_at(now);
                    self.push(at, EventKind::AllocationTick);
                    self.tick_pending = true;
                }
            } else if changed || tick {
                self.allocate()?;
            }
            self.queue_follow_tick();
            if self.queue.is_empty() && self.finished < self.jobs.len() {
                self.schedule_retry()?;
            }
        }
        if self.finished < self.jobs.len() {
            return Err(self.stalled());
        }
        let end = self.finish_s.iter().copied().fold(self.now_s, f64::max);
        self.recorder.advance_to(end);
        Ok(EngineOutput {
            finish_s: self.finish_s,
            recorder: self.recorder,
            trace: self.trace,
            stats: self.stats,
        })
    }

    fn push(&mut self, time_s: f64, kind: EventKind) -> u64 {
        self.queue.push(time_s, kind)
    }

    /// `at` itself in event-driven mode; with an offer interval, the first multiple of it at or
    /// after `at` (ticks stay on the interval's grid, as Mesos' periodic allocation does).
    fn next_tick_at(&self, at: f64) -> f64 {
        let interval = self.config.offer_interval_s;
        if interval > 0.0 {
            (at / interval).ceil() * interval
        } else {
            at
        }
    }

    fn schedule_retry(&mut self) -> Result<(), SimError> {
        if self.idle_retries >= MAX_IDLE_RETRIES {
            return Err(self.stalled());
        }
        self.idle_retries += 1;
        // Once the filters set by declines have expired; at least a second, so that retries
        // without filters still advance time.
        let gap = self
            .config
            .decline_filter_s
            .max(self.config.offer_interval_s)
            .max(1.0);
        self.push(self.now_s + gap, EventKind::AllocationTick);
        self.tick_pending = true;
        Ok(())
    }

    fn stalled(&self) -> SimError {
        let unfinished: Vec<usize> = (0..self.jobs.len())
            .filter(|&j| self.finish_s[j].is_nan())
            .collect();
        SimError::Stalled {
            now_s: self.now_s,
            unfinished: unfinished.len(),
            first_job: unfinished
                .first()
                .map(|&j| self.jobs[j].name.clone())
                .unwrap_or_default(),
        }
    }

    /// A job arrives: its framework registers in its group, builds its policy and sends its
    /// first demand summary.
    fn arrive(&mut self, j: usize) -> Result<(), SimError> {
        let kind = match self.mode {
            Mode::PerJob(kind) => kind,
            Mode::Session(_) => return self.join_session(j),
        };
        let sim_job = &self.jobs[j];
        let job = &self.file_jobs[sim_job.source];
        let pri_scores = kind
            .needs_pri_scores()
            .then(|| planned_pri_scores(self.plans, sim_job))
            .transpose()?;
        let policy = build(
            kind,
            job,
            pri_scores.map(<[Vec<f64>]>::to_vec),
            &self.params,
        )
        .map_err(|source| SimError::Policy {
            job: sim_job.name.clone(),
            source,
        })?;
        let id = self.framework_ids[j].clone();
        self.allocator
            .add_framework(id.clone(), &sim_job.group, self.now_s)?;
        let group = self.job_groups[j];
        self.frameworks[j] = Some(SimFramework::new(id, job, group, policy, pri_scores));
        self.live_position[j] = self.live.len();
        self.live.push(j);
        self.recorder.job_arrived(group);
        self.mark_dirty(j);
        Ok(())
    }

    /// In session mode, a job arrives: it joins the session (whose framework revives, as a
    /// framework does when new work arrives, should declines have filtered agents).
    fn join_session(&mut self, j: usize) -> Result<(), SimError> {
        let sim_job = &self.jobs[j];
        let Mode::Session(framework) = &mut self.mode else {
            return Err(SimError::Internal(
                "a session arrival in a per-job run".into(),
            ));
        };
        let pri_scores = framework
            .reads_pri_scores()
            .then(|| planned_pri_scores(self.plans, sim_job))
            .transpose()?;
        let job = &self.file_jobs[sim_job.source];
        framework.add_job(j, sim_job.source, job, self.now_s, pri_scores);
        if self.config.decline_filter_s > 0.0 {
            self.allocator.revive(&framework.id)?;
        }
        let group = self.job_groups[j];
        self.live_position[j] = self.live.len();
        self.live.push(j);
        self.recorder.job_arrived(group);
        Ok(())
    }

    /// Job `f`'s demand summary changed (in session mode: the session's).
    fn mark_dirty(&mut self, f: usize) {
        if let Mode::Session(framework) = &mut self.mode {
            framework.dirty = true;
            return;
        }
        if !self.is_dirty[f] {
            self.is_dirty[f] = true;
            self.dirty.push(f);
        }
    }

    /// Sends the demand summaries that changed since the last cycle, in framework order.
    fn flush_demands(&mut self) -> Result<(), SimError> {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        for &f in &dirty {
            self.is_dirty[f] = false;
            if let Some(fw) = &self.frameworks[f] {
                let summary = fw.demand_summary(&self.cluster_capacity, self.config.pri_scope);
                self.allocator.update_demand(&fw.id, &summary)?;
            }
        }
        dirty.clear();
        self.dirty = dirty;
        if let Mode::Session(framework) = &mut self.mode {
            if std::mem::take(&mut framework.dirty) {
                let summary =
                    framework.demand_summary(&self.cluster_capacity, self.config.pri_scope);
                self.allocator.update_demand(&framework.id, &summary)?;
            }
        }
        Ok(())
    }

    /// Allocation cycles at the current instant until one launches nothing; then, if some
    /// framework yielded, a cycle when the first of them wants to start a task again (its
    /// [`JobPolicy::next_start_s`](fullerene_sdk::policy::JobPolicy::next_start_s)), or with
    /// a positive [`SimConfig::reoffer_interval_s`] a periodic re-offer tick.
    fn allocate(&mut self) -> Result<(), SimError> {
        self.yielded = false;
        self.allocation_rounds()?;
        if !self.yielded {
            return Ok(());
        }
        if self.config.reoffer_interval_s > 0.0 {
            if !self.tick_pending {
                let at = self.next_tick_at(self.now_s + self.config.reoffer_interval_s);
                self.push(at, EventKind::AllocationTick);
                self.tick_pending = true;
            }
            return Ok(());
        }
        let now = self.now_s;
        // The minimum does not depend on the order of the live list.
        let due = self
            .live
            .iter()
            .filter_map(|&f| self.frameworks[f].as_ref())
            .filter_map(SimFramework::next_start_s)
            .filter(|&at| at > now)
            .fold(f64::INFINITY, f64::min);
        if due.is_finite() && self.wake_at.is_none_or(|w| w <= now || due < w) {
            let at = self.next_tick_at(due);
            self.push(at, EventKind::AllocationTick);
            self.wake_at = Some(at);
        }
        Ok(())
    }

    fn allocation_rounds(&mut self) -> Result<(), SimError> {
        loop {
            let owed = self.follow_plan()?;
            self.flush_demands()?;
            let offers = self.allocator.allocate_all(self.now_s);
            self.check_guarantees_offered(&owed, &offers)?;
            if offers.is_empty() {
                return Ok(());
            }
            self.stats.allocation_cycles += 1;
            let mut launched_any = false;
            if matches!(self.mode, Mode::Session(_)) {
                launched_any = self.handle_session_offers(offers)?;
            } else {
                let mut pending: VecDeque<AllocatorOffer> = offers.into();
                while let Some(offer) = pending.pop_front() {
                    let (launched, reoffers) = self.handle_offer(offer)?;
                    launched_any |= launched;
                    pending.extend(reoffers);
                }
            }
            if !launched_any {
                return Ok(());
            }
        }
    }

    /// Hands one offer to its framework's policy and applies the answer. Returns whether tasks
    /// were launched, and the re-offers of a yielded leftover.
    fn handle_offer(
        &mut self,
        offer: AllocatorOffer,
    ) -> Result<(bool, Vec<AllocatorOffer>), SimError> {
        self.stats.offers += 1;
        let m = self.offer_machine(&offer)?;
        let f = numbered_position(
            &self.framework_ids,
            FrameworkId::as_str,
            FRAMEWORK_PREFIX,
            offer.framework.as_str(),
        )
        .ok_or_else(|| {
            SimError::Internal(format!("offer to unknown framework {}", offer.framework))
        })?;
        let reads_fair_share = self.frameworks[f]
            .as_ref()
            .is_some_and(SimFramework::reads_fair_share);
        // The allocator caches A_k for the rest of the cycle from the first request, so for the
        // policies that read it the request stays on every offer, leftovers included, as a
        // master makes it; the others are handed zero and spared the progressive filling.
        let fair_share = if reads_fair_share {
            self.allocator.fair_share(&offer.framework)?
        } else {
            ResourceVec::ZERO
        };
        let context = OfferContext {
            machine: m,
            free: self.offer_free(m, &offer),
            capacity: self.machines[m].capacity,
            kind: offer.kind,
            now_s: self.now_s,
            cluster_capacity: self.cluster_capacity,
            fair_share,
            guaranteed: offer.guaranteed,
        };
        let fw = self.frameworks[f].as_mut().ok_or_else(|| {
            SimError::Internal(format!(
                "offer to framework {} whose job is not running",
                offer.framework
            ))
        })?;
        let answer = fw.answer(&context);
        let (decision, demands) = match answer {
            Ok(answer) => answer,
            Err(reason) => return Err(self.invalid_bundle(f, m, reason)),
        };
        let reoffer = match self.settle_offer(&offer, m, &demands, decision.leftover) {
            Ok(reoffer) => reoffer,
            Err(Rejection::Invalid(reason)) => return Err(self.invalid_bundle(f, m, reason)),
            Err(Rejection::Sim(e)) => return Err(e),
        };
        let launched = !decision.launch.is_empty();
        if launched {
            self.launch(f, m, &decision.launch);
            self.mark_dirty(f);
            self.idle_retries = 0;
        }
        Ok((launched, reoffer))
    }

    /// The machine an offer is of.
    fn offer_machine(&self, offer: &AllocatorOffer) -> Result<usize, SimError> {
        numbered_position(
            &self.agent_ids,
            AgentId::as_str,
            AGENT_PREFIX,
            offer.agent.as_str(),
        )
        .ok_or_else(|| SimError::Internal(format!("offer of unknown agent {}", offer.agent)))
    }

    /// What a policy is told machine `m` has free on `offer`. The allocator floors free
    /// resources at zero, which hides a fungible resource that is already overbooked; the
    /// matcher bounds its overbooking relative to `free` ("may go negative on fungible
    /// kinds"), so it is told the machine's true headroom.
    fn offer_free(&self, m: usize, offer: &AllocatorOffer) -> ResourceVec {
        let machine = &self.machines[m];
        offer.resources.min(&(machine.capacity - machine.allocated))
    }

    /// The error for an invalid bundle of job `f` on machine `m`: a defect of the policy.
    fn invalid_bundle(&self, f: usize, m: usize, reason: String) -> SimError {
        let policy = match &self.mode {
            Mode::PerJob(_) => self.frameworks[f]
                .as_ref()
                .map_or(self.policy_name.as_str(), SimFramework::policy_name),
            Mode::Session(framework) => framework.session.policy_name(),
        };
        SimError::InvalidDecision {
            policy: policy.to_string(),
            job: self.jobs[f].name.clone(),
            machine: m,
            now_s: self.now_s,
            reason,
        }
    }

    /// In session mode, the error for launches on machine `m` (`bundles`, job by job) that
    /// [`Engine::settle_offer`] refused: one job's bundle is that job's invalid decision; the
    /// launches of several jobs, or none, are the session's, which the error names.
    fn invalid_session_launches(
        &self,
        bundles: &[(usize, Vec<TaskRef>)],
        m: usize,
        reason: String,
    ) -> SimError {
        let Mode::Session(framework) = &self.mode else {
            return SimError::Internal("session launches in a per-job run".into());
        };
        if let [(j, _)] = bundles {
            return self.invalid_bundle(*j, m, reason);
        }
        let jobs = if bundles.is_empty() {
            "no task".to_string()
        } else {
            let names: Vec<String> = bundles
                .iter()
                .map(|(j, _)| format!("`{}`", self.jobs[*j].name))
                .collect();
            format!("jobs {}", names.join(", "))
        };
        SimError::InvalidSessionDecision {
            policy: framework.session.policy_name().to_string(),
            session: framework.id.to_string(),
            jobs,
            machine: m,
            now_s: self.now_s,
            reason,
        }
    }

    /// Applies a framework's answer to `offer` of machine `m`, launching tasks of `demands`
    /// and leaving the rest as `leftover` says, as the master checks an accept: the bundle must
    /// fit the machine (up to the overbooking allowance) and the offer. Returns the allocator's
    /// re-offers of a yielded leftover. The tasks are started by the caller.
    fn settle_offer(
        &mut self,
        offer: &AllocatorOffer,
        m: usize,
        demands: &[ResourceVec],
        leftover: LeftoverAction,
    ) -> Result<Vec<AllocatorOffer>, Rejection> {
        let allowance = self.config.overbook_allowance;
        let total = demands.iter().fold(ResourceVec::ZERO, |acc, d| acc + *d);
        let machine = &self.machines[m];
        if !(machine.allocated + total).fits_with_overbooking(&machine.capacity, allowance) {
            return Err(Rejection::Invalid(format!(
                "the bundle needs {total} but the machine has {} charged of {} (overbooking allowance {allowance})",
                machine.allocated, machine.capacity
            )));
        }
        let reoffer = match self.allocator.offer_answered(
            &offer.agent,
            &offer.framework,
            demands,
            leftover,
            self.now_s,
        ) {
            Ok(reoffer) => reoffer,
            Err(AllocatorError::ExceedsOffer {
                launched, offered, ..
            }) => {
                return Err(Rejection::Invalid(format!(
                    "the bundle needs {launched}, more than the offer of {offered}"
                )))
            }
            Err(e) => return Err(Rejection::Sim(e.into())),
        };
        if leftover == LeftoverAction::Yield && !offer.resources.saturating_sub(&total).is_zero() {
            self.yielded = true;
        }
        Ok(reoffer)
    }

    /// In session mode, hands a cycle's offers (all the session framework's) to the session as
    /// one scheduling event (Decima §5.2), then applies its launches offer by offer as
    /// [`Engine::handle_offer`] applies a bundle: each job's tasks checked ([`check_bundle`]:
    /// named once, and launched by this event on the offered machine, as the session marks them
    /// when it places them), the offer settled ([`Engine::settle_offer`]: the tasks fit the
    /// machine and the offer, the rest is declined) and the tasks started. Re-offers, if the
    /// allocator makes any, are the next event. Returns whether tasks were launched.
    fn handle_session_offers(&mut self, offers: Vec<AllocatorOffer>) -> Result<bool, SimError> {
        let mut launched_any = false;
        let mut pending = offers;
        while !pending.is_empty() {
            self.stats.offers += pending.len() as u64;
            let now = self.now_s;
            let mut event = Vec::with_capacity(pending.len());
            // Each machine's position in the event (an agent is out on one offer at a time).
            let mut position = vec![usize::MAX; self.machines.len()];
            for (o, offer) in pending.iter().enumerate() {
                let m = self.offer_machine(offer)?;
                position[m] = o;
                event.push(SessionOffer {
                    machine: m,
                    free: self.offer_free(m, offer),
                    capacity: self.machines[m].capacity,
                });
            }
            let Mode::Session(framework) = &mut self.mode else {
                return Err(SimError::Internal("session offers in a per-job run".into()));
            };
            if let Some(offer) = pending.iter().find(|o| o.framework != framework.id) {
                return Err(SimError::Internal(format!(
                    "offer to unknown framework {}",
                    offer.framework
                )));
            }
            let launches = framework.session.schedule(&event, now);
            let mut by_offer: Vec<Vec<(JobKey, TaskRef)>> = vec![Vec::new(); pending.len()];
            for launch in &launches {
                let o = position.get(launch.machine).copied().unwrap_or(usize::MAX);
                let Some(tasks) = by_offer.get_mut(o) else {
                    return Err(SimError::Internal(format!(
                        "the session launched on machine {}, which it was not offered",
                        launch.machine
                    )));
                };
                tasks.push((launch.job, launch.task));
            }
            // Per offer, its bundles job by job (in key order, each in launch order), checked.
            let mut answers = Vec::with_capacity(pending.len());
            for (mut tasks, offered) in by_offer.into_iter().zip(&event) {
                let m = offered.machine;
                tasks.sort_by_key(|&(key, _)| key);
                let mut bundles: Vec<(usize, Vec<TaskRef>)> = Vec::new();
                let mut demands = Vec::with_capacity(tasks.len());
                for group in tasks.chunk_by(|a, b| a.0 == b.0) {
                    let key = group[0].0;
                    let (Some(j), Some(entry)) =
                        (framework.job_of(key), framework.session.job(key))
                    else {
                        return Err(SimError::Internal(format!(
                            "the session launched a task of job {key}, which is not live"
                        )));
                    };
                    let bundle: Vec<TaskRef> = group.iter().map(|&(_, task)| task).collect();
                    let (job, state) = (entry.job.as_ref(), &entry.state);
                    let checked = check_bundle(job, &bundle, |task| {
                        if state.running_on(task) == Some(m) && state.launched_at(task) == Some(now)
                        {
                            Ok(())
                        } else {
                            Err(format!(
                                "task {} was not launched by this scheduling event on machine {m} (status {:?})",
                                describe(job, task),
                                state.status(task)
                            ))
                        }
                    });
                    match checked {
                        Ok(bundle_demands) => demands.extend(bundle_demands),
                        Err(reason) => {
                            return Err(SimError::InvalidDecision {
                                policy: framework.session.policy_name().to_string(),
                                job: self.jobs[j].name.clone(),
                                machine: m,
                                now_s: now,
                                reason,
                            })
                        }
                    }
                    bundles.push((j, bundle));
                }
                answers.push((bundles, demands));
            }
            let mut reoffers = Vec::new();
            for (offer, (bundles, demands)) in pending.iter().zip(answers) {
                let m = self.offer_machine(offer)?;
                match self.settle_offer(offer, m, &demands, LeftoverAction::Decline) {
                    Ok(more) => reoffers.extend(more),
                    Err(Rejection::Invalid(reason)) => {
                        return Err(self.invalid_session_launches(&bundles, m, reason));
                    }
                    Err(Rejection::Sim(e)) => return Err(e),
                }
                for (j, bundle) in &bundles {
                    self.start_tasks(*j, m, bundle);
                    self.mark_dirty(*j);
                    launched_any = true;
                    self.idle_retries = 0;
                }
            }
            pending = reoffers;
        }
        Ok(launched_any)
    }

    /// Starts a validated bundle of job `f`'s framework on machine `m`.
    fn launch(&mut self, f: usize, m: usize, bundle: &[TaskRef]) {
        let now = self.now_s;
        let Some(fw) = self.frameworks[f].as_mut() else {
            return;
        };
        for &task in bundle {
            fw.state.mark_launched(task, m, now);
        }
        self.start_tasks(f, m, bundle);
    }

    /// Runs job `f`'s `bundle` on machine `m`, its tasks already marked launched by the job's
    /// framework: charges them to the machine and the usage records, traces them and schedules
    /// their completions.
    fn start_tasks(&mut self, f: usize, m: usize, bundle: &[TaskRef]) {
        let now = self.now_s;
        let was_overloaded = self.machines[m].overloaded();
        let old_used = self.machines[m].used();
        let file_jobs = self.file_jobs;
        let job = &file_jobs[self.jobs[f].source];
        let group = self.job_groups[f];
        let first_new = self.machines[m].running.len();
        for &task in bundle {
            let demand = job.demand(task);
            self.recorder.charge(group, &demand);
            self.machines[m].allocated += demand;
            let trace = self.config.record_trace.then(|| {
                self.trace.push(TaskRecord {
                    job: f,
                    task,
                    machine: m,
                    demand,
                    start_s: now,
                    finish_s: f64::NAN,
                    preempted: false,
                });
                self.trace.len() - 1
            });
            let running = RunningTask {
                framework: f,
                task,
                machine: m,
                demand,
                remaining_s: job.duration(task),
                rate: 1.0,
                since_s: now,
                completion_seq: 0,
                trace,
            };
            let slot = match self.free_slots.pop() {
                Some(slot) => {
                    self.tasks[slot] = Some(running);
                    slot
                }
                None => {
                    self.tasks.push(Some(running));
                    self.tasks.len() - 1
                }
            };
            self.machines[m].running.push(slot);
        }
        self.stats.tasks += bundle.len() as u64;
        let new_used = self.machines[m].used();
        self.recorder.used_changed(&old_used, &new_used);
        debug_assert!(
            self.machines[m]
                .allocated
                .fits_with_overbooking(&self.machines[m].capacity, self.config.overbook_allowance),
            "machine {m} charged beyond its capacity and allowance"
        );
        let rerate_all = was_overloaded || self.machines[m].overloaded();
        self.rerate(m, if rerate_all { 0 } else { first_new });
    }

    /// Brings the progress of machine `m`'s tasks from position `from` of its running list on
    /// up to now and (re)schedules the completions whose rate changed: all tasks (`from` 0) when
    /// the machine's overbooking changed, otherwise only the ones just launched, which a launch
    /// appends (nothing is slowed down, so the others keep their completion time).
    fn rerate(&mut self, m: usize, from: usize) {
        let now = self.now_s;
        let mut schedule = std::mem::take(&mut self.schedule_scratch);
        for &slot in &self.machines[m].running[from..] {
            let Some(task) = self.tasks[slot].as_mut() else {
                continue;
            };
            let rate = self.machines[m].rate_for(&task.demand);
            task.remaining_s = (task.remaining_s - task.rate * (now - task.since_s)).max(0.0);
            task.since_s = now;
            let scheduled = task.completion_seq != 0;
            if scheduled && rate == task.rate {
                continue;
            }
            if scheduled {
                self.stats.reschedules += 1;
            }
            task.rate = rate;
            schedule.push((now + task.remaining_s / rate, slot));
        }
        for &(at, slot) in &schedule {
            let seq = self.push(at, EventKind::Completion { slot });
            if let Some(task) = self.tasks[slot].as_mut() {
                task.completion_seq = seq;
            }
        }
        schedule.clear();
        self.schedule_scratch = schedule;
    }

    /// A completion event; false when it is stale (the task was rescheduled since, or finished
    /// and its slot reused).
    fn complete(&mut self, slot: usize, seq: u64) -> Result<bool, SimError> {
        match self.tasks.get(slot) {
            Some(Some(task)) if task.completion_seq == seq => {}
            _ => return Ok(false),
        }
        let Some((task, was_overloaded)) = self.unload(slot)? else {
            return Ok(false);
        };
        if matches!(self.mode, Mode::Session(_)) {
            self.complete_in_session(&task, was_overloaded)?;
            return Ok(true);
        }
        let now = self.now_s;
        let m = task.machine;
        let f = task.framework;
        let fw = self.frameworks[f].as_mut().ok_or_else(|| {
            SimError::Internal(format!("completion for job {f}, which is not running"))
        })?;
        let runnable_before = fw.state.num_runnable();
        fw.state.mark_finished(fw.job, task.task, now);
        let complete = fw.state.is_complete();
        if !complete {
            revive_on_new_work(
                &mut self.allocator,
                self.config,
                &fw.id,
                runnable_before,
                fw.state.num_runnable(),
            )?;
        }
        if was_overloaded {
            self.rerate(m, 0);
        }
        if complete {
            self.finish_job(f)?;
        } else {
            self.mark_dirty(f);
        }
        Ok(true)
    }

    /// [`Engine::complete`] in session mode: the session learns that the task finished and
    /// says whether that was its job's last one. Like a per-job framework, the session revives
    /// when the completion made new tasks runnable ([`revive_on_new_work`]).
    fn complete_in_session(
        &mut self,
        task: &RunningTask,
        was_overloaded: bool,
    ) -> Result<(), SimError> {
        let now = self.now_s;
        let j = task.framework;
        let Mode::Session(framework) = &mut self.mode else {
            return Err(SimError::Internal(
                "a session completion in a per-job run".into(),
            ));
        };
        let key = framework.key_of(j).ok_or_else(|| {
            SimError::Internal(format!(
                "completion for job {j}, which is not in the session"
            ))
        })?;
        let runnable = |framework: &SessionFramework| {
            framework
                .session
                .job(key)
                .map_or(0, |entry| entry.state.num_runnable())
        };
        let runnable_before = runnable(framework);
        let done = framework
            .session
            .task_finished(key, task.task, now)
            .map_err(|e| {
                SimError::Internal(format!(
                    "the session refused a completion of job `{}`: {e}",
                    self.jobs[j].name
                ))
            })?;
        if let Some(done) = &done {
            if framework.job_of(done.key) != Some(j) {
                return Err(SimError::Internal(format!(
                    "the session finished job {} on a task of job {key}",
                    done.key
                )));
            }
        } else {
            revive_on_new_work(
                &mut self.allocator,
                self.config,
                &framework.id,
                runnable_before,
                runnable(framework),
            )?;
        }
        if was_overloaded {
            self.rerate(task.machine, 0);
        }
        if done.is_some() {
            self.finish_job(j)
        } else {
            self.mark_dirty(j);
            Ok(())
        }
    }

    /// One round of Rayon's plan follower (§5.2), when the run follows a plan
    /// ([`crate::reserved`]): the reserved jobs' loads and the running tasks go to the
    /// [`PlanFollower`](fullerene_reservation::PlanFollower), whose shares become the
    /// allocator's guarantees and whose preemptions kill tasks here (best effort, or reserved
    /// jobs' beyond their own stage's allocation). Returns the
    /// reserved jobs (with their reservations) the coming cycle must offer to: owed resources
    /// with a runnable task that fits some machine now.
    fn follow_plan(&mut self) -> Result<Vec<OwedJob>, SimError> {
        let Some(following) = self.following.as_mut() else {
            return Ok(Vec::new());
        };
        let now_ms = seconds_to_ms(self.now_s);
        let mut tagged = Vec::new();
        let mut tagged_jobs = Vec::new();
        for &j in &self.live {
            let (Some(reservation), Some(fw)) =
                (following.reservation_of(j), self.frameworks[j].as_ref())
            else {
                continue;
            };
            // In the plan's units: each task packed on its machine, as the request counted it.
            let held = fw
                .state
                .running_tasks()
                .fold(ResourceVec::ZERO, |sum, (t, machine, _)| {
                    sum + packed_bundle(&fw.job.demand(t), &self.machines[machine].capacity)
                });
            // A stage's tasks share its demand.
            let shapes = fw
                .state
                .runnable_stages()
                .map(|stage| {
                    let count = fw.state.num_runnable_in_stage(stage);
                    (
                        fw.job.stages[stage].demand,
                        u32::try_from(count).unwrap_or(u32::MAX),
                    )
                })
                .collect();
            // The running tasks by stage, as the request counted them: one demand a stage.
            let mut running: Vec<(ResourceVec, u32)> = Vec::new();
            for (t, _, _) in fw.state.running_tasks() {
                let demand = fw.job.stages[t.stage()].demand;
                match running.iter_mut().find(|(shape, _)| *shape == demand) {
                    Some((_, count)) => *count += 1,
                    None => running.push((demand, 1)),
                }
            }
            // Every reserved job here asked for its own DAG's request (`crate::sla`): its atoms
            // are worked out once, for the reservation it runs in.
            let atoms_of = |id| {
                following
                    .reservation(id)
                    .and_then(|r| ReservationAtoms::of(fw.job, &r.expr))
            };
            let (cached_for, cached) = fw
                .reservation_atoms
                .get_or_init(|| (reservation, atoms_of(reservation)));
            let other;
            let atoms = if *cached_for == reservation {
                cached.as_ref()
            } else {
                other = atoms_of(reservation);
                other.as_ref()
            };
            tagged.push(TaggedJob {
                reservation,
                held,
                shapes,
                running,
                finished_atoms: atoms.map_or_else(BTreeSet::new, |atoms| {
                    atoms.finished(&fw.state).into_iter().collect()
                }),
            });
            tagged_jobs.push(j);
        }
        // The running tasks, walked only on a shortfall: best effort, and reserved jobs' (the
        // follower takes those only beyond their own stage's allocation).
        let (tasks, frameworks, framework_ids, agent_ids, now_s) = (
            &self.tasks,
            &self.frameworks,
            &self.framework_ids,
            &self.agent_ids,
            self.now_s,
        );
        let candidates = |reservation_of: &[Option<ReservationId>]| {
            let mut candidates = Candidates::default();
            for (slot, task) in tasks.iter().enumerate() {
                let Some(task) = task else {
                    continue;
                };
                let started_s = frameworks[task.framework]
                    .as_ref()
                    .and_then(|fw| fw.state.launched_at(task.task))
                    .unwrap_or(now_s);
                candidates.tasks.push(PreemptibleTask {
                    // The slot names the task: a kill finds it without a map.
                    key: TaskKey::new(
                        framework_ids[task.framework].clone(),
                        TaskId::from(slot.to_string()),
                    ),
                    agent: agent_ids[task.machine].clone(),
                    started_ms: seconds_to_ms(started_s),
                    resources: task.demand,
                    reservation: reservation_of.get(task.framework).copied().flatten(),
                });
            }
            candidates
        };
        let agents: Vec<AgentRoom> = self
            .machines
            .iter()
            .zip(agent_ids)
            .map(|(machine, agent)| AgentRoom {
                agent: agent.clone(),
                free: machine.capacity.saturating_sub(&machine.allocated),
                capacity: machine.capacity,
            })
            .collect();
        let decision = following.follow(now_s, now_ms, &tagged, &agents, candidates)?;
        self.stats.reservation_checks += 1;
        // The follower kills only where a reserved task then fits, and the guarantee tier
        // offers that room to the reservation's job first; still, at most one round of kills
        // per instant, so that a cycle of kills and relaunches at one instant cannot go on
        // for ever.
        if self.killed_at.is_none_or(|at| at < self.now_s) {
            for key in &decision.preempt {
                let slot = key.task_id.as_str().parse::<usize>().map_err(|_| {
                    SimError::Internal(format!("the follower named an unknown task {key:?}"))
                })?;
                if self.tasks.get(slot).and_then(Option::as_ref).is_some() {
                    self.preempt(slot)?;
                    self.killed_at = Some(self.now_s);
                }
            }
        }
        let mut owed = Vec::new();
        let mut expected = Vec::new();
        for (job, &j) in tagged.iter().zip(&tagged_jobs) {
            let Some(share) = decision.shares.iter().find(|s| s.id == job.reservation) else {
                continue;
            };
            if share.offer_first.is_zero() {
                continue;
            }
            owed.push((self.framework_ids[j].clone(), share.offer_first));
            let machines = self.machines_holding_runnable(j);
            if !machines.is_empty() {
                expected.push(OwedJob {
                    reservation: job.reservation,
                    job: j,
                    machines,
                });
            }
        }
        self.allocator.set_guarantees(&owed);
        Ok(expected)
    }

    /// The machines where some runnable task of job `j` fits what they have free now.
    fn machines_holding_runnable(&self, j: usize) -> Vec<usize> {
        let Some(fw) = self.frameworks[j].as_ref() else {
            return Vec::new();
        };
        (0..self.machines.len())
            .filter(|&m| {
                let machine = &self.machines[m];
                let free = machine.capacity.saturating_sub(&machine.allocated);
                fw.state
                    .runnable_stages()
                    .any(|stage| fits(&fw.job.stages[stage].demand, &free))
            })
            .collect()
    }

    /// The simulation checker's invariant for a followed plan: every reserved job owed
    /// resources, with a runnable task that fits some machine, is offered something by the
    /// cycle, unless each such machine went to reserved jobs owed resources too (the
    /// guarantee tier serves them in order). Decline filters may refuse it an agent
    /// legitimately, so the check runs only without them.
    fn check_guarantees_offered(
        &mut self,
        expected: &[OwedJob],
        offers: &[AllocatorOffer],
    ) -> Result<(), SimError> {
        if self.config.decline_filter_s > 0.0 {
            return Ok(());
        }
        let owed = |framework: &FrameworkId| {
            expected
                .iter()
                .any(|o| &self.framework_ids[o.job] == framework)
        };
        for owed_job in expected {
            let (reservation, j) = (owed_job.reservation, owed_job.job);
            let id = &self.framework_ids[j];
            let taken_by_owed = owed_job.machines.iter().all(|&m| {
                offers
                    .iter()
                    .any(|o| o.agent == self.agent_ids[m] && owed(&o.framework))
            });
            if !offers.iter().any(|o| &o.framework == id) && !taken_by_owed {
                return Err(SimError::ReservationBroken {
                    now_s: self.now_s,
                    reservation: reservation.0,
                    what: format!(
                        "job `{}` is owed resources and has a runnable task that fits a machine, but the cycle offered it nothing",
                        self.jobs[j].name
                    ),
                });
            }
            self.stats.reservation_checks += 1;
        }
        Ok(())
    }

    /// While a reserved job runs, a cycle at every follower tick: the guarantees change at the
    /// plan's quantum starts and a shortfall's grace period runs out between events.
    fn queue_follow_tick(&mut self) {
        let Some(following) = &self.following else {
            return;
        };
        if self.follow_tick_at.is_some_and(|at| at > self.now_s)
            || !self
                .live
                .iter()
                .any(|&j| following.reservation_of(j).is_some())
        {
            return;
        }
        let at = following.next_tick_s(self.now_s);
        self.push(at, EventKind::AllocationTick);
        self.follow_tick_at = Some(at);
    }

    /// Kills the task in `slot` for a reservation (best effort, or a reserved job's beyond its
    /// own stage's allocation): it goes back to pending and its work so far is lost.
    fn preempt(&mut self, slot: usize) -> Result<(), SimError> {
        let Some((task, was_overloaded)) = self.unload(slot)? else {
            return Ok(());
        };
        let now = self.now_s;
        if let Some(index) = task.trace {
            self.trace[index].preempted = true;
        }
        let f = task.framework;
        let started_s = match &mut self.mode {
            Mode::PerJob(_) => {
                let fw = self.frameworks[f].as_mut().ok_or_else(|| {
                    SimError::Internal(format!("preemption for job {f}, which is not running"))
                })?;
                let started_s = fw.state.launched_at(task.task).unwrap_or(now);
                fw.state
                    .try_mark_lost(task.task)
                    .map_err(|e| SimError::Internal(format!("preempting job {f}'s task: {e}")))?;
                started_s
            }
            Mode::Session(framework) => {
                let started_s = framework
                    .job(f)
                    .and_then(|entry| entry.state.launched_at(task.task))
                    .unwrap_or(now);
                let key = framework.key_of(f).ok_or_else(|| {
                    SimError::Internal(format!("preemption for job {f}, which is not running"))
                })?;
                framework
                    .session
                    .task_lost(key, task.task)
                    .map_err(|e| SimError::Internal(format!("preempting job {f}'s task: {e}")))?;
                started_s
            }
        };
        self.stats.preemptions += 1;
        self.stats.preempted_work_s += now - started_s;
        if was_overloaded {
            self.rerate(task.machine, 0);
        }
        self.mark_dirty(f);
        Ok(())
    }

    /// Takes the task in `slot` off its machine (it finished or was killed): frees its slot,
    /// its machine's charge and the usage records, and releases it in the allocator. Returns
    /// it, with whether its machine was overbooked before, or `None` for an empty slot.
    fn unload(&mut self, slot: usize) -> Result<Option<(RunningTask, bool)>, SimError> {
        let Some(task) = self.tasks.get_mut(slot).and_then(Option::take) else {
            return Ok(None);
        };
        self.free_slots.push(slot);
        let m = task.machine;
        let machine = &mut self.machines[m];
        let was_overloaded = machine.overloaded();
        let old_used = machine.used();
        if let Some(pos) = machine.running.iter().position(|&s| s == slot) {
            machine.running.swap_remove(pos);
        }
        machine.allocated = if machine.running.is_empty() {
            // Drop the rounding residue of many additions and subtractions.
            ResourceVec::ZERO
        } else {
            machine.allocated.saturating_sub(&task.demand)
        };
        let new_used = machine.used();
        self.recorder.used_changed(&old_used, &new_used);
        if let Some(index) = task.trace {
            self.trace[index].finish_s = self.now_s;
        }
        let f = task.framework;
        let (group, id) = match &self.mode {
            Mode::PerJob(_) => {
                let fw = self.frameworks[f].as_ref().ok_or_else(|| {
                    SimError::Internal(format!("task of job {f}, which is not running"))
                })?;
                (fw.group, &fw.id)
            }
            Mode::Session(framework) => (self.job_groups[f], &framework.id),
        };
        self.recorder.release(group, &task.demand);
        self.allocator
            .release(&self.agent_ids[m], id, task.demand)?;
        Ok(Some((task, was_overloaded)))
    }

    /// The job's last task finished: its framework unregisters (in session mode, the job left
    /// the session, whose framework stays).
    fn finish_job(&mut self, f: usize) -> Result<(), SimError> {
        let fw = match self.mode {
            Mode::PerJob(_) => match self.frameworks[f].take() {
                Some(fw) => Some(fw),
                None => return Ok(()),
            },
            Mode::Session(_) if self.live_position[f] == usize::MAX => return Ok(()),
            Mode::Session(_) => None,
        };
        let position = std::mem::replace(&mut self.live_position[f], usize::MAX);
        self.live.swap_remove(position);
        if let Some(&moved) = self.live.get(position) {
            self.live_position[moved] = position;
        }
        let group = match fw {
            Some(fw) => {
                self.allocator.remove_framework(&fw.id)?;
                fw.group
            }
            None => {
                self.mark_dirty(f);
                self.job_groups[f]
            }
        };
        self.recorder.job_finished(group);
        self.finish_s[f] = self.now_s;
        self.finished += 1;
        if let Some(progress) = self.progress {
            progress(&Progress::Simulating {
                policy: self.policy_name.clone(),
                jobs_done: self.finished,
                jobs_total: self.jobs.len(),
                now_s: self.now_s,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_ids_lead_back_to_their_index_and_nothing_else() {
        let ids: Vec<AgentId> = (0..3)
            .map(|m| AgentId::from(format!("{AGENT_PREFIX}{m:05}")))
            .collect();
        let position = |id: &str| numbered_position(&ids, AgentId::as_str, AGENT_PREFIX, id);
        assert_eq!(position("agent-00002"), Some(2));
        assert_eq!(position("agent-00000"), Some(0));
        // The number must be spelled as the engine spelled it, and within the list.
        assert_eq!(position("agent-2"), None);
        assert_eq!(position("agent-00003"), None);
        assert_eq!(position("job-00001"), None);
        assert_eq!(position("agent-x"), None);
    }

    #[test]
    fn a_session_run_refuses_reservation_queues() {
        use fullerene_sdk::session::SessionPolicyKind;
        use fullerene_sdk::testkit::{job, res, stage};

        use crate::scheduling::SessionScheduling;
        use crate::workload::prepare_jobs;

        let file_jobs = vec![job(
            "j",
            "default",
            Some(0.0),
            vec![stage(0, &[], &[1.0], res("cpus=1"))],
        )];
        let config = SimConfig::default();
        let jobs = prepare_jobs(&file_jobs, &config).unwrap();
        let queues = || QueueSetup {
            policy: InterJobPolicy::Drf,
            weights: Vec::new(),
            following: None,
        };
        let session: Scheduling = SessionScheduling::heuristic(SessionPolicyKind::Fifo).into();
        let refused = Engine::with_queues(
            &config,
            &session,
            &file_jobs,
            &jobs,
            &[],
            None,
            Some(queues()),
        );
        match refused {
            Err(e @ SimError::SessionWithQueues { .. }) => {
                assert!(e.to_string().contains("session-fifo"), "{e}");
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a session run took reservation queues"),
        }
        // The same queues with a per-job policy are fine, and a session without them too.
        let per_job = Scheduling::PerJob(PolicyKind::CriticalPath);
        assert!(Engine::with_queues(
            &config,
            &per_job,
            &file_jobs,
            &jobs,
            &[],
            None,
            Some(queues())
        )
        .is_ok());
        assert!(Engine::with_queues(&config, &session, &file_jobs, &jobs, &[], None, None).is_ok());
    }
}
