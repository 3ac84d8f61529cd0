//! What a VNN-LIB file states once read ([`Property`]: an input box and the unsafe region's
//! disjuncts of [`OutputConstraint`]s), the reader's limits, and its error ([`VnnlibError`]).

use rug::Rational;

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
