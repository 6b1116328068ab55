//! Cross-policy tests: the papers' examples run through a small event-driven cluster model, and
//! property tests over random DAGs.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};

use fullerene_proto::messages::OfferKind;
use fullerene_proto::{ResourceKind, ResourceVec};
use proptest::prelude::*;

use crate::job::{Job, TaskRef};
use crate::policy::baselines::{BfsPolicy, CriticalPathPolicy, TetrisPolicy};
use crate::policy::scoring::DEFAULT_OVERBOOK_ALLOWANCE;
use crate::policy::{
    build, CarbyneParams, CarbynePolicy, GrapheneMatcher, JobPolicy, JobState, LeftoverAction,
    MatcherParams, OfferContext, PolicyKind, PolicyParams,
};

use crate::testkit::{cpus, cpus_and_mem, machine, rank_pri_scores, res, stage};

#[derive(Clone, Copy, Debug)]
struct Finish {
    time: f64,
    job: usize,
    task: TaskRef,
    machine: usize,
}

impl PartialEq for Finish {
    fn eq(&self, other: &Finish) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Finish {}
impl PartialOrd for Finish {
    fn partial_cmp(&self, other: &Finish) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Finish {
    fn cmp(&self, other: &Finish) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.job.cmp(&self.job))
            .then(other.task.cmp(&self.task))
    }
}

/// One job's seat in the toy cluster.
struct Seat {
    job: Job,
    state: JobState,
    policy: Box<dyn JobPolicy>,
    launched: usize,
    /// (launch time, task), in launch order.
    log: Vec<(f64, TaskRef)>,
}

impl Seat {
    fn new(job: Job, policy: Box<dyn JobPolicy>) -> Seat {
        Seat {
            state: JobState::new(&job),
            job,
            policy,
            launched: 0,
            log: Vec::new(),
        }
    }
}

/// How the toy allocator hands out machines.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Allocation {
    /// Slot fairness, one task at a time (Graphene §2.2's description of the capacity scheduler
    /// and Fig. 8's per-task loop): the job with the fewest running tasks (then the fewest
    /// launched so far, then the lowest index) is offered the machine and its first choice is
    /// launched; repeat until no job launches anything.
    SlotFairPerTask,
    /// Pseudocode 1's steps: each job is offered what is left of its fixed share of the machine
    /// (a regular offer); what jobs *yield* is pooled and offered as leftovers, to the job with
    /// the least remaining work first. Declined resources are not redistributed: the strict
    /// fair sharing of Carbyne Fig. 2b.
    FixedSharesWithLeftovers,
}

/// A toy event-driven cluster: one or more identical machines, jobs with their policies.
/// Returns each job's completion time. Asserts on every launch that the task is runnable and
/// that the machine's capacity holds (beyond the overbooking allowance only on fungible kinds).
fn run_cluster(
    seats: &mut [Seat],
    machines: usize,
    capacity: ResourceVec,
    allocation: Allocation,
    tick_s: f64,
) -> Vec<f64> {
    run_cluster_with_losses(seats, machines, capacity, allocation, tick_s, 0)
}

