//! The plan follower (Rayon §5.2, Step 5): on each allocation cycle it reads the plan's current
//! slice and turns it into what the allocator owes each reservation now.
//!
//! Rayon's PlanFollower resizes YARN queues and lets the CapacityScheduler preempt containers
//! that sit in another queue's guaranteed capacity. Fullerene is two-level: the master does not
//! place tasks, it offers resources to frameworks, so the follower departs from Rayon in two ways:
//! - a guarantee is a share of the offers: the reservation's jobs are offered what they are owed
//!   first ([`ReservationShare::offer_first`]), before best-effort frameworks get anything;
//! - reclaiming is naming best-effort tasks to kill ([`FollowerDecision::preempt`]), newest first
//!   (they have the least work to lose), and only after the shortfall has lasted a grace period
//!   (tasks that finish within it free the capacity without a kill; the caller should rescind
//!   outstanding best-effort offers before killing).
//!
//! The follower decides; it is not yet wired into the allocator's cycle (the master and the
//! simulator are to call it each cycle and apply its shares, lending and kills).
//!
//! Reserved capacity a reservation's jobs do not ask for is lent to best-effort work
//! ([`FollowerDecision::lendable`]); among best-effort frameworks the allocator keeps its
//! deficit-counter fairness, the follower only says how much of the cluster is theirs now.
//!
//! Sans-IO like the rest of the crate: the time, the jobs' loads and the best-effort tasks are
//! passed in, decisions come back.

use std::collections::BTreeMap;

use fullerene_scheduling::{ResourceVec, TaskKey, EPSILON};

use crate::plan::{Plan, ReservationId};

/// One job that runs inside a reservation (its framework or group is tagged with the
/// reservation's id); several jobs may share one reservation.
#[derive(Clone, Debug, PartialEq)]
pub struct TaggedJob {
    /// The reservation the job runs in.
    pub reservation: ReservationId,
    /// What the job's tasks hold now.
    pub held: ResourceVec,
    /// What more the job asks for now (its pending tasks' demand).
    pub wanted: ResourceVec,
}

/// A running best-effort task, a candidate for preemption.
#[derive(Clone, Debug, PartialEq)]
pub struct BestEffortTask {
    /// The task.
    pub key: TaskKey,
    /// When it started, wall-clock milliseconds (newest are preempted first).
    pub started_ms: u64,
    /// What it holds.
    pub resources: ResourceVec,
}

/// What the follower decided for one reservation this cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservationShare {
    /// The reservation.
    pub id: ReservationId,
    /// What the plan guarantees it now ([`Plan::guaranteed_at`]).
    pub guaranteed: ResourceVec,
    /// What its jobs hold now, summed over the jobs that share it.
    pub held: ResourceVec,
    /// What its jobs are offered before any best-effort framework: the part of the guarantee
    /// they do not hold yet, up to what they ask for.
    pub offer_first: ResourceVec,
}

/// The follower's answer for one allocation cycle.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FollowerDecision {
    /// Each reservation with a guarantee now or jobs running, by id.
    pub shares: Vec<ReservationShare>,
    /// Reserved capacity that no reservation's jobs use or ask for now: best-effort work may
    /// use it until a reservation's jobs ask.
    pub lendable: ResourceVec,
    /// Best-effort tasks to kill so the reservations get what they are owed, newest first.
    /// Empty unless some reservation's owed demand exceeds the free capacity for at least the
    /// grace period.
    pub preempt: Vec<TaskKey>,
}

/// The plan follower: turns the plan's current slice into shares, lendable capacity and
/// preemptions. Keeps only when each reservation's shortfall began (for the grace period).
#[derive(Clone, Debug)]
pub struct PlanFollower {
    grace_ms: u64,
    lookahead_ms: u64,
    short_since: BTreeMap<ReservationId, u64>,
}

impl PlanFollower {
    /// A follower that preempts a reservation's shortfall after it has lasted `grace_ms`.
    pub fn new(grace_ms: u64) -> PlanFollower {
        PlanFollower {
            grace_ms,
            lookahead_ms: 0,
            short_since: BTreeMap::new(),
        }
    }

    /// The same follower, guaranteeing each reservation now the most the plan guarantees it
    /// at any quantum start in `[now, now + lookahead_ms]`. GREE places a reservation as late
    /// as its window allows, so a guarantee that the follower starts to reclaim only when it
    /// begins comes a grace period (and a cycle) late, and the job misses a deadline the plan
    /// met exactly; looking ahead by the grace period frees the capacity by the time the plan
    /// says it is the reservation's. The jobs may then start early, which only helps them.
    pub fn with_lookahead(mut self, lookahead_ms: u64) -> PlanFollower {
        self.lookahead_ms = lookahead_ms;
        self
    }

