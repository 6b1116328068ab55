//! A run-length-encoded step function of resource vectors over time quanta: the plan's capacity
//! and what its reservations use (Rayon §5.2's "compact run-length encoded form").

use std::collections::BTreeMap;
use std::ops::Bound;

use fullerene_scheduling::{ResourceVec, EPSILON};
use serde::{Deserialize, Serialize};

/// A value per quantum, stored as the quanta where it changes: the value at `t` is the one of
/// the last change at or before `t`, zero before the first. Neighbouring runs never hold equal
/// values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Vec<(u64, ResourceVec)>", into = "Vec<(u64, ResourceVec)>")]
pub struct StepFunction {
    changes: BTreeMap<u64, ResourceVec>,
}

impl StepFunction {
    /// Zero everywhere.
    pub fn new() -> StepFunction {
        StepFunction::default()
    }

    /// `value` from quantum 0 on.
    pub fn constant(value: ResourceVec) -> StepFunction {
        let mut f = StepFunction::new();
        f.add(0, None, value);
        f
    }

    /// The value at quantum `t`.
    pub fn at(&self, t: u64) -> ResourceVec {
        self.changes
            .range(..=t)
            .next_back()
            .map_or(ResourceVec::ZERO, |(_, v)| *v)
    }

    /// The value from the last change on (`None`: zero everywhere, nothing stored).
    pub fn last_value(&self) -> Option<ResourceVec> {
        self.changes.values().next_back().copied()
    }

    /// How many runs are stored (the size of the encoding).
    pub fn runs_stored(&self) -> usize {
        self.changes.len()
    }

    /// Adds `delta` on `[start, end)` (`end` `None`: for ever). Components that come within
    /// [`EPSILON`] of zero become zero, so that removing what was added leaves no residue of
    /// rounding behind.
    pub fn add(&mut self, start: u64, end: Option<u64>, delta: ResourceVec) {
        if end.is_some_and(|end| end <= start) {
            return;
        }
        self.split_at(start);
        if let Some(end) = end {
            self.split_at(end);
        }
        let range = (
            Bound::Included(start),
            end.map_or(Bound::Unbounded, Bound::Excluded),
        );
        for value in self.changes.range_mut(range).map(|(_, v)| v) {
            *value += delta;
            for x in &mut value.0 {
                if x.abs() <= EPSILON {
                    *x = 0.0;
                }
            }
        }
        self.merge_at(start);
        if let Some(end) = end {
            self.merge_at(end);
        }
        // Runs inside the range may have become equal to each other (a zero delta does not
        // change them; rounding may): merge them too, so equal neighbours never stay.
        let inside: Vec<u64> = self
            .changes
            .range(range)
            .map(|(t, _)| *t)
            .filter(|t| *t != start)
            .collect();
        for t in inside {
            self.merge_at(t);
        }
    }

    /// Subtracts `delta` on `[start, end)`.
    pub fn sub(&mut self, start: u64, end: Option<u64>, delta: ResourceVec) {
        self.add(start, end, ResourceVec::ZERO - delta);
    }

    fn split_at(&mut self, t: u64) {
        if !self.changes.contains_key(&t) {
            let value = self.at(t);
            self.changes.insert(t, value);
        }
    }

    /// Removes the change at `t` when it does not change the value.
    fn merge_at(&mut self, t: u64) {
        let Some(value) = self.changes.get(&t) else {
            return;
        };
        let before = self
            .changes
            .range(..t)
            .next_back()
            .map_or(ResourceVec::ZERO, |(_, v)| *v);
        if before == *value {
            self.changes.remove(&t);
        }
    }

    /// The runs overlapping `[start, end)`, clipped to it, as `(start, end, value)`.
    pub fn runs(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, u64, ResourceVec)> + '_ {
        let first = (start, self.at(start));
        let later = self
            .changes
            .range((Bound::Excluded(start), Bound::Excluded(end)))
            .map(|(t, v)| (*t, *v));
        let mut changes = std::iter::once(first).chain(later).peekable();
        std::iter::from_fn(move || {
            let (t, v) = changes.next()?;
            let next = changes.peek().map_or(end, |(n, _)| *n);
            Some((t, next, v))
        })
        .filter(move |(t, next, _)| t < next && *t < end)
    }

    /// The quanta where the value changes, in order.
    pub fn change_points(&self) -> impl Iterator<Item = u64> + '_ {
        self.changes.keys().copied()
    }

    /// Drops what lies before quantum `t` (keeping the value at `t`).
    pub fn forget_before(&mut self, t: u64) {
        let value = self.at(t);
        self.changes = self.changes.split_off(&t);
        self.changes.insert(t, value);
        self.merge_at(t);
    }
}

impl From<Vec<(u64, ResourceVec)>> for StepFunction {
    fn from(changes: Vec<(u64, ResourceVec)>) -> StepFunction {
        StepFunction {
            changes: changes.into_iter().collect(),
        }
    }
}

impl From<StepFunction> for Vec<(u64, ResourceVec)> {
    fn from(f: StepFunction) -> Vec<(u64, ResourceVec)> {
        f.changes.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_scheduling::testkit::cpus;

    #[test]
    fn adding_and_removing_leaves_no_run_behind() {
        let mut f = StepFunction::new();
        f.add(5, Some(8), cpus(0.1));
        f.add(6, Some(12), cpus(0.2));
        assert_eq!(f.at(4), ResourceVec::ZERO);
        assert_eq!(f.at(7), cpus(0.1) + cpus(0.2));
        assert_eq!(f.at(9), cpus(0.2));
        assert_eq!(f.runs_stored(), 4);
        f.sub(5, Some(8), cpus(0.1));
        f.sub(6, Some(12), cpus(0.2));
        assert_eq!(f, StepFunction::new());
    }

    #[test]
    fn runs_are_clipped_to_the_range() {
        let mut f = StepFunction::new();
        f.add(10, Some(20), cpus(1.0));
        f.add(15, None, cpus(2.0));
        let runs: Vec<_> = f.runs(12, 30).collect();
        assert_eq!(
            runs,
            vec![
                (12, 15, cpus(1.0)),
                (15, 20, cpus(3.0)),
                (20, 30, cpus(2.0))
            ]
        );
        assert_eq!(
            f.runs(0, 5).collect::<Vec<_>>(),
            vec![(0, 5, ResourceVec::ZERO)]
        );
    }
}
