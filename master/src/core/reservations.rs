//! Reservation calls (Rayon §5.2's `createRes`, `updateRes`, `deleteRes`), from operators and
//! frameworks alike: the RDL text is parsed and checked against the plan's limits here, before
//! anything is proposed, so a bad request costs no log entry and its error points at the
//! column. The plan decides admission when the command applies, on every master alike.

use fullerene_proto::messages::{ErrorCode, UnixMillis, WireError};
use fullerene_proto::reservations::{ReservationCall, MAX_RDL_BYTES};
use fullerene_reservation::{parse, validate, Expr, Limits};

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
