//! Exact-rational pins of the composed certificate bounds.
//!
//! Every bound lipfp computes with `f64` operations and one `next_up`/`next_down` step is
//! compared against an independent recomputation of the formulas in exact rational arithmetic
//! (rug `Rational`), on small networks, for every format, with and without flush-to-zero, with
//! the default and a declared float32 accumulation, and with a narrowing cast between layers.
//! The formulas are the paper's, generalised to the execution model of docs/soundness.md (the
//! bias at any position of the sum, wider accumulation with one rounding to the storage format,
//! casts as further roundings). The format constants are taken from an independent table (DESIGN.md), not from
//! `Format`; `gamma_n = (1 + u)^n - 1` is expanded exactly.
//!
//! Square roots are enclosed at 256 bits (`Round::Down` / `Round::Up`), so every reference value
//! is an interval `[lo, hi]` of rationals that contains the exact real value. Then:
//!
//! * an upper bound `got` is accepted when `got >= hi` (hence `got >=` the exact value) and
//!   `got <= hi (1 + 1e-12) + 2^-1060` (it is tight; the absolute term only matters for the
//!   float64 `a_mul = 2^-1075` terms, which live in the subnormal range of `f64`);
//! * a lower bound (a slack) is accepted when `got <= lo` (hence `<=` the exact value) and it is
//!   within `1e-9` relative of the exact slack plus `1e-12` of the scale of the terms it is the
//!   difference of;
//! * an overflow condition is decided exactly (`hi < F_max` passes, `lo >= F_max` fails).
//!
//! The reference (intervals, format table, layer terms, chains, the small networks) lives in
//! `tests/common/exact_bounds.rs`, shared with `tests/bounds/pointwise_exact.rs`.
//!
//! The norm bounds are inputs of the certificate formulas, so the tests pass chosen values
//! (valid upper bounds: at least the Frobenius norm) and check only the arithmetic built on them.

use crate::common::exact_bounds::*;
use lipfp::arith::execution::ExecutionModel;
use lipfp::arith::format::Format;
use lipfp::bounds::certify::quantities::{a_acc, a_dot_fwd, gamma_n};
use lipfp::bounds::certify::{Centre, Certifier, Mode, ModelBounds, PointResult, Refusal};
use lipfp::bounds::norms::LayerNorms;
use lipfp::onnx::model::DenseNet;
use rug::Rational;

struct Case {
    label: String,
    format: Format,
    accumulate: Option<Format>,
    ftz: bool,
    net: DenseNet,
    norms: Vec<LayerNorms>,
}

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for format in [
        Format::Float32,
        Format::Float16,
        Format::Float64,
        Format::Bfloat16,
    ] {
        for ftz in [false, true] {
            for (name, net, dyadic) in [
                ("A 3-4-2", net_a(format), true),
                ("B 4-5-5-3", net_b(format), false),
                ("C 2-3-3", net_c(format), false),
            ] {
                let norms = norms_for(&net, dyadic);
                cases.push(Case {
                    label: format!("{format} ftz={ftz} net {name}"),
                    format,
                    accumulate: None,
                    ftz,
                    net,
                    norms,
                });
            }
            // declared float32 accumulation, and a float32 net with a float16 cast round trip
            // after its first layer
            let (declared, casted) = match format {
                Format::Float16 | Format::Bfloat16 => (Some(Format::Float32), None),
                Format::Float32 => (None, Some(Format::Float16)),
                Format::Float64 => (None, Some(Format::Float32)),
            };
            let mut net = net_b(format);
            net.layers[0].casts.extend(casted);
            // tf2onnx-style layers: a MatMul and a separate bias Add (a runtime may round
            // between them when it accumulates in a wider format)
            for l in &mut net.layers {
                l.ops = vec!["MatMul".into(), "Add".into()];
            }
            let norms = norms_for(&net, false);
            cases.push(Case {
                label: format!("{format} ftz={ftz} net B accumulate={declared:?} casts={casted:?}"),
                format,
                accumulate: declared,
                ftz,
                net,
                norms,
            });
        }
    }
    cases
}

