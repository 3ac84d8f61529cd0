"""Bit-accurate CPU emulation of NVIDIA tensor-core GEMM arithmetic (test tooling).

This ports the *behaviour* of the MATLAB models of Khattak & Mikaitis, "Accurate models of
NVIDIA tensor cores" (arXiv 2512.07004; github.com/north-numerical-computing/MATLAB-tensor-core,
models/tools/Generic_BFMA_TC.m and models/*TC.m) to vectorised numpy.  It is not product code.

The block FMA (one tensor-core step, ``d = BFMA(c, a_1*b_1 .. a_b*b_b)``), as the models compute it:

1. Zero products (a_i == 0 or b_i == 0) are dropped; if nothing is left and c == 0 the result is +0.
2. Each operand x gets the *nominal* exponent ``max(floor(log2|x|), emin_in)`` (emin_in of the
   operand format: fp16 -14, bf16/tf32 -126, e4m3 -6, e5m2 -14; subnormals keep emin_in).
   A product's nominal exponent is the sum of its operands' (products are exact and NOT
   renormalised: a significand product in [2,4) keeps the smaller exponent).  The accumulator c
   (an fp32 value, or an fp16 value in fp16-output mode) has exponent ``max(floor(log2|c|), -126)``
   and takes part in the alignment only when c != 0.
3. ``E = max(nominal exponents)``, then ``E = max(E, align_floor)`` (device constant).
4. Every term t (products and c) is truncated toward zero (sign-magnitude, no sticky bit) to the grid
   ``u = 2^(E - 23 - e)``: ``q = trunc(t / u)``.  e = number of extra alignment bits (may be negative:
   Hopper/Ada fp8, e = -10).
5. ``S = u * sum(q)`` (exact), normalised, then rounded ONCE to the output: fp32 output is truncated
   (RZ) to ``24 + min(e, 0)`` significant bits with gradual underflow (subnormal results truncated
   to multiples of 2^(-126-23-min(e,0))); fp16 output (fp16 A/B with fp16 C/D) is rounded to nearest
   even to binary16 (subnormals included).  An exactly-zero S gives +0; a negative S that rounds
   to zero gives -0.  A result whose exponent reaches emax+1 (after rounding) is +/-Inf (the
   models do not saturate, also under RZ; they test only for exponent == emax+1, we use >=).
   B200 fp8 only: the step reduces the products with c = 0 and then adds c with one RNE fp32
   addition (what the B200 fp8 outputs show; B200TC.m itself aligns c with the products).
6. A K-long dot product is the chain of ceil(K/b) such steps over consecutive b-wide slices of K
   (the last one zero-padded), each step's output being the next step's c; the first c is the
   C/bias input (rounded RNE to the accumulator format first, as the models do with CPFloat).
   NaN in any input, Inf*0, or +Inf and -Inf together give NaN; otherwise an infinite input gives
   that infinity (GEMM.m).

Other fast paths (not tensor cores): sequential IEEE fp32 FMA chain ("ieee"), ARM64 MLAS fp16
HalfGemm (fp16 FMA chain), oneDNN/OpenVINO bf16 (AVX512_BF16 VDPBF16PS pairs, AMX TDPBF16PS tiles).
Fused multiply-adds are emulated exactly: the exact float64 sum is rounded to odd (TwoSum +
nextafter) and then rounded once to the target format, which is exact for any target with at most
51 significant bits.  All operand values must be representable in float32 (products exact in float64).
"""

import numpy as np

__all__ = [
    "DEVICES", "EXTRA_DEVICES", "DEVICE_ALIASES", "FORMATS", "device_params", "convert", "round_to",
    "block_fma_dot", "gemm", "forward", "arm_fp16_gemm", "openvino_bf16_gemm", "ieee_fma_round",
]

