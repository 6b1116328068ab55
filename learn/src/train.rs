//! Training Decima's policy with REINFORCE in the simulator (§5.3), as Decima's `train.py`
//! does:
//! - each iteration draws one job sequence and runs it several times (its "agents") with
//!   actions sampled from the current policy, the episodes in parallel on the machine's cores;
//! - rewards penalise the jobs in the system over time; with continuous arrivals they are
//!   differential (minus the running average reward per second);
//! - the baseline of each decision is the mean return of the iteration's episodes at the same
//!   time (input-dependent: the episodes share their arrivals);
//! - the loss is `−Σ (return − baseline) · log π(action) − β · entropy`, with β decaying
//!   from 1 to 10⁻⁴ (Decima's entropy schedule); gradients are averaged over the episodes
//!   (Decima sums them: with Adam the scale does not matter) and one Adam step (learning
//!   rate 10⁻³) is taken;
//! - under continuous arrivals the curriculum grows episodes: each is cut at a time drawn from
//!   an exponential whose mean grows with the iterations (Decima's decaying `reset_prob`,
//!   2,000 s to 20,000 s); batch episodes run to their end (Decima's default, `reset_prob` 0);
//! - every random draw derives from the run's seed and the iteration, so a run is reproducible
//!   and a resumed run continues exactly as an uninterrupted one.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::{Tensor, Var};
use fullerene_sdk::session::SessionPolicyKind;
use fullerene_sdk::Job;
use fullerene_sim::session::{run_episode_until, sample_episode, SessionEnv, SessionSetting};
use fullerene_sim::SimError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;

use crate::file::{restore, store, ModelFile, ModelFileError, OptimiserState, Provenance};
use crate::model::{DecimaModel, Step};
use crate::policy::{Choice, DecimaPolicy};
use crate::reinforce::{baselines, differential, returns, rewards, Stay};

/// Seeds of training sequences stay below this; evaluation draws from it up, so it evaluates
/// on job sequences training never saw.
pub const EVAL_FIRST_SEED: u64 = 1_000_000;

/// How a training run is set up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrainConfig {
    /// The environment the episodes run in.
    pub env: SessionEnv,
    /// Episodes per iteration, all on the iteration's job sequence (Decima: 16 agents).
    pub episodes: usize,
    /// Adam's learning rate (Decima: 10⁻³).
    pub learning_rate: f64,
    /// The entropy weight at the start, its floor and its decrease per iteration (Decima: 1,
    /// 10⁻⁴, 10⁻³).
    pub entropy: (f64, f64, f64),
    /// Rewards are job-seconds over this (Decima: 100,000 ms).
    pub reward_scale_s: f64,
    /// Differential rewards (for continuous arrivals).
    pub differential: bool,
    /// The curriculum: episode cut-offs whose mean grows with the iterations (Decima's
    /// `reset_prob` 5·10⁻⁷ to 5·10⁻⁸ per ms, decaying by 4·10⁻¹⁰ per iteration); `None`: every
    /// episode runs to its end.
    pub curriculum: Option<Curriculum>,
    /// Decisions per backward pass (bounds the memory of a pass).
    pub batch_decisions: usize,
    /// The run's seed.
    pub seed: u64,
}

/// Episode cut-offs drawn from an exponential distribution whose rate falls linearly with the
/// iterations, to a floor.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Curriculum {
    /// The rate at the start, per second.
    pub initial_rate: f64,
    /// The lowest rate, per second.
    pub min_rate: f64,
    /// The rate's fall per iteration.
    pub decay: f64,
}

impl Curriculum {
    /// Decima's (`train.py`'s streaming example: `--reset_prob 5e-7 --reset_prob_min 5e-8
    /// --reset_prob_decay 4e-10`, per millisecond).
    pub const DECIMA: Curriculum = Curriculum {
        initial_rate: 5e-4,
        min_rate: 5e-5,
        decay: 4e-7,
    };

