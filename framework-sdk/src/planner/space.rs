//! The virtual resource-time space of Graphene §4.2 (tech report §4.2 and §4.4): `m` machines,
//! each with `d` resources, over an unbounded time axis.
//!
//! Each machine's usage is a step function kept as a sorted array of breakpoints. The queries
//! the placements need are "earliest start at or after `t` where a task of this demand and
//! duration fits on this machine" (forward placement) and "latest end at or before `t`"
//! (backward placement). The tech report's §4.4 mentions "a time and resource indexed hash map
//! of free regions"; we chose the step function instead because it answers both queries by one
//! binary search and a scan over the regions the task would overlap, and because merging
//! breakpoints that do not change the usage keeps it small (see [`Timeline`]). Callers keep a
//! per-(stage, machine) *frontier* (see [`Probe::frontier`]) so that the many alike tasks of a
//! stage do not rescan the regions the earlier ones already proved too full.
//!
//! Time may be negative: backward placement onto an empty space packs tasks leftwards from 0.

use fullerene_proto::resources::EPSILON;
use fullerene_proto::{ResourceVec, NUM_RESOURCES};

/// Relative slack when comparing a usage against a capacity: sums of many fractional demands
/// carry rounding errors that grow with the capacity's magnitude (memory in MiB is in the tens
/// of thousands), so an absolute epsilon alone would reject exact fits.
const RELATIVE_TOLERANCE: f64 = 1e-9;

/// A demand compiled against a machine capacity: the test "does this demand fit beside a
/// usage" as one comparison per resource kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Fit {
    demand: [f64; NUM_RESOURCES],
    /// `capacity - demand + tolerance` for each kind the demand uses, infinity for the others:
    /// a usage admits the demand when it is at most this in every kind.
    limit: [f64; NUM_RESOURCES],
    /// The demand uses no resource at all (it never changes a machine's usage).
    uses_nothing: bool,
}

impl Fit {
    /// Compiles `demand` against one machine's `capacity`. The caller has checked that the
    /// demand fits an empty machine.
    pub(crate) fn new(demand: &ResourceVec, capacity: &ResourceVec) -> Fit {
        let mut limit = [f64::INFINITY; NUM_RESOURCES];
        for (l, (&need, &cap)) in limit.iter_mut().zip(demand.0.iter().zip(capacity.0.iter())) {
            if need > 0.0 {
                *l = cap - need + tolerance(cap);
            }
        }
        Fit {
            demand: demand.0,
            limit,
            uses_nothing: demand.0.iter().all(|&d| d <= 0.0),
        }
    }

    /// True when the demand fits beside `used`. Kinds the demand does not use have an infinite
    /// limit, so all kinds are compared, without branches.
    #[inline]
    fn admits(&self, used: &[f64; NUM_RESOURCES]) -> bool {
        used.iter()
            .zip(self.limit.iter())
            .fold(true, |ok, (u, l)| ok & (u <= l))
    }
}

/// The comparison slack for a capacity (see [`RELATIVE_TOLERANCE`]).
pub(crate) fn tolerance(capacity: f64) -> f64 {
    EPSILON.max(capacity.abs() * RELATIVE_TOLERANCE)
}

/// The answer to a fit query on one machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Probe {
    /// The start (forward) or end (backward) found, or `None` when nothing beats the bound the
    /// caller gave.
    pub(crate) at: Option<f64>,
    /// How far the query proved the machine too full *at any single instant* for this demand:
    /// forward, every instant in `[from, frontier)`; backward, every instant just before an end
    /// in `(frontier, to]`. Usage only grows while a schedule is built, so the proof stays valid
    /// and the next query for the same demand may start from here.
    pub(crate) frontier: f64,
}

/// One breakpoint of a machine's usage step function: `used` holds from `start` until the next
/// breakpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Breakpoint {
    start: f64,
    used: [f64; NUM_RESOURCES],
}

