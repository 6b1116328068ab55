//! Behavioural tests of the allocator: every policy's order, the κ·C gate and its bound, leftover
//! redistribution, filters, shards and the resource accounting.

use proptest::prelude::*;

use super::*;
use crate::demand::{PendingDemand, ReservationProgress};
use crate::fairness::FairnessFactor;
use crate::resources::Resources;
use crate::testkit::{machine, res, summary};

fn aid(s: &str) -> AgentId {
    AgentId::from(s)
}

fn fid(s: &str) -> FrameworkId {
    FrameworkId::from(s)
}

/// An allocator with one agent to one framework per cycle, the whole leftover to one framework,
/// η from the chosen candidates and equal-split shares: the rules most of these tests were
/// written for (they pin the offer caps and the leftover order); the paper's task-at-a-time
/// rules have tests of their own ([`paper_allocator`]).
fn allocator(policy: InterJobPolicy) -> StandaloneAllocator {
    StandaloneAllocator::new(AllocatorConfig {
        policy,
        matching: AgentMatching::WholeAgent,
        leftover: LeftoverRule::SrtfOnly,
        eta: EtaRule::ChosenCandidates,
        fair_share: FairShareRule::EqualSplit,
        ..AllocatorConfig::default()
    })
    .expect("valid config")
}

/// An allocator with the default rules (task at a time, the papers').
fn paper_allocator(policy: InterJobPolicy) -> StandaloneAllocator {
    StandaloneAllocator::new(AllocatorConfig {
        policy,
        ..AllocatorConfig::default()
    })
    .expect("valid config")
}

/// The only re-offer of an answer.
fn one(reoffers: Vec<OfferDecision>) -> OfferDecision {
    assert_eq!(reoffers.len(), 1, "{reoffers:?}");
    reoffers.into_iter().next().expect("one re-offer")
}

fn deficit(kappa: f64, factor: FairnessFactor) -> InterJobPolicy {
    InterJobPolicy::DeficitCounters { factor, kappa }
}

fn add_agents(alloc: &mut StandaloneAllocator, n: usize, total: ResourceVec) {
    for i in 0..n {
        alloc.add_agent(aid(&format!("a{i}")), total).unwrap();
    }
}

fn offered_to(offers: &[OfferDecision]) -> Vec<&str> {
    offers.iter().map(|o| o.framework.as_str()).collect()
}

#[test]
fn config_is_validated() {
    for policy in [
        deficit(1.0, FairnessFactor::Drf),
        deficit(-0.1, FairnessFactor::Drf),
        InterJobPolicy::CapacityScheduler { max_capacity: 0.0 },
    ] {
        assert!(StandaloneAllocator::new(AllocatorConfig {
            policy,
            ..AllocatorConfig::default()
        })
        .is_err());
    }
    assert!(StandaloneAllocator::new(AllocatorConfig {
        shards: 0,
        ..AllocatorConfig::default()
    })
    .is_err());
}

#[test]
fn launches_through_offers_update_deficits_by_the_design_formula() {
    // Weights 1 and 3: f_a = 0.25, f_b = 0.75. Slot factor, κ high enough not to gate.
    let mut alloc = allocator(deficit(0.9, FairnessFactor::Slot));
    add_agents(&mut alloc, 1, machine());
    alloc.set_group_weight("b", 3.0).unwrap();
    alloc.add_framework(fid("fa"), "a", 0.0).unwrap();
    alloc.add_framework(fid("fb"), "b", 0.0).unwrap();
    alloc
        .update_demand(&fid("fa"), &summary(&[("cpus=1", 4, 1.0)], 10.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["fa"]);
    alloc
        .offer_answered(
            &aid("a0"),
            &fid("fa"),
            &[res("cpus=1"), res("cpus=1")],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    // Two launches of a: deficit_a += 2·(0.25 − 1), deficit_b += 2·0.75.
    let d = alloc.deficits();
    assert!(
        (d.deficit_of("a") + 1.5).abs() < 1e-9,
        "{}",
        d.deficit_of("a")
    );
    assert!((d.deficit_of("b") - 1.5).abs() < 1e-9);
    // A release undoes one launch.
    alloc
        .release(&aid("a0"), &fid("fa"), res("cpus=1"))
        .unwrap();
    let d = alloc.deficits();
    assert!((d.deficit_of("a") + 0.75).abs() < 1e-9);
    assert!((d.deficit_of("b") - 0.75).abs() < 1e-9);
}

#[test]
fn slot_and_drf_factors_weigh_big_and_small_tasks_differently() {
    let mut deficits = Vec::new();
    for factor in [FairnessFactor::Slot, FairnessFactor::Drf] {
        let mut alloc = allocator(deficit(0.5, factor));
        add_agents(&mut alloc, 2, machine());
        alloc.add_framework(fid("big"), "a", 0.0).unwrap();
        alloc.add_framework(fid("small"), "b", 0.0).unwrap();
        alloc
            .apply_launch(&aid("a0"), &fid("big"), res("cpus=8,mem_mib=8192"))
            .unwrap();
        alloc
            .apply_launch(&aid("a1"), &fid("small"), res("cpus=1,mem_mib=1024"))
            .unwrap();
        deficits.push(alloc.deficits().deficit_of("b"));
    }
    // One task each: even under slot fairness; under DRF "small" is owed (8 − 1)/32 / 2.
    assert!(deficits[0].abs() < 1e-9, "slot: {}", deficits[0]);
    assert!(
        (deficits[1] - 7.0 / 32.0 / 2.0).abs() < 1e-9,
        "drf: {}",
        deficits[1]
    );
}

/// Group a holds half the cluster, so group b's deficit is 0.25 ≥ κ·C = 0.1: although a's
/// framework scores better everywhere, b's is offered first. Without the preload the better
/// scoring framework wins.
#[test]
fn kappa_gate_offers_only_to_the_most_deprived_group() {
    for preload in [true, false] {
        let mut alloc = allocator(deficit(0.1, FairnessFactor::Drf));
        add_agents(&mut alloc, 10, res("cpus=16,mem_mib=16384"));
        alloc.add_framework(fid("fa"), "a", 0.0).unwrap();
        alloc.add_framework(fid("fb"), "b", 0.0).unwrap();
        if preload {
            for i in 0..5 {
                alloc
                    .apply_launch(&aid(&format!("a{i}")), &fid("fa"), res("cpus=16"))
                    .unwrap();
            }
        }
        alloc
            .update_demand(
                &fid("fa"),
                &summary(&[("cpus=4,mem_mib=4096", 100, 1.0)], 10.0),
            )
            .unwrap();
        alloc
            .update_demand(
                &fid("fb"),
                &summary(&[("cpus=1,mem_mib=1024", 100, 0.1)], 10.0),
            )
            .unwrap();
        let threshold = alloc.unfairness_threshold().unwrap();
        assert!((threshold - 0.1).abs() < 1e-12);
        let b_deficit = alloc.deficits().deficit_of("b");
        assert_eq!(b_deficit >= threshold, preload);
        let offers = alloc.allocate_all(0.0);
        assert_eq!(
            offers[0].framework.as_str(),
            if preload { "fb" } else { "fa" }
        );
        if preload {
            // b is served until its projected deficit is below κ·C: each agent lets fb expect
            // 16 tasks of factor 1/160, lowering its deficit by 16/160 · (1 − 0.5) = 0.05.
            let to_b = offers.iter().take_while(|o| o.framework.as_str() == "fb");
            assert_eq!(to_b.count(), 3, "{:?}", offered_to(&offers));
        }
    }
}

/// After the gate opens, an offer to the better-scoring group is cut to the tasks that keep the
/// other group within κ·C plus one task, instead of the whole agent.
#[test]
fn offers_are_capped_at_the_unfairness_bound() {
    let mut alloc = allocator(deficit(0.1, FairnessFactor::Slot));
    add_agents(&mut alloc, 1, res("cpus=64"));
    add_agents_named(&mut alloc, "b", 1, res("cpus=16"));
    // C = 80 slots, κ·C = 8 tasks.
    alloc.add_framework(fid("fa"), "a", 0.0).unwrap();
    alloc.add_framework(fid("fb"), "b", 0.0).unwrap();
    alloc
        .update_demand(&fid("fa"), &summary(&[("cpus=1", 100, 1.0)], 1.0))
        .unwrap();
    alloc
        .update_demand(&fid("fb"), &summary(&[("cpus=1", 100, 0.01)], 1.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    let first = &offers[0];
    assert_eq!(first.framework.as_str(), "fa");
    // Each task of a raises b's deficit by 1 · 0.5: 16 tasks reach κ·C = 8.
    assert_eq!(first.resources, res("cpus=16"), "{offers:?}");
    let agent = first.agent.clone();
    alloc
        .offer_answered(
            &agent,
            &fid("fa"),
            &vec![res("cpus=1"); 16],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    assert!(alloc.deficits().deficit_of("b") <= 8.0 + 1.0);
}

/// Fig. 8's strict gate: while group b is at or above κ·C, an agent its tasks cannot use is not
/// offered to anyone (group a could use it); once b's projected deficit is back below κ·C, the
/// next cycle offers that agent again.
#[test]
fn the_gate_holds_agents_the_deprived_group_cannot_use() {
    let mut alloc = allocator(deficit(0.1, FairnessFactor::Drf));
    add_agents(&mut alloc, 2, res("cpus=16"));
    alloc.add_framework(fid("fa"), "a", 0.0).unwrap();
    alloc.add_framework(fid("fb"), "b", 0.0).unwrap();
    // a holds 14 of 32 cpus: b's deficit is 0.5 · 14/32 ≈ 0.22 ≥ 0.1.
    alloc
        .apply_launch(&aid("a0"), &fid("fa"), res("cpus=14"))
        .unwrap();
    alloc
        .update_demand(&fid("fa"), &summary(&[("cpus=1", 100, 1.0)], 1.0))
        .unwrap();
    alloc
        .update_demand(&fid("fb"), &summary(&[("cpus=4", 100, 1.0)], 1.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offers.len(), 1, "{offers:?}");
    assert_eq!(
        (offers[0].agent.as_str(), offers[0].framework.as_str()),
        ("a1", "fb")
    );
    // fb's four expected tasks bring b below κ·C: a0's two cpus now go to fa.
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["fa"]);
    assert_eq!(offers[0].agent.as_str(), "a0");
}

/// A deprived group whose frameworks all declined an agent does not hold it idle.
#[test]
fn a_group_that_refuses_an_agent_does_not_hold_it() {
    let mut alloc = allocator(deficit(0.1, FairnessFactor::Drf));
    add_agents(&mut alloc, 2, res("cpus=16"));
    alloc.add_framework(fid("fa"), "a", 0.0).unwrap();
    alloc.add_framework(fid("fb"), "b", 0.0).unwrap();
    alloc
        .apply_launch(&aid("a0"), &fid("fa"), res("cpus=16"))
        .unwrap();
    for f in ["fa", "fb"] {
        alloc
            .update_demand(&fid(f), &summary(&[("cpus=1", 100, 1.0)], 1.0))
            .unwrap();
    }
    assert_eq!(offered_to(&alloc.allocate_all(0.0)), vec!["fb"]);
    alloc
        .offer_answered(&aid("a1"), &fid("fb"), &[], LeftoverAction::Decline, 0.0)
        .unwrap();
    // b is still owed a quarter of the cluster, but fb refuses a1 for 5 s.
    assert!(alloc.deficits().deficit_of("b") >= alloc.unfairness_threshold().unwrap());
    assert_eq!(offered_to(&alloc.allocate_all(1.0)), vec!["fa"]);
}

fn add_agents_named(alloc: &mut StandaloneAllocator, prefix: &str, n: usize, total: ResourceVec) {
    for i in 0..n {
        alloc
            .add_agent(aid(&format!("{prefix}{i}")), total)
            .unwrap();
    }
}

#[test]
fn drf_offers_to_the_least_dominant_share() {
    let mut alloc = allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 4, res("cpus=16,mem_mib=16384"));
    alloc.add_framework(fid("heavy"), "g", 0.0).unwrap();
    alloc.add_framework(fid("light"), "g", 1.0).unwrap();
    alloc.add_framework(fid("other"), "h", 2.0).unwrap();
    alloc
        .apply_launch(&aid("a0"), &fid("heavy"), res("cpus=8"))
        .unwrap();
    alloc
        .apply_launch(&aid("a0"), &fid("light"), res("mem_mib=4096"))
        .unwrap();
    alloc
        .apply_launch(&aid("a1"), &fid("other"), res("cpus=2"))
        .unwrap();
    for f in ["heavy", "light", "other"] {
        alloc
            .update_demand(&fid(f), &summary(&[("cpus=1,mem_mib=1024", 16, 1.0)], 1.0))
            .unwrap();
    }
    let offers = alloc.allocate_all(0.0);
    // Group h (2/64 of cpus) is below g (12/64 cpus-or-mem); within g, light (4096/65536 of
    // memory) is below heavy (8/64 of cpus). Each framework's 16 tasks fill one agent.
    assert_eq!(offered_to(&offers)[0], "other");
    assert_eq!(offered_to(&offers)[1], "light");
    assert!(offered_to(&offers).contains(&"heavy"));
}

#[test]
fn drf_weights_groups() {
    let mut alloc = allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 2, res("cpus=16"));
    alloc.set_group_weight("gold", 4.0).unwrap();
    alloc.add_framework(fid("g1"), "gold", 0.0).unwrap();
    alloc.add_framework(fid("s1"), "silver", 0.0).unwrap();
    // gold holds 8/32 (weighted 0.0625), silver 4/32 (weighted 0.125): gold goes first.
    alloc
        .apply_launch(&aid("a0"), &fid("g1"), res("cpus=8"))
        .unwrap();
    alloc
        .apply_launch(&aid("a1"), &fid("s1"), res("cpus=4"))
        .unwrap();
    for f in ["g1", "s1"] {
        alloc
            .update_demand(&fid(f), &summary(&[("cpus=1", 100, 1.0)], 1.0))
            .unwrap();
    }
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers)[0], "g1");
}

#[test]
fn capacity_scheduler_serves_the_queue_furthest_below_its_guarantee() {
    let policy = InterJobPolicy::CapacityScheduler { max_capacity: 1.0 };
    let mut alloc = allocator(policy);
    add_agents(&mut alloc, 4, res("cpus=16"));
    alloc.set_group_weight("big", 3.0).unwrap();
    alloc.set_group_weight("small", 1.0).unwrap();
    alloc.add_framework(fid("b1"), "big", 0.0).unwrap();
    alloc.add_framework(fid("s1"), "small", 1.0).unwrap();
    alloc.add_framework(fid("s2"), "small", 2.0).unwrap();
    // big: 24/64 used of a 75% guarantee (ratio 0.5); small: 12/64 of 25% (ratio 0.75).
    alloc
        .apply_launch(&aid("a0"), &fid("b1"), res("cpus=16"))
        .unwrap();
    alloc
        .apply_launch(&aid("a1"), &fid("b1"), res("cpus=8"))
        .unwrap();
    alloc
        .apply_launch(&aid("a2"), &fid("s1"), res("cpus=12"))
        .unwrap();
    for f in ["b1", "s1", "s2"] {
        alloc
            .update_demand(&fid(f), &summary(&[("cpus=4", 1, 1.0)], 1.0))
            .unwrap();
    }
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers)[0], "b1");
    // Then small (ratio 0.75 < big's (24 + 4·…)/48 after its offer): FIFO within it, s1 first.
    assert_eq!(offered_to(&offers)[1], "s1");
    assert_eq!(offered_to(&offers)[2], "s2");
}

