//! The benches' framework: an SDK [`Scheduler`] that fills every offer with as many `sleep`
//! tasks of one shape as fit (up to a budget of tasks, if it has one), declines what is left,
//! and records what the benches measure: when each task was accepted and when its RUNNING
//! update reached it, how many tasks ended, and when offers arrived.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fullerene_proto::messages::{
    DemandSummary, ErrorCode, Executor, FrameworkRequest, Leftover, Offer, PendingDemand,
    StatusUpdate, TaskSpec, TaskState, WireError,
};
use fullerene_proto::resources::{ResourceVec, Resources};
use fullerene_proto::{FrameworkId, TaskId};
use fullerene_sdk::driver::{run_with_client, DriverConfig, DriverHandle, RunOptions, Scheduler};
use fullerene_transport::{Client, Role, TransportConfig};

use super::BenchError;
use crate::cluster::LocalMasters;

/// What a bench framework saw, shared with the bench while it runs.
#[derive(Debug, Default)]
pub struct FrameworkLog {
    /// Tasks put in accepts.
    pub accepted: AtomicU64,
    /// Tasks of accepts the master refused.
    pub refused: AtomicU64,
    /// Of those, the tasks of accepts refused because the framework's principal had spent its
    /// call budget (`--calls-per-second`).
    pub rate_limited: AtomicU64,
    /// RUNNING updates received (first delivery of each).
    pub running: AtomicU64,
    /// FINISHED updates received.
    pub finished: AtomicU64,
    /// Updates with another terminal state (FAILED, KILLED, LOST).
    pub failed: AtomicU64,
    /// Offers received (one per agent and framework).
    pub offers: AtomicU64,
    /// For each RUNNING update: when it arrived and how long after the accept of its task, in
    /// milliseconds.
    pub launches: Mutex<Vec<(Instant, f64)>>,
    /// When each batch of offers arrived.
    pub offer_batches: Mutex<Vec<Instant>>,
    /// Whether the framework is subscribed now.
    pub subscribed: AtomicBool,
}

impl FrameworkLog {
    /// The first batch of offers that arrived at or after `t`.
    pub fn first_offer_after(&self, t: Instant) -> Option<Instant> {
        let batches = self.offer_batches.lock().ok()?;
        let i = batches.partition_point(|at| *at < t);
        batches.get(i).copied()
    }
}

/// How many tasks a bench framework tells the master it has runnable: more than any cluster
/// here holds, so that it wants offers. One whose budget is spent says it has none until the
/// bench wants offers to flow again ([`Frameworks::want_offers`]; it then declines them,
/// which is what `bench scale` measures): while others still launch, copies of a framework
/// tie on every agent, the earliest copy wins each tie, and a spent one that only declined
/// kept the offers from the copies after it (at 200 agents and 20 frameworks, 9 of them never
/// got one).
const ENDLESS_DEMAND: u32 = 1_000_000;

/// A task of the `sleep` executor named `name` with id `id`, needing `resources`, that sleeps
/// `duration_ms`.
pub fn sleep_task(id: String, name: &str, resources: ResourceVec, duration_ms: u64) -> TaskSpec {
    TaskSpec {
        id: TaskId::from(id),
        name: name.to_string(),
        executor: Executor::Sleep { duration_ms },
        resources: Resources::from(resources),
        origin: None,
        kill_grace_ms: 0,
    }
}

/// How many tasks of `shape` fit in `room` together, `limit` at most.
pub fn copies_that_fit(shape: &ResourceVec, room: ResourceVec, limit: u64) -> u64 {
    let mut left = room;
    let mut count = 0;
    while count < limit && shape.fits_in(&left) {
        left = left.saturating_sub(shape);
        count += 1;
    }
    count
}