/// One machine's usage over time, a step function kept as a sorted array of breakpoints. Before
/// the first breakpoint and from the last one on, the machine is idle (the last breakpoint always
/// carries zero usage, since every task ends). Region `k` is `[points[k-1].start,
/// points[k].start)` with usage `points[k-1].used`; regions `0` and `points.len()` are idle.
///
/// A plain array rather than a tree: redundant breakpoints are merged as tasks are placed (the
/// tasks of a stage run back to back at the same usage), so a timeline holds a few hundred
/// breakpoints even for jobs of thousands of tasks, and contiguous scans and short moves beat
/// pointer chasing at that size.
#[derive(Clone, Debug)]
struct Timeline {
    points: Vec<Breakpoint>,
    /// The latest start and the earliest end of the tasks placed. After `latest_start` the
    /// usage never rises, and before `earliest_end` it never falls, so a window that starts at
    /// or after the one (ends at or before the other) fits as soon as its first (last) instant
    /// does: the queries skip the scan of the window where the schedule grows at its edges.
    latest_start: f64,
    earliest_end: f64,
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline {
            points: Vec::new(),
            latest_start: f64::NEG_INFINITY,
            earliest_end: f64::INFINITY,
        }
    }
}

impl Timeline {
    /// Index of the breakpoint at `t`, inserting one (carrying the usage in force at `t`) if
    /// there is none. Searches from index `from` on (all earlier breakpoints are before `t`),
    /// linearly for the first few and then by bisection: a task's end is usually a handful of
    /// breakpoints after its start.
    fn split_at(&mut self, t: f64, from: usize) -> usize {
        const LINEAR: usize = 8;
        let rest = &self.points[from..];
        let i = from
            + match rest.iter().take(LINEAR).position(|p| p.start >= t) {
                Some(k) => k,
                None if rest.len() <= LINEAR => rest.len(),
                None => LINEAR + rest[LINEAR..].partition_point(|p| p.start < t),
            };
        if self.points.get(i).is_some_and(|p| p.start == t) {
            return i;
        }
        let used = if i == 0 {
            [0.0; NUM_RESOURCES]
        } else {
            self.points[i - 1].used
        };
        self.points.insert(i, Breakpoint { start: t, used });
        i
    }

    /// Drops breakpoint `i` when it does not change the usage, which keeps back-to-back tasks of
    /// one stage from leaving a breakpoint per task behind.
    fn merge_if_redundant(&mut self, i: usize) {
        let previous = if i == 0 {
            [0.0; NUM_RESOURCES]
        } else {
            self.points[i - 1].used
        };
        if self.points[i].used == previous {
            self.points.remove(i);
        }
    }

    fn add(&mut self, fit: &Fit, start: f64, end: f64) {
        self.latest_start = self.latest_start.max(start);
        self.earliest_end = self.earliest_end.min(end);
        let first = self.split_at(start, self.points.partition_point(|p| p.start < start));
        let last = self.split_at(end, first);
        for point in &mut self.points[first..last] {
            for (u, d) in point.used.iter_mut().zip(fit.demand.iter()) {
                *u += *d;
            }
        }
        self.merge_if_redundant(last);
        self.merge_if_redundant(first);
    }
}

/// The resource-time space: one usage step function per machine, and the span of everything
/// placed so far.
#[derive(Clone, Debug)]
pub(crate) struct Space {
    machines: Vec<Timeline>,
    span: Option<(f64, f64)>,
}

impl Space {
    /// An empty space of `machines` identical machines.
    pub(crate) fn new(machines: usize) -> Space {
        Space {
            machines: vec![Timeline::default(); machines],
            span: None,
        }
    }

    /// Earliest start of everything placed (0 for an empty space).
    pub(crate) fn span_start(&self) -> f64 {
        self.span.map_or(0.0, |s| s.0)
    }

    /// Latest end of everything placed (0 for an empty space).
    pub(crate) fn span_end(&self) -> f64 {
        self.span.map_or(0.0, |s| s.1)
    }

    /// Length of the schedule placed so far: the measure "most compact" compares (Fig. 8).
    pub(crate) fn makespan(&self) -> f64 {
        self.span.map_or(0.0, |(a, b)| b - a)
    }

