//! SLA jobs for the reservation comparison (issue 17, point 7; Rayon §6): a job with a deadline
//! reserves capacity for its DAG at arrival, and the plan (GREE or GREE-L) accepts or refuses it.
//!
//! Rayon §6 sets deadlines from each job's runtime measured alone on the cluster. Here the
//! runtime is the job's NewLB lower bound on the cluster (`lower_bounds`, tech report Fig. 9):
//! no schedule finishes sooner, it needs no extra simulation run, and it makes the deadline
//! `arrival + NewLB × (1 + slack)` at least as tight as Rayon's.
//!
//! The reservation is the RDL the SDK derives from a DAG for a framework
//! ([`fullerene_sdk::reserve::deadline_request`]: atoms per stage, in the DAG's
//! series-parallel form), inside `window(arrival, deadline)`: the simulator asks what a real
//! framework asks.

use fullerene_reservation::{
    Expr, Plan, PlanConfig, PolicyKind, Refusal, ReservationId, ReservationRequest,
};
use fullerene_scheduling::ResourceVec;
use fullerene_sdk::job::Job;
use fullerene_sdk::planner::PlanCluster;
use fullerene_sdk::reserve::deadline_request;
pub(crate) use fullerene_sdk::reserve::seconds_to_ms;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::{SimConfig, SimJob, SlaOptions};

/// One SLA job's request: its deadline and the reservation derived from its DAG.
#[derive(Clone, Debug, PartialEq)]
pub struct SlaRequest {
    /// Arrival, wall-clock milliseconds of the simulation.
    pub arrival_ms: u64,
    /// Deadline, wall-clock milliseconds of the simulation.
    pub deadline_ms: u64,
    /// `window(atom(...), s=0, f=deadline − arrival)`, anchored at the arrival.
    pub expr: Expr,
}

/// The SLA request of `job` arriving at `arrival_s` on `cluster`, with deadline
/// `arrival + NewLB × (1 + slack)`. The plan counts time in quanta of `quantum_ms`, so the
/// window, the lease and the work are rounded up to whole quanta (the plan refuses others).
/// The window opens `lead_ms` after the arrival (rounded up to quanta): the time the plan
/// follower needs to free reserved capacity on a full cluster (its grace period and a cycle),
/// so that no allocation is planned before it can be delivered. The request is shaped for the
/// plan's `placement` policy (see [`fullerene_sdk::reserve::job_reservation`]).
pub fn sla_request(
    job: &Job,
    arrival_s: f64,
    slack: f64,
    cluster: &PlanCluster,
    quantum_ms: u64,
    lead_ms: u64,
    placement: PolicyKind,
) -> SlaRequest {
    // The simulator's seconds are the workload's: a time scale of 1.
    let request = deadline_request(job, cluster, slack, 1.0, lead_ms, quantum_ms, placement);
    let arrival_ms = seconds_to_ms(arrival_s);
    SlaRequest {
        arrival_ms,
        deadline_ms: arrival_ms + request.window_ms,
        expr: request.expr,
    }
}

/// Admits `requests` (in arrival order) one by one into a fresh plan of `capacity` with
/// `policy`, each at its arrival, as Rayon's planner does: `Ok` for accepted, the refusal
/// otherwise. The plan's quantum is `quantum_ms`.
pub fn admit_in_order(
    requests: &[SlaRequest],
    policy: PolicyKind,
    capacity: ResourceVec,
    quantum_ms: u64,
) -> Vec<Result<(), Refusal>> {
    plan_in_order(requests, policy, capacity, quantum_ms).1
}

/// [`admit_in_order`], with the plan the accepted requests are in: request `k` (0-based) is
/// reservation `ReservationId(k)`.
pub fn plan_in_order(
    requests: &[SlaRequest],
    policy: PolicyKind,
    capacity: ResourceVec,
    quantum_ms: u64,
) -> (Plan, Vec<Result<(), Refusal>>) {
    let mut config = PlanConfig::new(0, policy);
    config.limits.quantum_ms = quantum_ms;
    let mut plan = Plan::new(config, capacity);
    let answers = requests
        .iter()
        .zip(0..)
        .map(|(request, k)| {
            let asked = ReservationRequest {
                id: ReservationId(k),
                user: "sla".into(),
                expr: request.expr.clone(),
            };
            plan.admit(asked, request.arrival_ms).map(|_| ())
        })
        .collect();
    (plan, answers)
}

