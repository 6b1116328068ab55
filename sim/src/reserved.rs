//! SLA jobs under reservations against a capacity-queue baseline (issue 17, point 7; Rayon §6.4).
//!
//! A fraction of the jobs get deadlines ([`crate::sla`]: `arrival + NewLB × (1 + slack)`) and,
//! under Rayon, reserve their DAG at arrival; the plan (GREE or GREE-L) accepts or refuses each.
//! Every run uses the same jobs, arrivals and seed, and the same intra-job policy
//! ([`SlaOptions::framework_policy`]); what differs is how the cluster is shared:
//!
//! - `rayon-gree`, `rayon-gree-l`: the allocator is YARN's capacity scheduler over two queues,
//!   `reserved` (the jobs whose reservation was accepted, weight 0: they get what the plan
//!   guarantees, and beyond it only capacity nobody else asks for, as a YARN reservation
//!   queue) and `best-effort` (everything else, refused SLA jobs included: Rayon runs them
//!   best-effort and counts them as rejected, which is what the report does). Each allocation
//!   cycle runs Rayon's plan follower (§5.2, [`PlanFollower`]): its per-reservation
//!   `offer_first` becomes the allocator's guarantee for the job's framework
//!   ([`StandaloneAllocator::set_guarantees`](fullerene_scheduling::allocator::StandaloneAllocator::set_guarantees)),
//!   and its preemptions kill tasks (best effort, and capacity lent to other reservations' jobs;
//!   back to pending, their work lost, counted).
//!   Idle reserved capacity is lent to best effort by the allocator itself: guarantees only
//!   come first, they hold nothing back.
//! - `capacity`: the same scheduler with a `production` queue (every SLA job: it knows no
//!   deadlines and accepts all) guaranteed a fixed share and a `best-effort` queue the rest,
//!   both elastic up to the whole cluster, no preemption. The share is tuned: each of
//!   [`SlaOptions::capacity_shares`] is run and the one that meets the most deadlines is
//!   reported (ties: the lower best-effort mean JCT), with the whole sweep alongside. That pick
//!   is made in hindsight, seed by seed; over several seeds ([`compare_sla_seeds`]) the
//!   baseline is also reported at the one share that meets the most deadlines over all of them,
//!   the fixed share an operator can set (the "fixed share for production").
//!
//! The workload's own groups are replaced by these queues in every run, so the comparison is
//! between sharing rules, not tenants.
//!
//! The simulation checker's invariants of a followed plan (checked at every allocation round,
//! failing the run with [`SimError::ReservationBroken`] at the time and reservation): the
//! reservations' guarantees now never exceed the plan's capacity now, and every reserved job
//! that is owed resources and has a runnable task that fits some machine is offered something
//! by the cycle. The first is the plan's promise; the second is the follower's, in the form a
//! two-level allocator can keep (it offers, the framework launches). Preemption after the
//! grace period is the follower's own rule, tested in its crate.

use std::fmt::Write as _;

use fullerene_reservation::{
    AgentRoom, Candidates, FollowerDecision, Plan, PlanFollower, PolicyKind as ReservationPolicy,
    Reservation, ReservationId, TaggedJob,
};
use fullerene_scheduling::allocator::{InterJobPolicy, DEFAULT_MAX_QUEUE_CAPACITY};
use fullerene_scheduling::ResourceVec;
use fullerene_sdk::policy::PolicyKind;
use fullerene_sdk::Job;
use rayon::prelude::*;
use serde::Serialize;

use crate::config::SimConfig;
use crate::error::SimError;
use crate::metrics::{JctStats, UtilizationTimeline};
use crate::policies::parse_name_list;
use crate::report::{aligned, Scenario, SimReport};
use crate::runner::{plan_sources, simulate_queued, Progress, ProgressFn, SimOutcome};
use crate::sla::{choose_sla_jobs, plan_in_order, sla_requests, SlaRequest};
use crate::study::{check_seeds, seeds_label, Spread};
use crate::workload::{prepare_jobs, SimJob};

/// Default fraction of jobs with deadlines: Rayon §6 takes "a conservative 5%"; the issue asks
/// for 5–10%, and 10% gives twice the SLA jobs to measure on.
pub const DEFAULT_DEADLINE_FRACTION: f64 = 0.1;

/// Default deadline slack: `deadline = arrival + NewLB × (1 + slack)`. NewLB is the job alone
/// on an idle cluster, far below what it takes in a busy one, so the slack is larger than
/// Rayon's 10% (which was over the jobs' measured resource needs).
pub const DEFAULT_SLACK: f64 = 1.0;

/// Default quantum of the plan: 100 ms. The steps of a DAG's request are strictly ordered in
/// whole quanta, and TPC-H jobs have many levels of sub-second tasks: with one-second quanta a
/// job of ten short levels needs ten seconds, and acceptance at 10 machines was 5–7 of 20 (GREE) where
/// 100 ms gives 12–16.
pub const DEFAULT_QUANTUM_MS: u64 = 100;

/// How often the follower runs while reserved jobs are in the system, besides the cycles that
/// events start (guarantees change at quantum starts, and it looks ahead by this much).
pub const FOLLOW_TICK_MS: u64 = 500;

/// Default grace period before the follower preempts tasks for a reservation: none,
/// as Rayon reclaims (§5.2: the follower preempts as soon as a reservation is owed what free
/// capacity cannot give it). Each reservation's window opens a grace period and a tick after its
/// job's arrival (the follower's lead), and GREE places each job just in time, so a grace is
/// time the job lacks at the end. On the SLA comparison (10 machines, 200 jobs, seeds 1–3), a
/// one-second grace had GREE accept 48 of 60 SLA jobs and meet 45; none accepts 52 and meets
/// all 52 (GREE-L: 34 of 34, now 39 of 39), at about twice the preemptions for about the same
/// lost work. With a 5 s grace, acceptance fell to 0–6 of 20.
pub const DEFAULT_GRACE_MS: u64 = 0;

