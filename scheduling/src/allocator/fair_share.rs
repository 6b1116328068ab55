//! Carbyne's `A_k` (§3, Pseudocode 1 `INTERJOBSCHEDULER`, line 10): the DRF allocation of the
//! cluster among the frameworks with demand, by progressive filling with demand caps
//! ([`FairShareRule::ProgressiveFilling`]).

use super::*;

impl Allocator {
    /// The progressive-filling share of framework slot `f`, computed once per cycle and demand
    /// change. A framework's claim is what it holds plus every pending task of its summary; its
    /// weight is its group's weight over the group's frameworks with demand (hierarchical DRF's
    /// split of a group's share). What the filling leaves unallocated is split by weight (see
    /// the body). A framework with no claim gets nothing.
    pub(super) fn progressive_share(
        &mut self,
        state: &AllocationState,
        f: FrameworkIdx,
    ) -> ResourceVec {
        let stamp = (self.cycle, self.demand_epoch);
        if self.shares.as_ref().is_none_or(|(at, _)| *at != stamp) {
            let shares = self.compute_shares(state);
            self.shares = Some((stamp, shares));
        }
        self.shares
            .as_ref()
            .and_then(|(_, shares)| shares.get(f.get()).copied())
            .unwrap_or(ResourceVec::ZERO)
    }

    fn compute_shares(&self, state: &AllocationState) -> Vec<ResourceVec> {
        let deficits = state.deficits();
        let mut members = vec![0u32; deficits.len()];
        let mut claims: Vec<(FrameworkIdx, GroupIdx, ResourceVec)> = Vec::new();
        for (f, record) in state.frameworks() {
            let soft = &self.frameworks[f.get()];
            let pending = soft.demand.shapes.iter().fold(ResourceVec::ZERO, |sum, s| {
                sum + s.demand.scale(f64::from(s.count))
            });
            let claim = record.held + pending;
            if claim.is_zero() {
                continue;
            }
            if let Some(m) = members.get_mut(record.group.get()) {
                *m += 1;
            }
            claims.push((f, record.group, claim));
        }
        let weighted: Vec<(f64, ResourceVec)> = claims
            .iter()
            .map(|(_, g, claim)| {
                let group = deficits.group(*g);
                let n = members.get(g.get()).copied().unwrap_or(1).max(1);
                (group.weight / f64::from(n), *claim)
            })
            .collect();
        let capacity = state.capacity();
        let mut allocation = progressive_filling(&capacity, &weighted);
        // What progressive filling leaves unallocated (Pseudocode 1's L_DRF: resources no claim
        // saturated, or that only capped claimants use) reaches the jobs at run time through the
        // leftover scheduler; T_k counts it too, split by weight. Without it a job whose runnable
        // tasks are CPU-heavy would plan its next, memory-heavy stage in a share with almost no
        // memory, and postpone work on a cluster it has to itself.
        let allocated = allocation.iter().fold(ResourceVec::ZERO, |s, a| s + *a);
        let unallocated = capacity.saturating_sub(&allocated);
        let weight_sum: f64 = weighted.iter().map(|(w, _)| w).sum();
        if weight_sum > 0.0 {
            for (share, (weight, _)) in allocation.iter_mut().zip(&weighted) {
                *share += unallocated.scale(weight / weight_sum);
            }
        }
        let mut shares = vec![ResourceVec::ZERO; self.frameworks.len()];
        for ((f, _, _), share) in claims.iter().zip(allocation) {
            if let Some(slot) = shares.get_mut(f.get()) {
                *slot = share;
            }
        }
        shares
    }
}

