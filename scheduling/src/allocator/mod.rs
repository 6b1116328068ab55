//! The allocator: which framework is offered which agent's free resources (DESIGN.md, "a
//! task's life", step 3), as a sans-IO core. Time is passed in as seconds (`now_s`); nothing
//! here reads a clock, opens a socket, spawns a thread or touches a disk.
//!
//! # The two levels
//!
//! Graphene's online component (tech report §5, Fig. 8) ranks every pending task of every job
//! for a machine. In a two-level design it is split: the allocator ranks *frameworks* for an
//! agent from their [`DemandSummary`] (pending task shapes with counts and best priScore, plus
//! remaining work), and the framework, offered the agent, ranks its own tasks and answers with a
//! bundle (the framework SDK's `policy` module). The first box of Fig. 8 is thus computed here per shape
//! rather than per task, the second (the κ·C gate) and third (the deficit update) here as well.
//!
//! # State split
//!
//! What must survive a leader change lives in [`AllocationState`] (agents, frameworks, groups,
//! [`DeficitCounters`](crate::fairness::DeficitCounters)), changed only through its `apply_*`
//! and registration methods. Everything else here is soft state a new leader rebuilds: shard
//! assignment (a hash of the agent id), demand summaries (frameworks re-send them), decline
//! filters, suppression, and the resources currently out on offers. An [`Allocator`] learns a
//! recovered state on its first [`Allocator::sync`]; [`StandaloneAllocator::from_state`] pairs
//! one with a state of its own.
//!
//! # Task at a time across frameworks
//!
//! Graphene's Fig. 8 fills a machine task at a time from all jobs' tasks. By default
//! ([`AgentMatching::TaskAtATime`], module `matching`) a cycle does the same over the
//! frameworks' demand summaries: it picks the best (framework, shape) for what is left of the
//! agent, charges one task of it, and repeats; each framework with picks is offered the sum of
//! its picks, so one agent goes to several frameworks in one round, and the κ·C gate (and
//! DRF's order, for the baseline) is checked before every task. With
//! [`AgentMatching::WholeAgent`] a cycle offers an agent's free resources to at most one
//! framework, as Mesos does: the whole of them, or under the deficit-counter policy possibly
//! less (see "bounded unfairness" below); what is not offered waits for the next cycle.
//! Offered resources are not free: a later cycle
//! offers only what is neither used nor out on an offer, and never offers an agent again to a
//! framework that still holds an offer on it. An [`OfferDecision`] stays out until
//! [`Allocator::offer_answered`] (the accepted part is charged, the rest declined with a filter
//! or yielded and redistributed at once) or [`Allocator::rescind_offer`].
//!
//! # Bounded unfairness with bundles
//!
//! Fig. 8 picks one task at a time and checks the κ·C gate before each: while the most deprived
//! group's deficit is at least κ·C only its tasks are candidates, and a machine none of its tasks
//! fits gets nothing. We keep that strict rule (a group of large tasks would otherwise starve
//! behind small ones that take every hole as it opens), with two exceptions that keep the
//! cluster live: a group none of whose pending shapes fits *any* agent's capacity does not stop
//! the cluster, and a group all of whose frameworks refuse an agent (a decline filter, an offer
//! of it already held, or a yield of a leftover of it in this cycle) does not hold that agent
//! idle.
//!
//! One decision here hands a framework a whole agent, on which it may launch many tasks. So that
//! the bound still holds at task granularity, the allocator (policy
//! [`InterJobPolicy::DeficitCounters`]) projects the counters forward by the tasks each
//! outstanding offer is expected to launch (its framework's pending shapes packed greedily into
//! the offer in the summary's best-first order), and caps an offer when its expected tasks
//! would push another group with pending work past κ·C: the offer then carries exactly the
//! expected tasks up to and including the one that crosses, like Fig. 8 stopping at the
//! crossing task. What the cap leaves of the agent waits for the next cycle (which may run at
//! the same instant). A framework that launches other tasks than its summary announced can
//! overshoot by the difference; the counters record what was really launched.
//!
//! # Reservation guarantees
//!
//! Above the policy sits one more tier (module `guarantees`, Rayon §5.2's plan follower in
//! two-level form): [`Allocator::set_guarantees`] names frameworks that a reservation owes
//! resources, and in every cycle, on every agent, they are picked first (in the order given,
//! ahead of the policy and of the κ·C gate, under both matching rules and with any number of
//! shards) while they are still owed something and a pending shape of theirs fits. What they do
//! not take goes to everyone under the policy, which is how idle reserved capacity is lent.
//! Their picks are charged to the deficit counters like any other.
//!
//! # Shards
//!
//! Agents are assigned to [`AllocatorConfig::shards`] shards by a stable hash of their id
//! (FNV-1a), so a new leader derives the same assignment from the agent set alone, whatever the
//! order agents re-register in. Within a shard agents are visited in slot order, starting one
//! agent further each cycle, so no agent is always first.
//!
//! Shards are planned concurrently, in the shared-state style of Omega (Schwarzkopf et al.,
//! EuroSys'13, §3.4), in three steps (module `cycle`):
//!
//! 1. [`Allocator::snapshot_cycle`] takes an owned [`CycleSnapshot`] of everything the shards
//!    read: the frameworks' projected pending work, the groups' deficits, in-flight charges and
//!    offered resources (so the κ·C gate and DRF's order), η, the runnable groups, totals, and
//!    each shard's agents in visiting order with their unoffered free resources and exclusions.
//! 2. [`CycleSnapshot::plan_shard`] plans one shard from the snapshot alone (`&self`, no shared
//!    mutable state): each of its agents filled task at a time exactly as the sequential loop
//!    does, against a private copy of the projection that only its own picks move. The shell
//!    runs the plans where it likes (on threads, a pool, or one after the other); the
//!    allocator spawns nothing. [`Allocator::allocate_all_with`] takes the runner as a closure,
//!    [`Allocator::allocate_all`] plans every shard on the caller's thread (with one shard it
//!    runs the loop in place: the same offers, without copying the projection and replaying
//!    the picks, which costs a sequential cycle about a third more under DRF).
//! 3. [`Allocator::commit_cycle`] replays the plans in a fixed order (shard index, then each
//!    shard's visiting order) against the live state and projection, pick by pick, dropping the
//!    picks that conflict: a pending task another shard (or a leftover offer) took first, a
//!    pick the κ·C gate no longer admits (the same per-task rule as the sequential loop, so no
//!    group's deficit passes κ·C by more than one task's factor), an agent whose free resources
//!    changed since the snapshot (or that left, or whose slot another agent took), a framework
//!    that left (or whose slot another took), was suppressed or refuses the agent now. Offers
//!    are the same whatever the thread timing: planning is a pure function of the snapshot,
//!    and the commit is sequential in a fixed order.
//!
//! Departures from Fig. 8's sequential loop, for shards > 1 (with one shard a planned and
//! committed cycle makes exactly the sequential loop's offers; the tests compare them):
//!
//! - Every shard plans from the same snapshot, so without more each would place the same best
//!   tasks on its own agents (demand below supply is the common case) and N shards would do N
//!   times one's work. The snapshot therefore gives each shard a part of each framework's
//!   projected tasks, in proportion to the shards' free resources (among the shards that could
//!   hold one; the remainder rotates with the cycle). A shard sees the other shards' picks
//!   neither in the pending counts nor in the deficits and shares: its packing and DRF order
//!   are those of its agents and its part of the work.
//! - The task charged for a pick is fixed at commit: the framework's first pending shape in
//!   summary order that fits what is left of the agent, from the live counts (the framework
//!   launches best-first, and the κ·C projection must be what it launches). Where shards took
//!   a framework's first shapes concurrently, a later pick becomes a larger task and what it
//!   leaves may no longer hold the agent's next picks: that is most of the conflicts.
//! - What a conflict costs: the dropped pick's room stays free and its task pending until the
//!   next cycle (the master runs one at most 25 ms after resources free up). An agent is not
//!   matched again at commit, except when the κ·C gate is closed: then what its dropped picks
//!   leave is matched at once against the live projection, as the sequential loop would give it
//!   to the most deprived group, so that a group past the bound is not left waiting a cycle
//!   (the property test of the bound runs with up to 8 shards). `shard_conflicts` (an example
//!   of this crate) prints the conflict rates on the benchmark's cluster.

