//! A DAG job's reservation request (Rayon §3.1, "RDL from the job's plan"; issue 17): what a
//! framework asks the masters to reserve so that a job with a deadline gets the capacity it
//! needs, derived from the job's stages as Rayon's tools derive RDL from past runs.
//!
//! A stage is an atom per class of its task durations: its bundle is the stage's task demand
//! packed on the cluster's machines ([`packed_bundle`]: the plan counts only tasks that fit
//! whole on a machine), `h` the tasks in the class, `l` the class's longest task and `w` its work (the sum of its
//! task durations, in bundle-time: each task holds one bundle), asked with
//! [`WORK_OVERESTIMATE`] more; the classes are the stage's [`DURATION_CLASSES`] quantiles, side
//! by side in an `all` (one atom when they would have the same lease). A lease binds every
//! bundle of its atom, so one atom per stage with the longest task as its lease made every
//! bundle of a stage whose tasks are mostly short be held as long as its longest task: on the
//! TPC-H jobs with deadlines of twice their lower bound (10 machines, 200 jobs, seeds 1–3),
//! most refusals were of requests that did not fit even in an empty plan. Quartiles took
//! GREE-L from 30 to 34 of 60 SLA jobs accepted, every one met, and GREE from 43 to 48
//! accepted, 45 met (42 before). The DAG is combined by
//! topological level: `order(level 0, level 1, …)`, each level an `all` of its stages. RDL is a
//! tree (series-parallel), a DAG in general is not; levels are the series-parallel form that
//! keeps every edge: a stage's level is one past its deepest parent's, so every parent's atom is
//! ordered before its child's, as the barrier edges demand (a child's tasks start only once its
//! parents have finished). The price is conservatism: a stage also waits for the stages of the
//! previous level that are not its parents, so a job whose levels mix one long and one short
//! branch reserves more span than its critical path, and a tight deadline may be refused where
//! a finer expression would fit.

use fullerene_proto::ResourceVec;
pub use fullerene_reservation::packed_bundle;
use fullerene_reservation::{Atom, Expr};
use serde::Serialize;

use crate::job::Job;
use crate::lower_bound::lower_bounds;
use crate::planner::PlanCluster;
use crate::policy::baselines::breadth_first_levels;
use crate::policy::JobState;

/// How much more work than the stage's task durations add up to an atom asks for: Rayon §6's
/// "10% slack (over-estimation) over the actual job resource requirements". The plan treats
/// work as fluid bundle-time, tasks are not: a bundle held 16 s runs one 10 s task and 60% of
/// another, so an exact figure leaves the last wave of tasks short.
pub const WORK_OVERESTIMATE: f64 = 0.1;

