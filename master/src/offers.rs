//! The offers out on the leader, as a sans-IO book: each offer's id,
//! framework, agent, resources and expiry, and the checks an accept must pass before its tasks
//! are proposed (DESIGN.md, "a task's life", step 5).
//!
//! The allocator decides *what* to offer ([`Allocator`]); this book turns
//! its decisions into [`Offer`]s with ids and expiries, finds them again when a framework
//! answers, and says which to rescind when an agent is lost, a framework leaves, an offer
//! expires, or the leader steps down. Offers are soft state: a new leader starts with an empty
//! book (and a new id epoch, its term), so no offer outlives its leader.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fullerene_proto::messages::{
    DemandSummary, ErrorCode, Leftover, Offer, OfferKind, ReservationProgress, TaskSpec,
    UnixMillis, WireError,
};
use fullerene_proto::time::{secs_f64, Time};
use fullerene_proto::{AgentId, FrameworkId, OfferId, ResourceVec};
use fullerene_scheduling::allocator::{
    Allocator, AllocatorConfig, AllocatorError, CycleSnapshot, CycleStats, InterJobPolicy,
    LeftoverAction, OfferDecision, ShardPlan, DEFAULT_KAPPA,
};
use fullerene_scheduling::fit::{fits_offer, Overbooking};

use crate::state::{AgentEntry, ClusterSettings, ClusterState};

/// An offer out to a framework.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenOffer {
    /// What the framework was sent.
    pub offer: Offer,
    /// The offered resources, dense.
    pub resources: ResourceVec,
}

/// Why an accept (or a decline, or a yield) names offers it may not use.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OfferError {
    /// No offer ids at all.
    #[error("no offer named")]
    NoOffers,
    /// The offer is unknown: never made, already answered, rescinded or expired.
    #[error("offer {0} is unknown, already answered, rescinded or expired")]
    Unknown(OfferId),
    /// The offer was made to another framework.
    #[error("offer {0} was made to another framework")]
    NotYours(OfferId),
    /// The same offer named twice (its resources would count twice).
    #[error("offer {0} is named twice")]
    NamedTwice(OfferId),
    /// The offers are of more than one agent.
    #[error("offers {0} and {1} are of different agents; one accept uses one agent's offers")]
    MixedAgents(OfferId, OfferId),
    /// The tasks ask for more than the offers hold.
    #[error("the tasks ask for {asked} but the offers hold {offered}")]
    Insufficient {
        /// The tasks' summed demand.
        asked: ResourceVec,
        /// The offers' summed resources.
        offered: ResourceVec,
    },
}

impl OfferError {
    /// The error as a framework receives it.
    pub fn to_wire(&self) -> WireError {
        let code = match self {
            OfferError::NoOffers | OfferError::NamedTwice(_) => ErrorCode::InvalidRequest,
            OfferError::Unknown(_) => ErrorCode::UnknownOffer,
            OfferError::NotYours(_) => ErrorCode::OfferNotYours,
            OfferError::MixedAgents(..) => ErrorCode::MixedAgents,
            OfferError::Insufficient { .. } => ErrorCode::InsufficientResources,
        };
        WireError::new(code, self.to_string())
    }
}

/// The leader's open offers.
#[derive(Debug)]
pub struct OfferBook {
    offers: BTreeMap<OfferId, OpenOffer>,
    /// Offers held, by framework (for rescinds when it leaves).
    by_framework: BTreeMap<FrameworkId, BTreeSet<OfferId>>,
    /// Offers of each agent (for rescinds when it is lost).
    by_agent: BTreeMap<AgentId, BTreeSet<OfferId>>,
    /// The leader's term, in the ids' high bits: ids never repeat across leaders.
    epoch: u64,
    next: u64,
}

/// Bits of an offer id for the counter; the term takes the rest.
const COUNTER_BITS: u32 = 40;

impl OfferBook {
    /// An empty book for the leader of `term`.
    pub fn new(term: u64) -> OfferBook {
        OfferBook {
            offers: BTreeMap::new(),
            by_framework: BTreeMap::new(),
            by_agent: BTreeMap::new(),
            epoch: term,
            next: 1,
        }
    }

    /// How many offers `framework` holds unanswered.
    pub fn held_by(&self, framework: &FrameworkId) -> usize {
        self.by_framework.get(framework).map_or(0, BTreeSet::len)
    }