impl Case {
    /// lipfp's bounds for the case.
    fn bounds(&self) -> ModelBounds {
        let exec = ExecutionModel::deployed(self.format, self.accumulate, self.ftz).unwrap();
        ModelBounds::new(&self.net, &self.norms, &exec)
    }

    /// The exact reference for the case.
    fn reference(&self) -> NetRef {
        reference(
            &self.net,
            &self.norms,
            self.format,
            self.accumulate,
            self.ftz,
        )
    }
}

/// One Standard/real certificate recomputed exactly.
struct SlackRef {
    /// `min_j` of the per-class slack.
    slack: Iv,
    /// `max_j (|m_ij| + L_ij eps + E_ctr + E_ball)`: the magnitude of the terms.
    scale: Rational,
    /// `sum_j (E_ctr + E_ball)`.
    degradation: Iv,
    /// `sum_j L_ij eps`.
    leps: Iv,
}

impl NetRef {
    /// Theorem "Floating-point robustness certificate":
    /// `min_j (m_ij(x) - L_ij eps - E_ctr - E_ball)`, with `E` from Lemma "Final-layer pairwise
    /// deviation" on the deterministic chains from `||x||` and `||x|| + eps`.
    fn standard(&self, logits: &[f64], x_norm: f64, eps: f64) -> Result<SlackRef, usize> {
        let r0_ball = Iv::exact(q(x_norm) + q(eps));
        let (rb, db) = self.chain(&r0_ball)?;
        let (rc, dc) = self.chain(&Iv::of(x_norm))?;
        let top = self.layers.len() - 1;
        let e = |p: &PairRef, d: &Iv, r: &Iv| {
            p.alpha.mul(d).add(&p.kappa_abs.mul(r)).add(&p.beta_const)
        };
        Ok(self.fold_pairs(logits, eps, |p| {
            e(p, &dc[top], &rc[top]).add(&e(p, &db[top], &rb[top]))
        }))
    }

    /// The classical check `min_j (m_ij(x) - L_ij eps)`.
    fn real(&self, logits: &[f64], eps: f64) -> SlackRef {
        self.fold_pairs(logits, eps, |_| Iv::zero())
    }

    fn fold_pairs(&self, logits: &[f64], eps: f64, err: impl Fn(&PairRef) -> Iv) -> SlackRef {
        let i = argmax(logits);
        let mut out: Option<SlackRef> = None;
        for j in (0..self.classes).filter(|&j| j != i) {
            let p = self.pair(i, j);
            let m = Iv::exact(q(logits[i]) - q(logits[j]));
            let leps = p.lip.scale(&q(eps));
            let e = err(p);
            let s = m.sub(&leps).sub(&e);
            let scale = m.hi.clone().abs() + &leps.hi + &e.hi;
            out = Some(match out {
                None => SlackRef {
                    slack: s,
                    scale,
                    degradation: e,
                    leps,
                },
                Some(acc) => SlackRef {
                    slack: acc.slack.min(&s),
                    scale: acc.scale.max(scale),
                    degradation: acc.degradation.add(&e),
                    leps: acc.leps.add(&leps),
                },
            });
        }
        out.unwrap()
    }
}

fn certify(mb: &ModelBounds, mode: Mode, logits: &[f64], x_norm: f64, eps: f64) -> PointResult {
    Certifier { fmt: mb, hi: None }.certify(
        mode,
        &Centre {
            logits,
            x_norm,
            hi: None,
            decided: None,
            local: None,
            cover: lipfp::bounds::ball::Cover::L2,
        },
        eps,
    )
}

