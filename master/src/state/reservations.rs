//! Reservations in the replicated state (issue 17; Rayon §5.2): the plan of future capacity
//! that every master holds alike, so that what was accepted survives a failover and a
//! restart.
//!
//! The plan's decisions are `fullerene_reservation`'s; this module names reservations (an
//! operator's name maps to the plan's numeric id), follows the cluster's capacity as agents come
//! and go, and keeps the reservations the adapter had to reject, with the reason, so that their
//! owners can see why.

use std::collections::BTreeMap;

use fullerene_proto::messages::UnixMillis;
use fullerene_proto::reservations::{
    AllocationStep, RejectedReservationInfo, ReservationInfo, ReservationNotice, ReservationPhase,
    ReservationVerdict, MAX_RESERVATION_NAME_BYTES,
};
use fullerene_proto::ResourceVec;
use fullerene_reservation::{
    CapacityChange, Expr, Plan, PlanConfig, PolicyKind, Refusal, Reservation, ReservationId,
    ReservationRequest, SharingPolicy,
};
use serde::{Deserialize, Serialize};

use super::{CommandError, Requester, MAX_MAPPED_PRINCIPALS};

/// The most reservations accepted at once: each costs a placement's work on every later
/// admission and capacity change, and a line in every view. Rayon's production clusters hold
/// hundreds; the placement benchmark measures 1,000.
pub const MAX_ACCEPTED_RESERVATIONS: usize = 4_096;

/// How many rejected reservations are kept for their owners to read; the oldest go first.
pub const MAX_REJECTED_KEPT: usize = 1024;

/// How many closed reservations (time over, judged fulfilled, late or unused) are kept; the
/// oldest go first.
pub const MAX_CLOSED_KEPT: usize = 1024;

/// How a reservation whose time is over went, judged when the plan forgets it (Rayon §6's SLA
/// fulfilment: the reserved jobs done by the reservation's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationOutcome {
    /// Every job tagged with it ended by its end.
    Fulfilled,
    /// A job tagged with it was still running at its end (or ended after it).
    Late,
    /// No job ran in it.
    Unused,
}

/// A reservation whose time is over, with how it went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClosedReservation {
    /// Its name.
    pub name: String,
    /// Its owner.
    pub principal: String,
    /// Its end: the end of the last quantum the plan held for it (GREE places as late as the
    /// windows allow, so this is its deadline as planned).
    pub end_ms: UnixMillis,
    /// The jobs tagged with it that were described before its end.
    pub jobs: u32,
    /// Of those, the ones still running at its end or ended after it.
    pub late_jobs: u32,
    /// The verdict.
    pub outcome: ReservationOutcome,
}

impl ClosedReservation {
    /// What its owner's frameworks are told.
    pub fn notice(&self) -> ReservationNotice {
        let verdict = match self.outcome {
            ReservationOutcome::Fulfilled => ReservationVerdict::Fulfilled { jobs: self.jobs },
            ReservationOutcome::Late => ReservationVerdict::Late {
                jobs: self.jobs,
                late_jobs: self.late_jobs,
            },
            ReservationOutcome::Unused => ReservationVerdict::Unused,
        };
        ReservationNotice {
            name: self.name.clone(),
            verdict,
            at_ms: self.end_ms,
        }
    }
}

/// A reservation the adapter removed from the plan after a loss of capacity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RejectedReservation {
    /// Its name.
    pub name: String,
    /// The reservation as it was accepted.
    pub reservation: Reservation,
    /// Why it no longer fits (the plan's refusal, as text).
    pub reason: String,
    /// When it was rejected (leader's time).
    pub rejected_at_ms: UnixMillis,
}

impl RejectedReservation {
    /// What its owner's frameworks are told.
    pub fn notice(&self) -> ReservationNotice {
        ReservationNotice {
            name: self.name.clone(),
            verdict: ReservationVerdict::Rejected {
                reason: self.reason.clone(),
            },
            at_ms: self.rejected_at_ms,
        }
    }
}