    /// The mean cut-off at `iteration`, seconds.
    pub fn mean_s(&self, iteration: u64) -> f64 {
        let rate = (self.initial_rate - self.decay * iteration as f64).max(self.min_rate);
        1.0 / rate
    }

    fn draw_s(&self, iteration: u64, rng: &mut ChaCha8Rng) -> f64 {
        let u: f64 = rng.gen();
        -self.mean_s(iteration) * (1.0 - u).ln()
    }
}

impl TrainConfig {
    /// Decima's settings for `env`, with `seed`.
    pub fn new(env: SessionEnv, seed: u64) -> TrainConfig {
        let streaming = matches!(env.setting, SessionSetting::Poisson { .. });
        TrainConfig {
            differential: streaming,
            curriculum: streaming.then_some(Curriculum::DECIMA),
            env,
            episodes: 8,
            learning_rate: 1e-3,
            entropy: (1.0, 1e-4, 1e-3),
            reward_scale_s: 100.0,
            batch_decisions: 256,
            seed,
        }
    }

    fn entropy_weight(&self, iteration: u64) -> f64 {
        let (start, floor, decay) = self.entropy;
        (start - decay * iteration as f64).max(floor)
    }
}

/// Why training stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The simulator refused the setting or an episode failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The tensor library failed.
    #[error("tensor computation failed: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A checkpoint could not be written or read.
    #[error(transparent)]
    File(#[from] ModelFileError),
    /// An episode made no decision (nothing to learn from).
    #[error("iteration {0}: no episode made a decision")]
    NoDecisions(u64),
    /// The model failed to compute a decision during an episode.
    #[error("iteration {0}: the model failed to compute a decision")]
    ModelFailed(u64),
    /// The loss is not a number: training diverged.
    #[error("iteration {0}: the loss is not finite, training diverged (the last checkpoint holds earlier weights; try a lower --learning-rate)")]
    Diverged(u64),
}

/// What one iteration did.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct IterationReport {
    /// The iteration (from 0).
    pub iteration: u64,
    /// The episodes' mean JCT, seconds (jobs cut off count their time so far).
    pub mean_jct_s: f64,
    /// The fair scheduler's mean JCT on the same jobs and cut-off, seconds: the learning
    /// curve is `mean_jct_s / fair_jct_s`, since each iteration draws other jobs.
    pub fair_jct_s: f64,
    /// The episodes' mean total reward.
    pub mean_reward: f64,
    /// Decisions per episode, on average.
    pub decisions: f64,
    /// The mean normalised entropy of the policy at its decisions.
    pub entropy: f64,
    /// The entropy weight used.
    pub entropy_weight: f64,
    /// Seconds the iteration took.
    pub seconds: f64,
}

/// Adam (Kingma & Ba), with its state kept so a checkpoint can resume it.
struct Adam {
    learning_rate: f64,
    steps: u64,
    first: Vec<Tensor>,
    second: Vec<Tensor>,
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const ADAM_EPSILON: f64 = 1e-8;

impl Adam {
    fn new(learning_rate: f64, parameters: &[(String, &Var)]) -> candle_core::Result<Adam> {
        let zeros = |v: &&Var| v.as_tensor().zeros_like();
        Ok(Adam {
            learning_rate,
            steps: 0,
            first: parameters
                .iter()
                .map(|(_, v)| zeros(v))
                .collect::<Result<_, _>>()?,
            second: parameters
                .iter()
                .map(|(_, v)| zeros(v))
                .collect::<Result<_, _>>()?,
        })
    }

