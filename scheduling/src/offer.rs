//! The two sides of an offer that the allocator and the framework policies both name: where the
//! offer comes from, and what becomes of the part of it a framework does not launch on.

use serde::{Deserialize, Serialize};

/// Whether an offer comes from the regular fair allocation or from yielded leftovers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum OfferKind {
    /// From the deficit-counter allocation.
    Regular,
    /// From resources another framework yielded (Carbyne §3.3.4).
    Leftover,
}

/// What to do with the part of an offer a policy does not launch tasks on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftoverAction {
    /// Return it to the allocator; the allocator may offer it again in its next cycle.
    Decline,
    /// Yield it for immediate redistribution to others (Carbyne §3.3.4).
    Yield,
}