/// The cluster's reservations: the plan, the names, and the rejected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reservations {
    plan: Plan,
    /// Names to the plan's ids.
    names: BTreeMap<String, ReservationId>,
    /// The next id to give.
    next_id: u64,
    /// The capacity the plan was last told about: the sum of live agents' totals.
    followed_capacity: ResourceVec,
    /// When it was told, on the clock of the leader that proposed the change.
    followed_at_ms: UnixMillis,
    /// Rejected by the adapter, oldest first by their order of rejection.
    rejected: Vec<RejectedReservation>,
    /// How many the adapter rejected in all (`rejected` keeps the last
    /// [`MAX_REJECTED_KEPT`]).
    rejected_total: u64,
    /// Reservations whose time is over, oldest first by their closing.
    closed: Vec<ClosedReservation>,
    /// How many closed fulfilled, and late, in all (`closed` keeps the last
    /// [`MAX_CLOSED_KEPT`]).
    fulfilled_total: u64,
    late_total: u64,
    /// How many closed unused, in all.
    unused_total: u64,
}

impl Default for Reservations {
    /// The bootstrap plan: GREE, the default limits (one-minute quanta, 30 days ahead), no
    /// sharing caps, origin at wall-clock 0 (quanta are run-length encoded, so the years
    /// before now cost one run) and no capacity until agents register.
    fn default() -> Reservations {
        Reservations {
            plan: Plan::new(PlanConfig::new(0, PolicyKind::Gree), ResourceVec::ZERO),
            names: BTreeMap::new(),
            next_id: 1,
            followed_capacity: ResourceVec::ZERO,
            followed_at_ms: 0,
            rejected: Vec::new(),
            rejected_total: 0,
            closed: Vec::new(),
            fulfilled_total: 0,
            late_total: 0,
            unused_total: 0,
        }
    }
}