    fn step(&mut self, parameters: &[(String, &Var)], grads: &[Tensor]) -> candle_core::Result<()> {
        self.steps += 1;
        let t = self.steps as i32;
        let correct1 = 1.0 - BETA1.powi(t);
        let correct2 = 1.0 - BETA2.powi(t);
        for (i, ((_, var), grad)) in parameters.iter().zip(grads).enumerate() {
            self.first[i] = ((&self.first[i] * BETA1)? + (grad * (1.0 - BETA1))?)?;
            self.second[i] = ((&self.second[i] * BETA2)? + (grad.sqr()? * (1.0 - BETA2))?)?;
            let update = ((&self.first[i] / correct1)?
                / ((&self.second[i] / correct2)?.sqrt()? + ADAM_EPSILON)?)?;
            var.set(&(var.as_tensor() - (update * self.learning_rate)?)?)?;
        }
        Ok(())
    }
}

/// A training run: the model, its optimiser, and where it is.
pub struct Trainer {
    config: TrainConfig,
    jobs: Arc<Vec<Job>>,
    model: DecimaModel,
    adam: Adam,
    iteration: u64,
    /// The running average reward per second (for differential rewards).
    reward_rate: f64,
    trained_s: f64,
}

impl Trainer {
    /// A fresh run on `jobs` (the workload).
    pub fn new(config: TrainConfig, jobs: Vec<Job>) -> Result<Trainer, TrainError> {
        let model = DecimaModel::new(config.seed)?;
        Trainer::with_model(config, jobs, model)
    }

    /// A fresh run on `jobs` from `model`'s weights, with a new optimiser at iteration 0.
    fn with_model(
        config: TrainConfig,
        jobs: Vec<Job>,
        model: DecimaModel,
    ) -> Result<Trainer, TrainError> {
        config.env.validate()?;
        if jobs.is_empty() {
            return Err(SimError::NoJobs.into());
        }
        let adam = Adam::new(config.learning_rate, &model.parameters())?;
        Ok(Trainer {
            config,
            jobs: Arc::new(jobs),
            model,
            adam,
            iteration: 0,
            reward_rate: 0.0,
            trained_s: 0.0,
        })
    }

    /// A fresh run that starts from `initial`'s weights instead of random ones, with a new
    /// optimiser at iteration 0: transfer learning, e.g. a model trained on batches
    /// fine-tuned under continuous arrivals. Decima trains each setting from scratch; starting
    /// from a trained policy spares the thousands of iterations it spends learning what both
    /// settings share (set [`TrainConfig::entropy`]'s start low, or the entropy bonus first
    /// pushes the policy back towards uniform). `initial` may be a model or a checkpoint (its
    /// optimiser state is not used).
    pub fn warm_start(
        config: TrainConfig,
        jobs: Vec<Job>,
        initial: &ModelFile,
        path: &std::path::Path,
    ) -> Result<Trainer, TrainError> {
        Trainer::with_model(config, jobs, initial.model(path)?)
    }

    /// A run resumed from a checkpoint (its model, optimiser, iteration and average reward).
    pub fn resume(
        config: TrainConfig,
        jobs: Vec<Job>,
        checkpoint: &ModelFile,
        path: &std::path::Path,
    ) -> Result<Trainer, TrainError> {
        // The checkpoint's weights, then its optimiser, iteration and average reward.
        let mut trainer = Trainer::warm_start(config, jobs, checkpoint, path)?;
        let Some((state, rate)) = &checkpoint.optimiser else {
            return Err(ModelFileError::Shape {
                path: path.to_path_buf(),
                reason: "it holds a model but no optimiser state: not a checkpoint".into(),
            }
            .into());
        };
        let parameters = trainer.model.parameters();
        let restore_all = |stored: &[crate::file::StoredTensor]| {
            parameters
                .iter()
                .zip(stored)
                .map(|((name, var), s)| restore(s, var.dims(), name, path))
                .collect::<Result<Vec<_>, _>>()
        };
        if state.first.len() != parameters.len() || state.second.len() != parameters.len() {
            return Err(ModelFileError::Shape {
                path: path.to_path_buf(),
                reason: "the optimiser state does not match the network".into(),
            }
            .into());
        }
        trainer.adam = Adam {
            learning_rate: trainer.config.learning_rate,
            steps: state.steps,
            first: restore_all(&state.first)?,
            second: restore_all(&state.second)?,
        };
        trainer.iteration = checkpoint.provenance.iterations;
        trainer.trained_s = checkpoint.provenance.training_s;
        trainer.reward_rate = *rate;
        Ok(trainer)
    }

