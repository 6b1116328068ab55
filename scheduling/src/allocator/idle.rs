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

/// One bit per agent slot (clear beyond the last word).
#[derive(Clone, Debug, Default)]
struct SlotBits(Vec<u64>);

impl SlotBits {
    fn get(&self, slot: usize) -> bool {
        self.word(slot / 64) >> (slot % 64) & 1 == 1
    }

    /// The bits of slots `64 * word ..`.
    fn word(&self, word: usize) -> u64 {
        self.0.get(word).copied().unwrap_or(0)
    }

    /// Sets the bit of `slot`; returns whether it was clear.
    fn set(&mut self, slot: usize) -> bool {
        let word = slot / 64;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        let was_clear = self.0[word] >> (slot % 64) & 1 == 0;
        self.0[word] |= 1 << (slot % 64);
        was_clear
    }

    /// Clears the bit of `slot`; returns whether it was set.
    fn clear(&mut self, slot: usize) -> bool {
        let was_set = self.get(slot);
        if was_set {
            self.0[slot / 64] &= !(1 << (slot % 64));
        }
        was_set
    }

    fn clear_all(&mut self) {
        self.0.fill(0);
    }
}

/// The parked agents (module documentation).
#[derive(Clone, Debug, Default)]
pub(super) struct IdleAgents {
    /// Whether the caller reports every release, without which nothing is parked.
    enabled: bool,
    /// By agent slot.
    parked: SlotBits,
    /// By agent slot, the free resources and total a parked agent had when found too small
    /// (`None`: found with nothing free, which no shape fits).
    parked_with: Vec<Option<(ResourceVec, ResourceVec)>>,
    /// How many are parked.
    count: usize,
    /// Kind by kind, the largest of the smallest pending shapes agents were parked under.
    bound: ResourceVec,
    /// By agent slot, whether it is a parked misfit (module documentation), and its room.
    misfits: SlotBits,
    misfit_rooms: Vec<ResourceVec>,
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
        self.parked.get(a.get())
    }

    /// Whether agent `a` is passed over by a cycle that makes its offers in place.
    pub(super) fn is_misfit(&self, a: AgentIdx) -> bool {
        self.misfits.get(a.get())
    }

    /// How many agents a cycle passes over (the parked misfits counted when it makes its
    /// offers `in_place`).
    pub(super) fn asleep(&self, in_place: bool) -> usize {
        self.count + if in_place { self.misfit_count } else { 0 }
    }

    /// Appends to `order` the slots in `slots`, in ascending order, that a cycle visits and
    /// `keep` accepts: those not parked, nor parked misfits when the cycle makes its offers
    /// `in_place`. A word of slots at a time, so that a cycle on a cluster whose agents are
    /// nearly all parked does not look at each of them.
    pub(super) fn awake_slots(
        &self,
        slots: std::ops::Range<usize>,
        in_place: bool,
        keep: impl Fn(usize) -> bool,
        order: &mut Vec<AgentIdx>,
    ) {
        if slots.is_empty() {
            return;
        }
        for word in slots.start / 64..slots.end.div_ceil(64) {
            let mut asleep = self.parked.word(word);
            if in_place {
                asleep |= self.misfits.word(word);
            }
            let mut awake = !asleep;
            let first = word * 64;
            if slots.start > first {
                awake &= u64::MAX << (slots.start - first);
            }
            if slots.end < first + 64 {
                awake &= u64::MAX >> (first + 64 - slots.end);
            }
            while awake != 0 {
                let slot = first + awake.trailing_zeros() as usize;
                awake &= awake - 1;
                if keep(slot) {
                    order.push(AgentIdx(slot as u32));
                }
            }
        }
    }

    /// Agent `a`, whose `room` holds the smallest pending shape of this cycle kind by kind,
    /// holds none of `cover`, this cycle's [`Cover`] (after [`IdleAgents::begin_misfits`]).
    pub(super) fn park_misfit(&mut self, a: AgentIdx, room: ResourceVec, cover: &[ResourceVec]) {
        if !self.enabled {
            return;
        }
        if self.misfit_rooms.len() <= a.get() {
            self.misfit_rooms.resize(a.get() + 1, ResourceVec::ZERO);
        }
        self.misfit_rooms[a.get()] = room;
        if self.misfits.set(a.get()) {
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
        if self.parked_with.len() <= a.get() {
            self.parked_with.resize(a.get() + 1, None);
        }
        if self.parked.set(a.get()) {
            self.count += 1;
        }
        self.parked_with[a.get()] = with;
        true
    }

    /// Something may have freed resources on agent `a` (or it changed): visited again.
    pub(super) fn wake(&mut self, a: AgentIdx) {
        if self.parked.clear(a.get()) {
            self.count -= 1;
        }
        if self.misfits.clear(a.get()) {
            self.misfit_count -= 1;
        }
    }

    /// Every agent is visited again.
    pub(super) fn wake_all(&mut self) {
        if self.count > 0 {
            self.parked.clear_all();
            self.count = 0;
        }
        self.bound = ResourceVec::ZERO;
        if self.misfit_count > 0 {
            self.misfits.clear_all();
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
        for (slot, room) in self.misfit_rooms.iter().enumerate() {
            if self.misfits.get(slot)
                && unknown.iter().any(|shape| fits(shape, room))
                && self.misfits.clear(slot)
            {
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
        for (slot, with) in self.parked_with.iter().enumerate() {
            if self.parked.get(slot)
                && with
                    .as_ref()
                    .is_some_and(|(free, total)| could_fit(free, total))
                && self.parked.clear(slot)
            {
                self.count -= 1;
            }
        }
        // Every agent still parked was found unable to hold this cycle's smallest shape.
        self.bound = *min_demand;
    }
}
