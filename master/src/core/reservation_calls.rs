//! Reservation calls (Rayon §5.2's `createRes`, `updateRes`, `deleteRes`), from operators and
//! frameworks alike: the RDL text is parsed and checked against the plan's limits here, before
//! anything is proposed, so a bad request costs no log entry and its error points at the
//! column. The plan decides admission when the command applies, on every master alike.

use fullerene_proto::messages::{ErrorCode, UnixMillis, WireError};
use fullerene_proto::reservations::{
    ReservationCall, ReservationCaps, ReservationPolicy, MAX_RDL_BYTES,
};
use fullerene_reservation::{
    parse, validate, Expr, Limits, PlanConfig, PolicyKind, SharingPolicy, UserCaps,
};

use crate::state::{Command, Requester};

/// The command that carries out `call` for `by` at the leader's time `at_ms`, or why the call is
/// malformed: RDL text over [`MAX_RDL_BYTES`], a syntax error (line, column and a caret under
/// it), or a request that breaks the plan's `limits`.
pub(super) fn reservation_command(
    call: ReservationCall,
    by: Requester,
    limits: &Limits,
    at_ms: UnixMillis,
) -> Result<Command, WireError> {
    Ok(match call {
        ReservationCall::Create { name, rdl } => Command::CreateReservation {
            expr: checked_rdl(&name, &rdl, limits)?,
            name,
            principal: by.name().to_string(),
            at_ms,
        },
        ReservationCall::Update { name, rdl } => Command::UpdateReservation {
            expr: checked_rdl(&name, &rdl, limits)?,
            name,
            by,
            at_ms,
        },
        ReservationCall::Delete { name } => Command::DeleteReservation { name, by, at_ms },
    })
}

/// `rdl` parsed and validated against `limits`.
fn checked_rdl(name: &str, rdl: &str, limits: &Limits) -> Result<Expr, WireError> {
    let refuse = |message: String| WireError::new(ErrorCode::InvalidRequest, message);
    if rdl.len() > MAX_RDL_BYTES {
        return Err(refuse(format!(
            "reservation `{name}`: the request is {} bytes of RDL, more than {MAX_RDL_BYTES}",
            rdl.len()
        )));
    }
    let expr = parse(rdl).map_err(|error| refuse(format!("reservation `{name}`: {error}")))?;
    validate(&expr, limits)
        .map_err(|error| refuse(format!("reservation `{name}` is invalid: {error}")))?;
    Ok(expr)
}

/// The command that sets `policy`, or why its placement policy is unknown (the caps' ranges are
/// checked when it applies, on every master alike).
pub(super) fn policy_command(policy: ReservationPolicy) -> Result<Command, WireError> {
    let placement = PolicyKind::from_name(&policy.placement).ok_or_else(|| {
        WireError::new(
            ErrorCode::InvalidRequest,
            format!(
                "unknown placement policy `{}`: `gree` or `gree-l`",
                policy.placement
            ),
        )
    })?;
    let caps = |caps: ReservationCaps| UserCaps {
        instantaneous: caps.instantaneous,
        integral: caps.integral,
        window_ms: caps.window_ms,
    };
    Ok(Command::SetReservationPolicy {
        placement,
        sharing: SharingPolicy {
            default_caps: caps(policy.default_caps),
            users: policy
                .principals
                .into_iter()
                .map(|(principal, principal_caps)| (principal, caps(principal_caps)))
                .collect(),
        },
        quantum_ms: policy.quantum_ms,
    })
}

/// The plan's placement policy, caps and quantum as clients read them.
pub(super) fn policy_view(config: &PlanConfig) -> ReservationPolicy {
    let caps = |caps: &UserCaps| ReservationCaps {
        instantaneous: caps.instantaneous,
        integral: caps.integral,
        window_ms: caps.window_ms,
    };
    ReservationPolicy {
        placement: config.policy.name().to_string(),
        default_caps: caps(&config.sharing.default_caps),
        principals: config
            .sharing
            .users
            .iter()
            .map(|(principal, principal_caps)| (principal.clone(), caps(principal_caps)))
            .collect(),
        quantum_ms: config.limits.quantum_ms,
    }
}
