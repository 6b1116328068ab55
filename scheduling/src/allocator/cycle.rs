//! Shards planned concurrently and committed in order, in the shared-state style of Omega
//! (Schwarzkopf et al., EuroSys'13, §3.4): a cycle takes a snapshot of what the shards read
//! ([`Allocator::snapshot_cycle`]), each shard plans its agents from it alone
//! ([`CycleSnapshot::plan_shard`], `&self`, on any thread), and a sequential commit replays the
//! plans against the live state in a fixed order, dropping the picks that conflict
//! ([`Allocator::commit_cycle`]).
//!
//! Omega's schedulers each see the whole cell and race for its machines; here the shards own
//! disjoint agents and would race for the frameworks' pending tasks instead: planned from one
//! snapshot, every shard would place the same best tasks on its own agents, and N shards would
//! do N times the work of one for the same offers. So each framework's projected pending tasks
//! are divided among the shards in proportion to their free resources (only among shards with
//! an agent that could hold one; the remainder rotates with the cycle, so a task no shard takes
//! now goes to another shard next time): a shard plans at most its part of each framework's
//! tasks, of whichever shapes. With one shard nothing is divided and the plan is exactly the
//! sequential cycle's.

use super::matching::Parts;
use super::policies::{AgentView, Choice, CycleIndex, Exclusions};
use super::*;

/// What one allocation cycle's shards read, taken at its start ([`Allocator::snapshot_cycle`]):
/// the frameworks' projected pending work (divided among the shards), their offered resources,
/// the groups' deficits, in-flight charges and offered resources (so the κ·C gate), η, the
/// runnable groups and totals, and each shard's agents (in visiting order) with their unoffered
/// free resources, totals and exclusions; paused agents and agents with nothing that could fit
/// are left out. It owns all of it (no borrow of the allocator or the state), so it can be sent
/// to and shared by planner threads.
#[derive(Debug)]
pub struct CycleSnapshot {
    /// The allocator's cycle counter when the snapshot was taken.
    cycle: u64,
    /// The allocator's soft state of frameworks and groups, without agents: each shard plans on
    /// a copy of it.
    planner: Allocator,
    /// The replicated state's frameworks, groups, deficits and totals, without agents.
    state: AllocationState,
    /// The candidate index over the whole projected pending work.
    index: CycleIndex,
    shards: Vec<ShardAgents>,
}

/// The agents of one shard in a snapshot.
#[derive(Clone, Debug)]
struct ShardAgents {
    shard: usize,
    agents: Vec<AgentSnapshot>,
    /// Component-wise maximum of what its agents could take: a shape that does not fit it fits
    /// none of them.
    reach: ResourceVec,
    /// Its agents' unoffered free resources, each kind as a fraction of the cluster, summed:
    /// its part of a pending shape's count is in proportion.
    weight: f64,
}

/// One agent as its shard's planner sees it.
#[derive(Clone, Debug)]
struct AgentSnapshot {
    slot: AgentIdx,
    generation: u64,
    free: ResourceVec,
    total: ResourceVec,
    exclusions: Exclusions,
}

/// What one shard planned from a [`CycleSnapshot`]: for each of its agents in visiting order,
/// the tasks picked there (or, with [`AgentMatching::WholeAgent`], the one framework chosen).
/// Agents and frameworks are named by slot together with a generation (the agent's placement,
/// the framework's registration number), so that a commit after slots were freed and reused
/// never applies a pick to another agent or framework.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardPlan {
    cycle: u64,
    shard: usize,
    agents: Vec<AgentPlan>,
}

impl ShardPlan {
    /// The shard planned.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// Number of picks planned (tasks under task-at-a-time matching, offers under whole-agent
    /// matching).
    pub fn picks(&self) -> usize {
        self.agents.iter().map(|a| a.picks.len()).sum()
    }
}

#[derive(Clone, Debug, PartialEq)]
struct AgentPlan {
    slot: AgentIdx,
    generation: u64,
    /// The unoffered free resources it was planned for.
    free: ResourceVec,
    picks: Vec<Pick>,
    /// What the policy observed for the estimators while planning it, in order.
    observations: Vec<Observation>,
}