/// [`run_cluster`], where every `lose_every`-th task end (0: none) is a loss instead of a
/// finish, for tasks on their first attempt.
fn run_cluster_with_losses(
    seats: &mut [Seat],
    machines: usize,
    capacity: ResourceVec,
    allocation: Allocation,
    tick_s: f64,
    lose_every: usize,
) -> Vec<f64> {
    let mut ends = 0usize;
    let cluster = capacity.scale(machines as f64);
    let mut used = vec![ResourceVec::ZERO; machines];
    let mut events: BinaryHeap<Finish> = BinaryHeap::new();
    let mut now = 0.0;
    let mut guard = 0;
    while seats.iter().any(|s| !s.state.is_complete()) {
        guard += 1;
        assert!(guard < 100_000, "toy cluster does not make progress");
        let active: Vec<usize> = (0..seats.len())
            .filter(|&j| !seats[j].state.is_complete())
            .collect();
        let share = cluster.scale(1.0 / active.len() as f64);
        for m in 0..machines {
            match allocation {
                Allocation::SlotFairPerTask => loop {
                    let mut order = active.clone();
                    order.sort_by_key(|&j| (seats[j].state.num_running(), seats[j].launched, j));
                    let mut launched_any = false;
                    for j in order {
                        let offer = OfferContext {
                            machine: m,
                            free: capacity.saturating_sub(&used[m]),
                            capacity,
                            kind: OfferKind::Regular,
                            now_s: now,
                            cluster_capacity: cluster,
                            fair_share: share,
                            guaranteed: false,
                        };
                        let seat = &mut seats[j];
                        let d = seat.policy.on_offer(&seat.job, &seat.state, &offer);
                        if let Some(&t) = d.launch.first() {
                            launch(seat, j, t, m, now, &mut used, capacity, &mut events);
                            launched_any = true;
                            break;
                        }
                    }
                    if !launched_any {
                        break;
                    }
                },
                Allocation::FixedSharesWithLeftovers => {
                    let machine_share = capacity.scale(1.0 / active.len() as f64);
                    let mut yielded = false;
                    for &j in &active {
                        let seat = &mut seats[j];
                        let held = running_demand(seat, m);
                        let free = machine_share
                            .saturating_sub(&held)
                            .min(&capacity.saturating_sub(&used[m]));
                        let offer = OfferContext {
                            machine: m,
                            free,
                            capacity,
                            kind: OfferKind::Regular,
                            now_s: now,
                            cluster_capacity: cluster,
                            fair_share: share,
                            guaranteed: false,
                        };
                        let d = seat.policy.on_offer(&seat.job, &seat.state, &offer);
                        check_fits(&seat.job, &d.launch, &free, &capacity);
                        for t in d.launch {
                            launch(seat, j, t, m, now, &mut used, capacity, &mut events);
                        }
                        yielded |= d.leftover == LeftoverAction::Yield;
                    }
                    if yielded {
                        let mut srtf = active.clone();
                        srtf.sort_by(|&a, &b| {
                            let wa = seats[a].state.remaining_work(&seats[a].job, &cluster);
                            let wb = seats[b].state.remaining_work(&seats[b].job, &cluster);
                            wa.total_cmp(&wb).then(a.cmp(&b))
                        });
                        for j in srtf {
                            let free = capacity.saturating_sub(&used[m]);
                            let offer = OfferContext {
                                machine: m,
                                free,
                                capacity,
                                kind: OfferKind::Leftover,
                                now_s: now,
                                cluster_capacity: cluster,
                                fair_share: share,
                                guaranteed: false,
                            };
                            let seat = &mut seats[j];
                            let d = seat.policy.on_offer(&seat.job, &seat.state, &offer);
                            check_fits(&seat.job, &d.launch, &free, &capacity);
                            for t in d.launch {
                                launch(seat, j, t, m, now, &mut used, capacity, &mut events);
                            }
                        }
                    }
                }
            }
        }
        // Advance to the next finish, or by a tick when nothing finishes sooner (altruistic
        // jobs may wait for their tasks' latest start with nothing running).
        let next = events.peek().map(|e| e.time);
        now = match next {
            Some(t) if t <= now + tick_s => t,
            _ => now + tick_s,
        };
        while events.peek().is_some_and(|e| e.time <= now + 1e-9) {
            let Some(e) = events.pop() else { break };
            let seat = &mut seats[e.job];
            used[e.machine] = used[e.machine].saturating_sub(&seat.job.demand(e.task));
            ends += 1;
            if lose_every > 0 && ends % lose_every == 0 && seat.state.attempts(e.task) == 0 {
                seat.state.mark_lost(e.task);
                assert!(seat.state.is_runnable(e.task));
            } else {
                seat.state.mark_finished(&seat.job, e.task, e.time);
            }
        }
    }
    seats
        .iter()
        .map(|s| s.state.completed_at().unwrap_or(f64::NAN))
        .collect()
}

fn running_demand(seat: &Seat, machine: usize) -> ResourceVec {
    seat.state
        .running_tasks()
        .filter(|&(_, m, _)| m == machine)
        .fold(ResourceVec::ZERO, |acc, (t, _, _)| acc + seat.job.demand(t))
}

