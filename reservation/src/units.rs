//! The plan's units (Rayon §4's bundles, on machines that are not fluid): what a task of some
//! demand counts for in a plan ([`packed_bundle`]). The framework's request packs its stages'
//! demands with it (the SDK's `reserve` module), and the
//! plan follower counts what a reservation's jobs hold and want with it, so that a job running
//! exactly the parallelism its plan gives it is owed nothing more.

use fullerene_scheduling::{ResourceVec, EPSILON};

/// A task's `demand` as a bundle of the plan, packed on machines of `machine`: in each
/// resource that limits how many such tasks a machine holds (`k`), the bundle is a `k`-th of
/// the machine. Rayon's plan is fluid, one bin of the cluster's summed capacity; tasks are
/// not: three tasks of 258 MB/s fill a 1,000 MB/s disk (overbooking of fungible kinds aside), and a plan that counts 3.9 of them per
/// machine guarantees a job parallelism no machine can hold (a TPC-H job reserved 38 such
/// tasks at once where 30 fit on its 10 machines, ran a wave late and missed its deadline by
/// 25 s). Departure from Rayon, for a cluster of like machines: the plan then counts only
/// tasks that fit whole on machines when one shape fills them; a demand that fits no machine
/// is kept as it is (the plan refuses what its capacity cannot hold).
pub fn packed_bundle(demand: &ResourceVec, machine: &ResourceVec) -> ResourceVec {
    // Counted as the fit rule counts copies (`fit::max_copies`): within its tolerance, so that
    // 0.3 holds three of 0.1 and a demand a hair over the machine still fits it once.
    let per_machine = |k: usize| {
        if demand.0[k] > EPSILON {
            ((machine.0[k].max(0.0) + EPSILON) / demand.0[k]).floor()
        } else {
            f64::INFINITY
        }
    };
    let fit = (0..demand.0.len())
        .map(per_machine)
        .fold(f64::INFINITY, f64::min);
    if !(fit >= 1.0 && fit.is_finite()) {
        return *demand;
    }
    let mut bundle = *demand;
    for (k, amount) in bundle.0.iter_mut().enumerate() {
        if per_machine(k) == fit {
            *amount = amount.max(machine.0[k] / fit);
        }
    }
    bundle
}

#[cfg(test)]
mod tests {
    use fullerene_scheduling::testkit::machine;

    use super::*;

    #[test]
    fn a_bundle_takes_its_share_of_the_machines_it_packs_into() {
        let vec = |text: &str| text.parse::<ResourceVec>().expect("vec");
        // Three fit by disk (1000 / 258): each is planned as a third of the disk.
        let packed = packed_bundle(&vec("cpus=2,mem_mib=2138,disk_mbps=258"), &machine());
        let third = 1000.0 / 3.0;
        assert_eq!(
            packed,
            vec(&format!("cpus=2,mem_mib=2138,disk_mbps={third}"))
        );
        // Shapes that divide the machine, and shapes that fit no machine, are kept.
        assert_eq!(packed_bundle(&vec("cpus=4"), &machine()), vec("cpus=4"));
        assert_eq!(packed_bundle(&vec("cpus=32"), &machine()), vec("cpus=32"));
        // Counted within the fit rule's tolerance: 0.3 holds three of 0.1, not two.
        assert_eq!(
            packed_bundle(&vec("cpus=0.1"), &vec("cpus=0.3")),
            vec("cpus=0.1")
        );
        // Every limiting resource takes its share.
        assert_eq!(
            packed_bundle(&vec("cpus=6,disk_mbps=400"), &machine()),
            vec("cpus=8,disk_mbps=500")
        );
    }
}
