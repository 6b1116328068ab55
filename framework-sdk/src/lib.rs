//! The Fullerene framework SDK.
//!
//! - [`job`] and [`workload`]: the DAG job model and the reader of workload files.
//! - `planner`: Graphene's offline planner (Graphene §4, tech report §4) and the lower bounds
//!   of the tech report's §6.
//! - `policy`: the online, per-offer policies: Graphene's matcher (Graphene §5, tech report
//!   Fig. 8), Carbyne's altruism (Carbyne §3.3), and the baselines.
//! - `driver` (feature `driver`, on by default): the framework driver (a sans-IO core and a
//!   thin tokio/QUIC shell) and the `Scheduler` trait.
//! - `dag`: the DAG-job framework: one framework per job, planned with Graphene, matched online
//!   and yielding with Carbyne, with bounded retries (a sans-IO core, and with the `driver`
//!   feature a `Scheduler` and the runner of a workload).
//!
//! Everything but the driver's shell is sans-IO: no sockets, threads or clocks (DESIGN.md,
//! principle 1), so the simulator runs the same code as production frameworks. Without the
//! `driver` feature the SDK has no network dependency (no tokio, quinn or rustls). The one
//! disk access is [`read_workload`], a convenience over [`parse_workload`] for the simulator,
//! the command line and the benches.

#![warn(missing_docs)]

pub mod dag;
#[cfg(feature = "driver")]
pub mod driver;
pub mod job;
pub mod lower_bound;
pub mod planner;
pub mod policy;
pub mod reserve;
pub mod session;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod timed_queue;
pub mod workload;

pub use job::{Job, Stage, StageIdx, TaskRef};
pub use workload::{parse_workload, read_workload, WorkloadError};
