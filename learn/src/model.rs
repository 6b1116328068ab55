//! Decima's policy network (§5.1–§5.2): a graph neural network that embeds every stage of
//! every job, summarises jobs and the cluster, and scores stages and parallelism limits.
//!
//! - Per-node embeddings (Eq. 1): `e_v = g(Σ_{u ∈ children(v)} f(e_u)) + x'_v`, with `x'_v`
//!   the node's features through a small network (Decima's GCN "prep" layers, which give
//!   features and embeddings one size). Messages flow from the leaves up; after as many steps
//!   as the tallest DAG is high, every embedding is the recursive one (a leaf's is `x'_v`).
//! - Per-job summaries `y_i = g_job(Σ_{v ∈ i, unfinished} f_job([x_v, e_v]))` and a global
//!   summary `z = g_glob(Σ_i f_glob(y_i))`: Eq. 1 on a summary node per DAG and one above them,
//!   each level with its own pair of transforms (six in all, §5.1).
//! - The stage head `q([x_v, e_v, y_i, z])` scores each runnable stage, a softmax over them
//!   all picks one (§5.2); the limit head `w([job features, y_i, z, l / 50])` scores each
//!   parallelism limit `l` of the chosen stage's job, a softmax over the valid limits picks
//!   one.
//!
//! Sizes are Decima's (`param.py`, `actor_agent.py`): embeddings of 8, graph transforms with
//! hidden layers of 16 and 8, heads with 32, 16 and 8, leaky ReLU. Two departures from its
//! code, where the paper is followed instead: each summary level has its g as well as its f
//! (Decima's `gsn.py` sums f's outputs with no g after), and every network's last layer is
//! linear (Decima's apply leaky ReLU there too). Observations are batched
//! into one graph (nodes stacked, edges offset), so a training pass over an episode's
//! decisions is a few large operations rather than thousands of small ones.
//!
//! Why candle: measured on this 2-core machine (the bench's write-up is in the closing
//! note), a Decima-sized training step (200 decisions, then the backward pass and Adam) took
//! 0.57–0.76 s with candle 0.11 against 0.68–0.92 s with burn 0.22 on its fastest CPU backend
//! (flex; 1.5–2.3 s on ndarray, which burn 0.22 deprecates), and candle builds from clean in
//! 107 s against 208 s (flex) and 358 s (ndarray), which every clean CI run on two cores pays.
//! Both infer under the 1 ms target (0.43 ms and 0.27 ms for 10 jobs of 20 stages). What
//! candle lacks is made up here: its CPU generator cannot be seeded, so weights are drawn from
//! a seeded ChaCha stream; Adam is ours ([`crate::train`]), so that its state is checkpointed;
//! and a candle graph keeps every intermediate alive (about 7.6 MB per decision at its peak),
//! so training recomputes its episodes' decisions in batches rather than holding one graph.

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::ops::leaky_relu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::features::{Observation, JOB_FEATURES, NODE_FEATURES};

/// Embedding size (Decima's `output_dim`).
pub const EMBEDDING: usize = 8;
/// Hidden layers of the graph transforms (Decima's `hid_dims`).
const GRAPH_HIDDEN: [usize; 2] = [16, 8];
/// Hidden layers of the two heads (Decima's `actor_network`).
const HEAD_HIDDEN: [usize; 3] = [32, 16, 8];
/// Leaky ReLU's slope below zero (Decima's `leaky_relu`).
const LEAK: f64 = 0.2;
/// A limit enters the limit head as `l / 50` (Decima's `executor_levels` over 50).
pub const LIMIT_SCALE: f32 = 50.0;
/// Added to the logits of invalid limits, as Decima's mask (`(mask − 1) · 10000`).
const MASKED: f32 = -10_000.0;

/// Errors of the model's tensor code (shapes are the model's own, so these are bugs or
/// resource exhaustion, not bad input).
pub type Result<T> = candle_core::Result<T>;

/// One fully connected layer.
#[derive(Clone, Debug)]
struct Layer {
    /// `[out, in]`.
    weight: Var,
    /// `[out]`.
    bias: Var,
}

/// A small multi-layer perceptron: leaky ReLU between layers, none after the last.
#[derive(Clone, Debug)]
struct Mlp {
    layers: Vec<Layer>,
}

