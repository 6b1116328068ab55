//! Machinery shared by the policies: per-stage candidate lists and the bundle loops over them.
//!
//! Tasks of a stage are alike except for their duration (one demand vector per stage), so every
//! policy decides in two steps: *which stage* next (its own criterion), and *which task of that
//! stage* (a fixed within-stage order: index, duration, priScore). A stage whose demand does not
//! fit the rest of an offer can be dropped for the rest of that offer, since the rest only
//! shrinks. On one offer a stage can contribute at most as many tasks as fit in the offered
//! machine, so a policy never needs more than that many candidates per stage: this is what keeps
//! an offer's cost independent of how many thousands of tasks a stage has.

use std::collections::VecDeque;

use fullerene_proto::ResourceVec;
use fullerene_scheduling::fit::max_copies;

use crate::job::{Job, StageIdx, TaskRef};
use crate::policy::{JobPolicy, JobState, OfferContext};

/// An intra-job policy that can also choose among a given subset of the runnable tasks: what
/// Carbyne's altruism (Carbyne §3.3.3) needs of the policy it wraps, since it decides *which*
/// tasks must start now and leaves *the order among them* to the intra-job policy.
pub trait IntraJobPolicy: JobPolicy {
    /// A bundle for `offer` chosen only among `tasks` (tasks that are not runnable are ignored),
    /// in this policy's order, fitting the offer as [`JobPolicy::on_offer`]'s bundles do.
    fn bundle_among(
        &mut self,
        job: &Job,
        state: &JobState,
        offer: &OfferContext,
        tasks: &[TaskRef],
    ) -> Vec<TaskRef>;
}

/// The runnable tasks of one stage a policy may choose from on one offer.
#[derive(Clone, Debug, PartialEq)]
pub struct StageCandidates {
    /// The stage.
    pub stage: StageIdx,
    /// Its per-task demand.
    pub demand: ResourceVec,
    /// Candidate tasks, all runnable, in the policy's within-stage order (best first).
    pub tasks: VecDeque<TaskRef>,
}

/// A fixed order of each stage's tasks: a permutation per stage and its inverse.
#[derive(Clone, Debug)]
pub(crate) struct StageOrder {
    perm: Vec<Vec<u32>>,
    rank: Vec<Vec<u32>>,
}

impl StageOrder {
    /// Orders each stage's tasks by `key` ascending, ties by index (so orders are deterministic).
    pub(crate) fn by_key(job: &Job, key: impl Fn(TaskRef) -> f64) -> StageOrder {
        let mut perm = Vec::with_capacity(job.stages.len());
        let mut rank = Vec::with_capacity(job.stages.len());
        for (s, stage) in job.stages.iter().enumerate() {
            let keys: Vec<f64> = (0..stage.num_tasks())
                .map(|i| key(TaskRef::new(s, i)))
                .collect();
            let mut p: Vec<u32> = (0..stage.num_tasks() as u32).collect();
            p.sort_by(|&a, &b| {
                keys[a as usize]
                    .total_cmp(&keys[b as usize])
                    .then(a.cmp(&b))
            });
            let mut r = vec![0u32; p.len()];
            for (pos, &i) in p.iter().enumerate() {
                r[i as usize] = pos as u32;
            }
            perm.push(p);
            rank.push(r);
        }
        StageOrder { perm, rank }
    }

    /// Index order within every stage.
    pub(crate) fn by_index(job: &Job) -> StageOrder {
        StageOrder::by_key(job, |t| f64::from(t.index))
    }

    /// The task's position in its stage's order (lower goes first); `u32::MAX` outside the job.
    pub(crate) fn rank(&self, t: TaskRef) -> u32 {
        self.rank
            .get(t.stage())
            .and_then(|r| r.get(t.index as usize))
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// Groups `tasks` (all runnable) by stage, each group in this order, at most
    /// `limit(stage, demand)` per stage; stages in index order.
    pub(crate) fn candidates_from(
        &self,
        job: &Job,
        tasks: impl IntoIterator<Item = TaskRef>,
        limit: impl Fn(&ResourceVec) -> usize,
    ) -> Vec<StageCandidates> {
        let mut by_stage: std::collections::BTreeMap<StageIdx, Vec<TaskRef>> =
            std::collections::BTreeMap::new();
        for t in tasks {
            if t.stage() < job.stages.len() {
                by_stage.entry(t.stage()).or_default().push(t);
            }
        }
        by_stage
            .into_iter()
            .filter_map(|(stage, mut ts)| {
                let demand = job.stages[stage].demand;
                ts.sort_by_key(|t| self.rank(*t));
                ts.dedup();
                ts.truncate(limit(&demand));
                (!ts.is_empty()).then(|| StageCandidates {
                    stage,
                    demand,
                    tasks: ts.into(),
                })
            })
            .collect()
    }
}

/// Walks each stage's runnable tasks in a [`StageOrder`] without rescanning: a per-stage cursor
/// skips, once and for all, tasks that have left the never-launched set (launched, finished);
/// tasks that come back after a loss are found through [`JobState::stage_retries`]. Amortised
/// O(1) per task over the job's life, plus O(retries) per use.
///
/// The cursors are only valid for the one [`JobState`] they were advanced against; a state
/// that went back in time (fewer events than seen, another job) resets them.
#[derive(Clone, Debug)]
pub(crate) struct RunnableQueues {
    order: StageOrder,
    cursor: Vec<usize>,
    seen_epoch: u64,
    num_tasks: usize,
}

impl RunnableQueues {
    pub(crate) fn new(job: &Job, order: StageOrder) -> RunnableQueues {
        RunnableQueues {
            cursor: vec![0; job.stages.len()],
            order,
            seen_epoch: 0,
            num_tasks: job.num_tasks(),
        }
    }

