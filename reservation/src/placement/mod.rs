//! Placing an RDL expression in a plan (Rayon §4.2): the traversal every policy shares, and the
//! two greedy policies, GREE (`gree`) and GREE-L (`gree_l`), behind one trait (`PlacementPolicy`).
//!
//! The traversal follows the operators' semantics (Rayon §3.1) right to left, one job at a time
//! and without backtracking (Rayon §4.2's two greedy dimensions):
//!
//! - `window` narrows the interval its child may use;
//! - `all` places every child, last first, each in the same interval;
//! - `order` places its children last first, each ending before the earliest allocation of its
//!   successor, within the interval the policy guesses for it
//!   (`PlacementPolicy::order_interval`);
//! - `any` takes the first alternative that fits, undoing what a failed one placed;
//! - `repeat` was unrolled into an `all` of shifted windows beforehand;
//! - an atom is the policy's (`PlacementPolicy::place_atom`).
//!
//! The adapter places a reservation in progress again with what each atom was allocated before
//! now credited: an atom allocated its whole work is done and takes nothing more (nor holds back
//! its successors in an `order`); one allocated part of it takes the rest
//! ([`crate::split::remaining_work`]); an `any` whose alternative was allocated anything keeps
//! to that alternative.
//!
//! Placement works on a dense copy of the free capacity over the quanta the request can reach
//! (`Room`) and changes the plan only once the whole request is placed, so a refusal leaves the
//! plan untouched. The MILP of Rayon §4.1 is left out: the paper itself finds it impractical
//! online (§4.1.2); a solver-backed policy would be a third implementation of
//! `PlacementPolicy`.

mod gree;
mod gree_l;

use std::collections::BTreeMap;

use fullerene_scheduling::fit::max_copies;
use fullerene_scheduling::ResourceVec;
use serde::{Deserialize, Serialize};

use crate::plan::{AtomAllocation, AtomRef, Piece, Plan, Quanta, Shortfall};
use crate::rdl::{Atom, Expr};
use crate::split::{remaining_work, AtomShape};

/// The placement policy of a cluster (Rayon §4.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    /// GREE: as late as possible, tall and skinny.
    #[default]
    Gree,
    /// GREE-L (Algorithm 1): each atom as flat as possible over an interval guessed for it,
    /// which lowers preemption at the cost of some acceptance.
    GreeL,
}

impl PolicyKind {
    fn policy(self) -> &'static dyn PlacementPolicy {
        match self {
            PolicyKind::Gree => &gree::Gree,
            PolicyKind::GreeL => &gree_l::GreeL,
        }
    }

    /// The name operators use (`gree`, `gree-l`).
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Gree => "gree",
            PolicyKind::GreeL => "gree-l",
        }
    }

    /// Parses [`PolicyKind::name`].
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        [PolicyKind::Gree, PolicyKind::GreeL]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// A placement policy: where one atom goes, and how an `order` divides its interval.
pub(crate) trait PlacementPolicy {
    /// Places `atom`'s whole work within quanta `[start, end)` of `room` or, where that
    /// interval (the policy's guess, [`PlacementPolicy::order_interval`]) cannot hold it,
    /// within `[floor, end)` (`floor ≤ start`: all the time its windows and its successors in
    /// an `order` leave it), taking it from the room; on failure the work that found no place
    /// (the room may then hold part of the atom: the caller undoes it).
    fn place_atom(
        &self,
        room: &mut Room,
        atom: &AtomNode,
        floor: u64,
        start: u64,
        end: u64,
    ) -> Result<Vec<Piece>, u64>;

    /// The interval for the last of `spans.len()` children of an `order` still to place, whose
    /// shortest spans are `spans`, within `[start, end)`.
    fn order_interval(&self, spans: &[u64], start: u64, end: u64) -> (u64, u64);
}

/// An atom ready to place: which it is, its bundle and its shape in quanta.
#[derive(Clone, Debug)]
pub(crate) struct AtomNode {
    pub(crate) at: AtomRef,
    pub(crate) bundle: ResourceVec,
    pub(crate) shape: AtomShape,
}

