//! The inter-job rankers and the allocation cycle that applies them.
//!
//! Each policy answers one question per agent: which framework, if any, is offered its free
//! resources. To stay fast at 10,000 agents × 1,000 frameworks, no policy scores every framework
//! against every agent:
//!
//! - the score-based policies (deficit counters, Tetris) keep candidates sorted by an upper bound
//!   of their score valid for every agent (the packing score `Σ_k free_k/cap_k · d_k/cap_k` is at
//!   most `Σ_k d_k / min_cap_k`), and stop scanning once the bound falls below the best score
//!   found; on an idle agent the first candidate that fits is the answer;
//! - the order-based policies (FIFO, SJF, capacity scheduler, DRF) scan candidates in their order
//!   and stop at the first one with a shape that fits;
//! - the deficit-counter policy scans group by group, most deprived first, and stops at the most
//!   deprived group with work that fits when the gate is closed;
//! - frameworks whose pending work the cycle has already offered for are skipped, and an agent
//!   that cannot hold even the smallest pending shape is skipped outright.

use std::collections::BTreeSet;

use super::idle::Cover;
use super::memo::{tie_margin, GateFilter, MemoCursor, PickMemo, Rivals};
use super::score_tree::{ScoreTree, TreeFrontier, TreeLeaves};
use super::*;
use crate::fairness::GroupCounter;
use crate::fit::max_copies;
use crate::scoring::{overbooking_score, PerfScore};

/// A framework chosen for an agent, with the pending shape that won.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Choice {
    pub(super) framework: FrameworkIdx,
    pub(super) shape: usize,
    /// True when the shape fits only by overbooking fungible resources.
    pub(super) overbook: bool,
    /// The packing score of the winning shape (for η's running averages).
    pub(super) p_score: f64,
    /// Its rank: larger is better.
    pub(super) score: PerfScore,
}

impl Choice {
    /// A fitting choice made by order rather than by score (FIFO, SJF, the capacity
    /// scheduler, DRF, the reservation-guarantee tier).
    pub(super) fn unscored(framework: FrameworkIdx, shape: usize) -> Choice {
        Choice {
            framework,
            shape,
            overbook: false,
            p_score: 0.0,
            score: PerfScore {
                fits: true,
                value: 0.0,
            },
        }
    }
}

// The unrolled kernel `dot` below assumes five resource kinds.
const _: () = assert!(NUM_RESOURCES == 5);

/// A policy's choice for an agent ([`Allocator::choose`]).
pub(super) struct Chosen {
    pub(super) choice: Choice,
    /// What may be offered at most.
    pub(super) limit: ResourceVec,
    /// Chosen by the reservation-guarantee tier (module `guarantees`): not held to the κ·C
    /// gate's headroom.
    pub(super) guaranteed: bool,
}

/// A candidate in a cycle's ordered set: ascending, so the first is the best.
pub(super) type Ranked = (OrdF64, u64, FrameworkIdx);

/// Where a group's list stands in a scan over several (the deficit counters' groups, most
/// deprived first, then by index): of equal scores, the earlier group's candidate wins.
pub(super) type GroupOrder = (std::cmp::Reverse<OrdF64>, u32);

/// The order of a group that is scanned alone (the κ·C gate closed, or one list).
pub(super) const ALONE: GroupOrder = (std::cmp::Reverse(OrdF64(0.0)), 0);

/// What a candidate must do to be taken in a scan: beat `score`, or also equal it when it
/// comes earlier in the scan's order than the candidate that set it (`ties_win`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bar {
    pub(super) score: PerfScore,
    pub(super) ties_win: bool,
}

impl Bar {
    /// A bar that only a better score passes: the scans that visit candidates in their order.
    pub(super) fn beat(score: PerfScore) -> Bar {
        Bar {
            score,
            ties_win: false,
        }
    }

    /// Whether a candidate of `score` is taken over the one that set the bar.
    #[inline]
    pub(super) fn passed_by(&self, score: &PerfScore) -> bool {
        score.beats(&self.score) || (self.ties_win && *score == self.score)
    }
}

/// What a cycle builds once and keeps current as it makes offers.
#[derive(Clone, Debug)]
pub(super) struct CycleIndex {
    /// Candidates in policy order: one set per group for the deficit-counter, capacity and DRF
    /// policies, a single set otherwise. Keys ascend: the negated score bound (deficit
    /// counters, Tetris), registration (FIFO, capacity), remaining work (SJF), dominant share
    /// (DRF); ties by registration.
    pub(super) lists: Vec<BTreeSet<Ranked>>,
    /// How many candidates the lists hold together (0: the cycle's offers took every pending
    /// task).
    pub(super) listed: usize,
    per_group: bool,
    /// Each framework's current entry in `lists` (`None`: not listed).
    pub(super) ranks: Vec<Option<Ranked>>,
    /// Per kind, the smallest positive capacity of any agent (for the score bounds).
    pub(super) min_capacity: ResourceVec,
    /// Component-wise minimum of every pending shape (an agent that cannot hold it cannot hold
    /// any shape).
    pub(super) min_demand: ResourceVec,
    /// The pending shapes that no other is below kind by kind, at the cycle's start (an agent
    /// that holds none of them holds no shape, module `idle`).
    pub(super) cover: Cover,
    /// η (deficit counters) or ε (Tetris), fixed for the cycle so the bounds stay valid.
    pub(super) srpt_weight: f64,
    /// Per group: has a framework with a pending shape that fits some agent's capacity.
    pub(super) runnable: Vec<bool>,
    /// The largest packing term (`priScore · pScore`, or Tetris' alignment) any projected
    /// shape can reach on any agent at the cycle's start (at least 0): the scale of the
    /// scores, for the memo's tie tolerance.
    pub(super) max_packing: f64,
    /// The picks recorded against this index (module `memo`).
    pub(super) memo: PickMemo,
    /// Per list, its bounding tree (module `score_tree`; score-based policies only).
    pub(super) trees: Vec<ScoreTree>,
    /// Where each framework's shapes are in the trees.
    pub(super) tree_leaves: TreeLeaves,
}

/// What one agent's picks carry from each to the next: its place along the trace of picks of
/// its starting state (module `memo`) and its place in the bounding trees (module
/// `score_tree`). Made anew for every agent.
#[derive(Debug)]
pub(super) struct AgentSearch {
    pub(super) memo: MemoCursor,
    pub(super) frontier: TreeFrontier,
}

