//! The simulator's errors: each names the job, stage or setting at fault.

use std::path::PathBuf;

use fullerene_sdk::WorkloadError;

/// Why a simulation could not run to completion.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The workload file could not be read.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// Nothing to simulate (an empty job list, or `--jobs 0`).
    #[error("no jobs to simulate")]
    NoJobs,
    /// A setting out of range.
    #[error("invalid simulation settings: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// `--arrivals trace` on a workload line without `arrival_s`.
    #[error("--arrivals trace: job `{job}` has no arrival_s in the workload")]
    MissingArrival {
        /// The job.
        job: String,
    },
    /// Cycling through the file produced a name the file already uses.
    #[error("job name `{name}` is not unique after cycling through the workload (--jobs)")]
    DuplicateJobName {
        /// The clashing name.
        name: String,
    },
    /// A stage's task demand exceeds an empty machine, so the job could never finish.
    #[error("job `{job}`, stage {stage} (`{stage_name}`): task demand {demand} fits no machine of the cluster ({machine})")]
    DemandFitsNoMachine {
        /// The job.
        job: String,
        /// The stage's id in the workload file.
        stage: u32,
        /// The stage's name.
        stage_name: String,
        /// One task's demand, in `--machine-resources` syntax.
        demand: String,
        /// The machines' capacities, in `--machine-resources` syntax (several separated by `; `).
        machine: String,
    },
    /// Graphene's offline planner failed on a job.
    #[error("planning job `{job}` failed: {source}")]
    Plan {
        /// The job.
        job: String,
        /// The planner's error.
        source: fullerene_sdk::planner::PlanError,
    },
    /// A Graphene policy ran without its job's plan (a plan set computed for other jobs).
    #[error("no offline plan for job `{job}`: plan the jobs for this scenario first")]
    MissingPlan {
        /// The job.
        job: String,
    },
    /// A framework policy could not be built for a job.
    #[error("cannot build the policy of job `{job}`: {source}")]
    Policy {
        /// The job.
        job: String,
        /// The SDK's error.
        source: fullerene_sdk::policy::PolicyError,
    },
    /// The allocator rejected a call the simulator made (boxed: the allocator's errors carry
    /// resource vectors, and every `Result` of the simulator would pay for their size).
    #[error("allocator: {0}")]
    Allocator(Box<fullerene_scheduling::allocator::AllocatorError>),
    /// An inconsistency inside the simulator (a defect, reported rather than panicking).
    #[error("simulator invariant broken: {0}")]
    Internal(String),
    /// The simulation checker found a followed plan's promise broken (Rayon §5.2): the
    /// reservations' guarantees exceed the plan's capacity, or a reserved job owed resources
    /// was not offered any.
    #[error("reservation {reservation} at t={now_s}s: {what}")]
    ReservationBroken {
        /// Virtual time.
        now_s: f64,
        /// The reservation's id.
        reservation: u64,
        /// What was broken.
        what: String,
    },
    /// A framework policy answered an offer with a bundle the simulator cannot apply (a task
    /// that is not runnable, or more than the machine holds): a defect in that policy.
    #[error("policy `{policy}` gave job `{job}` an invalid bundle at t={now_s}s on machine {machine}: {reason}")]
    InvalidDecision {
        /// The framework policy's name.
        policy: String,
        /// The job.
        job: String,
        /// The machine offered.
        machine: usize,
        /// Virtual time.
        now_s: f64,
        /// What is wrong with the bundle.
        reason: String,
    },
    /// A session policy's launches on one offered machine, of several jobs or of none, cannot
    /// be applied together (more than the machine or the offer holds): a defect in that policy,
    /// which no one job's bundle is to blame for.
    #[error("session policy `{policy}` of framework `{session}` answered the offer of machine {machine} at t={now_s}s with launches it cannot apply ({jobs}): {reason}")]
    InvalidSessionDecision {
        /// The session policy's name.
        policy: String,
        /// The session framework's id.
        session: String,
        /// The jobs it launched tasks of on the machine (`no task`, or `jobs `a`, `b``).
        jobs: String,
        /// The machine offered.
        machine: usize,
        /// Virtual time.
        now_s: f64,
        /// What is wrong with the launches.
        reason: String,
    },
    /// A session run ([`crate::Scheduling::Session`]) was asked to follow reservations or
    /// capacity queues (Rayon, `--deadlines`): those are per-job features, which a session,
    /// one framework for every job, does not support.
    #[error("policy `{policy}` runs every job in one session framework, which reservations and SLA queues do not support: run it with no queues (the CLI's --deadlines runs only per-job policies)")]
    SessionWithQueues {
        /// The session policy's name.
        policy: String,
    },
    /// No event is left but some jobs have not finished: the policies stopped launching while
    /// resources were free (a livelock between allocator and frameworks).
    #[error("simulation stalled at t={now_s}s with {unfinished} unfinished job(s), first `{first_job}`: no task running and no offer accepted")]
    Stalled {
        /// Virtual time of the stall.
        now_s: f64,
        /// How many jobs had not finished.
        unfinished: usize,
        /// The first of them.
        first_job: String,
    },
    /// Writing a plot failed.
    #[error("cannot draw plot {file}: {reason}")]
    Plot {
        /// The output file.
        file: PathBuf,
        /// The drawing backend's error.
        reason: String,
    },
}

impl From<fullerene_scheduling::allocator::AllocatorError> for SimError {
    fn from(e: fullerene_scheduling::allocator::AllocatorError) -> SimError {
        SimError::Allocator(Box::new(e))
    }
}
