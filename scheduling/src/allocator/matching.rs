//! Task-at-a-time matching of one agent across frameworks ([`AgentMatching::TaskAtATime`]):
//! Graphene's Fig. 8 loop, run by the allocator over the frameworks' demand summaries.
//!
//! Fig. 8 fills a machine one task at a time: it scores every pending task of every job, passes
//! the best through the κ·C gate, charges it to the deficit counters, reduces the machine's
//! available resources, and repeats until nothing fits. In a two-level design the allocator
//! does not know the tasks, only each framework's pending shapes with their counts and best
//! priScore; these are the scored candidates. So the loop here picks the best (framework,
//! shape) under the configured policy for what is left of the agent, charges one task of it to
//! the cycle's projection (pending counts, the group's projected deficit, the framework's and
//! group's offered resources, which DRF's order reads), and repeats. Each framework with picks
//! is then offered exactly the sum of its picks, and its own matcher chooses which of its tasks
//! of those shapes to launch there. The policy's rule is applied before every task, so DRF's
//! baseline also shares a machine the way progressive filling does, and the deficit bound
//! holds per task without the offer caps of [`AgentMatching::WholeAgent`].

use crate::fit::fits;
use crate::scoring::packing_score;

use super::policies::{AgentView, CycleIndex, Exclusions};
use super::*;

/// The picks of one framework on the agent being matched.
#[derive(Clone, Debug)]
pub(super) struct Part {
    framework: FrameworkIdx,
    group: GroupIdx,
    /// Σ demand of the picked tasks.
    demand: ResourceVec,
    /// Σ fairness factor of the picked tasks (the offer's expected charge).
    charge: f64,
    /// Whether the reservation-guarantee tier picked one of them.
    guaranteed: bool,
}

/// One task picked for an agent ([`Allocator::plan_agent`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct PlannedPick {
    pub(super) framework: FrameworkIdx,
    /// The shape's index in the framework's summary.
    pub(super) shape: usize,
    /// Whether it fits only by overbooking fungible resources.
    pub(super) overbook: bool,
    /// Whether the reservation-guarantee tier picked it (module `guarantees`).
    pub(super) guaranteed: bool,
}

/// The parts of one agent, in the order frameworks were first picked.
#[derive(Clone, Debug, Default)]
pub(super) struct Parts(Vec<Part>);