/// Which of `count` jobs get a deadline: `round(fraction × count)` of them (`fraction` clamped
/// to [0, 1]), chosen by a shuffle seeded with `seed`.
pub fn choose_sla_jobs(count: usize, fraction: f64, seed: u64) -> Vec<bool> {
    let wanted = (fraction.clamp(0.0, 1.0) * count as f64).round() as usize;
    let mut order: Vec<usize> = (0..count).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut marked = vec![false; count];
    for &k in &order[..wanted.min(count)] {
        marked[k] = true;
    }
    marked
}

/// The SLA requests of an experiment's `jobs` (from [`prepare_jobs`](crate::prepare_jobs))
/// that `marked` selects, each with its index in `jobs`, in arrival order (ties by index), on
/// the cluster `config` describes, with the slack and the plan's quantum of `options`, each
/// window opening [`SlaOptions::lead_ms`] after its arrival, for a plan placed by `placement`
/// ([`sla_request`]).
pub fn sla_requests(
    file_jobs: &[Job],
    jobs: &[SimJob],
    marked: &[bool],
    config: &SimConfig,
    options: &SlaOptions,
    placement: PolicyKind,
) -> Vec<(usize, SlaRequest)> {
    let (slack, quantum_ms, lead_ms) =
        (options.slack, options.quantum_ms.max(1), options.lead_ms());
    let cluster = PlanCluster::new(config.machines, config.machine);
    let mut requests: Vec<(usize, SlaRequest)> = jobs
        .iter()
        .enumerate()
        .filter(|(k, _)| marked.get(*k).copied().unwrap_or(false))
        .filter_map(|(k, job)| {
            let dag = file_jobs.get(job.source)?;
            Some((
                k,
                sla_request(
                    dag,
                    job.arrival_s,
                    slack,
                    &cluster,
                    quantum_ms,
                    lead_ms,
                    placement,
                ),
            ))
        })
        .collect();
    requests.sort_by_key(|(k, request)| (request.arrival_ms, *k));
    requests
}

#[cfg(test)]
pub(crate) mod tests {
    use fullerene_reservation::Atom;
    use fullerene_sdk::job::StageSpec;
    use fullerene_sdk::testkit::{job, stage};

    use super::*;

    fn cpus(n: f64) -> ResourceVec {
        format!("cpus={n},mem_mib=1024").parse().expect("vec")
    }

    /// `n` cpus with memory to spare, so that cpus bound every figure.
    fn machine(n: f64) -> ResourceVec {
        format!("cpus={n},mem_mib=65536").parse().expect("vec")
    }

    /// A stage of one-cpu tasks of `durations`.
    pub(crate) fn one_cpu_stage(id: u32, parents: &[u32], durations: &[f64]) -> StageSpec {
        stage(id, parents, durations, cpus(1.0))
    }

    /// Two stages in a chain: 4 tasks of 10 s, then 2 tasks of 20 s, 1 cpu each.
    fn chain() -> Job {
        let stages = vec![
            one_cpu_stage(0, &[], &[10.0; 4]),
            one_cpu_stage(1, &[0], &[20.0; 2]),
        ];
        job("chain", "default", None, stages)
    }

    /// The atoms of each step of the request (its top-level `order` inside the window).
    fn steps(request: &SlaRequest) -> Vec<Vec<Atom>> {
        let Expr::Window { expr, .. } = &request.expr else {
            panic!("a window: {:?}", request.expr);
        };
        let Expr::Order(steps) = expr.as_ref() else {
            panic!("an order: {expr:?}");
        };
        steps
            .iter()
            .map(|step| step.atoms().into_iter().cloned().collect())
            .collect()
    }

