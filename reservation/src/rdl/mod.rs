//! Rayon's Reservation Definition Language (RDL, Rayon §3.1) as a typed expression tree, its text
//! syntax and its validation.
//!
//! An [`Expr`] is one of:
//!
//! - `atom(b; g, h, l, w)` ([`Atom`]): `w` bundle-time of work in bundles `b`, at every instant
//!   either no bundle or between `g` (the gang) and `h` (the parallelism) of them, each
//!   allocation lasting at least `l`;
//! - `any(e1, ..., en)`: one of the alternatives;
//! - `all(e1, ..., en)`: every child;
//! - `order(e1, ..., en)`: every child, each child's allocations strictly before all of the
//!   next one's;
//! - `window(e, s, f)`: `e` with its allocations within `[s, f)`;
//! - `repeat(e, every, count)`: `count` occurrences of `e`, the k-th with its windows shifted by
//!   `k × every`. Rayon §3.1 names periodic reservations as a limitation of RDL that new keywords
//!   would lift; this is that keyword, with the semantics of an `all` of the shifted copies.
//!
//! Times are milliseconds after the reservation's *anchor*, the instant it is submitted: `s` and
//! `f` are offsets from it, `l` is a duration and `w` is bundle-milliseconds. A plan turns them into
//! its time quanta (`crate::plan::Quanta`).
//!
//! The text syntax is in [`mod@parse`], validation in [`mod@validate`].

pub mod parse;
pub mod validate;

use std::fmt;

use fullerene_scheduling::ids::stable_digest;
use fullerene_scheduling::ResourceVec;
use serde::{Deserialize, Serialize};

pub use parse::{parse, ParseError, ParseErrorKind};
pub use validate::{validate, Limits, ValidationError, ValidationErrorKind};

/// An atomic expression `atom(b, g, h, l, w)` (Rayon §3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Atom {
    /// The bundle `b`: the unit of allocation, a multi-resource vector.
    pub bundle: ResourceVec,
    /// The gang `g`: at any instant the atom holds no bundle or at least this many.
    pub gang: u32,
    /// The parallelism `h`: at most this many bundles at any instant.
    pub max_parallel: u32,
    /// The minimum lease `l` in milliseconds: every allocated bundle is held at least this long.
    pub min_lease_ms: u64,
    /// The work `w` in bundle-milliseconds: the atom is satisfied when its allocations sum to it.
    pub work_ms: u64,
}

/// An RDL expression (Rayon §3.1), the request of one reservation.
///
/// Its serde form depends on the format. In a human-readable one (JSON: the HTTP API's
/// documents, `--json`) it is the text syntax, one string that operators can read and paste
/// back. In a binary one (bincode: the wire and the replicated state) it is the tree flattened
/// in post-order (children before their parent, see [`FlatNode`]), so that decoding never
/// recurses: a deeply nested request is refused with [`FlatError::TooDeep`] instead of
/// exhausting the decoder's stack (the parser stops at the same depth).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `atom(b, g, h, l, w)`.
    Atom(Atom),
    /// `any(e1, ..., en)`: satisfied by any one child.
    Any(Vec<Expr>),
    /// `all(e1, ..., en)`: satisfied by every child.
    All(Vec<Expr>),
    /// `order(e1, ..., en)`: every child, each one's allocations strictly before the next one's.
    Order(Vec<Expr>),
    /// `window(e, s, f)`: the child's allocations within `[start_ms, end_ms)` after the anchor.
    Window {
        /// The constrained expression.
        expr: Box<Expr>,
        /// `s`, milliseconds after the anchor.
        start_ms: u64,
        /// `f`, milliseconds after the anchor (exclusive).
        end_ms: u64,
    },
    /// `repeat(e, every, count)`: `count` occurrences of the child, the k-th shifted by
    /// `k × period_ms`.
    Repeat {
        /// The repeated expression (a `window`, see [`ValidationErrorKind::RepeatNeedsWindow`]).
        expr: Box<Expr>,
        /// The shift between occurrences, in milliseconds.
        period_ms: u64,
        /// How many occurrences.
        count: u32,
    },
}

impl Expr {
    /// The expression's children, in order.
    pub fn children(&self) -> &[Expr] {
        match self {
            Expr::Atom(_) => &[],
            Expr::Any(children) | Expr::All(children) | Expr::Order(children) => children,
            Expr::Window { expr, .. } | Expr::Repeat { expr, .. } => std::slice::from_ref(expr),
        }
    }