/// Centre logits (exact format values) whose margin clears the Standard error terms at
/// `eps = 0` comfortably, so that a positive-slack range of `eps` exists.
fn logits_for(case: &Case, nr: &NetRef, x_norm: f64) -> Vec<f64> {
    let f = case.format;
    let others = [0.25, -0.5, 0.75];
    let classes = nr.classes;
    let winner = classes / 2;
    let mut logits: Vec<f64> = (0..classes).map(|k| f.round(others[k % 3])).collect();
    let top_other = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    logits[winner] = f.round(top_other + 1.0);
    let e = nr
        .standard(&logits, x_norm, 0.0)
        .unwrap()
        .degradation
        .hi
        .to_f64();
    logits[winner] = f.round(top_other + 2.0 * e + 1.0);
    assert_eq!(argmax(&logits), winner);
    logits
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn format_constants_match_the_independent_table() {
    for f in Format::ALL {
        let c = fc(f);
        assert_eq!(f.precision(), c.p, "{f}");
        assert_eq!(f.emin(), c.emin, "{f}");
        check_exact(&format!("{f} u"), f.unit_roundoff(), &c.u);
        check_exact(&format!("{f} lambda"), f.lambda(), &c.lambda);
        check_exact(&format!("{f} F_max"), f.f_max(), &c.f_max);
        assert_eq!(pow2(f.a_mul_exponent()), c.a_mul, "{f} a_mul");
    }
}

#[test]
fn scalar_quantities_match_exact_rationals() {
    for f in Format::ALL {
        let c = fc(f);
        for n in [1u64, 2, 3, 4, 5, 8, 100, 784] {
            let w = format!("{f} n={n}");
            check_upper(&format!("gamma {w}"), gamma_n(f, n), &Iv::exact(c.gamma(n)));
            for ftz in [false, true] {
                check_upper(
                    &format!("a_acc {w} ftz={ftz}"),
                    a_acc(f, ftz, n),
                    &Iv::exact(c.a_acc(ftz, n)),
                );
                check_upper(
                    &format!("a_dot_fwd {w} ftz={ftz}"),
                    a_dot_fwd(f, ftz, n),
                    &Iv::exact(c.a_dot_fwd(ftz, n)),
                );
            }
        }
    }
}

#[test]
fn model_bounds_are_tight_upper_bounds_of_the_exact_constants() {
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let w = &case.label;
        assert!(mb.vacuous.is_none(), "{w}: {:?}", mb.vacuous);
        assert_eq!(mb.format, case.format);
        assert_eq!(mb.ftz, case.ftz);
        assert_eq!(mb.classes, nr.classes, "{w}");
        assert_eq!(mb.layers.len(), nr.layers.len(), "{w}");
        for (l, (got, ex)) in mb.layers.iter().zip(&nr.layers).enumerate() {
            let w = format!("{w} layer {}", l + 1);
            check_upper(&format!("{w} spectral"), got.spectral, &ex.spectral);
            let r = got.rounding.expect("a dense layer");
            for (name, v, e) in [
                ("rel_w", r.rel_w, 0),
                ("rel_b", r.rel_b, 1),
                ("abs", r.abs, 2),
            ] {
                check_upper(
                    &format!("{w} {name}"),
                    v,
                    &Iv::exact(ex.rounding[e].clone()),
                );
            }
            check_upper(&format!("{w} kappa_abs"), got.kappa_abs, &ex.kappa_abs);
            check_upper(&format!("{w} alpha"), got.alpha, &ex.alpha);
            check_upper(&format!("{w} bias_l2"), got.bias_l2, &ex.bias_l2);
            check_upper(&format!("{w} beta_const"), got.beta_const, &ex.beta_const);
            let o = &got.overflow;
            check_upper(&format!("{w} row_l2_max"), o.row_l2_max, &ex.row_l2_max);
            check_exact(&format!("{w} row_inf_max"), o.row_inf_max, &ex.row_inf_max);
            check_exact(&format!("{w} bias_inf"), o.bias_inf, &ex.bias_inf);
            check_exact(
                &format!("{w} product f_max"),
                o.product_f_max,
                &ex.product_f_max,
            );
            // the same checks, in any order: each reference check has exactly one lipfp check
            // with the same F_max that is a tight upper bound of it
            assert_eq!(o.checks.len(), ex.checks.len(), "{w}: overflow checks");
            let mut unmatched: Vec<_> = o.checks.iter().collect();
            for (k, e) in ex.checks.iter().enumerate() {
                let close = |x: f64, v: &Rational| {
                    q(x) >= *v
                        && q(x) <= Rational::from(v * &(Rational::from(1) + rel_tol())) + abs_tol()
                };
                let found = unmatched.iter().position(|g| {
                    q(g.f_max) == e.f_max
                        && close(g.scale_w, &e.scale_w)
                        && close(g.scale_b, &e.scale_b)
                        && close(g.abs, &e.abs)
                });
                let Some(i) = found else {
                    panic!("{w}: no lipfp overflow check matches reference check {k}")
                };
                unmatched.remove(i);
            }
        }
        assert_eq!(mb.lip_prefix.len(), nr.lip_prefix.len(), "{w}");
        for (l, (got, ex)) in mb.lip_prefix.iter().zip(&nr.lip_prefix).enumerate() {
            check_upper(&format!("{w} lip_prefix[{l}]"), *got, ex);
        }
        check_upper(&format!("{w} d0"), mb.d0, &nr.d0);
        assert_eq!(mb.pairs.len(), nr.classes * nr.classes, "{w}");
        for i in 0..nr.classes {
            for j in (0..nr.classes).filter(|&j| j != i) {
                let (got, ex) = (mb.pair(i, j), nr.pair(i, j));
                let w = format!("{w} pair ({i},{j})");
                check_upper(&format!("{w} alpha"), got.alpha, &ex.alpha);
                check_upper(&format!("{w} kappa_abs"), got.kappa_abs, &ex.kappa_abs);
                check_upper(&format!("{w} beta_const"), got.beta_const, &ex.beta_const);
                check_upper(&format!("{w} lip"), got.lip, &ex.lip);
            }
        }
    }
}

