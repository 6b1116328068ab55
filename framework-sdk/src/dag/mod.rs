//! The DAG-job framework shipped with the SDK: runs jobs of a workload file,
//! each as its own framework (one subscription per job, its group from the workload line, as
//! the simulator does). Each job is planned with Graphene's offline planner, answers offers
//! with the same online policy the simulator runs (Graphene's matcher inside Carbyne's
//! altruism by default, or any [`PolicyKind`](crate::policy::PolicyKind)), tracks stage
//! completion, retries tasks that fail or are lost (a bounded number of times, then the job
//! fails with the reason) and re-plans what is left of the DAG.
//!
//! - [`job`]: the sans-IO core: given offers, updates and failed calls, what to send;
//! - [`attempts`]: task ids, task specs and the retry rule, shared with the session framework
//!   ([`crate::session::SessionFramework`]);
//! - [`template`]: the command template, its placeholders replaced with names shell-quoted;
//! - [`journal`]: what a framework process records so that another can fail over to it;
//! - `run` (feature `driver`): the driver's `Scheduler` around it and `run_jobs`, which runs
//!   the jobs of a workload against the masters.

pub mod attempts;
pub mod common;
pub mod job;
pub mod journal;
#[cfg(feature = "driver")]
pub mod run;
pub mod template;
#[cfg(test)]
mod tests;

pub use attempts::{AttemptEnd, Attempts};
pub use job::{DagConfig, DagError, DagJob, ExecutorTemplate, JobOutcome, JobProgress};
#[cfg(feature = "driver")]
pub use run::{run_jobs, DagScheduler, JobReport, ProgressFn, RunError, RunJobsOptions};
