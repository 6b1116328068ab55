//! The Fullerene agent: one per machine. It reports the machine's resources to the leading
//! master, runs tasks as child processes within their limits, and delivers their status updates
//! reliably (checkpointed on disk, retried until acknowledged).
