//! The falsifier's search direction: the gradient of the margin `z_c - max_{j != c} z_j` of the
//! converted network, by backpropagation in `f64` (the network is piecewise linear: the
//! gradient of a dense layer is `W^T` on the active ReLUs, of an affine step `diag(a)`).
//!
//! Only the direction comes from here; whether a candidate is adversarial is decided by the
//! deployed execution (`crate::engine::exec`) and an exact ball test.

use ndarray::{Array1, Array2, Axis};

use crate::onnx::model::{AffineStep, DenseNet, ElementOp};

/// One layer in `f64`.
enum Layer {
    /// `z W^T + b` (`w` is `[m, n]`, `wt` its transpose).
    Dense {
        w: Array2<f64>,
        wt: Array2<f64>,
        b: Array1<f64>,
    },
    /// `z_i -> a_i z_i + c_i`, computed op by op.
    Affine {
        step: AffineStep,
        slope: Array1<f64>,
    },
}

/// The converted network in `f64`, for gradients.
pub struct GradNet {
    layers: Vec<(Layer, bool)>,
}

/// The slope `a_i` of an affine step at every feature, from its ops in `f64`.
fn slopes(step: &AffineStep) -> Array1<f64> {
    (0..step.width)
        .map(|i| {
            step.ops.iter().fold(1.0, |a, op| match op {
                ElementOp::Add(_) => a,
                ElementOp::Neg => -a,
                ElementOp::Mul(k) => a * k[i],
                ElementOp::Div(k) => a / k[i],
                ElementOp::BatchNorm {
                    scale,
                    var,
                    epsilon,
                    ..
                } => a * scale[i] / (var[i] + epsilon).sqrt(),
            })
        })
        .collect()
}

/// Feature `i` of an affine step at `x`, in `f64`.
fn step_value(step: &AffineStep, i: usize, x: f64) -> f64 {
    step.ops.iter().fold(x, |v, op| match op {
        ElementOp::Add(c) => v + c[i],
        ElementOp::Neg => -v,
        ElementOp::Mul(c) => v * c[i],
        ElementOp::Div(c) => v / c[i],
        ElementOp::BatchNorm {
            scale,
            bias,
            mean,
            var,
            epsilon,
        } => (v - mean[i]) / (var[i] + epsilon).sqrt() * scale[i] + bias[i],
    })
}

/// The competing class of a row of logits: the largest other than `c`.
pub fn runner_up(logits: &[f64], c: usize) -> usize {
    let mut best = usize::from(c == 0);
    for (j, &v) in logits.iter().enumerate() {
        if j != c && v > logits[best] {
            best = j;
        }
    }
    best
}

/// `z m` for `z` of `[rows, k]` and `m` of `[k, n]`, with `m_t` its transpose: for one row the
/// product of `m_t`'s rows (contiguous) with the row, which packs no matrix (the falsifier's
/// descents take one row at a time); else the matrix product.
fn rows_times(z: &Array2<f64>, m: &Array2<f64>, m_t: &Array2<f64>) -> Array2<f64> {
    match z.nrows() {
        1 => m_t.dot(&z.row(0)).insert_axis(Axis(0)),
        _ => z.dot(m),
    }
}

impl GradNet {
    /// The network of `net` in `f64`.
    pub fn new(net: &DenseNet) -> GradNet {
        let layers = net
            .layers
            .iter()
            .map(|l| {
                let layer = match &l.affine {
                    Some(step) => Layer::Affine {
                        slope: slopes(step),
                        step: step.clone(),
                    },
                    None => Layer::Dense {
                        w: l.w.clone(),
                        wt: l.w.t().to_owned(),
                        b: Array1::from(l.b.clone()),
                    },
                };
                (layer, l.act == crate::onnx::model::Activation::Relu)
            })
            .collect();
        GradNet { layers }
    }

    /// The logits `[rows, classes]` at the rows of `x` and the gradient `[rows, n_1]` of each
    /// row's margin `z_c - z_j` (`c = class[row]`, `j` its runner-up at that row).
    pub fn margin_gradient(&self, x: &Array2<f64>, class: &[usize]) -> (Array2<f64>, Array2<f64>) {
        self.objective_gradient(x, |r, logits| {
            let mut seed = vec![0.0; logits.len()];
            let c = class[r];
            seed[c] = 1.0;
            seed[runner_up(logits, c)] = -1.0;
            seed
        })
    }

