//! raft-rs logs through `slog`; Fullerene logs through `tracing`. This drain forwards the
//! former to the latter, under the target `raft`, so one subscriber configuration
//! (`RUST_LOG=raft=debug`) governs both.

use std::fmt::{self, Write as _};

use slog::{Drain, Level, OwnedKVList, Record, KV};

/// A `slog` drain that emits every record as a `tracing` event with target `raft`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingDrain;

/// Collects a record's key-value pairs as ` key=value` text.
struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

fn tracing_enabled(level: Level) -> bool {
    match level {
        Level::Critical | Level::Error => tracing::enabled!(target: "raft", tracing::Level::ERROR),
        Level::Warning => tracing::enabled!(target: "raft", tracing::Level::WARN),
        Level::Info => tracing::enabled!(target: "raft", tracing::Level::INFO),
        Level::Debug => tracing::enabled!(target: "raft", tracing::Level::DEBUG),
        Level::Trace => tracing::enabled!(target: "raft", tracing::Level::TRACE),
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        // raft-rs logs a lot at debug level; format nothing unless someone listens.
        if !tracing_enabled(record.level()) {
            return Ok(());
        }
        let mut kv = KvText(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let message = record.msg();
        let kv = kv.0;
        match record.level() {
            Level::Critical | Level::Error => {
                tracing::error!(target: "raft", "{message}{kv}");
            }
            Level::Warning => tracing::warn!(target: "raft", "{message}{kv}"),
            Level::Info => tracing::info!(target: "raft", "{message}{kv}"),
            Level::Debug => tracing::debug!(target: "raft", "{message}{kv}"),
            Level::Trace => tracing::trace!(target: "raft", "{message}{kv}"),
        }
        Ok(())
    }

    fn is_enabled(&self, level: Level) -> bool {
        tracing_enabled(level)
    }
}

/// The logger handed to raft-rs for master `id`.
pub fn raft_logger(id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("raft_id" => id))
}
