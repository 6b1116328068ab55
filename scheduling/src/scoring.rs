//! The scoring primitives of Graphene's online component (tech report §5 and Fig. 8), shared by
//! the framework-side matcher (which ranks a job's tasks for one machine) and the allocator
//! (which ranks frameworks for one machine from their demand summaries). Fig. 8 runs both
//! rankings in one loop; the two-level design splits it, so both halves use these functions.

use crate::fit::{fits, overbookable, within};
use crate::resources::{ResourceKind, ResourceVec, EPSILON};

/// Remote penalty `rp` of Fig. 8 as the tech report's §7.4 sets it: a locality-sensitive task
/// placed away from its inputs has its packing score multiplied by this (15–30% penalties work
/// best there; `rp = 0.8`). Not the matcher's default ([`NO_REMOTE_PENALTY`]): set it where
/// tasks read their parents' output from the machines that wrote it.
pub const PAPER_REMOTE_PENALTY: f64 = 0.8;

/// The matcher's default remote penalty: none. Nothing in Fullerene charges for remote
/// placement: the workload format carries no data sizes, the simulator moves no data, and a
/// DAG job's tasks find their input wherever the job stores it. A penalty would trade packing
/// against a cost that nothing pays, so both halves of the two-level design leave it out (the
/// allocator never had one).
pub const NO_REMOTE_PENALTY: f64 = 1.0;

/// The multiplier `m` in "η is m times the average over the two expressions it combines"
/// (tech report §7.4, which recommends 0.2).
pub const DEFAULT_ETA_MULTIPLIER: f64 = 0.2;

/// Packing score `pScore` of Fig. 8: the dot product of the machine's available resources and the
/// task's demand, both normalised by the machine's capacity (so that cores and MiB weigh alike),
/// times the remote penalty when applicable. Zero when the demand does not fit.
pub fn packing_score(
    available: &ResourceVec,
    demand: &ResourceVec,
    capacity: &ResourceVec,
    remote_penalty: f64,
) -> f64 {
    if !fits(demand, available) {
        return 0.0;
    }
    available
        .normalized_by(capacity)
        .dot(&demand.normalized_by(capacity))
        * remote_penalty
}

/// Overbooking score `oScore` of Fig. 8, which the paper omits "for brevity". Ours: a task that
/// does not fit only because of fungible resources, stays within `allowance` of them, and finds
/// some of each of them still free (so that overbooking puts idle bandwidth to use rather than
/// only slowing a full link down), scores the packing alignment over its non-fungible resources
/// scaled down by how much it overbooks (the slowdown it inflicts); anything else scores 0. A
/// bundle therefore crosses a link's capacity at most once. Fig. 8's lexicographic order ranks
/// every positive [`packing_score`] above every `oScore`, which [`PerfScore`]'s ordering
/// implements.
pub fn overbooking_score(
    available: &ResourceVec,
    demand: &ResourceVec,
    capacity: &ResourceVec,
    allowance: f64,
) -> f64 {
    let mut overbooked_fraction: f64 = 0.0;
    for kind in ResourceKind::ALL {
        let need = demand[kind];
        let have = available[kind];
        // A kind the task does not use is never overbooked by it, even where earlier tasks of
        // the bundle left `available` below zero.
        if need <= EPSILON || within(need, have) {
            continue;
        }
        // Only idle bandwidth is worth overbooking into (tech report §5: overbook "if the
        // cost of doing so (slowing down of all tasks using that resource) is less than the
        // benefit"): a link with some capacity free carries more once the task joins, but a
        // full or overbooked one carries no more, and every task on it only slows down.
        if !overbookable(kind, have) {
            return 0.0;
        }
        let excess = (need - have) / capacity[kind].max(EPSILON);
        if excess > allowance {
            return 0.0;
        }
        overbooked_fraction = overbooked_fraction.max(excess);
    }
    if overbooked_fraction == 0.0 {
        return 0.0;
    }
    let mut non_fungible_avail = *available;
    let mut non_fungible_demand = *demand;
    for kind in ResourceKind::ALL.into_iter().filter(|k| k.is_fungible()) {
        non_fungible_avail[kind] = 0.0;
        non_fungible_demand[kind] = 0.0;
    }
    let alignment = non_fungible_avail
        .normalized_by(capacity)
        .dot(&non_fungible_demand.normalized_by(capacity));
    alignment * (1.0 - overbooked_fraction / allowance.max(f64::MIN_POSITIVE)).max(0.0)
        + f64::MIN_POSITIVE
}

