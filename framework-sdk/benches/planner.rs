//! Plan construction time for the largest TPC-H job (about 3,700 tasks) on two reference
//! machines; the target is under 100 ms (Graphene §4.4's enhancements make it practical).
//!
//! `cargo bench -p fullerene-sdk --bench planner`

// `criterion_group!` defines a public function it cannot document.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use fullerene_sdk::lower_bound::lower_bounds;
use fullerene_sdk::planner::{plan, PlanCluster, PlannerConfig};
use fullerene_sdk::testkit::largest_tpch_job;

fn bench_planner(c: &mut Criterion) {
    let job = largest_tpch_job();
    let cluster = PlanCluster::new(
        2,
        "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
            .parse()
            .expect("valid machine"),
    );
    let mut group = c.benchmark_group(format!("plan {} ({} tasks)", job.name, job.num_tasks()));
    group.sample_size(20);
    group.bench_function("parallel", |b| {
        b.iter(|| plan(&job, &cluster, &PlannerConfig::default()).expect("plannable"));
    });
    let sequential = PlannerConfig {
        parallel: false,
        ..PlannerConfig::default()
    };
    group.bench_function("sequential", |b| {
        b.iter(|| plan(&job, &cluster, &sequential).expect("plannable"));
    });
    group.bench_function("lower_bounds", |b| b.iter(|| lower_bounds(&job, &cluster)));
    group.finish();
}

criterion_group!(benches, bench_planner);
criterion_main!(benches);