impl Allocator {
    /// The search of an agent starting from `free` of `total` with `exclusions`: the cursor
    /// over the trace of that state in `index`'s memo, and no frontier yet. The caller hands
    /// the cursor back with [`PickMemo::finish`] once the agent is matched.
    pub(super) fn agent_search(
        &self,
        index: &mut CycleIndex,
        free: &ResourceVec,
        total: &ResourceVec,
        exclusions: &Exclusions,
    ) -> AgentSearch {
        AgentSearch {
            memo: index.memo.cursor(self.memoizes(), free, total, exclusions),
            frontier: TreeFrontier::default(),
        }
    }
}

/// An agent as the scorers see it.
pub(super) struct AgentView {
    pub(super) free: ResourceVec,
    /// What overbooking scores are computed against: `free`, or within a task-at-a-time match
    /// what is left after earlier picks, below zero on a fungible kind they overbooked.
    overbook_free: ResourceVec,
    total: ResourceVec,
    /// `free_k / total_k²` (0 where the agent lacks the kind): the packing score of a fitting
    /// demand `d` is then `d · weights`, the same value as
    /// `scoring::packing_score(free, d, total, 1)` (Fig. 8's `pScore`) without its ten divisions.
    weights: ResourceVec,
    /// The weights, none below 0 (a kind a little overdrawn within the fit rule's epsilon): a
    /// larger demand never packs lower against them, which the exact bounds rely on.
    weights_upper: ResourceVec,
}

impl AgentView {
    pub(super) fn new(free: ResourceVec, total: ResourceVec) -> AgentView {
        let mut weights = ResourceVec::ZERO;
        for k in ResourceKind::ALL {
            if total[k] > EPSILON {
                weights[k] = free[k] / (total[k] * total[k]);
            }
        }
        AgentView {
            free,
            overbook_free: free,
            total,
            weights,
            weights_upper: weights.max(&ResourceVec::ZERO),
        }
    }

    /// The same view, with overbooking scored against `available` (see `overbook_free`).
    pub(super) fn overbooking_against(mut self, available: ResourceVec) -> AgentView {
        self.overbook_free = available;
        self
    }

    #[inline]
    pub(super) fn packing(&self, demand: &ResourceVec) -> f64 {
        dot(demand, &self.weights)
    }

    /// At least [`AgentView::packing`] of every demand component-wise at most `demand`, bit
    /// for bit: the same sum of products, each rounded no lower (IEEE rounding is monotone).
    #[inline]
    pub(super) fn packing_upper(&self, demand: &ResourceVec) -> f64 {
        dot(demand, &self.weights_upper)
    }
}

/// Frameworks an agent must not be offered to now, with how many of each group's demanding
/// frameworks they are (the κ·C gate leaves out a group all of whose frameworks refuse the
/// agent).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Exclusions {
    frameworks: Vec<FrameworkIdx>,
    /// Per group, how many of its demanding frameworks are excluded.
    refusing: Vec<u32>,
}

impl Exclusions {
    pub(super) fn contains(&self, f: FrameworkIdx) -> bool {
        !self.frameworks.is_empty() && self.frameworks.contains(&f)
    }

    pub(super) fn refusing(&self) -> &[u32] {
        &self.refusing
    }

    /// The excluded frameworks (in no particular order, possibly repeated).
    pub(super) fn frameworks(&self) -> &[FrameworkIdx] {
        &self.frameworks
    }
}

/// How shapes are matched against free resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FitMode {
    Strict,
    Overbook,
}

impl Allocator {
    /// Builds the cycle's candidate index.
    pub(super) fn build_index(&mut self, state: &AllocationState) -> CycleIndex {
        let srpt_weight = match self.config.policy {
            InterJobPolicy::DeficitCounters { .. } => match self.config.eta {
                EtaRule::AllPending => {
                    self.cycle_eta = self.eta_over_pending(state);
                    self.cycle_eta
                }
                EtaRule::ChosenCandidates => self.eta.eta(),
            },
            InterJobPolicy::Tetris => self.epsilon.eta(),
            _ => 0.0,
        };
        self.cycle_srpt_weight = srpt_weight;
        let runnable = self.runnable_groups(state);
        self.index_with(state, srpt_weight, runnable)
    }

    /// The candidate index of the cycle's projected pending work, with η or ε fixed at
    /// `srpt_weight` and the groups' runnability given.
    pub(super) fn index_with(
        &mut self,
        state: &AllocationState,
        srpt_weight: f64,
        runnable: Vec<bool>,
    ) -> CycleIndex {
        let mut min_capacity = ResourceVec([f64::INFINITY; NUM_RESOURCES]);
        for (total, _) in self.capacity_classes.values() {
            for k in ResourceKind::ALL {
                if total[k] > EPSILON {
                    min_capacity[k] = min_capacity[k].min(total[k]);
                }
            }
        }
        for k in ResourceKind::ALL {
            if !min_capacity[k].is_finite() {
                min_capacity[k] = 0.0;
            }
        }
        let policy = self.config.policy;
        let per_group = matches!(
            policy,
            InterJobPolicy::DeficitCounters { .. }
                | InterJobPolicy::CapacityScheduler { .. }
                | InterJobPolicy::Drf
        );
        let groups = state.deficits().len();
        let mut index = CycleIndex {
            lists: vec![BTreeSet::new(); if per_group { groups.max(1) } else { 1 }],
            listed: 0,
            per_group,
            ranks: vec![None; self.frameworks.len()],
            min_capacity,
            min_demand: ResourceVec([f64::INFINITY; NUM_RESOURCES]),
            cover: Cover::default(),
            srpt_weight,
            runnable,
            max_packing: 0.0,
            memo: PickMemo::default(),
            trees: Vec::new(),
            tree_leaves: TreeLeaves::default(),
        };
        let with_priority = match policy {
            InterJobPolicy::DeficitCounters { .. } => Some(true),
            InterJobPolicy::Tetris => Some(false),
            _ => None,
        };
        let candidates: Vec<FrameworkIdx> = state
            .frameworks()
            .filter(|(f, _)| self.frameworks[f.get()].counted)
            .map(|(f, _)| f)
            .collect();
        for f in candidates {
            let soft = self.cycle_counts(f);
            for (s, shape) in soft.demand.shapes.iter().enumerate() {
                if soft.cycle_counts[s] > 0 {
                    index.min_demand = index.min_demand.min(&shape.demand);
                    index.cover.add(&shape.demand);
                }
            }
            if let Some(with_priority) = with_priority {
                let bound = score_bound(soft, &index.min_capacity, with_priority);
                index.max_packing = index.max_packing.max(bound);
            }
            self.relist(state, &mut index, f);
        }
        self.build_score_trees(&mut index);
        index
    }

