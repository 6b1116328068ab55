//! Agents a cycle may pass over without a look.
//!
//! A cycle visits every agent of a shard, but on a busy cluster almost all of them have
//! nothing free that the smallest pending shape fits, and finding that out (their free
//! resources net of offers and launches, against the overbooking room) was most of a cycle's
//! cost in the simulator. An agent found so is parked: later cycles skip it until something
//! may have freed resources on it (an offer of it dropped, a launch on it settled, resources
//! released on it, which the caller reports). When the smallest pending shape of a cycle is
//! not at least, kind by kind, every one the agents were parked under, each parked agent is
//! checked against it again with the free resources it was parked with, which are at least
//! what it has now (only what wakes it can free more). Fitting is monotone in the demand and
//! the room, so a parked agent would have been found idle again: skipping it changes no
//! offer. Whatever the visit resets on an agent (its yields and pooled leftover of the last
//! cycle) is only set by answering one of its offers, which wakes it.
//!
//! Only when the caller reports every release ([`super::Allocator::pass_over_idle_agents`]): a
//! master's state is released by applied commands the allocator does not see.

use super::AgentIdx;
use crate::resources::ResourceVec;

/// The parked agents (module documentation).
#[derive(Clone, Debug, Default)]
pub(super) struct IdleAgents {
    /// Whether the caller reports every release, without which nothing is parked.
    enabled: bool,
    /// By agent slot.
    parked: Vec<bool>,
    /// By agent slot, the free resources and total a parked agent had when found too small
    /// (`None`: found with nothing free, which no shape fits).
    parked_with: Vec<Option<(ResourceVec, ResourceVec)>>,
    /// How many are parked.
    count: usize,
    /// Kind by kind, the largest of the smallest pending shapes agents were parked under.
    bound: ResourceVec,
}

impl IdleAgents {
    /// From now on, agents are parked.
    pub(super) fn enable(&mut self) {
        self.enabled = true;
    }

    /// Whether agent `a` is passed over.
    pub(super) fn is_parked(&self, a: AgentIdx) -> bool {
        self.parked.get(a.get()).copied().unwrap_or(false)
    }

    /// Agent `a` has nothing free at all: parked whatever is pending.
    pub(super) fn park_empty(&mut self, a: AgentIdx) {
        self.park(a, None);
    }

    /// Agent `a`, with `free` of `total`, cannot hold `min_demand`, the smallest pending
    /// shape of this cycle.
    pub(super) fn park_too_small(
        &mut self,
        a: AgentIdx,
        free: ResourceVec,
        total: ResourceVec,
        min_demand: &ResourceVec,
    ) {
        if self.park(a, Some((free, total))) {
            self.bound = self.bound.max(min_demand);
        }
    }

    fn park(&mut self, a: AgentIdx, with: Option<(ResourceVec, ResourceVec)>) -> bool {
        if !self.enabled {
            return false;
        }
        if self.parked.len() <= a.get() {
            self.parked.resize(a.get() + 1, false);
            self.parked_with.resize(a.get() + 1, None);
        }
        if !self.parked[a.get()] {
            self.parked[a.get()] = true;
            self.count += 1;
        }
        self.parked_with[a.get()] = with;
        true
    }

    /// Something may have freed resources on agent `a` (or it changed): visited again.
    pub(super) fn wake(&mut self, a: AgentIdx) {
        if let Some(parked) = self.parked.get_mut(a.get()) {
            if *parked {
                *parked = false;
                self.count -= 1;
            }
        }
    }

    /// Every agent is visited again.
    pub(super) fn wake_all(&mut self) {
        if self.count > 0 {
            self.parked.fill(false);
            self.count = 0;
        }
        self.bound = ResourceVec::ZERO;
    }

    /// At a cycle's start, with its smallest pending shape `min_demand`: unless that shape is
    /// at least the bound of every kind (then no parked agent can hold any shape), wakes the
    /// parked agents that `could_fit` says could hold it with what they were parked with.
    pub(super) fn begin_cycle(
        &mut self,
        min_demand: &ResourceVec,
        could_fit: impl Fn(&ResourceVec, &ResourceVec) -> bool,
    ) {
        let covered = min_demand
            .0
            .iter()
            .zip(self.bound.0.iter())
            .all(|(demand, bound)| demand >= bound);
        if covered {
            return;
        }
        for (parked, with) in self.parked.iter_mut().zip(&self.parked_with) {
            if *parked
                && with
                    .as_ref()
                    .is_some_and(|(free, total)| could_fit(free, total))
            {
                *parked = false;
                self.count -= 1;
            }
        }
        // Every agent still parked was found unable to hold this cycle's smallest shape.
        self.bound = *min_demand;
    }
}