    pub(crate) fn order(&self) -> &StageOrder {
        &self.order
    }

    /// Forgets the cursors (after a re-plan, or for another state).
    pub(crate) fn reset(&mut self) {
        self.cursor.iter_mut().for_each(|c| *c = 0);
        self.seen_epoch = 0;
    }

    fn guard(&mut self, state: &JobState) {
        if state.epoch() < self.seen_epoch
            || state.num_tasks() != self.num_tasks
            || state.num_stages() != self.cursor.len()
        {
            self.reset();
        }
        self.seen_epoch = state.epoch();
    }

    /// The first `n` runnable tasks of `stage` in order (fresh ones merged with retries).
    fn head(&mut self, state: &JobState, stage: StageIdx, n: usize) -> VecDeque<TaskRef> {
        let perm = &self.order.perm[stage];
        let cursor = &mut self.cursor[stage];
        let fresh = |i: u32| {
            let t = TaskRef::new(stage, i as usize);
            state.is_runnable(t) && state.attempts(t) == 0
        };
        while *cursor < perm.len() && !fresh(perm[*cursor]) {
            *cursor += 1;
        }
        let mut retries: Vec<TaskRef> = state.stage_retries(stage).collect();
        retries.sort_by_key(|t| self.order.rank(*t));
        let mut retries = retries.into_iter().peekable();
        let mut out = VecDeque::with_capacity(n.min(64));
        let mut pos = *cursor;
        while out.len() < n {
            while pos < perm.len() && !fresh(perm[pos]) {
                pos += 1;
            }
            let next_fresh = (pos < perm.len()).then(|| perm[pos]);
            let take_retry = match (retries.peek(), next_fresh) {
                (Some(r), Some(f)) => self.order.rank(*r) < self.order.rank[stage][f as usize],
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_retry {
                out.extend(retries.next());
            } else if let Some(f) = next_fresh {
                out.push_back(TaskRef::new(stage, f as usize));
                pos += 1;
            }
        }
        out
    }

    /// Candidates from every runnable stage, at most `limit(demand)` tasks each, stages in
    /// index (topological) order.
    pub(crate) fn candidates(
        &mut self,
        job: &Job,
        state: &JobState,
        limit: impl Fn(&ResourceVec) -> usize,
    ) -> Vec<StageCandidates> {
        self.guard(state);
        let stages: Vec<StageIdx> = state.runnable_stages().collect();
        stages
            .into_iter()
            .filter_map(|stage| {
                let demand = job.stages[stage].demand;
                let n = limit(&demand).min(state.num_runnable_in_stage(stage));
                let tasks = self.head(state, stage, n);
                (!tasks.is_empty()).then_some(StageCandidates {
                    stage,
                    demand,
                    tasks,
                })
            })
            .collect()
    }
}

/// The limit function for policies that never overbook: tasks that fit in `free`.
pub(crate) fn fit_limit(free: ResourceVec) -> impl Fn(&ResourceVec) -> usize {
    move |demand| max_copies(demand, &free)
}

/// The greedy fill shared by the priority-order baselines: repeatedly take the head task with
/// the smallest `key` among stages whose demand fits what is left of `free`; a stage that does
/// not fit is dropped for the rest of the offer. Work-conserving: stops only when nothing fits.
pub(crate) fn greedy_fill<K: PartialOrd>(
    free: &ResourceVec,
    mut cands: Vec<StageCandidates>,
    key: impl Fn(&StageCandidates, TaskRef) -> K,
) -> Vec<TaskRef> {
    let mut avail = *free;
    let mut bundle = Vec::new();
    loop {
        cands.retain(|c| !c.tasks.is_empty() && c.demand.fits_in(&avail));
        let mut best: Option<(usize, K)> = None;
        for (i, c) in cands.iter().enumerate() {
            let Some(&head) = c.tasks.front() else {
                continue;
            };
            let k = key(c, head);
            if best.as_ref().is_none_or(|(_, bk)| k < *bk) {
                best = Some((i, k));
            }
        }
        let Some((i, _)) = best else {
            return bundle;
        };
        let c = &mut cands[i];
        if let Some(t) = c.tasks.pop_front() {
            avail -= c.demand;
            bundle.push(t);
        }
    }
}