/// The production shares the capacity baseline is tuned over: the whole range, so that the
/// baseline gets its best shot at its own aim (most deadlines met). With 0.1–0.5 only (the
/// sweep before), on 10 machines, 200 jobs, seeds 1–10, its picks met 176 of 200 deadlines
/// at a best-effort mean JCT of 16.52 s; over the whole range 186 at 16.73 s (a larger share
/// meets more deadlines and slows best effort: 0.1 met 152 at 16.25 s, 1.0 met 185 at
/// 16.86 s). The sweep is printed with the comparison, so the frontier is in view.
pub const DEFAULT_CAPACITY_SHARES: [f64; 6] = [0.1, 0.3, 0.5, 0.7, 0.9, 1.0];

const RESERVED_QUEUE: &str = "reserved";
const PRODUCTION_QUEUE: &str = "production";
const BEST_EFFORT_QUEUE: &str = "best-effort";

/// How a comparison shares the cluster between SLA and best-effort jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlaPolicy {
    /// Rayon: reservations planned by this placement policy and followed.
    Rayon(ReservationPolicy),
    /// YARN's capacity scheduler with a production queue at a tuned fixed share.
    Capacity,
}

impl SlaPolicy {
    /// Every policy, in the order of the issue.
    pub const ALL: [SlaPolicy; 3] = [
        SlaPolicy::Rayon(ReservationPolicy::Gree),
        SlaPolicy::Rayon(ReservationPolicy::GreeL),
        SlaPolicy::Capacity,
    ];

    /// The `--compare` name (`rayon-gree`, `rayon-gree-l`, `capacity`).
    pub const fn name(self) -> &'static str {
        match self {
            SlaPolicy::Rayon(ReservationPolicy::Gree) => "rayon-gree",
            SlaPolicy::Rayon(ReservationPolicy::GreeL) => "rayon-gree-l",
            SlaPolicy::Capacity => "capacity",
        }
    }
}

impl std::str::FromStr for SlaPolicy {
    type Err = SimError;

    fn from_str(name: &str) -> Result<SlaPolicy, SimError> {
        SlaPolicy::ALL
            .into_iter()
            .find(|p| p.name() == name.trim())
            .ok_or_else(|| SimError::InvalidConfig {
                reason: format!(
                    "unknown SLA policy `{name}` (known: rayon-gree, rayon-gree-l, capacity)"
                ),
            })
    }
}

/// Parses a `--compare` list of SLA policies (`rayon-gree,rayon-gree-l,capacity`), keeping its
/// order and dropping repeats and empty entries.
pub fn parse_sla_policy_list(list: &str) -> Result<Vec<SlaPolicy>, SimError> {
    parse_name_list(list)
}

/// What an SLA comparison runs besides the scenario ([`SimConfig`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SlaOptions {
    /// Fraction of jobs with deadlines (`--deadlines`).
    pub fraction: f64,
    /// Deadline slack over the job's NewLB.
    pub slack: f64,
    /// The plan's quantum, milliseconds.
    pub quantum_ms: u64,
    /// The follower's grace period before it preempts, milliseconds.
    pub grace_ms: u64,
    /// The intra-job policy every job runs.
    pub framework_policy: PolicyKind,
    /// The production shares the capacity baseline is tuned over.
    pub capacity_shares: Vec<f64>,
}

impl SlaOptions {
    /// How long after an SLA job's arrival its reservation's window opens: the follower
    /// reclaims a grace period and a tick ahead of a guarantee, so no allocation is planned
    /// sooner.
    pub fn lead_ms(&self) -> u64 {
        self.grace_ms + FOLLOW_TICK_MS
    }
}

impl Default for SlaOptions {
    /// The defaults above, with the critical-path intra-job policy (what Tez on YARN's
    /// capacity scheduler runs in [`crate::policies`]).
    fn default() -> SlaOptions {
        SlaOptions {
            fraction: DEFAULT_DEADLINE_FRACTION,
            slack: DEFAULT_SLACK,
            quantum_ms: DEFAULT_QUANTUM_MS,
            grace_ms: DEFAULT_GRACE_MS,
            framework_policy: PolicyKind::CriticalPath,
            capacity_shares: DEFAULT_CAPACITY_SHARES.to_vec(),
        }
    }
}

/// One SLA job's outcome in one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlaJobOutcome {
    /// The job.
    pub name: String,
    /// Arrival, seconds.
    pub arrival_s: f64,
    /// Deadline, seconds.
    pub deadline_s: f64,
    /// Completion, seconds.
    pub finish_s: f64,
    /// Its reservation was accepted (always, under the capacity baseline).
    pub accepted: bool,
    /// It finished by its deadline.
    pub met: bool,
}

/// One policy's figures in an SLA comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlaPolicyReport {
    /// `rayon-gree`, `rayon-gree-l` or `capacity`.
    pub policy: String,
    /// The capacity baseline's production share (the tuned one).
    pub production_share: Option<f64>,
    /// Jobs with deadlines.
    pub sla_jobs: usize,
    /// Of them, accepted.
    pub accepted: usize,
    /// `accepted / sla_jobs`, percent.
    pub accepted_pct: f64,
    /// Accepted jobs that met their deadline.
    pub met: usize,
    /// `met / accepted`, percent (100 when none was accepted).
    pub met_pct_of_accepted: f64,
    /// Refused jobs that met their deadline anyway, running best-effort.
    pub rejected_met: usize,
    /// Jobs without deadlines.
    pub best_effort_jobs: usize,
    /// Their mean JCT, seconds.
    pub best_effort_mean_jct_s: f64,
    /// Their nearest-rank median JCT, seconds.
    pub best_effort_median_jct_s: f64,
    /// Time-average CPU utilisation of the cluster (fraction).
    pub cpu_utilization: f64,
    /// Best-effort tasks killed for reservations.
    pub preemptions: u64,
    /// Seconds of work those tasks lost.
    pub preempted_work_s: f64,
    /// Checks of the reservation invariants passed.
    pub reservation_checks: u64,
    /// Every SLA job, in job order.
    pub sla: Vec<SlaJobOutcome>,
    /// The run's full report.
    pub run: SimReport,
}