    /// Records an offer of `resources` of `agent` to `framework`, valid until
    /// `expires_at_ms` (naming `reservation` when it comes out of its guarantee), and returns it
    /// as the framework will receive it.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &mut self,
        framework: &FrameworkId,
        agent: &AgentId,
        hostname: &str,
        attributes: &BTreeMap<String, String>,
        resources: ResourceVec,
        kind: OfferKind,
        expires_at_ms: UnixMillis,
        fair_share: ResourceVec,
        reservation: Option<&str>,
    ) -> Offer {
        let id = OfferId((self.epoch << COUNTER_BITS) | (self.next & ((1 << COUNTER_BITS) - 1)));
        self.next += 1;
        let offer = Offer {
            id,
            framework_id: framework.clone(),
            agent_id: agent.clone(),
            hostname: hostname.to_string(),
            attributes: attributes.clone(),
            resources: resources.into(),
            kind,
            expires_at_ms,
            fair_share: fair_share.into(),
            reservation: reservation.map(str::to_string),
        };
        self.offers.insert(
            id,
            OpenOffer {
                offer: offer.clone(),
                resources,
            },
        );
        self.by_framework
            .entry(framework.clone())
            .or_default()
            .insert(id);
        self.by_agent.entry(agent.clone()).or_default().insert(id);
        offer
    }

    /// Checks that `framework` may use `offer_ids` (all open, all its own, all of one agent)
    /// and returns that agent and what the offers hold together. `now_ms` past an offer's
    /// expiry makes it unknown.
    pub fn check(
        &self,
        framework: &FrameworkId,
        offer_ids: &[OfferId],
        now_ms: UnixMillis,
    ) -> Result<(AgentId, ResourceVec), OfferError> {
        let Some(first) = offer_ids.first() else {
            return Err(OfferError::NoOffers);
        };
        let mut agent: Option<(&AgentId, OfferId)> = None;
        let mut total = ResourceVec::ZERO;
        let mut named = std::collections::BTreeSet::new();
        for id in offer_ids {
            if !named.insert(*id) {
                return Err(OfferError::NamedTwice(*id));
            }
            let open = self
                .offers
                .get(id)
                .filter(|open| open.offer.expires_at_ms > now_ms)
                .ok_or(OfferError::Unknown(*id))?;
            if &open.offer.framework_id != framework {
                return Err(OfferError::NotYours(*id));
            }
            match agent {
                Some((a, seen)) if a != &open.offer.agent_id => {
                    return Err(OfferError::MixedAgents(seen, *id))
                }
                _ => agent = Some((&open.offer.agent_id, *id)),
            }
            total += open.resources;
        }
        let agent = agent.map_or_else(|| AgentId::from(String::new()), |(a, _)| a.clone());
        debug_assert!(self.offers.contains_key(first));
        Ok((agent, total))
    }

    /// Checks that tasks asking for `asked` fit `offered`: every kind within the offer, except
    /// fungible ones (disk and network bandwidth), which may overbook the agent up to
    /// `overbook_limit` (what its ceiling, [`Overbooking::ceiling`], leaves above its current
    /// use), Graphene §5. The rule is [`fits_offer`], with the ceiling net of the use.
    pub fn check_fit(
        asked: &ResourceVec,
        offered: &ResourceVec,
        overbook_limit: &ResourceVec,
    ) -> Result<(), OfferError> {
        if fits_offer(asked, offered, &ResourceVec::ZERO, overbook_limit) {
            Ok(())
        } else {
            Err(OfferError::Insufficient {
                asked: *asked,
                offered: *offered,
            })
        }
    }

    /// Removes and returns the offers `ids` (answered: accepted, declined or yielded).
    pub fn take(&mut self, ids: &[OfferId]) -> Vec<OpenOffer> {
        ids.iter().filter_map(|id| self.remove(*id)).collect()
    }

    /// Removes and returns every offer expired at `now_ms`.
    pub fn expire(&mut self, now_ms: UnixMillis) -> Vec<OpenOffer> {
        let due: Vec<OfferId> = self
            .offers
            .iter()
            .filter(|(_, open)| open.offer.expires_at_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        self.take(&due)
    }

    /// Removes and returns every offer of `agent` (it was lost or changed capacity).
    pub fn of_agent(&mut self, agent: &AgentId) -> Vec<OpenOffer> {
        let ids: Vec<OfferId> = self
            .by_agent
            .get(agent)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        self.take(&ids)
    }

    /// Removes and returns every offer to `framework` (it left or disconnected).
    pub fn of_framework(&mut self, framework: &FrameworkId) -> Vec<OpenOffer> {
        let ids: Vec<OfferId> = self
            .by_framework
            .get(framework)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        self.take(&ids)
    }

    /// Removes and returns every offer (the leader steps down).
    pub fn clear(&mut self) -> Vec<OpenOffer> {
        let ids: Vec<OfferId> = self.offers.keys().copied().collect();
        self.take(&ids)
    }

    /// The open offers, oldest first.
    pub fn offers(&self) -> impl Iterator<Item = &Offer> {
        self.offers.values().map(|open| &open.offer)
    }

    /// How many offers are open.
    pub fn len(&self) -> usize {
        self.offers.len()
    }

    /// Whether no offer is open.
    pub fn is_empty(&self) -> bool {
        self.offers.is_empty()
    }

    fn remove(&mut self, id: OfferId) -> Option<OpenOffer> {
        let open = self.offers.remove(&id)?;
        if let Some(ids) = self.by_framework.get_mut(&open.offer.framework_id) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_framework.remove(&open.offer.framework_id);
            }
        }
        if let Some(ids) = self.by_agent.get_mut(&open.offer.agent_id) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_agent.remove(&open.offer.agent_id);
            }
        }
        Some(open)
    }
}

/// How long an offer stays valid by default. Mesos leaves offers open until rescinded; a
/// bound keeps a framework that stopped answering from holding resources: after it, the
/// offer is rescinded and its resources offered again.
pub const DEFAULT_OFFER_TTL_MS: u64 = 5_000;

/// What an accepted offer leads to.
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    /// The agent the tasks run on.
    pub agent: AgentId,
    /// The tasks' summed demand, held back as launching until the launch is settled
    /// ([`OfferManager::launch_settled`]).
    pub launching: ResourceVec,
    /// A yielded leftover's re-offers (one per framework that takes part of it), already in
    /// the book.
    pub reoffers: Vec<Offer>,
}

/// What a framework's last demand summary said the plan follower needs to know.
#[derive(Clone, Debug, Default)]
struct Wanted {
    /// Its pending tasks by shape, with their counts.
    shapes: Vec<(ResourceVec, u32)>,
    /// Its job's progress through its own reservation.
    reservation_progress: Option<ReservationProgress>,
}

