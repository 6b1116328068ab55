//! The rules of a session as the master's shell carries it, apart from the I/O: which first
//! frame opens a session, which calls a framework's session refuses before the core sees them,
//! and which pushed frame ends a session. The tokio shell (`crate::server`) and the
//! whole-system simulation (`fullerene_chaos::system`) both follow them, so the simulated
//! sessions behave as the real ones.

use std::collections::HashMap;
use std::time::Duration;

use super::Subscription;
use fullerene_proto::ids::FrameworkId;
use fullerene_proto::messages::{
    CallOk, ErrorCode, FrameworkCall, FrameworkRequest, MasterToAgent, MasterToFramework, WireError,
};
use fullerene_proto::Time;

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

/// How much one client may ask of a master, enforced where its connections are served (each
/// master's flags): calls per second per principal (a token bucket shared by all of the
/// principal's sessions, so more sessions buy no more calls) and connections per certificate.
/// Without them one client's flood of calls fills the node loop's queue, delays Raft traffic
/// behind it and costs elections (measured by `fullerene bench load`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientLimits {
    /// Calls (frameworks) or frames (agents) per second one principal may send, on average.
    pub calls_per_second: u32,
    /// How many it may send at once above the average (the bucket's size).
    pub call_burst: u32,
    /// Connections one framework's or agent's certificate may hold open at once. Operators'
    /// and masters' certificates are not limited (they are the cluster's own).
    pub connections_per_certificate: u32,
}

impl Default for ClientLimits {
    /// 1,000 calls per second with bursts of 2,000 per principal (a busy DAG framework
    /// acknowledges a few hundred updates per second), 16 connections per certificate (a
    /// framework or an agent needs one, and one more while it reconnects).
    fn default() -> ClientLimits {
        ClientLimits {
            calls_per_second: 1_000,
            call_burst: 2_000,
            connections_per_certificate: 16,
        }
    }
}

/// A token bucket: `rate` tokens per second up to `burst`, one per call.
#[derive(Clone, Debug, PartialEq)]
pub struct CallBudget {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Time,
}

impl CallBudget {
    /// A full bucket at `now`.
    pub fn new(limits: &ClientLimits, now: Time) -> CallBudget {
        let burst = f64::from(limits.call_burst.max(1));
        CallBudget {
            rate: f64::from(limits.calls_per_second.max(1)),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes `cost` tokens at `now` (a cost over the burst takes the whole burst); when too
    /// few are left, how long until enough are.
    pub fn take(&mut self, now: Time, cost: u32) -> Result<(), Duration> {
        if now > self.last {
            let elapsed = (now - self.last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
            self.last = now;
        }
        let cost = f64::from(cost.max(1)).min(self.burst);
        if self.tokens >= cost {
            self.tokens -= cost;
            return Ok(());
        }
        Err(Duration::from_secs_f64((cost - self.tokens) / self.rate))
    }
}

/// Task ids or tasks one call unit covers: a call that names many (a reconcile of a thousand
/// ids, an accept of a large bundle) costs the node loop as many small calls, and is charged so.
pub const ITEMS_PER_CALL_UNIT: usize = 16;

/// What `call` costs in a principal's budget: one unit, plus one per [`ITEMS_PER_CALL_UNIT`]
/// task ids or tasks it carries.
pub fn call_cost(call: &FrameworkRequest) -> u32 {
    let items = match call {
        FrameworkRequest::Reconcile { task_ids } => task_ids.len(),
        FrameworkRequest::Accept { tasks, .. } => tasks.len(),
        FrameworkRequest::Acknowledge(acks) => acks.len(),
        _ => 0,
    };
    u32::try_from(1 + items / ITEMS_PER_CALL_UNIT).unwrap_or(u32::MAX)
}

/// The answer to a framework's call refused because its principal is over its call rate.
pub fn refuse_rate_limited(
    call_id: u64,
    principal: &str,
    limits: &ClientLimits,
    retry_after: Duration,
) -> MasterToFramework {
    MasterToFramework::CallResult {
        call_id,
        result: Err(WireError::new(
            ErrorCode::RateLimited,
            format!(
                "principal `{principal}` sent more than {} calls per second (bursts of {}); \
                 the call was not carried out, retry in {} ms",
                limits.calls_per_second,
                limits.call_burst,
                retry_after.as_millis().max(1)
            ),
        )),
    }
}

/// Open connections per certificate, and the admission of a new one.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    open: HashMap<String, u32>,
}

impl ConnectionCounts {
    /// Admits one more connection of the certificate `peer` (its role and id), or says why
    /// not. An admitted connection must be [`ConnectionCounts::release`]d when it ends.
    pub fn admit(&mut self, peer: &str, limit: u32) -> Result<(), String> {
        let open = self.open.entry(peer.to_string()).or_default();
        if *open >= limit {
            return Err(format!(
                "certificate {peer} already holds {open} connections, the limit is {limit}"
            ));
        }
        *open += 1;
        Ok(())
    }

    /// A connection of `peer` ended.
    pub fn release(&mut self, peer: &str) {
        if let Some(open) = self.open.get_mut(peer) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                self.open.remove(peer);
            }
        }
    }

