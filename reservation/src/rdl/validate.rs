//! Validation of RDL expressions against a plan's limits: the checks Rayon §3.1's compiler makes
//! before planning ("simple satisfiability and validity"), each failure a typed
//! [`ValidationError`] naming the node.
//!
//! Times are checked in the plan's quanta ([`Limits::quantum_ms`]): a window keeps the whole
//! quanta inside it (its start rounded up, its end down), a lease lasts whole quanta (rounded
//! up), and work must be a whole number of bundle-quanta. A window must be able to hold what it
//! constrains: an atom needs at least `max(l, w / h)`, an `order` the sum of its children's
//! needs, an `all` the largest, an `any` the smallest. This is a necessary condition only: the
//! plan may still lack the room, which admission reports (`crate::Refusal`).

use serde::{Deserialize, Serialize};

use super::{format_duration_ms, Expr, MAX_DEPTH};
use crate::split::reachable;

/// What a plan accepts: its time step and how large and how far ahead a request may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The plan's time quantum in milliseconds.
    pub quantum_ms: u64,
    /// How far after its submission a reservation may reach, in milliseconds.
    pub horizon_ms: u64,
    /// The deepest nesting (an atom alone is 1 deep), at most [`MAX_DEPTH`].
    pub max_depth: usize,
    /// The most nodes an expression may have as written.
    pub max_nodes: usize,
    /// The most atoms once repeats are unrolled: bounds the work of one placement.
    pub max_atoms: usize,
    /// The largest parallelism `h` of an atom.
    pub max_bundles: u32,
}

impl Default for Limits {
    /// One-minute quanta over 30 days (43,200 quanta), 16 levels, 256 nodes, 1,024 atoms
    /// unrolled, 100,000 bundles.
    fn default() -> Limits {
        Limits {
            quantum_ms: 60_000,
            horizon_ms: 30 * 86_400_000,
            max_depth: MAX_DEPTH,
            max_nodes: 256,
            max_atoms: 1_024,
            max_bundles: 100_000,
        }
    }
}

/// A node of an expression that breaks a rule, and the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {kind}")]
pub struct ValidationError {
    /// Where: the keywords from the root, with each child's index under `any`, `all` and
    /// `order` (`window > order > atom[1]`).
    pub at: String,
    /// Which rule.
    pub kind: ValidationErrorKind,
}

/// The rules [`validate`] checks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidationErrorKind {
    /// Nested deeper than [`Limits::max_depth`].
    #[error("nested {depth} deep, more than {max}")]
    TooDeep {
        /// The expression's depth.
        depth: usize,
        /// The limit.
        max: usize,
    },
    /// More nodes than [`Limits::max_nodes`].
    #[error("{nodes} nodes, more than {max}")]
    TooManyNodes {
        /// The expression's nodes.
        nodes: usize,
        /// The limit.
        max: usize,
    },
    /// More atoms than [`Limits::max_atoms`] once repeats are unrolled.
    #[error("{atoms} atoms once repeats are unrolled, more than {max}")]
    TooManyAtoms {
        /// The atoms unrolled.
        atoms: usize,
        /// The limit.
        max: usize,
    },
    /// `any`, `all` or `order` without a child.
    #[error("no child expression")]
    NoChildren,
    /// A bundle of nothing, or with a negative or non-finite amount.
    #[error("the bundle must be finite, non-negative and not empty, not {0}")]
    InvalidBundle(String),
    /// `g` is 0.
    #[error("the gang g must be at least 1")]
    ZeroGang,
    /// `g > h`.
    #[error("the gang g={gang} exceeds the parallelism h={max_parallel}")]
    GangAboveParallelism {
        /// g.
        gang: u32,
        /// h.
        max_parallel: u32,
    },
    /// `h` above [`Limits::max_bundles`].
    #[error("the parallelism h={max_parallel} exceeds the plan's limit of {max}")]
    TooManyBundles {
        /// h.
        max_parallel: u32,
        /// The limit.
        max: u32,
    },
    /// `l` is 0.
    #[error("the minimum lease l must be at least 1ms")]
    ZeroLease,
    /// `w` is 0.
    #[error("the work w must be more than 0")]
    ZeroWork,
    /// `w` is not a whole number of bundle-quanta.
    #[error("the work w={work} is not a whole number of the plan's {quantum} quanta")]
    WorkNotWholeQuanta {
        /// w, formatted.
        work: String,
        /// The quantum, formatted.
        quantum: String,
    },
    /// No run of quanta within the window carries exactly `w` with `g` to `h` bundles at every
    /// quantum and every lease at least `l` (e.g. `g = h = 3` and a `w` of 10 bundle-quanta).
    #[error("the work w={work} cannot be split into leases of at least l={lease} with g={gang} to h={max_parallel} bundles")]
    WorkUnreachable {
        /// w, formatted.
        work: String,
        /// l, formatted.
        lease: String,
        /// g.
        gang: u32,
        /// h.
        max_parallel: u32,
    },
    /// `s >= f`.
    #[error("the window [{start}, {end}) is empty")]
    EmptyWindow {
        /// s, formatted.
        start: String,
        /// f, formatted.
        end: String,
    },
    /// A window ends past [`Limits::horizon_ms`] (in the last occurrence of a repeat).
    #[error("the window ends at {end}, past the plan's horizon of {horizon}")]
    BeyondHorizon {
        /// Where the window ends, formatted.
        end: String,
        /// The horizon, formatted.
        horizon: String,
    },
    /// A window (with the windows around it) shorter than what it holds needs.
    #[error("the window leaves {has} (whole quanta, within the windows around it) but what it holds needs at least {needs}")]
    WindowTooShort {
        /// The window's usable length, formatted.
        has: String,
        /// The least time its expression needs, formatted.
        needs: String,
    },
    /// `repeat` of something other than a `window`.
    #[error("repeat needs a window to shift (repeat(window(e, s=.., f=..), every=.., count=..))")]
    RepeatNeedsWindow,
    /// `repeat` with a count or period of 0.
    #[error("repeat needs a count and a period above 0")]
    EmptyRepeat,
}

