//! The rules of a session as the master's shell carries it, apart from the I/O: which first
//! frame opens a session, which calls a framework's session refuses before the core sees them,
//! and which pushed frame ends a session. The tokio shell (`crate::server`) and the
//! whole-system simulation (`fullerene_chaos::system`) both follow them, so the simulated
//! sessions behave as the real ones.

use super::Subscription;
use fullerene_proto::ids::FrameworkId;
use fullerene_proto::messages::{
    CallOk, ErrorCode, FrameworkCall, FrameworkRequest, MasterToAgent, MasterToFramework, WireError,
};

/// What an agent's session answers a first frame other than `Register` with (then it ends).
pub fn agent_must_register_first() -> MasterToAgent {
    MasterToAgent::Error(WireError::new(
        ErrorCode::InvalidRequest,
        "an agent session must start with Register",
    ))
}

/// The subscription a framework's first call opens its session with, `principal` being its
/// certificate's; or, for a first call other than `Subscribe`, the answer to send before the
/// session ends.
pub fn subscription(
    first: FrameworkCall,
    principal: String,
) -> Result<Subscription, Box<MasterToFramework>> {
    match first.call {
        FrameworkRequest::Subscribe {
            framework_id,
            name,
            group,
            failover_timeout_ms,
        } => Ok(Subscription {
            call_id: first.call_id,
            framework_id,
            name,
            group,
            failover_timeout_ms,
            principal,
        }),
        _ => Err(Box::new(MasterToFramework::CallResult {
            call_id: first.call_id,
            result: Err(WireError::new(
                ErrorCode::InvalidRequest,
                "a framework session must start with Subscribe",
            )),
        })),
    }
}

/// The answer a framework's session gives `call` itself, without passing it to the core: a
/// second `Subscribe`, or any call before the subscription is answered. `None`: pass it on.
pub fn refuse_framework_call(subscribed: bool, call: &FrameworkCall) -> Option<MasterToFramework> {
    let why = match (subscribed, &call.call) {
        (_, FrameworkRequest::Subscribe { .. }) => "already subscribed on this session",
        (false, _) => "the subscription is not answered yet",
        (true, _) => return None,
    };
    Some(MasterToFramework::CallResult {
        call_id: call.call_id,
        result: Err(WireError::new(ErrorCode::InvalidRequest, why)),
    })
}

/// Whether an agent's session ends once `message` is sent (a redirect, an error).
pub fn ends_agent_session(message: &MasterToAgent) -> bool {
    matches!(
        message,
        MasterToAgent::Redirect(_) | MasterToAgent::Error(_)
    )
}

/// The framework a pushed frame subscribes the session as (the core's `Subscribed` answer).
pub fn subscribed_as(message: &MasterToFramework) -> Option<&FrameworkId> {
    match message {
        MasterToFramework::CallResult {
            result: Ok(CallOk::Subscribed { framework_id, .. }),
            ..
        } => Some(framework_id),
        _ => None,
    }
}

/// Whether a framework's session ends once `message` is sent: a redirect, or a refused
/// subscription (`subscribed` is whether the session was subscribed, this frame included).
pub fn ends_framework_session(subscribed: bool, message: &MasterToFramework) -> bool {
    matches!(message, MasterToFramework::Redirect(_))
        || (!subscribed
            && matches!(
                message,
                MasterToFramework::CallResult { result: Err(_), .. }
            ))
}
