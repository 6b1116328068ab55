//! A DAG job's reservation request (Rayon §3.1, "RDL from the job's plan"; issue 17): what a
//! framework asks the masters to reserve so that a job with a deadline gets the capacity it
//! needs, derived from the job's stages as Rayon's tools derive RDL from past runs.
//!
//! A stage is an atom per class of its task durations: its bundle is the stage's task demand
//! packed on the cluster's machines ([`packed_bundle`]: the plan counts only tasks that fit
//! whole on a machine), `h` the tasks in the class, `l` the class's longest task and `w` its
//! work (the sum of its task durations, in bundle-time: each task holds one bundle), asked with
//! [`WORK_OVERESTIMATE`] more, or, for a plan placed by GREE-L, a class of few long tasks as
//! whole tasks, a gang of one lease each ([`job_reservation`]); the classes are the stage's
//! [`DURATION_CLASSES`] quantiles, side by side in an `all` (one atom when they would have the
//! same lease). A lease binds every bundle of its atom, so one atom per stage with the longest
//! task as its lease made every bundle of a stage whose tasks are mostly short be held as long
//! as its longest task: on the TPC-H jobs with deadlines of twice their lower bound (10
//! machines, 200 jobs, seeds 1–3), most refusals were of requests that did not fit even in an
//! empty plan. Quartiles took GREE-L from 30 to 34 of 60 SLA jobs accepted, every one met, and
//! GREE from 43 to 48 accepted, 45 met (42 before).
//!
//! RDL is a tree (series-parallel), a DAG in general is not. The request keeps every edge of
//! the DAG as an `order` (a child's tasks start only once its parents have finished) and adds
//! as few others as it can:
//! - where no stage feeds two others (a forest of in-trees: 112 of the 154 TPC-H DAGs), it is
//!   the DAG itself, each stage after an `all` of its parents' subtrees, so branches of
//!   different lengths overlap as they do when the job runs;
//! - elsewhere the DAG is cut in two at the shared stage with the fewest ancestors,
//!   `order(it and its ancestors, the rest)`, each side formed the same way;
//! - the DAG's topological levels, `order(level 0, level 1, …)` with each level an `all`
//!   (a stage also waits for the stages of the level before it that are not its parents),
//!   when they span less (a stage counted as its longest task), or when nesting would be too
//!   deep for a plan's limits.
//!
//! The parts of an `all` go shortest first: the plan places them last first (Rayon §4.2's
//! right-deep traversal, as written), so the part with the longest lease finds its stretch
//! before short ones fill around it; placed after a wide stage, a one-task stage of long
//! leases found no stretch left below the stage's tall allocation.
//!
//! Levels alone, in stage order, accepted 165 of the 200 SLA jobs on the TPC-H comparison
//! (`fullerene sim --deadlines 0.1`, 10 machines, 200 jobs, seeds 1–10) under GREE and 115
//! under GREE-L; of the workload's 154 jobs, 11 did not fit even an empty plan under GREE (5 in
//! the series-parallel form). Ordering the parts of an `all` took GREE to 174, nesting to 179
//! (GREE-L 119), and nesting where it spans what the levels do to 180 (GREE-L 127). Every one
//! met its deadline once the plan follower counted a job's running tasks stage by stage
//! (`fullerene_reservation::PlanFollower::follow_with`); before that, one or two of the jobs
//! these requests admitted finished late (up to 1.1 s).

use std::collections::BTreeSet;

pub use fullerene_reservation::packed_bundle;
use fullerene_reservation::{Atom, Expr, Limits, PolicyKind};
use fullerene_scheduling::fit::max_copies;
use serde::Serialize;

use crate::job::{Job, StageIdx};
use crate::lower_bound::lower_bounds;
use crate::planner::PlanCluster;
use crate::policy::baselines::breadth_first_levels;
use crate::policy::JobState;

/// How much more work than the stage's task durations add up to a fluid atom asks for (a
/// gang of whole tasks asks for exactly one lease each): Rayon §6's
/// "10% slack (over-estimation) over the actual job resource requirements". The plan treats
/// work as fluid bundle-time, tasks are not: a bundle held 16 s runs one 10 s task and 60% of
/// another, so an exact figure leaves the last wave of tasks short. Twice as much was measured
/// and left out: on the SLA comparison over seeds 1–30 (`fullerene sim --deadlines 0.1 --seeds
/// 30`), GREE-L accepted 506 of 600 jobs instead of 575, one was still late (three at 10%),
/// and best effort averaged 16.880 s instead of 16.849 s.
pub const WORK_OVERESTIMATE: f64 = 0.1;

/// Into how many classes of task durations (quantiles) a stage's request is cut; see the
/// module's doc.
pub const DURATION_CLASSES: usize = 4;

/// The most tasks a duration class may have to be asked as one gang under GREE-L (see
/// [`job_reservation`]).
pub const GANG_MAX_TASKS: usize = 16;

/// The shortest lease, in the plan's quanta, of a duration class asked as one gang under GREE-L
/// (see [`job_reservation`]).
pub const GANG_MIN_LEASE_QUANTA: u64 = 10;

