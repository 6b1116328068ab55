//! Placement: GREE's and GREE-L's shapes (Rayon Figures 8 and 9), the operators, all-or-nothing
//! admission, and a property test that every accepted placement satisfies its expression.

use std::collections::HashMap;

use fullerene_scheduling::testkit::res;
use fullerene_scheduling::{fits, ResourceVec};
use proptest::prelude::*;

use crate::plan::{
    AtomAllocation, AtomRef, CapacityChange, Delivered, Plan, PlanConfig, Quanta, Refusal,
    ReservationId, ReservationRequest, Shortfall,
};
use crate::rdl::{parse, Expr, Limits};
use crate::steps::StepFunction;
use crate::PolicyKind;

/// One-second quanta from time 0, a horizon of an hour, no caps.
pub(crate) fn config(policy: PolicyKind) -> PlanConfig {
    PlanConfig {
        limits: Limits {
            quantum_ms: 1_000,
            horizon_ms: 3_600_000,
            ..Limits::default()
        },
        ..PlanConfig::new(0, policy)
    }
}

pub(crate) fn request(id: u64, user: &str, text: &str) -> ReservationRequest {
    ReservationRequest {
        id: ReservationId(id),
        user: user.to_string(),
        expr: parse(text).expect("test request parses"),
    }
}