/// The leader's offer machinery: the allocator's soft state over
/// the replicated accounting, and the book of open offers. Sans-IO: the node loop calls it
/// with the applied state and the time, and sends what it returns.
#[derive(Debug)]
pub struct OfferManager {
    allocator: Allocator,
    book: OfferBook,
    offer_ttl_ms: u64,
    /// Frameworks this manager suppressed because they have no session: their demand must
    /// not count (under the κ·C gate a deprived group of absent frameworks would otherwise
    /// hold every agent for them until their failover timeout).
    absent: BTreeSet<FrameworkId>,
    /// Each framework's pending demand by shape and the atoms of its reservation its job has
    /// finished, from its last summary (what the plan follower counts as a reserved job's
    /// `shapes` and `finished_atoms`).
    wanted: BTreeMap<FrameworkId, Wanted>,
    /// What the plan follower last said each reserved job's framework is owed (the
    /// allocator's guarantees, as set).
    guarantees: Vec<(FrameworkId, ResourceVec)>,
    /// When this manager ran its first cycle: its warm-up ([`LEADER_WARMUP_MS`]) runs from then.
    first_cycle_ms: Option<UnixMillis>,
    /// The warm-up is over (latched: a wall clock stepped back does not start it again).
    warmed_up: bool,
}

/// How long a new leader's allocation cycles stay partial (at most
/// [`WARMUP_CYCLE_MAX_AGENTS`] agents each), from its first cycle. A full cycle over 10,000
/// agents took 0.7–0.9 s on the project's two-core machine (`fullerene bench scale --agents
/// 10000`), and after a failover every framework waited that long for its first offer, on top
/// of the election and its own reconnection; Mesos' allocator, likewise, offers each agent as
/// it re-registers rather than waiting for its periodic full cycle. Two seconds covers the
/// frameworks' reconnections (their sessions notice a dead leader within half a second).
pub const LEADER_WARMUP_MS: u64 = 2_000;

/// The most agents with room a cycle of a new leader's warm-up offers (about a tenth of a
/// full cycle's time at 10,000 agents); each next cycle goes on from where the last stopped.
pub const WARMUP_CYCLE_MAX_AGENTS: usize = 1_000;

impl OfferManager {
    /// A manager for the leader of `term`, allocating by Graphene's deficit counters (§5)
    /// with the cluster's own fairness factor, slot and overbooking allowance, so that the
    /// allocator and the state machine judge launches alike.
    pub fn new(
        settings: &ClusterSettings,
        shards: usize,
        term: u64,
        offer_ttl_ms: u64,
    ) -> Result<OfferManager, AllocatorError> {
        let config = AllocatorConfig {
            policy: InterJobPolicy::DeficitCounters {
                factor: settings.fairness_factor,
                kappa: DEFAULT_KAPPA,
            },
            shards: shards.max(1),
            overbook_allowance: settings.overbooking_allowance,
            slot_size: settings.slot_size,
            ..AllocatorConfig::default()
        };
        Ok(OfferManager {
            allocator: Allocator::new(config)?,
            book: OfferBook::new(term),
            offer_ttl_ms,
            absent: BTreeSet::new(),
            wanted: BTreeMap::new(),
            guarantees: Vec::new(),
            first_cycle_ms: None,
            warmed_up: false,
        })
    }

    /// The open offers.
    pub fn offers(&self) -> impl Iterator<Item = &Offer> {
        self.book.offers()
    }

    /// One allocation cycle at `now_ms`, planned on this thread: returns the offers to send,
    /// and the offers to rescind (expired, or of an agent that is no longer active, or to a
    /// framework that left or has no session: `connected` says which have one).
    pub fn cycle(
        &mut self,
        state: &ClusterState,
        connected: impl Fn(&FrameworkId) -> bool,
        now_ms: UnixMillis,
    ) -> (Vec<Offer>, Vec<Offer>) {
        let (rescinded, snapshot) = self.begin_cycle(state, &connected, now_ms);
        let plans = snapshot.plan_all();
        let (offers, _) = self.finish_cycle(state, &connected, plans, now_ms);
        (offers, rescinded)
    }

    /// Starts an allocation cycle at `now_ms`: rescinds what is stale (expired offers, offers
    /// of agents no longer active or to frameworks that left or have no session), brings the
    /// allocator up to date with the agents' and frameworks' states, and returns the rescinded
    /// offers with the snapshot the shards plan from ([`CycleSnapshot::plan_shard`], on any
    /// thread). [`OfferManager::finish_cycle`] commits the plans.
    pub fn begin_cycle(
        &mut self,
        state: &ClusterState,
        connected: impl Fn(&FrameworkId) -> bool,
        now_ms: UnixMillis,
    ) -> (Vec<Offer>, CycleSnapshot) {
        let accounting = state.allocation();
        self.allocator.sync(accounting);
        let mut rescinded = Vec::new();
        for open in self.book.expire(now_ms) {
            self.forget(state, &open);
            // A framework that let an offer expire unanswered is not offered that agent
            // again for another TTL, as if it had declined: otherwise one that never answers
            // (and, holding nothing, is always the most deprived) would be handed the agent
            // again at once and hold it for TTL after TTL while the others wait.
            self.allocator.set_decline_filter(
                accounting,
                &open.offer.agent_id,
                &open.offer.framework_id,
                Time::from_millis(now_ms.saturating_add(self.offer_ttl_ms)).as_secs_f64(),
            );
            rescinded.push(open.offer);
        }
        // Offers whose agent stopped taking tasks (not active, or drained) or whose framework
        // left go back.
        let stale: Vec<OfferId> = self
            .book
            .offers()
            .filter(|offer| {
                !agent_takes_new_tasks(state, &offer.agent_id)
                    || !framework_live(state, &offer.framework_id)
                    || !connected(&offer.framework_id)
            })
            .map(|offer| offer.id)
            .collect();
        for open in self.book.take(&stale) {
            self.forget(state, &open);
            rescinded.push(open.offer);
        }
        for (agent_id, entry) in state.agents() {
            // An agent that runs the most tasks one agent may is offered nothing until one
            // ends: a launch there would be refused (the state machine checks it too).
            let pause = !entry.takes_new_tasks()
                || entry.tasks.len() >= fullerene_proto::limits::MAX_TASKS_PER_AGENT;
            self.allocator.pause_agent(accounting, agent_id, pause);
        }
        for (framework_id, entry) in state.frameworks() {
            if entry.torn_down_at_ms.is_some() {
                self.absent.remove(framework_id);
                self.wanted.remove(framework_id);
                continue;
            }
            let here = connected(framework_id);
            if !here && self.absent.insert(framework_id.clone()) {
                let _ = self.allocator.suppress(accounting, framework_id);
            } else if here && self.absent.remove(framework_id) {
                let _ = self.allocator.revive(accounting, framework_id);
            }
        }
        let now_s = Time::from_millis(now_ms).as_secs_f64();
        let snapshot = if self.warming_up(now_ms) {
            self.allocator
                .snapshot_partial_cycle(accounting, now_s, WARMUP_CYCLE_MAX_AGENTS)
        } else {
            self.allocator.snapshot_cycle(accounting, now_s)
        };
        (rescinded, snapshot)
    }