    /// The key of `f` in its cycle set under the configured policy, from its projected pending
    /// work; `None` when the cycle has offered for all of it.
    fn list_key(
        &mut self,
        state: &AllocationState,
        index: &CycleIndex,
        f: FrameworkIdx,
    ) -> Option<f64> {
        let capacity = state.capacity();
        let (registration, held) = {
            let record = state.framework(f)?;
            (record.registration, record.held)
        };
        let policy = self.config.policy;
        let soft = self.cycle_counts(f);
        if soft.cycle_pending == 0 || !soft.counted {
            return None;
        }
        let rw = soft.demand.remaining_work;
        let srpt = soft.demand.srpt;
        Some(match policy {
            InterJobPolicy::DeficitCounters { .. } => {
                -(score_bound(soft, &index.min_capacity, true) - index.srpt_weight * srpt)
            }
            InterJobPolicy::Tetris => {
                -(score_bound(soft, &index.min_capacity, false) - index.srpt_weight * rw)
            }
            InterJobPolicy::Fifo | InterJobPolicy::CapacityScheduler { .. } => registration as f64,
            InterJobPolicy::Sjf => rw,
            InterJobPolicy::Drf => (held + soft.offered).dominant_share(&capacity),
        })
    }

    /// (Re)places `f` in its cycle set after its projected work or share changed.
    pub(super) fn relist(
        &mut self,
        state: &AllocationState,
        index: &mut CycleIndex,
        f: FrameworkIdx,
    ) {
        let Some((group, registration)) =
            state.framework(f).map(|r| (r.group.get(), r.registration))
        else {
            return;
        };
        let list = if index.per_group { group } else { 0 };
        if index.ranks.len() <= f.get() {
            index.ranks.resize(f.get() + 1, None);
        }
        if let Some(old) = index.ranks[f.get()].take() {
            if let Some(set) = index.lists.get_mut(list) {
                if set.remove(&old) {
                    index.listed -= 1;
                }
            }
        }
        if let Some(key) = self.list_key(state, index, f) {
            if index.lists.len() <= list {
                index.lists.resize(list + 1, BTreeSet::new());
            }
            let rank = (OrdF64(key), registration, f);
            if index.lists[list].insert(rank) {
                index.listed += 1;
            }
            index.ranks[f.get()] = Some(rank);
        }
        self.refresh_leaves(index, f);
    }

    /// Quick rejection: can the agent hold the component-wise smallest pending shape (or, when
    /// overbooking is allowed, its non-fungible part)?
    pub(super) fn could_fit_any(
        &self,
        index: &CycleIndex,
        free: &ResourceVec,
        total: &ResourceVec,
        overbook: bool,
    ) -> bool {
        if !index.min_demand[ResourceKind::Cpus].is_finite() {
            // No pending shape at all.
            return false;
        }
        let room = if overbook {
            Overbooking(self.config.overbook_allowance).room_bound(free, total)
        } else {
            *free
        };
        fits(&index.min_demand, &room)
    }

    /// Frameworks that must not get agent `a` now: those with an active decline filter, those
    /// holding an offer of it, and (for leftovers) those that yielded a leftover of it this cycle.
    pub(super) fn exclusions(
        &self,
        state: &AllocationState,
        a: AgentIdx,
        now_s: f64,
        leftover: bool,
    ) -> Exclusions {
        let soft = &self.agents[a.get()];
        let mut frameworks: Vec<FrameworkIdx> = soft
            .filters
            .iter()
            .filter(|(_, until)| *until > now_s)
            .map(|(f, _)| *f)
            .collect();
        frameworks.extend(soft.offers.iter().map(|o| o.framework));
        if leftover {
            frameworks.extend(soft.yielders.iter().copied());
        }
        let refusing = self.refusing_counts(state, &frameworks);
        Exclusions {
            frameworks,
            refusing,
        }
    }

    /// Chooses the framework for one agent seen as `view` under the configured policy and
    /// charges a whole-agent offer to it to the cycle's projection
    /// ([`AgentMatching::WholeAgent`]): returns the choice and what may be offered.
    pub(super) fn plan_whole_agent(
        &mut self,
        state: &AllocationState,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &mut CycleIndex,
    ) -> Option<Chosen> {
        let chosen = self.choose_whole_agent(state, view, exclusions, index)?;
        let headroom = if chosen.guaranteed {
            f64::INFINITY
        } else {
            self.offer_headroom(state, chosen.choice.framework, &index.runnable)
        };
        self.project_offer(state, chosen.choice, chosen.limit, headroom, Some(index));
        Some(chosen)
    }

    /// [`Allocator::choose`] for a whole agent, after the reservation-guarantee tier: its one
    /// pick, replayed from (or recorded in) the trace of its starting state.
    pub(super) fn choose_whole_agent(
        &mut self,
        state: &AllocationState,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &mut CycleIndex,
    ) -> Option<Chosen> {
        if let Some(chosen) = self.choose_guaranteed_agent(view, exclusions) {
            return Some(chosen);
        }
        let mut search = self.agent_search(index, &view.free, &view.total, exclusions);
        let chosen = self.choose(state, view, exclusions, index, &mut search);
        search.memo.advance(None);
        index.memo.finish(search.memo);
        chosen
    }

    /// How much factor a whole-agent offer to `f` may be expected to charge
    /// ([`Allocator::headroom`] under the deficit counters; unbounded otherwise). Only a
    /// whole-agent offer needs it: task at a time checks the gate per pick.
    pub(super) fn offer_headroom(
        &self,
        state: &AllocationState,
        f: FrameworkIdx,
        runnable: &[bool],
    ) -> f64 {
        match self.config.policy {
            InterJobPolicy::DeficitCounters { kappa, .. } => {
                let Some(group) = state.framework(f).map(|r| r.group) else {
                    return f64::INFINITY;
                };
                let projected = self.projected_deficits(state);
                let threshold = kappa * state.capacity_units();
                self.headroom(state, group, &projected, threshold, runnable)
            }
            _ => f64::INFINITY,
        }
    }