/// An expression in the plan's quanta, with repeats unrolled and windows made absolute.
#[derive(Clone, Debug)]
enum Node {
    Atom(AtomNode),
    /// An atom allocated its whole work before now: nothing to place.
    Done,
    Any(Vec<Node>),
    All(Vec<Node>),
    Order(Vec<Node>),
    Window {
        start: u64,
        end: u64,
        child: Box<Node>,
    },
}

impl Node {
    /// A lower bound on the span the node can take on a cluster of `capacity`, in quanta, and
    /// on its area: the resources it holds over time (bundle × bundle-quanta, each kind summed).
    ///
    /// An atom's own bound ([`AtomShape::min_span`]) counts its parallelism limit `h` but not
    /// the cluster: the atoms of an `all` may each run `h` bundles at once on their own, but not
    /// all together on a cluster smaller than their sum. So an atom takes at least its work
    /// over the most bundles that fit the cluster at once, and an `all` at least its area's
    /// largest share of the cluster (kind by kind, so that a cpu-bound atom and a memory-bound
    /// one beside it are not counted as competing).
    fn needed_span(&self, capacity: &ResourceVec) -> (u64, ResourceVec) {
        match self {
            Node::Atom(atom) => {
                let shape = &atom.shape;
                let fits = max_copies(&atom.bundle, capacity) as u64;
                if fits == 0 {
                    // It fits nowhere: its placement refuses it, whatever its interval.
                    return (shape.min_span(), ResourceVec::ZERO);
                }
                let at_once = fits.min(shape.max_parallel.max(1));
                let span = shape.min_span().max(shape.work.div_ceil(at_once));
                (span, atom.bundle.scale(shape.work as f64))
            }
            Node::Done => (0, ResourceVec::ZERO),
            Node::Any(children) => children
                .iter()
                .map(|c| c.needed_span(capacity))
                .reduce(|(s, a), (span, area)| (s.min(span), a.min(&area)))
                .unwrap_or((0, ResourceVec::ZERO)),
            Node::All(children) => {
                let (span, area) = children
                    .iter()
                    .map(|c| c.needed_span(capacity))
                    .fold((0, ResourceVec::ZERO), |(s, a), (span, area)| {
                        (s.max(span), a + area)
                    });
                // Less a rounding error's worth: a sum of exact thirds must not round up.
                let by_area = (area.dominant_share(capacity) - 1e-6).ceil().max(0.0) as u64;
                (span.max(by_area), area)
            }
            Node::Order(children) => children
                .iter()
                .map(|c| c.needed_span(capacity))
                .fold((0, ResourceVec::ZERO), |(s, a), (span, area)| {
                    (s + span, a + area)
                }),
            Node::Window { child, .. } => child.needed_span(capacity),
        }
    }

    /// The first quantum the node can reach when unconstrained ones start at `start`.
    fn earliest(&self, start: u64) -> u64 {
        match self {
            Node::Atom(_) | Node::Done => start,
            Node::Any(children) | Node::All(children) | Node::Order(children) => children
                .iter()
                .map(|c| c.earliest(start))
                .min()
                .unwrap_or(start),
            Node::Window {
                start: window_start,
                child,
                ..
            } => child.earliest(start.max(*window_start)),
        }
    }

    /// The end of the last quantum the node can reach when unconstrained ones end at `end`.
    fn reach(&self, end: u64) -> u64 {
        match self {
            Node::Atom(_) | Node::Done => end,
            Node::Any(children) | Node::All(children) | Node::Order(children) => {
                children.iter().map(|c| c.reach(end)).max().unwrap_or(0)
            }
            Node::Window {
                end: window_end,
                child,
                ..
            } => child.reach(end.min(*window_end)),
        }
    }

    /// Whether an atom below was allocated anything before now.
    fn credited(&self, allocated: &BTreeMap<AtomRef, u64>) -> bool {
        match self {
            Node::Atom(atom) => allocated.contains_key(&atom.at),
            Node::Done => true,
            Node::Any(children) | Node::All(children) | Node::Order(children) => {
                children.iter().any(|c| c.credited(allocated))
            }
            Node::Window { child, .. } => child.credited(allocated),
        }
    }
}