    /// Whether a cycle starting at `now_ms` is in this manager's warm-up (see
    /// [`LEADER_WARMUP_MS`]); the first call starts it. It ends for good once that long has
    /// passed, or at once if the wall clock went back before its start (so that a clock
    /// stepped back cannot keep a leader on partial cycles).
    fn warming_up(&mut self, now_ms: UnixMillis) -> bool {
        if self.warmed_up {
            return false;
        }
        let since = *self.first_cycle_ms.get_or_insert(now_ms);
        let warming = now_ms >= since && now_ms - since < LEADER_WARMUP_MS;
        self.warmed_up = !warming;
        !self.warmed_up
    }

    /// Ends an allocation cycle: commits the shards' plans against the state as it is now
    /// (which may have moved on since [`OfferManager::begin_cycle`]: what no longer holds is
    /// dropped, see `Allocator::commit_cycle`) and opens the offers to send, with what the
    /// commit did.
    pub fn finish_cycle(
        &mut self,
        state: &ClusterState,
        connected: impl Fn(&FrameworkId) -> bool,
        plans: Vec<ShardPlan>,
        now_ms: UnixMillis,
    ) -> (Vec<Offer>, CycleStats) {
        let accounting = state.allocation();
        let outcome =
            self.allocator
                .commit_cycle(accounting, plans, Time::from_millis(now_ms).as_secs_f64());
        let mut offers = Vec::with_capacity(outcome.offers.len());
        let pending_quota = state.settings().quotas.pending_offers_per_framework as usize;
        for decision in outcome.offers {
            let at_quota = self.book.held_by(&decision.framework) >= pending_quota;
            if !connected(&decision.framework) || at_quota {
                // Nobody to send it to, or a framework that holds as many unanswered offers
                // as its quota allows: give it back at once (a new leader learns of sessions
                // as frameworks re-subscribe; a framework at its quota is offered more once it
                // answers, or its offers expire).
                let _ =
                    self.allocator
                        .rescind_offer(accounting, &decision.agent, &decision.framework);
                continue;
            }
            offers.push(self.open(state, &decision, now_ms));
        }
        (offers, outcome.stats)
    }

    /// A framework's new demand summary.
    pub fn update_demand(
        &mut self,
        state: &ClusterState,
        framework: &FrameworkId,
        summary: &DemandSummary,
    ) -> Result<(), WireError> {
        self.allocator
            .update_demand(state.allocation(), framework, summary)
            .map_err(|e| WireError::new(ErrorCode::InvalidRequest, e.to_string()))?;
        // The allocator checked every shape's resources: none fails to convert here.
        let shapes: Vec<(ResourceVec, u32)> = summary
            .pending
            .iter()
            .filter_map(|shape| Some((shape.resources.to_vec().ok()?, shape.count)))
            .collect();
        let wanted = Wanted {
            shapes,
            reservation_progress: summary.reservation_progress.clone(),
        };
        self.wanted.insert(framework.clone(), wanted);
        Ok(())
    }

    /// A framework's runnable tasks by shape, best first, with their counts, from its last
    /// demand summary (empty before one).
    pub fn wanted_shapes(&self, framework: &FrameworkId) -> &[(ResourceVec, u32)] {
        self.wanted
            .get(framework)
            .map_or(&[], |wanted| wanted.shapes.as_slice())
    }

    /// How far a framework's job is through its own reservation, from its last demand summary
    /// (`None` before one, or when it did not derive the reservation from its DAG).
    pub fn reservation_progress(&self, framework: &FrameworkId) -> Option<&ReservationProgress> {
        self.wanted
            .get(framework)
            .and_then(|wanted| wanted.reservation_progress.as_ref())
    }

    /// Sets what each reserved job's framework is owed now (the plan follower's shares, issue
    /// 17): from the next cycle on, each is offered up to its amount, less what it receives
    /// from now on, before anyone else, until the next call replaces the list
    /// ([`Allocator::set_guarantees`]).
    pub fn set_guarantees(&mut self, state: &ClusterState, owed: Vec<(FrameworkId, ResourceVec)>) {
        if owed.is_empty() && self.guarantees.is_empty() {
            return;
        }
        self.allocator.set_guarantees(state.allocation(), &owed);
        self.guarantees = owed;
    }

    /// What [`OfferManager::set_guarantees`] last set.
    pub fn guarantees(&self) -> &[(FrameworkId, ResourceVec)] {
        &self.guarantees
    }

    /// Withdraws every open offer to `framework` (before the plan follower kills its tasks:
    /// it must not launch on what is being reclaimed). Returns them, to rescind.
    pub fn rescind_framework(
        &mut self,
        state: &ClusterState,
        framework: &FrameworkId,
    ) -> Vec<Offer> {
        let open = self.book.of_framework(framework);
        for offer in &open {
            self.forget(state, offer);
        }
        open.into_iter().map(|open| open.offer).collect()
    }