/// One share the capacity baseline was tuned over.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacitySweepPoint {
    /// The production queue's share.
    pub share: f64,
    /// SLA jobs that met their deadline.
    pub met: usize,
    /// Best-effort mean JCT, seconds.
    pub best_effort_mean_jct_s: f64,
}

/// An SLA comparison (`fullerene sim --deadlines F --compare rayon-gree,rayon-gree-l,capacity`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlaComparison {
    /// The scenario (groups: the queues of the runs).
    pub scenario: Scenario,
    /// Fraction of jobs with deadlines.
    pub deadline_fraction: f64,
    /// Deadline slack over NewLB.
    pub slack: f64,
    /// The plan's quantum, milliseconds.
    pub quantum_ms: u64,
    /// The follower's grace period, milliseconds.
    pub grace_ms: u64,
    /// The intra-job policy of every job.
    pub framework_policy: String,
    /// The capacity baseline's tuning runs (empty without `capacity`).
    pub capacity_sweep: Vec<CapacitySweepPoint>,
    /// Per policy, in the order asked.
    pub policies: Vec<SlaPolicyReport>,
}

/// The allocator's queues for a run and, for Rayon, the plan it follows (read by the engine).
pub(crate) struct QueueSetup {
    pub(crate) policy: InterJobPolicy,
    pub(crate) weights: Vec<(String, f64)>,
    pub(crate) following: Option<Following>,
}

/// A plan the engine follows: the plan, Rayon's follower, and which reservation each job runs
/// in.
pub(crate) struct Following {
    plan: Plan,
    follower: PlanFollower,
    reservation_of: Vec<Option<ReservationId>>,
    tick_s: f64,
}

impl Following {
    /// The reservation job `j` runs in, if its request was accepted.
    pub(crate) fn reservation_of(&self, j: usize) -> Option<ReservationId> {
        self.reservation_of.get(j).copied().flatten()
    }

    /// The reservation `id` of the plan, if it holds one by that id.
    pub(crate) fn reservation(&self, id: ReservationId) -> Option<&Reservation> {
        self.plan.reservation(id)
    }

    /// The follower's next tick after `now_s` ([`FOLLOW_TICK_MS`]).
    pub(crate) fn next_tick_s(&self, now_s: f64) -> f64 {
        ((now_s / self.tick_s).floor() + 1.0) * self.tick_s
    }

    /// The follower's decision at `now_ms` ([`PlanFollower::follow_with`]: `candidates` is
    /// called, with each job's reservation, only on a shortfall), after checking that the
    /// reservations' guarantees now fit the plan's capacity now.
    pub(crate) fn follow(
        &mut self,
        now_s: f64,
        now_ms: u64,
        jobs: &[TaggedJob],
        agents: &[AgentRoom],
        candidates: impl FnOnce(&[Option<ReservationId>]) -> Candidates,
    ) -> Result<FollowerDecision, SimError> {
        let capacity = self
            .plan
            .capacity()
            .at(self.plan.quanta().containing(now_ms));
        let mut guaranteed = ResourceVec::ZERO;
        for reservation in self.plan.reservations() {
            guaranteed += self.plan.guaranteed_at(reservation.id, now_ms);
            if !guaranteed.fits_in(&capacity) {
                return Err(SimError::ReservationBroken {
                    now_s,
                    reservation: reservation.id.0,
                    what: format!(
                        "the guarantees up to it sum to {guaranteed}, beyond the plan's capacity {capacity}"
                    ),
                });
            }
        }
        let reservation_of = &self.reservation_of;
        Ok(self
            .follower
            .follow_with(&self.plan, now_ms, jobs, agents, || {
                candidates(reservation_of)
            }))
    }
}

/// One run of a comparison: its policy, its jobs (with their queues) and its setup.
struct QueuedRun {
    policy: SlaPolicy,
    share: Option<f64>,
    jobs: Vec<SimJob>,
    accepted: Vec<bool>,
    setup: QueueSetup,
}

