//! The last step of the backward pass: the rows at the input concretised over the region, a
//! ball ([`ball_spread`]) or a box ([`box_spread`]).

use ndarray::{Array1, Array2, Axis};

use crate::arith::sound::{add_down, add_up, mul_up, sqrt_up, sub_down};
use crate::bounds::local::interval::{underflow_slack, NonnegSum};
use crate::bounds::local::local_net::LocalNet;
use std::sync::Arc;

use crate::bounds::local::region::{FirstLayerAtCentre, Region};
use crate::bounds::local::relax::gamma_up;
use crate::bounds::local::rows::rows_times;

use super::carried::{Carried, RowSums};

/// At the input, for `Lambda z_1(x) = M x + Lambda b_1` with `M = Lambda W_1`: the minimum over
/// the region is `M c - spread` with `c` its centre (the ball's, or the box's midpoint) and
/// `spread` the ball's `eps ||M_r||_2` ([`ball_spread`], Cauchy-Schwarz, attained) or the box's
/// `sum_i |M_ri| r_i` ([`box_spread`], attained at a vertex). With `fl(W_1 c)` (within
/// `e = gamma_n |W_1| |c| + n eta` of `W_1 c`), `M c` is within
/// `gamma_m |Lambda| |fl(W_1 c)| + |Lambda| e + m eta` of `fl(Lambda fl(W_1 c))`. The result is
/// `cst + fl(Lambda fl(W_1 c)) - spread_up - err`, rounded down; a deployed input flushed to zero
/// is within `D_0` of `x` (0 for the real network), which both spreads add.
/// Over a box, also `M_hat = fl(Lambda W_1)`, which its spread forms ([`box_spread`]).
pub(super) fn concretise(
    net: &LocalNet,
    lam: &Array2<f64>,
    mut carried: Carried,
    region: &Region,
) -> (Vec<f64>, Option<Array2<f64>>) {
    let layer = &net.layers[0];
    let (m, n) = layer.w.dim();
    let first = first_layer_at_centre(net, region);
    let (c, c_err) = (&first.c, &first.c_err);
    let c_mag = c.mapv(f64::abs);
    let with_bias = RowSums::of(lam, (&layer.b, &layer.abs_b), &c_mag);
    let (bias, bias_mag, centre_mag, lam_sums) = (
        with_bias.signed,
        with_bias.abs_b,
        with_bias.abs_v,
        with_bias.abs_lam,
    );
    let with_centre = RowSums::of(lam, (c, c_err), &c_mag);
    let (centre, from_c, lam_squares) =
        (with_centre.signed, with_centre.abs_b, with_centre.squares);
    let g = gamma_up(m + 1);
    let sum_m = NonnegSum::new(m);
    carried.add_constant(&bias);
    let slack = underflow_slack(m + n + 2);
    carried.add_error((0..lam.nrows()).map(|r| {
        let rounding = mul_up(g, add_up(sum_m.up(centre_mag[r]), sum_m.up(bias_mag[r])));
        let lam_mass = sum_m.up(lam_sums[r]);
        add_up(
            add_up(rounding, sum_m.up(from_c[r])),
            mul_up(slack, mul_up(4.0, add_up(1.0, lam_mass))),
        )
    }));
    let (spread, m_hat) = match &region.boxed {
        None => {
            let reach = add_up(region.eps, net.d0);
            (
                ball_spread(net, lam, reach, (&lam_squares, &lam_sums)),
                None,
            )
        }
        Some(b) => {
            let (spread, m_hat) = box_spread(net, lam, &b.half);
            (spread, Some(m_hat))
        }
    };
    let sum_t = NonnegSum::new(carried.terms);
    let lower = (0..lam.nrows())
        .map(|r| {
            let err = sum_t.up(carried.err[r]);
            let value = add_down(carried.cst[r], centre[r]);
            sub_down(sub_down(value, spread[r]), err)
        })
        .map(|v| if v.is_nan() { f64::NEG_INFINITY } else { v })
        .collect();
    (lower, m_hat)
}