    /// Stops or resumes offers to a framework.
    pub fn set_suppressed(
        &mut self,
        state: &ClusterState,
        framework: &FrameworkId,
        suppressed: bool,
    ) -> Result<(), WireError> {
        let accounting = state.allocation();
        let result = if suppressed {
            self.allocator.suppress(accounting, framework)
        } else {
            self.allocator.revive(accounting, framework)
        };
        result.map_err(|e| WireError::new(ErrorCode::UnknownFramework, e.to_string()))
    }

    /// Checks an accept (DESIGN.md step 5: offers open and made to this framework, of one
    /// agent, the tasks within them, fungible kinds up to the overbooking allowance), closes
    /// the offers and holds the tasks' resources back as launching. The state machine checks
    /// the rest when the launch is applied (task ids new, executors known, capacity).
    pub fn accept(
        &mut self,
        state: &ClusterState,
        framework: &FrameworkId,
        offer_ids: &[OfferId],
        tasks: &[TaskSpec],
        leftover: Leftover,
        now_ms: UnixMillis,
    ) -> Result<Accepted, WireError> {
        let (agent, offered) = self
            .book
            .check(framework, offer_ids, now_ms)
            .map_err(|e| e.to_wire())?;
        if tasks.is_empty() {
            return Err(WireError::new(
                ErrorCode::InvalidRequest,
                "an accept needs at least one task (use decline or yield to give offers back)",
            ));
        }
        let mut demands = Vec::with_capacity(tasks.len());
        for task in tasks {
            // Refused here as well as on apply, so that an oversized task never reaches the log.
            fullerene_proto::limits::check_task_spec(task)
                .map_err(|e| WireError::new(ErrorCode::TooLarge, e.to_string()))?;
            let demand = task.resources.to_vec().map_err(|e| {
                WireError::new(
                    ErrorCode::InvalidRequest,
                    format!("task `{}`: {e}", task.id),
                )
            })?;
            demands.push(demand);
        }
        let asked = demands
            .iter()
            .fold(ResourceVec::ZERO, |sum, demand| sum + *demand);
        let limit = self.overbook_limit(state, &agent);
        OfferBook::check_fit(&asked, &offered, &limit).map_err(|e| e.to_wire())?;
        let action = match leftover {
            Leftover::Decline { .. } => LeftoverAction::Decline,
            Leftover::Yield => LeftoverAction::Yield,
        };
        let accounting = state.allocation();
        let now_s = Time::from_millis(now_ms).as_secs_f64();
        let decision = self
            .allocator
            .offer_answered(accounting, &agent, framework, &demands, action, now_s)
            .map_err(|e| WireError::new(ErrorCode::InsufficientResources, e.to_string()))?;
        self.book.take(offer_ids);
        if let Leftover::Decline { refuse_ms } = leftover {
            self.allocator.set_decline_filter(
                accounting,
                &agent,
                framework,
                now_s + secs_f64(Duration::from_millis(refuse_ms)),
            );
        }
        let reoffers = decision
            .iter()
            .map(|d| self.open(state, d, now_ms))
            .collect();
        Ok(Accepted {
            agent,
            launching: asked,
            reoffers,
        })
    }

    /// Gives offers back: declined (not offered to this framework again for `refuse_ms`) or
    /// yielded (re-offered at once to others, Carbyne §3.3.4). Returns the re-offers.
    pub fn give_back(
        &mut self,
        state: &ClusterState,
        framework: &FrameworkId,
        offer_ids: &[OfferId],
        leftover: Leftover,
        now_ms: UnixMillis,
    ) -> Result<Vec<Offer>, WireError> {
        for id in offer_ids {
            self.book
                .check(framework, std::slice::from_ref(id), now_ms)
                .map_err(|e| e.to_wire())?;
        }
        let accounting = state.allocation();
        let now_s = Time::from_millis(now_ms).as_secs_f64();
        let mut reoffers = Vec::new();
        for open in self.book.take(offer_ids) {
            let agent = open.offer.agent_id.clone();
            let action = match leftover {
                Leftover::Decline { .. } => LeftoverAction::Decline,
                Leftover::Yield => LeftoverAction::Yield,
            };
            match self
                .allocator
                .offer_answered(accounting, &agent, framework, &[], action, now_s)
            {
                Ok(decisions) => {
                    for decision in &decisions {
                        reoffers.push(self.open(state, decision, now_ms));
                    }
                }
                Err(error) => tracing::debug!(%error, "an offer given back was already gone"),
            }
            if let Leftover::Decline { refuse_ms } = leftover {
                self.allocator.set_decline_filter(
                    accounting,
                    &agent,
                    framework,
                    now_s + secs_f64(Duration::from_millis(refuse_ms)),
                );
            }
        }
        Ok(reoffers)
    }

    /// The launch of an accept was applied (charged to the state) or refused: its resources
    /// stop being held back.
    pub fn launch_settled(
        &mut self,
        state: &ClusterState,
        agent: &AgentId,
        launching: ResourceVec,
    ) {
        self.allocator
            .launch_settled(state.allocation(), agent, launching);
    }

    /// Every open offer is withdrawn (the leader steps down). Returns them.
    pub fn clear(&mut self) -> Vec<Offer> {
        self.book
            .clear()
            .into_iter()
            .map(|open| open.offer)
            .collect()
    }

    /// What the tasks of one accept may use of fungible kinds: the agent's ceiling
    /// ([`Overbooking::ceiling`]), less what runs there.
    fn overbook_limit(&self, state: &ClusterState, agent: &AgentId) -> ResourceVec {
        let accounting = state.allocation();
        let Ok(idx) = accounting.agent_idx(agent) else {
            return ResourceVec::ZERO;
        };
        let Some(record) = accounting.agent(idx) else {
            return ResourceVec::ZERO;
        };
        Overbooking(self.allocator.config().overbook_allowance)
            .ceiling(&record.total)
            .saturating_sub(&record.used)
    }