impl Reservations {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The accepted reservations by name.
    pub fn accepted(&self) -> impl Iterator<Item = (&str, &Reservation)> + '_ {
        self.names.iter().filter_map(|(name, id)| {
            self.plan
                .reservation(*id)
                .map(|reservation| (name.as_str(), reservation))
        })
    }

    /// One accepted reservation.
    pub fn get(&self, name: &str) -> Option<&Reservation> {
        self.names
            .get(name)
            .and_then(|id| self.plan.reservation(*id))
    }

    /// The reservations the adapter rejected, oldest first.
    pub fn rejected(&self) -> &[RejectedReservation] {
        &self.rejected
    }

    /// How many reservations the adapter rejected since the cluster began.
    pub fn rejected_total(&self) -> u64 {
        self.rejected_total
    }

    /// The reservations whose time is over, with how each went, oldest first (the last
    /// [`MAX_CLOSED_KEPT`]).
    pub fn closed(&self) -> &[ClosedReservation] {
        &self.closed
    }

    /// How many reservations were fulfilled since the cluster began.
    pub fn fulfilled_total(&self) -> u64 {
        self.fulfilled_total
    }

    /// How many reservations were late since the cluster began.
    pub fn late_total(&self) -> u64 {
        self.late_total
    }

    /// How many reservations closed (fulfilled, late or unused) since the cluster began.
    pub fn closed_total(&self) -> u64 {
        self.fulfilled_total + self.late_total + self.unused_total
    }

    /// The reservations that ended since the totals were `rejected_before` rejected and
    /// `closed_before` closed ([`Reservations::rejected_total`], [`Reservations::closed_total`]),
    /// with their owners, as their frameworks are told: rejections first, each list oldest
    /// first. Those that no longer fit the kept lists are left out.
    pub fn ended_since(
        &self,
        rejected_before: u64,
        closed_before: u64,
    ) -> Vec<(&str, ReservationNotice)> {
        let tail = |total: u64, before: u64, kept: usize| {
            let new = usize::try_from(total.saturating_sub(before)).unwrap_or(usize::MAX);
            kept - new.min(kept)
        };
        let rejected =
            &self.rejected[tail(self.rejected_total, rejected_before, self.rejected.len())..];
        let closed = &self.closed[tail(self.closed_total(), closed_before, self.closed.len())..];
        rejected
            .iter()
            .map(|r| (r.reservation.user.as_str(), r.notice()))
            .chain(closed.iter().map(|c| (c.principal.as_str(), c.notice())))
            .collect()
    }

    /// The id of an accepted reservation.
    pub fn id_of(&self, name: &str) -> Option<ReservationId> {
        self.names.get(name).copied()
    }

    /// The name of an accepted reservation's id.
    pub fn name_of(&self, id: ReservationId) -> Option<&str> {
        self.names
            .iter()
            .find(|(_, named)| **named == id)
            .map(|(name, _)| name.as_str())
    }

    /// The capacity the plan follows (the live agents' totals).
    pub fn followed_capacity(&self) -> ResourceVec {
        self.followed_capacity
    }

    /// Admits a new reservation; on refusal nothing changes.
    pub(super) fn create(
        &mut self,
        name: &str,
        principal: &str,
        expr: &Expr,
        at_ms: UnixMillis,
    ) -> Result<(), CommandError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(CommandError::ReservationExists(name.to_string()));
        }
        if self.names.len() >= MAX_ACCEPTED_RESERVATIONS {
            return Err(CommandError::QuotaExceeded(format!(
                "the plan holds {MAX_ACCEPTED_RESERVATIONS} reservations, its most: delete one \
                 first"
            )));
        }
        let id = ReservationId(self.next_id);
        let request = ReservationRequest {
            id,
            user: principal.to_string(),
            expr: expr.clone(),
        };
        self.plan.admit(request, at_ms).map_err(refused(name))?;
        self.next_id += 1;
        self.names.insert(name.to_string(), id);
        Ok(())
    }

    /// Replaces a reservation's request; on refusal the old one stays as it was.
    pub(super) fn update(
        &mut self,
        name: &str,
        by: &Requester,
        expr: &Expr,
        at_ms: UnixMillis,
    ) -> Result<(), CommandError> {
        let id = self.changeable(name, by)?;
        self.plan
            .update(id, expr.clone(), at_ms)
            .map_err(refused(name))?;
        Ok(())
    }

    /// Sets the placement policy, the sharing caps and the quantum for later admissions (what
    /// is accepted stays): each cap a fraction in (0, 1], each integral window at least one
    /// (new) quantum and at most the plan's horizon, at most [`MAX_MAPPED_PRINCIPALS`]
    /// principals with their own, and a new quantum only while the plan is empty
    /// ([`Plan::requantize`](fullerene_reservation::Plan::requantize)). All or nothing.
    pub(super) fn set_policy(
        &mut self,
        placement: PolicyKind,
        sharing: &SharingPolicy,
        quantum_ms: u64,
    ) -> Result<(), CommandError> {
        if sharing.users.len() > MAX_MAPPED_PRINCIPALS {
            return Err(CommandError::InvalidReservationPolicy(format!(
                "{} principals with their own caps, more than {MAX_MAPPED_PRINCIPALS}",
                sharing.users.len()
            )));
        }
        let limits = fullerene_reservation::Limits {
            quantum_ms,
            ..self.plan.config().limits
        };
        let named = std::iter::once(("the default", &sharing.default_caps)).chain(
            sharing
                .users
                .iter()
                .map(|(user, caps)| (user.as_str(), caps)),
        );
        for (who, caps) in named {
            let fraction = |x: f64| x.is_finite() && x > 0.0 && x <= 1.0;
            if !fraction(caps.instantaneous) || !fraction(caps.integral) {
                return Err(CommandError::InvalidReservationPolicy(format!(
                    "{who}'s caps must be fractions in (0, 1], not {} and {}",
                    caps.instantaneous, caps.integral
                )));
            }
            if caps.window_ms < limits.quantum_ms || caps.window_ms > limits.horizon_ms {
                return Err(CommandError::InvalidReservationPolicy(format!(
                    "{who}'s integral window is {} ms: it must be between the plan's quantum \
                     ({} ms) and its horizon ({} ms)",
                    caps.window_ms, limits.quantum_ms, limits.horizon_ms
                )));
            }
        }
        self.plan
            .requantize(quantum_ms)
            .map_err(|e| CommandError::InvalidReservationPolicy(e.to_string()))?;
        self.plan.reconfigure(placement, sharing.clone());
        Ok(())
    }

    /// Removes a reservation.
    pub(super) fn delete(&mut self, name: &str, by: &Requester) -> Result<(), CommandError> {
        let id = self.changeable(name, by)?;
        self.plan.delete(id);
        self.names.remove(name);
        Ok(())
    }

    /// The id of `name`, if `by` may change it: an operator, or its owner.
    fn changeable(&self, name: &str, by: &Requester) -> Result<ReservationId, CommandError> {
        let reservation = self
            .get(name)
            .ok_or_else(|| CommandError::UnknownReservation(name.to_string()))?;
        match by {
            Requester::Principal(principal) if reservation.user != *principal => {
                Err(CommandError::NotReservationOwner {
                    name: name.to_string(),
                    principal: principal.clone(),
                })
            }
            _ => Ok(reservation.id),
        }
    }

    /// How many reservations are accepted now.
    pub fn accepted_count(&self) -> usize {
        self.names.len()
    }

    /// `name`'s reservation as clients read it at `now_ms`, with its allocation over time when
    /// `with_allocation`.
    pub fn info(
        &self,
        name: &str,
        now_ms: UnixMillis,
        with_allocation: bool,
    ) -> Option<ReservationInfo> {
        let reservation = self.get(name)?;
        let quanta = self.plan.quanta();
        let span = self.span_ms(reservation);
        let phase = phase_at(span, now_ms);
        Some(ReservationInfo {
            name: name.to_string(),
            owner: reservation.user.clone(),
            rdl: reservation.expr.to_string(),
            admitted_at_ms: reservation.admitted_ms,
            anchor_ms: reservation.anchor_ms,
            start_ms: span.map(|(start, _)| start),
            end_ms: span.map(|(_, end)| end),
            phase,
            guaranteed_now: self.plan.guaranteed_at(reservation.id, now_ms),
            allocation: if with_allocation {
                allocation_steps(reservation, |q| quanta.start_ms(q))
            } else {
                Vec::new()
            },
        })
    }

    /// Where each accepted reservation is in its life at `now_ms`.
    pub fn phases(&self, now_ms: UnixMillis) -> impl Iterator<Item = ReservationPhase> + '_ {
        self.plan
            .reservations()
            .map(move |reservation| phase_at(self.span_ms(reservation), now_ms))
    }

    /// The wall-clock span of `reservation`'s allocations.
    fn span_ms(&self, reservation: &Reservation) -> Option<(UnixMillis, UnixMillis)> {
        let quanta = self.plan.quanta();
        reservation
            .span()
            .map(|(start, end)| (quanta.start_ms(start), quanta.start_ms(end)))
    }

    /// Every accepted reservation whose name comes after `after` (all when `None`), by name,
    /// without allocations, as read at `now_ms`.
    pub fn infos_after<'a>(
        &'a self,
        after: Option<&'a str>,
        now_ms: UnixMillis,
    ) -> impl Iterator<Item = (String, ReservationInfo)> + 'a {
        self.owned_infos_after(None, after, now_ms)
    }

    /// [`Reservations::infos_after`], only `owner`'s when given (others are skipped before
    /// their view is built).
    pub fn owned_infos_after<'a>(
        &'a self,
        owner: Option<&'a str>,
        after: Option<&'a str>,
        now_ms: UnixMillis,
    ) -> impl Iterator<Item = (String, ReservationInfo)> + 'a {
        let start = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        self.names
            .range::<str, _>((start, std::ops::Bound::Unbounded))
            .filter(move |(_, id)| {
                owner.is_none_or(|owner| {
                    self.plan
                        .reservation(**id)
                        .is_some_and(|reservation| reservation.user == owner)
                })
            })
            .filter_map(move |(name, _)| Some((name.clone(), self.info(name, now_ms, false)?)))
    }

    /// The rejected reservations as clients read them, oldest first.
    pub fn rejected_infos(&self) -> Vec<RejectedReservationInfo> {
        self.rejected
            .iter()
            .map(|rejected| RejectedReservationInfo {
                name: rejected.name.clone(),
                owner: rejected.reservation.user.clone(),
                rdl: rejected.reservation.expr.to_string(),
                reason: rejected.reason.clone(),
                rejected_at_ms: rejected.rejected_at_ms,
            })
            .collect()
    }

    /// Tells the plan that the live agents' capacity is now `capacity` from `at_ms` on: a
    /// gain counts from the next quantum, a loss re-plans what no longer fits (Rayon §5.2's
    /// adapter) and records what it rejected. Returns the names rejected.
    pub(super) fn follow_capacity(
        &mut self,
        capacity: ResourceVec,
        at_ms: UnixMillis,
    ) -> Vec<String> {
        // The plan's time never goes back: a new leader whose clock is behind the last one's
        // changes capacity from the last change on. Otherwise an agent gained at the old
        // leader's time and lost at the new leader's earlier one would be lost before it was
        // gained, and the plan's capacity would go below zero in between (found by the
        // whole-system simulation's plan invariant, seed 9).
        let at_ms = at_ms.max(self.followed_at_ms);
        self.followed_at_ms = at_ms;
        let gain = capacity.saturating_sub(&self.followed_capacity);
        let loss = self.followed_capacity.saturating_sub(&capacity);
        self.followed_capacity = capacity;
        if !gain.is_zero() {
            self.plan
                .change_capacity(at_ms, CapacityChange::Gain(gain), at_ms);
        }
        if loss.is_zero() {
            return Vec::new();
        }
        let replanned = self
            .plan
            .change_capacity(at_ms, CapacityChange::Loss(loss), at_ms);
        let mut names = Vec::with_capacity(replanned.rejected.len());
        for (reservation, refusal) in replanned.rejected {
            let Some(name) = self.name_of(reservation.id).map(str::to_string) else {
                continue;
            };
            self.names.remove(&name);
            names.push(name.clone());
            self.rejected_total += 1;
            self.rejected.push(RejectedReservation {
                name,
                reservation,
                reason: refusal.to_string(),
                rejected_at_ms: at_ms,
            });
        }
        let excess = self.rejected.len().saturating_sub(MAX_REJECTED_KEPT);
        self.rejected.drain(..excess);
        names
    }

    /// Forgets the plan's past before `at_ms` (so that it does not grow with time) and returns
    /// the reservations whose time is over, by name, with their end; their names are free
    /// again. The caller judges them ([`Reservations::close`]).
    pub(super) fn forget_before(&mut self, at_ms: UnixMillis) -> Vec<(String, Reservation, u64)> {
        let quanta = self.plan.quanta();
        let mut over = Vec::new();
        for reservation in self.plan.forget_before(at_ms) {
            let Some(name) = self.name_of(reservation.id).map(str::to_string) else {
                continue;
            };
            self.names.remove(&name);
            let end_ms = reservation
                .span()
                .map_or(reservation.anchor_ms, |(_, end)| quanta.start_ms(end));
            over.push((name, reservation, end_ms));
        }
        over
    }

    /// Records a reservation whose time is over and how it went.
    pub(super) fn close(&mut self, closed: ClosedReservation) {
        match closed.outcome {
            ReservationOutcome::Fulfilled => self.fulfilled_total += 1,
            ReservationOutcome::Late => self.late_total += 1,
            ReservationOutcome::Unused => self.unused_total += 1,
        }
        self.closed.push(closed);
        let excess = self.closed.len().saturating_sub(MAX_CLOSED_KEPT);
        self.closed.drain(..excess);
    }
}

