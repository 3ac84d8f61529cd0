#!/usr/bin/env python3
"""Probe how onnxruntime's CPU provider actually rounds, to ground lipfp's error model.

Usage:
    python probe_runtime.py [--rows N] [--seed S]

Prints one block per question (exit status 0 unless something crashes):
  a. float16 Gemm / MatMul+Add (K=784, N=10): which rounding model is bit-identical?
  b. float32 Gemm -> Cast(FLOAT16) -> Cast(FLOAT) -> Gemm: is the round trip executed?
  c. float32 Gemm, K=784, bias 1024: bias-after vs bias-first / blocked accumulation.
  d. session.set_denormal_as_zero: effect on subnormal inputs/results (child processes,
     because onnxruntime applies the flag once per process, on the creating thread).
  e. whole float16 MLPs (export_float16.py, with and without --keep-io-types): where
     does onnxruntime round to float16?
  f. does a row's result depend on the batch it is run in?
Exact reference sums are emulated in numpy: float32 FMA via float64 TwoSum + round-to-odd.
Pinned versions (requirements.txt): onnxruntime==1.32.0, onnx==1.23.2, numpy==2.4.6.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import export_float16
import ort_logits

HERE = os.path.dirname(os.path.abspath(__file__))
F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
OPTS = {"default": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


# ---------------------------------------------------------------- model helpers
def model(nodes, inits, in_type, k, out_type, n):
    g = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", in_type, ["B", k])],
                          [helper.make_tensor_value_info("y", out_type, ["B", n])],
                          [numpy_helper.from_array(v, name) for name, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def gemm(w, b, elem=F32):
    """y = x @ w.T + b as one Gemm (transB=1) with initializer weights."""
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)]
    return model(nodes, {"W": w, "b": b}, elem, w.shape[1], elem, w.shape[0])


def matmul_add(w, b, elem):
    nodes = [helper.make_node("MatMul", ["x", "Wt"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    return model(nodes, {"Wt": np.ascontiguousarray(w.T), "b": b}, elem, w.shape[1], elem, w.shape[0])


def run(m, x, opt="default", daz=False, batch=None):
    so = ort.SessionOptions()
    so.graph_optimization_level = OPTS[opt]
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if daz:
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    batch = batch or len(x)
    return np.concatenate([s.run(None, {"x": x[i:i + batch]})[0] for i in range(0, len(x), batch)])


# ---------------------------------------------------------------- reference arithmetic
def fma32(a, b, c):
    """Correctly rounded float32 fma(a, b, c), vectorised (exact product, TwoSum, round-to-odd)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c = c.astype(np.float64)
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    odd = (err != 0) & ((s.view(np.int64) & 1) == 0)
    return np.where(odd, np.nextafter(s, np.copysign(np.inf, err)), s).astype(np.float32)


def chain32(x, w, init, ks):
    """acc = init; acc = fma(x[:, k], w[:, k], acc) for k in ks  (float32, [M, N])."""
    acc = np.broadcast_to(init, (len(x), len(w))).astype(np.float32)
    for k in ks:
        acc = fma32(x[:, k, None], w[None, :, k], acc)
    return acc


def blocked32(x, w, b, block, bias_first=True):
    """MLAS SGEMM order: C = b; C += (fma chain from 0 over each K-block of `block`).
    bias_first=False: the blocks are summed from C = 0 and b is added last."""
    k = x.shape[1]
    c = np.broadcast_to(b if bias_first else np.float32(0), (len(x), len(w))).astype(np.float32)
    for s in range(0, k, block):
        c = c + chain32(x, w, np.float32(0), range(s, min(k, s + block)))
    return c if bias_first else c + b


