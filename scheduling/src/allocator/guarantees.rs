//! The reservation-guarantee tier (Rayon §5.2, the plan follower's guaranteed shares): each
//! framework a reservation owes resources to is offered them before the configured policy (and
//! the κ·C gate) considers anyone.
//!
//! Rayon's PlanFollower resizes YARN queues so that a reservation's jobs get their guaranteed
//! capacity; in two-level offers the allocator does not place tasks, so the guarantee becomes a
//! first claim on offers. The caller (the master's follower timer, the simulator's cycle) works
//! out what each reserved framework is owed (`reservation::follower`: the guarantee it does not
//! hold yet, up to what it asks for) and passes plain amounts: this crate knows nothing of
//! plans or reservations. The set is soft state, replaced by each [`Allocator::set_guarantees`]
//! and rebuilt by a new leader from the follower's next cycle.
//!
//! What a framework is still owed in a cycle is its amount less what it received since the
//! call: the growth of what it holds (accepted launches charged to the state) and what is out
//! on offers to it now (so an offer it has not answered is not made twice, and one it declines
//! is owed again). Every pick of the framework in the cycle, by this tier or by the policy,
//! spends from it, component-wise and saturating: a pick is made while something is still
//! owed, so a framework may receive up to one task more than its amount (tasks do not divide;
//! a strict fit within the amount would leave a guarantee that is not a multiple of the task
//! shape never met). Resources of accepted offers that the state has not charged yet are
//! counted neither as held nor as offered, so for that short span a guarantee may be offered
//! once more; the follower's next call corrects the amount.
//!
//! Guaranteed picks are charged to the deficit counters' projection like any other (the
//! reservation's frameworks belong to groups like everyone), so a group whose reserved jobs
//! took a large guarantee is ahead in the counters and its best-effort frameworks wait their
//! turn afterwards: the reservation's capacity is not free for its group. What the guaranteed
//! frameworks do not take goes to everyone under the configured policy as before, which is
//! Rayon's lending of idle reserved capacity.

use super::policies::{AgentView, Choice, Chosen, Exclusions};
use super::*;

/// One framework's guarantee as set by the last [`Allocator::set_guarantees`].
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Guarantee {
    framework: FrameworkIdx,
    /// The framework's registration when set: a slot reused by another framework owes nothing.
    registration: u64,
    owed: ResourceVec,
    /// What the framework held when set: what it holds beyond that was received since.
    held_at_call: ResourceVec,
}

impl Allocator {
    /// Rayon §5.2 (plan follower), two-level departure: until the next call, each listed
    /// framework is offered up to `owed` of resources before any other framework is considered
    /// (ahead of the policy and of the κ·C gate), in the order listed, on every agent where a
    /// pending shape of it fits and that it does not refuse (a decline filter, an offer of the
    /// agent it holds, suppression). Soft state: the call replaces the previous set (an empty
    /// one clears it) and a new leader rebuilds it from the follower's next call; unknown
    /// framework ids are ignored. See the module `guarantees` for what counts as received.
    pub fn set_guarantees(&mut self, state: &AllocationState, owed: &[(FrameworkId, ResourceVec)]) {
        self.sync(state);
        for old in std::mem::take(&mut self.guarantees) {
            if let Some(soft) = self.frameworks.get_mut(old.framework.get()) {
                soft.cycle_owed = ResourceVec::ZERO;
            }
        }
        for (id, amount) in owed {
            let Ok(f) = state.framework_idx(id) else {
                continue;
            };
            let Some(record) = state.framework(f) else {
                continue;
            };
            if !amount.is_valid() || amount.is_zero() {
                continue;
            }
            self.guarantees.retain(|g| g.framework != f);
            self.guarantees.push(Guarantee {
                framework: f,
                registration: record.registration,
                owed: *amount,
                held_at_call: record.held,
            });
        }
    }

    /// At the start of a cycle: what each guaranteed framework is still owed (its amount less
    /// the growth of what it holds and less what is out on offers to it).
    pub(super) fn begin_guarantees(&mut self, state: &AllocationState) {
        self.guarantee_active = false;
        for g in &self.guarantees {
            let Some(soft) = self.frameworks.get_mut(g.framework.get()) else {
                continue;
            };
            soft.cycle_owed = match state.framework(g.framework) {
                Some(record) if record.registration == g.registration => {
                    let received = record.held.saturating_sub(&g.held_at_call) + soft.offered;
                    g.owed.saturating_sub(&received)
                }
                _ => ResourceVec::ZERO,
            };
            self.guarantee_active |= !soft.cycle_owed.is_zero();
        }
    }