#[test]
fn deviation_chain_and_radii_are_tight_upper_bounds() {
    let mut overflowed = 0;
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let depth = nr.layers.len();
        let top = depth - 1;
        for r0 in [0.0, 0.375, 1.25, 3.1, 17.0, 2.5e3, 4e4] {
            let w = format!("{} r0={r0}", case.label);
            let (rs, ds) = match nr.chain(&Iv::of(r0)) {
                Ok(v) => v,
                Err(l) => {
                    // far from the boundary: lipfp refuses at the same layer
                    assert_eq!(mb.hidden_chain(r0), Err(Refusal::Overflow(l)), "{w}");
                    assert_eq!(mb.deviation_profile(r0).err(), Some(Refusal::Overflow(l)));
                    overflowed += 1;
                    continue;
                }
            };
            let (r, d) = mb.hidden_chain(r0).unwrap_or_else(|e| panic!("{w}: {e}"));
            check_upper(&format!("{w} r_(L-1)"), r, &rs[top]);
            check_upper(&format!("{w} D_(L-1)"), d, &ds[top]);
            let (radii, devs) = mb.deviation_profile(r0).unwrap();
            assert_eq!((radii.len(), devs.len()), (depth, depth), "{w}");
            for l in 0..depth {
                check_upper(&format!("{w} r_{l}"), radii[l], &rs[l]);
                check_upper(&format!("{w} D_{l}"), devs[l], &ds[l]);
            }
            assert_eq!(
                (radii[top], devs[top]),
                (r, d),
                "{w}: profile and chain differ"
            );
            // the recursion driven by arbitrary (measured-style) radii
            let given: Vec<f64> = (0..depth).map(|l| r0 + 0.7 * (l as f64) + 0.1).collect();
            let got = mb.chain_with_radii(&given).unwrap();
            let given_iv: Vec<Iv> = given.iter().map(|&x| Iv::of(x)).collect();
            let ex = nr.chain_with_radii(&given_iv).unwrap();
            check_upper(&format!("{w} chain_with_radii"), got, &ex);
        }
    }
    // the float16 cases at the largest radii overflow; the comparison above covers them
    assert!(overflowed > 0);
}

