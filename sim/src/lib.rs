//! A discrete-event simulator that drives the master's allocator and the SDK's scheduling
//! policies, unchanged, in virtual time over workload files (`shared/workloads/FORMAT.md`).
//!
//! Each job runs as its own framework (as a Spark application does on Mesos, or a Tez
//! application master on YARN) in the fairness group its workload line names; the master's
//! [`Allocator`](fullerene_scheduling::allocator::Allocator) (with a state of its own, [`StandaloneAllocator`](fullerene_scheduling::allocator::StandaloneAllocator)) offers machines' free resources to the
//! frameworks, whose [`JobPolicy`](fullerene_sdk::policy::JobPolicy) answers with bundles of
//! tasks or yields; tasks run for their durations (longer on an overbooked link), and their
//! completions free resources. The same inputs give the same output, byte for byte, but for the
//! wall-clock speed figures ([`SimSpeed`]): time is virtual, ties are broken by creation order,
//! randomness comes from the seed, and nothing else in the output depends on hash-map order or
//! thread scheduling.
//!
//! - [`config`], [`arrivals`], [`workload`]: the scenario (`fullerene sim`'s flags).
//! - [`runner`]: [`run`] one policy, [`compare`] several on identical arrivals, [`plan_jobs`].
//! - [`scheduling`]: each job as its own framework, or every job in one multi-job session
//!   framework (Decima §5.2, [`SessionScheduling`]).
//! - [`engine`]: the event loop, with `framework` (private): the simulated frameworks.
//! - [`study`]: [`compare_seeds`] runs a comparison over several seeds and aggregates it,
//!   [`sweep_machines`] does so at several cluster sizes (load levels).
//! - [`sla`]: SLA jobs' deadlines and reservations derived from their DAGs, admitted into a
//!   Rayon plan (issue 17); [`reserved`]: running them under the plan (Rayon's follower and
//!   preemption) against a capacity-queue baseline, [`compare_sla`].
//! - [`metrics`], [`report`], [`plot`]: JCTs, makespan, Jain's index, utilisation, jobs in the
//!   system; the JSON report, the tables, the SVG plots.

#![warn(missing_docs)]

pub mod arrivals;
pub mod config;
pub mod engine;
pub mod error;
mod framework;
pub mod metrics;
pub mod plot;
pub mod policies;
pub mod report;
pub mod reserved;
pub mod runner;
pub mod scheduling;
pub mod session;
pub mod sla;
pub mod study;
pub mod workload;

pub use arrivals::{ArrivalSpec, ArrivalSpecError};
pub use config::{reference_machine, RuleVariant, SimConfig, REFERENCE_MACHINE};
pub use engine::{RunStats, TaskRecord};
pub use error::SimError;
pub use fullerene_sdk::policy::PolicyKind;
pub use metrics::{FairnessSummary, UtilizationTimeline};
pub use plot::{
    plot_gain_vs_load, plot_jct_cdf, plot_lines, plot_seed_jct_cdf, plot_utilization, workload_name,
};
pub use policies::{allocator_policy, parse_name_list, parse_policy_list};
pub use report::{attach_ratios, render_table, JobResult, Ratios, Scenario, SimReport, SimSpeed};
pub use reserved::{
    compare_sla, compare_sla_seeds, parse_sla_policy_list, render_sla_study_table,
    render_sla_table, BaselineShare, SlaComparison, SlaOptions, SlaPolicy, SlaPolicyReport,
    SlaStudy, SlaStudyRow,
};
pub use runner::{compare, plan_jobs, run, simulate, PlanSet, Progress, ProgressFn, SimOutcome};
pub use scheduling::{Scheduling, SessionScheduling};
pub use study::{
    compare_seeds, consecutive_seeds, render_seed_table, render_sweep, sweep_machines, LoadSweep,
    PolicySeeds, SeedStudy, Spread,
};
pub use workload::{
    arrival_times, check_fits, job_sources, prepare_jobs, JobOrder, JobOrderError, SimJob,
};
