//! The hand-written multi-job policies Decima is compared with (§7: Spark's FIFO, shortest job
//! first, the fair scheduler, and Graphene's packing across jobs), on the same
//! [`SessionPolicy`] interface as the learned one, so that all run in one comparison.

use std::fmt;
use std::str::FromStr;

use fullerene_scheduling::fit::max_copies;
use fullerene_scheduling::scoring::{packing_score, EtaEstimator, PerfScore, NO_REMOTE_PENALTY};

use super::{SessionAction, SessionPolicy, SessionView, StageCandidate};
use crate::policy::graphene::pri_of;

/// A hand-written session policy by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SessionPolicyKind {
    /// Spark's default: the earliest job first, all the parallelism it can use.
    Fifo,
    /// Shortest (remaining) job first, all the parallelism it can use.
    Sjf,
    /// The fair scheduler: each job an equal share of the executors, the job furthest below
    /// it first.
    Fair,
    /// Graphene's online scoring across jobs.
    Graphene,
    /// The fair scheduler as Decima's simulator runs it (decima-sim's `DynamicPartitionAgent`):
    /// a job keeps the executors it frees, and the rest go to jobs in arrival order up to an
    /// equal share.
    DynamicPartition,
}

impl SessionPolicyKind {
    /// Every kind, in the order of Decima's comparison.
    pub const ALL: [SessionPolicyKind; 5] = [
        SessionPolicyKind::Fifo,
        SessionPolicyKind::Sjf,
        SessionPolicyKind::Fair,
        SessionPolicyKind::Graphene,
        SessionPolicyKind::DynamicPartition,
    ];

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            SessionPolicyKind::Fifo => "fifo",
            SessionPolicyKind::Sjf => "sjf",
            SessionPolicyKind::Fair => "fair",
            SessionPolicyKind::Graphene => "graphene",
            SessionPolicyKind::DynamicPartition => "dynamic-partition",
        }
    }

    /// Whether the policy reads Graphene's priScores (the caller runs the offline planner).
    pub const fn needs_pri_scores(self) -> bool {
        matches!(self, SessionPolicyKind::Graphene)
    }

    /// A fresh policy of this kind.
    pub fn build(self) -> Box<dyn SessionPolicy> {
        match self {
            SessionPolicyKind::Fifo => Box::new(FifoSession),
            SessionPolicyKind::Sjf => Box::new(SjfSession),
            SessionPolicyKind::Fair => Box::new(FairSession),
            SessionPolicyKind::Graphene => Box::new(GrapheneSession::default()),
            SessionPolicyKind::DynamicPartition => Box::new(DynamicPartitionSession),
        }
    }
}