    /// The first guaranteed framework, in the order set, still owed something this cycle, not
    /// refusing the agent, with a pending shape that fits `room`: that framework and its first
    /// such shape (its own best-first order).
    pub(super) fn choose_guaranteed(
        &mut self,
        room: &ResourceVec,
        exclusions: &Exclusions,
    ) -> Option<(FrameworkIdx, usize)> {
        if !self.guarantee_active {
            return None;
        }
        for i in 0..self.guarantees.len() {
            let f = self.guarantees[i].framework;
            let soft = &self.frameworks[f.get()];
            if !soft.counted || soft.cycle_owed.is_zero() || exclusions.contains(f) {
                continue;
            }
            if let Some(shape) = self.first_fitting_shape(f, room) {
                return Some((f, shape));
            }
        }
        None
    }

    /// The tier under [`AgentMatching::WholeAgent`]: the agent's free resources to the first
    /// guaranteed framework [`Allocator::choose_guaranteed`] finds (the offer is then packed
    /// and spent like any whole-agent offer, without the κ·C gate's cap).
    pub(super) fn choose_guaranteed_agent(
        &mut self,
        view: &AgentView,
        exclusions: &Exclusions,
    ) -> Option<Chosen> {
        let (framework, shape) = self.choose_guaranteed(&view.free, exclusions)?;
        Some(Chosen {
            choice: Choice::unscored(framework, shape),
            limit: view.free,
            guaranteed: true,
        })
    }

    /// Whether `f` is still owed something this cycle.
    pub(super) fn still_owed(&self, f: FrameworkIdx) -> bool {
        self.frameworks
            .get(f.get())
            .is_some_and(|soft| !soft.cycle_owed.is_zero())
    }