    /// The float64 network's logits at the point `x` (`None` when `x` is not the network's
    /// input width).
    pub fn logits(&self, x: &[f64]) -> Option<Vec<f64>> {
        let width = match self.layers.first() {
            Some((Layer::Dense { w, .. }, _)) => w.ncols(),
            Some((Layer::Affine { step, .. }, _)) => step.width,
            None => x.len(),
        };
        let rows = Array2::from_shape_vec((1, x.len()), x.to_vec()).ok();
        let rows = rows.filter(|_| x.len() == width)?;
        Some(self.forward(&rows).0.iter().copied().collect())
    }

    /// The logits `[rows, classes]` at the rows of `x`, and per ReLU layer which units are on.
    fn forward(&self, x: &Array2<f64>) -> (Array2<f64>, Vec<Option<Array2<bool>>>) {
        let mut z = x.clone();
        let mut masks: Vec<Option<Array2<bool>>> = Vec::with_capacity(self.layers.len());
        for (layer, relu) in &self.layers {
            z = match layer {
                Layer::Dense { w, wt, b } => rows_times(&z, wt, w) + b,
                Layer::Affine { step, .. } => {
                    let mut z = z;
                    for mut row in z.rows_mut() {
                        for (i, v) in row.iter_mut().enumerate() {
                            *v = step_value(step, i, *v);
                        }
                    }
                    z
                }
            };
            if *relu {
                masks.push(Some(z.mapv(|v| v > 0.0)));
                z.mapv_inplace(|v| v.max(0.0));
            } else {
                masks.push(None);
            }
        }
        (z, masks)
    }

    /// The logits `[rows, classes]` at the rows of `x` and the gradient `[rows, n_1]` of each
    /// row's linear objective `a . z`, `a = objective(row, logits of the row)` (in the linear
    /// region of the row: ReLUs at 0 count as off).
    pub fn objective_gradient(
        &self,
        x: &Array2<f64>,
        objective: impl Fn(usize, &[f64]) -> Vec<f64>,
    ) -> (Array2<f64>, Array2<f64>) {
        let (logits, masks) = self.forward(x);
        let mut g = Array2::<f64>::zeros(logits.raw_dim());
        for (r, row) in logits.axis_iter(Axis(0)).enumerate() {
            let seed = objective(r, &row.to_vec());
            for (v, s) in g.row_mut(r).iter_mut().zip(seed) {
                *v = s;
            }
        }
        for ((layer, _), mask) in self.layers.iter().zip(&masks).rev() {
            if let Some(m) = mask {
                g.zip_mut_with(m, |v, &on| {
                    if !on {
                        *v = 0.0
                    }
                });
            }
            g = match layer {
                Layer::Dense { w, wt, .. } => rows_times(&g, w, wt),
                Layer::Affine { slope, .. } => g * slope,
            };
        }
        (logits, g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_up_is_the_best_other_class() {
        assert_eq!(runner_up(&[3.0, 1.0, 2.0], 0), 2);
        assert_eq!(runner_up(&[3.0, 1.0, 2.0], 2), 0);
        assert_eq!(runner_up(&[1.0, 1.0], 0), 1);
    }

    /// `z m` for one row (the matrix-vector path) and for two rows (the matrix product), against
    /// sums done by hand: `m = [[1, 2], [3, 4], [5, 6]]`.
    #[test]
    fn a_single_row_and_many_rows_multiply_alike() {
        let m = ndarray::array![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]];
        let m_t = m.t().to_owned();
        let one = ndarray::array![[1.0, -1.0, 2.0]];
        assert_eq!(rows_times(&one, &m, &m_t), ndarray::array![[8.0, 10.0]]);
        let two = ndarray::array![[1.0, -1.0, 2.0], [0.0, 1.0, 0.0]];
        assert_eq!(
            rows_times(&two, &m, &m_t),
            ndarray::array![[8.0, 10.0], [3.0, 4.0]]
        );
    }

    #[test]
    fn slopes_follow_the_ops() {
        let step = AffineStep {
            width: 2,
            ops: vec![
                ElementOp::Add(vec![1.0, 2.0]),
                ElementOp::Neg,
                ElementOp::Div(vec![2.0, 4.0]),
            ],
        };
        assert_eq!(slopes(&step).to_vec(), vec![-0.5, -0.25]);
        assert_eq!(step_value(&step, 0, 1.0), -1.0);
    }
}
