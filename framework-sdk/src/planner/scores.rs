//! LongScore and FragScore (Graphene §4.1 and Fig. 9, lines 4–5; tech report §4.1 and Fig. 6),
//! and the per-stage TWork of Graphene's Table 1 that FragScore and the lower bounds share.

use fullerene_proto::{ResourceVec, NUM_RESOURCES};

use super::placement::{place, Bound, Cutoff, Direction, Partial, Subset};
use super::problem::Problem;

/// TWork of Graphene's Table 1: `max_r (1/C_r) Σ duration × demand_r`, the time the work would
/// take if it could be packed perfectly into the capacity `capacity` (of the whole cluster).
/// A kind of which the capacity has none but the work needs some makes the work impossible:
/// infinity.
pub(crate) fn total_work(demand: &ResourceVec, total_duration: f64, capacity: &ResourceVec) -> f64 {
    let mut worst: f64 = 0.0;
    for r in 0..NUM_RESOURCES {
        let work = demand.0[r] * total_duration;
        if work <= 0.0 {
            continue;
        }
        let share = if capacity.0[r] > 0.0 {
            work / capacity.0[r]
        } else {
            f64::INFINITY
        };
        worst = worst.max(share);
    }
    worst
}

/// LongScore of the task at `position` of `stage` (Fig. 9, line 4): its duration divided by the
/// longest duration in the DAG. When every task takes no time at all, no task is long: 0.
pub(crate) fn long_score(duration: f64, longest: f64) -> f64 {
    if longest > 0.0 {
        duration / longest
    } else {
        0.0
    }
}

/// The longest task duration in the problem.
pub(crate) fn longest_duration(problem: &Problem) -> f64 {
    problem
        .stages
        .iter()
        .map(|s| s.durations.first().copied().unwrap_or(0.0))
        .fold(0.0, f64::max)
}

/// FragScore of every stage (Fig. 9, line 5): the stage's TWork (over the whole cluster)
/// divided by ExecTime, the time a greedy packer takes to run the stage alone. The paper does
/// not say which greedy packer; we use the planner's own forward placement (longest task first,
/// earliest fit) on an empty space of the cluster's machines, so that FragScore measures exactly
/// the fragmentation the planner will face. Lower means harder to pack. A stage whose tasks all
/// take no time packs trivially: 1.
pub(crate) fn frag_scores(problem: &Problem) -> Vec<f64> {
    let cluster_capacity = problem.capacity.scale(problem.machines as f64);
    let never_offered = Bound::new(1);
    let unbounded = Cutoff::new(&never_offered);
    (0..problem.stages.len())
        .map(|s| {
            let stage = &problem.stages[s];
            let work = total_work(
                &stage.demand,
                stage.durations.iter().sum(),
                &cluster_capacity,
            );
            let mut ranges = vec![0..0; problem.stages.len()];
            ranges[s] = 0..stage.len() as u32;
            let mut alone = Partial::new(problem);
            // An unbounded placement is never pruned.
            let _ = place(
                problem,
                &mut alone,
                &Subset { ranges },
                Direction::Forward,
                &unbounded,
            );
            let exec_time = alone.makespan();
            if exec_time > 0.0 {
                (work / exec_time).min(1.0)
            } else {
                1.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::PlanCluster;
    use crate::testkit::{self, cpus, stage};
    use fullerene_proto::ResourceKind;

    #[test]
    fn twork_takes_the_bottleneck_resource() {
        let demand =
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, 1.0), (ResourceKind::MemMib, 3.0)]);
        let capacity =
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, 4.0), (ResourceKind::MemMib, 4.0)]);
        assert_eq!(total_work(&demand, 8.0, &capacity), 6.0);
        let gpu = ResourceVec::from_pairs(&[(ResourceKind::Gpus, 1.0)]);
        assert_eq!(total_work(&gpu, 1.0, &capacity), f64::INFINITY);
        assert_eq!(total_work(&gpu, 0.0, &capacity), 0.0);
    }

    #[test]
    fn frag_score_is_low_for_stages_that_pack_badly() {
        // Stage 0: eight 1-cpu tasks of 1 s on 4 cpus pack perfectly (2 s, TWork 2 s).
        // Stage 1: three 3-cpu tasks of 1 s: one at a time on a 4-cpu machine (3 s, TWork 2.25 s).
        // Stage 2: one 1-cpu task of 4 s: TWork 1 s, ExecTime 4 s.
        let job = testkit::job(
            "j",
            "g",
            None,
            vec![
                stage(0, &[], &[1.0; 8], cpus(1.0)),
                stage(1, &[], &[1.0; 3], cpus(3.0)),
                stage(2, &[], &[4.0], cpus(1.0)),
            ],
        );
        let cluster = PlanCluster {
            machines: 1,
            machine_capacity: cpus(4.0),
        };
        let problem = Problem::unfinished(&job, &cluster, &|_| false).unwrap();
        let scores = frag_scores(&problem);
        assert_eq!(scores, vec![1.0, 0.75, 0.25]);
        assert_eq!(longest_duration(&problem), 4.0);
        assert_eq!(long_score(1.0, 4.0), 0.25);
        assert_eq!(long_score(0.0, 0.0), 0.0);
    }
}
