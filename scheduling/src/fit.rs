//! The fit rule and the overbooking allowance: whether a demand fits in what a machine has, and
//! how far its fungible resources may be charged beyond its capacity (Graphene §5). Everything
//! that admits a task (the agent at launch, the master's state machine and its accept
//! validation, the allocator, the framework policies, the simulator) decides with these
//! functions, so that what a policy picks the master accepts and the agent runs.
//!
//! A demand fits in a room when every kind is within it up to [`EPSILON`] ([`fits`]). Disk and
//! network bandwidth are fungible ([`ResourceKind::is_fungible`]): overbooked, they slow tasks
//! down instead of failing them, so a machine may be charged up to its capacity times
//! `1 + allowance` on them ([`Overbooking::ceiling`]). A bundle sees the same allowance from the
//! other side, as room beyond the machine's free resources ([`Overbooking::bundle_room`]).

use crate::resources::{ResourceKind, ResourceVec, EPSILON, NUM_RESOURCES};

/// How far fungible resources (disk, network bandwidth) may be overbooked by default, as a
/// fraction of the machine's capacity. Graphene §5 overbooks only when it is worth it; the paper
/// leaves the amount open. We allow 25%: enough that a task whose bandwidth demand misses by a
/// little can start, small enough that the slowdown of the tasks sharing the link stays moderate.
/// Masters, agents, the matcher and the simulator all start from this value.
pub const DEFAULT_OVERBOOK_ALLOWANCE: f64 = 0.25;

/// The fit rule for one kind: `amount` is at most `limit`, up to [`EPSILON`] (so that sums of
/// floating-point demands that equal a limit on paper are not rejected for a rounding error).
#[inline]
pub fn within(amount: f64, limit: f64) -> bool {
    amount <= limit + EPSILON
}

// `fits` below is unrolled over the five kinds.
const _: () = assert!(NUM_RESOURCES == 5);

/// The fit rule: every kind of `demand` is [`within`] `room`. Unrolled and inlined, since the
/// allocator's scans call it millions of times per cycle.
#[inline]
pub fn fits(demand: &ResourceVec, room: &ResourceVec) -> bool {
    let (d, r) = (&demand.0, &room.0);
    within(d[0], r[0])
        && within(d[1], r[1])
        && within(d[2], r[2])
        && within(d[3], r[3])
        && within(d[4], r[4])
}

/// How many copies of `demand` fit in `room` by the fit rule (kind by kind, so at least every
/// copy that truly fits); `usize::MAX` for a demand of nothing, 0 where the room is negative.
pub fn max_copies(demand: &ResourceVec, room: &ResourceVec) -> usize {
    let mut n = f64::INFINITY;
    for kind in ResourceKind::ALL {
        let d = demand[kind];
        if d > EPSILON {
            n = n.min(((room[kind].max(0.0) + EPSILON) / d).floor());
        }
    }
    if n.is_infinite() || n >= usize::MAX as f64 {
        usize::MAX
    } else {
        n as usize
    }
}

/// Whether a bundle may overbook `kind` where `free` of it is left (negative once the bundle
/// overbooked it already): only a fungible kind, and only while some of it is free. Overbooking
/// puts idle bandwidth to use; a kind with nothing free may belong to a machine that is
/// overbooked already, where more would only slow its tasks down and stack allowances.
#[inline]
pub fn overbookable(kind: ResourceKind, free: f64) -> bool {
    kind.is_fungible() && free > EPSILON
}

/// The fit rule for the tasks of one accept (DESIGN.md step 5): every kind of `asked` within
/// `offered`, except that a fungible kind may go beyond the offer as long as the machine, with
/// `charged` on it already, stays within `ceiling` ([`Overbooking::ceiling`]). A caller that
/// has the ceiling net of the machine's use passes it with `charged` zero.
pub fn fits_offer(
    asked: &ResourceVec,
    offered: &ResourceVec,
    charged: &ResourceVec,
    ceiling: &ResourceVec,
) -> bool {
    ResourceKind::ALL.into_iter().all(|kind| {
        within(asked[kind], offered[kind])
            || (kind.is_fungible() && within(charged[kind] + asked[kind], ceiling[kind]))
    })
}

