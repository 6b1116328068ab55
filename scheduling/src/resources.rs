//! Multi-resource amounts.
//!
//! On the wire resources are a map from resource name to amount ([`Resources`]), so that a new
//! resource kind never changes the message layout. Inside the schedulers the same amounts are a
//! dense [`ResourceVec`] over the standard kinds: the planner, the matcher and the allocator
//! compare millions of vectors per second and a map would dominate their cost.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Add, AddAssign, Index, IndexMut, Sub, SubAssign};

use serde::{Deserialize, Serialize};

/// Number of resource kinds Fullerene schedules (see [`ResourceKind`]).
pub const NUM_RESOURCES: usize = 5;

/// Tolerance used when comparing amounts, so that sums of floating-point demands that equal a
/// capacity exactly on paper are not rejected for a rounding error (see [`crate::fit`]).
pub const EPSILON: f64 = 1e-9;

/// The resource kinds an agent reports and a task demands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ResourceKind {
    /// CPU cores (fractional amounts allowed).
    Cpus,
    /// Memory in MiB.
    MemMib,
    /// Disk bandwidth in MB/s. Fungible: may be overbooked (Graphene §5).
    DiskMbps,
    /// Network bandwidth in Mb/s. Fungible: may be overbooked (Graphene §5).
    NetMbps,
    /// Whole GPUs.
    Gpus,
}

impl ResourceKind {
    /// Every kind, in the order of a [`ResourceVec`]'s components.
    pub const ALL: [ResourceKind; NUM_RESOURCES] = [
        ResourceKind::Cpus,
        ResourceKind::MemMib,
        ResourceKind::DiskMbps,
        ResourceKind::NetMbps,
        ResourceKind::Gpus,
    ];