/// Turns the plan's refusal of `name` into the command's error.
fn refused(name: &str) -> impl FnOnce(Refusal) -> CommandError + '_ {
    move |refusal| CommandError::ReservationRefused {
        name: name.to_string(),
        refusal,
    }
}

fn check_name(name: &str) -> Result<(), CommandError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_RESERVATION_NAME_BYTES
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(CommandError::InvalidReservationName(name.to_string()))
    }
}

/// Where a reservation whose allocations span `span` is in its life at `now_ms`.
fn phase_at(span: Option<(UnixMillis, UnixMillis)>, now_ms: UnixMillis) -> ReservationPhase {
    match span {
        Some((start, _)) if now_ms < start => ReservationPhase::Planned,
        Some((_, end)) if now_ms < end => ReservationPhase::Active,
        _ => ReservationPhase::Ended,
    }
}

/// What `reservation` holds over time, as maximal spans of one amount, in time order; `at_ms`
/// turns a quantum into wall-clock milliseconds.
fn allocation_steps(reservation: &Reservation, at_ms: impl Fn(u64) -> u64) -> Vec<AllocationStep> {
    let pieces = reservation.allocations.iter().flat_map(|a| &a.pieces);
    let mut bounds: Vec<u64> = pieces.flat_map(|p| [p.start, p.end]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut steps: Vec<AllocationStep> = Vec::new();
    for pair in bounds.windows(2) {
        let (start, end) = (pair[0], pair[1]);
        let held = reservation.held_at(start);
        if held.is_zero() {
            continue;
        }
        match steps.last_mut() {
            Some(last) if last.end_ms == at_ms(start) && last.resources == held => {
                last.end_ms = at_ms(end);
            }
            _ => steps.push(AllocationStep {
                start_ms: at_ms(start),
                end_ms: at_ms(end),
                resources: held,
            }),
        }
    }
    steps
}