    /// The grace period in milliseconds.
    pub fn grace_ms(&self) -> u64 {
        self.grace_ms
    }

    /// One cycle at wall-clock `now_ms`: `jobs` are the reserved jobs' loads, `free` the
    /// cluster's unallocated resources (summed over agents: the follower plans shares, the
    /// allocator fits tasks on agents), `best_effort` the running best-effort tasks.
    pub fn follow(
        &mut self,
        plan: &Plan,
        now_ms: u64,
        jobs: &[TaggedJob],
        free: ResourceVec,
        best_effort: &[BestEffortTask],
    ) -> FollowerDecision {
        self.follow_with(plan, now_ms, jobs, free, || Candidates {
            freeing: ResourceVec::ZERO,
            tasks: best_effort.to_vec(),
        })
    }

    /// [`PlanFollower::follow`] for a shell that would rather not list every best-effort task
    /// each cycle: `candidates` is asked only when `free` does not cover what the
    /// reservations are owed (the same decision: what comes free adds to `free` first).
    pub fn follow_with(
        &mut self,
        plan: &Plan,
        now_ms: u64,
        jobs: &[TaggedJob],
        free: ResourceVec,
        candidates: impl FnOnce() -> Candidates,
    ) -> FollowerDecision {
        let mut loads: BTreeMap<ReservationId, (ResourceVec, ResourceVec)> = BTreeMap::new();
        for reservation in plan.reservations() {
            loads.entry(reservation.id).or_default();
        }
        for job in jobs {
            let load = loads.entry(job.reservation).or_default();
            load.0 += job.held;
            load.1 += job.wanted;
        }
        let mut decision = FollowerDecision::default();
        let mut overdue = ResourceVec::ZERO;
        let mut owed_total = ResourceVec::ZERO;
        for (id, (held, wanted)) in loads {
            let guaranteed = self.guaranteed_ahead(plan, id, now_ms);
            let owed = guaranteed.saturating_sub(&held);
            let offer_first = owed.min(&wanted);
            decision.lendable += owed.saturating_sub(&offer_first);
            if offer_first.is_zero() {
                self.short_since.remove(&id);
            } else {
                owed_total += offer_first;
                let since = *self.short_since.entry(id).or_insert(now_ms);
                if now_ms.saturating_sub(since) >= self.grace_ms {
                    overdue += offer_first;
                }
            }
            if !guaranteed.is_zero() || !held.is_zero() {
                decision.shares.push(ReservationShare {
                    id,
                    guaranteed,
                    held,
                    offer_first,
                });
            }
        }
        let covered = |free: &ResourceVec| owed_total.fits_in(free);
        if covered(&free) {
            // Free capacity covers every reservation: no shortfall to time.
            self.short_since.clear();
            return decision;
        }
        let candidates = candidates();
        let free = free + candidates.freeing;
        if covered(&free) {
            self.short_since.clear();
            return decision;
        }
        decision.preempt = newest_covering(overdue.saturating_sub(&free), &candidates.tasks);
        decision
    }
}

impl PlanFollower {
    /// The most `plan` guarantees `id` at `now_ms` and at every quantum start up to
    /// `now_ms + lookahead_ms` (allocations change only at quantum starts).
    fn guaranteed_ahead(&self, plan: &Plan, id: ReservationId, now_ms: u64) -> ResourceVec {
        let mut guaranteed = plan.guaranteed_at(id, now_ms);
        if self.lookahead_ms == 0 {
            return guaranteed;
        }
        let quanta = plan.quanta();
        let end_ms = now_ms.saturating_add(self.lookahead_ms);
        let mut q = quanta.first_at_or_after(now_ms.saturating_add(1));
        while quanta.start_ms(q) <= end_ms {
            guaranteed = guaranteed.max(&plan.guaranteed_at(id, quanta.start_ms(q)));
            q += 1;
        }
        guaranteed
    }
}

/// What [`PlanFollower::follow_with`] asks for on a shortfall.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidates {
    /// Capacity already on its way back (tasks being killed): it counts as free.
    pub freeing: ResourceVec,
    /// The running best-effort tasks that may be preempted.
    pub tasks: Vec<BestEffortTask>,
}

/// The newest best-effort tasks whose resources together cover `need`, skipping tasks that
/// hold none of what is still needed (killing them would free nothing useful).
fn newest_covering(need: ResourceVec, best_effort: &[BestEffortTask]) -> Vec<TaskKey> {
    let mut remaining = need;
    let mut victims = Vec::new();
    if remaining.is_zero() {
        return victims;
    }
    let mut newest_first: Vec<&BestEffortTask> = best_effort.iter().collect();
    newest_first.sort_by(|a, b| b.started_ms.cmp(&a.started_ms).then(b.key.cmp(&a.key)));
    for task in newest_first {
        if task.resources.min(&remaining).sum() <= EPSILON {
            continue;
        }
        remaining = remaining.saturating_sub(&task.resources);
        victims.push(task.key.clone());
        if remaining.is_zero() {
            break;
        }
    }
    victims
}