mod cycle;
mod fair_share;
mod guarantees;
mod idle;
mod leftover;
mod matching;
mod memo;
mod policies;
mod score_tree;
mod standalone;
pub mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use cycle::{CycleOutcome, CycleSnapshot, CycleStats, ShardPlan};
pub use fair_share::progressive_filling;
pub use standalone::StandaloneAllocator;
pub use state::{
    AgentIdx, AgentRecord, AllocationState, FrameworkIdx, FrameworkRecord, RunningTask, StateError,
};

pub use crate::offer::{LeftoverAction, OfferKind};

use crate::demand::{DemandSummary, MAX_PROGRESS_ATOMS};
use crate::fairness::{FairnessFactor, GroupIdx};
use crate::fit::{fits, fits_offer, Overbooking, DEFAULT_OVERBOOK_ALLOWANCE};
use crate::ids::{AgentId, FrameworkId};
use crate::resources::{ResourceError, ResourceKind, ResourceVec, EPSILON, NUM_RESOURCES};
use crate::scoring::{EtaEstimator, DEFAULT_ETA_MULTIPLIER};

/// Default κ of the κ·C bound. The papers leave κ to the operator; a tenth of the cluster leaves
/// room for packing and short-job preference to matter (Graphene §7 credits "some short-term
/// unfairness" for its gains) while no group falls more than a tenth of the cluster below its
/// share.
pub const DEFAULT_KAPPA: f64 = 0.1;

/// Default decline filter: Mesos' default `refuse_seconds`.
pub const DEFAULT_DECLINE_FILTER_S: f64 = 5.0;

/// Default maximum capacity of a capacity-scheduler queue, as a fraction of the cluster: YARN's
/// `maximum-capacity` default (unset, i.e. 100%), so queues are fully elastic.
pub const DEFAULT_MAX_QUEUE_CAPACITY: f64 = 1.0;

/// Most pending shapes a [`DemandSummary`] may list ("at most a few dozen entries").
pub const MAX_PENDING_SHAPES: usize = 64;

/// Tetris' weight between alignment and remaining work: ε is this multiple of the mean
/// alignment over the mean remaining work, so that on average both terms weigh alike. Tetris
/// (Grandl et al., SIGCOMM'14, §3) combines "alignment + ε·(−remaining work)" with ε chosen to
/// make the two comparable; 1 is that choice without further tuning, and keeps Tetris distinct
/// from Graphene's η, which weighs remaining work at a fifth (tech report §7.4).
pub const TETRIS_EPSILON_MULTIPLIER: f64 = 1.0;

/// The inter-job policy: how the allocator ranks frameworks for an agent. Each is a full
/// implementation of the scheduler it is named after, not a setting of another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InterJobPolicy {
    /// Graphene (§5; tech report Fig. 8): while the most deprived group with pending work that
    /// fits has a deficit ≥ κ·C, only its frameworks are candidates; otherwise the framework
    /// whose pending work scores best on the agent, `max over shapes of priScore · pScore −
    /// η · srpt` (fitting shapes before overbooked ones, lexicographically). Offers are capped
    /// so that the bound holds per task (module documentation).
    DeficitCounters {
        /// How a task counts in the counters.
        factor: FairnessFactor,
        /// κ < 1: the unfairness bound as a fraction of the cluster capacity.
        kappa: f64,
    },
    /// Hierarchical DRF as Mesos' allocator does it: the group with the least weighted dominant
    /// share of the cluster (held plus offered), then within it the framework with the least
    /// dominant share, that has pending work that fits.
    Drf,
    /// YARN's capacity scheduler (what Tez on YARN runs on): queues are the groups, each
    /// guaranteed its weight's fraction of the cluster; the queue with the lowest used /
    /// guaranteed ratio that has demand is served, elastically up to `max_capacity`; within a
    /// queue, frameworks in submission (registration) order.
    CapacityScheduler {
        /// Most a queue may hold (plus have on offer), as a fraction of the cluster
        /// ([`DEFAULT_MAX_QUEUE_CAPACITY`]).
        max_capacity: f64,
    },
    /// The earliest-registered framework with pending work that fits.
    Fifo,
    /// The framework with the least remaining work that has pending work that fits.
    Sjf,
    /// Tetris: the highest packing alignment of a fitting pending shape (dot product of the
    /// agent's free resources and the demand, both normalised by the agent's capacity) minus
    /// ε · remaining work (shortest remaining time first), with ε per
    /// [`TETRIS_EPSILON_MULTIPLIER`]. No DAG awareness and no fairness.
    Tetris,
}

impl InterJobPolicy {
    /// Graphene's policy with DRF counting and the default κ.
    pub const fn graphene() -> InterJobPolicy {
        InterJobPolicy::DeficitCounters {
            factor: FairnessFactor::Drf,
            kappa: DEFAULT_KAPPA,
        }
    }

    /// How the deficit counters count tasks under this policy. Every policy keeps the counters
    /// (so that unfairness can be measured and compared); only
    /// [`InterJobPolicy::DeficitCounters`] acts on them, and the others count DRF-style.
    pub const fn fairness_factor(&self) -> FairnessFactor {
        match self {
            InterJobPolicy::DeficitCounters { factor, .. } => *factor,
            _ => FairnessFactor::Drf,
        }
    }

    /// The short name (`deficit`, `drf`, `capacity`, `fifo`, `sjf`, `tetris`).
    pub const fn name(&self) -> &'static str {
        match self {
            InterJobPolicy::DeficitCounters { .. } => "deficit",
            InterJobPolicy::Drf => "drf",
            InterJobPolicy::CapacityScheduler { .. } => "capacity",
            InterJobPolicy::Fifo => "fifo",
            InterJobPolicy::Sjf => "sjf",
            InterJobPolicy::Tetris => "tetris",
        }
    }
}

/// The allocator's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// The inter-job policy.
    pub policy: InterJobPolicy,
    /// Number of agent shards (≥ 1), each with its own allocation cycle.
    pub shards: usize,
    /// How long a declined agent is not offered again to the framework that declined it.
    pub decline_filter_s: f64,
    /// How far launches may charge fungible resources (disk, network bandwidth) beyond an
    /// agent's capacity, as a fraction of it (Graphene §5's overbooking).
    pub overbook_allowance: f64,
    /// The slot slot fairness counts the cluster capacity in ([`FairnessFactor::Slot`]);
    /// default one core.
    pub slot_size: ResourceVec,
    /// How an agent's free resources are divided among frameworks in one cycle.
    pub matching: AgentMatching,
    /// Over which tasks η of Graphene's perfScore is averaged.
    pub eta: EtaRule,
    /// How a framework's share `A_k` (Carbyne's input for `T_k`) is computed.
    pub fair_share: FairShareRule,
    /// How yielded leftovers are redistributed.
    pub leftover: LeftoverRule,
}

