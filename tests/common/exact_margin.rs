//! Exact margins of the shape family's networks over an interval of their first input, in
//! rationals: every pre-activation is piecewise linear in it, with breakpoints found layer by
//! layer, so a margin's minimum is attained at a breakpoint or an end.

#![allow(dead_code)]

use rug::Rational;

use super::shape_family::{parameters, shapes, Kind, Shape};

/// The shape family's `shapes(extra)` and `wide` shapes with three random hidden layers of
/// `8 + k` units (seeds from `seed`: where the bounds alone rarely decide), with the input width
/// set to `inputs` (an identity layer keeps its width equal to the layer below).
pub fn with_inputs(extra: usize, (wide, seed): (usize, u64), inputs: usize) -> Vec<Shape> {
    let wide = (0..wide).map(|k| Shape {
        widths: vec![1, 8 + k, 8 + k, 8 + k, 3],
        kinds: vec![Kind::Random, Kind::Random, Kind::Random],
        huge_bias: false,
        seed: seed + k as u64,
    });
    (shapes(extra).into_iter().chain(wide))
        .map(|mut s| {
            s.widths[0] = inputs;
            if s.kinds.first() == Some(&Kind::Identity) {
                s.widths[1] = inputs;
            }
            for l in 1..s.kinds.len() {
                if s.kinds[l] == Kind::Identity {
                    s.widths[l + 1] = s.widths[l];
                }
            }
            s
        })
        .collect()
}

/// `x` as an exact rational.
pub fn q(x: f64) -> Rational {
    Rational::from_f64(x).expect("finite")
}

/// The exact network of a shape's float32 parameters.
pub struct Exact {
    pub layers: Vec<(Vec<Vec<Rational>>, Vec<Rational>)>,
}

impl Exact {
    pub fn of(shape: &Shape) -> Exact {
        let layers = (parameters(shape).iter().enumerate())
            .map(|(l, (w, b))| {
                let n = shape.widths[l];
                let rows = w
                    .chunks(n)
                    .map(|r| r.iter().map(|v| q(f64::from(*v))).collect())
                    .collect();
                (rows, b.iter().map(|v| q(f64::from(*v))).collect())
            })
            .collect();
        Exact { layers }
    }

    /// Pre-activations of layer `upto` (0-based) at input `x`, ReLU between layers.
    pub fn pre(&self, x: &[Rational], upto: usize) -> Vec<Rational> {
        let mut h: Vec<Rational> = x.to_vec();
        for (l, (w, b)) in self.layers.iter().enumerate() {
            let z: Vec<Rational> = (w.iter().zip(b))
                .map(|(row, bj)| {
                    (row.iter().zip(&h))
                        .map(|(a, v)| Rational::from(a * v))
                        .sum::<Rational>()
                        + bj
                })
                .collect();
            if l == upto {
                return z;
            }
            h = z
                .into_iter()
                .map(|v| if v < 0 { Rational::new() } else { v })
                .collect();
        }
        unreachable!("layer {upto} of {}", self.layers.len())
    }

    /// The minimum over `t` in `[a, b]` of `Y_0 - Y_1`, the input being `t` then `pinned`, and
    /// the largest magnitude of any pre-activation there (every pre-activation is linear between
    /// breakpoints, so both are attained at one).
    pub fn min_margin(
        &self,
        (a, b): (&Rational, &Rational),
        pinned: &[Rational],
    ) -> (Rational, Rational) {
        self.min_pair_margin((0, 1), (a, b), pinned)
    }

    /// [`Exact::min_margin`] of `Y_i - Y_j`.
    pub fn min_pair_margin(
        &self,
        (i, j): (usize, usize),
        (a, b): (&Rational, &Rational),
        pinned: &[Rational],
    ) -> (Rational, Rational) {
        let at = |t: &Rational| {
            let mut x = vec![t.clone()];
            x.extend_from_slice(pinned);
            x
        };
        let mut points = vec![a.clone(), b.clone()];
        for l in 0..self.layers.len() - 1 {
            let mut roots = Vec::new();
            for pair in points.windows(2) {
                let (zp, zq) = (self.pre(&at(&pair[0]), l), self.pre(&at(&pair[1]), l));
                for (u, v) in zp.iter().zip(&zq) {
                    if (*u < 0 && *v > 0) || (*u > 0 && *v < 0) {
                        // z is linear on [p, q]: its zero
                        let s = Rational::from(u - v);
                        roots.push(pair[0].clone() + (pair[1].clone() - &pair[0]) * u.clone() / s);
                    }
                }
            }
            points.extend(roots);
            points.sort();
            points.dedup();
        }
        let top = self.layers.len() - 1;
        let scale = (points.iter())
            .flat_map(|t| (0..=top).flat_map(move |l| self.pre(&at(t), l)))
            .map(|v| v.abs())
            .max()
            .unwrap_or_default();
        let min = (points.iter())
            .map(|t| {
                let y = self.pre(&at(t), top);
                Rational::from(&y[i] - &y[j])
            })
            .min()
            .expect("two ends");
        (min, scale)
    }
}
