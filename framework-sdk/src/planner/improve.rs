//! Improvement of the most compact candidate schedules, an addition to Graphene's
//! BuildSchedule (Fig. 8), which keeps the most compact candidate schedule as built.
//!
//! Each candidate schedule is built by greedy placement, and the last tasks of a greedy
//! placement often leave holes that an earlier decision could have filled. Two cheap passes
//! recover much of that, both driven by the order the schedule itself gives:
//!
//! - *Forward-backward improvement* ("double justification", Valls, Ballestín and Quintanilla,
//!   EJOR 2005): re-place every task as late as possible, latest-ending first (right
//!   justification), then as early as possible, earliest-starting first (left justification).
//!   Placing a schedule's tasks in its own start order can only move each task earlier on its
//!   machine, so a round seldom lengthens the schedule and often shortens it; since placements
//!   here may also change machines, a round is kept only when it is strictly shorter, and the
//!   process stops at the first round that is not.
//! - *Replaying the order*: run the schedule's start order through the list scheduler of
//!   [`super::simulate_order`], which is how Graphene's online component uses the order
//!   (§5.1). Where the greedy placement backfilled a long task early, the list scheduler keeps
//!   the machine busy with the next tasks instead, and is sometimes several percent shorter.
//!
//! The shorter of the two is the improved schedule; the order handed to the online component is
//! distilled from it exactly as from any other schedule (OrderTasks).

use super::placement::{place_in_order, Direction, Partial};
use super::problem::Problem;
use super::simulate::list_schedule;

/// The shorter of `schedule` after at most `rounds` rounds of justification and `schedule`'s
/// start order replayed by the list scheduler (the justified one on a tie).
pub(crate) fn improve(problem: &Problem, schedule: Partial, rounds: u32) -> Partial {
    // Earlier start, higher priority; ties go to the lower task, as in the list scheduler.
    let mut priorities = vec![0.0; problem.num_tasks];
    for placed in &schedule.placed {
        priorities[placed.id as usize] = -placed.start;
    }
    let replayed = list_schedule(problem, &priorities);
    let justified = justify(problem, schedule, rounds);
    if replayed.makespan() < justified.makespan() {
        replayed
    } else {
        justified
    }
}

/// Improves `schedule` by at most `rounds` rounds of right-then-left justification; returns
/// the shortest schedule seen (the input if no round helps).
fn justify(problem: &Problem, schedule: Partial, rounds: u32) -> Partial {
    let mut best = schedule;
    for _ in 0..rounds {
        // Latest end first; among equal ends the later stage (children come after parents in
        // the dense ids), so that every child is placed before its parents.
        let mut by_end = best.placed.clone();
        by_end.sort_by(|a, b| b.end.total_cmp(&a.end).then(b.id.cmp(&a.id)));
        let ids: Vec<u32> = by_end.iter().map(|p| p.id).collect();
        let mut right = Partial::new(problem);
        place_in_order(problem, &mut right, &ids, Direction::Backward);

        // Earliest start first; among equal starts the earlier stage.
        let mut by_start = right.placed.clone();
        by_start.sort_by(|a, b| a.start.total_cmp(&b.start).then(a.id.cmp(&b.id)));
        let ids: Vec<u32> = by_start.iter().map(|p| p.id).collect();
        let mut left = Partial::new(problem);
        place_in_order(problem, &mut left, &ids, Direction::Forward);

        let round_best = if right.makespan() < left.makespan() {
            right
        } else {
            left
        };
        if round_best.makespan() < best.makespan() {
            best = round_best;
        } else {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::PlanCluster;
    use crate::testkit::{self, cpus, stage};

    #[test]
    fn improvement_closes_the_holes_a_schedule_leaves() {
        let job = testkit::job(
            "j",
            "g",
            None,
            vec![
                stage(0, &[], &[2.0, 2.0], cpus(1.0)),
                stage(1, &[0], &[1.0], cpus(2.0)),
            ],
        );
        let cluster = PlanCluster::new(1, cpus(2.0));
        let problem = Problem::unfinished(&job, &cluster, &|_| false).unwrap();
        // A valid but loose schedule: stage 0's second task waits for nothing, stage 1 idles.
        let mut loose = Partial::new(&problem);
        loose.record(&problem, 0, 0, 0, 0.0, 2.0);
        loose.record(&problem, 0, 1, 0, 3.0, 5.0);
        loose.record(&problem, 1, 0, 0, 6.0, 7.0);
        assert_eq!(loose.makespan(), 7.0);
        let tight = improve(&problem, loose.clone(), 4);
        assert_eq!(tight.makespan(), 3.0);
        assert_eq!(justify(&problem, loose.clone(), 1).makespan(), 3.0);
        // Without rounds only the replay of the order remains, and it finds the same.
        assert_eq!(improve(&problem, loose, 0).makespan(), 3.0);
    }
}
