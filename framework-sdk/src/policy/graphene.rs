//! Graphene's online matcher, the framework-side half of Fig. 8 of the tech report (Graphene
//! §5): for one offered machine, repeatedly score the job's runnable tasks with
//! `perfScore = priScore · {pScore, oScore} − η · srpt_j` and take the best, until no task fits
//! even by overbooking. The tasks taken in one pass form the bundle (Fig. 8's `while` loop).
//!
//! The inter-job half of Fig. 8 (which framework is offered the machine, deficit counters) is the
//! master's allocator; it ranks frameworks with the same [`crate::policy::scoring`] functions.

use fullerene_proto::{ResourceKind, ResourceVec};
use fullerene_scheduling::fit::{
    max_copies, overbookable, within, Overbooking, DEFAULT_OVERBOOK_ALLOWANCE,
};
use fullerene_scheduling::scoring::{
    overbooking_score, packing_score, EtaEstimator, PerfScore, DEFAULT_ETA_MULTIPLIER,
    NO_REMOTE_PENALTY,
};

use crate::job::{Job, StageIdx, TaskRef};
use crate::policy::bundle::{RunnableQueues, StageCandidates, StageOrder};
use crate::policy::{
    IntraJobPolicy, JobPolicy, JobState, LeftoverAction, OfferContext, OfferDecision,
};

/// The matcher's parameters (Fig. 8's `rp`, the η multiplier `m`, the overbooking allowance).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatcherParams {
    /// Remote penalty `rp`: a locality-sensitive task away from its input has its packing score
    /// multiplied by this (tech report §7.4: 0.8, [`PAPER_REMOTE_PENALTY`](fullerene_scheduling::scoring::PAPER_REMOTE_PENALTY));
    /// 1 (none) by default, see [`NO_REMOTE_PENALTY`].
    pub remote_penalty: f64,
    /// `m` in η = m · avg(pScore) / avg(srpt) (tech report §7.4: 0.2).
    pub eta_multiplier: f64,
    /// How far disk and network bandwidth may be overbooked, as a fraction of the machine's
    /// capacity, summed over the bundle.
    pub overbook_allowance: f64,
}

impl Default for MatcherParams {
    fn default() -> MatcherParams {
        MatcherParams {
            remote_penalty: NO_REMOTE_PENALTY,
            eta_multiplier: DEFAULT_ETA_MULTIPLIER,
            overbook_allowance: DEFAULT_OVERBOOK_ALLOWANCE,
        }
    }
}

/// Graphene's online matcher for one job (Graphene §5, tech report Fig. 8).
///
/// Choices where the paper is silent:
/// - Candidates: tasks of a stage differ only in duration, so each stage offers one candidate
///   per round: its runnable task with the highest priScore (ties: lowest index).
/// - Locality: a task of a non-root stage is locality sensitive; it is remote on a machine where
///   none of its parent stages' tasks ran ([`JobState::parent_machines`]). Root stages read
///   from the distributed file system and have no preference.
/// - η: one [`EtaEstimator`] per matcher, fed with the (pScore, srpt) of every candidate that
///   fits; candidates that only fit by overbooking do not feed it (their score is oScore).
/// - srpt is the job's [`JobState::srpt`] with demands normalised by the cluster's capacity, so
///   that it does not depend on which machine is offered. Within one job it shifts every
///   candidate alike; it matters for the absolute score, which is what the allocator compares
///   across jobs.
/// - Overbooking: the bundle's summed demand may exceed the offer only on disk and network
///   bandwidth, by at most `overbook_allowance` × the machine's capacity in total, and only on
///   a kind the offer holds some of (a kind offered at zero may belong to a machine that is
///   already overbooked). A machine offered to several
///   frameworks at once could still be overbooked by each; the master's validation of accepts
///   enforces the machine-wide cap (DESIGN.md, invariants).
#[derive(Clone, Debug)]
pub struct GrapheneMatcher {
    pri_scores: Vec<Vec<f64>>,
    params: MatcherParams,
    eta: EtaEstimator,
    queues: Option<RunnableQueues>,
}

impl GrapheneMatcher {
    /// A matcher following `pri_scores` (`[stage][task]`, 1.0 for the task the offline plan
    /// starts first down to 0 for the last; Graphene §5). A missing or non-finite entry counts
    /// as 0 (no preference).
    pub fn new(pri_scores: Vec<Vec<f64>>, params: MatcherParams) -> GrapheneMatcher {
        GrapheneMatcher {
            pri_scores,
            eta: EtaEstimator::new(params.eta_multiplier),
            params,
            queues: None,
        }
    }

