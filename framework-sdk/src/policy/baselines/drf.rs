//! The intra-job side of the DRF baseline.
//!
//! Both papers pair DRF across jobs with Tez's default intra-job scheduler: Carbyne §5.1 ("DRF:
//! YARN's implementation of the DRF algorithm for inter-job scheduling along with the default
//! intra-job scheduler in Tez that decides on a breadth-first ordering for scheduling tasks")
//! and Graphene's Table 3 ("Tez+DRF"). What makes the baseline DRF lives in the allocator
//! (which framework is offered a machine: the one with the smallest dominant share); within the
//! job it fills the offer in Tez's breadth-first order.

use crate::job::Job;
use crate::policy::baselines::BfsPolicy;

/// The DRF baseline's intra-job policy (Carbyne §5.1): on every offer the job, chosen by DRF,
/// takes runnable tasks in Tez's breadth-first order (level, then stage, then index), skipping
/// those that do not fit on any resource, until nothing more fits. It is [`BfsPolicy`] under
/// the name `drf`: the two baselines differ only in the allocator.
pub fn drf_policy(job: &Job) -> BfsPolicy {
    BfsPolicy::named(job, "drf")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::TaskRef;
    use crate::policy::baselines::test_util::{job, offer};
    use crate::policy::{JobPolicy, JobState};

    #[test]
    fn fills_multi_resource_offers_in_breadth_first_order() {
        let j = job(&[
            (0, &[], &[1.0], "cpus=1"),
            (1, &[0], &[1.0, 1.0], "cpus=1,mem_mib=30000"),
            (2, &[], &[1.0, 1.0, 1.0], "cpus=2,mem_mib=10000"),
        ]);
        let mut state = JobState::new(&j);
        state.mark_launched(TaskRef::new(0, 0), 0, 0.0);
        state.mark_finished(&j, TaskRef::new(0, 0), 1.0);
        let mut p = drf_policy(&j);
        assert_eq!(p.name(), "drf");
        // Level 0 (stage 2) first: its three tasks take 30000 MiB, leaving room for one
        // task of the level-1 stage, which is then memory-bound.
        let d = p.on_offer(&j, &state, &offer("cpus=16,mem_mib=65536"));
        let c = j.stages.iter().position(|s| s.id == 2).unwrap();
        let b = j.stages.iter().position(|s| s.id == 1).unwrap();
        assert_eq!(
            d.launch,
            vec![
                TaskRef::new(c, 0),
                TaskRef::new(c, 1),
                TaskRef::new(c, 2),
                TaskRef::new(b, 0)
            ]
        );
    }
}
