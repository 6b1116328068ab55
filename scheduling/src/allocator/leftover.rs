//! Leftover redistribution (Carbyne §3.3.4, `LEFTOVERSCHEDULER` of its pseudocode).
//!
//! A framework that runs Carbyne's altruism takes only the tasks that must start now and yields
//! the rest of its offer. The yielded resources are offered again at once, not at the next
//! cycle. §3.3.4 gives leftover scheduling two goals: shortest remaining time first (which
//! lowers the average completion time), then packing as many unscheduled tasks as possible.
//! By default ([`LeftoverRule::SrtfThenPacking`]) the leftover is divided task at a time:
//! frameworks in SRTF order each pack their best-aligned pending tasks into what is left, and
//! what the shorter jobs cannot use goes on to the next, each framework offered its part. With
//! [`LeftoverRule::SrtfOnly`] the whole leftover goes to the framework with the least remaining
//! work among those with a pending shape that fits it, ties broken by the best packing score of
//! a fitting shape, then by registration order. The yielder of a regular offer is a candidate like every other
//! framework: Pseudocode 1's `LEFTOVERSCHEDULER` runs over all jobs in SRTF order, donors
//! included, so a donor gets back what no job with less remaining work can use, which keeps
//! altruism work-conserving (§3.3.1: J1 "is instead running that task at time 0 to ensure work
//! conservation").
//! A framework that yields a *leftover* offer has had its turn: it is left out of this agent's
//! leftovers for the rest of the cycle, which also ends every chain of yields. (Leaving every
//! donor out idles whatever only the donor could use until the next cycle, so that altruism
//! delays the donor even when nobody else wants its resources.)
//!
//! Under [`InterJobPolicy::DeficitCounters`] the κ·C gate applies to leftovers too: while the
//! most deprived runnable group with pending work (leaving out groups whose frameworks all
//! refuse the agent) is at or above κ·C, only its frameworks are candidates (if none fits, the
//! leftover waits for the next cycle), and the offer is capped like a regular one. Carbyne keeps DRF's
//! fairness by construction (a yielder gives up only what it does not need now); the deficit
//! counters see every launch, leftover or not, so without the gate a stream of leftover offers
//! could push a group past the bound the operator set.

use crate::scoring::{packing_score, PerfScore};

use super::matching::Parts;
use super::policies::Choice;
use super::*;

/// A framework that could take the leftover.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    framework: FrameworkIdx,
    group: GroupIdx,
    remaining_work: f64,
    /// Packing score of its best fitting shape on the leftover.
    packing: f64,
    registration: u64,
    shape: usize,
}

impl Allocator {
    /// Offers the whole of `leftover` of agent `a` to the one framework with the least
    /// remaining work that can use it ([`LeftoverRule::SrtfOnly`]), and returns the offer.
    pub(super) fn redistribute(
        &mut self,
        state: &AllocationState,
        a: AgentIdx,
        leftover: ResourceVec,
        now_s: f64,
    ) -> Option<OfferDecision> {
        let total = state.agent(a)?.total;
        let exclusions = self.exclusions(state, a, now_s, true);
        let frameworks: Vec<(FrameworkIdx, GroupIdx, u64)> = state
            .frameworks()
            .filter(|(f, _)| self.frameworks[f.get()].counted && !exclusions.contains(*f))
            .map(|(f, r)| (f, r.group, r.registration))
            .collect();
        let mut candidates: Vec<Candidate> = Vec::new();
        for (framework, group, registration) in frameworks {
            let soft = self.cycle_counts(framework);
            let mut best: Option<(usize, f64)> = None;
            for (s, shape) in soft.demand.shapes.iter().enumerate() {
                if soft.cycle_counts[s] == 0 || !fits(&shape.demand, &leftover) {
                    continue;
                }
                let p = packing_score(&leftover, &shape.demand, &total, 1.0);
                if best.is_none_or(|(_, bp)| p > bp) {
                    best = Some((s, p));
                }
            }
            if let Some((shape, packing)) = best {
                candidates.push(Candidate {
                    framework,
                    group,
                    remaining_work: soft.demand.remaining_work,
                    packing,
                    registration,
                    shape,
                });
            }
        }
        let mut headroom = f64::INFINITY;
        let mut gate = None;
        if let InterJobPolicy::DeficitCounters { kappa, .. } = self.config.policy {
            let projected = self.projected_deficits(state);
            let threshold = kappa * state.capacity_units();
            let runnable = self.runnable_groups(state);
            if let Some(&most_deprived) = self
                .gate_order(&projected, &runnable, exclusions.refusing())
                .first()
            {
                if projected[most_deprived.get()] >= threshold {
                    candidates.retain(|c| c.group == most_deprived);
                }
            }
            gate = Some((projected, threshold, runnable));
        }
        let chosen = candidates.into_iter().min_by(|x, y| {
            x.remaining_work
                .total_cmp(&y.remaining_work)
                .then(y.packing.total_cmp(&x.packing))
                .then(x.registration.cmp(&y.registration))
        })?;
        if let Some((projected, threshold, runnable)) = gate {
            headroom = self.headroom(state, chosen.group, &projected, threshold, &runnable);
        }
        let choice = Choice {
            framework: chosen.framework,
            shape: chosen.shape,
            overbook: false,
            p_score: chosen.packing,
            score: PerfScore {
                fits: true,
                value: chosen.packing,
            },
        };
        Some(self.make_offer(
            state,
            a,
            choice,
            leftover,
            headroom,
            OfferKind::Leftover,
            false,
            None,
        ))
    }
}