    /// The model as trained so far.
    pub fn model(&self) -> &DecimaModel {
        &self.model
    }

    /// Iterations done.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// The job sequence seed of an iteration (below [`EVAL_FIRST_SEED`]).
    fn sequence_seed(&self, iteration: u64) -> u64 {
        self.config
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(iteration)
            % EVAL_FIRST_SEED
    }

    /// One iteration: episodes, advantages, one optimiser step.
    pub fn step(&mut self) -> Result<IterationReport, TrainError> {
        let clock = Instant::now();
        let iteration = self.iteration;
        let mut rng = ChaCha8Rng::seed_from_u64(self.config.seed ^ iteration.rotate_left(32));
        let episode = sample_episode(&self.jobs, &self.config.env, self.sequence_seed(iteration))?;
        let cutoff_s = self
            .config
            .curriculum
            .map_or(f64::INFINITY, |c| c.draw_s(iteration, &mut rng));
        let action_seeds: Vec<u64> = (0..self.config.episodes).map(|_| rng.gen()).collect();
        let model = Arc::new(self.model.clone());
        let env = self.config.env;
        // The episodes, in parallel: each its own sampling stream, recording its steps.
        let runs: Vec<(Vec<Step>, Vec<Stay>, f64)> = action_seeds
            .par_iter()
            .map(|&seed| {
                let recorder = Arc::new(Mutex::new(Vec::new()));
                let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let policy = DecimaPolicy::new(model.clone(), Choice::sample(seed))
                    .recording(recorder.clone())
                    .counting_failures(failures.clone());
                let outcome = run_episode_until(&episode, Box::new(policy), &env, None, cutoff_s)?;
                if failures.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    return Err(TrainError::ModelFailed(iteration));
                }
                let steps = std::mem::take(&mut *recorder.lock().map_err(|_| {
                    SimError::Internal("a training episode's recorder was poisoned".into())
                })?);
                // Jobs that had not arrived by a cut-off spent no time in the system.
                let stays = episode
                    .jobs
                    .iter()
                    .zip(&outcome.jcts_s)
                    .filter_map(|(job, jct)| {
                        jct.map(|jct| Stay {
                            arrival_s: job.arrival_s,
                            end_s: job.arrival_s + jct,
                        })
                    })
                    .collect();
                Ok((steps, stays, outcome.makespan_s))
            })
            .collect::<Result<_, TrainError>>()?;
        if runs.iter().all(|(steps, _, _)| steps.is_empty()) {
            return Err(TrainError::NoDecisions(iteration));
        }
        let fair = run_episode_until(
            &episode,
            SessionPolicyKind::Fair.build(),
            &env,
            None,
            cutoff_s,
        )?;
        // Rewards, returns and the input-dependent baseline.
        let scale = self.config.reward_scale_s;
        let mut per_episode = Vec::with_capacity(runs.len());
        let (mut total_reward, mut total_time) = (0.0, 0.0);
        for (steps, stays, end_s) in &runs {
            let times: Vec<f64> = steps.iter().map(|s| s.at_s).collect();
            let raw = rewards(&times, stays, *end_s, scale);
            total_reward += raw.iter().sum::<f64>();
            total_time += end_s - times.first().copied().unwrap_or(*end_s);
            let shaped = if self.config.differential {
                differential(&raw, &times, *end_s, self.reward_rate)
            } else {
                raw.clone()
            };
            per_episode.push((times, returns(&shaped), raw.iter().sum::<f64>()));
        }
        if self.config.differential && total_time > 0.0 {
            // An exponential average over iterations, updated after their use (Decima keeps a
            // window of its last 100,000 steps' rewards, this iteration's included).
            let rate = total_reward / total_time;
            self.reward_rate = if iteration == 0 {
                rate
            } else {
                0.9 * self.reward_rate + 0.1 * rate
            };
        }
        let series: Vec<(&[f64], &[f64])> = per_episode
            .iter()
            .map(|(t, r, _)| (t.as_slice(), r.as_slice()))
            .collect();
        let baseline = baselines(&series);
        // Gradients over the episodes' decisions in batches, the batches in parallel, summed in
        // their order (so a run replays exactly whatever the threads' timing).
        let beta = self.config.entropy_weight(iteration);
        let parameters = self.model.parameters();
        let per_episode_weight = 1.0 / runs.len() as f64;
        let size = self.config.batch_decisions.max(1);
        let batches: Vec<(usize, usize)> = runs
            .iter()
            .enumerate()
            .flat_map(|(e, (steps, _, _))| (0..steps.len()).step_by(size).map(move |at| (e, at)))
            .collect();
        let model = &self.model;
        let parts: Vec<(Vec<Option<Tensor>>, f64, usize)> = batches
            .par_iter()
            .map(|&(e, at)| {
                let steps = &runs[e].0;
                let chunk = &steps[at..(at + size).min(steps.len())];
                let (returns, baseline) = (&per_episode[e].1, &baseline[e]);
                let refs: Vec<&Step> = chunk.iter().collect();
                let advantages: Vec<f32> = (0..chunk.len())
                    .map(|k| (returns[at + k] - baseline[at + k]) as f32)
                    .collect();
                let (log_p, entropy) = model.log_probs(&refs)?;
                let advantages = Tensor::from_vec(advantages, chunk.len(), model.device())?;
                let loss =
                    ((log_p * advantages)?.sum_all()?.neg()? - (entropy.sum_all()? * beta)?)?;
                if !loss.to_scalar::<f32>()?.is_finite() {
                    return Err(TrainError::Diverged(iteration));
                }
                let store = (loss * per_episode_weight)?.backward()?;
                let grads = parameters
                    .iter()
                    .map(|(_, var)| store.get(var.as_tensor()).cloned())
                    .collect();
                let entropy = f64::from(entropy.sum_all()?.to_scalar::<f32>()?);
                Ok((grads, entropy, chunk.len()))
            })
            .collect::<Result<_, TrainError>>()?;
        let mut grads: Vec<Option<Tensor>> = vec![None; parameters.len()];
        let (mut entropy_sum, mut decisions) = (0.0, 0usize);
        for (part, entropy, count) in parts {
            entropy_sum += entropy;
            decisions += count;
            for (slot, g) in grads.iter_mut().zip(part) {
                if let Some(g) = g {
                    *slot = Some(match slot.take() {
                        Some(sum) => (sum + g)?,
                        None => g,
                    });
                }
            }
        }
        let grads: Vec<Tensor> = grads
            .into_iter()
            .zip(&parameters)
            .map(|(g, (_, var))| g.map_or_else(|| var.as_tensor().zeros_like(), Ok))
            .collect::<Result<_, _>>()?;
        self.adam.step(&parameters, &grads)?;
        self.iteration += 1;
        let seconds = clock.elapsed().as_secs_f64();
        self.trained_s += seconds;
        let jcts: Vec<f64> = runs
            .iter()
            .flat_map(|(_, stays, _)| stays.iter().map(|s| s.end_s - s.arrival_s))
            .collect();
        Ok(IterationReport {
            iteration,
            mean_jct_s: jcts.iter().sum::<f64>() / jcts.len().max(1) as f64,
            fair_jct_s: fair.mean_jct_s(),
            mean_reward: per_episode.iter().map(|(_, _, r)| r).sum::<f64>() / runs.len() as f64,
            decisions: decisions as f64 / runs.len() as f64,
            entropy: entropy_sum / decisions.max(1) as f64,
            entropy_weight: beta,
            seconds,
        })
    }

