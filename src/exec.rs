//! Forward passes of the converted network in the deployment format, batched.
//!
//! The centre logits must come from an execution that conforms to the standard model of the
//! declared format (DESIGN.md rule 2; paper sec. 3.2): each layer computes
//! `fl(fl(W z) + b)` then the activation.
//!
//! * float32 and float64 use a native GEMM (ndarray/matrixmultiply): every output entry is a dot
//!   product summed in some order, possibly with FMA, each operation correctly rounded; Rust
//!   never flushes subnormals by default. The bias is added with one native addition.
//! * float16 and bfloat16 are emulated per operation: each product and each addition is computed
//!   in float32 and rounded to the format. The float32 product of two p-bit numbers is exact
//!   (2p <= 24) and float32 addition followed by rounding to p bits is correctly rounded because
//!   24 >= 2p + 2 (p = 11, 8); see [`Format::round_f32`].

use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;

use crate::format::{round_f32_to_bf16, round_f32_to_f16, Format};
use crate::model::{Activation, DenseNet};

/// Rows per parallel work item.
pub const CHUNK_ROWS: usize = 256;

enum LayerWeights {
    F64 {
        wt: Array2<f64>,
        b: Vec<f64>,
    },
    F32 {
        wt: Array2<f32>,
        b: Vec<f32>,
    },
    /// Transposed `[n, m]` weights for per-operation emulation.
    Emulated {
        wt: Vec<f32>,
        b: Vec<f32>,
        m: usize,
        n: usize,
    },
}

struct ExecLayer {
    weights: LayerWeights,
    relu: bool,
}

/// A network prepared for batched execution in its deployment format.
pub struct Executor {
    format: Format,
    layers: Vec<ExecLayer>,
    classes: usize,
}

impl Executor {
    /// Prepare `net` for execution in `net.format`.
    pub fn new(net: &DenseNet) -> Self {
        Self::with_format(net, net.format)
    }

    /// Prepare `net` for execution in `format` (its weights must already be values of `format`
    /// or of a narrower format).
    pub fn with_format(net: &DenseNet, format: Format) -> Self {
        let layers = net
            .layers
            .iter()
            .map(|l| {
                let weights = match format {
                    Format::Float64 => LayerWeights::F64 {
                        wt: l.w.t().to_owned(),
                        b: l.b.clone(),
                    },
                    Format::Float32 => LayerWeights::F32 {
                        wt: l.w.t().mapv(|x| x as f32),
                        b: l.b.iter().map(|&x| x as f32).collect(),
                    },
                    Format::Float16 | Format::Bfloat16 => LayerWeights::Emulated {
                        wt: l.w.t().iter().map(|&x| x as f32).collect(),
                        b: l.b.iter().map(|&x| x as f32).collect(),
                        m: l.m(),
                        n: l.n(),
                    },
                };
                ExecLayer {
                    weights,
                    relu: l.act == Activation::Relu,
                }
            })
            .collect();
        Executor {
            format,
            layers,
            classes: net.classes(),
        }
    }