    /// The configured policy's choice for an agent seen as `view`: the framework and pending
    /// shape, and what may be offered (the free resources, cut to a capacity-scheduler queue's
    /// room). `search.memo` follows the agent along the trace of picks of its starting state:
    /// a recorded choice that still holds is replayed instead of scanning, and a computed one is
    /// recorded (module `memo`; only the deficit counters and Tetris are memoized);
    /// `search.frontier` is where its last tree search stopped (module `score_tree`).
    pub(super) fn choose(
        &mut self,
        state: &AllocationState,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &CycleIndex,
        search: &mut AgentSearch,
    ) -> Option<Chosen> {
        let free = view.free;
        let unbounded = |choice: Choice, limit: ResourceVec| Chosen {
            choice,
            limit,
            guaranteed: false,
        };
        match self.config.policy {
            InterJobPolicy::DeficitCounters { kappa, .. } => {
                let threshold = kappa * state.capacity_units();
                let memo = &search.memo;
                let choice = match self.replayed_choice(state, view, exclusions, index, memo) {
                    Some(choice) => choice,
                    None => {
                        let mut rivals = Rivals::default();
                        let (choice, gate) = self.choose_deficit(
                            state,
                            view,
                            exclusions,
                            index,
                            threshold,
                            &mut search.frontier,
                            &mut rivals,
                        );
                        search.memo.computed(choice, gate, rivals, index);
                        choice
                    }
                }?;
                if self.config.eta == EtaRule::ChosenCandidates {
                    let work = self.frameworks[choice.framework.get()].demand.srpt;
                    self.observations.push(Observation::Eta {
                        p_score: choice.p_score,
                        work,
                    });
                }
                Some(unbounded(choice, free))
            }
            InterJobPolicy::Tetris => {
                let memo = &search.memo;
                let choice = match self.replayed_choice(state, view, exclusions, index, memo) {
                    Some(choice) => choice,
                    None => {
                        let mut rivals = Rivals::default();
                        let trees = std::iter::once((0, ALONE));
                        let frontier = &mut search.frontier;
                        let choice = self
                            .best_in_trees(
                                index,
                                trees,
                                view,
                                exclusions,
                                false,
                                frontier,
                                &mut rivals,
                            )
                            .or_else(|| {
                                if index.tree_leaves.covers_lists() {
                                    return None;
                                }
                                let list = index.lists.first()?;
                                self.best_in_list(
                                    list,
                                    view,
                                    exclusions,
                                    index,
                                    None,
                                    FitMode::Strict,
                                    false,
                                    &mut rivals,
                                )
                            });
                        search
                            .memo
                            .computed(choice, GateFilter::Open, rivals, index);
                        choice
                    }
                }?;
                let work = self.frameworks[choice.framework.get()]
                    .demand
                    .remaining_work;
                self.observations.push(Observation::Epsilon {
                    p_score: choice.p_score,
                    work,
                });
                Some(unbounded(choice, free))
            }
            InterJobPolicy::Fifo | InterJobPolicy::Sjf => {
                let choice = self.first_fit_in_list(index.lists.first()?, &free, exclusions)?;
                Some(unbounded(choice, free))
            }
            InterJobPolicy::CapacityScheduler { max_capacity } => {
                let (choice, limit) =
                    self.choose_capacity(state, &free, exclusions, index, max_capacity)?;
                Some(unbounded(choice, limit))
            }
            InterJobPolicy::Drf => {
                let choice = self.choose_drf(state, &free, exclusions, index)?;
                Some(unbounded(choice, free))
            }
        }
    }

    /// Deficits projected through the outstanding offers' expected launches:
    /// `D_g + f_g·I − I_g`, with `I_g` the expected charge of group g's offers.
    pub(super) fn projected_deficits(&self, state: &AllocationState) -> Vec<f64> {
        state
            .deficits()
            .iter()
            .map(|(g, counter)| self.projected_deficit(g, counter))
            .collect()
    }

    /// One group's projected deficit (see [`Allocator::projected_deficits`]).
    #[inline]
    fn projected_deficit(&self, g: GroupIdx, counter: &GroupCounter) -> f64 {
        let inflight = self.groups.get(g.get()).map_or(0.0, |s| s.inflight);
        counter.deficit + counter.share * self.inflight_total - inflight
    }

    /// Per group: whether it has a framework with pending work (not suppressed) of a shape
    /// that fits some agent's total capacity. Only such groups take part in the κ·C gate: a
    /// group whose tasks no machine can hold must not stop the cluster.
    pub(super) fn runnable_groups(&self, state: &AllocationState) -> Vec<bool> {
        let mut runnable = vec![false; self.groups.len()];
        let capacities: Vec<ResourceVec> = if self.capacity_classes.len() <= MAX_CAPACITY_CLASSES {
            self.capacity_classes.values().map(|(c, _)| *c).collect()
        } else {
            // Too many machine types to compare each: the component-wise maximum, which may
            // call a shape runnable that no single machine holds (never the reverse).
            vec![self
                .capacity_classes
                .values()
                .fold(ResourceVec::ZERO, |m, (c, _)| m.max(c))]
        };
        for (f, record) in state.frameworks() {
            let g = record.group.get();
            if runnable[g] || !self.frameworks[f.get()].counted {
                continue;
            }
            runnable[g] = self.frameworks[f.get()]
                .demand
                .shapes
                .iter()
                .any(|s| s.count > 0 && capacities.iter().any(|c| s.demand.fits_in(c)));
        }
        runnable
    }

    /// Per group, how many of its demanding frameworks are in `exclusions` (refuse the agent);
    /// groups past the end of the list have none.
    pub(super) fn refusing_counts(
        &self,
        state: &AllocationState,
        exclusions: &[FrameworkIdx],
    ) -> Vec<u32> {
        if exclusions.is_empty() {
            // None (a group past the end counts none): most agents, without an allocation.
            return Vec::new();
        }
        let mut refusing = vec![0u32; self.groups.len()];
        let mut seen: Vec<FrameworkIdx> = Vec::with_capacity(exclusions.len());
        for &f in exclusions {
            if seen.contains(&f) || !self.frameworks[f.get()].counted {
                continue;
            }
            seen.push(f);
            if let Some(record) = state.framework(f) {
                refusing[record.group.get()] += 1;
            }
        }
        refusing
    }

    /// Whether group `g` takes part in the κ·C gate for an agent: it has demanding frameworks,
    /// not all of which refuse the agent, and pending work that fits some agent.
    #[inline]
    fn gated(&self, g: usize, runnable: &[bool], refusing: &[u32]) -> bool {
        let demanding = self.groups[g].demanding;
        demanding > 0
            && refusing.get(g).copied().unwrap_or(0) < demanding
            && runnable.get(g).copied().unwrap_or(false)
    }