/// How one agent's free resources are divided among frameworks in one cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgentMatching {
    /// Graphene's Fig. 8, task at a time across all frameworks: the policy picks the best
    /// (framework, pending shape) for the agent's remaining free resources, charges one task of
    /// it (to the projected deficits and shares, so the κ·C gate and DRF's order are checked on
    /// every pick), and repeats until no pending task fits; each framework with picks is then
    /// offered exactly the sum of its picks. One machine is thus shared by the best tasks of
    /// several jobs in one round, under every policy (DRF's baseline included: DRF's
    /// progressive filling is task at a time too). The two-level departure: the allocator picks
    /// among the frameworks' *shapes* (their demand summaries are the scored candidate lists),
    /// and each framework then chooses which of its tasks of those shapes to launch.
    #[default]
    TaskAtATime,
    /// Mesos' rule: the whole of an agent's free resources (or, under the deficit counters, the
    /// part up to the task that would cross κ·C) to one framework per cycle. Kept to measure
    /// what task-at-a-time matching gains.
    WholeAgent,
}

/// Over which tasks η of Graphene's perfScore (`priScore · pScore − η · srpt`) is averaged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EtaRule {
    /// Graphene §5: η = m · avg(pScore) / avg(srpt) over all pending tasks of all jobs, taken
    /// afresh at the start of every cycle. pScore is taken on an idle agent of each capacity
    /// class (weighted by its agents): the score a task has before the cycle packs anything.
    #[default]
    AllPending,
    /// Running averages over the candidates each decision chose (this allocator's rule before
    /// it followed the paper), kept to measure the difference.
    ChosenCandidates,
}

/// How a framework's share `A_k` of the cluster, Carbyne's input for `T_k` (§3.3.1, Pseudocode
/// 1 line 10), is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FairShareRule {
    /// Carbyne §3 (Pseudocode 1, `INTERJOBSCHEDULER`): DRF by progressive filling over the
    /// frameworks with demand, each capped at its demand (what it holds plus every pending task
    /// of its summary), weighted by its group's weight over the group's frameworks with demand
    /// (hierarchical DRF's split). What a capped framework does not need is shared by the
    /// others, so a small job's `A_k` is its demand and a large job's is more than an equal
    /// split.
    #[default]
    ProgressiveFilling,
    /// The group's share split evenly among its registered frameworks, whatever they need
    /// (this allocator's rule before it followed the paper).
    EqualSplit,
}

/// How yielded leftovers are redistributed (Carbyne §3.3.4, `LEFTOVERSCHEDULER`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeftoverRule {
    /// Both goals of §3.3.4: frameworks in shortest-remaining-time order each take, task at a
    /// time, their pending tasks that pack best into what is left (Tetris' alignment), then
    /// the next framework takes what is still left, until no pending task fits; each framework
    /// is offered its part.
    #[default]
    SrtfThenPacking,
    /// The whole leftover to the one framework with the least remaining work (this allocator's
    /// rule before it followed the paper).
    SrtfOnly,
}

impl Default for AllocatorConfig {
    fn default() -> AllocatorConfig {
        AllocatorConfig {
            policy: InterJobPolicy::graphene(),
            shards: 1,
            decline_filter_s: DEFAULT_DECLINE_FILTER_S,
            overbook_allowance: DEFAULT_OVERBOOK_ALLOWANCE,
            slot_size: ResourceVec::from_pairs(&[(ResourceKind::Cpus, 1.0)]),
            matching: AgentMatching::default(),
            eta: EtaRule::default(),
            fair_share: FairShareRule::default(),
            leftover: LeftoverRule::default(),
        }
    }
}

impl AllocatorConfig {
    /// Checks the ranges: κ in [0, 1), at least one shard, finite non-negative durations and
    /// allowances, a capacity-scheduler maximum in (0, 1], a valid slot.
    pub fn validate(&self) -> Result<(), AllocatorError> {
        let bad = |what: &str| Err(AllocatorError::InvalidConfig(what.to_string()));
        match self.policy {
            InterJobPolicy::DeficitCounters { kappa, .. }
                if !(kappa.is_finite() && (0.0..1.0).contains(&kappa)) =>
            {
                return bad(&format!("kappa must be in [0, 1), got {kappa}"));
            }
            InterJobPolicy::CapacityScheduler { max_capacity }
                if !(max_capacity.is_finite() && max_capacity > 0.0 && max_capacity <= 1.0) =>
            {
                return bad(&format!(
                    "max_capacity must be in (0, 1], got {max_capacity}"
                ));
            }
            _ => {}
        }
        if self.shards == 0 {
            return bad("shards must be at least 1");
        }
        if !(self.decline_filter_s.is_finite() && self.decline_filter_s >= 0.0) {
            return bad("decline_filter_s must be finite and >= 0");
        }
        if !Overbooking(self.overbook_allowance).is_valid() {
            return bad("overbook_allowance must be finite and >= 0");
        }
        if !self.slot_size.is_valid() || self.slot_size.is_zero() {
            return bad("slot_size must be valid and non-zero");
        }
        Ok(())
    }
}

/// The allocator's decision: offer `resources` of `agent` to `framework`.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferDecision {
    /// The agent whose resources are offered.
    pub agent: AgentId,
    /// The framework they are offered to.
    pub framework: FrameworkId,
    /// The resources offered (free: neither used nor out on another offer).
    pub resources: ResourceVec,
    /// From the regular cycle or from yielded leftovers (Carbyne §3.3.4).
    pub kind: OfferKind,
    /// Whether the reservation-guarantee tier picked (some of) it: it comes out of what a
    /// reservation is owed (Rayon §5.2's guaranteed capacity), not out of the policy's share.
    pub guaranteed: bool,
}

/// Errors of the allocator's API.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AllocatorError {
    /// The configuration is out of range.
    #[error("invalid allocator configuration: {0}")]
    InvalidConfig(String),
    /// An error of the replicated state (unknown or duplicate id, invalid amounts, ...).
    #[error(transparent)]
    State(#[from] StateError),
    /// A demand summary whose resources do not parse.
    #[error("demand summary of `{framework}`: {source}")]
    InvalidDemand {
        /// The framework.
        framework: FrameworkId,
        /// What was wrong.
        source: ResourceError,
    },
    /// A demand summary with a NaN, infinite or negative score or remaining work, or too many
    /// shapes.
    #[error("demand summary of `{framework}`: {reason}")]
    MalformedDemand {
        /// The framework.
        framework: FrameworkId,
        /// What was wrong.
        reason: String,
    },
    /// No offer of this agent is out to this framework.
    #[error("no offer of agent `{agent}` is out to framework `{framework}`")]
    NoSuchOffer {
        /// The agent.
        agent: AgentId,
        /// The framework.
        framework: FrameworkId,
    },
    /// The launched tasks need more than the offer holds (beyond the overbooking allowance for
    /// fungible resources).
    #[error("tasks of {launched} on agent `{agent}` exceed the offer of {offered}")]
    ExceedsOffer {
        /// The agent.
        agent: AgentId,
        /// The tasks' summed demand.
        launched: ResourceVec,
        /// The offer.
        offered: ResourceVec,
    },
    /// A weight that is not finite and non-negative.
    #[error("invalid weight {weight} for group `{group}`")]
    InvalidWeight {
        /// The group.
        group: String,
        /// The weight.
        weight: f64,
    },
}

/// One pending shape of a framework, dense.
#[derive(Clone, Debug, PartialEq)]
struct Shape {
    demand: ResourceVec,
    count: u32,
    pri_score: f64,
}

/// A framework's demand summary, converted once at the boundary.
#[derive(Clone, Debug, Default, PartialEq)]
struct Demand {
    shapes: Vec<Shape>,
    remaining_work: f64,
    /// Graphene's `srpt_j` ([`DemandSummary::srpt`]).
    srpt: f64,
}

impl Demand {
    fn pending(&self) -> u64 {
        self.shapes.iter().map(|s| s.count as u64).sum()
    }
}

