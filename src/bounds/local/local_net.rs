//! The network prepared for local bounds ([`LocalNet`], one [`LocalLayer`] per dense layer) and
//! the passes over it: the interval and CROWN-style bounds of every hidden unit, the margins
//! over a set, and the split search that branch and bound drives.

use ndarray::{Array1, Array2};

use super::backward::{self, Trace};
use super::deployed::{Deployment, LayerErrorModel};
use super::hidden::{HiddenBounds, Known};
use super::interval::{layer_box, point, Bounds};
use super::region::InputSet;
use super::region::Region;
use super::relax::relax_unit;
use super::slopes::{self, Multipliers};
use super::split::{self, Infeasible, Splits};
use crate::arith::sound::{add_up, l2_norm_up, mul_up, sub_down};
use crate::onnx::model::{Activation, DenseNet};

/// One dense layer as the local bounds read it.
pub struct LocalLayer<'a> {
    /// `W_l` (`m_l x n_l`).
    pub(super) w: &'a Array2<f64>,
    /// `W_l^T`, laid out by its own rows (a layer applied to a few inputs, [`rows`]).
    pub(super) w_t: Array2<f64>,
    /// `|W_l|`.
    pub(super) abs_w: Array2<f64>,
    /// `b_l`.
    pub(super) b: Array1<f64>,
    /// `|b_l|`.
    pub(super) abs_b: Array1<f64>,
    /// `||W_{l,j}||_2` per row, rounded up.
    pub(super) row_norms: Vec<f64>,
    /// The deployed execution's rounding model of the layer (`None`: the real network).
    pub(super) rounding: Option<LayerErrorModel>,
}

/// A network prepared for local bounds.
pub struct LocalNet<'a> {
    pub(super) layers: Vec<LocalLayer<'a>>,
    /// `fl(W_1 W_1^T)`: the input layer's Gram matrix, so that `||Lambda W_1||` costs a product
    /// with `m_1` columns instead of `n_1` (`backward::concretise`).
    pub(super) input_gram: Array2<f64>,
    /// `||W_1||_F^2`, rounded up.
    pub(super) input_frob2: f64,
    /// `prod_{k<l} ||W_k||` per layer `l` (upper bounds; index 0 is 1; infinite when unknown).
    pub(super) lip_prefix: Vec<f64>,
    /// `D_0` of the deployed execution (0 for the real network).
    pub(super) d0: f64,
    /// Where and how long the final margins' lower slopes are optimised (`None`: CROWN's).
    pub(super) search: Option<SlopeSearch>,
    /// Steps of the slope search for the hidden layers' own bounds (0: CROWN's slopes).
    pub(super) intermediate_steps: usize,
}

/// Optimised lower slopes for the final margins ([`slopes`], alpha-CROWN): for the margins whose
/// CROWN bound is at most `target` (the bound they must exceed), `iterations` steps of
/// projected gradient ascent; each such margin keeps the better of the two sound bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlopeSearch {
    /// Steps of the search.
    pub iterations: usize,
    /// Margins whose bound is above it are not searched.
    pub target: f64,
}

/// Hidden layers a bounding pass takes from earlier bounds instead of computing them.
#[derive(Clone, Copy)]
struct Reused<'a> {
    /// How many (from the input).
    layers: usize,
    /// The bounds and rounding charges they are taken from (over the same region, with at
    /// most the splits of the pass below each of those layers).
    bounds: Option<(&'a [Bounds], &'a [Vec<f64>])>,
    /// Steps of the slope search for the layers computed.
    steps: usize,
    /// Per hidden layer, the enclosures of the pre-activations at the set's centre, where known
    /// (computed over the same set).
    at_centre: Option<&'a [Bounds]>,
}

/// Why hidden bounds were not computed.
pub(super) enum Undecided {
    /// A bound was not finite.
    NotFinite,
    /// The splits exclude every execution of the set.
    Infeasible(Infeasible),
}

/// What [`LocalNet::split_lower_bounds`] came to.
pub enum SplitOutcome {
    /// Sound lower bounds over the subdomain.
    Bounded(Box<SplitBounds>),
    /// No execution of the set has the units in the phases the splits fix.
    Infeasible(Infeasible),
    /// The set was empty or not finite, or a bound was not finite: nothing is known.
    NotFinite,
}

