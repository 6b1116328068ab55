//! The sharing policy (Rayon §5.2): per-user caps that bound what RDL lets a user ask for,
//! checked at admission against the plan's capacity over time.
//!
//! A user's reservations may hold, at any quantum, at most an `instantaneous` fraction of the
//! cluster's capacity then ("no user can exceed 20% of cluster capacity"), and over any sliding
//! window of `window_ms` at most an `integral` fraction of the capacity over that window ("the
//! sum of all resources allocated to a user over any 24h period of time should not exceed an
//! average of 5%"). Each resource kind is held to the caps on its own: a user within 5% of the
//! CPU-time but at 30% of the GPU-time is over the cap.

use std::collections::BTreeMap;

use fullerene_scheduling::{ResourceKind, ResourceVec, EPSILON, NUM_RESOURCES};
use serde::{Deserialize, Serialize};

use crate::plan::{held_runs, AtomAllocation, Plan, ReservationId};
use crate::rdl::format_duration_ms;

/// One user's caps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserCaps {
    /// The largest fraction of the capacity the user may hold at any instant (1: no cap).
    pub instantaneous: f64,
    /// The largest average fraction of the capacity the user may hold over any window of
    /// `window_ms` (1: no cap).
    pub integral: f64,
    /// The sliding window of the integral cap, in milliseconds.
    pub window_ms: u64,
}

impl Default for UserCaps {
    /// No cap (fractions of 1 over 24 hours).
    fn default() -> UserCaps {
        UserCaps {
            instantaneous: 1.0,
            integral: 1.0,
            window_ms: 86_400_000,
        }
    }
}

/// `at_ms` as people read it next to a request asked at `asked_ms`: "12s after the request".
fn when(at_ms: u64, asked_ms: u64) -> String {
    if at_ms >= asked_ms {
        format!("{} after the request", format_duration_ms(at_ms - asked_ms))
    } else {
        format!(
            "{} before the request",
            format_duration_ms(asked_ms - at_ms)
        )
    }
}

/// The operator's caps: one for every user, and overrides by user name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SharingPolicy {
    /// Caps of users without an override.
    pub default_caps: UserCaps,
    /// Caps by user.
    pub users: BTreeMap<String, UserCaps>,
}

/// A reservation the caps refuse.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum SharingRefusal {
    /// Above the instantaneous cap at some quantum.
    #[error("{user} would hold {:.1}% of the cluster's {kind} {}, above the cap of {:.1}%", .share * 100.0, when(*.at_ms, *.asked_ms), .cap * 100.0)]
    Instantaneous {
        /// The user.
        user: String,
        /// The first time it would, wall-clock milliseconds.
        at_ms: u64,
        /// When the request was asked, wall-clock milliseconds (what the message counts from).
        asked_ms: u64,
        /// Which kind.
        kind: ResourceKind,
        /// The fraction it would hold.
        share: f64,
        /// The cap.
        cap: f64,
    },
    /// Above the integral cap over some window.
    #[error("{user} would hold on average {:.1}% of the cluster's {kind} over the {} starting {}, above the cap of {:.1}%", .share * 100.0, format_duration_ms(.window_ms.to_owned()), when(*.from_ms, *.asked_ms), .cap * 100.0)]
    Integral {
        /// The user.
        user: String,
        /// Where the first such window starts, wall-clock milliseconds.
        from_ms: u64,
        /// When the request was asked, wall-clock milliseconds (what the message counts from).
        asked_ms: u64,
        /// The window's length.
        window_ms: u64,
        /// Which kind.
        kind: ResourceKind,
        /// The average fraction it would hold.
        share: f64,
        /// The cap.
        cap: f64,
    },
}

impl SharingPolicy {
    /// The caps of `user`.
    pub fn caps(&self, user: &str) -> UserCaps {
        self.users.get(user).copied().unwrap_or(self.default_caps)
    }

