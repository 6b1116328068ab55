//! The metrics of Graphene §7 and Carbyne §5.1: job completion times (average, median, 95th
//! percentile), makespan, Jain's fairness index over time windows, and resource utilisation.
//!
//! The engine feeds a [`UsageRecorder`] with the cluster's state as it changes; the recorder
//! integrates it exactly (the state is piecewise constant between events) into 10-second bins,
//! from which every windowed metric is an exact sum, since 10, 60 and 240 s windows are all made
//! of whole bins.

use std::collections::BTreeMap;

use fullerene_proto::{ResourceKind, ResourceVec};
use serde::{Deserialize, Serialize};

/// The windows Graphene's Table 3 computes Jain's index over, seconds.
pub const JAIN_WINDOWS_S: [f64; 3] = [10.0, 60.0, 240.0];

/// Width of the recorder's bins: the largest width every window of [`JAIN_WINDOWS_S`] is a
/// multiple of.
pub const BIN_S: f64 = 10.0;

/// The utilisation timeline keeps at most this many points (consecutive bins are merged,
/// time-weighted, beyond it), so that a long run still plots and serialises compactly.
pub const MAX_TIMELINE_POINTS: usize = 1000;

/// Nearest-rank percentile of `sorted` (ascending): the smallest value such that at least `p`
/// percent of the values are at most it, i.e. `sorted[ceil(p/100 · n) − 1]`. Chosen over
/// interpolation because it always returns a JCT some job actually had. The median is the
/// 50th nearest-rank percentile (the lower middle value for an even count). 0 for no values.
pub fn percentile_nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Jain's fairness index `(Σx)² / (n · Σx²)` (Jain, Chiu and Hawe 1984): 1 when all `x` are
/// equal, `1/n` when one gets everything. Defined as 1 when every `x` is 0 (all were treated
/// alike) and for an empty slice.
pub fn jain_index(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || sum_sq <= 0.0 {
        return 1.0;
    }
    (sum * sum) / (xs.len() as f64 * sum_sq)
}

/// Mean and minimum of Jain's index over the windows of one width.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FairnessSummary {
    /// Window width, seconds.
    pub window_s: f64,
    /// Mean over the windows counted.
    pub mean: f64,
    /// Minimum over the windows counted.
    pub min: f64,
    /// How many windows had two or more active groups and were counted.
    pub windows: usize,
}

/// Utilisation of each resource over time: the time average over consecutive bins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UtilizationTimeline {
    /// Start of the first bin, seconds (the first arrival).
    pub start_s: f64,
    /// Width of every bin but possibly the last, seconds.
    pub bin_s: f64,
    /// Per resource name (resources the cluster has), the fraction of the cluster's capacity in
    /// use, averaged over each bin, in [0, 1].
    pub series: BTreeMap<String, Vec<f64>>,
}

#[derive(Clone, Debug)]
struct Bin {
    /// Per group: ∫ dominant share of its allocation dt.
    share_time: Vec<f64>,
    /// Per group: time during which it had an arrived, unfinished job.
    active_time: Vec<f64>,
    /// ∫ resources in use dt (capped at each machine's capacity).
    used_time: ResourceVec,
}

/// Integrates the cluster's piecewise-constant state between events.
///
/// The engine calls [`UsageRecorder::advance_to`] before it changes anything at a new event
/// time, then reports the changes. Fairness is measured as Carbyne §5.1 and Graphene §7 do:
/// Jain's index over each time window, of each active group's share of the cluster. What
/// "share" means for several resources the papers leave open; we use the group's *dominant
/// share* (its allocation's largest fraction of the cluster's capacity, DRF's measure and the
/// deficit counters' factor), averaged over the part of the window during which the group was
/// active (had an arrived, unfinished job), so that a group arriving mid-window is not counted as
/// starved before it existed. Groups weigh equally (the flags give no weights), so the shares
/// need no normalisation by entitlement.
#[derive(Clone, Debug)]
pub struct UsageRecorder {
    origin_s: f64,
    last_s: f64,
    cluster_capacity: ResourceVec,
    group_alloc: Vec<ResourceVec>,
    group_active_jobs: Vec<u32>,
    used: ResourceVec,
    bins: Vec<Bin>,
    total_used_time: ResourceVec,
    end_s: f64,
    /// ∫ (jobs arrived and not finished) dt since `origin_s`.
    job_time: f64,
    /// When the last job finished (`origin_s` until one does).
    last_finish_s: f64,
}

