//! REINFORCE's bookkeeping as Decima trains (§5.3): rewards that penalise the jobs in the
//! system over time, returns, differential rewards and input-dependent baselines. Pure
//! functions of an episode's timeline; the gradients are the model's.

/// One job's time in the system: `[arrival, end)`, `end` its completion or the episode's end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stay {
    /// When it arrived, seconds.
    pub arrival_s: f64,
    /// When it left, or when the episode stopped, seconds.
    pub end_s: f64,
}

/// The reward of each decision (Decima §5.3, its `RewardCalculator`): minus the job-seconds
/// spent in the system from the decision to the next (the last: to `end_s`), divided by
/// `scale`. Their sum over an episode is minus the jobs' total time in the system after the
/// first decision, so maximising it minimises average JCT. `decisions_s` must be sorted.
pub fn rewards(decisions_s: &[f64], stays: &[Stay], end_s: f64, scale: f64) -> Vec<f64> {
    (0..decisions_s.len())
        .map(|k| {
            let from = decisions_s[k];
            let to = decisions_s.get(k + 1).copied().unwrap_or(end_s).max(from);
            let job_seconds: f64 = stays
                .iter()
                .map(|s| (s.end_s.min(to) - s.arrival_s.max(from)).max(0.0))
                .sum();
            -job_seconds / scale
        })
        .collect()
}

/// Differential rewards (Decima §5.3, for continuous arrivals): each reward minus the average
/// reward per second times the time it covers, so that returns measure how much better than
/// average the actions after a decision did, not how long the episode still runs.
pub fn differential(rewards: &[f64], decisions_s: &[f64], end_s: f64, per_second: f64) -> Vec<f64> {
    rewards
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let to = decisions_s.get(k + 1).copied().unwrap_or(end_s);
            r - per_second * (to - decisions_s[k]).max(0.0)
        })
        .collect()
}

/// Undiscounted returns (Decima trains with γ = 1): each decision's reward plus all later.
pub fn returns(rewards: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; rewards.len()];
    let mut sum = 0.0;
    for k in (0..rewards.len()).rev() {
        sum += rewards[k];
        out[k] = sum;
    }
    out
}

/// Input-dependent baselines (Decima §5.3, its `compute_baselines`): episodes that ran the
/// same job arrival sequence, each as its decision times and returns; the baseline of a
/// decision is the mean over the episodes of their return at that time (interpolated between
/// decisions, held at the ends). The variance from the arrival sequence itself cancels out of
/// `return − baseline`. (Decima aligns each decision's baseline at the time of the next one;
/// here at its own.)
pub fn baselines(episodes: &[(&[f64], &[f64])]) -> Vec<Vec<f64>> {
    episodes
        .iter()
        .map(|(times, _)| {
            times
                .iter()
                .map(|&t| {
                    let sum: f64 = episodes.iter().map(|(ts, rs)| interpolate(ts, rs, t)).sum();
                    sum / episodes.len().max(1) as f64
                })
                .collect()
        })
        .collect()
}

/// `values` at time `t`, linear between the `times` around it, held beyond the ends
/// (`numpy.interp`).
fn interpolate(times: &[f64], values: &[f64], t: f64) -> f64 {
    let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
        return 0.0;
    };
    if t <= first {
        return values[0];
    }
    if t >= last {
        return values[values.len() - 1];
    }
    // The first time after t.
    let i = times.partition_point(|&x| x <= t);
    let (t0, t1) = (times[i - 1], times[i]);
    let (v0, v1) = (values[i - 1], values[i]);
    if t1 - t0 <= f64::EPSILON {
        return v1;
    }
    v0 + (v1 - v0) * (t - t0) / (t1 - t0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_sum_to_minus_the_time_jobs_spend_in_the_system() {
        let stays = [
            Stay {
                arrival_s: 0.0,
                end_s: 10.0,
            },
            Stay {
                arrival_s: 2.0,
                end_s: 5.0,
            },
        ];
        let r = rewards(&[0.0, 4.0, 8.0], &stays, 10.0, 1.0);
        // [0, 4): job 1 for 4 s and job 2 for 2 s; [4, 8): 4 + 1; [8, 10): 2.
        assert_eq!(r, vec![-6.0, -5.0, -2.0]);
        assert_eq!(r.iter().sum::<f64>(), -13.0);
        assert_eq!(rewards(&[0.0], &stays, 10.0, 13.0), vec![-1.0]);
    }

    #[test]
    fn returns_add_the_later_rewards() {
        assert_eq!(returns(&[-1.0, -2.0, -3.0]), vec![-6.0, -5.0, -3.0]);
        assert!(returns(&[]).is_empty());
    }

    #[test]
    fn differential_rewards_remove_the_average_rate() {
        // At the average rate every reward becomes 0.
        let r = differential(&[-2.0, -4.0], &[0.0, 1.0], 3.0, -2.0);
        assert_eq!(r, vec![0.0, 0.0]);
    }

    #[test]
    fn baselines_average_the_episodes_at_the_same_times() {
        let a: (&[f64], &[f64]) = (&[0.0, 10.0], &[-10.0, -2.0]);
        let b: (&[f64], &[f64]) = (&[0.0, 5.0, 20.0], &[-20.0, -12.0, 0.0]);
        let bl = baselines(&[a, b]);
        // a at 0: (-10 + -20) / 2; at 10: a holds -2, b interpolates -12 → 0 at a third: -8.
        assert_eq!(bl[0], vec![-15.0, -5.0]);
        // b at 5: a interpolates -6; at 20: a holds -2.
        assert_eq!(bl[1], vec![-15.0, -9.0, -1.0]);
        // One episode: the baseline is its own return, the advantage 0.
        let only = baselines(&[(&[0.0, 1.0], &[-3.0, -1.0])]);
        assert_eq!(only[0], vec![-3.0, -1.0]);
    }
}
