//! The node's durable work, handed to the store's writer (see the storage module's "Staged
//! writes and the writer"): what each job is, how a writer runs a queue of them, and what it
//! reports back.
//!
//! The node never waits for the disk. Each `Ready`'s write is staged (visible to raft-rs at
//! once) and becomes a [`StoreJob`]; so do state-machine snapshots and compactions. Where the
//! jobs run is the caller's choice ([`Persistence`]): in line, inside
//! [`RaftNode::advance`](super::RaftNode::advance), for tests and simple embeddings; or
//! offloaded, taken with [`RaftNode::take_store_jobs`](super::RaftNode::take_store_jobs) and
//! run elsewhere ([`run_store_jobs`]: the master's shell runs them on a thread of its own, the
//! simulations after a seeded delay), with the [`StoreReport`] handed back to
//! [`RaftNode::store_report`](super::RaftNode::store_report).

use raft::eraftpb::SnapshotMetadata;

use crate::state::ClusterState;
use crate::storage::{Compaction, DurableWriter, StorageError};

/// Where a node's store jobs run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Persistence {
    /// Inside [`RaftNode::advance`](super::RaftNode::advance), before it returns: every write
    /// is durable when `advance` returns, as with a synchronous store.
    #[default]
    Inline,
    /// By the caller, who takes them with `take_store_jobs` and reports with `store_report`.
    /// Raft goes on meanwhile (ticks, heartbeats, the leader's appends, more proposals); what
    /// needs the write durable (votes, append acknowledgements, commits counting this master)
    /// waits for the report.
    Offloaded,
}

/// One job for the store's writer, numbered in the order it must run.
#[derive(Debug)]
pub struct StoreJob<T> {
    /// Its number: jobs run in increasing order, and a report names the last one done.
    pub id: u64,
    /// What to do.
    pub work: StoreWork<T>,
}

/// What a [`StoreJob`] does.
#[derive(Debug)]
pub enum StoreWork<T> {
    /// Write a staged `Ready` (entries, hard state, a snapshot from the leader).
    Write(T),
    /// Encode and save a snapshot of the state machine taken at `meta`'s index; a state that
    /// does not encode is skipped (the log keeps growing until one does), not an error.
    Snapshot {
        /// Index, term and membership of the snapshot.
        meta: SnapshotMetadata,
        /// The state machine at that index.
        state: Box<ClusterState>,
    },
    /// Delete entries the store no longer serves.
    Compact(Compaction),
}

impl<T> StoreWork<T> {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreWork::Write(_) => "write",
            StoreWork::Snapshot { .. } => "snapshot",
            StoreWork::Compact(_) => "compact",
        }
    }
}

/// How one job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    /// Written (or deleted) durably.
    Done,
    /// The snapshot was saved; its encoded size.
    SnapshotSaved {
        /// Bytes of the encoded state.
        bytes: usize,
    },
    /// The state did not encode; nothing was written.
    SnapshotSkipped(String),
}

/// What a writer did with a queue of jobs: the outcome of each job done, in order, and the
/// failure that stopped it, if any (later jobs were not run; the node halts).
#[derive(Debug, Default)]
pub struct StoreReport {
    /// Jobs done, by id, in order.
    pub done: Vec<(u64, JobOutcome)>,
    /// The job that failed, with why.
    pub failed: Option<(u64, StorageError)>,
    /// How many fsyncs the writer made for these jobs (group commit: one for many writes).
    pub syncs: u64,
}

/// Runs `jobs` in order with `writer`: consecutive writes go to the writer together, so that
/// one sync covers them all (a group commit). Stops at the first failure.
pub fn run_store_jobs<W: DurableWriter>(
    writer: &mut W,
    jobs: Vec<StoreJob<W::Staged>>,
) -> StoreReport {
    let mut report = StoreReport::default();
    let mut writes: Vec<(u64, W::Staged)> = Vec::new();
    let mut jobs = jobs.into_iter().peekable();
    while let Some(job) = jobs.next() {
        match job.work {
            StoreWork::Write(staged) => {
                writes.push((job.id, staged));
                let next_is_write = matches!(
                    jobs.peek(),
                    Some(StoreJob {
                        work: StoreWork::Write(_),
                        ..
                    })
                );
                if next_is_write {
                    continue;
                }
                let ids: Vec<u64> = writes.iter().map(|(id, _)| *id).collect();
                let batch = std::mem::take(&mut writes).into_iter().map(|(_, w)| w);
                if let Err(error) = writer.write(batch.collect()) {
                    report.failed = ids.first().map(|id| (*id, error));
                    return report;
                }
                report.syncs += 1;
                report
                    .done
                    .extend(ids.into_iter().map(|id| (id, JobOutcome::Done)));
            }
            StoreWork::Snapshot { meta, state } => {
                let data = match state.encode_snapshot() {
                    Ok(data) => data,
                    Err(e) => {
                        report
                            .done
                            .push((job.id, JobOutcome::SnapshotSkipped(e.to_string())));
                        continue;
                    }
                };
                if let Err(error) = writer.save_snapshot(&meta, &data) {
                    report.failed = Some((job.id, error));
                    return report;
                }
                report.syncs += 1;
                report
                    .done
                    .push((job.id, JobOutcome::SnapshotSaved { bytes: data.len() }));
            }
            StoreWork::Compact(compaction) => {
                if let Err(error) = writer.compact(&compaction) {
                    report.failed = Some((job.id, error));
                    return report;
                }
                report.done.push((job.id, JobOutcome::Done));
            }
        }
    }
    report
}