/// A job's deadline and the reservation request meant to meet it (Rayon §6's SLA jobs).
#[derive(Clone, Debug, PartialEq)]
pub struct DeadlineRequest {
    /// Real milliseconds from the job's submission to its deadline, in whole quanta.
    pub window_ms: u64,
    /// [`job_reservation`] inside that window.
    pub expr: Expr,
}

/// `job`'s deadline `NewLB × (1 + slack)` after its submission, NewLB its lower bound alone on
/// `cluster` (tech report Fig. 9: no schedule finishes sooner, so the deadline is at least as
/// tight as Rayon §6's runtime measured alone), and the reservation for it. Durations are the
/// workload's seconds, run `time_scale` times as long in real time (`fullerene job run
/// --time-scale`); the window and the request are in real milliseconds, whole quanta of
/// `quantum_ms`, opening `lead_ms` after acceptance, shaped for the plan's `placement` policy
/// (see [`job_reservation`]).
pub fn deadline_request(
    job: &Job,
    cluster: &PlanCluster,
    slack: f64,
    time_scale: f64,
    lead_ms: u64,
    quantum_ms: u64,
    placement: PolicyKind,
) -> DeadlineRequest {
    let quantum_ms = quantum_ms.max(1);
    let runtime_s = lower_bounds(job, cluster).new_lb * time_scale;
    let window_ms = seconds_to_ms(runtime_s * (1.0 + slack))
        .max(1)
        .div_ceil(quantum_ms)
        * quantum_ms;
    DeadlineRequest {
        window_ms,
        expr: job_reservation(
            job, cluster, time_scale, window_ms, lead_ms, quantum_ms, placement,
        ),
    }
}

/// How a job with a deadline fared: whether the masters accepted its reservation and whether
/// it finished in time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadlineReport {
    /// Real milliseconds from submission to the deadline.
    pub window_ms: u64,
    /// What the masters answered.
    pub admission: Admission,
    /// Whether the job finished within `window_ms` (`None`: it did not finish).
    pub met: Option<bool>,
}

/// The masters' answer to a job's reservation request.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "answer")]
pub enum Admission {
    /// Not asked yet, or no answer before the job ended (it ran as best effort).
    Unanswered,
    /// Accepted: the job ran in reservation `name`.
    Accepted {
        /// The reservation's name.
        name: String,
    },
    /// Refused (the plan could not hold it, or a cap): the job ran as best effort.
    Refused {
        /// The masters' reason.
        reason: String,
    },
    /// Accepted, then rejected by the masters' adapter after a loss of capacity (Rayon §5.2):
    /// the job ran as best effort from then on.
    Withdrawn {
        /// The reservation's name.
        name: String,
        /// The masters' reason (which window or bundle no longer fits).
        reason: String,
    },
}

/// `job`'s request: its stages' atoms in the DAG's series-parallel form (see the module's
/// doc), inside `window(s=lead_ms, f=window_ms)` (offsets from when the masters accept it),
/// with task durations `time_scale` times the workload's and bundles packed on the machines of
/// `cluster` ([`packed_bundle`]). Times are rounded up to whole quanta of `quantum_ms` (the
/// plan refuses others); `lead_ms` is how long after submission the first allocation may
/// start (the time the plan follower needs to free reserved capacity).
///
/// For a plan placed by GREE-L, a duration class of at most [`GANG_MAX_TASKS`] tasks whose
/// lease is at least [`GANG_MIN_LEASE_QUANTA`] quanta, and whose bundles all fit the cluster
/// at once, is asked as whole tasks: a gang of all its tasks for one lease each (`g = h`,
/// `w = h × l`). GREE-L lays an atom's work flat over a long stretch, and bundle-time is fluid
/// where tasks are not: a class of three tasks of up to 4 s got 2 bundles for 6.5 s, room for
/// two of them, and q19-2g finished 150 ms late on two seeds of the SLA comparison. Under GREE, which places each atom tall and late, the same
/// gangs made other jobs late (a q10 by 0.69 s, a q21 by 20.8 s), so its requests stay fluid.
pub fn job_reservation(
    job: &Job,
    cluster: &PlanCluster,
    time_scale: f64,
    window_ms: u64,
    lead_ms: u64,
    quantum_ms: u64,
    placement: PolicyKind,
) -> Expr {
    let quantum_ms = quantum_ms.max(1);
    let whole = |ms: u64| ms.max(1).div_ceil(quantum_ms) * quantum_ms;
    let window_ms = whole(window_ms);
    let stage_request = |stage: StageIdx| {
        let stage = &job.stages[stage];
        let mut classes: Vec<Expr> = duration_classes(&stage.durations, |ms| {
            whole(seconds_to_ms(ms * time_scale)).min(window_ms)
        })
        .into_iter()
        .map(|(lease_ms, count, total_s)| {
            let bundle = packed_bundle(&stage.demand, &cluster.machine_capacity);
            let tasks = u32::try_from(count).unwrap_or(u32::MAX);
            let at_once =
                max_copies(&bundle, &cluster.machine_capacity).saturating_mul(cluster.machines);
            let as_gang = placement == PolicyKind::GreeL
                && (1..=GANG_MAX_TASKS.min(at_once)).contains(&count)
                && lease_ms >= GANG_MIN_LEASE_QUANTA.saturating_mul(quantum_ms);
            let (gang, work_ms) = if as_gang {
                (tasks, lease_ms.saturating_mul(u64::from(tasks)))
            } else {
                let fluid = total_s * time_scale * (1.0 + WORK_OVERESTIMATE);
                (1, whole(seconds_to_ms(fluid)))
            };
            Expr::Atom(Atom {
                bundle,
                gang,
                // A stage without tasks is an atom of one bundle for a quantum: it still
                // orders its DAG.
                max_parallel: tasks.max(1),
                min_lease_ms: lease_ms,
                work_ms,
            })
        })
        .collect();
        if classes.len() == 1 {
            classes.remove(0)
        } else {
            Expr::All(classes)
        }
    };
    Expr::Window {
        expr: Box::new(Shape::of(job).to_expr(&stage_request)),
        start_ms: lead_ms.div_ceil(quantum_ms) * quantum_ms,
        end_ms: window_ms,
    }
}

