//! The text syntax of RDL expressions: what `fullerene reservation create` and the SDK read.
//!
//! ```text
//! expr     := atom | any | all | order | window | repeat
//! atom     := "atom" "(" bundle ";" param ("," param)* ")"     each of g, h, l, w exactly once
//! bundle   := RESOURCE "=" NUMBER ("," RESOURCE "=" NUMBER)*   cpus, mem_mib, disk_mbps, net_mbps, gpus
//! param    := "g" "=" INTEGER | "h" "=" INTEGER | "l" "=" DURATION | "w" "=" DURATION
//! any      := "any" "(" expr ("," expr)* ")"
//! all      := "all" "(" expr ("," expr)* ")"
//! order    := "order" "(" expr ("," expr)* ")"
//! window   := "window" "(" expr "," "s" "=" DURATION "," "f" "=" DURATION ")"
//! repeat   := "repeat" "(" expr "," "every" "=" DURATION "," "count" "=" INTEGER ")"
//! NUMBER   := DIGITS ("." DIGITS)?
//! DURATION := DIGITS UNIT?        UNIT: ms, s, m, h, d; without a unit, seconds
//! ```
//!
//! `g` is the gang (bundles at least, when any), `h` the parallelism (bundles at most), `l` the
//! minimum lease and `w` the work in bundle-time: `w=10h` is ten bundle-hours. `s` and `f` are
//! offsets from the moment the reservation is submitted. White space (new lines included) may
//! stand between any two tokens, and `#` starts a comment that runs to the end of the line. For
//! example, Rayon's Figure 5 workflow, two malleable jobs before a gang of 8, due within six hours:
//!
//! ```text
//! window(
//!   order(
//!     all(atom(cpus=1,mem_mib=2048; g=1, h=10, l=1m, w=5h),    # A
//!         atom(cpus=1,mem_mib=4096; g=1, h=20, l=2m, w=8h)),   # B
//!     atom(cpus=4,mem_mib=16384; g=8, h=8, l=30m, w=4h)),      # C: 8 bundles for 30 minutes
//!   s=0, f=6h)
//! ```
//!
//! Errors say where they are: [`ParseError`] carries the line and column (in characters, from 1)
//! and shows the line with a caret under the column.

use std::fmt;

use fullerene_scheduling::{ResourceKind, ResourceVec};

use super::{Atom, Expr, MAX_DEPTH};

/// Parses one RDL expression from its text syntax (see the module docs for the grammar).
///
/// # Errors
///
/// [`ParseError`] at the first token that does not fit the grammar. The expression is not
/// validated beyond its syntax: see [`super::validate()`].
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    let mut parser = Parser { text, pos: 0 };
    let expr = parser.expr(1)?;
    parser.skip_blank();
    if parser.pos < text.len() {
        return Err(parser.error_here(ParseErrorKind::TrailingInput {
            found: parser.found(),
        }));
    }
    Ok(expr)
}

/// A syntax error, at a line and column of the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {kind}\n{excerpt}")]
pub struct ParseError {
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
    /// What is wrong.
    pub kind: ParseErrorKind,
    /// The line, cut to about 70 characters around the column, and a caret under the column.
    pub excerpt: String,
}

/// What a [`ParseError`] found wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// Another token than the grammar allows here.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the grammar allows.
        expected: &'static str,
        /// What stands there (`end of input` at the end).
        found: String,
    },
    /// A name where an expression starts that is not a keyword.
    #[error("unknown expression `{0}` (known: atom, any, all, order, window, repeat)")]
    UnknownExpression(String),
    /// A bundle names a resource Fullerene does not schedule.
    #[error("unknown resource `{0}` (known: cpus, mem_mib, disk_mbps, net_mbps, gpus)")]
    UnknownResource(String),
    /// A bundle names a resource twice.
    #[error("resource `{0}` given twice")]
    DuplicateResource(String),
    /// An atom parameter other than g, h, l and w.
    #[error("unknown atom parameter `{0}` (known: g, h, l, w)")]
    UnknownParameter(String),
    /// An atom parameter given twice.
    #[error("atom parameter `{0}` given twice")]
    DuplicateParameter(String),
    /// An atom without one of its parameters.
    #[error("atom is missing parameter `{0}` (it needs g, h, l and w)")]
    MissingParameter(&'static str),
    /// A duration with a unit other than ms, s, m, h and d.
    #[error("unknown time unit `{0}` (known: ms, s, m, h, d)")]
    UnknownUnit(String),
    /// A number too large for its field, or a unit where none belongs.
    #[error("invalid number `{text}`: {why}")]
    BadNumber {
        /// The number as written.
        text: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// Expressions nested deeper than [`MAX_DEPTH`].
    #[error("expressions nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// Text after the expression.
    #[error("unexpected {found} after the expression")]
    TrailingInput {
        /// What follows.
        found: String,
    },
}

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
}

