//! PlaceTasksF and PlaceTasksB (Graphene §4.2 and Fig. 10; tech report §4.2 and Fig. 7):
//! greedy placement of one subset of tasks onto a partially filled resource-time space.
//!
//! Forward, a task is placed once its parents are placed, at the earliest time at or after its
//! last parent's end when its demand fits on some machine; backward is the mirror image (a task
//! is placed once its children are, at the latest time that ends by its first child's start).
//! Among the ready tasks, the one with the longest runtime goes first.
//!
//! Two details the pseudocode leaves open, and what we chose:
//!
//! - *Which parents gate readiness.* Fig. 10 waits for every parent in the DAG. In the subset
//!   orders of §4.3 a task can have parents that are neither placed yet nor in the subset being
//!   placed (an S task whose parent is in P, with P placed backwards later); waiting for them
//!   would never finish. We wait for the parents that are in the subset; placed parents bound
//!   the start; the others are, by construction of the subset orders (§4.3, Lemma 3), placed
//!   later by a backward placement, which respects the children already placed. Backward
//!   placement mirrors this.
//! - *Where unconstrained tasks go.* A forward task with no placed parent starts searching at
//!   the start of what is already placed (0 on an empty space), so it fills holes instead of
//!   extending the schedule; a backward task with no placed child ends by the end of what is
//!   placed. Ties between machines go to the lowest index (first fit).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Mutex;

use super::problem::Problem;
use super::space::Space;

/// The direction of a placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// PlaceTasksF: parents first, each task as early as possible.
    Forward,
    /// PlaceTasksB: children first, each task as late as possible.
    Backward,
}

/// One placed task.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Placed {
    /// Dense task id in the [`Problem`].
    pub(crate) id: u32,
    pub(crate) machine: u32,
    pub(crate) start: f64,
    pub(crate) end: f64,
}

/// A partially built schedule: the space, what was placed, and per stage the first start and
/// last end of its placed tasks (which is all the dependency checks need, since the tasks of a
/// stage share their parents and children).
#[derive(Clone, Debug)]
pub(crate) struct Partial {
    pub(crate) space: Space,
    pub(crate) placed: Vec<Placed>,
    stage_first_start: Vec<f64>,
    stage_last_end: Vec<f64>,
}

impl Partial {
    /// An empty schedule for `problem`.
    pub(crate) fn new(problem: &Problem) -> Partial {
        Partial {
            space: Space::new(problem.machines),
            placed: Vec::new(),
            stage_first_start: vec![f64::INFINITY; problem.stages.len()],
            stage_last_end: vec![f64::NEG_INFINITY; problem.stages.len()],
        }
    }

    /// Length of what is placed.
    pub(crate) fn makespan(&self) -> f64 {
        self.space.makespan()
    }

    /// Places the task at `position` of stage `s` on `machine` during `[start, end)`. The
    /// caller has checked that it fits there.
    pub(crate) fn record(
        &mut self,
        problem: &Problem,
        s: usize,
        position: usize,
        machine: usize,
        start: f64,
        end: f64,
    ) {
        let stage = &problem.stages[s];
        self.space.place(machine, &stage.fit, start, end);
        self.placed.push(Placed {
            id: (stage.first_id + position) as u32,
            machine: machine as u32,
            start,
            end,
        });
        self.stage_first_start[s] = self.stage_first_start[s].min(start);
        self.stage_last_end[s] = self.stage_last_end[s].max(end);
    }
}

/// The tasks of one subset: for each stage, a range of positions in its longest-first order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subset {
    pub(crate) ranges: Vec<Range<u32>>,
}

impl Subset {
    /// True when the subset holds no task.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.iter().all(std::ops::Range::is_empty)
    }

    /// Number of tasks.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges
            .iter()
            .map(std::iter::ExactSizeIterator::len)
            .sum()
    }
}

/// The makespans to beat, shared by every candidate schedule of one part (built in parallel
/// with rayon or not): the `keep` most compact complete schedules offered so far. A partial
/// schedule already longer than the `keep`-th of them can never be among the `keep` most compact,
/// so its placement stops early (branch and bound). Only strictly longer ones are cut, and the
/// offers only ever lower the cutoff, so which schedules end up among the most compact (and
/// their tie-breaks) does not depend on the order in which candidates finish.
#[derive(Debug)]
pub(crate) struct Bound {
    keep: usize,
    best: Mutex<Vec<f64>>,
    /// The cutoff (`keep`-th best, infinite until `keep` offers), mirrored for lock-free reads.
    /// Non-negative floats order like their bit patterns.
    cutoff: AtomicU64,
}

