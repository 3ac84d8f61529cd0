//! VNN-LIB properties (the subset VNN-COMP uses): `declare-const` of `X_i` and `Y_j` (type
//! `Real`), input bounds as asserts on single `X_i`, output constraints as linear inequalities
//! between `Y` terms and constants, and `or` of `and`s. The file states the *unsafe* region:
//! the property holds when it is empty.
//!
//! The file is untrusted input: its size is bounded ([`MAX_BYTES`]), s-expressions are read
//! with an explicit stack of bounded depth ([`MAX_DEPTH`]), variable indices are bounded
//! ([`MAX_VARIABLES`]), and anything outside the subset is refused with its line and the
//! construct named. Numbers are read exactly (decimal or scientific) as rationals.

use rug::Rational;

use super::parse_decimal_exact;

/// Largest property file read (bytes).
pub const MAX_BYTES: usize = 64 << 20;
/// Deepest nesting of parentheses accepted.
pub const MAX_DEPTH: usize = 32;
/// Largest `X_i` or `Y_j` index plus one.
pub const MAX_VARIABLES: usize = 1 << 24;
/// Most disjuncts the output constraints may expand to.
pub const MAX_DISJUNCTS: usize = 1 << 16;

/// A refusal: the line at fault (1-based) and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct VnnlibError {
    /// The line of the construct at fault.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// One linear constraint on the outputs, `sum_j coef_j Y_j + constant <= 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputConstraint {
    /// `(j, coefficient)`, each `j` once, nonzero coefficients only.
    pub coef: Vec<(usize, Rational)>,
    /// The constant term.
    pub constant: Rational,
    /// The line it was stated on.
    pub line: usize,
}

/// A box of inputs: per input, the largest lower bound and the smallest upper bound asserted.
#[derive(Debug, Clone, PartialEq)]
pub struct InputBox {
    /// Lower ends, one per input.
    pub lower: Vec<Rational>,
    /// Upper ends, one per input.
    pub upper: Vec<Rational>,
}

/// A parsed property: the input set (a box, or a union of boxes stated as an `or` of input
/// bounds) and the unsafe region over the outputs, an `or` of `and`s.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// Declared inputs `X_0 .. X_{n-1}`.
    pub inputs: usize,
    /// Declared outputs `Y_0 .. Y_{m-1}`.
    pub outputs: usize,
    /// The input set: the union of these boxes (one for most properties).
    pub boxes: Vec<InputBox>,
    /// The unsafe region: some disjunct has every one of its constraints satisfied.
    pub disjuncts: Vec<Vec<OutputConstraint>>,
}

/// An s-expression with the line it starts on.
#[derive(Debug, Clone)]
enum Sexp {
    Atom(String, usize),
    List(Vec<Sexp>, usize),
}

impl Sexp {
    fn line(&self) -> usize {
        match self {
            Sexp::Atom(_, l) | Sexp::List(_, l) => *l,
        }
    }
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, VnnlibError> {
    Err(VnnlibError {
        line,
        message: message.into(),
    })
}

/// The top-level s-expressions of `text` (comments `;` to the end of the line dropped), read with
/// an explicit stack no deeper than [`MAX_DEPTH`].
fn sexps(text: &str) -> Result<Vec<Sexp>, VnnlibError> {
    let mut stack: Vec<(Vec<Sexp>, usize)> = Vec::new();
    let mut top = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let code = raw.split(';').next().unwrap_or("");
        let spaced = code.replace('(', " ( ").replace(')', " ) ");
        for token in spaced.split_whitespace() {
            match token {
                "(" => {
                    if stack.len() >= MAX_DEPTH {
                        return err(line, format!("nesting deeper than {MAX_DEPTH} levels"));
                    }
                    stack.push((Vec::new(), line));
                }
                ")" => {
                    let Some((items, start)) = stack.pop() else {
                        return err(line, "`)` without a matching `(`");
                    };
                    let list = Sexp::List(items, start);
                    match stack.last_mut() {
                        Some((parent, _)) => parent.push(list),
                        None => top.push(list),
                    }
                }
                atom => {
                    let a = Sexp::Atom(atom.to_string(), line);
                    match stack.last_mut() {
                        Some((parent, _)) => parent.push(a),
                        None => return err(line, format!("`{atom}` outside parentheses")),
                    }
                }
            }
        }
    }
    if let Some((_, start)) = stack.last() {
        return err(*start, "`(` not closed before the end of the file");
    }
    Ok(top)
}

/// A variable `X_i` or `Y_j`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Var {
    X(usize),
    Y(usize),
}

fn variable(name: &str) -> Option<Var> {
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
struct Linear {
    coef: Vec<(Var, Rational)>,
    constant: Rational,
}

impl Linear {
    fn add(mut self, other: Linear, sign: i32) -> Linear {
        for (v, c) in other.coef {
            self.coef.push((v, c * sign));
        }
        self.constant += other.constant * sign;
        self
    }

    fn scale(mut self, k: &Rational) -> Linear {
        for (_, c) in &mut self.coef {
            *c *= k;
        }
        self.constant *= k;
        self
    }
}

/// A term: a number, a declared variable, `(+ t...)`, `(- t)`, `(- t t...)`, or `(* k t)` with a
/// number `k`.
fn term(s: &Sexp, declared: &Declared) -> Result<Linear, VnnlibError> {
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
fn parse_decimal_signed(a: &str) -> Option<Rational> {
    match a.strip_prefix('-') {
        Some(rest) => parse_decimal_exact(rest).map(|q| -q),
        None => parse_decimal_exact(a.strip_prefix('+').unwrap_or(a)),
    }
}

fn split_head(items: &[Sexp], line: usize) -> Result<(&str, &[Sexp]), VnnlibError> {
    match items.split_first() {
        Some((Sexp::Atom(h, _), rest)) => Ok((h.as_str(), rest)),
        Some((Sexp::List(..), _)) => err(line, "a list must start with an operator"),
        None => err(line, "empty list `()`"),
    }
}

/// The declared variables.
#[derive(Debug, Default)]
struct Declared {
    x: Vec<bool>,
    y: Vec<bool>,
}

impl Declared {
    fn declare(&mut self, v: Var, line: usize) -> Result<(), VnnlibError> {
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

    fn check(&self, v: Var, line: usize) -> Result<(), VnnlibError> {
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

fn name(v: Var) -> String {
    match v {
        Var::X(i) => format!("X_{i}"),
        Var::Y(i) => format!("Y_{i}"),
    }
}

/// A comparison `(<= a b)` or `(>= a b)` (chains `(<= a b c)` too) as constraints `a - b <= 0`.
fn comparison(s: &Sexp, declared: &Declared) -> Result<Option<Vec<Linear>>, VnnlibError> {
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
enum Assertion {
    /// Constraints that all hold (a conjunction), inputs and outputs mixed.
    All(Vec<Linear>),
    /// An `or` of conjunctions of output constraints.
    Any(Vec<Vec<Linear>>),
}

/// The body of an `assert`: a comparison, an `and` of comparisons, or an `or` of those.
fn assertion(s: &Sexp, declared: &Declared) -> Result<Assertion, VnnlibError> {
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

fn conjunction(args: &[Sexp], declared: &Declared) -> Result<Vec<Linear>, VnnlibError> {
    let mut out = Vec::new();
    for a in args {
        match comparison(a, declared)? {
            Some(c) => out.extend(c),
            None => return err(a.line(), "inside `and`, expected comparisons only"),
        }
    }
    Ok(out)
}

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
