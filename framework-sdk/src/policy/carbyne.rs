//! Carbyne's altruistic intra-job scheduler (Carbyne §3.3.3 and Pseudocode 1, lines 16–25),
//! wrapped around an intra-job policy that orders the tasks it decides to run.
//!
//! Given the job's share `A_k` of the cluster (from the inter-job scheduler, here
//! [`OfferContext::fair_share`]), Carbyne estimates `T_k`, the job's completion time if it kept
//! that share, by packing its remaining tasks into the share (line 17). It then reverses the
//! remaining DAG and packs it backwards from `T_k` (lines 18–20), which gives each task the
//! latest time it may start and still let the job finish by `T_k`. Only the tasks whose latest
//! start is now must start now (line 21); the rest of the offer is yielded as leftover
//! (line 23) for the allocator to redistribute (§3.3.4). On a leftover offer the job is simply
//! greedy: leftovers go to whoever can use them.

use std::collections::BTreeSet;

use fullerene_proto::resources::EPSILON;
use fullerene_proto::ResourceVec;

use crate::job::{Job, StageIdx, TaskRef};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision, OfferKind,
    TaskStatus,
};
use crate::timed_queue::{Timed, TimedQueue};

/// Default of [`CarbyneParams::replan_fraction`]: re-plan once 5% of the remaining tasks ended.
pub const DEFAULT_REPLAN_FRACTION: f64 = 0.05;

/// Default of [`CarbyneParams::share_tolerance`]: a tenth of the share.
pub const DEFAULT_SHARE_TOLERANCE: f64 = 0.1;

/// Carbyne's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CarbyneParams {
    /// Tasks whose latest start falls within this many seconds from now are started now.
    /// Pseudocode 1 line 21 starts exactly those whose latest start *is* now (0, the default);
    /// a framework that sees offers for a machine only every few seconds may set its offer
    /// interval here, so that a task due between two offers is not started late.
    pub lookahead_s: f64,
    /// `P(Altruism)` of Carbyne §3.4.2: the probability that the job is altruistic on a
    /// regular offer (otherwise it takes greedily like its inner policy). 1 by default;
    /// 0 reduces Carbyne to its inner policy.
    pub altruism_probability: f64,
    /// Seed of the deterministic draw behind `altruism_probability` (mixed with the job's
    /// name), so that simulations replay exactly.
    pub seed: u64,
    /// Re-plan after this fraction of the tasks unfinished at the last plan have finished
    /// (at least one task). 0 re-plans after every task end, as Carbyne §3.3.1 invokes
    /// Pseudocode 1 "on task completion events"; see [`CarbynePolicy`] for why the default
    /// is larger. Losses and share changes always re-plan.
    pub replan_fraction: f64,
    /// Re-plan when `A_k` moved by more than this fraction of itself on some resource. Carbyne
    /// §3.4 re-plans on job arrivals and completions, the events that move a DRF share; a share
    /// by progressive filling with demand caps also moves a little with every task that starts
    /// or ends elsewhere, and re-planning on each of those would cost a plan per offer for a
    /// change `T_k` barely feels.
    pub share_tolerance: f64,
}

impl Default for CarbyneParams {
    fn default() -> CarbyneParams {
        CarbyneParams {
            lookahead_s: 0.0,
            altruism_probability: 1.0,
            seed: 0x00ca_7b11_e5ee_d000,
            replan_fraction: DEFAULT_REPLAN_FRACTION,
            share_tolerance: DEFAULT_SHARE_TOLERANCE,
        }
    }
}

/// The cached result of one reverse packing (Carbyne §3.3.3).
#[derive(Clone, Debug)]
struct AltruisticPlan {
    /// [`JobState::num_finished`], [`JobState::num_losses`] and the time when planned.
    finished: usize,
    losses: u64,
    planned_at_s: f64,
    /// Finishes after which the plan is stale.
    replan_after: usize,
    share: ResourceVec,
    /// Absolute `T_k`.
    completion_s: f64,
    /// Per stage, its unlaunched tasks with their absolute latest start, earliest first.
    latest_starts: Vec<(StageIdx, Vec<(f64, TaskRef)>)>,
    /// Per entry of `latest_starts`, how many leading tasks are known to have been launched
    /// (they leave the plan for good: a loss re-plans).
    launched_prefix: Vec<usize>,
}