    /// The task's priScore.
    pub fn pri_score(&self, t: TaskRef) -> f64 {
        pri_of(&self.pri_scores, t)
    }

    /// The current η.
    pub fn eta(&self) -> f64 {
        self.eta.eta()
    }

    /// The parameters.
    pub fn params(&self) -> &MatcherParams {
        &self.params
    }

    fn queues(&mut self, job: &Job) -> &mut RunnableQueues {
        let pri = &self.pri_scores;
        self.queues.get_or_insert_with(|| {
            RunnableQueues::new(job, StageOrder::by_key(job, |t| -pri_of(pri, t)))
        })
    }

    /// What the offer can hold with the allowance ([`Overbooking::bundle_room`]).
    fn room(&self, offer: &OfferContext) -> ResourceVec {
        Overbooking(self.params.overbook_allowance).bundle_room(&offer.free, &offer.capacity)
    }

    /// The remote penalty of `stage`'s tasks on the offered machine.
    fn remote_penalty(&self, job: &Job, state: &JobState, stage: StageIdx, machine: usize) -> f64 {
        if job.stages[stage].parents.is_empty()
            || state.parent_machines(stage).binary_search(&machine).is_ok()
        {
            1.0
        } else {
            self.params.remote_penalty
        }
    }

    /// Fig. 8's loop over `cands`: score every stage's best task, take the best by
    /// [`PerfScore::beats`], reduce the available resources, repeat until nothing can be placed.
    fn match_bundle(
        &mut self,
        job: &Job,
        state: &JobState,
        offer: &OfferContext,
        mut cands: Vec<StageCandidates>,
    ) -> Vec<TaskRef> {
        let capacity = offer.capacity;
        let srpt = state.srpt(job, &offer.cluster_capacity);
        // May go negative on fungible kinds, by at most the allowance: the overbooking score
        // then measures the bundle's cumulative excess.
        let mut available = offer.free;
        let mut bundle = Vec::new();
        let penalties: Vec<f64> = cands
            .iter()
            .map(|c| self.remote_penalty(job, state, c.stage, offer.machine))
            .collect();
        loop {
            let fits_now = available.max(&ResourceVec::ZERO);
            let mut best: Option<(usize, PerfScore, f64)> = None;
            for (i, c) in cands.iter().enumerate() {
                let Some(&head) = c.tasks.front() else {
                    continue;
                };
                let p_score = packing_score(&fits_now, &c.demand, &capacity, penalties[i]);
                let o_score = if p_score > 0.0
                    || !ResourceKind::ALL
                        .into_iter()
                        .all(|k| within(c.demand[k], fits_now[k]) || overbookable(k, offer.free[k]))
                {
                    0.0
                } else {
                    overbooking_score(
                        &available,
                        &c.demand,
                        &capacity,
                        self.params.overbook_allowance,
                    )
                };
                if p_score > 0.0 {
                    self.eta.observe(p_score, srpt);
                }
                let pri = self.pri_score(head);
                let Some(score) = PerfScore::new(pri, p_score, o_score, self.eta.eta(), srpt)
                else {
                    continue;
                };
                let better = match &best {
                    None => true,
                    Some((_, b, bpri)) => score.beats(b) || (!b.beats(&score) && pri > *bpri),
                };
                if better {
                    best = Some((i, score, pri));
                }
            }
            let Some((i, _, _)) = best else {
                return bundle;
            };
            let c = &mut cands[i];
            if let Some(t) = c.tasks.pop_front() {
                available -= c.demand;
                bundle.push(t);
            }
        }
    }
}

pub(crate) fn pri_of(pri_scores: &[Vec<f64>], t: TaskRef) -> f64 {
    pri_scores
        .get(t.stage())
        .and_then(|row| row.get(t.index as usize))
        .copied()
        .filter(|p| p.is_finite())
        .unwrap_or(0.0)
}

impl JobPolicy for GrapheneMatcher {
    fn name(&self) -> &str {
        "graphene"
    }

    fn on_offer(&mut self, job: &Job, state: &JobState, offer: &OfferContext) -> OfferDecision {
        let room = self.room(offer);
        let cands = self
            .queues(job)
            .candidates(job, state, |d| max_copies(d, &room));
        OfferDecision {
            launch: self.match_bundle(job, state, offer, cands),
            leftover: LeftoverAction::Decline,
        }
    }

