//! Which master to try next, and when: the sans-IO decisions of every client that follows the
//! leader (agents, framework drivers, operators).
//!
//! Any master may be contacted; followers redirect to the leader they know of. A [`Follower`]
//! turns what happened to the last attempt (it [joined](Follower::joined), [failed](Follower::failed),
//! was [redirected](Follower::redirected), was told to [wait](Follower::wait), or a joined
//! session was [lost](Follower::lost)) into the next [`Attempt`]: a master and a delay. It opens
//! no socket and reads no clock: the time is passed in (a reading of the caller's monotonic
//! clock, a [`Time`]) and the jitter comes from a generator seeded by the caller, so a test or a
//! simulation replays it exactly.
//!
//! The rules, in one place:
//!
//! - masters are tried in turn, from the top of the list at [`Follower::start`]; the leaders
//!   redirects name are added to the list;
//! - a redirect to a leader is followed at once, unless it names the master that sent it, a
//!   master passed over, or `redirects_at_once` redirects were already followed in a row since
//!   the last join (stale views of the leader can send a client round in circles): then it counts
//!   as a failed attempt;
//! - a master that failed (unreachable, no answer, session lost) may be passed over for
//!   `pass_over`: after a leader dies, followers go on redirecting to it until they notice,
//!   and following them would cost a connection timeout per redirect;
//! - the delays follow the [`Pacing`]: exponential backoff with jitter for long-lived sessions,
//!   a fixed pause per round of the list for requests that have a deadline.
//!
//! ```
//! use std::time::Duration;
//!
//! use fullerene_client::follow::{FollowConfig, Follower, Pacing};
//! use fullerene_proto::time::{whole_millis, Time};
//!
//! let masters = vec!["10.0.0.1:5050".parse().unwrap(), "10.0.0.2:5050".parse().unwrap()];
//! let config = FollowConfig {
//!     pacing: Pacing::Backoff {
//!         initial: Duration::from_millis(100),
//!         max: Duration::from_secs(5),
//!     },
//!     redirects_at_once: 3,
//!     pass_over: Duration::ZERO,
//!     seed: 7,
//! };
//! let mut follower = Follower::new(masters.clone(), config).unwrap();
//! let first = follower.start(Time::ZERO);
//! assert_eq!((first.addr, first.delay), (masters[0], Duration::ZERO));
//! // The first master is unreachable: the second, after 50 to 100 ms.
//! let next = follower.failed(Time::from_millis(10));
//! assert_eq!(next.addr, masters[1]);
//! assert!((Duration::from_millis(50)..=Duration::from_millis(100)).contains(&next.delay));
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::time::{whole_millis, Time};

/// How long clients that follow the leader pass over a master that failed: about two of the
/// masters' election timeouts, so that after a leader dies the followers' redirects to it
/// (they still name it until they notice) are not followed into its dead port, and the new
/// leader is found through them instead.
pub const DEFAULT_PASS_OVER: Duration = Duration::from_secs(1);

/// Where to try next, and after how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The master to connect to.
    pub addr: SocketAddr,
    /// How long to wait before connecting.
    pub delay: Duration,
}

/// How long a client waits between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// For sessions that last (agents, frameworks), retried for as long as it takes: each
    /// failed attempt since the last join doubles the delay, from `initial` up to `max`, and
    /// each delay is drawn uniformly, in whole milliseconds, from the upper half of its nominal
    /// value ("equal jitter"), so that clients that lost the same master do not all come back
    /// at once, yet never sooner than half the nominal delay.
    Backoff {
        /// The first delay.
        initial: Duration,
        /// The largest delay.
        max: Duration,
    },
    /// For requests that have a deadline (operators): the masters of a round of the list are
    /// tried without delay but for one pause of `pause` per round (before its last master,
    /// so that a lone master is not hammered), and a pause after a master answered that there
    /// is no leader or that it cannot answer yet (then it is tried again).
    Rounds {
        /// The pause.
        pause: Duration,
    },
}

/// How a [`Follower`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowConfig {
    /// The delays between attempts.
    pub pacing: Pacing,
    /// Redirects followed at once in a row (since the last join); the next one counts as a
    /// failed attempt.
    pub redirects_at_once: u32,
    /// How long a master that failed is passed over (zero: never). A master passed over is not
    /// chosen while another is not, and redirects to it are not followed.
    pub pass_over: Duration,
    /// The seed of the jitter.
    pub seed: u64,
}

/// The list of masters was empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no master address given")]
pub struct NoMasters;

/// The leader-following state machine (see the module documentation).
#[derive(Clone, Debug)]
pub struct Follower {
    masters: Vec<SocketAddr>,
    config: FollowConfig,
    /// Index into `masters` of the next master of the round.
    next: usize,
    /// Failed attempts since the last join: the exponent of the backoff.
    failures: u32,
    /// Redirects followed since the last join.
    redirects: u32,
    /// The master of the last attempt.
    current: Option<SocketAddr>,
    /// Masters passed over, and until when.
    passed_over: HashMap<SocketAddr, Time>,
    /// The state of the jitter's generator (splitmix64).
    rng: u64,
}

impl Follower {
    /// A follower over `masters` (any of them; redirects lead to the leader).
    pub fn new(masters: Vec<SocketAddr>, config: FollowConfig) -> Result<Follower, NoMasters> {
        if masters.is_empty() {
            return Err(NoMasters);
        }
        Ok(Follower {
            masters,
            rng: config.seed | 1,
            config,
            next: 0,
            failures: 0,
            redirects: 0,
            current: None,
            passed_over: HashMap::new(),
        })
    }

