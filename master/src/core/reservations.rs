//! The leader's plan follower (issue 17; Rayon §5.2): what the replicated plan guarantees each
//! reservation now becomes offers to the frameworks running its jobs, made before anyone
//! else's, and tasks that sit in the way too long are killed: best effort, and reserved jobs'
//! beyond their own stage's allocation (capacity lent to them).
//!
//! Every [`FOLLOW_INTERVAL`], when an allocation cycle starts, the leader reads the plan's
//! current slice through [`PlanFollower::follow`] with:
//! - the reserved jobs: each live framework with an unended job tagged with an accepted
//!   reservation (`JobDescription::reservation`) counts for the first such job's reservation;
//!   it holds what its running tasks hold and wants its last demand summary's pending tasks
//!   (by shape, which the follower places on agents);
//! - the free capacity agent by agent: each agent's unused resources, plus what tasks being
//!   killed there still hold (they free it within their kill grace, and must not be preempted
//!   twice over);
//! - the running tasks that may be preempted: the live tasks of every framework, with their
//!   agents, launch times and, for reserved jobs, their reservation (the follower kills those
//!   only beyond their own stage's allocation, as capacity lent to them).
//!
//! Each reservation's `offer_first` is split over its frameworks by what each wants and handed
//! to the allocator as guarantees (`OfferManager::set_guarantees`). Preemptions become a
//! replicated [`Command::PreemptTasks`] (the kill path of operators and drains, with the
//! reservation as the KILLED update's reason), once the victims' frameworks' open offers are
//! rescinded, so that nothing launches on what is being reclaimed.
//!
//! The follower's state (when each shortfall began, the kills in flight) is soft: a new leader
//! starts it afresh, so a failover restarts the grace period of a shortfall under way (it delays
//! a preemption, never hastens one). The plan itself, the tags and the reservations' outcomes
//! are replicated. On its own timer ([`CLOSE_INTERVAL`]) the leader proposes
//! [`Command::CloseReservations`], which makes every master forget the plan's past alike and
//! judge the reservations whose time is over.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fullerene_proto::messages::{MasterToFramework, ReservationProgress};
use fullerene_proto::{FrameworkId, Now, ResourceVec, TaskKey, Time};
use fullerene_reservation::{
    packed_bundle, AgentRoom, Candidates, FollowerDecision, PlanFollower, PreemptibleTask,
    ReservationId, TaggedJob,
};

use super::MasterCore;
use crate::offers::OfferManager;
use crate::state::{ClusterState, Command};
use crate::storage::RaftStore;

/// How often the follower runs: it walks every tagged framework, and on a shortfall every live
/// task for the candidates to preempt, so not on each of the allocator's cycles (one every
/// 25-100 ms); shares stay with the allocator in between.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// How often, at most, the leader looks for reservations whose time is over: once a plan's
/// quantum (one minute by default), so that a reservation is judged within a quantum of its
/// end, but never more often than [`MIN_CLOSE_INTERVAL`].
pub const CLOSE_INTERVAL: Duration = Duration::from_secs(60);

/// With short quanta (`fullerene dev` plans in tenths of a second), a close at most this often:
/// each is a replicated command.
const MIN_CLOSE_INTERVAL: Duration = Duration::from_secs(1);

/// The interval between looks for reservations whose time is over, for quanta of `quantum_ms`.
fn close_interval(quantum_ms: u64) -> Duration {
    Duration::from_millis(quantum_ms).clamp(MIN_CLOSE_INTERVAL, CLOSE_INTERVAL)
}

/// Without any reservation to close, the plan's past is still forgotten this often (capacity
/// changes add runs to it).
const IDLE_CLOSE_INTERVAL: Duration = Duration::from_secs(600);

/// The default grace period before tasks are preempted for a reservation
/// (`--reservation-grace-secs`): long enough for short tasks to end on their own.
pub const DEFAULT_RESERVATION_GRACE: Duration = Duration::from_secs(30);