/// Into how many classes of task durations (quantiles) a stage's request is cut; see the
/// module's doc.
pub const DURATION_CLASSES: usize = 4;

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
/// `quantum_ms`, opening `lead_ms` after acceptance (see [`job_reservation`]).
pub fn deadline_request(
    job: &Job,
    cluster: &PlanCluster,
    slack: f64,
    time_scale: f64,
    lead_ms: u64,
    quantum_ms: u64,
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
            job,
            &cluster.machine_capacity,
            time_scale,
            window_ms,
            lead_ms,
            quantum_ms,
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

/// `job`'s request: its stages' atoms ordered by the DAG's levels, inside `window(s=lead_ms,
/// f=window_ms)` (offsets from when the masters accept it), with task durations `time_scale`
/// times the workload's and bundles packed on machines of `machine` ([`packed_bundle`]).
/// Times are rounded up to whole quanta of `quantum_ms` (the plan refuses others); `lead_ms`
/// is how long after submission the first allocation may start (the time the plan follower
/// needs to free reserved capacity).
pub fn job_reservation(
    job: &Job,
    machine: &ResourceVec,
    time_scale: f64,
    window_ms: u64,
    lead_ms: u64,
    quantum_ms: u64,
) -> Expr {
    let quantum_ms = quantum_ms.max(1);
    let whole = |ms: u64| ms.max(1).div_ceil(quantum_ms) * quantum_ms;
    let window_ms = whole(window_ms);
    let mut levels: Vec<Vec<Expr>> = Vec::new();
    for (stage, level) in job.stages.iter().zip(stage_levels(job)) {
        if levels.len() <= level {
            levels.resize_with(level + 1, Vec::new);
        }
        let mut classes: Vec<Expr> = duration_classes(&stage.durations, |ms| {
            whole(seconds_to_ms(ms * time_scale)).min(window_ms)
        })
        .into_iter()
        .map(|(lease_ms, count, total_s)| {
            Expr::Atom(Atom {
                bundle: packed_bundle(&stage.demand, machine),
                gang: 1,
                max_parallel: u32::try_from(count).unwrap_or(u32::MAX),
                min_lease_ms: lease_ms,
                work_ms: whole(seconds_to_ms(
                    total_s * time_scale * (1.0 + WORK_OVERESTIMATE),
                )),
            })
        })
        .collect();
        levels[level].push(if classes.len() == 1 {
            classes.remove(0)
        } else {
            Expr::All(classes)
        });
    }
    let mut levels: Vec<Expr> = levels
        .into_iter()
        .map(|mut stages| {
            if stages.len() == 1 {
                stages.remove(0)
            } else {
                Expr::All(stages)
            }
        })
        .collect();
    let body = if levels.len() == 1 {
        levels.remove(0)
    } else {
        Expr::Order(levels)
    };
    Expr::Window {
        expr: Box::new(body),
        start_ms: lead_ms.div_ceil(quantum_ms) * quantum_ms,
        end_ms: window_ms,
    }
}

/// Each stage's topological level (Tez's distance from root: one past its deepest parent's),
/// the step of [`job_reservation`]'s `order` it is in.
fn stage_levels(job: &Job) -> impl Iterator<Item = usize> {
    breadth_first_levels(job)
        .into_iter()
        .map(|level| level as usize)
}

/// How many steps of the job's own reservation ([`job_reservation`]: one step a DAG level) the
/// job has finished: the leading levels all of whose stages have completed. The masters' plan
/// follower no longer owes a reservation the allocations of finished steps
/// (`fullerene_reservation::TaggedJob::steps_done`), so a job that ran ahead of its plan on idle
/// capacity does not preempt best effort for the rest.
pub fn completed_steps(job: &Job, state: &JobState) -> u32 {
    let levels: Vec<usize> = stage_levels(job).collect();
    let count = levels.iter().max().map_or(0, |&deepest| deepest + 1);
    let mut done = vec![true; count];
    for (stage, &level) in levels.iter().enumerate() {
        if state.stage_completed_at(stage).is_none() {
            done[level] = false;
        }
    }
    let finished = done.iter().take_while(|&&d| d).count();
    u32::try_from(finished).unwrap_or(u32::MAX)
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

    use fullerene_scheduling::testkit::machine;

    use super::*;
    use crate::job::StageSpec;

    /// A scan feeding two joins: levels `[scan]`, `[join-a, join-b]`.
    fn fork() -> Job {
        let stage = |id: u32, parents: Vec<u32>, durations: Vec<f64>| StageSpec {
            id,
            name: format!("s{id}"),
            parents,
            durations,
            demand: "cpus=2,mem_mib=1024".parse().expect("vec"),
        };
        let stages = vec![
            stage(0, vec![], vec![10.0; 4]),
            stage(1, vec![0], vec![30.0; 2]),
            stage(2, vec![0], vec![5.0]),
        ];
        Job::new("fork", "default", None, stages).expect("job")
    }

    #[test]
    fn finished_steps_are_the_leading_levels_all_of_whose_stages_completed() {
        use crate::job::TaskRef;
        let job = fork();
        let expr = job_reservation(&job, &machine(), 1.0, 600_000, 0, 1_000);
        assert_eq!(expr.steps().len(), 2);
        let mut state = JobState::new(&job);
        let run = |state: &mut JobState, stage: u32, index: u32| {
            let task = TaskRef { stage, index };
            state.mark_launched(task, 0, 0.0);
            state.mark_finished(&job, task, 1.0);
        };
        assert_eq!(completed_steps(&job, &state), 0);
        for index in 0..3 {
            run(&mut state, 0, index);
        }
        assert_eq!(completed_steps(&job, &state), 0, "one scan task left");
        run(&mut state, 0, 3);
        assert_eq!(completed_steps(&job, &state), 1);
        // The short join done, the long one not: the second level is not finished.
        run(&mut state, 2, 0);
        assert_eq!(completed_steps(&job, &state), 1);
        for index in 0..2 {
            run(&mut state, 1, index);
        }
        assert_eq!(completed_steps(&job, &state), 2);
        // Its steps' atoms are the request's atoms, level by level.
        assert_eq!(expr.atoms_in_first_steps(1), 1);
        assert_eq!(expr.atoms_in_first_steps(2), expr.atoms().len());
    }

    #[test]
    fn a_dags_request_orders_its_levels_and_reads_back_as_the_masters_parse_it() {
        let expr = job_reservation(&fork(), &machine(), 1.0, 600_000, 1_500, 1_000);
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
        let request = deadline_request(&job, &cluster, 0.5, 0.1, 500, 100);
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
        let stage = StageSpec {
            id: 0,
            name: "s0".into(),
            parents: vec![],
            durations: durations.to_vec(),
            demand: "cpus=1".parse().expect("vec"),
        };
        let job = Job::new("skewed", "default", None, vec![stage]).expect("job");
        let expr = job_reservation(&job, &machine(), 1.0, 60_000, 0, 1_000);
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
