//! How a run schedules its jobs: each job as its own framework with an intra-job policy (the
//! two-level design of Graphene and Carbyne), or every job in one session framework whose
//! multi-job policy picks the next stage among all of them and its job's parallelism (Decima
//! §5.2, issue 18).

use std::fmt;

use fullerene_sdk::policy::PolicyKind;
use fullerene_sdk::session::{SessionPolicyFactory, SessionPolicyKind};

/// How a run schedules its jobs. The runner's entry points ([`crate::run`], [`crate::compare`],
/// …) take anything that converts into one, so a [`PolicyKind`] is a per-job run.
#[derive(Clone, Debug)]
pub enum Scheduling {
    /// Each job runs as its own framework (`job-{j:06}`) with this intra-job policy, and the
    /// master's allocator shares the machines between them with the inter-job policy the kind
    /// pairs with ([`crate::allocator_policy`]).
    PerJob(PolicyKind),
    /// Every job runs in one session framework ([`SessionScheduling`]).
    Session(SessionScheduling),
}

impl Scheduling {
    /// The policy's name in reports: the intra-job policy's, or the session's.
    pub fn name(&self) -> &str {
        match self {
            Scheduling::PerJob(kind) => kind.name(),
            Scheduling::Session(session) => session.name(),
        }
    }

    /// Whether the run reads Graphene's offline plans (the runner plans the jobs first).
    pub fn needs_pri_scores(&self) -> bool {
        match self {
            Scheduling::PerJob(kind) => kind.needs_pri_scores(),
            Scheduling::Session(session) => session.pri_scores,
        }
    }
}

impl From<PolicyKind> for Scheduling {
    fn from(kind: PolicyKind) -> Scheduling {
        Scheduling::PerJob(kind)
    }
}

impl From<SessionScheduling> for Scheduling {
    fn from(session: SessionScheduling) -> Scheduling {
        Scheduling::Session(session)
    }
}

/// A multi-job session (Decima §5.2; [`fullerene_sdk::session::Session`]): the engine runs one
/// framework that holds every job of the run from its arrival to its completion. The master's
/// allocator offers to it like to any framework, sized by its demand summary (the sum of its
/// live jobs'); each allocation cycle's offers are one scheduling event of the session, whose
/// policy (built by the factory, a fresh one per run) repeatedly chooses a stage among all live
/// jobs' runnable stages and a parallelism limit for that stage's job, and the stage's tasks go
/// onto the offers up to the limit. What the offers keep is declined.
///
/// The policy comes from the caller as a [`SessionPolicyFactory`]: the learned one lives in
/// `fullerene-learn`, which depends on this crate.
///
/// Departures from Decima, and from the environment its model is trained in
/// ([`crate::session`]):
/// - Decima's limit counts executors; here it counts the job's running tasks, and the largest
///   limit is the most tasks the cluster can run at once (its capacity over the smallest
///   demand, e.g. cores over the smallest task's cores: 80 on five reference machines), not the
///   50 executors of training.
/// - The model was trained on one-task executors, every task taking one slot whatever its
///   demand; here it sees multi-resource machines, where one offer (a machine's free
///   resources) holds several tasks, of several stages and jobs, each with its own demand. Its
///   "free executors" feature counts the tasks the offers have room for, so a machine reads as
///   the executors it could host.
/// - A machine's room that a task freed keeps working on that task's stage without a decision
///   (the session's rule: Decima's executors stay on their stage); a machine of several tasks
///   may thus work for several jobs at once, where Decima's executor works for one.
/// - Nothing is charged when a machine changes jobs (training charges Decima's 2 s moving
///   delay). An event's offers are every agent whose free resources fit one of the session's
///   summary shapes (whole agents: the engine's allocator uses
///   [`AgentMatching::WholeAgent`](fullerene_scheduling::allocator::AgentMatching) for a
///   session), not only the executors one completion freed.
/// - Reservations and SLA queues are per-job features: a session run refuses them
///   ([`crate::SimError::SessionWithQueues`]).
#[derive(Clone)]
pub struct SessionScheduling {
    name: String,
    factory: SessionPolicyFactory,
    pri_scores: bool,
}

impl SessionScheduling {
    /// A session whose policies `factory` builds, named in reports after them (`decima` for
    /// Decima's). The policy reads no offline plan.
    pub fn new(factory: SessionPolicyFactory) -> SessionScheduling {
        let name = factory(0).name().to_string();
        SessionScheduling {
            name,
            factory,
            pri_scores: false,
        }
    }

    /// A session of one of the hand-written multi-job policies Decima is compared with, named
    /// `session-{kind}` (so that `session-fifo` and the per-job `fifo` can be compared); Graphene's
    /// reads the offline plans.
    pub fn heuristic(kind: SessionPolicyKind) -> SessionScheduling {
        SessionScheduling {
            name: format!("session-{}", kind.name()),
            factory: std::sync::Arc::new(move |_seed| kind.build()),
            pri_scores: kind.needs_pri_scores(),
        }
    }

    /// The name in reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A fresh policy for the run of `seed`.
    pub(crate) fn build(&self, seed: u64) -> Box<dyn fullerene_sdk::session::SessionPolicy> {
        (self.factory)(seed)
    }

    /// Whether the policy reads Graphene's priScores.
    pub(crate) fn needs_pri_scores(&self) -> bool {
        self.pri_scores
    }
}

impl fmt::Debug for SessionScheduling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionScheduling")
            .field("name", &self.name)
            .field("pri_scores", &self.pri_scores)
            .finish_non_exhaustive()
    }
}