/// A framework that launches `sleep` tasks of one shape into every offer, and always wants more.
pub struct BenchFramework {
    name: String,
    task: ResourceVec,
    task_ms: u64,
    /// Tasks it may still launch (`None`: endless).
    budget: Option<u64>,
    /// How long a declined agent is not offered to it again.
    refuse_ms: u64,
    next_task: u64,
    accepted_at: HashMap<TaskId, Instant>,
    log: Arc<FrameworkLog>,
    stop: Arc<AtomicBool>,
    /// Whether a framework whose budget is spent wants offers again (to decline them).
    offers_wanted: Arc<AtomicBool>,
    /// The pending count it last told the master.
    declared: u32,
}

impl BenchFramework {
    /// A framework named `name` whose tasks need `task` and sleep `task_ms`, launching at
    /// most `budget` tasks (`None`: endless), declining leftovers for `refuse_ms`; it tears
    /// itself down once `stop` is set.
    pub fn new(
        name: String,
        task: ResourceVec,
        task_ms: u64,
        budget: Option<u64>,
        refuse_ms: u64,
        log: Arc<FrameworkLog>,
        stop: Arc<AtomicBool>,
    ) -> BenchFramework {
        BenchFramework {
            name,
            task,
            task_ms,
            budget,
            refuse_ms,
            next_task: 0,
            accepted_at: HashMap::new(),
            log,
            stop,
            offers_wanted: Arc::new(AtomicBool::new(true)),
            declared: 0,
        }
    }

    /// The same framework, wanting offers once its budget is spent only after `flag` is set
    /// (by default it always wants them).
    pub fn wanting_offers_after(mut self, flag: Arc<AtomicBool>) -> BenchFramework {
        self.offers_wanted = flag;
        self
    }

    /// How many tasks it tells the master it has runnable.
    fn pending(&self) -> u32 {
        match self.budget {
            Some(0) if !self.offers_wanted.load(Ordering::Relaxed) => 0,
            _ => ENDLESS_DEMAND,
        }
    }

    /// Tells the master its demand when it changed since it last did.
    fn declare_demand(&mut self, driver: &mut DriverHandle, always: bool) {
        let demand = self.demand();
        let pending = demand.pending.first().map_or(0, |p| p.count);
        if always || pending != self.declared {
            self.declared = pending;
            driver.update_demand(demand);
        }
    }

    fn demand(&self) -> DemandSummary {
        let count = self.pending();
        let work = f64::from(count) * self.task_ms as f64 / 1000.0;
        DemandSummary {
            pending: vec![PendingDemand {
                resources: Resources::from(self.task),
                count,
                pri_score: 0.5,
            }],
            remaining_work: work,
            srpt: work,
            reservation_progress: None,
        }
    }

    /// As many tasks as fit in `room` and in the budget.
    fn fill(&mut self, room: ResourceVec) -> Vec<TaskSpec> {
        let count = copies_that_fit(&self.task, room, self.budget.unwrap_or(u64::MAX));
        if let Some(budget) = self.budget.as_mut() {
            *budget -= count;
        }
        (0..count)
            .map(|_| {
                self.next_task += 1;
                let id = format!("{}-{}", self.name, self.next_task);
                sleep_task(id, "bench", self.task, self.task_ms)
            })
            .collect()
    }
}

impl Scheduler for BenchFramework {
    fn registered(&mut self, driver: &mut DriverHandle, _: &FrameworkId) {
        self.log.subscribed.store(true, Ordering::Relaxed);
        self.declare_demand(driver, true);
    }

    fn reconnected(&mut self, driver: &mut DriverHandle, _: &FrameworkId) {
        self.log.subscribed.store(true, Ordering::Relaxed);
        self.declare_demand(driver, true);
    }

    fn disconnected(&mut self, _driver: &mut DriverHandle, _reason: &str) {
        self.log.subscribed.store(false, Ordering::Relaxed);
    }

    fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>) {
        let now = Instant::now();
        if let Ok(mut batches) = self.log.offer_batches.lock() {
            batches.push(now);
        }
        self.log
            .offers
            .fetch_add(offers.len() as u64, Ordering::Relaxed);
        let mut declined = Vec::new();
        for offer in offers {
            let room = offer.resources.to_vec().unwrap_or(ResourceVec::ZERO);
            let tasks = self.fill(room);
            if tasks.is_empty() {
                declined.push(offer.id);
                continue;
            }
            for task in &tasks {
                self.accepted_at.insert(task.id.clone(), now);
            }
            self.log
                .accepted
                .fetch_add(tasks.len() as u64, Ordering::Relaxed);
            driver.accept(
                vec![offer.id],
                tasks,
                Leftover::Decline {
                    refuse_ms: self.refuse_ms,
                },
            );
        }
        if !declined.is_empty() {
            // One call for them all: a call per offer would spend the principal's call budget.
            driver.decline(declined, self.refuse_ms);
        }
        self.declare_demand(driver, false);
    }

    fn status_update(&mut self, _driver: &mut DriverHandle, update: &StatusUpdate) {
        match update.state {
            TaskState::Running => {
                if let Some(accepted) = self.accepted_at.remove(&update.task_id) {
                    let now = Instant::now();
                    let latency = now.duration_since(accepted).as_secs_f64() * 1000.0;
                    if let Ok(mut launches) = self.log.launches.lock() {
                        launches.push((now, latency));
                    }
                    self.log.running.fetch_add(1, Ordering::Relaxed);
                }
            }
            TaskState::Finished => {
                self.log.finished.fetch_add(1, Ordering::Relaxed);
            }
            TaskState::Failed | TaskState::Killed | TaskState::Lost => {
                self.accepted_at.remove(&update.task_id);
                self.log.failed.fetch_add(1, Ordering::Relaxed);
            }
            TaskState::Staging => {}
        }
    }

    fn call_failed(
        &mut self,
        _driver: &mut DriverHandle,
        request: &FrameworkRequest,
        error: &WireError,
    ) {
        if let FrameworkRequest::Accept { tasks, .. } = request {
            if error.code == ErrorCode::RateLimited {
                self.log
                    .rate_limited
                    .fetch_add(tasks.len() as u64, Ordering::Relaxed);
            }
            for task in tasks {
                self.accepted_at.remove(&task.id);
            }
            self.log
                .refused
                .fetch_add(tasks.len() as u64, Ordering::Relaxed);
            // They never ran: they go back in the budget, to be launched into a later offer
            // (the next tick asks for offers again if the budget was spent).
            if let Some(budget) = self.budget.as_mut() {
                *budget += tasks.len() as u64;
            }
        }
    }

    fn tick(&mut self, driver: &mut DriverHandle) {
        if self.stop.load(Ordering::Relaxed) {
            driver.teardown();
            return;
        }
        self.declare_demand(driver, false);
    }
}

/// What each framework of a [`Frameworks`] group runs.
#[derive(Clone, Debug)]
pub struct FrameworkPlan {
    /// Its name is this and its number (`launch-3`).
    pub prefix: &'static str,
    /// What each task needs.
    pub task: ResourceVec,
    /// How long each task sleeps.
    pub task_ms: u64,
    /// Tasks launched over all frameworks, split evenly (`None`: endless).
    pub tasks: Option<u64>,
    /// How long a declined agent is not offered to a framework again.
    pub refuse_ms: u64,
}

/// SDK drivers running [`BenchFramework`]s, one per certificate `framework-<n>`, each with a
/// QUIC endpoint of its own.
pub struct Frameworks {
    /// What each one saw.
    pub logs: Vec<Arc<FrameworkLog>>,
    stop: Arc<AtomicBool>,
    /// Set once the budgets are spent and offers should flow again.
    offers_wanted: Arc<AtomicBool>,
    drivers: Vec<tokio::task::JoinHandle<()>>,
}