/// Carbyne's altruism around an intra-job policy (Carbyne §3.3, Pseudocode 1).
///
/// Choices where the paper leaves details open:
/// - `T_k` and the reverse packing both use a Tetris-style packer (Pseudocode 1 line 17) over
///   one bin the size of the share: at each event time it starts, among the tasks whose
///   predecessors are done, the one best aligned with the bin's free resources (longest task
///   first within a stage), until nothing fits. Running tasks hold their demand for their
///   remaining time (their expected duration minus their elapsed time): at the start of the
///   forward packing, at the end (next to `T_k`) of the backward one.
/// - A task that needs more of some resource than the whole share could never start in it; we
///   pack it as using the whole share for its duration × its dominant share of the share (the
///   time the share needs to supply its work). If the share lacks a resource the job needs
///   (or is empty), altruism has no basis and the job falls back to its inner policy, greedy.
/// - The plan is cached across offers. It is recomputed when a task is lost, when the share
///   changes, and once [`CarbyneParams::replan_fraction`] of the tasks that were unfinished at
///   the last plan have finished. Launches follow the plan and keep it. The plan holds a latest
///   start for every unlaunched task, runnable or not, so a slightly stale plan stays safe: a
///   task whose parents finished late is due at once; one whose parents finished early waits
///   for its latest start, which still meets `T_k`. A plan costs about 0.5–1 µs per remaining
///   task (2–4 ms for the largest TPC-H job, 3,717 tasks: `cargo bench -p fullerene-sdk
///   --bench policies`); re-planning after *every* task end would cost seconds per large job
///   and about two minutes of CPU per run of the 154-job workload, while re-planning after 5%
///   of the remaining tasks needs O(log n) plans per job, about 20 × n task placements.
/// - Among the tasks that must start now, the inner policy decides the order and what fits on
///   the offered machine.
pub struct CarbynePolicy {
    name: String,
    inner: Box<dyn IntraJobPolicy>,
    params: CarbyneParams,
    plan: Option<AltruisticPlan>,
    rng: u64,
    /// The earliest latest start after the last offer's due time among the tasks left to
    /// altruism ([`JobPolicy::next_start_s`]).
    next_due: Option<f64>,
}

impl std::fmt::Debug for CarbynePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CarbynePolicy")
            .field("name", &self.name)
            .field("inner", &self.inner.name())
            .field("params", &self.params)
            .field("planned_completion", &self.planned_completion())
            .finish()
    }
}

