//! The local-bounds pass: at chosen points, lower bounds on the deployed execution's margins over
//! each point's ball ([`crate::bounds::local`]), in parallel over the points, streaming the inputs
//! once, within an optional time budget after which the remaining points are left without local
//! bounds (and so never certified by them).

use std::time::Instant;

use rayon::prelude::*;

use super::subject::{Subject, STREAM_ROWS};
use crate::arith::format::pow2;
use crate::arith::sound::{add_up, l2_norm_up};
use crate::bounds::ball::{clipped_box, BallSpec, Cover, Norm};
use crate::bounds::certify::tensor_core::alignment_weight;
use crate::bounds::certify::{local_overflow, LocalMargins, ModelBounds, Refusal};
use crate::bounds::local::{
    Deployment, HiddenBounds, InputSet, LocalNet, SlopeSearch, UnitBranching,
};
use crate::engine::data::InputStream;
use crate::error::LipfpError;
use crate::onnx::model::{Activation, DenseNet};
use crate::progress::Progress;

/// Steps of the lower-slope search on the margins CROWN's slopes leave uncertified
/// ([`SlopeSearch`]).
const SLOPE_STEPS: usize = 20;

/// What the local-bounds pass measured at one point (see [`LocalMargins`]).
#[derive(Clone, Debug)]
pub struct LocalPoint {
    /// Per class, the margin lower bound over the ball for the predicted class.
    pub lower: Vec<f64>,
    /// Per hidden layer, an upper bound on `||a_l||`, `a_l = max(hi_l, 0)`.
    pub radii: Vec<f64>,
}

impl LocalPoint {
    /// The certificate's view of it at radius `eps`.
    pub fn margins(&self, eps: f64) -> LocalMargins<'_> {
        LocalMargins {
            eps,
            lower: &self.lower,
            radii: &self.radii,
        }
    }
}

/// What the local-bounds pass computed.
#[derive(Clone, Debug, Default)]
pub struct LocalPass {
    /// Per point of the subject, what was measured at its radius, where computed.
    pub points: Vec<Option<LocalPoint>>,
    /// Points asked for that the time budget left without bounds.
    pub over_budget: usize,
    /// Why no point has bounds, when the network is outside what local bounds cover.
    pub refused: Option<String>,
    /// Wall-clock seconds of the pass.
    pub seconds: f64,
}

/// Local margin bounds at the subject's points `indices` (ascending), each at radius `eps[i]`,
/// stopping after `budget_s` seconds.
pub fn local_pass(
    subject: &Subject,
    eps: &[f64],
    indices: &[usize],
    budget_s: Option<f64>,
    progress: &Progress,
) -> Result<LocalPass, LipfpError> {
    let start = Instant::now();
    let mut out = LocalPass {
        points: vec![None; subject.n()],
        ..LocalPass::default()
    };
    let model = match LocalModel::new(subject) {
        Ok(model) => model,
        Err(why) => {
            out.refused = Some(why);
            return Ok(out);
        }
    };
    let task = progress.task("local bounds", indices.len() as u64);
    let dim = subject.inputs.dim;
    let over = || budget_s.is_some_and(|b| start.elapsed().as_secs_f64() > b);
    subject.visit_rows(indices, |chosen, rows| {
        let bounds: Vec<Option<LocalPoint>> = chosen
            .par_iter()
            .enumerate()
            .map(|(k, &i)| {
                let class = subject.predictions[i]?;
                if over() {
                    return None;
                }
                let x = &rows[k * dim..(k + 1) * dim];
                let point = model.measure(x, eps[i], class);
                task.add(1);
                Some(point)
            })
            .collect();
        for (&i, b) in chosen.iter().zip(bounds) {
            if b.is_none() && subject.predictions[i].is_some() {
                out.over_budget += 1;
            }
            out.points[i] = b;
        }
        Ok(())
    })?;
    task.finish();
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}

/// A subject's network prepared for local bounds of its deployed execution, with the model
/// bounds whose deviation chain widens the per-unit Lipschitz source.
pub(super) struct LocalModel<'a> {
    net: LocalNet<'a>,
    fmt: &'a ModelBounds,
    /// The set a radius stands for.
    ball: BallSpec,
    /// Its Lipschitz cover (for the input norm bound of the deviation chain).
    cover: Cover,
}