    fn replan(&mut self, _job: &Job, _state: &JobState) {
        if let Some(q) = &mut self.queues {
            q.reset();
        }
    }
}

impl IntraJobPolicy for GrapheneMatcher {
    fn bundle_among(
        &mut self,
        job: &Job,
        state: &JobState,
        offer: &OfferContext,
        tasks: &[TaskRef],
    ) -> Vec<TaskRef> {
        let room = self.room(offer);
        let runnable = tasks.iter().copied().filter(|t| state.is_runnable(*t));
        let cands = self
            .queues(job)
            .order()
            .candidates_from(job, runnable, |d| max_copies(d, &room));
        self.match_bundle(job, state, offer, cands)
    }
}

impl GrapheneMatcher {
    /// Installs new priScores, e.g. from a re-plan after lost tasks (DESIGN.md step 7).
    pub fn set_pri_scores(&mut self, pri_scores: Vec<Vec<f64>>) {
        self.pri_scores = pri_scores;
        self.queues = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::StageSpec;
    use crate::testkit;
    use fullerene_proto::messages::OfferKind;

    use fullerene_scheduling::testkit::res;

    fn offer(machine: usize, free: &str, capacity: &str) -> OfferContext {
        OfferContext {
            machine,
            free: res(free),
            capacity: res(capacity),
            kind: OfferKind::Regular,
            now_s: 0.0,
            cluster_capacity: res(capacity),
            fair_share: res(capacity),
            guaranteed: false,
        }
    }

    fn spec(id: u32, parents: &[u32], durations: &[f64], demand: &str) -> StageSpec {
        testkit::stage(id, parents, durations, res(demand))
    }

    #[test]
    fn bundle_follows_pri_scores_and_fills_the_machine() {
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                spec(0, &[], &[1.0; 4], "cpus=2,mem_mib=2"),
                spec(1, &[], &[1.0; 4], "cpus=2,mem_mib=2"),
            ],
        )
        .unwrap();
        let state = JobState::new(&job);
        // Stage 1 first in the plan; within stage 0, task 3 before the others.
        let pri = vec![vec![0.1, 0.2, 0.3, 0.4], vec![0.9, 0.8, 0.7, 0.6]];
        let mut m = GrapheneMatcher::new(pri, MatcherParams::default());
        let d = m.on_offer(
            &job,
            &state,
            &offer(0, "cpus=10,mem_mib=10", "cpus=10,mem_mib=10"),
        );
        assert_eq!(
            d.launch,
            vec![
                TaskRef::new(1, 0),
                TaskRef::new(1, 1),
                TaskRef::new(1, 2),
                TaskRef::new(1, 3),
                TaskRef::new(0, 3),
            ]
        );
        assert_eq!(d.leftover, LeftoverAction::Decline);
    }

    #[test]
    fn packing_outweighs_a_small_pri_difference_and_misfits_are_skipped() {
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                spec(0, &[], &[1.0], "cpus=1"),
                spec(1, &[], &[1.0], "cpus=6,mem_mib=6"),
                spec(2, &[], &[1.0], "cpus=11"),
            ],
        )
        .unwrap();
        let state = JobState::new(&job);
        let pri = vec![vec![0.9], vec![0.8], vec![1.0]];
        let mut m = GrapheneMatcher::new(pri, MatcherParams::default());
        let d = m.on_offer(
            &job,
            &state,
            &offer(0, "cpus=10,mem_mib=10", "cpus=10,mem_mib=10"),
        );
        // Stage 2 does not fit at all; stage 1's packing score (0.6·1 + 0.6·1)·0.8 beats
        // stage 0's 0.1·0.9.
        assert_eq!(d.launch, vec![TaskRef::new(1, 0), TaskRef::new(0, 0)]);
    }

    #[test]
    fn remote_penalty_steers_tasks_to_where_their_parents_ran() {
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                spec(0, &[], &[1.0], "cpus=1"),
                spec(1, &[], &[1.0], "cpus=1"),
                spec(2, &[0], &[1.0], "cpus=4"),
                spec(3, &[1], &[1.0], "cpus=4"),
            ],
        )
        .unwrap();
        let mut state = JobState::new(&job);
        state.mark_launched(TaskRef::new(0, 0), 7, 0.0);
        state.mark_launched(TaskRef::new(1, 0), 8, 0.0);
        state.mark_finished(&job, TaskRef::new(0, 0), 1.0);
        state.mark_finished(&job, TaskRef::new(1, 0), 1.0);
        // Equal priScores; each machine fits one of the two.
        let pri = vec![vec![1.0], vec![1.0], vec![0.5], vec![0.5]];
        let paper = MatcherParams {
            remote_penalty: fullerene_scheduling::scoring::PAPER_REMOTE_PENALTY,
            ..MatcherParams::default()
        };
        let mut m = GrapheneMatcher::new(pri.clone(), paper);
        let on7 = m.on_offer(&job, &state, &offer(7, "cpus=4", "cpus=16"));
        let on8 = m.on_offer(&job, &state, &offer(8, "cpus=4", "cpus=16"));
        assert_eq!(on7.launch, vec![TaskRef::new(2, 0)]);
        assert_eq!(on8.launch, vec![TaskRef::new(3, 0)]);
        // Without a penalty (the default) both are equal and the first stage goes first.
        let mut plain = GrapheneMatcher::new(pri, MatcherParams::default());
        let on8 = plain.on_offer(&job, &state, &offer(8, "cpus=4", "cpus=16"));
        assert_eq!(on8.launch, vec![TaskRef::new(2, 0)]);
    }

    #[test]
    fn overbooking_ranks_below_fitting_tasks_and_stays_within_the_allowance() {
        let cap = "cpus=16,net_mbps=1000";
        let job = Job::new(
            "j",
            "g",
            None,
            vec![
                spec(0, &[], &[1.0; 3], "cpus=1,net_mbps=600"),
                spec(1, &[], &[1.0], "cpus=1"),
            ],
        )
        .unwrap();
        let state = JobState::new(&job);
        let pri = vec![vec![1.0; 3], vec![0.01]];
        let mut m = GrapheneMatcher::new(pri, MatcherParams::default());
        let d = m.on_offer(&job, &state, &offer(0, "cpus=16,net_mbps=1000", cap));
        // The first net task fits; then the cpu-only task (fits) beats the second net task
        // (overbooking 20% < 25%); then the second net task by overbooking; the third would
        // overbook 80% and is not taken.
        assert_eq!(
            d.launch,
            vec![TaskRef::new(0, 0), TaskRef::new(1, 0), TaskRef::new(0, 1)]
        );
        // Nothing is overbooked on a kind the offer has none of (the machine may already be
        // overbooked there).
        let d = m.on_offer(&job, &state, &offer(0, "cpus=16", cap));
        assert_eq!(d.launch, vec![TaskRef::new(1, 0)]);
        // With no allowance nothing is overbooked.
        let mut strict = GrapheneMatcher::new(
            vec![vec![1.0; 3], vec![0.01]],
            MatcherParams {
                overbook_allowance: 0.0,
                ..MatcherParams::default()
            },
        );
        let d = strict.on_offer(&job, &state, &offer(0, "cpus=16,net_mbps=1000", cap));
        assert_eq!(d.launch, vec![TaskRef::new(0, 0), TaskRef::new(1, 0)]);
    }

    #[test]
    fn a_bundle_overbooks_a_link_only_while_it_has_bandwidth_free() {
        let cap = "cpus=16,net_mbps=1000";
        let job = Job::new(
            "j",
            "g",
            None,
            vec![spec(0, &[], &[1.0; 6], "cpus=1,net_mbps=300")],
        )
        .unwrap();
        let state = JobState::new(&job);
        let mut m = GrapheneMatcher::new(
            vec![vec![1.0; 6]],
            MatcherParams {
                overbook_allowance: 0.5,
                ..MatcherParams::default()
            },
        );
        let d = m.on_offer(&job, &state, &offer(0, "cpus=16,net_mbps=1000", cap));
        // Three fit (900 of 1000); the fourth uses the last 100 and overbooks by 200; a fifth
        // would stay within the 50% allowance (1500) but finds the link already full.
        assert_eq!(d.launch.len(), 4, "{:?}", d.launch);
    }

    #[test]
    fn eta_is_learned_from_scored_candidates() {
        let job = Job::new("j", "g", None, vec![spec(0, &[], &[5.0; 3], "cpus=2")]).unwrap();
        let state = JobState::new(&job);
        let mut m = GrapheneMatcher::new(vec![vec![1.0; 3]], MatcherParams::default());
        assert_eq!(m.eta(), 0.0);
        m.on_offer(&job, &state, &offer(0, "cpus=16", "cpus=16"));
        assert!(m.eta() > 0.0);
    }
}