impl fmt::Display for SessionPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A session policy name that is not one of [`SessionPolicyKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown session policy `{0}` (known: fifo, sjf, fair, graphene, dynamic-partition)")]
pub struct UnknownSessionPolicy(pub String);

impl FromStr for SessionPolicyKind {
    type Err = UnknownSessionPolicy;

    fn from_str(s: &str) -> Result<SessionPolicyKind, UnknownSessionPolicy> {
        SessionPolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| UnknownSessionPolicy(s.to_string()))
    }
}

/// The candidate that minimises `key` (the first of equals: candidates come job by job in
/// arrival order, stages in topological order).
fn first_by<K: PartialOrd>(
    candidates: &[StageCandidate],
    mut key: impl FnMut(&StageCandidate) -> K,
) -> usize {
    let mut best = 0;
    let mut best_key = key(&candidates[0]);
    for (i, c) in candidates.iter().enumerate().skip(1) {
        let k = key(c);
        if k < best_key {
            best = i;
            best_key = k;
        }
    }
    best
}

/// Spark's FIFO: the earliest job's first runnable stage, as many executors as it can use.
#[derive(Clone, Copy, Debug, Default)]
pub struct FifoSession;

impl SessionPolicy for FifoSession {
    fn name(&self) -> &str {
        "fifo"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        SessionAction {
            candidate: first_by(candidates, |c| view.jobs[c.job].arrival_s),
            limit: view.max_limit,
        }
    }
}

/// Shortest job first (Decima §2.3's SJF "strictly prioritizes short jobs"): the job with
/// the least remaining work, all the executors it can use.
#[derive(Clone, Copy, Debug, Default)]
pub struct SjfSession;

impl SessionPolicy for SjfSession {
    fn name(&self) -> &str {
        "sjf"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        let work: Vec<f64> = view
            .jobs
            .iter()
            .map(|j| j.state.remaining_work(&j.job, &view.cluster_capacity))
            .collect();
        SessionAction {
            candidate: first_by(candidates, |c| work[c.job]),
            limit: view.max_limit,
        }
    }
}

/// The fair scheduler (Decima's "dynamic partition"): every live job an equal share of the
/// executors, `⌈max_limit / jobs⌉`; the job running the fewest tasks goes first, up to its
/// share, or one task more when every job has its share (so no executor idles while work
/// waits).
#[derive(Clone, Copy, Debug, Default)]
pub struct FairSession;

impl SessionPolicy for FairSession {
    fn name(&self) -> &str {
        "fair"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        let share = view.max_limit.div_ceil(view.jobs.len().max(1));
        let candidate = first_by(candidates, |c| view.jobs[c.job].state.num_running());
        SessionAction {
            candidate,
            limit: share.max(candidates[candidate].min_limit),
        }
    }
}

/// The fair scheduler of Decima's simulator (decima-sim, `heuristic_agent.py`,
/// `DynamicPartitionAgent`), the "fair" its simulated comparisons ran:
///
/// 1. the job the free executors last worked for (the *source* job) keeps them while it has a
///    runnable stage, whatever its share: they go to its first runnable stage;
/// 2. otherwise the first job in arrival order that holds fewer than the cap
///    `⌈max_limit / jobs with tasks yet to launch⌉` executors gets its first runnable stage,
///    up to the cap.
///
/// Departures, forced by the session's interface:
/// - an executor a job holds is one running its task: a free machine is an offer, not the
///   job's, so only step 1 keeps it with its job (decima-sim's cap also counts the idle
///   executors a job holds, and those moving to or committed to it);
/// - every free machine is offered at every event, where decima-sim's event hands out only
///   the executors one job just freed (the others wait for their job's next event, or for a
///   job to arrive);
/// - where every job is at the cap, decima-sim leaves the executors idle until the next
///   event, but a session policy always chooses: the job running the fewest tasks gets one
///   more, as [`FairSession`] does.
///
/// [`FairSession`] is the stronger fair scheduler (work-conserving, rebalanced at every
/// decision); this one is there to compare with Decima's own figures like for like.
#[derive(Clone, Copy, Debug, Default)]
pub struct DynamicPartitionSession;

impl SessionPolicy for DynamicPartitionSession {
    fn name(&self) -> &str {
        "dynamic-partition"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        // The source job: the first (in arrival order) with executors freed from it, that is
        // room for tasks of its candidate stage on the machines it last worked on.
        let freed_for = |c: &StageCandidate| {
            let key = view.jobs[c.job].key;
            let demand = view.jobs[c.job].job.stages[c.stage].demand;
            view.offers
                .iter()
                .zip(view.offer_jobs)
                .filter(|(_, last)| **last == Some(key))
                .map(|(offer, _)| max_copies(&demand, &offer.free))
                .fold(0usize, usize::saturating_add)
        };
        let source = candidates.iter().enumerate().find_map(|(i, c)| {
            let freed = freed_for(c);
            (freed > 0).then_some((i, freed))
        });
        if let Some((i, freed)) = source {
            return SessionAction {
                candidate: i,
                limit: candidates[i].min_limit - 1 + freed,
            };
        }
        let unlaunched = view
            .jobs
            .iter()
            .filter(|j| (0..j.state.num_stages()).any(|s| j.state.unlaunched_in_stage(s) > 0))
            .count();
        let cap = view.max_limit.div_ceil(unlaunched.max(1));
        if let Some(i) = candidates
            .iter()
            .position(|c| view.jobs[c.job].state.num_running() < cap)
        {
            return SessionAction {
                candidate: i,
                limit: cap,
            };
        }
        let candidate = first_by(candidates, |c| view.jobs[c.job].state.num_running());
        SessionAction {
            candidate,
            limit: candidates[candidate].min_limit,
        }
    }
}

/// Graphene's online scoring (§5, tech report Fig. 8) across the session's jobs: each
/// candidate stage scores `priScore · pScore − η · srpt` with its first runnable task's
/// priScore (1 without a plan), the best packing score over the event's offers, and its
/// job's srpt; the best stage runs with all the parallelism it can use.
///
/// Departure: Graphene's matcher picks task by task within one job's offer, and its
/// inter-job fairness is the allocator's deficit counters. In a session one framework owns
/// every job, so the score ranks stages of all jobs and the session's limit takes the place of
/// per-task picks; overbooking is off (a session's offers are what its machines have free).
#[derive(Clone, Debug, Default)]
pub struct GrapheneSession {
    eta: EtaEstimator,
}

impl SessionPolicy for GrapheneSession {
    fn name(&self) -> &str {
        "graphene"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        let mut best: Option<(usize, PerfScore)> = None;
        for (i, c) in candidates.iter().enumerate() {
            let entry = &view.jobs[c.job];
            let demand = entry.job.stages[c.stage].demand;
            let p_score = view
                .offers
                .iter()
                .map(|o| packing_score(&o.free, &demand, &o.capacity, NO_REMOTE_PENALTY))
                .fold(0.0, f64::max);
            let srpt = entry.state.srpt(&entry.job, &view.cluster_capacity);
            if p_score > 0.0 {
                self.eta.observe(p_score, srpt);
            }
            let pri = match (
                &entry.pri_scores,
                entry.state.stage_runnable(c.stage).next(),
            ) {
                (Some(scores), Some(task)) => pri_of(scores, task),
                // Without a plan every task weighs the same: packing and srpt decide.
                (None, Some(_)) => 1.0,
                _ => 0.0,
            };
            let Some(score) = PerfScore::new(pri, p_score, 0.0, self.eta.eta(), srpt) else {
                continue;
            };
            if best.as_ref().is_none_or(|(_, b)| score.beats(b)) {
                best = Some((i, score));
            }
        }
        SessionAction {
            candidate: best.map_or(0, |(i, _)| i),
            limit: view.max_limit,
        }
    }
}
