//! The plan (Rayon §4–§5.2): the cluster's capacity over future time and the allocations of
//! every accepted reservation, in time quanta, with admission (all or nothing), update and
//! deletion.
//!
//! The plan reads no clock: every call that depends on the time takes `now_ms`, a wall-clock
//! reading in milliseconds (`fullerene_proto::time::Now::wall_ms` in the master), and the plan's
//! quanta count from the origin it was created with ([`Quanta`]).
//!
//! Its serde form is its configuration, its capacity's runs and its reservations with their
//! pieces; what the reservations use in all is rebuilt from their pieces when it is decoded, so
//! the replicated state never holds two copies that could disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use fullerene_scheduling::ResourceVec;
use serde::{Deserialize, Serialize};

use crate::placement::{self, PolicyKind};
use crate::rdl::{format_duration_ms, validate, Expr, Limits, ValidationError};
use crate::sharing::{SharingPolicy, SharingRefusal};
use crate::steps::StepFunction;

/// A reservation's id, chosen by whoever submits it (the master's state machine numbers them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReservationId(pub u64);

impl fmt::Display for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Wall-clock milliseconds to quanta and back: quantum `q` is
/// `[origin_ms + q × quantum_ms, origin_ms + (q + 1) × quantum_ms)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quanta {
    /// The wall-clock time of quantum 0, in milliseconds.
    pub origin_ms: u64,
    /// A quantum's length in milliseconds (at least 1).
    pub quantum_ms: u64,
}

impl Quanta {
    /// The first quantum that starts at or after `ms` (0 before the origin).
    pub fn first_at_or_after(&self, ms: u64) -> u64 {
        ms.saturating_sub(self.origin_ms).div_ceil(self.quantum_ms)
    }

    /// The quantum `ms` falls in (0 before the origin).
    pub fn containing(&self, ms: u64) -> u64 {
        ms.saturating_sub(self.origin_ms) / self.quantum_ms
    }

    /// The wall-clock time quantum `q` starts at.
    pub fn start_ms(&self, q: u64) -> u64 {
        self.origin_ms
            .saturating_add(q.saturating_mul(self.quantum_ms))
    }
}

/// How a plan is set up: set by the operator, replicated with the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanConfig {
    /// The wall-clock time of quantum 0, in milliseconds.
    pub origin_ms: u64,
    /// The quantum, the horizon and the size limits of a request.
    pub limits: Limits,
    /// The placement policy for the whole cluster.
    pub policy: PolicyKind,
    /// The per-user caps (Rayon §5.2).
    pub sharing: SharingPolicy,
}

impl PlanConfig {
    /// A plan from `origin_ms` with the default limits (one-minute quanta, 30 days ahead),
    /// `policy` and no sharing caps.
    pub fn new(origin_ms: u64, policy: PolicyKind) -> PlanConfig {
        PlanConfig {
            origin_ms,
            limits: Limits::default(),
            policy,
            sharing: SharingPolicy::default(),
        }
    }
}

/// The shortest quantum a plan may have: the plan follower runs about once a second, and
/// quanta much shorter than that only multiply the plan's runs.
pub const MIN_QUANTUM_MS: u64 = 100;

/// Why a plan's quantum cannot change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequantizeError {
    /// Accepted reservations are placed in whole quanta of the current quantum.
    #[error(
        "the plan's quantum can change only while it holds no reservation, and {accepted} are \
         accepted: delete them, or wait until their time is over"
    )]
    NotEmpty {
        /// Reservations in the plan.
        accepted: usize,
    },
    /// Too short, or longer than the horizon.
    #[error("a quantum of {quantum_ms} ms: it must be between {MIN_QUANTUM_MS} ms and the plan's horizon ({horizon_ms} ms)")]
    OutOfRange {
        /// The quantum asked for.
        quantum_ms: u64,
        /// The plan's horizon.
        horizon_ms: u64,
    },
}

/// A run of quanta `[start, end)` over which an atom holds `bundles` bundles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// The first quantum.
    pub start: u64,
    /// The quantum after the last.
    pub end: u64,
    /// How many bundles.
    pub bundles: u32,
}

/// Which atom of a request an allocation is for: its number in pre-order among the atoms as
/// written ([`Expr::atoms`]) and, under `repeat`, which occurrence (numbered across nested
/// repeats, the outer one most significant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AtomRef {
    /// The atom's index in [`Expr::atoms`].
    pub atom: u32,
    /// The occurrence (0 outside `repeat`).
    pub occurrence: u32,
}