    /// Connections open for `peer`.
    pub fn open(&self, peer: &str) -> u32 {
        self.open.get(peer).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rate: u32, burst: u32) -> ClientLimits {
        ClientLimits {
            calls_per_second: rate,
            call_burst: burst,
            connections_per_certificate: 2,
        }
    }

    #[test]
    fn a_budget_allows_its_burst_then_its_rate_and_says_when_to_retry() {
        let start = Time::ZERO;
        let mut budget = CallBudget::new(&limits(10, 5), start);
        for _ in 0..5 {
            assert_eq!(budget.take(start, 1), Ok(()));
        }
        let wait = budget.take(start, 1).expect_err("the burst is spent");
        assert_eq!(
            wait,
            Duration::from_millis(100),
            "one call per 100 ms at 10/s"
        );
        // 250 ms later: two calls have come back, not three.
        let later = start + Duration::from_millis(250);
        assert_eq!(budget.take(later, 1), Ok(()));
        assert_eq!(budget.take(later, 1), Ok(()));
        let wait = budget.take(later, 1).expect_err("only two refilled");
        assert_eq!(wait, Duration::from_millis(50));
        // A call of cost 3 waits for three tokens.
        let wait = budget.take(later, 3).expect_err("half a token left");
        assert_eq!(wait, Duration::from_millis(250));
        // A long silence refills the burst, never more.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..5 {
            assert_eq!(budget.take(much_later, 1), Ok(()));
        }
        assert!(budget.take(much_later, 1).is_err());
        // A clock that seems to go back refills nothing and breaks nothing.
        assert!(budget.take(start, 1).is_err());
        // A cost over the burst takes the whole burst, so it can pass.
        let mut budget = CallBudget::new(&limits(10, 5), start);
        assert_eq!(budget.take(start, 1_000), Ok(()));
        assert!(budget.take(start, 1).is_err());
    }

    #[test]
    fn calls_naming_many_tasks_cost_more() {
        let ids = |n: usize| (0..n).map(|i| format!("t{i}").into()).collect();
        assert_eq!(call_cost(&FrameworkRequest::Revive), 1);
        assert_eq!(
            call_cost(&FrameworkRequest::Reconcile { task_ids: ids(0) }),
            1
        );
        assert_eq!(
            call_cost(&FrameworkRequest::Reconcile { task_ids: ids(15) }),
            1
        );
        assert_eq!(
            call_cost(&FrameworkRequest::Reconcile {
                task_ids: ids(1_000)
            }),
            63
        );
        let ack = fullerene_proto::messages::StatusAck {
            task_id: "t1".into(),
            framework_id: "f1".into(),
            seq: 1,
        };
        assert_eq!(call_cost(&FrameworkRequest::Acknowledge(vec![ack; 32])), 3);
    }

    #[test]
    fn a_refused_call_names_the_principal_the_rate_and_the_wait() {
        let answer = refuse_rate_limited(
            7,
            "framework-3",
            &limits(100, 200),
            Duration::from_millis(15),
        );
        let MasterToFramework::CallResult {
            call_id: 7,
            result: Err(error),
        } = answer
        else {
            panic!("not a refusal of call 7: {answer:?}");
        };
        assert_eq!(error.code, ErrorCode::RateLimited);
        for part in ["framework-3", "100 calls per second", "200", "15 ms"] {
            assert!(
                error.message.contains(part),
                "{part} missing: {}",
                error.message
            );
        }
    }

    #[test]
    fn connections_are_counted_per_certificate_and_released() {
        let mut counts = ConnectionCounts::default();
        assert_eq!(counts.admit("framework f1", 2), Ok(()));
        assert_eq!(counts.admit("framework f1", 2), Ok(()));
        let refused = counts.admit("framework f1", 2).expect_err("over the limit");
        assert!(
            refused.contains("framework f1") && refused.contains("limit is 2"),
            "{refused}"
        );
        assert_eq!(
            counts.admit("framework f2", 2),
            Ok(()),
            "another certificate"
        );
        counts.release("framework f1");
        assert_eq!(counts.open("framework f1"), 1);
        assert_eq!(counts.admit("framework f1", 2), Ok(()));
        counts.release("framework f1");
        counts.release("framework f1");
        counts.release("framework f1");
        assert_eq!(
            counts.open("framework f1"),
            0,
            "releases never go below zero"
        );
    }
}