#[test]
fn standard_slack_is_a_tight_lower_bound_and_the_verdict_flips_at_the_exact_boundary() {
    let x_norm = 1.25;
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let logits = logits_for(&case, &nr, x_norm);
        let exact = |eps: f64| nr.standard(&logits, x_norm, eps).unwrap();
        let check = |eps: f64, what: &str| -> PointResult {
            let w = format!("{} standard eps={eps:e} ({what})", case.label);
            let ex = exact(eps);
            let got = certify(&mb, Mode::Standard, &logits, x_norm, eps);
            let slack = got
                .slack
                .unwrap_or_else(|| panic!("{w}: {:?}", got.verdict));
            check_lower(&w, slack, &ex.slack, &ex.scale);
            assert_eq!(got.verdict.is_ok(), slack > 0.0, "{w}");
            // the reported statistics: sum_j (E_ctr + E_ball) and sum_j L_ij eps
            let (deg, leps) = got.degradation.unwrap();
            let close = |a: f64, b: &Iv| {
                let tol = Rational::from(&b.hi * &rel_tol())
                    + Rational::from(&ex.scale * &rel_tol()) * int(nr.classes as u64);
                (q(a) - &b.hi).abs() <= tol
            };
            assert!(close(deg, &ex.degradation), "{w}: degradation {deg:e}");
            assert!(close(leps, &ex.leps), "{w}: sum L eps {leps:e}");
            got
        };
        for eps in [0.0, 1e-3, 0.01, 0.05] {
            if exact(eps).slack.lo > 0 {
                check(eps, "fixed");
            }
        }
        assert!(exact(0.0).slack.lo > 0, "{}: no positive slack", case.label);
        let mut hi = 0.125;
        while exact(hi).slack.lo > 0 {
            hi *= 2.0;
        }
        // adjacent f64 radii around the exact boundary: slack(lo) > 0 >= slack(hi)
        let (e_pos, e_neg) = bisect(0.0, hi, |e| exact(e).slack.lo <= 0);
        let w = &case.label;
        // a sweep from 0 to 1.4x the boundary: every slack is a tight lower bound
        for k in 1..=40 {
            check(e_pos * k as f64 / 29.0, "sweep");
        }
        // at the first eps whose exact slack is not positive, lipfp must refuse
        assert_eq!(
            check(e_neg, "first non-positive exact slack").verdict,
            Err(Refusal::Margin),
            "{w}"
        );
        check(e_pos, "last positive exact slack");
        // slightly positive / slightly negative, beyond the rounding tolerance: the verdicts agree
        let (slightly_in, slightly_out) = (e_pos * (1.0 - 1e-6), e_neg * (1.0 + 1e-6));
        let tol = |ex: &SlackRef| Rational::from(&ex.scale * &rel_tol()) * 1000;
        let ex_in = exact(slightly_in);
        assert!(ex_in.slack.lo > tol(&ex_in), "{w}: slack too close to 0");
        assert_eq!(
            check(slightly_in, "slightly positive").verdict,
            Ok(()),
            "{w}"
        );
        let ex_out = exact(slightly_out);
        assert!(Rational::from(-&ex_out.slack.hi) > tol(&ex_out), "{w}");
        assert_eq!(
            check(slightly_out, "slightly negative").verdict,
            Err(Refusal::Margin),
            "{w}"
        );
        // lipfp's own boundary: never past the exact one, and close to it
        let refuses = |e: f64| {
            certify(&mb, Mode::Standard, &logits, x_norm, e)
                .verdict
                .is_err()
        };
        let (l_ok, _) = bisect(0.0, e_neg, refuses);
        assert!(
            l_ok <= e_pos,
            "{w}: lipfp certifies past the exact boundary"
        );
        assert!(
            l_ok >= e_pos * (1.0 - 1e-9),
            "{w}: lipfp boundary {l_ok:e} vs exact {e_pos:e}"
        );
    }
}