/// The series-parallel form of a DAG that [`job_reservation`] writes as RDL (see the module's
/// doc): stages side by side (`all`) or one after the other (`order`), every edge of the DAG
/// kept as an `order`.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    /// One stage's atoms.
    Stage(StageIdx),
    /// Side by side, the longest last: placement goes last first (Rayon §4.2's right-deep
    /// traversal), so the longest part takes its lease before the short ones fill around it.
    All(Vec<Shape>),
    /// One after the other.
    Order(Vec<Shape>),
}

impl Shape {
    /// `job`'s form: nested as the DAG is, unless its levels span less, or the nested request
    /// could break a plan's default limits where the levels would not (depth, nodes). Ties go
    /// to the nested form, which orders fewer stages: on the TPC-H comparison (seeds 1–10),
    /// with progress counted stage by stage, it took GREE-L from 119 to 127 accepted jobs (all
    /// on time; best-effort mean JCT 16.70 → 16.72 s, still below the tuned baseline's
    /// 16.73 s) and GREE from 179 to 180 (16.79 → 16.80 s). While progress was counted by the
    /// steps of the request's top-level order, the levels' finer steps were worth more (GREE-L
    /// 16.80 s and GREE 16.85 s with them, 16.85 and 16.86 s nested).
    fn of(job: &Job) -> Shape {
        let levels = Shape::levels(job);
        let all_stages: BTreeSet<StageIdx> = (0..job.stages.len()).collect();
        let nested = Shape::nested(job, &all_stages);
        let limits = Limits::default();
        // The request adds a window above a shape, and a stage is an atom or an `all` of atoms.
        let within_limits = |shape: &Shape| {
            shape.depth() + 2 <= limits.max_depth && shape.nodes_at_most(job) <= limits.max_nodes
        };
        if levels.span(job) < nested.span(job)
            || (within_limits(&levels) && !within_limits(&nested))
        {
            levels
        } else {
            nested
        }
    }

    /// `order(level 0, level 1, …)`, each level an `all` of its stages.
    fn levels(job: &Job) -> Shape {
        let mut levels: Vec<Vec<Shape>> = Vec::new();
        for (stage, level) in stage_levels(job).enumerate() {
            if levels.len() <= level {
                levels.resize_with(level + 1, Vec::new);
            }
            levels[level].push(Shape::Stage(stage));
        }
        Shape::order(
            levels
                .into_iter()
                .map(|stages| Shape::all(job, stages))
                .collect(),
        )
    }

    /// The sub-DAG of `stages` nested: where it is a forest of in-trees (no stage feeds two
    /// others), each stage after an `all` of its parents' trees; otherwise cut in two at the
    /// shared stage with the fewest ancestors, `order(it and its ancestors, the rest)`, each
    /// side formed the same way.
    fn nested(job: &Job, stages: &BTreeSet<StageIdx>) -> Shape {
        let children_within = |stage: StageIdx| {
            job.stages[stage]
                .children
                .iter()
                .filter(|child| stages.contains(child))
                .count()
        };
        let shared = stages
            .iter()
            .copied()
            .filter(|&stage| children_within(stage) >= 2)
            .min_by_key(|&stage| (ancestors_within(job, stage, stages).len(), stage));
        if let Some(shared) = shared {
            let mut first = ancestors_within(job, shared, stages);
            first.insert(shared);
            let rest: BTreeSet<StageIdx> = stages.difference(&first).copied().collect();
            return Shape::order(vec![Shape::nested(job, &first), Shape::nested(job, &rest)]);
        }
        let trees = stages
            .iter()
            .copied()
            .filter(|&stage| children_within(stage) == 0)
            .map(|sink| Shape::in_tree(job, sink, stages))
            .collect();
        Shape::all(job, trees)
    }