    /// The masters known: those given, then the leaders learned from redirects.
    pub fn masters(&self) -> &[SocketAddr] {
        &self.masters
    }

    /// The master of the last attempt.
    pub fn current(&self) -> Option<SocketAddr> {
        self.current
    }

    /// Failed attempts since the last join.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Changes the pacing (the rest of the state is kept).
    pub fn set_pacing(&mut self, pacing: Pacing) {
        self.config.pacing = pacing;
    }

    /// Whether `addr` is passed over at `now`.
    pub fn is_passed_over(&self, addr: SocketAddr, now: Time) -> bool {
        self.passed_over
            .get(&addr)
            .is_some_and(|&until| now < until)
    }

    /// Passes over `addr` for `span` from `now`, as if it had just failed (for a caller that
    /// knows a master is down).
    pub fn pass_over(&mut self, addr: SocketAddr, now: Time, span: Duration) {
        self.passed_over.insert(addr, now + span);
    }

    /// Starts a round from the top of the list: the first master not passed over. No delay
    /// with [`Pacing::Backoff`]; with [`Pacing::Rounds`], the round's pause if the list holds
    /// one master.
    pub fn start(&mut self, now: Time) -> Attempt {
        self.rewind();
        self.next_master(now, Duration::ZERO)
    }

    /// The next round starts from the top of the list (an operator's new request does).
    pub fn rewind(&mut self) {
        self.next = 0;
    }

    /// The attempt succeeded (registered, subscribed, answered): the backoff and the count of
    /// redirects start over, and the master is no longer passed over.
    pub fn joined(&mut self) {
        self.failures = 0;
        self.redirects = 0;
        if let Some(addr) = self.current {
            self.passed_over.remove(&addr);
        }
    }

    /// The attempt failed (unreachable, refused, no answer in time): pass the master over and
    /// try the next one of the round, after a backoff.
    pub fn failed(&mut self, now: Time) -> Attempt {
        if let Some(addr) = self.current {
            if !self.config.pass_over.is_zero() {
                self.pass_over(addr, now, self.config.pass_over);
            }
        }
        let delay = match self.config.pacing {
            Pacing::Backoff { .. } => self.backoff(),
            Pacing::Rounds { .. } => Duration::ZERO,
        };
        self.next_master(now, delay)
    }

    /// A joined session ended (closed, timed out, silent): like a failure, but the backoff
    /// starts over, since the session worked until now.
    pub fn lost(&mut self, now: Time) -> Attempt {
        self.failures = 0;
        self.failed(now)
    }

    /// The master answered that it cannot serve yet but may soon (unavailable): try it again
    /// after a pause.
    pub fn wait(&mut self) -> Attempt {
        let addr = self
            .current
            .unwrap_or_else(|| self.masters[self.next % self.masters.len()]);
        self.current = Some(addr);
        Attempt {
            addr,
            delay: self.pause(),
        }
    }

    /// The master redirected to `leader` (`None`: it knows of no leader yet, an election is
    /// running). A redirect followed goes to the leader at once; one that is not counts as an
    /// attempt that failed without the master being at fault: the next master of the round,
    /// after a pause.
    pub fn redirected(&mut self, leader: Option<SocketAddr>, now: Time) -> Attempt {
        match leader {
            Some(addr)
                if Some(addr) != self.current
                    && !self.is_passed_over(addr, now)
                    && self.redirects < self.config.redirects_at_once =>
            {
                self.redirects += 1;
                if !self.masters.contains(&addr) {
                    self.masters.push(addr);
                }
                self.current = Some(addr);
                Attempt {
                    addr,
                    delay: Duration::ZERO,
                }
            }
            _ => {
                self.redirects = 0;
                let delay = self.pause();
                self.next_master(now, delay)
            }
        }
    }

    /// The next master of the round not passed over (any, when all are), after `delay` and,
    /// with [`Pacing::Rounds`], the round's pause when this is its last master.
    fn next_master(&mut self, now: Time, delay: Duration) -> Attempt {
        let count = self.masters.len();
        let first = self.next % count;
        let chosen = (0..count)
            .map(|step| (first + step) % count)
            .find(|&i| !self.is_passed_over(self.masters[i], now))
            .unwrap_or(first);
        self.next = (chosen + 1) % count;
        let round_pause = match self.config.pacing {
            Pacing::Rounds { pause } if self.next == 0 => pause,
            _ => Duration::ZERO,
        };
        let addr = self.masters[chosen];
        self.current = Some(addr);
        Attempt {
            addr,
            delay: delay.saturating_add(round_pause),
        }
    }

    /// The delay before trying again after a master could not serve.
    fn pause(&mut self) -> Duration {
        match self.config.pacing {
            Pacing::Backoff { .. } => self.backoff(),
            Pacing::Rounds { pause } => pause,
        }
    }

    /// Counts a failure and draws its delay: nominally `initial · 2^(failures − 1)` capped at
    /// `max` (and at least 1 ms), drawn uniformly from `[nominal / 2, nominal]` in whole
    /// milliseconds (so that a seed gives the same delays whatever the spans' precision).
    fn backoff(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let Pacing::Backoff { initial, max } = self.config.pacing else {
            return Duration::ZERO;
        };
        let exponent = (self.failures - 1).min(20);
        let nominal = whole_millis(initial)
            .saturating_mul(1u64 << exponent)
            .min(whole_millis(max))
            .max(1);
        let half = nominal / 2;
        Duration::from_millis(half + self.next_random() % (nominal - half + 1))
    }

    /// splitmix64: small, and the same sequence for the same seed on every platform.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests;