fn check_fits(job: &Job, bundle: &[TaskRef], free: &ResourceVec, capacity: &ResourceVec) {
    let total = bundle
        .iter()
        .fold(ResourceVec::ZERO, |acc, t| acc + job.demand(*t));
    let mut room = *free;
    for k in ResourceKind::ALL.into_iter().filter(|k| k.is_fungible()) {
        room[k] += DEFAULT_OVERBOOK_ALLOWANCE * capacity[k];
    }
    assert!(total.fits_in(&room), "bundle {total} exceeds offer {free}");
}

#[allow(clippy::too_many_arguments)]
fn launch(
    seat: &mut Seat,
    j: usize,
    t: TaskRef,
    m: usize,
    now: f64,
    used: &mut [ResourceVec],
    capacity: ResourceVec,
    events: &mut BinaryHeap<Finish>,
) {
    assert!(
        seat.state.is_runnable(t),
        "{t:?} launched while not runnable"
    );
    for &p in &seat.job.stages[t.stage()].parents {
        assert!(seat.state.is_stage_complete(p), "dependency violated");
    }
    seat.state.mark_launched(t, m, now);
    seat.launched += 1;
    seat.log.push((now, t));
    used[m] += seat.job.demand(t);
    assert!(
        used[m].fits_with_overbooking(&capacity, DEFAULT_OVERBOOK_ALLOWANCE),
        "machine {m} over capacity: {}",
        used[m]
    );
    events.push(Finish {
        time: now + seat.job.duration(t),
        job: j,
        task: t,
        machine: m,
    });
}

// ---------------------------------------------------------------------------------------------
// Graphene Fig. 2 / Fig. 3
// ---------------------------------------------------------------------------------------------

/// Graphene's Fig. 2 DAG, reconstructed (the figure itself is not in the text). What the text
/// fixes: six tasks; t0, t2, t5 are long (duration ≈ T), t1, t3, t4 short (≈ εT); the capacity
/// is 1 for two resources; CP lengths t0 = T(1+5ε), t1 = T(1+ε), t3 = T(1+4ε); Tetris' packing
/// scores (demand summed over both resources) t0 = .9, t1 = .85, t3 = .84, t2 = .8, t4 = .7,
/// t5 = .3; OPT runs t1 → t3 → {t4, t0} → {t0, t2, t5} in ≈T; CPSched runs
/// t0 → t3 → t4 → t5 → t1 → t2 and Tetris t0 → t1 → t3 → t2 → t4 → t5, both in 3T.
///
/// Our reconstruction satisfies all of it: edges t1 → t2 and t3 → t4 → t5; durations
/// t0 = T(1+5ε), t1 = t3 = t4 = εT, t2 = T, t5 = T(1+2ε) (which gives the CP lengths above);
/// demands (r1, r2): t0 = (.5, .4), t1 = (.8, .05), t2 = (.25, .55), t3 = (.78, .06),
/// t4 = (.22, .48), t5 = (.25, .05), chosen so that exactly the pairs the three schedules
/// imply cannot run together (t0 with t1 or t3; t1 with t3, t4 or t5; t2 with t3 or t4) and
/// t0 + t2 + t5 fill the machine.
fn graphene_fig2_job(name: &str) -> Job {
    const T: f64 = 10.0;
    const EPS: f64 = 0.01;
    Job::new(
        name,
        "g",
        None,
        vec![
            stage(0, &[], &[T * (1.0 + 5.0 * EPS)], cpus_and_mem(0.5, 0.4)),
            stage(1, &[], &[EPS * T], cpus_and_mem(0.8, 0.05)),
            stage(2, &[1], &[T], cpus_and_mem(0.25, 0.55)),
            stage(3, &[], &[EPS * T], cpus_and_mem(0.78, 0.06)),
            stage(4, &[3], &[EPS * T], cpus_and_mem(0.22, 0.48)),
            stage(5, &[4], &[T * (1.0 + 2.0 * EPS)], cpus_and_mem(0.25, 0.05)),
        ],
    )
    .expect("valid job")
}

/// Graphene's preferred order for the DAG (Graphene §2.2, "Online"): t1, t3, t4, t0, t2, t5,
/// as priScores 1 − rank/6 (tech report §5).
fn graphene_fig2_pri_scores() -> Vec<Vec<f64>> {
    let order = [1usize, 3, 4, 0, 2, 5];
    let mut pri = vec![vec![0.0]; 6];
    for (rank, &t) in order.iter().enumerate() {
        pri[t] = vec![1.0 - rank as f64 / 6.0];
    }
    pri
}