/// Weighted DRF by progressive filling with demand caps (Ghodsi et al., NSDI'11, §4; the
/// closed form Carbyne §3.3.2 cites): every claimant's allocation grows along its claim vector
/// so that its dominant share rises at the rate of its weight; a claimant stops when it reaches
/// its claim, and every claimant that uses a resource stops when that resource runs out. What a
/// stopped claimant does not take keeps going to the others, so the result is max-min fair in
/// weighted dominant shares and never above a claim. `claims` are `(weight, claim)`; a
/// claimant with no weight, or a claim of nothing, gets nothing.
pub fn progressive_filling(
    capacity: &ResourceVec,
    claims: &[(f64, ResourceVec)],
) -> Vec<ResourceVec> {
    let n = claims.len();
    let mut level = vec![0.0f64; n];
    // Per claimant: its claim's dominant share, and the claim per unit of dominant share.
    let mut dominant = vec![0.0f64; n];
    let mut direction = vec![ResourceVec::ZERO; n];
    let mut active = vec![false; n];
    for (i, (weight, claim)) in claims.iter().enumerate() {
        let d = claim.dominant_share(capacity);
        if *weight > 0.0 && d > EPSILON && d.is_finite() {
            dominant[i] = d;
            direction[i] = claim.scale(1.0 / d);
            active[i] = true;
        }
    }
    let mut used = ResourceVec::ZERO;
    let mut saturated = [false; NUM_RESOURCES];
    // Each round stops at least one claimant, so at most n rounds.
    for _ in 0..=n {
        let mut rate = ResourceVec::ZERO;
        for i in (0..n).filter(|&i| active[i]) {
            rate += direction[i].scale(claims[i].0);
        }
        // How far the weighted level may rise: to the next claimant's cap, or to the next
        // resource running out.
        let mut step = f64::INFINITY;
        for i in (0..n).filter(|&i| active[i]) {
            step = step.min((dominant[i] - level[i]) / claims[i].0);
        }
        for k in ResourceKind::ALL {
            if rate[k] > EPSILON && !saturated[k.index()] {
                step = step.min(((capacity[k] - used[k]).max(0.0)) / rate[k]);
            }
        }
        if !step.is_finite() {
            break;
        }
        for i in (0..n).filter(|&i| active[i]) {
            level[i] += step * claims[i].0;
        }
        used += rate.scale(step);
        for k in ResourceKind::ALL {
            if rate[k] > EPSILON && used[k] >= capacity[k] - EPSILON * capacity[k].max(1.0) {
                saturated[k.index()] = true;
            }
        }
        let mut any = false;
        for i in 0..n {
            if !active[i] {
                continue;
            }
            let capped = level[i] >= dominant[i] * (1.0 - 1e-12);
            let blocked = ResourceKind::ALL
                .into_iter()
                .any(|k| saturated[k.index()] && direction[i][k] > EPSILON);
            if capped || blocked {
                active[i] = false;
            } else {
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    (0..n)
        .map(|i| direction[i].scale(level[i].min(dominant[i])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ResourceVec {
        s.parse().unwrap()
    }

    fn close(a: &ResourceVec, b: &ResourceVec) -> bool {
        ResourceKind::ALL
            .into_iter()
            .all(|k| (a[k] - b[k]).abs() < 1e-9 * b[k].abs().max(1.0))
    }

    #[test]
    fn drf_paper_example_equalises_dominant_shares() {
        // DRF §4's example: 9 CPUs, 18 GB; A's tasks <1 CPU, 4 GB>, B's <3 CPUs, 1 GB>, both
        // unbounded: A gets 3 tasks (3 CPUs, 12 GB), B 2 tasks (6 CPUs, 2 GB), both 2/3.
        let capacity = v("cpus=9,mem_mib=18");
        let shares = progressive_filling(
            &capacity,
            &[
                (1.0, v("cpus=100,mem_mib=400")),
                (1.0, v("cpus=300,mem_mib=100")),
            ],
        );
        assert!(
            close(&shares[0], &v("cpus=3,mem_mib=12")),
            "{:?}",
            shares[0]
        );
        assert!(close(&shares[1], &v("cpus=6,mem_mib=2")), "{:?}", shares[1]);
    }

    #[test]
    fn a_capped_claimant_leaves_the_rest_to_the_others() {
        let capacity = v("cpus=12");
        let shares = progressive_filling(
            &capacity,
            &[
                (1.0, v("cpus=2")),
                (1.0, v("cpus=100")),
                (1.0, v("cpus=100")),
            ],
        );
        // An equal split would give each 4; the small one needs 2, the others share 10.
        assert!(close(&shares[0], &v("cpus=2")));
        assert!(close(&shares[1], &v("cpus=5")));
        assert!(close(&shares[2], &v("cpus=5")));
    }

    #[test]
    fn weights_scale_dominant_shares_and_nothing_exceeds_capacity() {
        let capacity = v("cpus=10,mem_mib=100");
        let shares = progressive_filling(
            &capacity,
            &[
                (2.0, v("cpus=100,mem_mib=10")),
                (1.0, v("cpus=100,mem_mib=10")),
                (0.0, v("cpus=1")),
                (1.0, ResourceVec::ZERO),
            ],
        );
        assert!(close(
            &shares[0],
            &v("cpus=6.666666666666667,mem_mib=0.6666666666666667")
        ));
        assert!(close(
            &shares[1],
            &v("cpus=3.3333333333333335,mem_mib=0.33333333333333337")
        ));
        assert!(shares[2].is_zero() && shares[3].is_zero());
        let sum = shares.iter().fold(ResourceVec::ZERO, |s, x| s + *x);
        assert!(sum[ResourceKind::Cpus] <= 10.0 + 1e-9);
    }

    #[test]
    fn a_claimant_blocked_on_one_resource_lets_others_use_the_rest() {
        // Memory runs out for A and B; C needs only CPUs and takes what they leave.
        let capacity = v("cpus=10,mem_mib=10");
        let shares = progressive_filling(
            &capacity,
            &[
                (1.0, v("cpus=1,mem_mib=100")),
                (1.0, v("cpus=1,mem_mib=100")),
                (1.0, v("cpus=100")),
            ],
        );
        let sum = shares.iter().fold(ResourceVec::ZERO, |s, x| s + *x);
        assert!((sum[ResourceKind::MemMib] - 10.0).abs() < 1e-9);
        assert!((sum[ResourceKind::Cpus] - 10.0).abs() < 1e-9, "{sum:?}");
        assert!(close(&shares[0], &v("cpus=0.05,mem_mib=5")));
    }
}
