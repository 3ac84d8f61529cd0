//! Sound spectral-norm upper bounds by Algorithm GramIterFP (paper sec. "Sound and Scalable
//! Spectral-Norm Computation") and the per-layer norm bundle, computed on every run.
//!
//! The Gram products run in hardware binary64 (any summation order, with or without FMA: the
//! Lemma "Frobenius error of a floating-point Gram product" covers all of them); everything that
//! bounds an error is rounded up with [`crate::arith::sound`]. Two refinements over the paper's text,
//! both argued in `docs/soundness.md`:
//!
//! * the rescaling factor `c_k` is the smallest power of two at or above `FrobUB(N~)`, so the
//!   division is exact unless a quotient underflows; the truncation error `t_k` is then at most
//!   `count * 2^-1074`, `count` being the number of quotients that were inexact (detected by
//!   multiplying back);
//! * `FrobUB` sums squares with upward-rounded steps instead of the forward-error model.

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::arith::format::Format;
use crate::arith::sound::{add_up, div_up, mul_up, pow2_ceil, sqrt_up};
use crate::bounds::certify::quantities::{a_dot_fwd, gamma_n};
use crate::onnx::model::{Activation, DenseNet};

/// Default number of Gram iterations (the paper's "gram-12").
pub const DEFAULT_GRAM_ITERATIONS: u32 = 12;

/// Why a norm bound could not be computed (the model then cannot be certified).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NormError {
    /// A binary64 Gram product or sum of squares was not finite.
    #[error("Gram iteration {iteration}: a binary64 product was not finite (no sound bound)")]
    NonFinite {
        /// 1-based iteration at which the check failed (0 = the final Frobenius bound).
        iteration: u32,
    },
}

/// `FrobUB(X) >= ||X||_F`: upward sum of squares, then an upward square root.
pub fn frob_ub(a: ArrayView2<f64>) -> f64 {
    let mut s = 0.0;
    for &x in a.iter() {
        s = add_up(s, mul_up(x, x));
    }
    if s == 0.0 {
        0.0
    } else {
        sqrt_up(s)
    }
}

/// `xi(A) = gamma_p FrobUB(A)^2 + a_dot_fwd(p) q` for a `p x q` binary64 matrix (Lemma "Frobenius
/// error of a floating-point Gram product"), rounded up.
pub fn xi(frob_a: f64, p: usize, q: usize) -> f64 {
    let g = gamma_n(Format::Float64, p as u64);
    let fwd = a_dot_fwd(Format::Float64, false, p as u64);
    add_up(mul_up(g, mul_up(frob_a, frob_a)), mul_up(fwd, q as f64))
}

/// Algorithm GramIterFP: a sound upper bound on `||M||_2`, iterating on the smaller Gram matrix.
pub fn gram_iter_fp(m: ArrayView2<f64>, iterations: u32) -> Result<f64, NormError> {
    // A is p x q with q = min(rows, cols); A^T A is the smaller Gram
    let mut a: Array2<f64> = if m.ncols() <= m.nrows() {
        m.to_owned()
    } else {
        m.t().to_owned()
    };
    let mut steps: Vec<(f64, f64)> = Vec::with_capacity(iterations as usize); // (c_k, delta_k)
    for k in 1..=iterations {
        let (p, q) = a.dim();
        let frob_a = frob_ub(a.view());
        if frob_a == 0.0 {
            return Ok(0.0);
        }
        let n = a.t().dot(&a);
        if n.iter().any(|x| !x.is_finite()) {
            return Err(NormError::NonFinite { iteration: k });
        }
        let frob_n = frob_ub(n.view());
        if !frob_n.is_finite() {
            return Err(NormError::NonFinite { iteration: k });
        }
        let xi_k = xi(frob_a, p, q);
        if frob_n == 0.0 {
            // the computed Gram vanished: ||A^T A||_2 <= xi_k, so ||A||_2 <= sqrt(xi_k)
            let mut s = sqrt_up(xi_k);
            for &(c, d) in steps.iter().rev() {
                s = sqrt_up(mul_up(c, add_up(s, d)));
            }
            return Ok(s);
        }
        let c = pow2_ceil(frob_n);
        let mut inexact = 0u64;
        let scaled = n.mapv(|x| {
            let y = x / c;
            if y * c != x {
                inexact += 1;
            }
            y
        });
        let t_k = mul_up(inexact as f64, f64::from_bits(1));
        let delta = add_up(t_k, div_up(xi_k, c));
        steps.push((c, delta));
        a = scaled;
    }
    let mut s = frob_ub(a.view());
    if !s.is_finite() {
        return Err(NormError::NonFinite { iteration: 0 });
    }
    for &(c, d) in steps.iter().rev() {
        s = sqrt_up(mul_up(c, add_up(s, d)));
    }
    Ok(s)
}

