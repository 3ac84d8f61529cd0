//! Branch and bound's choices: which ReLU or which input interval to split, and which point of a
//! subdomain to try as a counterexample. They steer the search only: every choice leaves the
//! verdict sound (two children always cover their parent), so these read float64 coefficients
//! without rounding bounds.

use ndarray::ArrayView1;

use crate::arith::format::Format;
pub use crate::bounds::local::split_score::{relu_candidates, SPLIT_LAYERS};

/// Candidates whose children's bounds are estimated before one is split
/// ([`split_by_gains`]).
pub const LOOKAHEAD_CANDIDATES: usize = 8;

/// The candidate whose better child gains most by the estimates `gains` (per candidate, the
/// active and the inactive child's, [`crate::bounds::local::LocalNet::split_gains`]); the first
/// of equals, and the first candidate when no estimate is a number. The better child rather than
/// the worse (which a split must close too) or their sum: at a fixed number of subdomains on
/// mnistfc 256x6 `prop_13_0.03` it left the hardest open bound highest (docs/performance.md
/// "Session 22").
pub fn split_by_gains(candidates: &[(usize, usize)], gains: &[[f64; 2]]) -> Option<(usize, usize)> {
    let better = |g: &[f64; 2]| match g[0].max(g[1]) {
        w if w.is_nan() => f64::NEG_INFINITY,
        w => w,
    };
    let mut best: Option<(usize, f64)> = None;
    for (t, g) in gains.iter().enumerate().take(candidates.len()) {
        if best.is_none_or(|(_, b)| better(g) > b) {
            best = Some((t, better(g)));
        }
    }
    candidates.get(best.map_or(0, |(t, _)| t)).copied()
}

/// How many times wider, relative to the root box, a coordinate may stay than the one the
/// sensitivity chooses before it goes first (four halvings).
pub const LAG: f64 = 16.0;

/// The input coordinate to halve: the largest `|a_i| (hi_i - lo_i)`, the most a coordinate's
/// width moves the row's linear bound `a . x` (its sensitivity); the widest where every such
/// product is zero. The sensitivity at the bound's minimiser says nothing of the unstable units a
/// coordinate's width keeps unstable, so a coordinate whose width relative to the root's
/// (`root`) is more than [`LAG`] times the chosen one's goes first: no coordinate starves. Only
/// coordinates whose float64 midpoint lies strictly inside can be halved; `None` when none can.
pub fn input_to_split(a: ArrayView1<f64>, lo: &[f64], hi: &[f64], root: &[f64]) -> Option<usize> {
    let chosen = most_sensitive(a, lo, hi)?;
    let relative = |i: usize| match root.get(i) {
        Some(r) if *r > 0.0 => (hi[i] - lo[i]) / r,
        _ => 0.0,
    };
    let laggard = (0..lo.len())
        .filter(|&i| splittable(lo[i], hi[i]))
        .max_by(|&x, &y| relative(x).total_cmp(&relative(y)).then(y.cmp(&x)))?;
    Some(if relative(laggard) > LAG * relative(chosen) {
        laggard
    } else {
        chosen
    })
}

/// Whether `[lo, hi]` has a float64 midpoint strictly inside.
fn splittable(lo: f64, hi: f64) -> bool {
    let mid = midpoint(lo, hi);
    lo < mid && mid < hi
}

