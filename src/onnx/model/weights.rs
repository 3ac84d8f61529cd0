//! The layers' tensors, read late. The loader checks the whole graph against the tensors'
//! declared shapes first and decodes weight and bias values only once every check has passed,
//! so a tensor that cannot fit the model is refused before a byte of it is read; each value is
//! then converted to the deployment format by round-to-nearest-even.

use std::path::Path;

use ndarray::Array2;

use super::builder::Builder;
use super::network::{Activation, Dense};
use crate::arith::format::Format;
use crate::error::LipfpError;
use crate::onnx::reader::{self as onnx, proto, ConstData};

/// A float constant: its shape now, its values when the layers are finished.
#[derive(Clone, Debug)]
pub(super) struct Weight<'a> {
    /// Declared dimensions.
    pub shape: Vec<usize>,
    source: Source<'a>,
    /// Roundings applied by `Cast` nodes, in order.
    roundings: Vec<Format>,
}

/// Where a [`Weight`]'s values are.
#[derive(Clone, Debug)]
enum Source<'a> {
    /// Values already in memory (`value_float(s)`, an integer constant cast to a float type).
    Values(Vec<f64>),
    /// A tensor of the model whose storage was checked, not yet decoded.
    Stored(&'a proto::TensorProto),
}

impl<'a> Weight<'a> {
    /// A float constant whose values are in memory.
    pub fn values(shape: Vec<usize>, values: Vec<f64>) -> Self {
        Weight {
            shape,
            source: Source::Values(values),
            roundings: Vec::new(),
        }
    }

    /// A float tensor of the model of dimensions `shape`, its storage checked, read later.
    pub fn stored(shape: Vec<usize>, tensor: &'a proto::TensorProto) -> Self {
        Weight {
            shape,
            source: Source::Stored(tensor),
            roundings: Vec::new(),
        }
    }

    /// The constant after a `Cast` to `format` (round-to-nearest-even, as runtimes cast).
    pub fn round_to(mut self, format: Format) -> Self {
        self.roundings.push(format);
        self
    }

    /// The values, row-major, widened exactly to `f64`.
    fn decode(&self, dir: Option<&Path>) -> Result<Vec<f64>, String> {
        let mut v = match &self.source {
            Source::Values(v) => v.clone(),
            Source::Stored(t) => match onnx::decode_tensor(t, dir)?.data {
                ConstData::Float(v) => v,
                ConstData::Int(_) => return Err("holds integers".into()),
            },
        };
        for f in &self.roundings {
            v.iter_mut().for_each(|x| *x = f.round(*x));
        }
        let want: usize = self.shape.iter().product();
        if v.len() != want {
            return Err(format!(
                "holds {} values for shape {:?}",
                v.len(),
                self.shape
            ));
        }
        Ok(v)
    }
}

/// A tensor feeding a layer, with the node that reads it (for error messages).
#[derive(Clone, Debug)]
pub(super) struct Part<'a> {
    pub weight: Weight<'a>,
    /// The tensor's name.
    pub name: String,
    /// The node reading it and that node's op type.
    pub label: String,
    pub op: String,
    /// For a constant broadcast over an activation of more than one per-example dimension:
    /// those dimensions and the constant's shape aligned to them ([`broadcast_index`]).
    pub broadcast: Option<(Vec<usize>, Vec<usize>)>,
}

impl<'a> Part<'a> {
    /// The tensor `name` holding `weight`, read through node `label` of type `op`.
    pub fn new(weight: Weight<'a>, name: &str, label: &str, op: &str) -> Self {
        Part {
            weight,
            name: name.to_string(),
            label: label.to_string(),
            op: op.to_string(),
            broadcast: None,
        }
    }
}