    /// Runnable groups with pending work, most deprived first (ties: lower index), leaving out
    /// the groups all of whose demanding frameworks refuse the agent (`refusing`, from
    /// [`Allocator::refusing_counts`]).
    pub(super) fn gate_order(
        &self,
        projected: &[f64],
        runnable: &[bool],
        refusing: &[u32],
    ) -> Vec<GroupIdx> {
        let mut groups: Vec<GroupIdx> = (0..self.groups.len())
            .filter(|&g| self.gated(g, runnable, refusing))
            .map(|g| GroupIdx(g as u32))
            .collect();
        groups.sort_by(|a, b| {
            projected[b.get()]
                .total_cmp(&projected[a.get()])
                .then(a.cmp(b))
        });
        groups
    }

    /// The first group of [`Allocator::gate_order`] with its projected deficit, found in one
    /// pass without sorting or allocating.
    pub(super) fn gate_leader(
        &self,
        state: &AllocationState,
        runnable: &[bool],
        refusing: &[u32],
    ) -> Option<(GroupIdx, f64)> {
        let mut leader: Option<(GroupIdx, f64)> = None;
        for (g, counter) in state.deficits().iter() {
            if g.get() >= self.groups.len() || !self.gated(g.get(), runnable, refusing) {
                continue;
            }
            let projected = self.projected_deficit(g, counter);
            if leader.is_none_or(|(_, best)| projected.total_cmp(&best).is_gt()) {
                leader = Some((g, projected));
            }
        }
        leader
    }

    /// Whether the κ·C gate is closed to `group`: the most deprived runnable group with pending
    /// work (leaving out those whose frameworks all refuse the agent) is another one, at or
    /// above the threshold.
    pub(super) fn gate_closed_against(
        &self,
        state: &AllocationState,
        group: GroupIdx,
        threshold: f64,
        runnable: &[bool],
        refusing: &[u32],
    ) -> bool {
        self.gate_leader(state, runnable, refusing)
            .is_some_and(|(g, projected)| g != group && projected >= threshold)
    }

    /// How much factor an offer to a framework of `served` may be expected to charge before
    /// another runnable group with pending work reaches κ·C: `min over g ≠ served of
    /// (κC − PD_g)/f_g`. Zero or less when another such group is already at κ·C (the offer then
    /// carries one task, the granularity of Fig. 8).
    pub(super) fn headroom(
        &self,
        state: &AllocationState,
        served: GroupIdx,
        projected: &[f64],
        threshold: f64,
        runnable: &[bool],
    ) -> f64 {
        let deficits = state.deficits();
        let mut headroom = f64::INFINITY;
        for (g, soft) in self.groups.iter().enumerate() {
            if g == served.get()
                || soft.demanding == 0
                || !runnable.get(g).copied().unwrap_or(false)
            {
                continue;
            }
            let share = deficits.share(GroupIdx(g as u32));
            if share <= 0.0 {
                continue;
            }
            headroom = headroom.min((threshold - projected[g]) / share);
        }
        headroom
    }

    /// Graphene's choice (tech report Fig. 8, boxes one and two). While the most deprived
    /// runnable group's projected deficit is ≥ κ·C, only its frameworks are candidates, and an
    /// agent none of them can use is not offered this cycle: as in Fig. 8, where `t_best` is
    /// then empty. This is what keeps a group of large tasks from starving behind small ones
    /// that would otherwise take every hole as it appears. Otherwise the best perfScore over all
    /// groups wins. Fitting shapes beat overbooked ones lexicographically, so overbooking is
    /// considered only when nothing fits.
    #[allow(clippy::too_many_arguments)]
    fn choose_deficit(
        &mut self,
        state: &AllocationState,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &CycleIndex,
        threshold: f64,
        frontier: &mut TreeFrontier,
        rivals: &mut Rivals,
    ) -> (Option<Choice>, GateFilter) {
        let Some((most_deprived, deficit)) =
            self.gate_leader(state, &index.runnable, exclusions.refusing())
        else {
            return (None, GateFilter::Open);
        };
        if deficit >= threshold {
            let gate = GateFilter::Closed(most_deprived);
            let leader = std::iter::once((most_deprived.get(), ALONE));
            let found = self.best_in_trees(index, leader, view, exclusions, true, frontier, rivals);
            if let Some(choice) = found {
                return (Some(choice), gate);
            }
            let Some(list) = index.lists.get(most_deprived.get()) else {
                return (None, gate);
            };
            let choice = scan_modes(index).iter().find_map(|&mode| {
                self.best_in_list(list, view, exclusions, index, None, mode, true, rivals)
            });
            return (choice, gate);
        }
        // Every gated group, most deprived first: the scan keeps the first of equal scores.
        let mut order = std::mem::take(&mut self.gate_scratch);
        order.clear();
        for (g, counter) in state.deficits().iter() {
            if g.get() < self.groups.len()
                && self.gated(g.get(), &index.runnable, exclusions.refusing())
            {
                order.push((self.projected_deficit(g, counter), g));
            }
        }
        let gated = order
            .iter()
            .map(|&(projected, g)| (g.get(), (std::cmp::Reverse(OrdF64(projected)), g.0)));
        if let Some(choice) =
            self.best_in_trees(index, gated, view, exclusions, true, frontier, rivals)
        {
            self.gate_scratch = order;
            return (Some(choice), GateFilter::Open);
        }
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut found: Option<Choice> = None;
        for &mode in scan_modes(index) {
            for &(_, g) in &order {
                let Some(list) = index.lists.get(g.get()) else {
                    continue;
                };
                let best = self.best_in_list(
                    list,
                    view,
                    exclusions,
                    index,
                    found.map(|c| c.score),
                    mode,
                    true,
                    rivals,
                );
                if let Some(best) = best {
                    if let Some(current) = found {
                        rivals.note(current.score);
                    }
                    found = Some(best);
                }
            }
            if found.is_some() {
                break;
            }
        }
        self.gate_scratch = order;
        (found, GateFilter::Open)
    }