impl Frameworks {
    /// Starts `count` frameworks following `plan` on `runtime`, against every master of
    /// `masters`.
    pub fn spawn(
        runtime: &tokio::runtime::Runtime,
        masters: &LocalMasters,
        count: u64,
        plan: &FrameworkPlan,
    ) -> Result<Frameworks, BenchError> {
        let addrs: Vec<SocketAddr> = masters.addrs.values().copied().collect();
        let stop = Arc::new(AtomicBool::new(false));
        let offers_wanted = Arc::new(AtomicBool::new(plan.tasks.is_none()));
        let mut logs = Vec::new();
        let mut drivers = Vec::new();
        for n in 1..=count {
            let tls = masters.tls_of(Role::Framework, n as usize)?;
            let client = Client::new(&tls, TransportConfig::default())
                .map_err(|e| BenchError::Setup(format!("framework {n}: {e}")))?;
            let log = Arc::new(FrameworkLog::default());
            logs.push(Arc::clone(&log));
            let name = format!("{}-{n}", plan.prefix);
            let budget = plan
                .tasks
                .map(|tasks| tasks / count + u64::from(n <= tasks % count));
            let scheduler = BenchFramework::new(
                name.clone(),
                plan.task,
                plan.task_ms,
                budget,
                plan.refuse_ms,
                log,
                Arc::clone(&stop),
            )
            .wanting_offers_after(Arc::clone(&offers_wanted));
            let mut driver = DriverConfig::new(addrs.clone(), name, String::new());
            driver.jitter_seed = n;
            drivers.push(runtime.spawn(async move {
                let result =
                    run_with_client(&client, driver, RunOptions::default(), scheduler).await;
                if let Err(error) = result {
                    tracing::warn!(framework = n, %error, "a bench framework stopped");
                }
                client.close();
            }));
        }
        Ok(Frameworks {
            logs,
            stop,
            offers_wanted,
            drivers,
        })
    }

    /// Frameworks whose budget is spent want offers again (and decline them): for measuring
    /// the offers that flow once the tracked tasks run.
    pub fn want_offers(&self) {
        self.offers_wanted.store(true, Ordering::Relaxed);
    }

    /// Tears every framework down and waits (10 s at most each) for its driver to end.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for driver in self.drivers {
            let _ = tokio::time::timeout(Duration::from_secs(10), driver).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fullerene_proto::resources::ResourceKind;
    use fullerene_proto::testkit::{offer, status_update};
    use fullerene_proto::time::Time;
    use fullerene_proto::OfferId;

