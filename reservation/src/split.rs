//! The one rule for cutting an atom's work into leases: how `w` bundle-quanta lie on a run of
//! consecutive quanta so that every quantum holds `g` to `h` bundles and every bundle is held at
//! least `l` quanta (Rayon §3.1). Validation asks whether any run can ([`reachable`]); both
//! placement policies ask whether a given run can ([`split_run`]).
//!
//! A run of `n` quanta carries `w = n·b + r` (`r < n`) as two adjacent rectangles, `b` bundles
//! on its first `n − r` quanta and `b + 1` on its last `r`; each rectangle is a set of leases as
//! long as itself, so each must last at least `l`.

use crate::rdl::Atom;

/// How many run lengths [`reachable`] tries before it gives up: it is conservative past them,
/// and validation stays cheap whatever the numbers.
const MAX_RUN_LENGTHS_TRIED: u64 = 4_096;

/// An atom in a plan's quanta.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomShape {
    /// g.
    pub(crate) gang: u64,
    /// h.
    pub(crate) max_parallel: u64,
    /// l in quanta, rounded up, at least 1.
    pub(crate) lease: u64,
    /// w in bundle-quanta (validation requires a whole number).
    pub(crate) work: u64,
}

impl AtomShape {
    pub(crate) fn of(atom: &Atom, quantum_ms: u64) -> AtomShape {
        AtomShape {
            gang: u64::from(atom.gang),
            max_parallel: u64::from(atom.max_parallel),
            lease: atom.min_lease_ms.div_ceil(quantum_ms).max(1),
            work: atom.work_ms / quantum_ms,
        }
    }

    /// The shortest time the atom can take: a lease, or its work at full parallelism.
    pub(crate) fn min_span(&self) -> u64 {
        self.lease.max(self.work.div_ceil(self.max_parallel.max(1)))
    }
}

/// `work` on a run of `len` quanta: `low` bundles on the first `len − high_len`, `low + 1` on the
/// last `high_len` (the taller part later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunSplit {
    pub(crate) len: u64,
    pub(crate) low: u64,
    pub(crate) high_len: u64,
}

impl RunSplit {
    /// The rectangles as `(offset from the run's start, length, bundles)`.
    pub(crate) fn rectangles(&self) -> impl Iterator<Item = (u64, u64, u64)> {
        let low_len = self.len - self.high_len;
        [
            (0, low_len, self.low),
            (low_len, self.high_len, self.low + 1),
        ]
        .into_iter()
        .filter(|&(_, len, bundles)| len > 0 && bundles > 0)
    }
}

/// How `work` lies on a run of `len` quanta where at most `max_height` bundles fit at every
/// quantum, under `shape`'s gang and lease; `None` when it cannot.
pub(crate) fn split_run(
    work: u64,
    len: u64,
    max_height: u64,
    shape: &AtomShape,
) -> Option<RunSplit> {
    if len == 0 || len < shape.lease {
        return None;
    }
    let (low, high_len) = (work / len, work % len);
    let fits = if high_len == 0 {
        low <= max_height
    } else {
        low < max_height && high_len >= shape.lease && len - high_len >= shape.lease
    };
    (low >= shape.gang && fits).then_some(RunSplit { len, low, high_len })
}

/// Whether `work` bundle-quanta can lie on some run of at most `max_len` quanta at full
/// parallelism (or is nothing). Conservative past [`MAX_RUN_LENGTHS_TRIED`] lengths.
pub(crate) fn reachable_work(work: u64, shape: &AtomShape, max_len: u64) -> bool {
    if work == 0 {
        return true;
    }
    let shortest = shape.lease.max(work.div_ceil(shape.max_parallel.max(1)));
    let longest = max_len.min(work / shape.gang.max(1));
    (shortest..=longest)
        .take(MAX_RUN_LENGTHS_TRIED as usize)
        .any(|len| split_run(work, len, shape.max_parallel, shape).is_some())
}

/// Whether the atom's whole work can lie on some run of at most `max_len` quanta.
pub(crate) fn reachable(shape: &AtomShape, max_len: u64) -> bool {
    reachable_work(shape.work, shape, max_len)
}

/// The work an atom still needs once `allocated` of its bundle-quanta were allocated: nothing
/// when that was all of it; otherwise the rest, raised to the least amount its gang, parallelism
/// and lease can hold (a rest under `g` bundles for `l` quanta cannot be held on its own), and
/// never more than its whole work (which validation found reachable).
pub(crate) fn remaining_work(shape: &AtomShape, allocated: u64) -> u64 {
    let rest = shape.work.saturating_sub(allocated);
    if rest == 0 {
        return 0;
    }
    // Every run is at least a lease long and holds at least a gang at each quantum.
    let least = rest.max(shape.gang.saturating_mul(shape.lease));
    (least..shape.work)
        .find(|&work| reachable_work(work, shape, u64::MAX))
        .unwrap_or(shape.work)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(gang: u64, max_parallel: u64, lease: u64, work: u64) -> AtomShape {
        AtomShape {
            gang,
            max_parallel,
            lease,
            work,
        }
    }

    #[test]
    fn a_rigid_gang_takes_only_multiples_of_its_size() {
        let rigid = shape(3, 3, 1, 9);
        assert!(reachable(&rigid, u64::MAX));
        assert!(!reachable(&shape(3, 3, 1, 10), u64::MAX));
        assert_eq!(
            split_run(9, 3, 3, &rigid),
            Some(RunSplit {
                len: 3,
                low: 3,
                high_len: 0
            })
        );
        assert_eq!(split_run(9, 2, 3, &rigid), None);
    }

    #[test]
    fn a_remainder_needs_a_lease_of_its_own() {
        // 5 on two quanta is 2 then 3: the third bundle would be held one quantum, under l = 2.
        let s = shape(2, 3, 2, 5);
        assert_eq!(split_run(5, 2, 3, &s), None);
        assert!(!reachable(&s, u64::MAX));
        // 10 on four quanta is 2, 2, 3, 3: both rectangles two long.
        let s = shape(2, 3, 2, 10);
        let split = split_run(10, 4, 3, &s).expect("fits");
        let rects: Vec<_> = split.rectangles().collect();
        assert_eq!(rects, vec![(0, 2, 2), (2, 2, 3)]);
        assert_eq!(rects.iter().map(|(_, l, b)| l * b).sum::<u64>(), 10);
    }

    #[test]
    fn the_rest_of_an_atom_is_what_its_gang_and_lease_can_hold() {
        // Plenty left: just the rest.
        assert_eq!(remaining_work(&shape(1, 4, 2, 40), 10), 30);
        assert_eq!(remaining_work(&shape(1, 4, 2, 40), 40), 0);
        assert_eq!(remaining_work(&shape(1, 4, 2, 40), 50), 0);
        // 3 left, but a gang of 2 for 2 quanta holds at least 4.
        assert_eq!(remaining_work(&shape(2, 4, 2, 40), 37), 4);
        // A rigid gang of 3 holds multiples of 3 only: 5 left is 6.
        assert_eq!(remaining_work(&shape(3, 3, 1, 30), 25), 6);
        // Never more than the whole.
        assert_eq!(remaining_work(&shape(4, 4, 5, 20), 1), 20);
    }

    #[test]
    fn a_run_shorter_than_the_lease_or_too_low_holds_nothing() {
        let s = shape(1, 10, 4, 8);
        assert_eq!(split_run(8, 3, 10, &s), None);
        assert!(split_run(8, 4, 2, &s).is_some());
        assert_eq!(split_run(8, 4, 1, &s), None);
        assert!(!reachable(&s, 3));
    }
}
