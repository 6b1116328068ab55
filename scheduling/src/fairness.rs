//! Fairness across groups with deficit counters (Graphene §5; tech report §5, Fig. 8, third box;
//! DESIGN.md "Fairness with deficit counters").
//!
//! Groups `g` (queues, tenants) have weights; their fair shares `f_g` are the weights normalised
//! to 1 over the *active* groups, those with at least one registered framework. When a task of
//! group `g` with demand `d` launches, `deficit_g += factor(d)·(f_g − 1)` and every other active
//! group gets `deficit_g' += factor(d)·f_g'`. `factor = 1` gives slot fairness, `factor =` the
//! task's dominant share of the cluster gives DRF ([`FairnessFactor`]).
//!
//! # Releases
//!
//! The paper updates the counters only when a task is scheduled and says nothing about task
//! completions. Counted that way, a deficit grows for as long as a group has registered work but
//! launches nothing (while its tasks run, or between the stages of a DAG), and the group later
//! monopolises the cluster to "catch up" for time it did not want resources: the banking that
//! deficit round robin avoids by resetting an idle queue. So counters are updated when a launch
//! or a release is applied (DESIGN.md states only the launch update): a release applies the exact inverse of the launch update. With the shares fixed, every counter then equals
//!
//! ```text
//! deficit_g = f_g · H − H_g        (H_g: factor sum of g's running tasks, H = Σ_g H_g)
//! ```
//!
//! i.e. how far group `g` is below its fair share of what is held right now, which is the
//! quantity DRF and the YARN fair scheduler equalise; κ·C is then how far below its share a group
//! may be left so that the allocator can favour packing and short jobs. When the shares change
//! (a group gains its first framework or loses its last one, or a weight changes) the counters
//! are re-based to that closed form, so a group that joins late is owed exactly its share of
//! what is held and nothing for launches made before it existed.
//!
//! Everything here is replicated state: it changes only through the `apply_*` and registration
//! methods, deterministically, so a state machine can own it and the κ·C bound survives a
//! failover.

use std::collections::HashMap;

use crate::resources::{ResourceKind, ResourceVec, EPSILON};
use serde::{Deserialize, Serialize};

/// What one task counts for in the deficit counters (Graphene §5: "factor_t = 1 mimics slot
/// fairness and factor_t = demand of the dominant resource mimics DRF").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FairnessFactor {
    /// Every task counts 1: groups get equal numbers of running tasks (weighted), whatever their
    /// size. The cluster capacity `C` is then counted in slots (see [`slot_count`]).
    Slot,
    /// A task counts its dominant share of the cluster's capacity: groups get equal dominant
    /// shares (weighted). `C` is then 1, the whole cluster.
    Drf,
}

impl FairnessFactor {
    /// The factor of one task with `demand` on a cluster of `cluster_capacity`. Infinite shares
    /// (a demand for a kind the cluster lacks, which can never launch) count as 1.
    pub fn of(self, demand: &ResourceVec, cluster_capacity: &ResourceVec) -> f64 {
        match self {
            FairnessFactor::Slot => 1.0,
            FairnessFactor::Drf => {
                let share = demand.dominant_share(cluster_capacity);
                if share.is_finite() {
                    share
                } else {
                    1.0
                }
            }
        }
    }

    /// The cluster capacity `C` of the κ·C bound, in the unit this factor counts tasks in:
    /// slots for [`FairnessFactor::Slot`] (`slots`, see [`slot_count`]) and 1 (the whole
    /// cluster as a dominant share) for [`FairnessFactor::Drf`].
    pub fn capacity_units(self, slots: f64) -> f64 {
        match self {
            FairnessFactor::Slot => slots,
            FairnessFactor::Drf => 1.0,
        }
    }

    /// The command-line name (`slot`, `drf`).
    pub const fn name(self) -> &'static str {
        match self {
            FairnessFactor::Slot => "slot",
            FairnessFactor::Drf => "drf",
        }
    }
}

impl std::str::FromStr for FairnessFactor {
    type Err = FairnessError;

    fn from_str(s: &str) -> Result<FairnessFactor, FairnessError> {
        match s {
            "slot" | "slots" => Ok(FairnessFactor::Slot),
            "drf" => Ok(FairnessFactor::Drf),
            other => Err(FairnessError::UnknownFactor(other.to_string())),
        }
    }
}