impl Bound {
    /// A bound that remembers the `keep` (at least 1) most compact schedules.
    pub(crate) fn new(keep: usize) -> Bound {
        Bound {
            keep: keep.max(1),
            best: Mutex::new(Vec::new()),
            cutoff: AtomicU64::new(f64::INFINITY.to_bits()),
        }
    }

    /// The current cutoff.
    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.cutoff.load(AtomicOrdering::Relaxed))
    }

    /// Records a complete schedule's makespan (non-negative).
    pub(crate) fn offer(&self, makespan: f64) {
        debug_assert!(makespan >= 0.0);
        // A panic while holding the lock cannot leave the list inconsistent (it is only
        // ever sorted-inserted into), so a poisoned lock is still usable.
        let mut best = self
            .best
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = best.partition_point(|&m| m <= makespan);
        best.insert(at, makespan);
        best.truncate(self.keep);
        if best.len() == self.keep {
            self.cutoff
                .store(best[self.keep - 1].to_bits(), AtomicOrdering::Relaxed);
        }
    }
}

/// What one placement must not exceed: the shared [`Bound`], and the best complete schedule of
/// the candidate being built (its other subset orders only matter if they beat it).
#[derive(Debug)]
pub(crate) struct Cutoff<'a> {
    shared: &'a Bound,
    own: f64,
}

impl<'a> Cutoff<'a> {
    /// A cutoff following `shared`, with no schedule of its own yet.
    pub(crate) fn new(shared: &'a Bound) -> Cutoff<'a> {
        Cutoff {
            shared,
            own: f64::INFINITY,
        }
    }

    /// The makespan a partial schedule must not exceed.
    pub(crate) fn get(&self) -> f64 {
        self.shared.get().min(self.own)
    }

    /// Notes a complete schedule of this candidate.
    pub(crate) fn tighten(&mut self, makespan: f64) {
        self.own = self.own.min(makespan);
    }
}

/// Marker: the placement was abandoned because it exceeded the [`Bound`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pruned;

/// A ready stage in the placement's priority queue, keyed by the duration of its longest task
/// not yet placed (its tasks are sorted longest first, so that is its next one).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ready {
    duration: f64,
    stage: usize,
}

impl Eq for Ready {}

impl Ord for Ready {
    fn cmp(&self, other: &Ready) -> Ordering {
        // Longest runtime first; among equal runtimes, the earlier stage (deterministic).
        self.duration
            .total_cmp(&other.duration)
            .then(other.stage.cmp(&self.stage))
    }
}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Ready) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Places `subset` onto `partial` (PlaceTasksF or PlaceTasksB of Fig. 10). Stops with
/// [`Pruned`] as soon as the schedule grows longer than `cutoff`.
pub(crate) fn place(
    problem: &Problem,
    partial: &mut Partial,
    subset: &Subset,
    direction: Direction,
    cutoff: &Cutoff,
) -> Result<(), Pruned> {
    let stages = &problem.stages;
    let forward = direction == Direction::Forward;
    // Tasks of the subset still to place, per stage, and the next position to place.
    let mut pending: Vec<u32> = subset.ranges.iter().map(|r| r.end - r.start).collect();
    let mut next: Vec<u32> = subset.ranges.iter().map(|r| r.start).collect();
    // Per stage, how many of the stages it waits for (parents forward, children backward)
    // still have subset tasks to place.
    let waits_on = |s: usize| -> &[usize] {
        if forward {
            &stages[s].parents
        } else {
            &stages[s].children
        }
    };
    let mut blocked: Vec<u32> = (0..stages.len())
        .map(|s| waits_on(s).iter().filter(|&&w| pending[w] > 0).count() as u32)
        .collect();
    let floor = floor_of(partial, direction);
    // Per ready stage: its dependency bound and, per machine, the search frontier.
    let mut limit = vec![floor; stages.len()];
    let mut frontier: Vec<Vec<f64>> = vec![Vec::new(); stages.len()];
    let mut queue = BinaryHeap::new();
    let ready = |s: usize, partial: &Partial, limit: &mut [f64], frontier: &mut [Vec<f64>]| {
        limit[s] = dependency_limit(problem, partial, s, direction, floor);
        frontier[s] = vec![limit[s]; problem.machines];
    };
    for s in 0..stages.len() {
        if pending[s] > 0 && blocked[s] == 0 {
            ready(s, partial, &mut limit, &mut frontier);
            queue.push(Ready {
                duration: stages[s].durations[next[s] as usize],
                stage: s,
            });
        }
    }

    while let Some(Ready { stage: s, .. }) = queue.pop() {
        let position = next[s] as usize;
        put(
            problem,
            partial,
            s,
            position,
            limit[s],
            &mut frontier[s],
            direction,
        );
        if partial.space.makespan() > cutoff.get() {
            return Err(Pruned);
        }
        pending[s] -= 1;
        next[s] += 1;
        if pending[s] > 0 {
            queue.push(Ready {
                duration: stages[s].durations[next[s] as usize],
                stage: s,
            });
            continue;
        }
        let released: &[usize] = if forward {
            &stages[s].children
        } else {
            &stages[s].parents
        };
        for &r in released {
            blocked[r] -= 1;
            if blocked[r] == 0 && pending[r] > 0 {
                ready(r, partial, &mut limit, &mut frontier);
                queue.push(Ready {
                    duration: stages[r].durations[next[r] as usize],
                    stage: r,
                });
            }
        }
    }
    Ok(())
}

