//! Graphene's offline planner (Graphene OSDI'16 §4, Figs. 8–10; the tech report's §4, Figs. 5–7):
//! builds a compact schedule for one DAG in a virtual resource-time space and distils from it
//! the preferred order of the job's tasks, which the online matcher follows (§5: `priScore`).
//!
//! BuildSchedule (Fig. 8), as implemented here:
//!
//! 1. Split the DAG at total-order cuts (§4.4, module `split`) and plan each part on its own; the
//!    job's schedule is the concatenation.
//! 2. For each part, enumerate candidate troublesome sets T over a grid of LongScore and
//!    FragScore thresholds, keeping only discriminative values, closing each set under paths,
//!    dropping duplicates and pruning sets that hold too many tasks, and divide the part into T,
//!    S, P, C (`candidates`, Fig. 9).
//! 3. For each candidate, place T first onto an empty space of `m` machines × `d` resources,
//!    forwards and backwards, then the other subsets in the four dead-end-free orders
//!    (`orders`, Fig. 10, with the placements of `placement` on the space of `space`).
//!    Candidates are explored in parallel with rayon when [`PlannerConfig::parallel`] is set;
//!    the result is the same either way.
//! 4. Keep the most compact schedule (the shortest; ties go to the earlier candidate in Fig. 9's
//!    loop order, then to the earlier subset order in Fig. 10's list). Our addition: the few
//!    most compact candidate schedules are first improved by forward-backward justification and
//!    by replaying their order through the list scheduler (`improve`,
//!    [`PlannerConfig::improved_candidates`]).
//! 5. Rank the winning schedule's tasks by start time (OrderTasks, §5.1): the preferred order
//!    and each task's `priScore`.
//!
//! Everything is sans-IO and deterministic: no clock, no randomness, and parallelism changes
//! nothing but the wall-clock time.

mod candidates;
mod check;
mod improve;
mod orders;
mod placement;
mod problem;
mod scores;
mod simulate;
mod space;
pub(crate) mod split;

use fullerene_proto::{ResourceKind, ResourceVec};
use rayon::prelude::*;
use serde::Serialize;

use crate::job::{Job, TaskRef};
use orders::Built;
use placement::{Bound, Placed};
use problem::Problem;

pub use check::{check_schedule, ScheduleViolation};
pub use orders::SubsetOrder;
pub(crate) use scores::total_work;
pub use simulate::simulate_order;

/// The cluster a plan is built for: `machines` identical machines.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanCluster {
    /// Number of machines (the `m` of Fig. 8). Graphene plans a job against the share of the
    /// cluster it expects to get; callers choose `m` accordingly.
    pub machines: usize,
    /// Capacity of each machine.
    pub machine_capacity: ResourceVec,
}

impl PlanCluster {
    /// `machines` machines of `machine_capacity` each.
    pub fn new(machines: usize, machine_capacity: ResourceVec) -> PlanCluster {
        PlanCluster {
            machines,
            machine_capacity,
        }
    }

    /// The capacity of all machines together (the `C` of TWork, Table 1 and Fig. 9).
    pub fn total_capacity(&self) -> ResourceVec {
        self.machine_capacity.scale(self.machines as f64)
    }
}