/// Checks `expr` against `limits`; `Ok` means every rule of the module docs holds.
///
/// # Errors
///
/// The first rule broken, in pre-order.
pub fn validate(expr: &Expr, limits: &Limits) -> Result<(), ValidationError> {
    // Depth and size first, without recursion: the checks below recurse.
    let (mut nodes, mut depth) = (0, 0);
    let mut stack = vec![(expr, 1)];
    while let Some((node, d)) = stack.pop() {
        nodes += 1;
        depth = depth.max(d);
        stack.extend(node.children().iter().map(|c| (c, d + 1)));
    }
    let root = expr.keyword().to_string();
    let max_depth = limits.max_depth.min(MAX_DEPTH);
    if depth > max_depth {
        return Err(ValidationError {
            at: root,
            kind: ValidationErrorKind::TooDeep {
                depth,
                max: max_depth,
            },
        });
    }
    if nodes > limits.max_nodes {
        return Err(ValidationError {
            at: root,
            kind: ValidationErrorKind::TooManyNodes {
                nodes,
                max: limits.max_nodes,
            },
        });
    }
    let checker = Checker {
        limits: *limits,
        quantum: limits.quantum_ms.max(1),
    };
    let whole = Interval {
        start_ms: 0,
        end_ms: limits.horizon_ms,
    };
    let need = checker.check(expr, &root, whole, 0)?;
    checker.holds(&root, whole, need.span)?;
    if need.atoms > limits.max_atoms {
        return Err(ValidationError {
            at: root,
            kind: ValidationErrorKind::TooManyAtoms {
                atoms: need.atoms,
                max: limits.max_atoms,
            },
        });
    }
    Ok(())
}

/// The time after the anchor an expression may use, in milliseconds.
#[derive(Clone, Copy)]
struct Interval {
    start_ms: u64,
    end_ms: u64,
}

/// What a subexpression needs: its shortest span in quanta and its atoms unrolled.
struct Need {
    span: u64,
    atoms: usize,
}

struct Checker {
    limits: Limits,
    quantum: u64,
}

impl Checker {
    /// Whole quanta within `interval`.
    fn quanta(&self, interval: Interval) -> u64 {
        (interval.end_ms / self.quantum).saturating_sub(interval.start_ms.div_ceil(self.quantum))
    }

    fn fail(at: &str, kind: ValidationErrorKind) -> ValidationError {
        ValidationError {
            at: at.to_string(),
            kind,
        }
    }