    fn open(
        &mut self,
        state: &ClusterState,
        decision: &OfferDecision,
        now_ms: UnixMillis,
    ) -> Offer {
        let (hostname, attributes) = state
            .agents()
            .get(&decision.agent)
            .map(|entry| (entry.hostname.clone(), entry.attributes.clone()))
            .unwrap_or_default();
        // Carbyne's A_k for the framework's altruism; a framework the allocator no longer
        // knows gets none.
        let fair_share = self
            .allocator
            .fair_share(state.allocation(), &decision.framework)
            .unwrap_or(ResourceVec::ZERO);
        let reservation = decision
            .guaranteed
            .then(|| state.reservation_of(&decision.framework))
            .flatten();
        self.book.open(
            &decision.framework,
            &decision.agent,
            &hostname,
            &attributes,
            decision.resources,
            decision.kind,
            // The CLI bounds the TTL; a library caller's huge one never wraps into the past.
            now_ms.saturating_add(self.offer_ttl_ms),
            fair_share,
            reservation,
        )
    }

    /// Tells the allocator an offer in the book is withdrawn.
    fn forget(&mut self, state: &ClusterState, open: &OpenOffer) {
        let _ = self.allocator.rescind_offer(
            state.allocation(),
            &open.offer.agent_id,
            &open.offer.framework_id,
        );
    }
}

fn agent_takes_new_tasks(state: &ClusterState, agent: &AgentId) -> bool {
    state
        .agents()
        .get(agent)
        .is_some_and(AgentEntry::takes_new_tasks)
}

fn framework_live(state: &ClusterState, framework: &FrameworkId) -> bool {
    state
        .frameworks()
        .get(framework)
        .is_some_and(|entry| entry.torn_down_at_ms.is_none())
}

#[cfg(test)]
mod tests {
    use fullerene_proto::ResourceKind;

    use super::*;

    use fullerene_scheduling::testkit::cpus;

    fn open(book: &mut OfferBook, framework: &str, agent: &str, n: f64, expires: u64) -> OfferId {
        book.open(
            &FrameworkId::from(framework.to_string()),
            &AgentId::from(agent.to_string()),
            "host",
            &BTreeMap::new(),
            cpus(n),
            OfferKind::Regular,
            expires,
            ResourceVec::ZERO,
            None,
        )
        .id
    }

    #[test]
    fn an_accept_uses_open_offers_of_its_own_framework_and_one_agent() {
        let mut book = OfferBook::new(3);
        let a = open(&mut book, "fw-1", "agent-1", 4.0, 1_000);
        let b = open(&mut book, "fw-1", "agent-1", 2.0, 1_000);
        let c = open(&mut book, "fw-1", "agent-2", 1.0, 1_000);
        let d = open(&mut book, "fw-2", "agent-1", 1.0, 1_000);
        assert_ne!(a, b);
        assert_eq!(a.0 >> COUNTER_BITS, 3, "ids carry the leader's term");
        let fw1 = FrameworkId::from("fw-1");
        let (agent, total) = book.check(&fw1, &[a, b], 10).expect("usable");
        assert_eq!(agent.as_str(), "agent-1");
        assert_eq!(total, cpus(6.0));
        assert_eq!(
            book.check(&fw1, &[a, c], 10),
            Err(OfferError::MixedAgents(a, c))
        );
        assert_eq!(book.check(&fw1, &[d], 10), Err(OfferError::NotYours(d)));
        assert_eq!(book.check(&fw1, &[], 10), Err(OfferError::NoOffers));
        assert_eq!(
            book.check(&fw1, &[a], 1_000),
            Err(OfferError::Unknown(a)),
            "expired"
        );
        assert_eq!(book.take(&[a]).len(), 1);
        assert_eq!(
            book.check(&fw1, &[a], 10),
            Err(OfferError::Unknown(a)),
            "answered"
        );
        assert_eq!(
            book.check(&fw1, &[a], 10).map_err(|e| e.to_wire().code),
            Err(ErrorCode::UnknownOffer)
        );
    }

    #[test]
    fn rescinds_find_offers_by_agent_framework_and_expiry() {
        let mut book = OfferBook::new(1);
        open(&mut book, "fw-1", "agent-1", 1.0, 100);
        open(&mut book, "fw-2", "agent-1", 1.0, 500);
        open(&mut book, "fw-2", "agent-2", 1.0, 500);
        assert_eq!(book.expire(200).len(), 1);
        assert_eq!(book.of_agent(&AgentId::from("agent-1")).len(), 1);
        assert_eq!(book.len(), 1);
        assert_eq!(book.of_framework(&FrameworkId::from("fw-2")).len(), 1);
        assert!(book.is_empty());
    }