impl CarbynePolicy {
    /// Carbyne around `inner`, for `job`; `name` is the policy's command-line name.
    pub fn new(
        name: impl Into<String>,
        job: &Job,
        inner: Box<dyn IntraJobPolicy>,
        params: CarbyneParams,
    ) -> CarbynePolicy {
        // FNV-1a of the job's name, so that jobs draw independently from the same seed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in job.name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        CarbynePolicy {
            name: name.into(),
            inner,
            params,
            plan: None,
            rng: params.seed ^ h,
            next_due: None,
        }
    }

    /// `T_k` of the current plan (absolute time), if one was computed.
    pub fn planned_completion(&self) -> Option<f64> {
        self.plan.as_ref().map(|p| p.completion_s)
    }

    /// The runnable tasks that must start by `offer.now_s` (+ the lookahead) for the job to
    /// finish by `T_k` under `offer.fair_share`, stage by stage, earliest latest start first
    /// within a stage; `None` when the share gives altruism no basis (see the type's doc).
    pub fn tasks_to_start_now(
        &mut self,
        job: &Job,
        state: &JobState,
        offer: &OfferContext,
    ) -> Option<Vec<TaskRef>> {
        self.ensure_plan(job, state, offer)?;
        let plan = self.plan.as_mut()?;
        let due =
            offer.now_s + self.params.lookahead_s.max(0.0) + 1e-9 * offer.now_s.abs().max(1.0);
        let mut out = Vec::new();
        let mut next_due: Option<f64> = None;
        for (k, (_, tasks)) in plan.latest_starts.iter().enumerate() {
            let prefix = &mut plan.launched_prefix[k];
            while *prefix < tasks.len()
                && matches!(
                    state.status(tasks[*prefix].1),
                    Some(TaskStatus::Running | TaskStatus::Finished) | None
                )
            {
                *prefix += 1;
            }
            for &(latest, t) in &tasks[*prefix..] {
                if latest > due {
                    next_due = Some(next_due.map_or(latest, |n| n.min(latest)));
                    break;
                }
                if state.is_runnable(t) {
                    out.push(t);
                }
            }
        }
        self.next_due = next_due;
        Some(out)
    }

    fn ensure_plan(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> Option<()> {
        let share = offer.fair_share;
        if let Some(plan) = &self.plan {
            // A state with fewer events or an earlier time than the plan's is another
            // state (or a replay): plan afresh.
            if plan.losses == state.num_losses()
                && share_close(&plan.share, &share, self.params.share_tolerance)
                && (plan.finished..plan.replan_after).contains(&state.num_finished())
                && offer.now_s >= plan.planned_at_s
            {
                return Some(());
            }
        }
        self.plan = None;
        let mut plan = plan_altruism(job, state, &share, offer.now_s)?;
        let unfinished = state.num_tasks() - state.num_finished();
        let every = (self.params.replan_fraction.max(0.0) * unfinished as f64).floor() as usize;
        plan.replan_after = state.num_finished() + every.max(1);
        self.plan = Some(plan);
        Some(())
    }

    fn altruistic_now(&mut self) -> bool {
        let p = self.params.altruism_probability;
        if p >= 1.0 {
            return true;
        }
        if p <= 0.0 {
            return false;
        }
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// Whether `now` is within `tolerance` of `planned` on every resource, relative to the larger.
fn share_close(planned: &ResourceVec, now: &ResourceVec, tolerance: f64) -> bool {
    fullerene_proto::ResourceKind::ALL.into_iter().all(|k| {
        let (a, b) = (planned[k], now[k]);
        (a - b).abs() <= tolerance.max(0.0) * a.abs().max(b.abs()) + EPSILON
    })
}

impl JobPolicy for CarbynePolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        if offer.kind == OfferKind::Leftover || offer.guaranteed || !self.altruistic_now() {
            // Carbyne §3.3.4: leftovers go to whoever can use them; a job that is not
            // altruistic this time (§3.4.2) is as greedy as its inner policy. Departure
            // (Rayon §5.2 on two-level offers): a reserved job's guaranteed capacity is not
            // its fair share, so yielding it would only return it to the guarantee tier; it is
            // taken greedily too.
            return self.inner.on_offer(job, state, offer);
        }
        let Some(must_start) = self.tasks_to_start_now(job, state, offer) else {
            return self.inner.on_offer(job, state, offer);
        };
        let launch = if must_start.is_empty() {
            Vec::new()
        } else {
            self.inner.bundle_among(job, state, offer, &must_start)
        };
        OfferDecision {
            launch,
            leftover: LeftoverAction::Yield,
        }
    }

    fn replan(&mut self, job: &Job, state: &JobState) {
        self.plan = None;
        self.next_due = None;
        self.inner.replan(job, state);
    }

    fn next_start_s(&self) -> Option<f64> {
        self.next_due
    }

    fn reads_fair_share(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Packing in a share over time
// ---------------------------------------------------------------------------------------------

/// Builds the plan, or `None` when the share cannot host the job's work.
fn plan_altruism(
    job: &Job,
    state: &JobState,
    share: &ResourceVec,
    now_s: f64,
) -> Option<AltruisticPlan> {
    if share.is_zero() || !share.is_valid() {
        return None;
    }
    let n = job.stages.len();
    // Unlaunched tasks per stage, longest first, with their packing demand and duration.
    let mut unlaunched: Vec<Vec<(TaskRef, f64)>> = vec![Vec::new(); n];
    let mut packed_demand = vec![ResourceVec::ZERO; n];
    let mut stretch = vec![1.0f64; n];
    for s in 0..n {
        if state.unlaunched_in_stage(s) == 0 {
            continue;
        }
        let demand = job.stages[s].demand;
        let dominant = demand.dominant_share(share);
        if !dominant.is_finite() {
            return None;
        }
        stretch[s] = dominant.max(1.0);
        packed_demand[s] = demand.min(share);
        let mut tasks: Vec<(TaskRef, f64)> = (0..job.stages[s].num_tasks())
            .map(|i| TaskRef::new(s, i))
            .filter(|t| {
                matches!(
                    state.status(*t),
                    Some(TaskStatus::Waiting | TaskStatus::Runnable)
                )
            })
            .map(|t| (t, job.duration(t) * stretch[s]))
            .collect();
        tasks.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        unlaunched[s] = tasks;
    }
    let running: Vec<(StageIdx, f64, ResourceVec)> = state
        .running_tasks()
        .map(|(t, _, launched_at)| {
            let remaining = (job.duration(t) - (now_s - launched_at)).max(0.0);
            (t.stage(), remaining, job.demand(t))
        })
        .collect();
    if unlaunched.iter().all(Vec::is_empty) {
        let completion = running.iter().map(|r| r.1).fold(0.0, f64::max);
        return Some(AltruisticPlan {
            finished: state.num_finished(),
            losses: state.num_losses(),
            planned_at_s: now_s,
            replan_after: 0,
            share: *share,
            completion_s: now_s + completion,
            latest_starts: Vec::new(),
            launched_prefix: Vec::new(),
        });
    }

    // Forward: T_k (line 17). Stages with unfinished tasks take part; running tasks hold their
    // demand from now and gate their stage's completion.
    let in_forward: Vec<bool> = (0..n).map(|s| state.unfinished_in_stage(s) > 0).collect();
    let forward_stages: Vec<PackStage> = (0..n)
        .map(|s| PackStage {
            demand: packed_demand[s],
            tasks: if in_forward[s] {
                unlaunched[s].clone()
            } else {
                Vec::new()
            },
            preds: job.stages[s]
                .parents
                .iter()
                .copied()
                .filter(|&p| in_forward[p])
                .collect(),
            succs: job.stages[s]
                .children
                .iter()
                .copied()
                .filter(|&c| in_forward[c])
                .collect(),
            active: in_forward[s],
        })
        .collect();
    let forward_reservations: Vec<Reservation> = running
        .iter()
        .map(|&(stage, remaining, demand)| Reservation {
            start: 0.0,
            end: remaining,
            demand,
            gates: Some(stage),
        })
        .collect();
    let forward = pack(share, forward_stages, &forward_reservations);
    let t_k = forward.makespan;

    // Backward (lines 18–20): the reversed DAG of the unlaunched tasks, packed from T_k;
    // running tasks hold their demand at the end of reversed time.
    let in_reverse: Vec<bool> = (0..n).map(|s| !unlaunched[s].is_empty()).collect();
    let reverse_stages: Vec<PackStage> = (0..n)
        .map(|s| PackStage {
            demand: packed_demand[s],
            tasks: unlaunched[s].clone(),
            preds: job.stages[s]
                .children
                .iter()
                .copied()
                .filter(|&c| in_reverse[c])
                .collect(),
            succs: job.stages[s]
                .parents
                .iter()
                .copied()
                .filter(|&p| in_reverse[p])
                .collect(),
            active: in_reverse[s],
        })
        .collect();
    let reverse_reservations: Vec<Reservation> = running
        .iter()
        .map(|&(_, remaining, demand)| Reservation {
            start: t_k - remaining,
            end: t_k,
            demand,
            gates: None,
        })
        .collect();
    let reverse = pack(share, reverse_stages, &reverse_reservations);

    // Line 20: a task placed at reversed time r for d must start (forward) by T_k − r − d.
    let mut latest_starts: Vec<(StageIdx, Vec<(f64, TaskRef)>)> = Vec::new();
    let mut by_stage: Vec<Vec<(f64, TaskRef)>> = vec![Vec::new(); n];
    for placed in &reverse.placements {
        let latest = now_s + t_k - placed.start - placed.duration;
        by_stage[placed.task.stage()].push((latest, placed.task));
    }
    for (s, mut tasks) in by_stage.into_iter().enumerate() {
        if tasks.is_empty() {
            continue;
        }
        tasks.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        latest_starts.push((s, tasks));
    }
    let launched_prefix = vec![0; latest_starts.len()];
    Some(AltruisticPlan {
        finished: state.num_finished(),
        losses: state.num_losses(),
        planned_at_s: now_s,
        replan_after: 0,
        share: *share,
        completion_s: now_s + t_k,
        latest_starts,
        launched_prefix,
    })
}

/// One stage as the packer sees it.
#[derive(Clone, Debug)]
struct PackStage {
    /// Per-task demand (at most the share).
    demand: ResourceVec,
    /// Tasks still to place, in placement order (longest first), with packed durations.
    tasks: Vec<(TaskRef, f64)>,
    /// Stages that must complete before this one's tasks start.
    preds: Vec<StageIdx>,
    /// Stages waiting for this one.
    succs: Vec<StageIdx>,
    /// Whether the stage takes part at all.
    active: bool,
}

/// Resources held over a fixed interval (running tasks).
#[derive(Clone, Copy, Debug)]
struct Reservation {
    start: f64,
    end: f64,
    demand: ResourceVec,
    /// The stage whose completion waits for it (forward packing of running tasks).
    gates: Option<StageIdx>,
}

#[derive(Clone, Copy, Debug)]
struct Placement {
    task: TaskRef,
    start: f64,
    duration: f64,
}

#[derive(Debug)]
struct Packing {
    makespan: f64,
    placements: Vec<Placement>,
}

#[derive(Clone, Copy, Debug)]
enum EventKind {
    TaskEnd(StageIdx, ResourceVec),
    ReservationEnd(Option<StageIdx>),
    Wake,
}

/// The reservations' usage as a step function, for "what do they hold during [a, b)".
struct ReservationProfile {
    /// (time, usage from this time on), ascending; usage before the first point is zero.
    steps: Vec<(f64, ResourceVec)>,
    /// When the usage rises (component-wise, weakly) up to one step and falls after it (true
    /// for both packings: in the forward one every reservation starts at 0, in the backward
    /// one every reservation ends at `T_k`), that step: a window's maximum is then at one of
    /// its ends or at this peak, found in O(log n) instead of a scan.
    peak: Option<(f64, ResourceVec)>,
}

impl ReservationProfile {
    fn new(reservations: &[Reservation]) -> ReservationProfile {
        let mut points: Vec<(f64, ResourceVec, bool)> = Vec::with_capacity(reservations.len() * 2);
        for r in reservations.iter().filter(|r| r.end > r.start) {
            points.push((r.start, r.demand, true));
            points.push((r.end, r.demand, false));
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut steps: Vec<(f64, ResourceVec)> = Vec::with_capacity(points.len());
        let mut usage = ResourceVec::ZERO;
        for (time, demand, starts) in points {
            if starts {
                usage += demand;
            } else {
                usage = usage.saturating_sub(&demand);
            }
            match steps.last_mut() {
                Some(last) if (last.0 - time).abs() <= EPSILON => last.1 = usage,
                _ => steps.push((time, usage)),
            }
        }
        let ge = |a: &ResourceVec, b: &ResourceVec| b.fits_in(a);
        let mut k = 0;
        while k + 1 < steps.len() && ge(&steps[k + 1].1, &steps[k].1) {
            k += 1;
        }
        let falls_after = steps[k.min(steps.len())..]
            .windows(2)
            .all(|w| ge(&w[0].1, &w[1].1));
        let peak = (falls_after && !steps.is_empty()).then(|| steps[k]);
        ReservationProfile { steps, peak }
    }

    fn at(&self, time: f64) -> ResourceVec {
        let i = self.steps.partition_point(|s| s.0 <= time + EPSILON);
        if i == 0 {
            ResourceVec::ZERO
        } else {
            self.steps[i - 1].1
        }
    }

    /// Component-wise maximum of the reserved usage over `[from, to)`.
    fn max_over(&self, from: f64, to: f64) -> ResourceVec {
        if self.steps.is_empty() {
            return ResourceVec::ZERO;
        }
        if let Some(peak) = self.peak {
            // The maximum over a window of a unimodal step function is at one end, or at the
            // peak when the window contains it.
            let mut out = self.at(from).max(&self.at((to - 2.0 * EPSILON).max(from)));
            if peak.0 > from + EPSILON && peak.0 < to - EPSILON {
                out = out.max(&peak.1);
            }
            return out;
        }
        let first = self.steps.partition_point(|s| s.0 <= from + EPSILON);
        let mut out = if first == 0 {
            ResourceVec::ZERO
        } else {
            self.steps[first - 1].1
        };
        for &(time, usage) in &self.steps[first..] {
            if time >= to - EPSILON {
                break;
            }
            out = out.max(&usage);
        }
        out
    }
}

/// List-schedules `stages` into one bin of size `share` starting at time 0, Tetris-style: at
/// each event time, repeatedly start the ready task best aligned with the bin's free resources
/// that fits for its whole duration (given the reservations), until none does.
fn pack(share: &ResourceVec, mut stages: Vec<PackStage>, reservations: &[Reservation]) -> Packing {
    let profile = ReservationProfile::new(reservations);
    let n = stages.len();
    let mut waiting_preds: Vec<usize> = stages.iter().map(|s| s.preds.len()).collect();
    // Placed-or-reserved tasks of each stage that have not ended yet.
    let mut open = vec![0usize; n];
    let mut next_task = vec![0usize; n];
    let mut complete = vec![false; n];
    let mut heap: TimedQueue<EventKind> = TimedQueue::new();
    let mut makespan: f64 = 0.0;
    for r in reservations {
        if let Some(s) = r.gates {
            open[s] += 1;
        }
        heap.push(r.end, EventKind::ReservationEnd(r.gates));
        if r.start > 0.0 {
            heap.push(r.start, EventKind::Wake);
        }
        makespan = makespan.max(r.end);
    }
    let mut ready: BTreeSet<StageIdx> = BTreeSet::new();
    let mut remaining_tasks: usize = 0;
    for s in 0..n {
        if !stages[s].active {
            complete[s] = true;
            continue;
        }
        remaining_tasks += stages[s].tasks.len();
        if waiting_preds[s] == 0 && !stages[s].tasks.is_empty() {
            ready.insert(s);
        }
    }
    // Stages with nothing to place and nothing running complete at once, in topological
    // order (a reversed DAG is handled by iterating until nothing changes).
    let mut completions: Vec<StageIdx> = (0..n)
        .filter(|&s| {
            stages[s].active && stages[s].tasks.is_empty() && open[s] == 0 && waiting_preds[s] == 0
        })
        .collect();

    let mut usage = ResourceVec::ZERO;
    let mut placements = Vec::with_capacity(remaining_tasks);
    let mut time = 0.0f64;
    loop {
        // Cascade stage completions.
        while let Some(s) = completions.pop() {
            if complete[s] {
                continue;
            }
            complete[s] = true;
            let succs = std::mem::take(&mut stages[s].succs);
            for &c in &succs {
                waiting_preds[c] -= 1;
                if waiting_preds[c] == 0 {
                    if next_task[c] < stages[c].tasks.len() {
                        ready.insert(c);
                    } else if open[c] == 0 {
                        completions.push(c);
                    }
                }
            }
            stages[s].succs = succs;
        }
        // Place what fits now.
        loop {
            let free_now = share.saturating_sub(&(usage + profile.max_over(time, time + EPSILON)));
            let free_share = free_now.normalized_by(share);
            let mut best: Option<(StageIdx, f64, f64)> = None;
            for &s in &ready {
                let (_, duration) = stages[s].tasks[next_task[s]];
                let demand = stages[s].demand;
                let held = usage + profile.max_over(time, time + duration.max(EPSILON));
                if !(held + demand).fits_in(share) {
                    continue;
                }
                let alignment = free_share.dot(&demand.normalized_by(share));
                let better = match best {
                    None => true,
                    Some((_, a, d)) => {
                        alignment > a + EPSILON
                            || ((alignment - a).abs() <= EPSILON && duration > d)
                    }
                };
                if better {
                    best = Some((s, alignment, duration));
                }
            }
            let Some((s, _, _)) = best else {
                break;
            };
            place(
                &mut stages,
                s,
                time,
                &mut next_task,
                &mut open,
                &mut usage,
                &mut ready,
                &mut placements,
                &mut makespan,
                &mut remaining_tasks,
                &mut |t, k| {
                    heap.push(t, k);
                },
            );
        }
        // Advance to the next event.
        let Some(event) = heap.pop() else {
            if remaining_tasks == 0 {
                break;
            }
            // Nothing runs and nothing fits: only possible when a reservation pattern blocks
            // a task forever; place the first ready task regardless so that the plan ends.
            let Some(&s) = ready.iter().next() else {
                break;
            };
            place(
                &mut stages,
                s,
                time,
                &mut next_task,
                &mut open,
                &mut usage,
                &mut ready,
                &mut placements,
                &mut makespan,
                &mut remaining_tasks,
                &mut |t, k| {
                    heap.push(t, k);
                },
            );
            continue;
        };
        time = time.max(event.time);
        let mut handle = |event: Timed<EventKind>,
                          completions: &mut Vec<StageIdx>,
                          usage: &mut ResourceVec| match event.kind {
            EventKind::TaskEnd(s, demand) => {
                *usage = usage.saturating_sub(&demand);
                open[s] -= 1;
                if open[s] == 0 && next_task[s] >= stages[s].tasks.len() && waiting_preds[s] == 0 {
                    completions.push(s);
                }
            }
            EventKind::ReservationEnd(Some(s)) => {
                open[s] -= 1;
                if open[s] == 0 && next_task[s] >= stages[s].tasks.len() && waiting_preds[s] == 0 {
                    completions.push(s);
                }
            }
            EventKind::ReservationEnd(None) | EventKind::Wake => {}
        };
        handle(event, &mut completions, &mut usage);
        while heap.peek().is_some_and(|e| e.time <= time + EPSILON) {
            if let Some(e) = heap.pop() {
                handle(e, &mut completions, &mut usage);
            }
        }
    }
    Packing {
        makespan,
        placements,
    }
}

#[allow(clippy::too_many_arguments)]
fn place(
    stages: &mut [PackStage],
    s: StageIdx,
    time: f64,
    next_task: &mut [usize],
    open: &mut [usize],
    usage: &mut ResourceVec,
    ready: &mut BTreeSet<StageIdx>,
    placements: &mut Vec<Placement>,
    makespan: &mut f64,
    remaining_tasks: &mut usize,
    push: &mut dyn FnMut(f64, EventKind),
) {
    let (task, duration) = stages[s].tasks[next_task[s]];
    next_task[s] += 1;
    open[s] += 1;
    *usage += stages[s].demand;
    *remaining_tasks -= 1;
    if next_task[s] >= stages[s].tasks.len() {
        ready.remove(&s);
    }
    placements.push(Placement {
        task,
        start: time,
        duration,
    });
    *makespan = makespan.max(time + duration);
    push(time + duration, EventKind::TaskEnd(s, stages[s].demand));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::cpus;
    use fullerene_proto::ResourceKind;

    fn brute_max(reservations: &[Reservation], from: f64, to: f64) -> f64 {
        // Usage at every breakpoint inside [from, to), and at `from`.
        let mut points = vec![from];
        points.extend(
            reservations
                .iter()
                .flat_map(|r| [r.start, r.end])
                .filter(|&t| t > from && t < to),
        );
        points
            .into_iter()
            .map(|t| {
                reservations
                    .iter()
                    .filter(|r| r.start <= t && t < r.end)
                    .map(|r| r.demand[ResourceKind::Cpus])
                    .sum::<f64>()
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn reservation_windows_match_a_brute_force_scan() {
        // Forward style (all start at 0), backward style (all end at 10) and a mixed one
        // (which takes the general scan).
        let ends = [0.5, 1.0, 2.5, 4.0, 4.0, 7.25];
        let forward: Vec<Reservation> = ends
            .iter()
            .enumerate()
            .map(|(i, &e)| Reservation {
                start: 0.0,
                end: e,
                demand: cpus(1.0 + i as f64),
                gates: None,
            })
            .collect();
        let backward: Vec<Reservation> = ends
            .iter()
            .enumerate()
            .map(|(i, &e)| Reservation {
                start: 10.0 - e,
                end: 10.0,
                demand: cpus(1.0 + i as f64),
                gates: None,
            })
            .collect();
        let mixed: Vec<Reservation> = ends
            .iter()
            .enumerate()
            .map(|(i, &e)| Reservation {
                start: e,
                end: e + 1.0 + i as f64 * 0.3,
                demand: cpus(1.0 + (i % 3) as f64),
                gates: None,
            })
            .collect();
        for (name, rs) in [
            ("forward", forward),
            ("backward", backward),
            ("mixed", mixed),
        ] {
            let profile = ReservationProfile::new(&rs);
            if name != "mixed" {
                assert!(profile.peak.is_some(), "{name} is unimodal");
            }
            for a in 0..24 {
                for len in [0.1, 0.6, 1.5, 3.0, 11.0] {
                    let from = a as f64 * 0.45;
                    let got = profile.max_over(from, from + len)[ResourceKind::Cpus];
                    let want = brute_max(&rs, from, from + len);
                    assert!(
                        (got - want).abs() < 1e-9,
                        "{name} [{from}, {}): {got} vs {want}",
                        from + len
                    );
                }
            }
        }
    }

    #[test]
    fn packing_respects_share_dependencies_and_reservations() {
        // Two stages of 4 tasks (0.3 each, 1 s) into a share of 1: 3 run at a time. A
        // reservation of 0.5 over [0, 2) leaves room for one task until 2.
        let stage = |preds: Vec<usize>, succs: Vec<usize>, s: usize| PackStage {
            demand: cpus(0.3),
            tasks: (0..4).map(|i| (TaskRef::new(s, i), 1.0)).collect(),
            preds,
            succs,
            active: true,
        };
        let stages = vec![stage(vec![], vec![1], 0), stage(vec![0], vec![], 1)];
        let packing = pack(&cpus(1.0), stages.clone(), &[]);
        // Stage 0: 3 at 0, 1 at 1; stage 1 after 2: 3 at 2, 1 at 3; done at 4.
        assert!((packing.makespan - 4.0).abs() < 1e-9);
        let reserved = [Reservation {
            start: 0.0,
            end: 2.0,
            demand: cpus(0.5),
            gates: Some(0),
        }];
        let packing = pack(&cpus(1.0), stages, &reserved);
        // One task at a time until 2 (0, 1), then stage 0's last two at 2, stage 1 from 3.
        let starts_0: Vec<f64> = packing
            .placements
            .iter()
            .filter(|p| p.task.stage == 0)
            .map(|p| p.start)
            .collect();
        assert_eq!(starts_0, vec![0.0, 1.0, 2.0, 2.0]);
        assert!((packing.makespan - 5.0).abs() < 1e-9);
        for p in packing.placements.iter().filter(|p| p.task.stage == 1) {
            assert!(p.start >= 3.0 - 1e-9);
        }
    }
}