/// Places every task of the problem onto `partial`, one at a time in the given `order` of
/// dense ids, each as early (forward) or as late (backward) as its dependencies and the space
/// allow. The order must place every parent stage's tasks before a child's (forward) or every
/// child stage's before a parent's (backward), as a schedule's start (end) order does.
pub(crate) fn place_in_order(
    problem: &Problem,
    partial: &mut Partial,
    order: &[u32],
    direction: Direction,
) {
    let floor = floor_of(partial, direction);
    let mut limit = vec![floor; problem.stages.len()];
    let mut frontier: Vec<Vec<f64>> = vec![Vec::new(); problem.stages.len()];
    for &id in order {
        let (s, position) = problem.locate(id as usize);
        if frontier[s].is_empty() {
            limit[s] = dependency_limit(problem, partial, s, direction, floor);
            frontier[s] = vec![limit[s]; problem.machines];
        }
        put(
            problem,
            partial,
            s,
            position,
            limit[s],
            &mut frontier[s],
            direction,
        );
    }
}

/// The bound every unconstrained task respects: the start of the placed span forward, its end
/// backward. Neither moves during a placement (forward never places before it, backward never
/// after it).
fn floor_of(partial: &Partial, direction: Direction) -> f64 {
    match direction {
        Direction::Forward => partial.space.span_start(),
        Direction::Backward => partial.space.span_end(),
    }
}

/// Where the tasks of stage `s` may go given what is placed: forward, not before the last end
/// of a placed parent task; backward, not after the first start of a placed child task.
fn dependency_limit(
    problem: &Problem,
    partial: &Partial,
    s: usize,
    direction: Direction,
    floor: f64,
) -> f64 {
    let stage = &problem.stages[s];
    match direction {
        Direction::Forward => stage
            .parents
            .iter()
            .map(|&p| partial.stage_last_end[p])
            .fold(floor, f64::max),
        Direction::Backward => stage
            .children
            .iter()
            .map(|&c| partial.stage_first_start[c])
            .fold(floor, f64::min),
    }
}

