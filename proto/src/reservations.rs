//! Reservations on the wire (issue 17): Rayon's four calls (§5.2: `createRes`, `updateRes`,
//! `deleteRes`, `listRes`) as operators and frameworks make them, and the reservations as they
//! read them.
//!
//! A request travels as RDL text (`fullerene_reservation::rdl`'s syntax), not as a tree: the
//! masters parse and validate it against their own plan's limits (quantum, horizon, size), so a
//! client cannot send a tree deeper or larger than the parser admits, and the CLI shows the same
//! errors, with the same column, as the masters would.

use serde::{Deserialize, Serialize};

use crate::ResourceVec;

/// The longest reservation name: names are shown in tables and carried in every command.
pub const MAX_RESERVATION_NAME_BYTES: usize = 128;

/// The longest RDL text a request may carry. The plan's limits (256 nodes as written) keep real
/// requests to a few KiB; this bounds the text before it is parsed.
pub const MAX_RDL_BYTES: usize = 64 * 1024;

/// A write to the reservations, from an operator or a framework; the caller's principal (from
/// its certificate or token) owns what it creates, and only the owner may change it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum ReservationCall {
    /// Reserve capacity ahead (`createRes`): accepted only if the plan places it in full,
    /// refused with the reason (which atom, window and work could not fit).
    Create {
        /// Its name, unique among accepted reservations (letters, digits, `-`, `_`, `.`).
        name: String,
        /// The request, in RDL's text syntax.
        rdl: String,
    },
    /// Replace a reservation's request (`updateRes`): refused, the old one stays as it was.
    Update {
        /// The reservation.
        name: String,
        /// The new request, in RDL's text syntax.
        rdl: String,
    },
    /// Remove a reservation (`deleteRes`).
    Delete {
        /// The reservation.
        name: String,
    },
}

impl ReservationCall {
    /// The reservation it names.
    pub fn name(&self) -> &str {
        match self {
            ReservationCall::Create { name, .. }
            | ReservationCall::Update { name, .. }
            | ReservationCall::Delete { name } => name,
        }
    }

    /// The RDL text it carries, if any.
    pub fn rdl(&self) -> Option<&str> {
        match self {
            ReservationCall::Create { rdl, .. } | ReservationCall::Update { rdl, .. } => Some(rdl),
            ReservationCall::Delete { .. } => None,
        }
    }
}

/// Where a reservation is in its life, at the time of the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "snake_case")]
pub enum ReservationPhase {
    /// Accepted; its first allocation is still ahead.
    Planned,
    /// Between its first allocation's start and its last one's end: the plan guarantees it
    /// capacity now or later in that span.
    Active,
    /// Its last allocation has ended.
    Ended,
}

impl ReservationPhase {
    /// The phase's name in tables (`planned`, `active`, `ended`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationPhase::Planned => "planned",
            ReservationPhase::Active => "active",
            ReservationPhase::Ended => "ended",
        }
    }
}

/// What one reservation holds over a span of time: the sum of its atoms' bundles there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct AllocationStep {
    /// The span's start, milliseconds since the Unix epoch.
    pub start_ms: u64,
    /// The span's end (exclusive).
    pub end_ms: u64,
    /// What the plan guarantees the reservation over the span.
    pub resources: ResourceVec,
}

/// An accepted reservation as operators and frameworks read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ReservationInfo {
    /// Its name.
    pub name: String,
    /// The principal that created it.
    pub owner: String,
    /// Its request, in RDL's text syntax.
    pub rdl: String,
    /// When it was accepted (or last updated), milliseconds since the Unix epoch.
    pub admitted_at_ms: u64,
    /// The instant its request's windows count from (its submission).
    pub anchor_ms: u64,
    /// Its first allocation's start (none for a reservation of no work).
    pub start_ms: Option<u64>,
    /// Its last allocation's end.
    pub end_ms: Option<u64>,
    /// Where it is in its life when the view was taken.
    pub phase: ReservationPhase,
    /// What the plan guarantees it when the view was taken.
    pub guaranteed_now: ResourceVec,
    /// What the plan guarantees it over time, in time order; only in the answer to a read of
    /// one reservation (lists leave it empty, to stay small).
    #[serde(default)]
    pub allocation: Vec<AllocationStep>,
}

