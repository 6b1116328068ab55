//! GREE-L, the low-preemption heuristic (Rayon §4.2, Algorithm 1): each atom as flat as it can
//! lie over the interval guessed for it.
//!
//! `guessInterval`: an `order` gives each child, last first, a share of what is left of its
//! interval in proportion to the child's shortest span on the cluster (at least that span); the
//! next child then gets what its successor left free before it, so left-over time is
//! redistributed as each child is placed. `all` and `any` give every child the whole interval,
//! since their children may run at once. The paper leaves `guessInterval` unspecified. A
//! child's shortest span counts the cluster as well as the atoms' limits (an atom takes at
//! least its work over the most bundles that fit at once, an `all` at least its atoms' work
//! summed over the cluster): counted by the limits alone, the stages of a TPC-H query, several
//! atoms side by side each up to 50–150 wide on a 160-cpu cluster, got shares too short to hold
//! them, and GREE-L refused 55 of the workload's 154 jobs alone in an empty plan (GREE 5).
//!
//! `assign(e, ti, w / |ti|)`: the atom's work is spread over the longest run of the interval
//! that can carry it at an even height (heights `b` and `b + 1`, [`split_run`]), preferring the
//! latest run among equally long ones. Where no run can (the plan is too full for a flat
//! allocation, or the lease leaves a remainder no run of the interval divides), the atom is
//! placed as GREE places it, within the same interval, and failing that within all the time
//! its windows and its successors leave it. The paper's rejections "match the obvious
//! semantics of operators" and GREE-L "does not backtrack"; a guess that cannot hold an atom
//! refuses the job in neither reading, so the atom goes where GREE would put it and no placed
//! sibling moves. With both rules, 2 of the 154 jobs are refused alone (GREE-L refused 12 with
//! the guess on the cluster but without this fallback). On the TPC-H SLA comparison
//! (`fullerene sim --deadlines 0.1 --compare rayon-gree-l`, 10 machines, 200 jobs, seeds 1–10)
//! GREE-L accepts 191 of 200 SLA jobs (127 before), all on time, best-effort mean JCT 16.78 s
//! (16.72 s before), 12,942 preemptions (6,525). Falling back to the flattest run over all the
//! time left, before GREE's placement there, was measured and left out: 151 accepted, 16.73 s,
//! 9,541 preemptions, since a flat fallback takes the time its predecessors need.

use super::gree::place_late;
use super::{AtomNode, PlacementPolicy, Room};
use crate::plan::Piece;
use crate::split::split_run;

/// Pieces to take, as `(first quantum, length, bundles)`.
type Rectangles = Vec<(u64, u64, u64)>;

/// GREE-L (Rayon §4.2, Algorithm 1).
pub(crate) struct GreeL;

impl PlacementPolicy for GreeL {
    fn place_atom(
        &self,
        room: &mut Room,
        atom: &AtomNode,
        floor: u64,
        start: u64,
        end: u64,
    ) -> Result<Vec<Piece>, u64> {
        match flattest(room, atom, start, end) {
            Some(rectangles) => Ok(rectangles
                .into_iter()
                .map(|(piece_start, len, bundles)| {
                    room.take(piece_start, piece_start + len, &atom.bundle, bundles);
                    Piece {
                        start: piece_start,
                        end: piece_start + len,
                        bundles: bundles as u32,
                    }
                })
                .collect()),
            None if floor < start => {
                let saved = room.saved(start, end);
                place_late(room, atom, start, end).or_else(|_| {
                    room.restore(start, &saved);
                    place_late(room, atom, floor, end)
                })
            }
            None => place_late(room, atom, start, end),
        }
    }

    fn order_interval(&self, spans: &[u64], start: u64, end: u64) -> (u64, u64) {
        let Some((&own, _)) = spans.split_last() else {
            return (start, end);
        };
        let total: u64 = spans.iter().sum();
        let length = end.saturating_sub(start);
        let share = if total == 0 {
            length
        } else {
            // In u128: a length times a span may pass u64 on a long horizon of short quanta.
            (u128::from(length) * u128::from(own) / u128::from(total)) as u64
        };
        (end.saturating_sub(share.max(own)).max(start), end)
    }
}

/// The longest run within `[start, end)` that carries the atom's work evenly, right-aligned in
/// its stretch of usable quanta, as rectangles `(start, length, bundles)`.
fn flattest(room: &Room, atom: &AtomNode, start: u64, end: u64) -> Option<Rectangles> {
    let shape = &atom.shape;
    let available = |t: u64| room.copies_at(t, &atom.bundle).min(shape.max_parallel);
    let mut best: Option<(u64, Rectangles)> = None;
    let mut cursor = end;
    while cursor > start {
        // The next stretch right to left: quanta that each offer a gang.
        let Some(last) = (start..cursor).rev().find(|&t| available(t) >= shape.gang) else {
            break;
        };
        // Heights of the runs ending at `last`: heights[n - 1] is the least over n quanta.
        let mut heights = Vec::new();
        let mut first = last + 1;
        while first > start && available(first - 1) >= shape.gang {
            first -= 1;
            let here = available(first);
            heights.push(heights.last().map_or(here, |&h: &u64| h.min(here)));
        }
        let longest_so_far = best.as_ref().map_or(0, |(len, _)| *len);
        let found = (1..=heights.len() as u64)
            .rev()
            .take_while(|&len| len > longest_so_far)
            .find_map(|len| {
                split_run(shape.work, len, heights[len as usize - 1], shape).map(|split| {
                    let run_start = last + 1 - len;
                    let rectangles = split
                        .rectangles()
                        .map(|(offset, len, bundles)| (run_start + offset, len, bundles))
                        .collect();
                    (len, rectangles)
                })
            });
        if found.is_some() {
            best = found;
        }
        cursor = first;
    }
    best.map(|(_, rectangles)| rectangles)
}
