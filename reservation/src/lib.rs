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
//!
//! Everything here is plain computation: no clock (times are passed in, in wall-clock
//! milliseconds), no I/O, no threads. The master keeps a [`Plan`] in its replicated state; the
//! SDK and the CLI parse and validate requests; the simulator plans with the same code.

pub mod adapter;
pub mod placement;
pub mod plan;
pub mod rdl;
pub mod sharing;
mod split;
pub mod steps;

pub use placement::PolicyKind;
pub use plan::{
    AtomAllocation, AtomRef, CapacityChange, Piece, Plan, PlanConfig, Quanta, Refusal, Replanned,
    Reservation, ReservationId, ReservationRequest, Shortfall,
};
pub use rdl::{parse, validate, Atom, Expr, Limits, ParseError, ValidationError};
pub use sharing::{SharingPolicy, SharingRefusal, UserCaps};
