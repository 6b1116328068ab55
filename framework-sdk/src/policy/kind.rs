//! The policy names of the command line and the simulator's `--compare`, and the constructor
//! that turns a name into a boxed [`JobPolicy`] for one job.
//!
//! Each name pairs an inter-job allocator (the master's, not built here) with the intra-job
//! policy built here:
//!
//! | name | allocator (inter-job) | intra-job policy |
//! | --- | --- | --- |
//! | `graphene+carbyne` | deficit counters (DRF factor), best perfScore, leftover SRTF | [`CarbynePolicy`] around [`GrapheneMatcher`] |
//! | `graphene` | deficit counters (DRF factor), best perfScore | [`GrapheneMatcher`] |
//! | `carbyne` | DRF, leftover redistribution | [`CarbynePolicy`] around [`TetrisPolicy`] (Carbyne §5: "using Tetris as an intra-job scheduler") |
//! | `drf` | DRF | [`drf_policy`] (Tez's breadth-first order, Carbyne §5.1) |
//! | `tetris` | Tetris (packing + SRTF across jobs) | [`TetrisPolicy`] |
//! | `cp` | capacity scheduler | [`CriticalPathPolicy`] |
//! | `bfs` | capacity scheduler | [`BfsPolicy`] (Tez) |
//! | `fifo` | FIFO across jobs | [`FifoPolicy`] |
//! | `sjf` | shortest job first | [`SjfPolicy`] |

use std::fmt;
use std::str::FromStr;

use crate::job::Job;
use crate::policy::baselines::{
    drf_policy, BfsPolicy, CriticalPathPolicy, FifoPolicy, SjfPolicy, TetrisPolicy,
};
use crate::policy::carbyne::{CarbyneParams, CarbynePolicy};
use crate::policy::graphene::{GrapheneMatcher, MatcherParams};
use crate::policy::JobPolicy;

/// A scheduling scheme by name (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Graphene's matcher inside Carbyne's altruism: the combination Fullerene is built for.
    GrapheneCarbyne,
    /// Graphene's online matcher (Graphene §5).
    Graphene,
    /// Carbyne's altruism around Tetris (Carbyne §3.3, §5).
    Carbyne,
    /// DRF across jobs, Tez's breadth-first order within.
    Drf,
    /// Tetris: packing + SRTF, no DAG awareness.
    Tetris,
    /// Critical path first.
    CriticalPath,
    /// Breadth-first (Tez) on the capacity scheduler.
    Bfs,
    /// FIFO.
    Fifo,
    /// Shortest job (task) first.
    Sjf,
}

impl PolicyKind {
    /// Every kind, in the order of the module's table.
    pub const ALL: [PolicyKind; 9] = [
        PolicyKind::GrapheneCarbyne,
        PolicyKind::Graphene,
        PolicyKind::Carbyne,
        PolicyKind::Drf,
        PolicyKind::Tetris,
        PolicyKind::CriticalPath,
        PolicyKind::Bfs,
        PolicyKind::Fifo,
        PolicyKind::Sjf,
    ];

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            PolicyKind::GrapheneCarbyne => "graphene+carbyne",
            PolicyKind::Graphene => "graphene",
            PolicyKind::Carbyne => "carbyne",
            PolicyKind::Drf => "drf",
            PolicyKind::Tetris => "tetris",
            PolicyKind::CriticalPath => "cp",
            PolicyKind::Bfs => "bfs",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Sjf => "sjf",
        }
    }

    /// True when the policy follows Graphene's offline plan, so [`build`] needs its priScores.
    pub const fn needs_pri_scores(self) -> bool {
        matches!(self, PolicyKind::GrapheneCarbyne | PolicyKind::Graphene)
    }

    /// True when the policy yields resources altruistically (Carbyne), so the allocator should
    /// redistribute leftovers.
    pub const fn is_altruistic(self) -> bool {
        matches!(self, PolicyKind::GrapheneCarbyne | PolicyKind::Carbyne)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a policy could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// A name that is not one of [`PolicyKind::ALL`].
    #[error("unknown policy `{0}` (known: graphene+carbyne, graphene, carbyne, drf, tetris, cp, bfs, fifo, sjf)")]
    UnknownPolicy(String),
    /// A Graphene policy without the offline plan's priScores.
    #[error("policy `{0}` needs the offline plan's priScores")]
    MissingPriScores(PolicyKind),
    /// priScores that do not match the job's shape.
    #[error("priScores have {got} entries for stage {stage}, which has {expected} tasks")]
    PriScoreShape {
        /// The stage index.
        stage: usize,
        /// Its number of tasks.
        expected: usize,
        /// How many scores were given (for a missing stage row, 0).
        got: usize,
    },
    /// A priScore outside 0..=1 or not a number.
    #[error("priScore {value} of task {stage}.{index} is not within 0..=1")]
    PriScoreValue {
        /// Stage index.
        stage: usize,
        /// Task index.
        index: usize,
        /// The value.
        value: f64,
    },
}

impl FromStr for PolicyKind {
    type Err = PolicyError;