impl Mlp {
    fn new(sizes: &[usize], rng: &mut ChaCha8Rng, device: &Device) -> Result<Mlp> {
        let layers = sizes
            .windows(2)
            .map(|w| {
                let (fan_in, fan_out) = (w[0], w[1]);
                // Uniform in ±1/√fan_in, as PyTorch's default Linear initialisation.
                let bound = 1.0 / (fan_in as f32).sqrt();
                let mut draw = |n: usize| -> Vec<f32> {
                    (0..n).map(|_| rng.gen_range(-bound..bound)).collect()
                };
                let weight = Tensor::from_vec(draw(fan_in * fan_out), (fan_out, fan_in), device)?;
                let bias = Tensor::from_vec(draw(fan_out), fan_out, device)?;
                Ok(Layer {
                    weight: Var::from_tensor(&weight)?,
                    bias: Var::from_tensor(&bias)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Mlp { layers })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = x
                .matmul(&layer.weight.as_tensor().t()?)?
                .broadcast_add(layer.bias.as_tensor())?;
            if i + 1 < self.layers.len() {
                x = leaky_relu(&x, LEAK)?;
            }
        }
        Ok(x)
    }
}

/// Decima's network: the graph embedding and the two heads.
#[derive(Clone, Debug)]
pub struct DecimaModel {
    prep: Mlp,
    f_node: Mlp,
    g_node: Mlp,
    f_job: Mlp,
    g_job: Mlp,
    f_glob: Mlp,
    g_glob: Mlp,
    stage_head: Mlp,
    limit_head: Mlp,
    device: Device,
}

/// The names of the model's networks, in the order of [`DecimaModel::parameters`].
const NETWORKS: [&str; 9] = [
    "prep",
    "f_node",
    "g_node",
    "f_job",
    "g_job",
    "f_glob",
    "g_glob",
    "stage_head",
    "limit_head",
];

impl DecimaModel {
    /// A model with fresh weights drawn from `seed`, on the CPU.
    pub fn new(seed: u64) -> Result<DecimaModel> {
        let device = Device::Cpu;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let graph = |input: usize, rng: &mut ChaCha8Rng| {
            Mlp::new(
                &[input, GRAPH_HIDDEN[0], GRAPH_HIDDEN[1], EMBEDDING],
                rng,
                &device,
            )
        };
        let head = |input: usize, rng: &mut ChaCha8Rng| {
            Mlp::new(
                &[input, HEAD_HIDDEN[0], HEAD_HIDDEN[1], HEAD_HIDDEN[2], 1],
                rng,
                &device,
            )
        };
        Ok(DecimaModel {
            prep: graph(NODE_FEATURES, &mut rng)?,
            f_node: graph(EMBEDDING, &mut rng)?,
            g_node: graph(EMBEDDING, &mut rng)?,
            f_job: graph(NODE_FEATURES + EMBEDDING, &mut rng)?,
            g_job: graph(EMBEDDING, &mut rng)?,
            f_glob: graph(EMBEDDING, &mut rng)?,
            g_glob: graph(EMBEDDING, &mut rng)?,
            stage_head: head(NODE_FEATURES + 3 * EMBEDDING, &mut rng)?,
            limit_head: head(JOB_FEATURES + 2 * EMBEDDING + 1, &mut rng)?,
            device,
        })
    }

    fn networks(&self) -> [&Mlp; 9] {
        [
            &self.prep,
            &self.f_node,
            &self.g_node,
            &self.f_job,
            &self.g_job,
            &self.f_glob,
            &self.g_glob,
            &self.stage_head,
            &self.limit_head,
        ]
    }

    /// Every weight and bias with its name (`stage_head.2.weight`), in a fixed order.
    pub fn parameters(&self) -> Vec<(String, &Var)> {
        let mut out = Vec::new();
        for (name, net) in NETWORKS.iter().zip(self.networks()) {
            for (i, layer) in net.layers.iter().enumerate() {
                out.push((format!("{name}.{i}.weight"), &layer.weight));
                out.push((format!("{name}.{i}.bias"), &layer.bias));
            }
        }
        out
    }

    /// How many numbers the model holds.
    pub fn num_weights(&self) -> usize {
        self.parameters()
            .iter()
            .map(|(_, var)| var.elem_count())
            .sum()
    }

    /// The device the model computes on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Embeddings of a batch: per node `[N, E]`, per job `[J, E]`, per observation `[B, E]`.
    fn embed(&self, batch: &Batch) -> Result<(Tensor, Tensor, Tensor)> {
        let prepared = self.prep.forward(&batch.x)?;
        let mut e = prepared.clone();
        if let Some((parents, children)) = &batch.edges {
            for _ in 0..batch.depth {
                let messages = self.f_node.forward(&e)?.index_select(children, 0)?;
                let summed = Tensor::zeros(prepared.shape(), DType::F32, &self.device)?
                    .index_add(parents, &messages, 0)?;
                // A leaf's embedding is its prepared features: g of an empty sum is not 0.
                let passed = self
                    .g_node
                    .forward(&summed)?
                    .broadcast_mul(&batch.has_children)?;
                e = (&prepared + passed)?;
            }
        }
        let node_and_embedding = Tensor::cat(&[&batch.x, &e], 1)?;
        let per_node = self
            .f_job
            .forward(&node_and_embedding)?
            .broadcast_mul(&batch.unfinished)?;
        let jobs = Tensor::zeros((batch.num_jobs, EMBEDDING), DType::F32, &self.device)?
            .index_add(&batch.node_job, &per_node, 0)?;
        let y = self.g_job.forward(&jobs)?;
        let cluster = Tensor::zeros((batch.num_obs, EMBEDDING), DType::F32, &self.device)?
            .index_add(&batch.job_obs, &self.f_glob.forward(&y)?, 0)?;
        let z = self.g_glob.forward(&cluster)?;
        Ok((e, y, z))
    }

    /// The stage head's logit for every candidate of the batch, `[C]`.
    fn stage_logits(&self, batch: &Batch, e: &Tensor, y: &Tensor, z: &Tensor) -> Result<Tensor> {
        let input = Tensor::cat(
            &[
                batch.x.index_select(&batch.cand_node, 0)?,
                e.index_select(&batch.cand_node, 0)?,
                y.index_select(&batch.cand_job, 0)?,
                z.index_select(&batch.cand_obs, 0)?,
            ],
            1,
        )?;
        self.stage_head.forward(&input)?.squeeze(1)
    }

    /// The limit head's logits for rows of (job, observation, valid limits) in batch indices,
    /// `[R, width]`: limits `1..=width`, those outside a row's own range masked.
    fn limit_logits(
        &self,
        batch: &Batch,
        y: &Tensor,
        z: &Tensor,
        rows: &[LimitRow],
        width: usize,
    ) -> Result<Tensor> {
        let max_limit = width;
        let n = rows.len() * max_limit;
        let mut job_index = Vec::with_capacity(n);
        let mut obs_index = Vec::with_capacity(n);
        let mut level = Vec::with_capacity(n);
        let mut mask = Vec::with_capacity(n);
        for row in rows {
            for l in 1..=max_limit {
                job_index.push(row.job);
                obs_index.push(row.obs);
                level.push(l as f32 / LIMIT_SCALE);
                let valid = l >= row.min_limit && l <= row.max_limit;
                mask.push(if valid { 0.0 } else { MASKED });
            }
        }
        let job_index = Tensor::from_vec(job_index, n, &self.device)?;
        let input = Tensor::cat(
            &[
                batch.job_x.index_select(&job_index, 0)?,
                y.index_select(&job_index, 0)?,
                z.index_select(&Tensor::from_vec(obs_index, n, &self.device)?, 0)?,
                Tensor::from_vec(level, (n, 1), &self.device)?,
            ],
            1,
        )?;
        let logits = self
            .limit_head
            .forward(&input)?
            .reshape((rows.len(), max_limit))?;
        logits + Tensor::from_vec(mask, (rows.len(), max_limit), &self.device)?
    }

    /// The policy at one decision: the probability of each candidate stage, and a function of
    /// the chosen candidate giving the probability of each limit `1..=max_limit` for its job.
    pub fn decide(&self, obs: &Observation) -> Result<Decision> {
        let batch = Batch::new(&[obs], &self.device)?;
        let (e, y, z) = self.embed(&batch)?;
        let logits = self.stage_logits(&batch, &e, &y, &z)?.to_vec1::<f32>()?;
        Ok(Decision {
            stage: softmax(&logits),
            y,
            z,
            batch,
        })
    }

    /// The limit probabilities after `decision` chose `candidate`.
    pub fn limit_probabilities(
        &self,
        decision: &Decision,
        obs: &Observation,
        candidate: usize,
    ) -> Result<Vec<f32>> {
        let job = obs.node_job[obs.candidates[candidate]];
        let rows = [LimitRow {
            job: job as u32,
            obs: 0,
            min_limit: obs.min_limit[job],
            max_limit: obs.max_limit,
        }];
        let logits = self.limit_logits(
            &decision.batch,
            &decision.y,
            &decision.z,
            &rows,
            obs.max_limit,
        )?;
        Ok(softmax(&logits.squeeze(0)?.to_vec1::<f32>()?))
    }

    /// The log-probability of the recorded actions of `steps` and the policy's normalised
    /// entropy at each, both `[B]`, differentiable in the weights.
    pub fn log_probs(&self, steps: &[&Step]) -> Result<(Tensor, Tensor)> {
        let observations: Vec<&Observation> = steps.iter().map(|s| &s.observation).collect();
        let batch = Batch::new(&observations, &self.device)?;
        let (e, y, z) = self.embed(&batch)?;
        let logits = self.stage_logits(&batch, &e, &y, &z)?;
        // A softmax per observation over its candidates, shifted by each one's largest logit
        // (a constant: it changes no probability, and keeps exp finite).
        let host = logits.to_vec1::<f32>()?;
        let mut max = vec![f32::NEG_INFINITY; steps.len()];
        for (c, &o) in batch.cand_obs_host.iter().enumerate() {
            max[o as usize] = max[o as usize].max(host[c]);
        }
        let shift: Vec<f32> = batch
            .cand_obs_host
            .iter()
            .map(|&o| max[o as usize])
            .collect();
        let shifted = (logits - Tensor::from_vec(shift, host.len(), &self.device)?)?;
        let sums = Tensor::zeros(steps.len(), DType::F32, &self.device)?.index_add(
            &batch.cand_obs,
            &shifted.exp()?,
            0,
        )?;
        let log_p = (&shifted - sums.log()?.index_select(&batch.cand_obs, 0)?)?;
        let chosen: Vec<u32> = steps
            .iter()
            .zip(&batch.cand_offset)
            .map(|(s, &offset)| offset + s.candidate as u32)
            .collect();
        let stage_log_p =
            log_p.index_select(&Tensor::from_vec(chosen, steps.len(), &self.device)?, 0)?;
        let stage_entropy = Tensor::zeros(steps.len(), DType::F32, &self.device)?.index_add(
            &batch.cand_obs,
            &(log_p.exp()? * &log_p)?.neg()?,
            0,
        )?;
        // Limits: one row per observation, for the chosen stage's job.
        let max_limit = steps
            .iter()
            .map(|s| s.observation.max_limit)
            .max()
            .unwrap_or(1);
        let rows: Vec<LimitRow> = steps
            .iter()
            .enumerate()
            .map(|(o, s)| {
                let obs = &s.observation;
                let job = obs.node_job[obs.candidates[s.candidate]];
                LimitRow {
                    job: batch.job_offset[o] + job as u32,
                    obs: o as u32,
                    min_limit: obs.min_limit[job],
                    max_limit: obs.max_limit,
                }
            })
            .collect();
        let limit_log_p = candle_nn::ops::log_softmax(
            &self.limit_logits(&batch, &y, &z, &rows, max_limit)?,
            D::Minus1,
        )?;
        let chosen_limit: Vec<u32> = steps
            .iter()
            .map(|s| (s.limit.clamp(1, max_limit) - 1) as u32)
            .collect();
        let chosen_limit = Tensor::from_vec(chosen_limit, (steps.len(), 1), &self.device)?;
        let limit_chosen = limit_log_p.gather(&chosen_limit, 1)?.squeeze(1)?;
        let limit_entropy = (limit_log_p.exp()? * &limit_log_p)?.sum(1)?.neg()?;
        // Entropies normalised by the log of the choices (at least 1). Decima normalises by
        // log(nodes) + log(limit levels) and weighs every job's limit entropy by the
        // probability of choosing it; here only the chosen job's limits count.
        let norm: Vec<f32> = steps
            .iter()
            .enumerate()
            .map(|(o, s)| {
                let stages = batch.cands_of(o) as f32;
                let limits = (s.observation.max_limit + 1)
                    .saturating_sub(rows[o].min_limit)
                    .max(1) as f32;
                1.0 / (stages.ln() + limits.ln()).max(1.0)
            })
            .collect();
        let entropy = ((stage_entropy + limit_entropy)?
            * Tensor::from_vec(norm, steps.len(), &self.device)?)?;
        Ok(((stage_log_p + limit_chosen)?, entropy))
    }
}

/// One row of the limit head: a job (batch index), its observation, and its valid limits.
struct LimitRow {
    job: u32,
    obs: u32,
    min_limit: usize,
    max_limit: usize,
}

/// The stage probabilities of one decision, with what choosing its limit needs.
#[derive(Debug)]
pub struct Decision {
    /// The probability of each candidate.
    pub stage: Vec<f32>,
    y: Tensor,
    z: Tensor,
    batch: Batch,
}

/// One recorded decision: what the policy saw and what it chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The observation.
    pub observation: Observation,
    /// The candidate chosen.
    pub candidate: usize,
    /// The limit chosen.
    pub limit: usize,
    /// When, seconds.
    pub at_s: f64,
}

/// A numerically stable softmax.
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|x| x / sum).collect()
}