    /// The keyword that starts the expression in the text syntax.
    pub fn keyword(&self) -> &'static str {
        match self {
            Expr::Atom(_) => "atom",
            Expr::Any(_) => "any",
            Expr::All(_) => "all",
            Expr::Order(_) => "order",
            Expr::Window { .. } => "window",
            Expr::Repeat { .. } => "repeat",
        }
    }

    /// A digest of the request as written ([`stable_digest`] of its text, which the masters
    /// parse back to the same request): what a job counting its progress against its own
    /// request names it by, so that the plan follower believes the progress only against that
    /// very request (an operator's update of the reservation changes it).
    pub fn fingerprint(&self) -> u64 {
        stable_digest(&[self.to_string().as_bytes()])
    }

    /// How many of its atoms a job running in the reservation can report finished
    /// (`TaggedJob::finished_atoms`, by their numbers in [`Expr::atoms`]' pre-order): every
    /// one, or none where there is a `repeat`, whose occurrences are for jobs yet to come and
    /// share their atoms' numbers.
    pub fn finishable_atoms(&self) -> usize {
        fn repeats(expr: &Expr) -> bool {
            matches!(expr, Expr::Repeat { .. }) || expr.children().iter().any(repeats)
        }
        if repeats(self) {
            0
        } else {
            self.atoms().len()
        }
    }

    /// The atoms in pre-order: an atom's index here is its number in [`crate::AtomRef`].
    pub fn atoms(&self) -> Vec<&Atom> {
        let mut atoms = Vec::new();
        let mut stack = vec![self];
        while let Some(expr) = stack.pop() {
            if let Expr::Atom(atom) = expr {
                atoms.push(atom);
            }
            stack.extend(expr.children().iter().rev());
        }
        atoms
    }
}

/// Formats a duration in milliseconds with the largest unit that divides it (`90s`, `2h`,
/// `1500ms`), as the text syntax reads it.
pub fn format_duration_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    if ms == 0 {
        return "0s".to_string();
    }
    for (size, unit) in UNITS {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

impl fmt::Display for Atom {
    /// `atom(cpus=1,mem_mib=2048; g=1, h=10, l=1m, w=10m)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "atom({}; g={}, h={}, l={}, w={})",
            self.bundle,
            self.gang,
            self.max_parallel,
            format_duration_ms(self.min_lease_ms),
            format_duration_ms(self.work_ms)
        )
    }
}

impl fmt::Display for Expr {
    /// The text syntax of [`parse()`], on one line; `parse(&e.to_string()) == Ok(e)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Atom(atom) => atom.fmt(f),
            Expr::Any(children) | Expr::All(children) | Expr::Order(children) => {
                write!(f, "{}(", self.keyword())?;
                for (i, child) in children.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    child.fmt(f)?;
                }
                f.write_str(")")
            }
            Expr::Window {
                expr,
                start_ms,
                end_ms,
            } => write!(
                f,
                "window({expr}, s={}, f={})",
                format_duration_ms(*start_ms),
                format_duration_ms(*end_ms)
            ),
            Expr::Repeat {
                expr,
                period_ms,
                count,
            } => write!(
                f,
                "repeat({expr}, every={}, count={count})",
                format_duration_ms(*period_ms)
            ),
        }
    }
}

impl Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            Vec::<FlatNode>::from(self.clone()).serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Expr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Expr, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            parse(&text).map_err(serde::de::Error::custom)
        } else {
            let nodes = Vec::<FlatNode>::deserialize(deserializer)?;
            Expr::try_from(nodes).map_err(serde::de::Error::custom)
        }
    }
}

/// The deepest expression the serde form rebuilds, and the default of [`Limits::max_depth`].
pub const MAX_DEPTH: usize = 16;

/// One node of an [`Expr`] flattened in post-order: a combinator follows its children and says
/// how many it takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FlatNode {
    /// An atom (a leaf).
    Atom(Atom),
    /// `any` over the last `n` expressions.
    Any(u32),
    /// `all` over the last `n` expressions.
    All(u32),
    /// `order` over the last `n` expressions.
    Order(u32),
    /// `window` over the last expression.
    Window {
        /// `s` in milliseconds.
        start_ms: u64,
        /// `f` in milliseconds.
        end_ms: u64,
    },
    /// `repeat` over the last expression.
    Repeat {
        /// The shift between occurrences in milliseconds.
        period_ms: u64,
        /// How many occurrences.
        count: u32,
    },
}

/// Why a flattened expression does not rebuild into a tree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlatError {
    /// A combinator takes more expressions than precede it.
    #[error("node {node} takes {wanted} expressions but only {available} precede it")]
    MissingChildren {
        /// The node's position in the list.
        node: usize,
        /// How many it takes.
        wanted: usize,
        /// How many there are.
        available: usize,
    },
    /// The list does not end with exactly one expression.
    #[error("the list leaves {0} expressions instead of one")]
    NotOneRoot(usize),
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("expression nested deeper than {MAX_DEPTH}")]
    TooDeep,
}

impl From<Expr> for Vec<FlatNode> {
    fn from(expr: Expr) -> Vec<FlatNode> {
        // Post-order without recursion: visit in reverse pre-order (node, then its children last
        // to first), then reverse.
        let mut out = Vec::new();
        let mut stack = vec![expr];
        while let Some(expr) = stack.pop() {
            match expr {
                Expr::Atom(atom) => out.push(FlatNode::Atom(atom)),
                Expr::Any(children) => {
                    out.push(FlatNode::Any(children.len() as u32));
                    stack.extend(children);
                }
                Expr::All(children) => {
                    out.push(FlatNode::All(children.len() as u32));
                    stack.extend(children);
                }
                Expr::Order(children) => {
                    out.push(FlatNode::Order(children.len() as u32));
                    stack.extend(children);
                }
                Expr::Window {
                    expr,
                    start_ms,
                    end_ms,
                } => {
                    out.push(FlatNode::Window { start_ms, end_ms });
                    stack.push(*expr);
                }
                Expr::Repeat {
                    expr,
                    period_ms,
                    count,
                } => {
                    out.push(FlatNode::Repeat { period_ms, count });
                    stack.push(*expr);
                }
            }
        }
        out.reverse();
        out
    }
}