/// Runs `policies` on the jobs of `file_jobs` selected, grouped and timed by `config`, a
/// fraction [`SlaOptions::fraction`] of them with deadlines (the same jobs in every run, chosen
/// by `config.seed`), and reports SLA acceptance and fulfilment, best-effort JCT, utilisation
/// and preemptions per policy (see the module documentation). The runs go in parallel.
pub fn compare_sla(
    file_jobs: &[Job],
    config: &SimConfig,
    policies: &[SlaPolicy],
    options: &SlaOptions,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SlaComparison, SimError> {
    let jobs = prepare_jobs(file_jobs, config)?;
    let marked = choose_sla_jobs(jobs.len(), options.fraction, config.seed);
    compare_marked(
        file_jobs, config, &jobs, &marked, policies, options, progress,
    )
}

/// [`compare_sla`] of prepared `jobs`, the `marked` ones with deadlines.
fn compare_marked(
    file_jobs: &[Job],
    config: &SimConfig,
    jobs: &[SimJob],
    marked: &[bool],
    policies: &[SlaPolicy],
    options: &SlaOptions,
    progress: Option<&ProgressFn<'_>>,
) -> Result<SlaComparison, SimError> {
    if policies.is_empty() {
        return Err(SimError::InvalidConfig {
            reason: "no SLA policy to compare".into(),
        });
    }
    let quantum_ms = options.quantum_ms.max(1);
    // Shaped for GREE: the deadlines do not depend on the placement policy, and GREE's run
    // asks these very requests.
    let requests = sla_requests(
        file_jobs,
        jobs,
        marked,
        config,
        options,
        ReservationPolicy::Gree,
    );
    let capacity = config.machine.scale(config.machines as f64);
    let scheduler = InterJobPolicy::CapacityScheduler {
        max_capacity: DEFAULT_MAX_QUEUE_CAPACITY,
    };
    let mut runs = Vec::new();
    for &policy in policies {
        match policy {
            SlaPolicy::Rayon(placement) => {
                let shaped;
                let requests = if placement == ReservationPolicy::Gree {
                    &requests
                } else {
                    shaped = sla_requests(file_jobs, jobs, marked, config, options, placement);
                    &shaped
                };
                let asked: Vec<SlaRequest> = requests.iter().map(|(_, r)| r.clone()).collect();
                let (plan, answers) = plan_in_order(&asked, placement, capacity, quantum_ms);
                let mut reservation_of = vec![None; jobs.len()];
                for ((k, _), (answer, id)) in requests.iter().zip(answers.iter().zip(0..)) {
                    if answer.is_ok() {
                        reservation_of[*k] = Some(ReservationId(id));
                    }
                }
                let accepted: Vec<bool> = reservation_of.iter().map(Option::is_some).collect();
                runs.push(QueuedRun {
                    policy,
                    share: None,
                    jobs: in_queues(jobs, &accepted, RESERVED_QUEUE),
                    accepted,
                    setup: QueueSetup {
                        policy: scheduler,
                        weights: vec![
                            (RESERVED_QUEUE.into(), 0.0),
                            (BEST_EFFORT_QUEUE.into(), 1.0),
                        ],
                        following: Some(Following {
                            plan,
                            // Reclaim a grace period and a tick ahead, so that the
                            // capacity is free when the plan's allocation begins.
                            follower: PlanFollower::new(options.grace_ms)
                                .with_lookahead(options.lead_ms()),
                            reservation_of,
                            tick_s: FOLLOW_TICK_MS as f64 / 1000.0,
                        }),
                    },
                });
            }
            SlaPolicy::Capacity => {
                for &share in &options.capacity_shares {
                    runs.push(QueuedRun {
                        policy,
                        share: Some(share),
                        jobs: in_queues(jobs, marked, PRODUCTION_QUEUE),
                        accepted: marked.to_vec(),
                        setup: QueueSetup {
                            policy: scheduler,
                            weights: vec![
                                (PRODUCTION_QUEUE.into(), share),
                                (BEST_EFFORT_QUEUE.into(), 1.0 - share),
                            ],
                            following: None,
                        },
                    });
                }
            }
        }
    }
    let kind = options.framework_policy;
    let plans = if kind.needs_pri_scores() {
        plan_sources(file_jobs, jobs, config, progress)?
            .plans()
            .to_vec()
    } else {
        Vec::new()
    };
    let outcomes: Vec<Result<(QueuedRun, SimOutcome), SimError>> = runs
        .into_par_iter()
        .map(|mut run| {
            let setup = std::mem::replace(
                &mut run.setup,
                QueueSetup {
                    policy: scheduler,
                    weights: Vec::new(),
                    following: None,
                },
            );
            let outcome = simulate_queued(
                file_jobs,
                &run.jobs,
                config,
                &kind.into(),
                &plans,
                setup,
                progress,
            )?;
            Ok((run, outcome))
        })
        .collect();
    let deadlines: Vec<Option<f64>> = {
        let mut d = vec![None; jobs.len()];
        for (k, request) in &requests {
            d[*k] = Some(request.deadline_ms as f64 / 1000.0);
        }
        d
    };
    let mut reports: Vec<(SlaPolicy, SlaPolicyReport)> = Vec::new();
    for outcome in outcomes {
        let (run, outcome) = outcome?;
        reports.push((
            run.policy,
            policy_report(&run, &outcome, marked, &deadlines),
        ));
    }
    let capacity_sweep: Vec<CapacitySweepPoint> = reports
        .iter()
        .filter(|(p, _)| *p == SlaPolicy::Capacity)
        .filter_map(|(_, r)| {
            Some(CapacitySweepPoint {
                share: r.production_share?,
                met: r.met,
                best_effort_mean_jct_s: r.best_effort_mean_jct_s,
            })
        })
        .collect();
    let tuned = reports
        .iter()
        .filter(|(p, _)| *p == SlaPolicy::Capacity)
        .map(|(_, r)| r)
        .max_by(|a, b| {
            baseline_order(
                (a.met, a.best_effort_mean_jct_s),
                (b.met, b.best_effort_mean_jct_s),
            )
        })
        .cloned();
    let mut chosen = Vec::with_capacity(policies.len());
    for &policy in policies {
        let report = match policy {
            SlaPolicy::Capacity => tuned.clone(),
            _ => reports
                .iter()
                .find(|(p, _)| *p == policy)
                .map(|(_, r)| r.clone()),
        };
        if let Some(report) = report {
            chosen.push(report);
        }
    }
    let scenario = chosen
        .first()
        .map(|r| r.run.scenario.clone())
        .ok_or_else(|| SimError::InvalidConfig {
            reason: "the capacity baseline needs at least one production share".into(),
        })?;
    Ok(SlaComparison {
        scenario,
        deadline_fraction: options.fraction,
        slack: options.slack,
        quantum_ms,
        grace_ms: options.grace_ms,
        framework_policy: kind.name().to_string(),
        capacity_sweep,
        policies: chosen,
    })
}

/// `jobs` with the `marked` ones in queue `queue` and the others in the best-effort queue.
fn in_queues(jobs: &[SimJob], marked: &[bool], queue: &str) -> Vec<SimJob> {
    jobs.iter()
        .zip(marked)
        .map(|(job, &m)| SimJob {
            group: if m { queue } else { BEST_EFFORT_QUEUE }.to_string(),
            ..job.clone()
        })
        .collect()
}

fn policy_report(
    run: &QueuedRun,
    outcome: &SimOutcome,
    marked: &[bool],
    deadlines: &[Option<f64>],
) -> SlaPolicyReport {
    let results = &outcome.report.jobs;
    let mut sla = Vec::new();
    let mut best_effort = Vec::new();
    for (k, result) in results.iter().enumerate() {
        match deadlines.get(k).copied().flatten() {
            Some(deadline_s) if marked.get(k).copied().unwrap_or(false) => {
                sla.push(SlaJobOutcome {
                    name: result.name.clone(),
                    arrival_s: result.arrival_s,
                    deadline_s,
                    finish_s: result.finish_s,
                    accepted: run.accepted.get(k).copied().unwrap_or(false),
                    // The deadline is rounded up to whole milliseconds, the finish is exact.
                    met: result.finish_s <= deadline_s + 1e-9,
                });
            }
            _ => best_effort.push(result.jct_s),
        }
    }
    let accepted = sla.iter().filter(|j| j.accepted).count();
    let met = sla.iter().filter(|j| j.accepted && j.met).count();
    let jct = JctStats::of(&best_effort);
    SlaPolicyReport {
        policy: run.policy.name().to_string(),
        production_share: run.share,
        sla_jobs: sla.len(),
        accepted,
        accepted_pct: percent(accepted, sla.len()),
        met,
        met_pct_of_accepted: percent(met, accepted),
        rejected_met: sla.iter().filter(|j| !j.accepted && j.met).count(),
        best_effort_jobs: best_effort.len(),
        best_effort_mean_jct_s: jct.avg,
        best_effort_median_jct_s: jct.median,
        cpu_utilization: outcome
            .report
            .utilization
            .get("cpus")
            .copied()
            .unwrap_or(0.0),
        preemptions: outcome.stats.preemptions,
        preempted_work_s: outcome.stats.preempted_work_s,
        reservation_checks: outcome.stats.reservation_checks,
        sla,
        run: outcome.report.clone(),
    }
}

/// The comparison as a plain-text table, one row per policy, then the capacity baseline's
/// tuning sweep.
pub fn render_sla_table(comparison: &SlaComparison) -> String {
    let mut rows = vec![vec![
        "policy".to_string(),
        "SLA accepted".into(),
        "met of accepted".into(),
        "refused, met".into(),
        "BE mean JCT s".into(),
        "BE median s".into(),
        "cpu util".into(),
        "preemptions".into(),
        "lost work s".into(),
    ]];
    for r in &comparison.policies {
        let name = match r.production_share {
            Some(share) => format!("{} (share {share})", r.policy),
            None => r.policy.clone(),
        };
        rows.push(vec![
            name,
            format!("{}/{} ({:.0}%)", r.accepted, r.sla_jobs, r.accepted_pct),
            format!("{}/{} ({:.0}%)", r.met, r.accepted, r.met_pct_of_accepted),
            r.rejected_met.to_string(),
            format!("{:.1}", r.best_effort_mean_jct_s),
            format!("{:.1}", r.best_effort_median_jct_s),
            format!("{:.1}%", r.cpu_utilization * 100.0),
            r.preemptions.to_string(),
            format!("{:.0}", r.preempted_work_s),
        ]);
    }
    let mut out = scenario_line(comparison, &format!("seed {}", comparison.scenario.seed));
    out.push_str(&aligned(&rows));
    if !comparison.capacity_sweep.is_empty() {
        let sweep: Vec<String> = comparison
            .capacity_sweep
            .iter()
            .map(|p| {
                format!(
                    "{} → {} met, BE mean {:.1} s",
                    p.share, p.met, p.best_effort_mean_jct_s
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "capacity tuned over production shares (most deadlines met, then lowest BE mean JCT): {}",
            sweep.join("; ")
        );
    }
    out
}

/// Which production share a capacity-baseline row of an [`SlaStudy`] ran at.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselineShare {
    /// Each seed's best share in hindsight (most deadlines met, then the lowest best-effort
    /// JCT), as one comparison reports it.
    TunedPerSeed,
    /// This one share on every seed.
    Fixed(f64),
}

/// One policy's figures over the seeds of an SLA study ([`compare_sla_seeds`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlaStudyRow {
    /// `rayon-gree`, `rayon-gree-l` or `capacity`.
    pub policy: String,
    /// The capacity baseline's share (`None` for Rayon).
    pub share: Option<BaselineShare>,
    /// Jobs with deadlines, over all seeds.
    pub sla_jobs: usize,
    /// Of them, accepted.
    pub accepted: usize,
    /// Accepted jobs that met their deadline.
    pub met: usize,
    /// Refused jobs that met their deadline anyway, running best-effort.
    pub rejected_met: usize,
    /// Best-effort mean JCT, seconds: each seed's, and their summary.
    pub best_effort_mean_jct_s: Spread,
    /// Best-effort tasks killed for reservations.
    pub preemptions: u64,
    /// Seconds of work those tasks lost.
    pub preempted_work_s: f64,
}

impl SlaStudyRow {
    /// Deadlines met in all: the accepted on time and the refused that made it anyway.
    pub fn deadlines_met(&self) -> usize {
        self.met + self.rejected_met
    }

    /// A row of `policy` at `share` with nothing counted yet.
    fn empty(policy: &str, share: Option<BaselineShare>) -> SlaStudyRow {
        SlaStudyRow {
            policy: policy.to_string(),
            share,
            sla_jobs: 0,
            accepted: 0,
            met: 0,
            rejected_met: 0,
            best_effort_mean_jct_s: Spread::default(),
            preemptions: 0,
            preempted_work_s: 0.0,
        }
    }
}

/// An SLA comparison over several seeds (`fullerene sim --deadlines F --seeds N`): each seed's
/// comparison and the figures summed over them. The capacity baseline appears twice: with its
/// share tuned seed by seed, as one comparison reports it (each seed's best share in
/// hindsight), and at the one share that meets the most deadlines over all the seeds (ties:
/// the lower mean best-effort JCT), which is what an operator can set: a fixed production
/// share.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlaStudy {
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// The fixed share chosen over all seeds (`None` without `capacity`, or with one share).
    pub fixed_share: Option<f64>,
    /// Every share the baseline ran at, summed over the seeds: deadlines met, and the mean
    /// over seeds of the best-effort mean JCT.
    pub capacity_sweep: Vec<CapacitySweepPoint>,
    /// Per policy, in the order asked; the fixed-share baseline after the tuned one.
    pub rows: Vec<SlaStudyRow>,
    /// Each seed's comparison. Its runs' reports keep their summary figures but not their
    /// lists of jobs or utilisation timelines (the SLA jobs' outcomes are in `sla`).
    pub per_seed: Vec<SlaComparison>,
}