/// Sound norm bounds of one layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorms {
    /// Upper bound on `||W||_2`.
    pub spectral: f64,
    /// Upper bound on `|| |W| ||_2`.
    pub abs_spectral: f64,
}

/// Norms of every layer.
#[derive(Clone, Debug)]
pub struct NetworkNorms {
    /// One entry per layer.
    pub layers: Vec<LayerNorms>,
    /// Per layer `k`, when layers `k-1` and `k` are an affine step and a dense layer with
    /// nothing nonlinear between them, an upper bound on the norm of their composed linear map
    /// ([`merged_step_norms`]).
    pub merged: Vec<Option<f64>>,
    /// Gram iterations used.
    pub gram_iterations: u32,
}

/// Compute both norms of every layer (in parallel).
pub fn compute_norms(net: &DenseNet, iterations: u32) -> Result<Vec<LayerNorms>, NormError> {
    let jobs: Vec<(usize, bool)> = (0..net.layers.len())
        .flat_map(|l| [(l, false), (l, true)])
        .collect();
    let results: Vec<Result<f64, NormError>> = jobs
        .par_iter()
        .map(|&(l, abs)| {
            // an affine step's matrix is diag(a): both norms are max |a|
            if let Some(step) = &net.layers[l].affine {
                return Ok(step.scale_max());
            }
            let w = &net.layers[l].w;
            if abs {
                gram_iter_fp(w.mapv(f64::abs).view(), iterations)
            } else {
                gram_iter_fp(w.view(), iterations)
            }
        })
        .collect();
    let mut out = Vec::with_capacity(net.layers.len());
    for pair in results.chunks(2) {
        out.push(LayerNorms {
            spectral: pair[0].clone()?,
            abs_spectral: pair[1].clone()?,
        });
    }
    Ok(out)
}

/// The composed linear map of layers `k-1` and `k` when one is an affine step `diag(a)` and the
/// other a dense layer `W` with no ReLU between them — `W diag(A)` (step, then layer) or
/// `diag(A) W` (layer, then a step that carries the ReLU) with `A >= |a|` — as an `f64` matrix
/// `M'` whose entries are the products rounded to nearest.
fn composed_map(net: &DenseNet, k: usize) -> Option<Array2<f64>> {
    let (prev, layer) = (&net.layers[k - 1], &net.layers[k]);
    match (&prev.affine, &layer.affine) {
        (Some(step), None) if prev.act == Activation::Identity => {
            let a = step.scale_bounds();
            Some(Array2::from_shape_fn(layer.w.dim(), |(i, j)| {
                layer.w[[i, j]] * a[j]
            }))
        }
        (None, Some(step)) if prev.act == Activation::Identity => {
            let a = step.scale_bounds();
            Some(Array2::from_shape_fn(prev.w.dim(), |(i, j)| {
                a[i] * prev.w[[i, j]]
            }))
        }
        _ => None,
    }
}

/// Upper bounds on the norms of the composed maps of `composed_map`: `||diag(a) W|| <=
/// ||diag(A) W||` (the norm grows with each `|a_i|`), and the rounded `M'` is within
/// `2^-53 |M'|` entrywise of `diag(A) W`, so `||diag(A) W|| <= ||M'|| + 2^-52 ||M'||_F`.
pub fn merged_step_norms(net: &DenseNet, iterations: u32) -> Result<Vec<Option<f64>>, NormError> {
    (0..net.layers.len())
        .into_par_iter()
        .map(|k| {
            let Some(m) = (k > 0).then(|| composed_map(net, k)).flatten() else {
                return Ok(None);
            };
            let spectral = gram_iter_fp(m.view(), iterations)?;
            let frob = frob_ub(m.view());
            // and 2^-1074 per entry for products that fell below the normal range
            let tiny = mul_up(m.len() as f64, f64::from_bits(1));
            Ok(Some(add_up(
                add_up(spectral, mul_up(frob, 2f64.powi(-52))),
                tiny,
            )))
        })
        .collect()
}

