//! The allocator's shard planners, off the node loop. When an allocation cycle is due the core
//! takes a snapshot of what the shards read ([`MasterCore::begin_allocation`]); this thread
//! plans the shards from it on up to `threads` threads at once (each shard's plan reads the
//! snapshot alone, so they run in parallel and the plans do not depend on which thread ran
//! which), and hands the plans back to the node loop, which commits them against the state as
//! it is by then ([`MasterCore::allocation_planned`]). Raft ticks, heartbeats and client
//! answers go on while the shards are planned.
//!
//! [`MasterCore::begin_allocation`]: crate::core::MasterCore::begin_allocation
//! [`MasterCore::allocation_planned`]: crate::core::MasterCore::allocation_planned

use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fullerene_scheduling::allocator::{CycleSnapshot, ShardPlan};
use tokio::sync::mpsc;

use crate::core::AllocationJob;

/// The plans of one allocation cycle, for the node loop.
#[derive(Debug)]
pub(crate) struct Planned {
    /// The cycle ([`AllocationJob::id`]).
    pub(crate) id: u64,
    /// Every shard's plan.
    pub(crate) plans: Vec<ShardPlan>,
    /// How long the planning took, from the job's arrival to the last shard's plan.
    pub(crate) planning: Duration,
}

/// The planner thread and the queue to it; dropping it stops the thread.
pub(crate) struct Planner {
    jobs: Option<std_mpsc::Sender<AllocationJob>>,
    thread: Option<JoinHandle<()>>,
}

impl Planner {
    /// Starts the planner, which plans each cycle's shards on up to `threads` threads (the
    /// machine's cores, typically); plans go to `done`.
    pub(crate) fn spawn(
        threads: usize,
        done: mpsc::UnboundedSender<Planned>,
    ) -> std::io::Result<Planner> {
        let (jobs_tx, jobs_rx) = std_mpsc::channel::<AllocationJob>();
        let threads = threads.max(1);
        let thread = std::thread::Builder::new()
            .name("allocation-planner".to_string())
            .spawn(move || {
                while let Ok(job) = jobs_rx.recv() {
                    let started = Instant::now();
                    let plans = plan_shards(&job.snapshot, threads);
                    let planned = Planned {
                        id: job.id,
                        plans,
                        planning: started.elapsed(),
                    };
                    // The snapshot is freed here, off the node loop.
                    drop(job);
                    if done.send(planned).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Planner {
            jobs: Some(jobs_tx),
            thread: Some(thread),
        })
    }

    /// Queues a cycle to plan; false once the thread has stopped.
    pub(crate) fn submit(&self, job: AllocationJob) -> bool {
        match &self.jobs {
            Some(queue) => queue.send(job).is_ok(),
            None => false,
        }
    }
}

impl Drop for Planner {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the allocation planner thread panicked");
            }
        }
    }
}

/// Plans every shard of `snapshot` on up to `threads` threads (this one included): thread `t`
/// plans shards `t`, `t + threads`, ...; the plans come back in shard order.
fn plan_shards(snapshot: &CycleSnapshot, threads: usize) -> Vec<ShardPlan> {
    let shards = snapshot.shard_count();
    let workers = threads.min(shards).max(1);
    if workers == 1 {
        return snapshot.plan_all();
    }
    let mut plans: Vec<Option<ShardPlan>> = (0..shards).map(|_| None).collect();
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..workers)
            .map(|worker| {
                scope.spawn(move || {
                    (worker..shards)
                        .step_by(workers)
                        .map(|shard| (shard, snapshot.plan_shard(shard)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mine: Vec<(usize, ShardPlan)> = (0..shards)
            .step_by(workers)
            .map(|shard| (shard, snapshot.plan_shard(shard)))
            .collect();
        for (shard, plan) in mine {
            plans[shard] = Some(plan);
        }
        for helper in helpers {
            match helper.join() {
                Ok(theirs) => {
                    for (shard, plan) in theirs {
                        plans[shard] = Some(plan);
                    }
                }
                Err(_) => tracing::error!("an allocation planner thread panicked"),
            }
        }
    });
    // A shard whose thread panicked (a bug, logged above) offers nothing this cycle.
    plans.into_iter().flatten().collect()
}