    /// The best-scoring candidate of a set ordered by score bound, better than `beat` if given.
    /// `with_priority`: Graphene's `priScore · pScore` (else Tetris' bare alignment). Scanning
    /// stops at the first candidate whose bound is below the best found by more than the
    /// rounding of the bounds (module `memo`'s tie margin). Of equal scores the first in the
    /// set's order wins: the result is the exact best by score, then by the set's order (what
    /// the bounding trees find too). Every candidate passed over leaves its score, or the
    /// bound it was dismissed by, in `rivals` (what a memoized choice must beat: module `memo`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn best_in_list(
        &mut self,
        list: &BTreeSet<Ranked>,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &CycleIndex,
        beat: Option<PerfScore>,
        mode: FitMode,
        with_priority: bool,
        rivals: &mut Rivals,
    ) -> Option<Choice> {
        let mut best: Option<Choice> = None;
        for &(OrdF64(negated_bound), _, f) in list {
            let bar = best.map(|c| c.score).or(beat);
            if let Some(bar) = bar {
                // The bound holds for fitting scores (up to its rounding); overbooked ones are
                // below it too. It bounds every later candidate of the set as well.
                let bound = PerfScore {
                    fits: mode == FitMode::Strict,
                    value: -negated_bound,
                };
                let below = if bound.fits == bar.fits {
                    bound.value + tie_margin(bar.value, index) < bar.value
                } else {
                    !bound.beats(&bar)
                };
                if below {
                    rivals.note(bound);
                    break;
                }
            }
            let bar = bar.map(Bar::beat);
            let evaluation =
                self.evaluate_candidate(f, view, exclusions, index, bar, mode, with_priority);
            take_evaluation(&mut best, bar, f, evaluation, mode, rivals);
        }
        best
    }

    /// Framework `f`'s best pending shape for the agent seen as `view` under `mode`, with its
    /// packing (or overbooking) score and perfScore; the first of equal scores in summary
    /// order. [`Evaluation::Out`] when `f` is excluded, has no projected work or has nothing
    /// that fits; [`Evaluation::Below`] (strict mode) when its envelope's score shows that no
    /// shape of it can pass `bar`: below it by more than the rounding of the envelope's score,
    /// or not passing it by the exact bound ([`exact_bound`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn evaluate_candidate(
        &mut self,
        f: FrameworkIdx,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &CycleIndex,
        bar: Option<Bar>,
        mode: FitMode,
        with_priority: bool,
    ) -> Evaluation {
        let srpt_weight = index.srpt_weight;
        #[cfg(test)]
        {
            self.scored_candidates += 1;
        }
        if exclusions.contains(f) {
            return Evaluation::Out;
        }
        let allowance = self.config.overbook_allowance;
        let soft = self.cycle_counts(f);
        if soft.cycle_pending == 0 || !soft.counted {
            return Evaluation::Out;
        }
        // Graphene's srpt_j for its perfScore; Tetris weighs the remaining work.
        let work = if with_priority {
            soft.demand.srpt
        } else {
            soft.demand.remaining_work
        };
        let srpt_term = srpt_weight * work;
        if mode == FitMode::Strict {
            if !fits(&soft.cycle_min, &view.free) {
                return Evaluation::Out;
            }
            if let Some(bar) = bar.filter(|bar| bar.score.fits) {
                let to_pass = bar.score.value;
                let bound = envelope_bound(soft, view, srpt_term, with_priority);
                if bound.value + tie_margin(to_pass, index) < to_pass {
                    return Evaluation::Below(bound);
                }
                let exact = exact_bound(soft, view, srpt_term, with_priority);
                if !bar.passed_by(&exact) {
                    return Evaluation::Below(exact);
                }
            }
        }
        let mut local: Option<(usize, f64, PerfScore)> = None;
        for (s, shape) in soft.demand.shapes.iter().enumerate() {
            if soft.cycle_counts[s] == 0 {
                continue;
            }
            let pri = if with_priority { shape.pri_score } else { 1.0 };
            let (p, score) = match mode {
                FitMode::Strict => {
                    if !fits(&shape.demand, &view.free) {
                        continue;
                    }
                    let p = view.packing(&shape.demand);
                    let score = PerfScore {
                        fits: true,
                        value: pri * p - srpt_term,
                    };
                    (p, score)
                }
                FitMode::Overbook => {
                    let o = overbooking_score(
                        &view.overbook_free,
                        &shape.demand,
                        &view.total,
                        allowance,
                    );
                    match PerfScore::new(pri, 0.0, o, srpt_weight, work) {
                        Some(score) => (o, score),
                        None => continue,
                    }
                }
            };
            if local.is_none_or(|(_, _, l)| score.beats(&l)) {
                local = Some((s, p, score));
            }
        }
        match local {
            Some((s, p, score)) => Evaluation::Scored(s, p, score),
            None => Evaluation::Out,
        }
    }

    /// The first candidate of an ordered set with a pending shape that fits (the first such
    /// shape in its summary's best-first order).
    fn first_fit_in_list(
        &mut self,
        list: &BTreeSet<Ranked>,
        free: &ResourceVec,
        exclusions: &Exclusions,
    ) -> Option<Choice> {
        list.iter()
            .find_map(|&(_, _, f)| self.first_fit(f, free, exclusions))
    }

    fn first_fit(
        &mut self,
        f: FrameworkIdx,
        free: &ResourceVec,
        exclusions: &Exclusions,
    ) -> Option<Choice> {
        if exclusions.contains(f) {
            return None;
        }
        let soft = self.cycle_counts(f);
        if soft.cycle_pending == 0 || !soft.counted {
            return None;
        }
        let shape = self.first_fitting_shape(f, free)?;
        Some(Choice::unscored(f, shape))
    }

    /// YARN capacity scheduler: queues (groups) by used / guaranteed, lowest first, skipping
    /// queues at their maximum capacity; FIFO within the queue. "Used" is the dominant share of
    /// what the queue holds plus has on offer (YARN's DominantResourceCalculator). Returns the
    /// choice and what may be offered: the free resources, cut to the queue's room below its
    /// maximum.
    fn choose_capacity(
        &mut self,
        state: &AllocationState,
        free: &ResourceVec,
        exclusions: &Exclusions,
        index: &CycleIndex,
        max_capacity: f64,
    ) -> Option<(Choice, ResourceVec)> {
        let capacity = state.capacity();
        let deficits = state.deficits();
        let weight_sum: f64 = deficits.iter().map(|(_, c)| c.weight).sum();
        let mut queues: Vec<(f64, GroupIdx, ResourceVec)> = Vec::new();
        for (g, counter) in deficits.iter() {
            let soft = &self.groups[g.get()];
            if soft.demanding == 0 {
                continue;
            }
            let used = state.group_held(g) + soft.offered;
            let used_share = used.dominant_share(&capacity);
            if used_share >= max_capacity - EPSILON {
                continue;
            }
            let guaranteed = if weight_sum > 0.0 {
                counter.weight / weight_sum
            } else {
                0.0
            };
            let ratio = if guaranteed > 0.0 {
                used_share / guaranteed
            } else {
                f64::INFINITY
            };
            let room = capacity.scale(max_capacity).saturating_sub(&used);
            queues.push((ratio, g, room));
        }
        queues.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, g, room) in queues {
            let limit = free.min(&room);
            let Some(list) = index.lists.get(g.get()) else {
                continue;
            };
            if let Some(choice) = self.first_fit_in_list(list, &limit, exclusions) {
                return Some((choice, limit));
            }
        }
        None
    }

    /// Mesos' hierarchical DRF: groups by weighted dominant share (held plus offered), then
    /// frameworks within the group by dominant share, the first with a shape that fits.
    fn choose_drf(
        &mut self,
        state: &AllocationState,
        free: &ResourceVec,
        exclusions: &Exclusions,
        index: &CycleIndex,
    ) -> Option<Choice> {
        let capacity = state.capacity();
        let deficits = state.deficits();
        let mut groups = std::mem::take(&mut self.gate_scratch);
        groups.clear();
        for (g, counter) in deficits.iter() {
            let soft = &self.groups[g.get()];
            if soft.demanding == 0 {
                continue;
            }
            let used = state.group_held(g) + soft.offered;
            let share = used.dominant_share(&capacity);
            let weighted = if counter.weight > 0.0 {
                share / counter.weight
            } else {
                f64::INFINITY
            };
            groups.push((weighted, g));
        }
        groups.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let choice = groups.iter().find_map(|&(_, g)| {
            let list = index.lists.get(g.get())?;
            self.first_fit_in_list(list, free, exclusions)
        });
        self.gate_scratch = groups;
        choice
    }

    /// Makes the offer of `limit` (or, when the deficit bound caps it, of the expected tasks
    /// only) of agent `a` to the chosen framework ([`Allocator::project_offer`]) and registers
    /// it as out; `guaranteed` when the reservation-guarantee tier chose it.
    #[allow(clippy::too_many_arguments)] // the state is passed in, not held (see `Allocator`)
    pub(super) fn make_offer(
        &mut self,
        state: &AllocationState,
        a: AgentIdx,
        choice: Choice,
        limit: ResourceVec,
        headroom: f64,
        kind: OfferKind,
        guaranteed: bool,
        index: Option<&mut CycleIndex>,
    ) -> OfferDecision {
        let projected = self.project_offer(state, choice, limit, headroom, index);
        let f = choice.framework;
        let agent_soft = &mut self.agents[a.get()];
        agent_soft.offered += projected.resources;
        agent_soft.offers.push(OutstandingOffer {
            framework: f,
            group: projected.group,
            resources: projected.resources,
            kind,
            guaranteed,
            expected_charge: projected.charge,
        });
        OfferDecision {
            agent: state
                .agent(a)
                .map(|r| r.id.clone())
                .unwrap_or_else(|| AgentId::from("")),
            framework: state
                .framework(f)
                .map(|r| r.id.clone())
                .unwrap_or_else(|| FrameworkId::from("")),
            resources: projected.resources,
            kind,
            guaranteed,
        }
    }

    /// What an offer of `limit` to the chosen framework holds (`limit`, or when the deficit
    /// bound caps it the expected tasks only), projected into the cycle: its expected launches
    /// are its pending shapes in summary order (the framework's best first), packed greedily,
    /// stopping at the task whose charge reaches `headroom`, and they are charged to the
    /// pending counts, the framework's and group's offered resources and the in-flight charge.
    /// A framework that launches best-first from a capped offer launches exactly the projected
    /// tasks: the offer holds nothing else. For an overbooked choice the projection is one task
    /// of the winning shape.
    pub(super) fn project_offer(
        &mut self,
        state: &AllocationState,
        choice: Choice,
        limit: ResourceVec,
        headroom: f64,
        index: Option<&mut CycleIndex>,
    ) -> ProjectedOffer {
        let f = choice.framework;
        let factor_kind = state.deficits().factor();
        let capacity = state.capacity();
        let soft = self.cycle_counts(f);
        let mut remaining = limit;
        let mut bundle = ResourceVec::ZERO;
        let mut charge = 0.0;
        let mut truncated = false;
        let mut taken: u64 = 0;
        for s in 0..soft.demand.shapes.len() {
            let available = soft.cycle_counts[s];
            if available == 0 {
                continue;
            }
            let demand = soft.demand.shapes[s].demand;
            let fit = if choice.overbook {
                u32::from(s == choice.shape)
            } else {
                copies_that_fit(&demand, &remaining, available)
            };
            if fit == 0 {
                continue;
            }
            let factor = factor_kind.of(&demand, &capacity);
            let mut n = fit;
            if factor > 0.0 && charge + n as f64 * factor >= headroom {
                // Up to and including the task that reaches the headroom (at least one).
                let needed = ((headroom - charge) / factor).ceil().max(1.0);
                n = n.min(needed as u32).max(1);
                truncated = true;
            }
            soft.cycle_counts[s] -= n;
            taken += n as u64;
            charge += n as f64 * factor;
            bundle += demand.scale(n as f64);
            remaining = remaining.saturating_sub(&demand.scale(n as f64));
            if truncated || choice.overbook {
                break;
            }
        }
        soft.cycle_pending = soft.cycle_pending.saturating_sub(taken);
        soft.refresh_envelopes();
        let resources = if truncated && !choice.overbook {
            bundle.min(&limit)
        } else {
            limit
        };
        soft.offered += resources;
        self.spend_guarantee(f, &resources);
        let group = state.framework(f).map(|r| r.group).unwrap_or(GroupIdx(0));
        if let Some(group_soft) = self.groups.get_mut(group.get()) {
            group_soft.offered += resources;
            group_soft.inflight += charge;
        }
        self.inflight_total += charge;
        if let Some(index) = index {
            self.relist(state, index, f);
        }
        ProjectedOffer {
            resources,
            charge,
            group,
        }
    }
}