impl UsageRecorder {
    /// A recorder for `groups` groups on a cluster of `cluster_capacity`, starting at
    /// `origin_s` (the first arrival).
    pub fn new(groups: usize, cluster_capacity: ResourceVec, origin_s: f64) -> UsageRecorder {
        UsageRecorder {
            origin_s,
            last_s: origin_s,
            cluster_capacity,
            group_alloc: vec![ResourceVec::ZERO; groups],
            group_active_jobs: vec![0; groups],
            used: ResourceVec::ZERO,
            bins: Vec::new(),
            total_used_time: ResourceVec::ZERO,
            end_s: origin_s,
            job_time: 0.0,
            last_finish_s: origin_s,
        }
    }

    /// Integrates the current state from the last call up to `now_s`.
    pub fn advance_to(&mut self, now_s: f64) {
        if now_s <= self.last_s {
            return;
        }
        let groups = self.group_alloc.len();
        let mut from = self.last_s;
        while from < now_s {
            let index = ((from - self.origin_s) / BIN_S).floor().max(0.0) as usize;
            let bin_end = self.origin_s + (index + 1) as f64 * BIN_S;
            let to = now_s.min(bin_end);
            let dt = to - from;
            if dt <= 0.0 {
                // `from` sits on a bin boundary up to rounding: step into the next bin.
                from = bin_end.max(from + f64::EPSILON * from.abs().max(1.0));
                continue;
            }
            while self.bins.len() <= index {
                self.bins.push(Bin {
                    share_time: vec![0.0; groups],
                    active_time: vec![0.0; groups],
                    used_time: ResourceVec::ZERO,
                });
            }
            let bin = &mut self.bins[index];
            for g in 0..groups {
                if self.group_active_jobs[g] > 0 {
                    let share = self.group_alloc[g].dominant_share(&self.cluster_capacity);
                    bin.share_time[g] += share * dt;
                    bin.active_time[g] += dt;
                }
            }
            bin.used_time += self.used.scale(dt);
            from = to;
        }
        self.total_used_time += self.used.scale(now_s - self.last_s);
        let in_system: u32 = self.group_active_jobs.iter().sum();
        self.job_time += f64::from(in_system) * (now_s - self.last_s);
        self.last_s = now_s;
        self.end_s = self.end_s.max(now_s);
    }

    /// A job of `group` arrived.
    pub fn job_arrived(&mut self, group: usize) {
        self.group_active_jobs[group] += 1;
    }

    /// A job of `group` finished (at the time of the last [`UsageRecorder::advance_to`]).
    pub fn job_finished(&mut self, group: usize) {
        self.group_active_jobs[group] = self.group_active_jobs[group].saturating_sub(1);
        self.last_finish_s = self.last_finish_s.max(self.last_s);
    }

    /// The time average of the number of jobs in the system (arrived, not finished) from the
    /// first arrival to the last finish: the exact integral of that piecewise-constant count
    /// over the span, divided by the span. By Little's law it equals the sum of the JCTs over
    /// the makespan; it tells how deep the queue a policy leaves is (a policy that finishes
    /// short jobs first keeps it shallow). 0 when no time passed.
    pub fn mean_jobs_in_system(&self) -> f64 {
        let span = self.last_finish_s - self.origin_s;
        if span > 0.0 {
            self.job_time / span
        } else {
            0.0
        }
    }

    /// `group` was charged `demand` (a task launched).
    pub fn charge(&mut self, group: usize, demand: &ResourceVec) {
        self.group_alloc[group] += *demand;
    }

    /// `group` was released `demand` (a task finished). Rounding residue is floored at zero.
    pub fn release(&mut self, group: usize, demand: &ResourceVec) {
        self.group_alloc[group] = self.group_alloc[group].saturating_sub(demand);
    }

    /// The cluster's resources in use changed by `delta` (each machine's use capped at its
    /// capacity: an overbooked link carries no more than its bandwidth).
    pub fn used_changed(&mut self, old_machine_used: &ResourceVec, new_machine_used: &ResourceVec) {
        self.used += *new_machine_used;
        self.used = self.used.saturating_sub(old_machine_used);
    }