/// Each atom's pieces as `(atom, start, end, bundles)`, in order.
pub(crate) fn pieces(plan: &Plan, id: u64) -> Vec<(u32, u64, u64, u32)> {
    let mut out: Vec<_> = plan
        .reservation(ReservationId(id))
        .expect("accepted")
        .allocations
        .iter()
        .flat_map(|a| {
            a.pieces
                .iter()
                .map(|p| (a.atom.atom, p.start, p.end, p.bundles))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Rayon §4.2's example (Figure 9): three stages in order within 800 quanta.
const THREE_STAGES: &str = "window(order(atom(cpus=1; g=1, h=10, l=240s, w=2400), atom(cpus=1; g=1, h=20, l=120s, w=2400), atom(cpus=1; g=1, h=15, l=120s, w=1800)), s=0, f=800s)";

#[test]
fn gree_places_each_stage_as_late_and_tall_as_it_can() {
    let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=100"));
    plan.admit(request(1, "etl", THREE_STAGES), 0)
        .expect("fits");
    // Figure 8, GREE: the last stage against the deadline at its full height, each earlier
    // stage right before its successor.
    assert_eq!(
        pieces(&plan, 1),
        vec![(0, 320, 560, 10), (1, 560, 680, 20), (2, 680, 800, 15)]
    );
    // What the plan follower reads: the reservation's guarantee at a time.
    let guaranteed = |ms| plan.guaranteed_at(ReservationId(1), ms);
    assert_eq!(guaranteed(700_500), res("cpus=15"));
    assert_eq!(guaranteed(559_999), res("cpus=10"));
    assert_eq!(guaranteed(800_000), ResourceVec::ZERO);
    assert_eq!(
        plan.guaranteed_at(ReservationId(2), 700_500),
        ResourceVec::ZERO
    );
}

#[test]
fn gree_l_spreads_each_stage_flat_over_its_share_of_the_window() {
    assert_eq!(PolicyKind::from_name("gree-l"), Some(PolicyKind::GreeL));
    assert_eq!(
        PolicyKind::from_name(PolicyKind::Gree.name()),
        Some(PolicyKind::Gree)
    );
    let mut plan = Plan::new(config(PolicyKind::GreeL), res("cpus=100"));
    plan.admit(request(1, "etl", THREE_STAGES), 0)
        .expect("fits");
    // Figure 8, GREE-L: the window divided in proportion to the stages' shortest spans
    // (240, 120, 120 of 800), each stage flat over its part.
    assert_eq!(
        pieces(&plan, 1),
        vec![(0, 0, 400, 6), (1, 400, 600, 12), (2, 600, 800, 9)]
    );
}

#[test]
fn gree_l_guesses_an_alls_span_from_what_the_cluster_holds_at_once() {
    // Two stages of 100 one-cpu bundle-seconds side by side, each up to 10 wide, on 10 cpus:
    // 20 s together, though each alone could take 10. Guessed by the parallelism limits alone,
    // the `all` got 35 × 10 / 20 = 17 s, too short, and went where GREE places it (from 15 s);
    // guessed by the cluster, it gets 35 × 20 / 30 = 23 s and lies flat over them.
    let mut plan = Plan::new(config(PolicyKind::GreeL), res("cpus=10"));
    let side_by_side = "window(order(atom(cpus=1; g=1, h=1, l=10s, w=10), all(atom(cpus=1; g=1, h=10, l=1s, w=100), atom(cpus=1; g=1, h=10, l=1s, w=100))), s=0, f=35s)";
    plan.admit(request(1, "a", side_by_side), 0).expect("fits");
    assert_eq!(check_satisfied(&plan, ReservationId(1), 0), Ok(()));
    let after_first_stage: Vec<_> = pieces(&plan, 1)
        .into_iter()
        .filter(|&(atom, ..)| atom > 0)
        .map(|(_, start, ..)| start)
        .collect();
    assert_eq!(
        after_first_stage.iter().min(),
        Some(&12),
        "{:?}",
        pieces(&plan, 1)
    );
}

#[test]
fn gree_l_counts_an_alls_area_kind_by_kind_and_not_by_whole_bundles() {
    // Each job fills its window exactly. Counted in whole bundles per atom (3-cpu bundles are
    // a third of 10 cpus, not 0.3) or with every kind against every other (a cpu-bound atom
    // beside a memory-bound one), the `all` looked longer than it is, took time its
    // predecessor needed, and GREE-L refused what GREE accepts.
    for (cluster, job) in [
        (
            "cpus=10",
            "window(order(atom(cpus=1; g=1, h=1, l=1s, w=10), all(atom(cpus=3; g=1, h=3, l=1s, w=30), atom(cpus=1; g=1, h=1, l=1s, w=10))), s=0, f=20s)",
        ),
        (
            "cpus=100,mem_mib=102400",
            "window(order(atom(cpus=1; g=1, h=1, l=1s, w=25), all(atom(cpus=9,mem_mib=1024; g=1, h=10, l=1s, w=100), atom(cpus=1,mem_mib=9216; g=1, h=10, l=1s, w=100))), s=0, f=40s)",
        ),
    ] {
        for policy in [PolicyKind::Gree, PolicyKind::GreeL] {
            let mut plan = Plan::new(config(policy), res(cluster));
            plan.admit(request(1, "a", job), 0)
                .unwrap_or_else(|refusal| panic!("{policy:?} on {cluster}: {refusal}"));
            assert_eq!(check_satisfied(&plan, ReservationId(1), 0), Ok(()));
        }
    }
}

#[test]
fn gree_l_places_an_atom_its_guess_cannot_hold_in_all_the_time_left_to_it() {
    // 31 bundle-seconds with leases of at least 2 s lie flat on no run within the last stage's
    // guessed share (12 × 4 / 9 = 5 s): 6 a second over 5 s leaves one bundle held 1 s, and
    // shorter runs fare no better. GREE's placement within that share leaves 3 of them over.
    // In all the time before the deadline, GREE's placement fits, as for GREE alone: the job
    // is not refused for a guess.
    let job = "window(order(atom(cpus=1; g=1, h=1, l=5s, w=5), atom(cpus=1; g=1, h=10, l=2s, w=31)), s=0, f=12s)";
    let placed = |policy| {
        let mut plan = Plan::new(config(policy), res("cpus=10"));
        plan.admit(request(1, "a", job), 0).expect("fits");
        assert_eq!(check_satisfied(&plan, ReservationId(1), 0), Ok(()));
        pieces(&plan, 1)
    };
    assert_eq!(placed(PolicyKind::GreeL), placed(PolicyKind::Gree));
}

#[test]
fn gree_l_guesses_within_the_windows_of_an_orders_children() {
    // The last stage may only run in the first 200 s: its share of the order is taken from
    // there, not from the end of the outer window.
    let mut plan = Plan::new(config(PolicyKind::GreeL), res("cpus=10"));
    let early = "window(order(atom(cpus=1; g=1, h=1, l=10s, w=50), window(atom(cpus=1; g=1, h=1, l=10s, w=50), s=0, f=200s)), s=0, f=1000s)";
    plan.admit(request(1, "a", early), 0).expect("fits");
    assert_eq!(pieces(&plan, 1), vec![(0, 100, 150, 1), (1, 150, 200, 1)]);
    assert_eq!(check_satisfied(&plan, ReservationId(1), 0), Ok(()));
}

#[test]
fn gree_ends_right_before_a_busy_stretch_and_gree_l_lies_flat_before_it() {
    let busy = "window(atom(cpus=10; g=1, h=1, l=100s, w=100), s=200s, f=300s)";
    let job = "window(atom(cpus=1; g=1, h=5, l=10s, w=100), s=0, f=300s)";
    for (policy, expected) in [
        (PolicyKind::Gree, vec![(0, 180, 200, 5)]),
        (PolicyKind::GreeL, vec![(0, 100, 200, 1)]),
    ] {
        let mut plan = Plan::new(config(policy), res("cpus=10"));
        plan.admit(request(1, "a", busy), 0).expect("fits");
        plan.admit(request(2, "b", job), 0).expect("fits");
        assert_eq!(pieces(&plan, 2), expected, "{policy:?}");
    }
}

#[test]
fn a_gang_takes_whole_gangs_for_whole_leases() {
    // Room for 5 bundles; the gang of 4 takes 4 at a time, 10 quanta at least each time.
    let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
    let gang = "window(atom(cpus=2; g=4, h=4, l=10s, w=80), s=0, f=100s)";
    plan.admit(request(1, "mpi", gang), 0).expect("fits");
    assert_eq!(pieces(&plan, 1), vec![(0, 80, 100, 4)]);
}

#[test]
fn a_refusal_names_the_atom_and_the_work_short_and_leaves_the_plan_as_it_was() {
    // GREE tries the last stage in the whole window; GREE-L first in its guessed share of it
    // (300 × 250 / 260 quanta, where it finds 188 of the 200 free quanta), then, as GREE, in
    // all the time its window leaves it.
    for policy in [PolicyKind::Gree, PolicyKind::GreeL] {
        let mut plan = Plan::new(config(policy), res("cpus=10"));
        plan.admit(
            request(
                1,
                "a",
                "window(atom(cpus=10; g=1, h=1, l=100s, w=100), s=200s, f=300s)",
            ),
            0,
        )
        .expect("fits");
        let before = plan.clone();
        let too_much = "window(order(atom(cpus=1; g=1, h=1, l=1s, w=10), atom(cpus=10; g=1, h=1, l=1s, w=250)), s=0, f=300s)";
        let refusal = plan
            .admit(request(2, "b", too_much), 0)
            .expect_err("200 of 250");
        assert_eq!(
            refusal,
            Refusal::NoRoom(Shortfall {
                atom: AtomRef {
                    atom: 1,
                    occurrence: 0
                },
                bundle: res("cpus=10"),
                gang: 1,
                max_parallel: 1,
                window_ms: (0, 300_000),
                work_ms: 250_000,
                short_ms: 50_000,
            }),
            "{policy:?}"
        );
        assert_eq!(plan, before, "{policy:?}");
    }
}

#[test]
fn any_takes_the_first_alternative_that_fits() {
    let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
    let choice = "window(any(atom(cpus=20; g=1, h=1, l=1s, w=10), atom(cpus=2; g=1, h=2, l=1s, w=10), atom(cpus=1; g=1, h=1, l=1s, w=10)), s=0, f=60s)";
    plan.admit(request(1, "a", choice), 0)
        .expect("the second fits");
    assert_eq!(pieces(&plan, 1), vec![(1, 55, 60, 2)]);
}

#[test]
fn repeat_places_every_occurrence_in_its_shifted_window() {
    let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=4"));
    let daily = "repeat(window(atom(cpus=1; g=1, h=2, l=5s, w=10), s=0, f=60s), every=2m, count=3)";
    plan.admit(request(1, "a", daily), 0).expect("fits");
    let reservation = plan.reservation(ReservationId(1)).expect("kept");
    let mut occurrences: Vec<_> = reservation
        .allocations
        .iter()
        .map(|a| (a.atom.occurrence, a.pieces[0].start, a.pieces[0].end))
        .collect();
    occurrences.sort_unstable();
    assert_eq!(occurrences, vec![(0, 55, 60), (1, 175, 180), (2, 295, 300)]);
}

#[test]
fn delete_and_update_restore_what_they_replace() {
    let empty = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
    let mut plan = empty.clone();
    plan.admit(
        request(
            1,
            "a",
            "window(atom(cpus=1.1; g=1, h=3, l=7s, w=21), s=0, f=60s)",
        ),
        0,
    )
    .expect("fits");
    plan.admit(
        request(
            2,
            "a",
            "window(atom(cpus=0.7; g=2, h=5, l=3s, w=30), s=0, f=40s)",
        ),
        0,
    )
    .expect("fits");
    assert_eq!(plan.list("a"), vec![ReservationId(1), ReservationId(2)]);

    // An update that does not fit leaves the old allocation exactly as it was.
    let before = plan.clone();
    let refused = plan.update(
        ReservationId(2),
        parse("window(atom(cpus=10; g=1, h=1, l=50s, w=50), s=0, f=60s)").expect("parses"),
        5_000,
    );
    // 50 whole free quanta in a row are not to be had before the first reservation's 53.
    assert!(matches!(refused, Err(Refusal::NoRoom(_))), "{refused:?}");
    assert_eq!(plan, before);
    // One that fits moves it.
    plan.update(
        ReservationId(2),
        parse("window(atom(cpus=1; g=1, h=1, l=1s, w=5), s=0, f=100s)").expect("parses"),
        5_000,
    )
    .expect("fits");
    assert_eq!(pieces(&plan, 2), vec![(0, 100, 105, 1)]);

    assert!(plan.delete(ReservationId(2)).is_some());
    assert!(plan.delete(ReservationId(1)).is_some());
    assert_eq!(plan, empty);
    assert_eq!(plan.used().runs_stored(), 0);
}

#[test]
fn the_plan_round_trips_through_bincode_and_rebuilds_what_is_used() {
    let mut plan = Plan::new(config(PolicyKind::GreeL), res("cpus=10,mem_mib=4096"));
    plan.admit(
        request(1, "a", THREE_STAGES.replace("cpus=1", "cpus=0.01").as_str()),
        0,
    )
    .expect("fits");
    plan.admit(
        request(2, "b", "atom(cpus=1,mem_mib=100; g=2, h=4, l=1m, w=10m)"),
        0,
    )
    .expect("fits");
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&plan, config).expect("encodes");
    let (back, _): (Plan, usize) =
        bincode::serde::decode_from_slice(&bytes, config).expect("decodes");
    assert_eq!(back, plan);
    assert!(!back.used().at(700).is_zero());
}

#[test]
fn forgetting_the_past_drops_ended_reservations_and_past_runs_only() {
    let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
    plan.admit(
        request(
            1,
            "a",
            "window(atom(cpus=1; g=1, h=2, l=10s, w=20), s=0, f=30s)",
        ),
        0,
    )
    .expect("fits");
    plan.admit(
        request(
            2,
            "a",
            "window(atom(cpus=1; g=1, h=1, l=40s, w=40), s=0, f=100s)",
        ),
        0,
    )
    .expect("fits");
    assert_eq!(pieces(&plan, 1), vec![(0, 20, 30, 2)]);
    assert_eq!(pieces(&plan, 2), vec![(0, 60, 100, 1)]);
    plan.change_capacity(40_000, CapacityChange::Gain(res("cpus=2")), 0);

    let forgotten = plan.forget_before(70_500);
    assert_eq!(
        forgotten.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![ReservationId(1)]
    );
    assert_eq!(pieces(&plan, 2), vec![(0, 70, 100, 1)]);
    // The forgotten quanta's work, 60 to 70 s of one bundle, is kept in sum.
    let kept = plan.reservation(ReservationId(2)).expect("kept");
    assert_eq!(
        kept.delivered,
        vec![Delivered {
            atom: AtomRef {
                atom: 0,
                occurrence: 0
            },
            work: 10
        }]
    );
    assert_eq!(kept.allocated_before(75).values().sum::<u64>(), 15);
    plan.forget_before(80_000);
    let kept = plan.reservation(ReservationId(2)).expect("kept");
    assert_eq!(kept.delivered[0].work, 20, "added up");
    assert_eq!(
        plan.used().change_points().collect::<Vec<_>>(),
        vec![80, 100]
    );
    assert_eq!(
        plan.capacity().change_points().collect::<Vec<_>>(),
        vec![80]
    );
    assert_eq!(plan.capacity().at(80), res("cpus=12"));
    assert_eq!(check_plan(&plan), Ok(()));
    // What is kept rebuilds to the same plan.
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&plan, config).expect("encodes");
    let (back, _): (Plan, usize) =
        bincode::serde::decode_from_slice(&bytes, config).expect("decodes");
    assert_eq!(back, plan);
}

// ---- The property test: any accepted placement satisfies its expression. ----

/// Checks an accepted reservation against the semantics of Rayon §3.1, independently of the
/// placement code: every atom's pieces within its windows and after `now`, each piece at least
/// `l` long with at least `g` bundles, at most `h` at any quantum, summing to `w`; `any` with
/// exactly one alternative placed; `order`'s children strictly in sequence.
pub(crate) fn check_satisfied(plan: &Plan, id: ReservationId, now_ms: u64) -> Result<(), String> {
    check_reservation(plan, id, now_ms, false)
}

/// [`check_satisfied`] for a reservation the adapter placed again at `now_ms`: it may also hold
/// pieces before now and work in quanta the plan forgot, what its atoms were allocated before,
/// and its pieces from now on then hold the rest of each atom's work: at least the rest, never
/// more than the whole, and no more than the least amount its gang and lease can hold needs
/// (at most `h × l` past the rest or a gang's lease).
pub(crate) fn check_replanned(plan: &Plan, id: ReservationId, now_ms: u64) -> Result<(), String> {
    check_reservation(plan, id, now_ms, true)
}

fn check_reservation(
    plan: &Plan,
    id: ReservationId,
    now_ms: u64,
    replanned: bool,
) -> Result<(), String> {
    let reservation = plan.reservation(id).ok_or("not accepted")?;
    let allocations: HashMap<AtomRef, &AtomAllocation> = reservation
        .allocations
        .iter()
        .map(|a| (a.atom, a))
        .collect();
    if allocations.len() != reservation.allocations.len() {
        return Err("an atom allocated twice".into());
    }
    if !replanned && !reservation.delivered.is_empty() {
        return Err("work in forgotten quanta".into());
    }
    let quanta = plan.quanta();
    let start = quanta.first_at_or_after(now_ms);
    let mut checker = Checker {
        quanta,
        anchor_ms: reservation.anchor_ms,
        allocations: &allocations,
        delivered: &reservation.delivered,
        // A new placement holds nothing before now: its pieces are all checked as new.
        now: if replanned { start } else { 0 },
        visited: 0,
    };
    let horizon = quanta.containing(reservation.anchor_ms + plan.config().limits.horizon_ms);
    let mut next_atom = 0;
    let span = checker.check(&reservation.expr, start, horizon, 0, 0, &mut next_atom)?;
    if span.is_none() {
        return Err("nothing placed".into());
    }
    if checker.visited != allocations.len() {
        return Err("allocations for atoms the expression does not have".into());
    }
    Ok(())
}

struct Checker<'a> {
    quanta: Quanta,
    anchor_ms: u64,
    allocations: &'a HashMap<AtomRef, &'a AtomAllocation>,
    delivered: &'a [Delivered],
    /// The first quantum from now: pieces before it were allocated before.
    now: u64,
    visited: usize,
}

