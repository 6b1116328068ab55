//! The adapter's re-planning after a loss of capacity (Rayon §5.2, Step 8), greedy like YARN's
//! `SimpleCapacityReplanner`: the reservations that hold anything at a quantum the plan no
//! longer has room for are taken out and placed again from now within their own windows, oldest
//! first (GREE places them as late as their windows allow, which moves them later), and those
//! that no longer fit are rejected, so the youngest lose first.
//!
//! A reservation in progress keeps what it was allocated before now and is placed again for
//! the rest only: its pieces before now stay as they were (up to the first quantum that lost
//! capacity, should that be the current one), and what each atom was allocated before now, in
//! those pieces and in the quanta the plan has forgotten ([`crate::Reservation::delivered`]), is
//! credited to it (module [`crate::placement`]). So a pipeline half-way through its stages
//! needs room for its last stages only, not for the whole request a second time. Rayon's
//! adapter places "all accepted jobs anew", as if none had begun; YARN's re-planner keeps the
//! past as it was, as this one does. The credit is what the plan allocated, not what the jobs
//! did with it: a job running behind its plan gets no new room for a stage the plan gave in
//! full (the plan follower still owes it what the plan holds for its unfinished stages).
//!
//! The sharing policy is not checked again: the caps held when the reservation was admitted.

use fullerene_scheduling::fit::fits;

use crate::placement::merge_adjacent;
use crate::plan::{AtomAllocation, Piece, Plan, Replanned, Reservation, ReservationId};

/// Re-plans `plan` after its capacity dropped from quantum `from` on (the first quantum with
/// less than before), at `now_ms`.
pub(crate) fn replan(plan: &mut Plan, from: u64, now_ms: u64) -> Replanned {
    let overloaded = overloaded_runs(plan, from);
    if overloaded.is_empty() {
        return Replanned::default();
    }
    let mut affected: Vec<(u64, ReservationId)> = plan
        .reservations()
        .filter(|r| {
            r.allocations.iter().flat_map(|a| &a.pieces).any(|p| {
                overloaded
                    .iter()
                    .any(|&(start, end)| p.start < end && start < p.end)
            })
        })
        .map(|r| (r.admitted_ms, r.id))
        .collect();
    affected.sort_unstable();
    let taken: Vec<_> = affected
        .into_iter()
        .filter_map(|(_, id)| plan.remove(id))
        .collect();
    // Placement starts at the first whole quantum from now; what came before stays, but not in
    // a quantum that lost capacity.
    let kept_until = plan.quanta().first_at_or_after(now_ms).min(from);
    let mut replanned = Replanned::default();
    for reservation in taken {
        let past = pieces_before(&reservation, kept_until);
        let allocated = reservation.allocated_before(kept_until);
        match plan.place_rest(&reservation.expr, reservation.anchor_ms, now_ms, &allocated) {
            Ok(rest) => {
                // A move keeps the reservation's seniority: it was not asked again.
                let id = reservation.id;
                plan.insert(Reservation {
                    allocations: joined(past, rest),
                    ..reservation
                });
                replanned.moved.push(id);
            }
            Err(refusal) => {
                replanned.rejected.push((reservation, refusal));
            }
        }
    }
    replanned
}

/// `reservation`'s pieces before quantum `t`, cut there, by atom (atoms with none left out).
fn pieces_before(reservation: &Reservation, t: u64) -> Vec<AtomAllocation> {
    reservation
        .allocations
        .iter()
        .map(|allocation| AtomAllocation {
            pieces: allocation
                .pieces
                .iter()
                .filter(|p| p.start < t)
                .map(|p| Piece {
                    end: p.end.min(t),
                    ..*p
                })
                .collect(),
            ..allocation.clone()
        })
        .filter(|allocation| !allocation.pieces.is_empty())
        .collect()
}