    /// Jain's index over windows of `window_s` (a multiple of [`BIN_S`]) tiling the run from the
    /// first arrival. The last, partial window counts if it spans at least half a window (or is
    /// the only one). Windows with fewer than two active groups are trivially fair and not
    /// counted; with none counted, mean and min are 1.
    pub fn fairness(&self, window_s: f64) -> FairnessSummary {
        let bins_per_window = (window_s / BIN_S).round().max(1.0) as usize;
        let span = self.end_s - self.origin_s;
        let full = (span / window_s).floor() as usize;
        let rest = span - full as f64 * window_s;
        let windows = if rest > 0.0 && (rest >= window_s / 2.0 || full == 0) {
            full + 1
        } else {
            full
        };
        let groups = self.group_alloc.len();
        let mut indices = Vec::new();
        for w in 0..windows {
            let first = w * bins_per_window;
            let last = ((w + 1) * bins_per_window).min(self.bins.len());
            if first >= last {
                continue;
            }
            let mut xs = Vec::with_capacity(groups);
            for g in 0..groups {
                let active: f64 = self.bins[first..last]
                    .iter()
                    .map(|b| b.active_time[g])
                    .sum();
                if active > 0.0 {
                    let share: f64 = self.bins[first..last].iter().map(|b| b.share_time[g]).sum();
                    xs.push(share / active);
                }
            }
            if xs.len() >= 2 {
                indices.push(jain_index(&xs));
            }
        }
        if indices.is_empty() {
            return FairnessSummary {
                window_s,
                mean: 1.0,
                min: 1.0,
                windows: 0,
            };
        }
        FairnessSummary {
            window_s,
            mean: indices.iter().sum::<f64>() / indices.len() as f64,
            min: indices.iter().copied().fold(f64::INFINITY, f64::min),
            windows: indices.len(),
        }
    }

    /// Time-average utilisation of each resource the cluster has, from the first arrival to the
    /// last event, as a fraction of the cluster's capacity.
    pub fn average_utilization(&self) -> BTreeMap<String, f64> {
        let span = self.end_s - self.origin_s;
        self.resource_kinds()
            .map(|k| {
                let value = if span > 0.0 {
                    self.total_used_time[k] / (self.cluster_capacity[k] * span)
                } else {
                    0.0
                };
                (k.name().to_string(), value)
            })
            .collect()
    }

    /// The utilisation timeline, bins merged so that at most [`MAX_TIMELINE_POINTS`] remain.
    pub fn utilization_timeline(&self) -> UtilizationTimeline {
        let merge = self.bins.len().div_ceil(MAX_TIMELINE_POINTS).max(1);
        let bin_s = BIN_S * merge as f64;
        let mut series: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for k in self.resource_kinds() {
            let points = self
                .bins
                .chunks(merge)
                .enumerate()
                .map(|(i, chunk)| {
                    let start = self.origin_s + i as f64 * bin_s;
                    let len = (self.end_s.min(start + bin_s) - start).max(0.0);
                    let used: f64 = chunk.iter().map(|b| b.used_time[k]).sum();
                    if len > 0.0 {
                        (used / (self.cluster_capacity[k] * len)).clamp(0.0, 1.0)
                    } else {
                        0.0
                    }
                })
                .collect();
            series.insert(k.name().to_string(), points);
        }
        UtilizationTimeline {
            start_s: self.origin_s,
            bin_s,
            series,
        }
    }

    fn resource_kinds(&self) -> impl Iterator<Item = ResourceKind> + '_ {
        ResourceKind::ALL
            .into_iter()
            .filter(|&k| self.cluster_capacity[k] > 0.0)
    }
}

/// Summary statistics of a set of job completion times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JctStats {
    /// Arithmetic mean.
    pub avg: f64,
    /// Nearest-rank median ([`percentile_nearest_rank`] at 50).
    pub median: f64,
    /// Nearest-rank 95th percentile.
    pub p95: f64,
}

