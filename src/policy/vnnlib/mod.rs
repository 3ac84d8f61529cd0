//! VNN-LIB properties (the subset VNN-COMP uses): `declare-const` of `X_i` and `Y_j` (type
//! `Real`), input bounds as asserts on single `X_i`, output constraints as linear inequalities
//! between `Y` terms and constants, and `or` of `and`s. The file states the *unsafe* region:
//! the property holds when it is empty.
//!
//! The file is untrusted input: its size is bounded ([`MAX_BYTES`]), s-expressions are read
//! with an explicit stack of bounded depth ([`MAX_DEPTH`]), variable indices are bounded
//! ([`MAX_VARIABLES`]), and anything outside the subset is refused with its line and the
//! construct named. Numbers are read exactly (decimal or scientific) as rationals.

mod assertions;
mod property;
mod sexp;

pub use property::{
    InputBox, OutputConstraint, Property, VnnlibError, MAX_BYTES, MAX_DEPTH, MAX_DISJUNCTS,
    MAX_VARIABLES,
};

use rug::Rational;

use assertions::{assertion, split_head, variable, Assertion, Declared, Linear, Var};
use sexp::{err, sexps, Sexp};

/// Parse a property file's text.
pub fn parse(text: &str) -> Result<Property, VnnlibError> {
    if text.len() > MAX_BYTES {
        return err(1, format!("the file is larger than {MAX_BYTES} bytes"));
    }
    let mut declared = Declared::default();
    let mut all: Vec<(Linear, usize)> = Vec::new();
    let mut any: Vec<(Vec<Vec<Linear>>, usize)> = Vec::new();
    for s in sexps(text)? {
        let Sexp::List(items, line) = &s else {
            unreachable!("top-level atoms are refused by sexps");
        };
        let (head, args) = split_head(items, *line)?;
        match (head, args) {
            ("declare-const", [Sexp::Atom(v, _), Sexp::Atom(t, _)]) => {
                let Some(var) = variable(v) else {
                    return err(*line, format!("`{v}`: only X_i and Y_j may be declared"));
                };
                if t != "Real" {
                    return err(
                        *line,
                        format!("`{v}` has type `{t}`: only Real is supported"),
                    );
                }
                declared.declare(var, *line)?;
            }
            ("declare-const", _) => return err(*line, "expected `(declare-const NAME Real)`"),
            ("assert", [body]) => match assertion(body, &declared)? {
                Assertion::All(c) => all.extend(c.into_iter().map(|c| (c, *line))),
                Assertion::Any(d) => any.push((d, *line)),
            },
            ("assert", _) => return err(*line, "`assert` takes one expression"),
            (other, _) => return err(*line, format!("unsupported command `{other}`")),
        }
    }
    build(&declared, all, any)
}

/// Per input, the bounds asserted so far.
type Bounds = Vec<(Option<Rational>, Option<Rational>)>;