/// Bounds over a subdomain.
pub struct SplitBounds {
    /// Per row of `C`, a lower bound rounding down (`-inf` where none is finite).
    pub lower: Vec<f64>,
    /// The hidden layers' bounds (splits applied).
    pub hidden: HiddenBounds,
    /// The coefficients CROWN's substitution carried for the rows.
    pub trace: Trace,
    /// The slopes and multipliers the search found for every row (a child's starting point),
    /// when it ran on every row.
    pub optimised: Option<Multipliers>,
}

impl<'a> LocalNet<'a> {
    /// Prepares `net`; `lip_prefix` as in [`crate::bounds::certify::ModelBounds::lip_prefix`]
    /// (upper bounds of the products of the layers' spectral norms), `None` when the norms are
    /// unknown. With a `deployment`, the bounds are of the deployed execution's margins (its
    /// rounding errors enter as bounded inputs, [`deployed`]); without, of the real network's.
    /// Refused, with the reason, for what local bounds do not cover: affine steps.
    pub fn new(
        net: &'a DenseNet,
        lip_prefix: Option<&[f64]>,
        deployment: Option<Deployment>,
    ) -> Result<LocalNet<'a>, String> {
        let depth = net.layers.len();
        let (mut rounding, d0) = match deployment {
            Some(d) if d.layers.len() == depth => (d.layers.into_iter().map(Some).collect(), d.d0),
            Some(_) => return Err("the deployment does not describe every layer".into()),
            None => (vec![None; depth], 0.0),
        };
        let mut layers = Vec::with_capacity(depth);
        for (l, layer) in net.layers.iter().enumerate() {
            check_layer(layer, l, depth)?;
            let rounding = match rounding[l].take() {
                Some((r, abs_w)) if abs_w.dim() == layer.w.dim() => {
                    Some(LayerErrorModel::new(r, abs_w, &layer.b))
                }
                Some(_) => return Err(format!("deployment weights of layer {}", l + 1)),
                None => None,
            };
            layers.push(LocalLayer {
                w: &layer.w,
                w_t: layer.w.t().as_standard_layout().into_owned(),
                abs_w: layer.w.mapv(f64::abs),
                b: Array1::from(layer.b.clone()),
                abs_b: layer.b.iter().map(|v| v.abs()).collect(),
                row_norms: layer
                    .w
                    .rows()
                    .into_iter()
                    .map(|r| l2_norm_up(r.iter().copied()))
                    .collect(),
                rounding,
            });
        }
        let lip_prefix = match lip_prefix {
            Some(p) if p.len() == depth => p.to_vec(),
            _ => std::iter::once(1.0)
                .chain(std::iter::repeat(f64::INFINITY))
                .take(depth)
                .collect(),
        };
        let w1 = &net.layers[0].w;
        let input_gram = w1.dot(&w1.t());
        let input_frob2 = mul_up(
            l2_norm_up(w1.iter().copied()),
            l2_norm_up(w1.iter().copied()),
        );
        Ok(LocalNet {
            layers,
            input_gram,
            input_frob2,
            lip_prefix,
            d0,
            search: None,
            intermediate_steps: 0,
        })
    }

    /// The same network with the hidden layers' bounds also tightened by `steps` steps of the
    /// slope search (alpha-CROWN on the intermediate bounds: fewer unstable units, at the cost
    /// of a search per layer).
    pub fn with_intermediate_search(mut self, steps: usize) -> Self {
        self.intermediate_steps = steps;
        self
    }

    /// The same network with the final margins' lower slopes optimised as `search` says.
    pub fn with_slope_search(mut self, search: SlopeSearch) -> Self {
        self.search = Some(search);
        self
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.layers.last().map_or(0, |l| l.w.nrows())
    }

    /// Bounds on every hidden pre-activation over `||x - x0||_2 <= eps` (`eps` an upper bound of
    /// the radius, `x0` the exact input): of the real network's `z_l(x)`, or with a deployment of
    /// the deployed execution's. `lip_slack[l]` bounds, for hidden layer `l >= 1`, the distance
    /// of the deployed pre-activations from the real ones (`||z_hat_l - z_l||`, the standard
    /// deviation chain): the per-unit Lipschitz source is widened by it, and dropped where it is
    /// not given (the real network needs none). `None` when a bound is not finite.
    pub fn hidden_bounds(&self, x0: &[f64], eps: f64, lip_slack: &[f64]) -> Option<HiddenBounds> {
        let region = Region::new(InputSet::Ball { x0, eps }, self.input_dim())?;
        self.hidden_over(&region, lip_slack, &Splits::none(), None)
            .ok()
    }

    /// [`LocalNet::hidden_bounds`] over `region`: around its centre within its covering radius,
    /// and for a box also the first layer's interval over the box itself; each layer's bounds
    /// intersected with `within`'s for the layer where given (bounds over a set holding the
    /// region, [`Known::Within`]) and clamped to the phases `splits` fix before its units are
    /// relaxed ([`split`]).
    pub(super) fn hidden_over(
        &self,
        region: &Region,
        lip_slack: &[f64],
        splits: &Splits,
        within: Option<&[Bounds]>,
    ) -> Result<HiddenBounds, Undecided> {
        let from = Reused {
            layers: 0,
            bounds: None,
            steps: self.intermediate_steps,
            at_centre: None,
        };
        self.hidden_from(region, lip_slack, (splits, within), from)
    }

    /// [`LocalNet::hidden_over`] with the first `from.layers` hidden layers taken from
    /// `from.bounds` (`splits` applied to them) and the
    /// slope search of the layers above run for `from.steps` steps.
    fn hidden_from(
        &self,
        region: &Region,
        lip_slack: &[f64],
        (splits, within): (&Splits, Option<&[Bounds]>),
        from: Reused<'_>,
    ) -> Result<HiddenBounds, Undecided> {
        let (x, eps) = (region.centre.view(), region.eps);
        let hidden = self.layers.len() - 1;
        let mut out = HiddenBounds {
            pre: Vec::with_capacity(hidden),
            relax: Vec::with_capacity(hidden),
            errors: Vec::with_capacity(hidden),
            at_centre: Vec::with_capacity(hidden),
        };
        // enclosure of the centre's activations h_{l-1}(x0)
        let mut centre = point(x);
        for l in 0..hidden {
            let layer = &self.layers[l];
            let at_centre = match from.at_centre.and_then(|c| c.get(l)) {
                Some(known) => known.clone(),
                None => layer_box(layer, &centre),
            };
            out.at_centre.push(at_centre.clone());
            if let Some((pre, errors)) = from.bounds.filter(|_| l < from.layers) {
                let mut bounds = pre.get(l).ok_or(Undecided::NotFinite)?.clone();
                split::constrain(&mut bounds, splits, l).map_err(Undecided::Infeasible)?;
                let relax = (bounds.lo.iter().zip(&bounds.hi))
                    .map(|(lo, hi)| relax_unit(*lo, *hi))
                    .collect::<Option<Vec<_>>>()
                    .ok_or(Undecided::NotFinite)?;
                out.errors.push(errors.get(l).cloned().unwrap_or_default());
                out.pre.push(bounds);
                out.relax.push(relax);
                centre = at_centre.relu();
                continue;
            }
            let errors = self.unit_errors(l, &out.pre, region);
            let widen = match (&layer.rounding, l) {
                (None, _) => 0.0,
                (Some(_), 0) => 0.0,
                (Some(_), _) => lip_slack.get(l).copied().unwrap_or(f64::INFINITY),
            };
            let spread = mul_up(eps, self.lip_prefix[l]);
            let reach: Vec<f64> = (layer.row_norms.iter())
                .map(|n| add_up(mul_up(spread, *n), widen))
                .collect();
            let mut bounds = at_centre.widen(&reach);
            if l == 0 && layer.rounding.is_some() {
                // the deployed first layer: its rounding, and a flushed input within D_0
                let flushed: Vec<f64> = (errors.iter().zip(&layer.row_norms))
                    .map(|(e, n)| add_up(*e, mul_up(self.d0, *n)))
                    .collect();
                bounds = bounds.widen(&flushed);
            }
            if let (0, Some(b)) = (l, &region.boxed) {
                // the first layer over the box itself (a flushed input within D_0 per coordinate)
                let input = Bounds {
                    lo: b.lo.iter().map(|v| sub_down(*v, self.d0)).collect(),
                    hi: b.hi.iter().map(|v| add_up(*v, self.d0)).collect(),
                };
                bounds = bounds.intersect(&layer_box(layer, &input).widen(&errors));
            }
            if let Some(prev) = out.pre.last() {
                bounds = bounds.intersect(&layer_box(layer, &prev.relu()).widen(&errors));
            }
            if let Some(known) = within.and_then(|w| w.get(l)) {
                bounds = bounds.intersect(known);
            }
            out.errors.push(errors);
            if l > 0 {
                self.tighten(l, &mut bounds, &out, (region, splits), from.steps);
            }
            split::constrain(&mut bounds, splits, l).map_err(Undecided::Infeasible)?;
            let relax = (bounds.lo.iter().zip(&bounds.hi))
                .map(|(lo, hi)| relax_unit(*lo, *hi))
                .collect::<Option<Vec<_>>>()
                .ok_or(Undecided::NotFinite)?;
            out.pre.push(bounds);
            out.relax.push(relax);
            centre = at_centre.relu();
        }
        Ok(out)
    }

    /// The deployed execution's rounding bound `eps_l` for layer `l`, whose inputs are the region
    /// (`l = 0`) or the ReLU of `pre[l - 1]`; empty for the real network.
    fn unit_errors(&self, l: usize, pre: &[Bounds], region: &Region) -> Vec<f64> {
        let Some(model) = &self.layers[l].rounding else {
            return Vec::new();
        };
        match l.checked_sub(1).and_then(|p| pre.get(p)) {
            None => model.region_errors(region),
            Some(below) => {
                let mag: Array1<f64> = below.hi.iter().map(|h| h.max(0.0)).collect();
                model.unit_errors(mag.view())
            }
        }
    }

    /// CROWN bounds for the units of hidden layer `l` that `bounds` leaves unstable: one
    /// backward substitution with rows `e_j` and `-e_j` per such unit; then, with
    /// [`LocalNet::with_intermediate_search`], one with searched slopes (and the multipliers of
    /// `splits` below `l`), each bound the better of the two (both sound).
    fn tighten(
        &self,
        l: usize,
        bounds: &mut Bounds,
        below: &HiddenBounds,
        (region, splits): (&Region, &Splits),
        steps: usize,
    ) {
        let unstable: Vec<usize> = (0..bounds.lo.len())
            .filter(|&j| bounds.lo[j] < 0.0 && bounds.hi[j] > 0.0)
            .collect();
        if unstable.is_empty() {
            return;
        }
        let mut c = Array2::zeros((2 * unstable.len(), bounds.lo.len()));
        for (t, &j) in unstable.iter().enumerate() {
            c[[2 * t, j]] = 1.0;
            c[[2 * t + 1, j]] = -1.0;
        }
        let parts = (&below.pre[..], &below.relax[..], &below.errors[..]);
        let mut lower =
            backward::lower_bounds(self, l, c.clone(), parts, (None, false, None), region, None);
        if steps > 0 {
            let search = SlopeSearch {
                iterations: steps,
                target: f64::INFINITY,
            };
            let mut searched = lower.clone();
            self.search_slopes((search, None), &c, &mut searched, (below, region, splits));
            for (v, s) in lower.iter_mut().zip(searched) {
                *v = v.max(s);
            }
        }
        for (t, &j) in unstable.iter().enumerate() {
            bounds.lo[j] = bounds.lo[j].max(lower[2 * t]);
            bounds.hi[j] = bounds.hi[j].min(-lower[2 * t + 1]);
        }
    }

    /// Lower bounds on the margins `z_i(x) - z_j(x)` (real, or deployed with a deployment) over
    /// `||x - x0||_2 <= eps`, one per class `j` (`+inf` at `j = i`, `-inf` where no finite bound
    /// holds); `lip_slack` as in [`LocalNet::hidden_bounds`].
    pub fn margin_lower_bounds(
        &self,
        x0: &[f64],
        eps: f64,
        i: usize,
        lip_slack: &[f64],
    ) -> Vec<f64> {
        self.point_bounds(InputSet::Ball { x0, eps }, i, lip_slack)
            .0
    }

    /// The margin lower bounds of [`LocalNet::margin_lower_bounds`] over `set` (a ball, or a box
    /// such as a clipped l_inf ball), with the hidden layers' bounds they rest on (`None` when
    /// the set is empty or a bound was not finite: then every margin bound is `-inf`).
    pub fn point_bounds(
        &self,
        set: InputSet<'_>,
        i: usize,
        lip_slack: &[f64],
    ) -> (Vec<f64>, Option<HiddenBounds>) {
        let classes = self.classes();
        let others: Vec<usize> = (0..classes).filter(|&j| j != i).collect();
        let mut c = Array2::zeros((others.len(), classes));
        for (t, &j) in others.iter().enumerate() {
            c[[t, i]] = 1.0;
            c[[t, j]] = -1.0;
        }
        let region = Region::new(set, self.input_dim());
        let Some((lower, hidden)) =
            region.and_then(|r| self.rows_over(&r, &c, lip_slack, self.search))
        else {
            return (undecided_margins(classes, i), None);
        };
        let mut out = vec![f64::INFINITY; classes];
        for (t, &j) in others.iter().enumerate() {
            out[j] = lower[t];
        }
        (out, Some(hidden))
    }

    /// Lower bounds on the rows of `C y(x)` (any linear forms of the outputs, real or deployed
    /// with a deployment) over `set`; `lip_slack` as in [`LocalNet::hidden_bounds`]; the slope
    /// search, where set, as [`LocalNet::with_slope_search`] says; with the hidden bounds they
    /// rest on. `None` when the set is empty or not finite, or a hidden bound is not finite; a
    /// row is NaN-free, `-inf` where no finite bound holds.
    pub fn linear_lower_bounds(
        &self,
        set: InputSet<'_>,
        c: &Array2<f64>,
        lip_slack: &[f64],
    ) -> Option<(Vec<f64>, HiddenBounds)> {
        if c.ncols() != self.classes() {
            return None;
        }
        let region = Region::new(set, self.input_dim())?;
        self.rows_over(&region, c, lip_slack, self.search)
    }

    /// Number of inputs.
    pub fn input_dim(&self) -> usize {
        self.layers.first().map_or(0, |l| l.w.ncols())
    }

    /// The rows of `c` over `region` with the hidden bounds they rest on: CROWN's slopes, then
    /// the `search` where given.
    fn rows_over(
        &self,
        region: &Region,
        c: &Array2<f64>,
        lip_slack: &[f64],
        search: Option<SlopeSearch>,
    ) -> Option<(Vec<f64>, HiddenBounds)> {
        let hidden = self
            .hidden_over(region, lip_slack, &Splits::none(), None)
            .ok()?;
        let top = self.layers.len() - 1;
        let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
        let lines = (None, true, None);
        let mut lower = backward::lower_bounds(self, top, c.clone(), parts, lines, region, None);
        if let Some(search) = search {
            let parts = (&hidden, region, &Splits::none());
            self.search_slopes((search, None), c, &mut lower, parts);
        }
        Some((lower, hidden))
    }

    /// Lower bounds on the rows of `C y(x)` over the subdomain of `set` where the units `splits`
    /// fixes are in their phases (branch and bound's bounding step; `lip_slack` as in
    /// [`LocalNet::hidden_bounds`]), with the hidden bounds and the coefficients they rest on;
    /// `search` as in [`LocalNet::with_slope_search`] (it replaces the net's own), started from
    /// `warm` (multipliers found for the same rows, a parent's) where given. The hidden bounds
    /// start from what is `known` ([`Known`]).
    pub fn split_lower_bounds(
        &self,
        set: InputSet<'_>,
        (c, lip_slack): (&Array2<f64>, &[f64]),
        splits: &Splits,
        (search, warm): (Option<SlopeSearch>, Option<&Multipliers>),
        known: Known<'_>,
    ) -> SplitOutcome {
        if c.ncols() != self.classes() {
            return SplitOutcome::NotFinite;
        }
        let Some(region) = Region::new(set, self.input_dim()) else {
            return SplitOutcome::NotFinite;
        };
        let hidden = match known {
            Known::Refine { root, parent } => match splits.iter().map(|&(l, _, _)| l).min() {
                None => root.with_splits(splits),
                Some(l0) => {
                    let (layers, bounds) = match parent {
                        Some((p, newest)) => (newest + 1, (&p.pre[..], &p.errors[..])),
                        None => (l0 + 1, (&root.pre[..], &root.errors[..])),
                    };
                    let from = Reused {
                        layers,
                        bounds: Some(bounds),
                        steps: 0,
                        at_centre: Some(&root.at_centre),
                    };
                    // the parent's bounds hold over the child and lie inside the root's
                    self.hidden_from(&region, lip_slack, (splits, Some(bounds.0)), from)
                }
            },
            Known::Within(w) => self.hidden_over(&region, lip_slack, splits, Some(w)),
            Known::Nothing => self.hidden_over(&region, lip_slack, splits, None),
        };
        let hidden = match hidden {
            Ok(h) => h,
            Err(Undecided::Infeasible(at)) => return SplitOutcome::Infeasible(at),
            Err(Undecided::NotFinite) => return SplitOutcome::NotFinite,
        };
        let top = self.layers.len() - 1;
        let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
        let mut trace = Trace::new(top);
        let lines = (None, true, None);
        let mut lower = backward::lower_bounds(
            self,
            top,
            c.clone(),
            parts,
            lines,
            &region,
            Some(&mut trace),
        );
        let optimised = search.and_then(|search| {
            self.search_slopes((search, warm), c, &mut lower, (&hidden, &region, splits))
        });
        SplitOutcome::Bounded(Box::new(SplitBounds {
            lower,
            hidden,
            trace,
            optimised,
        }))
    }
}