/// A task's combined score, Fig. 8's `perfScore_t = priScore_t · {pScore_t, oScore_t} − η·srpt_j`,
/// kept as its lexicographic pair: a task that fits beats any task that only fits by
/// overbooking, and within each class the larger value wins.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerfScore {
    /// True when the task fits without overbooking.
    pub fits: bool,
    /// `priScore · score − η · srpt`.
    pub value: f64,
}

impl PerfScore {
    /// Combines the parts as Fig. 8 does. Returns `None` when the task can be placed neither
    /// within the available resources nor by overbooking.
    pub fn new(
        pri_score: f64,
        p_score: f64,
        o_score: f64,
        eta: f64,
        srpt: f64,
    ) -> Option<PerfScore> {
        if p_score > 0.0 {
            Some(PerfScore {
                fits: true,
                value: pri_score * p_score - eta * srpt,
            })
        } else if o_score > 0.0 {
            Some(PerfScore {
                fits: false,
                value: pri_score * o_score - eta * srpt,
            })
        } else {
            None
        }
    }

    /// True when `self` ranks strictly above `other`.
    pub fn beats(&self, other: &PerfScore) -> bool {
        match (self.fits, other.fits) {
            (true, false) => true,
            (false, true) => false,
            _ => self.value > other.value,
        }
    }
}

/// Keeps η "automatically updated based on the average srpt and pScore" (Graphene §5): η is
/// `m · avg(pScore) / avg(srpt)`, so that `η · srpt` is on average `m` times the packing term
/// it is subtracted from (tech report §7.4, m = 0.2). Averages are exponentially weighted so
/// that η follows the workload as jobs come and go.
#[derive(Clone, Debug)]
pub struct EtaEstimator {
    multiplier: f64,
    smoothing: f64,
    avg_p_score: f64,
    avg_srpt: f64,
    samples: u64,
}

impl EtaEstimator {
    /// A new estimator with multiplier `m` (see [`DEFAULT_ETA_MULTIPLIER`]).
    pub fn new(multiplier: f64) -> EtaEstimator {
        EtaEstimator {
            multiplier,
            smoothing: 0.05,
            avg_p_score: 0.0,
            avg_srpt: 0.0,
            samples: 0,
        }
    }

    /// Records one observed pair (a candidate's packing score and its job's srpt).
    pub fn observe(&mut self, p_score: f64, srpt: f64) {
        if !(p_score.is_finite() && srpt.is_finite()) {
            return;
        }
        self.samples += 1;
        // A plain mean for the first samples, then an exponential average.
        let alpha = (1.0 / self.samples as f64).max(self.smoothing);
        self.avg_p_score += alpha * (p_score - self.avg_p_score);
        self.avg_srpt += alpha * (srpt - self.avg_srpt);
    }

    /// The current η (0 until both averages are positive).
    pub fn eta(&self) -> f64 {
        if self.avg_srpt > 0.0 && self.avg_p_score > 0.0 {
            self.multiplier * self.avg_p_score / self.avg_srpt
        } else {
            0.0
        }
    }
}

impl Default for EtaEstimator {
    fn default() -> EtaEstimator {
        EtaEstimator::new(DEFAULT_ETA_MULTIPLIER)
    }
}

