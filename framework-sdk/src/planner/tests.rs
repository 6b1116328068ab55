//! Tests of the planner as a whole: the papers' worked example, determinism, re-planning, errors,
//! and property tests over random DAGs.

use std::collections::HashSet;

use fullerene_proto::{ResourceKind, ResourceVec};
use proptest::prelude::*;

use super::*;
use crate::job::StageSpec;
use crate::lower_bound::lower_bounds;
use crate::testkit::{self, cpus, cpus_and_mem, machine};

/// Graphene Fig. 2 (§2.2) as the testkit reconstructs it, on its one machine with capacity 1
/// of two resources.
fn figure_2() -> (Job, PlanCluster) {
    (
        testkit::figure_2("figure-2", "g", None),
        PlanCluster::new(1, cpus_and_mem(1.0, 1.0)),
    )
}

/// Critical-path length of each stage's tasks: the longest path from the task to the job's end.
fn critical_path_priority(job: &Job) -> Vec<f64> {
    let mut cp = vec![0.0; job.stages.len()];
    for s in (0..job.stages.len()).rev() {
        let below = job.stages[s]
            .children
            .iter()
            .map(|&c| cp[c])
            .fold(0.0, f64::max);
        cp[s] = job.stages[s].max_duration() + below;
    }
    cp
}

#[test]
fn figure_2_critical_path_and_packing_take_3t_and_the_planner_about_t() {
    let (job, cluster) = figure_2();
    let cp = critical_path_priority(&job);
    let cp_sched = simulate_order(&job, &cluster, |t| cp[t.stage()]).unwrap();
    // Tetris: packing score = demand · free resources, on an empty machine the demand's sum.
    let tetris = simulate_order(&job, &cluster, |t| {
        job.demand(t).normalized_by(&cluster.machine_capacity).sum()
    })
    .unwrap();
    let planned = plan(&job, &cluster, &PlannerConfig::default()).unwrap();
    let online = simulate_order(&job, &cluster, |t| {
        planned.pri_scores[t.stage()][t.index as usize]
    })
    .unwrap();

    let order_of =
        |s: &Schedule| -> Vec<u32> { s.placements.iter().map(|p| p.task.stage).collect() };
    // The paper's orders: CPSched t0 → t3 → t4 → t5 → t1 → t2, Tetris t0 → t1 → t3 → t2 → t4 → t5.
    assert_eq!(order_of(&cp_sched), vec![0, 3, 4, 5, 1, 2]);
    assert_eq!(order_of(&tetris), vec![0, 1, 3, 2, 4, 5]);
    assert!(
        cp_sched.makespan_s > 3.0,
        "CPSched: {}",
        cp_sched.makespan_s
    );
    assert!(tetris.makespan_s > 3.0, "Tetris: {}", tetris.makespan_s);
    // The planner overlaps the three long tasks and finds OPT's schedule: t1, t3, then t4
    // beside t0, then t2 and t5 beside t0, T(1+5ε) + 2ε in all.
    assert!(
        (planned.makespan_s - 1.07).abs() < 1e-9,
        "planned: {:?}",
        planned.schedule
    );
    // The short parents t1 and t3 come first in the preferred order, the long t2 and t5 (which
    // wait for them) last, as in the paper's order t1, t3, t4, t0, t2, t5.
    let stage_of = |i: usize| planned.order[i].stage;
    assert_eq!(
        HashSet::from([stage_of(0), stage_of(1)]),
        HashSet::from([1, 3])
    );
    assert_eq!(
        HashSet::from([stage_of(4), stage_of(5)]),
        HashSet::from([2, 5])
    );
    // Followed online, the preferred order also finishes in about T.
    assert!(online.makespan_s < 1.1, "online: {}", online.makespan_s);
    check_schedule(&job, &cluster, &planned.schedule).unwrap();
    let bounds = lower_bounds(&job, &cluster);
    assert!(bounds.new_lb <= planned.makespan_s);
}