def exact_once(x, w, b, dtype):
    """Exact x @ w.T + b (math.fsum of float64-exact products) rounded once to dtype."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = [[math.fsum([*(x64[i] * w64[j]), float(b[j])]) for j in range(len(w))] for i in range(len(x))]
    return np.array(y).astype(dtype)


def per_op16(x, w, b, bias_first):
    """float16 arithmetic, every product and sum rounded to float16, sequential over K."""
    acc = np.broadcast_to(b if bias_first else np.float16(0), (len(x), len(w))).astype(np.float16)
    for k in range(x.shape[1]):
        acc = acc + x[:, k, None] * w[None, :, k]
    return acc if bias_first else acc + b


def compare(name, got, ref):
    """Print whether got == ref bitwise (NaN == NaN); else the share of equal entries,
    the largest difference and, for scale, the largest |ref|."""
    both_nan = np.isnan(got) & np.isnan(ref)
    same = bool(np.all((got == ref) | both_nan))
    frac = float(np.mean((got == ref) | both_nan))
    d = np.where(both_nan, 0.0, np.abs(got.astype(np.float64) - ref.astype(np.float64)))
    scale = float(np.nanmax(np.abs(ref[np.isfinite(ref)]))) if np.isfinite(ref).any() else float("nan")
    print(f"    {name:38s} {'IDENTICAL' if same else 'differs'}: {frac:7.2%} equal"
          + ("" if same else f", max|diff| {d.max():.3g} (max|ref| {scale:.3g})"))


# ---------------------------------------------------------------- questions
def probe_a(rng, rows):
    print("a. float16 Gemm / MatMul+Add, K=784, N=10, x~U[0,1), w~N(0,0.05), b~N(0,1), all float16")
    x = rng.random((rows, 784)).astype(np.float16)
    w = (rng.standard_normal((10, 784)) * 0.05).astype(np.float16)
    b = rng.standard_normal(10).astype(np.float16)
    x32, w32, b32 = x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)
    refs = {
        "(i) numpy f32 matmul+b, 1 rounding": ((x32 @ w32.T) + b32).astype(np.float16),
        "(ii) f16 per-op, bias last": per_op16(x, w, b, bias_first=False),
        "(ii') f16 per-op, bias first": per_op16(x, w, b, bias_first=True),
        "exact, rounded once to f16": exact_once(x, w, b, np.float16),
        "f32 packed order (C=b; C+=256-blocks)->f16": blocked32(x32, w32, b32, 256).astype(np.float16),
        "f32 unpacked order (1 block, +b)->f16": blocked32(x32, w32, b32, 1024).astype(np.float16),
    }
    for kind, m in (("Gemm", gemm(w, b, F16)), ("MatMul+Add", matmul_add(w, b, F16))):
        for opt in OPTS:
            print(f"  {kind}, opt={opt}:")
            y = run(m, x, opt)
            for name, ref in refs.items():
                compare(name, y, ref)


def probe_b(rng, rows):
    print("b. float32 Gemm(64->32) -> Cast(FLOAT16) -> Cast(FLOAT) -> Gemm(32->10)")
    w1, b1 = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    w2, b2 = rng.standard_normal((10, 32)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    x[-1] *= 1e4  # hidden values beyond 65504: the float16 round trip turns them into inf
    inits = {"W1": w1, "b1": b1, "W2": w2, "b2": b2}
    g1 = helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1)
    g2 = helper.make_node("Gemm", ["h32", "W2", "b2"], ["y"], transB=1)
    casts = [helper.make_node("Cast", ["h"], ["h16"], to=F16), helper.make_node("Cast", ["h16"], ["h32"], to=F32)]
    ident = [helper.make_node("Identity", ["h"], ["h32"])]
    with_rt, without = (model([g1, *mid, g2], inits, F32, 64, F32, 10) for mid in (casts, ident))
    first = gemm(w1, b1)
    second = model([helper.make_node("Gemm", ["x", "W2", "b2"], ["y"], transB=1)], {"W2": w2, "b2": b2}, F32, 32, F32, 10)
    for opt in OPTS:
        y, y0 = run(with_rt, x, opt), run(without, x, opt)
        hidden = run(first, x, opt)
        with np.errstate(over="ignore"):
            ref = run(second, hidden.astype(np.float16).astype(np.float32), opt)
        print(f"  opt={opt}: rows whose output changes because of the round trip: "
              f"{int(np.any(y != y0, axis=1).sum())}/{rows}; overflow row -> {y[-1, :3]} (without: {y0[-1, :3]})")
        compare("vs ORT layer1 -> numpy f16 -> ORT layer2", y, ref)


def probe_c(rng, rows):
    print("c. float32 Gemm, K=784, N=10, x~U[0,1), w~N(0,0.05), bias=1024 everywhere")
    x = rng.random((rows, 784)).astype(np.float32)
    w = (rng.standard_normal((10, 784)) * 0.05).astype(np.float32)
    b = np.full(10, 1024, np.float32)
    refs = {"numpy bias-after (x@w.T + b)": (x @ w.T) + b,
            "fma chain from 0, then + b": chain32(x, w, np.float32(0), range(784)) + b,
            "fma chain starting at b": chain32(x, w, b, range(784)),
            "exact, rounded once": exact_once(x, w, b, np.float32)}
    for blk in (128, 256, 512, 1024):
        refs[f"C=b; C+=chain(K-block of {blk})"] = blocked32(x, w, b, blk)
    refs_mm = {"blocked256 bias-first (Gemm order)": refs["C=b; C+=chain(K-block of 256)"],
               "blocked256, then + b (bias-after)": blocked32(x, w, b, 256, bias_first=False)}
    for opt in OPTS:
        for batch in (None, 1):
            print(f"  Gemm, opt={opt}, {'batch 1' if batch else f'batch {rows}'}:")
            y = run(gemm(w, b), x, opt, batch=batch)
            for name, ref in refs.items():
                compare(name, y, ref)
        print(f"  MatMul+Add (float32), opt={opt}:")
        y = run(matmul_add(w, b, F32), x, opt)
        for name, ref in refs_mm.items():
            compare(name, y, ref)
    # Each 256-block adds 0.375 ulp(1024) to C = 1024 and is rounded away; summed first
    # (fl(fl(Wz) + b)) the four contributions (1.5 ulp) survive.
    w1 = np.zeros((1, 784), np.float32)
    w1[0, [0, 256, 512, 768]] = 3 * 2.0 ** -16
    x1, b1 = np.ones((2, 784), np.float32), np.full(1, 1024, np.float32)
    exact = 1024 + 12 * 2.0 ** -16
    u, gamma = 2.0 ** -24, 784 * 2.0 ** -24 / (1 - 784 * 2.0 ** -24)
    allowed = gamma * 12 * 2.0 ** -16 + u * (exact + gamma * 12 * 2.0 ** -16)
    print("  adversarial: x=1, w=3*2^-16 at k=0,256,512,768 (else 0), b=1024; exact 1024+1.5 ulp")
    for opt in OPTS:
        y = float(run(gemm(w1, b1), x1, opt)[0, 0])
        print(f"    opt={opt}: ORT {y!r}, error {abs(y - exact):.3g}; "
              f"any fl(fl(Wz)+b) execution errs <= {allowed:.3g} (gamma_784*sum|wz| + u*|y|)")


DAZ_CASES = {  # name: (elem, weight scale, inputs)
    "f32 subnormal x, w=I": (F32, 1.0, [1e-40, -3e-39, 1.4e-45, 1.0]),
    "f32 normal x, w=1e-10*I (subnormal product)": (F32, 1e-10, [1e-30, -2e-29, 1e-28, 1.0]),
    "f16 subnormal x, w=I": (F16, 1.0, [1e-6, -5.96e-8, 3e-5, 1.0]),
}


def daz_child(daz, cli):
    """Run every DAZ case (in a fresh process) and print a JSON dict of outputs.
    daz=2: a session without the flag is created first, then the DAZ sessions."""
    out = {}
    if daz == 2:
        run(gemm(np.eye(4, dtype=np.float32), np.zeros(4, np.float32)), np.zeros((1, 4), np.float32))
    for name, (elem, scale, xs) in DAZ_CASES.items():
        dt = np.float16 if elem == F16 else np.float32
        m = gemm((np.eye(4) * scale).astype(dt), np.zeros(4, dt), elem)
        x = np.array([xs], dt)
        if cli:  # through ort_logits.py (session created and run on a worker thread)
            with tempfile.TemporaryDirectory() as d:
                onnx.save(m, f"{d}/m.onnx")
                np.save(f"{d}/x.npy", x)
                cmd = [sys.executable, f"{HERE}/ort_logits.py", f"{d}/m.onnx", f"{d}/x.npy", f"{d}/y.npy"]
                subprocess.run(cmd + (["--daz"] if daz else []), check=True)
                y = np.load(f"{d}/y.npy")
        else:  # session created and run on the main thread
            y = run(m, x, daz=daz > 0).astype(np.float64)
        out[name] = [float(v) for v in y[0]]
    if not cli:
        out["numpy on main thread afterwards: f32(1e-40)*1"] = float(np.float32(1e-40) * np.float32(1))
    print(json.dumps(out))


def probe_d():
    print("d. session.set_denormal_as_zero (each line: outputs for x; w as stated)")
    labels = {0: "daz off", 1: "daz on", 2: "daz on, but a daz-off session was created first"}
    for cli, daz in ((False, 0), (False, 1), (False, 2), (True, 0), (True, 1)):
        cmd = [sys.executable, os.path.abspath(__file__), "--daz-child", str(daz)] + (["--cli"] if cli else [])
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        print(f"  {'ort_logits.py' if cli else 'in-process, main thread'}, {labels[daz]}:")
        for name, v in res.items():
            print(f"    {name:46s} {v}")


def probe_e(rng, rows):
    print("e. float16 MLP 784-128-128-10 (ReLU) from export_float16.py; x~U[0,1) float32")
    ws = [(rng.standard_normal((o, i)) * (2 / i) ** 0.5).astype(np.float32) for i, o in ((784, 128), (128, 128), (128, 10))]
    bs = [(rng.standard_normal(len(w)) * 0.1).astype(np.float32) for w in ws]

    def mlp(weights, biases, round_trip=False, flatten=False, const=True):
        """784-128-128-10 ReLU MLP; const=False passes weights through Identity nodes, so
        that (like the inserted casts of a float16 model) they are constant-folded and
        prepacked only when optimizations are on."""
        nodes, inits, cur = [], {}, "x"
        if flatten:
            nodes.append(helper.make_node("Flatten", ["x"], ["xf"], axis=1))
            cur = "xf"
        for i, (w, b) in enumerate(zip(weights, biases)):
            inits[f"W{i}"], inits[f"b{i}"] = w, b
            wname = f"W{i}"
            if not const:
                nodes.append(helper.make_node("Identity", [wname], [f"Wi{i}"]))
                wname = f"Wi{i}"
            last = i == len(weights) - 1
            out = "y" if last and not round_trip else f"g{i}"
            nodes.append(helper.make_node("Gemm", [cur, wname, f"b{i}"], [out], transB=1))
            if round_trip:  # explicit float16 rounding after every layer
                nodes += [helper.make_node("Cast", [out], [f"h{i}"], to=F16),
                          helper.make_node("Cast", [f"h{i}"], ["y" if last else f"c{i}"], to=F32)]
                out = f"c{i}"
            if not last:
                nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
                cur = f"r{i}"
        return model(nodes, inits, F32, 784, F32, 10)

    def half(flatten=False, keep_io_types=False):
        return export_float16.convert(mlp(ws, bs, flatten=flatten), keep_io_types)

    w16 = [w.astype(np.float16).astype(np.float32) for w in ws]
    b16 = [b.astype(np.float16).astype(np.float32) for b in bs]
    f32_net = mlp(w16, b16, const=False)  # float32 network with the float16 weights
    per_layer = mlp(w16, b16, round_trip=True, const=False)
    x = rng.random((rows, 784)).astype(np.float32)
    x16 = x.astype(np.float16)
    x16_32 = x16.astype(np.float32)
    for opt in OPTS:
        f32_x16, f32_x = run(f32_net, x16_32, opt), run(f32_net, x, opt)
        print(f"  opt={opt}: float16 model (float16 I/O), ORT output vs:")
        y = run(half(), x16, opt)
        compare("f32 net(f16 x) ->f16 once", y, f32_x16.astype(np.float16))
        compare("f16 rounding after every layer", y, run(per_layer, x16_32, opt).astype(np.float16))
        for flatten in (False, True):
            print(f"  opt={opt}: --keep-io-types model, {'Flatten first' if flatten else 'Gemm first'} "
                  "(float32 I/O), ORT output vs:")
            y = run(half(flatten, True), x, opt)
            compare("f32 net(f32 x), no rounding at all", y, f32_x)
            compare("f32 net(f16 x), output not rounded", y, f32_x16)
            compare("f32 net(f16 x), output rounded to f16", y, f32_x16.astype(np.float16).astype(np.float32))


def probe_f(rng, rows):
    print("f. batch composition: the same rows run as one batch, in batches of 2 and of 1")
    w = (rng.standard_normal((10, 784)) * 0.05).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    x = rng.random((rows, 784)).astype(np.float32)
    for label, m, xin in (("float32 Gemm", gemm(w, b), x),
                          ("float16 Gemm", gemm(w.astype(np.float16), b.astype(np.float16), F16), x.astype(np.float16))):
        for opt in OPTS:
            whole = run(m, xin, opt)
            print(f"  {label}, opt={opt}, vs one batch of {rows}:")
            compare("batches of 2", run(m, xin, opt, batch=2), whole)
            compare("batches of 1", run(m, xin, opt, batch=1), whole)
            with tempfile.TemporaryDirectory() as d:
                onnx.save(m, f"{d}/m.onnx")
                lone = np.concatenate([ort_logits.logits(f"{d}/m.onnx", xin[i:i + 1], opt) for i in range(rows)])
            compare("ort_logits.py, one row per call", lone, whole.astype(np.float64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--daz-child", type=int, choices=(0, 1, 2), help=argparse.SUPPRESS)
    ap.add_argument("--cli", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.daz_child is not None:
        return daz_child(args.daz_child, args.cli)
    rng = np.random.default_rng(args.seed)
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}; rows={args.rows}, seed={args.seed}")
    probe_a(rng, args.rows)
    probe_b(rng, args.rows)
    probe_c(rng, args.rows)
    probe_d()
    probe_e(rng, args.rows)
    probe_f(rng, min(args.rows, 200))


if __name__ == "__main__":
    sys.exit(main())