    /// The in-tree of `stages` that ends at `stage`.
    fn in_tree(job: &Job, stage: StageIdx, stages: &BTreeSet<StageIdx>) -> Shape {
        let parents: Vec<Shape> = job.stages[stage]
            .parents
            .iter()
            .filter(|parent| stages.contains(parent))
            .map(|&parent| Shape::in_tree(job, parent, stages))
            .collect();
        if parents.is_empty() {
            Shape::Stage(stage)
        } else {
            Shape::order(vec![Shape::all(job, parents), Shape::Stage(stage)])
        }
    }

    /// `parts` one after the other, nested orders flattened.
    fn order(parts: Vec<Shape>) -> Shape {
        let mut flat = Shape::splice(parts, |part| match part {
            Shape::Order(inner) => Ok(inner),
            other => Err(other),
        });
        if flat.len() == 1 {
            flat.remove(0)
        } else {
            Shape::Order(flat)
        }
    }

    /// `parts` side by side, nested `all`s flattened, by span, the longest last (ties keep the
    /// stages' order).
    fn all(job: &Job, parts: Vec<Shape>) -> Shape {
        let mut flat = Shape::splice(parts, |part| match part {
            Shape::All(inner) => Ok(inner),
            other => Err(other),
        });
        if flat.len() == 1 {
            return flat.remove(0);
        }
        let mut by_span: Vec<(f64, Shape)> = flat.into_iter().map(|p| (p.span(job), p)).collect();
        by_span.sort_by(|a, b| a.0.total_cmp(&b.0));
        Shape::All(by_span.into_iter().map(|(_, part)| part).collect())
    }

    /// `parts`, those of the same combinator (`inner` gives their parts, or the part back)
    /// spliced in their place.
    fn splice(parts: Vec<Shape>, inner: fn(Shape) -> Result<Vec<Shape>, Shape>) -> Vec<Shape> {
        let mut flat = Vec::with_capacity(parts.len());
        for part in parts {
            match inner(part) {
                Ok(parts) => flat.extend(parts),
                Err(part) => flat.push(part),
            }
        }
        flat
    }

    /// How long it takes at least, each stage as long as its longest task (the workload's
    /// seconds).
    fn span(&self, job: &Job) -> f64 {
        match self {
            Shape::Stage(stage) => job.stages[*stage].max_duration(),
            Shape::All(parts) => parts.iter().map(|p| p.span(job)).fold(0.0, f64::max),
            Shape::Order(parts) => parts.iter().map(|p| p.span(job)).sum(),
        }
    }

    /// Its nesting, a stage 1 deep.
    fn depth(&self) -> usize {
        match self {
            Shape::Stage(_) => 1,
            Shape::All(parts) | Shape::Order(parts) => {
                1 + parts.iter().map(Shape::depth).max().unwrap_or(0)
            }
        }
    }

    /// The most nodes its request can have: the window, its combinators, and each stage an
    /// atom per duration class and an `all` above them.
    fn nodes_at_most(&self, job: &Job) -> usize {
        match self {
            Shape::Stage(stage) => {
                let classes = DURATION_CLASSES
                    .min(job.stages[*stage].durations.len())
                    .max(1);
                if classes == 1 {
                    1
                } else {
                    classes + 1
                }
            }
            Shape::All(parts) | Shape::Order(parts) => {
                1 + parts.iter().map(|p| p.nodes_at_most(job)).sum::<usize>()
            }
        }
    }

    /// Appends the stage of each atom of `expr`, this shape's request ([`Shape::to_expr`]) for
    /// `job`, in pre-order; false when `expr` is not of this shape (each stage an atom or an
    /// `all` of atoms holding as many tasks as the stage has, each combinator with as many
    /// parts).
    fn atom_stages(&self, job: &Job, expr: &Expr, stages: &mut Vec<StageIdx>) -> bool {
        match (self, expr) {
            (Shape::Stage(stage), Expr::Atom(_) | Expr::All(_)) => {
                let classes = match expr {
                    Expr::All(classes) => classes.as_slice(),
                    atom => std::slice::from_ref(atom),
                };
                let mut tasks = 0u64;
                for class in classes {
                    let Expr::Atom(atom) = class else {
                        return false;
                    };
                    tasks += u64::from(atom.max_parallel);
                }
                if tasks != job.stages[*stage].num_tasks() as u64 {
                    return false;
                }
                stages.extend(std::iter::repeat_n(*stage, classes.len()));
                true
            }
            (Shape::All(parts), Expr::All(exprs)) | (Shape::Order(parts), Expr::Order(exprs))
                if parts.len() == exprs.len() =>
            {
                parts
                    .iter()
                    .zip(exprs)
                    .all(|(part, expr)| part.atom_stages(job, expr, stages))
            }
            _ => false,
        }
    }

    fn to_expr(&self, stage_request: &dyn Fn(StageIdx) -> Expr) -> Expr {
        match self {
            Shape::Stage(stage) => stage_request(*stage),
            Shape::All(parts) => {
                Expr::All(parts.iter().map(|p| p.to_expr(stage_request)).collect())
            }
            Shape::Order(parts) => {
                Expr::Order(parts.iter().map(|p| p.to_expr(stage_request)).collect())
            }
        }
    }
}