#[derive(Clone, Debug, PartialEq)]
struct Pick {
    framework: FrameworkIdx,
    registration: u64,
    /// The shape's index in the framework's summary at planning time, and its demand (a commit
    /// after the summary changed looks the shape up by demand).
    shape: usize,
    demand: ResourceVec,
    /// Whether the task fits only by overbooking fungible resources.
    overbook: bool,
    /// Under whole-agent matching: the policy's choice and what may be offered.
    whole_agent: Option<(Choice, ResourceVec)>,
    /// Picked by the reservation-guarantee tier (module `guarantees`): committed ahead of the
    /// κ·C gate and a capacity queue's maximum while the framework is still owed something,
    /// dropped once it is not (every shard plans from the whole amount owed).
    guaranteed: bool,
}

/// What a commit did: the offers made and how many planned picks were committed or dropped,
/// and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleOutcome {
    /// The offers, in commit order (shard, then the shard's visiting order).
    pub offers: Vec<OfferDecision>,
    /// Planned, committed and dropped picks.
    pub stats: CycleStats,
}

/// Counts of planned picks (tasks under task-at-a-time matching, offers under whole-agent
/// matching) by what the commit did with them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Picks the shards planned.
    pub planned: u64,
    /// Picks committed (offered).
    pub committed: u64,
    /// Dropped: the pending task was no longer there (another shard's pick, or a leftover
    /// offer, took it first, or the framework's summary changed).
    pub task_taken: u64,
    /// Dropped: the pick would have crossed the κ·C bound (the gate was closed to its group
    /// when it came to be committed) or a capacity-scheduler queue's maximum.
    pub fairness_bound: u64,
    /// Dropped: the agent's unoffered free resources changed since the snapshot (an offer
    /// answered or rescinded, a launch charged), or it was paused, removed or replaced.
    pub agent_changed: u64,
    /// Dropped: the framework was removed (its slot possibly reused), suppressed, left without
    /// demand, or now refuses the agent.
    pub framework_changed: u64,
    /// Dropped: a pick of the reservation-guarantee tier for a framework that earlier picks of
    /// the commit had already given all it was owed (each shard plans from the whole amount).
    pub guarantee_spent: u64,
    /// Tasks (offers, under whole-agent matching) picked at commit for agents whose planned
    /// picks were dropped while the κ·C gate was closed, or whose reservation-guarantee picks
    /// came after the framework had been given its amount (matched again at once against the
    /// live projection).
    pub rematched: u64,
}

impl CycleStats {
    /// Picks dropped, for any reason.
    pub fn dropped(&self) -> u64 {
        self.task_taken
            + self.fairness_bound
            + self.agent_changed
            + self.framework_changed
            + self.guarantee_spent
    }

    /// Adds another cycle's counts.
    pub fn add(&mut self, other: &CycleStats) {
        self.planned += other.planned;
        self.committed += other.committed;
        self.task_taken += other.task_taken;
        self.fairness_bound += other.fairness_bound;
        self.agent_changed += other.agent_changed;
        self.framework_changed += other.framework_changed;
        self.guarantee_spent += other.guarantee_spent;
        self.rematched += other.rematched;
    }
}

impl CycleSnapshot {
    /// Number of shards in the snapshot; [`CycleSnapshot::plan_shard`] takes `0..shard_count()`.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Plans the `position`-th shard of the snapshot (the shard of that index when the
    /// snapshot covers every shard): its agents in visiting order, each filled under the
    /// configured policy from the snapshot and the shard's own earlier picks only. Pure: it
    /// reads the snapshot alone, so any thread may run it, in any order, and it returns the
    /// same plan. A position past the last shard plans nothing.
    pub fn plan_shard(&self, position: usize) -> ShardPlan {
        let Some(shard) = self.shards.get(position) else {
            return ShardPlan {
                cycle: self.cycle,
                shard: position,
                agents: Vec::new(),
            };
        };
        let mut planner = self.planner.planning_copy();
        let mut index = if self.shards.len() > 1 {
            planner.take_quota(&self.state, &self.shards, position, self.cycle);
            planner.index_with(
                &self.state,
                self.index.srpt_weight,
                self.index.runnable.clone(),
            )
        } else {
            self.index.clone()
        };
        let overbook = matches!(
            planner.config.policy,
            InterJobPolicy::DeficitCounters { .. }
        );
        let mut agents = Vec::new();
        for agent in &shard.agents {
            if !planner.could_fit_any(&index, &agent.free, &agent.total, overbook) {
                continue;
            }
            let exclusions = &agent.exclusions;
            let picks: Vec<Pick> = match planner.config.matching {
                AgentMatching::TaskAtATime => {
                    let mut parts = Parts::default();
                    let picks = planner.plan_agent(
                        &self.state,
                        agent.free,
                        agent.total,
                        exclusions,
                        &mut index,
                        &mut parts,
                    );
                    planner.settle_parts(agent.free, parts);
                    picks
                        .into_iter()
                        .filter_map(|p| {
                            planner
                                .pick(&self.state, p.framework, p.shape, p.overbook, None)
                                .map(|pick| Pick {
                                    guaranteed: p.guaranteed,
                                    ..pick
                                })
                        })
                        .collect()
                }
                AgentMatching::WholeAgent => {
                    let view = AgentView::new(agent.free, agent.total);
                    planner
                        .plan_whole_agent(&self.state, &view, exclusions, &mut index)
                        .and_then(|chosen| {
                            let choice = chosen.choice;
                            planner
                                .pick(
                                    &self.state,
                                    choice.framework,
                                    choice.shape,
                                    choice.overbook,
                                    Some((choice, chosen.limit)),
                                )
                                .map(|pick| Pick {
                                    guaranteed: chosen.guaranteed,
                                    ..pick
                                })
                        })
                        .into_iter()
                        .collect()
                }
            };
            let observations = std::mem::take(&mut planner.observations);
            if picks.is_empty() && observations.is_empty() {
                continue;
            }
            agents.push(AgentPlan {
                slot: agent.slot,
                generation: agent.generation,
                free: agent.free,
                picks,
                observations,
            });
        }
        ShardPlan {
            cycle: self.cycle,
            shard: shard.shard,
            agents,
        }
    }