/// The entry of a constant of shape `aligned` (one entry per dimension of `features`, each 1 or
/// equal to it: ONNX multidirectional broadcasting, the constant's shape padded with leading
/// ones) that feature `f` reads, features numbered row-major over `features` as `Flatten`
/// orders them.
pub(super) fn broadcast_index(f: usize, features: &[usize], aligned: &[usize]) -> usize {
    let (mut rem, mut index, mut stride) = (f, 0, 1);
    for (&dim, &c) in features.iter().zip(aligned).rev() {
        let at = rem % dim.max(1);
        rem /= dim.max(1);
        if c != 1 {
            index += at * stride;
        }
        stride *= c;
    }
    index
}

/// A layer whose shapes are checked and whose values are read by [`Builder::finish`].
#[derive(Clone, Debug)]
pub(super) struct Draft<'a> {
    /// Output dimension.
    pub m: usize,
    /// Input dimension.
    pub n: usize,
    /// A dense layer's tensors or an affine step's ops.
    pub kind: DraftKind<'a>,
    pub act: Activation,
    /// The nodes the layer is read from and their op types (see [`Dense`]).
    pub nodes: Vec<String>,
    pub ops: Vec<String>,
    /// Narrowing casts of the layer's output (see [`Dense`]).
    pub casts: Vec<Format>,
}

/// What a [`Draft`] computes (a model has a handful of drafts: the size difference of the
/// variants does not matter).
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub(super) enum DraftKind<'a> {
    /// A dense layer: the weight, stored `[m, n]`, or `[n, m]` when `transposed`, and the bias,
    /// of `m` values or one broadcast value.
    Dense {
        w: Part<'a>,
        transposed: bool,
        b: Option<Part<'a>>,
    },
    /// An elementwise affine step.
    Affine(AffineDraft<'a>),
}

/// The ops of an affine step, their constants not yet read.
#[derive(Clone, Debug)]
pub(super) struct AffineDraft<'a> {
    pub ops: Vec<DraftOp<'a>>,
}