/// The ancestors of `stage` among `stages` (itself not included).
fn ancestors_within(job: &Job, stage: StageIdx, stages: &BTreeSet<StageIdx>) -> BTreeSet<StageIdx> {
    let mut found = BTreeSet::new();
    let mut unvisited = vec![stage];
    while let Some(stage) = unvisited.pop() {
        for &parent in &job.stages[stage].parents {
            if stages.contains(&parent) && found.insert(parent) {
                unvisited.push(parent);
            }
        }
    }
    found
}

/// Each stage's topological level (Tez's distance from root: one past its deepest parent's).
fn stage_levels(job: &Job) -> impl Iterator<Item = usize> {
    breadth_first_levels(job)
        .into_iter()
        .map(|level| level as usize)
}

/// The stage of each atom of a job's own reservation ([`job_reservation`]; atoms numbered in
/// [`Expr::atoms`]' pre-order), worked out once per job: the masters' plan follower no longer
/// owes a reservation the allocations of the atoms of the stages its job has finished
/// (`fullerene_reservation::TaggedJob::finished_atoms`), so a job that ran ahead of its plan
/// on idle capacity does not preempt best effort for the stages it has run.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservationAtoms {
    stages: Vec<StageIdx>,
    request: u64,
}

impl ReservationAtoms {
    /// The atoms of `expr`, `job`'s own request ([`job_reservation`] or [`deadline_request`],
    /// whatever its window, quantum or time scale); `None` when `expr` is not of the job's
    /// form (a request written by hand, or for another job).
    pub fn of(job: &Job, expr: &Expr) -> Option<ReservationAtoms> {
        let Expr::Window { expr: body, .. } = expr else {
            return None;
        };
        let mut stages = Vec::new();
        Shape::of(job)
            .atom_stages(job, body, &mut stages)
            .then(|| ReservationAtoms {
                stages,
                request: expr.fingerprint(),
            })
    }

    /// The stage of each atom, by number.
    pub fn stages(&self) -> &[StageIdx] {
        &self.stages
    }

    /// The request's fingerprint ([`Expr::fingerprint`]), which names it to the masters.
    pub fn request(&self) -> u64 {
        self.request
    }

    /// How many atoms the request has.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether it has none (it always has one at least).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The atoms the job has finished: those of the stages that have completed in `state`,
    /// by number, in order.
    pub fn finished(&self, state: &JobState) -> Vec<u32> {
        (0u32..)
            .zip(&self.stages)
            .filter(|(_, &stage)| state.stage_completed_at(stage).is_some())
            .map(|(atom, _)| atom)
            .collect()
    }
}

/// A stage's tasks in up to [`DURATION_CLASSES`] quantiles of their durations, as
/// `(lease, tasks, total seconds)`, the lease `lease_of` the class's longest task; classes
/// whose leases come out equal are one (shortest first).
fn duration_classes(durations: &[f64], lease_of: impl Fn(f64) -> u64) -> Vec<(u64, usize, f64)> {
    let mut sorted = durations.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let k = DURATION_CLASSES.min(n).max(1);
    let mut classes: Vec<(u64, usize, f64)> = Vec::with_capacity(k);
    for c in 0..k {
        let class = &sorted[c * n / k..(c + 1) * n / k];
        let Some(&longest) = class.last() else {
            continue;
        };
        let lease = lease_of(longest);
        let total: f64 = class.iter().sum();
        match classes.last_mut() {
            Some(last) if last.0 == lease => {
                last.1 += class.len();
                last.2 += total;
            }
            _ => classes.push((lease, class.len(), total)),
        }
    }
    if classes.is_empty() {
        // A stage without tasks still orders its DAG: an atom of nothing.
        classes.push((lease_of(0.0), 0, 0.0));
    }
    classes
}

