//! The relaxed network's passes in plain float64 for the slope search ([`super::search_many`]),
//! for a batch of blocks of rows (one block per search, each with its own relaxations, slopes,
//! multipliers and splits): the backward substitution giving each row's bound and its
//! coefficients over every layer, and the forward pass at each row's minimiser giving the
//! derivatives. At every layer the blocks that reach it are stacked into one product by the
//! layer's matrix ([`stacked_times`]): one pass over the matrix for the whole batch, a general
//! matrix product where each block alone would be a product of a few rows. Only the slopes and
//! multipliers found leave the search, so how these sums are ordered or rounded (fused or not)
//! does not touch soundness (docs/soundness.md L5).

use ndarray::{concatenate, s, Array1, Array2, ArrayView2, Axis, Zip};

use crate::bounds::local::local_net::LocalNet;
use crate::bounds::local::relax::UnitRelaxation;
use crate::bounds::local::rows::{read_rows_times, rows_times};
use crate::bounds::local::split::{Phase, Splits};

/// The set the search's plain bound is a minimum over: the l2 ball of radius `eps` around the
/// centre, or the box of half-widths `half` around it (minimum `- sum_i |M_ri| half_i`, at
/// the vertex `x* = x0 - half sign(M_r)`).
#[derive(Clone, Copy, Debug)]
pub(in crate::bounds::local) enum Reach<'a> {
    /// A ball's radius.
    Ball(f64),
    /// A box's half-widths.
    Box(&'a Array1<f64>),
}

/// One search's current point, as the passes read it.
pub(super) struct Block<'a> {
    /// Per hidden layer, the units' lines ([`Lines::of`]).
    pub lines: &'a [Lines],
    /// The rows, over the outputs of layer `lines.len()`.
    pub c: &'a Array2<f64>,
    /// `W_1 x0`.
    pub centre: &'a Array1<f64>,
    /// The set the bound is a minimum over.
    pub reach: Reach<'a>,
    /// Per hidden layer, the rows' lower slopes.
    pub slopes: &'a [Array2<f64>],
    /// Per hidden layer, the rows' split multipliers.
    pub betas: &'a [Array2<f64>],
    /// The split units.
    pub splits: &'a Splits,
}

/// A hidden layer's relaxation laid out by unit ([`Line`]).
pub(super) struct Lines(Array1<Line>);

/// How a unit passes a coefficient: its phase over the subdomain, and for an unstable unit its
/// upper line's slope and offset.
#[derive(Clone, Copy)]
enum Line {
    Inactive,
    Active,
    Unstable { slope: f64, offset: f64 },
}

impl Lines {
    /// The lines of a layer's relaxations.
    pub(super) fn of(units: &[UnitRelaxation]) -> Lines {
        Lines(
            (units.iter())
                .map(|unit| match *unit {
                    UnitRelaxation::Inactive => Line::Inactive,
                    UnitRelaxation::Active => Line::Active,
                    UnitRelaxation::Unstable { slope, offset, .. } => {
                        Line::Unstable { slope, offset }
                    }
                })
                .collect(),
        )
    }
}

/// The relaxed network's state for a block of rows at given slopes.
pub(super) struct Pass {
    /// Per row, the (float64, unrounded) bound.
    pub bound: Vec<f64>,
    /// Per hidden layer, the rows' coefficients over its outputs `h_k` (`mu_k`).
    pub mu: Vec<Array2<f64>>,
    /// The rows' coefficients over the first layer's pre-activations.
    pub first: Array2<f64>,
    /// Per row, `||W_1^T Lambda_1^T||` (a ball).
    pub norm: Vec<f64>,
    /// Per row, the minimiser's offset from the centre, `-half sign(Lambda_1 W_1)` (a box).
    pub offset: Option<Array2<f64>>,
}