impl fmt::Display for AtomRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "atom #{}", self.atom)?;
        if self.occurrence > 0 {
            write!(f, " (occurrence {})", self.occurrence)?;
        }
        Ok(())
    }
}

/// What one atom of a reservation holds: its bundle, and pieces of it over time. Pieces may
/// overlap (GREE stacks them); their sum at any quantum is 0 or within `[g, h]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtomAllocation {
    /// The atom.
    pub atom: AtomRef,
    /// Its bundle.
    pub bundle: ResourceVec,
    /// The pieces, in no particular order.
    pub pieces: Vec<Piece>,
}

impl AtomAllocation {
    /// Its bundle-quanta before quantum `t`.
    pub fn work_before(&self, t: u64) -> u64 {
        self.pieces
            .iter()
            .map(|p| u64::from(p.bundles) * p.end.min(t).saturating_sub(p.start))
            .sum()
    }

    /// The bundles held at quantum `t`.
    pub fn bundles_at(&self, t: u64) -> u64 {
        self.pieces
            .iter()
            .filter(|p| p.start <= t && t < p.end)
            .map(|p| u64::from(p.bundles))
            .sum()
    }
}

/// An accepted reservation: its request and where the plan put it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// Its id.
    pub id: ReservationId,
    /// Who asked for it (the sharing policy's user: the principal).
    pub user: String,
    /// What was asked.
    pub expr: Expr,
    /// When it was asked: its windows are offsets from this time, in wall-clock milliseconds.
    pub anchor_ms: u64,
    /// When it was last admitted (created or updated; a move by the adapter keeps it): the
    /// adapter rejects the youngest first.
    pub admitted_ms: u64,
    /// What each atom holds.
    pub allocations: Vec<AtomAllocation>,
    /// What its atoms held in quanta the plan has forgotten ([`Plan::forget_before`]), by atom:
    /// the adapter credits it, with the pieces before now, when it places the reservation again.
    pub delivered: Vec<Delivered>,
}

/// Work an atom held in quanta the plan has forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The atom.
    pub atom: AtomRef,
    /// Its bundle-quanta in those quanta.
    pub work: u64,
}

impl Reservation {
    /// What the reservation holds at quantum `t`.
    pub fn held_at(&self, t: u64) -> ResourceVec {
        self.held_for_atoms_left(t, &BTreeSet::new())
    }

    /// What the reservation holds at quantum `t` for its atoms not in `finished` (their
    /// numbers in [`Expr::atoms`]' pre-order): the allocations of the atoms its jobs still have
    /// to run.
    pub fn held_for_atoms_left(&self, t: u64, finished: &BTreeSet<u32>) -> ResourceVec {
        self.allocations
            .iter()
            .filter(|a| !finished.contains(&a.atom.atom))
            .fold(ResourceVec::ZERO, |sum, a| {
                sum + a.bundle.scale(a.bundles_at(t) as f64)
            })
    }

    /// The bundles of its atoms not in `finished` that hold some allocation at quantum `t` or
    /// later: the stages its jobs run now or ahead of the plan. A bundle left out is of stages
    /// whose allocations have all passed, which its jobs can only be running behind the plan.
    pub fn bundles_allocated_from(&self, t: u64, finished: &BTreeSet<u32>) -> Vec<ResourceVec> {
        let mut bundles: Vec<ResourceVec> = Vec::new();
        for allocation in self
            .allocations
            .iter()
            .filter(|a| !finished.contains(&a.atom.atom))
        {
            if allocation.pieces.iter().any(|p| p.end > t) && !bundles.contains(&allocation.bundle)
            {
                bundles.push(allocation.bundle);
            }
        }
        bundles
    }

    /// [`Reservation::held_for_atoms_left`] bundle by bundle: how many of each bundle its
    /// atoms hold at quantum `t`, atoms with equal bundles (stages of one demand) together, in
    /// the order of their first atom; bundles held by none are left out.
    pub fn bundles_for_atoms_left(
        &self,
        t: u64,
        finished: &BTreeSet<u32>,
    ) -> Vec<(ResourceVec, u64)> {
        let mut held: Vec<(ResourceVec, u64)> = Vec::new();
        for allocation in self
            .allocations
            .iter()
            .filter(|a| !finished.contains(&a.atom.atom))
        {
            let bundles = allocation.bundles_at(t);
            if bundles == 0 {
                continue;
            }
            match held
                .iter_mut()
                .find(|(bundle, _)| *bundle == allocation.bundle)
            {
                Some((_, count)) => *count += bundles,
                None => held.push((allocation.bundle, bundles)),
            }
        }
        held
    }

