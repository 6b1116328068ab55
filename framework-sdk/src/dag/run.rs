//! The DAG-job framework's shell: a [`Scheduler`] around one [`DagJob`], and [`run_jobs`],
//! which runs each job of a workload as its own framework subscription (like the simulator:
//! one framework per job, its group from the workload line), all at once over one QUIC
//! endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fullerene_client::event_log::{Event, EventLog};

use super::journal::{Journal, JournalError, Record};
use fullerene_proto::messages::{ErrorCode, FrameworkRequest, Offer, StatusUpdate, WireError};
use fullerene_proto::reservations::{
    ReservationCall, ReservationNotice, ReservationVerdict, MAX_RESERVATION_NAME_BYTES,
};
use fullerene_proto::time::SystemClock;
use fullerene_proto::{FrameworkId, TaskKey};
use fullerene_transport::{Client, TlsMaterial, TransportConfig};
use serde::Serialize;

use super::common::{check_arrivals, resend_job_call, transient, ArrivalsError};
use super::job::{DagConfig, DagError, DagJob, JobOutcome, JobProgress};
use crate::driver::{
    run_with_client, DriverConfig, DriverError, DriverHandle, RunOptions, Scheduler,
};
use crate::job::Job;
use crate::reserve::{Admission, DeadlineReport, DeadlineRequest};

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
    journal: Option<Journal>,
    /// Raised when the job must stop before it ends.
    stop: Option<Arc<AtomicBool>>,
    /// Whether the job's end was sent to the masters (and not lost or refused for a while
    /// since: then it is sent again).
    end_told: bool,
    /// Whether the masters recorded the job's end (or refused it for good): the framework is
    /// torn down only then.
    end_recorded: bool,
    /// Whether the teardown was asked for.
    torn_down: bool,
    /// The job's description was refused for a while (rate-limited, no leader): sent again on
    /// the next tick.
    describe_again: bool,
    /// The job's deadline and the masters' answer to its reservation (issue 17).
    deadline: Option<Deadline>,
}