    /// Plans every shard, one after the other on this thread.
    pub fn plan_all(&self) -> Vec<ShardPlan> {
        (0..self.shard_count())
            .map(|s| self.plan_shard(s))
            .collect()
    }
}

impl Allocator {
    /// Starts a cycle of every shard at `now_s`: returns what the shards read, owned
    /// ([`CycleSnapshot`]), for [`CycleSnapshot::plan_shard`] to plan on any thread. Starting a
    /// cycle moves each shard's visiting rotation on, forgets expired decline filters and the
    /// yields of the previous cycle, and fixes η for the cycle.
    pub fn snapshot_cycle(&mut self, state: &AllocationState, now_s: f64) -> CycleSnapshot {
        self.snapshot_shards(state, now_s, 0..self.shards.len(), None)
    }

    /// A cycle over at most `max_agents` agents with room (split evenly over the shards, at
    /// least one each), for a master that must have offers out soon rather than offers on
    /// every agent: a new leader, whose first full cycle over 10,000 agents took 0.7–0.9 s
    /// on the project's machine while every framework waited for its first offer. Each shard's
    /// rotation moves past the agents it looked at, so successive partial cycles cover all.
    /// Otherwise as [`Allocator::snapshot_cycle`].
    pub fn snapshot_partial_cycle(
        &mut self,
        state: &AllocationState,
        now_s: f64,
        max_agents: usize,
    ) -> CycleSnapshot {
        let per_shard = max_agents.div_ceil(self.shards.len().max(1)).max(1);
        self.snapshot_shards(state, now_s, 0..self.shards.len(), Some(per_shard))
    }

    /// Commits the plans of a snapshot against `state` and the soft state as they are now,
    /// which may have moved on since the snapshot (offers answered or rescinded, launches
    /// charged, summaries replaced, agents or frameworks removed and their slots reused).
    /// Plans are replayed in shard order, each in its visiting order, pick by pick, into the
    /// live projection; a pick is dropped when its agent is no longer the one planned for
    /// (removed, replaced in its slot, paused) or its unoffered free resources changed, when
    /// its framework is gone (or its slot holds another), suppressed, or refuses the agent now,
    /// when the framework's projected count of that shape is exhausted (another shard, or a
    /// leftover offer, took the task), and when the κ·C gate is closed to its group (another
    /// runnable group's projected deficit is at or above κ·C and the highest: the same rule
    /// that a sequential cycle checks before every task, so no group's deficit passes κ·C by
    /// more than one task's factor) or it would pass its capacity-scheduler queue's maximum.
    /// Each agent's committed picks are offered per framework, as in a sequential cycle. An
    /// agent left with room by dropped picks waits for the next cycle. Deterministic: the same
    /// plans against the same state give the same offers, in whatever order the plans are
    /// passed.
    pub fn commit_cycle(
        &mut self,
        state: &AllocationState,
        mut plans: Vec<ShardPlan>,
        now_s: f64,
    ) -> CycleOutcome {
        self.sync(state);
        plans.sort_by_key(|p| p.shard);
        let runnable = self.runnable_groups(state);
        let mut outcome = CycleOutcome::default();
        let mut live_index = None;
        for plan in plans {
            for agent in plan.agents {
                self.commit_agent(
                    state,
                    agent,
                    &runnable,
                    now_s,
                    &mut live_index,
                    &mut outcome,
                );
            }
        }
        outcome
    }

