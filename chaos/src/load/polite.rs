//! The well-behaved side of the load test: SDK frameworks that always want more short tasks
//! and record when offers reach them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fullerene_proto::messages::{
    DemandSummary, Leftover, Offer, PendingDemand, StatusUpdate, TaskSpec,
};
use fullerene_proto::resources::{ResourceKind, ResourceVec, Resources};
use fullerene_sdk::driver::{DriverHandle, Scheduler};

use crate::bench::framework::{copies_that_fit, sleep_task};

/// What one polite framework saw, shared with the bench while it runs.
#[derive(Debug, Default)]
pub struct PoliteLog {
    /// When each batch of offers arrived.
    pub offers_at: Mutex<Vec<Instant>>,
    /// Tasks launched (accepted by the framework; the master may still refuse).
    pub launched: AtomicU64,
    /// Tasks that finished.
    pub finished: AtomicU64,
    /// Calls the master refused.
    pub refused: AtomicU64,
}

/// A framework that runs an endless stream of `sleep` tasks of one shape, packing as many into
/// each offer as fit, and declines what is left for a moment: the kind of client whose service
/// a hostile one must not degrade.
pub struct PoliteFramework {
    name: String,
    task: ResourceVec,
    task_ms: u64,
    next_task: u64,
    log: Arc<PoliteLog>,
    stop: Arc<AtomicBool>,
}

/// How many tasks a polite framework says it has runnable: more than the cluster holds, so it
/// always wants offers.
const ALWAYS_PENDING: u32 = 1_000;

impl PoliteFramework {
    /// A framework named `name` whose tasks need `task` and sleep `task_ms`; it tears itself
    /// down once `stop` is set.
    pub fn new(
        name: String,
        task: ResourceVec,
        task_ms: u64,
        log: Arc<PoliteLog>,
        stop: Arc<AtomicBool>,
    ) -> PoliteFramework {
        PoliteFramework {
            name,
            task,
            task_ms,
            next_task: 0,
            log,
            stop,
        }
    }

    fn demand(&self) -> DemandSummary {
        DemandSummary {
            pending: vec![PendingDemand {
                resources: Resources::from(self.task),
                count: ALWAYS_PENDING,
                pri_score: 0.5,
            }],
            remaining_work: f64::from(ALWAYS_PENDING) * self.task_ms as f64 / 1000.0,
            srpt: f64::from(ALWAYS_PENDING) * self.task_ms as f64 / 1000.0,
            reservation_progress: None,
        }
    }

    /// As many tasks as fit in `room` (an offer's resources), 64 at most.
    fn fill(&mut self, room: ResourceVec) -> Vec<TaskSpec> {
        (0..copies_that_fit(&self.task, room, 64))
            .map(|_| {
                self.next_task += 1;
                let id = format!("{}-{}", self.name, self.next_task);
                sleep_task(id, "load", self.task, self.task_ms)
            })
            .collect()
    }
}

impl Scheduler for PoliteFramework {
    fn registered(&mut self, driver: &mut DriverHandle, _: &fullerene_proto::FrameworkId) {
        driver.update_demand(self.demand());
    }

    fn reconnected(&mut self, driver: &mut DriverHandle, _: &fullerene_proto::FrameworkId) {
        driver.update_demand(self.demand());
    }

    fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>) {
        if let Ok(mut at) = self.log.offers_at.lock() {
            at.push(Instant::now());
        }
        for offer in offers {
            let room = offer.resources.to_vec().unwrap_or(ResourceVec::ZERO);
            let tasks = self.fill(room);
            if tasks.is_empty() {
                driver.decline(vec![offer.id], 100);
                continue;
            }
            self.log
                .launched
                .fetch_add(tasks.len() as u64, Ordering::Relaxed);
            driver.accept(vec![offer.id], tasks, Leftover::Decline { refuse_ms: 100 });
        }
    }

    fn status_update(&mut self, _driver: &mut DriverHandle, update: &StatusUpdate) {
        if update.state == fullerene_proto::messages::TaskState::Finished {
            self.log.finished.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn call_failed(
        &mut self,
        _driver: &mut DriverHandle,
        _request: &fullerene_proto::messages::FrameworkRequest,
        _error: &fullerene_proto::messages::WireError,
    ) {
        self.log.refused.fetch_add(1, Ordering::Relaxed);
    }

    fn tick(&mut self, driver: &mut DriverHandle) {
        if self.stop.load(Ordering::Relaxed) {
            driver.teardown();
        }
    }
}

/// The shape of a polite task unless the bench is told otherwise: half a core, 64 MiB.
pub fn default_task() -> ResourceVec {
    ResourceVec::from_pairs(&[(ResourceKind::Cpus, 0.5), (ResourceKind::MemMib, 64.0)])
}