#[test]
fn real_slack_is_a_tight_lower_bound_and_the_verdict_flips_at_the_exact_boundary() {
    for case in all_cases() {
        let (mb, nr) = (case.bounds(), case.reference());
        let logits = logits_for(&case, &nr, 1.25);
        let w = &case.label;
        let check = |eps: f64| -> PointResult {
            let ex = nr.real(&logits, eps);
            let got = certify(&mb, Mode::Real, &logits, 1.25, eps);
            let slack = got.slack.unwrap();
            check_lower(
                &format!("{w} real eps={eps:e}"),
                slack,
                &ex.slack,
                &ex.scale,
            );
            assert_eq!(got.verdict.is_ok(), slack > 0.0, "{w}");
            assert_eq!(got.degradation.unwrap().0, 0.0);
            // the reported sum of L_ij eps over the competing classes
            let i = argmax(&logits);
            let want: f64 = (0..mb.classes)
                .filter(|&j| j != i)
                .map(|j| mb.pair(i, j).lip * eps)
                .sum();
            let leps = got.degradation.unwrap().1;
            assert!(
                leps >= want * (1.0 - 1e-12) && leps <= want * (1.0 + 1e-12),
                "{w}: L eps sum {leps} vs {want}"
            );
            got
        };
        for eps in [0.0, 1e-3, 0.1] {
            check(eps);
        }
        let mut hi = 0.125;
        while nr.real(&logits, hi).slack.lo > 0 {
            hi *= 2.0;
        }
        let (e_pos, e_neg) = bisect(0.0, hi, |e| nr.real(&logits, e).slack.lo <= 0);
        for k in 1..=40 {
            check(e_pos * k as f64 / 29.0);
        }
        assert_eq!(check(e_neg).verdict, Err(Refusal::Margin), "{w}");
        check(e_pos);
        assert_eq!(check(e_pos * (1.0 - 1e-9)).verdict, Ok(()), "{w}");
        assert_eq!(
            check(e_neg * (1.0 + 1e-9)).verdict,
            Err(Refusal::Margin),
            "{w}"
        );
    }
}

/// Nets whose overflow condition binds first at layer 1, 2 and 3 respectively.
fn overflow_nets(f: Format) -> Vec<(DenseNet, usize)> {
    let b3: &[&[f64]] = &[&[0.5, -0.25, 0.1, 0.3], &[0.2, -0.7]];
    let b4: &[&[f64]] = &[
        &[0.1, -0.2, 0.3, 0.05, -0.15],
        &[0.01, 0.02, -0.03, 0.5, 0.25],
        &[0.125, -0.0625, 0.3],
    ];
    vec![
        (generated(f, &[3, 4, 2], &[4.0, 0.0625], b3), 1),
        (generated(f, &[4, 5, 5, 3], &[1.0, 4.0, 0.0625], b4), 2),
        (generated(f, &[4, 5, 5, 3], &[1.0, 1.0, 4.0], b4), 3),
        (net_c(f), 2),
    ]
}