# ----------------------------------------------------------------------------------------------
# Formats: (precision p incl. hidden bit, emin, emax)
# ----------------------------------------------------------------------------------------------
FORMATS = {
    "float64": (53, -1022, 1023),
    "float32": (24, -126, 127),
    "tf32": (11, -126, 127),
    "bfloat16": (8, -126, 127),
    "float16": (11, -14, 15),
    "e5m2": (3, -14, 15),
    "e4m3": (4, -6, 8),  # OCP E4M3: no infinities, max finite 448 (1.75 * 2^8)
}
_ALIASES = {
    "fp64": "float64", "binary64": "float64", "double": "float64",
    "fp32": "float32", "binary32": "float32", "single": "float32",
    "tensorfloat32": "tf32", "bf16": "bfloat16",
    "fp16": "float16", "binary16": "float16", "half": "float16",
    "fp8-e5m2": "e5m2", "E5M2": "e5m2", "fp8-e4m3": "e4m3", "E4M3": "e4m3",
}


def _fmt(name):
    name = _ALIASES.get(name, name)
    if name not in FORMATS:
        raise ValueError("unknown format %r" % (name,))
    return name


def _maxval(fmt):
    p, _, emax = FORMATS[fmt]
    if fmt == "e4m3":
        return 448.0
    return (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax


# ----------------------------------------------------------------------------------------------
# Device parameters, from models/V100TC.m, A100TC.m, AdaTC.m, L40STC.m, H100TC.m, B200TC.m.
#   b: products per block FMA ("fma"); e: extra alignment bits ("neab");
#   final: rounding of the fp32 result ("rz" -> "trunc");
#   align_floor: "min_exp_limit" (lower clamp of the alignment exponent) for fp32 output;
#   fp16_out: parameters when A/B are fp16 and C/D are fp16 (final RNE, other clamp).
# ----------------------------------------------------------------------------------------------
def _p(b, e, floor, fp16_floor=None, late_c=None):
    d = {"b": b, "e": e, "final": "trunc", "align_floor": floor, "late_c": late_c}
    if fp16_floor is not None:
        d["fp16_out"] = {"final": "nearest", "align_floor": fp16_floor}
    return d


DEVICES = {
    "v100": {"float16": _p(4, 0, -1024, -19)},
    "a100": {"float16": _p(8, 1, -132, -20), "bfloat16": _p(8, 1, -132), "tf32": _p(4, 1, -132)},
    "h100": {"float16": _p(16, 2, -133, -21), "bfloat16": _p(16, 2, -133), "tf32": _p(8, 2, -133),
             # fp8: the model joins two 16-element vectors in one 32-term step, with e = -10 (i.e.
             # products truncated to 13 fraction bits) and a 14-bit (13 fraction bits) RZ result.
             "e4m3": _p(32, -10, -133), "e5m2": _p(32, -10, -133)},
    "b200": {"float16": _p(16, 2, -133, -21), "bfloat16": _p(16, 2, -133), "tf32": _p(8, 2, -133),
             # fp8: B200TC.m aligns c with the 32 products and truncates (b=32, e=2, RZ), but the
             # B200 outputs published with it match RN32(RZ32(sum of the 32 products) + c) instead
             # (10,000 of 10,000; B200TC.m: 3,557 mismatches), so c is added late, RNE.
             "e4m3": _p(32, 2, -133, late_c="nearest"), "e5m2": _p(32, 2, -133, late_c="nearest")},
}
# Other models of the MATLAB repository, used by validate_tensor_core.py.
EXTRA_DEVICES = {
    # Ada Lovelace (AdaTC.m / L40STC.m): A100-like, fp8 in 16-term steps with e = -10.
    "ada": {"float16": _p(8, 1, -132, -20), "bfloat16": _p(8, 1, -132), "tf32": _p(4, 1, -132),
            "e4m3": _p(16, -10, -132, -20), "e5m2": _p(16, -10, -132, -20)},
}
# Models that the MATLAB repository maps onto another one (H200TC.m calls H100TC, A2TC/A30TC call
# A100TC, L40STC has Ada's parameters, RTXPRO6000TC calls B200TC).
DEVICE_ALIASES = {"h200": "h100", "gh200": "h100", "a2": "a100", "a30": "a100", "a40": "a100",
                  "l40s": "ada", "rtx1000": "ada", "rtxpro6000": "b200"}


def device_params(device, fmt, out="float32"):
    """Return dict(b, e, final, align_floor, late_c, in_fmt, out_p, out_emin, out_emax) for one
    device (DEVICES, EXTRA_DEVICES or DEVICE_ALIASES), operand format and output format
    ("float32" or "float16")."""
    dev = DEVICE_ALIASES.get(device.lower(), device.lower())
    fmt = _fmt(fmt)
    table = DEVICES.get(dev) or EXTRA_DEVICES.get(dev) or {}
    if fmt not in table:
        raise ValueError("no tensor-core model for %s with %s operands" % (device, fmt))
    prm = dict(table[fmt])
    out = _fmt(out)
    if out == "float16":
        if "fp16_out" not in prm:
            raise ValueError("%s %s: fp16 output is not modelled" % (device, fmt))
        prm.update(prm["fp16_out"])
        p, emin, emax = FORMATS["float16"]
        # fp16 results keep all 11 bits even where e < 0 (Ada fp8 -> fp16: the MATLAB models'
        # 10 + e fraction bits would be 0; 11 bits match the Ada outputs, 10,000 of 10,000).
        prm.update(out_p=p, out_emin=emin, out_emax=emax)
    elif out == "float32":
        prm.update(out_p=24 + min(prm["e"], 0), out_emin=-126, out_emax=127)
    else:
        raise ValueError("tensor-core accumulator/output must be float32 or float16")
    prm.pop("fp16_out", None)
    prm["in_fmt"] = fmt
    return prm


# ----------------------------------------------------------------------------------------------
# Bit helpers on float64
# ----------------------------------------------------------------------------------------------
_SENT = -12000  # nominal exponent of an absent term (zero product / zero c); 2*_SENT fits int16


def _exp_of(x):
    """floor(log2|x|) for finite non-zero float64 normal x (int64), via the exponent field."""
    bits = np.asarray(x, dtype=np.float64).view(np.int64)
    return ((bits >> 52) & 0x7FF) - 1023


def _pow2(e):
    """2.0**e for integer arrays e in [-1022, 1023] (exact, via the exponent field)."""
    e = np.asarray(e, dtype=np.int64)
    return ((e + 1023) << 52).view(np.float64)


def _round_generic(x, p, emin, emax, mode, overflow="ieee", maxval=None, ftz=False):
    """Round float64 values to a binary format with precision p (incl. hidden bit), exponent range
    [emin, emax], gradual underflow.  mode "nearest" (ties to even) or "trunc" (toward zero).
    overflow: "ieee" (RNE -> Inf, RZ -> max finite), "inf" (always Inf, the tensor-core models),
    "sat" (always max finite).  ftz: results below 2^emin in magnitude become signed zero.
    NaN/Inf/zeros pass through (signs kept)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        _, ex = np.frexp(ax)
        qe = np.maximum(ex.astype(np.int64) - 1, emin) - (p - 1)
        y = np.ldexp(ax, -qe)
        r = np.rint(y) if mode == "nearest" else np.trunc(y)
        res = np.ldexp(r, qe)
        if maxval is None:
            maxval = (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax
        over = res > maxval
        if over.any():
            if overflow == "inf" or (overflow == "ieee" and mode == "nearest"):
                res = np.where(over, np.inf, res)
            else:
                res = np.where(over, maxval, res)
        if ftz:
            res = np.where(res < 2.0 ** emin, 0.0, res)
        res = np.copysign(res, x)
        keep = ~np.isfinite(x) | (x == 0)
        if keep.any():
            res = np.where(keep, x, res)
    return res


def convert(x, fmt, rounding="nearest"):
    """Convert float64 values to `fmt` ("tf32", "bfloat16", "float16", "float32"; also "e4m3",
    "e5m2", "float64").  rounding "nearest" = IEEE round-to-nearest-even, "trunc" = toward zero
    (for tf32 this is what the GPU does with the 13 dropped bits of an fp32 operand).
    Subnormals: gradual underflow (kept, rounded at the subnormal quantum).  Overflow follows IEEE:
    nearest -> +/-Inf, trunc -> +/- largest finite; e4m3 (no Inf) saturates to +/-448 in both modes
    (CUDA's __NV_SATFINITE).  NaN stays NaN, signed zeros are kept.  Returns float64."""
    fmt = _fmt(fmt)
    if rounding not in ("nearest", "trunc"):
        raise ValueError("rounding must be 'nearest' or 'trunc'")
    p, emin, emax = FORMATS[fmt]
    return _round_generic(x, p, emin, emax, rounding,
                          overflow="sat" if fmt == "e4m3" else "ieee", maxval=_maxval(fmt))


def round_to(x, fmt, ftz=False):
    """RNE rounding of float64 values to `fmt` ("float32", "float16", "bfloat16", "tf32",
    "float64"), overflow to Inf, gradual underflow; ftz=True flushes results whose rounded
    magnitude is below the smallest normal to signed zero."""
    fmt = _fmt(fmt)
    if fmt == "float64" and not ftz:
        return np.asarray(x, dtype=np.float64)
    p, emin, emax = FORMATS[fmt]
    return _round_generic(x, p, emin, emax, "nearest", overflow="ieee", maxval=_maxval(fmt),
                          ftz=ftz)


def _daz(x, fmt):
    """Treat subnormal values of `fmt` as (signed) zero."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.abs(x) < 2.0 ** FORMATS[_fmt(fmt)][1], 0.0 * x, x)


# ----------------------------------------------------------------------------------------------
# Exactly rounded fused multiply-add chains (round-to-odd in float64, then one rounding)
# ----------------------------------------------------------------------------------------------
def _round_to_odd_sum(acc, prod):
    """float64 value equal to round-to-odd_53(acc + prod) for float64 acc, prod (no overflow)."""
    s = acc + prod
    bb = s - acc
    err = (acc - (s - bb)) + (prod - bb)
    fix = (err != 0) & ((s.view(np.int64) & 1) == 0)
    if fix.any():
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s


def ieee_fma_round(acc, prod, fmt="float32", ftz=False):
    """RN(acc + prod) to `fmt` where prod is an exact float64 product (a fused multiply-add)."""
    fmt = _fmt(fmt)
    with np.errstate(all="ignore"):
        s = _round_to_odd_sum(np.asarray(acc, np.float64), np.asarray(prod, np.float64))
        s = np.where(np.isfinite(s), s, acc + prod)
    if fmt == "float32" and not ftz:
        with np.errstate(all="ignore"):
            return s.astype(np.float32).astype(np.float64)
    return round_to(s, fmt, ftz=ftz)


# ----------------------------------------------------------------------------------------------
# Tensor-core block FMA
# ----------------------------------------------------------------------------------------------
def _final_round(S, p, emin, emax, final):
    """Round exact float64 sums S to the tensor-core output (overflow -> Inf).  An exactly zero S
    is +0; a negative S that rounds to zero is -0 (as in the models, which negate the magnitude)."""
    S = S + 0.0  # -0 -> +0
    if final == "trunc":
        # RZ to p bits for results in the normal range: clear the low (53 - p) float64 bits.
        mask = np.int64(-(1 << (53 - p)))
        r = (S.view(np.int64) & mask).view(np.float64)
        aS = np.abs(S)
        small = (aS < 2.0 ** emin) & (aS > 0)
        if small.any():
            r = np.where(small, _round_generic(S, p, emin, emax, "trunc", overflow="inf"), r)
        big = aS >= 2.0 ** (emax + 1)
        if big.any():
            r = np.where(big, np.copysign(np.inf, S), r)
        return r
    return _round_generic(S, p, emin, emax, "nearest", overflow="inf")


def _bfma_chain(a, w, c, b, e, in_emin, align_floor, out_p, out_emin, out_emax, final,
                late_c=None, rowwise=False):
    """Core chain.  a [n,K] finite, w [K,M] finite (or [n,K] when rowwise: d_i = a_i . w_i),
    c [n,M] (or [n]) finite accumulator values; returns [n,M] (or [n])."""
    n, K = a.shape
    nb = max(1, -(-K // b))
    pad = nb * b - K
    if pad:
        a = np.concatenate([a, np.zeros((n, pad))], axis=1)
        w = np.concatenate([w, np.zeros((w.shape[0], pad) if rowwise else (pad, w.shape[1]))],
                           axis=1 if rowwise else 0)
    ae = np.where(a != 0, np.maximum(_exp_of(a), in_emin), _SENT).astype(np.int16)
    we = np.where(w != 0, np.maximum(_exp_of(w), in_emin), _SENT).astype(np.int16)
    if rowwise:
        wT, weT = w, we
    else:
        wT = np.ascontiguousarray(w.T)      # [M, K]
        weT = np.ascontiguousarray(we.T)
    shift = 23 + e
    acc = c
    for j in range(nb):
        sl = slice(j * b, (j + 1) * b)
        if rowwise:
            P = a[:, sl] * wT[:, sl]
            E = (ae[:, sl] + weT[:, sl]).max(axis=-1)
        else:
            P = a[:, None, sl] * wT[None, :, sl]                    # [n, M, b], exact
            E = (ae[:, None, sl] + weT[None, :, sl]).max(axis=-1)   # int16 [n, M]
        cin = np.zeros_like(acc) if late_c else acc
        ce = np.where(cin != 0, np.maximum(_exp_of(cin), -126), _SENT)
        Emax = np.maximum(np.maximum(E.astype(np.int64), ce), align_floor)
        Emax = np.clip(Emax, -900, 900)
        scale = _pow2(shift - Emax)                              # 1/u
        with np.errstate(over="ignore", invalid="ignore"):
            q = np.trunc(P * scale[..., None]).sum(axis=-1) + np.trunc(cin * scale)
            S = q * _pow2(Emax - shift)
        d = _final_round(S, out_p, out_emin, out_emax, final)
        if late_c:
            # observed on B200 fp8 (see DEVICES): the product block is reduced with c = 0, then
            # c is added by one IEEE addition rounded to nearest even in the accumulator format.
            with np.errstate(all="ignore"):
                s = _round_to_odd_sum(d, acc)
                s = np.where(np.isfinite(s), s, d + acc)
            d = _round_generic(s, out_p, out_emin, out_emax, "nearest", overflow="ieee")
        acc = d
    return acc


def _special_values(a, w, c):
    """IEEE-like NaN/Inf outcome for rows touching non-finite inputs (GEMM.m semantics)."""
    with np.errstate(all="ignore"):
        s = (a[:, None, :] * w.T[None, :, :]).sum(axis=-1) + c
    return s


def block_fma_dot(a, w, c=None, *, b, e, final="trunc", acc="float32", align_floor=-1024,
                  in_fmt="float32", out_p=None, late_c=None, rowwise=False, chunk_elems=1 << 22):
    """Chained tensor-core block FMA over ceil(K/b) blocks of K, in order.

    a: [N,K], w: [K,M] float64 operand values (already in the operand format); c: [N,M], [M] or None
    initial accumulator (rounded RNE to `acc` first); b, e: block size and extra alignment bits;
    final: "trunc" (RZ, fp32 tensor cores) or "nearest" (RNE); acc: "float32" or "float16"
    (accumulator/output format of every step); align_floor: the model's min_exp_limit (-1024 = no
    clamp); in_fmt: operand format, for the nominal exponent of subnormal operands; out_p: output
    precision override (default: that of `acc`, less max(-e, 0) bits as in the models);
    late_c: None, or "nearest": each block reduces its products with c = 0 and then adds c with
    one RNE addition (B200 fp8, see DEVICES).  rowwise=True: w is [N,K] and the result [N] holds
    the N independent dot products a_i . w_i (c then [N] or None).
    Returns [N,M] float64 holding `acc`-format values."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    w = np.asarray(w, dtype=np.float64)
    accf = _fmt(acc)
    p_acc, emin_acc, emax_acc = FORMATS[accf]
    if out_p is None:
        out_p = p_acc + min(e, 0)
    in_emin = FORMATS[_fmt(in_fmt)][1]
    fin = {"trunc": "trunc", "rz": "trunc", "nearest": "nearest", "rne": "nearest"}[final]
    args = (b, e, in_emin, align_floor, out_p, emin_acc, emax_acc, fin, late_c)
    if rowwise:
        w = np.atleast_2d(w)
        if w.shape != a.shape:
            raise ValueError("rowwise: a %s and w %s differ" % (a.shape, w.shape))
        N = a.shape[0]
        C = np.zeros(N) if c is None else np.broadcast_to(
            round_to(np.asarray(c, dtype=np.float64), accf), (N,)).copy()
        ok = np.isfinite(a).all(axis=1) & np.isfinite(w).all(axis=1) & np.isfinite(C)
        res = _bfma_chain(np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(w), w, 0.0),
                          np.where(np.isfinite(C), C, 0.0), *args, rowwise=True)
        if not ok.all():
            with np.errstate(all="ignore"):
                sp = (a * w).sum(axis=1) + C
            res = np.where(ok, res, sp)
        return res
    if w.ndim == 1:
        w = w[:, None]
    N, K = a.shape
    if w.shape[0] != K:
        raise ValueError("shape mismatch: a %s, w %s" % (a.shape, w.shape))
    M = w.shape[1]
    if c is None:
        C = np.zeros((N, M))
    else:
        C = np.broadcast_to(round_to(np.asarray(c, dtype=np.float64), accf), (N, M))
    out = np.empty((N, M))
    rows = max(1, int(chunk_elems // max(1, M * b)))
    for r0 in range(0, N, rows):
        r1 = min(N, r0 + rows)
        ar, cr = a[r0:r1], np.array(C[r0:r1])
        fin_a = np.isfinite(ar).all(axis=1) & np.isfinite(cr).all(axis=1)
        if fin_a.all() and np.isfinite(w).all():
            out[r0:r1] = _bfma_chain(ar, w, cr, *args)
        else:
            wf = np.where(np.isfinite(w), w, 0.0)
            res = _bfma_chain(np.where(np.isfinite(ar), ar, 0.0), wf,
                              np.where(np.isfinite(cr), cr, 0.0), *args)
            sp = _special_values(ar, w, cr)
            out[r0:r1] = np.where(np.isfinite(sp), res, sp)
    return out


# ----------------------------------------------------------------------------------------------
# Sequential IEEE chains
# ----------------------------------------------------------------------------------------------
def _ieee_chain(a, w, c, fmt="float32", fused=True, ftz=False, order=None):
    """acc <- RN_fmt(acc + a_k*w_k) for k in order (fused), or RN(acc + RN(a_k*w_k)) (unfused)."""
    acc = np.array(c, dtype=np.float64)
    K = a.shape[1]
    for k in (range(K) if order is None else order):
        prod = a[:, k:k + 1] * w[k][None, :]
        if not fused:
            prod = round_to(prod, fmt, ftz=ftz)
        acc = ieee_fma_round(acc, prod, fmt, ftz=ftz)
    return acc


# ----------------------------------------------------------------------------------------------
# GEMM layer and dense ReLU network
# ----------------------------------------------------------------------------------------------
def _split_bounds(K, s):
    s = max(1, min(int(s), K))
    base, extra = divmod(K, s)
    bounds, k0 = [], 0
    for i in range(s):
        k1 = k0 + base + (1 if i < extra else 0)
        bounds.append((k0, k1))
        k0 = k1
    return bounds


def gemm(x, W, bias, *, operand=None, operand_rounding="trunc", device="h100",
         accumulation="tensor_core", bias_position="first", split_k=None, reduction="float32",
         out="float32", ftz=False, acc="float32", ieee_fma=True, chunk_rows=None):
    """One dense layer y = x W^T + bias, emulated.

    x [N,K], W [M,K] (row = output neuron), bias [M] or None, all float64 values.
    operand: None (values used as they are; tensor-core parameters then chosen from `out`:
      float16/bfloat16 storage -> that format, else tf32) or "tf32"/"bfloat16"/"float16"
      ("e4m3"/"e5m2" too): both factors converted first with `operand_rounding`.
    accumulation: "tensor_core" (block FMA, device (b, e) for the operand format) or "ieee"
      (sequential float32 RN chain in K order: fused FMA if ieee_fma, else product rounded first).
    bias_position: "first" (bias is the initial accumulator of the first block / chunk) or
      "epilogue" (fl32(acc + bias), one float32 RN addition after accumulation).
    split_k: None or s: K cut into s contiguous chunks (sizes differ by at most one, larger first),
      each accumulated from 0 (bias only in the first chunk if bias_position == "first"), each
      partial rounded RNE to `reduction` and summed in that format in chunk order (RN), then the
      bias epilogue if any.
    out: final RNE rounding to the storage format.  ftz: operands treated as zero when subnormal in
      the operand/storage format and subnormal results flushed (the tensor-core models themselves
      keep subnormals, ftz=False).  acc: tensor-core accumulator format "float32" (default) or
      "float16" (fp16 C/D: every block step rounds RNE to fp16).
    Returns [N,M] float64 values of `out`."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    N, K = x.shape
    M = W.shape[0]
    if W.shape[1] != K:
        raise ValueError("shape mismatch: x %s, W %s" % (x.shape, W.shape))
    out = _fmt(out)
    acc = _fmt(acc)
    if operand is not None:
        opf = _fmt(operand)
        xa, Wa = convert(x, opf, operand_rounding), convert(W, opf, operand_rounding)
    else:
        opf = out if out in ("float16", "bfloat16") else "tf32"
        xa, Wa = x, W
    if ftz:
        dz = opf if operand is not None else (out if out != "float64" else "float32")
        xa, Wa = _daz(xa, dz), _daz(Wa, dz)
    wT = np.ascontiguousarray(Wa.T)  # [K, M]
    accfmt = acc if accumulation == "tensor_core" else "float32"
    bvec = None
    if bias is not None:
        bvec = round_to(np.asarray(bias, dtype=np.float64).reshape(M), accfmt)
    if bias_position not in ("first", "epilogue"):
        raise ValueError("bias_position must be 'first' or 'epilogue'")
    if accumulation == "tensor_core":
        prm = device_params(device, opf, acc)
    elif accumulation != "ieee":
        raise ValueError("accumulation must be 'tensor_core' or 'ieee'")
    chunks = _split_bounds(K, split_k) if split_k else [(0, K)]
    red = _fmt(reduction)

    def accumulate(a_part, w_part, c0):
        if accumulation == "tensor_core":
            return block_fma_dot(a_part, w_part, c0, b=prm["b"], e=prm["e"], final=prm["final"],
                                 acc=acc, align_floor=prm["align_floor"], in_fmt=prm["in_fmt"],
                                 out_p=prm["out_p"], late_c=prm["late_c"])
        c = np.zeros((a_part.shape[0], w_part.shape[1])) if c0 is None else \
            np.broadcast_to(c0, (a_part.shape[0], w_part.shape[1]))
        return _ieee_chain(a_part, w_part, c, "float32", fused=ieee_fma, ftz=ftz)

    rows = chunk_rows or max(1, int((1 << 24) // max(1, M * 16)))
    res = np.empty((N, M))
    for r0 in range(0, N, rows):
        r1 = min(N, r0 + rows)
        xr = xa[r0:r1]
        first_c = bvec if (bvec is not None and bias_position == "first") else None
        if split_k:
            tot = None
            for i, (k0, k1) in enumerate(chunks):
                part = accumulate(xr[:, k0:k1], wT[k0:k1], first_c if i == 0 else None)
                part = round_to(part, red, ftz=ftz)
                tot = part if tot is None else round_to(tot + part, red, ftz=ftz)
            y = tot
        else:
            y = accumulate(xr, wT, first_c)
        if bvec is not None and bias_position == "epilogue":
            y = round_to(y + bvec, "float32", ftz=ftz)
        res[r0:r1] = round_to(y, out, ftz=ftz)
    return res


def forward(weights, biases, X, **gemm_kwargs):
    """Dense ReLU chain: ReLU after every layer but the last; returns logits [N,C] float64.
    weights[i] is [M_i, K_i] (lipfp's W), biases[i] is [M_i] or None.  X is rounded (RNE) to the
    `out` storage format first and activations stay in that format between layers.
    Rows are processed in chunks (gemm_kwargs may set chunk_rows)."""
    out = gemm_kwargs.get("out", "float32")
    h = round_to(np.atleast_2d(np.asarray(X, dtype=np.float64)), out)
    L = len(weights)
    for i, (W, bb) in enumerate(zip(weights, biases)):
        h = gemm(h, W, bb, **gemm_kwargs)
        if i < L - 1:
            h = np.maximum(h, 0.0)
    return h


# ----------------------------------------------------------------------------------------------
# CPU fast paths
# ----------------------------------------------------------------------------------------------
def arm_fp16_gemm(x, W, bias=None, *, ftz=False):
    """ARM64 onnxruntime MLAS HalfGemm model: operands and bias float16 (rounded RNE here), the
    accumulator is float16 loaded with the bias (0 without), then acc <- RN16(acc + x_k*w_k) as a
    fused fp16 FMA for k = 0..K-1.  Returns float16 values [N,M]."""
    x = round_to(np.atleast_2d(np.asarray(x, np.float64)), "float16")
    W = round_to(np.atleast_2d(np.asarray(W, np.float64)), "float16")
    if ftz:
        x, W = _daz(x, "float16"), _daz(W, "float16")
    N, M = x.shape[0], W.shape[0]
    c = np.zeros((N, M)) if bias is None else \
        np.broadcast_to(round_to(np.asarray(bias, np.float64).reshape(M), "float16"), (N, M))
    return _ieee_chain(x, np.ascontiguousarray(W.T), c, "float16", fused=True, ftz=ftz)


def openvino_bf16_gemm(x, W, bias=None, *, kernel="avx512", bias_position="epilogue",
                       out="float32", tile_k=32):
    """OpenVINO/oneDNN bf16 inference on x86: operands RNE to bfloat16 with input denormals
    treated as zero (VCVTNEPS2BF16 / DAZ), float32 accumulation with RNE and FTZ after every step.
      kernel="avx512": VDPBF16PS, per bf16 pair (2j, 2j+1), in K order:
          acc = FMA(acc, x[2j+1], w[2j+1]); acc = FMA(acc, x[2j], w[2j])   (SDM pseudo-code order)
      kernel="amx": TDPBF16PS over K tiles of `tile_k` bf16 elements: two lane accumulators from 0,
          even = FMA(even, x[2k], w[2k]), odd = FMA(odd, x[2k+1], w[2k+1]) over the tile's pairs,
          then acc = acc + (even + odd) (two RNE/FTZ additions).
    An odd K is padded with a zero product.  bias: "epilogue" fl32(acc + bias) (oneDNN post-op) or
    "first" (initial accumulator).  Returns `out` values [N,M]."""
    x = _daz(convert(np.atleast_2d(np.asarray(x, np.float64)), "bfloat16", "nearest"), "bfloat16")
    W = _daz(convert(np.atleast_2d(np.asarray(W, np.float64)), "bfloat16", "nearest"), "bfloat16")
    N, K = x.shape
    M = W.shape[0]
    if K % 2:
        x = np.concatenate([x, np.zeros((N, 1))], axis=1)
        W = np.concatenate([W, np.zeros((M, 1))], axis=1)
        K += 1
    wT = np.ascontiguousarray(W.T)
    bvec = None if bias is None else _daz(round_to(np.asarray(bias, np.float64).reshape(M),
                                                   "float32"), "float32")
    acc = np.zeros((N, M))
    if bvec is not None and bias_position == "first":
        acc = np.broadcast_to(bvec, (N, M)).copy()

    def fma(c, k):
        return ieee_fma_round(c, x[:, k:k + 1] * wT[k][None, :], "float32", ftz=True)

    if kernel == "avx512":
        for j in range(K // 2):
            acc = fma(acc, 2 * j + 1)
            acc = fma(acc, 2 * j)
    elif kernel == "amx":
        for t0 in range(0, K, tile_k):
            even = np.zeros((N, M))
            odd = np.zeros((N, M))
            for k in range(t0, min(K, t0 + tile_k), 2):
                even = fma(even, k)
                odd = fma(odd, k + 1)
            acc = round_to(acc + round_to(even + odd, "float32", ftz=True), "float32", ftz=True)
    else:
        raise ValueError("kernel must be 'avx512' or 'amx'")
    if bvec is not None and bias_position == "epilogue":
        acc = round_to(acc + bvec, "float32", ftz=True)
    return round_to(acc, out)
