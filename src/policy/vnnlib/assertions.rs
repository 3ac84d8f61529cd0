//! The declarations and assertions of the subset: variables `X_i` and `Y_j`, linear terms over
//! them with exact rational coefficients, comparisons, and `or` of `and`s.

use rug::Rational;

use super::property::{VnnlibError, MAX_VARIABLES};
use super::sexp::{err, Sexp};
use crate::policy::parse_decimal_exact;

/// A variable `X_i` or `Y_j`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Var {
    X(usize),
    Y(usize),
}

pub(super) fn variable(name: &str) -> Option<Var> {
    let (kind, index) = name.split_once('_')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) || index.len() > 9 {
        return None;
    }
    let i: usize = index.parse().ok()?;
    match kind {
        "X" => Some(Var::X(i)),
        "Y" => Some(Var::Y(i)),
        _ => None,
    }
}

/// A linear term: `sum coef_v v + constant`.
#[derive(Debug, Clone, Default)]
pub(super) struct Linear {
    pub(super) coef: Vec<(Var, Rational)>,
    pub(super) constant: Rational,
}

impl Linear {
    pub(super) fn add(mut self, other: Linear, sign: i32) -> Linear {
        for (v, c) in other.coef {
            self.coef.push((v, c * sign));
        }
        self.constant += other.constant * sign;
        self
    }

    pub(super) fn scale(mut self, k: &Rational) -> Linear {
        for (_, c) in &mut self.coef {
            *c *= k;
        }
        self.constant *= k;
        self
    }
}

/// A term: a number, a declared variable, `(+ t...)`, `(- t)`, `(- t t...)`, or `(* k t)` with a
/// number `k`.
pub(super) fn term(s: &Sexp, declared: &Declared) -> Result<Linear, VnnlibError> {
    match s {
        Sexp::Atom(a, line) => {
            if let Some(v) = variable(a) {
                declared.check(v, *line)?;
                return Ok(Linear {
                    coef: vec![(v, Rational::from(1))],
                    constant: Rational::new(),
                });
            }
            match parse_decimal_signed(a) {
                Some(q) => Ok(Linear {
                    coef: Vec::new(),
                    constant: q,
                }),
                None => err(
                    *line,
                    format!("`{a}` is neither a declared X_i/Y_j nor a number"),
                ),
            }
        }
        Sexp::List(items, line) => {
            let (head, args) = split_head(items, *line)?;
            match (head, args.len()) {
                ("+", n) if n >= 1 => args
                    .iter()
                    .try_fold(Linear::default(), |acc, a| Ok(acc.add(term(a, declared)?, 1))),
                ("-", 1) => Ok(Linear::default().add(term(&args[0], declared)?, -1)),
                ("-", n) if n >= 2 => {
                    let first = term(&args[0], declared)?;
                    (args[1..].iter()).try_fold(first, |acc, a| Ok(acc.add(term(a, declared)?, -1)))
                }
                ("*", 2) => {
                    let (k, t) = match (&args[0], &args[1]) {
                        (Sexp::Atom(a, _), t) if parse_decimal_signed(a).is_some() => (a, t),
                        (t, Sexp::Atom(a, _)) if parse_decimal_signed(a).is_some() => (a, t),
                        _ => return err(*line, "`*` needs a number as one factor (linear terms only)"),
                    };
                    let k = parse_decimal_signed(k).unwrap_or_default();
                    Ok(term(t, declared)?.scale(&k))
                }
                (op, _) => err(*line, format!("unsupported term `({op} ...)`: terms are numbers, X_i, Y_j, +, - and * by a number")),
            }
        }
    }
}

/// A decimal with an optional sign (`-0.5`, `1e-3`), exactly.
pub(super) fn parse_decimal_signed(a: &str) -> Option<Rational> {
    match a.strip_prefix('-') {
        Some(rest) => parse_decimal_exact(rest).map(|q| -q),
        None => parse_decimal_exact(a.strip_prefix('+').unwrap_or(a)),
    }
}

pub(super) fn split_head(items: &[Sexp], line: usize) -> Result<(&str, &[Sexp]), VnnlibError> {
    match items.split_first() {
        Some((Sexp::Atom(h, _), rest)) => Ok((h.as_str(), rest)),
        Some((Sexp::List(..), _)) => err(line, "a list must start with an operator"),
        None => err(line, "empty list `()`"),
    }
}

/// The declared variables.
#[derive(Debug, Default)]
pub(super) struct Declared {
    pub(super) x: Vec<bool>,
    pub(super) y: Vec<bool>,
}

