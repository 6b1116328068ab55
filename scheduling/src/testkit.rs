//! Builders for tests and benchmarks; not for production use.
//!
//! One copy of each resource builder the workspace's tests share, so that a test reads as the
//! amounts it means (`res("cpus=2,mem_mib=512")`) and a change of the text syntax is made once.
//! Enabled by this crate's `testkit` feature (and in its own unit tests).

use crate::demand::{DemandSummary, PendingDemand};
use crate::resources::{ResourceKind, ResourceVec, Resources};

/// The reference machine of the TPC-H experiments (Graphene §6): 16 cpus, 64 GiB of memory,
/// 1,000 MB/s of disk and 10,000 Mbit/s of network.
pub const REFERENCE_MACHINE: &str = "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000";

/// A resource vector from `kind=amount` text, as in `--machine-resources` (panics on invalid text: a
/// test's input is a constant).
///
/// # Panics
///
/// When `text` does not parse.
#[must_use]
pub fn res(text: &str) -> ResourceVec {
    text.parse().expect("test resource vector parses")
}

/// Wire resources from `kind=amount` text (see [`res`]).
///
/// # Panics
///
/// When `text` does not parse.
#[must_use]
pub fn resources(text: &str) -> Resources {
    Resources::from(res(text))
}

/// A resource vector of `n` cpus and nothing else.
#[must_use]
pub fn cpus(n: f64) -> ResourceVec {
    ResourceVec::from_pairs(&[(ResourceKind::Cpus, n)])
}

/// The [`REFERENCE_MACHINE`]'s capacity.
#[must_use]
pub fn machine() -> ResourceVec {
    res(REFERENCE_MACHINE)
}

/// A demand summary of `(shape, count, priScore)` entries, shapes in `kind=amount` text.
///
/// # Panics
///
/// When a shape does not parse.
#[must_use]
pub fn summary(shapes: &[(&str, u32, f64)], remaining_work: f64) -> DemandSummary {
    DemandSummary {
        pending: shapes
            .iter()
            .map(|(shape, count, pri)| PendingDemand {
                resources: resources(shape),
                count: *count,
                pri_score: *pri,
            })
            .collect(),
        remaining_work,
        srpt: remaining_work,
        reservation_progress: None,
    }
}

/// A demand summary of `count` tasks of one shape, priScore 1 and one unit of remaining work
/// per task: what a framework with a single kind of task reports.
#[must_use]
pub fn demand(shape: &Resources, count: u32) -> DemandSummary {
    DemandSummary {
        pending: vec![PendingDemand {
            resources: shape.clone(),
            count,
            pri_score: 1.0,
        }],
        remaining_work: f64::from(count),
        srpt: f64::from(count),
        reservation_progress: None,
    }
}
