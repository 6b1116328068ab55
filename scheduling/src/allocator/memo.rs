//! Memoized picks across identical agents: a cycle that fills thousands of agents with the same
//! total and free resources (a cluster starting, a new leader after a failover, agents freed by
//! a finished job) scans the candidates once for the first of them and replays the picks for
//! the others, without changing a single decision.
//!
//! # Why a replayed pick is the pick the scan would make
//!
//! Under the deficit counters (and Tetris, which ranks the same way without the gate) a pick is
//! the best perfScore over the live candidates, computed from what the agent's state fixes (its
//! total, what is left of it, and so its packing weights and overbooking room; its exclusions,
//! and so which groups the κ·C gate counts) and from per-cycle constants (η or ε, the
//! priScores, the frameworks' srpt and remaining work, the runnable groups, the demanding
//! frameworks). Within a cycle the candidates only disappear: projected counts only fall, so a
//! shape, a framework or a list entry, once gone, stays gone, and a framework's list key and
//! envelope only fall with its shapes. A choice computed for an agent state at one moment is
//! therefore the scan's choice for the same state at any later moment of the cycle when:
//!
//! 1. its framework and shape still have projected work (the candidate still exists);
//! 2. it beat every candidate it was compared with by more than [`TIE_TOLERANCE`]: the other
//!    candidates are a subset of those, and their scores at the same state are the same numbers
//!    (or were dismissed by bounds that still hold), so no tie-breaking order (groups by
//!    projected deficit, which moves with every pick; list order; registration) is ever
//!    consulted. A choice that won by less (a tie, or a near tie within the rounding of the
//!    bounds) is not replayed;
//! 3. its own bounds (list key and envelope score, which fall when its other shapes run out)
//!    are still above every rival's score, so no scan would dismiss it before scoring it;
//! 4. the κ·C gate lets through a subset of the groups it let through then, the chosen group
//!    among them: open then and open now, open then and closed now to the chosen framework's
//!    group, or closed then and now to the same group. The gate moves with every pick (the
//!    projected deficits do), so it is checked again for every replayed pick. A state that had
//!    no candidate then has none under a gate that lets through a subset.
//!
//! Fitting shapes beat overbooking ones lexicographically, and a state where nothing fitted
//! then has nothing that fits now, so the mode of the choice does not change either.
//!
//! The task charged for a pick is not always the shape that won: it is the framework's first
//! fitting shape in summary order (module `matching`). That one is recomputed for every pick;
//! shapes before it in the summary had no work or did not fit then and cannot now, so it is the
//! same task unless its own shape ran out. What is left of the agent after a pick is what was
//! left before minus the task charged, so a trace of picks is keyed by the agent's starting
//! state (total, free resources bit for bit, excluded frameworks), and a later agent follows it
//! as long as each pick charges the same demand. Where a pick fails a check it is computed
//! (and recorded in the trace) and, when its charge differs, the rest of the agent too: the
//! trace then follows the newest agent.
//!
//! A pick's observation for η or ε ([`EtaRule::ChosenCandidates`]) is the chosen shape's
//! packing score and its framework's work, both fixed by the choice and the state, so replayed
//! picks observe the same. η (or ε) itself is fixed for the cycle.
//!
//! # Where it does not apply
//!
//! DRF, the capacity scheduler, FIFO and SJF are not memoized. DRF's order moves with every
//! pick (the picked framework's and group's shares grow, and the next agent's first choice is
//! someone else), and the capacity scheduler's queue order and room move the same way. FIFO and
//! SJF are first-fit scans over an order that never changes within a cycle, which stop at the
//! first candidate that fits: their cost is not in the scan.
//!
//! A trace lives as long as the candidate index it was computed against (one cycle's planning
//! of a shard, the in-place cycle, or a commit's rematches): a new cycle starts from the
//! frameworks' summaries again, where counts may have grown.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::policies::{envelope_bound, AgentView, Choice, CycleIndex, Exclusions};
use super::*;
use crate::scoring::PerfScore;

/// How far, relative to the scores' magnitudes, a choice must beat every rival to be replayed.
/// Far above the rounding of the scores and bounds (a few units in the last place of numbers
/// of the order of the packing terms and η·srpt), far below any difference that decides
/// between two distinct candidates in practice.
const TIE_TOLERANCE: f64 = 1e-9;

/// Which groups' frameworks a choice was made among.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GateFilter {
    /// Every group the gate counts for the agent (the κ·C gate open, or not under the deficit
    /// counters).
    Open,
    /// Only this group's: the κ·C gate closed to every other.
    Closed(GroupIdx),
}

/// The best score, or score bound, of the candidates a scan passed over on its way to a choice:
/// what the choice must beat by the tolerance to be replayed.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Rivals(Option<PerfScore>);

