//! The DAG-job framework's shell: a [`Scheduler`] around one [`DagJob`], and [`run_jobs`],
//! which runs each job of a workload as its own framework subscription (like the simulator:
//! one framework per job, its group from the workload line), all at once over one QUIC
//! endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use fullerene_client::event_log::{Event, EventLog};
use fullerene_proto::messages::{FrameworkRequest, Offer, StatusUpdate, WireError};
use fullerene_proto::time::SystemClock;
use fullerene_proto::FrameworkId;
use fullerene_transport::{Client, TlsMaterial, TransportConfig};
use serde::Serialize;

use super::job::{DagConfig, DagError, DagJob, JobOutcome, JobProgress};
use crate::driver::{
    run_with_client, DriverConfig, DriverError, DriverHandle, RunOptions, Scheduler,
};
use crate::job::Job;

/// Called with a job's index and its progress after every change.
pub type ProgressFn = Arc<dyn Fn(usize, &JobProgress) + Send + Sync>;

/// A [`Scheduler`] that runs one DAG job and tears its framework down when the job ends.
pub struct DagScheduler {
    dag: DagJob,
    index: usize,
    progress: Option<ProgressFn>,
    framework_id: Option<FrameworkId>,
    event_log: Option<Arc<EventLog>>,
    /// Whether the job's end was logged.
    end_logged: bool,
}

impl DagScheduler {
    /// Wraps a job's core; `progress` hears of every change under `index`.
    pub fn new(dag: DagJob, index: usize, progress: Option<ProgressFn>) -> DagScheduler {
        DagScheduler {
            dag,
            index,
            progress,
            framework_id: None,
            event_log: None,
            end_logged: false,
        }
    }

    /// Logs what the framework is handed and how its job ends to `log`.
    pub fn with_event_log(mut self, log: Option<Arc<EventLog>>) -> DagScheduler {
        self.event_log = log;
        self
    }

    fn log(&self, event: Event) {
        if let Some(log) = &self.event_log {
            log.log(event);
        }
    }

    /// Logs the job's end, once.
    fn log_end(&mut self) {
        if self.end_logged || !self.dag.is_done() {
            return;
        }
        self.end_logged = true;
        let job = self.dag.job().name.clone();
        let event = match (self.dag.outcome(), &self.framework_id) {
            (JobOutcome::Finished { .. }, Some(framework_id)) => Event::JobCompleted {
                job,
                framework_id: framework_id.clone(),
            },
            (outcome, framework_id) => Event::JobFailed {
                job,
                framework_id: framework_id.clone(),
                reason: match outcome {
                    JobOutcome::Failed { reason } => reason.clone(),
                    _ => "the job ended before its framework subscribed".to_string(),
                },
            },
        };
        self.log(event);
    }

    /// The job's core.
    pub fn dag(&self) -> &DagJob {
        &self.dag
    }

    fn apply(&mut self, driver: &mut DriverHandle, calls: Vec<FrameworkRequest>) {
        for call in calls {
            driver.call(call);
        }
        if let Some(progress) = &self.progress {
            progress(self.index, &self.dag.progress());
        }
        self.log_end();
        if self.dag.is_done() {
            // Every task has ended (or the job failed and its tasks were just killed): nothing
            // of this framework needs to outlive it.
            driver.teardown();
        }
    }
}

impl Scheduler for DagScheduler {
    fn registered(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.framework_id = Some(framework_id.clone());
        self.log(Event::FrameworkSubscribed {
            job: self.dag.job().name.clone(),
            framework_id: framework_id.clone(),
        });
        let calls = self.dag.on_subscribed();
        self.apply(driver, calls);
    }

    fn reconnected(&mut self, driver: &mut DriverHandle, _framework_id: &FrameworkId) {
        let calls = self.dag.on_subscribed();
        self.apply(driver, calls);
    }

    fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>) {
        if let Some(framework_id) = &self.framework_id {
            self.log(Event::OffersReceived {
                framework_id: framework_id.clone(),
                offers: offers.len(),
            });
        }
        let calls = self.dag.on_offers(&offers, driver.now());
        self.apply(driver, calls);
    }

    fn status_update(&mut self, driver: &mut DriverHandle, update: &StatusUpdate) {
        self.log(Event::UpdateDelivered {
            task: update.key(),
            agent: update.agent_id.clone(),
            seq: update.seq,
            state: update.state,
            reason: update.reason.clone(),
            made_ms: update.timestamp_ms,
        });
        let calls = self.dag.on_update(update, driver.now());
        self.apply(driver, calls);
    }

    fn call_failed(
        &mut self,
        driver: &mut DriverHandle,
        request: &FrameworkRequest,
        error: &WireError,
    ) {
        tracing::debug!(job = %self.dag.job().name, %error, "call failed");
        let calls = self.dag.on_call_failed(request, error);
        self.apply(driver, calls);
    }

    fn fatal(&mut self, error: &DriverError) {
        self.dag.fail(error.to_string());
        self.log_end();
        if let Some(progress) = &self.progress {
            progress(self.index, &self.dag.progress());
        }
    }
}

