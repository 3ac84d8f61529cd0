//! Forward passes of the converted network, batched: lipfp's own centre execution, which must
//! itself be one of the executions the certificate covers (DESIGN.md rule 2; paper sec. 3.2;
//! [`ExecutionModel`]).
//!
//! Each layer is a native GEMM in the accumulation format (ndarray/matrixmultiply: every output
//! is a dot product summed in some order, possibly with FMA, each operation correctly rounded;
//! Rust never flushes subnormals), plus the bias with one native addition (the bias added last
//! is one of the covered positions), then one rounding to the storage format when that is
//! narrower (float16 and bfloat16 layers run in float32: the products of two such values are
//! exact in float32 and the sum is rounded once per output, as onnxruntime CPU and cuBLAS do),
//! then one rounding per narrowing `Cast` of the graph, then the activation. Under a runtime
//! that converts operands (TF32, bfloat16), both factors of every product are converted first
//! (truncation, or to nearest when that is declared): the float32 GEMM of the converted values
//! is one of the IEEE executions on converted operands that such a certificate covers
//! (docs/soundness.md "Runtimes beyond IEEE accumulation").

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::arith::execution::{ExecutionModel, OperandConversion};
use crate::arith::format::Format;
use crate::onnx::model::{Activation, AffineStep, DenseNet, ElementOp};

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
        /// The runtime's operand conversion, applied to every layer input (the weights are
        /// stored converted).
        convert: Option<OperandConversion>,
    },
    /// An elementwise affine step, executed op by op as the graph writes it.
    Affine {
        step: AffineStep,
        storage: Format,
    },
}

struct ExecLayer {
    weights: LayerWeights,
    /// Roundings of the output after the bias: the storage format (when narrower than the
    /// accumulation) and the graph's narrowing casts.
    roundings: Vec<Format>,
    relu: bool,
}

/// A network prepared for batched execution.
pub struct Executor {
    layers: Vec<ExecLayer>,
    classes: usize,
}

impl Executor {
    /// Prepare `net` (weights already values of `exec.storage`) for the centre execution of
    /// `exec`: accumulation in [`ExecutionModel::centre_accumulation`].
    pub fn new(net: &DenseNet, exec: &ExecutionModel) -> Self {
        let acc = exec.centre_accumulation();
        let layers = net
            .layers
            .iter()
            .map(|l| {
                if let Some(step) = &l.affine {
                    return ExecLayer {
                        weights: LayerWeights::Affine {
                            step: step.clone(),
                            storage: exec.storage,
                        },
                        roundings: Vec::new(),
                        relu: l.act == Activation::Relu,
                    };
                }
                let weights = match acc {
                    Format::Float64 => LayerWeights::F64 {
                        wt: l.w.t().to_owned(),
                        b: l.b.clone(),
                    },
                    _ => LayerWeights::F32 {
                        wt: l.w.t().mapv(|x| convert(exec.operand, x as f32)),
                        b: l.b.iter().map(|&x| x as f32).collect(),
                        convert: exec.operand,
                    },
                };
                let mut roundings = Vec::new();
                if acc != exec.storage {
                    roundings.push(exec.storage);
                }
                if exec.executes_casts {
                    roundings.extend_from_slice(&l.casts);
                }
                ExecLayer {
                    weights,
                    roundings,
                    relu: l.act == Activation::Relu,
                }
            })
            .collect();
        Executor {
            layers,
            classes: net.classes(),
        }
    }

    /// Forward pass of a block of input rows `[rows, n_1]` (values of the storage format): the
    /// logits `[rows, classes]` and the outputs of the hidden layers `1..L-1` that `keep` asks
    /// for (each `[rows, m_l]`), all from the same execution.
    pub fn forward_block(
        &self,
        x: ArrayView2<f64>,
        keep: Hidden,
    ) -> (Array2<f64>, Vec<Array2<f64>>) {
        let last = self.layers.len() - 1;
        let mut hidden = Vec::new();
        let mut z64 = x.to_owned();
        let mut z32: Option<Array2<f32>> = None;
        for (k, l) in self.layers.iter().enumerate() {
            match &l.weights {
                LayerWeights::F64 { wt, b } => {
                    z64 = z64.dot(wt);
                    finish_layer(&mut z64, b, l.relu, |v| {
                        l.roundings.iter().fold(v, |v, f| f.round(v))
                    });
                }
                LayerWeights::F32 { wt, b, convert: c } => {
                    let mut input = z32.take().unwrap_or_else(|| z64.mapv(|v| v as f32));
                    if c.is_some() {
                        input.mapv_inplace(|v| convert(*c, v));
                    }
                    let mut z = input.dot(wt);
                    finish_layer(&mut z, b, l.relu, |v| {
                        l.roundings.iter().fold(v, |v, f| f.round_f32(v))
                    });
                    z64 = z.mapv(|v| v as f64);
                    z32 = Some(z);
                }
                LayerWeights::Affine { step, storage } => {
                    if let Some(z) = z32.take() {
                        z64 = z.mapv(f64::from);
                    }
                    for mut row in z64.rows_mut() {
                        for (i, v) in row.iter_mut().enumerate() {
                            let y = step_value(step, *storage, i, *v);
                            *v = if l.relu && y < 0.0 { 0.0 } else { y };
                        }
                    }
                }
            }
            let kept = match keep {
                Hidden::None => false,
                Hidden::Penultimate => k + 1 == last,
                Hidden::All => k < last,
            };
            if kept {
                hidden.push(z64.clone());
            }
        }
        (z64, hidden)
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Logits of every input row, computed in parallel blocks; row-major `[rows, classes]`.
    pub fn logits(&self, values: &[f64], dim: usize) -> Vec<f64> {
        map_blocks(values, dim, |_, view| {
            self.forward_block(view, Hidden::None)
                .0
                .into_iter()
                .collect::<Vec<f64>>()
        })
        .concat()
    }
}

/// An operand as the runtime's conversion leaves it (unchanged without one).
fn convert(c: Option<OperandConversion>, x: f32) -> f32 {
    c.map_or(x, |c| c.convert_f32(x))
}

/// Which hidden-layer outputs a forward pass keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hidden {
    /// None: the logits only.
    None,
    /// The output of layer `L-1` (none for a single-layer network).
    Penultimate,
    /// The outputs of every hidden layer `1..L-1`.
    All,
}