/// A reservation the masters removed from the plan after a loss of capacity (Rayon §5.2's
/// adapter), kept so that its owner can see why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct RejectedReservationInfo {
    /// Its name.
    pub name: String,
    /// The principal that created it.
    pub owner: String,
    /// Its request, in RDL's text syntax.
    pub rdl: String,
    /// Why it no longer fits.
    pub reason: String,
    /// When it was rejected, milliseconds since the Unix epoch.
    pub rejected_at_ms: u64,
}

/// How an accepted reservation ended, as its owner's frameworks are told
/// ([`crate::messages::MasterToFramework::ReservationEnded`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
// Externally tagged: the binary codec cannot read internally tagged enums.
#[serde(rename_all = "snake_case")]
pub enum ReservationVerdict {
    /// The adapter took it out of the plan after a loss of capacity (Rayon §5.2): what was
    /// promised no longer fits, and jobs running in it continue as best effort.
    Rejected {
        /// Which window or bundle no longer fits.
        reason: String,
    },
    /// Its time is over and every job tagged with it ended by its end.
    Fulfilled {
        /// The jobs that ran in it.
        jobs: u32,
    },
    /// Its time is over and some job tagged with it was still running at its end.
    Late {
        /// The jobs that ran in it.
        jobs: u32,
        /// Of those, the ones that ended after its end (or have not ended).
        late_jobs: u32,
    },
    /// Its time is over and no job ran in it.
    Unused,
}

impl ReservationVerdict {
    /// `rejected`, `fulfilled`, `late` or `unused`.
    pub fn name(&self) -> &'static str {
        match self {
            ReservationVerdict::Rejected { .. } => "rejected",
            ReservationVerdict::Fulfilled { .. } => "fulfilled",
            ReservationVerdict::Late { .. } => "late",
            ReservationVerdict::Unused => "unused",
        }
    }

    /// The jobs that ran in it (none known for a rejected one).
    pub fn jobs(&self) -> u32 {
        match self {
            ReservationVerdict::Fulfilled { jobs } | ReservationVerdict::Late { jobs, .. } => *jobs,
            ReservationVerdict::Rejected { .. } | ReservationVerdict::Unused => 0,
        }
    }

    /// The jobs that ran in it and ended after its end.
    pub fn late_jobs(&self) -> u32 {
        match self {
            ReservationVerdict::Late { late_jobs, .. } => *late_jobs,
            _ => 0,
        }
    }
}

/// An accepted reservation that ended: its name and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ReservationNotice {
    /// Its name (free again for a new reservation).
    pub name: String,
    /// How it ended.
    pub verdict: ReservationVerdict,
    /// When, milliseconds since the Unix epoch (the leader's clock).
    pub at_ms: u64,
}

/// One principal's caps in the sharing policy (Rayon §5.2): what its reservations may hold, as
/// fractions of the cluster's capacity, each resource kind on its own.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ReservationCaps {
    /// The largest fraction held at any instant, in (0, 1] (1: no cap).
    pub instantaneous: f64,
    /// The largest average fraction held over any window of `window_ms`, in (0, 1].
    pub integral: f64,
    /// The integral cap's sliding window, in milliseconds.
    pub window_ms: u64,
}

/// How the cluster plans reservations, set by an operator: the placement policy, the sharing
/// caps and the plan's quantum, for admissions from then on (what is accepted stays).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ReservationPolicy {
    /// The placement policy (Rayon §4.2): `gree` (as late as fits) or `gree-l` (as flat as
    /// fits, fewer preemptions).
    pub placement: String,
    /// The caps of principals without their own.
    pub default_caps: ReservationCaps,
    /// Caps by principal.
    pub principals: std::collections::BTreeMap<String, ReservationCaps>,
    /// The plan's time step in milliseconds (one minute by default): windows, leases and work
    /// are in whole quanta of it. It can change only while the plan holds no reservation.
    pub quantum_ms: u64,
}