/// A job's deadline, the reservation asked for it and the answer so far.
#[derive(Debug)]
struct Deadline {
    request: DeadlineRequest,
    admission: Admission,
    /// A create is in flight (its answer, or `OutcomeUnknown`, is still to come).
    asking: bool,
    /// A create was refused for a while (rate-limited, no leader): asked again on the next tick.
    ask_again: bool,
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
            journal: None,
            stop: None,
            end_told: false,
            end_recorded: false,
            torn_down: false,
            describe_again: false,
            deadline: None,
        }
    }

    /// Gives the job a deadline: on subscription the framework asks the masters for
    /// `request`'s reservation (named after the job and its framework) and describes the job
    /// once they answer, in the reservation if they accepted it, as best effort if they refused
    /// (Rayon §6: a refused SLA job is told at once, and runs without a guarantee). The job
    /// starts on offers meanwhile: it does not wait for the answer to use what is free.
    pub fn with_deadline(mut self, request: Option<DeadlineRequest>) -> DagScheduler {
        self.deadline = request.map(|request| Deadline {
            request,
            admission: Admission::Unanswered,
            asking: false,
            ask_again: false,
        });
        self
    }

    /// How the job fared against its deadline, if it has one: the masters' answer, and
    /// whether it finished within its window (its JCT counts from its submission).
    pub fn deadline_report(&self) -> Option<DeadlineReport> {
        let deadline = self.deadline.as_ref()?;
        let met = match self.dag.outcome() {
            JobOutcome::Finished { jct_ms } => Some(*jct_ms <= deadline.request.window_ms),
            _ => None,
        };
        Some(DeadlineReport {
            window_ms: deadline.request.window_ms,
            admission: deadline.admission.clone(),
            met,
        })
    }

    /// Asks for the job's reservation unless the masters answered or a create is in flight;
    /// true while the job's description must wait for the answer.
    fn ask_for_reservation(
        &mut self,
        driver: &mut DriverHandle,
        framework_id: &FrameworkId,
    ) -> bool {
        let name = reservation_name(&self.dag.job().name, framework_id);
        let Some(deadline) = &mut self.deadline else {
            return false;
        };
        if deadline.admission != Admission::Unanswered {
            return false;
        }
        if !deadline.asking {
            deadline.asking = true;
            driver.reservation(ReservationCall::Create {
                name,
                rdl: deadline.request.expr.to_string(),
            });
        }
        true
    }

    /// Records the masters' answer and describes the job, in the reservation if accepted.
    fn admitted(&mut self, driver: &mut DriverHandle, admission: Admission) {
        let Some(deadline) = &mut self.deadline else {
            return;
        };
        deadline.asking = false;
        if let Admission::Accepted { name } = &admission {
            self.dag
                .set_own_reservation(name.clone(), &deadline.request.expr);
        }
        if let Admission::Refused { reason } = &admission {
            tracing::info!(job = %self.dag.job().name, %reason, "the masters refused the job's reservation: it runs as best effort");
        }
        deadline.admission = admission;
        self.apply(
            driver,
            vec![FrameworkRequest::DescribeJob(self.dag.description())],
        );
    }

    /// Stops the job when `stop` is raised: it fails as stopped and its framework is torn
    /// down, so that the masters kill its tasks at once rather than keep them for the
    /// failover timeout (what a user who interrupts a run expects).
    pub fn with_stop(mut self, stop: Option<Arc<AtomicBool>>) -> DagScheduler {
        self.stop = stop;
        self
    }

    /// Records launches, finishes and the framework id in `journal`, so that another process
    /// can take the job over (see [`DagJob::restore`]).
    pub fn with_journal(mut self, journal: Option<Journal>) -> DagScheduler {
        self.journal = journal;
        self
    }

    /// Appends `record` to the journal, if there is one. A record that cannot be written
    /// fails the job: a successor reading a journal with a gap could launch a task that still
    /// runs, or take over a framework it does not know the launches of.
    fn journal(&mut self, record: &Record) -> bool {
        let Some(journal) = &self.journal else {
            return true;
        };
        match journal.append(record) {
            Ok(()) => true,
            Err(error) => {
                self.dag.fail(format!(
                    "cannot write the job's journal, which another process would need to take \
                     the job over: {error}"
                ));
                false
            }
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
            // Written ahead: a task id, once asked for, is never used again by a successor,
            // and a launch that cannot be recorded is not asked for.
            if let FrameworkRequest::Accept { tasks, .. } = &call {
                let recorded = tasks
                    .iter()
                    .all(|task| self.journal(&Record::Launched(task.id.clone())));
                if !recorded {
                    continue;
                }
                for task in tasks {
                    if let Some(framework_id) = &self.framework_id {
                        self.log(Event::LaunchRequested {
                            framework_id: framework_id.clone(),
                            task: TaskKey::new(framework_id.clone(), task.id.clone()),
                        });
                    }
                }
            }
            if let (FrameworkRequest::UpdateDemand(demand), Some(framework_id)) =
                (&call, &self.framework_id)
            {
                self.log(Event::DemandChanged {
                    framework_id: framework_id.clone(),
                    runnable: demand.pending.iter().map(|p| u64::from(p.count)).sum(),
                });
            }
            driver.call(call);
        }
        if let Some(progress) = &self.progress {
            progress(self.index, &self.dag.progress());
        }
        self.log_end();
        if let (Some(end), false) = (self.dag.end(), self.end_told) {
            // Before the teardown: operators see how the job ended, not only that its
            // framework left.
            self.end_told = true;
            driver.call(FrameworkRequest::EndJob {
                job: self.dag.job().name.clone(),
                end,
            });
        }
        if self.dag.is_done() && self.end_recorded && !self.torn_down {
            // Every task has ended (or the job failed and its tasks were just killed): nothing
            // of this framework needs to outlive it. Only once the end is recorded: a teardown
            // stops the driver, and an end refused meanwhile (rate-limited by a busy principal)
            // could not be sent again.
            self.torn_down = true;
            driver.teardown();
        }
    }
}