/// One op of an [`AffineDraft`]; each constant holds one value or one per feature.
#[derive(Clone, Debug)]
pub(super) enum DraftOp<'a> {
    Add(Part<'a>),
    Sub(Part<'a>),
    Neg,
    Mul(Part<'a>),
    Div(Part<'a>),
    /// scale, B, mean, var and the `epsilon` attribute.
    BatchNorm {
        parts: Vec<Part<'a>>,
        epsilon: f64,
    },
}

impl Builder<'_> {
    /// Decode every layer's weight and bias and convert them to the deployment format.
    pub(super) fn finish(&mut self) -> Result<Vec<Dense>, LipfpError> {
        let drafts = std::mem::take(&mut self.layers);
        drafts.into_iter().map(|d| self.finish_layer(d)).collect()
    }

    /// The `want` values of `p`.
    fn read(&self, p: &Part<'_>, want: usize) -> Result<Vec<f64>, LipfpError> {
        let v = p
            .weight
            .decode(self.path.parent())
            .map_err(|m| self.fail(&p.label, &p.op, format!("`{}`: {m}", p.name)))?;
        if v.len() != want {
            return Err(self.fail(
                &p.label,
                &p.op,
                format!("`{}` holds {} values, expected {want}", p.name, v.len()),
            ));
        }
        Ok(v)
    }

    /// The layer `d` with its values read and converted.
    fn finish_layer(&mut self, d: Draft<'_>) -> Result<Dense, LipfpError> {
        let (m, n) = (d.m, d.n);
        let (w, b, affine) = match &d.kind {
            DraftKind::Dense { w, transposed, b } => {
                let (w, b) = self.dense_values(m, n, w, *transposed, b.as_ref())?;
                (w, b, None)
            }
            DraftKind::Affine(step) => {
                let step = self.affine_values(m, step)?;
                (Array2::zeros((0, 0)), Vec::new(), Some(step))
            }
        };
        Ok(Dense {
            w,
            b,
            act: d.act,
            nodes: d.nodes,
            ops: d.ops,
            casts: d.casts,
            affine,
        })
    }

    /// A dense layer's weight `[m, n]` and bias, read and converted.
    fn dense_values(
        &mut self,
        m: usize,
        n: usize,
        wp: &Part<'_>,
        transposed: bool,
        bp: Option<&Part<'_>>,
    ) -> Result<(Array2<f64>, Vec<f64>), LipfpError> {
        let vals = self.read(wp, m * n)?;
        let mut w = Array2::zeros((m, n));
        for (k, &x) in vals.iter().enumerate() {
            let at = if transposed {
                [k % m, k / m]
            } else {
                [k / n, k % n]
            };
            w[at] = self.convert(x, wp, k)?;
        }
        let b = match bp {
            None => vec![0.0; m],
            Some(p) => self.per_feature_values(p, m)?,
        };
        Ok((w, b))
    }

    /// The `width` values of a constant holding one value or one per feature, converted.
    pub(super) fn per_feature_values(
        &mut self,
        p: &Part<'_>,
        width: usize,
    ) -> Result<Vec<f64>, LipfpError> {
        let count = p.weight.shape.iter().product::<usize>();
        let v = self.read(p, count)?;
        let v = match &p.broadcast {
            _ if count == 1 => vec![v[0]; width],
            Some((features, aligned)) => (0..width)
                .map(|f| v[broadcast_index(f, features, aligned)])
                .collect(),
            None => v,
        };
        let mut out = Vec::with_capacity(width);
        for (k, x) in v.into_iter().enumerate() {
            out.push(self.convert(x, p, k)?);
        }
        Ok(out)
    }

    /// Convert entry `index` of the tensor `p`, of value `v`, to the deployment format,
    /// refusing non-finite and (under flush-to-zero) subnormal values.
    fn convert(&mut self, v: f64, p: &Part<'_>, index: usize) -> Result<f64, LipfpError> {
        let (tensor, label, op) = (&p.name, &p.label, &p.op);
        if !v.is_finite() {
            return Err(self.fail(
                label,
                op,
                format!("`{tensor}`[{index}] is not finite ({v})"),
            ));
        }
        let c = self.format.round(v);
        if !c.is_finite() {
            return Err(self.fail(
                label,
                op,
                format!("`{tensor}`[{index}] = {v:e} overflows {}", self.format),
            ));
        }
        if self.ftz && self.format.is_subnormal(c) {
            return Err(self.fail(
                label,
                op,
                format!(
                    "`{tensor}`[{index}] = {c:e} is subnormal in {}; flush-to-zero certification requires normal or zero weights",
                    self.format
                ),
            ));
        }
        if c != v {
            self.changed += 1;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::broadcast_index;

    #[test]
    fn broadcast_index_reads_numpy_broadcasting() {
        // [C=2, H=3, W=2] features; independent expansion with explicit loops
        let features = [2, 3, 2];
        // the entry feature (c, h, w) reads
        type Entry = fn(usize, usize, usize) -> usize;
        let cases: [(&[usize], Entry); 4] = [
            (&[2, 1, 1], |c, _, _| c),
            (&[1, 3, 1], |_, h, _| h),
            (&[1, 1, 2], |_, _, w| w),
            (&[2, 3, 2], |c, h, w| (c * 3 + h) * 2 + w),
        ];
        for (aligned, expect) in cases {
            let mut f = 0;
            for c in 0..2 {
                for h in 0..3 {
                    for w in 0..2 {
                        assert_eq!(
                            broadcast_index(f, &features, aligned),
                            expect(c, h, w),
                            "{aligned:?} feature {f}"
                        );
                        f += 1;
                    }
                }
            }
        }
        // a constant varying along two axes: [2, 1, 2]
        let got: Vec<usize> = (0..12)
            .map(|f| broadcast_index(f, &features, &[2, 1, 2]))
            .collect();
        assert_eq!(got, [0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]);
    }
}