impl<'a> LocalModel<'a> {
    /// The subject's deployed execution (every layer's rounding model from its model bounds,
    /// `|W|` with the tensor cores' alignment weights), or why local bounds do not cover it.
    pub(super) fn new(subject: &'a Subject) -> Result<LocalModel<'a>, String> {
        let fmt = subject.bounds.as_ref().map_err(Clone::clone)?;
        let deployment = deployment_of(subject, &subject.net, 0)?;
        let search = SlopeSearch {
            iterations: SLOPE_STEPS,
            target: fmt.head_margin,
        };
        let net = LocalNet::new(&subject.net, Some(&fmt.lip_prefix), Some(deployment))?
            .with_slope_search(search);
        Ok(LocalModel {
            net,
            fmt,
            ball: subject.ball,
            cover: subject.cover(),
        })
    }

    /// The local bounds at `x` for class `class` over the set of radius `eps` around it (the l2
    /// ball, or the l_inf ball clipped to the input range).
    pub(super) fn measure(&self, x: &[f64], eps: f64, class: usize) -> LocalPoint {
        // the standard chain's D_l bounds ||z_hat_l - z_l|| over the set (hidden layer l - 1):
        // every point of it has norm at most ||x|| + the cover's radius
        let r0 = add_up(l2_norm_up(x.iter().copied()), self.cover.l2_radius(eps));
        let slack: Vec<f64> = match self.fmt.deviation_profile(r0) {
            Ok((_, devs)) => devs.iter().skip(1).copied().collect(),
            Err(_) => Vec::new(),
        };
        let (lower, hidden) = match self.ball.norm {
            Norm::L2 => self
                .net
                .point_bounds(InputSet::Ball { x0: x, eps }, class, &slack),
            Norm::Linf => {
                let (lo, hi) = clipped_box(x, eps, self.ball.range);
                let set = InputSet::Box { lo: &lo, hi: &hi };
                self.net.point_bounds(set, class, &slack)
            }
        };
        let radii = hidden.map_or_else(Vec::new, |h| h.active_radii());
        LocalPoint { lower, radii }
    }
}

/// The deployed execution of `net`, the subject's network from layer `skip` on: every layer's
/// rounding model from the subject's model bounds, `|W|` with the tensor cores' alignment
/// weights; or why local bounds do not cover it.
fn deployment_of(subject: &Subject, net: &DenseNet, skip: usize) -> Result<Deployment, String> {
    let fmt = subject.bounds.as_ref().map_err(Clone::clone)?;
    let lambda = subject.execution.tensor_input_emin().map(pow2);
    let layers = (fmt.layers.iter().skip(skip).zip(&net.layers))
        .enumerate()
        .map(|(l, (lb, layer))| {
            let rounding = lb.rounding.ok_or_else(|| {
                format!(
                    "local bounds do not cover affine steps (layer {})",
                    l + skip + 1
                )
            })?;
            Ok((rounding, layer.w.mapv(|w| alignment_weight(w, lambda))))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Deployment { layers, d0: fmt.d0 })
}

/// The subject's deployed execution prepared for local bounds over sets of inputs of norm at
/// most one bound ([`with_bounded_net`]).
pub struct BoundedNet<'a> {
    /// The network (leading exact-identity affine steps dropped) with its deployment.
    pub net: LocalNet<'a>,
    /// The deviation chain's slack per hidden layer for those inputs.
    pub slack: Vec<f64>,
    /// The subject's model bounds (their overflow checks).
    fmt: &'a ModelBounds,
    /// Leading exact-identity affine steps dropped from the network.
    skip: usize,
}

impl BoundedNet<'_> {
    /// Whether the model's overflow checks exclude overflow at every layer for every input of
    /// norm at most `r0` whose executions the hidden bounds `hidden` hold (computed by this net
    /// over a set holding those inputs), or the first (1-based) layer they do not. The local
    /// bounds assume every rounding is relative, which holds only without overflow; the
    /// argument is the local certificate's (`bounds::certify::local_certificate`): the first layer's inputs
    /// have norm at most `r0` (so have those of the dropped identity steps, which change no
    /// value), a later layer's at most `||max(hi, 0)||` of the layer below (docs/soundness.md
    /// "Complete verification", B7).
    pub fn overflow_excluded(&self, hidden: &HiddenBounds, r0: f64) -> Result<(), usize> {
        let mut radii = vec![r0; self.skip];
        radii.extend(hidden.active_radii());
        let reach = LocalMargins {
            eps: 0.0,
            lower: &[],
            radii: &radii,
        };
        match local_overflow(self.fmt, &reach, (r0, 0.0)) {
            Err(Refusal::Overflow(l)) => Err(l),
            Err(_) => Err(1),
            Ok(()) => Ok(()),
        }
    }
}

/// An upper bound on the l2 norm of every point of the box `[lo, hi]`: `||max(|lo|, |hi|)||`.
pub fn box_norm_up(lo: &[f64], hi: &[f64]) -> f64 {
    l2_norm_up(lo.iter().zip(hi).map(|(l, h)| l.abs().max(h.abs())))
}