impl Checker<'_> {
    /// The span `[first, end)` the subexpression holds, `None` when it holds nothing.
    fn check(
        &mut self,
        expr: &Expr,
        start: u64,
        end: u64,
        shift_ms: u64,
        occurrence: u32,
        next_atom: &mut u32,
    ) -> Result<Option<(u64, u64)>, String> {
        let mut children =
            |this: &mut Self, children: &[Expr]| -> Result<Vec<Option<(u64, u64)>>, String> {
                children
                    .iter()
                    .map(|c| this.check(c, start, end, shift_ms, occurrence, next_atom))
                    .collect()
            };
        // An atom done before the plan's memory has an empty span: it bounds nothing.
        let union = |spans: &[Option<(u64, u64)>]| {
            spans
                .iter()
                .flatten()
                .filter(|(a, b)| a < b)
                .fold(None, |acc: Option<(u64, u64)>, &(a, b)| {
                    Some(acc.map_or((a, b), |(x, y)| (x.min(a), y.max(b))))
                })
                .or_else(|| spans.iter().flatten().next().copied())
        };
        let all_or_none = |spans: &[Option<(u64, u64)>], what: &str| {
            let placed = spans.iter().filter(|s| s.is_some()).count();
            if placed != 0 && placed != spans.len() {
                return Err(format!("{what} placed in part"));
            }
            Ok(())
        };
        match expr {
            Expr::Atom(atom) => {
                let at = AtomRef {
                    atom: *next_atom,
                    occurrence,
                };
                *next_atom += 1;
                let q = self.quanta.quantum_ms;
                let forgotten: u64 = self
                    .delivered
                    .iter()
                    .filter(|d| d.atom == at)
                    .map(|d| d.work)
                    .sum();
                let Some(allocation) = self.allocations.get(&at) else {
                    if forgotten > 0 && forgotten * q < atom.work_ms {
                        return Err(format!("{at}: the rest of its work was dropped"));
                    }
                    // Done before the plan's memory: it holds nothing and bounds nothing.
                    return Ok((forgotten > 0).then_some((start, start)));
                };
                self.visited += 1;
                let lease = atom.min_lease_ms.div_ceil(q).max(1);
                let mut work = 0;
                let mut before = forgotten;
                if allocation.bundle != atom.bundle {
                    return Err(format!("{at}: wrong bundle"));
                }
                for p in &allocation.pieces {
                    // The part before now was allocated before (a piece kept by the
                    // adapter may go on after it, one lease).
                    before += p.end.min(self.now).saturating_sub(p.start) * u64::from(p.bundles);
                    if p.end <= self.now {
                        continue;
                    }
                    let from = p.start.max(self.now);
                    if from < start || p.end > end {
                        return Err(format!("{at}: piece {p:?} outside [{start}, {end})"));
                    }
                    if p.end - p.start < lease || u64::from(p.bundles) < u64::from(atom.gang) {
                        return Err(format!(
                            "{at}: piece {p:?} breaks g={} or l={lease}",
                            atom.gang
                        ));
                    }
                    work += (p.end - from) * u64::from(p.bundles);
                    for t in from..p.end {
                        if allocation.bundles_at(t) > u64::from(atom.max_parallel) {
                            return Err(format!("{at}: more than h at {t}"));
                        }
                    }
                }
                let whole = atom.work_ms / q;
                if before == 0 && work != whole {
                    return Err(format!("{at}: {work} bundle-quanta, not w"));
                }
                if before > 0 {
                    let rest = whole.saturating_sub(before);
                    let least = rest.max(u64::from(atom.gang) * lease);
                    let most = whole.min(least + u64::from(atom.max_parallel) * lease);
                    if work < rest || work > most || (rest == 0 && work > 0) {
                        return Err(format!(
                            "{at}: {work} bundle-quanta after {before} of {whole}"
                        ));
                    }
                }
                if allocation.pieces.is_empty() && before > 0 && work == 0 {
                    return Ok(Some((start, start)));
                }
                let first = allocation
                    .pieces
                    .iter()
                    .map(|p| p.start)
                    .min()
                    .ok_or("no pieces")?;
                let last = allocation
                    .pieces
                    .iter()
                    .map(|p| p.end)
                    .max()
                    .ok_or("no pieces")?;
                Ok(Some((first, last)))
            }
            Expr::Any(c) => {
                let spans = children(self, c)?;
                if spans.iter().filter(|s| s.is_some()).count() > 1 {
                    return Err("any: several alternatives placed".into());
                }
                Ok(union(&spans))
            }
            Expr::All(c) => {
                let spans = children(self, c)?;
                all_or_none(&spans, "all")?;
                Ok(union(&spans))
            }
            Expr::Order(c) => {
                let spans = children(self, c)?;
                all_or_none(&spans, "order")?;
                for pair in spans.windows(2) {
                    if let [Some((first_before, end_before)), Some((start_after, end_after))] = pair
                    {
                        // A child done before the plan's memory may come before anything,
                        // but one after it must not still be running.
                        if start_after == end_after && *end_before > self.now {
                            return Err("order: a child done while its predecessor runs".into());
                        }
                        let empty = first_before == end_before || start_after == end_after;
                        if end_before > start_after && !empty {
                            return Err("order: a child overlaps its successor".into());
                        }
                    }
                }
                Ok(union(&spans))
            }
            Expr::Window {
                expr,
                start_ms,
                end_ms,
            } => {
                let base = self.anchor_ms + shift_ms;
                let inner_start = start.max(self.quanta.first_at_or_after(base + start_ms));
                let inner_end = end.min(self.quanta.containing(base + end_ms));
                self.check(
                    expr,
                    inner_start,
                    inner_end.max(inner_start),
                    shift_ms,
                    occurrence,
                    next_atom,
                )
            }
            Expr::Repeat {
                expr,
                period_ms,
                count,
            } => {
                let first_atom = *next_atom;
                let mut spans = Vec::new();
                for k in 0..*count {
                    *next_atom = first_atom;
                    spans.push(self.check(
                        expr,
                        start,
                        end,
                        shift_ms + period_ms * u64::from(k),
                        occurrence * count + k,
                        next_atom,
                    )?);
                }
                all_or_none(&spans, "repeat")?;
                Ok(union(&spans))
            }
        }
    }
}