#[test]
fn pri_scores_fall_from_one_along_the_order() {
    let (job, cluster) = figure_2();
    let planned = plan(&job, &cluster, &PlannerConfig::default()).unwrap();
    let scores: Vec<f64> = planned
        .order
        .iter()
        .map(|t| planned.pri_scores[t.stage()][t.index as usize])
        .collect();
    assert_eq!(scores[0], 1.0);
    assert!(scores.windows(2).all(|w| w[0] > w[1]));
    assert!((scores[5] - 1.0 / 6.0).abs() < 1e-12);
    // The order is the schedule's by start time.
    let starts: Vec<f64> = planned.schedule.iter().map(|p| p.start_s).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn errors_name_the_stage_and_the_resource() {
    let job = Job::new(
        "j",
        "g",
        None,
        vec![StageSpec {
            id: 7,
            name: "huge".into(),
            parents: vec![],
            durations: vec![1.0],
            demand: cpus_and_mem(1.0, 100.0),
        }],
    )
    .unwrap();
    let cluster = PlanCluster::new(3, cpus_and_mem(4.0, 64.0));
    let err = plan(&job, &cluster, &PlannerConfig::default()).unwrap_err();
    assert_eq!(
        err,
        PlanError::DemandExceedsMachine {
            stage_id: 7,
            stage_name: "huge".into(),
            resource: ResourceKind::MemMib,
            demand: 100.0,
            capacity: 64.0,
        }
    );
    assert!(err.to_string().contains("stage 7 (`huge`)"), "{err}");
    assert!(err.to_string().contains("mem_mib"), "{err}");
    assert_eq!(
        plan(
            &job,
            &PlanCluster::new(0, cpus_and_mem(4.0, 64.0)),
            &PlannerConfig::default()
        ),
        Err(PlanError::NoMachines)
    );
    assert!(simulate_order(&job, &cluster, |_| 0.0).is_err());
    // Once the task is done there is nothing left that cannot fit.
    let rest = plan_remaining(&job, &cluster, &PlannerConfig::default(), &|_| true).unwrap();
    assert!(rest.order.is_empty());
    assert_eq!(rest.makespan_s, 0.0);
    assert_eq!(rest.pri_scores, vec![vec![0.0]]);

    let mut broken = job.clone();
    broken.stages[0].demand = cpus_and_mem(1.0, 1.0);
    broken.stages[0].durations[0] = f64::NAN;
    assert!(matches!(
        plan(&broken, &cluster, &PlannerConfig::default()),
        Err(PlanError::InvalidDuration { stage_id: 7, .. })
    ));
    broken.stages[0].durations[0] = 1.0;
    broken.stages[0].parents = vec![0];
    assert!(matches!(
        plan(&broken, &cluster, &PlannerConfig::default()),
        Err(PlanError::MalformedJob { .. })
    ));
}

#[test]
fn total_order_cuts_concatenate_part_schedules() {
    // Two scans joined by a stage, then a final stage: parts {0, 1}, {2}, {3}.
    let stage = |id: u32, parents: &[u32], n: usize, d: f64| {
        testkit::stage(id, parents, &vec![d; n], cpus(1.0))
    };
    let job = Job::new(
        "j",
        "g",
        None,
        vec![
            stage(0, &[], 6, 2.0),
            stage(1, &[], 2, 4.0),
            stage(2, &[0, 1], 4, 1.0),
            stage(3, &[2], 1, 3.0),
        ],
    )
    .unwrap();
    let cluster = PlanCluster::new(1, cpus(4.0));
    let planned = plan(&job, &cluster, &PlannerConfig::default()).unwrap();
    assert_eq!(planned.stats.partitions, 3);
    // The scans pack into 6 s (lanes 4+2, 4+2, 2+2, 2+2 on the 4 cpus), then 1 s, then 3 s.
    assert_eq!(planned.makespan_s, 10.0);
    check_schedule(&job, &cluster, &planned.schedule).unwrap();
    let unsplit = plan(
        &job,
        &cluster,
        &PlannerConfig {
            split_at_cuts: false,
            ..PlannerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(unsplit.stats.partitions, 1);
    assert_eq!(unsplit.makespan_s, 10.0);
}

#[test]
fn replanning_covers_exactly_the_unfinished_tasks() {
    let (job, cluster) = figure_2();
    let done = |t: TaskRef| t.stage == 1 || t.stage == 3;
    let rest = plan_remaining(&job, &cluster, &PlannerConfig::default(), &done).unwrap();
    let planned: HashSet<u32> = rest.order.iter().map(|t| t.stage).collect();
    assert_eq!(planned, HashSet::from([0, 2, 4, 5]));
    assert_eq!(rest.pri_scores[1], vec![0.0]);
    assert_eq!(rest.pri_scores[rest.order[0].stage()][0], 1.0);
    // t2's parent is done: it can start at once, beside t0 and t5 after t4.
    check_schedule(&job, &cluster, &rest.schedule).unwrap();
    assert!(rest.makespan_s < 1.1, "{}", rest.makespan_s);
}

/// The largest job of the TPC-H workload, on two reference machines.
fn reference_cluster(machines: usize) -> PlanCluster {
    PlanCluster::new(machines, machine())
}

fn tpch_jobs() -> Vec<Job> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/workloads/tpch-decima.jsonl");
    crate::workload::read_workload(&path).unwrap()
}

#[test]
fn parallel_and_sequential_search_give_identical_plans() {
    let jobs = tpch_jobs();
    let cluster = reference_cluster(2);
    // A spread of sizes, including a large one.
    let mut picked: Vec<&Job> = jobs.iter().step_by(29).collect();
    picked.push(
        jobs.iter()
            .max_by_key(|j| j.num_tasks())
            .expect("the workload has jobs"),
    );
    for job in picked {
        let parallel = plan(job, &cluster, &PlannerConfig::default()).unwrap();
        let sequential = testkit::plan_sequentially(job, &cluster);
        assert_eq!(parallel, sequential, "job {}", job.name);
        check_schedule(job, &cluster, &parallel.schedule).unwrap();
        assert_eq!(parallel.order.len(), job.num_tasks());
        let bounds = lower_bounds(job, &cluster);
        assert!(
            bounds.new_lb <= parallel.makespan_s * (1.0 + 1e-9),
            "job {}",
            job.name
        );
    }
}

/// Random small jobs: stages with 1–5 tasks over up to three resources, edges to earlier
/// stages, some zero durations.
fn arb_job() -> impl Strategy<Value = Job> {
    let stage = (
        proptest::collection::vec(prop_oneof![1 => Just(0.0), 6 => 0.1f64..10.0], 1..6),
        0.1f64..4.0,
        0.0f64..8.0,
        0.0f64..50.0,
        any::<u64>(),
    );
    proptest::collection::vec(stage, 1..7).prop_map(|stages| {
        let specs = stages
            .into_iter()
            .enumerate()
            .map(|(i, (durations, cpus, mem, net, edges))| {
                let parents: Vec<u32> = (0..i as u32).filter(|p| edges >> p & 1 == 1).collect();
                let demand = ResourceVec::from_pairs(&[
                    (ResourceKind::Cpus, cpus),
                    (ResourceKind::MemMib, mem),
                    (ResourceKind::NetMbps, net),
                ]);
                testkit::stage(i as u32, &parents, &durations, demand)
            })
            .collect();
        Job::new("random", "g", None, specs).expect("generated DAGs are valid")
    })
}

fn arb_cluster() -> impl Strategy<Value = PlanCluster> {
    (1usize..4).prop_map(|machines| {
        PlanCluster::new(
            machines,
            ResourceVec::from_pairs(&[
                (ResourceKind::Cpus, 4.0),
                (ResourceKind::MemMib, 8.0),
                (ResourceKind::NetMbps, 100.0),
            ]),
        )
    })
}

fn assert_complete(job: &Job, tasks: impl Iterator<Item = TaskRef>, expected: &HashSet<TaskRef>) {
    let mut seen = HashSet::new();
    for t in tasks {
        assert!(seen.insert(t), "{t:?} twice in job {job:?}");
    }
    assert_eq!(&seen, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn plans_are_valid_complete_and_no_shorter_than_the_lower_bounds(
        job in arb_job(),
        cluster in arb_cluster(),
        split in any::<bool>(),
    ) {
        let config = PlannerConfig { split_at_cuts: split, parallel: false, ..PlannerConfig::default() };
        let planned = plan(&job, &cluster, &config).unwrap();
        prop_assert_eq!(check_schedule(&job, &cluster, &planned.schedule), Ok(()));
        let all: HashSet<TaskRef> = job.tasks().collect();
        assert_complete(&job, planned.order.iter().copied(), &all);
        assert_complete(&job, planned.schedule.iter().map(|p| p.task), &all);
        let first = planned.schedule.iter().map(|p| p.start_s).fold(f64::INFINITY, f64::min);
        let last = planned.schedule.iter().map(|p| p.end_s).fold(0.0, f64::max);
        prop_assert!(first.abs() < 1e-9);
        prop_assert!((last - planned.makespan_s).abs() <= 1e-9 * last.max(1.0));

        let listed = simulate_order(&job, &cluster, |t| planned.pri_scores[t.stage()][t.index as usize]).unwrap();
        prop_assert_eq!(check_schedule(&job, &cluster, &listed.placements), Ok(()));
        assert_complete(&job, listed.placements.iter().map(|p| p.task), &all);

        let b = lower_bounds(&job, &cluster);
        let slack = 1e-9 * planned.makespan_s.max(1.0);
        for bound in [b.cp_len, b.t_work, b.mod_cp, b.new_lb] {
            prop_assert!(bound <= planned.makespan_s + slack, "{:?} vs plan {}", b, planned.makespan_s);
            prop_assert!(bound <= listed.makespan_s + slack, "{:?} vs list {}", b, listed.makespan_s);
        }
        prop_assert!(b.new_lb + slack >= b.cp_len.max(b.t_work).max(b.mod_cp), "{:?}", b);
    }

    #[test]
    fn the_search_is_deterministic_with_and_without_parallelism(
        job in arb_job(),
        cluster in arb_cluster(),
    ) {
        let parallel = plan(&job, &cluster, &PlannerConfig::default()).unwrap();
        let sequential = plan(&job, &cluster, &PlannerConfig { parallel: false, ..PlannerConfig::default() }).unwrap();
        prop_assert_eq!(parallel, sequential);
    }

    #[test]
    fn replans_are_valid_and_cover_the_unfinished_tasks(
        job in arb_job(),
        cluster in arb_cluster(),
        finished_bits in any::<u64>(),
    ) {
        let finished = |t: TaskRef| (finished_bits >> ((t.stage * 5 + t.index) % 64)) & 1 == 1;
        let rest = plan_remaining(&job, &cluster, &PlannerConfig::default(), &finished).unwrap();
        prop_assert_eq!(check_schedule(&job, &cluster, &rest.schedule), Ok(()));
        let left: HashSet<TaskRef> = job.tasks().filter(|&t| !finished(t)).collect();
        assert_complete(&job, rest.order.iter().copied(), &left);
        for t in job.tasks().filter(|&t| finished(t)) {
            prop_assert_eq!(rest.pri_scores[t.stage()][t.index as usize], 0.0);
        }
    }
}
