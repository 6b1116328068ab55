//! CandidateTroublesomeTasks (Graphene §4.1 and Fig. 9; tech report §4.1 and Fig. 6): the sets
//! of troublesome tasks T to try, and for each the division of the DAG into T, S (others), P
//! (parents: ancestors of T) and C (children: descendants of T).
//!
//! For thresholds `l` and `f` on a grid of step δ, T is every task with LongScore ≥ l or
//! FragScore ≤ f, closed under paths (every task on a path between two troublesome tasks joins
//! T). As §4.1 asks, only discriminative threshold values are kept (those that change the set),
//! each distinct closed T is explored once, and (§4.4) sets holding too many of the tasks are
//! pruned, since placing "troublesome" tasks first only helps when they are few.
//!
//! Everything is computed per stage (§4.4): the tasks of a stage share their ancestry, so a
//! task's subset depends only on its stage and on whether it is itself troublesome. Within a
//! stage the troublesome tasks are always the longest ones (a LongScore threshold keeps a
//! prefix of the stage's longest-first order, and FragScore and closure take whole stages), so a
//! candidate is, per stage, a count of troublesome tasks and the subset of the rest.

use std::collections::HashSet;

use super::placement::Subset;
use super::problem::Problem;
use super::scores::{frag_scores, long_score, longest_duration};
use super::PlannerConfig;

/// The subset a group of tasks belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    /// T: troublesome, placed first.
    Troublesome,
    /// S: neither ancestor nor descendant of any troublesome task.
    Others,
    /// P: an ancestor of some troublesome task.
    Parents,
    /// C: a descendant of some troublesome task.
    Children,
}

/// One candidate division of the DAG.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Per stage: how many of its (longest) tasks are in T.
    pub(crate) troublesome: Vec<u32>,
    /// Per stage: the subset of its other tasks (unused when the whole stage is in T).
    pub(crate) rest: Vec<Part>,
}

/// The four subsets of a candidate, as per-stage position ranges.
#[derive(Clone, Debug)]
pub(crate) struct Division {
    pub(crate) troublesome: Subset,
    pub(crate) others: Subset,
    pub(crate) parents: Subset,
    pub(crate) children: Subset,
}

impl Candidate {
    /// Number of troublesome tasks.
    pub(crate) fn size(&self) -> usize {
        self.troublesome.iter().map(|&k| k as usize).sum()
    }

    /// The subsets T, S, P, C.
    pub(crate) fn divide(&self, problem: &Problem) -> Division {
        let stages = problem.stages.len();
        let mut division = Division {
            troublesome: Subset {
                ranges: Vec::with_capacity(stages),
            },
            others: Subset {
                ranges: Vec::with_capacity(stages),
            },
            parents: Subset {
                ranges: Vec::with_capacity(stages),
            },
            children: Subset {
                ranges: Vec::with_capacity(stages),
            },
        };
        for (s, stage) in problem.stages.iter().enumerate() {
            let k = self.troublesome[s];
            let n = stage.len() as u32;
            division.troublesome.ranges.push(0..k);
            let rest = k..n;
            let pick = |part: Part| {
                if self.rest[s] == part {
                    rest.clone()
                } else {
                    0..0
                }
            };
            division.others.ranges.push(pick(Part::Others));
            division.parents.ranges.push(pick(Part::Parents));
            division.children.ranges.push(pick(Part::Children));
        }
        division
    }
}