    /// Earliest `start >= from` with `start < beat` such that `fit` holds on `machine` during
    /// `[start, start + duration)`. `beat` lets a caller that already has a start on another
    /// machine stop early.
    pub(crate) fn earliest_start(
        &self,
        machine: usize,
        fit: &Fit,
        duration: f64,
        from: f64,
        beat: f64,
    ) -> Probe {
        let line = &self.machines[machine];
        let points = line.points.as_slice();
        let n = points.len();
        let mut k = points.partition_point(|p| p.start <= from);
        let mut candidate = from;
        let mut frontier = None;
        loop {
            if candidate >= beat {
                return Probe {
                    at: None,
                    frontier: frontier.unwrap_or(candidate),
                };
            }
            if k > 0 && k < n && !fit.admits(&points[k - 1].used) {
                candidate = points[k].start;
                k += 1;
                continue;
            }
            let frontier = *frontier.get_or_insert(candidate);
            if candidate >= line.latest_start {
                return Probe {
                    at: Some(candidate),
                    frontier,
                };
            }
            // The regions after region k that start before the window ends must fit too.
            let end = candidate + duration;
            let blocked = points[k.min(n)..]
                .iter()
                .take_while(|p| p.start < end)
                .position(|p| !fit.admits(&p.used));
            match blocked {
                None => {
                    return Probe {
                        at: Some(candidate),
                        frontier,
                    }
                }
                // Region k + b + 1 does not fit: resume after it.
                Some(b) => {
                    let j = k + b;
                    candidate = points.get(j + 1).map_or(f64::INFINITY, |p| p.start);
                    k = j + 2;
                }
            }
        }
    }

    /// Latest `end <= to` with `end > beat` such that `fit` holds on `machine` during
    /// `[end - duration, end)`: the mirror image of [`Space::earliest_start`].
    pub(crate) fn latest_end(
        &self,
        machine: usize,
        fit: &Fit,
        duration: f64,
        to: f64,
        beat: f64,
    ) -> Probe {
        let line = &self.machines[machine];
        let points = line.points.as_slice();
        let n = points.len();
        // Region k holds the instant just before `to`.
        let mut k = points.partition_point(|p| p.start < to);
        let mut candidate = to;
        let mut frontier = None;
        loop {
            if candidate <= beat {
                return Probe {
                    at: None,
                    frontier: frontier.unwrap_or(candidate),
                };
            }
            if k > 0 && k < n && !fit.admits(&points[k - 1].used) {
                candidate = points[k - 1].start;
                k -= 1;
                continue;
            }
            let frontier = *frontier.get_or_insert(candidate);
            if candidate <= line.earliest_end || k == 0 {
                return Probe {
                    at: Some(candidate),
                    frontier,
                };
            }
            // The regions before region k that end after the window starts must fit too; region
            // m ends at points[m].start and has usage points[m - 1].used, for m = k - 1 down to 1.
            let start = candidate - duration;
            let blocked = points[..k - 1]
                .iter()
                .zip(&points[1..k])
                .rev()
                .take_while(|(_, next)| next.start > start)
                .position(|(p, _)| !fit.admits(&p.used));
            match blocked {
                None => {
                    return Probe {
                        at: Some(candidate),
                        frontier,
                    }
                }
                // Region m = k - 1 - b does not fit: the window must end by its start.
                Some(b) => {
                    let m = k - 1 - b;
                    candidate = points[m - 1].start;
                    k = m - 1;
                }
            }
        }
    }

    /// True when `fit` holds on `machine` during `[start, start + duration)`.
    pub(crate) fn fits_at(&self, machine: usize, fit: &Fit, start: f64, duration: f64) -> bool {
        let points = self.machines[machine].points.as_slice();
        let end = start + duration;
        // The region holding `start`, then every region that starts before the window ends.
        let k = points.partition_point(|p| p.start <= start);
        (k == 0 || fit.admits(&points[k - 1].used))
            && points[k..]
                .iter()
                .take_while(|p| p.start < end)
                .all(|p| fit.admits(&p.used))
    }

    /// Places a task occupying `fit`'s demand on `machine` during `[start, end)`.
    pub(crate) fn place(&mut self, machine: usize, fit: &Fit, start: f64, end: f64) {
        if end > start && !fit.uses_nothing {
            self.machines[machine].add(fit, start, end);
        }
        self.span = Some(match self.span {
            None => (start, end),
            Some((a, b)) => (a.min(start), b.max(end)),
        });
    }