/// Graphene's `srpt_j` (Fig. 8): Σ over pending tasks of duration × |demand|, with |demand| the
/// demand normalised by `capacity` and summed over resources.
pub fn srpt_term(duration_s: f64, demand: &ResourceVec, capacity: &ResourceVec) -> f64 {
    duration_s * demand.normalized_by(capacity).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::machine as cap;

    #[test]
    fn packing_prefers_aligned_tasks_and_rejects_misfits() {
        let free: ResourceVec = "cpus=8,mem_mib=8192".parse().unwrap();
        let cpu_heavy: ResourceVec = "cpus=4,mem_mib=1024".parse().unwrap();
        let mem_heavy: ResourceVec = "cpus=1,mem_mib=8192".parse().unwrap();
        let too_big: ResourceVec = "cpus=9".parse().unwrap();
        let a = packing_score(&free, &cpu_heavy, &cap(), 1.0);
        let b = packing_score(&free, &mem_heavy, &cap(), 1.0);
        assert!(
            a > b,
            "free is cpu-rich, so the cpu-heavy task aligns better: {a} vs {b}"
        );
        assert_eq!(packing_score(&free, &too_big, &cap(), 1.0), 0.0);
        assert!((packing_score(&free, &cpu_heavy, &cap(), 0.8) - 0.8 * a).abs() < 1e-12);
    }

    fn disk_user() -> ResourceVec {
        "cpus=1,disk_mbps=100".parse().unwrap()
    }

    #[test]
    fn overbooking_only_for_small_fungible_excess() {
        let free: ResourceVec = "cpus=8,mem_mib=8192,net_mbps=1000".parse().unwrap();
        let small_excess: ResourceVec = "cpus=1,net_mbps=2000".parse().unwrap();
        let big_excess: ResourceVec = "cpus=1,net_mbps=9000".parse().unwrap();
        let cpu_excess: ResourceVec = "cpus=9".parse().unwrap();
        assert!(overbooking_score(&free, &small_excess, &cap(), 0.25) > 0.0);
        assert_eq!(overbooking_score(&free, &big_excess, &cap(), 0.25), 0.0);
        assert_eq!(overbooking_score(&free, &cpu_excess, &cap(), 0.25), 0.0);
        let fits: ResourceVec = "cpus=1".parse().unwrap();
        assert_eq!(overbooking_score(&free, &fits, &cap(), 0.25), 0.0);
        // Disk already overbooked by the bundle: a task that uses no disk is judged on its
        // network excess alone.
        let mut overbooked = free;
        overbooked[ResourceKind::DiskMbps] = -200.0;
        let net_only: ResourceVec = "cpus=1,net_mbps=1500".parse().unwrap();
        assert_eq!(
            overbooking_score(&overbooked, &net_only, &cap(), 0.25),
            overbooking_score(&free, &net_only, &cap(), 0.25)
        );
        // No bandwidth left at all: overbooking would only slow the link's tasks down.
        let mut full = free;
        full[ResourceKind::NetMbps] = 0.0;
        assert_eq!(overbooking_score(&full, &small_excess, &cap(), 0.25), 0.0);
        assert_eq!(
            overbooking_score(&overbooked, &disk_user(), &cap(), 0.25),
            0.0
        );
    }

    #[test]
    fn fitting_tasks_beat_overbooking_ones_lexicographically() {
        let fit = PerfScore::new(0.1, 0.01, 0.0, 0.0, 0.0).unwrap();
        let over = PerfScore::new(1.0, 0.0, 0.9, 0.0, 0.0).unwrap();
        assert!(fit.beats(&over));
        assert!(!over.beats(&fit));
        assert!(PerfScore::new(1.0, 0.0, 0.0, 0.0, 0.0).is_none());
    }

    #[test]
    fn eta_balances_srpt_against_packing() {
        let mut eta = EtaEstimator::new(0.2);
        assert_eq!(eta.eta(), 0.0);
        for _ in 0..100 {
            eta.observe(0.5, 1000.0);
        }
        assert!((eta.eta() * 1000.0 - 0.2 * 0.5).abs() < 1e-9);
    }
}