/// [`compare_sla`] on each of `seeds` (the rest of `config` the same), one seed after the
/// other (each seed's runs go in parallel), summed as an [`SlaStudy`]. `progress` hears a
/// [`Progress::Comparison`] before each seed's runs.
///
/// # Errors
///
/// No seed, more than 1,000, a seed given twice, or what [`compare_sla`] returns.
pub fn compare_sla_seeds(
    file_jobs: &[Job],
    config: &SimConfig,
    policies: &[SlaPolicy],
    options: &SlaOptions,
    seeds: &[u64],
    progress: Option<&ProgressFn<'_>>,
) -> Result<SlaStudy, SimError> {
    check_seeds(seeds)?;
    let mut per_seed = Vec::with_capacity(seeds.len());
    for (k, &seed) in seeds.iter().enumerate() {
        if let Some(progress) = progress {
            progress(&Progress::Comparison {
                started: k + 1,
                total: seeds.len(),
                seed,
                machines: config.machines,
            });
        }
        let seeded = SimConfig {
            seed,
            ..config.clone()
        };
        let mut comparison = compare_sla(file_jobs, &seeded, policies, options, progress)?;
        // Every job of every run of every seed would be most of the study's JSON.
        for report in &mut comparison.policies {
            report.run.jobs.clear();
            report.run.utilization_timeline = UtilizationTimeline::default();
        }
        per_seed.push(comparison);
    }
    Ok(SlaStudy::of(seeds.to_vec(), per_seed))
}