/// An offer as [`Allocator::project_offer`] charged it to the cycle.
#[derive(Clone, Copy, Debug)]
pub(super) struct ProjectedOffer {
    resources: ResourceVec,
    charge: f64,
    group: GroupIdx,
}

/// An upper bound of a framework's packing term on any agent: `max over its projected pending
/// shapes of (priScore ·) Σ_k d_k / min_cap_k` (see the module documentation).
fn score_bound(soft: &FrameworkSoft, min_capacity: &ResourceVec, with_priority: bool) -> f64 {
    let mut best = f64::NEG_INFINITY;
    for (s, shape) in soft.demand.shapes.iter().enumerate() {
        if soft.cycle_counts.get(s).copied().unwrap_or(0) == 0 {
            continue;
        }
        let mut bound = 0.0;
        let mut possible = true;
        for k in ResourceKind::ALL {
            let d = shape.demand[k];
            if d <= EPSILON {
                continue;
            }
            if min_capacity[k] <= EPSILON {
                possible = false;
                break;
            }
            bound += d / min_capacity[k];
        }
        if !possible {
            continue;
        }
        let pri = if with_priority { shape.pri_score } else { 1.0 };
        best = best.max(pri * bound);
    }
    // No shape can fit any agent: sort last (a finite key keeps the set's order total).
    if best.is_finite() {
        best
    } else {
        f64::MIN
    }
}