/// The first layer's products with the region's centre `c` ([`FirstLayerAtCentre`]), kept by
/// the region for its later passes and by the network for the next region of the same set
/// ([`LocalNet::kept_first_layer`]): `fl(W_1 c)`, its error bound
/// `gamma_n (|W_1| |c|) + n eta` (the sum rounded up), and the deployed first layer's rounding
/// charges over the region.
pub(super) fn first_layer_at_centre(net: &LocalNet, region: &Region) -> Arc<FirstLayerAtCentre> {
    let layer = &net.layers[0];
    // the layer itself (of this network, alive while the region is) and its rounding model
    let key = (std::ptr::from_ref(layer) as usize, layer.rounding.is_some());
    region.first_layer(key, || {
        if let Some(kept) = net.kept_first_layer(region) {
            return kept;
        }
        let n = layer.w.ncols();
        let x0 = region.centre.view();
        let (g_n, sum_n, slack_n) = (gamma_up(n), NonnegSum::new(n), underflow_slack(n));
        let c_err: Array1<f64> = (layer.abs_w.dot(&x0.mapv(f64::abs)))
            .mapv(|v| add_up(mul_up(g_n, sum_n.up(v)), slack_n));
        let computed = Arc::new(FirstLayerAtCentre {
            c: layer.w.dot(&x0),
            c_err,
            errors: (layer.rounding.as_ref()).map(|model| model.region_errors(region)),
        });
        net.keep_first_layer(region, computed.clone());
        computed
    })
}

/// `reach ||M_r||_2` rounded up, per row, for the ball: `||M_r||^2 = Lambda_r G Lambda_r^T` with
/// `G = W_1 W_1^T`, whose float64 value `G_hat` is within `gamma_n |W_1| |W_1|^T + n eta` of it,
/// so with the quadratic form's own rounding
/// `||M_r||^2 <= fl(Lambda_r G_hat Lambda_r^T) + (gamma_n + 2 gamma_{2m}) 2 ||W_1||_F^2 ||Lambda_r||^2`
/// (`|Lambda_r| |W_1| |W_1|^T |Lambda_r|^T = || |W_1|^T |Lambda_r| ||^2 <= ||W_1||_F^2 ||Lambda_r||^2`)
/// plus the underflow slack; `M` itself is never formed.
pub(super) fn ball_spread(
    net: &LocalNet,
    lam: &Array2<f64>,
    reach: f64,
    (lam_squares, lam_sums): (&[f64], &[f64]),
) -> Vec<f64> {
    let (m, n) = net.layers[0].w.dim();
    let quad = (rows_times(lam, net.input_gram.view()) * lam).sum_axis(Axis(1));
    let sum_m = NonnegSum::new(m);
    let g_quad = mul_up(2.0, add_up(gamma_up(n), mul_up(2.0, gamma_up(2 * m + 1))));
    let slack = underflow_slack(m + n + 2);
    (0..lam.nrows())
        .map(|r| {
            let lam_sq = sum_m.up(lam_squares[r]);
            let lam_mass = sum_m.up(lam_sums[r]);
            let quad_err = add_up(
                mul_up(g_quad, mul_up(net.input_frob2, lam_sq)),
                mul_up(slack, mul_up(4.0, add_up(1.0, mul_up(lam_mass, lam_mass)))),
            );
            mul_up(reach, sqrt_up(add_up(quad[r].max(0.0), quad_err)))
        })
        .collect()
}

/// `sum_i |M_ri| h_i` rounded up, per row, for the box with half-widths `r` around its centre,
/// `h = r + D_0` (a flushed input moves each coordinate by less than `lambda <= D_0`): with
/// `M_hat = fl(Lambda W_1)`, `|M_hat - Lambda W_1| <= gamma_m |Lambda| |W_1| + m eta` entrywise,
/// so the sum is at most `sum_i |M_hat_ri| h_i + gamma_m |Lambda_r| (|W_1| h) + m eta sum_i h_i`,
/// each a float64 sum of nonnegative terms bounded above as computed ([`NonnegSum`]). Returns
/// the sums and `M_hat`.
pub(super) fn box_spread(
    net: &LocalNet,
    lam: &Array2<f64>,
    half: &Array1<f64>,
) -> (Vec<f64>, Array2<f64>) {
    let layer = &net.layers[0];
    let (m, n) = layer.w.dim();
    let h: Array1<f64> = half.mapv(|r| add_up(r, net.d0));
    let (sum_n, sum_m) = (NonnegSum::new(n), NonnegSum::new(m));
    let spread_in = layer.abs_w.dot(&h).mapv(|v| sum_n.up(v));
    let mass = lam.mapv(f64::abs).dot(&spread_in);
    let m_hat = rows_times(lam, layer.w.view());
    let from_m = m_hat.mapv(f64::abs).dot(&h);
    let floor = mul_up(underflow_slack(m), sum_n.up(h.sum()));
    let g = gamma_up(m);
    let spread = (0..lam.nrows())
        .map(|r| {
            let product = mul_up(g, sum_m.up(mass[r]));
            add_up(add_up(sum_n.up(from_m[r]), product), floor)
        })
        .collect();
    (spread, m_hat)
}