/// Places the task at `position` of stage `s` at the earliest start at or after `limit`
/// (forward) or the latest end at or before it (backward) over all machines; ties go to the
/// lowest machine. `frontier` is the stage's per-machine search frontier (see
/// [`super::space::Probe::frontier`]), valid because usage only grows.
fn put(
    problem: &Problem,
    partial: &mut Partial,
    s: usize,
    position: usize,
    limit: f64,
    frontier: &mut [f64],
    direction: Direction,
) {
    let stage = &problem.stages[s];
    let duration = stage.durations[position];
    let (machine, start, end) = if duration <= 0.0 {
        (0, limit, limit)
    } else if direction == Direction::Forward {
        let mut best: Option<(usize, f64)> = None;
        for (m, from) in frontier.iter_mut().enumerate() {
            let beat = best.map_or(f64::INFINITY, |b| b.1);
            if *from >= beat {
                continue;
            }
            let probe = partial
                .space
                .earliest_start(m, &stage.fit, duration, *from, beat);
            *from = probe.frontier;
            if let Some(at) = probe.at {
                best = Some((m, at));
                // Nothing starts before the dependency limit: the other machines cannot win.
                if at <= limit {
                    break;
                }
            }
        }
        // Every machine's timeline ends idle and the demand fits an idle machine, so the first
        // machine probed always yields a start.
        let (m, at) = best.unwrap_or((0, frontier[0]));
        (m, at, at + duration)
    } else {
        let mut best: Option<(usize, f64)> = None;
        for (m, to) in frontier.iter_mut().enumerate() {
            let beat = best.map_or(f64::NEG_INFINITY, |b| b.1);
            if *to <= beat {
                continue;
            }
            let probe = partial.space.latest_end(m, &stage.fit, duration, *to, beat);
            *to = probe.frontier;
            if let Some(at) = probe.at {
                best = Some((m, at));
                if at >= limit {
                    break;
                }
            }
        }
        let (m, at) = best.unwrap_or((0, frontier[0]));
        (m, at - duration, at)
    };
    partial.record(problem, s, position, machine, start, end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Job, StageSpec};
    use crate::planner::PlanCluster;
    use crate::testkit;
    use fullerene_proto::{ResourceKind, ResourceVec};

    fn problem(specs: Vec<StageSpec>, machines: usize) -> Problem {
        let job = Job::new("j", "g", None, specs).unwrap();
        let cluster = PlanCluster {
            machines,
            machine_capacity: ResourceVec::from_pairs(&[(ResourceKind::Cpus, 2.0)]),
        };
        Problem::unfinished(&job, &cluster, &|_| false).unwrap()
    }

    fn spec(id: u32, parents: &[u32], durations: &[f64], cpus: f64) -> StageSpec {
        testkit::stage(id, parents, durations, testkit::cpus(cpus))
    }

    fn all(problem: &Problem) -> Subset {
        Subset {
            ranges: problem.stages.iter().map(|s| 0..s.len() as u32).collect(),
        }
    }

    #[test]
    fn forward_places_longest_first_after_parents() {
        let p = problem(
            vec![
                spec(0, &[], &[1.0, 3.0, 2.0], 1.0),
                spec(1, &[0], &[1.0], 2.0),
            ],
            1,
        );
        let mut partial = Partial::new(&p);
        place(&p, &mut partial, &all(&p), Direction::Forward, &unbounded()).unwrap();
        // Stage 0 longest first: 3 s and 2 s side by side at 0, the 1 s task at 2; the 2-cpu
        // child waits for all three.
        let starts: Vec<(u32, f64, f64)> = partial
            .placed
            .iter()
            .map(|x| (x.id, x.start, x.end))
            .collect();
        assert_eq!(
            starts,
            vec![(0, 0.0, 3.0), (1, 0.0, 2.0), (2, 2.0, 3.0), (3, 3.0, 4.0)]
        );
        assert_eq!(partial.makespan(), 4.0);
    }

    #[test]
    fn backward_places_children_first_and_ends_by_their_start() {
        let p = problem(
            vec![
                spec(0, &[], &[1.0, 3.0, 2.0], 1.0),
                spec(1, &[0], &[1.0], 2.0),
            ],
            1,
        );
        let mut partial = Partial::new(&p);
        place(
            &p,
            &mut partial,
            &all(&p),
            Direction::Backward,
            &unbounded(),
        )
        .unwrap();
        let starts: Vec<(u32, f64, f64)> = partial
            .placed
            .iter()
            .map(|x| (x.id, x.start, x.end))
            .collect();
        assert_eq!(
            starts,
            vec![
                (3, -1.0, 0.0),
                (0, -4.0, -1.0),
                (1, -3.0, -1.0),
                (2, -4.0, -3.0)
            ]
        );
        assert_eq!(partial.makespan(), 4.0);
    }

    #[test]
    fn machines_are_chosen_by_earliest_start_then_lowest_index() {
        let p = problem(vec![spec(0, &[], &[2.0, 2.0, 2.0], 2.0)], 2);
        let mut partial = Partial::new(&p);
        place(&p, &mut partial, &all(&p), Direction::Forward, &unbounded()).unwrap();
        let where_: Vec<(u32, f64)> = partial
            .placed
            .iter()
            .map(|x| (x.machine, x.start))
            .collect();
        assert_eq!(where_, vec![(0, 0.0), (1, 0.0), (0, 2.0)]);
    }

    #[test]
    fn placement_stops_once_it_exceeds_the_bound() {
        let p = problem(vec![spec(0, &[], &[2.0, 2.0, 2.0], 2.0)], 1);
        let bound = Bound::new(2);
        bound.offer(5.0);
        assert_eq!(bound.get(), f64::INFINITY, "two schedules are kept");
        bound.offer(9.0);
        assert_eq!(bound.get(), 9.0);
        bound.offer(4.0);
        assert_eq!(bound.get(), 5.0, "the second best");
        bound.offer(7.0);
        assert_eq!(bound.get(), 5.0, "the bound only decreases");
        let mut partial = Partial::new(&p);
        assert_eq!(
            place(
                &p,
                &mut partial,
                &all(&p),
                Direction::Forward,
                &Cutoff::new(&bound)
            ),
            Err(Pruned)
        );
        let fresh = Bound::new(1);
        let mut cutoff = Cutoff::new(&fresh);
        cutoff.tighten(3.0);
        let mut partial = Partial::new(&p);
        assert_eq!(
            place(&p, &mut partial, &all(&p), Direction::Forward, &cutoff),
            Err(Pruned),
            "a candidate's own best prunes its other orders"
        );
    }

    fn unbounded() -> Cutoff<'static> {
        static NEVER_OFFERED: std::sync::OnceLock<Bound> = std::sync::OnceLock::new();
        Cutoff::new(NEVER_OFFERED.get_or_init(|| Bound::new(1)))
    }
}