/// What [`Allocator::evaluate_candidate`] learned of a candidate.
pub(super) enum Evaluation {
    /// Not a candidate for the agent: excluded, without projected work, or with no shape that
    /// fits (or overbooks) what is left of it. It stays out for the rest of the cycle at this
    /// agent state, since the projection only loses tasks.
    Out,
    /// Not scored: no shape of it can beat the bar, as this bound (its envelope's score) shows.
    Below(PerfScore),
    /// Its best shape, with the shape's packing (or overbooking) score and perfScore.
    Scored(usize, f64, PerfScore),
}

/// Takes framework `f`'s evaluation against `bar` (the best score so far, or the score to
/// beat) into a scan: it becomes the best when it passes the bar; what is passed over (it, or
/// the best it displaces) is noted in `rivals`. Returns whether it became the best.
pub(super) fn take_evaluation(
    best: &mut Option<Choice>,
    bar: Option<Bar>,
    f: FrameworkIdx,
    evaluation: Evaluation,
    mode: FitMode,
    rivals: &mut Rivals,
) -> bool {
    let (shape, p_score, score) = match evaluation {
        Evaluation::Out => return false,
        Evaluation::Below(bound) => {
            rivals.note(bound);
            return false;
        }
        Evaluation::Scored(shape, p_score, score) => (shape, p_score, score),
    };
    if bar.is_some_and(|bar| !bar.passed_by(&score)) {
        rivals.note(score);
        return false;
    }
    if let Some(previous) = best {
        rivals.note(previous.score);
    }
    *best = Some(Choice {
        framework: f,
        shape,
        overbook: mode == FitMode::Overbook,
        p_score,
        score,
    });
    true
}

/// The score of a framework's envelope on the agent seen as `view`: at least the perfScore of
/// each of its projected shapes that fits there (`srpt_term`: its η·srpt, or Tetris' ε·work).
pub(super) fn envelope_bound(
    soft: &FrameworkSoft,
    view: &AgentView,
    srpt_term: f64,
    with_priority: bool,
) -> PerfScore {
    let envelope = if with_priority {
        &soft.cycle_envelope
    } else {
        &soft.cycle_envelope_plain
    };
    PerfScore {
        fits: true,
        value: view.packing(envelope) - srpt_term,
    }
}

/// At least the perfScore of each of a framework's projected shapes on the agent seen as
/// `view`, bit for bit: [`Allocator::evaluate_candidate`]'s `pri · packing − srpt_term` with
/// the largest priScore and the component-wise largest demand (IEEE rounding is monotone, so
/// every step of it rounds to no less). Looser than [`envelope_bound`] when the priScores
/// differ, but it decides exact ties, which the envelope's rounding cannot.
pub(super) fn exact_bound(
    soft: &FrameworkSoft,
    view: &AgentView,
    srpt_term: f64,
    with_priority: bool,
) -> PerfScore {
    let pri = if with_priority {
        soft.cycle_pri_max
    } else {
        1.0
    };
    PerfScore {
        fits: true,
        value: pri * view.packing_upper(&soft.cycle_envelope_plain) - srpt_term,
    }
}

/// The list scans' fit modes: both, or only overbooking when the bounding trees already
/// searched every list for a fitting shape (they find the scans' choice exactly).
fn scan_modes(index: &CycleIndex) -> &'static [FitMode] {
    if index.tree_leaves.covers_lists() {
        &[FitMode::Overbook]
    } else {
        &[FitMode::Strict, FitMode::Overbook]
    }
}

/// [`ResourceVec::dot`], unrolled and inlined: the scans call it millions of times per cycle.
#[inline]
fn dot(a: &ResourceVec, b: &ResourceVec) -> f64 {
    let (a, b) = (&a.0, &b.0);
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4]
}

/// How many copies of `demand` fit in `free` ([`max_copies`]), at most `limit`.
pub(super) fn copies_that_fit(demand: &ResourceVec, free: &ResourceVec, limit: u32) -> u32 {
    // Below `limit`, so the conversion back is exact.
    max_copies(demand, free).min(limit as usize) as u32
}

#[cfg(test)]
mod tests {
    use crate::scoring::packing_score;

    use super::*;

    #[test]
    fn agent_view_packing_equals_the_papers_packing_score() {
        let total: ResourceVec = "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
            .parse()
            .unwrap();
        let free: ResourceVec = "cpus=5,mem_mib=30000,disk_mbps=200,net_mbps=9000"
            .parse()
            .unwrap();
        let view = AgentView::new(free, total);
        for demand in [
            "cpus=1,mem_mib=2048,net_mbps=100",
            "cpus=4,disk_mbps=150",
            "mem_mib=1",
        ] {
            let d: ResourceVec = demand.parse().unwrap();
            let expected = packing_score(&free, &d, &total, 1.0);
            assert!((view.packing(&d) - expected).abs() < 1e-12, "{demand}");
        }
    }

    #[test]
    fn copies_are_limited_by_every_kind_and_the_count() {
        let free: ResourceVec = "cpus=8,mem_mib=1000".parse().unwrap();
        let d: ResourceVec = "cpus=1,mem_mib=300".parse().unwrap();
        assert_eq!(copies_that_fit(&d, &free, 10), 3);
        assert_eq!(copies_that_fit(&d, &free, 2), 2);
        assert_eq!(copies_that_fit(&ResourceVec::ZERO, &free, 7), 7);
    }
}
