//! Where the node loop leaves the cluster's events for their readers (the HTTP API's
//! `/events`, the QUIC operator session's `Events` request), without ever waiting on them.
//!
//! The node loop takes the events the Raft node derived in each step and adds them to an
//! [`EventRing`] behind a mutex, held only for that push; then it bumps a `watch` of the
//! newest number. Readers copy what they need out of the ring under the same mutex (at most
//! one page at a time) and wait on the `watch`, so a slow or stalled reader holds nothing the
//! node loop needs: the ring moves on without it, and when it comes back it finds its place
//! gone below the ring's floor and is told it lagged (see [`crate::state::events`]).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fullerene_proto::http::EventsDocument;
use fullerene_proto::MasterId;
use tokio::sync::watch;

use crate::state::events::{EventBatch, EventRing};

/// A master's ring of recent events, shared by the node loop and the readers.
#[derive(Debug)]
pub(crate) struct EventHub {
    master: MasterId,
    ring: Mutex<EventRing>,
    /// The newest event's number (or the floor), bumped after every push that changed it.
    newest: watch::Sender<u64>,
}

impl EventHub {
    /// A hub of at most `capacity` events for `master`, whose state has applied up to
    /// `applied`.
    pub(crate) fn new(master: u64, capacity: usize, applied: u64) -> EventHub {
        let ring = EventRing::new(capacity, applied);
        let newest = watch::channel(ring.last()).0;
        EventHub {
            master: MasterId(master),
            ring: Mutex::new(ring),
            newest,
        }
    }

    /// Adds what the node derived in one step (the node loop's side: never waits on readers).
    pub(crate) fn publish(&self, batch: EventBatch) {
        if batch.floor.is_none() && batch.events.is_empty() {
            return;
        }
        let last = {
            let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
            ring.push(batch);
            ring.last()
        };
        self.newest.send_if_modified(|newest| {
            let changed = *newest != last;
            *newest = last;
            changed
        });
    }

    /// The events after `since` (the latest when `None`), at most `limit`.
    pub(crate) fn read(&self, since: Option<u64>, limit: usize) -> EventsDocument {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .read(self.master, since, limit)
    }

    /// Waits until an event numbered above `since` exists (or the ring's floor moved past
    /// it), at most `patience`. `false` when none came.
    pub(crate) async fn wait_after(&self, since: u64, patience: Duration) -> bool {
        let mut newest = self.newest.subscribe();
        let arrived = async {
            loop {
                if *newest.borrow_and_update() > since {
                    return true;
                }
                if newest.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(patience, arrived)
            .await
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use fullerene_proto::http::{ClusterEvent, EventRecord};

    use super::*;

    fn batch(seq: u64) -> EventBatch {
        EventBatch {
            floor: None,
            events: vec![EventRecord {
                seq,
                index: 1,
                at_ms: None,
                event: ClusterEvent::MasterRemoved { master: 2 },
            }],
        }
    }

    #[tokio::test]
    async fn a_waiting_reader_wakes_for_a_newer_event_only() {
        let hub = std::sync::Arc::new(EventHub::new(1, 10, 0));
        hub.publish(batch(5));
        assert!(
            hub.wait_after(4, Duration::from_millis(1)).await,
            "already there"
        );
        assert!(!hub.wait_after(5, Duration::from_millis(20)).await);
        let waiter = {
            let hub = std::sync::Arc::clone(&hub);
            tokio::spawn(async move { hub.wait_after(5, Duration::from_secs(20)).await })
        };
        tokio::task::yield_now().await;
        hub.publish(batch(9));
        assert!(waiter.await.expect("the waiter"));
        let read = hub.read(Some(5), 10);
        assert_eq!(read.events.len(), 1);
        assert_eq!(read.events[0].seq, 9);
        assert_eq!(read.master, MasterId(1));
    }
}