    /// What each atom was allocated before quantum `t`, in bundle-quanta: in the quanta the plan
    /// has forgotten and in its pieces before `t`. Atoms allocated nothing are left out.
    pub fn allocated_before(&self, t: u64) -> BTreeMap<AtomRef, u64> {
        let mut allocated: BTreeMap<AtomRef, u64> = BTreeMap::new();
        for delivered in &self.delivered {
            *allocated.entry(delivered.atom).or_default() += delivered.work;
        }
        for allocation in &self.allocations {
            let before = allocation.work_before(t);
            if before > 0 {
                *allocated.entry(allocation.atom).or_default() += before;
            }
        }
        allocated
    }

    /// The first and last-plus-one quanta of its pieces (`None` without pieces).
    pub fn span(&self) -> Option<(u64, u64)> {
        let pieces = self.allocations.iter().flat_map(|a| &a.pieces);
        let start = pieces.clone().map(|p| p.start).min()?;
        let end = pieces.map(|p| p.end).max()?;
        Some((start, end))
    }
}

/// A request to reserve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReservationRequest {
    /// The id it will have.
    pub id: ReservationId,
    /// Who asks.
    pub user: String,
    /// What is asked.
    pub expr: Expr,
}

/// An atom that found no room: which, where, and how much of its work was left.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shortfall {
    /// The atom.
    pub atom: AtomRef,
    /// Its bundle.
    pub bundle: ResourceVec,
    /// Its gang g.
    pub gang: u32,
    /// Its parallelism h.
    pub max_parallel: u32,
    /// The interval it was tried in, `[start, end)` in milliseconds after the request was asked
    /// (what its windows count from).
    pub window_ms: (u64, u64),
    /// Its work in bundle-milliseconds.
    pub work_ms: u64,
    /// The part of the work that found no room, in bundle-milliseconds.
    pub short_ms: u64,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}; g={}, h={}) found no room for {} of its {} bundle-time between {} and {} \
             after the request",
            self.atom,
            self.bundle,
            self.gang,
            self.max_parallel,
            format_duration_ms(self.short_ms),
            format_duration_ms(self.work_ms),
            format_duration_ms(self.window_ms.0),
            format_duration_ms(self.window_ms.1)
        )
    }
}

/// Why a reservation was not accepted (or updated).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The request breaks a rule of RDL or a limit of the plan.
    #[error("invalid request: {0}")]
    Invalid(#[from] ValidationError),
    /// The id is taken.
    #[error("reservation {0} exists already")]
    Duplicate(ReservationId),
    /// No reservation has this id.
    #[error("no reservation {0}")]
    Unknown(ReservationId),
    /// The plan has no room: the first atom that did not fit (under `any`, the first
    /// alternative's).
    #[error("no room: {0}")]
    NoRoom(Shortfall),
    /// The user's caps (Rayon §5.2).
    #[error("sharing policy: {0}")]
    Sharing(#[from] SharingRefusal),
}

/// What the adapter did after a loss of capacity (Rayon §5.2).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replanned {
    /// Reservations placed again, oldest first.
    pub moved: Vec<ReservationId>,
    /// Reservations that no longer fit and were removed, with the reason.
    pub rejected: Vec<(Reservation, Refusal)>,
}

/// A change of the cluster's capacity from a time on (an agent added, lost or drained).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CapacityChange {
    /// This much more from then on.
    Gain(ResourceVec),
    /// This much less from then on.
    Loss(ResourceVec),
}

/// The plan: capacity over future time and every accepted reservation's allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "PlanRecord", into = "PlanRecord")]
pub struct Plan {
    config: PlanConfig,
    capacity: StepFunction,
    reservations: BTreeMap<ReservationId, Reservation>,
    /// The sum of every reservation's pieces, kept with them (derived: not serialised).
    used: StepFunction,
}

/// The serde form of a [`Plan`].
#[derive(Serialize, Deserialize)]
struct PlanRecord {
    config: PlanConfig,
    capacity: StepFunction,
    reservations: Vec<Reservation>,
}

