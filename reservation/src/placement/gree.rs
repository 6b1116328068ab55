//! GREE, the procrastinating heuristic (Rayon §4.2): each atom as late as it can go, tall and
//! skinny.
//!
//! The plan is scanned right to left from the end of the atom's interval, tracking the height
//! available to the atom (bundles that fit, up to `h` less what the atom holds there already)
//! and the most constrained quantum `tlim`. Once `l` consecutive quanta offer at least `g`, the
//! tallest piece over them is taken, and the scan restarts left of `tlim`. The rest of the work
//! is finished on the first run that can carry it exactly ([`split_run`]); a piece is only
//! taken if what remains can still be split into leases.

use super::{AtomNode, PlacementPolicy, Room};
use crate::plan::Piece;
use crate::split::{reachable_work, split_run};

/// How many heights below the tallest GREE tries for a piece whose remainder must stay
/// splittable before it looks further left.
const HEIGHTS_TRIED: u64 = 16;

/// GREE (Rayon §4.2).
pub(crate) struct Gree;

impl PlacementPolicy for Gree {
    fn place_atom(
        &self,
        room: &mut Room,
        atom: &AtomNode,
        floor: u64,
        _start: u64,
        end: u64,
    ) -> Result<Vec<Piece>, u64> {
        // GREE guesses no interval: it has all the time it may use.
        place_late(room, atom, floor, end)
    }

    fn order_interval(&self, _spans: &[u64], start: u64, end: u64) -> (u64, u64) {
        (start, end)
    }
}

/// GREE's placement of one atom within `[start, end)` (GREE-L falls back to it); on failure
/// the work that found no place (the room may then hold part of the atom).
pub(crate) fn place_late(
    room: &mut Room,
    atom: &AtomNode,
    start: u64,
    end: u64,
) -> Result<Vec<Piece>, u64> {
    let shape = &atom.shape;
    let mut held = vec![0u64; end.saturating_sub(start) as usize];
    let available = |room: &Room, held: &[u64], t: u64| {
        room.copies_at(t, &atom.bundle)
            .min(shape.max_parallel - held[(t - start) as usize])
    };
    let mut pieces = Vec::new();
    let mut work = shape.work;
    let mut cursor = end;
    while work > 0 {
        // The rightmost quantum before the cursor that offers a gang.
        let Some(last) = (start..cursor)
            .rev()
            .find(|&t| available(room, &held, t) >= shape.gang)
        else {
            return Err(work);
        };
        let mut first = last + 1;
        let (mut height, mut tightest) = (u64::MAX, last);
        let mut taken = None;
        while first > start && available(room, &held, first - 1) >= shape.gang {
            first -= 1;
            let here = available(room, &held, first);
            if here < height {
                (height, tightest) = (here, first);
            }
            let len = last + 1 - first;
            if len < shape.lease {
                continue;
            }
            if let Some(split) = split_run(work, len, height, shape) {
                taken = Some(
                    split
                        .rectangles()
                        .map(|(offset, len, bundles)| (first + offset, len, bundles))
                        .collect::<Vec<_>>(),
                );
                break;
            }
            if len == shape.lease {
                // The tallest piece over these l quanta that leaves a splittable remainder.
                // (Below the work: a piece that took it all would have been a split above.)
                let tallest = height.min((work - 1) / len);
                let piece = (shape.gang..=tallest)
                    .rev()
                    .take(HEIGHTS_TRIED as usize)
                    .find(|bundles| reachable_work(work - bundles * len, shape, end - start));
                if let Some(bundles) = piece {
                    taken = Some(vec![(first, len, bundles)]);
                    break;
                }
            }
        }
        match taken {
            Some(rectangles) => {
                for (piece_start, len, bundles) in rectangles {
                    room.take(piece_start, piece_start + len, &atom.bundle, bundles);
                    for h in &mut held
                        [(piece_start - start) as usize..(piece_start + len - start) as usize]
                    {
                        *h += bundles;
                    }
                    work -= bundles * len;
                    pieces.push(Piece {
                        start: piece_start,
                        end: piece_start + len,
                        bundles: bundles as u32,
                    });
                }
                // Restart left of the most constrained quantum.
                cursor = tightest;
            }
            // Nothing fits on this run: look left of it.
            None => cursor = first,
        }
    }
    Ok(pieces)
}