/// The leader's soft state for following the plan.
#[derive(Debug)]
pub(crate) struct Following {
    follower: PlanFollower,
    /// Tasks in a preemption proposed and not yet applied.
    preempts_in_flight: BTreeSet<TaskKey>,
    /// No follow before this time (`None`: at the next cycle).
    next_follow: Option<Time>,
    /// No close before this time (`None`: at the next tick).
    next_close: Option<Time>,
    /// When the past was last forgotten.
    last_close: Option<Time>,
    /// What the follower decided last, for tests and the operator's views.
    last: FollowerDecision,
    /// The reservations rejected and closed in all when their owners were last told
    /// ([`MasterCore::tell_reservation_owners`]).
    told: (u64, u64),
}

impl Following {
    pub(crate) fn new(grace: Duration) -> Following {
        Following {
            // Reclaims a grace period and a follow ahead of each step up of a guarantee, as
            // the simulator's follower does: GREE places a reservation just in time, and a
            // follower that began to reclaim only when the step came would deliver it a grace
            // and a cycle late (`dev --reservations` showed reserved jobs late).
            follower: {
                let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
                let follow_ms = u64::try_from(FOLLOW_INTERVAL.as_millis()).unwrap_or(u64::MAX);
                PlanFollower::new(grace_ms).with_lookahead(grace_ms.saturating_add(follow_ms))
            },
            preempts_in_flight: BTreeSet::new(),
            next_follow: None,
            next_close: None,
            last_close: None,
            last: FollowerDecision::default(),
            told: (0, 0),
        }
    }

    /// This master became leader: the follower starts afresh (see the module documentation),
    /// and its owners are told of the reservations that end from now on (`state`'s totals).
    pub(crate) fn on_leadership(&mut self, state: &ClusterState) {
        *self = Following::new(Duration::from_millis(self.follower.grace_ms()));
        let reservations = state.reservations();
        self.told = (reservations.rejected_total(), reservations.closed_total());
    }

    /// A preemption this leader proposed settled: its tasks may be named again.
    pub(crate) fn settled(&mut self, command: &Command) {
        if let Command::PreemptTasks { tasks, .. } = command {
            for key in tasks {
                self.preempts_in_flight.remove(key);
            }
        }
    }

    /// The follower's last decision.
    pub(crate) fn last(&self) -> &FollowerDecision {
        &self.last
    }
}

/// What one follow gathered from the state: the reserved jobs' loads with the frameworks
/// behind them and the agents' free capacity. The running tasks are walked only on a
/// shortfall ([`candidates`]).
struct Loads {
    jobs: Vec<TaggedJob>,
    /// The framework of each of `jobs`, in the same order.
    frameworks: Vec<FrameworkId>,
    /// The reserved jobs' frameworks, with their reservations.
    tagged: BTreeMap<FrameworkId, ReservationId>,
    /// The agents that take new tasks, with their free resources.
    agents: Vec<AgentRoom>,
}

/// The reservation a live framework's jobs run in ([`ClusterState::reservation_of`]).
fn reservation_of(state: &ClusterState, framework: &FrameworkId) -> Option<ReservationId> {
    let name = state.reservation_of(framework)?;
    state.reservations().id_of(name)
}

/// The atoms of reservation `id` its job reports finished: none unless the job counted them
/// against the very request in the plan (its fingerprint and atom count: an operator may have
/// replaced the job's own request with another, whose atoms are not its stages').
fn finished_atoms(
    state: &ClusterState,
    id: ReservationId,
    progress: Option<&ReservationProgress>,
) -> BTreeSet<u32> {
    let planned = state.reservations().plan().reservation(id);
    progress
        .filter(|progress| {
            planned.is_some_and(|reservation| {
                usize::try_from(progress.atoms).ok() == Some(reservation.expr.atoms().len())
                    && progress.request == reservation.expr.fingerprint()
            })
        })
        .map_or_else(BTreeSet::new, |progress| {
            progress.finished_atoms.iter().copied().collect()
        })
}