/// A number token: its digits (with a fractional part) and the letters right after them.
struct NumberToken<'a> {
    at: usize,
    digits: &'a str,
    suffix: &'a str,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    /// Skips white space and `#` comments.
    fn skip_blank(&mut self) {
        loop {
            let rest = self.rest();
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if trimmed.starts_with('#') {
                self.pos += trimmed.find('\n').unwrap_or(trimmed.len());
            } else {
                return;
            }
        }
    }

    fn error_at(&self, at: usize, kind: ParseErrorKind) -> ParseError {
        let before = &self.text[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = before.matches('\n').count() + 1;
        let column = before[line_start..].chars().count() + 1;
        let line_end = self.text[line_start..]
            .find('\n')
            .map_or(self.text.len(), |i| line_start + i);
        let chars: Vec<char> = self.text[line_start..line_end].chars().collect();
        // Keep the excerpt readable on a terminal: about 70 characters around the column.
        let first = (column - 1).saturating_sub(50);
        let last = chars.len().min(first + 70);
        let mut excerpt: String = chars[first..last].iter().collect();
        let lead = if first > 0 { "…" } else { "" };
        if last < chars.len() {
            excerpt.push('…');
        }
        let caret_at = column - 1 - first + lead.chars().count();
        ParseError {
            line,
            column,
            kind,
            excerpt: format!("  {lead}{excerpt}\n  {}^", " ".repeat(caret_at)),
        }
    }

    fn error_here(&self, kind: ParseErrorKind) -> ParseError {
        self.error_at(self.pos, kind)
    }

    /// What stands at the cursor, for an error: a word, a number, a character or the end.
    fn found(&self) -> String {
        let rest = self.rest();
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect();
        if !word.is_empty() {
            format!("`{word}`")
        } else if let Some(c) = rest.chars().next() {
            format!("`{c}`")
        } else {
            "end of input".to_string()
        }
    }

    fn expect(&mut self, token: char, expected: &'static str) -> Result<(), ParseError> {
        self.skip_blank();
        if self.rest().starts_with(token) {
            self.pos += token.len_utf8();
            Ok(())
        } else {
            Err(self.error_here(ParseErrorKind::Expected {
                expected,
                found: self.found(),
            }))
        }
    }

    /// Consumes `token` if it is next.
    fn eat(&mut self, token: char) -> bool {
        self.skip_blank();
        if self.rest().starts_with(token) {
            self.pos += token.len_utf8();
            true
        } else {
            false
        }
    }

    /// A name (`[A-Za-z_][A-Za-z0-9_]*`) and where it starts.
    fn name(&mut self, expected: &'static str) -> Result<(usize, &'a str), ParseError> {
        self.skip_blank();
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if len == 0 {
            return Err(self.error_here(ParseErrorKind::Expected {
                expected,
                found: self.found(),
            }));
        }
        let at = self.pos;
        self.pos += len;
        Ok((at, &rest[..len]))
    }

    /// `name =`, for a keyword argument that must be `name`.
    fn keyword_argument(
        &mut self,
        name: &'static str,
        expected: &'static str,
    ) -> Result<(), ParseError> {
        let (at, found) = self.name(expected)?;
        if found != name {
            return Err(self.error_at(
                at,
                ParseErrorKind::Expected {
                    expected,
                    found: format!("`{found}`"),
                },
            ));
        }
        self.expect('=', "`=`")
    }

    fn number(&mut self, expected: &'static str) -> Result<NumberToken<'a>, ParseError> {
        self.skip_blank();
        let rest = self.rest();
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if int_len == 0 {
            return Err(self.error_here(ParseErrorKind::Expected {
                expected,
                found: self.found(),
            }));
        }
        let mut len = int_len;
        if rest[len..].starts_with('.') {
            let fraction = rest[len + 1..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len() - len - 1);
            if fraction > 0 {
                len += 1 + fraction;
            }
        }
        let suffix_len = rest[len..]
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len() - len);
        let token = NumberToken {
            at: self.pos,
            digits: &rest[..len],
            suffix: &rest[len..len + suffix_len],
        };
        self.pos += len + suffix_len;
        Ok(token)
    }

    fn bad_number(&self, token: &NumberToken<'_>, why: &'static str) -> ParseError {
        self.error_at(
            token.at,
            ParseErrorKind::BadNumber {
                text: token.to_string(),
                why,
            },
        )
    }

    /// A whole number without a unit.
    fn integer(&mut self, expected: &'static str) -> Result<u32, ParseError> {
        let token = self.number(expected)?;
        if !token.suffix.is_empty() || token.digits.contains('.') {
            return Err(self.bad_number(&token, "a whole number without a unit is expected"));
        }
        token
            .digits
            .parse()
            .map_err(|_| self.bad_number(&token, "it does not fit in 32 bits"))
    }

    /// A duration in milliseconds: whole digits and an optional unit (seconds without one).
    fn duration(&mut self, expected: &'static str) -> Result<u64, ParseError> {
        let token = self.number(expected)?;
        if token.digits.contains('.') {
            return Err(self.bad_number(
                &token,
                "durations are whole numbers of a unit (1500ms, not 1.5s)",
            ));
        }
        let unit_ms: u64 = match token.suffix {
            "ms" => 1,
            "" | "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            unit => {
                return Err(self.error_at(
                    token.at + token.digits.len(),
                    ParseErrorKind::UnknownUnit(unit.to_string()),
                ))
            }
        };
        token
            .digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_ms))
            .ok_or_else(|| {
                self.bad_number(
                    &token,
                    "the duration does not fit in 64 bits of milliseconds",
                )
            })
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, ParseError> {
        const EXPRESSION: &str = "an expression (atom, any, all, order, window or repeat)";
        let (at, keyword) = self.name(EXPRESSION)?;
        if depth > MAX_DEPTH {
            return Err(self.error_at(at, ParseErrorKind::TooDeep));
        }
        if !matches!(
            keyword,
            "atom" | "any" | "all" | "order" | "window" | "repeat"
        ) {
            return Err(self.error_at(at, ParseErrorKind::UnknownExpression(keyword.to_string())));
        }
        self.expect('(', "`(`")?;
        let expr = match keyword {
            "atom" => Expr::Atom(self.atom()?),
            "window" => {
                let expr = Box::new(self.expr(depth + 1)?);
                self.expect(',', "`,` and `s=` after the window's expression")?;
                self.keyword_argument("s", "`s=` (the window's start)")?;
                let start_ms = self.duration("a duration such as `0` or `30m`")?;
                self.expect(',', "`,` and `f=` after the window's start")?;
                self.keyword_argument("f", "`f=` (the window's end)")?;
                let end_ms = self.duration("a duration such as `6h`")?;
                Expr::Window {
                    expr,
                    start_ms,
                    end_ms,
                }
            }
            "repeat" => {
                let expr = Box::new(self.expr(depth + 1)?);
                self.expect(',', "`,` and `every=` after the repeated expression")?;
                self.keyword_argument("every", "`every=` (the period)")?;
                let period_ms = self.duration("a duration such as `1d`")?;
                self.expect(',', "`,` and `count=` after the period")?;
                self.keyword_argument("count", "`count=` (how many occurrences)")?;
                let count = self.integer("a whole number of occurrences")?;
                Expr::Repeat {
                    expr,
                    period_ms,
                    count,
                }
            }
            _ => {
                let mut children = vec![self.expr(depth + 1)?];
                while self.eat(',') {
                    children.push(self.expr(depth + 1)?);
                }
                self.expect(')', "`,` and another expression, or `)`")?;
                return Ok(match keyword {
                    "any" => Expr::Any(children),
                    "all" => Expr::All(children),
                    _ => Expr::Order(children),
                });
            }
        };
        if !matches!(expr, Expr::Atom(_)) {
            self.expect(')', "`)`")?;
        }
        Ok(expr)
    }

    /// An atom's arguments, after its `(`, through its `)`.
    fn atom(&mut self) -> Result<Atom, ParseError> {
        let mut bundle = ResourceVec::ZERO;
        let mut named = [false; fullerene_scheduling::NUM_RESOURCES];
        loop {
            let (at, name) =
                self.name("a resource name (cpus, mem_mib, disk_mbps, net_mbps, gpus)")?;
            let kind = ResourceKind::from_name(name).ok_or_else(|| {
                self.error_at(at, ParseErrorKind::UnknownResource(name.to_string()))
            })?;
            if std::mem::replace(&mut named[kind.index()], true) {
                return Err(self.error_at(at, ParseErrorKind::DuplicateResource(name.to_string())));
            }
            self.expect('=', "`=`")?;
            let token = self.number("an amount such as `2` or `0.5`")?;
            if !token.suffix.is_empty() {
                return Err(self.bad_number(&token, "resource amounts take no unit (mem_mib=2048)"));
            }
            let amount: f64 = token
                .digits
                .parse()
                .ok()
                .filter(|a: &f64| a.is_finite())
                .ok_or_else(|| self.bad_number(&token, "not a finite amount"))?;
            bundle[kind] = amount;
            if self.eat(';') {
                break;
            }
            self.expect(
                ',',
                "`,` and another resource, or `;` and the atom's g, h, l, w",
            )?;
        }
        let (mut gang, mut max_parallel, mut lease, mut work) = (None, None, None, None);
        loop {
            let (at, name) = self.name("an atom parameter (g, h, l or w)")?;
            if !matches!(name, "g" | "h" | "l" | "w") {
                return Err(self.error_at(at, ParseErrorKind::UnknownParameter(name.to_string())));
            }
            self.expect('=', "`=`")?;
            let duplicate = match name {
                "g" => gang
                    .replace(self.integer("the gang, a whole number of bundles")?)
                    .is_some(),
                "h" => max_parallel
                    .replace(self.integer("the parallelism, a whole number of bundles")?)
                    .is_some(),
                "l" => lease
                    .replace(self.duration("the minimum lease, a duration such as `1m`")?)
                    .is_some(),
                _ => work
                    .replace(self.duration("the work, in bundle-time such as `10h`")?)
                    .is_some(),
            };
            if duplicate {
                return Err(self.error_at(at, ParseErrorKind::DuplicateParameter(name.to_string())));
            }
            if !self.eat(',') {
                break;
            }
        }
        self.skip_blank();
        let close = self.pos;
        self.expect(')', "`,` and another parameter, or `)`")?;
        let missing = |name| self.error_at(close, ParseErrorKind::MissingParameter(name));
        Ok(Atom {
            bundle,
            gang: gang.ok_or_else(|| missing("g"))?,
            max_parallel: max_parallel.ok_or_else(|| missing("h"))?,
            min_lease_ms: lease.ok_or_else(|| missing("l"))?,
            work_ms: work.ok_or_else(|| missing("w"))?,
        })
    }
}