impl Allocator {
    /// Fills an agent (with `free` unoffered, below zero on a fungible kind an earlier pick
    /// overbooked, of `total`) task at a time under the configured policy, charging each pick
    /// to the cycle's projection and adding it to `parts`: returns the picks in order.
    pub(super) fn plan_agent(
        &mut self,
        state: &AllocationState,
        free: ResourceVec,
        total: ResourceVec,
        exclusions: &Exclusions,
        index: &mut CycleIndex,
        parts: &mut Parts,
    ) -> Vec<PlannedPick> {
        let overbook = matches!(self.config.policy, InterJobPolicy::DeficitCounters { .. });
        let allowance = Overbooking(self.config.overbook_allowance);
        let mut search = self.agent_search(index, &free, &total, exclusions);
        // Below zero on a fungible kind once a pick overbooked it.
        let mut available = free;
        let mut picks = Vec::new();
        loop {
            let floor = available.max(&ResourceVec::ZERO);
            if !self.could_fit_any(index, &floor, &total, overbook) {
                break;
            }
            // The reservation-guarantee tier first (module `guarantees`): ahead of the policy
            // and of the κ·C gate, without overbooking.
            if let Some((f, shape)) = self.choose_guaranteed(&floor, exclusions) {
                let demand = self.frameworks[f.get()].demand.shapes[shape].demand;
                search.memo.advance(Some(&demand));
                let exhausted = self.take_one(state, f, shape, true, parts);
                picks.push(PlannedPick {
                    framework: f,
                    shape,
                    overbook: false,
                    guaranteed: true,
                });
                available -= demand;
                if exhausted || matches!(self.config.policy, InterJobPolicy::Drf) {
                    self.relist(state, index, f);
                }
                continue;
            }
            let view = AgentView::new(floor, total).overbooking_against(available);
            let Some(chosen) = self.choose(state, &view, exclusions, index, &mut search) else {
                search.memo.advance(None);
                break;
            };
            let choice = chosen.choice;
            let f = choice.framework;
            // The framework is chosen by its best task for the agent (Fig. 8's t_best); the
            // task charged is the one it will launch first from its part, its first fitting
            // shape in summary order (its own best-first order), so that the projection the
            // κ·C gate reads is what a best-first framework really launches, as the
            // whole-agent rule projects it. An overbooking choice is charged as chosen.
            let shape = if choice.overbook {
                choice.shape
            } else {
                self.first_fitting_shape(f, &chosen.limit.min(&floor))
                    .unwrap_or(choice.shape)
            };
            let Some(demand) = self.frameworks[f.get()]
                .demand
                .shapes
                .get(shape)
                .map(|s| s.demand)
            else {
                search.memo.advance(None);
                break;
            };
            let admissible = if choice.overbook {
                allowance.admits(&(total - available + demand), &total)
            } else {
                fits(&demand, &chosen.limit)
            };
            if !admissible {
                search.memo.advance(None);
                break;
            }
            search.memo.advance(Some(&demand));
            let exhausted = self.take_one(state, f, shape, false, parts);
            picks.push(PlannedPick {
                framework: f,
                shape,
                overbook: choice.overbook,
                guaranteed: false,
            });
            available -= demand;
            // A framework's key moves when a shape runs out (its score bound, or it leaves the
            // set), and under DRF with every pick (its share).
            if exhausted || matches!(self.config.policy, InterJobPolicy::Drf) {
                self.relist(state, index, f);
            }
        }
        index.memo.finish(search.memo);
        picks
    }

    /// The first of `f`'s pending shapes in summary order with projected work that fits `room`.
    pub(super) fn first_fitting_shape(
        &mut self,
        f: FrameworkIdx,
        room: &ResourceVec,
    ) -> Option<usize> {
        let soft = self.cycle_counts(f);
        // No shape with projected work fits where their component-wise minimum does not.
        if !fits(&soft.cycle_min, room) {
            return None;
        }
        soft.demand
            .shapes
            .iter()
            .enumerate()
            .position(|(s, shape)| soft.cycle_counts[s] > 0 && fits(&shape.demand, room))
    }

    /// Charges one task of `f`'s pending `shape` to the cycle's projection and to `parts`
    /// (`guaranteed`: picked by the reservation-guarantee tier). Returns whether that was the
    /// shape's last projected task (which changes the framework's envelopes and score bound) or
    /// the framework's last one.
    pub(super) fn take_one(
        &mut self,
        state: &AllocationState,
        f: FrameworkIdx,
        shape: usize,
        guaranteed: bool,
        parts: &mut Parts,
    ) -> bool {
        let factor_kind = state.deficits().factor();
        let capacity = state.capacity();
        let group = state.framework(f).map_or(GroupIdx(0), |r| r.group);
        let soft = self.cycle_counts(f);
        let Some(demand) = soft.demand.shapes.get(shape).map(|s| s.demand) else {
            return false;
        };
        if soft.cycle_counts[shape] == 0 {
            return false;
        }
        soft.cycle_counts[shape] -= 1;
        soft.cycle_pending = soft.cycle_pending.saturating_sub(1);
        let exhausted = soft.cycle_counts[shape] == 0;
        if exhausted {
            // The minimum and envelopes range over the shapes with projected work.
            soft.refresh_envelopes();
        }
        let exhausted = exhausted || soft.cycle_pending == 0;
        soft.offered += demand;
        self.spend_guarantee(f, &demand);
        let charge = factor_kind.of(&demand, &capacity);
        if let Some(group_soft) = self.groups.get_mut(group.get()) {
            group_soft.offered += demand;
            group_soft.inflight += charge;
        }
        self.inflight_total += charge;
        match parts.0.iter_mut().find(|p| p.framework == f) {
            Some(part) => {
                part.demand += demand;
                part.charge += charge;
                part.guaranteed |= guaranteed;
            }
            None => parts.0.push(Part {
                framework: f,
                group,
                demand,
                charge,
                guaranteed,
            }),
        }
        exhausted
    }