/// The follower's loads. Tasks being killed (`in_flight`, or asked to die) still hold what
/// they hold, but are not counted as running their stage: they are neither lent again nor
/// taken for the stage's allocation.
fn gather(state: &ClusterState, offers: &OfferManager, in_flight: &BTreeSet<TaskKey>) -> Loads {
    let accounting = state.allocation();
    let mut tagged: BTreeMap<FrameworkId, ReservationId> = BTreeMap::new();
    for framework in state.frameworks().keys() {
        if let Some(id) = reservation_of(state, framework) {
            tagged.insert(framework.clone(), id);
        }
    }
    let mut jobs = Vec::with_capacity(tagged.len());
    let mut frameworks = Vec::with_capacity(tagged.len());
    for (framework, id) in &tagged {
        // In the plan's units: each task packed on its agent, as the request counted it.
        let mut held = ResourceVec::ZERO;
        let mut running: Vec<(ResourceVec, u32)> = Vec::new();
        for (key, record) in state.tasks_of(framework) {
            if record.state.is_terminal() {
                continue;
            }
            let Some(agent) = accounting.agent_by_id(&record.agent_id) else {
                continue;
            };
            held += packed_bundle(&record.demand, &agent.total);
            if record.kill_requested || in_flight.contains(key) {
                continue;
            }
            match running
                .iter_mut()
                .find(|(shape, _)| *shape == record.demand)
            {
                Some((_, count)) => *count += 1,
                None => running.push((record.demand, 1)),
            }
        }
        jobs.push(TaggedJob {
            reservation: *id,
            held,
            running,
            shapes: offers.wanted_shapes(framework).to_vec(),
            finished_atoms: finished_atoms(state, *id, offers.reservation_progress(framework)),
        });
        frameworks.push(framework.clone());
    }
    let mut agents = Vec::new();
    for (_, agent) in accounting.agents() {
        let takes_tasks = state
            .agents()
            .get(&agent.id)
            .is_some_and(crate::state::AgentEntry::takes_new_tasks);
        if takes_tasks {
            agents.push(AgentRoom {
                agent: agent.id.clone(),
                free: agent.free(),
                capacity: agent.total,
            });
        }
    }
    Loads {
        jobs,
        frameworks,
        tagged,
        agents,
    }
}

/// The running tasks that may be preempted (best effort, and reserved jobs' tagged with their
/// reservation: the follower kills those only beyond their own stage's allocation), and what
/// tasks being killed will free within their grace: a walk over every task, so made only when
/// the free capacity falls short.
fn candidates(
    state: &ClusterState,
    tagged: &BTreeMap<FrameworkId, ReservationId>,
    in_flight: &BTreeSet<TaskKey>,
) -> Candidates {
    let mut candidates = Candidates::default();
    for (key, record) in state.tasks() {
        if record.state.is_terminal() {
            continue;
        }
        if record.kill_requested || in_flight.contains(key) {
            candidates
                .freeing
                .push((record.agent_id.clone(), record.demand));
            continue;
        }
        candidates.tasks.push(PreemptibleTask {
            key: key.clone(),
            agent: record.agent_id.clone(),
            started_ms: record.launched_at_ms,
            resources: record.demand,
            reservation: tagged.get(&key.framework_id).copied(),
        });
    }
    candidates
}

/// Splits each reservation's `offer_first` over the frameworks running its jobs, kind by kind
/// in proportion to what each wants.
fn split_guarantees(decision: &FollowerDecision, loads: &Loads) -> Vec<(FrameworkId, ResourceVec)> {
    let mut owed = Vec::new();
    for share in decision.shares.iter().filter(|s| !s.offer_first.is_zero()) {
        let members: Vec<(&FrameworkId, ResourceVec)> = loads
            .frameworks
            .iter()
            .zip(&loads.jobs)
            .filter(|(_, job)| job.reservation == share.id)
            .map(|(framework, job)| (framework, job.wanted()))
            .collect();
        let wanted = members
            .iter()
            .fold(ResourceVec::ZERO, |sum, (_, job_wants)| sum + *job_wants);
        for (framework, job_wants) in members {
            let mut part = ResourceVec::ZERO;
            for (k, amount) in part.0.iter_mut().enumerate() {
                if wanted.0[k] > 0.0 {
                    *amount = share.offer_first.0[k] * job_wants.0[k] / wanted.0[k];
                }
            }
            if !part.is_zero() {
                owed.push((framework.clone(), part));
            }
        }
    }
    owed
}