/// Tuning of the planner's search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannerConfig {
    /// Number of LongScore thresholds `l ∈ {δ, 2δ, …, 1}`, `δ = 1 / long_score_steps`
    /// (Fig. 9, line 6). The paper leaves δ open. We use 10 (δ = 0.1): on the TPC-H workload
    /// a finer grid (20) explores 1.8 times the candidates, and takes about twice as long, for
    /// a median schedule 0.06% shorter.
    pub long_score_steps: u32,
    /// Number of FragScore thresholds `f ∈ {δ, 2δ, …, 1}` (Fig. 9, line 7). FragScore is per
    /// stage, so at most one set per stage is discriminative; 10 separates stages whose
    /// packability differs by 10%.
    pub frag_score_steps: u32,
    /// Candidate sets T holding more than this fraction of the tasks being planned are pruned
    /// without exploration (§4.4: "if |T| is very large, the approach of placing troublesome
    /// tasks first … is unlikely to help"). The paper gives no value; in its production DAGs
    /// the median T holds 17% of the tasks. We prune sets of more than half the tasks: on the
    /// TPC-H workload, keeping them explores 27% more candidates for a median schedule 0.04%
    /// shorter. At least one candidate (the smallest) always remains.
    pub max_troublesome_fraction: f64,
    /// Split the DAG at total-order cuts and plan the parts separately (§4.4).
    pub split_at_cuts: bool,
    /// How many of the most compact candidate schedules of each part are improved (by
    /// forward-backward justification and by replaying their order through the list scheduler,
    /// see `improve`) before the winner is chosen; 0 keeps Graphene's most compact schedule as
    /// built. The improvement is our addition to the paper: on the TPC-H workload it brings the
    /// median schedule from about 6% to under 5% above NewLB. Improving more than the single
    /// most compact schedule pays because the schedules that improve most are often not the
    /// most compact as built; 4 gets most of the gain of improving every candidate, at a
    /// fraction of the cost.
    pub improved_candidates: usize,
    /// At most this many rounds of justification per improved schedule (the process stops at
    /// the first round that does not shorten the schedule).
    pub justification_rounds: u32,
    /// Explore candidate troublesome sets in parallel with rayon (§4.4). The resulting plan is
    /// identical either way.
    pub parallel: bool,
}

impl Default for PlannerConfig {
    fn default() -> PlannerConfig {
        PlannerConfig {
            long_score_steps: 10,
            frag_score_steps: 10,
            max_troublesome_fraction: 0.5,
            split_at_cuts: true,
            improved_candidates: 4,
            justification_rounds: 4,
            parallel: true,
        }
    }
}

/// Where and when one task runs in a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Placement {
    /// The task.
    pub task: TaskRef,
    /// The machine, an index below [`PlanCluster::machines`].
    pub machine: usize,
    /// Start time, seconds from the start of the schedule.
    pub start_s: f64,
    /// End time, seconds (start plus the task's duration).
    pub end_s: f64,
}

/// A schedule: every placement, ordered by start time, and its length.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    /// The placements, by start time (ties: by machine, then task).
    pub placements: Vec<Placement>,
    /// Time from the first start to the last end (0 when empty).
    pub makespan_s: f64,
}

/// What the search did, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanStats {
    /// Parts the DAG was split into at total-order cuts (§4.4).
    pub partitions: usize,
    /// Candidate troublesome sets explored, over all parts.
    pub candidates: usize,
    /// Per part, the winning subset order.
    pub winning_orders: Vec<SubsetOrder>,
    /// Per part, the number of tasks in the winning troublesome set T.
    pub troublesome_tasks: Vec<usize>,
    /// Makespan of the most compact schedule as built by Graphene's search, before improvement
    /// (summed over the parts).
    pub built_makespan_s: f64,
}

/// Graphene's offline plan for a job (or for what is left of it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The preferred order: every planned task once, by start time in the winning schedule.
    pub order: Vec<TaskRef>,
    /// `priScore` per task, indexed `[stage][task]` like the job (§5.1): with `n` planned tasks,
    /// the task at rank `r` (0-based) of [`Plan::order`] scores `1 - r/n`, so the first scores
    /// exactly 1 and the scores fall towards 0. We stop at `1/n` rather than 0 so that the
    /// online `perfScore = priScore · pScore` (tech report Fig. 8) never wipes out the packing
    /// score of the last task. Tasks not planned (finished, for [`plan_remaining`]) score 0.
    pub pri_scores: Vec<Vec<f64>>,
    /// Length of the winning offline schedule.
    pub makespan_s: f64,
    /// The winning offline schedule, by start time.
    pub schedule: Vec<Placement>,
    /// What the search did.
    pub stats: PlanStats,
}

