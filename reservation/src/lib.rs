//! Reservations for Fullerene, after Rayon (Curino et al., SoCC'14, `../shared/papers/rayon-
//! socc14.txt` §3–§5): production jobs reserve capacity ahead of their deadlines, and the
//! cluster commits to what it accepts.
//!
//! - [`rdl`]: the Reservation Definition Language (§3.1) as a typed tree ([`Expr`]), its text
//!   syntax ([`rdl::parse()`], errors at a line and column) and its validation against a plan's
//!   limits ([`rdl::validate()`]).
//! - the plan, the GREE and GREE-L placement policies, the sharing policy and the adapter
//!   follow.
//!
//! Everything here is plain computation: no clock (times are passed in, in wall-clock
//! milliseconds), no I/O, no threads. The master will keep the plan in its replicated state; the
//! SDK and the CLI parse and validate requests; the simulator plans with the same code.

pub mod rdl;
mod split;

pub use rdl::{parse, validate, Atom, Expr, Limits, ParseError, ValidationError};