impl<S: RaftStore> MasterCore<S> {
    /// On the leader, when an allocation cycle starts (at most once per [`FOLLOW_INTERVAL`]):
    /// follows the plan, sets the allocator's guarantees, and preempts (see the module
    /// documentation).
    pub(super) fn follow_plan(&mut self, now: Now) {
        if self
            .following
            .next_follow
            .is_some_and(|next| now.monotonic < next)
        {
            return;
        }
        self.following.next_follow = Some(now.monotonic.saturating_add(FOLLOW_INTERVAL));
        let Some(offers) = self.offers.as_mut() else {
            return;
        };
        let state = self.node.state();
        let plan = state.reservations().plan();
        if plan.reservations().next().is_none() {
            offers.set_guarantees(state, Vec::new());
            self.following.last = FollowerDecision::default();
            return;
        }
        let in_flight = &self.following.preempts_in_flight;
        let loads = gather(state, offers, in_flight);
        let decision = self.following.follower.follow_with(
            plan,
            now.wall_ms(),
            &loads.jobs,
            &loads.agents,
            || candidates(state, &loads.tagged, in_flight),
        );
        offers.set_guarantees(state, split_guarantees(&decision, &loads));
        if !decision.preempt.is_empty() {
            // Named for the first reservation still owed (by id: the oldest accepted).
            let reservation = decision
                .shares
                .iter()
                .find(|share| !share.offer_first.is_zero())
                .and_then(|share| state.reservations().name_of(share.id))
                .unwrap_or_default()
                .to_string();
            let victims: BTreeSet<FrameworkId> = decision
                .preempt
                .iter()
                .map(|key| key.framework_id.clone())
                .collect();
            let mut rescinded = Vec::new();
            for framework in &victims {
                rescinded.extend(offers.rescind_framework(state, framework));
            }
            self.send_rescinds(rescinded);
            tracing::info!(
                reservation,
                tasks = decision.preempt.len(),
                "a reservation's shortfall outlasted the grace period: preempting tasks that hold its capacity"
            );
            self.following
                .preempts_in_flight
                .extend(decision.preempt.iter().cloned());
            self.propose_internal(Command::PreemptTasks {
                reservation,
                tasks: decision.preempt.clone(),
                at_ms: now.wall_ms(),
            });
        }
        self.following.last = decision;
    }

    /// On the leader's tick: proposes [`Command::CloseReservations`] once a quantum (see
    /// [`close_interval`]) when a reservation's time is over, and every ten minutes anyway.
    pub(super) fn propose_reservation_close(&mut self, now: Now) {
        if !self.node.is_leader()
            || self
                .following
                .next_close
                .is_some_and(|next| now.monotonic < next)
        {
            return;
        }
        let plan = self.node.state().reservations().plan();
        let quanta = plan.quanta();
        self.following.next_close = Some(
            now.monotonic
                .saturating_add(close_interval(quanta.quantum_ms)),
        );
        let now_quantum = quanta.containing(now.wall_ms());
        let something_over = plan
            .reservations()
            .any(|r| r.span().is_none_or(|(_, end)| end <= now_quantum));
        // The first idle close comes a whole interval after this master began to lead.
        let last = *self.following.last_close.get_or_insert(now.monotonic);
        let idle_due = now.monotonic.saturating_duration_since(last) >= IDLE_CLOSE_INTERVAL;
        if something_over || idle_due {
            self.following.last_close = Some(now.monotonic);
            self.propose_internal(Command::CloseReservations {
                at_ms: now.wall_ms(),
            });
        }
    }

    /// What the plan follower decided last (empty unless leading with reservations).
    pub fn follower_decision(&self) -> &FollowerDecision {
        self.following.last()
    }

    /// On the leader, after applying: tells the owners' frameworks connected here of each
    /// reservation that ended since the last call (rejected by the adapter after a loss of
    /// capacity, Rayon §5.2, or closed with its verdict). At least once per leader: a new
    /// leader tells of what its own applies end, so an end applied across a leader change may
    /// be told twice, and a framework connected to no leader then reads it from the rejected
    /// list or the events stream.
    pub(super) fn tell_reservation_owners(&mut self) {
        let reservations = self.node.state().reservations();
        let totals = (reservations.rejected_total(), reservations.closed_total());
        if totals == self.following.told {
            return;
        }
        let (rejected, closed) = self.following.told;
        for (principal, notice) in reservations.ended_since(rejected, closed) {
            tracing::info!(
                reservation = %notice.name,
                principal,
                verdict = notice.verdict.name(),
                "a reservation ended; telling its owner"
            );
            self.frameworks.tell_principal(
                self.node.state(),
                principal,
                &MasterToFramework::ReservationEnded(notice),
                &mut self.out,
            );
        }
        self.following.told = totals;
    }
}