    /// Runs one cycle of every shard at `now_s`: a snapshot, the shards planned by `plan` (which
    /// may run [`CycleSnapshot::plan_shard`] on threads of its own, e.g. with
    /// `std::thread::scope`), and the commit of what it returns.
    pub fn allocate_all_with(
        &mut self,
        state: &AllocationState,
        now_s: f64,
        plan: impl FnOnce(&CycleSnapshot) -> Vec<ShardPlan>,
    ) -> CycleOutcome {
        let snapshot = self.snapshot_cycle(state, now_s);
        let plans = plan(&snapshot);
        self.commit_cycle(state, plans, now_s)
    }

    /// A snapshot of the shards in `shards` (see [`Allocator::snapshot_cycle`]).
    pub(super) fn snapshot_shards(
        &mut self,
        state: &AllocationState,
        now_s: f64,
        shards: std::ops::Range<usize>,
        per_shard: Option<usize>,
    ) -> CycleSnapshot {
        self.sync(state);
        self.begin_cycle();
        self.begin_guarantees(state);
        let index = self.build_index(state);
        let overbook = matches!(self.config.policy, InterJobPolicy::DeficitCounters { .. });
        self.wake_idle_agents(&index, overbook, false);
        let allowance = Overbooking(self.config.overbook_allowance);
        let capacity = state.capacity();
        let mut planned = Vec::with_capacity(shards.len());
        for shard in shards {
            let mut agents = Vec::new();
            let mut reach = ResourceVec::ZERO;
            let mut weight = 0.0;
            for (looked_at, a) in self.visiting_order(shard, false).into_iter().enumerate() {
                if per_shard.is_some_and(|cap| agents.len() >= cap) {
                    // The next cycle starts where this one stopped.
                    self.shard_cycles[shard] += (looked_at as u64).saturating_sub(1);
                    break;
                }
                let Some(agent) = self.cycle_agent(state, a, now_s, &index, overbook, false) else {
                    continue;
                };
                let room = if overbook {
                    allowance.room_bound(&agent.free, &agent.total)
                } else {
                    agent.free
                };
                reach = reach.max(&room);
                weight += agent.free.normalized_by(&capacity).sum();
                agents.push(agent);
            }
            planned.push(ShardAgents {
                shard,
                agents,
                reach,
                weight,
            });
        }
        CycleSnapshot {
            cycle: self.cycle,
            planner: self.planning_copy(),
            state: state.without_agents(),
            index,
            shards: planned,
        }
    }

    /// Shard `shard`'s agents in this cycle's visiting order (slot order, starting one agent
    /// further each cycle), moving the rotation on; without the parked agents, and without the
    /// parked misfits too when `in_place` (module `idle`).
    fn visiting_order(&mut self, shard: usize, in_place: bool) -> Vec<AgentIdx> {
        let agents = &self.shards[shard];
        let n = agents.len();
        if n == 0 {
            return Vec::new();
        }
        let start = (self.shard_cycles[shard] % n as u64) as usize;
        self.shard_cycles[shard] += 1;
        let idle = &self.idle;
        if idle.asleep(in_place) * 2 < self.agents.len() {
            return agents[start..]
                .iter()
                .chain(&agents[..start])
                .copied()
                .filter(|&a| !(idle.is_parked(a) || (in_place && idle.is_misfit(a))))
                .collect();
        }
        // Most agents are parked: the same order from the awake slots alone. A shard's agents
        // are in slot order, so its rotation is its awake slots from its `start`-th agent's
        // on, then those before it.
        let pivot = agents[start].get();
        let soft = &self.agents;
        let in_shard = |slot: usize| soft[slot].placed.is_some() && soft[slot].shard == shard;
        let mut order = Vec::new();
        idle.awake_slots(pivot..soft.len(), in_place, in_shard, &mut order);
        idle.awake_slots(0..pivot, in_place, in_shard, &mut order);
        order
    }

    /// Wakes the parked agents that could hold this cycle's smallest pending shape, and when
    /// the cycle makes its offers `in_place` the misfits one of its shapes may fit (module
    /// `idle`).
    fn wake_idle_agents(&mut self, index: &CycleIndex, overbook: bool, in_place: bool) {
        let mut idle = std::mem::take(&mut self.idle);
        idle.begin_cycle(&index.min_demand, |free, total| {
            self.could_fit_any(index, free, total, overbook)
        });
        if in_place {
            idle.begin_misfits(index.cover.shapes());
        }
        self.idle = idle;
    }

