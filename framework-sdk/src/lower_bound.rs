//! Lower bounds on a DAG's completion time (tech report §6 and Fig. 9): CPLen, TWork, ModCP and
//! NewLB. No schedule of the job on the cluster, Graphene's or any other, can be shorter than
//! any of them, which is what lets the tech report's §8.4 (and `fullerene plan`) say how far a
//! schedule is from optimal.
//!
//! Fig. 9's formulas, with `C` the capacity of the whole cluster (all machines):
//!
//! - (1a) `CPLen = max over paths Σ task durations`. Stage edges are barriers (every task of a
//!   child waits for every task of its parents), so a path takes one task per stage along a path
//!   of stages, and CPLen is the longest path of stages weighted by their longest task.
//! - (1b) `TWork = max_r (1/C_r) Σ_t duration · demand_r`.
//! - (1c) `ModCP = max over paths p, max over stages s on p of max(TWork_s, CPLen_s) +
//!   Σ_{s' ∈ p − s} min_{t ∈ s'} duration`: along a path at least one stage must run entirely and
//!   every other stage at least one task. A stage's tasks are independent, so `CPLen_s` is its
//!   longest task.
//! - (1d) `NewLB = Σ over the parts of the DAG's total-order cuts of max(CPLen, TWork, ModCP)`
//!   of the part: the parts run one after another.
//!
//! Each of CPLen, TWork and ModCP of the whole DAG is at most NewLB (a path or the work splits
//! across the parts), and NewLB is at most the makespan of any valid schedule.

use fullerene_proto::ResourceVec;
use serde::Serialize;

use crate::job::Job;
use crate::planner::split::total_order_cuts;
use crate::planner::{total_work, PlanCluster};

/// The four lower bounds of the tech report's Fig. 9, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LowerBounds {
    /// Critical path length (eq. 1a).
    pub cp_len: f64,
    /// Total work over the cluster's capacity (eq. 1b).
    pub t_work: f64,
    /// The modified critical path (eq. 1c).
    pub mod_cp: f64,
    /// The new lower bound (eq. 1d), the tightest of the four.
    pub new_lb: f64,
}

/// Per-stage figures the bounds need.
struct StageFigures {
    parents: Vec<usize>,
    longest: f64,
    shortest: f64,
    /// Σ duration × demand, per resource.
    work: ResourceVec,
}

/// The bounds of `job` on `cluster`, for a job as [`Job::new`] builds it (stages in topological
/// order; a parent index that does not precede its stage is ignored). A job with work in a
/// resource the cluster has none of can never finish: its TWork and NewLB are infinite.
pub fn lower_bounds(job: &Job, cluster: &PlanCluster) -> LowerBounds {
    let capacity = cluster.total_capacity();
    let figures: Vec<StageFigures> = job
        .stages
        .iter()
        .enumerate()
        .map(|(s, stage)| StageFigures {
            parents: stage.parents.iter().copied().filter(|&p| p < s).collect(),
            longest: stage.max_duration(),
            shortest: if stage.durations.is_empty() {
                0.0
            } else {
                stage.min_duration()
            },
            work: stage.demand.scale(stage.total_duration()),
        })
        .collect();
    let whole = bounds_of(&figures, 0..figures.len(), &capacity);
    let parents: Vec<&[usize]> = figures.iter().map(|f| f.parents.as_slice()).collect();
    let new_lb = total_order_cuts(&parents)
        .into_iter()
        .map(|part| {
            let b = bounds_of(&figures, part, &capacity);
            b.cp_len.max(b.t_work).max(b.mod_cp)
        })
        .sum();
    LowerBounds {
        cp_len: whole.cp_len,
        t_work: whole.t_work,
        mod_cp: whole.mod_cp,
        new_lb,
    }
}