/// Closes raw per-stage troublesome counts under paths and labels the remaining tasks (Fig. 9,
/// lines 9 and 11). A task is on a path between two troublesome tasks exactly when its stage
/// has a stage with troublesome tasks among its strict ancestors and another among its strict
/// descendants; the rest of a stage is in P when a descendant stage has troublesome tasks, in C
/// when an ancestor stage has (never both: that would put the stage on a path), else in S.
pub(crate) fn close(problem: &Problem, raw: &[u32]) -> Candidate {
    let n = problem.stages.len();
    let mut above = vec![false; n];
    for s in 0..n {
        above[s] = problem.stages[s]
            .parents
            .iter()
            .any(|&p| raw[p] > 0 || above[p]);
    }
    let mut below = vec![false; n];
    for s in (0..n).rev() {
        below[s] = problem.stages[s]
            .children
            .iter()
            .any(|&c| raw[c] > 0 || below[c]);
    }
    let mut troublesome = raw.to_vec();
    let mut rest = vec![Part::Others; n];
    for s in 0..n {
        let len = problem.stages[s].len() as u32;
        if above[s] && below[s] {
            troublesome[s] = len;
        }
        rest[s] = if troublesome[s] == len {
            Part::Troublesome
        } else if below[s] {
            Part::Parents
        } else if above[s] {
            Part::Children
        } else {
            Part::Others
        };
    }
    Candidate { troublesome, rest }
}

/// The grid values `δ, 2δ, …, 1` with `δ = 1/steps` (at least one step).
fn grid(steps: u32) -> impl Iterator<Item = f64> {
    let steps = steps.max(1);
    (1..=steps).map(move |k| k as f64 / steps as f64)
}

