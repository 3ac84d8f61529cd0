#!/usr/bin/env python3
"""Validate tensor_core.py bit for bit against the GPU outputs that ship with
github.com/north-numerical-computing/MATLAB-tensor-core (model_validation/<GPU>/<format>/).

usage: validate_tensor_core.py ROOT [--verbose N] [--as-published]
  ROOT: a checkout/extracted snapshot of that repository (or its model_validation directory).
Prints one line per GPU / input format / output format: cases, mismatches (bit patterns of the
float32 words the CUDA harness wrote; a +0/-0 difference counts as a mismatch and is also reported
separately).  Exit status 1 if any modelled combination mismatches.
--as-published: use B200TC.m's fp8 parameters literally (c aligned with the products, RZ) instead of
the late RNE addition of c that the B200 fp8 outputs show.

The data files: a_*.txt / b_*.txt hold one case per line, K operand values as fp32 hex words (already
representable in the operand format); c_*_fp32.txt / d_*.txt hold one fp32 word per line in binary.
As in the repository's Validate_TC_models.m: C is read as fp32 (and rounded RNE to fp16 when D is
fp16, like the harness's __float2half), except for fp8 on H100/H200 where the harness used WGMMA with
a zero accumulator, so C = 0.  fp8 inputs with fp16 output are not covered by the MATLAB models
(10 + e = 0 fraction bits); Ada's are checked with 11-bit RNE fp16 results (tensor_core.py), the
H100/H200/B200 ones are reported as not modelled (no simple block-FMA variant reproduces them).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensor_core as tc  # noqa: E402

GPUS = ["V100", "A100", "A2", "Ada", "L40S", "H100", "H200", "B200"]
FMTS = {"fp16": "float16", "bf16": "bfloat16", "tf32": "tf32", "E4M3": "e4m3", "E5M2": "e5m2"}


def read_hex(path):
    rows = [line.split() for line in open(path) if line.strip()]
    k = len(rows[0])
    words = np.array([int(t, 16) for r in rows for t in r], dtype=np.uint32)
    return words.view(np.float32).astype(np.float64).reshape(len(rows), k)


def read_bin(path):
    words = np.array([int(t, 2) for t in open(path).read().split()], dtype=np.uint32)
    return words


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = argv[1]
    verbose = int(argv[argv.index("--verbose") + 1]) if "--verbose" in argv else 0
    as_published = "--as-published" in argv
    if os.path.isdir(os.path.join(root, "model_validation")):
        root = os.path.join(root, "model_validation")
    total_cases = total_bad = 0
    failed = False
    for gpu in GPUS:
        for fdir, fmt in FMTS.items():
            d = os.path.join(root, gpu, fdir)
            if not os.path.isdir(d):
                continue
            A = read_hex(os.path.join(d, "a_%s_%s.txt" % (gpu, fdir)))
            B = read_hex(os.path.join(d, "b_%s_%s.txt" % (gpu, fdir)))
            Cw = read_bin(os.path.join(d, "c_%s_fp32.txt" % gpu))
            C = Cw.view(np.float32).astype(np.float64)
            for outn, out in (("fp32", "float32"), ("fp16", "float16")):
                dp = os.path.join(d, "d_%s_%s.txt" % (gpu, outn))
                if not os.path.exists(dp):
                    continue
                label = "%-5s %-5s -> %s" % (gpu, fdir, outn)
                try:
                    prm = tc.device_params(gpu, fmt, out)
                except ValueError as exc:
                    print("%s: not modelled (%s)" % (label, exc))
                    continue
                if as_published:
                    prm["late_c"] = None
                D = read_bin(dp)
                n = min(len(D), A.shape[0])
                c = C[:n].copy()
                if fmt in ("e4m3", "e5m2") and gpu in ("H100", "H200"):
                    c[:] = 0.0
                a = tc.convert(A[:n], fmt, "nearest")
                b = tc.convert(B[:n], fmt, "nearest")
                # one dot product per case: evaluate row-wise (a_i . b_i) as diag of a GEMM
                got = _rowwise(a, b, c, prm, out)
                gw = got.astype(np.float32).view(np.uint32)
                bad = gw != D[:n]
                zero_sign = bad & ((gw & 0x7FFFFFFF) == 0) & ((D[:n] & 0x7FFFFFFF) == 0)
                nb = int(bad.sum())
                print("%s: cases %5d, mismatches %d%s   (b=%d, e=%d, final=%s, floor=%d%s)"
                      % (label, n, nb, " (%d are +0/-0)" % zero_sign.sum() if zero_sign.any() else "",
                         prm["b"], prm["e"], prm["final"], prm["align_floor"],
                         ", c added late RNE" if prm.get("late_c") else ""))
                total_cases += n
                total_bad += nb
                failed |= nb > 0
                for i in np.flatnonzero(bad)[:verbose]:
                    print("   case %d: model %08x hw %08x  a=%s b=%s c=%r"
                          % (i, gw[i], D[i], a[i].tolist(), b[i].tolist(), c[i]))
    print("total: cases %d, mismatches %d" % (total_cases, total_bad))
    return 1 if failed else 0


def _rowwise(a, b, c, prm, out):
    """d_i = chained BFMA(c_i, a_i . b_i) for each case i."""
    return tc.block_fma_dot(a, b, c, b=prm["b"], e=prm["e"], final=prm["final"], acc=out,
                            align_floor=prm["align_floor"], in_fmt=prm["in_fmt"],
                            out_p=prm["out_p"], late_c=prm.get("late_c"), rowwise=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