/// The property from the declared variables, the conjunction of top-level constraints and the
/// `or`s: input bounds from single-`X` constraints (an `or` of them: a union of boxes), the
/// unsafe region as disjuncts.
fn build(
    declared: &Declared,
    all: Vec<(Linear, usize)>,
    any: Vec<(Vec<Vec<Linear>>, usize)>,
) -> Result<Property, VnnlibError> {
    let inputs = declared.x.len();
    let outputs = declared.y.len();
    if let Some(i) = declared.x.iter().position(|d| !d) {
        return err(
            1,
            format!(
                "X_{i} is not declared (inputs must be X_0 .. X_{})",
                inputs - 1
            ),
        );
    }
    if let Some(j) = declared.y.iter().position(|d| !d) {
        return err(
            1,
            format!(
                "Y_{j} is not declared (outputs must be Y_0 .. Y_{})",
                outputs - 1
            ),
        );
    }
    let mut base: Bounds = vec![(None, None); inputs];
    let mut common = Vec::new();
    for (c, line) in all {
        if has_input(&c) {
            bound_input(&mut base, &c, line)?;
        } else {
            common.push(output_constraint(c, line)?);
        }
    }
    let mut alternatives: Option<Vec<Bounds>> = None;
    let mut disjuncts = vec![common];
    for (d, line) in any {
        let inputs_only =
            !d.is_empty() && d.iter().all(|p| !p.is_empty() && p.iter().all(has_input));
        if inputs_only {
            if alternatives.is_some() {
                return err(line, "only one `or` over the inputs is supported");
            }
            let mut boxes = Vec::with_capacity(d.len());
            for part in d {
                let mut b = base.clone();
                for c in &part {
                    bound_input(&mut b, c, line)?;
                }
                boxes.push(b);
            }
            alternatives = Some(boxes);
            continue;
        }
        let mut next = Vec::new();
        for part in d {
            let part = (part.into_iter())
                .map(|c| {
                    if has_input(&c) {
                        err(line, "an `or` may not mix input and output constraints")
                    } else {
                        output_constraint(c, line)
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            for prefix in &disjuncts {
                if next.len() >= MAX_DISJUNCTS {
                    return err(
                        line,
                        format!(
                            "the output constraints expand to more than {MAX_DISJUNCTS} disjuncts"
                        ),
                    );
                }
                let mut both = prefix.clone();
                both.extend(part.iter().cloned());
                next.push(both);
            }
        }
        disjuncts = next;
    }
    let boxes = (alternatives.unwrap_or_else(|| vec![base]).into_iter())
        .map(closed_box)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Property {
        inputs,
        outputs,
        boxes,
        disjuncts,
    })
}

fn has_input(c: &Linear) -> bool {
    c.coef.iter().any(|(v, _)| matches!(v, Var::X(_)))
}

/// Tightens `bounds` by `c`, which must bound a single input by a number.
fn bound_input(bounds: &mut Bounds, c: &Linear, line: usize) -> Result<(), VnnlibError> {
    let merged = merge(&c.coef);
    if merged.iter().any(|(v, _)| matches!(v, Var::Y(_))) {
        return err(line, "a constraint may not mix inputs and outputs");
    }
    let [(Var::X(i), k)] = merged.as_slice() else {
        return err(
            line,
            "an input constraint must bound a single X_i by a number (boxes only)",
        );
    };
    // k X_i + constant <= 0
    let bound = Rational::from(-&c.constant) / k;
    let (lower, upper) = &mut bounds[*i];
    if *k > 0 {
        if upper.as_ref().is_none_or(|v| bound < *v) {
            *upper = Some(bound);
        }
    } else if lower.as_ref().is_none_or(|v| bound > *v) {
        *lower = Some(bound);
    }
    Ok(())
}

/// The box of `bounds`, every input bounded on both sides and not empty.
fn closed_box(bounds: Bounds) -> Result<InputBox, VnnlibError> {
    let (mut lower, mut upper) = (
        Vec::with_capacity(bounds.len()),
        Vec::with_capacity(bounds.len()),
    );
    for (i, b) in bounds.into_iter().enumerate() {
        match b {
            (Some(l), Some(u)) if l <= u => {
                lower.push(l);
                upper.push(u);
            }
            (Some(_), Some(_)) => {
                return err(
                    1,
                    format!("X_{i}: its lower bound exceeds its upper bound (empty box)"),
                )
            }
            _ => {
                return err(
                    1,
                    format!("X_{i} is not bounded above and below (inputs must form a box)"),
                )
            }
        }
    }
    Ok(InputBox { lower, upper })
}

/// Coefficients of the same variable summed, zeros dropped, in variable order.
fn merge(coef: &[(Var, Rational)]) -> Vec<(Var, Rational)> {
    let mut out: Vec<(Var, Rational)> = Vec::new();
    for (v, c) in coef {
        match out.iter_mut().find(|(w, _)| w == v) {
            Some((_, k)) => *k += c,
            None => out.push((*v, c.clone())),
        }
    }
    out.retain(|(_, k)| *k != 0);
    out.sort_by_key(|(v, _)| match v {
        Var::X(i) => (0, *i),
        Var::Y(j) => (1, *j),
    });
    out
}

fn output_constraint(c: Linear, line: usize) -> Result<OutputConstraint, VnnlibError> {
    let coef = merge(&c.coef)
        .into_iter()
        .map(|(v, k)| match v {
            Var::Y(j) => Ok((j, k)),
            Var::X(_) => err(line, "a constraint may not mix inputs and outputs"),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(OutputConstraint {
        coef,
        constant: c.constant,
        line,
    })
}

#[cfg(test)]
mod tests;
