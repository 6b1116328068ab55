//! Reservations for Fullerene, after Rayon (Curino et al., SoCC'14, `../shared/papers/rayon-
//! socc14.txt` §3–§5): production jobs reserve capacity ahead of their deadlines, and the
//! cluster commits to what it accepts.
//!
//! - [`rdl`]: the Reservation Definition Language (§3.1) as a typed tree ([`Expr`]), its text
//!   syntax ([`rdl::parse()`], errors at a line and column) and its validation against a plan's
//!   limits ([`rdl::validate()`]).
//! - [`plan`]: the plan (§4, §5.2): capacity over future time as a run-length-encoded step
//!   function ([`steps::StepFunction`]) in time quanta, every accepted reservation's pieces,
//!   all-or-nothing admission, update and deletion (the four calls of §5.2), and capacity
//!   changes.
//! - [`placement`]: the greedy policies GREE and GREE-L (§4.2, Algorithm 1), chosen per plan by
//!   [`PolicyKind`]. The MILP of §4.1 is not implemented (see the module).
//! - [`sharing`]: the sharing policy (§5.2), instantaneous and integral caps per user.
//! - [`adapter`]: re-planning after a loss of capacity (§5.2's adapter), greedy.
//! - [`units`]: what a task counts for in the plan (its demand packed on a machine).
//! - [`follower`]: the plan follower (§5.2), the plan's current slice as what the allocator
//!   offers each reservation's jobs first, lends to best-effort work, and preempts.
//!
//! ```
//! use fullerene_reservation::{parse, Piece, Plan, PlanConfig, PolicyKind};
//! use fullerene_reservation::{ReservationId, ReservationRequest};
//!
//! // 64 cpus from the plan's origin (wall-clock 0 here), one-minute quanta, GREE.
//! let capacity = "cpus=64,mem_mib=262144".parse()?;
//! let mut plan = Plan::new(PlanConfig::new(0, PolicyKind::Gree), capacity);
//! // Five bundle-hours of 1-cpu bundles, at most 10 at once, within the next six hours.
//! let expr = parse("window(atom(cpus=1,mem_mib=2048; g=1, h=10, l=1m, w=5h), s=0, f=6h)")?;
//! let request = ReservationRequest { id: ReservationId(1), user: "etl".into(), expr };
//! let accepted = plan.admit(request, 0)?;
//! // GREE put it as late as it goes: 10 bundles over the last 30 minutes.
//! let last_half_hour = Piece { start: 330, end: 360, bundles: 10 };
//! assert_eq!(accepted.allocations[0].pieces, vec![last_half_hour]);
//! assert_eq!(plan.guaranteed_at(ReservationId(1), 359 * 60_000).to_string(), "cpus=10,mem_mib=20480");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Everything here is plain computation: no clock (times are passed in, in wall-clock
//! milliseconds), no I/O, no threads. The master keeps a [`Plan`] in its replicated state; the
//! SDK and the CLI parse and validate requests; the simulator plans with the same code.

pub mod adapter;
pub mod follower;
pub mod placement;
pub mod plan;
pub mod rdl;
pub mod sharing;
mod split;
pub mod steps;
pub mod units;

pub use follower::{
    AgentRoom, Candidates, FollowerDecision, PlanFollower, PreemptibleTask, ReservationShare,
    TaggedJob,
};
pub use placement::PolicyKind;
pub use plan::{
    AtomAllocation, AtomRef, CapacityChange, Delivered, Piece, Plan, PlanConfig, Quanta, Refusal,
    Replanned, RequantizeError, Reservation, ReservationId, ReservationRequest, Shortfall,
    MIN_QUANTUM_MS,
};
pub use rdl::{parse, validate, Atom, Expr, Limits, ParseError, ValidationError};
pub use sharing::{SharingPolicy, SharingRefusal, UserCaps};
pub use units::packed_bundle;
