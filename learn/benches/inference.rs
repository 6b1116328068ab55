//! One decision of Decima's policy (issue 18's target: under 1 ms for 10 jobs of 20 stages on
//! one core): the observation's forward pass, both heads and both softmaxes.
//!
//! Run: `RAYON_NUM_THREADS=1 cargo bench -p fullerene-learn --bench inference`. Without the
//! variable, candle looks the core count up on every matrix product.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use fullerene_learn::{DecimaModel, Observation};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const JOBS: usize = 10;
const STAGES: usize = 20;

/// 10 random DAGs of 20 stages (each stage but the last with 1–3 children among the later
/// ones), every root a candidate.
fn observation() -> Observation {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let nodes = JOBS * STAGES;
    let mut obs = Observation {
        nodes: (0..nodes)
            .map(|_| std::array::from_fn(|_| rng.gen_range(0.0..1.0)))
            .collect(),
        node_job: (0..nodes).map(|n| n / STAGES).collect(),
        unfinished: vec![true; nodes],
        edges: Vec::new(),
        heights: vec![0; nodes],
        jobs: (0..JOBS)
            .map(|_| std::array::from_fn(|_| rng.gen_range(0.0..1.0)))
            .collect(),
        candidates: Vec::new(),
        min_limit: vec![1; JOBS],
        max_limit: 50,
    };
    for j in 0..JOBS {
        let base = j * STAGES;
        let mut has_parent = [false; STAGES];
        for s in 0..STAGES - 1 {
            for _ in 0..rng.gen_range(1..=3) {
                let child = rng.gen_range(s + 1..STAGES);
                if !obs.edges.contains(&(base + s, base + child)) {
                    obs.edges.push((base + s, base + child));
                    has_parent[child] = true;
                }
            }
        }
        for s in (0..STAGES).rev() {
            obs.heights[base + s] = obs
                .edges
                .iter()
                .filter(|(p, _)| *p == base + s)
                .map(|(_, c)| obs.heights[*c] + 1)
                .max()
                .unwrap_or(0);
        }
        obs.candidates
            .extend((0..STAGES).filter(|&s| !has_parent[s]).map(|s| base + s));
    }
    obs
}

fn bench(c: &mut Criterion) {
    let model = DecimaModel::new(1).expect("a model");
    let obs = observation();
    c.bench_function("decima decision, 10 jobs x 20 stages", |b| {
        b.iter(|| {
            let decision = model.decide(&obs).expect("a decision");
            model
                .limit_probabilities(&decision, &obs, 0)
                .expect("limits")
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