/// What is used equals the sum of the pieces, and fits the capacity, at every quantum where
/// either changes.
pub(crate) fn check_plan(plan: &Plan) -> Result<(), String> {
    let mut sum = StepFunction::new();
    for r in plan.reservations() {
        for a in &r.allocations {
            for p in &a.pieces {
                sum.add(p.start, Some(p.end), a.bundle.scale(f64::from(p.bundles)));
            }
        }
    }
    let points: Vec<u64> = sum
        .change_points()
        .chain(plan.used().change_points())
        .chain(plan.capacity().change_points())
        .collect();
    for t in points {
        let (used, expected) = (plan.used().at(t), sum.at(t));
        let difference = used.saturating_sub(&expected) + expected.saturating_sub(&used);
        if difference.0.iter().any(|d| *d > 1e-6) {
            return Err(format!(
                "at {t}: used {used} but the pieces sum to {expected}"
            ));
        }
        if !fits(&used, &plan.capacity().at(t)) {
            return Err(format!("at {t}: used {used} exceeds the capacity"));
        }
    }
    Ok(())
}

/// Atoms whose work a run can carry: `b` bundles for `n` quanta, `n` at least the lease.
fn small_atom() -> impl Strategy<Value = String> {
    (
        1u32..4,
        0u32..3,
        1u32..4,
        0u32..4,
        1u64..6,
        0u64..20,
        0u32..2048,
    )
        .prop_map(|(cpus, gang_less, gang, extra, lease, longer, mem)| {
            let max_parallel = gang + extra;
            let bundles = (gang + gang_less.min(extra)) as u64;
            let work = bundles * (lease + longer);
            format!(
                "atom(cpus={cpus},mem_mib={mem}; g={gang}, h={max_parallel}, l={lease}s, w={work})"
            )
        })
}