    /// Starts agent `a`'s turn in a cycle (its yields of the last cycle and expired filters
    /// forgotten) and returns what its planner needs, or `None` when it is paused or has
    /// nothing free that the smallest pending shape could use; in a cycle that makes its
    /// offers `in_place`, also when no pending shape fits it (it is parked as a misfit, module
    /// `idle`) or the cycle's offers have taken every pending task (nothing is left to pick).
    fn cycle_agent(
        &mut self,
        state: &AllocationState,
        a: AgentIdx,
        now_s: f64,
        index: &CycleIndex,
        overbook: bool,
        in_place: bool,
    ) -> Option<AgentSnapshot> {
        let soft = &mut self.agents[a.get()];
        soft.yielders.clear();
        soft.leftover_pooled = false;
        soft.filters.retain(|(_, until)| *until > now_s);
        if soft.paused {
            return None;
        }
        let generation = soft.generation;
        let free = self.unoffered_free(state, a);
        if free.is_zero() {
            self.idle.park_empty(a);
            return None;
        }
        let total = state.agent(a)?.total;
        if !self.could_fit_any(index, &free, &total, overbook) {
            self.idle.park_too_small(a, free, total, &index.min_demand);
            return None;
        }
        if in_place && !self.plain_scan {
            let room = if overbook {
                Overbooking(self.config.overbook_allowance).room_bound(&free, &total)
            } else {
                free
            };
            if !index.cover.fits_in(&room) {
                self.idle.park_misfit(a, room, index.cover.shapes());
                return None;
            }
            debug_assert_eq!(
                index.listed,
                index
                    .lists
                    .iter()
                    .map(std::collections::BTreeSet::len)
                    .sum::<usize>()
            );
            if index.listed == 0 {
                return None;
            }
        }
        Some(AgentSnapshot {
            slot: a,
            generation,
            free,
            total,
            exclusions: self.exclusions(state, a, now_s, false),
        })
    }

    /// A copy of the soft state of frameworks and groups a planner works on (no agents, no
    /// shards).
    fn planning_copy(&self) -> Allocator {
        Allocator {
            config: self.config.clone(),
            synced: self.synced,
            agents: Vec::new(),
            frameworks: self.frameworks.clone(),
            groups: self.groups.clone(),
            shards: Vec::new(),
            shard_cycles: Vec::new(),
            idle: Default::default(),
            next_generation: self.next_generation,
            observations: Vec::new(),
            gate_scratch: Vec::new(),
            tree_scratch: Vec::new(),
            tree_places: Vec::new(),
            tree_findings: Default::default(),
            plain_scan: self.plain_scan,
            #[cfg(test)]
            replayed_picks: 0,
            #[cfg(test)]
            scored_candidates: 0,
            cycle: self.cycle,
            inflight_total: self.inflight_total,
            eta: self.eta.clone(),
            epsilon: self.epsilon.clone(),
            capacity_classes: self.capacity_classes.clone(),
            cycle_eta: self.cycle_eta,
            cycle_srpt_weight: self.cycle_srpt_weight,
            demand_epoch: self.demand_epoch,
            shares: None,
            guarantees: self.guarantees.clone(),
            guarantee_active: self.guarantee_active,
        }
    }

    /// Cuts each framework's projected pending work to the part shard `position` may take
    /// this cycle (see the module documentation): the framework's tasks are divided among the
    /// shards with an agent that could hold one of them, in proportion to their weights,
    /// floored, and the remainder goes one task each to the next such shards in a rotation that
    /// moves on with the cycle and the framework. The shapes' counts stay whole, so a planner
    /// charges a framework's picks to its first fitting shapes as the commit will.
    fn take_quota(
        &mut self,
        state: &AllocationState,
        shards: &[ShardAgents],
        position: usize,
        cycle: u64,
    ) {
        for (f, _) in state.frameworks() {
            let soft = &mut self.frameworks[f.get()];
            if !soft.counted || soft.cycle_stamp != cycle || soft.cycle_pending == 0 {
                continue;
            }
            let pending = u32::try_from(soft.cycle_pending).unwrap_or(u32::MAX);
            let rotation = cycle.wrapping_add(f.get() as u64);
            let quota = shard_quota(pending, &soft.cycle_min, shards, position, rotation);
            soft.cycle_pending = u64::from(quota);
        }
    }

