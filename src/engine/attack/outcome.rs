//! What the falsifier returns: the confirmed adversarial examples ([`Witness`]) of one run
//! ([`AttackOutcome`]).

use crate::bounds::certify::Mode;

/// An adversarial example found and confirmed.
#[derive(Clone, Debug)]
pub struct Witness {
    /// Index of the point in the subject (add `Subject::first` for the test set's index).
    pub index: usize,
    /// The adversarial input: values of the deployment format, in the ball.
    pub input: Vec<f64>,
    /// The class the deployed execution predicts at it.
    pub class: usize,
}

/// The falsifier's result on one subject.
#[derive(Clone, Debug)]
pub struct AttackOutcome {
    /// The sound mode whose uncertified points were attacked.
    pub mode: Mode,
    /// Indices (into the subject) of the points attacked.
    pub attacked: Vec<usize>,
    /// The confirmed adversarial examples, by index.
    pub witnesses: Vec<Witness>,
    /// Wall seconds, re-reading the attacked inputs included.
    pub seconds: f64,
}