impl Declared {
    pub(super) fn declare(&mut self, v: Var, line: usize) -> Result<(), VnnlibError> {
        let (list, i) = match v {
            Var::X(i) => (&mut self.x, i),
            Var::Y(i) => (&mut self.y, i),
        };
        if i >= MAX_VARIABLES {
            return err(
                line,
                format!("variable index {i} is beyond {MAX_VARIABLES}"),
            );
        }
        if list.len() <= i {
            list.resize(i + 1, false);
        }
        if std::mem::replace(&mut list[i], true) {
            return err(line, format!("{v:?} declared twice"));
        }
        Ok(())
    }

    pub(super) fn check(&self, v: Var, line: usize) -> Result<(), VnnlibError> {
        let ok = match v {
            Var::X(i) => self.x.get(i).copied().unwrap_or(false),
            Var::Y(i) => self.y.get(i).copied().unwrap_or(false),
        };
        if ok {
            Ok(())
        } else {
            err(line, format!("{} used before its declare-const", name(v)))
        }
    }
}

pub(super) fn name(v: Var) -> String {
    match v {
        Var::X(i) => format!("X_{i}"),
        Var::Y(i) => format!("Y_{i}"),
    }
}

/// A comparison `(<= a b)` or `(>= a b)` (chains `(<= a b c)` too) as constraints `a - b <= 0`.
pub(super) fn comparison(
    s: &Sexp,
    declared: &Declared,
) -> Result<Option<Vec<Linear>>, VnnlibError> {
    let Sexp::List(items, line) = s else {
        return err(s.line(), "expected a comparison `(<= a b)` or `(>= a b)`");
    };
    let (head, args) = split_head(items, *line)?;
    let sign = match head {
        "<=" => 1,
        ">=" => -1,
        "<" | ">" | "=" => {
            return err(
                *line,
                format!("`{head}` is not in the supported subset (use <= or >=)"),
            )
        }
        _ => return Ok(None),
    };
    if args.len() < 2 {
        return err(*line, format!("`{head}` needs two terms"));
    }
    let terms = args
        .iter()
        .map(|a| term(a, declared))
        .collect::<Result<Vec<_>, _>>()?;
    let out = terms
        .windows(2)
        .map(|w| {
            w[0].clone()
                .add(w[1].clone(), -1)
                .scale(&Rational::from(sign))
        })
        .collect();
    Ok(Some(out))
}

/// What one assert contributes.
pub(super) enum Assertion {
    /// Constraints that all hold (a conjunction), inputs and outputs mixed.
    All(Vec<Linear>),
    /// An `or` of conjunctions of output constraints.
    Any(Vec<Vec<Linear>>),
}

/// The body of an `assert`: a comparison, an `and` of comparisons, or an `or` of those.
pub(super) fn assertion(s: &Sexp, declared: &Declared) -> Result<Assertion, VnnlibError> {
    if let Some(c) = comparison(s, declared)? {
        return Ok(Assertion::All(c));
    }
    let Sexp::List(items, line) = s else {
        return err(s.line(), "expected a comparison, `and` or `or`");
    };
    let (head, args) = split_head(items, *line)?;
    if matches!(head, "and" | "or") && args.is_empty() {
        return err(*line, format!("`({head})` without arguments"));
    }
    match head {
        "and" => Ok(Assertion::All(conjunction(args, declared)?)),
        "or" => {
            let mut out = Vec::with_capacity(args.len());
            for a in args {
                let part = match comparison(a, declared)? {
                    Some(c) => c,
                    None => match a {
                        Sexp::List(inner, l) if split_head(inner, *l)?.0 == "and" => {
                            if inner.len() == 1 {
                                return err(*l, "`(and)` without arguments");
                            }
                            conjunction(&inner[1..], declared)?
                        }
                        _ => return err(a.line(), "inside `or`, expected a comparison or `and`"),
                    },
                };
                out.push(part);
            }
            Ok(Assertion::Any(out))
        }
        other => err(
            *line,
            format!("unsupported assertion `({other} ...)`: comparisons, `and` and `or` only"),
        ),
    }
}

pub(super) fn conjunction(args: &[Sexp], declared: &Declared) -> Result<Vec<Linear>, VnnlibError> {
    let mut out = Vec::new();
    for a in args {
        match comparison(a, declared)? {
            Some(c) => out.extend(c),
            None => return err(a.line(), "inside `and`, expected comparisons only"),
        }
    }
    Ok(out)
}
