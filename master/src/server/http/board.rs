//! The leader's published view of the cluster, which the HTTP API's reads are served from, so
//! that no HTTP client costs the node loop more than one bounded build per interval.
//!
//! # How a view is built and read
//!
//! A reader ([`StateBoard::fresh_view`]) takes the published view if it is fresh enough;
//! otherwise it raises the board's `wanted` flag and waits for the next one. The node loop
//! ([`ViewPublisher::after_step`], once per wake-up) builds a view only when the flag is up and
//! at least one interval has passed since its last build, lowers the flag and publishes the
//! view through a `watch` channel to every waiting reader at once. So:
//!
//! - an idle API costs nothing: no reader, no flag, no build;
//! - a flood of readers costs at most one build per interval, however many there are;
//! - a build is bounded: at most `max_tasks` tasks are copied
//!   ([`MasterCore::bounded_view`](crate::core::MasterCore::bounded_view)), the rest counted.
//!
//! A view is built in one step of the node loop, so it is exact for the applied index it
//! carries (the chaos run's digests rely on that).
//!
//! # Staleness
//!
//! A read is answered with a view built no earlier than one interval before the request
//! arrived, and after every operator write answered before it arrived (through this API or the
//! QUIC operator session alike: the node loop counts the writes it answers, and a view records
//! the count it was built at). So a client reads its own writes, and otherwise sees the
//! leader's state at most one interval old, plus the time until the node loop's next wake-up
//! (a Raft tick) when it has to wait for a build. It is not a linearizable read: a leader cut
//! off from its quorum serves its last state until it steps down (check-quorum, within an
//! election timeout), and a reader waiting for a build waits at most the request timeout.
//! A follower publishes no view; the HTTP API redirects its readers to the leader.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::sync::watch;

use crate::core::{BoundedView, MasterCore};
use crate::storage::RaftStore;

/// What the node loop and the HTTP tasks share about the published view.
#[derive(Debug)]
pub(crate) struct StateBoard {
    /// Raised by a reader that found no fresh view; lowered by the node loop when it builds.
    wanted: AtomicBool,
    /// Operator writes the node loop has answered `Done` so far.
    writes: AtomicU64,
    /// The least time between two builds, and the most a view may be older than a request.
    interval: Duration,
    views: watch::Sender<Option<Arc<PublishedView>>>,
}

/// One build of the leader's view, with the documents served from it encoded once each, when
/// first asked for.
#[derive(Debug)]
pub(crate) struct PublishedView {
    /// The view.
    pub bounded: BoundedView,
    /// When it was built (monotonic).
    pub built: Instant,
    /// When it was built, in milliseconds since the Unix epoch.
    pub built_at_ms: u64,
    /// Its sequence number on this process (from 1).
    pub build: u64,
    /// The board's write count when it was built.
    writes: u64,
    /// The encoded documents, by [`Document`].
    encoded: [OnceLock<Bytes>; Document::COUNT],
}

/// The documents served whole from a view (a filtered task list is encoded per request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Document {
    State,
    Agents,
    Frameworks,
    Tasks,
    Groups,
    Cluster,
    Jobs,
    Reservations,
}

impl Document {
    const COUNT: usize = 8;

    fn index(self) -> usize {
        self as usize
    }
}

impl PublishedView {
    /// Whether it may answer a request that arrived at `arrived`, when `writes` operator writes
    /// had been answered: built at most `interval` before, and after those writes.
    fn serves(&self, arrived: Instant, interval: Duration, writes: u64) -> bool {
        self.writes >= writes && self.built + interval >= arrived
    }

    /// `document`, encoded by `encode` the first time it is asked for.
    pub(crate) fn encoded(
        &self,
        document: Document,
        encode: impl FnOnce(&PublishedView) -> Bytes,
    ) -> Bytes {
        self.encoded[document.index()]
            .get_or_init(|| encode(self))
            .clone()
    }
}

/// Why no view answered a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoView {
    /// None was published within the reader's patience (this master may have stopped leading,
    /// or its node loop is stuck).
    #[error(
        "the leader published no view of the state in time (it may have stopped leading); retry"
    )]
    TimedOut,
    /// The node loop has stopped.
    #[error("the master is shutting down")]
    Closed,
}

impl StateBoard {
    /// A board whose views are built at most once per `interval` (at least a millisecond).
    pub(crate) fn new(interval: Duration) -> StateBoard {
        StateBoard {
            wanted: AtomicBool::new(false),
            writes: AtomicU64::new(0),
            interval: interval.max(Duration::from_millis(1)),
            views: watch::channel(None).0,
        }
    }

    /// Counts an operator write the node loop is about to answer `Done`: readers that arrive
    /// after the answer need a view built after it.
    pub(crate) fn note_write(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    /// A view fresh enough for a request arriving now (see the module's staleness rule),
    /// waiting up to `patience` for the node loop to build one.
    pub(crate) async fn fresh_view(
        &self,
        patience: Duration,
    ) -> Result<Arc<PublishedView>, NoView> {
        let arrived = Instant::now();
        let writes = self.writes.load(Ordering::SeqCst);
        let deadline = tokio::time::Instant::from_std(arrived + patience);
        let mut views = self.views.subscribe();
        loop {
            let current = views.borrow_and_update().clone();
            if let Some(view) = current {
                if view.serves(arrived, self.interval, writes) {
                    return Ok(view);
                }
            }
            // Raised after the look, and the wait below wakes for any view published since the
            // look: a build between the two is not missed.
            self.wanted.store(true, Ordering::SeqCst);
            match tokio::time::timeout_at(deadline, views.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(NoView::Closed),
                Err(_) => return Err(NoView::TimedOut),
            }
        }
    }
}

/// Whether a build may run at `now`: never more than once per `interval`.
fn build_due(last: Option<Instant>, now: Instant, interval: Duration) -> bool {
    last.is_none_or(|last| now.saturating_duration_since(last) >= interval)
}

/// The node loop's side of the board: builds and publishes views when asked.
#[derive(Debug)]
pub(crate) struct ViewPublisher {
    board: Arc<StateBoard>,
    max_tasks: usize,
    last_build: Option<Instant>,
    builds: u64,
}

impl ViewPublisher {
    /// Publishes on `board` views of at most `max_tasks` tasks.
    pub(crate) fn new(board: Arc<StateBoard>, max_tasks: usize) -> ViewPublisher {
        ViewPublisher {
            board,
            max_tasks,
            last_build: None,
            builds: 0,
        }
    }