    /// A planned pick of `f`'s `shape`, named robustly.
    fn pick(
        &self,
        state: &AllocationState,
        f: FrameworkIdx,
        shape: usize,
        overbook: bool,
        whole_agent: Option<(Choice, ResourceVec)>,
    ) -> Option<Pick> {
        let demand = self.frameworks[f.get()].demand.shapes.get(shape)?.demand;
        Some(Pick {
            framework: f,
            registration: state.framework(f)?.registration,
            shape,
            demand,
            overbook,
            whole_agent,
            guaranteed: false,
        })
    }

    /// Feeds an observation made while planning to its estimator.
    fn observe(&mut self, observation: Observation) {
        match observation {
            Observation::Eta { p_score, work } => self.eta.observe(p_score, work),
            Observation::Epsilon { p_score, work } => self.epsilon.observe(p_score, work),
        }
    }

    /// Commits one agent's plan (see [`Allocator::commit_cycle`]). `live_index` is the
    /// candidate index of the live projection, built by the first rematch.
    fn commit_agent(
        &mut self,
        state: &AllocationState,
        plan: AgentPlan,
        runnable: &[bool],
        now_s: f64,
        live_index: &mut Option<CycleIndex>,
        outcome: &mut CycleOutcome,
    ) {
        for observation in &plan.observations {
            self.observe(*observation);
        }
        let stats = &mut outcome.stats;
        let planned = plan.picks.len() as u64;
        stats.planned += planned;
        let a = plan.slot;
        let same_agent = self.agents.get(a.get()).is_some_and(|soft| {
            soft.generation == plan.generation && soft.placed.is_some() && !soft.paused
        });
        let free = self.unoffered_free(state, a);
        if !same_agent || !state::same_amounts(&free, &plan.free) {
            stats.agent_changed += planned;
            return;
        }
        let Some(total) = state.agent(a).map(|r| r.total) else {
            stats.agent_changed += planned;
            return;
        };
        let exclusions = self.exclusions(state, a, now_s, false);
        let allowance = Overbooking(self.config.overbook_allowance);
        // What is left of the agent after the picks committed so far: below zero on a fungible
        // kind once a pick overbooked it, as while planning.
        let mut available = free;
        let mut parts = Parts::default();
        let dropped_before = outcome.stats.dropped();
        let spent_before = outcome.stats.guarantee_spent;
        for pick in plan.picks {
            let f = pick.framework;
            let Some(group) = state
                .framework(f)
                .filter(|r| r.registration == pick.registration)
                .map(|r| r.group)
                .filter(|_| self.frameworks[f.get()].counted && !exclusions.contains(f))
            else {
                outcome.stats.framework_changed += 1;
                continue;
            };
            if pick.guaranteed && !self.still_owed(f) {
                outcome.stats.guarantee_spent += 1;
                continue;
            }
            if !pick.guaranteed && self.gate_closed(state, group, runnable, exclusions.refusing()) {
                outcome.stats.fairness_bound += 1;
                continue;
            }
            let mut room = available.max(&ResourceVec::ZERO);
            if let Some(queue) = self.queue_room(state, group).filter(|_| !pick.guaranteed) {
                room = room.min(&queue);
            }
            let overbook = pick.overbook;
            let shape = if overbook {
                // Overbooking picks are charged as chosen.
                self.live_shape(f, &pick)
            } else {
                // The task charged is the one the framework launches first from its part: its
                // first pending shape in summary order that fits what is left, as the planner
                // charged it from its own projection (the two differ where the shard's part of
                // the pending work left out a shape another shard planned).
                self.first_fitting_shape(f, &room)
            };
            let Some(shape) = shape else {
                outcome.stats.task_taken += 1;
                continue;
            };
            let demand = self.frameworks[f.get()].demand.shapes[shape].demand;
            let admissible = match (pick.whole_agent, overbook) {
                // A whole-agent offer is what is free (the choice fitted it or overbooked it
                // within the allowance).
                (Some(_), _) => true,
                (None, true) => allowance.admits(&(total - available + demand), &total),
                (None, false) => fits(&demand, &room),
            };
            if !admissible {
                outcome.stats.agent_changed += 1;
                continue;
            }
            outcome.stats.committed += 1;
            match pick.whole_agent {
                None => {
                    let exhausted = self.take_one(state, f, shape, pick.guaranteed, &mut parts);
                    available -= demand;
                    if let Some(index) = live_index {
                        if exhausted || matches!(self.config.policy, InterJobPolicy::Drf) {
                            self.relist(state, index, f);
                        }
                    }
                }
                Some((choice, limit)) => {
                    let headroom = if pick.guaranteed {
                        f64::INFINITY
                    } else {
                        self.offer_headroom(state, f, runnable)
                    };
                    let choice = Choice { shape, ..choice };
                    let offer = self.make_offer(
                        state,
                        a,
                        choice,
                        limit,
                        headroom,
                        OfferKind::Regular,
                        pick.guaranteed,
                        live_index.as_mut(),
                    );
                    outcome.offers.push(offer);
                }
            }
        }
        let guarantee_dropped = outcome.stats.guarantee_spent > spent_before;
        let rematch = outcome.stats.dropped() > dropped_before
            && self.config.matching == AgentMatching::TaskAtATime
            && (guarantee_dropped
                || self.gate_closed_somewhere(state, runnable, exclusions.refusing()));
        if guarantee_dropped && self.config.matching == AgentMatching::WholeAgent {
            // Every shard planned from the whole amount owed, so an agent whose guaranteed
            // pick came after the amount was given goes to the policy's choice now rather
            // than idling a cycle.
            let index = live_index.get_or_insert_with(|| {
                self.index_with(state, self.cycle_srpt_weight, runnable.to_vec())
            });
            let view = AgentView::new(free, total);
            if let Some(chosen) = self.choose_whole_agent(state, &view, &exclusions, index) {
                let f = chosen.choice.framework;
                let headroom = if chosen.guaranteed {
                    f64::INFINITY
                } else {
                    self.offer_headroom(state, f, runnable)
                };
                let offer = self.make_offer(
                    state,
                    a,
                    chosen.choice,
                    chosen.limit,
                    headroom,
                    OfferKind::Regular,
                    chosen.guaranteed,
                    Some(index),
                );
                outcome.offers.push(offer);
                outcome.stats.rematched += 1;
            }
            for observation in std::mem::take(&mut self.observations) {
                self.observe(observation);
            }
        }
        if rematch {
            // The most deprived group is at κ·C, and this agent's planned picks for others were
            // dropped: as in a sequential cycle, what is left of it goes to that group now
            // rather than idling while the group stays past the bound.
            let index = live_index.get_or_insert_with(|| {
                self.index_with(state, self.cycle_srpt_weight, runnable.to_vec())
            });
            let picks = self.plan_agent(state, available, total, &exclusions, index, &mut parts);
            for observation in std::mem::take(&mut self.observations) {
                self.observe(observation);
            }
            outcome.stats.rematched += picks.len() as u64;
        }
        self.offer_parts(
            state,
            a,
            free,
            parts,
            OfferKind::Regular,
            &mut outcome.offers,
        );
    }