    #[test]
    fn tasks_fit_the_offer_or_overbook_fungible_resources_only() {
        let offered =
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, 4.0), (ResourceKind::DiskMbps, 100.0)]);
        let limit =
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, 4.0), (ResourceKind::DiskMbps, 125.0)]);
        let ask = |c: f64, d: f64| {
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, c), (ResourceKind::DiskMbps, d)])
        };
        assert!(OfferBook::check_fit(&ask(4.0, 100.0), &offered, &limit).is_ok());
        assert!(
            OfferBook::check_fit(&ask(2.0, 120.0), &offered, &limit).is_ok(),
            "disk overbooks"
        );
        assert!(
            OfferBook::check_fit(&ask(2.0, 130.0), &offered, &limit).is_err(),
            "past the allowance"
        );
        assert!(
            OfferBook::check_fit(&ask(4.5, 10.0), &offered, &limit).is_err(),
            "cpus never overbook"
        );
    }

    mod manager {
        use super::super::*;
        use crate::testkit::{launch_tasks, register_agent, subscribe_framework};

        use fullerene_scheduling::testkit::resources;

        fn cluster() -> ClusterState {
            let mut state = ClusterState::default();
            state
                .apply(&register_agent(
                    "agent-1",
                    "node1",
                    "cpus=4,mem_mib=4096",
                    &["sleep"],
                    0,
                ))
                .expect("agent");
            for fw in ["fw-1", "fw-2"] {
                state
                    .apply(&subscribe_framework(
                        fw,
                        "framework-1",
                        fw,
                        "default",
                        1_000,
                        0,
                    ))
                    .expect("framework");
            }
            state
        }

        fn demand(count: u32) -> DemandSummary {
            fullerene_scheduling::testkit::demand(&resources("cpus=1,mem_mib=512"), count)
        }

        fn task(id: &str, resources: &str) -> TaskSpec {
            fullerene_proto::testkit::sleep_task(id, 10, resources, 0)
        }

        /// A new leader's cycles offer at most WARMUP_CYCLE_MAX_AGENTS agents each during its
        /// warm-up, so that the first offers go out after a short cycle; after it, one cycle
        /// offers every agent with room.
        #[test]
        fn a_new_leaders_first_cycles_are_partial_and_full_after_its_warm_up() {
            let agents = WARMUP_CYCLE_MAX_AGENTS + 200;
            let mut state = cluster();
            for n in 2..=agents {
                let id = format!("agent-{n}");
                state
                    .apply(&register_agent(
                        &id,
                        &id,
                        "cpus=4,mem_mib=4096",
                        &["sleep"],
                        0,
                    ))
                    .expect("agent");
            }
            // Two frameworks, since each may hold at most its quota of offers (1,024).
            let frameworks = [FrameworkId::from("fw-1"), FrameworkId::from("fw-2")];
            let mut offers = OfferManager::new(state.settings(), 2, 2, 60_000).expect("manager");
            let each = u32::try_from(agents * 2).expect("few");
            for framework in &frameworks {
                offers
                    .update_demand(&state, framework, &demand(each))
                    .expect("demand");
            }
            let cycle = |offers: &mut OfferManager, now_ms| {
                let (sent, _) = offers.cycle(&state, |_| true, now_ms);
                for framework in &frameworks {
                    offers.rescind_framework(&state, framework);
                }
                sent.into_iter()
                    .map(|offer| offer.agent_id)
                    .collect::<BTreeSet<AgentId>>()
            };
            let first = cycle(&mut offers, 1_000);
            assert_eq!(first.len(), WARMUP_CYCLE_MAX_AGENTS);
            // With every agent free again, the next partial cycle goes on where the first
            // stopped: between them, every agent.
            let second = cycle(&mut offers, 1_100);
            assert_eq!(second.len(), WARMUP_CYCLE_MAX_AGENTS);
            assert_eq!(first.union(&second).count(), agents);
            let full = cycle(&mut offers, 1_000 + LEADER_WARMUP_MS);
            assert_eq!(full.len(), agents);
            // Over for good: a wall clock stepped back does not start it again.
            assert_eq!(cycle(&mut offers, 1_000).len(), agents);
        }

        #[test]
        fn offers_go_to_demand_and_an_accept_holds_its_resources_until_settled() {
            let mut state = cluster();
            let fw1 = FrameworkId::from("fw-1");
            let mut offers = OfferManager::new(state.settings(), 1, 2, 1_000).expect("manager");
            offers
                .update_demand(&state, &fw1, &demand(2))
                .expect("demand");
            let (sent, rescinded) = offers.cycle(&state, |_| true, 0);
            assert!(rescinded.is_empty());
            assert_eq!(sent.len(), 1, "{sent:?}");
            let offer = sent[0].clone();
            // The framework's A_k travels with the offer: alone, it may count on the cluster.
            let share = offer.fair_share.to_vec().expect("share parses");
            assert_eq!(share, state.allocation().capacity(), "{share}");
            assert_eq!(offer.framework_id, fw1);
            assert_eq!(offer.hostname, "node1");

            // Another framework cannot use it; asking for more than it holds is refused.
            let fw2 = FrameworkId::from("fw-2");
            let tasks = [
                task("t1", "cpus=1,mem_mib=512"),
                task("t2", "cpus=1,mem_mib=512"),
            ];
            let refused = offers.accept(&state, &fw2, &[offer.id], &tasks, Leftover::Yield, 1);
            assert_eq!(refused.map_err(|e| e.code), Err(ErrorCode::OfferNotYours));
            let greedy = [task("big", "cpus=5")];
            let refused = offers.accept(&state, &fw1, &[offer.id], &greedy, Leftover::Yield, 1);
            assert_eq!(
                refused.map_err(|e| e.code),
                Err(ErrorCode::InsufficientResources)
            );

            let accepted = offers
                .accept(
                    &state,
                    &fw1,
                    &[offer.id],
                    &tasks,
                    Leftover::Decline { refuse_ms: 0 },
                    1,
                )
                .expect("accepted");
            assert_eq!(accepted.agent.as_str(), "agent-1");
            assert_eq!(
                accepted.launching,
                "cpus=2,mem_mib=1024".parse().expect("vec")
            );
            // Answered: the offer is gone.
            let again = offers.accept(&state, &fw1, &[offer.id], &tasks, Leftover::Yield, 1);
            assert_eq!(again.map_err(|e| e.code), Err(ErrorCode::UnknownOffer));
            // While launching, those resources are not offered again.
            offers
                .update_demand(&state, &fw1, &demand(4))
                .expect("demand");
            let (sent, _) = offers.cycle(&state, |_| true, 10);
            let cpus: f64 = sent
                .iter()
                .map(|o| o.resources.get("cpus").unwrap_or(0.0))
                .sum();
            assert!(
                cpus <= 2.0 + 1e-9,
                "launching resources offered again: {sent:?}"
            );
            // The launch commits: charged in the state, no longer held back.
            state
                .apply(&launch_tasks(
                    fw1.as_str(),
                    "framework-1",
                    accepted.agent.as_str(),
                    tasks.to_vec(),
                    2,
                ))
                .expect("launched");
            offers.launch_settled(&state, &accepted.agent, accepted.launching);
            assert_eq!(state.allocation().agents().count(), 1);
        }

        #[test]
        fn offers_expire_and_are_rescinded_when_their_framework_has_no_session() {
            let state = cluster();
            let fw1 = FrameworkId::from("fw-1");
            let fw2 = FrameworkId::from("fw-2");
            let mut offers = OfferManager::new(state.settings(), 1, 2, 1_000).expect("manager");
            offers
                .update_demand(&state, &fw1, &demand(1))
                .expect("demand");
            // No session: nothing is sent (and nothing is held).
            let (sent, _) = offers.cycle(&state, |_| false, 0);
            assert!(sent.is_empty());
            let (sent, _) = offers.cycle(&state, |_| true, 0);
            assert_eq!(sent.len(), 1);
            assert_eq!(sent[0].framework_id, fw1);
            offers
                .update_demand(&state, &fw2, &demand(1))
                .expect("demand");
            // fw-1 lets its offer expire: the agent goes to fw-2, and fw-1 is not offered it
            // again for a TTL (as if it had declined), however deprived its group.
            let (sent, rescinded) = offers.cycle(&state, |_| true, 1_000);
            assert_eq!(rescinded.len(), 1, "the offer expired");
            assert_eq!(sent.len(), 1, "expired resources are offered again");
            assert_ne!(sent[0].id, rescinded[0].id, "under a new id");
            assert_eq!(
                sent[0].framework_id, fw2,
                "not to the framework that let it expire"
            );
            // fw-2 lets it expire too; fw-1's filter has ended: it is offered the agent again.
            let (sent, rescinded) = offers.cycle(&state, |_| true, 2_000);
            assert_eq!(rescinded.len(), 1);
            assert_eq!(sent.len(), 1);
            assert_eq!(sent[0].framework_id, fw1);
            let (_, rescinded) = offers.cycle(&state, |_| false, 2_002);
            assert_eq!(rescinded.len(), 1, "the framework lost its session");
        }

        /// An absent framework's demand does not hold agents: under the κ·C gate its deprived
        /// group would otherwise be the only candidate until its failover timeout.
        #[test]
        fn frameworks_without_a_session_do_not_hold_the_cluster() {
            let mut state = cluster();
            // fw-1 alone in group "absent"; fw-2 in "default".
            state
                .apply(&crate::state::Command::SetGroup(
                    fullerene_proto::messages::GroupPlacement {
                        group: "absent".to_string(),
                        weight: None,
                        principals: vec!["framework-3".to_string()],
                    },
                ))
                .expect("group");
            state
                .apply(&subscribe_framework(
                    "fw-3",
                    "framework-3",
                    "fw-3",
                    "absent",
                    60_000,
                    0,
                ))
                .expect("framework");
            let fw2 = FrameworkId::from("fw-2");
            let fw3 = FrameworkId::from("fw-3");
            // fw-2 (group "default") holds half the cluster: group "absent" is deprived
            // past κ·C, so the gate makes its frameworks the only candidates.
            state
                .apply(&launch_tasks(
                    "fw-2",
                    "framework-1",
                    "agent-1",
                    vec![task("held", "cpus=2,mem_mib=512")],
                    0,
                ))
                .expect("launched");
            let mut offers = OfferManager::new(state.settings(), 1, 2, 1_000).expect("manager");
            offers
                .update_demand(&state, &fw3, &demand(8))
                .expect("demand");
            offers
                .update_demand(&state, &fw2, &demand(2))
                .expect("demand");
            let present = |f: &FrameworkId| f.as_str() != "fw-3";
            let (sent, _) = offers.cycle(&state, present, 0);
            assert!(
                sent.iter().any(|o| o.framework_id == fw2),
                "the connected framework got nothing while fw-3 is away: {sent:?}"
            );
            // fw-3 comes back: its demand counts again, and the gate gives it the agent.
            let (sent, rescinded) = offers.cycle(&state, |_| true, 1_000);
            assert!(!rescinded.is_empty(), "fw-2's offer expired");
            assert!(
                sent.iter().any(|o| o.framework_id == fw3),
                "the returning framework is offered again: {sent:?}"
            );
        }

        #[test]
        fn a_yield_is_reoffered_to_another_framework_with_demand() {
            let state = cluster();
            let fw1 = FrameworkId::from("fw-1");
            let fw2 = FrameworkId::from("fw-2");
            let mut offers = OfferManager::new(state.settings(), 1, 2, 1_000).expect("manager");
            offers
                .update_demand(&state, &fw1, &demand(3))
                .expect("demand");
            let (sent, _) = offers.cycle(&state, |_| true, 0);
            let offer = sent.into_iter().next().expect("an offer");
            // The yield goes to the least remaining work (Carbyne §3.3.4): fw-2's.
            offers
                .update_demand(&state, &fw2, &demand(1))
                .expect("demand");
            let reoffers = offers
                .give_back(&state, &fw1, &[offer.id], Leftover::Yield, 1)
                .expect("yielded");
            assert!(
                reoffers.iter().any(|o| o.framework_id == fw2),
                "the yield went to {reoffers:?}"
            );
        }
    }
}
