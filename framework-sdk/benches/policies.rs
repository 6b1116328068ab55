//! Per-offer and per-event costs of the online policies on the largest TPC-H job (about 3,700
//! tasks): offers arrive many times a second per machine, so a decision must take
//! microseconds, and Carbyne's reverse packing (recomputed after every task end) well under a
//! millisecond per hundred tasks.
//!
//! `cargo bench -p fullerene-sdk --bench policies`

// `criterion_group!` defines a public function it cannot document.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use fullerene_proto::messages::OfferKind;
use fullerene_sdk::policy::{
    CarbyneParams, CarbynePolicy, GrapheneMatcher, JobPolicy, JobState, MatcherParams,
    OfferContext, TetrisPolicy,
};
use fullerene_sdk::testkit::{largest_tpch_job, machine, rank_pri_scores};
use fullerene_sdk::Job;

fn offer(now_s: f64, machines: f64, share: f64) -> OfferContext {
    OfferContext {
        machine: 0,
        free: machine(),
        capacity: machine(),
        kind: OfferKind::Regular,
        now_s,
        cluster_capacity: machine().scale(machines),
        fair_share: machine().scale(machines * share),
        guaranteed: false,
    }
}

/// The state halfway through the job: half its tasks launched in topological order, the last
/// 160 of them (ten machines' worth of one-core tasks) still running, so that several stages
/// are runnable with many tasks each.
fn half_done(job: &Job) -> JobState {
    let mut state = JobState::new(job);
    let target = job.num_tasks() / 2;
    let mut launched = Vec::new();
    while launched.len() < target {
        let next = state.runnable().next();
        let Some(t) = next else {
            break;
        };
        state.mark_launched(t, launched.len() % 100, 1e4 - 1.0);
        launched.push(t);
        if state.num_runnable() == 0 || launched.len() + 160 < target {
            let first_running = state.running_tasks().next().map(|r| r.0);
            if let Some(r) = first_running {
                state.mark_finished(job, r, 1e4 - 1.0);
            }
        }
    }
    state
}

fn bench_policies(c: &mut Criterion) {
    let job = largest_tpch_job();
    let mut group = c.benchmark_group(format!("{} ({} tasks)", job.name, job.num_tasks()));

    group.bench_function("job_state: launch and finish every task", |b| {
        b.iter(|| {
            let mut state = JobState::new(&job);
            let mut i = 0usize;
            loop {
                let next = state.runnable().next();
                let Some(t) = next else {
                    break;
                };
                state.mark_launched(t, i % 100, i as f64);
                state.mark_finished(&job, t, i as f64 + 1.0);
                i += 1;
            }
            assert!(state.is_complete());
        });
    });

    let state = half_done(&job);
    let mut matcher = GrapheneMatcher::new(rank_pri_scores(&job), MatcherParams::default());
    group.bench_function("graphene: one offer (bundle for a whole machine)", |b| {
        b.iter(|| matcher.on_offer(&job, &state, &offer(1e4, 100.0, 0.1)));
    });

    let mut tetris = TetrisPolicy::new(&job);
    group.bench_function("tetris: one offer", |b| {
        b.iter(|| tetris.on_offer(&job, &state, &offer(1e4, 100.0, 0.1)));
    });

    for (label, state) in [("start", JobState::new(&job)), ("halfway", half_done(&job))] {
        group.bench_function(
            format!("carbyne: T_k and reverse packing, share 10 machines, {label}"),
            |b| {
                b.iter(|| {
                    let mut carbyne = CarbynePolicy::new(
                        "carbyne",
                        &job,
                        Box::new(TetrisPolicy::new(&job)),
                        CarbyneParams::default(),
                    );
                    carbyne
                        .tasks_to_start_now(&job, &state, &offer(1e4, 100.0, 0.1))
                        .expect("a plan")
                });
            },
        );
    }

    let mut cached = CarbynePolicy::new(
        "carbyne",
        &job,
        Box::new(TetrisPolicy::new(&job)),
        CarbyneParams::default(),
    );
    group.bench_function("carbyne: one offer with the plan cached", |b| {
        b.iter(|| cached.on_offer(&job, &state, &offer(1e4, 100.0, 0.1)));
    });
    group.finish();
}

criterion_group!(benches, bench_policies);
criterion_main!(benches);