impl TryFrom<Vec<FlatNode>> for Expr {
    type Error = FlatError;

    fn try_from(nodes: Vec<FlatNode>) -> Result<Expr, FlatError> {
        // Each entry: an expression and its depth (an atom is 1 deep).
        let mut stack: Vec<(Expr, usize)> = Vec::new();
        for (node, flat) in nodes.into_iter().enumerate() {
            let wanted = match &flat {
                FlatNode::Atom(_) => 0,
                FlatNode::Any(n) | FlatNode::All(n) | FlatNode::Order(n) => *n as usize,
                FlatNode::Window { .. } | FlatNode::Repeat { .. } => 1,
            };
            if wanted > stack.len() {
                return Err(FlatError::MissingChildren {
                    node,
                    wanted,
                    available: stack.len(),
                });
            }
            let taken = stack.split_off(stack.len() - wanted);
            let depth = 1 + taken.iter().map(|(_, d)| *d).max().unwrap_or(0);
            if depth > MAX_DEPTH {
                return Err(FlatError::TooDeep);
            }
            let mut children = taken.into_iter().map(|(e, _)| e);
            let expr = match flat {
                FlatNode::Atom(atom) => Expr::Atom(atom),
                FlatNode::Any(_) => Expr::Any(children.collect()),
                FlatNode::All(_) => Expr::All(children.collect()),
                FlatNode::Order(_) => Expr::Order(children.collect()),
                FlatNode::Window { start_ms, end_ms } => Expr::Window {
                    expr: Box::new(children.next().ok_or(FlatError::NotOneRoot(0))?),
                    start_ms,
                    end_ms,
                },
                FlatNode::Repeat { period_ms, count } => Expr::Repeat {
                    expr: Box::new(children.next().ok_or(FlatError::NotOneRoot(0))?),
                    period_ms,
                    count,
                },
            };
            stack.push((expr, depth));
        }
        if stack.len() != 1 {
            return Err(FlatError::NotOneRoot(stack.len()));
        }
        stack.pop().map(|(e, _)| e).ok_or(FlatError::NotOneRoot(0))
    }
}

/// Proptest strategies for expressions (for this crate's tests).
#[cfg(test)]
pub(crate) mod strategies {
    use super::{Atom, Expr};
    use fullerene_scheduling::{ResourceKind, ResourceVec};
    use proptest::prelude::*;

    /// Durations in every unit the syntax prints, and any number of milliseconds.
    pub(crate) fn duration() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..5_000,
            (0u64..100_000).prop_map(|s| s * 1_000),
            (0u64..1_000).prop_map(|m| m * 60_000),
            (0u64..100).prop_map(|d| d * 86_400_000),
            any::<u64>(),
        ]
    }

    fn amount() -> impl Strategy<Value = f64> {
        prop_oneof![
            (1u32..100_000).prop_map(|x| f64::from(x) / 8.0),
            0.0f64..1e12,
            (1u32..1000).prop_map(|x| f64::from(x) * 1e-9),
        ]
    }

    /// Any atom, valid or not.
    pub(crate) fn atom() -> impl Strategy<Value = Atom> {
        (
            prop::collection::vec((0..ResourceKind::ALL.len(), amount()), 1..4),
            any::<u32>(),
            any::<u32>(),
            duration(),
            duration(),
        )
            .prop_map(|(amounts, gang, max_parallel, min_lease_ms, work_ms)| {
                let mut bundle = ResourceVec::ZERO;
                for (kind, amount) in amounts {
                    bundle[ResourceKind::ALL[kind]] = amount;
                }
                Atom {
                    bundle,
                    gang,
                    max_parallel,
                    min_lease_ms,
                    work_ms,
                }
            })
    }

    /// Any expression up to 5 deep, valid or not.
    pub(crate) fn expr() -> impl Strategy<Value = Expr> {
        atom()
            .prop_map(Expr::Atom)
            .prop_recursive(4, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::Any),
                    prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::All),
                    prop::collection::vec(inner.clone(), 1..4).prop_map(Expr::Order),
                    (inner.clone(), duration(), duration()).prop_map(|(e, start_ms, end_ms)| {
                        Expr::Window {
                            expr: Box::new(e),
                            start_ms,
                            end_ms,
                        }
                    }),
                    (inner, duration(), any::<u32>()).prop_map(|(e, period_ms, count)| {
                        Expr::Repeat {
                            expr: Box::new(e),
                            period_ms,
                            count,
                        }
                    }),
                ]
            })
    }
}