pub(crate) fn small_expr() -> impl Strategy<Value = String> {
    small_atom().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|c| format!("any({})", c.join(", "))),
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|c| format!("all({})", c.join(", "))),
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|c| format!("order({})", c.join(", "))),
            (inner.clone(), 0u64..400, 40u64..400)
                .prop_map(|(e, s, len)| format!("window({e}, s={s}s, f={}s)", (s + len).min(600))),
            (inner, 0u64..100, 20u64..200, 1u32..4).prop_map(|(e, s, len, count)| format!(
                "repeat(window({e}, s={s}s, f={}s), every={}s, count={count})",
                s + len,
                len + 10
            )),
        ]
    })
}

/// A plan of `cpus` cpus (and ample memory) over 600 one-second quanta.
pub(crate) fn small_plan(policy: PolicyKind, cpus: u32) -> Plan {
    let limits = Limits {
        horizon_ms: 600_000,
        ..config(policy).limits
    };
    Plan::new(
        PlanConfig {
            limits,
            ..config(policy)
        },
        res(&format!("cpus={cpus},mem_mib=16384")),
    )
}

pub(crate) fn policy() -> impl Strategy<Value = PolicyKind> {
    prop_oneof![Just(PolicyKind::Gree), Just(PolicyKind::GreeL)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn accepted_placements_satisfy_their_expressions_and_refusals_change_nothing(
        policy in policy(),
        cpus in 4u32..24,
        earlier in prop::collection::vec((small_expr(), 0u64..60), 0..8),
        request_text in small_expr(),
        now_s in 0u64..60,
    ) {
        let mut plan = small_plan(policy, cpus);
        let mut accepted = Vec::new();
        for (i, (text, at_s)) in earlier.iter().enumerate() {
            let id = i as u64 + 1;
            if plan.admit(request(id, "u", text), at_s * 1_000).is_ok() {
                accepted.push((ReservationId(id), at_s * 1_000));
            }
        }
        prop_assert_eq!(check_plan(&plan), Ok(()));
        for (id, at_ms) in &accepted {
            prop_assert_eq!(check_satisfied(&plan, *id, *at_ms), Ok(()), "{}", id);
        }
        let before = plan.clone();
        let id = ReservationId(100);
        let now_ms = now_s * 1_000;
        match plan.admit(request(100, "v", &request_text), now_ms) {
            Ok(_) => {
                prop_assert_eq!(check_satisfied(&plan, id, now_ms), Ok(()), "{}", request_text);
                prop_assert_eq!(check_plan(&plan), Ok(()));
            }
            Err(_) => prop_assert_eq!(&plan, &before),
        }
    }
}

#[test]
fn used_capacity_is_zero_after_everything_is_deleted_whatever_the_amounts() {
    let mut plan = Plan::new(
        config(PolicyKind::Gree),
        ResourceVec::from_pairs(&[(fullerene_scheduling::ResourceKind::Cpus, 7.3)]),
    );
    for id in 1..=5 {
        plan.admit(
            request(
                id,
                "a",
                &format!(
                    "window(atom(cpus=0.{id}; g=1, h={id}, l=2s, w={}), s=0, f=30s)",
                    2 * id
                ),
            ),
            0,
        )
        .expect("fits");
    }
    for id in 1..=5 {
        plan.delete(ReservationId(id));
    }
    assert_eq!(plan.used().runs_stored(), 0);
}

#[test]
fn only_an_empty_plan_changes_its_quantum_and_keeps_its_capacity_from_now_on() {
    let mut plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
    // A gain pending in quantum 6 is the capacity from now on.
    plan.change_capacity(5_500, CapacityChange::Gain(res("cpus=6")), 5_500);
    plan.admit(
        request(
            1,
            "etl",
            "window(atom(cpus=1; g=1, h=2, l=2s, w=4), s=0, f=10s)",
        ),
        0,
    )
    .expect("fits");
    assert_eq!(
        plan.requantize(100),
        Err(crate::plan::RequantizeError::NotEmpty { accepted: 1 })
    );
    assert_eq!(plan.config().limits.quantum_ms, 1_000, "refused: unchanged");
    plan.delete(ReservationId(1));
    assert!(matches!(
        plan.requantize(99),
        Err(crate::plan::RequantizeError::OutOfRange { quantum_ms: 99, .. })
    ));
    plan.requantize(100).expect("an empty plan");
    assert_eq!(plan.config().limits.quantum_ms, 100);
    assert_eq!(plan.capacity().at(0), res("cpus=16"));
    // Requests are now in tenths of a second: 300 ms of two bundles fits where it did not.
    plan.admit(
        request(
            2,
            "etl",
            "window(atom(cpus=8; g=1, h=2, l=100ms, w=600ms), s=0, f=300ms)",
        ),
        0,
    )
    .expect("fits in three quanta of 100 ms");
}

#[test]
fn the_rest_of_a_request_goes_on_with_the_alternative_it_was_running() {
    let plan = Plan::new(config(PolicyKind::Gree), res("cpus=10"));
    let expr = parse(
        "window(any(atom(cpus=2; g=1, h=5, l=1s, w=100), atom(cpus=1; g=1, h=5, l=1s, w=100)), \
         s=0, f=100s)",
    )
    .expect("parses");
    let atom = |atom| AtomRef {
        atom,
        occurrence: 0,
    };
    let work = |allocations: &[AtomAllocation]| -> Vec<(u32, u64)> {
        allocations
            .iter()
            .map(|a| {
                let held = a
                    .pieces
                    .iter()
                    .map(|p| (p.end - p.start) * u64::from(p.bundles));
                (a.atom.atom, held.sum())
            })
            .collect()
    };
    // Asked anew, the first alternative fits.
    let fresh = plan.place(&expr, 0, 0).expect("fits");
    assert_eq!(work(&fresh), vec![(0, 100)]);
    // The second was running and was allocated 40: it goes on, for the 60 left.
    let allocated = std::collections::BTreeMap::from([(atom(1), 40)]);
    let rest = plan.place_rest(&expr, 0, 50_000, &allocated).expect("fits");
    assert_eq!(work(&rest), vec![(1, 60)]);
    // Allocated all of it: nothing left to place.
    let allocated = std::collections::BTreeMap::from([(atom(1), 100)]);
    let rest = plan.place_rest(&expr, 0, 50_000, &allocated).expect("done");
    assert!(rest.is_empty());
}