/// `m_b W` for every block `m_b` of `blocks`: one block alone is [`rows_times`] (which skips
/// zero coefficients); several are stacked into one general product over the rows of `W` that
/// some block's coefficient reads (units inactive in every block read none) and split again.
/// Each entry is a float64 sum of its nonzero products in some order.
pub(super) fn stacked_times(blocks: &[&Array2<f64>], w: ArrayView2<'_, f64>) -> Vec<Array2<f64>> {
    match blocks {
        [] => Vec::new(),
        [one] => vec![rows_times(one, w)],
        _ => {
            let views: Vec<_> = blocks.iter().map(|b| b.view()).collect();
            let Ok(stacked) = concatenate(Axis(0), &views) else {
                // blocks of different widths: each alone
                return blocks.iter().map(|b| rows_times(b, w)).collect();
            };
            let product = read_rows_times(stacked.view(), w);
            let mut at = 0;
            (blocks.iter())
                .map(|b| {
                    let part = product.slice(s![at..at + b.nrows(), ..]).to_owned();
                    at += b.nrows();
                    part
                })
                .collect()
        }
    }
}

/// Per hidden layer, a block's derivatives in its slopes and in its split multipliers (rows x
/// units each).
pub(super) type Derivatives = (Vec<Array2<f64>>, Vec<Array2<f64>>);

/// The sign `s` of a split: the constraint is `s z >= 0`.
fn split_sign(phase: Phase) -> f64 {
    match phase {
        Phase::Active => 1.0,
        Phase::Inactive => -1.0,
    }
}

/// The backward substitution of every block at its slopes and multipliers, in plain float64.
pub(super) fn backward(net: &LocalNet, blocks: &[Block]) -> Vec<Pass> {
    let mut lam: Vec<Array2<f64>> = blocks.iter().map(|b| b.c.clone()).collect();
    let mut cst: Vec<Array1<f64>> = (blocks.iter())
        .map(|b| Array1::zeros(b.c.nrows()))
        .collect();
    let mut mu: Vec<Vec<Array2<f64>>> = (blocks.iter())
        .map(|b| vec![Array2::zeros((0, 0)); b.lines.len()])
        .collect();
    // a block's rows are over the output of layer `top`, the layer above its last relaxed one
    let deepest = blocks.iter().map(|b| b.lines.len()).max().unwrap_or(0);
    for l in (1..=deepest).rev() {
        let at: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].lines.len() >= l)
            .collect();
        let layer = &net.layers[l];
        let parts: Vec<&Array2<f64>> = at.iter().map(|&i| &lam[i]).collect();
        let products = stacked_times(&parts, layer.w.view());
        for (&i, m) in at.iter().zip(products) {
            cst[i] += &lam[i].dot(&layer.b);
            let b = &blocks[i];
            let mut next = relaxed_coefficients(&m, &b.lines[l - 1], &b.slopes[l - 1], &mut cst[i]);
            for &(_, j, phase) in b.splits.iter().filter(|(h, _, _)| *h == l - 1) {
                let s = split_sign(phase);
                for r in 0..next.nrows() {
                    next[[r, j]] -= s * b.betas[l - 1][[r, j]];
                }
            }
            mu[i][l - 1] = m;
            lam[i] = next;
        }
    }
    let first = &net.layers[0];
    for (i, b) in blocks.iter().enumerate() {
        cst[i] += &lam[i].dot(&(b.centre + &first.b));
    }
    let balls: Vec<usize> = (0..blocks.len())
        .filter(|&i| matches!(blocks[i].reach, Reach::Ball(_)))
        .collect();
    let boxes: Vec<usize> = (0..blocks.len())
        .filter(|&i| matches!(blocks[i].reach, Reach::Box(_)))
        .collect();
    let of = |at: &[usize]| -> Vec<&Array2<f64>> { at.iter().map(|&i| &lam[i]).collect() };
    let mut grams = stacked_times(&of(&balls), net.input_gram.view()).into_iter();
    let mut images = stacked_times(&of(&boxes), first.w.view()).into_iter();
    let mut passes = Vec::with_capacity(blocks.len());
    for ((b, lam), (cst, mu)) in blocks.iter().zip(lam.iter()).zip(cst.iter().zip(mu)) {
        let (norm, offset, bound) = match b.reach {
            Reach::Ball(eps) => {
                let gram = grams.next().unwrap_or_else(|| Array2::zeros(lam.dim()));
                let quad = (gram * lam).sum_axis(Axis(1));
                let norm: Vec<f64> = quad.iter().map(|q| q.max(0.0).sqrt()).collect();
                let bound = (cst.iter().zip(&norm)).map(|(c, n)| c - eps * n).collect();
                (norm, None, bound)
            }
            Reach::Box(half) => {
                let mut m = images.next().unwrap_or_default();
                let mut spread = vec![0.0; m.nrows()];
                for (mut row, s) in m.rows_mut().into_iter().zip(&mut spread) {
                    row.zip_mut_with(half, |v, &r| {
                        *s += v.abs() * r;
                        *v = -v.signum() * r;
                    });
                }
                let bound = (cst.iter().zip(&spread)).map(|(c, s)| c - s).collect();
                (Vec::new(), Some(m), bound)
            }
        };
        passes.push(Pass {
            bound,
            mu,
            first: lam.clone(),
            norm,
            offset,
        });
    }
    passes
}