    /// Whether the κ·C gate is closed (under the deficit counters): the most deprived group
    /// taking part in it for this agent is at or above κ·C.
    fn gate_closed_somewhere(
        &self,
        state: &AllocationState,
        runnable: &[bool],
        refusing: &[u32],
    ) -> bool {
        let InterJobPolicy::DeficitCounters { kappa, .. } = self.config.policy else {
            return false;
        };
        let threshold = kappa * state.capacity_units();
        self.gate_leader(state, runnable, refusing)
            .is_some_and(|(_, deficit)| deficit >= threshold)
    }

    /// The index of the shape a pick names in `f`'s summary as it is now (by demand, should the
    /// summary have changed), if the live projection still has a task of it.
    fn live_shape(&mut self, f: FrameworkIdx, pick: &Pick) -> Option<usize> {
        let soft = self.cycle_counts(f);
        let same = |s: usize| {
            soft.demand
                .shapes
                .get(s)
                .is_some_and(|shape| state::same_amounts(&shape.demand, &pick.demand))
                && soft.cycle_counts[s] > 0
        };
        if same(pick.shape) {
            Some(pick.shape)
        } else {
            (0..soft.demand.shapes.len()).find(|&s| same(s))
        }
    }

    /// Whether the κ·C gate (under the deficit counters) is closed to `group` now.
    fn gate_closed(
        &self,
        state: &AllocationState,
        group: GroupIdx,
        runnable: &[bool],
        refusing: &[u32],
    ) -> bool {
        match self.config.policy {
            InterJobPolicy::DeficitCounters { kappa, .. } => {
                let threshold = kappa * state.capacity_units();
                self.gate_closed_against(state, group, threshold, runnable, refusing)
            }
            _ => false,
        }
    }