impl fmt::Display for NumberToken<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.digits, self.suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdl::strategies::expr;
    use fullerene_scheduling::testkit::res;
    use proptest::prelude::*;

    fn atom(bundle: &str, gang: u32, max_parallel: u32, lease_ms: u64, work_ms: u64) -> Expr {
        Expr::Atom(Atom {
            bundle: res(bundle),
            gang,
            max_parallel,
            min_lease_ms: lease_ms,
            work_ms,
        })
    }

    #[test]
    fn parses_the_documented_workflow_with_comments_and_new_lines() {
        let text = "window(\n  order(\n    all(atom(cpus=1,mem_mib=2048; g=1, h=10, l=1m, w=5h),    # A\n        atom(cpus=1,mem_mib=4096; g=1, h=20, l=2m, w=8h)),   # B\n    atom(cpus=4,mem_mib=16384; g=8, h=8, l=30m, w=4h)),      # C\n  s=0, f=6h)";
        let expected = Expr::Window {
            expr: Box::new(Expr::Order(vec![
                Expr::All(vec![
                    atom("cpus=1,mem_mib=2048", 1, 10, 60_000, 5 * 3_600_000),
                    atom("cpus=1,mem_mib=4096", 1, 20, 120_000, 8 * 3_600_000),
                ]),
                atom("cpus=4,mem_mib=16384", 8, 8, 1_800_000, 4 * 3_600_000),
            ])),
            start_ms: 0,
            end_ms: 6 * 3_600_000,
        };
        let parsed = parse(text).expect("parses");
        assert_eq!(parsed, expected);
        // Atoms are numbered in pre-order, as allocations and refusals name them.
        let gangs: Vec<u32> = parsed.atoms().iter().map(|a| a.gang).collect();
        assert_eq!(gangs, vec![1, 1, 8]);
        assert_eq!(parsed.atoms()[1].max_parallel, 20);
    }

    #[test]
    fn parameters_come_in_any_order_and_durations_default_to_seconds() {
        assert_eq!(
            parse("atom(gpus=1 ; w=600, l=1500ms, h=2, g=2)"),
            Ok(atom("gpus=1", 2, 2, 1_500, 600_000))
        );
        assert_eq!(
            parse("repeat(window(atom(cpus=0.5; g=1, h=1, l=1s, w=1s), s=0, f=1h), every=1d, count=7)"),
            Ok(Expr::Repeat {
                expr: Box::new(Expr::Window {
                    expr: Box::new(atom("cpus=0.5", 1, 1, 1_000, 1_000)),
                    start_ms: 0,
                    end_ms: 3_600_000,
                }),
                period_ms: 86_400_000,
                count: 7,
            })
        );
    }

    /// The error's line, column and kind, and its rendering.
    fn error(text: &str) -> (usize, usize, ParseErrorKind, String) {
        let e = parse(text).expect_err("refused");
        (e.line, e.column, e.kind.clone(), e.to_string())
    }

    #[test]
    fn errors_point_at_the_column_with_a_caret() {
        let (line, column, kind, shown) =
            error("window(atom(cpus=1; g=1, h=2, l=1m, w=2m), s=0, f=)");
        assert_eq!((line, column), (1, 51));
        assert_eq!(
            kind,
            ParseErrorKind::Expected {
                expected: "a duration such as `6h`",
                found: "`)`".to_string()
            }
        );
        assert_eq!(
            shown,
            format!(
                "1:51: expected a duration such as `6h`, found `)`\n  {}\n  {}^",
                "window(atom(cpus=1; g=1, h=2, l=1m, w=2m), s=0, f=)",
                " ".repeat(50)
            )
        );

        let (line, column, kind, shown) = error(
            "order(\n  atom(cpus=1; g=1, h=2, l=1m, w=2m),\n  atom(fpgas=1; g=1, h=1, l=1s, w=1s))",
        );
        assert_eq!((line, column), (3, 8));
        assert_eq!(kind, ParseErrorKind::UnknownResource("fpgas".to_string()));
        assert!(
            shown.ends_with("\n    atom(fpgas=1; g=1, h=1, l=1s, w=1s))\n         ^"),
            "{shown}"
        );
    }

    #[test]
    fn on_a_long_line_the_excerpt_is_cut_around_the_caret() {
        let atom = "atom(cpus=1; g=1, h=1, l=1s, w=1)";
        let text = format!("all({}) ?", [atom; 6].join(", "));
        let e = parse(&text).expect_err("trailing");
        assert_eq!(e.column, text.len());
        let shown = e.to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[1].starts_with("  …"), "{shown}");
        let caret = lines[2].chars().position(|c| c == '^').expect("a caret");
        assert_eq!(lines[1].chars().nth(caret), Some('?'), "{shown}");
        assert!(lines[1].chars().count() <= 2 + 1 + 70 + 1, "{shown}");
    }

    #[test]
    fn each_kind_of_mistake_is_named_where_it_is() {
        let cases: [(&str, usize, ParseErrorKind); 9] = [
            (
                "atom(cpus=1; g=1, h=2, l=5y, w=1s)",
                27,
                ParseErrorKind::UnknownUnit("y".into()),
            ),
            (
                "atom(cpus=1; g=1, h=2, l=1s)",
                28,
                ParseErrorKind::MissingParameter("w"),
            ),
            (
                "atom(cpus=1; g=1, h=2, g=3, l=1s, w=1s)",
                24,
                ParseErrorKind::DuplicateParameter("g".into()),
            ),
            (
                "atom(cpus=1, cpus=2; g=1, h=1, l=1s, w=1s)",
                14,
                ParseErrorKind::DuplicateResource("cpus".into()),
            ),
            (
                "atom(cpus=1; g=1, h=1, x=1, l=1s, w=1s)",
                24,
                ParseErrorKind::UnknownParameter("x".into()),
            ),
            (
                "some(atom(cpus=1; g=1, h=1, l=1s, w=1s))",
                1,
                ParseErrorKind::UnknownExpression("some".into()),
            ),
            (
                "atom(cpus=1; g=1.5, h=1, l=1s, w=1s)",
                16,
                ParseErrorKind::BadNumber {
                    text: "1.5".into(),
                    why: "a whole number without a unit is expected",
                },
            ),
            (
                "atom(cpus=1; g=1, h=1, l=1s, w=1s) x",
                36,
                ParseErrorKind::TrailingInput {
                    found: "`x`".into(),
                },
            ),
            (
                "",
                1,
                ParseErrorKind::Expected {
                    expected: "an expression (atom, any, all, order, window or repeat)",
                    found: "end of input".into(),
                },
            ),
        ];
        for (text, column, kind) in cases {
            let (line, at, found, _) = error(text);
            assert_eq!((line, at, found), (1, column, kind), "{text}");
        }
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused_without_recursing_further() {
        let leaf = "atom(cpus=1; g=1, h=1, l=1s, w=1s)";
        let nested = |depth: usize| {
            format!(
                "{}{leaf}{}",
                "all(".repeat(depth - 1),
                ")".repeat(depth - 1)
            )
        };
        assert!(parse(&nested(MAX_DEPTH)).is_ok());
        let (_, column, kind, _) = error(&nested(MAX_DEPTH + 1));
        assert_eq!(kind, ParseErrorKind::TooDeep);
        assert_eq!(column, 4 * MAX_DEPTH + 1);
        // Far deeper input is refused as quickly (the parser stops at the limit).
        assert_eq!(error(&nested(100_000)).2, ParseErrorKind::TooDeep);
    }

    proptest! {
        #[test]
        fn display_round_trips_through_parse(e in expr()) {
            let text = e.to_string();
            prop_assert_eq!(parse(&text), Ok(e), "{}", text);
        }

        #[test]
        fn serde_round_trips_in_bincode(e in expr()) {
            let config = bincode::config::standard();
            let bytes = bincode::serde::encode_to_vec(&e, config).expect("encodes");
            let (back, _): (Expr, usize) = bincode::serde::decode_from_slice(&bytes, config).expect("decodes");
            prop_assert_eq!(back, e);
        }
    }

    proptest! {
        #[test]
        fn json_holds_the_text_syntax(e in expr()) {
            let json = serde_json::to_string(&e).expect("json");
            prop_assert_eq!(&json, &serde_json::to_string(&e.to_string()).expect("a string"));
            prop_assert_eq!(serde_json::from_str::<Expr>(&json).expect("json decodes"), e);
        }
    }

    #[test]
    fn json_with_a_mistake_says_where() {
        let refused = serde_json::from_str::<Expr>(r#""atom(cpus=1; g=1, h=2, l=1s)""#);
        let message = refused.expect_err("no w").to_string();
        assert!(
            message.starts_with("1:28: atom is missing parameter `w`"),
            "{message}"
        );
    }

    #[test]
    fn a_deeply_nested_encoding_is_refused_not_recursed() {
        use crate::rdl::{FlatError, FlatNode};
        let mut nodes = vec![FlatNode::Atom(Atom {
            bundle: res("cpus=1"),
            gang: 1,
            max_parallel: 1,
            min_lease_ms: 1,
            work_ms: 1,
        })];
        nodes.extend((0..100_000).map(|_| FlatNode::All(1)));
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&nodes, config).expect("encodes");
        let decoded: Result<(Expr, usize), _> = bincode::serde::decode_from_slice(&bytes, config);
        let message = decoded.expect_err("too deep").to_string();
        assert!(
            message.contains(&FlatError::TooDeep.to_string()),
            "{message}"
        );
        assert_eq!(
            Expr::try_from(vec![FlatNode::All(2)]),
            Err(FlatError::MissingChildren {
                node: 0,
                wanted: 2,
                available: 0
            })
        );
    }
}