    /// The name used in workload files, flags and on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            ResourceKind::Cpus => "cpus",
            ResourceKind::MemMib => "mem_mib",
            ResourceKind::DiskMbps => "disk_mbps",
            ResourceKind::NetMbps => "net_mbps",
            ResourceKind::Gpus => "gpus",
        }
    }

    /// Parses a resource name; `None` for a name Fullerene does not schedule.
    pub fn from_name(name: &str) -> Option<ResourceKind> {
        ResourceKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Index of this kind in a [`ResourceVec`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Fungible resources (disk and network bandwidth) degrade gracefully when overbooked: tasks
    /// slow down instead of failing, so Graphene §5 lets the matcher overbook them a little.
    pub const fn is_fungible(self) -> bool {
        matches!(self, ResourceKind::DiskMbps | ResourceKind::NetMbps)
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a resource map could not be turned into a [`ResourceVec`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResourceError {
    /// A name that is not one of [`ResourceKind::ALL`].
    #[error("unknown resource `{name}` (known: cpus, mem_mib, disk_mbps, net_mbps, gpus)")]
    UnknownResource {
        /// The name as given.
        name: String,
    },
    /// A negative, NaN or infinite amount.
    #[error("resource `{name}` has invalid amount {amount}: amounts must be finite and >= 0")]
    InvalidAmount {
        /// The resource's name.
        name: String,
        /// The amount as given.
        amount: f64,
    },
    /// A `name=amount` list entry without `=` or with an amount that is not a number.
    #[error("cannot parse resource entry `{entry}`: expected NAME=AMOUNT, e.g. cpus=16")]
    Syntax {
        /// The entry as given.
        entry: String,
    },
}

/// A dense vector of amounts, one per [`ResourceKind`].
#[derive(Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct ResourceVec(pub [f64; NUM_RESOURCES]);

impl ResourceVec {
    /// All zero.
    pub const ZERO: ResourceVec = ResourceVec([0.0; NUM_RESOURCES]);

    /// A vector from `(kind, amount)` pairs; kinds not named are zero.
    pub fn from_pairs(pairs: &[(ResourceKind, f64)]) -> ResourceVec {
        let mut v = ResourceVec::ZERO;
        for &(kind, amount) in pairs {
            v[kind] = amount;
        }
        v
    }

    /// The amount of one kind.
    pub fn get(&self, kind: ResourceKind) -> f64 {
        self.0[kind.index()]
    }

    /// True when this demand fits in `room`: the fit rule [`crate::fit::fits`], as a method.
    #[inline]
    pub fn fits_in(&self, room: &ResourceVec) -> bool {
        crate::fit::fits(self, room)
    }

    /// True when a machine of `capacity` may be charged this much in all, fungible kinds
    /// overbooked by up to `allowance` (Graphene §5): [`crate::fit::Overbooking::admits`], as a
    /// method.
    pub fn fits_with_overbooking(&self, capacity: &ResourceVec, allowance: f64) -> bool {
        crate::fit::Overbooking(allowance).admits(self, capacity)
    }

    /// Component-wise `self - other`, floored at zero.
    pub fn saturating_sub(&self, other: &ResourceVec) -> ResourceVec {
        let mut out = *self;
        for (o, x) in out.0.iter_mut().zip(other.0.iter()) {
            *o = (*o - *x).max(0.0);
        }
        out
    }

    /// Component-wise minimum.
    pub fn min(&self, other: &ResourceVec) -> ResourceVec {
        let mut out = *self;
        for (o, x) in out.0.iter_mut().zip(other.0.iter()) {
            *o = o.min(*x);
        }
        out
    }

    /// Component-wise maximum.
    pub fn max(&self, other: &ResourceVec) -> ResourceVec {
        let mut out = *self;
        for (o, x) in out.0.iter_mut().zip(other.0.iter()) {
            *o = o.max(*x);
        }
        out
    }

    /// Every component multiplied by `factor`.
    pub fn scale(&self, factor: f64) -> ResourceVec {
        let mut out = *self;
        for o in out.0.iter_mut() {
            *o *= factor;
        }
        out
    }

    /// Dot product, the packing score of Tetris and Graphene §5 when both sides are normalised.
    pub fn dot(&self, other: &ResourceVec) -> f64 {
        self.0.iter().zip(other.0.iter()).map(|(a, b)| a * b).sum()
    }

    /// Each component divided by the same component of `capacity`; kinds the capacity lacks
    /// contribute 0 when the demand is 0 and infinity otherwise (the demand can never fit).
    pub fn normalized_by(&self, capacity: &ResourceVec) -> ResourceVec {
        let mut out = ResourceVec::ZERO;
        for i in 0..NUM_RESOURCES {
            out.0[i] = share(self.0[i], capacity.0[i]);
        }
        out
    }

    /// The largest share of `capacity` this vector takes: DRF's dominant share.
    pub fn dominant_share(&self, capacity: &ResourceVec) -> f64 {
        (0..NUM_RESOURCES)
            .map(|i| share(self.0[i], capacity.0[i]))
            .fold(0.0, f64::max)
    }

    /// True when every component is (within [`EPSILON`]) zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|x| x.abs() <= EPSILON)
    }

    /// True when every component is finite and non-negative.
    pub fn is_valid(&self) -> bool {
        self.0.iter().all(|x| x.is_finite() && *x >= 0.0)
    }

    /// Sum of components.
    pub fn sum(&self) -> f64 {
        self.0.iter().sum()
    }
}

fn share(amount: f64, capacity: f64) -> f64 {
    if capacity > EPSILON {
        amount / capacity
    } else if amount <= EPSILON {
        0.0
    } else {
        f64::INFINITY
    }
}

impl Index<ResourceKind> for ResourceVec {
    type Output = f64;
    fn index(&self, kind: ResourceKind) -> &f64 {
        &self.0[kind.index()]
    }
}

impl IndexMut<ResourceKind> for ResourceVec {
    fn index_mut(&mut self, kind: ResourceKind) -> &mut f64 {
        &mut self.0[kind.index()]
    }
}

impl Add for ResourceVec {
    type Output = ResourceVec;
    fn add(mut self, rhs: ResourceVec) -> ResourceVec {
        self += rhs;
        self
    }
}

impl AddAssign for ResourceVec {
    fn add_assign(&mut self, rhs: ResourceVec) {
        for (a, b) in self.0.iter_mut().zip(rhs.0.iter()) {
            *a += *b;
        }
    }
}

impl Sub for ResourceVec {
    type Output = ResourceVec;
    fn sub(mut self, rhs: ResourceVec) -> ResourceVec {
        self -= rhs;
        self
    }
}

impl SubAssign for ResourceVec {
    fn sub_assign(&mut self, rhs: ResourceVec) {
        for (a, b) in self.0.iter_mut().zip(rhs.0.iter()) {
            *a -= *b;
        }
    }
}

impl fmt::Debug for ResourceVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ResourceVec {
    /// `cpus=16,mem_mib=65536,...`, the same syntax `--resources` and `--machine-resources` accept.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for kind in ResourceKind::ALL {
            let amount = self[kind];
            if amount == 0.0 && kind != ResourceKind::Cpus {
                continue;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}={}", kind.name(), amount)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ResourceVec {
    type Err = ResourceError;

    /// Parses `cpus=16,mem_mib=65536,disk_mbps=1000`; kinds not named are zero.
    fn from_str(s: &str) -> Result<ResourceVec, ResourceError> {
        let mut map = Resources::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, amount) = entry.split_once('=').ok_or_else(|| ResourceError::Syntax {
                entry: entry.to_string(),
            })?;
            let amount: f64 = amount.trim().parse().map_err(|_| ResourceError::Syntax {
                entry: entry.to_string(),
            })?;
            map.insert(name.trim(), amount);
        }
        map.to_vec()
    }
}

/// Resource amounts as they travel on the wire: a map from resource name to amount, encoded
/// as a map, each name once.
///
/// Held as a short list in name order rather than a `BTreeMap`: a map's node has room for
/// eleven entries whatever it holds (about 400 bytes for the two or three names a task
/// gives), and the master keeps one per tracked task. Known names (`cpus`, `mem_mib`, ...)
/// are not allocated. Decoding keeps a name's last amount when it comes twice, as a map does.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct Resources(
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "arbitrary_entries()"))]
    Vec<(Cow<'static, str>, f64)>,
);

