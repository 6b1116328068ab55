//! The store's writer on a thread of its own: the Raft node hands it the durable work of each
//! step ([`StoreJob`]s, under [`Persistence::Offloaded`](crate::raft_node::Persistence)), it
//! runs them in order with [`run_store_jobs`] and reports back to the node loop, which never
//! waits for an fsync itself: ticks, heartbeats, the leader's appends and client answers go on
//! while the disk syncs. Jobs that queue up while a sync runs are written together and synced
//! once (a group commit), so the slower the disk, the larger the batches.

use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::raft_node::{run_store_jobs, StoreJob, StoreReport};
use crate::storage::DurableWriter;

/// The writer thread and the queue to it. Dropping it lets the thread finish what is queued
/// (so a clean shutdown loses nothing staged) and waits for it.
pub(crate) struct StoreWriterThread<T: Send + 'static> {
    jobs: Option<std_mpsc::Sender<Vec<StoreJob<T>>>>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> StoreWriterThread<T> {
    /// Starts the writer of master `id`; reports go to `reports`.
    pub(crate) fn spawn<W>(
        id: u64,
        mut writer: W,
        reports: mpsc::UnboundedSender<StoreReport>,
    ) -> std::io::Result<StoreWriterThread<T>>
    where
        W: DurableWriter<Staged = T>,
    {
        let (jobs_tx, jobs_rx) = std_mpsc::channel::<Vec<StoreJob<T>>>();
        let node = id.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("store-writer-{id}"))
            .spawn(move || {
                let seconds = metrics::histogram!("fullerene_raft_store_write_seconds", "node" => node.clone());
                let group = metrics::histogram!("fullerene_raft_store_jobs_per_write", "node" => node.clone());
                let syncs = metrics::counter!("fullerene_raft_store_writes_total", "node" => node);
                while let Ok(mut jobs) = jobs_rx.recv() {
                    // Everything queued meanwhile goes in the same write (group commit).
                    while let Ok(more) = jobs_rx.try_recv() {
                        jobs.extend(more);
                    }
                    group.record(jobs.len() as f64);
                    let started = Instant::now();
                    let report = run_store_jobs(&mut writer, jobs);
                    seconds.record(started.elapsed().as_secs_f64());
                    syncs.increment(report.syncs);
                    let failed = report.failed.is_some();
                    if reports.send(report).is_err() || failed {
                        // The node loop is gone, or the disk failed: the node halts and
                        // nothing after the failure may be written.
                        break;
                    }
                }
            })?;
        Ok(StoreWriterThread {
            jobs: Some(jobs_tx),
            thread: Some(thread),
        })
    }

    /// Queues `jobs` (in order after everything queued before). False once the thread has
    /// stopped (after a failure it reported).
    pub(crate) fn submit(&self, jobs: Vec<StoreJob<T>>) -> bool {
        match &self.jobs {
            Some(queue) => queue.send(jobs).is_ok(),
            None => false,
        }
    }
}

impl<T: Send + 'static> Drop for StoreWriterThread<T> {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}
