//! The session framework's shell: a [`Scheduler`] around one [`SessionFramework`], and
//! [`run_session`], which runs every job of a workload in one framework subscription (Decima
//! §5.2's multi-job framework, issue 18), the counterpart of [`run_jobs`](crate::dag::run_jobs)'
//! framework per job.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fullerene_proto::messages::{ErrorCode, FrameworkRequest, Offer, StatusUpdate, WireError};
use fullerene_proto::time::SystemClock;
use fullerene_proto::FrameworkId;
use fullerene_transport::{Client, TlsMaterial};

use super::framework::{SessionFramework, SessionRefusal};
use super::SessionPolicyFactory;
use crate::dag::common::check_arrivals;
use crate::dag::journal::{Journal, Record};
use crate::dag::{JobOutcome, JobReport, ProgressFn, RunError, RunJobsOptions};
use crate::driver::{
    run_with_client, DriverConfig, DriverError, DriverHandle, RunOptions, Scheduler,
};
use crate::job::Job;

/// A [`Scheduler`] that runs a workload's jobs as one session and tears its framework down
/// once every job ended and the masters recorded how.
pub struct SessionScheduler {
    core: SessionFramework,
    progress: Option<ProgressFn>,
    framework_id: Option<FrameworkId>,
    /// Raised when the jobs must stop before they end.
    stop: Option<Arc<AtomicBool>>,
    stopped: bool,
    torn_down: bool,
    /// Where the reports go when the driver stops for good (it takes the scheduler with it).
    fatal_reports: Option<FatalReports>,
    /// The session's journal, for another process to take the framework over.
    journal: Option<Journal>,
    /// A journal write failed: nothing more is asked for that would need a record.
    journal_broken: bool,
}

/// The slot [`SessionScheduler::fatal`] leaves the jobs' reports in: the group they name and the
/// reports once the driver stopped for good.
type FatalReports = (String, Arc<Mutex<Option<Vec<JobReport>>>>);

impl SessionScheduler {
    /// Wraps the session's core; `progress` hears of every job's changes by its index.
    pub fn new(core: SessionFramework, progress: Option<ProgressFn>) -> SessionScheduler {
        SessionScheduler {
            core,
            progress,
            framework_id: None,
            stop: None,
            stopped: false,
            torn_down: false,
            fatal_reports: None,
            journal: None,
            journal_broken: false,
        }
    }

    /// Records the framework id, every launch before it is asked for and every task the
    /// session counted finished in `journal`, so that another process can take the session
    /// over ([`SessionFramework::restore`]).
    pub fn with_journal(mut self, journal: Option<Journal>) -> SessionScheduler {
        self.journal = journal;
        self
    }