/// Why a job cannot be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A cluster without machines runs nothing.
    #[error("the cluster has no machines")]
    NoMachines,
    /// A machine capacity that is negative or not finite.
    #[error("machine capacity of {resource} is {amount}: it must be finite and >= 0")]
    InvalidCapacity {
        /// The resource.
        resource: ResourceKind,
        /// The amount given.
        amount: f64,
    },
    /// A task needs more of a resource than a whole machine has: it can never run.
    #[error(
        "stage {stage_id} (`{stage_name}`): a task needs {demand} {resource}, but a machine \
         has {capacity}"
    )]
    DemandExceedsMachine {
        /// The stage's id in the workload.
        stage_id: u32,
        /// The stage's name.
        stage_name: String,
        /// The resource that does not fit.
        resource: ResourceKind,
        /// One task's demand of it.
        demand: f64,
        /// One machine's capacity of it.
        capacity: f64,
    },
    /// A negative or non-finite demand.
    #[error("stage {stage_id} (`{stage_name}`): demand of {resource} is {demand}: it must be finite and >= 0")]
    InvalidDemand {
        /// The stage's id in the workload.
        stage_id: u32,
        /// The stage's name.
        stage_name: String,
        /// The resource.
        resource: ResourceKind,
        /// The demand given.
        demand: f64,
    },
    /// A negative or non-finite task duration.
    #[error("stage {stage_id}, task {task}: duration {duration} must be finite and >= 0")]
    InvalidDuration {
        /// The stage's id in the workload.
        stage_id: u32,
        /// The task's index in its stage.
        task: u32,
        /// The duration given.
        duration: f64,
    },
    /// The job's stages break the invariants [`Job::new`] establishes (its fields are public).
    #[error("malformed job: {reason}")]
    MalformedJob {
        /// What is wrong.
        reason: String,
    },
}

/// Builds Graphene's offline plan for a whole job (Fig. 8: BuildSchedule then OrderTasks).
pub fn plan(job: &Job, cluster: &PlanCluster, config: &PlannerConfig) -> Result<Plan, PlanError> {
    plan_remaining(job, cluster, config, &|_| false)
}

/// Plans what is left of a job: only the tasks for which `finished` is false, treating the
/// finished ones as done at time 0 (so dependencies on them are already met). The DAG-job
/// framework re-plans with this after losing tasks. [`Plan::order`] and [`Plan::schedule`] hold
/// the unfinished tasks only.
pub fn plan_remaining(
    job: &Job,
    cluster: &PlanCluster,
    config: &PlannerConfig,
    finished: &dyn Fn(TaskRef) -> bool,
) -> Result<Plan, PlanError> {
    let problem = Problem::unfinished(job, cluster, finished)?;
    let parts = if config.split_at_cuts {
        split::total_order_cuts(&problem.parent_lists())
    } else if problem.stages.is_empty() {
        Vec::new()
    } else {
        std::iter::once(0..problem.stages.len()).collect()
    };
    let mut stats = PlanStats {
        partitions: parts.len(),
        candidates: 0,
        winning_orders: Vec::with_capacity(parts.len()),
        troublesome_tasks: Vec::with_capacity(parts.len()),
        built_makespan_s: 0.0,
    };
    let mut schedule = Vec::with_capacity(problem.num_tasks);
    let mut offset = 0.0;
    for range in parts {
        let part = problem.slice(range);
        let best = plan_part(&part, config, &mut stats);
        let origin = best.partial.space.span_start();
        schedule.extend(placements_of(&part, &best.partial.placed, origin, offset));
        offset += best.makespan();
    }
    sort_by_start(&mut schedule);
    let order: Vec<TaskRef> = schedule.iter().map(|p| p.task).collect();
    let mut pri_scores: Vec<Vec<f64>> = job
        .stages
        .iter()
        .map(|s| vec![0.0; s.durations.len()])
        .collect();
    let n = order.len() as f64;
    for (rank, task) in order.iter().enumerate() {
        pri_scores[task.stage()][task.index as usize] = 1.0 - rank as f64 / n;
    }
    Ok(Plan {
        order,
        pri_scores,
        makespan_s: offset,
        schedule,
        stats,
    })
}