impl Rivals {
    /// Records a candidate's score, or a bound of the scores of the candidates it dismissed.
    #[inline]
    pub(super) fn note(&mut self, score: PerfScore) {
        if self.0.is_none_or(|best| score.beats(&best)) {
            self.0 = Some(score);
        }
    }
}

/// An agent's starting state, bit for bit: the state a trace of picks starts from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MemoKey {
    total: [u64; NUM_RESOURCES],
    free: [u64; NUM_RESOURCES],
    /// Its excluded frameworks, sorted, without repeats.
    excluded: Vec<FrameworkIdx>,
}

impl MemoKey {
    fn new(free: &ResourceVec, total: &ResourceVec, exclusions: &Exclusions) -> MemoKey {
        let mut excluded = exclusions.frameworks().to_vec();
        excluded.sort_unstable();
        excluded.dedup();
        MemoKey {
            total: bits(total),
            free: bits(free),
            excluded,
        }
    }
}

fn bits(amounts: &ResourceVec) -> [u64; NUM_RESOURCES] {
    amounts.0.map(f64::to_bits)
}

/// One pick of a trace, as computed for the state the trace reached before it.
#[derive(Clone, Debug)]
struct Step {
    /// The policy's choice (`None`: nothing for the agent).
    choice: Option<Choice>,
    /// The groups it was made among.
    gate: GateFilter,
    /// Whether it beat every rival by the tolerance (may be replayed).
    certified: bool,
    /// The demand charged for it (bits), `None` when the agent took nothing more.
    charged: Option<[u64; NUM_RESOURCES]>,
}

/// The traces of picks of one candidate index, by starting state. A state seen once has no
/// trace yet (`None`): most agents with used resources are alike in no other agent, and
/// recording their picks would be work for nothing.
#[derive(Clone, Debug, Default)]
pub(super) struct PickMemo {
    traces: HashMap<MemoKey, Option<Vec<Step>>, BuildHasherDefault<KeyHasher>>,
}

impl PickMemo {
    /// The cursor over the trace of an agent starting from `free` of `total` with
    /// `exclusions`: inactive when `enabled` is false or the state was not seen before in this
    /// index.
    pub(super) fn cursor(
        &mut self,
        enabled: bool,
        free: &ResourceVec,
        total: &ResourceVec,
        exclusions: &Exclusions,
    ) -> MemoCursor {
        if !enabled {
            return MemoCursor::inactive();
        }
        let key = MemoKey::new(free, total, exclusions);
        match self.traces.get_mut(&key) {
            None => {
                self.traces.insert(key, None);
                MemoCursor::inactive()
            }
            Some(trace) => MemoCursor {
                steps: trace.take().unwrap_or_default(),
                key: Some(key),
                at: 0,
                in_sync: true,
                computed: None,
            },
        }
    }

    /// Stores the trace the agent left.
    pub(super) fn finish(&mut self, cursor: MemoCursor) {
        let Some(key) = cursor.key else {
            return;
        };
        let mut steps = cursor.steps;
        steps.truncate(cursor.at);
        if let Some(trace) = self.traces.get_mut(&key) {
            *trace = Some(steps);
        }
    }
}

/// An agent's progress along the trace of its starting state.
#[derive(Debug)]
pub(super) struct MemoCursor {
    /// `None`: not memoizing this agent.
    key: Option<MemoKey>,
    steps: Vec<Step>,
    /// The agent's next pick.
    at: usize,
    /// Whether the agent's picks so far charged what the trace's did (so its state is the
    /// state the trace's next step was computed for).
    in_sync: bool,
    /// The step computed for the current pick, when it was not replayed.
    computed: Option<Step>,
}

impl MemoCursor {
    /// A cursor that neither replays nor records.
    pub(super) fn inactive() -> MemoCursor {
        MemoCursor {
            key: None,
            steps: Vec::new(),
            at: 0,
            in_sync: false,
            computed: None,
        }
    }

    /// The recorded step for the agent's current state, if it may be replayed (the checks that
    /// depend on the moment are [`Allocator::replayed_choice`]'s).
    fn recorded(&self) -> Option<&Step> {
        if self.key.is_none() || !self.in_sync {
            return None;
        }
        self.steps.get(self.at).filter(|step| step.certified)
    }

    /// Records the choice a scan computed for the current pick, with the groups it was made
    /// among and the best of the rivals it beat.
    pub(super) fn computed(
        &mut self,
        choice: Option<Choice>,
        gate: GateFilter,
        rivals: Rivals,
        index: &CycleIndex,
    ) {
        if self.key.is_none() {
            return;
        }
        let certified = choice.is_none_or(|choice| clear_winner(&choice, &rivals, index));
        self.computed = Some(Step {
            choice,
            gate,
            certified,
            charged: None,
        });
    }