/// Where and how to run jobs.
#[derive(Clone, Debug)]
pub struct RunJobsOptions {
    /// Masters to try (any; the driver follows the leader).
    pub masters: Vec<SocketAddr>,
    /// The DAG framework's settings, shared by every job.
    pub dag: DagConfig,
    /// Overrides every job's group (otherwise the workload's).
    pub group: Option<String>,
    /// How long the master keeps a job's tasks while its framework is disconnected.
    pub failover_timeout_ms: u64,
    /// Transport settings.
    pub transport: TransportConfig,
    /// Where each framework logs what it is handed and how its job ends (see
    /// [`fullerene_client::event_log`]).
    pub event_log: Option<Arc<EventLog>>,
}

/// One job's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobReport {
    /// The job's name.
    pub name: String,
    /// Its group.
    pub group: String,
    /// Its framework's id, once it subscribed.
    pub framework_id: Option<String>,
    /// Tasks in the job.
    pub tasks: usize,
    /// Finished, with its JCT, or failed, with why.
    pub outcome: JobOutcome,
    /// Task attempts that ended without success.
    pub failed_attempts: u64,
}

/// Runs every job, each as its own framework, until each finishes or fails. A job the
/// framework cannot even start (a policy or plan error) is an error before anything runs.
pub async fn run_jobs(
    jobs: Vec<Job>,
    tls: &TlsMaterial,
    options: RunJobsOptions,
    progress: Option<ProgressFn>,
) -> Result<Vec<JobReport>, RunError> {
    let client = Arc::new(
        Client::new(tls, options.transport.clone())
            .map_err(|e| RunError::Driver(DriverError::Transport(e.to_string())))?,
    );
    // One clock for every job, so that their times compare.
    let clock = SystemClock::new();
    let mut dag = options.dag.clone();
    dag.concurrent_jobs = jobs.len().max(1);
    let mut schedulers = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.into_iter().enumerate() {
        let core = DagJob::new(job, dag.clone(), clock.monotonic())?;
        schedulers.push(
            DagScheduler::new(core, index, progress.clone())
                .with_event_log(options.event_log.clone()),
        );
    }
    let mut handles = Vec::with_capacity(schedulers.len());
    for scheduler in schedulers {
        let job = scheduler.dag().job();
        let group = options.group.clone().unwrap_or_else(|| job.group.clone());
        let mut config =
            DriverConfig::new(options.masters.clone(), job.name.clone(), group.clone());
        config.failover_timeout_ms = options.failover_timeout_ms;
        // Different jitter per job, so that the jobs do not reconnect in lockstep.
        config.jitter_seed = 0x5eed ^ (scheduler.index as u64).wrapping_mul(0x9E37_79B9);
        let (name, tasks) = (job.name.clone(), job.num_tasks());
        let run_options = RunOptions {
            transport: options.transport.clone(),
            clock,
            ..RunOptions::default()
        };
        let client = Arc::clone(&client);
        let handle =
            tokio::spawn(
                async move { run_with_client(&client, config, run_options, scheduler).await },
            );
        handles.push((name, group, tasks, handle));
    }
    let mut reports = Vec::with_capacity(handles.len());
    for (name, group, tasks, handle) in handles {
        let report = match handle.await {
            Ok(Ok(scheduler)) => {
                let progress = scheduler.dag().progress();
                let outcome = match progress.outcome {
                    JobOutcome::Running => JobOutcome::Failed {
                        reason: "the framework stopped before the job ended".into(),
                    },
                    other => other,
                };
                JobReport {
                    name,
                    group,
                    framework_id: scheduler
                        .framework_id
                        .as_ref()
                        .map(std::string::ToString::to_string),
                    tasks,
                    outcome,
                    failed_attempts: progress.failed_attempts,
                }
            }
            Ok(Err(error)) => JobReport {
                name,
                group,
                framework_id: None,
                tasks,
                outcome: JobOutcome::Failed {
                    reason: error.to_string(),
                },
                failed_attempts: 0,
            },
            Err(join) => JobReport {
                name,
                group,
                framework_id: None,
                tasks,
                outcome: JobOutcome::Failed {
                    reason: format!("the job's driver task ended abnormally: {join}"),
                },
                failed_attempts: 0,
            },
        };
        reports.push(report);
    }
    client.close();
    client.wait_idle().await;
    Ok(reports)
}

/// Why jobs could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A job cannot be started.
    #[error(transparent)]
    Dag(#[from] DagError),
    /// The transport cannot be set up.
    #[error(transparent)]
    Driver(#[from] DriverError),
}