/// Calls `f` with the subject's deployed execution prepared for bounds over sets of inputs of
/// norm at most `r0` (a box `[lo, hi]`: [`box_norm_up`]) ([`BoundedNet`]: [`LocalNet::linear_lower_bounds`],
/// [`LocalNet::split_lower_bounds`]; the hidden layers' bounds tightened by `intermediate_steps`
/// steps of the slope search, [`LocalNet::with_intermediate_search`], and by `branching` where
/// given, [`LocalNet::with_unit_branching`]), or says why local bounds
/// do not cover the subject. Leading
/// affine steps that are exact identities (adding zero, scaling by one: no execution changes a
/// value) are dropped; the lower slopes are searched on every row.
pub fn with_bounded_net<R>(
    subject: &Subject,
    r0: f64,
    (intermediate_steps, branching): (usize, Option<UnitBranching>),
    f: impl FnOnce(&BoundedNet<'_>) -> R,
) -> Result<R, String> {
    let fmt = subject.bounds.as_ref().map_err(Clone::clone)?;
    let full = &subject.net;
    let skip = (full.layers.iter())
        .take_while(|l| {
            l.act != Activation::Relu && l.affine.as_ref().is_some_and(|a| a.is_exact_identity())
        })
        .count();
    let kept = DenseNet {
        layers: full.layers[skip.min(full.layers.len())..].to_vec(),
        ..full.clone()
    };
    let deployment = deployment_of(subject, &kept, skip)?;
    let prefix = fmt.lip_prefix.get(skip..).unwrap_or(&[]);
    let search = SlopeSearch {
        iterations: SLOPE_STEPS,
        target: f64::INFINITY,
    };
    let mut net = (LocalNet::new(&kept, Some(prefix), Some(deployment))?)
        .with_slope_search(search)
        .with_intermediate_search(intermediate_steps);
    if let Some(b) = branching {
        net = net.with_unit_branching(b);
    }
    let slack: Vec<f64> = match fmt.deviation_profile(r0) {
        Ok((_, devs)) => devs.iter().skip(1 + skip).copied().collect(),
        Err(_) => Vec::new(),
    };
    Ok(f(&BoundedNet {
        net,
        slack,
        fmt,
        skip,
    }))
}

/// Lower bounds on the rows of `c` (linear forms of the outputs) of the subject's deployed
/// execution over the box `[lo, hi]` ([`with_bounded_net`]), or why local bounds do not cover the
/// subject or the box (their values, or overflow not excluded over it).
pub fn box_lower_bounds(
    subject: &Subject,
    (lo, hi): (&[f64], &[f64]),
    c: &ndarray::Array2<f64>,
) -> Result<Vec<f64>, String> {
    let r0 = box_norm_up(lo, hi);
    with_bounded_net(subject, r0, (0, None), |b| {
        let set = InputSet::Box { lo, hi };
        let (lower, hidden) = (b.net.linear_lower_bounds(set, c, &b.slack))
            .ok_or_else(|| "the local bounds over the box are not finite".to_string())?;
        b.overflow_excluded(&hidden, r0).map_err(overflow_note)?;
        Ok(lower)
    })?
}

/// Why bounds over a box decide nothing when overflow at (1-based) layer `l` is not excluded.
pub fn overflow_note(l: usize) -> String {
    format!("overflow at layer {l} is not excluded over the box, so its bounds decide nothing")
}

impl Subject {
    /// Streams the subject's inputs once from its file (or from the rows it kept in memory) and
    /// calls `f` with each block's points among `indices` (ascending) and their converted rows,
    /// concatenated.
    pub fn visit_rows(
        &self,
        indices: &[usize],
        mut f: impl FnMut(&[usize], &[f64]) -> Result<(), LipfpError>,
    ) -> Result<(), LipfpError> {
        self.visit_rows_while(indices, STREAM_ROWS, |chosen, rows| {
            f(chosen, rows).map(|()| true)
        })
    }

    /// [`Subject::visit_rows`] reading `block_rows` rows at a time and stopping (without reading
    /// further) as soon as `f` returns `false`.
    pub fn visit_rows_while(
        &self,
        indices: &[usize],
        block_rows: usize,
        mut f: impl FnMut(&[usize], &[f64]) -> Result<bool, LipfpError>,
    ) -> Result<(), LipfpError> {
        if indices.is_empty() {
            return Ok(());
        }
        let dim = self.inputs.dim;
        if let Some(kept) = &self.rows {
            // the same blocks of `block_rows` rows as the file gives
            let block = block_rows.max(1);
            for chosen in indices.chunk_by(|a, b| a / block == b / block) {
                let mut rows = Vec::with_capacity(chosen.len() * dim);
                for &i in chosen {
                    let row = kept.row(i).ok_or_else(|| {
                        LipfpError::data(&self.inputs.path, format!("no input {i} in memory"))
                    })?;
                    rows.extend_from_slice(row);
                }
                if !f(chosen, &rows)? {
                    break;
                }
            }
            return Ok(());
        }
        let mut stream = InputStream::open(
            &self.inputs.path,
            self.inputs.label_column.as_deref(),
            &self.net,
            self.net.format,
        )?;
        stream.skip(self.first)?;
        let (mut pos, mut next) = (0, 0);
        while next < indices.len() && pos < self.n() {
            let block = stream.next_rows(block_rows.max(1).min(self.n() - pos))?;
            let rows = block.len() / dim;
            if rows == 0 {
                break;
            }
            let first = next;
            let mut chosen = Vec::new();
            while next < indices.len() && indices[next] < pos + rows {
                let at = (indices[next] - pos) * dim;
                chosen.extend_from_slice(&block[at..at + dim]);
                next += 1;
            }
            if next > first && !f(&indices[first..next], &chosen)? {
                break;
            }
            pos += rows;
        }
        Ok(())
    }
}