    /// Ends the current pick, which charged `charged` (`None`: the agent takes nothing more).
    pub(super) fn advance(&mut self, charged: Option<&ResourceVec>) {
        if self.key.is_none() {
            return;
        }
        let charged = charged.map(bits);
        let same = self.in_sync
            && self
                .steps
                .get(self.at)
                .is_some_and(|step| step.charged == charged);
        match self.computed.take() {
            Some(mut step) => {
                step.charged = charged;
                if self.at < self.steps.len() {
                    self.steps[self.at] = step;
                } else {
                    self.steps.push(step);
                }
            }
            None => {
                // Replayed: its choice holds, but the task charged for it may differ.
                if let Some(step) = self.steps.get_mut(self.at) {
                    step.charged = charged;
                }
            }
        }
        if !same {
            // The agent's state leaves the trace's: the rest of the trace is for another state.
            self.steps.truncate(self.at + 1);
            self.in_sync = false;
        }
        self.at += 1;
    }
}

/// Whether `choice` beat every rival by the tie tolerance: then any scan of a subset of the
/// candidates that holds it chooses it, whatever order the scan breaks ties in.
pub(super) fn clear_winner(choice: &Choice, rivals: &Rivals, index: &CycleIndex) -> bool {
    match rivals.0 {
        Some(rival) if rival.fits == choice.score.fits => {
            rival.value + tie_margin(choice.score.value, index) < choice.score.value
        }
        // A fitting choice beats every overbooking rival; an overbooking one is chosen only
        // when no rival fits.
        Some(_) => choice.score.fits,
        None => true,
    }
}

/// The margin by which a choice of perfScore `value` must beat its rivals to be replayed.
pub(super) fn tie_margin(value: f64, index: &CycleIndex) -> f64 {
    TIE_TOLERANCE * (1.0 + value.abs() + index.max_packing)
}

impl Allocator {
    /// Whether this allocator's policy is memoized (see the module documentation), and not
    /// switched off.
    pub(super) fn memoizes(&self) -> bool {
        !self.plain_scan
            && !self.guarantee_active
            && matches!(
                self.config.policy,
                InterJobPolicy::DeficitCounters { .. } | InterJobPolicy::Tetris
            )
    }

    /// The recorded choice for the agent's current pick when it is still the scan's choice
    /// (module documentation): `Some(choice)` (`Some(None)`: nothing for the agent), or `None`
    /// when the pick must be computed.
    pub(super) fn replayed_choice(
        &mut self,
        state: &AllocationState,
        view: &AgentView,
        exclusions: &Exclusions,
        index: &CycleIndex,
        cursor: &MemoCursor,
    ) -> Option<Option<Choice>> {
        let step = cursor.recorded()?;
        let with_priority = match self.config.policy {
            InterJobPolicy::DeficitCounters { kappa, .. } => {
                let Some((leader, deficit)) =
                    self.gate_leader(state, &index.runnable, exclusions.refusing())
                else {
                    // No group the gate counts: the scan has no candidate either.
                    return Some(None);
                };
                let now = if deficit >= kappa * state.capacity_units() {
                    GateFilter::Closed(leader)
                } else {
                    GateFilter::Open
                };
                let group_of = |f: FrameworkIdx| state.framework(f).map(|r| r.group);
                let subset = match (step.gate, now) {
                    (GateFilter::Open, GateFilter::Open) => true,
                    (GateFilter::Open, GateFilter::Closed(g)) => {
                        step.choice.is_none_or(|c| group_of(c.framework) == Some(g))
                    }
                    (GateFilter::Closed(then), GateFilter::Closed(now)) => then == now,
                    (GateFilter::Closed(_), GateFilter::Open) => false,
                };
                if !subset {
                    return None;
                }
                true
            }
            InterJobPolicy::Tetris => false,
            _ => return None,
        };
        let Some(choice) = step.choice else {
            return Some(None);
        };
        let f = choice.framework;
        let (OrdF64(key), _, _) = index.ranks.get(f.get()).copied().flatten()?;
        // Below this, a rival's score could dismiss the choice by one of its bounds.
        let floor = choice.score.value - tie_margin(choice.score.value, index) / 2.0;
        if -key < floor {
            return None;
        }
        let srpt_weight = index.srpt_weight;
        let soft = self.cycle_counts(f);
        if soft.cycle_pending == 0 || soft.cycle_counts.get(choice.shape).is_none_or(|&n| n == 0) {
            return None;
        }
        if !choice.overbook {
            let work = if with_priority {
                soft.demand.srpt
            } else {
                soft.demand.remaining_work
            };
            if envelope_bound(soft, view, srpt_weight * work, with_priority).value < floor {
                return None;
            }
        }
        #[cfg(test)]
        {
            self.replayed_picks += 1;
        }
        Some(Some(choice))
    }
}

/// A multiply-rotate hasher for the memo's keys (bit patterns of amounts and slot numbers):
/// much cheaper than the standard library's keyed SipHash, and nothing here is exposed to
/// chosen inputs that could collide on purpose.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl KeyHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