/// An offer that is out.
#[derive(Clone, Debug, PartialEq)]
struct OutstandingOffer {
    framework: FrameworkIdx,
    group: GroupIdx,
    resources: ResourceVec,
    kind: OfferKind,
    /// Whether it comes (in part) out of a reservation's guarantee.
    guaranteed: bool,
    /// Factor sum of the tasks it is expected to launch (the deficit projection).
    expected_charge: f64,
}

/// Soft state per agent slot.
#[derive(Clone, Debug, Default, PartialEq)]
struct AgentSoft {
    /// The agent this slot was placed for, with the capacity it had then.
    placed: Option<(AgentId, ResourceVec)>,
    /// Distinguishes the agents a slot held over time: a plan names an agent by slot and
    /// generation, so that a commit never gives one agent's planned picks to another that
    /// took its slot in between.
    generation: u64,
    shard: usize,
    offered: ResourceVec,
    /// Resources of accepted offers whose launch is not yet charged to the state (the master
    /// charges when the `LaunchTasks` command is applied): not free, not offered again.
    launching: ResourceVec,
    /// Not offered at all (an unreachable agent takes no new launches).
    paused: bool,
    offers: Vec<OutstandingOffer>,
    /// Decline filters: framework refuses this agent until the time.
    filters: Vec<(FrameworkIdx, f64)>,
    /// Frameworks that yielded a leftover offer of this agent since its shard's last cycle
    /// began (a yield of a regular offer does not count: see [`Allocator::offer_answered`]).
    yielders: Vec<FrameworkIdx>,
    /// A regular part was yielded while other parts of the agent were still out: the
    /// leftover is divided when the last of them is answered ([`LeftoverRule::SrtfThenPacking`]).
    leftover_pooled: bool,
}

/// Soft state per framework slot.
#[derive(Clone, Debug, Default, PartialEq)]
struct FrameworkSoft {
    /// The framework this slot was set up for, with its group.
    placed: Option<(FrameworkId, GroupIdx)>,
    demand: Demand,
    suppressed: bool,
    /// Resources out on offers to it.
    offered: ResourceVec,
    /// Pending counts projected through the current cycle's offers.
    cycle_counts: Vec<u32>,
    /// The cycle `cycle_counts` belongs to.
    cycle_stamp: u64,
    /// Total of `cycle_counts`.
    cycle_pending: u64,
    /// Component-wise minimum of the shapes with projected work: a framework whose minimum
    /// does not fit an agent has nothing that fits it.
    cycle_min: ResourceVec,
    /// Component-wise maximum of `priScore · demand` over the shapes with projected work: its
    /// packing against an agent bounds every shape's `priScore · pScore` there.
    cycle_envelope: ResourceVec,
    /// The same without the priScores (Tetris' bound).
    cycle_envelope_plain: ResourceVec,
    /// The largest priScore of the shapes with projected work: with `cycle_envelope_plain`,
    /// a bound that holds bit for bit (policies' `exact_bound`).
    cycle_pri_max: f64,
    /// What it is still owed this cycle under a reservation guarantee (module `guarantees`);
    /// zero for frameworks without one.
    cycle_owed: ResourceVec,
    /// Whether it is counted in its group's `demanding` (pending work, not suppressed).
    counted: bool,
}

impl FrameworkSoft {
    /// Recomputes the cycle's minimum shape and envelopes from the projected counts.
    fn refresh_envelopes(&mut self) {
        let mut min = ResourceVec([f64::INFINITY; NUM_RESOURCES]);
        let mut envelope = ResourceVec::ZERO;
        let mut plain = ResourceVec::ZERO;
        let mut pri_max: f64 = 0.0;
        for (shape, &count) in self.demand.shapes.iter().zip(self.cycle_counts.iter()) {
            if count == 0 {
                continue;
            }
            min = min.min(&shape.demand);
            envelope = envelope.max(&shape.demand.scale(shape.pri_score));
            plain = plain.max(&shape.demand);
            pri_max = pri_max.max(shape.pri_score);
        }
        self.cycle_min = min;
        self.cycle_envelope = envelope;
        self.cycle_envelope_plain = plain;
        self.cycle_pri_max = pri_max;
    }
}

/// What the policy observed for one of the estimators while planning an agent: a chosen
/// candidate's packing score and its job's remaining work. Planners record them and the commit
/// feeds them to the estimators in the sequential order, so that η (under
/// [`EtaRule::ChosenCandidates`]) and Tetris' ε evolve as if one thread had made every choice.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Observation {
    /// For η: the packing score and the job's srpt.
    Eta { p_score: f64, work: f64 },
    /// For Tetris' ε: the alignment and the job's remaining work.
    Epsilon { p_score: f64, work: f64 },
}

/// Soft state per group.
#[derive(Clone, Debug, Default, PartialEq)]
struct GroupSoft {
    /// Frameworks of the group with pending work and not suppressed.
    demanding: u32,
    /// Expected charge of its outstanding offers.
    inflight: f64,
    /// Resources out on offers to its frameworks.
    offered: ResourceVec,
}

/// The allocator's soft state over a replicated [`AllocationState`] it reads but never holds:
/// every method that needs the state takes it as an argument, so the master's leader passes
/// the state machine's own accounting: the allocator keeps no copy of anything replicated, so
/// a new leader allocates from exactly what was committed. [`StandaloneAllocator`] pairs it with a state
/// of its own for the simulator and the tests.
#[derive(Debug)]
pub struct Allocator {
    config: AllocatorConfig,
    /// The state's structure at the last [`Allocator::sync`].
    synced: Option<SyncedStructure>,
    agents: Vec<AgentSoft>,
    frameworks: Vec<FrameworkSoft>,
    groups: Vec<GroupSoft>,
    shards: Vec<Vec<AgentIdx>>,
    /// Per shard, how many cycles it ran (the rotation of its visiting order).
    shard_cycles: Vec<u64>,
    /// Agents found with nothing a pending shape fits, passed over until woken.
    idle: idle::IdleAgents,
    /// The generation the next placed agent gets.
    next_generation: u64,
    /// What the policy observed for the η and ε estimators while planning, applied when the
    /// plan is committed (a planner must not change the allocator's state).
    observations: Vec<Observation>,
    /// Groups in a pick's order with their keys (the κ·C gate's projected deficits, DRF's
    /// weighted dominant shares), reused from pick to pick.
    gate_scratch: Vec<(f64, GroupIdx)>,
    /// The search stack of the bounding trees, reused from pick to pick.
    tree_scratch: Vec<(usize, f64)>,
    /// Per list, its place in a tree search's order of lists (`None`: not searched), reused
    /// from pick to pick.
    tree_places: Vec<Option<policies::GroupOrder>>,
    /// What a tree search found, reused from pick to pick.
    tree_findings: score_tree::Findings,
    /// Every pick scanned from the lists, without replaying picks across agents of the same
    /// state (module `memo`) or searching the bounding trees (module `score_tree`), and every
    /// agent a cycle visits planned (no misfit or agent left without work passed over, module
    /// `idle`): only for the tests that compare those with the plain scan.
    plain_scan: bool,
    /// Picks replayed from a trace rather than scanned, for the tests to see the memo at work.
    #[cfg(test)]
    replayed_picks: u64,
    /// Candidates scored (policies' `evaluate_candidate`), for the tests to see what a pick
    /// costs.
    #[cfg(test)]
    scored_candidates: u64,
    /// Increases with every cycle (per `allocate_shard` / `allocate_all` call).
    cycle: u64,
    inflight_total: f64,
    /// η of Graphene's perfScore (tech report §5 and §7.4), "automatically updated based on
    /// the average srpt and pScore": the averages are taken over the candidates each decision
    /// chooses (those are the pairs the trade-off is about), and η is fixed for the length of a
    /// cycle so that the scan bounds stay valid.
    eta: EtaEstimator,
    /// ε of Tetris, estimated the same way with [`TETRIS_EPSILON_MULTIPLIER`].
    epsilon: EtaEstimator,
    /// Distinct agent capacities (bit patterns) with their agent counts: which task shapes can
    /// run at all.
    capacity_classes: BTreeMap<[u64; NUM_RESOURCES], (ResourceVec, usize)>,
    /// η of the current cycle under [`EtaRule::AllPending`].
    cycle_eta: f64,
    /// η (or Tetris' ε) the current cycle's candidates are ranked with.
    cycle_srpt_weight: f64,
    /// Grows whenever a demand summary or the set of frameworks changes: the progressive-filling
    /// shares are recomputed when it or the cycle moved on.
    demand_epoch: u64,
    /// The progressive-filling shares, per framework slot, with the (cycle, demand epoch) they
    /// were computed at.
    shares: Option<((u64, u64), Vec<ResourceVec>)>,
    /// The reservation guarantees set last ([`Allocator::set_guarantees`]), in priority order.
    guarantees: Vec<guarantees::Guarantee>,
    /// Whether some guaranteed framework is still owed something this cycle (the memo of
    /// picks, which replays one agent's picks on another, is off while one is).
    guarantee_active: bool,
}

