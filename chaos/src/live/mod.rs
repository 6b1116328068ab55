//! Chaos on real processes (`fullerene chaos run`): a cluster of real `fullerene` masters,
//! agents running real task processes and DAG-job frameworks on loopback, faults injected on a
//! seeded schedule, a history recorded from sources that do not trust each other, and the
//! simulation's invariant checker ([`crate::system::checker`]) run over it.
//!
//! The parts:
//!
//! - [`proxy`]: the UDP fault proxy every master is reached through (partitions, loss, delay,
//!   duplication between named processes, without root);
//! - [`procs`]: the process table: which task processes run where (counted independently of
//!   the agents), and which process owns a socket;
//! - [`observe`]: the masters' HTTP API: leaders and terms, applied indices, the leader's
//!   committed accounting;
//! - [`schedule`]: the fault kinds and their seeded schedule; `inject` carries them out on
//!   the processes and the proxy, and heals them;
//! - `report`: the history merged (`history`), checked and written out, and the figures;
//! - the agents' and frameworks' event logs ([`fullerene_client::event_log`]): registrations,
//!   updates sent and delivered, offers, job ends.
//!
//! [`run_live`] lays the cluster out under a directory, runs the jobs under faults, heals
//! everything, waits for the jobs, checks the history and stops every process it started,
//! on success, on error and when interrupted.

pub mod observe;
pub mod procs;
pub mod proxy;
pub mod schedule;

mod history;
mod inject;
mod report;
mod run;

pub use history::{assemble, Sources};
pub use report::{Latencies, LiveReport};
pub(crate) use run::kill_task_processes;
pub use run::{run_live, LiveError, LiveOptions, Progress};
pub use schedule::{LiveFault, Planned};
