//! The input set local bounds hold over (docs/soundness.md "Local bounds", L6): an l2 ball, or a
//! box (an l_inf ball clipped to the valid input range, or a VNN-LIB property's input bounds).

use std::sync::{Arc, OnceLock};

use ndarray::Array1;

use crate::arith::sound::{add_up, l2_norm_up};

/// An input set, as the caller states it.
#[derive(Clone, Copy, Debug)]
pub enum InputSet<'a> {
    /// `||x - x0||_2 <= eps` (`x0` exact, `eps` an upper bound of the radius).
    Ball {
        /// The centre.
        x0: &'a [f64],
        /// The radius.
        eps: f64,
    },
    /// `lo <= x <= hi` componentwise.
    Box {
        /// Lower ends.
        lo: &'a [f64],
        /// Upper ends.
        hi: &'a [f64],
    },
}

/// An input set as the bound computation reads it: a centre, an l2 radius around it covering the
/// set, and for a box its ends and half-widths.
#[derive(Clone, Debug)]
pub(super) struct Region {
    /// The ball's centre, or the box's float64 midpoint.
    pub(super) centre: Array1<f64>,
    /// An upper bound of `max over the set of ||x - centre||_2`.
    pub(super) eps: f64,
    /// The box, `None` for a ball.
    pub(super) boxed: Option<BoxSet>,
    /// What the first layer computes from the centre, kept for the region's bound passes (a
    /// subdomain's slope search runs several), with the key of the layer it is for.
    first: OnceLock<(LayerKey, Arc<FirstLayerAtCentre>)>,
}

/// Which first layer a region's kept products are for: the layer's address and whether it is
/// deployed (has a rounding model).
pub(super) type LayerKey = (usize, bool);

/// The first layer's products with the region's centre `c`, as every backward pass over the
/// region concretises them ([`Region::first_layer`]): functions of the weights and `c` alone.
#[derive(Debug)]
pub(super) struct FirstLayerAtCentre {
    /// `fl(W_1 c)`.
    pub(super) c: Array1<f64>,
    /// Per unit, a bound on `|fl(W_1 c) - W_1 c|`.
    pub(super) c_err: Array1<f64>,
    /// The deployed first layer's rounding charges over the region (none for the real one).
    pub(super) errors: Option<Vec<f64>>,
}

/// A box `[lo, hi]` with half-widths `r_i >= max(hi_i - c_i, c_i - lo_i)` (rounded up) around
/// the region's centre `c`.
#[derive(Clone, Debug)]
pub(super) struct BoxSet {
    /// Lower ends.
    pub(super) lo: Vec<f64>,
    /// Upper ends.
    pub(super) hi: Vec<f64>,
    /// Half-widths around the centre.
    pub(super) half: Array1<f64>,
}

impl Region {
    /// The region of `set`, or `None` when it is empty, not finite or of another dimension than
    /// `dim`.
    pub(super) fn new(set: InputSet<'_>, dim: usize) -> Option<Region> {
        match set {
            InputSet::Ball { x0, eps } => {
                let finite = x0.iter().all(|v| v.is_finite()) && eps >= 0.0;
                (x0.len() == dim && finite && !eps.is_nan()).then(|| Region {
                    centre: Array1::from(x0.to_vec()),
                    eps,
                    boxed: None,
                    first: OnceLock::new(),
                })
            }
            InputSet::Box { lo, hi } => {
                let ok = lo.len() == dim
                    && hi.len() == dim
                    && (lo.iter().zip(hi)).all(|(l, h)| l.is_finite() && h.is_finite() && l <= h);
                ok.then(|| Region::of_box(lo, hi))
            }
        }
    }

    /// The box `[lo, hi]`: midpoint `c = fl(lo/2 + hi/2)` (halving is exact but for subnormals;
    /// any `c` will do) and `r_i = max(hi_i - c_i, c_i - lo_i)` rounded up, so that
    /// `[c - r, c + r]` contains the box; the covering radius is `||r||_2` rounded up.
    fn of_box(lo: &[f64], hi: &[f64]) -> Region {
        let centre: Array1<f64> = (lo.iter().zip(hi))
            .map(|(l, h)| 0.5 * l + 0.5 * h)
            .collect();
        let half: Array1<f64> = (lo.iter().zip(hi).zip(&centre))
            .map(|((l, h), c)| add_up(*h, -c).max(add_up(*c, -l)).max(0.0))
            .collect();
        let eps = l2_norm_up(half.iter().copied());
        Region {
            centre,
            eps,
            boxed: Some(BoxSet {
                lo: lo.to_vec(),
                hi: hi.to_vec(),
                half,
            }),
            first: OnceLock::new(),
        }
    }

    /// The first layer's products with the centre for the layer `key` names: computed by
    /// `compute` once, then kept; for another key, computed again each time. A region lives
    /// inside one call of one network's bound computation, so the layer a key names cannot
    /// change while it is kept; the key's deployment flag keeps a real and a deployed layer
    /// over the same weights apart all the same.
    pub(super) fn first_layer(
        &self,
        key: LayerKey,
        compute: impl FnOnce() -> Arc<FirstLayerAtCentre>,
    ) -> Arc<FirstLayerAtCentre> {
        match self.first.get() {
            Some((at, kept)) if *at == key => kept.clone(),
            Some(_) => compute(),
            None => self.first.get_or_init(|| (key, compute())).1.clone(),
        }
    }