/// The overbooking allowance: how far a machine's fungible resources (disk and network
/// bandwidth) may be charged beyond its capacity, as a fraction of that capacity (Graphene §5).
/// Configurations keep the bare fraction (it is part of the replicated settings, flags and
/// files); this type is what turns it into limits.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Overbooking(pub f64);

impl Default for Overbooking {
    fn default() -> Overbooking {
        Overbooking(DEFAULT_OVERBOOK_ALLOWANCE)
    }
}

/// Why a text is not an overbooking allowance.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AllowanceError {
    /// The text is not a number.
    #[error("`{text}` is not a number (an overbooking allowance is a fraction >= 0, e.g. 0.25)")]
    NotANumber {
        /// The text as given.
        text: String,
    },
    /// The number is negative, infinite or NaN.
    #[error("`{text}` is not a fraction >= 0 (e.g. 0.25): an overbooking allowance cannot be negative or infinite")]
    OutOfRange {
        /// The text as given.
        text: String,
    },
}

/// Parses a flag's or a file's allowance with the same rule as [`Overbooking::is_valid`], so
/// that masters and agents accept the same values.
impl std::str::FromStr for Overbooking {
    type Err = AllowanceError;

    fn from_str(text: &str) -> Result<Overbooking, AllowanceError> {
        let value: f64 = text
            .trim()
            .parse()
            .map_err(|_| AllowanceError::NotANumber {
                text: text.to_string(),
            })?;
        let allowance = Overbooking(value);
        if allowance.is_valid() {
            Ok(allowance)
        } else {
            Err(AllowanceError::OutOfRange {
                text: text.to_string(),
            })
        }
    }
}

impl Overbooking {
    /// True when the fraction is finite and non-negative (0 allows no overbooking).
    pub fn is_valid(self) -> bool {
        self.0.is_finite() && self.0 >= 0.0
    }

    /// The most a machine of `capacity` may be charged in all: `capacity · (1 + allowance)` on
    /// the fungible kinds, the capacity itself on the others.
    pub fn ceiling(self, capacity: &ResourceVec) -> ResourceVec {
        let mut ceiling = *capacity;
        for kind in ResourceKind::ALL.into_iter().filter(|k| k.is_fungible()) {
            ceiling[kind] = capacity[kind] * (1.0 + self.0);
        }
        ceiling
    }

    /// Whether a machine of `capacity` may be charged `charged` in all (what runs there plus
    /// what launches): the fit rule against [`Overbooking::ceiling`]. Agents, the state machine
    /// and the simulator check every launch with it.
    pub fn admits(self, charged: &ResourceVec, capacity: &ResourceVec) -> bool {
        fits(charged, &self.ceiling(capacity))
    }

    /// What one bundle may take of a machine with `free` of `capacity`: `free`, plus
    /// `allowance · capacity` on the kinds that are [`overbookable`] with that `free` (Graphene's
    /// matcher). With some of a kind free the machine is not overbooked there, so the bundle
    /// keeps it within its ceiling.
    pub fn bundle_room(self, free: &ResourceVec, capacity: &ResourceVec) -> ResourceVec {
        self.extend(free, capacity, |kind| overbookable(kind, free[kind]))
    }

    /// An upper bound of what any bundle may take of a machine with `free` of `capacity`:
    /// `free`, plus `allowance · capacity` on every fungible kind. The allocator rejects an
    /// agent that cannot hold even its smallest pending shape within this bound; a bound, not
    /// [`Overbooking::bundle_room`], so that it never rejects an agent a bundle could use.
    pub fn room_bound(self, free: &ResourceVec, capacity: &ResourceVec) -> ResourceVec {
        self.extend(free, capacity, ResourceKind::is_fungible)
    }