impl LocalNet<'_> {
    /// For the rows of `c` whose bound in `lower` is at most the search's target, searches lower
    /// slopes and the split constraints' multipliers ([`slopes::search`], from `warm`'s rows
    /// where given) and keeps, per row, the larger of the two sound bounds. Returns what it found
    /// when it searched every row.
    fn search_slopes(
        &self,
        (search, warm): (SlopeSearch, Option<&Multipliers>),
        c: &Array2<f64>,
        lower: &mut [f64],
        (hidden, region, splits): (&HiddenBounds, &Region, &Splits),
    ) -> Option<Multipliers> {
        let rows: Vec<usize> = (0..c.nrows())
            .filter(|&r| lower[r].partial_cmp(&search.target) != Some(std::cmp::Ordering::Greater))
            .collect();
        if rows.is_empty() || search.iterations == 0 {
            return None;
        }
        let c = c.select(ndarray::Axis(0), &rows);
        let start: Vec<f64> = rows.iter().map(|&r| lower[r]).collect();
        let reach = match &region.boxed {
            Some(b) => slopes::Reach::Box(&b.half),
            None => slopes::Reach::Ball(region.eps),
        };
        let from = warm.map(|w| w.select_rows(&rows));
        let found = slopes::search(
            self,
            &hidden.relax,
            (&c, region.centre.view(), reach),
            (&start, search.target),
            (search.iterations, splits),
            from.as_ref(),
        )?;
        // the rows are over the layer above the last relaxed one (the output, or a hidden
        // layer's pre-activations when its own bounds are tightened)
        let top = hidden.relax.len();
        let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
        let shift = (!splits.is_empty()).then_some((&found.betas[..], splits));
        let lines = (Some(&found.slopes[..]), true, shift);
        let better = backward::lower_bounds(self, top, c, parts, lines, region, None);
        for (&r, b) in rows.iter().zip(better) {
            // NaN compares false: a failed search keeps CROWN's bound
            if b > lower[r] {
                lower[r] = b;
            }
        }
        (rows.len() == lower.len()).then_some(found)
    }
}

/// Margin bounds that decide nothing, for predicted class `i`: `+inf` at `i` (no margin with
/// itself) and `-inf` for every other class (not certified).
fn undecided_margins(classes: usize, i: usize) -> Vec<f64> {
    (0..classes)
        .map(|j| {
            if j == i {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect()
}

/// Refuses a layer that local bounds do not cover: an affine step, or a layer whose activation
/// is not ReLU on a hidden layer and none on the output.
fn check_layer(layer: &crate::onnx::model::Dense, l: usize, depth: usize) -> Result<(), String> {
    if layer.affine.is_some() {
        return Err(format!(
            "local bounds do not cover affine steps (layer {})",
            l + 1
        ));
    }
    let hidden = l + 1 < depth;
    if hidden != (layer.act == Activation::Relu) {
        return Err(format!(
            "local bounds need ReLU on every hidden layer and none on the output (layer {})",
            l + 1
        ));
    }
    Ok(())
}