/// Observations stacked into one graph.
#[derive(Debug)]
struct Batch {
    x: Tensor,
    has_children: Tensor,
    /// `(parents, children)` of every edge, `None` without edges.
    edges: Option<(Tensor, Tensor)>,
    depth: usize,
    node_job: Tensor,
    unfinished: Tensor,
    num_jobs: usize,
    job_x: Tensor,
    job_obs: Tensor,
    num_obs: usize,
    cand_node: Tensor,
    cand_job: Tensor,
    cand_obs: Tensor,
    cand_obs_host: Vec<u32>,
    /// Where each observation's candidates and jobs start in the batch.
    cand_offset: Vec<u32>,
    job_offset: Vec<u32>,
}

impl Batch {
    fn new(observations: &[&Observation], device: &Device) -> Result<Batch> {
        let mut x = Vec::new();
        let mut has_children = Vec::new();
        let (mut parents, mut children) = (Vec::new(), Vec::new());
        let (mut node_job, mut unfinished) = (Vec::new(), Vec::new());
        let (mut job_x, mut job_obs) = (Vec::new(), Vec::new());
        let (mut cand_node, mut cand_job, mut cand_obs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut cand_offset, mut job_offset) = (Vec::new(), Vec::new());
        let mut depth = 0;
        for (o, obs) in observations.iter().enumerate() {
            let node_base = (x.len() / NODE_FEATURES) as u32;
            let job_base = (job_x.len() / JOB_FEATURES) as u32;
            cand_offset.push(cand_node.len() as u32);
            job_offset.push(job_base);
            depth = depth.max(obs.depth());
            let mut parent_of_any = vec![false; obs.nodes.len()];
            for &(p, c) in &obs.edges {
                parents.push(node_base + p as u32);
                children.push(node_base + c as u32);
                parent_of_any[p] = true;
            }
            for (n, features) in obs.nodes.iter().enumerate() {
                x.extend_from_slice(features);
                has_children.push(if parent_of_any[n] { 1.0_f32 } else { 0.0 });
                node_job.push(job_base + obs.node_job[n] as u32);
                unfinished.push(if obs.unfinished[n] { 1.0_f32 } else { 0.0 });
            }
            for features in &obs.jobs {
                job_x.extend_from_slice(features);
                job_obs.push(o as u32);
            }
            for &node in &obs.candidates {
                cand_node.push(node_base + node as u32);
                cand_job.push(job_base + obs.node_job[node] as u32);
                cand_obs.push(o as u32);
            }
        }
        let nodes = has_children.len();
        let num_jobs = job_obs.len();
        let index = |v: Vec<u32>| {
            let n = v.len();
            Tensor::from_vec(v, n, device)
        };
        let edges = if parents.is_empty() {
            None
        } else {
            Some((index(parents)?, index(children)?))
        };
        Ok(Batch {
            x: Tensor::from_vec(x, (nodes, NODE_FEATURES), device)?,
            has_children: Tensor::from_vec(has_children, (nodes, 1), device)?,
            edges,
            depth,
            node_job: index(node_job)?,
            unfinished: Tensor::from_vec(unfinished, (nodes, 1), device)?,
            num_jobs,
            job_x: Tensor::from_vec(job_x, (num_jobs, JOB_FEATURES), device)?,
            job_obs: index(job_obs)?,
            num_obs: observations.len(),
            cand_node: index(cand_node)?,
            cand_job: index(cand_job)?,
            cand_obs_host: cand_obs.clone(),
            cand_obs: index(cand_obs)?,
            cand_offset,
            job_offset,
        })
    }