fn machine_1x1() -> ResourceVec {
    res("cpus=1,mem_mib=1")
}

fn fig2_policy(name: &str, job: &Job) -> Box<dyn JobPolicy> {
    match name {
        "graphene" => Box::new(GrapheneMatcher::new(
            graphene_fig2_pri_scores(),
            MatcherParams::default(),
        )),
        "cp" => Box::new(CriticalPathPolicy::new(job)),
        "tetris" => Box::new(TetrisPolicy::new(job)),
        "bfs" => Box::new(BfsPolicy::new(job)),
        _ => unreachable!("test policy name"),
    }
}

fn run_fig2(name: &str, jobs: usize) -> (Vec<f64>, Vec<Vec<(f64, TaskRef)>>) {
    let mut seats: Vec<Seat> = (0..jobs)
        .map(|j| {
            let job = graphene_fig2_job(&format!("j{j}"));
            let policy = fig2_policy(name, &job);
            Seat::new(job, policy)
        })
        .collect();
    let jct = run_cluster(
        &mut seats,
        1,
        machine_1x1(),
        Allocation::SlotFairPerTask,
        1e6,
    );
    (jct, seats.into_iter().map(|s| s.log).collect())
}

fn stages_launched(log: &[(f64, TaskRef)]) -> Vec<(f64, u32)> {
    log.iter()
        .map(|(t, r)| ((t * 1e6).round() / 1e6, r.stage))
        .collect()
}

/// Graphene Fig. 2's table, through the intra-job policies on one machine: Graphene's matcher
/// with the preferred order follows OPT (t1 → t3 → {t4, t0} → {t0, t2, t5}, ≈ T), CPSched and
/// Tetris follow the orders and take the 3T the table shows.
#[test]
fn graphene_fig2_single_job_orders_and_completion_times() {
    let t = 10.0;
    let (jct, log) = run_fig2("graphene", 1);
    assert_eq!(
        stages_launched(&log[0]),
        vec![(0.0, 1), (0.1, 3), (0.2, 4), (0.2, 0), (0.3, 2), (0.3, 5)]
    );
    assert!(jct[0] < 1.1 * t, "graphene: {}", jct[0]);

    let (jct, log) = run_fig2("cp", 1);
    let order: Vec<u32> = log[0].iter().map(|(_, r)| r.stage).collect();
    assert_eq!(order, vec![0, 3, 4, 5, 1, 2]);
    assert!(jct[0] > 2.9 * t && jct[0] < 3.2 * t, "cp: {}", jct[0]);

    let (jct, log) = run_fig2("tetris", 1);
    let order: Vec<u32> = log[0].iter().map(|(_, r)| r.stage).collect();
    assert_eq!(order, vec![0, 1, 3, 2, 4, 5]);
    assert!(jct[0] > 2.9 * t && jct[0] < 3.2 * t, "tetris: {}", jct[0]);
}

