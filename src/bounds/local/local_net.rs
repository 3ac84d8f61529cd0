//! The network prepared for local bounds ([`LocalNet`], one [`LocalLayer`] per dense layer) and
//! the passes over it: the interval and CROWN-style bounds of every hidden unit, the margins
//! over a set, and the split search that branch and bound drives.

use ndarray::{Array1, Array2};

use super::backward::{self, Trace};
use super::deployed::{Deployment, LayerErrorModel};
use super::hidden::{HiddenBounds, Known};
use super::region::InputSet;
use super::region::{FirstLayerAtCentre, Region, SetKey};
use super::row_search::{RowGroups, RowSearch, Warm};
use super::slopes::{self, Multipliers};
use super::split::{Infeasible, Splits};
use super::unit_branching::UnitBranching;
use crate::arith::sound::{l2_norm_up, mul_up};
use crate::onnx::model::{Activation, DenseNet};
use std::sync::{Arc, Mutex};

/// One dense layer as the local bounds read it.
pub struct LocalLayer<'a> {
    /// `W_l` (`m_l x n_l`).
    pub(super) w: &'a Array2<f64>,
    /// `W_l^T`, laid out by its own rows (a layer applied to a few inputs, `rows`).
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
    /// Whether the searched hidden bounds (a root's, `intermediate_steps > 0`) are tightened by
    /// branching on each unstable unit ([`UnitBranching`]).
    pub(super) unit_branching: Option<UnitBranching>,
    /// The first layer's products at the centre of the last set bounded over, with the set
    /// (a ReLU-splitting search bounds every subdomain over one box).
    last_first_layer: Mutex<Option<(SetKey, Arc<FirstLayerAtCentre>)>>,
}

/// Optimised lower slopes for the final margins (`slopes`, alpha-CROWN): for the margins whose
/// CROWN bound is at most `target` (the bound they must exceed), `iterations` steps of
/// projected gradient ascent; each such margin keeps the better of the two sound bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlopeSearch {
    /// Steps of the search.
    pub iterations: usize,
    /// Margins whose bound is above it are not searched.
    pub target: f64,
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
    /// The rows of `C` the search improved, ascending, and the slopes and multipliers it found
    /// for them (a child's starting point), when it ran.
    pub optimised: Option<(Vec<usize>, Multipliers)>,
}