#[test]
fn overflow_refusal_matches_the_exact_condition_at_the_boundary() {
    for format in Format::ALL {
        for ftz in [false, true] {
            for (k, (net, layer)) in overflow_nets(format).into_iter().enumerate() {
                let w = format!("{format} ftz={ftz} overflow net {k}");
                let norms = norms_for(&net, false);
                let mb = ModelBounds::new(
                    &net,
                    &norms,
                    &ExecutionModel::deployed(format, None, ftz).unwrap(),
                );
                let nr = reference(&net, &norms, format, None, ftz);
                let exact_fails = |r: f64| nr.chain(&Iv::of(r)).is_err();
                let mut hi = 1.0;
                while !exact_fails(hi) {
                    assert!(hi < f64::MAX, "{w}: no overflow below f64::MAX");
                    hi = (hi * 16.0).min(f64::MAX);
                }
                // adjacent f64 input radii: the exact conditions hold at r_ok and fail at r_fail
                let (r_ok, r_fail) = bisect(0.0, hi, exact_fails);
                assert_eq!(nr.chain(&Iv::of(r_fail)).err(), Some(layer), "{w}");
                assert!(nr.chain(&Iv::of(r_ok)).is_ok());
                // lipfp refuses where the exact condition fails, at the same layer
                assert_eq!(
                    mb.hidden_chain(r_fail),
                    Err(Refusal::Overflow(layer)),
                    "{w}"
                );
                assert_eq!(
                    mb.deviation_profile(r_fail).err(),
                    Some(Refusal::Overflow(layer)),
                    "{w}"
                );
                // lipfp's boundary: wherever lipfp passes, the exact condition holds
                let (l_ok, l_fail) = bisect(0.0, r_fail, |r| mb.hidden_chain(r).is_err());
                assert!(!exact_fails(l_ok), "{w}: lipfp passes at {l_ok:e}");
                assert!(l_ok <= r_ok);
                let refused_at = mb.hidden_chain(l_fail).unwrap_err();
                let tight = l_ok >= r_ok * (1.0 - 1e-12);
                if format == Format::Float64 && !tight {
                    // Near F_max = f64::MAX an exact radius past f64::MAX rounds to +inf in
                    // lipfp's f64 steps, which refuses (conservatively) at the next layer.
                    // Pin that this is the only reason: at lipfp's first refused radius the
                    // exact conditions all hold and the exact `r + D` entering the refusing
                    // layer is within a rounding step of f64::MAX.
                    let Refusal::Overflow(l) = refused_at else {
                        panic!("{w}: {refused_at:?}")
                    };
                    assert!(l > layer, "{w}: {refused_at:?}");
                    let (rs, ds) = nr.chain(&Iv::of(l_fail)).unwrap();
                    let entering = rs[l - 1].add(&ds[l - 1]);
                    let near_max = q(f64::MAX) * (Rational::from(1) - rel_tol());
                    assert!(
                        entering.hi >= near_max,
                        "{w}: conservative for another reason"
                    );
                    continue;
                }
                assert_eq!(refused_at, Refusal::Overflow(layer), "{w}");
                assert!(tight, "{w}: lipfp boundary {l_ok:e}, exact {r_ok:e}");
            }
        }
    }
}

#[test]
fn standard_refuses_with_the_exact_overflow_layer_at_the_centre_and_over_the_ball() {
    for ftz in [false, true] {
        for (k, (net, layer)) in overflow_nets(Format::Float16).into_iter().enumerate() {
            let w = format!("float16 ftz={ftz} overflow net {k}");
            let norms = norms_for(&net, true);
            let mb = ModelBounds::new(
                &net,
                &norms,
                &ExecutionModel::deployed(Format::Float16, None, ftz).unwrap(),
            );
            let nr = reference(&net, &norms, Format::Float16, None, ftz);
            let exact_fails = |r: f64| nr.chain(&Iv::of(r)).is_err();
            let (r_ok, r_fail) = bisect(0.0, 65504.0, exact_fails);
            // float16 values
            let mut logits = vec![1.0; nr.classes];
            logits[0] = 30000.0;
            // the centre itself is past the boundary
            assert_eq!(nr.standard(&logits, r_fail, 0.0).err(), Some(layer), "{w}");
            let got = certify(&mb, Mode::Standard, &logits, r_fail, 0.0);
            assert_eq!(got.verdict, Err(Refusal::Overflow(layer)), "{w} centre");
            assert_eq!(got.slack, None);
            // the centre is inside, the ball reaches past the boundary
            let x_norm = r_ok / 2.0;
            let eps = r_fail - x_norm;
            assert!(q(x_norm) + q(eps) >= q(r_fail));
            assert_eq!(nr.standard(&logits, x_norm, eps).err(), Some(layer), "{w}");
            let got = certify(&mb, Mode::Standard, &logits, x_norm, eps);
            assert_eq!(got.verdict, Err(Refusal::Overflow(layer)), "{w} ball");
            // the real mode checks no overflow
            assert!(certify(&mb, Mode::Real, &logits, x_norm, eps)
                .slack
                .is_some());
        }
    }
}