    /// What the set is, as far as anything computed from the region depends on it.
    pub(super) fn set_key(&self) -> SetKey {
        SetKey {
            centre: self.centre.clone(),
            eps: self.eps,
            ends: (self.boxed.as_ref()).map(|b| (b.lo.clone(), b.hi.clone())),
        }
    }

    /// Whether the region is of the set `key` describes.
    pub(super) fn has_key(&self, key: &SetKey) -> bool {
        let ends = match (&self.boxed, &key.ends) {
            (None, None) => true,
            (Some(b), Some((lo, hi))) => b.lo == *lo && b.hi == *hi,
            _ => false,
        };
        ends && self.eps == key.eps && self.centre == key.centre
    }
}

/// A region's set, as far as anything computed from the region depends on it: its centre, its
/// covering radius and, for a box, its ends (from which its half-widths follow).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SetKey {
    centre: Array1<f64>,
    eps: f64,
    ends: Option<(Vec<f64>, Vec<f64>)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rug::Rational;

    fn q(x: f64) -> Rational {
        Rational::from_f64(x).unwrap()
    }

    #[test]
    fn a_box_is_inside_its_region_and_its_covering_ball() {
        let lo = [0.0, -1.0, 0.1, 1e-310, 3.0];
        let hi = [0.03, 1.0, 0.1 + 1e-17, 3e-310, 3.0];
        let r = Region::new(InputSet::Box { lo: &lo, hi: &hi }, 5).unwrap();
        let half = &r.boxed.as_ref().unwrap().half;
        let mut sq = Rational::new();
        for i in 0..5 {
            let (c, h) = (q(r.centre[i]), q(half[i]));
            assert!(c.clone() - &h <= q(lo[i]) && q(hi[i]) <= c + &h, "{i}");
            sq += h.clone() * &h;
        }
        assert!(q(r.eps) * q(r.eps) >= sq);
        // a degenerate coordinate keeps its value as the centre, and at most one subnormal width
        assert_eq!(r.centre[4], 3.0);
        assert!(half[4] <= f64::from_bits(1));
    }

    /// Kept for the layer it was first computed for; for another, computed each time.
    #[test]
    fn the_first_layer_at_the_centre_is_kept_for_its_weights_only() {
        let r = Region::new(
            InputSet::Ball {
                x0: &[1.0],
                eps: 0.5,
            },
            1,
        )
        .unwrap();
        let calls = std::cell::Cell::new(0);
        let value = |v: f64| {
            calls.set(calls.get() + 1);
            Arc::new(FirstLayerAtCentre {
                c: Array1::from(vec![v]),
                c_err: Array1::zeros(1),
                errors: None,
            })
        };
        assert_eq!(r.first_layer((8, true), || value(1.0)).c[0], 1.0);
        assert_eq!(r.first_layer((8, true), || value(2.0)).c[0], 1.0);
        assert_eq!(calls.get(), 1);
        assert_eq!(r.first_layer((16, true), || value(3.0)).c[0], 3.0);
        assert_eq!(r.first_layer((16, true), || value(4.0)).c[0], 4.0);
        // the same address, real instead of deployed
        assert_eq!(r.first_layer((8, false), || value(6.0)).c[0], 6.0);
        assert_eq!(r.first_layer((8, true), || value(5.0)).c[0], 1.0);
        assert_eq!(calls.get(), 4);
    }

    /// A region has the key of its own set, and of no other: another box (even with the same
    /// centre), or a ball.
    #[test]
    fn a_regions_key_names_its_set_alone() {
        let boxed =
            |lo: &[f64], hi: &[f64]| Region::new(InputSet::Box { lo, hi }, lo.len()).unwrap();
        let r = boxed(&[0.0, 1.0], &[1.0, 2.0]);
        let key = r.set_key();
        assert!(r.has_key(&key) && boxed(&[0.0, 1.0], &[1.0, 2.0]).has_key(&key));
        assert!(!boxed(&[0.0, 1.0], &[1.0, 2.5]).has_key(&key));
        // the same centre, a narrower box
        assert!(!boxed(&[0.25, 1.0], &[0.75, 2.0]).has_key(&key));
        let ball = Region::new(
            InputSet::Ball {
                x0: &[0.5, 1.5],
                eps: r.eps,
            },
            2,
        )
        .unwrap();
        assert!(!ball.has_key(&key) && !r.has_key(&ball.set_key()));
        assert!(ball.has_key(&ball.set_key()));
    }

    #[test]
    fn empty_or_mismatched_sets_are_refused() {
        let (lo, hi) = ([0.0, 1.0], [1.0, 0.5]);
        assert!(Region::new(InputSet::Box { lo: &lo, hi: &hi }, 2).is_none());
        assert!(Region::new(
            InputSet::Box {
                lo: &lo[..1],
                hi: &hi
            },
            2
        )
        .is_none());
        let nan = [f64::NAN, 0.0];
        assert!(Region::new(InputSet::Ball { x0: &nan, eps: 0.1 }, 2).is_none());
        assert!(Region::new(InputSet::Ball { x0: &lo, eps: -1.0 }, 2).is_none());
        let r = Region::new(InputSet::Ball { x0: &lo, eps: 0.25 }, 2).unwrap();
        assert!(r.boxed.is_none() && r.eps == 0.25);
    }
}