/// How [`quantize`] reads a request: its quanta and anchor, and what each atom was allocated
/// before now (empty for a new request).
struct Quantizer<'a> {
    quanta: &'a Quanta,
    anchor_ms: u64,
    allocated: &'a BTreeMap<AtomRef, u64>,
}

/// Turns `expr` into quanta: windows shifted by `shift_ms` and made absolute from
/// `anchor_ms`, atoms numbered in pre-order from `next_atom`, each less what it was allocated.
fn quantize(
    how: &Quantizer<'_>,
    expr: &Expr,
    shift_ms: u64,
    occurrence: u32,
    next_atom: &mut u32,
) -> Node {
    let (quanta, anchor_ms) = (how.quanta, how.anchor_ms);
    let mut children = |list: &[Expr]| -> Vec<Node> {
        list.iter()
            .map(|c| quantize(how, c, shift_ms, occurrence, next_atom))
            .collect()
    };
    match expr {
        Expr::Atom(atom) => {
            let mut node = atom_node(atom, quanta, *next_atom, occurrence);
            *next_atom += 1;
            match how.allocated.get(&node.at) {
                None => Node::Atom(node),
                Some(&allocated) => match remaining_work(&node.shape, allocated) {
                    0 => Node::Done,
                    rest => {
                        node.shape.work = rest;
                        Node::Atom(node)
                    }
                },
            }
        }
        Expr::Any(c) => {
            let mut alternatives = children(c);
            // The alternative the reservation was running is the one it goes on with.
            if let Some(chosen) = alternatives.iter().position(|a| a.credited(how.allocated)) {
                alternatives = vec![alternatives.swap_remove(chosen)];
            }
            Node::Any(alternatives)
        }
        Expr::All(c) => Node::All(children(c)),
        Expr::Order(c) => Node::Order(children(c)),
        Expr::Window {
            expr,
            start_ms,
            end_ms,
        } => {
            let start = anchor_ms.saturating_add(shift_ms).saturating_add(*start_ms);
            let end = anchor_ms.saturating_add(shift_ms).saturating_add(*end_ms);
            Node::Window {
                // Whole quanta inside the window only.
                start: quanta.first_at_or_after(start),
                end: quanta.containing(end),
                child: Box::new(quantize(how, expr, shift_ms, occurrence, next_atom)),
            }
        }
        Expr::Repeat {
            expr,
            period_ms,
            count,
        } => {
            let first_atom = *next_atom;
            let occurrences = (0..*count)
                .map(|k| {
                    // Every occurrence numbers its atoms as written.
                    *next_atom = first_atom;
                    quantize(
                        how,
                        expr,
                        shift_ms.saturating_add(period_ms.saturating_mul(u64::from(k))),
                        occurrence.saturating_mul(*count).saturating_add(k),
                        next_atom,
                    )
                })
                .collect();
            Node::All(occurrences)
        }
    }
}

fn atom_node(atom: &Atom, quanta: &Quanta, index: u32, occurrence: u32) -> AtomNode {
    AtomNode {
        at: AtomRef {
            atom: index,
            occurrence,
        },
        bundle: atom.bundle,
        shape: AtomShape::of(atom, quanta.quantum_ms),
    }
}

/// The free capacity of the quanta `[first, first + free.len())` while a request is placed.
#[derive(Clone, Debug)]
pub(crate) struct Room {
    first: u64,
    free: Vec<ResourceVec>,
}

impl Room {
    fn new(plan: &Plan, first: u64, end: u64) -> Room {
        let mut free = vec![ResourceVec::ZERO; end.saturating_sub(first) as usize];
        for (start, stop, capacity) in plan.capacity().runs(first, end) {
            free[(start - first) as usize..(stop - first) as usize].fill(capacity);
        }
        for (start, stop, used) in plan.used().runs(first, end) {
            if !used.is_zero() {
                for room in &mut free[(start - first) as usize..(stop - first) as usize] {
                    *room -= used;
                }
            }
        }
        Room { first, free }
    }