/// How many slots of `slot_size` one machine of `capacity` holds: the slot count Hadoop-style
/// slot fairness reasons in. Kinds the slot does not name (zero in `slot_size`) do not limit it;
/// a machine lacking a kind the slot needs holds no slot.
///
/// The paper does not say how `C` is measured under slot fairness; counting whole slots per
/// machine (YARN's container arithmetic) keeps `κ·C` a number of tasks, the unit slot fairness
/// charges in.
pub fn slot_count(capacity: &ResourceVec, slot_size: &ResourceVec) -> f64 {
    let mut slots = f64::INFINITY;
    for kind in ResourceKind::ALL {
        let size = slot_size[kind];
        if size > EPSILON {
            slots = slots.min((capacity[kind] / size + EPSILON).floor());
        }
    }
    if slots.is_finite() {
        slots.max(0.0)
    } else {
        0.0
    }
}

/// Errors of the fairness configuration.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FairnessError {
    /// A weight that is negative, NaN or infinite.
    #[error("group `{group}` has invalid weight {weight}: weights must be finite and >= 0")]
    InvalidWeight {
        /// The group.
        group: String,
        /// The weight as given.
        weight: f64,
    },
    /// A fairness factor name other than `slot` or `drf`.
    #[error("unknown fairness factor `{0}` (known: slot, drf)")]
    UnknownFactor(String),
}

/// Dense index of a group in [`DeficitCounters`]. Groups are never removed (a group without
/// frameworks is merely inactive), so an index stays valid for the life of the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupIdx(pub u32);

impl GroupIdx {
    /// As a `usize` for indexing.
    pub const fn get(self) -> usize {
        self.0 as usize
    }
}

/// The counter and bookkeeping of one group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupCounter {
    /// The group's name.
    pub name: String,
    /// Its weight (default 1).
    pub weight: f64,
    /// How many registered frameworks belong to it; active when positive.
    pub frameworks: u32,
    /// Sum of the factors of its running tasks (`H_g`).
    pub held: f64,
    /// Its deficit counter: positive when it holds less than its fair share.
    pub deficit: f64,
    /// Its current fair share `f_g` (0 when inactive).
    pub share: f64,
}

/// The deficit counters of every group, with the weights and the factor sums they derive from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeficitCounters {
    factor: FairnessFactor,
    groups: Vec<GroupCounter>,
    by_name: HashMap<String, GroupIdx>,
    total_held: f64,
}

/// Default weight of a group nobody configured.
pub const DEFAULT_GROUP_WEIGHT: f64 = 1.0;

impl DeficitCounters {
    /// No groups yet; tasks are counted with `factor`.
    pub fn new(factor: FairnessFactor) -> DeficitCounters {
        DeficitCounters {
            factor,
            groups: Vec::new(),
            by_name: HashMap::new(),
            total_held: 0.0,
        }
    }

    /// How tasks are counted.
    pub fn factor(&self) -> FairnessFactor {
        self.factor
    }

    /// The index of a group, creating it (weight [`DEFAULT_GROUP_WEIGHT`], inactive) if new.
    pub fn ensure_group(&mut self, name: &str) -> GroupIdx {
        if let Some(&idx) = self.by_name.get(name) {
            return idx;
        }
        let idx = GroupIdx(self.groups.len() as u32);
        self.groups.push(GroupCounter {
            name: name.to_string(),
            weight: DEFAULT_GROUP_WEIGHT,
            frameworks: 0,
            held: 0.0,
            deficit: 0.0,
            share: 0.0,
        });
        self.by_name.insert(name.to_string(), idx);
        idx
    }

    /// The index of a known group.
    pub fn find(&self, name: &str) -> Option<GroupIdx> {
        self.by_name.get(name).copied()
    }

    /// Sets a group's weight (creating the group if new) and re-bases the counters to the new
    /// shares.
    pub fn set_weight(&mut self, name: &str, weight: f64) -> Result<GroupIdx, FairnessError> {
        if !weight.is_finite() || weight < 0.0 {
            return Err(FairnessError::InvalidWeight {
                group: name.to_string(),
                weight,
            });
        }
        let idx = self.ensure_group(name);
        self.groups[idx.get()].weight = weight;
        self.rebase();
        Ok(idx)
    }

    /// A framework of `group` registered: the group may become active, which changes shares.
    pub fn framework_joined(&mut self, group: GroupIdx) {
        let counter = &mut self.groups[group.get()];
        counter.frameworks += 1;
        if counter.frameworks == 1 {
            self.rebase();
        }
    }

    /// A framework of `group` was removed (after its tasks were released).
    pub fn framework_left(&mut self, group: GroupIdx) {
        let counter = &mut self.groups[group.get()];
        counter.frameworks = counter.frameworks.saturating_sub(1);
        if counter.frameworks == 0 {
            self.rebase();
        }
    }