impl Resources {
    /// No resources.
    pub const fn new() -> Resources {
        Resources(Vec::new())
    }

    /// Sets `name`'s amount (replacing what it had).
    pub fn insert(&mut self, name: impl Into<String>, amount: f64) {
        let name = interned(name.into());
        match self
            .0
            .binary_search_by(|(n, _)| n.as_ref().cmp(name.as_ref()))
        {
            Ok(at) => self.0[at].1 = amount,
            Err(at) => self.0.insert(at, (name, amount)),
        }
    }

    /// The amount of `name`, if named.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0
            .binary_search_by(|(n, _)| n.as_ref().cmp(name))
            .ok()
            .map(|at| self.0[at].1)
    }

    /// Names and amounts, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        self.0.iter().map(|(name, amount)| (name.as_ref(), *amount))
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing is named.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The dense form, rejecting unknown names and invalid amounts with the offending entry.
    pub fn to_vec(&self) -> Result<ResourceVec, ResourceError> {
        let mut v = ResourceVec::ZERO;
        for (name, amount) in self.iter() {
            let kind =
                ResourceKind::from_name(name).ok_or_else(|| ResourceError::UnknownResource {
                    name: name.to_string(),
                })?;
            if !amount.is_finite() || amount < 0.0 {
                return Err(ResourceError::InvalidAmount {
                    name: name.to_string(),
                    amount,
                });
            }
            v[kind] = amount;
        }
        Ok(v)
    }
}