    /// The quanta the room covers, `[first, end)`.
    pub(crate) fn bounds(&self) -> (u64, u64) {
        (self.first, self.first + self.free.len() as u64)
    }

    /// How many `bundle`s fit at quantum `t` (0 outside the room).
    pub(crate) fn copies_at(&self, t: u64, bundle: &ResourceVec) -> u64 {
        t.checked_sub(self.first)
            .and_then(|i| self.free.get(i as usize))
            .map_or(0, |room| max_copies(bundle, room) as u64)
    }

    /// The free capacity of quanta `[start, end)`, to [`Room::restore`] after an attempt.
    pub(crate) fn saved(&self, start: u64, end: u64) -> Vec<ResourceVec> {
        self.free[(start - self.first) as usize..(end - self.first) as usize].to_vec()
    }

    /// Puts back what [`Room::saved`] saved from quantum `start` on, exactly.
    pub(crate) fn restore(&mut self, start: u64, saved: &[ResourceVec]) {
        let from = (start - self.first) as usize;
        self.free[from..from + saved.len()].copy_from_slice(saved);
    }

    /// Takes `bundles` × `bundle` on quanta `[start, end)`.
    pub(crate) fn take(&mut self, start: u64, end: u64, bundle: &ResourceVec, bundles: u64) {
        let amount = bundle.scale(bundles as f64);
        for room in &mut self.free[(start - self.first) as usize..(end - self.first) as usize] {
            *room -= amount;
        }
    }
}

/// The traversal of module docs, over a policy and a room.
struct Placer<'a> {
    policy: &'a dyn PlacementPolicy,
    room: Room,
    placed: Vec<AtomAllocation>,
    quanta: Quanta,
    /// The cluster's capacity where the request may begin, for the spans the policy divides an
    /// `order`'s interval by (a guess: capacity that changes later in the window is not
    /// counted).
    capacity: ResourceVec,
}

impl Placer<'_> {
    /// Places `node` within `[start, end)`, or where the policy's guess `[start, end)` cannot
    /// hold an atom, within `[floor, end)` (`floor ≤ start`); returns the first quantum it
    /// holds.
    fn place(&mut self, node: &Node, floor: u64, start: u64, end: u64) -> Result<u64, Shortfall> {
        match node {
            Node::Done => Ok(end),
            Node::Atom(atom) => {
                let (room_start, room_end) = self.room.bounds();
                let end = end.min(room_end);
                let start = start.max(room_start).min(end);
                let floor = floor.max(room_start).min(start);
                match self
                    .policy
                    .place_atom(&mut self.room, atom, floor, start, end)
                {
                    Ok(mut pieces) => {
                        merge_adjacent(&mut pieces);
                        let first = pieces.iter().map(|p| p.start).min().unwrap_or(end);
                        self.placed.push(AtomAllocation {
                            atom: atom.at,
                            bundle: atom.bundle,
                            pieces,
                        });
                        Ok(first)
                    }
                    Err(short) => Err(self.shortfall(atom, floor, end, short)),
                }
            }
            Node::Window {
                start: window_start,
                end: window_end,
                child,
            } => {
                // Empty where the interval misses the window: the child then finds no room.
                let end = end.min(*window_end);
                let start = start.max(*window_start).min(end);
                let floor = floor.max(*window_start).min(start);
                self.place(child, floor, start, end)
            }
            Node::All(children) => {
                let mut first = end;
                for child in children.iter().rev() {
                    first = first.min(self.place(child, floor, start, end)?);
                }
                Ok(first)
            }
            Node::Order(children) => {
                let spans: Vec<u64> = children
                    .iter()
                    .map(|c| c.needed_span(&self.capacity).0)
                    .collect();
                let mut before = end;
                for (i, child) in children.iter().enumerate().rev() {
                    // The policy divides only the time the child's own windows leave it.
                    let reach_end = child.reach(before);
                    let reach_start = child.earliest(start).min(reach_end);
                    let child_floor = child.earliest(floor).min(reach_start);
                    let (child_start, child_end) =
                        self.policy
                            .order_interval(&spans[..=i], reach_start, reach_end);
                    before = self.place(child, child_floor, child_start, child_end)?;
                }
                Ok(before)
            }
            Node::Any(alternatives) => {
                let mut first_refusal = None;
                for alternative in alternatives {
                    let (room, placed) = (self.room.clone(), self.placed.len());
                    match self.place(alternative, floor, start, end) {
                        Ok(first) => return Ok(first),
                        Err(shortfall) => {
                            self.room = room;
                            self.placed.truncate(placed);
                            first_refusal.get_or_insert(shortfall);
                        }
                    }
                }
                Err(first_refusal.unwrap_or_else(|| Shortfall {
                    atom: AtomRef {
                        atom: 0,
                        occurrence: 0,
                    },
                    bundle: ResourceVec::ZERO,
                    gang: 0,
                    max_parallel: 0,
                    window_ms: (self.quanta.start_ms(start), self.quanta.start_ms(end)),
                    work_ms: 0,
                    short_ms: 0,
                }))
            }
        }
    }

    fn shortfall(&self, atom: &AtomNode, start: u64, end: u64, short: u64) -> Shortfall {
        let quantum = self.quanta.quantum_ms;
        Shortfall {
            atom: atom.at,
            bundle: atom.bundle,
            gang: atom.shape.gang as u32,
            max_parallel: atom.shape.max_parallel as u32,
            window_ms: (
                self.quanta.start_ms(start),
                self.quanta.start_ms(end.max(start)),
            ),
            work_ms: atom.shape.work.saturating_mul(quantum),
            short_ms: short.saturating_mul(quantum),
        }
    }
}