impl From<PlanRecord> for Plan {
    fn from(record: PlanRecord) -> Plan {
        let mut plan = Plan {
            config: record.config,
            capacity: record.capacity,
            reservations: BTreeMap::new(),
            used: StepFunction::new(),
        };
        for reservation in record.reservations {
            plan.insert(reservation);
        }
        plan
    }
}

impl From<Plan> for PlanRecord {
    fn from(plan: Plan) -> PlanRecord {
        PlanRecord {
            config: plan.config,
            capacity: plan.capacity,
            reservations: plan.reservations.into_values().collect(),
        }
    }
}

impl Plan {
    /// An empty plan of a cluster with `capacity` from its origin on.
    pub fn new(config: PlanConfig, capacity: ResourceVec) -> Plan {
        Plan {
            config,
            capacity: StepFunction::constant(capacity),
            reservations: BTreeMap::new(),
            used: StepFunction::new(),
        }
    }

    /// The plan's configuration.
    pub fn config(&self) -> &PlanConfig {
        &self.config
    }

    /// Changes the placement policy and the sharing caps (for later admissions: what is
    /// accepted stays).
    pub fn reconfigure(&mut self, policy: PolicyKind, sharing: SharingPolicy) {
        self.config.policy = policy;
        self.config.sharing = sharing;
    }

    /// Changes the plan's quantum to `quantum_ms`, which only an empty plan may do: the
    /// allocations of accepted reservations are in whole quanta of the old one. The capacity
    /// becomes what the plan holds from now on (the last change, a gain pending in the current
    /// quantum included) at every quantum of the new size.
    ///
    /// # Errors
    ///
    /// [`RequantizeError`] when reservations are accepted or the quantum is outside
    /// [`MIN_QUANTUM_MS`] to the plan's horizon.
    pub fn requantize(&mut self, quantum_ms: u64) -> Result<(), RequantizeError> {
        if quantum_ms == self.config.limits.quantum_ms {
            return Ok(());
        }
        if quantum_ms < MIN_QUANTUM_MS || quantum_ms > self.config.limits.horizon_ms {
            return Err(RequantizeError::OutOfRange {
                quantum_ms,
                horizon_ms: self.config.limits.horizon_ms,
            });
        }
        if !self.reservations.is_empty() {
            return Err(RequantizeError::NotEmpty {
                accepted: self.reservations.len(),
            });
        }
        let from_now_on = self.capacity.last_value().unwrap_or(ResourceVec::ZERO);
        self.capacity = StepFunction::constant(from_now_on);
        self.used = StepFunction::new();
        self.config.limits.quantum_ms = quantum_ms;
        Ok(())
    }

    /// The plan's time quanta.
    pub fn quanta(&self) -> Quanta {
        Quanta {
            origin_ms: self.config.origin_ms,
            quantum_ms: self.config.limits.quantum_ms.max(1),
        }
    }

    /// The capacity over time.
    pub fn capacity(&self) -> &StepFunction {
        &self.capacity
    }

    /// What the reservations hold over time, in all.
    pub fn used(&self) -> &StepFunction {
        &self.used
    }