    #[test]
    fn the_request_follows_the_dag_and_the_deadline_its_lower_bound() {
        let cluster = PlanCluster::new(1, machine(8.0));
        let job = chain();
        let request = sla_request(&job, 100.0, 0.5, &cluster, 1_000, 0, PolicyKind::Gree);
        // NewLB of the chain on 8 cpus is its critical path, 10 + 20 = 30 s.
        assert_eq!(request.arrival_ms, 100_000);
        assert_eq!(request.deadline_ms, 100_000 + 45_000);
        let Expr::Window { end_ms, .. } = &request.expr else {
            panic!("a window: {:?}", request.expr);
        };
        assert_eq!(*end_ms, 45_000);
        // One atom per stage, in DAG order: width, longest task and work of each.
        let atoms = steps(&request);
        let shape = |a: &Atom| (a.bundle, a.max_parallel, a.min_lease_ms, a.work_ms);
        assert_eq!(atoms.len(), 2);
        // Work 40 task-seconds each, asked 10% over.
        assert_eq!(shape(&atoms[0][0]), (cpus(1.0), 4, 10_000, 44_000));
        assert_eq!(shape(&atoms[1][0]), (cpus(1.0), 2, 20_000, 44_000));
        // In one-minute quanta everything rounds up to whole minutes.
        let coarse = sla_request(&job, 100.0, 0.5, &cluster, 60_000, 0, PolicyKind::Gree);
        assert_eq!(coarse.deadline_ms, 100_000 + 60_000);
        let coarse = steps(&coarse);
        assert_eq!(
            (coarse[1][0].min_lease_ms, coarse[1][0].work_ms),
            (60_000, 60_000)
        );
    }

    #[test]
    fn a_shared_stage_is_reserved_before_the_rest_and_branches_side_by_side() {
        // A diamond with a tail: 0 → {1, 2} → 3, and 4 alone (a root, level 0). By levels it
        // would span 9 + 7 + 5 s; cut after the shared stage 0, 5 + max(9, 7 + 5) s.
        let stages = vec![
            one_cpu_stage(0, &[], &[5.0; 2]),
            one_cpu_stage(1, &[0], &[5.0; 3]),
            one_cpu_stage(2, &[0], &[7.0]),
            one_cpu_stage(3, &[1, 2], &[5.0]),
            one_cpu_stage(4, &[], &[9.0; 5]),
        ];
        let job = job("diamond", "default", None, stages);
        let cluster = PlanCluster::new(1, machine(8.0));
        let request = sla_request(&job, 0.0, 1.0, &cluster, 1_000, 0, PolicyKind::Gree);
        let widths: Vec<Vec<u32>> = steps(&request)
            .iter()
            .map(|step| step.iter().map(|a| a.max_parallel).collect())
            .collect();
        // Stage 0, then stage 4 beside the branches 1 and 2 (shorter first) and their stage 3.
        assert_eq!(widths, vec![vec![2], vec![5, 3, 1, 1]]);
    }

    #[test]
    fn the_chosen_fraction_is_marked_the_same_for_a_seed() {
        let marked = choose_sla_jobs(200, 0.1, 7);
        assert_eq!(marked.iter().filter(|m| **m).count(), 20);
        assert_eq!(marked, choose_sla_jobs(200, 0.1, 7));
        assert_ne!(marked, choose_sla_jobs(200, 0.1, 8));
        assert!(choose_sla_jobs(10, 0.0, 7).iter().all(|m| !m));
    }

    #[test]
    fn requests_beyond_the_capacity_are_refused_and_the_rest_accepted() {
        let cluster = PlanCluster::new(1, machine(4.0));
        let job = chain();
        // Four copies arriving together, on 4 cpus: each needs 80 cpu-seconds within 60 s, four
        // need 320 of the window's 240, so the first fits and some later one is refused.
        let requests: Vec<SlaRequest> = (0..4)
            .map(|_| sla_request(&job, 0.0, 1.0, &cluster, 1_000, 0, PolicyKind::Gree))
            .collect();
        for policy in [PolicyKind::Gree, PolicyKind::GreeL] {
            let answers = admit_in_order(&requests, policy, machine(4.0), 1_000);
            assert!(answers[0].is_ok(), "{policy:?}: {:?}", answers[0]);
            assert!(
                answers.iter().any(Result::is_err),
                "{policy:?}: {answers:?}"
            );
        }
    }
}