/// CPLen, TWork and ModCP of the sub-DAG of the stages in `range` (edges leaving it ignored).
/// `new_lb` is left at 0.
fn bounds_of(
    figures: &[StageFigures],
    range: std::ops::Range<usize>,
    capacity: &ResourceVec,
) -> LowerBounds {
    let first = range.start;
    let n = range.len();
    let inside = |p: usize| p >= first && p < range.end;
    // Longest path ending at each stage, weighted by longest tasks (CPLen) and by shortest
    // tasks excluding the stage itself (the prefix of ModCP).
    let mut cp_to = vec![0.0f64; n];
    let mut min_before = vec![0.0f64; n];
    let mut work = ResourceVec::ZERO;
    for i in 0..n {
        let f = &figures[first + i];
        let mut cp: f64 = 0.0;
        let mut before: f64 = 0.0;
        for &p in f.parents.iter().filter(|&&p| inside(p)) {
            cp = cp.max(cp_to[p - first]);
            before = before.max(min_before[p - first] + figures[p].shortest);
        }
        cp_to[i] = cp + f.longest;
        min_before[i] = before;
        work += f.work;
    }
    // Longest path starting after each stage, weighted by shortest tasks (ModCP's suffix).
    let mut min_after = vec![0.0f64; n];
    for i in (0..n).rev() {
        let f = &figures[first + i];
        for &p in f.parents.iter().filter(|&&p| inside(p)) {
            let through = f.shortest + min_after[i];
            if through > min_after[p - first] {
                min_after[p - first] = through;
            }
        }
    }
    let mut mod_cp: f64 = 0.0;
    for i in 0..n {
        let f = &figures[first + i];
        let whole_stage = total_work(&f.work, 1.0, capacity).max(f.longest);
        mod_cp = mod_cp.max(min_before[i] + whole_stage + min_after[i]);
    }
    LowerBounds {
        cp_len: cp_to.iter().copied().fold(0.0, f64::max),
        t_work: total_work(&work, 1.0, capacity),
        mod_cp,
        new_lb: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::StageSpec;
    use crate::testkit;
    use fullerene_proto::ResourceKind;

    fn spec(id: u32, parents: &[u32], durations: &[f64], cpus: f64) -> StageSpec {
        testkit::stage(id, parents, durations, testkit::cpus(cpus))
    }

    fn cluster(machines: usize, cpus: f64) -> PlanCluster {
        PlanCluster::new(
            machines,
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, cpus)]),
        )
    }

    #[test]
    fn bounds_of_a_chain_with_a_wide_stage() {
        // 0: one 2 s task; 1 (after 0): eight 1-cpu tasks of 1..=8 s; 2 (after 1): one 3 s task.
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                spec(0, &[], &[2.0], 1.0),
                spec(1, &[0], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 1.0),
                spec(2, &[1], &[3.0], 1.0),
            ],
        )
        .unwrap();
        let b = lower_bounds(&job, &cluster(1, 2.0));
        // CPLen: 2 + 8 + 3.
        assert_eq!(b.cp_len, 13.0);
        // TWork: (2 + 36 + 3) / 2 cpus.
        assert_eq!(b.t_work, 20.5);
        // ModCP: stage 1 entirely (36 / 2 = 18 > 8) plus one task of each other stage.
        assert_eq!(b.mod_cp, 2.0 + 18.0 + 3.0);
        // Every stage is its own part: 2 + 18 + 3.
        assert_eq!(b.new_lb, 23.0);
    }

    #[test]
    fn new_lb_adds_the_best_bound_of_each_part() {
        // A long chain (0 -> 1) in parallel with a wide stage 2, then a join 3.
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                spec(0, &[], &[10.0], 1.0),
                spec(1, &[0], &[10.0], 1.0),
                spec(2, &[], &[1.0; 40], 1.0),
                spec(3, &[1, 2], &[1.0; 20], 1.0),
            ],
        )
        .unwrap();
        let b = lower_bounds(&job, &cluster(1, 4.0));
        assert_eq!(b.cp_len, 21.0);
        assert_eq!(b.t_work, (20.0 + 40.0 + 20.0) / 4.0);
        // Part {0, 1, 2}: CPLen 20, TWork 15; part {3}: TWork 5 > CPLen 1.
        assert_eq!(b.new_lb, 25.0);
        assert!(b.new_lb >= b.cp_len.max(b.t_work).max(b.mod_cp));
    }

    #[test]
    fn a_cluster_without_a_needed_resource_makes_the_bounds_infinite() {
        let job = Job::new("j", "g", None, vec![spec(0, &[], &[1.0], 1.0)]).unwrap();
        let b = lower_bounds(&job, &cluster(0, 4.0));
        assert_eq!(b.t_work, f64::INFINITY);
        assert_eq!(b.new_lb, f64::INFINITY);
        assert_eq!(b.cp_len, 1.0);
    }
}
