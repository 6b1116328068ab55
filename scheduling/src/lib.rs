//! Fullerene's scheduling core: what the allocator, the framework policies and the simulator
//! share, with no I/O and no dependency heavier than serde.
//!
//! - [`resources`]: the multi-resource amounts every other crate computes with, dense
//!   ([`ResourceVec`]) and as they travel on the wire ([`Resources`]).
//! - [`fit`]: the one fit rule ([`fits`]) and the overbooking allowance ([`Overbooking`],
//!   Graphene §5) that every admission decision uses: agent, master, allocator, policies and
//!   simulator.
//! - [`scoring`]: Graphene's packing and overbooking scores and perfScore (tech report Fig. 8),
//!   shared by the allocator, which ranks frameworks, and the matcher, which ranks tasks.
//! - [`fairness`]: the deficit counters (Graphene §5).
//! - [`allocator`]: which framework is offered which agent's free resources, as a sans-IO core
//!   over a replicated [`allocator::AllocationState`], and [`allocator::StandaloneAllocator`]
//!   for where no replicated state exists (the simulator, benchmarks, tests).
//! - [`ids`], [`demand`] and [`offer`]: the identifiers, demand summaries and offer kinds the
//!   allocator takes and the wire carries (`fullerene_proto` re-exports them).

#![warn(missing_docs)]

pub mod allocator;
pub mod demand;
pub mod fairness;
pub mod fit;
pub mod ids;
pub mod offer;
pub mod resources;
pub mod scoring;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use demand::{DemandSummary, PendingDemand, ReservationProgress, MAX_PROGRESS_ATOMS};
pub use fit::{fits, AllowanceError, Overbooking, DEFAULT_OVERBOOK_ALLOWANCE};
pub use ids::{AgentId, FrameworkId, MasterId, OfferId, TaskId, TaskKey};
pub use offer::{LeftoverAction, OfferKind};
pub use resources::{ResourceError, ResourceKind, ResourceVec, Resources, EPSILON, NUM_RESOURCES};