#[cfg(test)]
mod tests {
    use fullerene_scheduling::{FrameworkId, TaskId};

    use super::*;
    use crate::{parse, PlanConfig, PolicyKind, ReservationRequest};

    const MINUTE: u64 = 60_000;

    fn cpus(n: f64) -> ResourceVec {
        format!("cpus={n}").parse().expect("cpus")
    }

    /// A 10-cpu plan with r1 guaranteed 4 cpus over its whole first hour (g = h = 4, one hour).
    fn plan_with_r1() -> Plan {
        plan_with_r1_in("s=0, f=1h")
    }

    /// A 10-cpu plan with r1 asking 4 cpus for an hour (g = h = 4) in the window `bounds`.
    fn plan_with_r1_in(bounds: &str) -> Plan {
        let mut plan = Plan::new(PlanConfig::new(0, PolicyKind::Gree), cpus(10.0));
        let text = format!("window(atom(cpus=1; g=4, h=4, l=1m, w=4h), {bounds})");
        let expr = parse(&text).expect("rdl");
        let request = ReservationRequest {
            id: ReservationId(1),
            user: "etl".into(),
            expr,
        };
        plan.admit(request, 0).expect("admitted");
        plan
    }

    fn job(held: f64, wanted: f64) -> TaggedJob {
        TaggedJob {
            reservation: ReservationId(1),
            held: cpus(held),
            wanted: cpus(wanted),
        }
    }

    fn be_task(name: &str, started_ms: u64, n: f64) -> BestEffortTask {
        BestEffortTask {
            key: TaskKey::new(FrameworkId("adhoc".into()), TaskId(name.into())),
            started_ms,
            resources: cpus(n),
        }
    }

    #[test]
    fn jobs_sharing_a_reservation_are_offered_their_guarantee_first() {
        let plan = plan_with_r1();
        let mut follower = PlanFollower::new(MINUTE);
        // Two jobs share r1: one holds 1 cpu, both ask for more than the 3 still owed.
        let jobs = [job(1.0, 2.0), job(0.0, 5.0)];
        let decision = follower.follow(&plan, 10 * MINUTE, &jobs, cpus(6.0), &[]);
        assert_eq!(decision.shares.len(), 1);
        let share = &decision.shares[0];
        assert_eq!(share.guaranteed, cpus(4.0));
        assert_eq!(share.held, cpus(1.0));
        assert_eq!(share.offer_first, cpus(3.0));
        assert_eq!(decision.lendable, ResourceVec::ZERO);
        assert!(decision.preempt.is_empty());
    }

    #[test]
    fn idle_reserved_capacity_is_lent_to_best_effort() {
        let plan = plan_with_r1();
        let mut follower = PlanFollower::new(MINUTE);
        // No job runs in r1: all 4 reserved cpus are lendable; a job asking 1 leaves 3.
        let idle = follower.follow(&plan, 10 * MINUTE, &[], cpus(10.0), &[]);
        assert_eq!(idle.lendable, cpus(4.0));
        let light = follower.follow(&plan, 10 * MINUTE, &[job(0.0, 1.0)], cpus(10.0), &[]);
        assert_eq!(light.lendable, cpus(3.0));
        assert_eq!(light.shares[0].offer_first, cpus(1.0));
        // After the reservation's window nothing is guaranteed or lent.
        let after = follower.follow(&plan, 2 * 60 * MINUTE, &[job(0.0, 1.0)], cpus(10.0), &[]);
        assert!(after.shares.is_empty());
        assert_eq!(after.lendable, ResourceVec::ZERO);
    }

    #[test]
    fn preempts_newest_best_effort_tasks_only_after_the_grace_period() {
        let plan = plan_with_r1();
        let mut follower = PlanFollower::new(MINUTE);
        // Best effort holds 9 of 10 cpus; r1's job wants 4 with 1 free: 3 short.
        let tasks = [
            be_task("old", 0, 3.0),
            be_task("mid", MINUTE, 2.0),
            be_task("new", 2 * MINUTE, 2.0),
            be_task("newest-mem", 3 * MINUTE, 0.0),
        ];
        let first = follower.follow(&plan, 5 * MINUTE, &[job(0.0, 4.0)], cpus(1.0), &tasks);
        assert!(first.preempt.is_empty(), "within the grace period");
        let later = follower.follow(&plan, 6 * MINUTE, &[job(0.0, 4.0)], cpus(1.0), &tasks);
        let names: Vec<&str> = later.preempt.iter().map(|k| k.task_id.as_str()).collect();
        // Newest first, skipping the task that holds no cpu, until 3 cpus are covered.
        assert_eq!(names, ["new", "mid"]);
    }