/// Joins pieces that follow each other with the same number of bundles: one longer lease is
/// still at least the minimum.
pub(crate) fn merge_adjacent(pieces: &mut Vec<Piece>) {
    pieces.sort_by_key(|p| (p.start, p.end, p.bundles));
    let mut merged: Vec<Piece> = Vec::with_capacity(pieces.len());
    for piece in pieces.drain(..) {
        match merged.last_mut() {
            Some(last) if last.end == piece.start && last.bundles == piece.bundles => {
                last.end = piece.end;
            }
            _ => merged.push(piece),
        }
    }
    *pieces = merged;
}

/// Places a (valid) request asked at `anchor_ms` in `plan` at `now_ms` with the plan's
/// policy, without changing the plan; each atom in `allocated` less the bundle-quanta it was
/// allocated before now (see the module documentation).
pub(crate) fn place(
    plan: &Plan,
    expr: &Expr,
    anchor_ms: u64,
    now_ms: u64,
    allocated: &BTreeMap<AtomRef, u64>,
) -> Result<Vec<AtomAllocation>, Shortfall> {
    let quanta = plan.quanta();
    let mut next_atom = 0;
    let how = Quantizer {
        quanta: &quanta,
        anchor_ms,
        allocated,
    };
    let node = quantize(&how, expr, 0, 0, &mut next_atom);
    let start = quanta.first_at_or_after(now_ms.max(anchor_ms));
    let end = quanta
        .containing(anchor_ms.saturating_add(plan.config().limits.horizon_ms))
        .max(start);
    // The room covers only the quanta the windows let the request reach.
    let reach = node.reach(end).clamp(start, end);
    let mut placer = Placer {
        policy: plan.config().policy.policy(),
        room: Room::new(plan, node.earliest(start).min(reach), reach),
        placed: Vec::new(),
        quanta,
        capacity: plan.capacity().at(start),
    };
    placer
        .place(&node, start, start, end)
        .map_err(|shortfall| Shortfall {
            window_ms: (
                shortfall.window_ms.0.saturating_sub(anchor_ms),
                shortfall.window_ms.1.saturating_sub(anchor_ms),
            ),
            ..shortfall
        })?;
    Ok(placer.placed)
}

#[cfg(test)]
pub(crate) mod tests;