impl SlaStudy {
    /// Sums `per_seed` (the comparisons of `seeds`, in order).
    fn of(seeds: Vec<u64>, per_seed: Vec<SlaComparison>) -> SlaStudy {
        let mut rows: Vec<(SlaStudyRow, Vec<f64>)> = Vec::new();
        for comparison in &per_seed {
            for report in &comparison.policies {
                let k = match rows.iter().position(|(r, _)| r.policy == report.policy) {
                    Some(k) => k,
                    None => {
                        let share = report.production_share.map(|_| BaselineShare::TunedPerSeed);
                        rows.push((SlaStudyRow::empty(&report.policy, share), Vec::new()));
                        rows.len() - 1
                    }
                };
                let (row, jcts) = &mut rows[k];
                row.sla_jobs += report.sla_jobs;
                row.accepted += report.accepted;
                row.met += report.met;
                row.rejected_met += report.rejected_met;
                row.preemptions += report.preemptions;
                row.preempted_work_s += report.preempted_work_s;
                jcts.push(report.best_effort_mean_jct_s);
            }
        }
        let mut rows: Vec<SlaStudyRow> = rows
            .into_iter()
            .map(|(row, jcts)| SlaStudyRow {
                best_effort_mean_jct_s: Spread::of(jcts),
                ..row
            })
            .collect();
        let capacity_sweep = sweep_over_seeds(&per_seed);
        let fixed = capacity_sweep
            .iter()
            .max_by(|a, b| {
                baseline_order(
                    (a.met, a.best_effort_mean_jct_s),
                    (b.met, b.best_effort_mean_jct_s),
                )
            })
            .filter(|_| capacity_sweep.len() > 1);
        let tuned = rows
            .iter()
            .position(|r| r.share == Some(BaselineShare::TunedPerSeed));
        if let (Some(point), Some(k)) = (fixed, tuned) {
            let jcts = per_seed
                .iter()
                .filter_map(|c| c.capacity_sweep.iter().find(|p| p.share == point.share))
                .map(|p| p.best_effort_mean_jct_s)
                .collect();
            let sla_jobs = rows[k].sla_jobs;
            rows.insert(
                k + 1,
                SlaStudyRow {
                    sla_jobs,
                    // The queues accept every SLA job.
                    accepted: sla_jobs,
                    met: point.met,
                    best_effort_mean_jct_s: Spread::of(jcts),
                    ..SlaStudyRow::empty(&rows[k].policy, Some(BaselineShare::Fixed(point.share)))
                },
            );
        }
        SlaStudy {
            seeds,
            fixed_share: fixed.map(|point| point.share),
            capacity_sweep,
            rows,
            per_seed,
        }
    }
}

/// Each share of the capacity baseline summed over `per_seed`, in the first seed's order
/// (each share once, and only the shares every seed ran): deadlines met in all, and the mean
/// over seeds of its best-effort mean JCT. Every seed runs the same `--capacity-shares`, so
/// a share is found by equality.
fn sweep_over_seeds(per_seed: &[SlaComparison]) -> Vec<CapacitySweepPoint> {
    let Some(first) = per_seed.first() else {
        return Vec::new();
    };
    let mut sweep: Vec<CapacitySweepPoint> = Vec::new();
    for point in &first.capacity_sweep {
        if sweep.iter().any(|p| p.share == point.share) {
            continue;
        }
        let at_share: Vec<&CapacitySweepPoint> = per_seed
            .iter()
            .filter_map(|c| c.capacity_sweep.iter().find(|p| p.share == point.share))
            .collect();
        if at_share.len() == per_seed.len() {
            sweep.push(CapacitySweepPoint {
                share: point.share,
                met: at_share.iter().map(|p| p.met).sum(),
                best_effort_mean_jct_s: Spread::of(
                    at_share.iter().map(|p| p.best_effort_mean_jct_s).collect(),
                )
                .mean,
            });
        }
    }
    sweep
}

/// The capacity baseline's order of its shares, each as (deadlines met, best-effort mean JCT):
/// the most deadlines met, then the lower JCT, is the greater. One comparison tunes its share
/// by it, and a study picks its fixed share by it.
fn baseline_order(a: (usize, f64), b: (usize, f64)) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then(b.1.total_cmp(&a.1))
}