impl<'a> LocalNet<'a> {
    /// Prepares `net`; `lip_prefix` as in [`crate::bounds::certify::ModelBounds::lip_prefix`]
    /// (upper bounds of the products of the layers' spectral norms), `None` when the norms are
    /// unknown. With a `deployment`, the bounds are of the deployed execution's margins (its
    /// rounding errors enter as bounded inputs, `deployed`); without, of the real network's.
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
            unit_branching: None,
            last_first_layer: Mutex::new(None),
        })
    }

    /// The first layer's products at `region`'s centre, when the last set they were computed
    /// for is `region`'s (they are functions of the weights and the set alone).
    pub(super) fn kept_first_layer(&self, region: &Region) -> Option<Arc<FirstLayerAtCentre>> {
        let kept = self.last_first_layer.lock().ok()?;
        let (key, products) = kept.as_ref()?;
        region.has_key(key).then(|| products.clone())
    }

    /// Keeps `products`, computed for `region`, for the next region of the same set.
    pub(super) fn keep_first_layer(&self, region: &Region, products: Arc<FirstLayerAtCentre>) {
        if let Ok(mut kept) = self.last_first_layer.lock() {
            *kept = Some((region.set_key(), products));
        }
    }

    /// The same network with the hidden layers' bounds also tightened by `steps` steps of the
    /// slope search (alpha-CROWN on the intermediate bounds: fewer unstable units, at the cost
    /// of a search per layer).
    pub fn with_intermediate_search(mut self, steps: usize) -> Self {
        self.intermediate_steps = steps;
        self
    }

    /// The same network with the searched hidden bounds (`with_intermediate_search`) also
    /// tightened by a branch and bound per unstable unit, as `branching` says
    /// (docs/soundness.md B12).
    pub fn with_unit_branching(mut self, branching: UnitBranching) -> Self {
        self.unit_branching = Some(branching);
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

    /// Number of hidden layers (ReLU layers).
    pub fn hidden_layers(&self) -> usize {
        self.layers.len().saturating_sub(1)
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
    /// `warm` ([`Warm`]) for the rows it has. The hidden bounds start from what is `known`
    /// ([`Known`]).
    pub fn split_lower_bounds(
        &self,
        set: InputSet<'_>,
        (c, lip_slack): (&Array2<f64>, &[f64]),
        splits: &Splits,
        (search, warm): (Option<SlopeSearch>, Option<Warm<'_>>),
        known: Known<'_>,
    ) -> SplitOutcome {
        let job = SplitJob {
            set,
            c,
            lip_slack,
            splits,
            search,
            warm,
            groups: None,
            known,
        };
        let mut outcomes = self.split_lower_bounds_many(std::slice::from_ref(&job));
        outcomes.pop().unwrap_or(SplitOutcome::NotFinite)
    }

    /// [`LocalNet::split_lower_bounds`] for every job: each job's hidden and CROWN bounds, then
    /// one slope search for all of them in lockstep ([`slopes::search_many`]: at every layer one
    /// product for every job's rows), then each job's sound bounds at what its search found. A
    /// job's outcome depends on the jobs bounded with it only through the search's float64
    /// sums (the soundness of each does not: docs/soundness.md L5).
    pub fn split_lower_bounds_many(&self, jobs: &[SplitJob<'_>]) -> Vec<SplitOutcome> {
        let prepared: Vec<Result<Crown, SplitOutcome>> =
            jobs.iter().map(|job| self.crown_bounds(job)).collect();
        let searches: Vec<Option<RowSearch>> = (jobs.iter().zip(&prepared))
            .map(|(job, p)| {
                let crown = p.as_ref().ok()?;
                RowSearch::new((job.search?, job.warm, job.groups), job.c, &crown.lower)
            })
            .collect();
        let problems: Vec<slopes::Problem<'_>> = (searches.iter().zip(&prepared).zip(jobs))
            .filter_map(|((rs, p), job)| {
                let (rs, crown) = (rs.as_ref()?, p.as_ref().ok()?);
                Some(rs.problem(&crown.hidden, &crown.region, job.splits))
            })
            .collect();
        let mut found = slopes::search_many(self, &problems).into_iter();
        drop(problems);
        (prepared.into_iter().zip(searches).zip(jobs))
            .map(|((p, rs), job)| {
                let mut crown = match p {
                    Ok(crown) => crown,
                    Err(outcome) => return outcome,
                };
                let optimised = rs.and_then(|rs| {
                    let at = (&crown.hidden, &crown.region, job.splits);
                    let searched = found.next().flatten()?;
                    Some(self.keep_better(&rs, searched, &mut crown.lower, at))
                });
                SplitOutcome::Bounded(Box::new(SplitBounds {
                    lower: crown.lower,
                    hidden: crown.hidden,
                    trace: crown.trace,
                    optimised,
                }))
            })
            .collect()
    }

    /// A job's hidden bounds and its rows' CROWN bounds, with the coefficients they carried.
    fn crown_bounds(&self, job: &SplitJob<'_>) -> Result<Crown, SplitOutcome> {
        if job.c.ncols() != self.classes() {
            return Err(SplitOutcome::NotFinite);
        }
        let Some(region) = Region::new(job.set, self.input_dim()) else {
            return Err(SplitOutcome::NotFinite);
        };
        let hidden = match self.hidden_of(job.known, &region, job.lip_slack, job.splits) {
            Ok(h) => h,
            Err(Undecided::Infeasible(at)) => return Err(SplitOutcome::Infeasible(at)),
            Err(Undecided::NotFinite) => return Err(SplitOutcome::NotFinite),
        };
        let top = self.layers.len() - 1;
        let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
        let mut trace = Trace::new(top);
        let lines = (None, true, None);
        let c = job.c.clone();
        let lower = backward::lower_bounds(self, top, c, parts, lines, &region, Some(&mut trace));
        Ok(Crown {
            region,
            hidden,
            lower,
            trace,
        })
    }
}

/// One subdomain's bounding for [`LocalNet::split_lower_bounds_many`]: the arguments of
/// [`LocalNet::split_lower_bounds`].
pub struct SplitJob<'a> {
    /// The input set.
    pub set: InputSet<'a>,
    /// The rows.
    pub c: &'a Array2<f64>,
    /// As in [`LocalNet::hidden_bounds`].
    pub lip_slack: &'a [f64],
    /// The units whose phases are fixed.
    pub splits: &'a Splits,
    /// The slope search (none: CROWN's slopes).
    pub search: Option<SlopeSearch>,
    /// Where the search starts.
    pub warm: Option<Warm<'a>>,
    /// Rows that stand in for one another (none: every row is searched).
    pub groups: Option<RowGroups<'a>>,
    /// What the hidden bounds start from.
    pub known: Known<'a>,
}

/// A job's bounds at CROWN's slopes.
struct Crown {
    region: Region,
    hidden: HiddenBounds,
    lower: Vec<f64>,
    trace: Trace,
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
