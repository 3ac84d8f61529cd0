//! Local bounds of the **deployed** execution (docs/soundness.md "Local bounds", L3): every
//! layer's rounding error `e_l`, `|e_l| <= rel_w |W_l| |h_hat| + rel_b |b_l| + abs`, enters the
//! backward substitution as a bounded input. Checked apart from the production code:
//!
//! * **containment**: on small random networks in float32 and float16, at points of the ball
//!   (rounded to the format and checked to lie in the ball in exact rationals), executions in
//!   several covered orders (bias first or last, FMA or not, float64 or storage-format
//!   accumulation) have every hidden pre-activation within the deployed bounds and every margin
//!   at least the deployed lower bound, with CROWN's lower slopes and with searched ones;
//! * **pinned where the network is linear**: with every unit stable over the ball, the deployed
//!   bound is exactly the minimum over the ball of the linear form in which every layer above
//!   the first carries its rounding in its coefficients (`lam W - rel_w |lam| |W|` over its
//!   inputs, `lam b - rel_b |lam| |b| - abs sum |lam|` in the constant) and the first layer's
//!   rounding bound `eps_1` is subtracted, `|Lambda_1| eps_1`, up to the float64 allowance;
//! * **no rounding, no change**: with a zero rounding model the bounds are the real network's
//!   up to the float64 allowance.

use crate::common::exact_bounds::{net, pow2, q, Iv};
use crate::common::local_nets::{argmax, ball_points, exact_forward, forward, in_ball, nets, Rng};
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::arith::sound::{add_up, l2_norm_up};
use lipfp::bounds::certify::ModelBounds;
use lipfp::bounds::local::{Deployment, InputSet, LayerRounding, LocalNet, SlopeSearch};
use lipfp::bounds::norms::compute_norms;
use lipfp::onnx::model::DenseNet;
use rug::Rational;

/// `net` with weights and biases rounded to `f`.
fn in_format(n: &DenseNet, f: Format) -> DenseNet {
    let ws = n.layers.iter().map(|l| l.w.mapv(|v| f.round(v))).collect();
    let bs = n
        .layers
        .iter()
        .map(|l| l.b.iter().map(|v| f.round(*v)).collect())
        .collect();
    net(f, ws, bs)
}

/// The model's rounding constants and `|W|` per layer, as the engine hands them to local bounds.
fn deployment(n: &DenseNet, mb: &ModelBounds) -> Deployment {
    Deployment {
        layers: (mb.layers.iter().zip(&n.layers))
            .map(|(lb, l)| (lb.rounding.expect("dense"), l.w.mapv(f64::abs)))
            .collect(),
        d0: mb.d0,
    }
}

/// The standard chain's `D_l` per hidden layer, as the engine widens the Lipschitz source.
fn lip_slack(mb: &ModelBounds, x0: &[f64], eps: f64) -> Vec<f64> {
    let r0 = add_up(l2_norm_up(x0.iter().copied()), eps);
    mb.deviation_profile(r0)
        .map(|(_, d)| d[1..].to_vec())
        .unwrap_or_default()
}

/// One covered way of computing a layer output `b + sum w_j h_j` and rounding it to storage.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// float32 accumulation from the bias, products rounded, then storage.
    BiasFirst32,
    /// float32 fused multiply-adds in reverse order, the bias added last, then storage.
    FmaReversed32,
    /// float64 accumulation, one rounding to storage.
    Wide64,
    /// Every operation rounded to the storage format.
    Storage,
}

fn dot(order: Order, f: Format, w: &[f64], h: &[f64], b: f64) -> f64 {
    let r32 = |v: f64| v as f32 as f64;
    let v = match order {
        Order::BiasFirst32 => w
            .iter()
            .zip(h)
            .fold(r32(b), |acc, (w, h)| r32(acc + r32(w * h))),
        Order::FmaReversed32 => {
            let acc = w
                .iter()
                .zip(h)
                .rev()
                .fold(0f32, |acc, (w, h)| (*w as f32).mul_add(*h as f32, acc));
            r32(acc as f64 + b)
        }
        Order::Wide64 => b + w.iter().zip(h).map(|(w, h)| w * h).sum::<f64>(),
        Order::Storage => w
            .iter()
            .zip(h)
            .fold(f.round(b), |acc, (w, h)| f.round(acc + f.round(w * h))),
    };
    f.round(v)
}

