//! The Fullerene agent: one per machine. It reports the machine's resources to the leading
//! master, runs tasks as child processes within their limits, and delivers their status updates
//! reliably (checkpointed on disk, retried until acknowledged).
//!
//! - [`core`]: the sans-IO task table and per-task status streams;
//! - [`checkpoint`]: the on-disk log every update is written to before it is sent;
//! - [`executor`] and [`cgroups`]: processes in sandboxes and process groups, limits, kills,
//!   re-attachment after a restart, and the built-in `sleep` executor;
//! - [`isolation`]: each task as a user of its own, in a sandbox only it can read;
//! - [`sandboxes`]: sans-IO decisions on sandboxes of ended tasks: which log reads are safe
//!   and which sandboxes the garbage collection removes;
//! - [`machine`]: resource detection and the `--resources` / `--attributes` syntax;
//! - [`shell`]: the tokio shell (connection, registration, redirects, heartbeats, retries);
//! - [`metrics`]: the Prometheus metrics it publishes.

pub mod cgroups;
pub mod checkpoint;
pub mod core;
pub mod executor;
pub mod isolation;
pub mod machine;
pub mod metrics;
pub mod sandboxes;
pub mod shell;

pub use shell::{run, AgentConfig, AgentError};
