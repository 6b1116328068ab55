//! BuildSchedule's per-candidate step and TrySubsetOrders (Graphene §4.3, Figs. 8 and 10; tech
//! report §4.3 and Fig. 7): place the troublesome tasks T first, then the other subsets in each
//! of the four dead-end-free orders TSPC, TSCP, TCSP and TPSC, and keep the most compact result.
//!
//! The direction of each subset's placement is fixed by the order, as in Fig. 10: P is only ever
//! placed backwards (its descendants may already be placed), C only forwards (its ancestors may
//! be), S both ways when it directly follows T (PlaceTasks, the better of the two) and otherwise
//! in the one direction the order allows, and T, on an empty space, both ways.
//!
//! TSPC and TSCP share their first two steps, so S is placed once for both. Every branch is cut
//! as soon as it is longer than the candidate's best order so far or than the schedules kept
//! for the part (see [`super::placement::Bound`]).

use super::candidates::{Candidate, Division};
use super::placement::{place, Bound, Cutoff, Direction, Partial, Pruned, Subset};
use super::problem::Problem;

/// One of the four subset orders (after T).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SubsetOrder {
    /// T, S, P, C.
    Spc,
    /// T, S, C, P.
    Scp,
    /// T, C, S, P.
    Csp,
    /// T, P, S, C.
    Psc,
}

impl SubsetOrder {
    /// The four orders, in the order Fig. 10 lists them (which breaks ties).
    pub const ALL: [SubsetOrder; 4] = [
        SubsetOrder::Spc,
        SubsetOrder::Scp,
        SubsetOrder::Csp,
        SubsetOrder::Psc,
    ];

    /// The order's name, as the papers write it.
    pub fn name(self) -> &'static str {
        match self {
            SubsetOrder::Spc => "TSPC",
            SubsetOrder::Scp => "TSCP",
            SubsetOrder::Csp => "TCSP",
            SubsetOrder::Psc => "TPSC",
        }
    }
}

/// A complete schedule built for one candidate.
#[derive(Clone, Debug)]
pub(crate) struct Built {
    pub(crate) partial: Partial,
    pub(crate) order: SubsetOrder,
}

impl Built {
    pub(crate) fn makespan(&self) -> f64 {
        self.partial.makespan()
    }
}

/// `partial` with `subset` placed in `direction`, or `None` if that exceeded the cutoff.
fn then(
    problem: &Problem,
    mut partial: Partial,
    subset: &Subset,
    direction: Direction,
    cutoff: &Cutoff,
) -> Option<Partial> {
    if subset.is_empty() {
        return Some(partial);
    }
    match place(problem, &mut partial, subset, direction, cutoff) {
        Ok(()) => Some(partial),
        Err(Pruned) => None,
    }
}

/// PlaceTasks of Fig. 10: the more compact of the forward and the backward placement (forward
/// on a tie).
fn either_way(
    problem: &Problem,
    partial: Partial,
    subset: &Subset,
    cutoff: &Cutoff,
) -> Option<Partial> {
    if subset.is_empty() {
        return Some(partial);
    }
    let forward = then(problem, partial.clone(), subset, Direction::Forward, cutoff);
    let backward = then(problem, partial, subset, Direction::Backward, cutoff);
    shorter(forward, backward)
}

/// The more compact of two partial schedules; the first on a tie.
fn shorter(a: Option<Partial>, b: Option<Partial>) -> Option<Partial> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.makespan() < a.makespan() { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Builds the schedule of one candidate (Fig. 8, lines 6–8): T first, then the most compact of
/// the four subset orders. `None` when every order was cut by the shared bound. The candidate's
/// result is offered to the bound once it is known (its other orders are cut by it as well).
pub(crate) fn build(problem: &Problem, candidate: &Candidate, shared: &Bound) -> Option<Built> {
    let Division {
        troublesome,
        others,
        parents,
        children,
    } = candidate.divide(problem);
    use Direction::{Backward, Forward};
    let mut cutoff = Cutoff::new(shared);
    let base = either_way(problem, Partial::new(problem), &troublesome, &cutoff)?;
    let mut best: Option<Built> = None;

    // Orders that coincide when a subset is empty are built once (the first in Fig. 10's list
    // stands for them): with P or C empty, TSCP is TSPC; with S empty, TCSP is TSCP and TPSC
    // is TSPC.
    let (no_s, no_p, no_c) = (others.is_empty(), parents.is_empty(), children.is_empty());
    // TSPC and TSCP: PlaceTasks(S), then P backwards and C forwards in either order.
    if let Some(after_s) = either_way(problem, base.clone(), &others, &cutoff) {
        let spc = then(problem, after_s.clone(), &parents, Backward, &cutoff)
            .and_then(|p| then(problem, p, &children, Forward, &cutoff));
        keep(&mut best, &mut cutoff, spc, SubsetOrder::Spc);
        if !no_p && !no_c {
            let scp = then(problem, after_s, &children, Forward, &cutoff)
                .and_then(|p| then(problem, p, &parents, Backward, &cutoff));
            keep(&mut best, &mut cutoff, scp, SubsetOrder::Scp);
        }
    }
    if !no_s {
        // TCSP: C forwards, S backwards, P backwards.
        let csp = then(problem, base.clone(), &children, Forward, &cutoff)
            .and_then(|p| then(problem, p, &others, Backward, &cutoff))
            .and_then(|p| then(problem, p, &parents, Backward, &cutoff));
        keep(&mut best, &mut cutoff, csp, SubsetOrder::Csp);
        // TPSC: P backwards, S forwards, C forwards.
        let psc = then(problem, base, &parents, Backward, &cutoff)
            .and_then(|p| then(problem, p, &others, Forward, &cutoff))
            .and_then(|p| then(problem, p, &children, Forward, &cutoff));
        keep(&mut best, &mut cutoff, psc, SubsetOrder::Psc);
    }
    if let Some(built) = &best {
        shared.offer(built.makespan());
    }
    best
}

/// Keeps a complete schedule if it is strictly more compact than the candidate's best so far
/// (so ties go to the order listed first), and lets it cut the candidate's remaining orders.
fn keep(
    best: &mut Option<Built>,
    cutoff: &mut Cutoff,
    result: Option<Partial>,
    order: SubsetOrder,
) {
    if let Some(partial) = result {
        cutoff.tighten(partial.makespan());
        if best
            .as_ref()
            .is_none_or(|b| partial.makespan() < b.makespan())
        {
            *best = Some(Built { partial, order });
        }
    }
}