/// Norms of every layer of `net`, computed afresh: nothing read from disk feeds a bound
/// (docs/soundness.md "Norms are recomputed on every run").
pub fn network_norms(net: &DenseNet, iterations: u32) -> Result<NetworkNorms, NormError> {
    Ok(NetworkNorms {
        layers: compute_norms(net, iterations)?,
        merged: merged_step_norms(net, iterations)?,
        gram_iterations: iterations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::{Float, Rational};

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    /// A lower bound on `||M||_2` from power iteration: `||M v|| / ||v||` evaluated in 256-bit
    /// arithmetic, rounded down (any vector gives a lower bound).
    fn power_lower_bound(m: &Array2<f64>) -> f64 {
        let g = m.t().dot(m);
        let mut v = vec![1.0; m.ncols()];
        for _ in 0..500 {
            let w = g.dot(&ndarray::Array1::from(v.clone()));
            let norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
            v = w.iter().map(|x| x / norm).collect();
        }
        let prec = 256;
        let mut num = Float::with_val(prec, 0);
        for i in 0..m.nrows() {
            let mut s = Float::with_val(prec, 0);
            for j in 0..m.ncols() {
                s += Float::with_val(prec, m[[i, j]]) * v[j];
            }
            num += s.clone() * &s;
        }
        let mut den = Float::with_val(prec, 0);
        for &x in &v {
            den += Float::with_val(prec, x) * x;
        }
        let ratio = (num / den).sqrt();
        ratio.to_f64_round(rug::float::Round::Down)
    }

    #[test]
    fn gram_bound_is_sound_and_tight_on_random_matrices() {
        let mut seed = 42u64;
        for &(r, c) in &[(20usize, 7usize), (7, 20), (64, 64), (128, 30), (10, 784)] {
            let m = Array2::from_shape_fn((r, c), |_| lcg(&mut seed) as f32 as f64);
            let lower = power_lower_bound(&m);
            for abs in [false, true] {
                let mm = if abs { m.mapv(f64::abs) } else { m.clone() };
                let lower = if abs { power_lower_bound(&mm) } else { lower };
                let s = gram_iter_fp(mm.view(), 12).unwrap();
                assert!(s >= lower, "{r}x{c} abs={abs}: {s} < {lower}");
                assert!(
                    s <= lower * (1.0 + 1e-3),
                    "{r}x{c} abs={abs}: {s} vs {lower}"
                );
            }
        }
    }

    #[test]
    fn gram_bound_exact_on_diagonal_and_rank_one() {
        // diag(3, 1): ||M|| = 3 exactly
        let m = Array2::from_shape_vec((2, 2), vec![3.0, 0.0, 0.0, 1.0]).unwrap();
        let s = gram_iter_fp(m.view(), 12).unwrap();
        assert!((3.0..3.0 * (1.0 + 1e-9)).contains(&s));
        // rank one u v^T: ||M|| = ||u|| ||v|| = 5 * 1
        let m = Array2::from_shape_vec((2, 1), vec![3.0, 4.0]).unwrap();
        let s = gram_iter_fp(m.view(), 3).unwrap();
        assert!((5.0..5.0 * (1.0 + 1e-12)).contains(&s));
        assert_eq!(
            gram_iter_fp(Array2::<f64>::zeros((3, 4)).view(), 12).unwrap(),
            0.0
        );
    }

    /// A lower bound on `||W||_2`: the largest row or column norm, rounded down.
    fn spectral_lower_bound(w: ArrayView2<f64>) -> f64 {
        use crate::arith::sound::l2_norm_down;
        let rows = w
            .rows()
            .into_iter()
            .map(|r| l2_norm_down(r.iter().copied()));
        let cols = w
            .columns()
            .into_iter()
            .map(|c| l2_norm_down(c.iter().copied()));
        rows.chain(cols).fold(0.0, f64::max)
    }

    #[test]
    fn lower_bound_is_below_the_gram_bound() {
        let mut seed = 7u64;
        let m = Array2::from_shape_fn((30, 12), |_| lcg(&mut seed));
        let lower = spectral_lower_bound(m.view());
        assert!(lower > 0.0 && lower <= power_lower_bound(&m) * (1.0 + 1e-12));
        assert!(lower <= gram_iter_fp(m.view(), 12).unwrap());
    }

    #[test]
    fn gram_detects_overflow() {
        let m = Array2::from_elem((4, 4), 1e300);
        assert!(matches!(
            gram_iter_fp(m.view(), 2),
            Err(NormError::NonFinite { .. })
        ));
    }

    #[test]
    fn frob_ub_and_xi_bound_exact_values() {
        let m = Array2::from_shape_vec((2, 2), vec![0.1, -0.2, 0.3, 0.7]).unwrap();
        let f = frob_ub(m.view());
        let exact: Rational = m
            .iter()
            .map(|&x| Rational::from_f64(x).unwrap().square())
            .sum();
        assert!(Rational::from_f64(f * f).unwrap() >= exact);
        let x = xi(f, 2, 2);
        assert!(x > 0.0 && x < 1e-14);
    }
}
