#!/usr/bin/env python3
"""Self-test of tensor_core.py against an independent exact-rational implementation of the same
specification (fractions.Fraction; alignment and truncation defined on rationals), plus checks of
convert/round_to against numpy's float32/float16 casts and fp32 bit tricks.

Needs only numpy and the standard library, no network; runs in well under 30 s.
Prints "tensor_core selftest: N cases, 0 mismatches" and exits 0, or lists mismatches and exits 1.
"""
import os
import random
import sys
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensor_core as tc  # noqa: E402

INF = float("inf")
FMT = {  # precision, emin, emax (written out again on purpose, not taken from tensor_core)
    "float32": (24, -126, 127), "tf32": (11, -126, 127), "bfloat16": (8, -126, 127),
    "float16": (11, -14, 15), "e4m3": (4, -6, 8), "e5m2": (3, -14, 15),
}


# ------------------------------------------------------------------------------------------------
# Exact reference (Fractions)
# ------------------------------------------------------------------------------------------------
def pow2(k):
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def ilog2(q):
    """floor(log2 q) for a positive Fraction."""
    k = q.numerator.bit_length() - q.denominator.bit_length()
    if pow2(k) > q:
        k -= 1
    return k


def rround(q, fmt_or_p, mode="nearest", overflow="ieee"):
    """Round a Fraction (or +/-INF) to a format; returns Fraction or +/-INF.
    mode: nearest (ties to even) / trunc.  overflow: ieee / inf."""
    if isinstance(q, float):
        return q
    p, emin, emax = FMT[fmt_or_p] if isinstance(fmt_or_p, str) else fmt_or_p
    if q == 0:
        return Fraction(0)
    s = 1 if q > 0 else -1
    a = abs(q)
    k = max(ilog2(a), emin)
    quantum = pow2(k - p + 1)
    m = a / quantum
    n = m.numerator // m.denominator
    if mode == "nearest":
        r = m - n
        if r > Fraction(1, 2) or (r == Fraction(1, 2) and n % 2 == 1):
            n += 1
    res = n * quantum
    maxval = (2 - pow2(1 - p)) * pow2(emax)
    if res > maxval:
        if overflow == "inf" or mode == "nearest":
            return s * INF
        res = maxval
    return s * res


def ftz_(q, fmt):
    if isinstance(q, float) or q == 0:
        return q
    return Fraction(0) if abs(q) < pow2(FMT[fmt][1]) else q


def ref_bfma_step(c, pairs, P):
    """One block FMA per the spec: nominal exponents, alignment to 2^(E-23-e), truncation
    toward zero of each term, exact sum, one final rounding."""
    if isinstance(c, float):  # +/-Inf accumulator: finite products cannot change it
        return c
    terms, exps = [], []
    for a, w in pairs:
        if a == 0 or w == 0:
            continue
        ea = max(ilog2(abs(a)), P["in_emin"])
        ew = max(ilog2(abs(w)), P["in_emin"])
        terms.append(a * w)
        exps.append(ea + ew)
    cin = Fraction(0) if P["late_c"] else c
    if cin != 0:
        terms.append(cin)
        exps.append(max(ilog2(abs(cin)), -126))
    if not terms:
        S = Fraction(0)
    else:
        E = max(max(exps), P["align_floor"])
        u = pow2(E - 23 - P["e"])
        S = sum((int(t / u) for t in terms), 0) * u  # int() truncates toward zero
    outp = (P["out_p"], P["out_emin"], P["out_emax"])
    d = rround(S, outp, P["final"], overflow="inf")
    negz = d == 0 and S < 0  # a non-zero negative sum that rounds to zero is -0; S == 0 is +0
    if P["late_c"]:
        t = d + c if not isinstance(d, float) else d
        d = rround(t, outp, "nearest")
        negz = d == 0 and (t < 0 or (t == 0 and negz and c == 0))
    return d, negz


def ref_tc_dot(avec, wvec, c, P, signed_zero=False):
    """Chained block FMAs; with signed_zero a -0 result is returned as float -0.0."""
    acc, negz = c, False
    b = P["b"]
    for j in range(0, max(1, len(avec)), b):
        acc, negz = ref_bfma_step(acc, list(zip(avec[j:j + b], wvec[j:j + b])), P)
    return -0.0 if (signed_zero and negz) else acc