    /// Under the capacity scheduler, what `group`'s queue may still take below its maximum
    /// (what [`Allocator::choose`] limits a pick to).
    fn queue_room(&self, state: &AllocationState, group: GroupIdx) -> Option<ResourceVec> {
        let InterJobPolicy::CapacityScheduler { max_capacity } = self.config.policy else {
            return None;
        };
        let offered = self
            .groups
            .get(group.get())
            .map_or(ResourceVec::ZERO, |g| g.offered);
        let used = state.group_held(group) + offered;
        Some(state.capacity().scale(max_capacity).saturating_sub(&used))
    }
}
/// Shard `position`'s part of `count` pending tasks whose smallest shape is `demand` (see
/// [`Allocator::take_quota`]). Every shard computes every shard's part the same way, so the
/// parts add up to `count` without the shards talking to each other.
fn shard_quota(
    count: u32,
    demand: &ResourceVec,
    shards: &[ShardAgents],
    position: usize,
    rotation: u64,
) -> u32 {
    let holds = |shard: &ShardAgents| fits(demand, &shard.reach);
    let mut holders = shards.iter().filter(|s| holds(s)).count();
    // No shard's agents could hold it now: any division is as good, so divide evenly.
    let everyone = holders == 0;
    if everyone {
        holders = shards.len();
    }
    let eligible = |shard: &ShardAgents| everyone || holds(shard);
    let Some(mine) = shards.get(position).filter(|s| eligible(s)) else {
        return 0;
    };
    let total_weight: f64 = shards
        .iter()
        .filter(|s| eligible(s))
        .map(|s| s.weight)
        .sum();
    let weight = |shard: &ShardAgents| {
        if total_weight > 0.0 {
            shard.weight / total_weight
        } else {
            1.0 / holders as f64
        }
    };
    let base = |shard: &ShardAgents| ((f64::from(count) * weight(shard)).floor() as u32).min(count);
    let assigned: u32 = shards
        .iter()
        .filter(|s| eligible(s))
        .map(base)
        .fold(0u32, u32::saturating_add);
    let remainder = count.saturating_sub(assigned) as usize;
    let rank = shards[..position].iter().filter(|s| eligible(s)).count();
    let first = (rotation % holders as u64) as usize;
    let extra = (rank + holders - first) % holders < remainder;
    base(mine) + u32::from(extra)
}

impl Allocator {
    /// A cycle of the shards in `shards` in place: one after the other, each pick charged at
    /// once to the live projection, with no snapshot to copy and no plan to replay. For one
    /// shard it makes exactly the offers of a snapshot, plan and commit (the tests compare
    /// them), so the cycles that plan a single shard on the caller's thread run it.
    pub(super) fn allocate_in_place(
        &mut self,
        state: &AllocationState,
        now_s: f64,
        shards: std::ops::Range<usize>,
    ) -> Vec<OfferDecision> {
        self.sync(state);
        self.begin_cycle();
        self.begin_guarantees(state);
        let mut index = self.build_index(state);
        let overbook = matches!(self.config.policy, InterJobPolicy::DeficitCounters { .. });
        self.wake_idle_agents(&index, overbook, true);
        let mut out = Vec::new();
        for shard in shards {
            for a in self.visiting_order(shard, true) {
                let Some(agent) = self.cycle_agent(state, a, now_s, &index, overbook, true) else {
                    continue;
                };
                let exclusions = agent.exclusions;
                match self.config.matching {
                    AgentMatching::TaskAtATime => {
                        let mut parts = Parts::default();
                        self.plan_agent(
                            state,
                            agent.free,
                            agent.total,
                            &exclusions,
                            &mut index,
                            &mut parts,
                        );
                        self.offer_parts(state, a, agent.free, parts, OfferKind::Regular, &mut out);
                    }
                    AgentMatching::WholeAgent => {
                        let view = AgentView::new(agent.free, agent.total);
                        if let Some(chosen) =
                            self.choose_whole_agent(state, &view, &exclusions, &mut index)
                        {
                            let f = chosen.choice.framework;
                            let headroom = if chosen.guaranteed {
                                f64::INFINITY
                            } else {
                                self.offer_headroom(state, f, &index.runnable)
                            };
                            out.push(self.make_offer(
                                state,
                                a,
                                chosen.choice,
                                chosen.limit,
                                headroom,
                                OfferKind::Regular,
                                chosen.guaranteed,
                                Some(&mut index),
                            ));
                        }
                    }
                }
                for observation in std::mem::take(&mut self.observations) {
                    self.observe(observation);
                }
            }
        }
        out
    }
}