    /// How many candidates observation `o` has.
    fn cands_of(&self, o: usize) -> usize {
        let end = self
            .cand_offset
            .get(o + 1)
            .map_or(self.cand_obs_host.len(), |&e| e as usize);
        end - self.cand_offset[o] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of `stages` stages in a chain, `tasks` tasks each, with one free executor.
    fn observation(stages: usize, candidates: Vec<usize>, min_limit: usize) -> Observation {
        Observation {
            nodes: (0..stages)
                .map(|s| [0.1, -2.0, 0.05, 0.1 * s as f32, 0.02, 0.3])
                .collect(),
            node_job: vec![0; stages],
            unfinished: vec![true; stages],
            edges: (1..stages).map(|s| (s - 1, s)).collect(),
            heights: (0..stages).map(|s| stages - 1 - s).collect(),
            jobs: vec![[0.1, -2.0, 0.05]],
            candidates,
            min_limit: vec![min_limit],
            max_limit: 6,
        }
    }

    fn step(observation: Observation, candidate: usize, limit: usize) -> Step {
        Step {
            observation,
            candidate,
            limit,
            at_s: 0.0,
        }
    }

    #[test]
    fn probabilities_cover_the_candidates_and_the_valid_limits_only() {
        let model = DecimaModel::new(7).unwrap();
        let obs = observation(4, vec![0, 2, 3], 3);
        let decision = model.decide(&obs).unwrap();
        assert_eq!(decision.stage.len(), 3);
        assert!((decision.stage.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        let limits = model.limit_probabilities(&decision, &obs, 1).unwrap();
        assert_eq!(limits.len(), 6);
        assert!(limits[..2].iter().all(|&p| p < 1e-6), "{limits:?}");
        assert!((limits.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn a_batch_of_decisions_scores_each_as_alone() {
        // The training pass stacks observations into one graph; its log-probabilities must
        // be those of the decisions one by one.
        let model = DecimaModel::new(3).unwrap();
        // The third observation holds two jobs and allows fewer limits than the others.
        let mut two_jobs = observation(4, vec![1, 3], 1);
        two_jobs.node_job = vec![0, 0, 1, 1];
        two_jobs.edges = vec![(0, 1), (2, 3)];
        two_jobs.heights = vec![1, 0, 1, 0];
        two_jobs.jobs.push([0.3, 2.0, 0.05]);
        two_jobs.min_limit = vec![1, 2];
        two_jobs.max_limit = 3;
        let steps = [
            step(observation(3, vec![0, 1], 1), 1, 4),
            step(observation(5, vec![2, 3, 4], 2), 0, 2),
            step(two_jobs, 1, 3),
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        let (batched, _) = model.log_probs(&refs).unwrap();
        let batched = batched.to_vec1::<f32>().unwrap();
        for (s, expected) in steps.iter().zip(batched) {
            let decision = model.decide(&s.observation).unwrap();
            let limits = model
                .limit_probabilities(&decision, &s.observation, s.candidate)
                .unwrap();
            let alone = decision.stage[s.candidate].ln() + limits[s.limit - 1].ln();
            assert!((alone - expected).abs() < 1e-4, "{alone} vs {expected}");
        }
    }

    #[test]
    fn embeddings_see_the_whole_dag() {
        // The root's embedding changes with a descendant two levels down, through message
        // passing alone: the leaf counts in no summary (it is finished).
        let model = DecimaModel::new(11).unwrap();
        let mut obs = observation(3, vec![0], 1);
        obs.unfinished[2] = false;
        let mut changed = obs.clone();
        changed.nodes[2][3] = 9.0;
        let root = |o: &Observation| -> Vec<f32> {
            let batch = Batch::new(&[o], &model.device).unwrap();
            let (e, _, _) = model.embed(&batch).unwrap();
            e.get(0).unwrap().to_vec1().unwrap()
        };
        let (before, after) = (root(&obs), root(&changed));
        let moved = before
            .iter()
            .zip(&after)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(moved > 1e-6, "{before:?} {after:?}");
        // With the edges gone, the leaf no longer reaches the root.
        obs.edges.clear();
        changed.edges.clear();
        assert_eq!(root(&obs), root(&changed));
    }

    #[test]
    fn weights_are_drawn_from_the_seed() {
        let values = |m: &DecimaModel| -> Vec<f32> {
            m.parameters()[0]
                .1
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        let a = DecimaModel::new(5).unwrap();
        assert_eq!(values(&a), values(&DecimaModel::new(5).unwrap()));
        assert_ne!(values(&a), values(&DecimaModel::new(6).unwrap()));
        assert_eq!(a.parameters().len(), 2 * (7 * 3 + 2 * 4));
    }
}