/// The shape of the state's structure at a sync.
#[derive(Clone, Copy, Debug, PartialEq)]
struct SyncedStructure {
    version: u64,
    agent_slots: usize,
    agents: usize,
    framework_slots: usize,
    frameworks: usize,
}

impl SyncedStructure {
    fn of(state: &AllocationState) -> SyncedStructure {
        SyncedStructure {
            version: state.structure_version(),
            agent_slots: state.agent_slots(),
            agents: state.agent_count(),
            framework_slots: state.framework_slots(),
            frameworks: state.framework_count(),
        }
    }

    /// Whether every structural change since `self` appended an agent in a new slot: each
    /// change counts one in the version, and only an append adds both a slot and an agent
    /// (a removal, a slot reused, a framework or a group would leave the three apart).
    fn appended_agents(&self, now: &SyncedStructure) -> bool {
        let changes = now.version.wrapping_sub(self.version);
        now.framework_slots == self.framework_slots
            && now.frameworks == self.frameworks
            && now.agent_slots.checked_sub(self.agent_slots) == Some(changes as usize)
            && now.agents.checked_sub(self.agents) == Some(changes as usize)
    }

    /// The same for frameworks.
    fn appended_frameworks(&self, now: &SyncedStructure) -> bool {
        let changes = now.version.wrapping_sub(self.version);
        now.agent_slots == self.agent_slots
            && now.agents == self.agents
            && now.framework_slots.checked_sub(self.framework_slots) == Some(changes as usize)
            && now.frameworks.checked_sub(self.frameworks) == Some(changes as usize)
    }
}

/// Beyond this many distinct machine capacities, "fits some machine" is checked against their
/// component-wise maximum instead of each.
const MAX_CAPACITY_CLASSES: usize = 64;

impl Allocator {
    /// An allocator with no soft state yet: no offers out, no filters, no demand until
    /// frameworks send their summaries. It learns the agents and frameworks from the state it
    /// is given (see [`Allocator::sync`]), so a new leader builds one and goes on.
    pub fn new(config: AllocatorConfig) -> Result<Allocator, AllocatorError> {
        config.validate()?;
        let shards = config.shards;
        Ok(Allocator {
            config,
            synced: None,
            agents: Vec::new(),
            frameworks: Vec::new(),
            groups: Vec::new(),
            shards: vec![Vec::new(); shards],
            shard_cycles: vec![0; shards],
            idle: idle::IdleAgents::default(),
            next_generation: 0,
            observations: Vec::new(),
            gate_scratch: Vec::new(),
            tree_scratch: Vec::new(),
            tree_places: Vec::new(),
            tree_findings: Default::default(),
            plain_scan: false,
            #[cfg(test)]
            replayed_picks: 0,
            #[cfg(test)]
            scored_candidates: 0,
            cycle: 0,
            inflight_total: 0.0,
            eta: EtaEstimator::new(DEFAULT_ETA_MULTIPLIER),
            epsilon: EtaEstimator::new(TETRIS_EPSILON_MULTIPLIER),
            capacity_classes: BTreeMap::new(),
            cycle_eta: 0.0,
            cycle_srpt_weight: 0.0,
            demand_epoch: 0,
            shares: None,
            guarantees: Vec::new(),
            guarantee_active: false,
        })
    }

