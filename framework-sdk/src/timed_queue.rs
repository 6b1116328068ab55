//! A deterministic queue of timed events: the earliest first, and of equal times the first
//! pushed. Carbyne's packing simulation (`policy::carbyne`) and the simulator's event loop
//! (`fullerene-sim`) both run on it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// An event taken from a [`TimedQueue`].
#[derive(Clone, Copy, Debug)]
pub struct Timed<K> {
    /// When it happens.
    pub time: f64,
    /// Its push order, unique within the queue (callers use it to recognise stale events).
    pub seq: u64,
    /// What happens.
    pub kind: K,
}

impl<K> PartialEq for Timed<K> {
    fn eq(&self, other: &Timed<K>) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K> Eq for Timed<K> {}

impl<K> PartialOrd for Timed<K> {
    fn partial_cmp(&self, other: &Timed<K>) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Timed<K> {
    /// Reversed, so that [`BinaryHeap`] pops the earliest event, and of equal times the first
    /// pushed.
    fn cmp(&self, other: &Timed<K>) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.seq.cmp(&self.seq))
    }
}

/// Events ordered by time, then by push order (so runs replay exactly).
#[derive(Clone, Debug)]
pub struct TimedQueue<K> {
    heap: BinaryHeap<Timed<K>>,
    seq: u64,
}

impl<K> Default for TimedQueue<K> {
    fn default() -> TimedQueue<K> {
        TimedQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<K> TimedQueue<K> {
    /// An empty queue.
    pub fn new() -> TimedQueue<K> {
        TimedQueue::default()
    }

    /// Queues `kind` at `time`; returns its sequence number (from 1).
    pub fn push(&mut self, time: f64, kind: K) -> u64 {
        self.seq += 1;
        self.heap.push(Timed {
            time,
            seq: self.seq,
            kind,
        });
        self.seq
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<Timed<K>> {
        self.heap.pop()
    }

    /// The earliest event, left queued.
    pub fn peek(&self) -> Option<&Timed<K>> {
        self.heap.peek()
    }

    /// The earliest event if it happens at exactly `time`.
    pub fn pop_at(&mut self, time: f64) -> Option<Timed<K>> {
        match self.heap.peek() {
            Some(event) if event.time == time => self.heap.pop(),
            _ => None,
        }
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_push_order() {
        let mut queue = TimedQueue::new();
        queue.push(2.0, "b");
        queue.push(1.0, "a");
        queue.push(2.0, "c");
        let order: Vec<&str> = std::iter::from_fn(|| queue.pop().map(|e| e.kind)).collect();
        assert_eq!(order, ["a", "b", "c"]);
        queue.push(3.0, "d");
        assert!(queue.pop_at(2.0).is_none());
        assert_eq!(queue.pop_at(3.0).map(|e| e.kind), Some("d"));
        assert!(queue.is_empty());
    }
}