/// Apply `f` to consecutive blocks of [`CHUNK_ROWS`] rows of `values` (`[rows, dim]`, row-major)
/// in parallel, with the index of each block's first row; the results come back in row order,
/// whatever the thread count.
pub fn map_blocks<T: Send>(
    values: &[f64],
    dim: usize,
    f: impl Fn(usize, ArrayView2<f64>) -> T + Sync,
) -> Vec<T> {
    let rows = values.len() / dim;
    (0..rows.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|c| {
            let lo = c * CHUNK_ROWS;
            let hi = (lo + CHUNK_ROWS).min(rows);
            let view = ArrayView2::from_shape((hi - lo, dim), &values[lo * dim..hi * dim])
                .expect("block shape matches the slice");
            f(lo, view)
        })
        .collect()
}

/// Add the bias to every entry (one native addition), apply the output roundings `round`,
/// then ReLU. Rounding commutes with ReLU (round-to-nearest is monotone and keeps 0), so a cast
/// the graph places after the ReLU rounds the same values.
fn finish_layer<T>(z: &mut Array2<T>, b: &[T], relu: bool, round: impl Fn(T) -> T)
where
    T: Copy + PartialOrd + std::ops::Add<Output = T> + Default,
{
    for mut row in z.rows_mut() {
        for (v, &bi) in row.iter_mut().zip(b) {
            let mut a = round(*v + bi);
            if relu && a < T::default() {
                a = T::default();
            }
            *v = a;
        }
    }
}

/// Feature `i` of an affine step at `x`, op by op as the graph writes them: in float64 for a
/// float64 network, else in float32 with each result rounded to the storage format (one of the
/// executions `crate::bounds::certify::affine` covers).
fn step_value(step: &AffineStep, storage: Format, i: usize, x: f64) -> f64 {
    if storage == Format::Float64 {
        return step.ops.iter().fold(x, |v, op| apply_op(op, i, v, &|t| t));
    }
    let round = |t: f32| storage.round_f32(t);
    let y = step
        .ops
        .iter()
        .fold(x as f32, |v, op| apply_op(op, i, v, &round));
    f64::from(y)
}

/// One op at feature `i` in the float type `T`, each operation's result passed through `round`
/// (BatchNormalization as written: `(x - mean) / sqrt(var + eps) * scale + bias`).
fn apply_op<T>(op: &ElementOp, i: usize, v: T, round: &dyn Fn(T) -> T) -> T
where
    T: ComputeFloat,
{
    let k = |c: &[f64]| T::from_f64(c[i]);
    match op {
        ElementOp::Neg => -v,
        ElementOp::Add(c) => round(v + k(c)),
        ElementOp::Mul(c) => round(v * k(c)),
        ElementOp::Div(c) => round(v / k(c)),
        ElementOp::BatchNorm {
            scale,
            bias,
            mean,
            var,
            epsilon,
        } => {
            let root = round(round(k(var) + T::from_f64(*epsilon)).sqrt());
            let t = round(round(v - k(mean)) / root);
            round(round(t * k(scale)) + k(bias))
        }
    }
}

/// The float types an affine step is computed in.
trait ComputeFloat:
    Copy
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// Exact conversion of a storage-format value held in an `f64`.
    fn from_f64(x: f64) -> Self;
    /// The correctly rounded square root.
    fn sqrt(self) -> Self;
}

impl ComputeFloat for f64 {
    fn from_f64(x: f64) -> Self {
        x
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

impl ComputeFloat for f32 {
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
}