    /// The model with its provenance (`command` is the command line that trains it).
    pub fn model_file(&self, command: &str, workload: &str) -> Result<ModelFile, TrainError> {
        Ok(ModelFile::of_model(
            &self.model,
            self.provenance(command, workload),
        )?)
    }

    /// A checkpoint: the model, the optimiser's state and the average reward.
    pub fn checkpoint(&self, command: &str, workload: &str) -> Result<ModelFile, TrainError> {
        let mut file = self.model_file(command, workload)?;
        let names = || self.model.parameters().into_iter().map(|(n, _)| n);
        let state = OptimiserState {
            steps: self.adam.steps,
            first: store(names().zip(&self.adam.first))?,
            second: store(names().zip(&self.adam.second))?,
        };
        file.optimiser = Some((state, self.reward_rate));
        Ok(file)
    }

    fn provenance(&self, command: &str, workload: &str) -> Provenance {
        Provenance {
            command: command.to_string(),
            seed: self.config.seed,
            iterations: self.iteration,
            workload: workload.to_string(),
            executors: self.config.env.executors,
            training_s: self.trained_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use fullerene_scheduling::testkit::res;
    use fullerene_sdk::testkit::{job, stage};

    use super::*;

    /// Small two-stage jobs of different sizes.
    fn workload() -> Vec<Job> {
        (0..6)
            .map(|i| {
                job(
                    &format!("j{i}"),
                    "default",
                    None,
                    vec![
                        stage(0, &[], &vec![1.0 + i as f64; 2 + 2 * i], res("cpus=1")),
                        stage(1, &[0], &[0.5; 3], res("cpus=1")),
                    ],
                )
            })
            .collect()
    }

    fn config() -> TrainConfig {
        let env = SessionEnv {
            executors: 3,
            moving_delay_s: 0.5,
            setting: SessionSetting::Batch { jobs: 4 },
        };
        let mut config = TrainConfig::new(env, 3);
        config.episodes = 3;
        config.batch_decisions = 5;
        config
    }

    fn weights(model: &DecimaModel) -> Vec<f32> {
        model
            .parameters()
            .iter()
            .flat_map(|(_, v)| {
                v.as_tensor()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn iterations_change_the_policy_and_replay_from_the_seed() {
        let mut a = Trainer::new(config(), workload()).unwrap();
        let initial = weights(a.model());
        let reports: Vec<IterationReport> = (0..3).map(|_| a.step().unwrap()).collect();
        assert_ne!(weights(a.model()), initial, "the optimiser moved no weight");
        for r in &reports {
            assert!(r.mean_jct_s.is_finite() && r.mean_jct_s > 0.0, "{r:?}");
            assert!(r.fair_jct_s.is_finite() && r.fair_jct_s > 0.0, "{r:?}");
            assert!(r.decisions > 0.0 && r.entropy > 0.0, "{r:?}");
            assert!(r.mean_reward < 0.0, "{r:?}");
        }
        let mut b = Trainer::new(config(), workload()).unwrap();
        for r in &reports {
            let again = b.step().unwrap();
            assert_eq!(
                (again.mean_jct_s, again.mean_reward),
                (r.mean_jct_s, r.mean_reward)
            );
        }
        assert_eq!(weights(a.model()), weights(b.model()));
    }

    /// A run of [`config`] after `iterations` iterations.
    fn trained(iterations: usize) -> Trainer {
        let mut trainer = Trainer::new(config(), workload()).unwrap();
        for _ in 0..iterations {
            trainer.step().unwrap();
        }
        trainer
    }

    #[test]
    fn a_resumed_run_continues_as_an_uninterrupted_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.ckpt");
        let straight = trained(3);
        let first = trained(2);
        first.checkpoint("test", "w").unwrap().save(&path).unwrap();
        let file = ModelFile::load(&path).unwrap();
        let mut resumed = Trainer::resume(config(), workload(), &file, &path).unwrap();
        assert_eq!(resumed.iteration(), 2);
        resumed.step().unwrap();
        assert_eq!(weights(resumed.model()), weights(straight.model()));
        // A plain model file is not a checkpoint.
        let model_only = first.model_file("test", "w").unwrap();
        assert!(Trainer::resume(config(), workload(), &model_only, &path).is_err());
    }

    #[test]
    fn a_warm_start_begins_from_the_given_weights_under_another_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("batch.model");
        let batch = trained(2);
        batch.model_file("test", "w").unwrap().save(&path).unwrap();
        let batch_weights = weights(batch.model());
        // Another seed (its own random weights) and continuous arrivals.
        let mut streaming = config();
        streaming.seed = 11;
        streaming.env.setting = SessionSetting::Poisson {
            jobs: 6,
            mean_gap_s: 2.0,
        };
        streaming.differential = true;
        assert_ne!(
            weights(Trainer::new(streaming.clone(), workload()).unwrap().model()),
            batch_weights
        );
        let file = ModelFile::load(&path).unwrap();
        let mut warm = Trainer::warm_start(streaming, workload(), &file, &path).unwrap();
        assert_eq!(warm.iteration(), 0, "a warm start is a new run");
        assert_eq!(weights(warm.model()), batch_weights);
        warm.step().unwrap();
        assert_ne!(
            weights(warm.model()),
            batch_weights,
            "the optimiser moved no weight"
        );
    }

    #[test]
    fn a_positive_advantage_makes_its_action_more_likely() {
        // One REINFORCE step by hand: the loss −A · log π(a) with A > 0 raises π(a).
        let model = DecimaModel::new(1).unwrap();
        let observation = crate::features::Observation {
            nodes: vec![
                [0.0, 2.0, 0.1, 0.2, 0.1, 0.3],
                [0.0, 2.0, 0.1, 0.9, 0.4, 0.1],
                [0.0, 2.0, 0.1, 0.05, 0.3, 0.7],
            ],
            node_job: vec![0, 1, 2],
            unfinished: vec![true; 3],
            edges: Vec::new(),
            heights: vec![0; 3],
            jobs: vec![[0.0, 2.0, 0.1]; 3],
            candidates: vec![0, 1, 2],
            min_limit: vec![1; 3],
            max_limit: 4,
        };
        let step = Step {
            observation: observation.clone(),
            candidate: 2,
            limit: 3,
            at_s: 0.0,
        };
        let probability = || model.decide(&observation).unwrap().stage[2];
        let parameters = model.parameters();
        let mut adam = Adam::new(1e-2, &parameters).unwrap();
        let mut seen = vec![probability()];
        for _ in 0..5 {
            let (log_p, _) = model.log_probs(&[&step]).unwrap();
            let grads = log_p.sum_all().unwrap().neg().unwrap().backward().unwrap();
            let grads: Vec<Tensor> = parameters
                .iter()
                .map(|(_, v)| {
                    let zeros = || v.as_tensor().zeros_like().unwrap();
                    grads.get(v.as_tensor()).cloned().unwrap_or_else(zeros)
                })
                .collect();
            adam.step(&parameters, &grads).unwrap();
            seen.push(probability());
        }
        assert!(
            seen.windows(2).all(|w| w[1] > w[0]),
            "π(a) by step: {seen:?}"
        );
    }

    #[test]
    fn the_curriculum_lengthens_episodes_to_a_ceiling() {
        let c = Curriculum::DECIMA;
        assert!((c.mean_s(0) - 2_000.0).abs() < 1e-6);
        assert!(c.mean_s(500) > c.mean_s(0));
        assert!((c.mean_s(10_000) - 20_000.0).abs() < 1e-6);
    }
}