/// Orders placements by start time; among equal starts the longer task first (it was the more
/// constraining one for the placement), then by machine and task, so the order is total.
fn sort_by_start(schedule: &mut [Placement]) {
    schedule.sort_by(|a, b| {
        a.start_s
            .total_cmp(&b.start_s)
            .then(b.end_s.total_cmp(&a.end_s))
            .then(a.machine.cmp(&b.machine))
            .then(a.task.cmp(&b.task))
    });
}

/// A candidate's schedule with the candidate's position in Fig. 9's order.
struct Ranked {
    index: usize,
    built: Built,
}

impl Ranked {
    /// The selection key: most compact first, ties to the earlier candidate.
    fn precedes(&self, other: &Ranked) -> bool {
        let (a, b) = (self.built.makespan(), other.built.makespan());
        a < b || (a == b && self.index < other.index)
    }
}

/// Adds `item` to `kept` (sorted by [`Ranked::precedes`]) and keeps the first `keep`. Selecting
/// by a total order is associative and commutative, so rayon's fold and reduce order do not
/// matter.
fn keep_best(mut kept: Vec<Ranked>, item: Ranked, keep: usize) -> Vec<Ranked> {
    let at = kept.partition_point(|k| k.precedes(&item));
    if at < keep {
        kept.insert(at, item);
        kept.truncate(keep);
    }
    kept
}

/// BuildSchedule (Fig. 8) for one part of the DAG: the most compact schedule over all
/// candidates, after improving the few most compact ones.
fn plan_part(part: &Problem, config: &PlannerConfig, stats: &mut PlanStats) -> Built {
    let list = candidates::candidates(part, config);
    stats.candidates += list.len();
    let keep = config.improved_candidates.max(1);
    let shared = Bound::new(keep);
    let evaluate = |(index, candidate): (usize, &candidates::Candidate)| {
        orders::build(part, candidate, &shared).map(|built| Ranked { index, built })
    };
    let most_compact: Vec<Ranked> = if config.parallel {
        list.par_iter()
            .enumerate()
            .filter_map(evaluate)
            .fold(Vec::new, |kept, item| keep_best(kept, item, keep))
            .reduce(Vec::new, |a, b| {
                b.into_iter()
                    .fold(a, |kept, item| keep_best(kept, item, keep))
            })
    } else {
        list.iter()
            .enumerate()
            .filter_map(evaluate)
            .fold(Vec::new(), |kept, item| keep_best(kept, item, keep))
    };
    // The most compact candidates are never cut (nothing beats them), so there is at least one.
    stats.built_makespan_s += most_compact
        .first()
        .map_or(0.0, |ranked| ranked.built.makespan());
    let improve = |ranked: Ranked| {
        if config.improved_candidates == 0 {
            return ranked;
        }
        Ranked {
            index: ranked.index,
            built: Built {
                partial: improve::improve(part, ranked.built.partial, config.justification_rounds),
                order: ranked.built.order,
            },
        }
    };
    // Among the improved schedules, the most compact; ties go to the one that was more compact
    // before improvement.
    let improved: Vec<Ranked> = if config.parallel {
        most_compact.into_par_iter().map(improve).collect()
    } else {
        most_compact.into_iter().map(improve).collect()
    };
    let winner = improved
        .into_iter()
        .reduce(|a, b| {
            if b.built.makespan() < a.built.makespan() {
                b
            } else {
                a
            }
        })
        .expect("the most compact candidate schedule is never pruned");
    stats.winning_orders.push(winner.built.order);
    stats.troublesome_tasks.push(list[winner.index].size());
    winner.built
}

/// Translates a schedule of dense ids into placements, moving time `origin` to `offset`
/// (shared with the list scheduler). Not sorted. Times are computed as `offset + (t - origin)`
/// so that a part's last end and the next part's first start, both `offset + makespan`, are
/// bit-identical and dependencies across a cut hold exactly.
fn placements_of(problem: &Problem, placed: &[Placed], origin: f64, offset: f64) -> Vec<Placement> {
    placed
        .iter()
        .map(|p| {
            let (s, position) = problem.locate(p.id as usize);
            Placement {
                task: problem.stages[s].task_ref(position),
                machine: p.machine as usize,
                start_s: offset + (p.start - origin),
                end_s: offset + (p.end - origin),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
