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
//! The smallest pending shape is taken kind by kind, so an agent may hold it and still no
//! actual shape: on the simulator's busy clusters most agents a cycle looked at were such
//! misfits, planned for nothing cycle after cycle. A cycle that makes its offers in place
//! (one shard, or [`super::Allocator::allocate_shard`]) passes over them too: it keeps the
//! pending shapes that no other is below kind by kind (their cover, [`Cover`]; a shape fits
//! nowhere its cover's shapes all miss), and parks an agent none of them fits. Misfits are
//! woken like the others, and at a cycle's start by a pending shape that is not at least one
//! they are all known to miss (the misfits' bound) when it fits the room they were parked
//! with. A snapshot of the shards visits them (it weighs each shard by the free resources of
//! the agents that hold the smallest shape, so it must see the same agents as before).
//!
//! Only when the caller reports every release ([`super::Allocator::pass_over_idle_agents`]): a
//! master's state is released by applied commands the allocator does not see.

use super::AgentIdx;
use crate::fit::fits;
use crate::resources::ResourceVec;

/// At most this many shapes in a [`Cover`] or the misfits' bound: beyond it a cover falls
/// back to the component-wise minimum, and the bound to the current cycle's cover, so that
/// checking an agent stays cheap whatever the number of distinct shapes.
const MAX_COVER: usize = 16;

/// Whether `low` is at most `high` in every kind: an agent that cannot hold `low` cannot hold
/// `high` (the fit rule is monotone in the demand).
fn below(low: &ResourceVec, high: &ResourceVec) -> bool {
    low.0.iter().zip(high.0.iter()).all(|(l, h)| l <= h)
}

/// Shapes such that every pending shape of a cycle is at least one of them kind by kind: an
/// agent that fits none of them fits no pending shape. Built from the pending shapes, it keeps
/// those no other is below (more than [`MAX_COVER`] of them: only their component-wise minimum).
#[derive(Clone, Debug, Default)]
pub(super) struct Cover {
    shapes: Vec<ResourceVec>,
    /// Component-wise minimum of every shape added.
    minimum: Option<ResourceVec>,
    overflowed: bool,
}

impl Cover {
    /// Adds a pending shape.
    pub(super) fn add(&mut self, shape: &ResourceVec) {
        self.minimum = Some(self.minimum.map_or(*shape, |m| m.min(shape)));
        if self.overflowed || self.shapes.iter().any(|c| below(c, shape)) {
            return;
        }
        self.shapes.retain(|c| !below(shape, c));
        self.shapes.push(*shape);
        if self.shapes.len() > MAX_COVER {
            self.overflowed = true;
        }
    }

    /// The covering shapes.
    pub(super) fn shapes(&self) -> &[ResourceVec] {
        if self.overflowed {
            std::slice::from_ref(self.minimum.as_ref().unwrap_or(&ResourceVec::ZERO))
        } else {
            &self.shapes
        }
    }

    /// Whether `room` holds one of the covering shapes (false when nothing is pending).
    pub(super) fn fits_in(&self, room: &ResourceVec) -> bool {
        self.shapes().iter().any(|shape| fits(shape, room))
    }
}

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
    /// By agent slot, the room of a parked misfit (module documentation).
    misfits: Vec<Option<ResourceVec>>,
    /// How many misfits are parked.
    misfit_count: usize,
    /// Shapes no parked misfit can hold, nor any shape at least as large in every kind.
    misfit_bound: Vec<ResourceVec>,
}

impl IdleAgents {
    /// From now on, agents are parked.
    pub(super) fn enable(&mut self) {
        self.enabled = true;
    }

    /// Whether agent `a` is passed over by every cycle.
    pub(super) fn is_parked(&self, a: AgentIdx) -> bool {
        self.parked.get(a.get()).copied().unwrap_or(false)
    }

    /// Whether agent `a` is passed over by a cycle that makes its offers in place.
    pub(super) fn is_misfit(&self, a: AgentIdx) -> bool {
        self.misfits.get(a.get()).is_some_and(Option::is_some)
    }

    /// Agent `a`, whose `room` holds the smallest pending shape of this cycle kind by kind,
    /// holds none of `cover`, this cycle's [`Cover`] (after [`IdleAgents::begin_misfits`]).
    pub(super) fn park_misfit(&mut self, a: AgentIdx, room: ResourceVec, cover: &[ResourceVec]) {
        if !self.enabled {
            return;
        }
        if self.misfits.len() <= a.get() {
            self.misfits.resize(a.get() + 1, None);
        }
        if self.misfits[a.get()].replace(room).is_none() {
            self.misfit_count += 1;
        }
        // The bound's shapes this agent misses still bound every misfit; the cover's shapes
        // do as well (every misfit was checked against those `begin_misfits` added).
        self.misfit_bound.retain(|shape| !fits(shape, &room));
        for shape in cover {
            if !self.misfit_bound.iter().any(|b| below(b, shape)) {
                self.misfit_bound.push(*shape);
            }
        }
        if self.misfit_bound.len() > MAX_COVER {
            self.misfit_bound = cover.to_vec();
        }
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
        if let Some(misfit) = self.misfits.get_mut(a.get()) {
            if misfit.take().is_some() {
                self.misfit_count -= 1;
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
        if self.misfit_count > 0 {
            self.misfits.fill(None);
            self.misfit_count = 0;
        }
        self.misfit_bound.clear();
    }

    /// At the start of a cycle that makes its offers in place, with `cover` its [`Cover`]:
    /// wakes the misfits that one of its shapes not known to miss them fits.
    pub(super) fn begin_misfits(&mut self, cover: &[ResourceVec]) {
        if self.misfit_count == 0 {
            self.misfit_bound = cover.to_vec();
            return;
        }
        let unknown: Vec<ResourceVec> = cover
            .iter()
            .filter(|shape| !self.misfit_bound.iter().any(|b| below(b, shape)))
            .copied()
            .collect();
        if unknown.is_empty() {
            return;
        }
        for misfit in &mut self.misfits {
            if misfit.is_some_and(|room| unknown.iter().any(|shape| fits(shape, &room))) {
                *misfit = None;
                self.misfit_count -= 1;
            }
        }
        // Every misfit still parked misses the bound's shapes and the unknown ones: so all of
        // the cover's.
        self.misfit_bound.extend(unknown);
        if self.misfit_bound.len() > MAX_COVER {
            self.misfit_bound = cover.to_vec();
        }
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