    fn extend(
        self,
        free: &ResourceVec,
        capacity: &ResourceVec,
        overbook: impl Fn(ResourceKind) -> bool,
    ) -> ResourceVec {
        let mut room = *free;
        for kind in ResourceKind::ALL.into_iter().filter(|k| overbook(*k)) {
            room[kind] += self.0 * capacity[kind];
        }
        room
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::res;

    #[test]
    fn allowances_parse_with_the_validity_rule() {
        assert_eq!("0.25".parse(), Ok(Overbooking(0.25)));
        assert_eq!(" 1.5 ".parse(), Ok(Overbooking(1.5)));
        assert_eq!("0".parse(), Ok(Overbooking(0.0)));
        for bad in ["-0.1", "inf", "NaN"] {
            assert!(
                matches!(
                    bad.parse::<Overbooking>(),
                    Err(AllowanceError::OutOfRange { .. })
                ),
                "{bad}"
            );
        }
        let err = "lots".parse::<Overbooking>().unwrap_err();
        assert!(err.to_string().contains("`lots` is not a number"), "{err}");
    }

    #[test]
    fn fits_up_to_epsilon_in_every_kind() {
        let room = res("cpus=4,mem_mib=1024,net_mbps=100");
        assert!(fits(&res("cpus=4,mem_mib=1024,net_mbps=100"), &room));
        assert!(fits(
            &res("cpus=0.1,mem_mib=0.2"),
            &res("cpus=0.1,mem_mib=0.2")
        ));
        assert!(fits(&res("cpus=0.30000000000000004"), &res("cpus=0.3")));
        assert!(!fits(&res("cpus=4.001"), &room));
        assert!(!fits(&res("gpus=1"), &room));
        assert_eq!(res("cpus=1").fits_in(&room), fits(&res("cpus=1"), &room));
    }

    #[test]
    fn copies_are_limited_by_every_kind() {
        let room = res("cpus=8,mem_mib=1000");
        assert_eq!(max_copies(&res("cpus=1,mem_mib=300"), &room), 3);
        assert_eq!(max_copies(&ResourceVec::ZERO, &room), usize::MAX);
        let mut negative = room;
        negative[ResourceKind::Cpus] = -1.0;
        assert_eq!(max_copies(&res("cpus=1"), &negative), 0);
    }

    #[test]
    fn only_fungible_kinds_overbook_up_to_the_ceiling() {
        let cap = res("cpus=16,disk_mbps=1000,net_mbps=100");
        let ceiling = Overbooking(0.25).ceiling(&cap);
        assert_eq!(ceiling, res("cpus=16,disk_mbps=1250,net_mbps=125"));
        assert!(Overbooking(0.25).admits(&res("cpus=16,disk_mbps=1250"), &cap));
        assert!(!Overbooking(0.25).admits(&res("cpus=16.5"), &cap));
        assert!(!Overbooking(0.0).admits(&res("net_mbps=101"), &cap));
        assert!(Overbooking::default().is_valid());
        assert!(!Overbooking(-0.1).is_valid() && !Overbooking(f64::NAN).is_valid());
    }

    #[test]
    fn a_bundle_overbooks_only_kinds_with_some_free() {
        let cap = res("cpus=16,disk_mbps=1000,net_mbps=100");
        let free = res("cpus=2,disk_mbps=10");
        assert_eq!(
            Overbooking(0.5).bundle_room(&free, &cap),
            res("cpus=2,disk_mbps=510")
        );
        assert_eq!(
            Overbooking(0.5).room_bound(&free, &cap),
            res("cpus=2,disk_mbps=510,net_mbps=50")
        );
    }

    #[test]
    fn accepts_go_beyond_the_offer_on_fungible_kinds_only() {
        let offered = res("cpus=4,disk_mbps=100");
        let charged = res("cpus=12,disk_mbps=900");
        let ceiling = Overbooking(0.25).ceiling(&res("cpus=16,disk_mbps=1000"));
        assert!(fits_offer(
            &res("cpus=4,disk_mbps=350"),
            &offered,
            &charged,
            &ceiling
        ));
        assert!(!fits_offer(
            &res("cpus=4,disk_mbps=351"),
            &offered,
            &charged,
            &ceiling
        ));
        assert!(!fits_offer(&res("cpus=4.5"), &offered, &charged, &ceiling));
    }
}
