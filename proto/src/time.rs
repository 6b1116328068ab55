//! The one representation of time: a [`Time`] is a reading of a clock, in microseconds since
//! that clock's epoch, and spans are [`std::time::Duration`]s.
//!
//! Every sans-IO core takes the time as an argument ([`Now`]) and never reads a clock itself
//! (DESIGN.md, principle 1): the shells pass readings of the machine's clocks
//! ([`SystemClock`]), the simulators readings of a virtual clock that they advance themselves.
//! Two clocks are read: a monotonic one, the only one timeouts are measured with, and the wall
//! clock, which stamps what operators read (commands' `at_ms`, status updates' timestamps) and
//! may jump.
//!
//! # Scheduling seconds
//!
//! The scheduling math (the allocator of `fullerene-scheduling`, the SDK's policies and planner,
//! and the simulator, whose virtual clock is this very value) computes in `f64` seconds, not in
//! [`Time`]: a task slowed down by interference progresses by fractions of a microsecond, and
//! rounding its progress to whole microseconds would change the simulator's figures. The two
//! worlds meet only through one pair of conversions, [`Time::as_secs_f64`] and
//! [`Time::from_secs_f64`] (spans through [`secs_f64`]), so that every caller hands the
//! allocator the same seconds for the same reading. They divide whole
//! microseconds by 10⁶ in one rounding, which gives for a whole number of milliseconds exactly
//! `ms as f64 / 1000.0` (unlike [`Duration::as_secs_f64`], which adds the fraction separately).

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

    /// This reading in scheduling seconds (see the module's documentation): microseconds
    /// divided by 10⁶, exact up to 2⁵³ µs (about 285 years).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / MICROS_PER_SECOND
    }

    /// The reading `secs` scheduling seconds after the epoch, to the nearest microsecond (the
    /// epoch for negative or NaN seconds, [`Time::MAX`] past it).
    pub fn from_secs_f64(secs: f64) -> Time {
        Time((secs * MICROS_PER_SECOND).round() as u64)
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

/// A span in whole milliseconds, saturating: what the wire's and the checkpoints' `_ms` fields
/// carry.
pub fn whole_millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

/// Microseconds in a second, as scheduling seconds count them.
const MICROS_PER_SECOND: f64 = 1_000_000.0;

/// A span in scheduling seconds: the same conversion as [`Time::as_secs_f64`] (whole
/// microseconds, one rounding), so that `now + span` means the same in both.
pub fn secs_f64(span: Duration) -> f64 {
    Time::from_elapsed(span).as_secs_f64()
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
    fn scheduling_seconds_divide_whole_milliseconds_exactly() {
        // The allocator's figures (and so the replicated allocation state) depend on these
        // seconds bit for bit: a whole number of milliseconds must give `ms / 1000` rounded once.
        for ms in [
            0_u64,
            1,
            7,
            999,
            1_100,
            1_234_567,
            1_763_900_000_123,
            4_000_000_000_000,
        ] {
            assert_eq!(
                Time::from_millis(ms).as_secs_f64(),
                ms as f64 / 1000.0,
                "{ms}"
            );
            assert_eq!(
                secs_f64(Duration::from_millis(ms)),
                ms as f64 / 1000.0,
                "{ms}"
            );
        }
        assert_eq!(Time::from_secs_f64(1.5), Time::from_millis(1_500));
        assert_eq!(Time::from_secs_f64(0.000_000_6), Time::from_micros(1));
        assert_eq!(Time::from_secs_f64(-3.0), Time::ZERO);
        assert_eq!(Time::from_secs_f64(f64::NAN), Time::ZERO);
        assert_eq!(Time::from_secs_f64(f64::INFINITY), Time::MAX);
        let t = Time::from_micros(1_763_900_000_123_457);
        assert_eq!(Time::from_secs_f64(t.as_secs_f64()), t);
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