/// Graphene Fig. 3: two jobs with Fig. 2's DAG share one machine under slot fairness. The
/// paper reports average JCT / makespan of 2T / 2T for Graphene, 3.5T / 4T for CPSched and
/// 2.5T / 3T for the capacity scheduler with breadth-first order. With our reconstruction of
/// the DAG (see [`graphene_fig2_job`]) and the allocator modelled as one slot at a time to the
/// job with fewer running tasks, Graphene and CPSched land within a few εT of the paper's
/// numbers; CS reaches the paper's 3T makespan but a 3.1T average (its two jobs finish
/// together rather than 2T and 3T apart), so for CS we assert the makespan and that Graphene
/// beats it.
#[test]
fn graphene_fig3_two_jobs_under_slot_fairness() {
    let t = 10.0;
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (graphene, log) = run_fig2("graphene", 2);
    // Fairness interleaves the two jobs' tasks, yet each job still starts in its preferred
    // order t1, t3, t4 (the short tasks that unlock the long ones).
    for l in &log {
        let order: Vec<u32> = l.iter().map(|(_, r)| r.stage).take(3).collect();
        assert_eq!(order, vec![1, 3, 4]);
    }
    assert!(avg(&graphene) < 2.15 * t, "graphene avg {graphene:?}");
    assert!(max(&graphene) < 2.2 * t, "graphene makespan {graphene:?}");

    let (cp, _) = run_fig2("cp", 2);
    assert!((avg(&cp) - 3.5 * t).abs() < 0.2 * t, "cp avg {cp:?}");
    assert!((max(&cp) - 4.0 * t).abs() < 0.2 * t, "cp makespan {cp:?}");

    let (cs, _) = run_fig2("bfs", 2);
    assert!((max(&cs) - 3.0 * t).abs() < 0.2 * t, "cs makespan {cs:?}");
    // "Graphene's average job completion time and makespan improve by 25% to 75% and 50% to
    // 100% respectively depending on the compared baseline" (Fig. 3's caption).
    for (name, other) in [("cp", &cp), ("cs", &cs)] {
        assert!(avg(other) >= 1.25 * avg(&graphene), "{name} avg {other:?}");
        assert!(
            max(other) >= 1.4 * max(&graphene),
            "{name} makespan {other:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Carbyne Fig. 2
// ---------------------------------------------------------------------------------------------

/// Carbyne's Fig. 2 jobs, reconstructed from §2.1 and §3.3.3–3.3.4 (the figure is not in the
/// text): one resource of capacity 1, each job's share 0.5. J1 has S0 (2 tasks of 0.04 for 1
/// time unit: "0.08 for S0's tasks"), S1 (3 tasks of 0.21 for 1 unit: two run with S0's at
/// time 0 under aggressive scheduling, one is postponed) and the barrier S2 after both, which
/// "can only start after 2 time units" and ends at 2.1 (we give it one task of 0.1 for 0.1).
/// J2 has one stage of 2 tasks of 0.29 for 1 unit ("its fair share of 0.5 less the resource
/// used by one task in its S0 of 0.29"). These reproduce every number the paper gives: J1's
/// leftover 0.29 and J2's 0.21 at time 0, average JCT 2.05 aggressive and 1.55 altruistic.
fn carbyne_fig2_jobs() -> Vec<Job> {
    let j1 = Job::new(
        "J1",
        "g",
        None,
        vec![
            stage(0, &[], &[1.0; 2], cpus(0.04)),
            stage(1, &[], &[1.0; 3], cpus(0.21)),
            stage(2, &[0, 1], &[0.1], cpus(0.1)),
        ],
    )
    .expect("valid job");
    let j2 = Job::new("J2", "g", None, vec![stage(0, &[], &[1.0; 2], cpus(0.29))]).expect("valid");
    vec![j1, j2]
}

fn carbyne_fig2(altruistic: bool) -> (Vec<f64>, Vec<Vec<(f64, TaskRef)>>) {
    let mut seats: Vec<Seat> = carbyne_fig2_jobs()
        .into_iter()
        .map(|job| {
            let inner = Box::new(TetrisPolicy::new(&job));
            let policy: Box<dyn JobPolicy> = if altruistic {
                Box::new(CarbynePolicy::new(
                    "carbyne",
                    &job,
                    inner,
                    CarbyneParams::default(),
                ))
            } else {
                inner
            };
            Seat::new(job, policy)
        })
        .collect();
    let jct = run_cluster(
        &mut seats,
        1,
        res("cpus=1"),
        Allocation::FixedSharesWithLeftovers,
        0.05,
    );
    (jct, seats.into_iter().map(|s| s.log).collect())
}

#[test]
fn carbyne_fig2_altruism_lowers_average_jct_from_2_05_to_1_55() {
    let (aggressive, _) = carbyne_fig2(false);
    assert!((aggressive[0] - 2.1).abs() < 1e-6, "{aggressive:?}");
    assert!((aggressive[1] - 2.0).abs() < 1e-6, "{aggressive:?}");

    let (altruistic, log) = carbyne_fig2(true);
    assert!((altruistic[0] - 2.1).abs() < 1e-6, "{altruistic:?}");
    assert!((altruistic[1] - 1.0).abs() < 1e-6, "{altruistic:?}");
    assert!(((altruistic[0] + altruistic[1]) / 2.0 - 1.55).abs() < 1e-6);
    // At time 0: J1 runs one S1 task from its share and a second from leftovers (§3.3.4:
    // "one more task of stage S1 of J1"), postponing S0; J2 runs both its tasks.
    let at0 = |l: &[(f64, TaskRef)]| -> Vec<u32> {
        l.iter()
            .filter(|(t, _)| *t == 0.0)
            .map(|(_, r)| r.stage)
            .collect()
    };
    assert_eq!(at0(&log[0]), vec![1, 1]);
    assert_eq!(at0(&log[1]), vec![0, 0]);
}

/// J1 of Carbyne's Fig. 2 (see [`carbyne_fig2_jobs`]), nothing of it run yet.
fn carbyne_fig2_j1() -> (Job, JobState) {
    let j1 = carbyne_fig2_jobs().swap_remove(0);
    let state = JobState::new(&j1);
    (j1, state)
}

/// Carbyne with `params` over Tetris for `job`.
fn carbyne_over_tetris(job: &Job, params: CarbyneParams) -> CarbynePolicy {
    CarbynePolicy::new("carbyne", job, Box::new(TetrisPolicy::new(job)), params)
}

/// An offer of `kind` at time 0 of the whole one-cpu machine of Carbyne's Fig. 2, whose fair
/// share is half of it.
fn carbyne_fig2_offer(kind: OfferKind) -> OfferContext {
    OfferContext {
        machine: 0,
        free: res("cpus=1"),
        capacity: res("cpus=1"),
        kind,
        now_s: 0.0,
        cluster_capacity: res("cpus=1"),
        fair_share: res("cpus=0.5"),
        guaranteed: false,
    }
}

#[test]
fn carbyne_plans_t_k_and_yields_what_need_not_start_now() {
    let (job, state) = carbyne_fig2_j1();
    let j1 = &job;
    let mut carbyne = carbyne_over_tetris(j1, CarbyneParams::default());
    // T_k with a share of 0.5: S0 and S1 take two rounds, S2 ends at 2.1.
    let due = carbyne
        .tasks_to_start_now(j1, &state, &carbyne_fig2_offer(OfferKind::Regular))
        .expect("a plan");
    assert!((carbyne.planned_completion().unwrap_or(0.0) - 2.1).abs() < 1e-9);
    // Reverse packing from 2.1: only one S1 task must start now.
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].stage, 1);
    let regular = carbyne.on_offer(j1, &state, &carbyne_fig2_offer(OfferKind::Regular));
    assert_eq!(regular.launch, due);
    assert_eq!(regular.leftover, LeftoverAction::Yield);
    // On leftovers the job is greedy: all five runnable tasks fit in the machine.
    let leftover = carbyne.on_offer(j1, &state, &carbyne_fig2_offer(OfferKind::Leftover));
    assert_eq!(leftover.launch.len(), 5);
    assert_eq!(leftover.leftover, LeftoverAction::Decline);
    // So it is on a reservation's guaranteed capacity, which is not its fair share to give.
    let guaranteed = OfferContext {
        guaranteed: true,
        ..carbyne_fig2_offer(OfferKind::Regular)
    };
    let reserved = carbyne.on_offer(j1, &state, &guaranteed);
    assert_eq!(reserved.launch.len(), 5);
    assert_eq!(reserved.leftover, LeftoverAction::Decline);
}

#[test]
fn carbyne_takes_everything_due_when_behind_its_plan() {
    let (job, state) = carbyne_fig2_j1();
    let j1 = &job;
    let mut carbyne = carbyne_over_tetris(j1, CarbyneParams::default());
    let mut offer = carbyne_fig2_offer(OfferKind::Regular);
    assert_eq!(carbyne.on_offer(j1, &state, &offer).launch.len(), 1);
    // Nothing launched and a whole time unit passed: the four tasks planned for time 1 are
    // now due as well.
    offer.now_s = 1.0;
    let d = carbyne.on_offer(j1, &state, &offer);
    assert_eq!(d.launch.len(), 5);
    // With altruism off (P(Altruism) = 0) Carbyne is its inner policy.
    let mut greedy = carbyne_over_tetris(
        j1,
        CarbyneParams {
            altruism_probability: 0.0,
            ..CarbyneParams::default()
        },
    );
    offer.now_s = 0.0;
    let d = greedy.on_offer(j1, &state, &offer);
    assert_eq!(d.launch.len(), 5);
    assert_eq!(d.leftover, LeftoverAction::Decline);
}

#[test]
fn carbyne_replans_after_a_loss_and_after_finishes() {
    let (job, mut state) = carbyne_fig2_j1();
    let j1 = &job;
    let mut carbyne = carbyne_over_tetris(
        j1,
        CarbyneParams {
            replan_fraction: 0.0,
            ..CarbyneParams::default()
        },
    );
    let mut offer = carbyne_fig2_offer(OfferKind::Regular);
    let first = carbyne.on_offer(j1, &state, &offer).launch;
    assert_eq!(first.len(), 1);
    state.mark_launched(first[0], 0, 0.0);
    // The due task is running: nothing else is due yet.
    offer.now_s = 0.5;
    assert!(carbyne.on_offer(j1, &state, &offer).launch.is_empty());
    // Lost at 0.5: the job is now behind; the re-plan makes it due again at once (its latest
    // start was 0), with the rest.
    state.mark_lost(first[0]);
    let again = carbyne.on_offer(j1, &state, &offer).launch;
    assert!(again.contains(&first[0]), "{again:?}");
    assert!(carbyne.planned_completion().unwrap_or(0.0) > 2.1 + 0.4);
    // After every finish (replan_fraction 0) T_k is re-estimated from the new state.
    for t in &again {
        state.mark_launched(*t, 0, 0.5);
    }
    for t in &again {
        state.mark_finished(j1, *t, 1.5);
    }
    offer.now_s = 1.5;
    let _ = carbyne.on_offer(j1, &state, &offer);
    let t_k = carbyne.planned_completion().unwrap_or(0.0);
    assert!(t_k > 1.5 && t_k < 3.7, "T_k {t_k}");
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

/// A random DAG of 1–6 stages, each with 1–6 tasks that fit an empty reference machine
/// (some using network bandwidth, so that Graphene's overbooking comes into play).
fn arb_job() -> impl Strategy<Value = Job> {
    let stage_strategy = (
        prop::collection::vec(0.5f64..20.0, 1..6),
        1u32..=8,
        1u32..=24,
        0u32..=8,
        prop::collection::vec(any::<bool>(), 6),
    );
    prop::collection::vec(stage_strategy, 1..6).prop_map(|stages| {
        let specs = stages
            .into_iter()
            .enumerate()
            .map(|(i, (durations, cpus, mem_gib, net_tenths, parent_bits))| {
                let parents: Vec<u32> =
                    (0..i as u32).filter(|&p| parent_bits[p as usize]).collect();
                let demand = ResourceVec::from_pairs(&[
                    (ResourceKind::Cpus, f64::from(cpus)),
                    (ResourceKind::MemMib, f64::from(mem_gib) * 1024.0),
                    (ResourceKind::NetMbps, f64::from(net_tenths) * 1000.0),
                ]);
                stage(i as u32, &parents, &durations, demand)
            })
            .collect();
        Job::new("random", "g", None, specs).expect("random DAGs are valid")
    })
}

fn policy_for(kind: PolicyKind, job: &Job) -> Box<dyn JobPolicy> {
    // Hand-made priScores: a reverse topological rank, with a tie-break by task index.
    let pri = kind.needs_pri_scores().then(|| rank_pri_scores(job));
    build(kind, job, pri, &PolicyParams::default()).expect("policy builds")
}

proptest! {
    // 48 cases by default (two full policy sweeps each); PROPTEST_CASES raises it.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    /// On arbitrary progress states and offers, every policy's bundle holds only runnable
    /// tasks, no task twice, and fits the offer (only Graphene may overbook, only on disk and
    /// network, only within the allowance).
    #[test]
    fn bundles_are_runnable_distinct_and_fit(
        job in arb_job(),
        steps in prop::collection::vec((0u8..3, any::<u16>()), 0..40),
        free_frac in prop::collection::vec(0.0f64..=1.0, 4),
        leftover in any::<bool>(),
        share_frac in 0.05f64..=1.0,
    ) {
        let capacity = machine();
        let mut state = JobState::new(&job);
        // Random progress: launch, finish or lose tasks.
        for (i, (op, pick)) in steps.into_iter().enumerate() {
            let now = i as f64;
            match op {
                0 => {
                    let runnable: Vec<TaskRef> = state.runnable().collect();
                    if !runnable.is_empty() {
                        state.mark_launched(runnable[pick as usize % runnable.len()], pick as usize % 3, now);
                    }
                }
                1 => {
                    let running: Vec<TaskRef> = state.running_tasks().map(|r| r.0).collect();
                    if !running.is_empty() {
                        state.mark_finished(&job, running[pick as usize % running.len()], now);
                    }
                }
                _ => {
                    let running: Vec<TaskRef> = state.running_tasks().map(|r| r.0).collect();
                    if !running.is_empty() {
                        state.mark_lost(running[pick as usize % running.len()]);
                    }
                }
            }
        }
        let mut free = capacity;
        for (k, f) in [ResourceKind::Cpus, ResourceKind::MemMib, ResourceKind::DiskMbps, ResourceKind::NetMbps]
            .into_iter()
            .zip(free_frac)
        {
            free[k] = (capacity[k] * f).floor();
        }
        let offer = OfferContext {
            machine: 1,
            free,
            capacity,
            kind: if leftover { OfferKind::Leftover } else { OfferKind::Regular },
            now_s: 40.0,
            cluster_capacity: capacity.scale(3.0),
            fair_share: capacity.scale(3.0 * share_frac),
            guaranteed: false,
        };
        for kind in PolicyKind::ALL {
            let mut policy = policy_for(kind, &job);
            let d = policy.on_offer(&job, &state, &offer);
            // The simulator hands a policy that says it does not read A_k a zero share.
            prop_assert_eq!(policy.reads_fair_share(), kind.is_altruistic(), "{}", kind);
            if !policy.reads_fair_share() {
                let blind = OfferContext { fair_share: ResourceVec::ZERO, ..offer.clone() };
                let d_blind = policy_for(kind, &job).on_offer(&job, &state, &blind);
                prop_assert_eq!(&d_blind, &d, "{} reads the share it says it ignores", kind);
            }
            let distinct: BTreeSet<TaskRef> = d.launch.iter().copied().collect();
            prop_assert_eq!(distinct.len(), d.launch.len(), "{} launched a task twice", kind);
            for t in &d.launch {
                prop_assert!(state.is_runnable(*t), "{} chose {:?}, not runnable", kind, t);
            }
            let total = d.launch.iter().fold(ResourceVec::ZERO, |acc, t| acc + job.demand(*t));
            if kind.needs_pri_scores() {
                prop_assert!(
                    total.fits_with_overbooking(&free, 0.0) || {
                        let mut room = free;
                        for k in ResourceKind::ALL.into_iter().filter(|k| k.is_fungible()) {
                            room[k] += DEFAULT_OVERBOOK_ALLOWANCE * capacity[k];
                        }
                        total.fits_in(&room)
                    },
                    "{} bundle {} exceeds {} beyond the allowance", kind, total, free
                );
            } else {
                prop_assert!(total.fits_in(&free), "{} bundle {} exceeds {}", kind, total, free);
            }
            // Work conservation for the greedy policies: nothing runnable still fits.
            if !kind.is_altruistic() || leftover {
                let rest = free.saturating_sub(&total);
                for t in state.runnable().filter(|t| !distinct.contains(t)) {
                    prop_assert!(!job.demand(t).fits_in(&rest), "{} left {:?} out", kind, t);
                }
            }
        }
    }

    /// Whole runs on a small cluster: every policy completes the job, never launches a task
    /// before its parents finished, never exceeds a machine's capacity beyond the overbooking
    /// allowance, with tasks lost and retried along the way.
    #[test]
    fn whole_runs_respect_dependencies_and_capacity(job in arb_job(), kind_index in 0usize..9) {
        let kind = PolicyKind::ALL[kind_index];
        let policy = policy_for(kind, &job);
        let mut seats = vec![Seat::new(job.clone(), policy), Seat::new(job.clone(), policy_for(kind, &job))];
        let allocation = if kind.is_altruistic() {
            Allocation::FixedSharesWithLeftovers
        } else {
            Allocation::SlotFairPerTask
        };
        let jct = run_cluster_with_losses(&mut seats, 2, machine(), allocation, 0.5, 5);
        for (s, t) in seats.iter().zip(&jct) {
            prop_assert!(s.state.is_complete());
            prop_assert!(t.is_finite());
            let retries: usize = job.tasks().map(|t| s.state.attempts(t) as usize).sum();
            prop_assert_eq!(s.log.len(), job.num_tasks() + retries);
        }
    }
}