    /// Appends `record` to the journal, if there is one. A record that cannot be written
    /// stops every job (into `calls`), and no later record is written, so that what needs one
    /// is not asked for: a successor reading a journal with a gap could launch a task that
    /// still runs, or take over a framework it does not know the launches of.
    fn journal(&mut self, record: &Record, calls: &mut Vec<FrameworkRequest>) -> bool {
        let Some(journal) = &self.journal else {
            return true;
        };
        if self.journal_broken {
            return false;
        }
        match journal.append(record) {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, "cannot write the session's journal; stopping every job");
                self.journal_broken = true;
                calls.extend(self.core.stop(&format!(
                    "cannot write the session's journal, which another process would need to \
                     take the session over: {error}"
                )));
                false
            }
        }
    }

    /// When the driver stops for good, leaves each job's report (naming `group`) in `slot`:
    /// jobs that ended keep their outcome, the others fail with the driver's error.
    pub fn with_fatal_reports(
        mut self,
        group: String,
        slot: Arc<Mutex<Option<Vec<JobReport>>>>,
    ) -> SessionScheduler {
        self.fatal_reports = Some((group, slot));
        self
    }

    /// Stops every job when `stop` is raised: each fails as stopped and the framework is torn
    /// down, so that the masters kill the tasks at once.
    pub fn with_stop(mut self, stop: Option<Arc<AtomicBool>>) -> SessionScheduler {
        self.stop = stop;
        self
    }

    /// The session's core.
    pub fn core(&self) -> &SessionFramework {
        &self.core
    }

    /// Each job's report, in the order the jobs were given; `group` is the one asked for.
    pub fn reports(&self, group: &str) -> Vec<JobReport> {
        (0..self.core.jobs().count())
            .filter_map(|index| self.core.progress(index))
            .map(|progress| JobReport {
                name: progress.name,
                group: group.to_string(),
                framework_id: self.framework_id.as_ref().map(ToString::to_string),
                tasks: progress.tasks,
                outcome: match progress.outcome {
                    JobOutcome::Running => JobOutcome::Failed {
                        reason: "the framework stopped before the job ended".into(),
                    },
                    other => other,
                },
                failed_attempts: progress.failed_attempts,
                preempted_attempts: progress.preempted_attempts,
                deadline: None,
            })
            .collect()
    }

    fn apply(&mut self, driver: &mut DriverHandle, calls: Vec<FrameworkRequest>) {
        let mut calls = std::collections::VecDeque::from(calls);
        while let Some(call) = calls.pop_front() {
            // Written ahead: a task id, once asked for, is never used again by a successor,
            // and a launch that cannot be recorded is not asked for (its offers are declined);
            // a job's end is recorded before the masters hear of it, so that a successor does
            // not run a failed job again.
            let mut stopping = Vec::new();
            let recorded = match &call {
                FrameworkRequest::Accept { tasks, .. } => tasks
                    .iter()
                    .all(|task| self.journal(&Record::Launched(task.id.clone()), &mut stopping)),
                FrameworkRequest::EndJob { job, .. } => {
                    self.journal(&Record::JobEnded(job.clone()), &mut stopping);
                    true
                }
                _ => true,
            };
            calls.extend(stopping);
            match call {
                FrameworkRequest::Accept { offer_ids, .. } if !recorded => {
                    driver.call(FrameworkRequest::Decline {
                        offer_ids,
                        refuse_ms: 0,
                    });
                }
                call => driver.call(call),
            }
        }
        self.report_progress();
        if self.core.is_finished() && !self.torn_down {
            // Every job ended and the masters recorded how: nothing of the framework needs to
            // outlive it.
            self.torn_down = true;
            driver.teardown();
        }
    }

    fn report_progress(&mut self) {
        for index in self.core.take_changed() {
            if let (Some(progress), Some(p)) = (&self.progress, self.core.progress(index)) {
                progress(index, &p);
            }
        }
    }

    fn subscribed(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.framework_id = Some(framework_id.clone());
        let calls = self.core.on_subscribed();
        self.apply(driver, calls);
    }
}

impl Scheduler for SessionScheduler {
    fn registered(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        let mut stopping = Vec::new();
        self.journal(&Record::Subscribed(framework_id.clone()), &mut stopping);
        self.apply(driver, stopping);
        self.subscribed(driver, framework_id);
    }

    fn reconnected(&mut self, driver: &mut DriverHandle, framework_id: &FrameworkId) {
        self.subscribed(driver, framework_id);
    }

    fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>) {
        let calls = self.core.on_offers(&offers, driver.now());
        self.apply(driver, calls);
    }

    fn status_update(&mut self, driver: &mut DriverHandle, update: &StatusUpdate) {
        let finished_before = self.core.tasks_finished();
        let mut calls = self.core.on_update(update, driver.now());
        if self.core.tasks_finished() > finished_before {
            self.journal(&Record::Finished(update.task_id.clone()), &mut calls);
        }
        self.apply(driver, calls);
    }

    fn call_failed(
        &mut self,
        driver: &mut DriverHandle,
        request: &FrameworkRequest,
        error: &WireError,
    ) {
        tracing::debug!(%error, "call failed");
        let calls = self.core.on_call_failed(request, error);
        self.apply(driver, calls);
    }

    fn job_recorded(&mut self, driver: &mut DriverHandle, request: &FrameworkRequest) {
        self.core.on_job_recorded(request);
        self.apply(driver, Vec::new());
    }

    fn tick(&mut self, driver: &mut DriverHandle) {
        let mut calls = Vec::new();
        let stop = self
            .stop
            .as_ref()
            .is_some_and(|stop| stop.load(Ordering::Relaxed));
        if stop && !self.stopped {
            self.stopped = true;
            calls.extend(
                self.core
                    .stop("stopped before it ended: its framework was torn down"),
            );
        }
        calls.extend(self.core.on_tick(driver.now()));
        self.apply(driver, calls);
    }

    fn fatal(&mut self, error: &DriverError) {
        // The driver is gone: the calls have nobody to go to.
        let _ = self.core.stop(&error.to_string());
        self.report_progress();
        if let Some((group, slot)) = &self.fatal_reports {
            let reports = self.reports(group);
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reports);
        }
    }
}