impl DagScheduler {
    /// On (re)subscription: asks for the job's reservation if it has a deadline and no answer
    /// yet, describes the job unless that answer is awaited, and starts (or resumes) the job.
    fn describe_and_start(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        let mut calls = Vec::new();
        if !self.ask_for_reservation(driver, framework_id) {
            calls.push(FrameworkRequest::DescribeJob(self.dag.description()));
        }
        calls.extend(self.dag.on_subscribed());
        self.apply(driver, calls);
    }
}

/// The reservation of `job` run by framework `framework_id`: unique (the id is), in the
/// characters and length the masters accept (others become `-`; the end is cut).
fn reservation_name(job: &str, framework_id: &FrameworkId) -> String {
    let mut name: String = format!("{job}.{framework_id}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() > MAX_RESERVATION_NAME_BYTES {
        // Keeps the framework's id, the unique part, whole.
        name = name.split_off(name.len() - MAX_RESERVATION_NAME_BYTES);
    }
    name
}

impl Scheduler for DagScheduler {
    fn tick(&mut self, driver: &mut DriverHandle) {
        let stopped = self
            .stop
            .as_ref()
            .is_some_and(|stop| stop.load(Ordering::Relaxed));
        if stopped && !self.dag.is_done() {
            self.dag
                .fail("stopped before it ended: its framework was torn down");
            // A done job's framework is torn down by `apply`.
            self.apply(driver, Vec::new());
        }
        let ask_again = self
            .deadline
            .as_mut()
            .is_some_and(|deadline| std::mem::take(&mut deadline.ask_again));
        if let (true, Some(framework_id)) = (ask_again, driver.framework_id().cloned()) {
            self.ask_for_reservation(driver, &framework_id);
        }
        let mut calls = Vec::new();
        if std::mem::take(&mut self.describe_again) {
            calls.push(FrameworkRequest::DescribeJob(self.dag.description()));
        }
        let end_again = self.dag.is_done() && !self.end_told;
        if !calls.is_empty() || end_again {
            self.apply(driver, calls);
        }
    }

    fn registered(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.framework_id = Some(framework_id.clone());
        if !self.journal(&Record::Subscribed(framework_id.clone())) {
            self.apply(driver, Vec::new());
            return;
        }
        self.log(Event::FrameworkSubscribed {
            job: self.dag.job().name.clone(),
            framework_id: framework_id.clone(),
        });
        self.describe_and_start(driver, framework_id);
    }

    fn reconnected(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        // Again: a description (or a reservation) whose answer was lost with the session may
        // not have committed (the masters keep one copy either way).
        self.describe_and_start(driver, framework_id);
    }

    fn job_recorded(&mut self, driver: &mut DriverHandle, request: &FrameworkRequest) {
        if let FrameworkRequest::EndJob { .. } = request {
            self.end_recorded = true;
            self.apply(driver, Vec::new());
        }
    }

    fn reservation_ended(&mut self, _driver: &mut DriverHandle, notice: &ReservationNotice) {
        let ours = self.dag.reservation() == Some(notice.name.as_str());
        let ReservationVerdict::Rejected { reason } = &notice.verdict else {
            tracing::info!(job = %self.dag.job().name, reservation = %notice.name, verdict = notice.verdict.name(), "a reservation of this principal ended");
            return;
        };
        if !ours {
            tracing::info!(job = %self.dag.job().name, reservation = %notice.name, %reason, "the masters rejected another reservation of this principal");
            return;
        }
        tracing::warn!(job = %self.dag.job().name, reservation = %notice.name, %reason, "the masters rejected the job's reservation after a loss of capacity: it runs as best effort");
        // A description naming it would now be refused (the masters hold no such reservation).
        self.dag.set_reservation(None);
        if let Some(deadline) = &mut self.deadline {
            deadline.admission = Admission::Withdrawn {
                name: notice.name.clone(),
                reason: reason.clone(),
            };
        }
    }

