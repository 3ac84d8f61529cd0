//! The local-bounds pass: at chosen points, lower bounds on the real margins over each point's
//! ball ([`crate::bounds::local`]), in parallel over the points, streaming the inputs once, within
//! an optional time budget after which the remaining points are left without local bounds (and
//! so never certified by them).

use std::time::Instant;

use rayon::prelude::*;

use ndarray::{Array2, ArrayView2};

use super::{Subject, STREAM_ROWS};
use crate::arith::sound::l2_norm_up;
use crate::bounds::certify::componentwise::AbsWeights;
use crate::bounds::certify::LocalMargins;
use crate::bounds::local::LocalNet;
use crate::engine::data::InputStream;
use crate::error::LipfpError;
use crate::progress::Progress;

/// What the local-bounds pass measured at one point (see [`LocalMargins`]).
#[derive(Clone, Debug)]
pub struct LocalPoint {
    /// Per class, the margin lower bound over the ball for the predicted class.
    pub lower: Vec<f64>,
    /// Per hidden layer, an upper bound on `||a_l||`, `a_l = max(hi_l, 0)`.
    pub radii: Vec<f64>,
    /// Per layer, an upper bound on `|| |W_l| a_{l-1} ||` (`a_0 = |x|`).
    pub abs_norms: Vec<f64>,
    /// Upper bounds on `|W_L| a_{L-1}`.
    pub abs_last: Vec<f64>,
}

impl LocalPoint {
    /// The certificate's view of it at radius `eps`.
    pub fn margins(&self, eps: f64) -> LocalMargins<'_> {
        LocalMargins {
            eps,
            lower: &self.lower,
            radii: &self.radii,
            abs_norms: &self.abs_norms,
            abs_last: &self.abs_last,
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
    let lip_prefix = subject
        .bounds
        .as_ref()
        .ok()
        .map(|b| b.lip_prefix.as_slice());
    let net = match LocalNet::new(&subject.net, lip_prefix) {
        Ok(net) => net,
        Err(why) => {
            out.refused = Some(why);
            return Ok(out);
        }
    };
    let abs = AbsWeights::new(&subject.net, &subject.execution);
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
                let point = measure(&net, &abs, x, eps[i], class);
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

/// The local bounds at `x` for class `class` and the componentwise products over them.
pub(super) fn measure(
    net: &LocalNet,
    abs: &AbsWeights,
    x: &[f64],
    eps: f64,
    class: usize,
) -> LocalPoint {
    let (lower, hidden) = net.point_bounds(x, eps, class);
    let Some(hidden) = hidden else {
        return LocalPoint {
            lower,
            radii: Vec::new(),
            abs_norms: Vec::new(),
            abs_last: Vec::new(),
        };
    };
    let reach: Vec<Array2<f64>> = hidden
        .pre
        .iter()
        .map(|b| Array2::from_shape_fn((1, b.hi.len()), |(_, k)| b.hi[k].max(0.0)))
        .collect();
    let radii = reach
        .iter()
        .map(|a| l2_norm_up(a.iter().copied()))
        .collect();
    let input = ArrayView2::from_shape((1, x.len()), x).expect("one row");
    let products = abs.measure(input, &reach);
    LocalPoint {
        lower,
        radii,
        abs_norms: products.norms,
        abs_last: products.last,
    }
}

impl Subject {
    /// Streams the subject's inputs once from its file and calls `f` with each block's points
    /// among `indices` (ascending) and their converted rows, concatenated.
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
        let mut stream = InputStream::open(&self.inputs.path, &self.net, self.net.format)?;
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