/// Seconds to whole milliseconds, rounded up (a negative or NaN time is 0).
pub fn seconds_to_ms(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1000.0).ceil() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use fullerene_reservation::{parse, validate, Limits};

    use super::*;
    use crate::testkit::{job as test_job, machine, res, stage};

    /// Ten of the test machines.
    fn cluster() -> PlanCluster {
        PlanCluster::new(10, machine())
    }

    /// A scan feeding two joins: levels `[scan]`, `[join-a, join-b]`.
    fn fork() -> Job {
        fork_with_scan(vec![10.0; 4])
    }

    /// [`fork`] with a scan of tasks of `durations`.
    fn fork_with_scan(durations: Vec<f64>) -> Job {
        let demand = res("cpus=2,mem_mib=1024");
        let stages = vec![
            stage(0, &[], &durations, demand),
            stage(1, &[0], &[30.0; 2], demand),
            stage(2, &[0], &[5.0], demand),
        ];
        test_job("fork", "default", None, stages)
    }

    /// Each atom of `job`'s request for a plan placed by `placement` as `(g, h, l, w)`, sorted.
    fn atom_shapes(job: &Job, placement: PolicyKind) -> Vec<(u32, u32, u64, u64)> {
        let expr = job_reservation(job, &cluster(), 1.0, 600_000, 0, 1_000, placement);
        let limits = Limits {
            quantum_ms: 1_000,
            ..Limits::default()
        };
        validate(&expr, &limits).expect("valid");
        let mut shapes: Vec<_> = expr
            .atoms()
            .iter()
            .map(|a| (a.gang, a.max_parallel, a.min_lease_ms, a.work_ms))
            .collect();
        shapes.sort_unstable();
        shapes
    }

    #[test]
    fn under_gree_l_few_long_tasks_are_asked_as_whole_tasks() {
        // The scan's four 10 s tasks and the join's two 30 s ones are gangs of one lease each
        // under GREE-L; the 5 s task is under ten quanta, so fluid, with 10% more work in
        // whole quanta.
        assert_eq!(
            atom_shapes(&fork(), PolicyKind::GreeL),
            vec![
                (1, 1, 5_000, 6_000),
                (2, 2, 30_000, 60_000),
                (4, 4, 10_000, 40_000)
            ]
        );
        // Under GREE, all fluid.
        assert_eq!(
            atom_shapes(&fork(), PolicyKind::Gree),
            vec![
                (1, 1, 5_000, 6_000),
                (1, 2, 30_000, 66_000),
                (1, 4, 10_000, 44_000)
            ]
        );
        // Seventeen tasks are too many for a gang.
        let wide = atom_shapes(&fork_with_scan(vec![20.0; 17]), PolicyKind::GreeL);
        assert!(wide.contains(&(1, 17, 20_000, 375_000)), "{wide:?}");
        // On one machine of 4 cpus, two 2-cpu scan tasks fit at once, not four: fluid.
        let small = PlanCluster::new(1, res("cpus=4,mem_mib=4096"));
        let expr = job_reservation(&fork(), &small, 1.0, 600_000, 0, 1_000, PolicyKind::GreeL);
        let scan = expr
            .atoms()
            .into_iter()
            .find(|a| a.max_parallel == 4)
            .expect("scan");
        assert_eq!((scan.gang, scan.work_ms), (1, 44_000));
    }

    #[test]
    fn finished_atoms_are_those_of_the_stages_that_completed() {
        use crate::job::TaskRef;
        // The fork with a scan of four duration classes: its request is
        // order(all(4 scan atoms), all(short join, long join)).
        let job = fork_with_scan(vec![1.0, 2.0, 3.0, 4.0]);
        let expr = job_reservation(&job, &cluster(), 1.0, 600_000, 0, 1_000, PolicyKind::Gree);
        let atoms = ReservationAtoms::of(&job, &expr).expect("the job's own request");
        assert_eq!(atoms.len(), expr.atoms().len());
        assert_eq!(atoms.len(), 6, "{expr}");
        let mut state = JobState::new(&job);
        let run = |state: &mut JobState, stage: u32, index: u32| {
            let task = TaskRef { stage, index };
            state.mark_launched(task, 0, 0.0);
            state.mark_finished(&job, task, 1.0);
        };
        assert!(atoms.finished(&state).is_empty());
        for index in 0..3 {
            run(&mut state, 0, index);
        }
        assert!(atoms.finished(&state).is_empty(), "one scan task left");
        run(&mut state, 0, 3);
        assert_eq!(atoms.finished(&state), [0, 1, 2, 3]);
        // The short join done, the long one not: the short one's atom is finished.
        run(&mut state, 2, 0);
        assert_eq!(atoms.finished(&state), [0, 1, 2, 3, 4]);
        for index in 0..2 {
            run(&mut state, 1, index);
        }
        assert_eq!(atoms.finished(&state), [0, 1, 2, 3, 4, 5]);
        // A request that is not the job's own form names no atoms of it: another DAG's, one
        // whose atoms hold other task counts, one written by hand.
        let other = job_reservation(
            &branches(),
            &cluster(),
            1.0,
            600_000,
            0,
            1_000,
            PolicyKind::Gree,
        );
        assert_eq!(ReservationAtoms::of(&job, &other), None);
        let five_scans = job_reservation(
            &fork_with_scan(vec![1.0; 5]),
            &cluster(),
            1.0,
            600_000,
            0,
            1_000,
            PolicyKind::Gree,
        );
        assert_eq!(ReservationAtoms::of(&job, &five_scans), None);
        let by_hand = parse("window(atom(cpus=2; g=1, h=1, l=1s, w=1s), s=0, f=1m)").expect("rdl");
        assert_eq!(ReservationAtoms::of(&job, &by_hand), None);
    }

    #[test]
    fn a_dags_request_orders_its_levels_and_reads_back_as_the_masters_parse_it() {
        let expr = job_reservation(
            &fork(),
            &cluster(),
            1.0,
            600_000,
            1_500,
            1_000,
            PolicyKind::Gree,
        );
        let text = expr.to_string();
        // What a framework sends is text the masters parse to the same request, and valid.
        let parsed = parse(&text).expect("the masters parse it");
        assert_eq!(parsed, expr);
        let limits = Limits {
            quantum_ms: 1_000,
            ..Limits::default()
        };
        validate(&parsed, &limits).expect("valid for a plan of one-second quanta");
        let Expr::Window {
            expr: body,
            start_ms,
            end_ms,
        } = &expr
        else {
            panic!("a window: {text}");
        };
        assert_eq!((*start_ms, *end_ms), (2_000, 600_000), "{text}");
        let Expr::Order(levels) = body.as_ref() else {
            panic!("an order of levels: {text}");
        };
        assert_eq!(levels.len(), 2, "{text}");
        let Expr::Atom(scan) = &levels[0] else {
            panic!("the scan alone first: {text}");
        };
        // 4 tasks of 10 s: h = 4, l = 10 s, w = 40 s and 10% more, in whole seconds.
        assert_eq!(scan.max_parallel, 4);
        assert_eq!(scan.min_lease_ms, 10_000);
        assert_eq!(scan.work_ms, 44_000);
        assert!(
            matches!(&levels[1], Expr::All(joins) if joins.len() == 2),
            "{text}"
        );
    }

    #[test]
    fn a_deadline_is_the_lower_bound_with_slack_in_real_time_and_the_request_is_scaled() {
        let job = fork();
        let cluster = PlanCluster::new(1, "cpus=8,mem_mib=16384".parse().expect("vec"));
        // Alone on 8 cpus: the scan's 4 tasks at once (10 s), then the joins at once (30 s).
        let new_lb = lower_bounds(&job, &cluster).new_lb;
        assert!((new_lb - 40.0).abs() < 1e-9, "NewLB {new_lb}");
        // A tenth of real time, 50% slack: 40 × 1.5 / 10 = 6 s.
        let request = deadline_request(&job, &cluster, 0.5, 0.1, 500, 100, PolicyKind::Gree);
        assert_eq!(request.window_ms, 6_000);
        let Expr::Window {
            expr,
            start_ms,
            end_ms,
        } = &request.expr
        else {
            panic!("a window: {}", request.expr);
        };
        assert_eq!((*start_ms, *end_ms), (500, 6_000));
        let Expr::Order(levels) = expr.as_ref() else {
            panic!("levels: {expr}");
        };
        let Expr::Atom(scan) = &levels[0] else {
            panic!("the scan: {expr}");
        };
        // 10 s tasks last 1 s; 40 s of work and 10% more is 4.4 s.
        assert_eq!((scan.min_lease_ms, scan.work_ms), (1_000, 4_400));
    }

    /// Two branches of unequal depth into a final stage: `short` (2 s) then `long` (10 s),
    /// beside `side` (10 s). Levels would span 20 s before the final stage (`short` and `side`,
    /// then `long`); nested, 12 s.
    fn branches() -> Job {
        let demand = res("cpus=1,mem_mib=1024");
        let stages = vec![
            stage(0, &[], &[2.0; 2], demand),
            stage(1, &[0], &[10.0; 2], demand),
            stage(2, &[], &[10.0; 2], demand),
            stage(3, &[1, 2], &[1.0; 2], demand),
        ];
        test_job("branches", "default", None, stages)
    }

    /// The leases of an expression's atoms, in order (the test jobs give each stage its own
    /// task duration, so they name the stages).
    fn leases(expr: &Expr) -> Vec<u64> {
        expr.atoms().iter().map(|atom| atom.min_lease_ms).collect()
    }

    #[test]
    fn an_in_tree_is_nested_as_it_is_so_its_branches_overlap() {
        let job = branches();
        let expr = job_reservation(&job, &cluster(), 1.0, 60_000, 0, 1_000, PolicyKind::Gree);
        let Expr::Window { expr: body, .. } = &expr else {
            panic!("a window: {expr}");
        };
        // order(all(side, order(short, long)), final): the 10 s branch beside the 12 s one,
        // the shorter first.
        let Expr::Order(steps) = body.as_ref() else {
            panic!("an order: {expr}");
        };
        assert_eq!(steps.len(), 2, "{expr}");
        let Expr::All(branches) = &steps[0] else {
            panic!("the branches side by side: {expr}");
        };
        assert_eq!(leases(&branches[0]), [10_000], "{expr}");
        assert!(
            matches!(&branches[1], Expr::Order(chain) if chain.len() == 2),
            "{expr}"
        );
        assert_eq!(leases(&expr), [10_000, 2_000, 10_000, 1_000]);
        // Valid, and what the masters parse back.
        assert_eq!(parse(&expr.to_string()).expect("parses"), expr);
        let limits = Limits {
            quantum_ms: 1_000,
            ..Limits::default()
        };
        validate(&expr, &limits).expect("valid");
        // A branch's atoms are finished with its stage, whatever the other branch is at.
        use crate::job::TaskRef;
        let atoms = ReservationAtoms::of(&job, &expr).expect("the job's own request");
        let mut state = JobState::new(&job);
        let run = |state: &mut JobState, stage: u32| {
            for index in 0..2 {
                let task = TaskRef { stage, index };
                state.mark_launched(task, 0, 0.0);
                state.mark_finished(&job, task, 1.0);
            }
        };
        run(&mut state, 0);
        assert_eq!(
            atoms.finished(&state),
            [1],
            "short is done, not side before it"
        );
        run(&mut state, 2);
        assert_eq!(
            atoms.finished(&state),
            [0, 1],
            "side and short are done, the long branch is still running"
        );
        run(&mut state, 1);
        assert_eq!(atoms.finished(&state), [0, 1, 2]);
        run(&mut state, 3);
        assert_eq!(atoms.finished(&state), [0, 1, 2, 3]);
    }

    /// A stage that feeds two others is cut after: the fork's scan, then its joins (the fork's
    /// levels too). The levels win only where they span less.
    #[test]
    fn a_shared_stage_cuts_the_dag_and_the_levels_win_only_where_shorter() {
        let job = fork();
        let all_stages: BTreeSet<StageIdx> = (0..3).collect();
        let nested = Shape::nested(&job, &all_stages);
        let levels = Shape::levels(&job);
        // The joins side by side, the 5 s one first.
        let expected = Shape::Order(vec![
            Shape::Stage(0),
            Shape::All(vec![Shape::Stage(2), Shape::Stage(1)]),
        ]);
        assert_eq!(nested, expected);
        assert_eq!(levels, expected);
        assert_eq!(Shape::of(&job), levels);
        // A DAG whose cut spans more than its levels keeps its levels: `a` feeds `b` and `c`,
        // `d` (5 s) feeds `e` (5 s), and all three end in `f`. Cut after `a`, `d` would wait
        // for it: 1 + 5 + 5 s, where the levels take 5 + 5 s.
        let one_cpu =
            |id: u32, parents: &[u32], seconds: f64| stage(id, parents, &[seconds], res("cpus=1"));
        let job = test_job(
            "diamond-and-chain",
            "default",
            None,
            vec![
                one_cpu(0, &[], 1.0),
                one_cpu(1, &[0], 1.0),
                one_cpu(2, &[0], 1.0),
                one_cpu(3, &[], 5.0),
                one_cpu(4, &[3], 5.0),
                one_cpu(5, &[1, 2, 4], 1.0),
            ],
        );
        let all_stages: BTreeSet<StageIdx> = (0..6).collect();
        assert!(Shape::nested(&job, &all_stages).span(&job) > Shape::levels(&job).span(&job));
        assert_eq!(Shape::of(&job), Shape::levels(&job));
        // An in-tree whose nesting spans what its levels do is nested: `a` (10 s) then `b`
        // (1 s) beside `c` (10 s), into `d`: 11 + 1 s either way.
        let job = test_job(
            "even",
            "default",
            None,
            vec![
                one_cpu(0, &[], 10.0),
                one_cpu(1, &[0], 1.0),
                one_cpu(2, &[], 10.0),
                one_cpu(3, &[1, 2], 1.0),
            ],
        );
        let all_stages: BTreeSet<StageIdx> = (0..4).collect();
        let nested = Shape::nested(&job, &all_stages);
        assert_ne!(nested, Shape::levels(&job));
        assert_eq!(nested.span(&job), Shape::levels(&job).span(&job));
        assert_eq!(Shape::of(&job), nested);
    }

    /// Quartiles of a stage's durations, those with one lease merged: six short tasks and two
    /// long ones are two atoms, and only the long ones' bundles are held for the long lease.
    #[test]
    fn a_stage_is_cut_into_duration_classes_of_their_own_lease() {
        let durations = [1.0, 10.0, 1.0, 1.0, 1.0, 10.0, 1.0, 1.0];
        let classes = duration_classes(&durations, seconds_to_ms);
        assert_eq!(classes, vec![(1_000, 6, 6.0), (10_000, 2, 20.0)]);
        // Equal tasks stay one atom.
        assert_eq!(
            duration_classes(&[3.0; 5], seconds_to_ms),
            vec![(3_000, 5, 15.0)]
        );
        // In the request: the stage is an `all` of its classes.
        let skewed = stage(0, &[], &durations, res("cpus=1"));
        let job = test_job("skewed", "default", None, vec![skewed]);
        let expr = job_reservation(&job, &cluster(), 1.0, 60_000, 0, 1_000, PolicyKind::Gree);
        let Expr::Window { expr: body, .. } = &expr else {
            panic!("a window: {expr}");
        };
        let Expr::All(atoms) = body.as_ref() else {
            panic!("the classes side by side: {expr}");
        };
        let shapes: Vec<(u32, u64, u64)> = atoms
            .iter()
            .map(|a| match a {
                Expr::Atom(a) => (a.max_parallel, a.min_lease_ms, a.work_ms),
                other => panic!("an atom: {other}"),
            })
            .collect();
        // Work with 10% more, in whole seconds: 6.6 s → 7 s, 22 s.
        assert_eq!(shapes, vec![(6, 1_000, 7_000), (2, 10_000, 22_000)]);
    }
}