    /// Whether `user` may hold `allocations` besides what its reservations in `plan` hold
    /// (without reservation `replacing`, which an update replaces).
    ///
    /// # Errors
    ///
    /// The first cap broken, earliest in time.
    pub fn check(
        &self,
        plan: &Plan,
        user: &str,
        allocations: &[AtomAllocation],
        replacing: Option<ReservationId>,
        asked_ms: u64,
    ) -> Result<(), SharingRefusal> {
        let caps = self.caps(user);
        let pieces = allocations.iter().flat_map(|a| &a.pieces);
        let (Some(first), Some(end)) = (
            pieces.clone().map(|p| p.start).min(),
            pieces.map(|p| p.end).max(),
        ) else {
            return Ok(());
        };
        let quanta = plan.quanta();
        let window = caps.window_ms.div_ceil(quanta.quantum_ms).max(1);
        let integral_capped = caps.integral < 1.0;
        // Every window that overlaps the new allocations, and the quanta they cover.
        let (from, to) = if integral_capped {
            (first.saturating_sub(window - 1), end + window - 1)
        } else {
            (first, end)
        };
        let len = (to - from) as usize;
        let mut held = vec![ResourceVec::ZERO; len];
        let mut add = |allocations: &[AtomAllocation]| {
            for (start, end, amount) in held_runs(allocations) {
                let (a, b) = (start.max(from), end.min(to));
                for h in held
                    .iter_mut()
                    .take((b.max(a) - from) as usize)
                    .skip((a - from) as usize)
                {
                    *h += amount;
                }
            }
        };
        add(allocations);
        plan.reservations()
            .filter(|r| r.user == user && Some(r.id) != replacing)
            .for_each(|r| add(&r.allocations));
        let mut capacity = vec![ResourceVec::ZERO; len];
        for (a, b, value) in plan.capacity().runs(from, to) {
            capacity[(a - from) as usize..(b - from) as usize].fill(value);
        }

        if caps.instantaneous < 1.0 {
            for t in first..end {
                let i = (t - from) as usize;
                if let Some((kind, share)) = over(&held[i], &capacity[i], caps.instantaneous) {
                    return Err(SharingRefusal::Instantaneous {
                        user: user.to_string(),
                        asked_ms,
                        at_ms: quanta.start_ms(t),
                        kind,
                        share,
                        cap: caps.instantaneous,
                    });
                }
            }
        }
        if integral_capped {
            // Sliding sums over `window` quanta, windows starting at from..=to - window.
            let w = (window as usize).min(len);
            let mut held_sum = held[..w].iter().fold(ResourceVec::ZERO, |s, h| s + *h);
            let mut capacity_sum = capacity[..w].iter().fold(ResourceVec::ZERO, |s, c| s + *c);
            for i in 0..=(len - w) {
                if i > 0 {
                    held_sum += held[i + w - 1] - held[i - 1];
                    capacity_sum += capacity[i + w - 1] - capacity[i - 1];
                }
                if let Some((kind, share)) = over(&held_sum, &capacity_sum, caps.integral) {
                    return Err(SharingRefusal::Integral {
                        user: user.to_string(),
                        asked_ms,
                        from_ms: quanta.start_ms(from + i as u64),
                        window_ms: caps.window_ms,
                        kind,
                        share,
                        cap: caps.integral,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The first kind of which `held` is more than `cap` of `capacity`, and the share it is.
fn over(held: &ResourceVec, capacity: &ResourceVec, cap: f64) -> Option<(ResourceKind, f64)> {
    (0..NUM_RESOURCES).find_map(|i| {
        let (h, c) = (held.0[i], capacity.0[i]);
        (h > cap * c.max(0.0) + EPSILON * c.abs().max(1.0)).then(|| {
            let share = if c > EPSILON { h / c } else { f64::INFINITY };
            (ResourceKind::ALL[i], share)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::tests::{config, policy, request, small_expr, small_plan};
    use crate::PolicyKind;
    use fullerene_scheduling::testkit::res;
    use proptest::prelude::*;

    fn plan() -> Plan {
        let mut config = config(PolicyKind::Gree);
        config.sharing.users.insert(
            "alice".into(),
            UserCaps {
                instantaneous: 0.2,
                ..UserCaps::default()
            },
        );
        config.sharing.users.insert(
            "carol".into(),
            UserCaps {
                integral: 0.05,
                window_ms: 100_000,
                ..UserCaps::default()
            },
        );
        Plan::new(config, res("cpus=10,mem_mib=1000"))
    }

    #[test]
    fn the_instantaneous_cap_bounds_every_quantum() {
        let mut plan = plan();
        let three = "window(atom(cpus=1; g=3, h=3, l=10s, w=30), s=0, f=60s)";
        let before = plan.clone();
        let refusal = plan
            .admit(request(1, "alice", three), 0)
            .expect_err("30% of the cpus");
        assert_eq!(
            refusal,
            crate::Refusal::Sharing(SharingRefusal::Instantaneous {
                user: "alice".into(),
                at_ms: 50_000,
                asked_ms: 0,
                kind: ResourceKind::Cpus,
                share: 0.3,
                cap: 0.2,
            })
        );
        assert_eq!(
            refusal.to_string(),
            "sharing policy: alice would hold 30.0% of the cluster's cpus 50s after the request, \
             above the cap of 20.0%"
        );
        assert_eq!(plan, before);
        plan.admit(request(2, "bob", three), 0)
            .expect("bob has no cap");
        plan.admit(
            request(
                3,
                "alice",
                &three
                    .replace("g=3, h=3", "g=2, h=2")
                    .replace("w=30", "w=20"),
            ),
            0,
        )
        .expect("20% is within the cap");
        // Alice's second reservation at the same time would take her to 30%.
        let again = plan.admit(
            request(
                4,
                "alice",
                "window(atom(cpus=1; g=1, h=1, l=10s, w=10), s=0, f=60s)",
            ),
            0,
        );
        assert!(matches!(
            again,
            Err(crate::Refusal::Sharing(
                SharingRefusal::Instantaneous { .. }
            ))
        ));
        // Memory counts on its own.
        let memory = plan.admit(
            request(
                5,
                "alice",
                "window(atom(mem_mib=300; g=1, h=1, l=10s, w=10), s=100s, f=200s)",
            ),
            0,
        );
        assert!(matches!(
            memory,
            Err(crate::Refusal::Sharing(SharingRefusal::Instantaneous {
                kind: ResourceKind::MemMib,
                ..
            }))
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        /// Whatever is accepted, no user ever holds more than its caps allow, checked quantum
        /// by quantum and window by window from the reservations' pieces.
        #[test]
        fn accepted_reservations_respect_every_users_caps(
            policy in policy(),
            caps in prop::collection::vec((prop_oneof![Just(0.3), Just(0.5), Just(1.0)], prop_oneof![Just(0.2), Just(0.4), Just(1.0)]), 3),
            requests in prop::collection::vec((small_expr(), 0usize..3), 1..12),
        ) {
            let mut plan = small_plan(policy, 12);
            let mut sharing = SharingPolicy::default();
            for (user, (instantaneous, integral)) in caps.iter().enumerate() {
                sharing.users.insert(format!("u{user}"), UserCaps { instantaneous: *instantaneous, integral: *integral, window_ms: 60_000 });
            }
            plan.reconfigure(policy, sharing);
            for (id, (text, user)) in requests.iter().enumerate() {
                let _ = plan.admit(request(id as u64 + 1, &format!("u{user}"), text), 0);
            }
            for (user, (instantaneous, integral)) in caps.iter().enumerate() {
                let name = format!("u{user}");
                let held: Vec<ResourceVec> = (0..660)
                    .map(|t| {
                        plan.reservations()
                            .filter(|r| r.user == name)
                            .fold(ResourceVec::ZERO, |sum, r| sum + r.held_at(t))
                    })
                    .collect();
                for (t, h) in held.iter().enumerate() {
                    let cap = plan.capacity().at(t as u64).scale(*instantaneous);
                    prop_assert!(fullerene_scheduling::fits(h, &cap), "{} at {}: {} over {}", name, t, h, cap);
                }
                for window in held.windows(60) {
                    let sum = window.iter().fold(ResourceVec::ZERO, |s, h| s + *h);
                    let cap = plan.capacity().at(0).scale(60.0 * integral);
                    prop_assert!(fullerene_scheduling::fits(&sum, &cap), "{}: {} over {}", name, sum, cap);
                }
            }
        }
    }

    #[test]
    fn the_integral_cap_bounds_every_sliding_window() {
        // 5% of 10 cpus over 100 s: 50 cpu-seconds in any 100 s.
        let mut plan = plan();
        plan.admit(
            request(
                1,
                "carol",
                "window(atom(cpus=1; g=1, h=1, l=10s, w=40), s=0, f=100s)",
            ),
            0,
        )
        .expect("40 cpu-seconds");
        let refusal = plan
            .admit(
                request(
                    2,
                    "carol",
                    "window(atom(cpus=1; g=1, h=1, l=10s, w=20), s=0, f=100s)",
                ),
                0,
            )
            .expect_err("60 in the same 100 s");
        let crate::Refusal::Sharing(SharingRefusal::Integral {
            kind,
            share,
            window_ms,
            ..
        }) = refusal
        else {
            panic!("{refusal:?}");
        };
        assert_eq!((kind, window_ms), (ResourceKind::Cpus, 100_000));
        assert!((share - 0.06).abs() < 1e-9, "{share}");
        // Far enough apart, no 100 s window holds both.
        plan.admit(
            request(
                3,
                "carol",
                "window(atom(cpus=1; g=1, h=1, l=10s, w=20), s=300s, f=400s)",
            ),
            0,
        )
        .expect("in another window");
        // An update replaces what it updates instead of adding to it.
        plan.update(
            crate::ReservationId(1),
            crate::parse("window(atom(cpus=1; g=1, h=1, l=10s, w=50), s=0, f=100s)")
                .expect("parses"),
            0,
        )
        .expect("50 cpu-seconds is the cap");
    }
}