impl JctStats {
    /// Statistics of `jcts` (any order); all zero for an empty slice.
    pub fn of(jcts: &[f64]) -> JctStats {
        let mut sorted = jcts.to_vec();
        sorted.sort_by(f64::total_cmp);
        let avg = if sorted.is_empty() {
            0.0
        } else {
            sorted.iter().sum::<f64>() / sorted.len() as f64
        };
        JctStats {
            avg,
            median: percentile_nearest_rank(&sorted, 50.0),
            p95: percentile_nearest_rank(&sorted, 95.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use fullerene_scheduling::testkit::cpus;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&v, 50.0), 10.0);
        assert_eq!(percentile_nearest_rank(&v, 95.0), 19.0);
        assert_eq!(percentile_nearest_rank(&v, 100.0), 20.0);
        assert_eq!(percentile_nearest_rank(&v, 0.0), 1.0);
        assert_eq!(percentile_nearest_rank(&[3.0], 95.0), 3.0);
        assert_eq!(percentile_nearest_rank(&[], 50.0), 0.0);
        let s = JctStats::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.avg, s.median, s.p95), (2.5, 2.0, 4.0));
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[0.5, 0.5]), 1.0);
        assert_eq!(jain_index(&[1.0, 0.0]), 0.5);
        assert_eq!(jain_index(&[1.0, 0.0, 0.0, 0.0]), 0.25);
        assert_eq!(jain_index(&[0.0, 0.0]), 1.0);
        let j = jain_index(&[0.6, 0.4]);
        assert!(j > 0.9 && j < 1.0, "{j}");
    }

    #[test]
    fn equal_shares_are_fair_and_starvation_is_not() {
        let cap = cpus(10.0);
        let mut r = UsageRecorder::new(2, cap, 0.0);
        r.job_arrived(0);
        r.job_arrived(1);
        r.charge(0, &cpus(5.0));
        r.charge(1, &cpus(5.0));
        r.used_changed(&ResourceVec::ZERO, &cpus(10.0));
        r.advance_to(120.0);
        let f = r.fairness(60.0);
        assert_eq!((f.mean, f.min, f.windows), (1.0, 1.0, 2));
        assert_eq!(r.average_utilization()["cpus"], 1.0);

        // Group 1 now starves for a minute.
        r.release(1, &cpus(5.0));
        r.charge(0, &cpus(5.0));
        r.advance_to(180.0);
        let f = r.fairness(60.0);
        assert_eq!(f.windows, 3);
        assert!((f.min - 0.5).abs() < 1e-12, "{f:?}");
        assert!((f.mean - 2.5 / 3.0).abs() < 1e-12, "{f:?}");
        let ten = r.fairness(10.0);
        assert_eq!(ten.windows, 18);
    }

    #[test]
    fn a_late_group_is_judged_only_while_active() {
        let cap = cpus(10.0);
        let mut r = UsageRecorder::new(2, cap, 0.0);
        r.job_arrived(0);
        r.charge(0, &cpus(10.0));
        r.advance_to(30.0);
        r.job_arrived(1);
        r.release(0, &cpus(5.0));
        r.charge(1, &cpus(5.0));
        r.advance_to(60.0);
        // In [0, 60) group 0 averaged (30·1 + 30·0.5)/60 = 0.75, group 1 0.5 over its 30 s.
        let f = r.fairness(60.0);
        let expected = jain_index(&[0.75, 0.5]);
        assert!((f.mean - expected).abs() < 1e-12, "{f:?}");
        // 10 s windows: only those after the arrival count, and they are fair.
        let ten = r.fairness(10.0);
        assert_eq!((ten.windows, ten.min), (3, 1.0));
    }

    #[test]
    fn mean_jobs_in_system_integrates_arrivals_and_finishes() {
        // Job A in [0, 30), job B in [10, 20): one job for 10 s, two for 10 s, one for 10 s;
        // ∫ count dt = 40 over a 30 s span.
        let mut r = UsageRecorder::new(2, cpus(4.0), 0.0);
        r.job_arrived(0);
        r.advance_to(10.0);
        r.job_arrived(1);
        r.advance_to(20.0);
        r.job_finished(1);
        r.advance_to(30.0);
        r.job_finished(0);
        assert_eq!(r.mean_jobs_in_system(), 40.0 / 30.0);
        // Time after the last finish does not dilute the mean.
        r.advance_to(50.0);
        assert_eq!(r.mean_jobs_in_system(), 40.0 / 30.0);

        // Arrivals later than the origin: A in [5, 15), B in [25, 35); the span starts at the
        // first arrival, so the mean is (10 + 10) / 30, idle gap included.
        let mut r = UsageRecorder::new(1, cpus(4.0), 5.0);
        r.job_arrived(0);
        r.advance_to(15.0);
        r.job_finished(0);
        r.advance_to(25.0);
        r.job_arrived(0);
        r.advance_to(35.0);
        r.job_finished(0);
        assert_eq!(r.mean_jobs_in_system(), 20.0 / 30.0);

        assert_eq!(
            UsageRecorder::new(1, cpus(1.0), 0.0).mean_jobs_in_system(),
            0.0
        );
    }

    #[test]
    fn single_group_runs_are_trivially_fair_and_partial_windows_follow_the_rule() {
        let mut r = UsageRecorder::new(1, cpus(4.0), 5.0);
        r.job_arrived(0);
        r.charge(0, &cpus(1.0));
        r.used_changed(&ResourceVec::ZERO, &cpus(1.0));
        r.advance_to(100.0);
        let f = r.fairness(60.0);
        assert_eq!((f.mean, f.min, f.windows), (1.0, 1.0, 0));
        assert!((r.average_utilization()["cpus"] - 0.25).abs() < 1e-12);
        let t = r.utilization_timeline();
        assert_eq!(t.start_s, 5.0);
        assert_eq!(t.series["cpus"].len(), 10);
        assert!(t.series["cpus"].iter().all(|u| (u - 0.25).abs() < 1e-12));
        assert!(!t.series.contains_key("gpus"));
    }
}