/// The line above an SLA table: the cluster, the workload, `seeds` (`seed 3`, `seeds 1–30`),
/// the deadlines and the plan's settings, from `comparison` (a study's first seed).
fn scenario_line(comparison: &SlaComparison, seeds: &str) -> String {
    let s = &comparison.scenario;
    format!(
        "{}; {}; {seeds}; {:.0}% of jobs with deadlines (NewLB × {}), plan quantum {} ms, grace {} ms, jobs run {}\n",
        s.cluster(),
        s.workload_line(),
        comparison.deadline_fraction * 100.0,
        1.0 + comparison.slack,
        comparison.quantum_ms,
        comparison.grace_ms,
        comparison.framework_policy,
    )
}

/// `part` of `whole` in percent (100 of nothing).
fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        100.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The study as a plain-text table, one row per policy summed over the seeds, then the
/// capacity baseline's shares summed over the seeds.
pub fn render_sla_study_table(study: &SlaStudy) -> String {
    let mut rows = vec![vec![
        "policy".to_string(),
        "SLA accepted".into(),
        "met of accepted".into(),
        "deadlines met".into(),
        "BE mean JCT s (min–max over seeds)".into(),
        "preemptions".into(),
        "lost work s".into(),
    ]];
    for r in &study.rows {
        let name = match r.share {
            Some(BaselineShare::Fixed(share)) => {
                format!("{} (share {share:?}, every seed)", r.policy)
            }
            Some(BaselineShare::TunedPerSeed) => format!("{} (share tuned per seed)", r.policy),
            None => r.policy.clone(),
        };
        rows.push(vec![
            name,
            format!(
                "{}/{} ({:.1}%)",
                r.accepted,
                r.sla_jobs,
                percent(r.accepted, r.sla_jobs)
            ),
            format!(
                "{}/{} ({:.1}%)",
                r.met,
                r.accepted,
                percent(r.met, r.accepted)
            ),
            format!("{}/{}", r.deadlines_met(), r.sla_jobs),
            r.best_effort_mean_jct_s.cell(|x| format!("{x:.3}")),
            r.preemptions.to_string(),
            format!("{:.0}", r.preempted_work_s),
        ]);
    }
    let mut out = study
        .per_seed
        .first()
        .map(|first| scenario_line(first, &format!("seeds {}", seeds_label(&study.seeds))))
        .unwrap_or_default();
    out.push_str(&aligned(&rows));
    if !study.capacity_sweep.is_empty() {
        let sweep: Vec<String> = study
            .capacity_sweep
            .iter()
            .map(|p| {
                format!(
                    "{:?} → {} met, BE mean {:.3} s",
                    p.share, p.met, p.best_effort_mean_jct_s
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "capacity at each production share over all seeds (the fixed share: most deadlines met, then lowest BE mean JCT): {}",
            sweep.join("; ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::arrivals::ArrivalSpec;
    use crate::sla::tests::one_cpu_stage;
    use fullerene_sdk::testkit::job;

    /// A best-effort job of long one-cpu tasks that fills one 4-cpu machine at 0, then at 10 s
    /// an SLA job of two short stages that needs the machine by its deadline.
    fn scenario() -> (Vec<Job>, SimConfig) {
        let hog = job(
            "hog",
            "default",
            Some(0.0),
            vec![one_cpu_stage(0, &[], &[400.0; 8])],
        );
        let sla = job(
            "sla",
            "default",
            Some(10.0),
            vec![
                one_cpu_stage(0, &[], &[10.0; 4]),
                one_cpu_stage(1, &[0], &[10.0; 2]),
            ],
        );
        let config = SimConfig {
            machines: 1,
            machine: "cpus=4,mem_mib=65536".parse().expect("machine"),
            arrivals: ArrivalSpec::Trace,
            record_trace: true,
            ..SimConfig::default()
        };
        (vec![hog, sla], config)
    }

    fn run(policies: &[SlaPolicy]) -> SlaComparison {
        let (file_jobs, config) = scenario();
        let jobs = prepare_jobs(&file_jobs, &config).expect("jobs");
        let options = SlaOptions {
            capacity_shares: vec![0.5, 0.9],
            ..SlaOptions::default()
        };
        compare_marked(
            &file_jobs,
            &config,
            &jobs,
            &[false, true],
            policies,
            &options,
            None,
        )
        .expect("comparison")
    }

    #[test]
    fn a_reserved_job_preempts_best_effort_and_meets_its_deadline_where_queues_miss_it() {
        let comparison = run(&SlaPolicy::ALL);
        let [gree, gree_l, capacity] = &comparison.policies[..] else {
            panic!("three reports: {comparison:?}");
        };
        for rayon in [gree, gree_l] {
            // NewLB 20 s, slack 1: a 40 s window, opening 0.5 s after the arrival (no grace and
            // a tick), that the plan holds; the hog's tasks are killed to deliver it.
            assert_eq!(rayon.accepted, 1, "{}", rayon.policy);
            assert!(rayon.preemptions >= 1, "{}", rayon.policy);
            assert!(rayon.preempted_work_s > 0.0, "{}", rayon.policy);
            assert!(rayon.reservation_checks > 0, "{}", rayon.policy);
            assert!(rayon.run.jobs.iter().all(|j| j.finish_s.is_finite()));
        }
        // GREE reserves each stage at full width just in time: the job meets its deadline.
        assert_eq!(gree.met, 1, "{:?}", gree.sla);
        // GREE-L spreads the first stage thin (one bundle, then two), as fluid bundle-time:
        // its four 10 s tasks end a wave later than the plan's work suggests, and the job
        // finishes within one task of its deadline but after it.
        let late = gree_l.sla[0].finish_s - gree_l.sla[0].deadline_s;
        assert!(late <= 10.0, "{:?}", gree_l.sla);
        // The queues accept it but never take back the hog's cpus: 400 s tasks outlast the
        // deadline, whatever the share.
        assert_eq!((capacity.accepted, capacity.met), (1, 0));
        assert_eq!(capacity.preemptions, 0);
        assert_eq!(comparison.capacity_sweep.len(), 2);
        let table = render_sla_table(&comparison);
        assert!(
            table.contains("rayon-gree-l") && table.contains("capacity (share"),
            "{table}"
        );
    }

    /// `comparison` with the capacity baseline's sweep set to `sweep` (share, met, best-effort
    /// JCT) and its report to the sweep's best point, as one comparison picks it.
    fn with_sweep(mut comparison: SlaComparison, sweep: &[(f64, usize, f64)]) -> SlaComparison {
        comparison.capacity_sweep = sweep
            .iter()
            .map(|&(share, met, jct)| CapacitySweepPoint {
                share,
                met,
                best_effort_mean_jct_s: jct,
            })
            .collect();
        let &(share, met, jct) = sweep
            .iter()
            .max_by(|a, b| baseline_order((a.1, a.2), (b.1, b.2)))
            .expect("a sweep");
        for report in &mut comparison.policies {
            if report.production_share.is_some() {
                report.production_share = Some(share);
                report.met = met;
                report.best_effort_mean_jct_s = jct;
            }
        }
        comparison
    }

    #[test]
    fn a_study_sums_the_seeds_and_sets_the_baseline_at_the_share_best_over_all_of_them() {
        let one = run(&SlaPolicy::ALL);
        // Seed 7's best share is 0.5, seed 8's is 0.9; over both, each meets one deadline and
        // 0.5 has the lower best-effort JCT (25 s against 26 s), so it is the fixed share.
        let first = with_sweep(one.clone(), &[(0.5, 1, 20.0), (0.9, 0, 40.0)]);
        let mut second = with_sweep(one, &[(0.5, 0, 30.0), (0.9, 1, 12.0)]);
        for report in &mut second.policies {
            report.sla_jobs += 2;
            report.accepted += 1;
            report.rejected_met += 1;
            report.preemptions += 5;
            report.preempted_work_s += 7.0;
            if report.production_share.is_none() {
                report.met += 1;
                report.best_effort_mean_jct_s += 1.0;
            }
        }
        let study = SlaStudy::of(vec![7, 8], vec![first.clone(), second.clone()]);
        let shares: Vec<(&str, Option<BaselineShare>)> = study
            .rows
            .iter()
            .map(|r| (r.policy.as_str(), r.share))
            .collect();
        assert_eq!(
            shares,
            vec![
                ("rayon-gree", None),
                ("rayon-gree-l", None),
                ("capacity", Some(BaselineShare::TunedPerSeed)),
                ("capacity", Some(BaselineShare::Fixed(0.5))),
            ]
        );
        assert_eq!(study.fixed_share, Some(0.5));
        let (tuned, fixed) = (&study.rows[2], &study.rows[3]);
        // Tuned in hindsight, each seed at its own best: one deadline on each.
        assert_eq!(tuned.met, 2);
        assert_eq!(tuned.best_effort_mean_jct_s.values, vec![20.0, 12.0]);
        // At 0.5 on both: one deadline in all, JCTs 20 and 30 s.
        assert_eq!(fixed.met, 1);
        assert_eq!(fixed.best_effort_mean_jct_s.values, vec![20.0, 30.0]);
        assert_eq!(fixed.best_effort_mean_jct_s.mean, 25.0);
        assert_eq!(
            (fixed.sla_jobs, fixed.accepted),
            (tuned.sla_jobs, tuned.sla_jobs)
        );
        assert_eq!((fixed.rejected_met, fixed.preemptions), (0, 0));
        let met_by_share: Vec<(f64, usize)> = study
            .capacity_sweep
            .iter()
            .map(|p| (p.share, p.met))
            .collect();
        assert_eq!(met_by_share, vec![(0.5, 1), (0.9, 1)]);
        assert_eq!(study.capacity_sweep[1].best_effort_mean_jct_s, 26.0);
        // The other rows are the two seeds' reports summed.
        for (row, (a, b)) in study
            .rows
            .iter()
            .take(3)
            .zip(first.policies.iter().zip(&second.policies))
        {
            assert_eq!(row.sla_jobs, a.sla_jobs + b.sla_jobs, "{}", row.policy);
            assert_eq!(row.accepted, a.accepted + b.accepted, "{}", row.policy);
            assert_eq!(
                row.rejected_met,
                a.rejected_met + b.rejected_met,
                "{}",
                row.policy
            );
            assert_eq!(
                row.preemptions,
                a.preemptions + b.preemptions,
                "{}",
                row.policy
            );
            assert_eq!(
                row.preempted_work_s,
                a.preempted_work_s + b.preempted_work_s,
                "{}",
                row.policy
            );
            assert_eq!(
                row.best_effort_mean_jct_s.values,
                vec![a.best_effort_mean_jct_s, b.best_effort_mean_jct_s]
            );
        }
        assert_eq!(
            study.rows[0].met,
            first.policies[0].met + second.policies[0].met
        );
        let table = render_sla_study_table(&study);
        for wanted in [
            "seeds 7–8",
            "capacity (share tuned per seed)",
            "capacity (share 0.5, every seed)",
            "0.9 → 1 met",
        ] {
            assert!(table.contains(wanted), "{wanted}: {table}");
        }
    }

    #[test]
    fn a_study_refuses_a_seed_given_twice() {
        let (file_jobs, config) = scenario();
        let err = compare_sla_seeds(
            &file_jobs,
            &config,
            &SlaPolicy::ALL,
            &SlaOptions::default(),
            &[3, 3],
            None,
        )
        .expect_err("a repeated seed");
        assert!(err.to_string().contains("seed 3"), "{err}");
    }

    #[test]
    fn policy_lists_parse_in_order_without_repeats() {
        assert_eq!(
            parse_sla_policy_list("capacity, rayon-gree,,capacity").unwrap(),
            vec![
                SlaPolicy::Capacity,
                SlaPolicy::Rayon(ReservationPolicy::Gree)
            ]
        );
        assert_eq!(
            parse_sla_policy_list("rayon-gree,rayon-gree-l,capacity").unwrap(),
            SlaPolicy::ALL.to_vec()
        );
        assert!(parse_sla_policy_list("rayon").is_err());
    }
}