/// A known resource's name without an allocation; another name as given.
fn interned(name: String) -> Cow<'static, str> {
    match ResourceKind::from_name(&name) {
        Some(kind) => Cow::Borrowed(kind.name()),
        None => Cow::Owned(name),
    }
}

impl<N: Into<String>> FromIterator<(N, f64)> for Resources {
    /// A name given twice keeps its last amount.
    fn from_iter<I: IntoIterator<Item = (N, f64)>>(entries: I) -> Resources {
        let mut resources = Resources::new();
        for (name, amount) in entries {
            resources.insert(name, amount);
        }
        resources
    }
}

impl Serialize for Resources {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, amount) in self.iter() {
            map.serialize_entry(name, &amount)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Resources, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Resources;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map from resource name to amount")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<Resources, A::Error> {
                let mut resources = Resources::new();
                while let Some((name, amount)) = access.next_entry::<String, f64>()? {
                    resources.insert(name, amount);
                }
                Ok(resources)
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[cfg(feature = "arbitrary")]
fn arbitrary_entries() -> impl proptest::strategy::Strategy<Value = Vec<(Cow<'static, str>, f64)>> {
    use proptest::prelude::*;
    proptest::collection::btree_map(any::<String>(), any::<f64>(), 0..4)
        .prop_map(|map| map.into_iter().collect::<Resources>().0)
}

impl From<ResourceVec> for Resources {
    /// Zero components are left out, so the map stays small on the wire.
    fn from(v: ResourceVec) -> Resources {
        let mut entries: Vec<(Cow<'static, str>, f64)> = ResourceKind::ALL
            .into_iter()
            .filter(|k| v[*k] != 0.0)
            .map(|k| (Cow::Borrowed(k.name()), v[k]))
            .collect();
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        Resources(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        let v: ResourceVec = "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000"
            .parse()
            .unwrap();
        assert_eq!(v[ResourceKind::Cpus], 16.0);
        assert_eq!(v[ResourceKind::Gpus], 0.0);
        assert_eq!(v.to_string().parse::<ResourceVec>().unwrap(), v);
    }

    #[test]
    fn parse_rejects_unknown_names_and_bad_amounts() {
        assert!(matches!(
            "cpus=1,fpgas=2".parse::<ResourceVec>(),
            Err(ResourceError::UnknownResource { name }) if name == "fpgas"
        ));
        assert!(matches!(
            "cpus=-1".parse::<ResourceVec>(),
            Err(ResourceError::InvalidAmount { .. })
        ));
        assert!(matches!(
            "cpus".parse::<ResourceVec>(),
            Err(ResourceError::Syntax { .. })
        ));
    }

    #[test]
    fn fit_dominant_share_and_overbooking() {
        let cap = ResourceVec::from_pairs(&[
            (ResourceKind::Cpus, 16.0),
            (ResourceKind::MemMib, 1024.0),
            (ResourceKind::NetMbps, 100.0),
        ]);
        let d = ResourceVec::from_pairs(&[
            (ResourceKind::Cpus, 4.0),
            (ResourceKind::MemMib, 512.0),
            (ResourceKind::NetMbps, 110.0),
        ]);
        assert!(!d.fits_in(&cap));
        assert!(d.fits_with_overbooking(&cap, 0.2));
        assert!(!d.fits_with_overbooking(&cap, 0.05));
        assert!((d.dominant_share(&cap) - 1.1).abs() < 1e-12);
        let gpu = ResourceVec::from_pairs(&[(ResourceKind::Gpus, 1.0)]);
        assert_eq!(gpu.dominant_share(&cap), f64::INFINITY);
    }

    #[test]
    fn map_round_trip_drops_zeroes() {
        let v = ResourceVec::from_pairs(&[(ResourceKind::Cpus, 2.0), (ResourceKind::Gpus, 1.0)]);
        let m = Resources::from(v);
        assert_eq!(m.len(), 2);
        assert_eq!(m.to_vec().unwrap(), v);
    }
}