    /// The accepted reservations, by id.
    pub fn reservations(&self) -> impl Iterator<Item = &Reservation> + '_ {
        self.reservations.values()
    }

    /// One reservation.
    pub fn reservation(&self, id: ReservationId) -> Option<&Reservation> {
        self.reservations.get(&id)
    }

    /// What reservation `id` is guaranteed at wall-clock time `at_ms` (zero when unknown or
    /// idle then): what the plan follower turns into a share of the offers.
    pub fn guaranteed_at(&self, id: ReservationId, at_ms: u64) -> ResourceVec {
        self.guaranteed_for_atoms_left(id, at_ms, &BTreeSet::new())
    }

    /// What reservation `id` is guaranteed at `at_ms` for the atoms its jobs have not
    /// finished ([`Reservation::held_for_atoms_left`]).
    pub fn guaranteed_for_atoms_left(
        &self,
        id: ReservationId,
        at_ms: u64,
        finished: &BTreeSet<u32>,
    ) -> ResourceVec {
        let t = self.quanta().containing(at_ms);
        self.reservations
            .get(&id)
            .map_or(ResourceVec::ZERO, |r| r.held_for_atoms_left(t, finished))
    }

    /// [`Reservation::bundles_allocated_from`] for reservation `id` at `at_ms`.
    pub fn bundles_allocated_from(
        &self,
        id: ReservationId,
        at_ms: u64,
        finished: &BTreeSet<u32>,
    ) -> Vec<ResourceVec> {
        let t = self.quanta().containing(at_ms);
        self.reservations
            .get(&id)
            .map_or_else(Vec::new, |r| r.bundles_allocated_from(t, finished))
    }

    /// [`Plan::guaranteed_for_atoms_left`] bundle by bundle
    /// ([`Reservation::bundles_for_atoms_left`]).
    pub fn guaranteed_bundles_for_atoms_left(
        &self,
        id: ReservationId,
        at_ms: u64,
        finished: &BTreeSet<u32>,
    ) -> Vec<(ResourceVec, u64)> {
        let t = self.quanta().containing(at_ms);
        self.reservations
            .get(&id)
            .map_or_else(Vec::new, |r| r.bundles_for_atoms_left(t, finished))
    }

    /// Where `expr`, asked at `anchor_ms`, would go now, without changing the plan: the
    /// placement policy's answer, before the sharing policy.
    ///
    /// # Errors
    ///
    /// [`Refusal::Invalid`] or [`Refusal::NoRoom`].
    pub fn place(
        &self,
        expr: &Expr,
        anchor_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<AtomAllocation>, Refusal> {
        self.place_rest(expr, anchor_ms, now_ms, &BTreeMap::new())
    }

    /// Where what `expr` still needs would go now, once each atom in `allocated` was allocated
    /// that many bundle-quanta before now (see [`crate::placement`]: the adapter's re-planning
    /// of a reservation in progress).
    pub(crate) fn place_rest(
        &self,
        expr: &Expr,
        anchor_ms: u64,
        now_ms: u64,
        allocated: &BTreeMap<AtomRef, u64>,
    ) -> Result<Vec<AtomAllocation>, Refusal> {
        validate(expr, &self.config.limits)?;
        placement::place(self, expr, anchor_ms, now_ms, allocated).map_err(Refusal::NoRoom)
    }

    /// Admits a reservation asked at `now_ms` if it can be placed in full and the user's caps
    /// allow it (Rayon §5.1 steps 2–4); otherwise the plan is left as it was.
    ///
    /// # Errors
    ///
    /// Why it was refused.
    pub fn admit(
        &mut self,
        request: ReservationRequest,
        now_ms: u64,
    ) -> Result<&Reservation, Refusal> {
        if self.reservations.contains_key(&request.id) {
            return Err(Refusal::Duplicate(request.id));
        }
        let allocations = self.place(&request.expr, now_ms, now_ms)?;
        self.config
            .sharing
            .check(self, &request.user, &allocations, None, now_ms)?;
        let id = request.id;
        self.insert(Reservation {
            id,
            user: request.user,
            expr: request.expr,
            anchor_ms: now_ms,
            admitted_ms: now_ms,
            allocations,
            delivered: Vec::new(),
        });
        Ok(&self.reservations[&id])
    }

    /// Replaces reservation `id`'s request with `expr` asked at `now_ms` (Rayon's `updateRes`):
    /// the old allocation is removed and the new request placed; if it does not fit, or the
    /// caps refuse it, the old allocation stays as it was.
    ///
    /// # Errors
    ///
    /// [`Refusal::Unknown`], or why the new request was refused.
    pub fn update(
        &mut self,
        id: ReservationId,
        expr: Expr,
        now_ms: u64,
    ) -> Result<&Reservation, Refusal> {
        // Kept to restore bit for bit: adding the old pieces back could round differently.
        let used_before = self.used.clone();
        let old = self.remove(id).ok_or(Refusal::Unknown(id))?;
        let placed = self.place(&expr, now_ms, now_ms).and_then(|allocations| {
            self.config
                .sharing
                .check(self, &old.user, &allocations, Some(id), now_ms)?;
            Ok(allocations)
        });
        match placed {
            Ok(allocations) => {
                self.insert(Reservation {
                    id,
                    user: old.user,
                    expr,
                    anchor_ms: now_ms,
                    admitted_ms: now_ms,
                    allocations,
                    // A new request: what the old one was allocated is not credited to it.
                    delivered: Vec::new(),
                });
                Ok(&self.reservations[&id])
            }
            Err(refusal) => {
                self.reservations.insert(id, old);
                self.used = used_before;
                Err(refusal)
            }
        }
    }

    /// Removes reservation `id` (Rayon's `deleteRes`) and returns it.
    pub fn delete(&mut self, id: ReservationId) -> Option<Reservation> {
        self.remove(id)
    }

    /// The ids of `user`'s reservations (Rayon's `listRes`).
    pub fn list(&self, user: &str) -> Vec<ReservationId> {
        self.reservations
            .values()
            .filter(|r| r.user == user)
            .map(|r| r.id)
            .collect()
    }

    /// Changes the capacity from `from_ms` on; after a loss, re-plans what no longer fits
    /// (the adapter, Rayon §5.2; see [`crate::adapter`]).
    pub fn change_capacity(
        &mut self,
        from_ms: u64,
        change: CapacityChange,
        now_ms: u64,
    ) -> Replanned {
        let quanta = self.quanta();
        match change {
            CapacityChange::Gain(more) => {
                // A gain counts from the first whole quantum that has it.
                self.capacity
                    .add(quanta.first_at_or_after(from_ms), None, more);
                Replanned::default()
            }
            CapacityChange::Loss(less) => {
                // A loss counts from the quantum it happens in, but first takes back what was
                // gained in that quantum and counts only from the next: capacity the plan never
                // had there cannot be lost there (it went below zero when an agent came and
                // went within one quantum, found by the chaos runs' plan invariant).
                let from = quanta.containing(from_ms);
                let pending = self
                    .capacity
                    .at(from + 1)
                    .saturating_sub(&self.capacity.at(from));
                let of_pending = less.min(&pending);
                let of_current = less.saturating_sub(&of_pending);
                self.capacity.sub(from + 1, None, of_pending);
                self.capacity.sub(from, None, of_current);
                // All of it taken back from what was gained in this quantum: the capacity is
                // lower from the next one only.
                let lost_from = if of_current.is_zero() { from + 1 } else { from };
                crate::adapter::replan(self, lost_from, now_ms)
            }
        }
    }

    /// Forgets the past before `now_ms`, so that the plan in the replicated state does not grow
    /// with time: reservations whose pieces all ended are removed and returned (their time is
    /// over: fulfilled, as far as the plan knows), the others lose their pieces' past quanta
    /// (what the atoms held there is kept in sum, [`Reservation::delivered`]), and capacity and
    /// use keep no run before now's quantum.
    pub fn forget_before(&mut self, now_ms: u64) -> Vec<Reservation> {
        let now = self.quanta().containing(now_ms);
        let ended: Vec<ReservationId> = self
            .reservations
            .values()
            .filter(|r| r.span().is_none_or(|(_, end)| end <= now))
            .map(|r| r.id)
            .collect();
        let forgotten = ended.into_iter().filter_map(|id| self.remove(id)).collect();
        for reservation in self.reservations.values_mut() {
            for allocation in &mut reservation.allocations {
                add_delivered(
                    &mut reservation.delivered,
                    allocation.atom,
                    allocation.work_before(now),
                );
                allocation.pieces.retain(|p| p.end > now);
                for piece in &mut allocation.pieces {
                    piece.start = piece.start.max(now);
                }
            }
        }
        self.capacity.forget_before(now);
        self.used.forget_before(now);
        forgotten
    }

    /// Adds a reservation's pieces to what is used and keeps it.
    pub(crate) fn insert(&mut self, reservation: Reservation) {
        for (start, end, amount) in held_runs(&reservation.allocations) {
            self.used.add(start, Some(end), amount);
        }
        self.reservations.insert(reservation.id, reservation);
    }

    /// Removes a reservation and its pieces from what is used.
    pub(crate) fn remove(&mut self, id: ReservationId) -> Option<Reservation> {
        let reservation = self.reservations.remove(&id)?;
        for (start, end, amount) in held_runs(&reservation.allocations) {
            self.used.sub(start, Some(end), amount);
        }
        Some(reservation)
    }
}

/// Adds `work` bundle-quanta of `atom` to what `delivered` keeps in sum.
fn add_delivered(delivered: &mut Vec<Delivered>, atom: AtomRef, work: u64) {
    if work == 0 {
        return;
    }
    match delivered.iter_mut().find(|d| d.atom == atom) {
        Some(kept) => kept.work += work,
        None => delivered.push(Delivered { atom, work }),
    }
}

/// Every piece of `allocations` as the resources it holds: `(start, end, bundle × bundles)`.
pub(crate) fn held_runs(
    allocations: &[AtomAllocation],
) -> impl Iterator<Item = (u64, u64, ResourceVec)> + '_ {
    allocations.iter().flat_map(|a| {
        a.pieces
            .iter()
            .map(move |p| (p.start, p.end, a.bundle.scale(f64::from(p.bundles))))
    })
}
