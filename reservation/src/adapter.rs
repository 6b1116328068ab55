//! The adapter's re-planning after a loss of capacity (Rayon §5.2, Step 8), greedy like YARN's
//! `SimpleCapacityReplanner`: the reservations that hold anything at a quantum the plan no
//! longer has room for are taken out and placed again from now within their own windows, oldest
//! first (GREE places them as late as their windows allow, which moves them later), and those
//! that no longer fit are rejected, so the youngest lose first.
//!
//! A reservation placed again gets its whole request placed from now: the pieces it held
//! before now are not credited, so one caught mid-way keeps its full guarantee or is rejected.
//! The sharing policy is not checked again: the caps held when the reservation was admitted.

use fullerene_scheduling::fit::fits;

use crate::plan::{Plan, Replanned, ReservationId};

/// Re-plans `plan` after its capacity dropped from quantum `from` on, at `now_ms`.
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
    let mut replanned = Replanned::default();
    for mut reservation in taken {
        match plan.place(&reservation.expr, reservation.anchor_ms, now_ms) {
            Ok(allocations) => {
                // A move keeps the reservation's seniority: it was not asked again.
                reservation.allocations = allocations;
                replanned.moved.push(reservation.id);
                plan.insert(reservation);
            }
            Err(refusal) => {
                replanned.rejected.push((reservation, refusal));
            }
        }
    }
    replanned
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
        check_plan, check_satisfied, config, pieces, policy, request, small_expr, small_plan,
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
        ) {
            let mut plan = small_plan(policy, cpus);
            for (i, text) in earlier.iter().enumerate() {
                let _ = plan.admit(request(i as u64 + 1, "u", text), 0);
            }
            let before = plan.clone();
            let now_ms = at_s * 1_000;
            let loss = CapacityChange::Loss(res(&format!("cpus={}", lost.min(cpus))));
            let replanned = plan.change_capacity(now_ms, loss, now_ms);
            prop_assert_eq!(check_plan(&plan), Ok(()));
            for id in &replanned.moved {
                prop_assert_eq!(check_satisfied(&plan, *id, now_ms), Ok(()), "{}", id);
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