    /// Turns the parts of agent `a` into offers ([`Allocator::settle_parts`]) and registers
    /// them as out.
    pub(super) fn offer_parts(
        &mut self,
        state: &AllocationState,
        a: AgentIdx,
        free: ResourceVec,
        parts: Parts,
        kind: OfferKind,
        out: &mut Vec<OfferDecision>,
    ) {
        // Most agents a cycle plans get no pick.
        if parts.0.is_empty() {
            return;
        }
        let Some(agent_id) = state.agent(a).map(|r| &r.id) else {
            return;
        };
        for (part, resources) in self.settle_parts(free, parts) {
            let soft = &mut self.agents[a.get()];
            soft.offered += resources;
            soft.offers.push(OutstandingOffer {
                framework: part.framework,
                group: part.group,
                resources,
                kind,
                guaranteed: part.guaranteed,
                expected_charge: part.charge,
            });
            let Some(framework) = state.framework(part.framework).map(|r| r.id.clone()) else {
                continue;
            };
            out.push(OfferDecision {
                agent: agent_id.clone(),
                framework,
                resources,
                kind,
                guaranteed: part.guaranteed,
            });
        }
    }

    /// What each part of an agent with `free` unoffered is offered: the sum of its picks, cut
    /// to what is still free (an overbooking pick asks for more of a fungible kind than is
    /// free; the wire carries no negative amounts). The framework's and group's offered
    /// resources, charged per pick, are corrected to what the offer holds.
    pub(super) fn settle_parts(
        &mut self,
        free: ResourceVec,
        parts: Parts,
    ) -> Vec<(Part, ResourceVec)> {
        let mut left = free;
        let mut settled = Vec::with_capacity(parts.0.len());
        for part in parts.0 {
            let resources = part.demand.min(&left);
            left = left.saturating_sub(&resources);
            let fw = &mut self.frameworks[part.framework.get()];
            fw.offered = fw.offered.saturating_sub(&part.demand) + resources;
            if let Some(group) = self.groups.get_mut(part.group.get()) {
                group.offered = group.offered.saturating_sub(&part.demand) + resources;
            }
            settled.push((part, resources));
        }
        settled
    }

    /// η of Graphene's perfScore over every pending task of every framework with demand
    /// ([`EtaRule::AllPending`]): `m · avg(pScore) / avg(srpt)`, with each task's pScore taken on
    /// an idle agent of each capacity class, weighted by the class's agents, and its job's srpt.
    /// 0 while either average is 0.
    pub(super) fn eta_over_pending(&self, state: &AllocationState) -> f64 {
        let classes: Vec<(ResourceVec, usize)> = self
            .capacity_classes
            .values()
            .take(MAX_CAPACITY_CLASSES)
            .copied()
            .collect();
        let agents: usize = classes.iter().map(|(_, n)| n).sum();
        if agents == 0 {
            return 0.0;
        }
        let (mut tasks, mut p_sum, mut srpt_sum) = (0.0, 0.0, 0.0);
        for (f, _) in state.frameworks() {
            let soft = &self.frameworks[f.get()];
            if !soft.counted {
                continue;
            }
            for shape in &soft.demand.shapes {
                let n = f64::from(shape.count);
                let p: f64 = classes
                    .iter()
                    .map(|(capacity, count)| {
                        *count as f64 * packing_score(capacity, &shape.demand, capacity, 1.0)
                    })
                    .sum::<f64>()
                    / agents as f64;
                tasks += n;
                p_sum += n * p;
                srpt_sum += n * soft.demand.srpt;
            }
        }
        if tasks == 0.0 || p_sum <= 0.0 || srpt_sum <= 0.0 {
            return 0.0;
        }
        DEFAULT_ETA_MULTIPLIER * (p_sum / tasks) / (srpt_sum / tasks)
    }
}