    /// The board, for the node loop to count the writes it answers.
    pub(crate) fn board(&self) -> &StateBoard {
        &self.board
    }

    /// Called by the node loop after each step: withdraws the view when this master does not
    /// lead, and builds one when a reader wants it and the interval allows.
    pub(crate) fn after_step<S: RaftStore>(&mut self, core: &MasterCore<S>) {
        if !core.node().is_leader() {
            self.board
                .views
                .send_if_modified(|view| view.take().is_some());
            return;
        }
        if !self.board.wanted.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        if !build_due(self.last_build, now, self.board.interval) {
            return;
        }
        // Lowered before the build: a reader raising it again from now on is served by this
        // build or asks for the next.
        self.board.wanted.store(false, Ordering::SeqCst);
        let writes = self.board.writes.load(Ordering::SeqCst);
        let built_at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let Some(bounded) = core.bounded_view(self.max_tasks, built_at_ms) else {
            return;
        };
        self.last_build = Some(now);
        self.builds += 1;
        metrics::counter!("fullerene_http_view_builds_total").increment(1);
        let view = PublishedView {
            bounded,
            built: now,
            built_at_ms,
            build: self.builds,
            writes,
            encoded: Default::default(),
        };
        self.board.views.send_replace(Some(Arc::new(view)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_are_due_once_per_interval() {
        let start = Instant::now();
        let interval = Duration::from_millis(500);
        assert!(
            build_due(None, start, interval),
            "the first build is due at once"
        );
        assert!(!build_due(Some(start), start, interval));
        assert!(!build_due(
            Some(start),
            start + Duration::from_millis(499),
            interval
        ));
        assert!(build_due(Some(start), start + interval, interval));
        // A clock read before the last build (threads) is not due, not a panic.
        assert!(!build_due(Some(start + interval), start, interval));
    }

    fn view(built: Instant, writes: u64) -> PublishedView {
        use fullerene_proto::messages::{ClusterStatus, ClusterView};
        use fullerene_proto::MasterId;
        PublishedView {
            bounded: BoundedView {
                view: ClusterView {
                    leader: MasterId(1),
                    applied: 1,
                    agents: Vec::new(),
                    frameworks: Vec::new(),
                    offers: Vec::new(),
                    tasks: Vec::new(),
                    groups: Vec::new(),
                    reservations: Vec::new(),
                },
                term: 1,
                tasks_total: 0,
                tasks_omitted: 0,
                omitted_by_framework: Default::default(),
                cluster: ClusterStatus {
                    this: MasterId(1),
                    leader: None,
                    term: 1,
                    commit: 1,
                    applied: 1,
                    members: Vec::new(),
                },
                weights: Default::default(),
                finished: Vec::new(),
                finished_total: 0,
                finished_omitted_by_framework: Default::default(),
                rejected_reservations: Vec::new(),
                rejected_reservations_total: 0,
            },
            built,
            built_at_ms: 0,
            build: 1,
            writes,
            encoded: Default::default(),
        }
    }

    #[test]
    fn a_view_serves_requests_within_the_interval_and_after_the_writes_it_saw() {
        let built = Instant::now();
        let interval = Duration::from_millis(500);
        let view = view(built, 3);
        assert!(view.serves(built, interval, 3));
        assert!(view.serves(built + interval, interval, 0));
        assert!(
            !view.serves(built + interval + Duration::from_millis(1), interval, 3),
            "too old"
        );
        assert!(
            !view.serves(built, interval, 4),
            "a write answered after the build"
        );
        // A request that arrived before the build is served by it.
        let earlier = built.checked_sub(Duration::from_secs(1)).unwrap_or(built);
        assert!(view.serves(earlier, interval, 3));
    }

    #[tokio::test]
    async fn a_reader_raises_the_flag_and_is_served_by_the_next_view() {
        let board = Arc::new(StateBoard::new(Duration::from_secs(60)));
        assert!(!board.wanted.load(Ordering::SeqCst));
        let reader = {
            let board = Arc::clone(&board);
            tokio::spawn(async move { board.fresh_view(Duration::from_secs(20)).await })
        };
        while !board.wanted.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        board.wanted.store(false, Ordering::SeqCst);
        board
            .views
            .send_replace(Some(Arc::new(view(Instant::now(), 0))));
        let served = reader.await.expect("the reader").expect("a view");
        assert_eq!(served.build, 1);
        // A second reader within the interval takes the same view, raising nothing.
        let again = board
            .fresh_view(Duration::from_secs(1))
            .await
            .expect("the same view");
        assert!(Arc::ptr_eq(&served, &again));
        assert!(!board.wanted.load(Ordering::SeqCst));
        // After a write, it is not enough: the reader waits, and gives up after its patience.
        board.note_write();
        assert_eq!(
            board.fresh_view(Duration::from_millis(10)).await.err(),
            Some(NoView::TimedOut)
        );
        assert!(board.wanted.load(Ordering::SeqCst));
    }
}