    fn from_str(s: &str) -> Result<PolicyKind, PolicyError> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| PolicyError::UnknownPolicy(s.to_string()))
    }
}

/// Parameters of every policy; the defaults are the papers' recommendations.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyParams {
    /// Graphene's matcher.
    pub matcher: MatcherParams,
    /// Carbyne's altruism.
    pub carbyne: CarbyneParams,
}

/// Builds the intra-job policy named by `kind` for `job`. `pri_scores` (`[stage][task]`, from
/// Graphene's offline planner) are required by the Graphene kinds and ignored by the others;
/// they are checked against the job's shape, since they come from another component.
pub fn build(
    kind: PolicyKind,
    job: &Job,
    pri_scores: Option<Vec<Vec<f64>>>,
    params: &PolicyParams,
) -> Result<Box<dyn JobPolicy>, PolicyError> {
    let matcher = |pri: Option<Vec<Vec<f64>>>| -> Result<GrapheneMatcher, PolicyError> {
        let pri = pri.ok_or(PolicyError::MissingPriScores(kind))?;
        check_pri_scores(job, &pri)?;
        Ok(GrapheneMatcher::new(pri, params.matcher))
    };
    Ok(match kind {
        PolicyKind::GrapheneCarbyne => Box::new(CarbynePolicy::new(
            kind.name(),
            job,
            Box::new(matcher(pri_scores)?),
            params.carbyne,
        )),
        PolicyKind::Graphene => Box::new(matcher(pri_scores)?),
        PolicyKind::Carbyne => Box::new(CarbynePolicy::new(
            kind.name(),
            job,
            Box::new(TetrisPolicy::new(job)),
            params.carbyne,
        )),
        PolicyKind::Drf => Box::new(drf_policy(job)),
        PolicyKind::Tetris => Box::new(TetrisPolicy::new(job)),
        PolicyKind::CriticalPath => Box::new(CriticalPathPolicy::new(job)),
        PolicyKind::Bfs => Box::new(BfsPolicy::new(job)),
        PolicyKind::Fifo => Box::new(FifoPolicy::new(job)),
        PolicyKind::Sjf => Box::new(SjfPolicy::new(job)),
    })
}

/// How far outside 0..=1 a priScore may stray by rounding (rank / count in floating point).
const PRI_SCORE_TOLERANCE: f64 = 1e-9;

fn check_pri_scores(job: &Job, pri: &[Vec<f64>]) -> Result<(), PolicyError> {
    for (s, stage) in job.stages.iter().enumerate() {
        let row = pri.get(s).map(Vec::as_slice).unwrap_or(&[]);
        if row.len() != stage.num_tasks() {
            return Err(PolicyError::PriScoreShape {
                stage: s,
                expected: stage.num_tasks(),
                got: row.len(),
            });
        }
        if let Some((index, &value)) = row
            .iter()
            .enumerate()
            .find(|(_, v)| !(-PRI_SCORE_TOLERANCE..=1.0 + PRI_SCORE_TOLERANCE).contains(*v))
        {
            return Err(PolicyError::PriScoreValue {
                stage: s,
                index,
                value,
            });
        }
    }
    if pri.len() != job.stages.len() {
        return Err(PolicyError::PriScoreShape {
            stage: job.stages.len(),
            expected: 0,
            got: pri.get(job.stages.len()).map_or(0, Vec::len),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::job;

    #[test]
    fn names_round_trip_and_unknown_names_are_rejected() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.name().parse::<PolicyKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
        assert_eq!(
            "tez".parse::<PolicyKind>(),
            Err(PolicyError::UnknownPolicy("tez".into()))
        );
    }

    #[test]
    fn build_checks_pri_scores_and_names_policies() {
        let j = job(&[(0, &[], &[1.0, 1.0], "cpus=1"), (1, &[0], &[1.0], "cpus=1")]);
        let p = PolicyParams::default();
        for kind in PolicyKind::ALL {
            let pri = kind
                .needs_pri_scores()
                .then(|| vec![vec![1.0, 0.5], vec![0.0]]);
            let policy = build(kind, &j, pri, &p).expect("builds");
            assert_eq!(policy.name(), kind.name());
        }
        assert_eq!(
            build(PolicyKind::Graphene, &j, None, &p).err(),
            Some(PolicyError::MissingPriScores(PolicyKind::Graphene))
        );
        assert!(matches!(
            build(PolicyKind::Graphene, &j, Some(vec![vec![1.0]]), &p),
            Err(PolicyError::PriScoreShape {
                stage: 0,
                expected: 2,
                got: 1
            })
        ));
        assert!(matches!(
            build(
                PolicyKind::GrapheneCarbyne,
                &j,
                Some(vec![vec![1.0, 2.0], vec![0.0]]),
                &p
            ),
            Err(PolicyError::PriScoreValue {
                stage: 0,
                index: 1,
                ..
            })
        ));
        assert!(matches!(
            build(
                PolicyKind::Graphene,
                &j,
                Some(vec![vec![1.0, 0.5], vec![0.0], vec![]]),
                &p
            ),
            Err(PolicyError::PriScoreShape { .. })
        ));
    }
}
