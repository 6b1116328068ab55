//! Decima's model as a [`SessionPolicy`]: on each decision it observes the session
//! ([`observe`]), scores the candidate stages, then the chosen stage's job's limits, and
//! either takes the most likely of each (`Greedy`, for deployment and evaluation) or samples
//! them (`Sample`, for training, recording each step).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fullerene_sdk::session::{SessionAction, SessionPolicy, SessionView, StageCandidate};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::features::observe;
use crate::model::{DecimaModel, Step};

/// How actions are taken from the model's probabilities.
#[derive(Clone, Debug)]
pub enum Choice {
    /// The most likely stage and limit.
    Greedy,
    /// Drawn from the probabilities with this generator.
    Sample(Box<ChaCha8Rng>),
}

impl Choice {
    /// Sampling from `seed`.
    pub fn sample(seed: u64) -> Choice {
        Choice::Sample(Box::new(ChaCha8Rng::seed_from_u64(seed)))
    }

    fn pick(&mut self, probabilities: &[f32]) -> usize {
        match self {
            Choice::Greedy => {
                probabilities
                    .iter()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |best, (i, &p)| {
                        if p > best.1 {
                            (i, p)
                        } else {
                            best
                        }
                    })
                    .0
            }
            Choice::Sample(rng) => {
                let mut u: f32 = rng.gen();
                for (i, &p) in probabilities.iter().enumerate() {
                    if u < p {
                        return i;
                    }
                    u -= p;
                }
                // Rounding left a sliver: the last choice with any probability.
                probabilities.iter().rposition(|&p| p > 0.0).unwrap_or(0)
            }
        }
    }
}

/// Where a training run collects the steps its policies take.
pub type Recorder = Arc<Mutex<Vec<Step>>>;

/// The learned policy (`decima` in `fullerene learn eval --model`).
pub struct DecimaPolicy {
    model: Arc<DecimaModel>,
    choice: Choice,
    recorder: Option<Recorder>,
    failures: Arc<AtomicU64>,
}

impl DecimaPolicy {
    /// The policy of `model`, choosing as `choice` says.
    pub fn new(model: Arc<DecimaModel>, choice: Choice) -> DecimaPolicy {
        DecimaPolicy {
            model,
            choice,
            recorder: None,
            failures: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The same policy, recording every step into `recorder`.
    pub fn recording(mut self, recorder: Recorder) -> DecimaPolicy {
        self.recorder = Some(recorder);
        self
    }

    /// The same policy, counting its failures in `failures` (shared with its caller, since
    /// a session owns its policy).
    pub fn counting_failures(mut self, failures: Arc<AtomicU64>) -> DecimaPolicy {
        self.failures = failures;
        self
    }

    /// Decisions where the model failed to compute (then the first candidate ran with all
    /// the parallelism allowed, so the session went on): a run with any is not the model's.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn try_choose(
        &mut self,
        view: &SessionView<'_>,
        candidates: &[StageCandidate],
    ) -> crate::model::Result<SessionAction> {
        let observation = observe(view, candidates);
        let decision = self.model.decide(&observation)?;
        let candidate = self.choice.pick(&decision.stage);
        let limits = self
            .model
            .limit_probabilities(&decision, &observation, candidate)?;
        let limit = self.choice.pick(&limits) + 1;
        if let Some(recorder) = &self.recorder {
            if let Ok(mut steps) = recorder.lock() {
                steps.push(Step {
                    observation,
                    candidate,
                    limit,
                    at_s: view.now_s,
                });
            }
        }
        Ok(SessionAction { candidate, limit })
    }
}

impl SessionPolicy for DecimaPolicy {
    fn name(&self) -> &str {
        "decima"
    }

    fn choose(&mut self, view: &SessionView<'_>, candidates: &[StageCandidate]) -> SessionAction {
        match self.try_choose(view, candidates) {
            Ok(action) => action,
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                SessionAction {
                    candidate: 0,
                    limit: view.max_limit,
                }
            }
        }
    }
}