    /// DESIGN.md's update for a launch of a task of `group` counting `factor`:
    /// `deficit_g += factor·(f_g − 1)`, `deficit_g' += factor·f_g'` for every other group.
    pub fn apply_launch(&mut self, group: GroupIdx, factor: f64) {
        self.charge(group, factor);
    }

    /// The inverse of [`DeficitCounters::apply_launch`] for a task that ended (see the module
    /// documentation for why releases count).
    pub fn apply_release(&mut self, group: GroupIdx, factor: f64) {
        let held = self.groups[group.get()].held;
        // Never release more than is held: factors recomputed after a capacity change may differ
        // from the charged ones in the last bits.
        self.charge(group, -factor.min(held));
    }

    fn charge(&mut self, group: GroupIdx, factor: f64) {
        for (i, counter) in self.groups.iter_mut().enumerate() {
            if i == group.get() {
                counter.deficit += factor * (counter.share - 1.0);
                counter.held += factor;
            } else {
                counter.deficit += factor * counter.share;
            }
        }
        self.total_held += factor;
    }

    /// Replaces every group's held factor sum (after the cluster capacity changed, which
    /// changes every DRF factor) and re-bases the counters.
    pub fn reset_held(&mut self, held: &[f64]) {
        self.total_held = 0.0;
        for (counter, &h) in self.groups.iter_mut().zip(held.iter()) {
            counter.held = h;
            self.total_held += h;
        }
        self.rebase();
    }

    /// Recomputes the shares and sets every counter to `f_g·H − H_g`.
    fn rebase(&mut self) {
        let active: Vec<usize> = (0..self.groups.len())
            .filter(|&i| self.groups[i].frameworks > 0)
            .collect();
        let weight_sum: f64 = active.iter().map(|&i| self.groups[i].weight).sum();
        for counter in self.groups.iter_mut() {
            counter.share = 0.0;
        }
        for &i in &active {
            // All-zero weights among the active groups: split evenly rather than leave nobody
            // a share.
            self.groups[i].share = if weight_sum > 0.0 {
                self.groups[i].weight / weight_sum
            } else {
                1.0 / active.len() as f64
            };
        }
        let total = self.total_held;
        for counter in self.groups.iter_mut() {
            counter.deficit = counter.share * total - counter.held;
        }
    }

    /// Number of groups ever seen.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True when no group was ever seen.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// One group's counter and bookkeeping.
    pub fn group(&self, group: GroupIdx) -> &GroupCounter {
        &self.groups[group.get()]
    }

    /// Every group with its index.
    pub fn iter(&self) -> impl Iterator<Item = (GroupIdx, &GroupCounter)> {
        self.groups
            .iter()
            .enumerate()
            .map(|(i, c)| (GroupIdx(i as u32), c))
    }

    /// A group's deficit by name (0 for an unknown group).
    pub fn deficit_of(&self, name: &str) -> f64 {
        self.find(name)
            .map(|g| self.groups[g.get()].deficit)
            .unwrap_or(0.0)
    }

    /// The deficit of `group`.
    pub fn deficit(&self, group: GroupIdx) -> f64 {
        self.groups[group.get()].deficit
    }

    /// The fair share `f_g` of `group` (0 when it has no framework).
    pub fn share(&self, group: GroupIdx) -> f64 {
        self.groups[group.get()].share
    }

    /// Sum of the factors of every running task (`H`).
    pub fn total_held(&self) -> f64 {
        self.total_held
    }