    fn reservation_done(&mut self, driver: &mut DriverHandle, call: &ReservationCall) {
        if let ReservationCall::Create { name, .. } = call {
            self.admitted(driver, Admission::Accepted { name: name.clone() });
        }
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
        let finished_before = self.dag.progress().finished;
        let calls = self.dag.on_update(update, driver.now());
        if self.dag.progress().finished > finished_before {
            self.journal(&Record::Finished(update.task_id.clone()));
        }
        self.apply(driver, calls);
    }

    fn call_failed(
        &mut self,
        driver: &mut DriverHandle,
        request: &FrameworkRequest,
        error: &WireError,
    ) {
        let refused = error.code != ErrorCode::OutcomeUnknown;
        match request {
            FrameworkRequest::EndJob { .. } => {
                if resend_job_call(error.code).is_some() {
                    // Sent again on the next tick (or on reconnection).
                    self.end_told = false;
                } else {
                    tracing::warn!(job = %self.dag.job().name, %error, "the masters refused the job's end");
                    self.end_recorded = true;
                    self.apply(driver, Vec::new());
                }
                return;
            }
            FrameworkRequest::DescribeJob(_) => {
                if let Some(on_tick) = resend_job_call(error.code) {
                    // A session loss sends it again on reconnection; the rest on the next tick.
                    self.describe_again = on_tick;
                    return;
                }
            }
            _ => {}
        }
        if let FrameworkRequest::Reservation(ReservationCall::Create { name, .. }) = request {
            let admission = match error.code {
                // A create retried after a lost session finds its first attempt, which the
                // masters accepted: the name is the job's own (it holds the framework's id).
                ErrorCode::ReservationExists => Admission::Accepted { name: name.clone() },
                // Asked again on reconnection after a lost session, on the next tick
                // otherwise.
                code if transient(code) => {
                    if let Some(deadline) = &mut self.deadline {
                        deadline.asking = false;
                        deadline.ask_again = code != ErrorCode::OutcomeUnknown;
                    }
                    return;
                }
                _ => Admission::Refused {
                    reason: error.message.clone(),
                },
            };
            self.admitted(driver, admission);
            return;
        }
        if let (FrameworkRequest::DescribeJob(_), Some(reservation), true) =
            (request, self.dag.reservation(), refused)
        {
            // A job meant to run in a reservation does not run as best effort unnoticed.
            let reason = format!(
                "the masters refused the job's description in reservation `{reservation}`: {}",
                error.message
            );
            self.dag.fail(reason);
            self.apply(driver, Vec::new());
            return;
        }
        if matches!(request, FrameworkRequest::DescribeJob(_)) && refused {
            // The job runs on; only what operators see of it is missing.
            tracing::warn!(job = %self.dag.job().name, %error, "the masters refused the job's description");
        } else {
            tracing::debug!(job = %self.dag.job().name, %error, "call failed");
        }
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
    /// The fairness group every job expects to be in; the master refuses a job whose
    /// principal is in another. `None`: the principal's group, whatever it is (the
    /// workload's groups are for the simulator).
    pub group: Option<String>,
    /// How long the master keeps a job's tasks while its framework is disconnected.
    pub failover_timeout_ms: u64,
    /// Transport settings.
    pub transport: TransportConfig,
    /// Where each framework logs what it is handed and how its job ends (see
    /// [`fullerene_client::event_log`]).
    pub event_log: Option<Arc<EventLog>>,
    /// Where each job keeps its [journal](super::journal): a later run with the same
    /// directory takes over the jobs' frameworks (framework failover) if it comes within
    /// their failover timeout, and starts them over otherwise.
    pub state_dir: Option<PathBuf>,
    /// When each job arrives, in the workload's seconds from the start (the i-th for the i-th
    /// job; real time is this times `dag.time_scale`): a job subscribes only then, and its JCT
    /// runs from then, as in the simulator. Empty: every job at once.
    pub arrivals_s: Vec<f64>,
    /// Raised to stop every job before it ends: each fails and its framework is torn down
    /// (the masters kill its tasks), within a driver tick. `None`: the jobs run to their end.
    pub stop: Option<Arc<AtomicBool>>,
    /// The i-th job's deadline and reservation request, if it has one
    /// ([`DagScheduler::with_deadline`]). Empty: no job has a deadline.
    pub deadlines: Vec<Option<DeadlineRequest>>,
}

impl RunJobsOptions {
    /// Every job at once on `masters` with `dag`'s settings, in its principal's group, with
    /// the driver's usual 60 s failover timeout, default transport settings, no event log, no
    /// journal, no deadlines, run to its end.
    pub fn new(masters: Vec<SocketAddr>, dag: DagConfig) -> RunJobsOptions {
        RunJobsOptions {
            masters,
            dag,
            group: None,
            failover_timeout_ms: 60_000,
            transport: TransportConfig::default(),
            event_log: None,
            state_dir: None,
            arrivals_s: Vec::new(),
            stop: None,
            deadlines: Vec::new(),
        }
    }
}

/// One job's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobReport {
    /// The job's name.
    pub name: String,
    /// The group it asked to be in (empty: its principal's).
    pub group: String,
    /// Its framework's id, once it subscribed.
    pub framework_id: Option<String>,
    /// Tasks in the job.
    pub tasks: usize,
    /// Finished, with its JCT, or failed, with why.
    pub outcome: JobOutcome,
    /// Task attempts that ended without success, preempted ones aside.
    pub failed_attempts: u64,
    /// Task attempts preempted for a reservation (and run again).
    pub preempted_attempts: u64,
    /// How it fared against its deadline, if it had one.
    pub deadline: Option<DeadlineReport>,
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
    check_arrivals(&options.arrivals_s, jobs.len())?;
    if !options.deadlines.is_empty() && options.deadlines.len() != jobs.len() {
        return Err(RunError::Deadlines(format!(
            "{} deadlines for {} jobs",
            options.deadlines.len(),
            jobs.len()
        )));
    }
    let mut handles = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.into_iter().enumerate() {
        // Made before anything runs: a job the planner refuses is refused at once.
        let core = DagJob::new(job.clone(), dag.clone(), clock.monotonic())?;
        // The operator places principals in groups; a framework names one only to check it
        // is where it expects (`--group`), and otherwise joins its principal's. The
        // workload's own groups are for the simulator, whose jobs have no principals.
        let group = options.group.clone().unwrap_or_default();
        let (name, tasks) = (job.name.clone(), job.num_tasks());
        let one = OneJob {
            job,
            first: Some(core),
            index,
            group: group.clone(),
            dag: dag.clone(),
            options: options.clone(),
            progress: progress.clone(),
            clock,
        };
        let client = Arc::clone(&client);
        let handle = tokio::spawn(async move { one.run(&client).await });
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
                    preempted_attempts: progress.preempted_attempts,
                    deadline: scheduler.deadline_report(),
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
                preempted_attempts: 0,
                deadline: None,
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
                preempted_attempts: 0,
                deadline: None,
            },
        };
        reports.push(report);
    }
    client.close();
    client.wait_idle().await;
    Ok(reports)
}