    #[test]
    fn no_preemption_when_free_capacity_covers_the_guarantee() {
        let plan = plan_with_r1();
        let mut follower = PlanFollower::new(0);
        let tasks = [be_task("a", 0, 6.0)];
        let decision = follower.follow(&plan, 5 * MINUTE, &[job(0.0, 4.0)], cpus(4.0), &tasks);
        assert!(decision.preempt.is_empty());
        // A job already holding its guarantee is owed nothing, whatever it asks for.
        let full = follower.follow(&plan, 5 * MINUTE, &[job(4.0, 9.0)], cpus(0.0), &tasks);
        assert!(full.preempt.is_empty());
        assert_eq!(full.shares[0].offer_first, ResourceVec::ZERO);
    }

    #[test]
    fn a_lookahead_reclaims_a_guarantee_before_it_begins() {
        // r1's hour fills its window exactly: its guarantee begins at 10 minutes; ask at 8.
        let plan = plan_with_r1_in("s=10m, f=70m");
        let early = 8 * MINUTE;
        let plain =
            PlanFollower::new(MINUTE).follow(&plan, early, &[job(0.0, 4.0)], cpus(0.0), &[]);
        assert!(plain.shares.is_empty(), "nothing guaranteed yet: {plain:?}");
        let mut ahead = PlanFollower::new(MINUTE).with_lookahead(2 * MINUTE);
        let decision = ahead.follow(&plan, early, &[job(0.0, 4.0)], cpus(0.0), &[]);
        assert_eq!(decision.shares[0].offer_first, cpus(4.0));
        // One minute short of the look-ahead, the guarantee is not seen yet.
        let mut short = PlanFollower::new(MINUTE).with_lookahead(MINUTE);
        let decision = short.follow(&plan, early, &[job(0.0, 4.0)], cpus(0.0), &[]);
        assert!(decision.shares.is_empty(), "{decision:?}");
    }

    #[test]
    fn a_shortfall_that_clears_restarts_the_grace_period() {
        let plan = plan_with_r1();
        let mut follower = PlanFollower::new(MINUTE);
        let tasks = [be_task("a", 0, 9.0)];
        let short = [job(0.0, 4.0)];
        assert!(follower
            .follow(&plan, 5 * MINUTE, &short, cpus(1.0), &tasks)
            .preempt
            .is_empty());
        // Capacity freed by itself in between: the next shortfall waits a full grace again.
        follower.follow(&plan, 5 * MINUTE + 30_000, &short, cpus(5.0), &tasks);
        assert!(follower
            .follow(&plan, 6 * MINUTE, &short, cpus(1.0), &tasks)
            .preempt
            .is_empty());
        let names = follower
            .follow(&plan, 7 * MINUTE, &short, cpus(1.0), &tasks)
            .preempt;
        assert_eq!(names.len(), 1);
    }

    /// The shell lists its best-effort tasks only on a shortfall, and what tasks being killed
    /// free counts before anything more is preempted.
    #[test]
    fn candidates_are_asked_for_only_when_free_capacity_falls_short() {
        let plan = plan_with_r1();
        let mut follower = PlanFollower::new(0);
        let asked = std::cell::Cell::new(0);
        let tasks = vec![be_task("a", 0, 2.0), be_task("b", MINUTE, 2.0)];
        let candidates = |freeing: f64| {
            asked.set(asked.get() + 1);
            Candidates {
                freeing: cpus(freeing),
                tasks: tasks.clone(),
            }
        };
        // 4 owed, 5 free: no walk.
        let covered = follower.follow_with(&plan, 10 * MINUTE, &[job(0.0, 4.0)], cpus(5.0), || {
            candidates(0.0)
        });
        assert!(covered.preempt.is_empty());
        assert_eq!(asked.get(), 0);
        // 1 free and 3 being killed: covered after the walk, nothing preempted.
        let freeing = follower.follow_with(&plan, 10 * MINUTE, &[job(0.0, 4.0)], cpus(1.0), || {
            candidates(3.0)
        });
        assert!(freeing.preempt.is_empty());
        assert_eq!(asked.get(), 1);
        // 1 free, 1 coming: the newest 2-cpu task covers the remaining 2.
        let short = follower.follow_with(&plan, 10 * MINUTE, &[job(0.0, 4.0)], cpus(1.0), || {
            candidates(1.0)
        });
        let names: Vec<&str> = short.preempt.iter().map(|k| k.task_id.as_str()).collect();
        assert_eq!(names, ["b"]);
        assert_eq!(asked.get(), 2);
    }
}