impl Allocator {
    /// Redistributes `leftover` of agent `a` in parts ([`LeftoverRule::SrtfThenPacking`]):
    /// frameworks with pending work that fits, least remaining work first (ties: registration),
    /// each take task at a time their first pending shape in summary order that fits what is
    /// left (the framework's own best-first order, which its matcher follows in its part),
    /// until none of theirs fits; then the next framework. A packing pass then gives what is
    /// still left to the best-aligned pending task of any candidate (Tetris' alignment, the
    /// second goal of §3.3.4). Under the deficit counters the κ·C gate is checked
    /// before every task: while the most deprived runnable group is at or above κ·C only its
    /// frameworks pick. Each framework with picks gets a leftover offer of their sum.
    pub(super) fn redistribute_in_parts(
        &mut self,
        state: &AllocationState,
        a: AgentIdx,
        leftover: ResourceVec,
        now_s: f64,
    ) -> Vec<OfferDecision> {
        let Some(total) = state.agent(a).map(|r| r.total) else {
            return Vec::new();
        };
        let exclusions = self.exclusions(state, a, now_s, true);
        let mut order: Vec<(f64, u64, FrameworkIdx, GroupIdx)> = state
            .frameworks()
            .filter(|(f, _)| self.frameworks[f.get()].counted && !exclusions.contains(*f))
            .map(|(f, r)| {
                let work = self.frameworks[f.get()].demand.remaining_work;
                (work, r.registration, f, r.group)
            })
            .collect();
        order.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        let gate = match self.config.policy {
            InterJobPolicy::DeficitCounters { kappa, .. } => {
                Some((kappa * state.capacity_units(), self.runnable_groups(state)))
            }
            _ => None,
        };
        let mut available = leftover;
        let mut parts = Parts::default();
        for &(_, _, f, group) in &order {
            loop {
                if let Some((threshold, runnable)) = &gate {
                    if self.gate_closed_against(
                        state,
                        group,
                        *threshold,
                        runnable,
                        exclusions.refusing(),
                    ) {
                        break;
                    }
                }
                let Some(shape) = self.first_fitting_shape(f, &available) else {
                    break;
                };
                let demand = self.frameworks[f.get()].demand.shapes[shape].demand;
                self.take_one(state, f, shape, false, &mut parts);
                available = available.saturating_sub(&demand);
            }
        }
        // The packing pass: what no framework took in its turn (the gate held it back, or its
        // best-first order stopped at a shape that no longer fits) goes to the best-aligned
        // pending task of any candidate, task at a time.
        loop {
            let mut best: Option<(f64, FrameworkIdx, usize)> = None;
            for &(_, _, f, group) in &order {
                if let Some((threshold, runnable)) = &gate {
                    if self.gate_closed_against(
                        state,
                        group,
                        *threshold,
                        runnable,
                        exclusions.refusing(),
                    ) {
                        continue;
                    }
                }
                let soft = self.cycle_counts(f);
                for (s, shape) in soft.demand.shapes.iter().enumerate() {
                    if soft.cycle_counts[s] == 0 || !fits(&shape.demand, &available) {
                        continue;
                    }
                    let p = packing_score(&available, &shape.demand, &total, 1.0);
                    if best.is_none_or(|(bp, _, _)| p > bp) {
                        best = Some((p, f, s));
                    }
                }
            }
            let Some((_, f, shape)) = best else {
                break;
            };
            let demand = self.frameworks[f.get()].demand.shapes[shape].demand;
            self.take_one(state, f, shape, false, &mut parts);
            available = available.saturating_sub(&demand);
        }
        let mut out = Vec::new();
        self.offer_parts(state, a, leftover, parts, OfferKind::Leftover, &mut out);
        out
    }
}