/// The directed `f64` steps every bound above is composed of (`lipfp::arith::sound`), one by one
/// against exact rationals: upward steps are upper bounds, downward steps lower bounds, each
/// within two rounding steps (relative `2^-51`, or two subnormal steps near zero). The composed
/// tests above can miss a missing step when a neighbouring step happens to cover it.
#[test]
fn directed_steps_round_toward_the_safe_side() {
    use lipfp::arith::sound::{add_up, l2_norm_up, mul_up, sqrt_up, sub_down};
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut vals = vec![
        0.0,
        1.0,
        2.0,
        3.0,
        0.1,
        f64::MIN_POSITIVE,
        f64::from_bits(1),
        f64::from_bits(3),
        2f64.powi(-600),
    ];
    for _ in 0..3000 {
        let r = next();
        let e = (r % 200) as i32 - 100;
        let m = 1.0 + (r >> 11) as f64 / (1u64 << 53) as f64;
        vals.push(m * 2f64.powi(e));
    }
    vals.extend((2..=2000).map(|k| k as f64));
    let step = pow2(-51);
    // in the subnormal range: half a step of rounding plus the full `next_up` step
    let tiny = pow2(-1073);
    let within_up = |got: f64, exact: &Rational| {
        let g = q(got);
        assert!(
            g >= *exact,
            "not an upper bound: {got:e} < {:e}",
            exact.to_f64()
        );
        g <= exact.clone().abs() * &step + exact + &tiny
    };
    for w in vals.windows(2) {
        let (a, b) = (w[0], w[1]);
        let (qa, qb) = (q(a), q(b));
        let sum = Rational::from(&qa + &qb);
        assert!(within_up(add_up(a, b), &sum), "add_up({a:e}, {b:e})");
        let prod = Rational::from(&qa * &qb);
        assert!(within_up(mul_up(a, b), &prod), "mul_up({a:e}, {b:e})");
        // a lower bound of a - b is minus an upper bound of b - a
        let diff = Rational::from(&qb - &qa);
        assert!(within_up(-sub_down(a, b), &diff), "sub_down({a:e}, {b:e})");
        // sqrt_up(a)^2 >= a, and two steps down it is below sqrt(a)
        let s = sqrt_up(a);
        assert!(Rational::from(q(s).square_ref()) >= qa, "sqrt_up({a:e})");
        if a > 0.0 {
            let below = s.next_down().next_down();
            assert!(
                Rational::from(q(below).square_ref()) < qa,
                "sqrt_up({a:e}) loose"
            );
        }
    }
    // l2_norm_up on short vectors of format values, against the exact enclosure
    for (k, f) in Format::ALL.into_iter().cycle().take(400).enumerate() {
        let len = 1 + k % 8;
        let v: Vec<f64> = (0..len)
            .map(|_| {
                let r = next();
                let x = (r >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0;
                f.round(x * 2f64.powi((r % 7) as i32 - 3))
            })
            .collect();
        let exact = Iv::exact(sum_sq(v.iter().copied())).sqrt();
        check_upper(
            &format!("l2_norm_up {v:?}"),
            l2_norm_up(v.iter().copied()),
            &exact,
        );
    }
}