    /// The active group with the largest deficit (ties: the lower index), if any is active.
    pub fn most_deprived(&self) -> Option<(GroupIdx, f64)> {
        let mut best: Option<(GroupIdx, f64)> = None;
        for (idx, counter) in self.iter() {
            if counter.frameworks == 0 {
                continue;
            }
            if best.is_none_or(|(_, d)| counter.deficit > d) {
                best = Some((idx, counter.deficit));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// The worked example: groups a (weight 1) and b (weight 3), slot factor.
    #[test]
    fn launch_updates_follow_design_formula() {
        let mut d = DeficitCounters::new(FairnessFactor::Slot);
        let a = d.ensure_group("a");
        let b = d.set_weight("b", 3.0).unwrap();
        d.framework_joined(a);
        d.framework_joined(b);
        assert!(close(d.share(a), 0.25) && close(d.share(b), 0.75));

        // A task of a: deficit_a += 1·(0.25 − 1) = −0.75, deficit_b += 1·0.75.
        d.apply_launch(a, 1.0);
        assert!(close(d.deficit(a), -0.75), "{}", d.deficit(a));
        assert!(close(d.deficit(b), 0.75));
        // Two tasks of b: deficit_b += 2·(0.75 − 1) = −0.5, deficit_a += 2·0.25 = 0.5.
        d.apply_launch(b, 1.0);
        d.apply_launch(b, 1.0);
        assert!(close(d.deficit(a), -0.25));
        assert!(close(d.deficit(b), 0.25));
        // They always sum to zero: every update moves factor·(Σ f − 1) = 0.
        assert!(close(d.deficit(a) + d.deficit(b), 0.0));
        // Closed form: f_g·H − H_g with H = 3, H_a = 1, H_b = 2.
        assert!(close(d.deficit(a), 0.25 * 3.0 - 1.0));
        assert!(close(d.deficit(b), 0.75 * 3.0 - 2.0));
    }

    #[test]
    fn release_is_the_inverse_of_launch() {
        let mut d = DeficitCounters::new(FairnessFactor::Drf);
        let a = d.ensure_group("a");
        let b = d.ensure_group("b");
        d.framework_joined(a);
        d.framework_joined(b);
        d.apply_launch(a, 0.3);
        d.apply_launch(b, 0.1);
        let before = (d.deficit(a), d.deficit(b));
        d.apply_launch(a, 0.2);
        d.apply_release(a, 0.2);
        assert!(close(d.deficit(a), before.0) && close(d.deficit(b), before.1));
        d.apply_release(a, 0.3);
        d.apply_release(b, 0.1);
        assert!(close(d.deficit(a), 0.0) && close(d.deficit(b), 0.0));
        assert!(close(d.total_held(), 0.0));
    }

    #[test]
    fn slot_and_drf_factors_differ_by_task_size() {
        let cluster: ResourceVec = "cpus=100,mem_mib=1000".parse().unwrap();
        let small: ResourceVec = "cpus=1,mem_mib=10".parse().unwrap();
        let mem_heavy: ResourceVec = "cpus=1,mem_mib=200".parse().unwrap();
        assert_eq!(FairnessFactor::Slot.of(&small, &cluster), 1.0);
        assert_eq!(FairnessFactor::Slot.of(&mem_heavy, &cluster), 1.0);
        assert!(close(FairnessFactor::Drf.of(&small, &cluster), 0.01));
        assert!(close(FairnessFactor::Drf.of(&mem_heavy, &cluster), 0.2));

        // One mem-heavy task against twenty small ones: even under DRF, unequal under slots.
        for (factor, expect_equal) in [(FairnessFactor::Drf, true), (FairnessFactor::Slot, false)] {
            let mut d = DeficitCounters::new(factor);
            let a = d.ensure_group("a");
            let b = d.ensure_group("b");
            d.framework_joined(a);
            d.framework_joined(b);
            d.apply_launch(a, factor.of(&mem_heavy, &cluster));
            for _ in 0..20 {
                d.apply_launch(b, factor.of(&small, &cluster));
            }
            assert_eq!(close(d.deficit(a), 0.0), expect_equal, "{factor:?}");
        }
    }

    #[test]
    fn inactive_groups_have_no_share_and_joining_rebases() {
        let mut d = DeficitCounters::new(FairnessFactor::Slot);
        let a = d.ensure_group("a");
        let b = d.ensure_group("b");
        d.framework_joined(a);
        for _ in 0..4 {
            d.apply_launch(a, 1.0);
        }
        // Alone, a holds all and owes nothing; b is inactive and untouched.
        assert!(close(d.deficit(a), 0.0) && close(d.deficit(b), 0.0));
        d.framework_joined(b);
        // b is owed its half of the four running tasks, not of launches before it existed.
        assert!(close(d.deficit(b), 2.0) && close(d.deficit(a), -2.0));
        assert_eq!(d.most_deprived().map(|(g, _)| g), Some(b));
        d.framework_left(b);
        assert!(close(d.deficit(b), 0.0) && close(d.deficit(a), 0.0));
        assert!(d.set_weight("a", -1.0).is_err());
    }

    #[test]
    fn slot_count_uses_the_scarcest_kind() {
        let machine: ResourceVec = "cpus=16,mem_mib=65536".parse().unwrap();
        let slot: ResourceVec = "cpus=1,mem_mib=8192".parse().unwrap();
        assert_eq!(slot_count(&machine, &slot), 8.0);
        let cpu_slot: ResourceVec = "cpus=1".parse().unwrap();
        assert_eq!(slot_count(&machine, &cpu_slot), 16.0);
        let gpu_slot: ResourceVec = "gpus=1".parse().unwrap();
        assert_eq!(slot_count(&machine, &gpu_slot), 0.0);
    }
}