/// The deployed forward pass in `order`: hidden pre-activations and logits.
fn deployed_forward(n: &DenseNet, f: Format, order: Order, x: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
    let mut h = x.to_vec();
    let mut pre = Vec::new();
    for (l, layer) in n.layers.iter().enumerate() {
        let z: Vec<f64> = (0..layer.w.nrows())
            .map(|r| dot(order, f, layer.w.row(r).as_slice().unwrap(), &h, layer.b[r]))
            .collect();
        if l + 1 == n.layers.len() {
            return (pre, z);
        }
        h = z.iter().map(|v| v.max(0.0)).collect();
        pre.push(z);
    }
    unreachable!()
}

#[test]
fn deployed_bounds_contain_float_executions_at_points_of_the_ball() {
    let mut rng = Rng(5);
    let (mut checked, mut unstable, mut improved) = (0usize, 0usize, 0usize);
    let orders = [
        Order::BiasFirst32,
        Order::FmaReversed32,
        Order::Wide64,
        Order::Storage,
    ];
    for f in [Format::Float32, Format::Float16] {
        for (name, base) in nets() {
            let n = in_format(&base, f);
            let exec = ExecutionModel::deployed(f, None, false).unwrap();
            let mb = ModelBounds::new(&n, &compute_norms(&n, 12).unwrap(), &exec);
            assert!(mb.vacuous.is_none(), "{name}: {:?}", mb.vacuous);
            let local = LocalNet::new(&n, Some(&mb.lip_prefix), Some(deployment(&n, &mb))).unwrap();
            let searched = LocalNet::new(&n, Some(&mb.lip_prefix), Some(deployment(&n, &mb)))
                .unwrap()
                .with_slope_search(SlopeSearch {
                    iterations: 12,
                    target: f64::INFINITY,
                });
            for centre in 0..3 {
                let x0: Vec<f64> = (0..n.input_dim()).map(|_| f.round(rng.normal())).collect();
                let i = argmax(&forward(&n, &x0).1);
                for eps in [0.0, 0.01, 0.1, 0.4] {
                    let slack = lip_slack(&mb, &x0, eps);
                    let (lower, hidden) =
                        local.point_bounds(InputSet::Ball { x0: &x0, eps }, i, &slack);
                    let hidden = hidden.expect("finite bounds");
                    let best = searched.margin_lower_bounds(&x0, eps, i, &slack);
                    for j in (0..n.classes()).filter(|&j| j != i) {
                        assert!(best[j] >= lower[j], "searched below CROWN's slopes");
                        improved += usize::from(best[j] > lower[j]);
                    }
                    unstable += (hidden.pre.iter())
                        .flat_map(|b| b.lo.iter().zip(&b.hi))
                        .filter(|(l, h)| **l < 0.0 && **h > 0.0)
                        .count();
                    let what = format!("{f} {name} centre {centre} eps {eps}");
                    for x in ball_points(&n, &x0, eps, i, &mut rng) {
                        let xr: Vec<f64> = x.iter().map(|v| f.round(*v)).collect();
                        let Some(x) = in_ball(&x0, eps, xr) else {
                            continue;
                        };
                        for order in orders {
                            let (pre, logits) = deployed_forward(&n, f, order, &x);
                            for (l, (z, b)) in pre.iter().zip(&hidden.pre).enumerate() {
                                for (k, v) in z.iter().enumerate() {
                                    assert!(
                                        b.lo[k] <= *v && *v <= b.hi[k],
                                        "{what} {order:?}: layer {l} unit {k}: {v} outside [{}, {}]",
                                        b.lo[k],
                                        b.hi[k]
                                    );
                                }
                            }
                            for j in (0..n.classes()).filter(|&j| j != i) {
                                let m = q(logits[i]) - q(logits[j]);
                                assert!(q(lower[j]) <= m, "{what} {order:?}: margin {i}-{j}");
                                assert!(q(best[j]) <= m, "{what} {order:?}: {i}-{j} searched");
                            }
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "ball points checked in four orders: {checked}; unstable units: {unstable}; \
         margins the slope search raised: {improved}"
    );
    assert!(
        checked > 5_000 && unstable > 50 && improved > 20,
        "{checked} {unstable} {improved}"
    );
}

/// In the linear regime at `x0`, the deployed margin bound's exact form for the margin `i - j`
/// with the rounding of every layer above the first folded into the coefficients
/// (`backward::substitute_deployed`): a row `lam` over `z_hat_l` becomes
/// `(lam W_l - rel_w |lam| |W_l|) h + lam b_l - rel_b |lam| |b_l| - abs sum |lam|`. Returns the
/// row over the first layer's pre-activations and the constant collected above it.
fn exact_folded(
    n: &DenseNet,
    x0: &[f64],
    (i, j): (usize, usize),
    r: LayerRounding,
) -> (Vec<Rational>, Rational) {
    let (pre, _) = exact_forward(n, &x0.iter().map(|v| q(*v)).collect::<Vec<_>>());
    let mut lam: Vec<Rational> = (0..n.classes())
        .map(|k| q(f64::from(u8::from(k == i)) - f64::from(u8::from(k == j))))
        .collect();
    let mut constant = Rational::new();
    for l in (1..n.layers.len()).rev() {
        let (w, b) = (&n.layers[l].w, &n.layers[l].b);
        for (k, lk) in lam.iter().enumerate() {
            constant += lk.clone() * q(b[k]) - q(r.rel_b) * lk.clone().abs() * q(b[k].abs());
            constant -= q(r.abs) * lk.clone().abs();
        }
        lam = (0..w.ncols())
            .map(|c| {
                if pre[l - 1][c] > 0 {
                    (0..w.nrows())
                        .map(|k| {
                            lam[k].clone() * q(w[[k, c]])
                                - q(r.rel_w) * lam[k].clone().abs() * q(w[[k, c]].abs())
                        })
                        .sum()
                } else {
                    Rational::new()
                }
            })
            .collect();
    }
    (lam, constant)
}

/// The first layer's rounding bound `eps_1` from the formula, exactly (enclosed):
/// `rel_w ((|W_1| |x0|)_k + eps ||W_{1,k}||) + rel_b |b_k| + abs`.
fn exact_input_errors(n: &DenseNet, r: LayerRounding, x0: &[f64], eps: f64) -> Vec<Iv> {
    let w = &n.layers[0].w;
    (0..w.nrows())
        .map(|k| {
            let row = w.row(k);
            let dot: Rational = row
                .iter()
                .zip(x0)
                .map(|(w, x)| q(w.abs()) * q(x.abs()))
                .sum();
            let norm = Iv::exact(row.iter().map(|w| q(*w) * q(*w)).sum()).sqrt();
            let fixed = q(r.rel_b) * q(n.layers[0].b[k].abs()) + q(r.abs);
            (Iv::exact(dot).add(&norm.scale(&q(eps))))
                .scale(&q(r.rel_w))
                .add(&Iv::exact(fixed))
        })
        .collect()
}

#[test]
fn where_the_network_is_linear_the_deployed_bound_is_the_exact_folded_minimum() {
    // rounding constants large enough to move the bound far beyond float64's allowance
    let r = LayerRounding {
        rel_w: 2f64.powi(-10),
        rel_b: 2f64.powi(-11),
        abs: 2f64.powi(-20),
    };
    let d0 = 2f64.powi(-12);
    let mut rng = Rng(17);
    let mut pinned = 0;
    for (name, n) in nets() {
        let dep = Deployment {
            layers: n.layers.iter().map(|l| (r, l.w.mapv(f64::abs))).collect(),
            d0,
        };
        let local = LocalNet::new(&n, None, Some(dep)).unwrap();
        for centre in 0..6 {
            let x0: Vec<f64> = (0..n.input_dim())
                .map(|_| Format::Float32.round(rng.normal()))
                .collect();
            let i = argmax(&forward(&n, &x0).1);
            for eps in [1e-6, 1e-4, 1e-3] {
                let (lower, hidden) = local.point_bounds(InputSet::Ball { x0: &x0, eps }, i, &[]);
                let hidden = hidden.expect("finite");
                let stable = (hidden.pre.iter())
                    .all(|b| b.lo.iter().zip(&b.hi).all(|(l, h)| *l >= 0.0 || *h <= 0.0));
                if !stable {
                    continue;
                }
                let (_, logits) = exact_forward(&n, &x0.iter().map(|v| q(*v)).collect::<Vec<_>>());
                let magnitude = n.layers.iter().fold(
                    q(1.0) + x0.iter().map(|v| q(v.abs())).sum::<Rational>(),
                    |acc, l| acc * (q(1.0) + l.w.iter().map(|v| q(v.abs())).sum::<Rational>()),
                );
                for j in (0..n.classes()).filter(|&j| j != i) {
                    let (first, constant) = exact_folded(&n, &x0, (i, j), r);
                    let w1 = &n.layers[0].w;
                    let grad: Vec<Rational> = (0..w1.ncols())
                        .map(|c| {
                            (0..w1.nrows())
                                .map(|k| first[k].clone() * q(w1[[k, c]]))
                                .sum()
                        })
                        .collect();
                    let norm = Iv::exact(grad.iter().map(|v| v.clone() * v).sum()).sqrt();
                    let at_x0: Rational = (0..w1.nrows())
                        .map(|k| {
                            let z: Rational = (0..w1.ncols())
                                .map(|c| q(w1[[k, c]]) * q(x0[c]))
                                .sum::<Rational>()
                                + q(n.layers[0].b[k]);
                            first[k].clone() * z
                        })
                        .sum();
                    let m = logits[i].clone() - &logits[j];
                    let mut want = Iv::exact(constant + at_x0).sub(&norm.scale(&(q(eps) + q(d0))));
                    let e = exact_input_errors(&n, r, &x0, eps);
                    for (c, ek) in first.iter().zip(&e) {
                        want = want.sub(&ek.scale(&c.clone().abs()));
                    }
                    let what = format!("{name} centre {centre} eps {eps} {i}-{j}");
                    assert!(q(lower[j]) <= want.lo, "{what}: above the exact value");
                    let tol = (m.abs() + q(1.0)) * magnitude.clone() * pow2(-40);
                    assert!(
                        q(lower[j]) >= want.hi.clone() - tol,
                        "{what}: {} vs {}",
                        lower[j],
                        want.hi.to_f64()
                    );
                    pinned += 1;
                }
            }
        }
    }
    eprintln!("deployed margins pinned in the linear regime: {pinned}");
    assert!(pinned > 20, "{pinned}");
}

#[test]
fn without_rounding_the_deployed_bounds_are_the_real_networks() {
    let zero = LayerRounding {
        rel_w: 0.0,
        rel_b: 0.0,
        abs: 0.0,
    };
    let mut rng = Rng(23);
    for (name, n) in nets() {
        let real = LocalNet::new(&n, None, None).unwrap();
        let dep = Deployment {
            layers: n
                .layers
                .iter()
                .map(|l| (zero, l.w.mapv(f64::abs)))
                .collect(),
            d0: 0.0,
        };
        let deployed = LocalNet::new(&n, None, Some(dep)).unwrap();
        for _ in 0..4 {
            let x0: Vec<f64> = (0..n.input_dim())
                .map(|_| Format::Float32.round(rng.normal()))
                .collect();
            let i = argmax(&forward(&n, &x0).1);
            for eps in [0.01, 0.1, 0.5] {
                let a = real.margin_lower_bounds(&x0, eps, i, &[]);
                let b = deployed.margin_lower_bounds(&x0, eps, i, &[]);
                for (j, (a, b)) in a.iter().zip(&b).enumerate().filter(|(j, _)| *j != i) {
                    assert!(
                        (b - a).abs() <= 1e-12 * (1.0 + a.abs()),
                        "{name} eps {eps} {i}-{j}: {b} vs {a}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_deeper_layers_lipschitz_source_is_widened_by_the_deviation_chain_only() {
    // 2 -> 2 -> 1 -> 2 with every unit on over the ball; the second layer's pre-activation
    // z_2 = [1, 1] relu(W_1 x + 8) has its tightest bound from the Lipschitz source,
    // z_2(x0) -+ (||w_2|| ||W_1|| eps + D), D the chain's deviation: the first layer's own
    // flushed-input and rounding widening (`eps_1 + D_0 ||W_{1,j}||`) must not be added to it
    let w1 = ndarray::Array2::from_shape_vec((2, 2), vec![1.0, 1.0, 1.0, -1.0]).unwrap();
    let w2 = ndarray::Array2::from_shape_vec((1, 2), vec![1.0, 1.0]).unwrap();
    let w3 = ndarray::Array2::from_shape_vec((2, 1), vec![1.0, -1.0]).unwrap();
    let n = net(
        Format::Float32,
        vec![w1, w2, w3],
        vec![vec![8.0, 8.0], vec![0.0], vec![0.0, 0.0]],
    );
    let r = LayerRounding {
        rel_w: 2f64.powi(-10),
        rel_b: 2f64.powi(-11),
        abs: 2f64.powi(-20),
    };
    let dep = Deployment {
        layers: n.layers.iter().map(|l| (r, l.w.mapv(f64::abs))).collect(),
        d0: 2f64.powi(-12),
    };
    let sqrt2 = 2f64.sqrt().next_up();
    let prefix = [1.0, sqrt2, sqrt2 * sqrt2 * 2.0];
    let local = LocalNet::new(&n, Some(&prefix), Some(dep)).unwrap();
    let (eps, chain) = (0.1, 1e-3);
    let x0 = [0.25, -0.5];
    let hidden = local.hidden_bounds(&x0, eps, &[0.0, chain]).unwrap();
    let b = &hidden.pre[1];
    let lipschitz = 2.0 * eps + chain;
    let width = b.hi[0] - b.lo[0];
    assert!(
        width <= 2.0 * lipschitz * (1.0 + 1e-9),
        "width {width} beyond the Lipschitz source's {}",
        2.0 * lipschitz
    );
    // and it is the Lipschitz source, not interval propagation (which is wider here)
    let interval = 2.0 * (2.0 * sqrt2 * eps);
    assert!(width < interval, "{width} {interval}");
    // z_2(x0) = 7.75 + 8.75, and every point of the ball is within 2 eps of it
    assert!(
        b.lo[0] <= 16.5 - 2.0 * eps && b.hi[0] >= 16.5 + 2.0 * eps,
        "{b:?}"
    );
}

#[test]
fn over_a_box_without_a_hidden_layer_the_deployed_bound_is_exact() {
    // the minimum over the box less every output's rounding bound, with
    // |x'| <= max(|lo|, |hi|): sum_k |c_k| (rel_w |w_k| m + rel_b |b_k| + abs)

    let r = LayerRounding {
        rel_w: 2f64.powi(-10),
        rel_b: 2f64.powi(-11),
        abs: 2f64.powi(-20),
    };
    let mut rng = Rng(29);
    let mut pinned = 0;
    for (name, n) in nets().into_iter().filter(|(_, n)| n.layers.len() == 1) {
        let dep = Deployment {
            layers: vec![(r, n.layers[0].w.mapv(f64::abs))],
            d0: 0.0,
        };
        let local = LocalNet::new(&n, None, Some(dep)).unwrap();
        let (w, b) = (&n.layers[0].w, &n.layers[0].b);
        let (dim, classes) = (n.input_dim(), n.classes());
        for _ in 0..8 {
            let x0: Vec<f64> = (0..dim)
                .map(|_| Format::Float32.round(rng.normal()))
                .collect();
            let e = 0.05;
            let lo: Vec<f64> = x0.iter().map(|v| v - e).collect();
            let hi: Vec<f64> = x0.iter().map(|v| v + e).collect();
            let c = ndarray::Array2::from_shape_fn((2, classes), |_| rng.unit());
            let lower = local
                .linear_lower_bounds(InputSet::Box { lo: &lo, hi: &hi }, &c, &[])
                .unwrap()
                .0;
            for (row_index, row) in c.rows().into_iter().enumerate() {
                let mut want = Rational::new();
                for i in 0..dim {
                    let a: Rational = (0..classes).map(|k| q(row[k]) * q(w[[k, i]])).sum();
                    let (x, y) = (a.clone() * q(lo[i]), a * q(hi[i]));
                    want += if x < y { x } else { y };
                }
                for k in 0..classes {
                    let m: Rational = (0..dim)
                        .map(|i| q(w[[k, i]].abs()) * q(lo[i].abs().max(hi[i].abs())))
                        .sum();
                    let e_k = q(r.rel_w) * m + q(r.rel_b) * q(b[k].abs()) + q(r.abs);
                    want += q(row[k]) * q(b[k]) - q(row[k].abs()) * e_k;
                }
                let what = format!(
                    "{name} row {row_index}: {} vs {}",
                    lower[row_index],
                    want.to_f64()
                );
                assert!(q(lower[row_index]) <= want, "above the exact bound: {what}");
                let tol = pow2(-40) * (want.clone().abs() + q(8.0));
                assert!(q(lower[row_index]) >= want.clone() - tol, "looser: {what}");
                pinned += 1;
            }
        }
    }
    assert!(pinned >= 32, "{pinned}");
}