def ref_ieee_dot(avec, wvec, c, fmt="float32", ftz=False, order=None):
    acc = c
    for k in (range(len(avec)) if order is None else order):
        if isinstance(acc, float):
            continue
        acc = rround(acc + avec[k] * wvec[k], fmt)
        if ftz:
            acc = ftz_(acc, fmt)
    return acc


def ref_gemm(x, W, bias, operand=None, operand_rounding="trunc", device="h100",
             accumulation="tensor_core", bias_position="first", split_k=None,
             reduction="float32", out="float32", acc="float32"):
    N, K = len(x), len(x[0])
    M = len(W)
    if operand is not None:
        x = [[rround(v, operand, operand_rounding) for v in row] for row in x]
        W = [[rround(v, operand, operand_rounding) for v in row] for row in W]
        opf = operand
    else:
        opf = out if out in ("float16", "bfloat16") else "tf32"
    accfmt = acc if accumulation == "tensor_core" else "float32"
    bq = None if bias is None else [rround(v, accfmt) for v in bias]
    if accumulation == "tensor_core":
        P = refP(device, opf, acc)  # only the published constants are shared
    if split_k:
        s = min(split_k, K)
        sizes = [K // s + (1 if i < K % s else 0) for i in range(s)]
    else:
        sizes = [K]
    res = []
    for n in range(N):
        row = []
        for m in range(M):
            first = bq[m] if (bq is not None and bias_position == "first") else Fraction(0)
            tot, k0 = None, 0
            for i, sz in enumerate(sizes):
                a, w = x[n][k0:k0 + sz], W[m][k0:k0 + sz]
                c0 = first if i == 0 else Fraction(0)
                if accumulation == "tensor_core":
                    part = ref_tc_dot(a, w, c0, P)
                else:
                    part = ref_ieee_dot(a, w, c0)
                k0 += sz
                if split_k:
                    part = rround(part, reduction)
                    tot = part if tot is None else (
                        tot if isinstance(tot, float) else rround(tot + part, reduction)
                        if not isinstance(part, float) else part)
                else:
                    tot = part
            y = tot
            if bq is not None and bias_position == "epilogue" and not isinstance(y, float):
                y = rround(y + bq[m], "float32")
            row.append(rround(y, out))
        res.append(row)
    return res


# ------------------------------------------------------------------------------------------------
# Random values exactly representable in a format
# ------------------------------------------------------------------------------------------------
def rand_val(rng, fmt, lo, hi, p_zero=0.05, p_sub=0.05):
    p, emin, _ = FMT[fmt]
    r = rng.random()
    sgn = -1 if rng.random() < 0.5 else 1
    if r < p_zero:
        return Fraction(0)
    if r < p_zero + p_sub:
        m = rng.randint(1, (1 << (p - 1)) - 1)
        return sgn * m * pow2(emin - p + 1)
    m = rng.randint(1 << (p - 1), (1 << p) - 1)
    E = rng.randint(max(lo, emin), hi)
    return sgn * m * pow2(E - p + 1)


def fl(q):
    return q if isinstance(q, float) else float(q)


class Counter:
    def __init__(self):
        self.cases = 0
        self.bad = []

    def check(self, what, got, want, zero_sign=False):
        self.cases += 1
        g = float(got)
        w = fl(want)
        same = (g == w) or (g != g and w != w)
        if same and zero_sign and w == 0 and np.signbit(g) != np.signbit(w):
            same = False
        if not same:
            self.bad.append("%s: got %r want %r" % (what, g, w))


# ------------------------------------------------------------------------------------------------
# Test groups
# ------------------------------------------------------------------------------------------------
def test_round_vs_numpy(C, nrng):
    # random doubles over the float32/float16 ranges incl. subnormal and overflow regions
    e = nrng.integers(-160, 132, 20000)
    x = nrng.random(20000) * 2.0 ** e.astype(float) * np.where(nrng.random(20000) < .5, -1, 1)
    # exact float32 / float16 ties
    f32 = nrng.random(3000).astype(np.float32).astype(np.float64)
    ties32 = f32 + np.ldexp(1.0, np.frexp(f32)[1] - 25)
    h = (nrng.random(3000) * 4).astype(np.float16).astype(np.float64)
    ties16 = h + np.ldexp(1.0, np.maximum(np.frexp(h)[1] - 1, -14) - 11)
    sub16 = np.ldexp(nrng.integers(0, 2048, 3000).astype(float) + 0.5, -25)  # fp16 subnormal ties
    x = np.concatenate([x, ties32, -ties32, ties16, sub16, [0.0, -0.0, np.inf, -np.inf, 65520.0,
                                                           65519.99, 3.5e38, 2.0 ** -150]])
    with np.errstate(all="ignore"):
        want32 = x.astype(np.float32).astype(np.float64)
        want16 = x.astype(np.float16).astype(np.float64)
    for name, got, want in (("round_to f32", tc.round_to(x, "float32"), want32),
                            ("convert f32", tc.convert(x, "float32", "nearest"), want32),
                            ("round_to f16", tc.round_to(x, "float16"), want16),
                            ("convert f16", tc.convert(x, "float16", "nearest"), want16)):
        bad = np.flatnonzero(~((got == want) & (np.signbit(got) == np.signbit(want))))
        C.cases += x.size
        for i in bad[:5]:
            C.bad.append("%s(%r): got %r want %r" % (name, x[i], got[i], want[i]))
        C.cases += 0
        if len(bad) > 5:
            C.bad.append("%s: %d more" % (name, len(bad) - 5))
    # bf16 / tf32 against fp32 bit tricks (fp32 inputs)
    v = want32[np.isfinite(want32)].astype(np.float32)
    u = v.view(np.uint32).astype(np.uint64)
    bf_rne = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    bf_rz = (u & 0xFFFF0000).astype(np.uint32).view(np.float32)
    tf_rne = ((u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000).astype(np.uint32).view(np.float32)
    tf_rz = (u & 0xFFFFE000).astype(np.uint32).view(np.float32)
    vd = v.astype(np.float64)
    for name, got, want in (("bf16 nearest", tc.convert(vd, "bfloat16", "nearest"), bf_rne),
                            ("bf16 trunc", tc.convert(vd, "bfloat16", "trunc"), bf_rz),
                            ("tf32 nearest", tc.convert(vd, "tf32", "nearest"), tf_rne),
                            ("tf32 trunc", tc.convert(vd, "tf32", "trunc"), tf_rz)):
        want = want.astype(np.float64)
        bad = np.flatnonzero(~((got == want) & (np.signbit(got) == np.signbit(want))))
        C.cases += vd.size
        for i in bad[:5]:
            C.bad.append("%s(%r): got %r want %r" % (name, vd[i], got[i], want[i]))
    # convert(trunc) to fp16 / round_to ftz against the rational reference
    for xi in x[:400].tolist() + [65535.0, 1e6, -1e6, 2.0 ** -25, 3 * 2.0 ** -26, 1.5 * 2.0 ** -127,
                                  2.0 ** -126 - 2.0 ** -149, 2.0 ** -126, -2.0 ** -127]:
        if not np.isfinite(xi):
            continue
        C.check("f16 trunc %r" % xi, tc.convert(np.array([xi]), "float16", "trunc")[0],
                rround(Fraction(xi), "float16", "trunc"))
        C.check("f32 ftz %r" % xi, tc.round_to(np.array([xi]), "float32", ftz=True)[0],
                ftz_(rround(Fraction(xi), "float32"), "float32"))


def tc_dot(avec, wvec, c, P, acc="float32"):
    a = np.array([[float(v) for v in avec]])
    w = np.array([[float(v)] for v in wvec])
    return tc.block_fma_dot(a, w, np.array([[float(c)]]), b=P["b"], e=P["e"], final=P["final"],
                            acc=acc, align_floor=P["align_floor"], in_fmt=P["in_fmt"],
                            out_p=P["out_p"], late_c=P["late_c"])[0, 0]


def refP(dev, fmt, out):
    """Published constants (b, e, align_floor, final, late c) from tensor_core; the derived output
    format (precision 24 + min(e, 0) for fp32, 11 for fp16) and input emin are set here."""
    P = tc.device_params(dev, fmt, out)
    p, emin, emax = FMT["float16"] if out == "float16" else (24 + min(P["e"], 0), -126, 127)
    return dict(P, in_emin=FMT[fmt][1], out_p=p, out_emin=emin, out_emax=emax,
                final="trunc" if P["final"] in ("trunc", "rz") else "nearest")


def test_block_random(C, rng):
    combos = [("v100", "float16", "float32"), ("v100", "float16", "float16"),
              ("a100", "float16", "float32"), ("a100", "float16", "float16"),
              ("a100", "bfloat16", "float32"), ("a100", "tf32", "float32"),
              ("h100", "float16", "float32"), ("h100", "float16", "float16"),
              ("h100", "bfloat16", "float32"), ("h100", "tf32", "float32"),
              ("h100", "e4m3", "float32"), ("h100", "e5m2", "float32"),
              ("b200", "e4m3", "float32"), ("b200", "bfloat16", "float32"),
              ("ada", "e5m2", "float16")]
    for dev, fmt, out in combos:
        P = refP(dev, fmt, out)
        p, emin, emax = FMT[fmt]
        for it in range(400):
            K = rng.choice([1, 3, P["b"], P["b"] + 1, 2 * P["b"], 37])
            spread = rng.choice([2, 8, 30])
            top = min(emax, 4) if out == "float16" else min(emax, 20)
            lo = top - spread
            tiny = rng.random() < 0.25
            if tiny:  # tiny operands: subnormal inputs / products near the output's subnormals
                if out == "float16" or fmt in ("float16", "e4m3", "e5m2"):
                    lo, top = emin - 2, emin + 6
                else:
                    lo, top = -80, -66
            avec = [rand_val(rng, fmt, lo, top) for _ in range(K)]
            wvec = [rand_val(rng, fmt, lo, top) for _ in range(K)]
            cf = "float16" if out == "float16" else "float32"
            r = rng.random()
            if r < 0.2:
                c = Fraction(0)
            elif tiny and r < 0.5:
                c = rand_val(rng, cf, FMT[cf][1] - 4, FMT[cf][1] + 4, p_sub=0.4)
            elif r < 0.6:
                c = rand_val(rng, cf, -30 if cf == "float32" else -16, 10)
            else:  # near cancellation with the first product
                c = rround(-(avec[0] * wvec[0]) * (1 + Fraction(rng.randint(-8, 8), 1 << 20)), cf)
            want = ref_tc_dot(avec, wvec, c, P, signed_zero=True)
            got = tc_dot(avec, wvec, c, P, acc=out)
            C.check("%s %s->%s K=%d a=%s w=%s c=%s" % (dev, fmt, out, K, avec, wvec, c),
                    got, want, zero_sign=True)


def test_block_crafted(C):
    P = refP("v100", "float16", "float32")
    one = Fraction(1)
    c = -(1 - pow2(-24))
    got = tc_dot([one], [one], c, P)
    C.check("v100 1*1-(1-2^-24)", got, pow2(-23))
    C.check("v100 ref 1*1-(1-2^-24)", fl(ref_tc_dot([one], [one], c, P)), pow2(-23))
    # Hopper fp8: products aligned with e = -10, result truncated to 14 significant bits
    g = tc.gemm(np.array([[1.75, 1.75]]), np.array([[1.75, 1.75]]), np.array([3 * 2.0 ** -13]),
                device="h100", operand="e4m3")
    P8 = refP("h100", "e4m3", "float32")
    C.check("h100 e4m3 14-bit result", g[0, 0],
            ref_tc_dot([Fraction(7, 4)] * 2, [Fraction(7, 4)] * 2, 3 * pow2(-13), P8))
    C.check("h100 e4m3 14-bit value", g[0, 0], Fraction(49, 8))
    # FMA chains round once: acc + p lands 2^-40 below a float32 tie (double rounding would
    # round to the tie, then to even)
    g = tc.gemm(np.array([[2.0 ** 6 * (1 + 2.0 ** -23)]]), np.array([[1 - 2.0 ** -23]]),
                np.array([2.0 ** 30 + 2.0 ** 7]), accumulation="ieee")
    C.check("ieee fused single rounding", g[0, 0], pow2(30) + pow2(7))
    # the epilogue rounds to float32 first, then to the storage format (double rounding kept)
    g = tc.gemm(np.array([[1 + 2.0 ** -8]]), np.array([[1.0]]), np.array([2.0 ** -30]),
                accumulation="ieee", bias_position="epilogue", out="bfloat16")
    C.check("epilogue fp32 then bf16", g[0, 0], Fraction(1))
    # a negative sum that truncates to zero is -0 (the models negate the zero magnitude)
    P16 = refP("h100", "bfloat16", "float32")
    C.check("-0 from tiny negative", tc_dot([pow2(-75)], [-pow2(-76)], Fraction(0), P16),
            ref_tc_dot([pow2(-75)], [-pow2(-76)], Fraction(0), P16, True), zero_sign=True)
    g = tc.gemm(np.array([[1.0]]), np.array([[1.0]]), np.array([float(c)]), accumulation="ieee")
    C.check("ieee 1*1-(1-2^-24)", g[0, 0], pow2(-24))
    g = tc.gemm(np.array([[1.0]]), np.array([[1.0]]), np.array([float(c)]), device="v100",
                operand="float16")
    C.check("gemm v100 1*1-(1-2^-24)", g[0, 0], pow2(-23))
    # exact cancellation gives +0
    got = tc_dot([Fraction(3)], [Fraction(-1, 4)], Fraction(3, 4), P)
    C.check("+0 result", got, Fraction(0), zero_sign=True)
    for dev, fmt, out in (("h100", "float16", "float16"), ("a100", "float16", "float16"),
                          ("v100", "float16", "float16"), ("h100", "bfloat16", "float32"),
                          ("a100", "tf32", "float32"), ("h100", "tf32", "float32")):
        P = refP(dev, fmt, out)
        p, emin, emax = FMT[fmt]
        pe = FMT[out][0]
        cases = []
        # near-ties of the fp16 output: 1 + (2k+1)/2^11 (+/- tiny)
        for k in range(4):
            for t in (Fraction(0), pow2(-20), -pow2(-20)):
                h = 1 + Fraction(2 * k + 1, 1 << pe)
                cases.append(([h - t if abs(t) > 0 else h, Fraction(1)],
                              [Fraction(1), t if t != 0 else Fraction(0)], Fraction(0)))
        # large bias, small products: products truncated at the bias' alignment
        cases.append(([Fraction(3, 7 * 1024).limit_denominator(1 << 12)] * 4, [Fraction(1, 3)] * 4,
                      Fraction(1 << 10)))
        # subnormal inputs and results
        tiny = pow2(emin - p + 1)
        cases.append(([tiny, 3 * tiny, -tiny], [Fraction(1, 2), Fraction(3, 4), Fraction(1, 8)],
                      Fraction(0)))
        cases.append(([pow2(emin)] * 3, [pow2(emin), -pow2(emin + 1), pow2(emin - 2)],
                      Fraction(0)))
        # fp16 output: the alignment floor decides whether -3*2^-47 is truncated away (tie)
        if out == "float16":
            cases.append(([pow2(-13), 3 * pow2(-24)], [pow2(-12), -pow2(-23)], pow2(-24)))
        # overflow to +Inf (RZ still gives Inf in the models)
        big = pow2(emax) * (2 - pow2(1 - p))
        cases.append(([big, big], [big, big], Fraction(0)))
        for a, w, c in cases:
            a = [rround(v, fmt) for v in a]
            w = [rround(v, fmt) for v in w]
            c = rround(c, "float16" if out == "float16" else "float32")
            want = ref_tc_dot(a, w, c, P, signed_zero=True)
            C.check("crafted %s %s->%s a=%s w=%s c=%s" % (dev, fmt, out, a, w, c),
                    tc_dot(a, w, c, P, acc=out), want, zero_sign=True)
    # c's exponent is clamped at -126 (fp32 subnormal c), products finer than 2^(E-23-e) lost
    P = refP("h100", "bfloat16", "float32")
    for cc in (5 * pow2(-149), -5 * pow2(-149), 3 * pow2(-130), pow2(-126)):
        for ww in (-3 * pow2(-77), 3 * pow2(-77), -pow2(-80)):
            want = ref_tc_dot([pow2(-75)], [ww], cc, P, signed_zero=True)
            C.check("subnormal c %s w %s" % (cc, ww), tc_dot([pow2(-75)], [ww], cc, P), want,
                    zero_sign=True)
    # an exactly-zero or fully truncated sum is +0, also from c = -0
    for dev, fmt in (("h100", "bfloat16"), ("v100", "float16")):
        P = refP(dev, fmt, "float32")
        a = np.array([[2.0 ** -100 if fmt == "bfloat16" else 2.0 ** -24]])
        w = np.array([[-2.0 ** -100 if fmt == "bfloat16" else -2.0 ** -24]])
        r = tc.block_fma_dot(a, w, np.array([[-0.0]]), b=P["b"], e=P["e"], final=P["final"],
                             align_floor=P["align_floor"], in_fmt=fmt)[0, 0]
        want = ref_tc_dot([Fraction(a[0, 0])], [Fraction(w[0, 0])], Fraction(0), P, True)
        C.check("+0 from c=-0 %s" % dev, r, want, zero_sign=True)
    # NaN / Inf propagation (GEMM.m semantics)
    a = np.array([[np.inf, 1.0], [np.inf, np.inf], [1.0, 2.0]])
    w = np.array([[1.0], [-1.0]])
    r = tc.block_fma_dot(a, w, np.array([[0.0], [0.0], [np.nan]]), b=4, e=0)
    C.check("inf", r[0, 0], INF)
    C.check("inf-inf", r[1, 0], float("nan"))
    C.check("nan c", r[2, 0], float("nan"))


def test_gemm(C, rng, nrng):
    configs = [
        dict(device="h100", operand="float16", operand_rounding="nearest", out="float16"),
        dict(device="h100", operand="bfloat16", operand_rounding="nearest", out="bfloat16",
             bias_position="epilogue"),
        dict(device="a100", operand="tf32", split_k=3, reduction="float32"),
        dict(device="v100", operand="float16", operand_rounding="nearest", split_k=2,
             reduction="float16", out="float16", bias_position="epilogue"),
        dict(device="b200", operand="float16", operand_rounding="nearest", split_k=4,
             reduction="bfloat16", out="float32"),
        dict(device="h100", operand="float16", operand_rounding="nearest", out="float16",
             acc="float16"),
        dict(device="h100", operand="e4m3", operand_rounding="nearest"),
        dict(device="b200", operand="e5m2", operand_rounding="nearest", out="float16"),
        dict(accumulation="ieee", bias_position="first"),
        dict(accumulation="ieee", bias_position="epilogue", split_k=5, reduction="float16",
             out="float16"),
    ]
    for cfg in configs:
        for K in (5, 33, 130):
            N, M = 3, 4
            x = (nrng.standard_normal((N, K)) * 2.0 ** nrng.integers(-6, 3, (N, K)))
            if cfg.get("operand") is None:
                x = x.astype(np.float32).astype(np.float64)
            W = nrng.standard_normal((M, K)) * 2.0 ** nrng.integers(-8, 1, (M, K))
            if cfg.get("operand") is None:
                W = W.astype(np.float32).astype(np.float64)
            bias = nrng.standard_normal(M) * rng.choice([1e-3, 1.0, 300.0])
            got = tc.gemm(x, W, bias, **cfg)
            want = ref_gemm([[Fraction(v) for v in r] for r in x.tolist()],
                            [[Fraction(v) for v in r] for r in W.tolist()],
                            [Fraction(v) for v in bias.tolist()], **cfg)
            for n in range(N):
                for m in range(M):
                    C.check("gemm %s K=%d [%d,%d]" % (cfg, K, n, m), got[n, m], want[n][m])
    # forward: 2-layer net vs per-layer reference
    W1 = nrng.standard_normal((4, 20)) * 0.3
    W2 = nrng.standard_normal((3, 4))
    b1, b2 = nrng.standard_normal(4) * 0.1, nrng.standard_normal(3) * 0.1
    X = nrng.random((3, 20))
    cfg = dict(device="a100", operand="float16", operand_rounding="nearest", out="float16")
    got = tc.forward([W1, W2], [b1, b2], X, **cfg)
    h = [[rround(Fraction(v), "float16") for v in r] for r in X.tolist()]
    h = ref_gemm(h, [[Fraction(v) for v in r] for r in W1.tolist()],
                 [Fraction(v) for v in b1.tolist()], **cfg)
    h = [[max(v, Fraction(0)) for v in r] for r in h]
    want = ref_gemm(h, [[Fraction(v) for v in r] for r in W2.tolist()],
                    [Fraction(v) for v in b2.tolist()], **cfg)
    for n in range(3):
        for m in range(3):
            C.check("forward [%d,%d]" % (n, m), got[n, m], want[n][m])


def test_cpu_paths(C, nrng):
    for K in (7, 40):
        x = nrng.standard_normal((2, K))
        W = nrng.standard_normal((3, K)) * 0.5
        bias = nrng.standard_normal(3)
        # ARM fp16 HalfGemm: fp16 FMA chain from the bias
        got = tc.arm_fp16_gemm(x, W, bias)
        for n in range(2):
            for m in range(3):
                a = [rround(Fraction(v), "float16") for v in x[n]]
                w = [rround(Fraction(v), "float16") for v in W[m]]
                want = ref_ieee_dot(a, w, rround(Fraction(bias[m]), "float16"), "float16")
                C.check("arm fp16 K=%d" % K, got[n, m], want)
        # OpenVINO bf16: AVX512 pair order (odd, even) and AMX even/odd lanes; DAZ/FTZ
        xs = x.copy()
        xs[0, 0] = 1e-39  # fp32 subnormal input: treated as zero
        for kern in ("avx512", "amx"):
            got = tc.openvino_bf16_gemm(xs, W, bias, kernel=kern, tile_k=8)
            for n in range(2):
                for m in range(3):
                    def bf(v):
                        q = rround(Fraction(v), "bfloat16")
                        return ftz_(q, "bfloat16")
                    a = [bf(v) for v in xs[n]] + ([Fraction(0)] if K % 2 else [])
                    w = [bf(v) for v in W[m]] + ([Fraction(0)] if K % 2 else [])
                    Kp = len(a)
                    if kern == "avx512":
                        order = [k for j in range(Kp // 2) for k in (2 * j + 1, 2 * j)]
                        acc = ref_ieee_dot(a, w, Fraction(0), "float32", ftz=True, order=order)
                    else:
                        acc = Fraction(0)
                        for t0 in range(0, Kp, 8):
                            ev = ref_ieee_dot(a, w, Fraction(0), "float32", True,
                                              list(range(t0, min(Kp, t0 + 8), 2)))
                            od = ref_ieee_dot(a, w, Fraction(0), "float32", True,
                                              list(range(t0 + 1, min(Kp, t0 + 8), 2)))
                            acc = ftz_(rround(acc + ftz_(rround(ev + od, "float32"), "float32"),
                                              "float32"), "float32")
                    want = ftz_(rround(acc + rround(Fraction(bias[m]), "float32"), "float32"),
                                "float32")
                    C.check("openvino %s K=%d" % (kern, K), got[n, m], want)


def main():
    rng = random.Random(20240607)
    nrng = np.random.default_rng(7)
    C = Counter()
    test_round_vs_numpy(C, nrng)
    test_block_random(C, rng)
    test_block_crafted(C)
    test_gemm(C, rng, nrng)
    test_cpu_paths(C, nrng)
    for line in C.bad[:30]:
        print("MISMATCH", line)
    print("tensor_core selftest: %d cases, %d mismatches" % (C.cases, len(C.bad)))
    return 0 if not C.bad else 1


if __name__ == "__main__":
    sys.exit(main())