    /// Number of breakpoints on a machine (a measure of the space's fragmentation, for tests).
    #[cfg(test)]
    pub(crate) fn breakpoints(&self, machine: usize) -> usize {
        self.machines[machine].points.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_proto::ResourceKind;

    fn cap() -> ResourceVec {
        ResourceVec::from_pairs(&[(ResourceKind::Cpus, 4.0), (ResourceKind::MemMib, 8.0)])
    }

    fn fit(cpus: f64, mem: f64) -> Fit {
        Fit::new(
            &ResourceVec::from_pairs(&[(ResourceKind::Cpus, cpus), (ResourceKind::MemMib, mem)]),
            &cap(),
        )
    }

    #[test]
    fn earliest_start_skips_regions_that_are_too_full_or_too_short() {
        let mut space = Space::new(1);
        let big = fit(3.0, 1.0);
        space.place(0, &big, 0.0, 10.0);
        space.place(0, &big, 12.0, 20.0);
        // A 2-cpu task cannot run beside a 3-cpu one; the gap [10, 12) is too short for 5 s.
        let two = fit(2.0, 1.0);
        let probe = space.earliest_start(0, &two, 5.0, 0.0, f64::INFINITY);
        assert_eq!(probe.at, Some(20.0));
        assert_eq!(probe.frontier, 10.0, "[0, 10) is proved too full");
        // ... but a 2 s task fits the gap.
        assert_eq!(
            space.earliest_start(0, &two, 2.0, 0.0, f64::INFINITY).at,
            Some(10.0)
        );
        // A 1-cpu task fits beside the 3-cpu ones right away.
        assert_eq!(
            space
                .earliest_start(0, &fit(1.0, 1.0), 50.0, 3.0, f64::INFINITY)
                .at,
            Some(3.0)
        );
        // A bound stops the search.
        assert_eq!(space.earliest_start(0, &two, 5.0, 0.0, 15.0).at, None);
    }

    #[test]
    fn latest_end_mirrors_earliest_start() {
        let mut space = Space::new(1);
        let big = fit(3.0, 7.0);
        space.place(0, &big, -10.0, 0.0);
        space.place(0, &big, -20.0, -12.0);
        let two = fit(2.0, 2.0);
        let probe = space.latest_end(0, &two, 5.0, 0.0, f64::NEG_INFINITY);
        assert_eq!(probe.at, Some(-20.0));
        assert_eq!(probe.frontier, -10.0);
        assert_eq!(
            space.latest_end(0, &two, 2.0, 0.0, f64::NEG_INFINITY).at,
            Some(-10.0)
        );
        assert_eq!(space.latest_end(0, &two, 5.0, 0.0, -15.0).at, None);
    }

    #[test]
    fn placing_accumulates_usage_and_merges_redundant_breakpoints() {
        let mut space = Space::new(2);
        let one = fit(1.0, 2.0);
        for k in 0..4 {
            space.place(0, &one, 0.0, 10.0);
            assert!(space.fits_at(0, &one, 0.0, 10.0) == (k < 3));
        }
        assert!(!space.fits_at(0, &one, 5.0, 1.0));
        assert!(space.fits_at(0, &one, 10.0, 1.0));
        assert!(
            space.fits_at(1, &one, 0.0, 10.0),
            "machines are independent"
        );
        // A chain of alike tasks back to back leaves only the two outer breakpoints.
        space.place(1, &one, 0.0, 1.0);
        space.place(1, &one, 1.0, 2.0);
        space.place(1, &one, 2.0, 3.0);
        assert_eq!(space.breakpoints(1), 2);
        assert_eq!(space.makespan(), 10.0);
        assert_eq!(space.span_start(), 0.0);
    }

    #[test]
    fn exact_fits_are_not_rejected_for_rounding() {
        let capacity = ResourceVec::from_pairs(&[(ResourceKind::Cpus, 1.0)]);
        let tenth = Fit::new(
            &ResourceVec::from_pairs(&[(ResourceKind::Cpus, 0.1)]),
            &capacity,
        );
        let mut space = Space::new(1);
        for _ in 0..9 {
            space.place(0, &tenth, 0.0, 1.0);
        }
        assert!(space.fits_at(0, &tenth, 0.0, 1.0));
        space.place(0, &tenth, 0.0, 1.0);
        assert!(!space.fits_at(0, &tenth, 0.0, 1.0));
    }
}
