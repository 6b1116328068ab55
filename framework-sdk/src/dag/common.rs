//! Rules the DAG-job framework (one framework per job: [`DagJob`](super::DagJob) and
//! [`run_jobs`](super::run_jobs)) and the session framework
//! ([`SessionFramework`](crate::session::SessionFramework)) share: which refusals are worth
//! sending again, how the arrival times of a workload are checked, the bound on accepts refused
//! in a row, how offers are read, and what the offers showed of each agent.

use std::collections::BTreeMap;

use fullerene_proto::messages::{ErrorCode, FrameworkRequest, Offer, WireError};
use fullerene_proto::{AgentId, OfferId, ResourceVec};
use fullerene_scheduling::EPSILON;

/// Accepts refused in a row (with no task of the job making progress in between) after which
/// the job fails: a master and a policy that disagree for good (an overbooking allowance, an
/// executor the agents lack) would otherwise resend the same bundle forever.
pub const MAX_REFUSED_ACCEPTS: u32 = 50;

/// How long offers are refused once the framework has nothing left to run.
pub(crate) const DONE_REFUSE_MS: u64 = 60_000;

/// Refusals that say "not now" rather than "no": the call is worth sending again.
pub fn transient(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::RateLimited
            | ErrorCode::NotLeader
            | ErrorCode::Unavailable
            | ErrorCode::OutcomeUnknown
    )
}

/// What to do about a failed `DescribeJob` or `EndJob` (refused with `code`): `Some(on_tick)`
/// to send it again (on the next tick when `on_tick`; otherwise the session was lost and the
/// call goes again on resubscription), `None` when the masters refused it for good.
pub(crate) fn resend_job_call(code: ErrorCode) -> Option<bool> {
    transient(code).then_some(code != ErrorCode::OutcomeUnknown)
}

/// Arrival times that do not fit a workload's jobs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid arrival times: {0}")]
pub struct ArrivalsError(pub String);

/// Checks a workload's arrival times: none (every job at once), or one per job, each a finite
/// number of seconds ≥ 0.
pub fn check_arrivals(arrivals_s: &[f64], jobs: usize) -> Result<(), ArrivalsError> {
    if !arrivals_s.is_empty() && arrivals_s.len() != jobs {
        return Err(ArrivalsError(format!(
            "{} arrival times for {jobs} jobs",
            arrivals_s.len()
        )));
    }
    if let Some(bad) = arrivals_s
        .iter()
        .find(|arrival| !(arrival.is_finite() && **arrival >= 0.0))
    {
        return Err(ArrivalsError(format!(
            "arrival time {bad} is not a finite number of seconds >= 0"
        )));
    }
    Ok(())
}

/// One more accept of a job refused with `error`: counts it in `in_a_row` and, once that
/// reaches [`MAX_REFUSED_ACCEPTS`], says why the job fails. A refusal for a while
/// ([`transient`]: rate-limited, no leader, unavailable, outcome unknown) says nothing of the
/// job's tasks and counts nothing: a leader election must not fail jobs.
pub(crate) fn count_refused_accept(in_a_row: &mut u32, error: &WireError) -> Option<String> {
    if transient(error.code) {
        return None;
    }
    *in_a_row += 1;
    (*in_a_row >= MAX_REFUSED_ACCEPTS).then(|| {
        format!(
            "the master refused {in_a_row} accepts in a row with no task making progress; last: {error}"
        )
    })
}

/// The offers whose resources can be read, with them; the others are declined (refused for
/// `refuse_ms`) into `out`.
pub(crate) fn read_offers<'a>(
    offers: &'a [Offer],
    refuse_ms: u64,
    out: &mut Vec<FrameworkRequest>,
) -> Vec<(&'a Offer, ResourceVec)> {
    let mut usable = Vec::with_capacity(offers.len());
    for offer in offers {
        match offer.resources.to_vec() {
            Ok(free) => usable.push((offer, free)),
            Err(error) => {
                tracing::warn!(offer = %offer.id, %error, "declining an offer with unreadable resources");
                out.push(FrameworkRequest::Decline {
                    offer_ids: vec![offer.id],
                    refuse_ms,
                });
            }
        }
    }
    usable
}

/// Declines `offer_ids` for long: the framework has nothing left to run.
pub(crate) fn decline_for_good(offer_ids: Vec<OfferId>) -> FrameworkRequest {
    FrameworkRequest::Decline {
        offer_ids,
        refuse_ms: DONE_REFUSE_MS,
    }
}

/// What a framework knows of an agent.
#[derive(Clone, Debug)]
pub(crate) struct Machine {
    /// The index the policies know it by (never reused).
    pub(crate) index: usize,
    /// The most it ever offered: the best estimate of its capacity the protocol gives.
    pub(crate) capacity: ResourceVec,
}

/// The agents seen in offers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Machines {
    by_agent: BTreeMap<AgentId, Machine>,
    next_index: usize,
}

impl Machines {
    /// `agent` offered `free`: its machine (a new index the first time), its capacity raised.
    pub(crate) fn saw(&mut self, agent: &AgentId, free: &ResourceVec) -> &Machine {
        let next = self.next_index;
        let machine = self
            .by_agent
            .entry(agent.clone())
            .or_insert_with(|| Machine {
                index: next,
                capacity: ResourceVec::ZERO,
            });
        if machine.index == next {
            self.next_index += 1;
        }
        machine.capacity = machine.capacity.max(free);
        machine
    }

    /// The machine of `agent`, if it offered.
    pub(crate) fn get(&self, agent: &AgentId) -> Option<&Machine> {
        self.by_agent.get(agent)
    }

    /// Forgets `agent` (the masters declared it lost); an offer of it later makes a new machine.
    pub(crate) fn remove(&mut self, agent: &AgentId) -> Option<Machine> {
        self.by_agent.remove(agent)
    }

    /// How many agents offered.
    pub(crate) fn len(&self) -> usize {
        self.by_agent.len()
    }

    /// Every machine.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Machine> {
        self.by_agent.values()
    }

    /// All machines' capacity together.
    pub(crate) fn total_capacity(&self) -> ResourceVec {
        self.iter()
            .fold(ResourceVec::ZERO, |acc, m| acc + m.capacity)
    }

    /// [`Machines::total_capacity`], with each kind that no offer showed taken from `fallback`:
    /// the work in a demand summary is relative to the capacity, and a kind the job's tasks
    /// use but every offer so far lacked (no offer yet, or agents whose disk bandwidth was all
    /// in use whenever they offered) would make it infinite, a summary the masters refuse.
    pub(crate) fn capacity_or(&self, fallback: &ResourceVec) -> ResourceVec {
        let mut capacity = self.total_capacity();
        for (seen, other) in capacity.0.iter_mut().zip(fallback.0) {
            if *seen <= EPSILON {
                *seen = other;
            }
        }
        capacity
    }
}
