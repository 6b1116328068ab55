//! When jobs arrive: all at once, as a seeded Poisson process, or at the trace's own times.
//!
//! Graphene §7.1 and Decima's evaluation replay TPC-H jobs with Poisson arrivals (a mean gap of
//! 25 s); Carbyne §5.1's offline case submits everything at time zero. Both are reproduced here,
//! plus the workload's own `arrival_s` when it has them.

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How jobs arrive. Parsed from `zero`, `poisson:MEAN_GAP_S` or `trace` (`--arrivals`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArrivalSpec {
    /// Every job arrives at time 0 (the offline case).
    Zero,
    /// A Poisson process: gaps between consecutive arrivals are exponential with this mean, in
    /// seconds. The first job arrives at time 0, so that every run starts with work and the
    /// makespan is not padded by an idle first gap.
    Poisson {
        /// Mean gap between consecutive arrivals, seconds (> 0).
        mean_gap_s: f64,
    },
    /// Each job arrives at its workload line's `arrival_s`; a job without one is an error.
    Trace,
}

/// Why an arrival spec could not be parsed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ArrivalSpecError {
    /// Neither `zero`, `trace` nor `poisson:...`.
    #[error("unknown arrival spec `{0}`: expected `zero`, `trace` or `poisson:MEAN_GAP_S`")]
    Unknown(String),
    /// `poisson:` with a mean gap that is not a finite positive number.
    #[error(
        "bad Poisson mean gap `{0}`: expected a finite number of seconds > 0, e.g. poisson:25"
    )]
    BadMeanGap(String),
}

impl FromStr for ArrivalSpec {
    type Err = ArrivalSpecError;

    fn from_str(s: &str) -> Result<ArrivalSpec, ArrivalSpecError> {
        let s = s.trim();
        match s {
            "zero" => return Ok(ArrivalSpec::Zero),
            "trace" => return Ok(ArrivalSpec::Trace),
            _ => {}
        }
        let Some(gap) = s.strip_prefix("poisson:") else {
            return Err(ArrivalSpecError::Unknown(s.to_string()));
        };
        match gap.trim().parse::<f64>() {
            Ok(mean_gap_s) if mean_gap_s.is_finite() && mean_gap_s > 0.0 => {
                Ok(ArrivalSpec::Poisson { mean_gap_s })
            }
            _ => Err(ArrivalSpecError::BadMeanGap(gap.to_string())),
        }
    }
}

impl fmt::Display for ArrivalSpec {
    /// The same syntax [`FromStr`] accepts, so a report can echo the flag.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrivalSpec::Zero => f.write_str("zero"),
            ArrivalSpec::Trace => f.write_str("trace"),
            ArrivalSpec::Poisson { mean_gap_s } => write!(f, "poisson:{mean_gap_s}"),
        }
    }
}

/// Arrival times of a Poisson process with mean gap `mean_gap_s`, for `count` jobs: the first
/// at 0, then cumulative exponential gaps drawn by inversion (`-mean · ln(1 − u)`) from a ChaCha
/// generator seeded with `seed`, so a seed gives the same arrivals on every platform.
pub fn poisson_arrivals(count: usize, mean_gap_s: f64, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut times = Vec::with_capacity(count);
    let mut t = 0.0;
    for i in 0..count {
        if i > 0 {
            let u: f64 = rng.gen();
            t += -mean_gap_s * (1.0 - u).ln();
        }
        times.push(t);
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_displays_every_form() {
        assert_eq!("zero".parse::<ArrivalSpec>(), Ok(ArrivalSpec::Zero));
        assert_eq!("trace".parse::<ArrivalSpec>(), Ok(ArrivalSpec::Trace));
        assert_eq!(
            "poisson:25".parse::<ArrivalSpec>(),
            Ok(ArrivalSpec::Poisson { mean_gap_s: 25.0 })
        );
        for spec in ["zero", "trace", "poisson:2.5"] {
            assert_eq!(spec.parse::<ArrivalSpec>().unwrap().to_string(), spec);
        }
        assert!(matches!(
            "poisson:-1".parse::<ArrivalSpec>(),
            Err(ArrivalSpecError::BadMeanGap(_))
        ));
        assert!(matches!(
            "poisson:x".parse::<ArrivalSpec>(),
            Err(ArrivalSpecError::BadMeanGap(_))
        ));
        assert!(matches!(
            "uniform".parse::<ArrivalSpec>(),
            Err(ArrivalSpecError::Unknown(_))
        ));
    }

    #[test]
    fn poisson_arrivals_are_seeded_increasing_and_have_the_right_mean() {
        let a = poisson_arrivals(20_000, 25.0, 7);
        assert_eq!(a, poisson_arrivals(20_000, 25.0, 7));
        assert_ne!(a, poisson_arrivals(20_000, 25.0, 8));
        assert_eq!(a[0], 0.0);
        assert!(a.windows(2).all(|w| w[1] >= w[0]));
        let mean_gap = a[a.len() - 1] / (a.len() - 1) as f64;
        assert!((mean_gap - 25.0).abs() < 1.0, "mean gap {mean_gap}");
    }
}