/// Every candidate division to explore for `problem`, in the order of Fig. 9's loops (`l`
/// outer, `f` inner), without duplicates and without the sets §4.4 prunes. Never empty: when
/// every set is too large, the smallest one is kept, so that a schedule is always built.
pub(crate) fn candidates(problem: &Problem, config: &PlannerConfig) -> Vec<Candidate> {
    let longest = longest_duration(problem);
    // Discriminative LongScore thresholds: per grid value, the count of tasks with LongScore >= l
    // in each stage; the sets shrink as l grows, so a changed total means a changed set.
    let mut long_sets: Vec<Vec<u32>> = Vec::new();
    let mut last_total = usize::MAX;
    for l in grid(config.long_score_steps) {
        let counts: Vec<u32> = problem
            .stages
            .iter()
            .map(|s| {
                s.durations
                    .partition_point(|&d| long_score(d, longest) >= l) as u32
            })
            .collect();
        let total = counts.iter().map(|&c| c as usize).sum();
        if total != last_total {
            last_total = total;
            long_sets.push(counts);
        }
    }
    // Discriminative FragScore thresholds: the sets of stages with FragScore <= f grow with f.
    let frag = frag_scores(problem);
    let mut frag_sets: Vec<Vec<bool>> = Vec::new();
    let mut last_total = usize::MAX;
    for f in grid(config.frag_score_steps) {
        let members: Vec<bool> = frag.iter().map(|&score| score <= f).collect();
        let total = members.iter().filter(|&&m| m).count();
        if total != last_total {
            last_total = total;
            frag_sets.push(members);
        }
    }

    let limit = config.max_troublesome_fraction * problem.num_tasks as f64;
    let mut seen: HashSet<Vec<u32>> = HashSet::new();
    let mut kept = Vec::new();
    let mut smallest: Option<Candidate> = None;
    for long in &long_sets {
        for fragile in &frag_sets {
            let raw: Vec<u32> = problem
                .stages
                .iter()
                .enumerate()
                .map(|(s, stage)| {
                    if fragile[s] {
                        stage.len() as u32
                    } else {
                        long[s]
                    }
                })
                .collect();
            let candidate = close(problem, &raw);
            if !seen.insert(candidate.troublesome.clone()) {
                continue;
            }
            if candidate.size() as f64 > limit {
                if smallest
                    .as_ref()
                    .is_none_or(|best| candidate.size() < best.size())
                {
                    smallest = Some(candidate);
                }
                continue;
            }
            kept.push(candidate);
        }
    }
    if kept.is_empty() {
        // Without any grid value (impossible with at least one step) T is empty: S is the DAG.
        kept.push(smallest.unwrap_or_else(|| close(problem, &vec![0; problem.stages.len()])));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Job, StageSpec};
    use crate::planner::PlanCluster;
    use crate::testkit;
    use fullerene_proto::{ResourceKind, ResourceVec};

    fn spec(id: u32, parents: &[u32], durations: &[f64]) -> StageSpec {
        testkit::stage(id, parents, durations, testkit::cpus(1.0))
    }

    fn problem(specs: Vec<StageSpec>) -> Problem {
        let job = Job::new("j", "g", None, specs).unwrap();
        let cluster = PlanCluster {
            machines: 1,
            machine_capacity: ResourceVec::from_pairs(&[(ResourceKind::Cpus, 4.0)]),
        };
        Problem::unfinished(&job, &cluster, &|_| false).unwrap()
    }

    #[test]
    fn closure_adds_stages_on_paths_and_labels_the_rest() {
        // 0 -> 1 -> 2 -> 3, and 4 beside them, 0 -> 5.
        let p = problem(vec![
            spec(0, &[], &[5.0, 1.0]),
            spec(1, &[0], &[1.0, 1.0]),
            spec(2, &[1], &[5.0, 1.0, 1.0]),
            spec(3, &[2], &[1.0]),
            spec(4, &[], &[1.0]),
            spec(5, &[0], &[1.0]),
        ]);
        // The long task of stage 0 and the long task of stage 2 are troublesome.
        let c = close(&p, &[1, 0, 1, 0, 0, 0]);
        // Stage 1 lies on the path between them and joins T whole. Stage 0's short task is an
        // ancestor of stage 2's long one (P); stage 2's short tasks and stage 3 descend from
        // stage 0's long task without leading to any troublesome task (C), as does stage 5;
        // stage 4 is unrelated (S).
        assert_eq!(c.troublesome, vec![1, 2, 1, 0, 0, 0]);
        assert_eq!(
            c.rest,
            vec![
                Part::Parents,
                Part::Troublesome,
                Part::Children,
                Part::Children,
                Part::Others,
                Part::Children
            ]
        );
        let d = c.divide(&p);
        assert_eq!(d.troublesome.len(), 4);
        assert_eq!(d.parents.ranges[0], 1..2);
        assert_eq!(d.children.ranges[2], 1..3);
        assert_eq!(d.others.ranges[4], 0..1);
        assert_eq!(
            d.troublesome.len() + d.others.len() + d.parents.len() + d.children.len(),
            p.num_tasks
        );
    }

    #[test]
    fn candidates_are_distinct_closed_and_small_enough() {
        let p = problem(vec![
            spec(0, &[], &[10.0, 9.0, 2.0, 1.0]),
            spec(1, &[0], &[4.0, 3.0]),
            spec(2, &[], &[6.0]),
            spec(3, &[1, 2], &[1.0]),
        ]);
        let config = PlannerConfig {
            max_troublesome_fraction: 0.5,
            ..PlannerConfig::default()
        };
        let list = candidates(&p, &config);
        assert!(!list.is_empty());
        let mut seen = HashSet::new();
        for c in &list {
            assert!(seen.insert(c.troublesome.clone()), "duplicate {c:?}");
            assert!(c.size() as f64 <= 0.5 * p.num_tasks as f64);
            assert_eq!(close(&p, &c.troublesome), *c, "closed under paths");
        }
        // l = 1 alone picks the single longest task, and FragScore of the one-task stages is
        // low enough to add them at some f: both kinds of sets appear.
        assert!(list.iter().any(|c| c.troublesome == vec![1, 0, 0, 0]));
        assert!(list.iter().any(|c| c.troublesome[2] == 1));
    }

    #[test]
    fn when_every_set_is_too_large_the_smallest_is_kept() {
        let p = problem(vec![spec(0, &[], &[1.0, 1.0])]);
        let config = PlannerConfig {
            max_troublesome_fraction: 0.1,
            ..PlannerConfig::default()
        };
        let list = candidates(&p, &config);
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].troublesome, vec![2]);
    }
}