    fn framework(budget: Option<u64>) -> (BenchFramework, Arc<FrameworkLog>) {
        let log = Arc::new(FrameworkLog::default());
        let half_core =
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, 0.5), (ResourceKind::MemMib, 16.0)]);
        let framework = BenchFramework::new(
            "b".into(),
            half_core,
            1_000,
            budget,
            0,
            Arc::clone(&log),
            Arc::new(AtomicBool::new(false)),
        );
        (framework, log)
    }

    fn two_cores(id: u64) -> Offer {
        offer(id, "fw", "agent-1", "h", "cpus=2,mem_mib=64", 0)
    }

    fn calls(handle: DriverHandle) -> Vec<FrameworkRequest> {
        handle.into_calls().0
    }

    fn accepted(calls: &[FrameworkRequest]) -> Vec<Vec<TaskSpec>> {
        calls
            .iter()
            .filter_map(|call| match call {
                FrameworkRequest::Accept { tasks, .. } => Some(tasks.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_offer_is_filled_with_as_many_tasks_as_fit_within_the_budget() {
        let (mut framework, log) = framework(Some(5));
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.offers(&mut handle, vec![two_cores(1), two_cores(2), two_cores(3)]);
        let calls = calls(handle);
        let sizes: Vec<usize> = accepted(&calls).iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            [4, 1],
            "4 half-core tasks fit in 2 cores; 1 was left in the budget"
        );
        let declines: Vec<&Vec<OfferId>> = calls
            .iter()
            .filter_map(|call| match call {
                FrameworkRequest::Decline { offer_ids, .. } => Some(offer_ids),
                _ => None,
            })
            .collect();
        assert_eq!(declines, [&vec![OfferId(3)]]);
        assert_eq!(log.accepted.load(Ordering::Relaxed), 5);
        assert_eq!(log.offers.load(Ordering::Relaxed), 3);
    }

    /// A framework whose budget is spent says it has nothing to run, so that the copies still
    /// launching get the offers, until the bench wants offers to flow again.
    #[test]
    fn a_spent_budget_asks_for_no_offers_until_they_are_wanted_again() {
        let (framework, _log) = framework(Some(4));
        let wanted = Arc::new(AtomicBool::new(false));
        let mut framework = framework.wanting_offers_after(Arc::clone(&wanted));
        let demands = |handle: DriverHandle| -> Vec<u32> {
            calls(handle)
                .iter()
                .filter_map(|call| match call {
                    FrameworkRequest::UpdateDemand(demand) => Some(demand.pending[0].count),
                    _ => None,
                })
                .collect()
        };
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.registered(&mut handle, &FrameworkId::from("fw"));
        assert_eq!(demands(handle), [ENDLESS_DEMAND]);
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.offers(&mut handle, vec![two_cores(1)]);
        assert_eq!(demands(handle), [0], "the budget of 4 is spent");
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.tick(&mut handle);
        assert!(demands(handle).is_empty(), "nothing changed");
        // A refused accept puts its tasks back in the budget: offers are wanted for them.
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.offers(&mut handle, vec![two_cores(2)]);
        let refused = calls(handle);
        assert!(accepted(&refused).is_empty(), "the budget is spent");
        let mut handle = DriverHandle::new(Time::ZERO, None);
        let two_tasks = FrameworkRequest::Accept {
            offer_ids: vec![OfferId(1)],
            tasks: vec![
                sleep_task("b-1".into(), "b", ResourceVec::ZERO, 1),
                sleep_task("b-2".into(), "b", ResourceVec::ZERO, 1),
            ],
            leftover: Leftover::Decline { refuse_ms: 0 },
        };
        let error = WireError::new(fullerene_proto::messages::ErrorCode::UnknownOffer, "gone");
        framework.call_failed(&mut handle, &two_tasks, &error);
        framework.tick(&mut handle);
        assert_eq!(demands(handle), [ENDLESS_DEMAND]);
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.offers(&mut handle, vec![two_cores(3)]);
        assert_eq!(
            accepted(&calls(handle))
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            [2],
            "the two refused tasks are launched again"
        );
        wanted.store(true, Ordering::Relaxed);
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.tick(&mut handle);
        assert_eq!(demands(handle), [ENDLESS_DEMAND]);
    }

    #[test]
    fn a_running_update_times_its_task_once_and_a_refused_accept_releases_its_tasks() {
        let (mut framework, log) = framework(None);
        let mut handle = DriverHandle::new(Time::ZERO, None);
        framework.offers(&mut handle, vec![two_cores(1), two_cores(2)]);
        let calls = calls(handle);
        let accepts = accepted(&calls);
        assert_eq!(accepts.len(), 2);
        let first = accepts[0][0].id.as_str();
        let mut handle = DriverHandle::new(Time::ZERO, None);
        for state in [TaskState::Running, TaskState::Running, TaskState::Finished] {
            framework.status_update(
                &mut handle,
                &status_update(first, "fw", "agent-1", state, 1),
            );
        }
        let refused = calls
            .iter()
            .filter(|call| matches!(call, FrameworkRequest::Accept { .. }))
            .nth(1)
            .expect("the second accept");
        let error = WireError::new(fullerene_proto::messages::ErrorCode::UnknownOffer, "gone");
        framework.call_failed(&mut handle, refused, &error);
        assert_eq!(
            log.running.load(Ordering::Relaxed),
            1,
            "a duplicate is not timed twice"
        );
        assert_eq!(log.finished.load(Ordering::Relaxed), 1);
        assert_eq!(log.refused.load(Ordering::Relaxed), 4);
        assert_eq!(log.launches.lock().expect("log").len(), 1);
        assert_eq!(
            framework.accepted_at.len(),
            3,
            "the other three tasks of the first accept still wait for RUNNING"
        );
    }
}