    /// Spends `received` (a pick or an offer of `f`'s) from what `f` is still owed.
    pub(super) fn spend_guarantee(&mut self, f: FrameworkIdx, received: &ResourceVec) {
        if let Some(soft) = self.frameworks.get_mut(f.get()) {
            if !soft.cycle_owed.is_zero() {
                soft.cycle_owed = soft.cycle_owed.saturating_sub(received);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::FairnessFactor;
    use crate::resources::ResourceKind;
    use crate::testkit::{cpus, machine, summary};

    fn fid(s: &str) -> FrameworkId {
        FrameworkId::from(s)
    }

    /// Four reference machines (16 cpus each); `adhoc` registered before `etl`, both with more
    /// one-cpu tasks than the cluster holds.
    fn cluster(
        policy: InterJobPolicy,
        matching: AgentMatching,
        shards: usize,
    ) -> StandaloneAllocator {
        let mut alloc = StandaloneAllocator::new(AllocatorConfig {
            policy,
            matching,
            shards,
            ..AllocatorConfig::default()
        })
        .expect("valid config");
        for i in 0..4 {
            alloc
                .add_agent(AgentId::from(format!("a{i}").as_str()), machine())
                .expect("agent");
        }
        alloc.add_framework(fid("adhoc"), "adhoc", 0.0).expect("fw");
        alloc.add_framework(fid("etl"), "prod", 1.0).expect("fw");
        for f in ["adhoc", "etl"] {
            alloc
                .update_demand(
                    &fid(f),
                    &summary(&[("cpus=1,mem_mib=1024", 100, 1.0)], 100.0),
                )
                .expect("demand");
        }
        alloc
    }

    fn cpus_to(offers: &[OfferDecision], framework: &str) -> f64 {
        offers
            .iter()
            .filter(|o| o.framework.as_str() == framework)
            .map(|o| o.resources[ResourceKind::Cpus])
            .sum()
    }

    fn etl_holds_three_machines(alloc: &mut StandaloneAllocator) {
        for i in 0..3 {
            let agent = AgentId::from(format!("a{i}").as_str());
            for _ in 0..16 {
                alloc
                    .apply_launch(&agent, &fid("etl"), "cpus=1,mem_mib=1024".parse().unwrap())
                    .expect("launch");
            }
        }
    }

    const MODES: [AgentMatching; 2] = [AgentMatching::TaskAtATime, AgentMatching::WholeAgent];

    #[test]
    fn a_guaranteed_framework_is_offered_its_amount_ahead_of_fifo() {
        for matching in MODES {
            for shards in [1, 4] {
                let mut alloc = cluster(InterJobPolicy::Fifo, matching, shards);
                // Without a guarantee FIFO gives the earlier framework everything.
                let mut control = cluster(InterJobPolicy::Fifo, matching, shards);
                assert_eq!(cpus_to(&control.allocate_all(0.0), "etl"), 0.0);
                alloc.set_guarantees(&[(fid("etl"), cpus(8.0))]);
                let offers = alloc.allocate_all(0.0);
                let etl = cpus_to(&offers, "etl");
                let adhoc = cpus_to(&offers, "adhoc");
                let case = format!("{matching:?}, {shards} shards: etl {etl}, adhoc {adhoc}");
                match matching {
                    // Task at a time: the amount, up to one task over.
                    AgentMatching::TaskAtATime => assert!((8.0..9.0).contains(&etl), "{case}"),
                    // One agent per framework: the guarantee takes a whole agent.
                    AgentMatching::WholeAgent => assert_eq!(etl, 16.0, "{case}"),
                }
                // What the guarantee does not take goes to best effort under FIFO.
                assert!(adhoc > 0.0, "{case}");
                if shards == 1 {
                    assert_eq!(etl + adhoc, 64.0, "{case}");
                }
                // The offers say which come out of the guarantee, as out and as made.
                for offers in [offers, alloc.outstanding_offers()] {
                    for offer in &offers {
                        let from_guarantee = offer.framework.as_str() == "etl";
                        assert_eq!(offer.guaranteed, from_guarantee, "{case}: {offer:?}");
                    }
                }
                assert!(control.outstanding_offers().iter().all(|o| !o.guaranteed));
            }
        }
    }

    #[test]
    fn a_guaranteed_pick_passes_a_closed_unfairness_gate() {
        for matching in MODES {
            for shards in [1, 4] {
                let policy = InterJobPolicy::DeficitCounters {
                    factor: FairnessFactor::Slot,
                    kappa: 0.1,
                };
                let mut alloc = cluster(policy, matching, shards);
                let mut control = cluster(policy, matching, shards);
                // etl holds three machines: adhoc's deficit is far past κ·C.
                for cluster in [&mut alloc, &mut control] {
                    etl_holds_three_machines(cluster);
                }
                let threshold = alloc.unfairness_threshold().expect("deficit policy");
                assert!(alloc.deficits().deficit_of("adhoc") >= threshold);
                // The gate keeps etl out of the last machine...
                assert_eq!(cpus_to(&control.allocate_all(0.0), "etl"), 0.0);
                // ...unless a reservation owes it more.
                alloc.set_guarantees(&[(fid("etl"), cpus(4.0))]);
                let offers = alloc.allocate_all(0.0);
                let etl = cpus_to(&offers, "etl");
                assert!(etl >= 4.0, "{matching:?}, {shards} shards: {offers:?}");
            }
        }
    }

    #[test]
    fn received_resources_are_not_owed_again_and_an_empty_call_clears() {
        for matching in MODES {
            for shards in [1, 4] {
                let mut alloc = cluster(InterJobPolicy::Fifo, matching, shards);
                alloc.set_guarantees(&[(fid("etl"), cpus(8.0))]);
                let first = alloc.allocate_all(0.0);
                assert!(cpus_to(&first, "etl") >= 8.0);
                // etl launches all it was offered: its holdings grew by the amount.
                for offer in first.iter().filter(|o| o.framework.as_str() == "etl") {
                    let tasks = offer.resources[ResourceKind::Cpus] as usize;
                    let launched = vec!["cpus=1,mem_mib=1024".parse().unwrap(); tasks];
                    alloc
                        .offer_answered(
                            &offer.agent,
                            &offer.framework,
                            &launched,
                            LeftoverAction::Decline,
                            0.0,
                        )
                        .expect("answer");
                }
                for offer in first.iter().filter(|o| o.framework.as_str() == "adhoc") {
                    alloc
                        .rescind_offer(&offer.agent, &offer.framework)
                        .expect("rescind");
                }
                // Nothing more is owed: FIFO gives what is free to adhoc.
                let second = alloc.allocate_all(1.0);
                assert_eq!(
                    cpus_to(&second, "etl"),
                    0.0,
                    "{matching:?}, {shards} shards"
                );
                for offer in &second {
                    alloc
                        .rescind_offer(&offer.agent, &offer.framework)
                        .expect("rescind");
                }
                // A larger amount owes the difference again; an empty call clears it.
                alloc.set_guarantees(&[(fid("etl"), cpus(20.0))]);
                let third = alloc.allocate_all(2.0);
                assert!(
                    cpus_to(&third, "etl") > 0.0,
                    "{matching:?}, {shards} shards"
                );
                for offer in &third {
                    alloc
                        .rescind_offer(&offer.agent, &offer.framework)
                        .expect("rescind");
                }
                alloc.set_guarantees(&[]);
                assert_eq!(cpus_to(&alloc.allocate_all(3.0), "etl"), 0.0);
            }
        }
    }

    #[test]
    fn unknown_and_suppressed_frameworks_are_passed_over() {
        let mut alloc = cluster(InterJobPolicy::Fifo, AgentMatching::TaskAtATime, 1);
        alloc.suppress(&fid("etl")).expect("suppress");
        alloc.set_guarantees(&[(fid("nobody"), cpus(8.0)), (fid("etl"), cpus(8.0))]);
        let offers = alloc.allocate_all(0.0);
        assert_eq!(cpus_to(&offers, "etl"), 0.0);
        assert_eq!(cpus_to(&offers, "adhoc"), 64.0);
    }
}