/// One job of [`run_jobs`], as its own framework.
struct OneJob {
    job: Job,
    /// The job's core for the first attempt (a start over makes a new one).
    first: Option<DagJob>,
    index: usize,
    group: String,
    dag: DagConfig,
    options: RunJobsOptions,
    progress: Option<ProgressFn>,
    clock: SystemClock,
}

impl OneJob {
    /// Runs the job; with a state directory, first as the framework its journal names
    /// (failover), and, if the master no longer knows that framework (its failover timeout
    /// passed), over again as a new one.
    async fn run(mut self, client: &Client) -> Result<DagScheduler, DriverError> {
        let arrival_s = self.options.arrivals_s.get(self.index).copied();
        // Checked by `run_jobs`: finite and not negative.
        let delay = Duration::try_from_secs_f64(arrival_s.unwrap_or(0.0) * self.dag.time_scale)
            .unwrap_or_default();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
            // The job arrives now, and its JCT counts from now: a new core.
            self.first = None;
        }
        let mut resume = true;
        loop {
            let core = match self.first.take() {
                Some(core) => core,
                None => DagJob::new(self.job.clone(), self.dag.clone(), self.clock.monotonic())
                    .map_err(|e| DriverError::Transport(format!("the job cannot start: {e}")))?,
            };
            let (scheduler, framework_id) = self.scheduler(core, resume).map_err(|e| {
                DriverError::Transport(format!("the job's journal cannot be used: {e}"))
            })?;
            if scheduler.dag().is_done() {
                // An earlier process saw it through; its framework is gone with it.
                return Ok(scheduler);
            }
            let mut config = DriverConfig::new(
                self.options.masters.clone(),
                self.job.name.clone(),
                self.group.clone(),
            );
            config.failover_timeout_ms = self.options.failover_timeout_ms;
            // Different jitter per job, so that the jobs do not reconnect in lockstep.
            config.jitter_seed = 0x5eed ^ (self.index as u64).wrapping_mul(0x9E37_79B9);
            config.framework_id = framework_id.clone();
            let run_options = RunOptions {
                transport: self.options.transport.clone(),
                clock: self.clock,
                ..RunOptions::default()
            };
            match run_with_client(client, config, run_options, scheduler).await {
                Err(DriverError::SubscriptionRefused { error, .. })
                    if framework_id.is_some() && error.code == ErrorCode::UnknownFramework =>
                {
                    tracing::warn!(job = %self.job.name, framework = ?framework_id, %error, "the framework to take over is gone; starting the job over");
                    if let (Some(log), Some(framework_id)) = (&self.options.event_log, framework_id)
                    {
                        log.log(Event::FrameworkGone { framework_id });
                    }
                    resume = false;
                }
                outcome => return outcome,
            }
        }
    }

    /// The job's scheduler, with its journal; restored from it when `resume`, emptied
    /// otherwise. Also the framework id to take over, if any.
    fn scheduler(
        &self,
        mut core: DagJob,
        resume: bool,
    ) -> Result<(DagScheduler, Option<FrameworkId>), JournalError> {
        let (journal, framework_id) = Journal::take_over(
            self.options.state_dir.as_deref(),
            &self.job.name,
            resume,
            |records| Ok::<_, JournalError>(core.restore(records)),
        )?;
        let scheduler = DagScheduler::new(core, self.index, self.progress.clone())
            .with_event_log(self.options.event_log.clone())
            .with_journal(journal)
            .with_stop(self.options.stop.clone())
            .with_deadline(self.options.deadlines.get(self.index).cloned().flatten());
        Ok((scheduler, framework_id))
    }
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
    /// The arrival times do not fit the jobs (see [`check_arrivals`]).
    #[error("invalid arrival times: {0}")]
    Arrivals(String),
    /// The deadlines do not fit the jobs.
    #[error("invalid deadlines: {0}")]
    Deadlines(String),
    /// The jobs cannot run as one session framework ([`crate::session::run_session`]).
    #[error(transparent)]
    Session(#[from] crate::session::SessionRefusal),
    /// The session's journal cannot be used ([`crate::session::run_session`] with a state
    /// directory).
    #[error("the session's journal cannot be used: {0}")]
    Journal(#[from] JournalError),
}

impl From<ArrivalsError> for RunError {
    fn from(error: ArrivalsError) -> RunError {
        RunError::Arrivals(error.0)
    }
}