#[test]
fn capacity_scheduler_is_elastic_up_to_max_capacity() {
    let policy = InterJobPolicy::CapacityScheduler { max_capacity: 0.5 };
    let mut alloc = allocator(policy);
    add_agents(&mut alloc, 4, res("cpus=16"));
    alloc.set_group_weight("big", 3.0).unwrap();
    alloc.set_group_weight("small", 1.0).unwrap();
    alloc.add_framework(fid("s1"), "small", 0.0).unwrap();
    // small holds 30 of 64 cpus: beyond its 25% guarantee (big is idle), 2 below its maximum.
    alloc
        .apply_launch(&aid("a0"), &fid("s1"), res("cpus=16"))
        .unwrap();
    alloc
        .apply_launch(&aid("a1"), &fid("s1"), res("cpus=14"))
        .unwrap();
    alloc
        .update_demand(&fid("s1"), &summary(&[("cpus=1", 50, 1.0)], 1.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    let total: f64 = offers.iter().map(|o| o.resources[ResourceKind::Cpus]).sum();
    assert_eq!(offers.len(), 1, "{offers:?}");
    assert!((total - 2.0).abs() < 1e-9, "offered {total} cpus");
}

#[test]
fn fifo_serves_in_registration_order() {
    let mut alloc = allocator(InterJobPolicy::Fifo);
    add_agents(&mut alloc, 3, res("cpus=4"));
    alloc.add_framework(fid("first"), "g", 0.0).unwrap();
    alloc.add_framework(fid("second"), "h", 1.0).unwrap();
    alloc.add_framework(fid("third"), "g", 2.0).unwrap();
    alloc
        .update_demand(&fid("third"), &summary(&[("cpus=4", 1, 1.0)], 1.0))
        .unwrap();
    alloc
        .update_demand(&fid("second"), &summary(&[("cpus=4", 1, 1.0)], 1.0))
        .unwrap();
    // "first" wants a task no agent can hold: skipped, not blocking.
    alloc
        .update_demand(&fid("first"), &summary(&[("cpus=8", 1, 1.0)], 1.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["second", "third"]);
}

#[test]
fn sjf_serves_least_remaining_work_first() {
    let mut alloc = allocator(InterJobPolicy::Sjf);
    add_agents(&mut alloc, 3, res("cpus=4"));
    for (f, rw) in [("long", 500.0), ("short", 5.0), ("medium", 50.0)] {
        alloc.add_framework(fid(f), "g", 0.0).unwrap();
        alloc
            .update_demand(&fid(f), &summary(&[("cpus=4", 1, 1.0)], rw))
            .unwrap();
    }
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["short", "medium", "long"]);
}

#[test]
fn tetris_prefers_aligned_shapes_then_less_remaining_work() {
    let mut alloc = allocator(InterJobPolicy::Tetris);
    // An agent with much cpu and little memory free.
    alloc
        .add_agent(aid("a0"), res("cpus=16,mem_mib=16384"))
        .unwrap();
    alloc.add_framework(fid("bg"), "g", 0.0).unwrap();
    alloc
        .apply_launch(&aid("a0"), &fid("bg"), res("mem_mib=12288"))
        .unwrap();
    alloc.add_framework(fid("memory"), "g", 1.0).unwrap();
    alloc.add_framework(fid("compute"), "g", 2.0).unwrap();
    alloc
        .update_demand(
            &fid("memory"),
            &summary(&[("cpus=1,mem_mib=4096", 1, 1.0)], 1.0),
        )
        .unwrap();
    alloc
        .update_demand(
            &fid("compute"),
            &summary(&[("cpus=8,mem_mib=1024", 1, 1.0)], 1.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["compute"]);

    // Same shapes: the one with less remaining work wins once ε is learnt.
    let mut alloc = allocator(InterJobPolicy::Tetris);
    add_agents(&mut alloc, 2, res("cpus=16"));
    alloc.add_framework(fid("long"), "g", 0.0).unwrap();
    alloc.add_framework(fid("short"), "g", 1.0).unwrap();
    alloc
        .update_demand(&fid("long"), &summary(&[("cpus=16", 1, 1.0)], 1000.0))
        .unwrap();
    alloc
        .update_demand(&fid("short"), &summary(&[("cpus=16", 1, 1.0)], 10.0))
        .unwrap();
    for offer in alloc.allocate_all(0.0) {
        alloc.rescind_offer(&offer.agent, &offer.framework).unwrap();
    }
    let offers = alloc.allocate_all(1.0);
    assert_eq!(offered_to(&offers), vec!["short", "long"]);
}

#[test]
fn graphene_prefers_high_priority_packable_work() {
    let mut alloc = allocator(deficit(0.5, FairnessFactor::Drf));
    add_agents(&mut alloc, 1, res("cpus=16,mem_mib=16384"));
    alloc.add_framework(fid("late"), "g", 0.0).unwrap();
    alloc.add_framework(fid("early"), "g", 1.0).unwrap();
    alloc
        .update_demand(
            &fid("late"),
            &summary(&[("cpus=4,mem_mib=4096", 4, 0.2)], 1.0),
        )
        .unwrap();
    alloc
        .update_demand(
            &fid("early"),
            &summary(&[("cpus=4,mem_mib=4096", 4, 0.9)], 1.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["early"]);
}

#[test]
fn overbooking_is_offered_only_when_nothing_fits() {
    let mut alloc = allocator(deficit(0.5, FairnessFactor::Drf));
    alloc
        .add_agent(aid("a0"), res("cpus=16,mem_mib=16384,net_mbps=1000"))
        .unwrap();
    alloc.add_framework(fid("bg"), "g", 0.0).unwrap();
    alloc
        .apply_launch(&aid("a0"), &fid("bg"), res("net_mbps=900"))
        .unwrap();
    alloc.add_framework(fid("net"), "g", 1.0).unwrap();
    alloc
        .update_demand(
            &fid("net"),
            &summary(&[("cpus=1,net_mbps=200", 3, 1.0)], 1.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["net"]);
    // It may launch one task beyond the free bandwidth (within the 25% allowance) ...
    alloc
        .offer_answered(
            &aid("a0"),
            &fid("net"),
            &[res("cpus=1,net_mbps=200")],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    // ... but not into a link that is already full: that would only slow its tasks down.
    alloc
        .update_demand(
            &fid("net"),
            &summary(&[("cpus=1,net_mbps=200", 3, 1.0)], 1.0),
        )
        .unwrap();
    alloc.revive(&fid("net")).unwrap();
    assert!(alloc.allocate_all(10.0).is_empty());
    // Offered the agent for a task that fits, it may not launch beyond the allowance either.
    alloc
        .update_demand(
            &fid("net"),
            &summary(&[("cpus=1,net_mbps=200", 3, 1.0), ("cpus=1", 1, 1.0)], 1.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(10.0);
    assert_eq!(offers.len(), 1);
    let err = alloc.offer_answered(
        &aid("a0"),
        &fid("net"),
        &[res("cpus=1,net_mbps=200"), res("cpus=1,net_mbps=200")],
        LeftoverAction::Decline,
        10.0,
    );
    assert!(
        matches!(err, Err(AllocatorError::ExceedsOffer { .. })),
        "{err:?}"
    );
}

#[test]
fn yielded_leftovers_go_to_least_remaining_work_donors_included() {
    for policy in [InterJobPolicy::Drf, deficit(0.9, FairnessFactor::Drf)] {
        let mut alloc = allocator(policy);
        add_agents(&mut alloc, 1, res("cpus=16,mem_mib=16384"));
        for (f, rw) in [
            ("yielder", 1.0),
            ("long", 900.0),
            ("short", 20.0),
            ("mid", 300.0),
        ] {
            alloc.add_framework(fid(f), "g", 0.0).unwrap();
            alloc
                .update_demand(&fid(f), &summary(&[("cpus=2,mem_mib=1024", 8, 1.0)], rw))
                .unwrap();
        }
        let offers = alloc.allocate_all(0.0);
        assert_eq!(offers.len(), 1);
        let first = offers[0].framework.clone();
        let mut holder = first.clone();
        let mut order = vec![first.as_str().to_string()];
        // Each holder launches one task and yields the rest: the regular offer's holder stays a
        // candidate (Pseudocode 1's leftover scheduler runs over every job), a leftover's
        // holder that yields it is out for the rest of the cycle.
        loop {
            let next = alloc
                .offer_answered(
                    &aid("a0"),
                    &holder,
                    &[res("cpus=2,mem_mib=1024")],
                    LeftoverAction::Yield,
                    0.0,
                )
                .unwrap();
            let Some(next) = next.into_iter().next() else {
                break;
            };
            assert_eq!(next.kind, OfferKind::Leftover);
            assert_eq!(
                next.resources,
                alloc.free_resources(&aid("a0")).unwrap() + next.resources
            );
            holder = next.framework.clone();
            order.push(holder.as_str().to_string());
        }
        // After the regular offer, every framework got one leftover, by remaining work, the
        // first holder included.
        let rest: Vec<&str> = order[1..].iter().map(String::as_str).collect();
        assert_eq!(rest, ["yielder", "short", "mid", "long"], "{policy:?}");
        // The next cycle may offer it to anyone again.
        assert_eq!(alloc.allocate_all(1.0).len(), 1);
    }
}

/// Carbyne §3.3.1: altruism must not idle what nobody else can use. A framework alone on the
/// cluster that takes nothing from a regular offer and yields it gets it straight back as a
/// leftover (its offer's projected launches are forgotten with the answer), so that it can run
/// greedily at once rather than a cycle later.
#[test]
fn a_lone_donor_gets_its_yield_back_at_once() {
    for policy in [
        InterJobPolicy::Drf,
        deficit(0.1, FairnessFactor::Drf),
        InterJobPolicy::Fifo,
    ] {
        let mut alloc = allocator(policy);
        add_agents(&mut alloc, 1, res("cpus=16,mem_mib=16384"));
        alloc.add_framework(fid("donor"), "g", 0.0).unwrap();
        // Few enough tasks that the offer's projection covers all of them.
        alloc
            .update_demand(
                &fid("donor"),
                &summary(&[("cpus=2,mem_mib=1024", 4, 1.0)], 50.0),
            )
            .unwrap();
        let offers = alloc.allocate_all(0.0);
        assert_eq!(offered_to(&offers), vec!["donor"], "{policy:?}");
        let back = alloc
            .offer_answered(&aid("a0"), &fid("donor"), &[], LeftoverAction::Yield, 0.0)
            .unwrap()
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{policy:?}: the yield idles the agent"));
        assert_eq!(back.framework.as_str(), "donor");
        assert_eq!(back.kind, OfferKind::Leftover);
        assert_eq!(back.resources, offers[0].resources, "{policy:?}");
        // Yielding the leftover too ends the chain: nobody else wants it.
        let again = alloc
            .offer_answered(&aid("a0"), &fid("donor"), &[], LeftoverAction::Yield, 0.0)
            .unwrap();
        assert!(again.is_empty(), "{policy:?}");
    }
}

/// A donor with more remaining work than another framework that fits the leftover gives way to
/// it, and gets back only what that framework leaves.
#[test]
fn a_donor_gives_way_to_shorter_work_and_takes_the_rest() {
    let mut alloc = allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 1, res("cpus=16,mem_mib=16384"));
    alloc.add_framework(fid("donor"), "g", 0.0).unwrap();
    alloc.add_framework(fid("short"), "g", 1.0).unwrap();
    alloc
        .update_demand(
            &fid("donor"),
            &summary(&[("cpus=2,mem_mib=1024", 20, 1.0)], 500.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["donor"]);
    // The short framework appears after the cycle began (its summary arrives now).
    alloc
        .update_demand(
            &fid("short"),
            &summary(&[("cpus=4,mem_mib=1024", 1, 1.0)], 5.0),
        )
        .unwrap();
    let to_short = one(alloc
        .offer_answered(&aid("a0"), &fid("donor"), &[], LeftoverAction::Yield, 0.0)
        .unwrap());
    assert_eq!(to_short.framework.as_str(), "short");
    let to_donor = one(alloc
        .offer_answered(
            &aid("a0"),
            &fid("short"),
            &[res("cpus=4,mem_mib=1024")],
            LeftoverAction::Yield,
            0.0,
        )
        .unwrap());
    assert_eq!(to_donor.framework.as_str(), "donor");
    assert_eq!(to_donor.resources, res("cpus=12,mem_mib=15360"));
}

#[test]
fn leftover_ties_are_broken_by_packing() {
    let mut alloc = allocator(InterJobPolicy::Fifo);
    add_agents(&mut alloc, 1, res("cpus=16,mem_mib=16384"));
    alloc.add_framework(fid("yielder"), "g", 0.0).unwrap();
    alloc.add_framework(fid("small"), "g", 1.0).unwrap();
    alloc.add_framework(fid("large"), "g", 2.0).unwrap();
    // More remaining work than the others, so the leftover goes to one of them.
    alloc
        .update_demand(&fid("yielder"), &summary(&[("cpus=1", 1, 1.0)], 100.0))
        .unwrap();
    alloc
        .update_demand(
            &fid("small"),
            &summary(&[("cpus=1,mem_mib=512", 1, 1.0)], 5.0),
        )
        .unwrap();
    alloc
        .update_demand(
            &fid("large"),
            &summary(&[("cpus=6,mem_mib=6144", 1, 1.0)], 5.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["yielder"]);
    let next = one(alloc
        .offer_answered(&aid("a0"), &fid("yielder"), &[], LeftoverAction::Yield, 0.0)
        .unwrap());
    assert_eq!(next.framework.as_str(), "large");
}

#[test]
fn decline_filters_expire() {
    let mut alloc = allocator(InterJobPolicy::Fifo);
    add_agents(&mut alloc, 1, res("cpus=4"));
    alloc.add_framework(fid("f1"), "g", 0.0).unwrap();
    alloc.add_framework(fid("f2"), "g", 1.0).unwrap();
    for f in ["f1", "f2"] {
        alloc
            .update_demand(&fid(f), &summary(&[("cpus=1", 4, 1.0)], 1.0))
            .unwrap();
    }
    assert_eq!(offered_to(&alloc.allocate_all(0.0)), vec!["f1"]);
    alloc
        .offer_answered(&aid("a0"), &fid("f1"), &[], LeftoverAction::Decline, 0.0)
        .unwrap();
    // Filtered for 5 s: f2 gets it; it declines too.
    assert_eq!(offered_to(&alloc.allocate_all(1.0)), vec!["f2"]);
    alloc
        .offer_answered(&aid("a0"), &fid("f2"), &[], LeftoverAction::Decline, 1.0)
        .unwrap();
    assert!(alloc.allocate_all(4.9).is_empty());
    assert_eq!(offered_to(&alloc.allocate_all(5.1)), vec!["f1"]);
    // Declined again; f2's filter is still on until 6 s: nobody gets it at 5.2 ...
    alloc
        .offer_answered(&aid("a0"), &fid("f1"), &[], LeftoverAction::Decline, 5.1)
        .unwrap();
    assert!(alloc.allocate_all(5.2).is_empty());
    // ... unless a framework revives, which clears its filters at once.
    alloc.revive(&fid("f1")).unwrap();
    assert_eq!(offered_to(&alloc.allocate_all(5.3)), vec!["f1"]);
}

#[test]
fn suppressed_frameworks_get_no_offers() {
    let mut alloc = allocator(InterJobPolicy::Fifo);
    add_agents(&mut alloc, 1, res("cpus=4"));
    alloc.add_framework(fid("f1"), "g", 0.0).unwrap();
    alloc
        .update_demand(&fid("f1"), &summary(&[("cpus=1", 4, 1.0)], 1.0))
        .unwrap();
    alloc.suppress(&fid("f1")).unwrap();
    assert!(alloc.allocate_all(0.0).is_empty());
    alloc.revive(&fid("f1")).unwrap();
    assert_eq!(alloc.allocate_all(0.0).len(), 1);
}

/// A FIFO allocator over `shards` shards, the rest of its configuration the default.
fn fifo_in_shards(shards: usize) -> StandaloneAllocator {
    StandaloneAllocator::new(AllocatorConfig {
        policy: InterJobPolicy::Fifo,
        shards,
        ..AllocatorConfig::default()
    })
    .unwrap()
}

#[test]
fn shards_partition_agents_and_cycles_stay_in_their_shard() {
    let mut alloc = fifo_in_shards(4);
    add_agents(&mut alloc, 40, res("cpus=4"));
    alloc.add_framework(fid("f"), "g", 0.0).unwrap();
    alloc
        .update_demand(&fid("f"), &summary(&[("cpus=1", 1000, 1.0)], 1.0))
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for shard in 0..4 {
        let members = alloc.shard_agents(shard);
        assert!(!members.is_empty(), "shard {shard} is empty");
        for agent in &members {
            assert!(seen.insert(agent.clone()), "{agent} in two shards");
            assert_eq!(alloc.shard_of(agent), Some(shard));
        }
        let offers = alloc.allocate_shard(shard, 0.0);
        assert_eq!(offers.len(), members.len());
        assert!(offers.iter().all(|o| members.contains(&o.agent)));
    }
    assert_eq!(seen.len(), 40);
    assert!(alloc.allocate_shard(4, 0.0).is_empty());
    // The assignment depends on ids only, not on registration order.
    let mut other = StandaloneAllocator::new(AllocatorConfig {
        policy: InterJobPolicy::Fifo,
        shards: 4,
        ..AllocatorConfig::default()
    })
    .unwrap();
    for i in (0..40).rev() {
        other
            .add_agent(aid(&format!("a{i}")), res("cpus=4"))
            .unwrap();
    }
    for i in 0..40 {
        let agent = aid(&format!("a{i}"));
        assert_eq!(alloc.shard_of(&agent), other.shard_of(&agent));
    }
}

#[test]
fn removing_an_agent_or_framework_drops_its_offers() {
    let mut alloc = allocator(InterJobPolicy::Fifo);
    add_agents(&mut alloc, 2, res("cpus=4"));
    alloc.add_framework(fid("f1"), "g", 0.0).unwrap();
    alloc.add_framework(fid("f2"), "g", 1.0).unwrap();
    alloc
        .update_demand(&fid("f1"), &summary(&[("cpus=4", 1, 1.0)], 1.0))
        .unwrap();
    alloc
        .update_demand(&fid("f2"), &summary(&[("cpus=4", 1, 1.0)], 1.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offers.len(), 2);
    let f1_agent = offers
        .iter()
        .find(|o| o.framework.as_str() == "f1")
        .unwrap()
        .agent
        .clone();
    alloc.remove_agent(&f1_agent).unwrap();
    assert_eq!(alloc.outstanding_offers().len(), 1);
    assert!(matches!(
        alloc.offer_answered(&f1_agent, &fid("f1"), &[], LeftoverAction::Decline, 0.0),
        Err(AllocatorError::State(StateError::UnknownAgent(_)))
    ));
    alloc.remove_framework(&fid("f2")).unwrap();
    assert!(alloc.outstanding_offers().is_empty());
    // The remaining agent is free again and goes to f1.
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["f1"]);
    assert!(alloc.remove_framework(&fid("f2")).is_err());
}

#[test]
fn answers_are_validated_against_the_offer() {
    let mut alloc = allocator(InterJobPolicy::Fifo);
    add_agents(&mut alloc, 1, res("cpus=4,mem_mib=4096"));
    alloc.add_framework(fid("f1"), "g", 0.0).unwrap();
    alloc.add_framework(fid("f2"), "g", 1.0).unwrap();
    alloc
        .update_demand(&fid("f1"), &summary(&[("cpus=1", 8, 1.0)], 1.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["f1"]);
    assert!(matches!(
        alloc.offer_answered(&aid("a0"), &fid("f2"), &[], LeftoverAction::Decline, 0.0),
        Err(AllocatorError::NoSuchOffer { .. })
    ));
    assert!(matches!(
        alloc.offer_answered(
            &aid("a0"),
            &fid("f1"),
            &[res("cpus=5")],
            LeftoverAction::Decline,
            0.0
        ),
        Err(AllocatorError::ExceedsOffer { .. })
    ));
    // A failed answer leaves the offer out.
    assert_eq!(alloc.outstanding_offers().len(), 1);
    let bad = DemandSummary {
        pending: vec![PendingDemand {
            resources: [("fpgas", 1.0)].into_iter().collect::<Resources>(),
            count: 1,
            pri_score: 1.0,
        }],
        remaining_work: 1.0,
        srpt: 1.0,
        reservation_progress: None,
    };
    assert!(matches!(
        alloc.update_demand(&fid("f1"), &bad),
        Err(AllocatorError::InvalidDemand { .. })
    ));
    let nan = summary(&[("cpus=1", 1, f64::NAN)], 1.0);
    assert!(alloc.update_demand(&fid("f1"), &nan).is_err());
    // A job's progress through its reservation names each finished atom once, in order, and
    // only atoms its request has.
    let progress = |finished_atoms: Vec<u32>, atoms: u32| DemandSummary {
        reservation_progress: Some(ReservationProgress {
            finished_atoms,
            atoms,
            request: 7,
        }),
        ..summary(&[("cpus=1", 1, 1.0)], 1.0)
    };
    for (bad, named) in [
        (progress(vec![0, 2, 2], 4), "strictly increasing (2 then 2)"),
        (progress(vec![1, 4], 4), "finished atom 4"),
        (progress(vec![0], MAX_PROGRESS_ATOMS + 1), "at most 1024"),
    ] {
        match alloc.update_demand(&fid("f1"), &bad) {
            Err(AllocatorError::MalformedDemand { reason, .. }) => {
                assert!(reason.contains(named), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    alloc
        .update_demand(&fid("f1"), &progress(vec![0, 3], 4))
        .expect("valid progress");
}

#[test]
fn fair_share_splits_the_group_share_among_its_frameworks() {
    let mut alloc = allocator(InterJobPolicy::graphene());
    add_agents(&mut alloc, 2, res("cpus=16,mem_mib=1000"));
    alloc.set_group_weight("a", 3.0).unwrap();
    alloc.add_framework(fid("a1"), "a", 0.0).unwrap();
    alloc.add_framework(fid("a2"), "a", 0.0).unwrap();
    alloc.add_framework(fid("b1"), "b", 0.0).unwrap();
    // a: 3/4 of 32 cpus and 2000 MiB, halved between a1 and a2; b: 1/4.
    assert_eq!(
        alloc.fair_share(&fid("a1")).unwrap(),
        res("cpus=12,mem_mib=750")
    );
    assert_eq!(
        alloc.fair_share(&fid("b1")).unwrap(),
        res("cpus=8,mem_mib=500")
    );
    assert!(alloc.fair_share(&fid("zz")).is_err());
}

#[test]
fn a_new_leader_rebuilds_from_the_replicated_state() {
    let mut alloc = allocator(InterJobPolicy::graphene());
    add_agents(&mut alloc, 3, res("cpus=4"));
    alloc.add_framework(fid("f1"), "g", 0.0).unwrap();
    alloc.add_framework(fid("f2"), "h", 0.0).unwrap();
    alloc
        .apply_launch(&aid("a0"), &fid("f1"), res("cpus=4"))
        .unwrap();
    let state = alloc.state().clone();
    let mut rebuilt = StandaloneAllocator::from_state(alloc.config().clone(), state).unwrap();
    assert_eq!(rebuilt.deficits(), alloc.deficits());
    assert!(rebuilt.outstanding_offers().is_empty());
    rebuilt
        .update_demand(&fid("f2"), &summary(&[("cpus=4", 2, 1.0)], 1.0))
        .unwrap();
    // Two free agents; the used one is not offered.
    let offers = rebuilt.allocate_all(0.0);
    assert_eq!(offers.len(), 2);
    assert!(offers.iter().all(|o| o.agent.as_str() != "a0"));
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

/// A framework of the property tests: launches best-first from its summary.
#[derive(Clone, Debug)]
struct SimFramework {
    id: FrameworkId,
    shapes: Vec<(ResourceVec, u32)>,
}

impl SimFramework {
    fn summary(&self) -> DemandSummary {
        DemandSummary {
            pending: self
                .shapes
                .iter()
                .filter(|(_, c)| *c > 0)
                .map(|(d, c)| PendingDemand {
                    resources: Resources::from(*d),
                    count: *c,
                    pri_score: 0.5,
                })
                .collect(),
            remaining_work: self.shapes.iter().map(|(_, c)| *c as f64).sum(),
            srpt: self.shapes.iter().map(|(_, c)| *c as f64).sum(),
            reservation_progress: None,
        }
    }

    /// Greedy in summary order, as the allocator projects.
    fn launch(&mut self, offered: &ResourceVec) -> Vec<ResourceVec> {
        let mut free = *offered;
        let mut out = Vec::new();
        for (d, c) in self.shapes.iter_mut() {
            while *c > 0 && d.fits_in(&free) {
                free = free.saturating_sub(d);
                *c -= 1;
                out.push(*d);
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
struct Scenario {
    factor: FairnessFactor,
    kappa: f64,
    weights: Vec<f64>,
    agents: Vec<ResourceVec>,
    /// (group, shapes with counts)
    frameworks: Vec<(usize, Vec<(ResourceVec, u32)>)>,
    /// Per round: fraction of running tasks released (per mille), and the seed of the choice.
    releases: Vec<(u16, u64)>,
    shards: usize,
}

fn shape_strategy() -> impl Strategy<Value = ResourceVec> {
    (
        prop::sample::select(vec![0.5, 1.0, 2.0, 4.0]),
        prop::sample::select(vec![256.0, 1024.0, 4096.0]),
    )
        .prop_map(|(c, m)| {
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, c), (ResourceKind::MemMib, m)])
        })
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (
        prop::sample::select(vec![FairnessFactor::Slot, FairnessFactor::Drf]),
        prop::sample::select(vec![0.02, 0.05, 0.1, 0.3]),
        prop::collection::vec(1.0..4.0_f64, 2..5),
        prop::collection::vec(
            prop::sample::select(vec![4.0, 8.0, 16.0]).prop_map(|c| {
                ResourceVec::from_pairs(&[
                    (ResourceKind::Cpus, c),
                    (ResourceKind::MemMib, c * 2048.0),
                ])
            }),
            2..10,
        ),
        prop::collection::vec(
            (
                0usize..4,
                prop::collection::vec((shape_strategy(), 1u32..60), 1..4),
            ),
            2..10,
        ),
        prop::collection::vec((0u16..1000, any::<u64>()), 5..25),
        1usize..9,
    )
        .prop_map(
            |(factor, kappa, weights, agents, frameworks, releases, shards)| {
                let groups = weights.len();
                Scenario {
                    factor,
                    kappa,
                    weights,
                    agents,
                    frameworks: frameworks
                        .into_iter()
                        .map(|(g, shapes)| (g % groups, shapes))
                        .collect(),
                    releases,
                    shards,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// With random groups, frameworks and demands, and rounds of allocate → launch → release:
    /// after each round's launches, the deficit of a group whose frameworks have runnable work
    /// that fits an agent's free resources is at most κ·C plus one task's factor. Also: no agent
    /// is ever offered more than its free resources.
    #[test]
    fn deficits_stay_within_kappa_c_plus_one_task(scenario in scenario_strategy()) {
        run_scenario(&scenario, std::env::var_os("FULLERENE_TRACE").is_some())?;
    }
}

fn run_scenario(scenario: &Scenario, trace: bool) -> Result<(), TestCaseError> {
    let mut alloc = StandaloneAllocator::new(AllocatorConfig {
        policy: InterJobPolicy::DeficitCounters {
            factor: scenario.factor,
            kappa: scenario.kappa,
        },
        shards: scenario.shards,
        decline_filter_s: 0.0,
        ..AllocatorConfig::default()
    })
    .unwrap();
    for (g, w) in scenario.weights.iter().enumerate() {
        alloc.set_group_weight(&format!("g{g}"), *w).unwrap();
    }
    for (i, total) in scenario.agents.iter().enumerate() {
        alloc.add_agent(aid(&format!("a{i}")), *total).unwrap();
    }
    let mut frameworks: Vec<(SimFramework, String)> = Vec::new();
    for (i, (g, shapes)) in scenario.frameworks.iter().enumerate() {
        let fw = SimFramework {
            id: fid(&format!("f{i}")),
            shapes: shapes.clone(),
        };
        alloc
            .add_framework(fw.id.clone(), &format!("g{g}"), i as f64)
            .unwrap();
        alloc.update_demand(&fw.id, &fw.summary()).unwrap();
        frameworks.push((fw, format!("g{g}")));
    }
    let capacity = alloc.cluster_capacity();
    let max_factor = frameworks
        .iter()
        .flat_map(|(fw, _)| {
            fw.shapes
                .iter()
                .map(|(d, _)| scenario.factor.of(d, &capacity))
        })
        .fold(0.0, f64::max);
    let threshold = alloc.unfairness_threshold().unwrap();
    let mut running: Vec<(AgentId, FrameworkId, ResourceVec)> = Vec::new();
    for (round, (release_per_mille, seed)) in scenario.releases.iter().enumerate() {
        let now = round as f64;
        if trace {
            let d: Vec<String> = alloc
                .deficits()
                .iter()
                .map(|(_, c)| format!("{}={:.3}(f={:.2})", c.name, c.deficit, c.share))
                .collect();
            eprintln!("round {round}: before allocation {d:?} threshold {threshold}");
        }
        let offers = alloc.allocate_all(now);
        // No agent is offered more than its free resources.
        for (idx, agent) in alloc.state().agents() {
            let offered: ResourceVec = alloc.allocator().agents[idx.get()]
                .offers
                .iter()
                .map(|o| o.resources)
                .fold(ResourceVec::ZERO, |a, b| a + b);
            prop_assert!(
                (agent.used + offered).fits_in(&agent.total),
                "agent {} used {} offered {} total {}",
                agent.id,
                agent.used,
                offered,
                agent.total
            );
        }
        for offer in offers {
            let (fw, group) = frameworks
                .iter_mut()
                .find(|(f, _)| f.id == offer.framework)
                .unwrap();
            let tasks = fw.launch(&offer.resources);
            if trace {
                eprintln!(
                    "  offer {} -> {} ({group}): {} launches {}",
                    offer.agent,
                    offer.framework,
                    offer.resources,
                    tasks.len()
                );
            }
            alloc
                .offer_answered(
                    &offer.agent,
                    &offer.framework,
                    &tasks,
                    LeftoverAction::Decline,
                    now,
                )
                .unwrap();
            for t in tasks {
                running.push((offer.agent.clone(), offer.framework.clone(), t));
            }
            alloc.update_demand(&fw.id, &fw.summary()).unwrap();
            if trace {
                let d: Vec<String> = alloc
                    .deficits()
                    .iter()
                    .map(|(_, c)| format!("{}={:.3}", c.name, c.deficit))
                    .collect();
                eprintln!("    deficits {d:?}");
            }
        }
        // The bound, for groups with work that fits somewhere.
        for (g, _) in scenario.weights.iter().enumerate() {
            let name = format!("g{g}");
            let fits_somewhere =
                frameworks
                    .iter()
                    .filter(|(_, group)| *group == name)
                    .any(|(fw, _)| {
                        fw.shapes.iter().any(|(d, c)| {
                            *c > 0 && alloc.state().agents().any(|(_, a)| d.fits_in(&a.free()))
                        })
                    });
            let d = alloc.deficits().deficit_of(&name);
            if fits_somewhere {
                prop_assert!(
                    d <= threshold + max_factor + 1e-9,
                    "round {round}: group {name} deficit {d} > κC {threshold} + {max_factor}; free: {:?}",
                    alloc.state().agents().map(|(_, a)| format!("{}:{}", a.id, a.free())).collect::<Vec<_>>()
                );
            }
        }
        // Releases.
        let mut rng_state = *seed | 1;
        let mut kept = Vec::new();
        for task in running.drain(..) {
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            if (rng_state % 1000) < *release_per_mille as u64 {
                if trace {
                    eprintln!("  release {} {} {}", task.0, task.1, task.2);
                }
                alloc.release(&task.0, &task.1, task.2).unwrap();
            } else {
                kept.push(task);
            }
        }
        running = kept;
    }
    Ok(())
}

/// The case that showed why the gate must be Fig. 8's strict one: group g2's 4-cpu tasks fit
/// only one agent's remainder, and one-task offers to g0 on the other agents (which g2 cannot
/// use) kept raising g2's deficit past κ·C.
#[test]
fn a_deprived_group_is_not_raised_on_agents_it_cannot_use() {
    let r = |s: &str| res(s);
    let scenario = Scenario {
        factor: FairnessFactor::Slot,
        kappa: 0.05,
        weights: vec![
            2.49253710069775,
            1.0,
            3.6550423882779035,
            2.9879803546906025,
        ],
        agents: [
            "cpus=8,mem_mib=16384",
            "cpus=16,mem_mib=32768",
            "cpus=16,mem_mib=32768",
            "cpus=8,mem_mib=16384",
            "cpus=4,mem_mib=8192",
            "cpus=8,mem_mib=16384",
            "cpus=16,mem_mib=32768",
            "cpus=8,mem_mib=16384",
        ]
        .iter()
        .map(|s| r(s))
        .collect(),
        frameworks: vec![
            (
                3,
                vec![
                    (r("cpus=0.5,mem_mib=256"), 35),
                    (r("cpus=0.5,mem_mib=256"), 41),
                    (r("cpus=4,mem_mib=4096"), 41),
                ],
            ),
            (0, vec![(r("cpus=2,mem_mib=4096"), 35)]),
            (
                2,
                vec![(r("cpus=1,mem_mib=256"), 5), (r("cpus=4,mem_mib=256"), 46)],
            ),
            (0, vec![(r("cpus=4,mem_mib=4096"), 33)]),
            (1, vec![(r("cpus=0.5,mem_mib=256"), 1)]),
        ],
        releases: vec![
            (584, 2148467423172012418),
            (330, 2220891444363372370),
            (0, 0),
            (627, 4452349539506711220),
            (930, 1010177736959276970),
            (25, 13493381664144137522),
            (0, 0),
        ],
        shards: 1,
    };
    run_scenario(&scenario, false).unwrap();
}

// ---------------------------------------------------------------------------------------------
// The papers' rules: task at a time, leftovers in parts, η over all pending work, A_k by
// progressive filling.
// ---------------------------------------------------------------------------------------------

fn resources_of<'a>(offers: &'a [OfferDecision], framework: &str) -> Vec<&'a ResourceVec> {
    offers
        .iter()
        .filter(|o| o.framework.as_str() == framework)
        .map(|o| &o.resources)
        .collect()
}

/// DRF's progressive filling is task at a time: two groups with equal weights and one-core
/// tasks share a four-core agent two and two in one cycle, where the whole-agent rule gives it
/// all to one of them.
#[test]
fn drf_shares_one_agent_task_at_a_time() {
    for (matching, expected) in [
        (AgentMatching::TaskAtATime, vec![2.0, 2.0]),
        (AgentMatching::WholeAgent, vec![4.0]),
    ] {
        let mut alloc = StandaloneAllocator::new(AllocatorConfig {
            policy: InterJobPolicy::Drf,
            matching,
            ..AllocatorConfig::default()
        })
        .unwrap();
        add_agents(&mut alloc, 1, res("cpus=4"));
        alloc.add_framework(fid("fa"), "ga", 0.0).unwrap();
        alloc.add_framework(fid("fb"), "gb", 1.0).unwrap();
        for f in ["fa", "fb"] {
            alloc
                .update_demand(&fid(f), &summary(&[("cpus=1", 4, 1.0)], 4.0))
                .unwrap();
        }
        let offers = alloc.allocate_all(0.0);
        let cpus: Vec<f64> = offers
            .iter()
            .map(|o| o.resources[ResourceKind::Cpus])
            .collect();
        assert_eq!(cpus, expected, "{matching:?}: {offers:?}");
        // Nothing is offered twice: the parts sum to at most the agent's free resources.
        let sum = offers
            .iter()
            .fold(ResourceVec::ZERO, |s, o| s + o.resources);
        assert!(fits(&sum, &res("cpus=4")));
    }
}

/// Graphene's Fig. 8 fills a machine from every job's tasks: the best-packing task of one
/// framework and the best remaining ones of another share the agent in one cycle, each
/// framework offered exactly its picks.
#[test]
fn graphene_fills_an_agent_from_several_frameworks() {
    let mut alloc = paper_allocator(deficit(0.5, FairnessFactor::Drf));
    add_agents(&mut alloc, 1, res("cpus=16,mem_mib=16"));
    alloc.add_framework(fid("big"), "g", 0.0).unwrap();
    alloc.add_framework(fid("small"), "g", 1.0).unwrap();
    alloc
        .update_demand(
            &fid("big"),
            &summary(&[("cpus=12,mem_mib=12", 1, 1.0)], 1.0),
        )
        .unwrap();
    alloc
        .update_demand(
            &fid("small"),
            &summary(&[("cpus=2,mem_mib=2", 5, 1.0)], 1.0),
        )
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(
        resources_of(&offers, "big"),
        vec![&res("cpus=12,mem_mib=12")]
    );
    assert_eq!(
        resources_of(&offers, "small"),
        vec![&res("cpus=4,mem_mib=4")]
    );
    // Each launches its part; nothing is left to offer.
    alloc
        .offer_answered(
            &aid("a0"),
            &fid("big"),
            &[res("cpus=12,mem_mib=12")],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    alloc
        .offer_answered(
            &aid("a0"),
            &fid("small"),
            &[res("cpus=2,mem_mib=2"), res("cpus=2,mem_mib=2")],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    assert!(alloc.free_resources(&aid("a0")).unwrap().is_zero());
}

/// The κ·C gate is checked before every task: once group `a` has run far ahead, the agent's
/// next tasks go to the deprived group `b` only, although `a`'s pack better.
#[test]
fn the_deficit_gate_is_checked_per_task() {
    let mut alloc = paper_allocator(deficit(0.1, FairnessFactor::Drf));
    add_agents(&mut alloc, 2, res("cpus=10"));
    alloc.add_framework(fid("fa"), "a", 0.0).unwrap();
    alloc.add_framework(fid("fb"), "b", 1.0).unwrap();
    alloc
        .update_demand(&fid("fa"), &summary(&[("cpus=5", 4, 1.0)], 1.0))
        .unwrap();
    // `a` launches alone on a0 while `b` has no work: b's deficit grows past κ·C.
    let first = alloc.allocate_all(0.0);
    for offer in &first {
        let n = (offer.resources[ResourceKind::Cpus] / 5.0) as usize;
        let launched = vec![res("cpus=5"); n];
        alloc
            .offer_answered(
                &offer.agent,
                &offer.framework,
                &launched,
                LeftoverAction::Decline,
                0.0,
            )
            .unwrap();
    }
    alloc
        .update_demand(&fid("fb"), &summary(&[("cpus=1", 20, 1.0)], 1.0))
        .unwrap();
    alloc
        .update_demand(&fid("fa"), &summary(&[("cpus=5", 4, 1.0)], 1.0))
        .unwrap();
    let threshold = alloc.unfairness_threshold().unwrap();
    assert!(alloc.deficits().iter().any(|(_, c)| c.deficit >= threshold));
    let offers = alloc.allocate_all(1.0);
    assert!(
        offers.iter().all(|o| o.framework.as_str() == "fb"),
        "{offers:?}"
    );
}

/// Carbyne §3.3.4: a leftover goes to the frameworks in SRTF order, each packing what it can,
/// and what the shorter jobs cannot use goes on to the longer ones in the same round.
#[test]
fn a_leftover_is_divided_in_srtf_order() {
    let mut alloc = paper_allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 1, res("cpus=16"));
    alloc.add_framework(fid("donor"), "g", 0.0).unwrap();
    alloc
        .update_demand(&fid("donor"), &summary(&[("cpus=1", 16, 1.0)], 500.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offered_to(&offers), vec!["donor"]);
    for (name, shape, count, work) in [
        ("long", "cpus=2", 10, 50.0),
        ("short", "cpus=4", 1, 5.0),
        ("mid", "cpus=4", 2, 10.0),
    ] {
        alloc.add_framework(fid(name), "g", 1.0).unwrap();
        alloc
            .update_demand(&fid(name), &summary(&[(shape, count, 1.0)], work))
            .unwrap();
    }
    let parts = alloc
        .offer_answered(&aid("a0"), &fid("donor"), &[], LeftoverAction::Yield, 0.0)
        .unwrap();
    let by: Vec<(&str, f64)> = parts
        .iter()
        .map(|o| (o.framework.as_str(), o.resources[ResourceKind::Cpus]))
        .collect();
    assert_eq!(by, vec![("short", 4.0), ("mid", 8.0), ("long", 4.0)]);
    assert!(parts.iter().all(|o| o.kind == OfferKind::Leftover));
}

/// Graphene §5: η = m · avg(pScore) / avg(srpt) over every pending task of every job.
#[test]
fn eta_is_averaged_over_every_pending_task() {
    let mut alloc = paper_allocator(deficit(0.1, FairnessFactor::Drf));
    add_agents(&mut alloc, 1, res("cpus=16"));
    alloc.add_framework(fid("fa"), "g", 0.0).unwrap();
    alloc.add_framework(fid("fb"), "g", 1.0).unwrap();
    let with_srpt = |shape: &str, count: u32, srpt: f64| {
        let mut s = summary(&[(shape, count, 1.0)], 1.0);
        s.srpt = srpt;
        s
    };
    alloc
        .update_demand(&fid("fa"), &with_srpt("cpus=4", 2, 10.0))
        .unwrap();
    alloc
        .update_demand(&fid("fb"), &with_srpt("cpus=2", 6, 30.0))
        .unwrap();
    alloc.allocate_all(0.0);
    // pScore on an idle agent: 4/16 and 2/16; averages over the 8 tasks: 0.15625 and 25.
    let expected = crate::scoring::DEFAULT_ETA_MULTIPLIER * 0.15625 / 25.0;
    assert!((alloc.eta() - expected).abs() < 1e-12, "{}", alloc.eta());
}

/// Carbyne §3's A_k: DRF by progressive filling with demand caps. A framework that needs little
/// gets what it needs and the others share the rest; an equal split ignores demand.
#[test]
fn fair_shares_follow_progressive_filling_with_demand_caps() {
    let mut alloc = paper_allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 1, res("cpus=12"));
    for (i, (name, count)) in [("small", 2), ("big1", 20), ("big2", 20)]
        .into_iter()
        .enumerate()
    {
        alloc.add_framework(fid(name), "g", i as f64).unwrap();
        alloc
            .update_demand(&fid(name), &summary(&[("cpus=1", count, 1.0)], 1.0))
            .unwrap();
    }
    assert_eq!(alloc.fair_share(&fid("small")).unwrap(), res("cpus=2"));
    assert_eq!(alloc.fair_share(&fid("big1")).unwrap(), res("cpus=5"));
    assert_eq!(alloc.fair_share(&fid("big2")).unwrap(), res("cpus=5"));
    // A lone framework whose runnable tasks need only CPUs still counts the memory nobody
    // claims (it reaches it as leftovers).
    let mut lone = paper_allocator(InterJobPolicy::Drf);
    add_agents(&mut lone, 1, res("cpus=8,mem_mib=100"));
    lone.add_framework(fid("f"), "g", 0.0).unwrap();
    lone.update_demand(&fid("f"), &summary(&[("cpus=1", 20, 1.0)], 1.0))
        .unwrap();
    assert_eq!(
        lone.fair_share(&fid("f")).unwrap(),
        res("cpus=8,mem_mib=100")
    );
    let mut equal = allocator(InterJobPolicy::Drf);
    add_agents(&mut equal, 1, res("cpus=12"));
    equal.add_framework(fid("small"), "g", 0.0).unwrap();
    equal.add_framework(fid("big"), "g", 1.0).unwrap();
    assert_eq!(equal.fair_share(&fid("small")).unwrap(), res("cpus=6"));
}

/// Pseudocode 1 runs the leftover scheduler after every job's intra-job step: a part yielded
/// while other parts of the agent are out is pooled, and divided once the last is answered,
/// with the frameworks that held them among the candidates.
#[test]
fn yields_are_pooled_until_every_part_of_the_agent_is_answered() {
    let mut alloc = paper_allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 1, res("cpus=4"));
    alloc.add_framework(fid("long"), "ga", 0.0).unwrap();
    alloc.add_framework(fid("short"), "gb", 1.0).unwrap();
    alloc
        .update_demand(&fid("long"), &summary(&[("cpus=1", 4, 1.0)], 100.0))
        .unwrap();
    alloc
        .update_demand(&fid("short"), &summary(&[("cpus=1", 4, 1.0)], 5.0))
        .unwrap();
    let offers = alloc.allocate_all(0.0);
    assert_eq!(offers.len(), 2, "{offers:?}");
    // The long job is altruistic: it launches nothing and yields its two cores.
    let pooled = alloc
        .offer_answered(&aid("a0"), &fid("long"), &[], LeftoverAction::Yield, 0.0)
        .unwrap();
    assert!(pooled.is_empty(), "{pooled:?}");
    // The short one launches its part; the pool goes to it first (least remaining work).
    let divided = alloc
        .offer_answered(
            &aid("a0"),
            &fid("short"),
            &[res("cpus=1"), res("cpus=1")],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    let by: Vec<(&str, f64)> = divided
        .iter()
        .map(|o| (o.framework.as_str(), o.resources[ResourceKind::Cpus]))
        .collect();
    assert_eq!(by, vec![("short", 2.0)]);
}

// ---------------------------------------------------------------------------------------------
// Concurrent shards: snapshot, plan, commit
// ---------------------------------------------------------------------------------------------

/// A framework of a [`Cluster`]: its group, its shapes with counts and priScores, its remaining
/// work.
type ClusterFramework = (usize, Vec<(ResourceVec, u32, f64)>, f64);

/// A random cluster for comparing ways of running cycles: every policy and rule, agents with
/// bandwidth (so overbooking happens), frameworks over a few groups, some tasks running.
#[derive(Clone, Debug)]
struct Cluster {
    config: AllocatorConfig,
    weights: Vec<f64>,
    agents: Vec<ResourceVec>,
    frameworks: Vec<ClusterFramework>,
    /// Per round: the seed of the frameworks' answers and of the releases.
    rounds: Vec<u64>,
}

fn policy_strategy() -> impl Strategy<Value = InterJobPolicy> {
    prop::sample::select(vec![
        deficit(0.1, FairnessFactor::Drf),
        deficit(0.02, FairnessFactor::Drf),
        deficit(0.05, FairnessFactor::Slot),
        InterJobPolicy::Drf,
        InterJobPolicy::CapacityScheduler { max_capacity: 0.6 },
        InterJobPolicy::Fifo,
        InterJobPolicy::Sjf,
        InterJobPolicy::Tetris,
    ])
}

fn wide_shape_strategy() -> impl Strategy<Value = ResourceVec> {
    (
        prop::sample::select(vec![0.5, 1.0, 2.0, 4.0]),
        prop::sample::select(vec![256.0, 1024.0, 4096.0]),
        prop::sample::select(vec![0.0, 50.0, 400.0]),
        prop::sample::select(vec![0.0, 100.0, 2000.0]),
    )
        .prop_map(|(c, m, d, n)| {
            ResourceVec::from_pairs(&[
                (ResourceKind::Cpus, c),
                (ResourceKind::MemMib, m),
                (ResourceKind::DiskMbps, d),
                (ResourceKind::NetMbps, n),
            ])
        })
}

fn cluster_strategy(shards: std::ops::Range<usize>) -> impl Strategy<Value = Cluster> {
    (
        (
            policy_strategy(),
            prop::sample::select(vec![AgentMatching::TaskAtATime, AgentMatching::WholeAgent]),
            prop::sample::select(vec![EtaRule::AllPending, EtaRule::ChosenCandidates]),
            prop::sample::select(vec![LeftoverRule::SrtfThenPacking, LeftoverRule::SrtfOnly]),
            shards,
        ),
        prop::collection::vec(1.0..4.0_f64, 1..4),
        prop::collection::vec(
            prop::sample::select(vec![4.0, 8.0, 16.0]).prop_map(|c| {
                ResourceVec::from_pairs(&[
                    (ResourceKind::Cpus, c),
                    (ResourceKind::MemMib, c * 2048.0),
                    (ResourceKind::DiskMbps, 500.0),
                    (ResourceKind::NetMbps, 4000.0),
                ])
            }),
            1..24,
        ),
        prop::collection::vec(
            (
                0usize..4,
                prop::collection::vec((wide_shape_strategy(), 1u32..30, 0.0..1.0_f64), 1..5),
                1.0..500.0_f64,
            ),
            1..12,
        ),
        prop::collection::vec(any::<u64>(), 1..5),
    )
        .prop_map(
            |((policy, matching, eta, leftover, shards), weights, agents, frameworks, rounds)| {
                let groups = weights.len();
                Cluster {
                    config: AllocatorConfig {
                        policy,
                        matching,
                        eta,
                        leftover,
                        shards,
                        ..AllocatorConfig::default()
                    },
                    weights,
                    agents,
                    frameworks: frameworks
                        .into_iter()
                        .map(|(g, shapes, work)| (g % groups, shapes, work))
                        .collect(),
                    rounds,
                }
            },
        )
}

impl Cluster {
    /// New work for a framework chosen by `seed`, as when a stage becomes runnable: its first
    /// summary again, with the next framework's shapes added (shapes it may never have had).
    fn new_work(&self, seed: u64) -> (FrameworkId, DemandSummary) {
        let i = (seed % self.frameworks.len() as u64) as usize;
        let next = (i + 1) % self.frameworks.len();
        let (_, shapes, work) = &self.frameworks[i];
        let shapes = shapes.iter().chain(&self.frameworks[next].1);
        (fid(&format!("f{i}")), shapes_summary(shapes, *work))
    }

    fn build(&self) -> StandaloneAllocator {
        let mut alloc = StandaloneAllocator::new(self.config.clone()).unwrap();
        for (g, w) in self.weights.iter().enumerate() {
            alloc.set_group_weight(&format!("g{g}"), *w).unwrap();
        }
        for (i, total) in self.agents.iter().enumerate() {
            alloc.add_agent(aid(&format!("a{i}")), *total).unwrap();
        }
        for (i, (g, shapes, work)) in self.frameworks.iter().enumerate() {
            let id = fid(&format!("f{i}"));
            alloc
                .add_framework(id.clone(), &format!("g{g}"), i as f64)
                .unwrap();
            alloc
                .update_demand(&id, &shapes_summary(shapes, *work))
                .unwrap();
        }
        alloc
    }
}

/// The summary of pending (shape, count, priScore) entries with `work` left.
fn shapes_summary<'a>(
    shapes: impl IntoIterator<Item = &'a (ResourceVec, u32, f64)>,
    work: f64,
) -> DemandSummary {
    let pending = shapes
        .into_iter()
        .map(|(d, count, pri)| PendingDemand {
            resources: Resources::from(*d),
            count: *count,
            pri_score: *pri,
        })
        .collect();
    DemandSummary {
        pending,
        remaining_work: work,
        srpt: work,
        reservation_progress: None,
    }
}

/// Answers every offer the same way on each allocator given the same seed: launches greedily
/// in summary order (what the allocator projects), then declines or yields the rest, and
/// releases some running tasks. The frameworks' summaries follow their launches.
fn answer_round(
    alloc: &mut StandaloneAllocator,
    cluster: &Cluster,
    offers: &[OfferDecision],
    seed: u64,
    now: f64,
    running: &mut Vec<(AgentId, FrameworkId, ResourceVec)>,
) -> Vec<OfferDecision> {
    let mut rng = seed | 1;
    let mut next = move || xorshift(&mut rng);
    let mut reoffers = Vec::new();
    let mut queue: std::collections::VecDeque<OfferDecision> = offers.iter().cloned().collect();
    while let Some(offer) = queue.pop_front() {
        let i: usize = offer.framework.as_str()[1..].parse().unwrap();
        let (_, shapes, work) = &cluster.frameworks[i];
        let pending = alloc.allocator().frameworks
            [alloc.state().framework_idx(&offer.framework).unwrap().get()]
        .demand
        .shapes
        .clone();
        let mut free = offer.resources;
        let mut tasks = Vec::new();
        for shape in &pending {
            let mut n = shape.count;
            while n > 0 && shape.demand.fits_in(&free) {
                free = free.saturating_sub(&shape.demand);
                tasks.push(shape.demand);
                n -= 1;
            }
        }
        let action = if next() % 2 == 0 {
            LeftoverAction::Decline
        } else {
            LeftoverAction::Yield
        };
        let more = alloc
            .offer_answered(&offer.agent, &offer.framework, &tasks, action, now)
            .unwrap();
        reoffers.extend(more.iter().cloned());
        queue.extend(more);
        for t in &tasks {
            running.push((offer.agent.clone(), offer.framework.clone(), *t));
        }
        // The summary after the launches: each launched shape one fewer.
        let mut left: Vec<(ResourceVec, u32, f64)> = shapes.clone();
        let mut counts: Vec<u32> = pending.iter().map(|s| s.count).collect();
        for t in &tasks {
            if let Some(k) = pending
                .iter()
                .enumerate()
                .position(|(k, s)| counts[k] > 0 && s.demand == *t)
            {
                counts[k] -= 1;
            }
        }
        for (entry, shape) in left.iter_mut().zip(pending.iter()) {
            entry.0 = shape.demand;
        }
        left.truncate(pending.len());
        let summary = DemandSummary {
            pending: left
                .iter()
                .zip(counts.iter())
                .zip(pending.iter())
                .map(|((_, count), shape)| PendingDemand {
                    resources: Resources::from(shape.demand),
                    count: *count,
                    pri_score: shape.pri_score,
                })
                .collect(),
            remaining_work: *work,
            srpt: *work,
            reservation_progress: None,
        };
        alloc.update_demand(&offer.framework, &summary).unwrap();
    }
    let mut kept = Vec::new();
    for task in running.drain(..) {
        if next() % 3 == 0 {
            alloc.release(&task.0, &task.1, task.2).unwrap();
        } else {
            kept.push(task);
        }
    }
    *running = kept;
    reoffers
}

/// Runs the cluster's rounds on two allocators built alike, `ours` allocating with `allocate`
/// and `reference` with `reference_cycle`, answering identically, and checks that every
/// round's offers, re-offers and η are equal.
fn compare_rounds(
    cluster: &Cluster,
    mut allocate: impl FnMut(&mut StandaloneAllocator, f64) -> Vec<OfferDecision>,
    mut reference_cycle: impl FnMut(&mut StandaloneAllocator, f64) -> Vec<OfferDecision>,
) -> Result<(), TestCaseError> {
    let mut ours = cluster.build();
    let mut reference = cluster.build();
    let (mut ours_running, mut reference_running) = (Vec::new(), Vec::new());
    for (round, seed) in cluster.rounds.iter().enumerate() {
        let now = round as f64;
        let offers = allocate(&mut ours, now);
        let expected = reference_cycle(&mut reference, now);
        prop_assert_eq!(&offers, &expected, "round {}", round);
        prop_assert_eq!(ours.eta(), reference.eta(), "round {}", round);
        let reoffers = answer_round(&mut ours, cluster, &offers, *seed, now, &mut ours_running);
        let expected_reoffers = answer_round(
            &mut reference,
            cluster,
            &expected,
            *seed,
            now,
            &mut reference_running,
        );
        prop_assert_eq!(reoffers, expected_reoffers, "round {} re-offers", round);
        prop_assert_eq!(ours.deficits(), reference.deficits());
        let (framework, summary) = cluster.new_work(*seed);
        for (alloc, running) in [
            (&mut ours, &mut ours_running),
            (&mut reference, &mut reference_running),
        ] {
            if seed % 3 == 0 {
                // The framework leaves (what it holds is released) and registers again.
                let group = alloc.state().framework_by_id(&framework).unwrap().group;
                let group = alloc.state().deficits().group(group).name.clone();
                alloc.remove_framework(&framework).unwrap();
                running.retain(|(_, f, _)| *f != framework);
                alloc.add_framework(framework.clone(), &group, now).unwrap();
            }
            alloc.update_demand(&framework, &summary).unwrap();
        }
    }
    Ok(())
}

/// Plans the snapshot's shards on `threads` threads, each taking shards in a shuffled order
/// and sleeping a random while before each, and returns the plans in the order they finished.
fn plan_on_threads(snapshot: &CycleSnapshot, threads: usize, seed: u64) -> Vec<ShardPlan> {
    let finished = std::sync::Mutex::new(Vec::new());
    let shards = snapshot.shard_count();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let finished = &finished;
            scope.spawn(move || {
                let mut mine: Vec<usize> = (0..shards).filter(|s| s % threads == t).collect();
                let mut rng = seed.wrapping_add(t as u64) | 1;
                let mut next = move || xorshift(&mut rng);
                for i in (1..mine.len()).rev() {
                    mine.swap(i, next() as usize % (i + 1));
                }
                for s in mine {
                    std::thread::sleep(std::time::Duration::from_micros(next() % 300));
                    let plan = snapshot.plan_shard(s);
                    finished.lock().unwrap().push(plan);
                }
            });
        }
    });
    finished.into_inner().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// With one shard, a cycle planned from a snapshot and committed makes exactly the offers
    /// of the sequential cycle (each pick charged at once to the live projection, what
    /// `allocate_all` runs for one shard), round after round with answers, yields, leftovers
    /// and releases in between, under every policy and rule.
    #[test]
    fn one_shard_planned_and_committed_equals_the_sequential_cycle(
        cluster in cluster_strategy(1..2),
    ) {
        compare_rounds(
            &cluster,
            |alloc, now| alloc.allocate_all_with(now, CycleSnapshot::plan_all).offers,
            StandaloneAllocator::allocate_all,
        )?;
    }

    /// With several shards, the offers do not depend on the planners' timing: shards planned
    /// on three threads in shuffled orders with random delays, their plans handed to the
    /// commit in the order they finished, give the offers of every shard planned in order on
    /// one thread.
    #[test]
    fn sharded_offers_do_not_depend_on_thread_timing(
        cluster in cluster_strategy(2..9),
        timing in any::<u64>(),
    ) {
        compare_rounds(
            &cluster,
            |alloc, now| {
                alloc
                    .allocate_all_with(now, |snapshot| plan_on_threads(snapshot, 3, timing))
                    .offers
            },
            StandaloneAllocator::allocate_all,
        )?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Passing over the agents found idle and the misfits (what a standalone allocator does,
    /// module `idle`) changes no offer: round after round with launches, declines, yields,
    /// leftovers and releases, with one or more shards, the offers equal those of cycles that
    /// look at and plan every agent.
    #[test]
    fn passing_over_idle_agents_changes_no_offer(cluster in cluster_strategy(1..4)) {
        compare_rounds(&cluster, StandaloneAllocator::allocate_all, |alloc, now| {
            alloc.allocator_mut().idle = idle::IdleAgents::default();
            alloc.set_plain_scan(true);
            alloc.allocate_all(now)
        })?;
    }

    /// The same in cycles that make their offers in place shard by shard
    /// ([`StandaloneAllocator::allocate_shard`]), which pass over misfits with several shards
    /// too.
    #[test]
    fn passing_over_misfits_shard_by_shard_changes_no_offer(cluster in cluster_strategy(1..4)) {
        let every_shard = |alloc: &mut StandaloneAllocator, now: f64| {
            (0..alloc.shard_count())
                .flat_map(|shard| alloc.allocate_shard(shard, now))
                .collect()
        };
        compare_rounds(&cluster, every_shard, |alloc, now| {
            alloc.allocator_mut().idle = idle::IdleAgents::default();
            alloc.set_plain_scan(true);
            every_shard(alloc, now)
        })?;
    }
}

/// A cycle passes over an agent it found too full for any pending task until resources are
/// released on it.
#[test]
fn a_full_agent_is_passed_over_until_resources_are_freed() {
    let (mut alloc, agent) = one_task_running("cpus=2,mem_mib=4096", "cpus=2,mem_mib=1024");
    alloc
        .update_demand(&fid("f"), &summary(&[("cpus=2,mem_mib=1024", 1, 1.0)], 1.0))
        .unwrap();
    let a = alloc.state().agent_idx(&agent).unwrap();
    // Memory is free, but not the cores any pending task needs.
    assert!(alloc.allocate_all(100.0).is_empty());
    assert!(alloc.allocator().idle.is_parked(a));
    alloc
        .release(&agent, &fid("f"), res("cpus=2,mem_mib=1024"))
        .unwrap();
    assert!(!alloc.allocator().idle.is_parked(a));
    assert_eq!(one(alloc.allocate_all(200.0)).framework, fid("f"));
}

/// A DRF allocator (whole agents) with one agent of `total`, on which framework `f` runs one
/// `task`, launched from its first offer (the rest declined); returns it and the agent.
fn one_task_running(total: &str, task: &str) -> (StandaloneAllocator, AgentId) {
    let mut alloc = allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 1, res(total));
    alloc.add_framework(fid("f"), "g", 0.0).unwrap();
    alloc
        .update_demand(&fid("f"), &summary(&[(task, 1, 1.0)], 1.0))
        .unwrap();
    let offer = one(alloc.allocate_all(0.0));
    alloc
        .offer_answered(
            &offer.agent,
            &offer.framework,
            &[res(task)],
            LeftoverAction::Decline,
            0.0,
        )
        .unwrap();
    (alloc, offer.agent)
}

/// An agent with room for the smallest pending shape kind by kind but for no actual shape is
/// passed over as a misfit, through a new shape it cannot hold either, until a shape it can
/// hold is pending.
#[test]
fn a_misfit_is_passed_over_until_a_shape_it_holds_is_pending() {
    let (mut alloc, agent) = one_task_running("cpus=4,mem_mib=8192", "cpus=2,mem_mib=2048");
    let a = alloc.state().agent_idx(&agent).unwrap();
    // 2 cores and 6 GiB free: one shape lacks cores, the other memory, though their
    // component-wise minimum (1 core, 1 GiB) fits.
    let misfits = [
        ("cpus=3,mem_mib=1024", 1, 1.0),
        ("cpus=1,mem_mib=7000", 1, 1.0),
    ];
    alloc
        .update_demand(&fid("f"), &summary(&misfits, 2.0))
        .unwrap();
    assert!(alloc.allocate_all(100.0).is_empty());
    assert!(alloc.allocator().idle.is_misfit(a));
    let larger = [misfits[0], misfits[1], ("cpus=3,mem_mib=512", 1, 1.0)];
    alloc
        .update_demand(&fid("f"), &summary(&larger, 3.0))
        .unwrap();
    assert!(alloc.allocate_all(200.0).is_empty());
    assert!(alloc.allocator().idle.is_misfit(a));
    let fitting = [misfits[0], misfits[1], ("cpus=1,mem_mib=1024", 1, 1.0)];
    alloc
        .update_demand(&fid("f"), &summary(&fitting, 3.0))
        .unwrap();
    assert_eq!(one(alloc.allocate_all(300.0)).framework, fid("f"));
}

/// A partial cycle offers at most its number of agents, two shards splitting it, and the next
/// partial cycles go on from where it stopped until every agent was offered.
#[test]
fn partial_cycles_offer_a_few_agents_each_and_between_them_all() {
    let mut alloc = fifo_in_shards(2);
    add_agents(&mut alloc, 10, res("cpus=4"));
    alloc.add_framework(fid("f"), "g", 0.0).unwrap();
    alloc
        .update_demand(&fid("f"), &summary(&[("cpus=1", 1_000, 1.0)], 1.0))
        .unwrap();
    let mut offered = std::collections::BTreeSet::new();
    for cycle in 0..3 {
        let now = f64::from(cycle);
        let snapshot = alloc.snapshot_partial_cycle(now, 4);
        let plans = snapshot.plan_all();
        let outcome = alloc.commit_cycle(plans, now);
        let agents: std::collections::BTreeSet<_> =
            outcome.offers.iter().map(|o| o.agent.clone()).collect();
        assert_eq!(agents.len(), 4, "cycle {cycle}: {agents:?}");
        offered.extend(agents);
        // Taken back, so that every agent has room again: only the rotation moves the next
        // cycle on to other agents.
        for offer in outcome.offers {
            alloc.rescind_offer(&offer.agent, &offer.framework).unwrap();
        }
    }
    assert_eq!(offered.len(), 10, "{offered:?}");
    // A full cycle offers all ten at once.
    let outcome = alloc.allocate_all_with(3.0, CycleSnapshot::plan_all);
    let agents: std::collections::BTreeSet<_> = outcome.offers.iter().map(|o| &o.agent).collect();
    assert_eq!(agents.len(), 10);
}

/// A commit after the state moved on drops what no longer holds: the picks of an agent that
/// left while another took its slot, and of a framework that left while another took its
/// slot; the rest is committed, and the newcomers are seen by the next cycle.
#[test]
fn a_commit_drops_the_picks_the_state_no_longer_allows() {
    let mut alloc = StandaloneAllocator::new(AllocatorConfig {
        policy: InterJobPolicy::Fifo,
        ..AllocatorConfig::default()
    })
    .unwrap();
    add_agents(&mut alloc, 3, res("cpus=4"));
    alloc.add_framework(fid("f1"), "g", 0.0).unwrap();
    alloc.add_framework(fid("f2"), "g", 1.0).unwrap();
    alloc
        .update_demand(&fid("f1"), &summary(&[("cpus=1", 2, 1.0)], 1.0))
        .unwrap();
    alloc
        .update_demand(&fid("f2"), &summary(&[("cpus=2", 5, 1.0)], 1.0))
        .unwrap();
    let snapshot = alloc.snapshot_cycle(0.0);
    let plans = snapshot.plan_all();
    // FIFO, agents in slot order: a0 takes f1's two tasks and one of f2's, a1 and a2 two of
    // f2's each.
    assert_eq!(plans.iter().map(ShardPlan::picks).sum::<usize>(), 7);
    // Meanwhile a0 leaves and a3 takes its slot, f1 leaves and f3 takes its slot.
    alloc.remove_agent(&aid("a0")).unwrap();
    alloc.add_agent(aid("a3"), res("cpus=12")).unwrap();
    alloc.remove_framework(&fid("f1")).unwrap();
    alloc.add_framework(fid("f3"), "g", 2.0).unwrap();
    alloc
        .update_demand(&fid("f3"), &summary(&[("cpus=4", 1, 1.0)], 1.0))
        .unwrap();
    assert_eq!(
        alloc.state().agent_idx(&aid("a3")).unwrap(),
        AgentIdx(0),
        "a3 reuses a0's slot"
    );
    let outcome = alloc.commit_cycle(plans, 0.0);
    assert_eq!(outcome.stats.planned, 7);
    assert_eq!(outcome.stats.agent_changed, 3);
    assert_eq!(outcome.stats.committed, 4);
    assert_eq!(outcome.stats.dropped(), 3);
    assert_eq!(offered_to(&outcome.offers), vec!["f2", "f2"]);
    assert!(outcome.offers.iter().all(|o| o.agent.as_str() != "a3"));
    // The same with picks for a framework whose slot another takes before the commit.
    let snapshot = alloc.snapshot_cycle(1.0);
    let plans = snapshot.plan_all();
    let f2_slot = alloc.state().framework_idx(&fid("f2")).unwrap();
    alloc.remove_framework(&fid("f2")).unwrap();
    alloc.add_framework(fid("f4"), "g", 3.0).unwrap();
    assert_eq!(alloc.state().framework_idx(&fid("f4")).unwrap(), f2_slot);
    alloc
        .update_demand(&fid("f4"), &summary(&[("cpus=2", 5, 1.0)], 1.0))
        .unwrap();
    let outcome = alloc.commit_cycle(plans, 1.0);
    assert!(outcome.stats.framework_changed >= 1, "{:?}", outcome.stats);
    assert_eq!(
        outcome.stats.committed + outcome.stats.framework_changed,
        outcome.stats.planned
    );
    assert!(outcome.offers.iter().all(|o| o.framework.as_str() != "f4"));
}

/// A snapshot can be shared by planner threads and outlive the borrow of the allocator and the
/// state it was taken from; plans and outcomes can be sent back.
#[test]
fn snapshots_and_plans_travel_between_threads() {
    fn shared_by_threads<T: Send + Sync + 'static>() {}
    shared_by_threads::<CycleSnapshot>();
    shared_by_threads::<ShardPlan>();
    shared_by_threads::<CycleOutcome>();
    let mut alloc = paper_allocator(InterJobPolicy::Drf);
    add_agents(&mut alloc, 4, res("cpus=4"));
    alloc.add_framework(fid("f"), "g", 0.0).unwrap();
    alloc
        .update_demand(&fid("f"), &summary(&[("cpus=1", 8, 1.0)], 1.0))
        .unwrap();
    let snapshot = std::sync::Arc::new(alloc.snapshot_cycle(0.0));
    let planner = std::sync::Arc::clone(&snapshot);
    let plans = std::thread::spawn(move || planner.plan_all())
        .join()
        .unwrap();
    assert_eq!(plans.iter().map(ShardPlan::picks).sum::<usize>(), 8);
    let outcome = alloc.commit_cycle(plans, 0.0);
    assert_eq!(outcome.stats.committed, 8);
    assert_eq!(outcome.stats.dropped(), 0);
}

/// Clusters for the memoized picks (module `memo`) and the bounding trees (module
/// `score_tree`): many agents of one to three machine types in a shuffled slot order, up to a
/// hundred frameworks with few tasks per shape (so that shapes run out within a cycle, traces
/// must be recomputed and leaves refreshed), copies of frameworks in other groups and priScores and
/// works drawn from a few values (so that exact ties between frameworks happen), κ down to 0 (so that the gate closes, to a group that
/// changes from pick to pick), shapes heavy on disk and network (so that picks overbook), and
/// rounds whose declines and unanswered offers leave agents with exclusions.
fn twin_cluster_strategy() -> impl Strategy<Value = (Cluster, u64)> {
    let machine_type = prop::sample::select(vec![4.0, 8.0, 16.0]).prop_map(|c| {
        ResourceVec::from_pairs(&[
            (ResourceKind::Cpus, c),
            (ResourceKind::MemMib, c * 2048.0),
            (ResourceKind::DiskMbps, 500.0),
            (ResourceKind::NetMbps, 4000.0),
        ])
    });
    (
        (
            prop::sample::select(vec![
                deficit(0.0, FairnessFactor::Drf),
                deficit(0.01, FairnessFactor::Drf),
                deficit(0.03, FairnessFactor::Slot),
                deficit(0.1, FairnessFactor::Drf),
                InterJobPolicy::Tetris,
            ]),
            prop::sample::select(vec![AgentMatching::TaskAtATime, AgentMatching::WholeAgent]),
            prop::sample::select(vec![EtaRule::AllPending, EtaRule::ChosenCandidates]),
            1usize..4,
        ),
        prop::collection::vec(1.0..4.0_f64, 1..4),
        prop::collection::vec((machine_type, 1usize..40), 1..4),
        prop::collection::vec(
            (
                0usize..4,
                prop::collection::vec(
                    (
                        wide_shape_strategy(),
                        1u32..6,
                        prop::sample::select(vec![0.25, 0.5, 1.0]),
                    ),
                    1..5,
                ),
                prop::sample::select(vec![10.0, 100.0, 1000.0]),
                1usize..4,
            ),
            1..40,
        ),
        prop::collection::vec(any::<u64>(), 1..4),
        any::<u64>(),
    )
        .prop_map(
            |((policy, matching, eta, shards), weights, types, frameworks, rounds, seed)| {
                let groups = weights.len();
                let mut agents: Vec<ResourceVec> = types
                    .iter()
                    .flat_map(|(total, n)| std::iter::repeat_n(*total, *n))
                    .collect();
                let mut rng = seed | 1;
                for i in (1..agents.len()).rev() {
                    agents.swap(i, xorshift(&mut rng) as usize % (i + 1));
                }
                let cluster = Cluster {
                    config: AllocatorConfig {
                        policy,
                        matching,
                        eta,
                        shards,
                        ..AllocatorConfig::default()
                    },
                    weights,
                    agents,
                    // Copies of a framework (alike in every score) in successive groups.
                    frameworks: frameworks
                        .into_iter()
                        .flat_map(|(g, shapes, work, copies)| {
                            (0..copies).map(move |c| ((g + c) % groups, shapes.clone(), work))
                        })
                        .collect(),
                    rounds,
                };
                (cluster, seed)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Replaying picks across agents of the same state and searching the bounding trees change
    /// no decision: round after round (with answers, declines, yields, leftovers, releases, and
    /// a share of the offers left unanswered, which excludes their frameworks from those
    /// agents), the cycle makes exactly the offers, commit counts, re-offers, η and deficits of
    /// the same cycle scanning every pick from the lists: in place and planned and committed,
    /// with one shard or several.
    #[test]
    fn replayed_and_tree_searched_picks_equal_scanned_picks(
        (cluster, seed) in twin_cluster_strategy(),
    ) {
        let mut ours = cluster.build();
        let mut reference = cluster.build();
        reference.set_plain_scan(true);
        let (mut ours_running, mut reference_running) = (Vec::new(), Vec::new());
        let mut held = seed | 1;
        for (round, answers) in cluster.rounds.iter().enumerate() {
            let now = round as f64;
            let offers = if round % 2 == 0 {
                let offers = ours.allocate_all(now);
                prop_assert_eq!(&offers, &reference.allocate_all(now), "round {}", round);
                offers
            } else {
                let outcome = ours.allocate_all_with(now, CycleSnapshot::plan_all);
                let expected = reference.allocate_all_with(now, CycleSnapshot::plan_all);
                prop_assert_eq!(&outcome, &expected, "round {}", round);
                outcome.offers
            };
            prop_assert_eq!(ours.eta(), reference.eta(), "round {}", round);
            let answered = hold_some(offers, &mut held);
            let reoffers =
                answer_round(&mut ours, &cluster, &answered, *answers, now, &mut ours_running);
            let expected_reoffers = answer_round(
                &mut reference,
                &cluster,
                &answered,
                *answers,
                now,
                &mut reference_running,
            );
            prop_assert_eq!(reoffers, expected_reoffers, "round {} re-offers", round);
            prop_assert_eq!(ours.deficits(), reference.deficits());
        }
    }
}

/// About three quarters of `offers`, for the frameworks to answer; the rest stay out
/// unanswered (their frameworks are excluded from those agents in the next cycles).
fn hold_some(offers: Vec<OfferDecision>, seed: &mut u64) -> Vec<OfferDecision> {
    offers
        .into_iter()
        .filter(|_| xorshift(seed) % 4 != 0)
        .collect()
}

/// The next number of a xorshift generator (`state` must not be 0): the tests' reproducible
/// answers, delays and shuffles.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Copies of a framework tie on every agent, which the memo cannot replay: the bounding trees
/// settle the ties by the list's order and score about one copy per pick, where the list scan
/// scores every copy, with the same offers (in one group, and spread over several).
#[test]
fn copies_of_a_framework_are_settled_by_the_trees_without_scoring_every_copy() {
    for groups in [1, 4] {
        let build = || {
            let mut alloc = paper_allocator(InterJobPolicy::graphene());
            add_agents(&mut alloc, 20, machine());
            for f in 0..100 {
                let id = fid(&format!("copy{f}"));
                alloc
                    .add_framework(id.clone(), &format!("g{}", f % groups), 0.0)
                    .unwrap();
                alloc
                    .update_demand(&id, &summary(&[("cpus=1,mem_mib=1024", 1_000, 0.5)], 50.0))
                    .unwrap();
            }
            alloc
        };
        let mut alloc = build();
        let mut reference = build();
        reference.set_plain_scan(true);
        let offers = alloc.allocate_all(0.0);
        assert_eq!(offers, reference.allocate_all(0.0), "{groups} groups");
        let tasks: f64 = offers.iter().map(|o| o.resources[ResourceKind::Cpus]).sum();
        assert!(tasks >= 100.0, "{tasks} tasks offered");
        let ours = alloc.allocator().scored_candidates as f64;
        let scanned = reference.allocator().scored_candidates as f64;
        assert!(
            ours <= 3.0 * tasks && scanned >= 50.0 * tasks,
            "{groups} groups: {ours} candidates scored with the trees, {scanned} by the scan, \
             for {tasks} picks"
        );
    }
}

/// The memo is at work where it should be: on a cluster of identical idle agents the first
/// agent's picks are scanned and most of the others' replayed (a framework's best shape runs
/// out now and then, and its replacement is scanned once), with the same offers as a cycle
/// that scans every pick; DRF is not memoized.
#[test]
fn identical_agents_replay_most_picks() {
    let build = |policy: InterJobPolicy| {
        let mut alloc = paper_allocator(policy);
        add_agents(&mut alloc, 200, machine());
        for f in 0..20 {
            let id = fid(&format!("f{f}"));
            alloc
                .add_framework(id.clone(), &format!("g{}", f % 3), f as f64)
                .unwrap();
            let cpus = [0.5, 1.0, 2.0, 4.0][f % 4];
            let mem = [1024.0, 2048.0, 4096.0][f % 3];
            let shape = format!("cpus={cpus},mem_mib={mem},net_mbps={}", 100 * f);
            let pri = 0.3 + 0.03 * f as f64;
            alloc
                .update_demand(&id, &summary(&[(&shape, 40, pri)], 10.0 + f as f64))
                .unwrap();
        }
        alloc
    };
    for (policy, memoized) in [
        (InterJobPolicy::graphene(), true),
        (InterJobPolicy::Drf, false),
    ] {
        let mut alloc = build(policy);
        let mut reference = build(policy);
        reference.set_plain_scan(true);
        let offers = alloc.allocate_all(0.0);
        assert_eq!(offers, reference.allocate_all(0.0), "{}", policy.name());
        // Every one of the 800 tasks is offered (1,500 cores of the 3,200).
        let cores: f64 = offers.iter().map(|o| o.resources[ResourceKind::Cpus]).sum();
        assert_eq!(cores, 1500.0, "{}", policy.name());
        let replayed = alloc.allocator().replayed_picks;
        if memoized {
            // 800 tasks on 200 agents, 20 shapes of 40 tasks each: each shape's running out
            // makes a few picks scanned again.
            assert!(replayed >= 500, "{} picks replayed", replayed);
        } else {
            assert_eq!(replayed, 0);
        }
        assert_eq!(reference.allocator().replayed_picks, 0);
    }
}