    /// Forward pass of a block of input rows `[rows, n_1]` (values of the format): the logits
    /// `[rows, classes]` and, when `keep_hidden`, the outputs of the hidden layers `1..L-1`
    /// (each `[rows, m_l]`), all from the same execution.
    pub fn forward_block(
        &self,
        x: ArrayView2<f64>,
        keep_hidden: bool,
    ) -> (Array2<f64>, Vec<Array2<f64>>) {
        let last = self.layers.len() - 1;
        let mut hidden = Vec::new();
        let logits = match self.format {
            Format::Float64 => {
                let mut z = x.to_owned();
                for (k, l) in self.layers.iter().enumerate() {
                    let LayerWeights::F64 { wt, b } = &l.weights else {
                        unreachable!("float64 weights")
                    };
                    z = z.dot(wt);
                    finish_layer(&mut z, b, l.relu);
                    if keep_hidden && k < last {
                        hidden.push(z.clone());
                    }
                }
                z
            }
            Format::Float32 => {
                let mut z = x.mapv(|v| v as f32);
                for (k, l) in self.layers.iter().enumerate() {
                    let LayerWeights::F32 { wt, b } = &l.weights else {
                        unreachable!("float32 weights")
                    };
                    z = z.dot(wt);
                    finish_layer(&mut z, b, l.relu);
                    if keep_hidden && k < last {
                        hidden.push(z.mapv(|v| v as f64));
                    }
                }
                z.mapv(|v| v as f64)
            }
            Format::Float16 | Format::Bfloat16 => {
                let round = match self.format {
                    Format::Float16 => round_f32_to_f16,
                    _ => round_f32_to_bf16,
                };
                let rows = x.nrows();
                let mut z = x.mapv(|v| v as f32);
                for (k, l) in self.layers.iter().enumerate() {
                    let LayerWeights::Emulated { wt, b, m, n } = &l.weights else {
                        unreachable!("emulated weights")
                    };
                    let mut next = Array2::<f32>::zeros((rows, *m));
                    for (zr, mut out) in z.axis_iter(Axis(0)).zip(next.axis_iter_mut(Axis(0))) {
                        let acc = out.as_slice_mut().expect("rows of a standard-layout array");
                        // every output's dot product is summed in input order, each product
                        // and each partial sum rounded; an exact-zero input contributes an
                        // exact zero and is skipped (same values)
                        for (j, &zj) in zr.iter().enumerate().take(*n) {
                            if zj == 0.0 {
                                continue;
                            }
                            let wj = &wt[j * m..(j + 1) * m];
                            for (a, &w) in acc.iter_mut().zip(wj) {
                                *a = round(*a + round(w * zj));
                            }
                        }
                        for (a, &bi) in acc.iter_mut().zip(b) {
                            let mut v = round(*a + bi);
                            if l.relu && v < 0.0 {
                                v = 0.0;
                            }
                            *a = v;
                        }
                    }
                    z = next;
                    if keep_hidden && k < last {
                        hidden.push(z.mapv(|v| v as f64));
                    }
                }
                z.mapv(|v| v as f64)
            }
        };
        (logits, hidden)
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Logits of every input row, computed in parallel blocks; row-major `[rows, classes]`.
    pub fn logits(&self, values: &[f64], dim: usize) -> Vec<f64> {
        map_blocks(values, dim, |view| {
            self.forward_block(view, false)
                .0
                .into_iter()
                .collect::<Vec<f64>>()
        })
        .concat()
    }
}

/// Apply `f` to consecutive blocks of [`CHUNK_ROWS`] rows of `values` (`[rows, dim]`, row-major)
/// in parallel; the results come back in row order, whatever the thread count.
pub fn map_blocks<T: Send>(
    values: &[f64],
    dim: usize,
    f: impl Fn(ArrayView2<f64>) -> T + Sync,
) -> Vec<T> {
    let rows = values.len() / dim;
    (0..rows.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|c| {
            let lo = c * CHUNK_ROWS;
            let hi = (lo + CHUNK_ROWS).min(rows);
            let view = ArrayView2::from_shape((hi - lo, dim), &values[lo * dim..hi * dim])
                .expect("block shape matches the slice");
            f(view)
        })
        .collect()
}

/// Add the bias to every row (one rounding per entry) and apply ReLU.
fn finish_layer<T>(z: &mut Array2<T>, b: &[T], relu: bool)
where
    T: Copy + PartialOrd + std::ops::Add<Output = T> + Default,
{
    for mut row in z.axis_iter_mut(Axis(0)) {
        for (v, &bi) in row.iter_mut().zip(b) {
            let mut a = *v + bi;
            if relu && a < T::default() {
                a = T::default();
            }
            *v = a;
        }
    }
}