/// Runs every job in one framework subscription scheduled by a session policy from `factory`
/// (given `seed`; Decima §5.2: on each batch of offers the policy picks a stage among all
/// jobs' runnable stages and its job's parallelism limit; see [`SessionFramework`] for how that
/// maps onto offers, and its departures from Decima), until each job finishes or fails. Jobs
/// arrive as `options.arrivals_s` says (checked at each driver tick); a job's JCT runs from its
/// nominal arrival.
///
/// With `options.state_dir`, the session keeps one journal there (named after its framework,
/// `{policy}-session`): a later run with the same directory takes the framework over
/// (framework failover, [`SessionFramework::restore`]) if it comes within its failover
/// timeout, and starts every job over otherwise.
///
/// The per-job reports have the shape [`run_jobs`](crate::dag::run_jobs) gives, every job
/// naming the one framework. Refused before anything runs ([`RunError::Session`]): a state
/// directory with jobs that arrive later, deadlines (no reservations), an event log (its
/// readers expect a framework per job), two jobs of one name, and invalid settings.
pub async fn run_session(
    jobs: Vec<Job>,
    tls: &TlsMaterial,
    options: RunJobsOptions,
    factory: SessionPolicyFactory,
    seed: u64,
    progress: Option<ProgressFn>,
) -> Result<Vec<JobReport>, RunError> {
    if options.deadlines.iter().any(Option::is_some) {
        return Err(SessionRefusal::Deadlines.into());
    }
    if options.event_log.is_some() {
        return Err(SessionRefusal::EventLog.into());
    }
    check_arrivals(&options.arrivals_s, jobs.len())?;
    if options.state_dir.is_some() && options.arrivals_s.iter().any(|&at| at > 0.0) {
        return Err(SessionRefusal::JournalWithArrivals.into());
    }
    let clock = SystemClock::new();
    let group = options.group.clone().unwrap_or_default();
    let sizes: Vec<(String, usize)> = jobs
        .iter()
        .map(|job| (job.name.clone(), job.num_tasks()))
        .collect();
    let client = Client::new(tls, options.transport.clone())
        .map_err(|e| RunError::Driver(DriverError::Transport(e.to_string())))?;
    let mut resume = true;
    let (outcome, fatal_reports) = loop {
        let policy = factory(seed);
        let name = format!("{}-session", policy.name());
        let mut core = SessionFramework::new(
            jobs.clone(),
            options.dag.clone(),
            policy,
            &options.arrivals_s,
            clock.monotonic(),
        )?;
        let (journal, framework_id) =
            Journal::take_over(options.state_dir.as_deref(), &name, resume, |records| {
                core.restore(records).map_err(RunError::from)
            })?;
        let fatal_reports = Arc::new(Mutex::new(None));
        let scheduler = SessionScheduler::new(core, progress.clone())
            .with_stop(options.stop.clone())
            .with_journal(journal)
            .with_fatal_reports(group.clone(), Arc::clone(&fatal_reports));
        // Every job ended before the takeover: the framework, if it is still there, is
        // subscribed to only to tell the ends the masters may lack and be torn down.
        let done = scheduler
            .core()
            .is_done()
            .then(|| scheduler.reports(&group));
        if let (Some(reports), None) = (&done, &framework_id) {
            return Ok(reports.clone());
        }
        let mut config = DriverConfig::new(options.masters.clone(), name, group.clone());
        config.failover_timeout_ms = options.failover_timeout_ms;
        config.framework_id = framework_id.clone();
        let run_options = RunOptions {
            transport: options.transport.clone(),
            clock,
            ..RunOptions::default()
        };
        match run_with_client(&client, config, run_options, scheduler).await {
            Err(DriverError::SubscriptionRefused { error, .. })
                if framework_id.is_some() && error.code == ErrorCode::UnknownFramework =>
            {
                if let Some(reports) = done {
                    // Gone, with every job ended: nothing is left to do.
                    client.close();
                    client.wait_idle().await;
                    return Ok(reports);
                }
                tracing::warn!(framework = ?framework_id, %error, "the session's framework to take over is gone; starting every job over");
                resume = false;
            }
            outcome => break (outcome, fatal_reports),
        }
    };
    client.close();
    client.wait_idle().await;
    let left = fatal_reports
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    Ok(match (outcome, left) {
        (Ok(scheduler), _) => scheduler.reports(&group),
        // The driver stopped for good: the jobs that ended keep their outcome, the others
        // failed with its error (`SessionScheduler::fatal`).
        (Err(_), Some(reports)) => reports,
        // Not reached (the driver tells its scheduler before it fails): every job failed.
        (Err(error), None) => sizes
            .into_iter()
            .map(|(name, tasks)| JobReport {
                name,
                group: group.clone(),
                framework_id: None,
                tasks,
                outcome: JobOutcome::Failed {
                    reason: error.to_string(),
                },
                failed_attempts: 0,
                preempted_attempts: 0,
                deadline: None,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use fullerene_proto::messages::FrameworkRequest;
    use fullerene_proto::testkit::offer;
    use fullerene_proto::time::Time;
    use fullerene_proto::FrameworkId;
    use fullerene_scheduling::testkit::res;

    use super::*;
    use crate::dag::DagConfig;
    use crate::session::SessionPolicyKind;
    use crate::testkit::{job, stage};

    #[test]
    fn a_journal_that_cannot_be_written_stops_the_jobs_and_sends_no_unrecorded_launch() {
        let jobs = vec![
            job(
                "a",
                "default",
                None,
                vec![stage(0, &[], &[2.0, 2.0], res("cpus=1,mem_mib=100"))],
            ),
            job(
                "b",
                "default",
                None,
                vec![stage(0, &[], &[2.0], res("cpus=1,mem_mib=100"))],
            ),
        ];
        let core = SessionFramework::new(
            jobs,
            DagConfig::default(),
            SessionPolicyKind::Fifo.build(),
            &[],
            Time::from_millis(0),
        )
        .expect("a valid session");
        let dir = tempfile::tempdir().expect("temp dir");
        let journal = Journal::unwritable(&dir.path().join("fifo-session.journal"));
        let mut scheduler = SessionScheduler::new(core, None).with_journal(Some(journal));
        let id = FrameworkId::from("f1");
        let mut handle = DriverHandle::new(Time::from_millis(10), Some(id.clone()));
        // (A takeover's subscription: no record is written before the launches.)
        scheduler.reconnected(&mut handle, &id);
        // Three agents' offers: the session places tasks on each, one accept per agent; the
        // first launch's record fails.
        let offers = vec![
            offer(1, "f1", "a1", "a1", "cpus=1,mem_mib=1000", u64::MAX),
            offer(2, "f1", "a2", "a2", "cpus=1,mem_mib=1000", u64::MAX),
            offer(3, "f1", "a3", "a3", "cpus=1,mem_mib=1000", u64::MAX),
        ];
        scheduler.offers(&mut handle, offers);
        let (calls, _) = handle.into_calls();
        assert!(
            !calls
                .iter()
                .any(|c| matches!(c, FrameworkRequest::Accept { .. })),
            "a launch went out unrecorded: {calls:?}"
        );
        let declined: Vec<_> = calls
            .iter()
            .filter_map(|c| match c {
                FrameworkRequest::Decline { offer_ids, .. } => Some(offer_ids.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(declined.len(), 3, "every offer is given back: {calls:?}");
        for index in 0..2 {
            let progress = scheduler.core().progress(index).expect("a job");
            assert!(
                matches!(&progress.outcome, JobOutcome::Failed { reason } if reason.contains("journal")),
                "{progress:?}"
            );
        }
    }
}