    /// The window `at` (or the horizon) holds `span` quanta.
    fn holds(&self, at: &str, interval: Interval, span: u64) -> Result<(), ValidationError> {
        if span > self.quanta(interval) {
            return Err(Self::fail(
                at,
                ValidationErrorKind::WindowTooShort {
                    has: format_duration_ms(self.quanta(interval) * self.quantum),
                    needs: format_duration_ms(span.saturating_mul(self.quantum)),
                },
            ));
        }
        Ok(())
    }

    /// Checks `expr` within `interval` when its windows are shifted by `shift_ms` (a repeat's
    /// occurrence).
    fn check(
        &self,
        expr: &Expr,
        at: &str,
        interval: Interval,
        shift_ms: u64,
    ) -> Result<Need, ValidationError> {
        let child_at = |i: usize, child: &Expr| match expr {
            Expr::Any(_) | Expr::All(_) | Expr::Order(_) => {
                format!("{at} > {}[{i}]", child.keyword())
            }
            _ => format!("{at} > {}", child.keyword()),
        };
        match expr {
            Expr::Atom(atom) => {
                use ValidationErrorKind as K;
                let bundle = &atom.bundle;
                if !bundle.is_valid() || bundle.is_zero() {
                    return Err(Self::fail(at, K::InvalidBundle(bundle.to_string())));
                }
                if atom.gang == 0 {
                    return Err(Self::fail(at, K::ZeroGang));
                }
                if atom.gang > atom.max_parallel {
                    return Err(Self::fail(
                        at,
                        K::GangAboveParallelism {
                            gang: atom.gang,
                            max_parallel: atom.max_parallel,
                        },
                    ));
                }
                if atom.max_parallel > self.limits.max_bundles {
                    return Err(Self::fail(
                        at,
                        K::TooManyBundles {
                            max_parallel: atom.max_parallel,
                            max: self.limits.max_bundles,
                        },
                    ));
                }
                if atom.min_lease_ms == 0 {
                    return Err(Self::fail(at, K::ZeroLease));
                }
                if atom.work_ms == 0 {
                    return Err(Self::fail(at, K::ZeroWork));
                }
                if atom.work_ms % self.quantum != 0 {
                    return Err(Self::fail(
                        at,
                        K::WorkNotWholeQuanta {
                            work: format_duration_ms(atom.work_ms),
                            quantum: format_duration_ms(self.quantum),
                        },
                    ));
                }
                let shape = crate::split::AtomShape::of(atom, self.quantum);
                if !reachable(&shape, u64::MAX) {
                    return Err(Self::fail(
                        at,
                        K::WorkUnreachable {
                            work: format_duration_ms(atom.work_ms),
                            lease: format_duration_ms(atom.min_lease_ms),
                            gang: atom.gang,
                            max_parallel: atom.max_parallel,
                        },
                    ));
                }
                Ok(Need {
                    span: shape.min_span(),
                    atoms: 1,
                })
            }
            Expr::Any(children) | Expr::All(children) | Expr::Order(children) => {
                if children.is_empty() {
                    return Err(Self::fail(at, ValidationErrorKind::NoChildren));
                }
                let mut needs = Vec::with_capacity(children.len());
                for (i, child) in children.iter().enumerate() {
                    needs.push(self.check(child, &child_at(i, child), interval, shift_ms)?);
                }
                let atoms = needs.iter().map(|n| n.atoms).sum();
                let spans = needs.iter().map(|n| n.span);
                let span = match expr {
                    Expr::Any(_) => spans.min().unwrap_or(0),
                    Expr::All(_) => spans.max().unwrap_or(0),
                    _ => spans.fold(0, u64::saturating_add),
                };
                Ok(Need { span, atoms })
            }
            Expr::Window {
                expr: child,
                start_ms,
                end_ms,
            } => {
                if start_ms >= end_ms {
                    return Err(Self::fail(
                        at,
                        ValidationErrorKind::EmptyWindow {
                            start: format_duration_ms(*start_ms),
                            end: format_duration_ms(*end_ms),
                        },
                    ));
                }
                let end = end_ms.saturating_add(shift_ms);
                if end > self.limits.horizon_ms {
                    return Err(Self::fail(
                        at,
                        ValidationErrorKind::BeyondHorizon {
                            end: format_duration_ms(end),
                            horizon: format_duration_ms(self.limits.horizon_ms),
                        },
                    ));
                }
                // The window within the windows around it (empty where they do not meet).
                let start = interval.start_ms.max(start_ms.saturating_add(shift_ms));
                let inner = Interval {
                    start_ms: start,
                    end_ms: interval.end_ms.min(end).max(start),
                };
                let need = self.check(child, &child_at(0, child), inner, shift_ms)?;
                self.holds(at, inner, need.span)?;
                Ok(need)
            }
            Expr::Repeat {
                expr: child,
                period_ms,
                count,
            } => {
                if *count == 0 || *period_ms == 0 {
                    return Err(Self::fail(at, ValidationErrorKind::EmptyRepeat));
                }
                if !matches!(**child, Expr::Window { .. }) {
                    return Err(Self::fail(at, ValidationErrorKind::RepeatNeedsWindow));
                }
                // The first and the last occurrence bound the others: a window sliding through
                // a fixed one keeps at least the smaller of its two extreme overlaps.
                let last = period_ms.saturating_mul(u64::from(*count - 1));
                let first = self.check(child, &child_at(0, child), interval, shift_ms)?;
                self.check(
                    child,
                    &child_at(0, child),
                    interval,
                    shift_ms.saturating_add(last),
                )?;
                Ok(Need {
                    span: first.span,
                    atoms: first.atoms.saturating_mul(*count as usize),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdl::parse;

    /// Limits of one-second quanta over an hour.
    fn limits() -> Limits {
        Limits {
            quantum_ms: 1_000,
            horizon_ms: 3_600_000,
            ..Limits::default()
        }
    }

    fn check(text: &str) -> Result<(), ValidationError> {
        validate(&parse(text).expect("parses"), &limits())
    }

    fn kind(text: &str) -> ValidationErrorKind {
        check(text).expect_err("invalid").kind
    }

    #[test]
    fn valid_requests_pass() {
        check("window(order(all(atom(cpus=1; g=1, h=10, l=10s, w=100), atom(cpus=1; g=1, h=20, l=5s, w=200)), atom(cpus=4; g=8, h=8, l=30s, w=240)), s=0, f=2m)").expect("valid");
        check("repeat(window(atom(cpus=1; g=2, h=4, l=2s, w=20), s=0, f=1m), every=5m, count=10)")
            .expect("valid");
    }

    #[test]
    fn atoms_break_named_rules_at_their_path() {
        let e = check("window(order(atom(cpus=1; g=1, h=1, l=1s, w=1), atom(cpus=1; g=3, h=2, l=1s, w=6)), s=0, f=1m)").expect_err("g > h");
        assert_eq!(e.at, "window > order > atom[1]");
        assert_eq!(
            e.kind,
            ValidationErrorKind::GangAboveParallelism {
                gang: 3,
                max_parallel: 2
            }
        );
        assert_eq!(
            kind("atom(cpus=1; g=0, h=2, l=1s, w=6)"),
            ValidationErrorKind::ZeroGang
        );
        assert_eq!(
            kind("atom(cpus=1; g=1, h=2, l=0, w=6)"),
            ValidationErrorKind::ZeroLease
        );
        assert_eq!(
            kind("atom(cpus=1; g=1, h=2, l=1s, w=0)"),
            ValidationErrorKind::ZeroWork
        );
        assert!(matches!(
            kind("atom(cpus=0; g=1, h=2, l=1s, w=6)"),
            ValidationErrorKind::InvalidBundle(_)
        ));
        assert!(matches!(
            kind("atom(cpus=1; g=1, h=200000, l=1s, w=6)"),
            ValidationErrorKind::TooManyBundles { .. }
        ));
        assert!(matches!(
            kind("atom(cpus=1; g=1, h=2, l=1s, w=1500ms)"),
            ValidationErrorKind::WorkNotWholeQuanta { .. }
        ));
        // A rigid gang of 3 cannot hold 10 bundle-quanta; nor can 2..3 bundles hold 5 with
        // leases of 2 (2 then 3 leaves the third bundle one quantum).
        assert!(matches!(
            kind("atom(cpus=1; g=3, h=3, l=1s, w=10)"),
            ValidationErrorKind::WorkUnreachable { .. }
        ));
        assert!(matches!(
            kind("atom(cpus=1; g=2, h=3, l=2s, w=5)"),
            ValidationErrorKind::WorkUnreachable { .. }
        ));
        check("atom(cpus=1; g=2, h=3, l=2s, w=10)").expect("2, 2, 3, 3");
    }

    #[test]
    fn windows_must_hold_their_work() {
        // 100 bundle-seconds at 10 wide take 10 s: a 9-second window is short.
        let e =
            check("window(atom(cpus=1; g=1, h=10, l=1s, w=100), s=1s, f=10s)").expect_err("short");
        assert_eq!(e.at, "window");
        assert_eq!(
            e.kind,
            ValidationErrorKind::WindowTooShort {
                has: "9s".to_string(),
                needs: "10s".to_string()
            }
        );
        check("window(atom(cpus=1; g=1, h=10, l=1s, w=100), s=0, f=10s)").expect("exactly");
        // A lease longer than the window.
        assert!(matches!(
            kind("window(atom(cpus=1; g=1, h=10, l=20s, w=100), s=0, f=10s)"),
            ValidationErrorKind::WindowTooShort { .. }
        ));
        // Each child of the order fits alone; in sequence they need 60 s of a 50 s window.
        let order = "window(order(atom(cpus=1; g=1, h=1, l=1s, w=30), atom(cpus=1; g=1, h=1, l=1s, w=30)), s=0, f=50s)";
        assert!(matches!(
            kind(order),
            ValidationErrorKind::WindowTooShort { .. }
        ));
        check(&order.replace("order", "all")).expect("side by side");
        // An inner window only counts where the outer one overlaps it.
        let e =
            check("window(window(atom(cpus=1; g=1, h=1, l=1s, w=20), s=40s, f=100s), s=0, f=50s)")
                .expect_err("overlap of 10 s");
        assert_eq!(e.at, "window > window");
        assert_eq!(
            kind("window(atom(cpus=1; g=1, h=1, l=1s, w=1), s=5s, f=5s)"),
            ValidationErrorKind::EmptyWindow {
                start: "5s".into(),
                end: "5s".into()
            }
        );
    }

    #[test]
    fn the_horizon_and_repeats_are_checked_at_the_last_occurrence() {
        assert!(matches!(
            kind("window(atom(cpus=1; g=1, h=1, l=1s, w=1), s=0, f=2h)"),
            ValidationErrorKind::BeyondHorizon { .. }
        ));
        check("repeat(window(atom(cpus=1; g=1, h=1, l=1s, w=1), s=0, f=10m), every=10m, count=6)")
            .expect("ends at 1h");
        let e = check(
            "repeat(window(atom(cpus=1; g=1, h=1, l=1s, w=1), s=0, f=10m), every=10m, count=7)",
        )
        .expect_err("ends at 70m");
        assert_eq!(
            (e.at.as_str(), e.kind),
            (
                "repeat > window",
                ValidationErrorKind::BeyondHorizon {
                    end: "70m".into(),
                    horizon: "1h".into()
                }
            )
        );
        assert_eq!(
            kind("repeat(atom(cpus=1; g=1, h=1, l=1s, w=1), every=1m, count=2)"),
            ValidationErrorKind::RepeatNeedsWindow
        );
        assert_eq!(
            kind("repeat(window(atom(cpus=1; g=1, h=1, l=1s, w=1), s=0, f=1m), every=1m, count=0)"),
            ValidationErrorKind::EmptyRepeat
        );
    }

    #[test]
    fn size_limits_count_nodes_depth_and_unrolled_atoms() {
        let small = Limits {
            max_depth: 4,
            max_nodes: 6,
            max_atoms: 8,
            ..limits()
        };
        let deep = parse("all(all(all(all(atom(cpus=1; g=1, h=1, l=1s, w=1)))))").expect("parses");
        assert_eq!(
            validate(&deep, &small).expect_err("deep").kind,
            ValidationErrorKind::TooDeep { depth: 5, max: 4 }
        );
        let wide = parse(&format!(
            "all({})",
            ["atom(cpus=1; g=1, h=1, l=1s, w=1)"; 6].join(", ")
        ))
        .expect("parses");
        assert_eq!(
            validate(&wide, &small).expect_err("wide").kind,
            ValidationErrorKind::TooManyNodes { nodes: 7, max: 6 }
        );
        let unrolled = parse("repeat(window(all(atom(cpus=1; g=1, h=1, l=1s, w=1), atom(cpus=1; g=1, h=1, l=1s, w=1)), s=0, f=1m), every=1m, count=5)").expect("parses");
        assert_eq!(
            validate(&unrolled, &small).expect_err("10 atoms").kind,
            ValidationErrorKind::TooManyAtoms { atoms: 10, max: 8 }
        );
    }
}