/// The splittable coordinate with the largest `|a_i| (hi_i - lo_i)`, then the widest, then the
/// first.
fn most_sensitive(a: ArrayView1<f64>, lo: &[f64], hi: &[f64]) -> Option<usize> {
    let mut best: Option<(usize, (f64, f64))> = None;
    for (i, (l, h)) in lo.iter().zip(hi).enumerate() {
        if !splittable(*l, *h) {
            continue;
        }
        let width = h - l;
        let score = (a.get(i).map_or(0.0, |v| v.abs()) * width, width);
        let better = best.is_none_or(|(_, s)| score.0 > s.0 || (score.0 == s.0 && score.1 > s.1));
        if better {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The float64 point where a box is halved: `lo/2 + hi/2` (the children `[lo, mid]` and
/// `[mid, hi]` cover `[lo, hi]` whatever its rounding).
pub fn midpoint(lo: f64, hi: f64) -> f64 {
    0.5 * lo + 0.5 * hi
}

/// The vertex of `[lo, hi]` where the linear form `a . x` is smallest: `lo_i` where `a_i > 0`,
/// `hi_i` where `a_i < 0`, the midpoint where `a_i = 0` (the point a leaf's linear bound is
/// attained at, branch and bound's counterexample candidate).
pub fn linear_minimiser(a: ArrayView1<f64>, lo: &[f64], hi: &[f64]) -> Vec<f64> {
    (lo.iter().zip(hi).enumerate())
        .map(|(i, (l, h))| match a.get(i).copied().unwrap_or(0.0) {
            v if v > 0.0 => *l,
            v if v < 0.0 => *h,
            _ => midpoint(*l, *h),
        })
        .collect()
}

/// Near the point of the l2 ball of radius `eps` around `x0` where the linear form `a . x` is
/// smallest, `x0 - eps a / ||a||`, clipped to the box `[lo, hi]` holding the set (a ball's
/// counterexample candidate: only the caller's check makes it one).
pub fn ball_minimiser(
    a: ArrayView1<f64>,
    (x0, eps): (&[f64], f64),
    (lo, hi): (&[f64], &[f64]),
) -> Vec<f64> {
    let norm = a.iter().map(|v| v * v).sum::<f64>().sqrt();
    let step = if norm > 0.0 && norm.is_finite() {
        eps / norm
    } else {
        0.0
    };
    (x0.iter().zip(lo).zip(hi).enumerate())
        .map(|(i, ((x, l), h))| (x - step * a.get(i).copied().unwrap_or(0.0)).clamp(*l, *h))
        .collect()
}

/// The box `[lo, hi]` shrunk to the values of `format` it holds: each end moved inward to the
/// nearest value of the format (float32 and float64; other formats keep the box). The deployed
/// model's inputs are values of its format, so the shrunk box holds every deployed input the
/// box does; `None` when it holds none (docs/soundness.md "Complete verification", B3).
pub fn onto_grid(format: Format, lo: &[f64], hi: &[f64]) -> Option<(Vec<f64>, Vec<f64>)> {
    let inward = |v: f64, up: bool| -> f64 {
        match format {
            Format::Float32 => {
                let f = v as f32;
                let f = match (up, f64::from(f).partial_cmp(&v)) {
                    (true, Some(std::cmp::Ordering::Less)) => f.next_up(),
                    (false, Some(std::cmp::Ordering::Greater)) => f.next_down(),
                    _ => f,
                };
                f64::from(f)
            }
            _ => v,
        }
    };
    let lo: Vec<f64> = lo.iter().map(|v| inward(*v, true)).collect();
    let hi: Vec<f64> = hi.iter().map(|v| inward(*v, false)).collect();
    (lo.iter().zip(&hi))
        .all(|(l, h)| l <= h)
        .then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The candidate whose better child gains most, the first of equals; NaN counts as no
    /// gain, and without a number the first candidate.
    #[test]
    fn the_split_is_the_candidate_whose_better_child_gains_most() {
        let at = [(0, 3), (1, 0), (0, 1)];
        let gains = [[0.5, 0.1], [-1.0, 2.0], [2.0, f64::NAN]];
        assert_eq!(split_by_gains(&at, &gains), Some((1, 0)));
        let nan = [[f64::NAN; 2]; 3];
        assert_eq!(split_by_gains(&at, &nan), Some((0, 3)));
        assert_eq!(split_by_gains(&at, &[]), Some((0, 3)));
        assert_eq!(split_by_gains(&[], &[]), None);
        let ties = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]];
        assert_eq!(split_by_gains(&at, &ties), Some((0, 3)));
    }

    use ndarray::{array, Array1};

    #[test]
    fn the_input_split_follows_sensitivity_times_width() {
        let a = array![1.0, -4.0, 0.0];
        let root = [9.0, 9.0, 9.0];
        let split = |a: ArrayView1<f64>, hi: &[f64], root: &[f64]| {
            input_to_split(a, &vec![0.0; hi.len()], hi, root)
        };
        assert_eq!(split(a.view(), &[2.0, 1.0, 9.0], &root), Some(1));
        assert_eq!(split(a.view(), &[8.0, 1.0, 9.0], &root), Some(0));
        // no sensitivity: the widest
        let z = Array1::zeros(3);
        assert_eq!(split(z.view(), &[2.0, 1.0, 9.0], &root), Some(2));
        // a coordinate more than LAG times wider (relative to the root) than the chosen goes
        // first; at exactly LAG times it does not
        let even = [16.0, 16.0, 16.0];
        assert_eq!(split(a.view(), &[1.0, 1.0, 16.0], &even), Some(1));
        assert_eq!(
            split(a.view(), &[1.0, 1.0, 16.0], &[16.0, 16.0, 16.0 - 1e-9]),
            Some(2)
        );
        let sensitive = array![0.0, 1.0, 0.0];
        assert_eq!(
            split(sensitive.view(), &[4.0, 0.25, 4.0], &[4.0, 4.0, 4.0]),
            Some(1)
        );
        assert_eq!(
            split(sensitive.view(), &[4.0, 0.2, 4.0], &[4.0, 4.0, 4.0]),
            Some(0)
        );
        // a coordinate without a float64 strictly inside cannot be halved
        let tiny = [1.0, 1.0f64.next_up()];
        let two = [1.0, 1.0];
        assert_eq!(
            input_to_split(a.view(), &[1.0, 0.0], &[tiny[1], 1e-300], &two),
            Some(1)
        );
        assert_eq!(
            input_to_split(a.view(), &[1.0, 0.0], &[tiny[1], 0.0], &two),
            None
        );
    }

    #[test]
    fn a_box_shrinks_to_the_format_values_it_holds() {
        let third = 1.0 / 3.0;
        let (lo, hi) = onto_grid(Format::Float32, &[third, -1.0], &[0.5, third]).unwrap();
        let up = f64::from((third as f32).next_up().max(third as f32));
        assert!(lo[0] >= third && f64::from(lo[0] as f32) == lo[0]);
        assert!(f64::from((lo[0] as f32).next_down()) < third);
        assert_eq!(lo[1], -1.0);
        assert!(hi[1] <= third && f64::from((hi[1] as f32).next_up()) > third);
        assert!(lo[0] == up || lo[0] == f64::from(third as f32));
        // a box between two neighbouring float32 values holds none
        let a = f64::from(1.0f32);
        let b = f64::from(1.0f32.next_up());
        let inner = (a + (b - a) / 4.0, a + (b - a) / 2.0);
        assert!(onto_grid(Format::Float32, &[inner.0], &[inner.1]).is_none());
        // float64 and the narrow formats keep the box
        assert_eq!(
            onto_grid(Format::Float64, &[inner.0], &[inner.1]),
            Some((vec![inner.0], vec![inner.1]))
        );
        assert_eq!(
            onto_grid(Format::Float16, &[inner.0], &[inner.1]),
            Some((vec![inner.0], vec![inner.1]))
        );
    }

    #[test]
    fn the_minimiser_is_the_vertex_the_form_is_smallest_at() {
        let a = array![2.0, -1.0, 0.0];
        let x = linear_minimiser(a.view(), &[-1.0, -2.0, 0.0], &[1.0, 2.0, 4.0]);
        assert_eq!(x, vec![-1.0, 2.0, 2.0]);
        assert_eq!(midpoint(1.0, 2.0), 1.5);
        assert_eq!(midpoint(f64::MAX, f64::MAX), f64::MAX);
    }

    /// `x0 - eps a / ||a||` (here `a = (3, -4)`, `||a|| = 5`, `eps = 5`: the step is
    /// `(-3, 4)`), clipped to the box; a zero form stays at the centre.
    #[test]
    fn the_ball_minimiser_steps_against_the_form_and_stays_in_the_box() {
        let a = array![3.0, -4.0];
        let x = ball_minimiser(a.view(), (&[1.0, 0.0], 5.0), (&[-9.0, -9.0], &[9.0, 9.0]));
        assert_eq!(x, vec![-2.0, 4.0]);
        let x = ball_minimiser(a.view(), (&[1.0, 0.0], 5.0), (&[-1.0, -9.0], &[9.0, 2.5]));
        assert_eq!(x, vec![-1.0, 2.5]);
        let zero = Array1::<f64>::zeros(2);
        let x = ball_minimiser(zero.view(), (&[0.5, 0.25], 1.0), (&[0.0, 0.0], &[1.0, 1.0]));
        assert_eq!(x, vec![0.5, 0.25]);
    }
}