    /// Checks that `state` counts deficits the way this allocator's policy does.
    pub fn check_state(&self, state: &AllocationState) -> Result<(), AllocatorError> {
        if state.deficits().factor() != self.config.policy.fairness_factor() {
            return Err(AllocatorError::InvalidConfig(format!(
                "the state counts deficits by {} but the policy by {}",
                state.deficits().factor().name(),
                self.config.policy.fairness_factor().name()
            )));
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// Brings the soft state in step with `state`'s agents, frameworks and groups: a new
    /// agent is placed in its shard, a removed one (or one whose capacity changed) loses its
    /// offers, a removed framework its offers, filters and demand. Every public method that
    /// reads the state calls it first, so changes applied to the state between calls (a
    /// committed registration, a lost agent) are never missed. Linear in the slots, except
    /// after registrations alone (agents or frameworks appended in new slots, as when a
    /// cluster starts or its agents re-register with a new leader), where only the new slots
    /// are read.
    pub fn sync(&mut self, state: &AllocationState) {
        let now = SyncedStructure::of(state);
        // Nothing structural changed since the last look (launches and releases need none).
        if self.synced.is_some_and(|then| then.version == now.version) {
            return;
        }
        // A framework removed releases what it held, and a structural change is rare.
        self.idle.wake_all();
        let (agent_range, framework_range) = match self.synced {
            Some(then) if then.appended_agents(&now) => (then.agent_slots..now.agent_slots, 0..0),
            Some(then) if then.appended_frameworks(&now) => {
                (0..0, then.framework_slots..now.framework_slots)
            }
            _ => (
                0..now.agent_slots.max(self.agents.len()),
                0..now.framework_slots.max(self.frameworks.len()),
            ),
        };
        self.synced = Some(now);
        self.demand_epoch += 1;
        let agent_slots = state.agent_slots();
        if self.agents.len() < agent_slots {
            self.agents.resize_with(agent_slots, AgentSoft::default);
        }
        for slot in agent_range {
            let idx = AgentIdx(slot as u32);
            let record = state.agent(idx);
            let unchanged = match (&self.agents[slot].placed, record) {
                (Some((id, total)), Some(r)) => *id == r.id && *total == r.total,
                (None, None) => true,
                _ => false,
            };
            if !unchanged {
                let now = record.map(|r| (r.id.clone(), r.total));
                if self.agents[slot].placed.is_some() {
                    self.unplace_agent(idx);
                }
                if let Some((id, total)) = now {
                    self.place_agent(idx, &id, total);
                }
            }
        }
        let framework_slots = state.framework_slots();
        if self.frameworks.len() < framework_slots {
            self.frameworks
                .resize_with(framework_slots, FrameworkSoft::default);
        }
        let groups = state.deficits().len();
        if self.groups.len() < groups {
            self.groups.resize_with(groups, GroupSoft::default);
        }
        for slot in framework_range {
            let idx = FrameworkIdx(slot as u32);
            let record = state.framework(idx);
            let unchanged = match (&self.frameworks[slot].placed, record) {
                (Some((id, group)), Some(r)) => *id == r.id && *group == r.group,
                (None, None) => true,
                _ => false,
            };
            if !unchanged {
                let now = record.map(|r| (r.id.clone(), r.group));
                if self.frameworks[slot].placed.is_some() {
                    self.forget_framework(idx);
                }
                self.frameworks[slot] = FrameworkSoft {
                    placed: now,
                    ..FrameworkSoft::default()
                };
            }
        }
    }

    /// Replaces a framework's demand summary (converted once to dense vectors). Shapes with a
    /// zero count are dropped.
    pub fn update_demand(
        &mut self,
        state: &AllocationState,
        id: &FrameworkId,
        summary: &DemandSummary,
    ) -> Result<(), AllocatorError> {
        self.sync(state);
        let idx = state.framework_idx(id)?;
        let malformed = |reason: String| AllocatorError::MalformedDemand {
            framework: id.clone(),
            reason,
        };
        if summary.pending.len() > MAX_PENDING_SHAPES {
            return Err(malformed(format!(
                "{} pending shapes, at most {MAX_PENDING_SHAPES} allowed",
                summary.pending.len()
            )));
        }
        for (name, value) in [
            ("remaining_work", summary.remaining_work),
            ("srpt", summary.srpt),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(malformed(format!("{name} {value} must be finite and >= 0")));
            }
        }
        if let Some(progress) = &summary.reservation_progress {
            if progress.atoms > MAX_PROGRESS_ATOMS {
                return Err(malformed(format!(
                    "reservation_progress: {} atoms, at most {MAX_PROGRESS_ATOMS} allowed",
                    progress.atoms
                )));
            }
            let finished = &progress.finished_atoms;
            if let Some(pair) = finished.windows(2).find(|pair| pair[0] >= pair[1]) {
                return Err(malformed(format!(
                    "reservation_progress: finished atoms must be strictly increasing \
                     ({} then {})",
                    pair[0], pair[1]
                )));
            }
            if let Some(last) = finished.last().filter(|&&last| last >= progress.atoms) {
                return Err(malformed(format!(
                    "reservation_progress: finished atom {last} is not one of the request's {} \
                     atoms",
                    progress.atoms
                )));
            }
        }
        let mut shapes = Vec::with_capacity(summary.pending.len());
        for pending in &summary.pending {
            let demand =
                pending
                    .resources
                    .to_vec()
                    .map_err(|source| AllocatorError::InvalidDemand {
                        framework: id.clone(),
                        source,
                    })?;
            if !(pending.pri_score.is_finite() && pending.pri_score >= 0.0) {
                return Err(malformed(format!(
                    "pri_score {} must be finite and >= 0",
                    pending.pri_score
                )));
            }
            if pending.count == 0 {
                continue;
            }
            shapes.push(Shape {
                demand,
                count: pending.count,
                pri_score: pending.pri_score,
            });
        }
        let demand = Demand {
            shapes,
            remaining_work: summary.remaining_work,
            srpt: summary.srpt,
        };
        let has_demand = demand.pending() > 0;
        self.demand_epoch += 1;
        let soft = &mut self.frameworks[idx.get()];
        soft.demand = demand;
        soft.cycle_stamp = 0;
        let suppressed = soft.suppressed;
        self.set_demanding(idx, has_demand && !suppressed);
        Ok(())
    }

    /// Stops offering to a framework until [`Allocator::revive`] (Mesos SUPPRESS).
    pub fn suppress(
        &mut self,
        state: &AllocationState,
        id: &FrameworkId,
    ) -> Result<(), AllocatorError> {
        self.sync(state);
        let idx = state.framework_idx(id)?;
        self.frameworks[idx.get()].suppressed = true;
        self.set_demanding(idx, false);
        Ok(())
    }

    /// Resumes offers to a framework and clears its decline filters (Mesos REVIVE).
    pub fn revive(
        &mut self,
        state: &AllocationState,
        id: &FrameworkId,
    ) -> Result<(), AllocatorError> {
        self.sync(state);
        let idx = state.framework_idx(id)?;
        self.frameworks[idx.get()].suppressed = false;
        for soft in self.agents.iter_mut() {
            soft.filters.retain(|(f, _)| *f != idx);
        }
        let has_demand = self.frameworks[idx.get()].demand.pending() > 0;
        self.set_demanding(idx, has_demand);
        Ok(())
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard an agent belongs to.
    pub fn shard_of(&self, state: &AllocationState, id: &AgentId) -> Option<usize> {
        let idx = state.agent_idx(id).ok()?;
        Some(self.agents[idx.get()].shard)
    }

    /// The agents of a shard, in visiting order of slot (empty for an unknown shard).
    pub fn shard_agents(&self, state: &AllocationState, shard: usize) -> Vec<AgentId> {
        self.shards
            .get(shard)
            .map(|agents| {
                agents
                    .iter()
                    .filter_map(|a| state.agent(*a).map(|r| r.id.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs one cycle of shard `shard` at `now_s`: decides, for each of its agents with free
    /// resources, which framework is offered them (what a snapshot of that shard alone, planned
    /// and committed at once, would). A shard index ≥ [`Allocator::shard_count`] has no agents
    /// and yields no offers.
    pub fn allocate_shard(
        &mut self,
        state: &AllocationState,
        shard: usize,
        now_s: f64,
    ) -> Vec<OfferDecision> {
        self.sync(state);
        if shard >= self.shards.len() {
            return Vec::new();
        }
        self.allocate_in_place(state, now_s, shard..shard + 1)
    }

    /// Runs every shard's cycle at `now_s`: [`Allocator::snapshot_cycle`], every shard planned
    /// on this thread, [`Allocator::commit_cycle`] (with one shard, the same offers made in
    /// place). The offers are the same as when the shards are planned on threads
    /// ([`Allocator::allocate_all_with`]).
    pub fn allocate_all(&mut self, state: &AllocationState, now_s: f64) -> Vec<OfferDecision> {
        if self.shards.len() == 1 {
            return self.allocate_in_place(state, now_s, 0..1);
        }
        self.allocate_all_with(state, now_s, CycleSnapshot::plan_all)
            .offers
    }

    /// A framework answered the offer of `agent`: `launched` are the demands of the tasks it
    /// launches there, held back as launching until the state charges them (when the
    /// `LaunchTasks` command is applied; then call [`Allocator::launch_settled`]); the rest of
    /// the offer
    /// is declined (the framework is not offered this agent again for
    /// [`AllocatorConfig::decline_filter_s`]) or yielded, in which case it is redistributed at
    /// once (Carbyne §3.3.4, [`AllocatorConfig::leftover`]) and the re-offers returned (one
    /// per framework that takes part of it). The yielder of a regular offer takes part in that redistribution in its SRTF
    /// place, as every job does in Pseudocode 1's `LEFTOVERSCHEDULER`; a framework that yields a
    /// leftover offer is left out of the agent's leftovers until the next cycle.
    ///
    /// Validation (DESIGN.md step 5): the offer must be out to this framework, and the tasks
    /// must fit in it, fungible kinds up to the overbooking allowance of the agent's capacity.
    pub fn offer_answered(
        &mut self,
        state: &AllocationState,
        agent: &AgentId,
        framework: &FrameworkId,
        launched: &[ResourceVec],
        leftover: LeftoverAction,
        now_s: f64,
    ) -> Result<Vec<OfferDecision>, AllocatorError> {
        self.sync(state);
        let a = state.agent_idx(agent)?;
        let f = state.framework_idx(framework)?;
        let Some(offer) = self.agents[a.get()]
            .offers
            .iter()
            .find(|o| o.framework == f)
            .cloned()
        else {
            return Err(AllocatorError::NoSuchOffer {
                agent: agent.clone(),
                framework: framework.clone(),
            });
        };
        let mut total = ResourceVec::ZERO;
        for d in launched {
            if !d.is_valid() {
                return Err(StateError::InvalidResources(*d).into());
            }
            total += *d;
        }
        let record = state
            .agent(a)
            .ok_or_else(|| StateError::UnknownAgent(agent.clone()))?;
        let launching = self.agents[a.get()].launching;
        let ceiling = Overbooking(self.config.overbook_allowance).ceiling(&record.total);
        if !fits_offer(
            &total,
            &offer.resources,
            &(record.used + launching),
            &ceiling,
        ) {
            return Err(AllocatorError::ExceedsOffer {
                agent: agent.clone(),
                launched: total,
                offered: offer.resources,
            });
        }
        self.drop_offer(a, f);
        // The answer replaces the offer's projected launches: what the framework did not
        // launch is pending again for the rest of the cycle (a leftover it yielded may come
        // back to it, see below), and what it launched is consumed just after.
        self.frameworks[f.get()].cycle_stamp = 0;
        for d in launched {
            self.consume_shape(f, d);
        }
        self.agents[a.get()].launching += total;
        let remainder = offer
            .resources
            .saturating_sub(&total)
            .min(&self.unoffered_free(state, a));
        if leftover == LeftoverAction::Decline && !remainder.is_zero() {
            let until = now_s + self.config.decline_filter_s;
            let filters = &mut self.agents[a.get()].filters;
            match filters.iter_mut().find(|(g, _)| *g == f) {
                Some(entry) => entry.1 = entry.1.max(until),
                None => filters.push((f, until)),
            }
        }
        let yielded = leftover == LeftoverAction::Yield && !remainder.is_zero();
        // A framework that yields a *regular* offer stays a candidate for the leftover, in its
        // SRTF place: Pseudocode 1's LEFTOVERSCHEDULER runs over all jobs, donors included,
        // which is what keeps altruism work-conserving (Carbyne §3.3.1: J1 "is instead running
        // that task at time 0 to ensure work conservation"). One that yields a *leftover* offer
        // has had its turn and is left out for the rest of the cycle, which also ends every
        // chain of yields.
        if yielded && offer.kind == OfferKind::Leftover {
            let yielders = &mut self.agents[a.get()].yielders;
            if !yielders.contains(&f) {
                yielders.push(f);
            }
        }
        match self.config.leftover {
            LeftoverRule::SrtfOnly => Ok(if yielded {
                self.redistribute(state, a, remainder, now_s)
                    .into_iter()
                    .collect()
            } else {
                Vec::new()
            }),
            LeftoverRule::SrtfThenPacking => {
                // Pseudocode 1 runs LEFTOVERSCHEDULER once every job's intra-job step has
                // yielded: while other frameworks still hold regular parts of this agent, what
                // is yielded is pooled, and the pool is divided when the last part is answered
                // (with those frameworks among the candidates).
                let soft = &mut self.agents[a.get()];
                let parts_out = soft.offers.iter().any(|o| o.kind == OfferKind::Regular);
                if yielded && offer.kind == OfferKind::Regular && parts_out {
                    soft.leftover_pooled = true;
                    return Ok(Vec::new());
                }
                if !(yielded || soft.leftover_pooled) || parts_out {
                    return Ok(Vec::new());
                }
                soft.leftover_pooled = false;
                let pool = self.unoffered_free(state, a);
                if pool.is_zero() {
                    return Ok(Vec::new());
                }
                Ok(self.redistribute_in_parts(state, a, pool, now_s))
            }
        }
    }

    /// Takes back an offer without an answer (it expired, or the offer manager rescinded it):
    /// its resources are free again and no filter is set.
    pub fn rescind_offer(
        &mut self,
        state: &AllocationState,
        agent: &AgentId,
        framework: &FrameworkId,
    ) -> Result<(), AllocatorError> {
        self.sync(state);
        let a = state.agent_idx(agent)?;
        let f = state.framework_idx(framework)?;
        if !self.drop_offer(a, f) {
            return Err(AllocatorError::NoSuchOffer {
                agent: agent.clone(),
                framework: framework.clone(),
            });
        }
        Ok(())
    }

    /// Stops (`true`) or resumes offering `agent`'s resources, keeping its accounting: the
    /// master pauses an agent that stopped heartbeating, which may come back.
    pub fn pause_agent(&mut self, state: &AllocationState, agent: &AgentId, paused: bool) {
        self.sync(state);
        if let Ok(a) = state.agent_idx(agent) {
            self.agents[a.get()].paused = paused;
            self.idle.wake(a);
        }
    }

    /// Replaces the decline filter of `framework` on `agent`: it is not offered the agent again
    /// before `until_s` (a framework's own `refuse` duration instead of the default).
    pub fn set_decline_filter(
        &mut self,
        state: &AllocationState,
        agent: &AgentId,
        framework: &FrameworkId,
        until_s: f64,
    ) {
        self.sync(state);
        let (Ok(a), Ok(f)) = (state.agent_idx(agent), state.framework_idx(framework)) else {
            return;
        };
        let filters = &mut self.agents[a.get()].filters;
        filters.retain(|(g, _)| *g != f);
        filters.push((f, until_s));
    }

    /// The launch of an accepted offer (`resources` in all, as [`Allocator::offer_answered`]
    /// was told) is charged to the state, or was refused: either way its resources stop being
    /// held back as launching.
    pub fn launch_settled(
        &mut self,
        state: &AllocationState,
        agent: &AgentId,
        resources: ResourceVec,
    ) {
        self.sync(state);
        if let Ok(a) = state.agent_idx(agent) {
            let soft = &mut self.agents[a.get()];
            soft.launching = soft.launching.saturating_sub(&resources);
            self.idle.wake(a);
        }
    }

    /// Has cycles pass over the agents they found with nothing free that the smallest pending
    /// shape fits, until something may have freed resources on them (module `idle`). The
    /// caller must then call [`Allocator::resources_freed`] whenever it releases resources on
    /// an agent in the state (as [`StandaloneAllocator`] does); the offers are the same as
    /// without. A master, whose state is released by applied commands, does not.
    pub fn pass_over_idle_agents(&mut self) {
        self.idle.enable();
    }

    /// Resources were released on `agent` in the state: cycles look at it again (see
    /// [`Allocator::pass_over_idle_agents`]).
    pub fn resources_freed(&mut self, state: &AllocationState, agent: &AgentId) {
        self.sync(state);
        if let Ok(a) = state.agent_idx(agent) {
            self.idle.wake(a);
        }
    }

    /// The share `A_k` of the cluster `framework` would hold under the inter-job fairness rule,
    /// Carbyne's input for `T_k` (§3.3.1; [`AllocatorConfig::fair_share`]).
    pub fn fair_share(
        &mut self,
        state: &AllocationState,
        framework: &FrameworkId,
    ) -> Result<ResourceVec, AllocatorError> {
        self.sync(state);
        let record = state
            .framework_by_id(framework)
            .ok_or_else(|| StateError::UnknownFramework(framework.clone()))?;
        match self.config.fair_share {
            FairShareRule::EqualSplit => {
                let group = state.deficits().group(record.group);
                let members = group.frameworks.max(1) as f64;
                Ok(state.capacity().scale(group.share / members))
            }
            FairShareRule::ProgressiveFilling => {
                let idx = state.framework_idx(framework)?;
                Ok(self.progressive_share(state, idx))
            }
        }
    }

    /// κ·C in the deficit factor's unit, under [`InterJobPolicy::DeficitCounters`].
    pub fn unfairness_threshold(&self, state: &AllocationState) -> Option<f64> {
        match self.config.policy {
            InterJobPolicy::DeficitCounters { kappa, .. } => Some(kappa * state.capacity_units()),
            _ => None,
        }
    }

    /// Sum of the agents' totals.
    pub fn cluster_capacity(&self, state: &AllocationState) -> ResourceVec {
        state.capacity()
    }

    /// An agent's resources that are neither used nor out on an offer.
    pub fn free_resources(&self, state: &AllocationState, agent: &AgentId) -> Option<ResourceVec> {
        let idx = state.agent_idx(agent).ok()?;
        Some(self.unoffered_free(state, idx))
    }

    /// Every offer that is out, by agent slot order.
    pub fn outstanding_offers(&self, state: &AllocationState) -> Vec<OfferDecision> {
        let mut out = Vec::new();
        for (idx, record) in state.agents() {
            for offer in &self.agents[idx.get()].offers {
                if let Some(fw) = state.framework(offer.framework) {
                    out.push(OfferDecision {
                        agent: record.id.clone(),
                        framework: fw.id.clone(),
                        resources: offer.resources,
                        kind: offer.kind,
                        guaranteed: offer.guaranteed,
                    });
                }
            }
        }
        out
    }

    /// The current η of Graphene's perfScore.
    pub fn eta(&self) -> f64 {
        match self.config.eta {
            EtaRule::AllPending => self.cycle_eta,
            EtaRule::ChosenCandidates => self.eta.eta(),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Internals
    // -----------------------------------------------------------------------------------------

    fn place_agent(&mut self, idx: AgentIdx, id: &AgentId, total: ResourceVec) {
        let shard = shard_for(id, self.shards.len());
        self.capacity_classes
            .entry(capacity_key(&total))
            .or_insert((total, 0))
            .1 += 1;
        self.next_generation += 1;
        self.idle.wake(idx);
        self.agents[idx.get()] = AgentSoft {
            shard,
            generation: self.next_generation,
            placed: Some((id.clone(), total)),
            ..AgentSoft::default()
        };
        let list = &mut self.shards[shard];
        if let Err(pos) = list.binary_search(&idx) {
            list.insert(pos, idx);
        }
    }

    /// An agent left the state (or changed capacity): its offers are dropped and its slot
    /// forgotten.
    fn unplace_agent(&mut self, idx: AgentIdx) {
        self.idle.wake(idx);
        self.drop_agent_offers(idx);
        let soft = std::mem::take(&mut self.agents[idx.get()]);
        if let Some((_, total)) = soft.placed {
            let key = capacity_key(&total);
            if let Some(entry) = self.capacity_classes.get_mut(&key) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    self.capacity_classes.remove(&key);
                }
            }
        }
        let shard = &mut self.shards[soft.shard];
        if let Ok(pos) = shard.binary_search(&idx) {
            shard.remove(pos);
        }
    }

    /// A framework left the state: its offers are dropped, its filters forgotten.
    fn forget_framework(&mut self, idx: FrameworkIdx) {
        self.set_demanding(idx, false);
        for a in 0..self.agents.len() {
            let soft = &mut self.agents[a];
            soft.filters.retain(|(f, _)| *f != idx);
            soft.yielders.retain(|f| *f != idx);
            if soft.offers.iter().any(|o| o.framework == idx) {
                self.drop_offer(AgentIdx(a as u32), idx);
            }
        }
        self.frameworks[idx.get()] = FrameworkSoft::default();
    }

    /// Keeps the per-group count of demanding frameworks in step with one framework's status.
    fn set_demanding(&mut self, f: FrameworkIdx, demanding: bool) {
        let soft = &mut self.frameworks[f.get()];
        let Some((_, group)) = soft.placed else {
            return;
        };
        if soft.counted == demanding {
            return;
        }
        soft.counted = demanding;
        let group = &mut self.groups[group.get()];
        if demanding {
            group.demanding += 1;
        } else {
            group.demanding = group.demanding.saturating_sub(1);
        }
    }

    /// `total − used − offered − launching` of an agent, floored at zero.
    fn unoffered_free(&self, state: &AllocationState, a: AgentIdx) -> ResourceVec {
        match state.agent(a) {
            Some(record) => {
                let soft = &self.agents[a.get()];
                record
                    .free()
                    .saturating_sub(&soft.offered)
                    .saturating_sub(&soft.launching)
            }
            None => ResourceVec::ZERO,
        }
    }

    /// Removes the offer of `a` to `f`, returning its resources and projected charge. Returns
    /// whether there was one.
    fn drop_offer(&mut self, a: AgentIdx, f: FrameworkIdx) -> bool {
        let soft = &mut self.agents[a.get()];
        let Some(pos) = soft.offers.iter().position(|o| o.framework == f) else {
            return false;
        };
        let offer = soft.offers.swap_remove(pos);
        self.idle.wake(a);
        soft.offered = soft.offered.saturating_sub(&offer.resources);
        if soft.offers.is_empty() {
            soft.offered = ResourceVec::ZERO;
        }
        let fw = &mut self.frameworks[f.get()];
        fw.offered = fw.offered.saturating_sub(&offer.resources);
        let group = &mut self.groups[offer.group.get()];
        group.offered = group.offered.saturating_sub(&offer.resources);
        group.inflight = (group.inflight - offer.expected_charge).max(0.0);
        self.inflight_total = (self.inflight_total - offer.expected_charge).max(0.0);
        true
    }

    fn drop_agent_offers(&mut self, a: AgentIdx) {
        let frameworks: Vec<FrameworkIdx> = self.agents[a.get()]
            .offers
            .iter()
            .map(|o| o.framework)
            .collect();
        for f in frameworks {
            self.drop_offer(a, f);
        }
    }

    /// After a launch, the framework's summary has one task fewer of that shape (until it sends
    /// a fresh summary), so the allocator does not offer resources for it again.
    fn consume_shape(&mut self, f: FrameworkIdx, demand: &ResourceVec) {
        let soft = &mut self.frameworks[f.get()];
        if let Some(shape) = soft
            .demand
            .shapes
            .iter_mut()
            .find(|s| s.count > 0 && state::same_amounts(&s.demand, demand))
        {
            shape.count -= 1;
            soft.cycle_stamp = 0;
            if soft.demand.pending() == 0 {
                self.set_demanding(f, false);
            }
        }
    }

    fn begin_cycle(&mut self) {
        self.cycle += 1;
    }

    /// Projected pending counts of `f` in the current cycle, reset lazily.
    fn cycle_counts(&mut self, f: FrameworkIdx) -> &mut FrameworkSoft {
        let cycle = self.cycle;
        let soft = &mut self.frameworks[f.get()];
        if soft.cycle_stamp != cycle {
            soft.cycle_counts.clear();
            soft.cycle_counts
                .extend(soft.demand.shapes.iter().map(|s| s.count));
            soft.cycle_pending = soft.cycle_counts.iter().map(|&c| c as u64).sum();
            soft.cycle_stamp = cycle;
            soft.refresh_envelopes();
        }
        soft
    }
}

fn capacity_key(total: &ResourceVec) -> [u64; NUM_RESOURCES] {
    total.0.map(f64::to_bits)
}

/// FNV-1a over the id's bytes, modulo the shard count: stable across processes and versions
/// (unlike `std`'s randomly keyed hasher), so every leader assigns the same shards.
fn shard_for(id: &AgentId, shards: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.as_str().bytes() {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % shards.max(1) as u64) as usize
}

/// A totally ordered `f64` for sorted sets (NaN never occurs: inputs are validated).
#[derive(Clone, Copy, Debug)]
struct OrdF64(f64);

/// Equal exactly when [`Ord`] says so (`total_cmp`: −0 before +0), so that code comparing
/// entries for equality (the bounding trees' updates stop at an unchanged node) agrees with
/// the order the sets and trees are kept in.
impl PartialEq for OrdF64 {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for OrdF64 {}

impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