/// The coefficients over a layer's pre-activations from `m`, those over its outputs: each
/// unit's line (its lower line at the row's slope `a` for a nonnegative coefficient, else its
/// upper line, whose offset enters the row's constant `cst`).
fn relaxed_coefficients(
    m: &Array2<f64>,
    lines: &Lines,
    a: &Array2<f64>,
    cst: &mut Array1<f64>,
) -> Array2<f64> {
    let mut next = Array2::zeros(m.dim());
    for (((mut out, m), a), c) in (next.rows_mut().into_iter())
        .zip(m.rows())
        .zip(a.rows())
        .zip(cst.iter_mut())
    {
        Zip::from(&mut out)
            .and(&m)
            .and(&a)
            .and(&lines.0)
            .for_each(|o, &v, &a, &line| {
                *o = match line {
                    Line::Inactive => 0.0,
                    Line::Active => v,
                    Line::Unstable { .. } if v >= 0.0 => a * v,
                    Line::Unstable { slope, offset } => {
                        *c += v * offset;
                        slope * v
                    }
                };
            });
    }
    next
}

/// Per block, the bound's derivative in every slope (zero where the slope is not read),
/// `mu_kj v_kj`, and in every split's multiplier, `-s v_kj`, with `v` the relaxed network's
/// pre-activations at each row's minimiser (module docs of [`super`]).
pub(super) fn gradients(net: &LocalNet, blocks: &[Block], passes: &[&Pass]) -> Vec<Derivatives> {
    let first = &net.layers[0];
    // v_1 = W_1 x* + b_1: for a ball, W_1 x0 + b_1 - eps G Lambda_1^T / ||W_1^T Lambda_1^T||;
    // for a box, W_1 x0 + b_1 + W_1 (x* - x0)
    let balls: Vec<usize> = (0..blocks.len())
        .filter(|&i| matches!(blocks[i].reach, Reach::Ball(_)))
        .collect();
    let boxes: Vec<usize> = (0..blocks.len())
        .filter(|&i| matches!(blocks[i].reach, Reach::Box(_)) && passes[i].offset.is_some())
        .collect();
    let firsts: Vec<&Array2<f64>> = balls.iter().map(|&i| &passes[i].first).collect();
    let offsets: Vec<&Array2<f64>> = (boxes.iter())
        .filter_map(|&i| passes[i].offset.as_ref())
        .collect();
    let mut grams = stacked_times(&firsts, net.input_gram.view()).into_iter();
    let mut moves = stacked_times(&offsets, first.w_t.view()).into_iter();
    let mut v: Vec<Array2<f64>> = Vec::with_capacity(blocks.len());
    for (i, (b, pass)) in blocks.iter().zip(passes).enumerate() {
        let mut vi = match b.reach {
            Reach::Ball(eps) => {
                let mut g = grams
                    .next()
                    .unwrap_or_else(|| Array2::zeros(pass.first.dim()));
                for (mut row, &n) in g.rows_mut().into_iter().zip(&pass.norm) {
                    let scale = if n > 0.0 { -eps / n } else { 0.0 };
                    row.mapv_inplace(|g| g * scale);
                }
                g
            }
            Reach::Box(_) if boxes.contains(&i) => moves.next().unwrap_or_default(),
            Reach::Box(_) => Array2::zeros(pass.first.dim()),
        };
        for mut row in vi.rows_mut() {
            row += b.centre;
            row += &first.b;
        }
        v.push(vi);
    }
    let mut out: Vec<Derivatives> = (blocks.iter())
        .map(|b| {
            (
                Vec::with_capacity(b.lines.len()),
                Vec::with_capacity(b.lines.len()),
            )
        })
        .collect();
    let deepest = blocks.iter().map(|b| b.lines.len()).max().unwrap_or(0);
    for k in 0..deepest {
        let at: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].lines.len() > k)
            .collect();
        let mut hs = Vec::with_capacity(at.len());
        for &i in &at {
            let (b, vi) = (&blocks[i], &v[i]);
            let mut beta_grad = Array2::zeros(passes[i].mu[k].dim());
            for &(_, j, phase) in b.splits.iter().filter(|(h, _, _)| *h == k) {
                for r in 0..beta_grad.nrows() {
                    beta_grad[[r, j]] = -split_sign(phase) * vi[[r, j]];
                }
            }
            let (grad, h) = slope_gradient(&passes[i].mu[k], vi, &b.lines[k], &b.slopes[k]);
            out[i].0.push(grad);
            out[i].1.push(beta_grad);
            hs.push(h);
        }
        // the next layer's pre-activations, for the blocks that relax it
        let (up, hs): (Vec<usize>, Vec<&Array2<f64>>) = (at.iter().zip(&hs))
            .filter(|(&i, _)| blocks[i].lines.len() > k + 1)
            .map(|(&i, h)| (i, h))
            .unzip();
        let next = &net.layers[k + 1];
        for (i, z) in up.into_iter().zip(stacked_times(&hs, next.w_t.view())) {
            v[i] = z + &next.b;
        }
    }
    out
}

/// A layer's derivatives in the slopes, `mu_kj v_kj` where the lower line is read (an unstable
/// unit with a nonnegative coefficient), and the relaxed outputs `h` at the minimiser.
fn slope_gradient(
    mu: &Array2<f64>,
    v: &Array2<f64>,
    lines: &Lines,
    a: &Array2<f64>,
) -> (Array2<f64>, Array2<f64>) {
    let mut grad = Array2::zeros(mu.dim());
    let mut h = Array2::zeros(mu.dim());
    for (((mut g, mut h), (m, z)), a) in (grad.rows_mut().into_iter())
        .zip(h.rows_mut())
        .zip(mu.rows().into_iter().zip(v.rows()))
        .zip(a.rows())
    {
        Zip::from(&mut g)
            .and(&mut h)
            .and(&m)
            .and(&z)
            .and(&a)
            .and(&lines.0)
            .for_each(|g, h, &m, &z, &a, &line| {
                *h = match line {
                    Line::Inactive => 0.0,
                    Line::Active => z,
                    Line::Unstable { .. } if m >= 0.0 => {
                        *g = m * z;
                        a * z
                    }
                    Line::Unstable { slope, offset } => slope * z + offset,
                };
            });
    }
    (grad, h)
}