/// The allocations placed for the rest, each with its atom's pieces from `past` before it,
/// then the atoms that hold past pieces only.
fn joined(mut past: Vec<AtomAllocation>, rest: Vec<AtomAllocation>) -> Vec<AtomAllocation> {
    let mut allocations: Vec<AtomAllocation> = rest
        .into_iter()
        .map(|mut allocation| {
            if let Some(i) = past.iter().position(|p| p.atom == allocation.atom) {
                allocation.pieces.extend(past.swap_remove(i).pieces);
                merge_adjacent(&mut allocation.pieces);
            }
            allocation
        })
        .collect();
    past.sort_by_key(|p| p.atom);
    allocations.extend(past);
    allocations
}

/// The runs `[start, end)` from quantum `from` on where what is used does not fit the capacity.
fn overloaded_runs(plan: &Plan, from: u64) -> Vec<(u64, u64)> {
    let mut points: Vec<u64> = plan
        .used()
        .change_points()
        .chain(plan.capacity().change_points())
        .filter(|&t| t > from)
        .collect();
    points.push(from);
    points.sort_unstable();
    points.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (i, &start) in points.iter().enumerate() {
        let end = points.get(i + 1).copied().unwrap_or(u64::MAX);
        if !fits(&plan.used().at(start), &plan.capacity().at(start)) {
            match runs.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => runs.push((start, end)),
            }
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use crate::placement::tests::{
        check_plan, check_replanned, config, pieces, policy, request, small_expr, small_plan,
    };
    use crate::{CapacityChange, Plan, PolicyKind, ReservationId};
    use fullerene_scheduling::testkit::res;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        #[test]
        fn after_a_loss_everything_fits_and_what_moved_still_satisfies_its_request(
            policy in policy(),
            cpus in 4u32..24,
            earlier in prop::collection::vec(small_expr(), 1..10),
            lost in 1u32..24,
            at_s in 0u64..300,
            forgotten_s in 0u64..300,
        ) {
            let mut plan = small_plan(policy, cpus);
            for (i, text) in earlier.iter().enumerate() {
                let _ = plan.admit(request(i as u64 + 1, "u", text), 0);
            }
            // The plan forgets its past once a quantum: a reservation in progress may hold
            // work it does no longer show as pieces.
            plan.forget_before(forgotten_s.min(at_s) * 1_000);
            let before = plan.clone();
            let now_ms = at_s * 1_000;
            let loss = CapacityChange::Loss(res(&format!("cpus={}", lost.min(cpus))));
            let replanned = plan.change_capacity(now_ms, loss, now_ms);
            prop_assert_eq!(check_plan(&plan), Ok(()));
            for id in &replanned.moved {
                prop_assert_eq!(check_replanned(&plan, *id, now_ms), Ok(()), "{}", id);
                // What it held before now is kept as it was, and so is what was forgotten.
                let old = before.reservation(*id).expect("was there");
                let new = plan.reservation(*id).expect("moved");
                prop_assert_eq!(&old.delivered, &new.delivered);
                let current = plan.quanta().containing(now_ms);
                for allocation in &old.allocations {
                    let kept = new.allocations.iter().find(|a| a.atom == allocation.atom);
                    for t in 0..current {
                        prop_assert_eq!(
                            allocation.bundles_at(t),
                            kept.map_or(0, |a| a.bundles_at(t)),
                            "{} {} at {}",
                            id,
                            allocation.atom,
                            t
                        );
                    }
                }
            }
            let rejected: Vec<ReservationId> = replanned.rejected.iter().map(|(r, _)| r.id).collect();
            for old in before.reservations() {
                if rejected.contains(&old.id) {
                    prop_assert!(plan.reservation(old.id).is_none());
                } else if !replanned.moved.contains(&old.id) {
                    prop_assert_eq!(plan.reservation(old.id), Some(old), "untouched");
                }
            }
            prop_assert_eq!(
                plan.reservations().count() + rejected.len(),
                before.reservations().count()
            );
        }
    }

    #[test]
    fn a_loss_moves_the_oldest_and_rejects_the_youngest_that_no_longer_fit() {
        let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
        let gang = "window(atom(cpus=1; g=4, h=4, l=50s, w=200), s=0, f=100s)";
        plan.admit(request(1, "a", gang), 0).expect("fits");
        plan.admit(request(2, "b", gang), 0).expect("fits");
        plan.admit(
            request(
                3,
                "c",
                "window(atom(cpus=1; g=2, h=2, l=50s, w=100), s=0, f=200s)",
            ),
            0,
        )
        .expect("fits");
        assert_eq!(pieces(&plan, 2), vec![(0, 50, 100, 4)]);

        // 4 cpus lost from 10 s on: 8 held over [50, 100) on 6.
        let replanned = plan.change_capacity(10_000, CapacityChange::Loss(res("cpus=4")), 10_000);
        assert_eq!(replanned.moved, vec![ReservationId(1)]);
        let rejected: Vec<_> = replanned.rejected.iter().map(|(r, _)| r.id).collect();
        assert_eq!(rejected, vec![ReservationId(2)]);
        assert!(matches!(replanned.rejected[0].1, crate::Refusal::NoRoom(_)));
        assert_eq!(pieces(&plan, 1), vec![(0, 50, 100, 4)]);
        assert_eq!(pieces(&plan, 3), vec![(0, 150, 200, 2)], "untouched");
        assert!(plan.reservation(ReservationId(2)).is_none());
        assert_eq!(check_plan(&plan), Ok(()));
    }

    /// A two-stage pipeline (stages of 400 cpu-seconds, at most 5 cpus at once) placed by GREE
    /// at 40–120 s and 120–200 s, and a younger reservation of 3 cpus at 150–200 s, on 10 cpus.
    fn a_pipeline_and_a_younger_reservation() -> Plan {
        let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
        let stage = "atom(cpus=1; g=1, h=5, l=1s, w=400)";
        plan.admit(
            request(
                1,
                "a",
                &format!("window(order({stage}, {stage}), s=0, f=200s)"),
            ),
            0,
        )
        .expect("fits");
        plan.admit(
            request(
                2,
                "b",
                "window(atom(cpus=1; g=1, h=3, l=1s, w=150), s=0, f=200s)",
            ),
            0,
        )
        .expect("fits");
        assert_eq!(pieces(&plan, 1), vec![(0, 40, 120, 5), (1, 120, 200, 5)]);
        assert_eq!(pieces(&plan, 2), vec![(0, 150, 200, 3)]);
        plan
    }

    #[test]
    fn a_reservation_in_progress_is_placed_again_for_what_it_still_needs() {
        for forget_first in [false, true] {
            let mut plan = a_pipeline_and_a_younger_reservation();
            if forget_first {
                // The plan forgot the first stage and 20 s of the second: their work counts.
                plan.forget_before(140_000);
                assert_eq!(pieces(&plan, 1), vec![(1, 140, 200, 5)]);
            }
            // At 150 s the first stage is done and 150 of the second's 400 were allocated: the
            // rest, 250, fits the 5 cpus left over the last 50 s. The whole request would not.
            let whole = plan
                .reservation(ReservationId(1))
                .expect("kept")
                .expr
                .clone();
            assert!(plan.place(&whole, 0, 150_000).is_err());
            let replanned =
                plan.change_capacity(150_000, CapacityChange::Loss(res("cpus=5")), 150_000);
            assert_eq!(replanned.moved, vec![ReservationId(1)], "{forget_first}");
            let rejected: Vec<_> = replanned.rejected.iter().map(|(r, _)| r.id).collect();
            assert_eq!(rejected, vec![ReservationId(2)]);
            let expected = if forget_first {
                vec![(1, 140, 200, 5)]
            } else {
                vec![(0, 40, 120, 5), (1, 120, 200, 5)]
            };
            assert_eq!(
                pieces(&plan, 1),
                expected,
                "the past kept, the rest after it"
            );
            assert_eq!(check_plan(&plan), Ok(()));
            assert_eq!(check_replanned(&plan, ReservationId(1), 150_000), Ok(()));
        }
    }

    #[test]
    fn a_loss_in_the_current_quantum_takes_back_its_holds_before_crediting() {
        let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
        let atom = |h: u32, w: u32, f: u32| {
            format!("window(atom(cpus=1; g=1, h={h}, l=1s, w={w}), s=0, f={f}s)")
        };
        // The first holds the last 10 s, so the second sits before it, at 150-190 s, and the
        // third at 170-190 s; the first then goes, which leaves 190-200 s free.
        plan.admit(request(1, "a", &atom(10, 100, 200)), 0)
            .expect("fits");
        plan.admit(request(2, "b", &atom(5, 200, 200)), 0)
            .expect("fits");
        plan.admit(request(3, "c", &atom(3, 60, 190)), 0)
            .expect("fits");
        plan.delete(ReservationId(1));
        assert_eq!(pieces(&plan, 2), vec![(0, 150, 190, 5)]);
        assert_eq!(pieces(&plan, 3), vec![(0, 170, 190, 3)]);
        // 5 cpus lost from the quantum 170.5 s is in: the second keeps its pieces before 170 s
        // (100 of its 200), and the rest goes after the current quantum, as late as it can.
        let replanned = plan.change_capacity(170_500, CapacityChange::Loss(res("cpus=5")), 170_500);
        assert_eq!(replanned.moved, vec![ReservationId(2)]);
        let rejected: Vec<_> = replanned.rejected.iter().map(|(r, _)| r.id).collect();
        assert_eq!(rejected, vec![ReservationId(3)]);
        assert_eq!(pieces(&plan, 2), vec![(0, 150, 170, 5), (0, 180, 200, 5)]);
        assert_eq!(plan.used().at(170), res("cpus=0"));
        assert_eq!(check_plan(&plan), Ok(()));
        assert_eq!(check_replanned(&plan, ReservationId(2), 170_500), Ok(()));
    }

    #[test]
    fn a_moved_reservation_goes_where_the_capacity_remains() {
        // Capacity 10 until 100 s, 4 from then on once the loss is known; the reservation sat at
        // the end of its window and moves before the loss.
        let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
        plan.admit(
            request(
                1,
                "a",
                "window(atom(cpus=1; g=1, h=8, l=10s, w=80), s=0, f=200s)",
            ),
            0,
        )
        .expect("fits");
        assert_eq!(pieces(&plan, 1), vec![(0, 190, 200, 8)]);
        let replanned = plan.change_capacity(100_000, CapacityChange::Loss(res("cpus=6")), 0);
        assert_eq!(replanned.moved, vec![ReservationId(1)]);
        assert_eq!(pieces(&plan, 1), vec![(0, 180, 200, 4)]);
        assert_eq!(check_plan(&plan), Ok(()));
        // A gain counts from the next whole quantum and re-plans nothing.
        let gained = plan.change_capacity(150_500, CapacityChange::Gain(res("cpus=6")), 0);
        assert_eq!(gained, crate::Replanned::default());
        assert_eq!(plan.capacity().at(150), res("cpus=4"));
        assert_eq!(plan.capacity().at(151), res("cpus=10"));
        // Lost within the quantum it came in: taken back from where it counted, never below
        // what the plan had before it came.
        plan.change_capacity(150_800, CapacityChange::Loss(res("cpus=8")), 0);
        assert_eq!(plan.capacity().at(150), res("cpus=2"));
        assert_eq!(plan.capacity().at(151), res("cpus=2"));
        let mut empty = Plan::new(config(PolicyKind::Gree), res("cpus=0"));
        empty.change_capacity(10_200, CapacityChange::Gain(res("cpus=4")), 0);
        empty.change_capacity(10_700, CapacityChange::Loss(res("cpus=4")), 0);
        assert_eq!(empty.capacity().at(10), res("cpus=0"));
        assert_eq!(empty.capacity().at(11), res("cpus=0"));
    }
}
