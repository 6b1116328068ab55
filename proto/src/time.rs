//! The one representation of time: a [`Time`] is a reading of a clock, in microseconds since
//! that clock's epoch, and spans are [`std::time::Duration`]s.
//!
//! Every sans-IO core takes the time as an argument ([`Now`]) and never reads a clock itself
//! (DESIGN.md, principle 1): the shells pass readings of the machine's clocks
//! ([`SystemClock`]), the simulators readings of a virtual clock that they advance themselves.
//! Two clocks are read: a monotonic one, the only one timeouts are measured with, and the wall
//! clock, which stamps what operators read (commands' `at_ms`, status updates' timestamps) and
//! may jump.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A reading of a clock: microseconds since the clock's epoch (process start for the
/// monotonic clock, the Unix epoch for the wall clock, zero for a simulation's virtual clock).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Time(u64);

impl Time {
    /// The clock's epoch.
    pub const ZERO: Time = Time(0);
    /// The latest representable time (about 584,000 years after the epoch).
    pub const MAX: Time = Time(u64::MAX);

    /// The time `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Time {
        Time(micros)
    }

    /// The time `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000))
    }

    /// The time `elapsed` after the epoch (saturating).
    pub fn from_elapsed(elapsed: Duration) -> Time {
        Time(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
    }

    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Whole milliseconds since the epoch (what wire timestamps carry, see
    /// [`UnixMillis`](crate::messages::UnixMillis)).
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000
    }

    /// The span since the epoch.
    pub const fn elapsed(self) -> Duration {
        Duration::from_micros(self.0)
    }

    /// How long after `earlier` this is; zero when `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// `self + span`, or `None` past [`Time::MAX`].
    pub fn checked_add(self, span: Duration) -> Option<Time> {
        let micros = u64::try_from(span.as_micros()).ok()?;
        self.0.checked_add(micros).map(Time)
    }

    /// `self + span`, stopping at [`Time::MAX`].
    pub fn saturating_add(self, span: Duration) -> Time {
        self.checked_add(span).unwrap_or(Time::MAX)
    }
}

impl Add<Duration> for Time {
    type Output = Time;

    /// Saturates at [`Time::MAX`]: a timeout far in the future never wraps into the past.
    fn add(self, span: Duration) -> Time {
        self.saturating_add(span)
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, span: Duration) {
        *self = *self + span;
    }
}

impl Sub<Time> for Time {
    type Output = Duration;

    /// The span between two readings, zero when `earlier` is later (a clock read on another
    /// step cannot make a duration negative).
    fn sub(self, earlier: Time) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// Both clocks, read at one step of a core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// The monotonic clock: timeouts, liveness, expiries inside one process.
    pub monotonic: Time,
    /// The wall clock: stamps that other processes and operators read.
    pub wall: Time,
}

impl Now {
    /// Both clocks at `time` (a virtual clock whose wall time is its monotonic time).
    pub const fn at(time: Time) -> Now {
        Now {
            monotonic: time,
            wall: time,
        }
    }

    /// The wall clock in whole milliseconds since the Unix epoch (the wire's stamps).
    pub const fn wall_ms(self) -> u64 {
        self.wall.as_millis()
    }

    /// Both clocks `span` later.
    pub fn after(self, span: Duration) -> Now {
        Now {
            monotonic: self.monotonic + span,
            wall: self.wall + span,
        }
    }
}

/// The machine's clocks, for shells: the monotonic clock counts from this value's creation.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    start: std::time::Instant,
}

impl SystemClock {
    /// A clock whose monotonic epoch is now.
    pub fn new() -> SystemClock {
        SystemClock {
            start: std::time::Instant::now(),
        }
    }

    /// Reads both clocks.
    pub fn now(&self) -> Now {
        Now {
            monotonic: self.monotonic(),
            wall: wall_clock(),
        }
    }

    /// Reads the monotonic clock.
    pub fn monotonic(&self) -> Time {
        Time::from_elapsed(self.start.elapsed())
    }

    /// The monotonic reading `instant` corresponds to (the epoch for instants before it).
    pub fn time_of(&self, instant: std::time::Instant) -> Time {
        Time::from_elapsed(instant.saturating_duration_since(self.start))
    }
}

impl Default for SystemClock {
    fn default() -> SystemClock {
        SystemClock::new()
    }
}

/// Reads the wall clock (the epoch itself if the machine's clock is set before 1970).
pub fn wall_clock() -> Time {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(Time::ZERO, Time::from_elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Time::from_millis(1_500);
        assert_eq!(t.as_micros(), 1_500_000);
        assert_eq!(t.as_millis(), 1_500);
        assert_eq!(t + Duration::from_millis(500), Time::from_millis(2_000));
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::from_millis(1) - Time::from_millis(2), Duration::ZERO);
        assert_eq!(
            Time::from_millis(3) - Time::from_millis(1),
            Duration::from_millis(2)
        );
        assert_eq!(Time::from_millis(u64::MAX), Time::MAX);
        assert_eq!(t.to_string(), "1.500000s");
    }

    #[test]
    fn the_system_clock_moves_forward() {
        let clock = SystemClock::new();
        let first = clock.now();
        let second = clock.now();
        assert!(second.monotonic >= first.monotonic);
        assert!(
            first.wall > Time::from_millis(1_600_000_000_000),
            "after 2020"
        );
    }
}
