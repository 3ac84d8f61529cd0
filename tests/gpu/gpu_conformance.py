#!/usr/bin/env python3
"""GPU conformance for lipfp's GPU deployment targets (TF32 tensor cores, float16/bfloat16 GEMMs).

Usage (on the GPU machine, from the repository root):
    python3 tests/gpu/gpu_conformance.py [BUNDLE_DIR ...] [--out results.json]
    python3 tests/gpu/gpu_conformance.py --make-demo-bundle DIR [--demo-storage float16]
    python3 tests/gpu/gpu_conformance.py --allow-cpu DIR ...      # dry run on torch's CPU backend

Part 1a  TF32 operand conversion probes (matmul, F.linear, addmm, both operands, two shapes).
Part 2   certified-point conformance of lipfp bundles (bundle format: `gpu_bundle` in tests/oracles/runtime_conformance.rs):
         every row's argmax must be the certified class, and every margin's deviation from the
         exact margin must lie within lipfp's bound, under each torch setting of the bundle.
Part 1b  crafted and random GEMMs on the device compared bit for bit with the numpy emulator
         tests/conformance/tensor_core.py (several configurations), within a time budget.
         Runs last, so that a slow emulator cannot cost the verdict.

Exit status: 0 no class change and no bound violation (and every bundle loaded and ran);
1 a class change, a bound violation or a bundle/setting that could not be checked;
2 bad command line; 3 no CUDA device (or no torch) and --allow-cpu not given.
The last line printed is the verdict line starting with "GPU conformance:".
Needs numpy and torch; nothing is downloaded.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONF_DIR = os.path.normpath(os.path.join(HERE, "..", "conformance"))
STORAGES = ("float32", "float16", "bfloat16")
UNIT = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "tf32": 2.0 ** -11}
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3


def log(*a):
    print(*a, flush=True)


def short_exc(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


# ------------------------------------------------------------------ emulator (optional)
_EMU = None


def load_emulator():
    """Import tests/conformance/tensor_core.py; returns (module, None) or (None, reason)."""
    if CONF_DIR not in sys.path:
        sys.path.insert(0, CONF_DIR)
    try:
        import tensor_core  # noqa: F401  (lives in tests/conformance/)
        if not callable(getattr(tensor_core, "gemm", None)):
            return None, "tensor_core has no gemm()"
        return tensor_core, None
    except Exception as e:  # noqa: BLE001 - any failure means "emulator unavailable"
        return None, short_exc(e)


def _emu_init():
    global _EMU
    _EMU, _ = load_emulator()


def same_values(a, b):
    """Element-wise equality of float64 arrays, NaN == NaN (+0 == -0)."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


def emu_job(job):
    """Worker: run every emulator variant on one GEMM and count mismatches against the device."""
    tc = _EMU
    if tc is None:
        tc, err = load_emulator()
        if tc is None:
            return {"key": job["key"], "error": err}
    x, W, bias, dev = job["x"], job["W"], job["bias"], job["device_out"]
    res = {}
    for vname, kw in job["variants"]:
        t = time.time()
        try:
            ref = np.asarray(tc.gemm(x, W, bias, **kw), dtype=np.float64)
            if ref.shape != dev.shape:
                raise ValueError(f"emulator shape {ref.shape} != device {dev.shape}")
            eq = same_values(ref, dev)
            bad = int((~eq).sum())
            ex = None
            if bad:
                i, j = np.argwhere(~eq)[0]
                ex = {"row": int(i), "col": int(j), "device": float(dev[i, j]).hex(), "emulator": float(ref[i, j]).hex()}
            res[vname] = {"mismatch": bad, "n": int(ref.size), "first": ex, "s": time.time() - t}
        except Exception as e:  # noqa: BLE001 - an unsupported variant is reported, not fatal
            res[vname] = {"error": short_exc(e), "s": time.time() - t}
    return {"key": job["key"], "variants": res}


# ------------------------------------------------------------------ number formats (numpy)
def tf32_convert(v, mode):
    """float32 -> TF32 (10 explicit mantissa bits) by the given mode; returns float64."""
    f = np.asarray(v, dtype=np.float32)
    if mode == "none":
        return f.astype(np.float64)
    b = f.view(np.uint32).astype(np.uint64)
    if mode == "nearest-even":
        b = b + 0xFFF + ((b >> 13) & 1)
    elif mode == "nearest-away":
        b = b + 0x1000
    elif mode != "trunc":
        raise ValueError(mode)
    b = (b & np.uint64(0xFFFFE000)) & np.uint64(0xFFFFFFFF)
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


# ------------------------------------------------------------------ torch helpers
def torch_dtype(torch, name):
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def to_f64(t):
    return t.detach().double().cpu().numpy()  # widening to float64 is exact for all three formats


def read_flags(torch):
    m = torch.backends.cuda.matmul
    out = {}
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                 "allow_fp16_reduced_precision_reduction_split_k", "allow_bf16_reduced_precision_reduction_split_k",
                 "allow_fp16_accumulation"):
        try:
            out[name] = getattr(m, name)
        except Exception as e:  # noqa: BLE001
            out[name] = f"unavailable ({short_exc(e)})"
    return out


def set_flags(torch, tf32=None, fp16_rpr=None, bf16_rpr=None):
    """Set cuBLAS matmul flags (legacy API only: mixing it with fp32_precision makes torch raise)."""
    m = torch.backends.cuda.matmul
    if tf32 is not None:
        m.allow_tf32 = bool(tf32)
    if fp16_rpr is not None:
        m.allow_fp16_reduced_precision_reduction = bool(fp16_rpr)
    if bf16_rpr is not None:
        m.allow_bf16_reduced_precision_reduction = bool(bf16_rpr)
    try:
        m.allow_fp16_accumulation = False  # never accumulate in fp16 (torch >= 2.7)
    except Exception:  # noqa: BLE001
        pass


def mm_f32_out(torch, x, W, bias32):
    """fp16/bf16 inputs, fp32 output (torch.addmm(..., out_dtype=float32), CUDA only)."""
    Wt = W.t()
    if x.device.type != "cuda":
        return torch.addmm(bias32, x.float(), Wt.float()), "cpu-fallback(float32 addmm)"
    try:
        return torch.addmm(bias32, x, Wt, out_dtype=torch.float32), "addmm(out_dtype=float32)"
    except Exception:  # noqa: BLE001 - bias in input dtype, or mm + separate add
        try:
            return torch.addmm(bias32.to(x.dtype), x, Wt, out_dtype=torch.float32), "addmm(bias in input dtype, out_dtype=float32)"
        except Exception:  # noqa: BLE001
            return torch.mm(x, Wt, out_dtype=torch.float32) + bias32, "mm(out_dtype=float32)+bias"


# ------------------------------------------------------------------ Part 1a: TF32 conversion
TF32_PROBES = [1 + 2 ** -12, 1 + 2 ** -11 + 2 ** -13, 1 + 2 ** -11, 1 + 2 ** -10 + 2 ** -11,
               1 + 2 ** -11 + 2 ** -23, 1 + 2 ** -10 + 2 ** -11 - 2 ** -23, 1.5 + 2 ** -11, 1 + 2 ** -23]
TF32_PROBES = TF32_PROBES + [-v for v in TF32_PROBES]
TF32_MODES = ("none", "trunc", "nearest-even", "nearest-away")


def classify_tf32(obs, probes):
    fits = [m for m in TF32_MODES if np.array_equal(obs, tf32_convert(probes, m))]
    if len(fits) == 1:
        return "not-applied" if fits[0] == "none" else fits[0]
    return "ambiguous" if fits else "unknown"


def probe_tf32(torch, dev):
    probes = np.array(TF32_PROBES, dtype=np.float32)
    P = len(probes)
    results = []
    set_flags(torch, tf32=True)
    F = torch.nn.functional
    for (M, K, N) in ((16, 8, 16), (256, 256, 256)):
        for side in ("x", "W"):
            x = np.zeros((M, K), np.float32)
            W = np.zeros((N, K), np.float32)
            if side == "x":
                x[:P, 0] = probes
                W[:, 0] = 1
            else:
                x[:, 0] = 1
                W[:P, 0] = probes
            tx, tW = torch.tensor(x, device=dev), torch.tensor(W, device=dev)
            bias_small = torch.full((N,), 2.0 ** -20, dtype=torch.float32, device=dev)
            ops = {
                "matmul": lambda: (tx @ tW.t(), 0.0),
                "F.linear": lambda: (F.linear(tx, tW), 0.0),
                "F.linear+bias": lambda: (F.linear(tx, tW, bias_small), 2.0 ** -20),
                "addmm(0)": lambda: (torch.addmm(torch.zeros(N, device=dev), tx, tW.t()), 0.0),
                "addmm(2^-20)": lambda: (torch.addmm(bias_small, tx, tW.t()), 2.0 ** -20),
            }
            for name, fn in ops.items():
                try:
                    out, b = fn()
                    o = to_f64(out)
                    obs = (o[:P, 0] if side == "x" else o[0, :P]) - b
                    verdict = classify_tf32(obs, probes)
                    results.append({"shape": [M, K, N], "operand": side, "op": name, "mode": verdict,
                                    "observed_minus_probe": [float(v).hex() for v in obs - probes.astype(np.float64)]})
                except Exception as e:  # noqa: BLE001
                    results.append({"shape": [M, K, N], "operand": side, "op": name, "mode": "error", "error": short_exc(e)})
    modes = sorted({r["mode"] for r in results})
    overall = modes[0] if len(modes) == 1 else "mixed(" + ",".join(modes) + ")"
    return overall, results


# ------------------------------------------------------------------ Part 1b: GEMM paths vs emulator
def crafted_pairs():
    """(a, b) dot products of length 32 whose fp32 result shows alignment, rounding and block size."""
    e = lambda k: 2.0 ** k  # noqa: E731
    cases = [
        ([1 + e(-10), -1], [1 - e(-11), 1]),                         # (1+2^-11-2^-21) - 1: cancellation
        ([1] + [e(-12)] * 15, [1] + [e(-12)] * 15),                  # 1 + 15 * 2^-24
        ([1, e(-12), e(-13)], [1, e(-12), e(-12)]),                  # 1 + 2^-24 + 2^-25
        ([0] * 13 + [e(-13), e(-12), 1], [0] * 13 + [e(-12), e(-12), 1]),  # same, big term last
        ([1, 0, 0, 0] + [e(-12)] * 4, [1, 0, 0, 0] + [e(-12)] * 4),  # small terms in 2nd block of 4
        ([1] + [0] * 7 + [e(-12)] * 8, [1] + [0] * 7 + [e(-12)] * 8),  # 2nd block of 8
        ([1] + [0] * 15 + [e(-12)] * 16, [1] + [0] * 15 + [e(-12)] * 16),  # 2nd block of 16
        ([-1, e(-12), e(-13)], [1, e(-12), e(-12)]),                 # -1 + 2^-24 + 2^-25
        ([1 + e(-10), e(-5)], [1 + e(-10), e(-5)]),                  # exact product 1+2^-9+2^-20, + 2^-10
        ([e(10), e(-10)], [e(10), e(-10)]),                          # 2^20 + 2^-20
        ([1, -1, e(-13)], [1, 1, e(-12)]),                           # 2^-25 after exact cancellation
        ([1, 1 - e(-11)], [1, 1 - e(-11)]),                          # 2 - 2^-10 + 2^-22
        ([1 + e(-10)] * 16, [1 + e(-10)] * 16),                      # 16 equal products
        ([1, e(-12), e(-12), e(-13)], [1, e(-12), e(-13), e(-13)]),  # 1 + 2^-24 + 2^-25 + 2^-26
        ([e(-14)] * 2, [e(-10)] * 2),                                # tiny (fp16 subnormal) products
        ([1, -(1 + e(-10)), e(-11)], [1 + e(-10), 1, e(-13)]),       # cancellation to 2^-24
    ]
    x = np.zeros((64, 32))
    W = np.zeros((64, 32))
    for i, (a, b) in enumerate(cases):
        x[i, :len(a)] = a
        W[i, :len(b)] = b
    return x, W, len(cases)


def gemm_paths():
    """name -> (input storage, flags, output kind, emulator base kwargs, variant axes).
    Operands are generated in (rounded to) the input storage; "tf32" keeps full float32 operands
    so that the emulator's operand conversion (trunc / nearest) is exercised."""
    acc = ("tensor_core", "ieee")
    pos = ("first", "epilogue")
    paths = {
        "tf32": ("float32", dict(tf32=True), "native", dict(operand="tf32", out="float32"),
                 [("operand_rounding", ("trunc", "nearest")), ("accumulation", acc), ("bias_position", pos)]),
        # TF32 as part 1a found it (RNE operands, block FMA, bias in the epilogue), K split into
        # contiguous chunks whose float32 partials are summed (cuBLAS's split-K, COMPUTE_TYPE)
        "tf32_split": ("float32", dict(tf32=True), "native",
                       dict(operand="tf32", operand_rounding="nearest", accumulation="tensor_core",
                            bias_position="epilogue", out="float32"),
                       [("split", (None,) + tuple((s, "float32") for s in (2, 3, 4, 7, 8, 16, 49)))]),
        "fp32": ("float32", dict(tf32=False), "native", dict(out="float32", accumulation="ieee"),
                 [("bias_position", pos)]),
        "fp16": ("float16", dict(fp16_rpr=False), "native", dict(operand="float16", out="float16"),
                 [("accumulation", acc), ("bias_position", pos)]),
        "fp16_rpr": ("float16", dict(fp16_rpr=True), "native", dict(operand="float16", out="float16"),
                     [("accumulation", acc), ("bias_position", pos),
                      ("split", (None, (2, "float16"), (4, "float16"), (8, "float16")))]),
        "bf16": ("bfloat16", dict(bf16_rpr=False), "native", dict(operand="bfloat16", out="bfloat16"),
                 [("accumulation", acc), ("bias_position", pos)]),
        "fp16_to_f32": ("float16", dict(fp16_rpr=False), "f32out", dict(operand="float16", out="float32"),
                        [("accumulation", acc), ("bias_position", pos)]),
        "bf16_to_f32": ("bfloat16", dict(bf16_rpr=False), "f32out", dict(operand="bfloat16", out="float32"),
                        [("accumulation", acc), ("bias_position", pos)]),
    }
    return paths


def expand_variants(base, axes, emu_device):
    combos = [({}, [])]
    for axis, values in axes:
        nxt = []
        for kw, names in combos:
            for v in values:
                k2 = dict(kw)
                if axis == "split":
                    if v is None:
                        nm = "nosplit"
                    else:
                        k2["split_k"], k2["reduction"] = v
                        nm = f"splitk{v[0]}/{v[1]}"
                else:
                    k2[axis] = v
                    nm = {"tensor_core": "tc", "epilogue": "epi"}.get(v, v)
                nxt.append((k2, names + [nm]))
        combos = nxt
    out = []
    for kw, names in combos:
        full = dict(base, device=emu_device, **kw)
        out.append(("/".join(names) or "default", full))
    return out


def run_path(torch, dev, path, x64, W64, b64):
    """Run one GEMM on the device; returns (x, W, bias as the device saw them, float64 output, how)."""
    storage, flags, outkind = path[0], path[1], path[2]
    set_flags(torch, **flags)
    dt = torch_dtype(torch, storage)
    tx = torch.tensor(x64, dtype=dt, device=dev)
    tW = torch.tensor(W64, dtype=dt, device=dev)
    if outkind == "f32out":
        tb = torch.tensor(b64, dtype=torch.float32, device=dev)
        out, how = mm_f32_out(torch, tx, tW, tb)
    else:
        tb = torch.tensor(b64, dtype=dt, device=dev)
        out, how = torch.addmm(tb, tx, tW.t()), "addmm"
    return to_f64(tx), to_f64(tW), to_f64(tb), to_f64(out), how


def random_gemm(rng, K, kind, M=64, N=64):
    if kind == "normal":
        x, W = rng.standard_normal((M, K)), rng.standard_normal((N, K))
        b = rng.standard_normal(N) * math.sqrt(K)
    else:  # wide exponents, random signs: alignment losses are frequent
        f = lambda *s: rng.choice([-1.0, 1.0], s) * np.exp2(rng.uniform(-7, 4, s)) * (1 + rng.random(s))  # noqa: E731
        x, W, b = f(M, K), f(N, K), f(N) * 8
    return x, W, b


def probe_gemms(torch, dev, args, deadline, on_cuda):
    res = {"paths": {}, "crafted_device_values": {}, "notes": []}
    emu, why = load_emulator()
    paths = gemm_paths()
    wanted = [p for p in args.probe_paths.split(",") if p]
    paths = {k: v for k, v in paths.items() if k in wanted}
    variants = {k: expand_variants(v[3], v[4], args.emu_device) for k, v in paths.items()}
    rng = np.random.default_rng(args.seed)
    cx, cW, ncases = crafted_pairs()
    Ks = [int(k) for k in args.probe_ks.split(",") if k]

    # the job list: crafted cases first, then random GEMMs round-robin over (path, K, kind)
    plan = []
    for pname in paths:
        for bias_val in (0.0, 1.0):
            plan.append((pname, "crafted", bias_val, None))
    for r in range(args.probe_gemms):
        for K in Ks:
            for pname in paths:
                plan.append((pname, K, "normal" if r % 2 == 0 else "wide", r))

    stats = {p: {"how": None, "gemms": 0, "device_errors": 0, "variants": {}} for p in paths}
    for pname, path in paths.items():  # crafted device values, for reading by eye even without emulator
        try:
            xs, Ws, bs, out, how = run_path(torch, dev, path, cx, cW, np.zeros(64))
            stats[pname]["how"] = how
            exact = (xs * Ws).sum(axis=1)[:ncases]  # float64 exact for these cases
            res["crafted_device_values"][pname] = [
                {"case": i, "device": float(out[i, i]).hex(), "exact": float(exact[i]).hex(),
                 "device_minus_exact": float(out[i, i] - exact[i])} for i in range(ncases)]
        except Exception as e:  # noqa: BLE001
            res["crafted_device_values"][pname] = f"error: {short_exc(e)}"
        cv = res["crafted_device_values"][pname]
        log(f"  crafted {pname:<11} device-exact: " + (cv if isinstance(cv, str) else
            " ".join("0" if c["device_minus_exact"] == 0 else f"{c['device_minus_exact']:.2g}" for c in cv)))
    if emu is None:
        res["emulator"] = f"unavailable ({why})"
        log(f"  emulator unavailable ({why}); crafted device values recorded only")
        return res
    res["emulator"] = "available"

    nproc = args.emu_workers if args.emu_workers > 0 else max(1, min(15, (os.cpu_count() or 2) - 1))
    pool = None
    if nproc > 1:
        try:
            for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ[v] = "1"
            pool = mp.get_context("spawn").Pool(nproc, initializer=_emu_init)
        except Exception as e:  # noqa: BLE001
            res["notes"].append(f"no worker pool ({short_exc(e)}); serial emulation")
            pool = None
    if pool is None:
        _emu_init()
    done, pending, slow = [], [], {}

    def collect(wait_until=None):
        """Move finished emulations from pending to done; optionally wait for them until wait_until."""
        still = []
        for key, ar in pending:
            if not ar.ready() and wait_until is not None:
                ar.wait(max(0.0, wait_until - time.time()))
            if ar.ready():
                try:
                    d = ar.get(0)
                except Exception as e:  # noqa: BLE001
                    d = {"key": key, "error": short_exc(e)}
                done.append(d)
                if "variants" in d:  # serial cost of one GEMM of this group, for the budget check
                    slow[(key[0], key[1])] = sum(v.get("s", 0) for v in d["variants"].values())
            else:
                still.append((key, ar))
        pending[:] = still

    submitted = 0
    t0 = time.time()
    for item in plan:
        if time.time() >= deadline:
            res["notes"].append(f"emulator budget reached after {submitted} of {len(plan)} planned GEMMs")
            break
        pname, K, kind, r = item
        if slow.get((pname, K), 0) > deadline - time.time():  # one emulation of this group would overrun
            continue
        path = paths[pname]
        try:
            if K == "crafted":
                x64, W64, b64 = cx, cW, np.full(64, kind)
            else:
                x64, W64, b64 = random_gemm(rng, K, kind)
            xs, Ws, bs, out, how = run_path(torch, dev, path, x64, W64, b64)
            stats[pname]["how"] = how
        except Exception as e:  # noqa: BLE001
            stats[pname]["device_errors"] += 1
            stats[pname].setdefault("device_error", short_exc(e))
            continue
        key = (pname, K, kind, r)
        job = {"key": key, "x": xs, "W": Ws, "bias": bs, "device_out": out, "variants": variants[pname]}
        submitted += 1
        if pool is None:
            d = emu_job(job)
            done.append(d)
            if "variants" in d:
                slow[(pname, K)] = sum(v.get("s", 0) for v in d["variants"].values())
        else:
            pending.append((key, pool.apply_async(emu_job, (job,))))
            collect()
            while len(pending) >= 2 * nproc and time.time() < deadline:
                time.sleep(0.005)
                collect()
    if submitted < len(plan) and not res["notes"]:
        res["notes"].append(f"time budget: {submitted} of {len(plan)} planned GEMMs run")
    if pool is not None:
        collect(wait_until=deadline + 5)
        if pending:
            res["notes"].append(f"{len(pending)} emulations unfinished at the deadline (dropped)")
        pool.terminate()
        pool.join()
    res["emulation_wall_s"] = round(time.time() - t0, 1)

    for d in done:
        key = d.get("key")
        if not key:
            continue
        pname, K = key[0], key[1]
        st = stats[pname]
        if "error" in d:
            st.setdefault("job_errors", []).append(d["error"])
            continue
        st["gemms"] += 1
        st.setdefault("by_k", {}).setdefault(str(K), 0)
        st["by_k"][str(K)] += 1
        for vname, v in d["variants"].items():
            agg = st["variants"].setdefault(vname, {"mismatch": 0, "n": 0, "errors": 0, "first": None, "first_k": None})
            if "error" in v:
                agg["errors"] += 1
                agg["error"] = v["error"]
                continue
            agg["mismatch"] += v["mismatch"]
            agg["n"] += v["n"]
            agg.setdefault("mismatch_by_k", {}).setdefault(str(K), 0)
            agg["mismatch_by_k"][str(K)] += v["mismatch"]
            if v["first"] and agg["first"] is None:
                agg["first"], agg["first_k"] = v["first"], str(K)
            if K == "crafted":
                agg["crafted_mismatch"] = agg.get("crafted_mismatch", 0) + v["mismatch"]
    res["paths"] = stats
    return res


def emulator_summary(p1b):
    if not p1b:
        return "not run"
    if p1b.get("emulator", "").startswith("unavailable"):
        return "emulator unavailable"
    parts = []
    for pname, st in p1b.get("paths", {}).items():
        ok = [(v["mismatch"], vn, v["n"]) for vn, v in st["variants"].items() if v["n"] and not v["errors"]]
        if not ok:
            parts.append(f"{pname}=no data" if not st["variants"] else f"{pname}=error")
            continue
        exact = [vn for m, vn, n in ok if m == 0]
        if exact:
            parts.append(f"{pname}={'|'.join(exact)}({ok[0][2]} el)")
        else:
            m, vn, n = min(ok)
            parts.append(f"{pname}=none(best {vn} {m}/{n})")
    return "; ".join(parts) if parts else "no data"


# ------------------------------------------------------------------ Part 2: bundles
class BundleError(Exception):
    pass


def find_bundles(paths):
    found = []
    for p in paths:
        if os.path.isfile(os.path.join(p, "meta.json")):
            found.append(p)
        elif os.path.isdir(p):
            subs = sorted(os.path.join(p, d) for d in os.listdir(p) if os.path.isfile(os.path.join(p, d, "meta.json")))
            found.extend(subs) if subs else found.append(p)
        else:
            found.append(p)  # reported as a load error
    return found


def load_bundle(d):
    try:
        with open(os.path.join(d, "meta.json")) as f:
            meta = json.load(f)
    except Exception as e:  # noqa: BLE001
        raise BundleError(f"meta.json: {short_exc(e)}")
    storage = meta.get("storage")
    if storage not in STORAGES:
        raise BundleError(f"storage {storage!r} not in {STORAGES}")
    L = int(meta.get("layers", 0))
    if L < 1:
        raise BundleError("layers must be >= 1")
    ld = lambda n: np.load(os.path.join(d, n), allow_pickle=False)  # noqa: E731
    try:
        Ws = [np.asarray(ld(f"W{l}.npy"), np.float64) for l in range(L)]
        bs = [np.asarray(ld(f"b{l}.npy"), np.float64).reshape(-1) for l in range(L)]
        X = np.asarray(ld("x.npy"), np.float64)
        cls = np.asarray(ld("cls.npy")).astype(np.int64).reshape(-1)
        margin = np.asarray(ld("margin.npy"), np.float64)
        bound = np.asarray(ld("bound.npy"), np.float64)
    except Exception as e:  # noqa: BLE001
        raise BundleError(f"npy: {short_exc(e)}")
    n = X.shape[1] if X.ndim == 2 else -1
    for l, (W, b) in enumerate(zip(Ws, bs)):
        if W.ndim != 2 or W.shape[1] != n or b.shape[0] != W.shape[0]:
            raise BundleError(f"layer {l}: W {W.shape}, b {b.shape}, input width {n}")
        n = W.shape[0]
    N = X.shape[0]
    if cls.shape != (N,) or margin.shape != (N, n) or bound.shape != (N, n):
        raise BundleError(f"x {X.shape}, cls {cls.shape}, margin {margin.shape}, bound {bound.shape}, classes {n}")
    if N and (cls.min() < 0 or cls.max() >= n):
        raise BundleError("cls out of range")
    settings = meta.get("torch_settings") or []
    if not settings:
        raise BundleError("no torch_settings")
    r = np.arange(N)
    odd = int(((margin[r, cls] != 0) | (bound[r, cls] != 0)).sum()) if N else 0
    if odd:
        log(f"  WARNING {d}: margin/bound at the certified class's column not 0 in {odd} rows")
    return {"dir": d, "name": meta.get("name", os.path.basename(os.path.normpath(d))), "storage": storage,
            "runtime": meta.get("runtime"), "settings": settings, "W": Ws, "b": bs, "x": X, "cls": cls,
            "margin": margin, "bound": bound}


def run_network(torch, dev, bundle, bias_mode, rows, batch):
    dt = torch_dtype(torch, bundle["storage"])
    Ws = [torch.tensor(W, dtype=dt, device=dev) for W in bundle["W"]]
    bs = [torch.tensor(b, dtype=dt, device=dev) for b in bundle["b"]]
    X = torch.tensor(bundle["x"][rows], dtype=dt, device=dev)
    L = len(Ws)
    outs = []
    for s in range(0, X.shape[0], batch):
        z = X[s:s + batch]
        for l in range(L):
            if bias_mode == "addmm":
                z = torch.addmm(bs[l], z, Ws[l].t())
            elif bias_mode == "matmul_add":
                z = z @ Ws[l].t() + bs[l]
            elif bias_mode == "linear":
                z = torch.nn.functional.linear(z, Ws[l], bs[l])
            else:
                raise BundleError(f"bias mode {bias_mode!r} not supported")
            if l < L - 1:
                z = torch.relu(z)
        outs.append(to_f64(z))
    if dev != "cpu":
        torch.cuda.synchronize()
    return np.concatenate(outs, axis=0) if outs else np.zeros((0, bundle["W"][-1].shape[0]))


def check_rows(logits, cls, margin, bound):
    N, C = logits.shape
    r = np.arange(N)
    lc = logits[r, cls]
    other = np.ones((N, C), bool)
    other[r, cls] = False
    cls_bad = ~np.all((lc[:, None] > logits) | ~other, axis=1)  # ties and NaN count as changes
    dev = np.abs((lc[:, None] - logits) - margin)
    claimed = other & ~(bound < 0)  # the Rust writer puts -1 where lipfp claims no bound
    tol = bound * (1 + 1e-12) + 2.0 ** -50 * np.abs(margin)
    viol = claimed & ~(dev <= tol)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, dev / bound, np.where(dev == 0, 0.0, np.inf))
    ratio = np.where(claimed, ratio, 0.0)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    worst = None
    if viol.any():
        i, j = np.argwhere(viol)[0]
        worst = {"row": int(i), "j": int(j), "deviation": float(dev[i, j]), "bound": float(bound[i, j])}
    return {"rows": int(N), "class_changes": int(cls_bad.sum()), "violations": int(viol.any(axis=1).sum()),
            "violating_margins": int(viol.sum()), "max_ratio": float(ratio.max()) if N else 0.0,
            "unclaimed_pairs": int((other & ~claimed).sum()),
            "first_violation": worst, "first_class_change": int(np.argmax(cls_bad)) if cls_bad.any() else None}


def check_bundle(torch, dev, bundle, args):
    out = []
    N = bundle["x"].shape[0]
    dt = torch_dtype(torch, bundle["storage"])
    nonrep = sum(int((to_f64(torch.tensor(a, dtype=dt)) != a).sum()) for a in bundle["W"] + bundle["b"] + [bundle["x"]])
    for st in bundle["settings"]:
        name = st.get("name", "?")
        rec = {"bundle": bundle["name"], "setting": name, "settings": st, "not_representable": nonrep}
        try:
            set_flags(torch, tf32=st.get("tf32", False), fp16_rpr=st.get("fp16_reduced_precision_reduction", False),
                      bf16_rpr=st.get("bf16_reduced_precision_reduction", False))
            rec["flags_read_back"] = read_flags(torch)
            bias_mode = st.get("bias", "addmm")
            full = check_rows(run_network(torch, dev, bundle, bias_mode, np.arange(N), args.batch),
                              bundle["cls"], bundle["margin"], bundle["bound"])
            rec["batched"] = full
            k = min(args.single_rows, N)
            rows = np.arange(k)
            single = check_rows(run_network(torch, dev, bundle, bias_mode, rows, 1), bundle["cls"][rows],
                                bundle["margin"][rows], bundle["bound"][rows]) if k else None
            rec["batch1"] = single
            rec["rows"] = full["rows"] + (single["rows"] if single else 0)
            rec["class_changes"] = full["class_changes"] + (single["class_changes"] if single else 0)
            rec["violations"] = full["violations"] + (single["violations"] if single else 0)
            rec["max_ratio"] = max(full["max_ratio"], single["max_ratio"] if single else 0.0)
        except Exception as e:  # noqa: BLE001
            rec["error"] = short_exc(e)
        out.append(rec)
        if "error" in rec:
            log(f"  [{bundle['name']}] {name}: ERROR {rec['error']}")
        else:
            b1 = rec["batch1"]
            log(f"  [{bundle['name']}] {name} (storage {bundle['storage']}, tf32={st.get('tf32', False)}, "
                f"fp16rpr={st.get('fp16_reduced_precision_reduction', False)}, "
                f"bf16rpr={st.get('bf16_reduced_precision_reduction', False)}, bias={st.get('bias', 'addmm')}): "
                f"rows {rec['batched']['rows']}, class changes {rec['batched']['class_changes']}, "
                f"bound violations {rec['batched']['violations']}, max ratio {rec['batched']['max_ratio']:.4g}"
                + (f"; batch-1 rows {b1['rows']}: {b1['class_changes']} changes, {b1['violations']} violations, "
                   f"max ratio {b1['max_ratio']:.4g}" if b1 else "")
                + (f"; {rec['batched']['unclaimed_pairs']} pairs without a bound (bound < 0)" if rec['batched']['unclaimed_pairs'] else "")
                + (f"; first violation {rec['batched']['first_violation']}" if rec['batched']['first_violation'] else "")
                + (f"; WARNING {nonrep} bundle values not representable in {bundle['storage']}" if nonrep else ""))
    return out


# ------------------------------------------------------------------ demo bundle (CPU testing)
def make_demo_bundle(d, storage, seed):
    import torch  # only to round to the storage format exactly as the check does
    dt = torch_dtype(torch, storage)
    rnd = lambda a: torch.tensor(np.asarray(a, np.float64)).to(dt).double().numpy()  # noqa: E731
    rng = np.random.default_rng(seed)
    sizes = [10, 16, 4]
    Ws = [rnd(rng.standard_normal((m, n)) / math.sqrt(n)) for n, m in zip(sizes[:-1], sizes[1:])]
    bs = [rnd(rng.standard_normal(m) * 0.1) for m in sizes[1:]]
    centres = rnd(rng.uniform(-1, 1, (2000, sizes[0])))
    X = np.concatenate([centres, rnd(centres + rng.uniform(-0.01, 0.01, centres.shape))])
    # generous a-priori error bound: |W| e + 2 gamma_{n+2} (|W||z| + |b|) + 2 u_storage |y| per layer,
    # with the unit of the worst setting's operand / reduction rounding
    u = {"float32": UNIT["tf32"], "float16": UNIT["float16"], "bfloat16": UNIT["float32"]}[storage]
    z, e = X, np.zeros_like(X)
    for l, (W, b) in enumerate(zip(Ws, bs)):
        y = z @ W.T + b
        g = (W.shape[1] + 2) * u / (1 - (W.shape[1] + 2) * u)
        aW = np.abs(W).T
        e = e @ aW + 2 * g * ((np.abs(z) + e) @ aW + np.abs(b)) + 2 * UNIT[storage] * (np.abs(y) + e @ aW)
        z = np.maximum(y, 0) if l < len(Ws) - 1 else y
    cls = np.argmax(z, axis=1)
    r = np.arange(len(X))
    margin = z[r, cls][:, None] - z
    bound = e[r, cls][:, None] + e
    bound[r, cls] = 0.0
    keep = np.all((margin > bound) | (np.arange(z.shape[1])[None, :] == cls[:, None]), axis=1)
    os.makedirs(d, exist_ok=True)
    for l, (W, b) in enumerate(zip(Ws, bs)):
        np.save(os.path.join(d, f"W{l}.npy"), W)
        np.save(os.path.join(d, f"b{l}.npy"), b)
    np.save(os.path.join(d, "x.npy"), X[keep])
    np.save(os.path.join(d, "cls.npy"), cls[keep].astype(np.int64))
    np.save(os.path.join(d, "margin.npy"), margin[keep])
    np.save(os.path.join(d, "bound.npy"), bound[keep])
    if storage == "float32":
        settings = [dict(name="fp32-addmm", tf32=False, bias="addmm"), dict(name="fp32-matmul_add", tf32=False, bias="matmul_add"),
                    dict(name="tf32-addmm", tf32=True, bias="addmm")]
    else:
        k = "fp16_reduced_precision_reduction" if storage == "float16" else "bf16_reduced_precision_reduction"
        settings = [{"name": "addmm-nored", k: False, "bias": "addmm"},
                    {"name": "matmul_add-red" if storage == "float16" else "matmul_add-nored", k: storage == "float16", "bias": "matmul_add"}]
    for s in settings:
        s.setdefault("tf32", False)
        s.setdefault("fp16_reduced_precision_reduction", False)
        s.setdefault("bf16_reduced_precision_reduction", False)
    meta = {"name": f"demo-{storage}", "storage": storage, "layers": len(Ws), "runtime": "demo (a-priori bound)",
            "torch_settings": settings}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return int(keep.sum())


# ------------------------------------------------------------------ main
def main(argv=None):
    t_start = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundles", nargs="*", help="bundle directories (or folders holding bundle directories)")
    ap.add_argument("--out", help="write all results as JSON here")
    ap.add_argument("--allow-cpu", action="store_true", help="no CUDA: run the same checks on torch CPU (plumbing test)")
    ap.add_argument("--make-demo-bundle", metavar="DIR", help="write a small random bundle to DIR and exit")
    ap.add_argument("--demo-storage", default="float32", choices=STORAGES)
    ap.add_argument("--batch", type=int, default=4096, help="rows per batch in part 2 (default 4096)")
    ap.add_argument("--single-rows", type=int, default=64, help="first rows also run one at a time (default 64; 0 = off)")
    ap.add_argument("--skip-probes", action="store_true", help="skip parts 1a and 1b")
    ap.add_argument("--probe-gemms", type=int, default=200, help="random GEMMs per (path, K) at most (default 200)")
    ap.add_argument("--probe-ks", default="8,16,64,784")
    ap.add_argument("--probe-paths", default="tf32,tf32_split,fp32,fp16,fp16_rpr,bf16,fp16_to_f32,bf16_to_f32")
    ap.add_argument("--emu-device", default="h100")
    ap.add_argument("--show-variants", type=int, default=3, help="emulator variants printed per path, best first (default 3)")
    ap.add_argument("--emu-workers", type=int, default=0, help="emulator processes (default: CPUs - 1, at most 15; 1 = serial)")
    ap.add_argument("--time-limit", type=float, default=180.0, help="seconds for the whole run (default 180); part 1b gets what is left")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    if args.make_demo_bundle:
        try:
            n = make_demo_bundle(args.make_demo_bundle, args.demo_storage, args.seed)
        except Exception as e:  # noqa: BLE001
            log(f"demo bundle failed: {short_exc(e)}")
            return EXIT_USAGE
        log(f"demo bundle ({args.demo_storage}, {n} rows) written to {args.make_demo_bundle}")
        return EXIT_OK

    report = {"argv": sys.argv, "python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        log(f"GPU conformance: torch not importable ({short_exc(e)}); nothing checked")
        return EXIT_NO_DEVICE
    report["torch"] = torch.__version__
    report["torch_cuda"] = torch.version.cuda
    on_cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if on_cuda:
        dev = "cuda"
        props = torch.cuda.get_device_properties(0)
        devname = torch.cuda.get_device_name(0)
        report["device"] = {"name": devname, "capability": list(torch.cuda.get_device_capability(0)),
                            "sms": props.multi_processor_count}
        try:
            report["device"]["cublas_preferred"] = str(torch.backends.cuda.preferred_blas_library())
        except Exception:  # noqa: BLE001
            pass
    elif args.allow_cpu:
        dev, devname = "cpu", "CPU (torch, --allow-cpu dry run)"
        report["device"] = {"name": devname}
    else:
        log(f"GPU conformance: no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
            "nothing checked (use --allow-cpu for a CPU dry run)")
        return EXIT_NO_DEVICE
    report["default_flags"] = read_flags(torch)
    log(f"device: {devname}; torch {torch.__version__} (CUDA {torch.version.cuda}); numpy {np.__version__}")
    log(f"default matmul flags: {report['default_flags']}")
    emu, why = load_emulator()
    log(f"emulator tests/conformance/tensor_core.py: {'available' if emu else 'unavailable (' + why + ')'}")

    # Part 1a
    tf32_mode = "not run"
    if not args.skip_probes:
        log("== part 1a: TF32 operand conversion")
        try:
            tf32_mode, details = probe_tf32(torch, dev)
            report["tf32_probe"] = details
            for shape in sorted({tuple(r["shape"]) for r in details}):
                for side in ("x", "W"):
                    rs = [r for r in details if tuple(r["shape"]) == shape and r["operand"] == side]
                    log(f"  shape {list(shape)} probe in {side}: " + ", ".join(
                        f"{r['op']}={r['mode']}" + (f" ({r['error']})" if "error" in r else "") for r in rs))
        except Exception as e:  # noqa: BLE001
            tf32_mode = "unknown"
            report["tf32_probe_error"] = traceback.format_exc()
            log(f"  probe failed: {short_exc(e)}")
        log(f"  => tf32 conversion: {tf32_mode}")

    # Part 2
    log("== part 2: certified-point conformance")
    bundles_ok, records, load_errors = 0, [], []
    for d in find_bundles(args.bundles):
        try:
            b = load_bundle(d)
        except BundleError as e:
            load_errors.append({"dir": d, "error": str(e)})
            log(f"  {d}: BUNDLE ERROR {e}")
            continue
        bundles_ok += 1
        log(f"  bundle {b['name']} ({d}): storage {b['storage']}, {len(b['W'])} layers, {b['x'].shape[0]} rows, "
            f"runtime {b['runtime']!r}, {len(b['settings'])} settings")
        records.extend(check_bundle(torch, dev, b, args))
    if not args.bundles:
        log("  no bundle given")
    set_flags(torch, tf32=report["default_flags"].get("allow_tf32") is True)
    report["bundles"] = records
    report["bundle_errors"] = load_errors

    # Part 1b
    p1b = None
    if not args.skip_probes:
        deadline = t_start + args.time_limit - 10
        log(f"== part 1b: GEMMs vs emulator (budget {max(0, deadline - time.time()):.0f} s)")
        try:
            p1b = probe_gemms(torch, dev, args, deadline, on_cuda)
            for pname, st in p1b.get("paths", {}).items():
                log(f"  {pname} via {st['how']}: {st['gemms']} GEMMs compared {st.get('by_k', {})}"
                    + (f", device errors {st['device_errors']} ({st.get('device_error')})" if st["device_errors"] else ""))
                ranked = sorted(st["variants"].items(), key=lambda kv: (kv[1]["errors"] > 0, kv[1]["mismatch"]))
                for i, (vn, v) in enumerate(ranked[:args.show_variants]):
                    if v["errors"]:
                        log(f"    {vn:<28} emulator error: {v['error']}")
                    else:
                        f = v["first"]
                        by_k = ", ".join(f"K={k}: {m}" for k, m in v.get("mismatch_by_k", {}).items() if m)
                        log(f"    {vn:<28} {v['mismatch']:>8} / {v['n']:<8} mismatches (crafted {v.get('crafted_mismatch', 0)})"
                            + (f" [{by_k}]" if by_k else "")
                            + (f"  e.g. K={v['first_k']} [{f['row']},{f['col']}] device {f['device']} emulator {f['emulator']}"
                               if f and i == 0 else ""))
                if len(ranked) > args.show_variants:
                    log(f"    ... {len(ranked) - args.show_variants} more variants in the JSON (--out)")
            for n in p1b.get("notes", []):
                log(f"  note: {n}")
            report["gemm_probe"] = p1b
        except Exception as e:  # noqa: BLE001
            report["gemm_probe_error"] = traceback.format_exc()
            log(f"  part 1b failed: {short_exc(e)}")
    emu_sum = emulator_summary(p1b) if not args.skip_probes else "not run"

    ok_recs = [r for r in records if "error" not in r]
    rows = sum(r["rows"] for r in ok_recs)
    m = sum(r["class_changes"] for r in ok_recs)
    v = sum(r["violations"] for r in ok_recs)
    ratio = max((r["max_ratio"] for r in ok_recs), default=0.0)
    nset = len(records)
    errs = len(load_errors) + len(records) - len(ok_recs)
    line = (f"GPU conformance: {devname}, {bundles_ok} bundles, {nset} settings, {rows} rows, {m} class changes, "
            f"{v} bound violations, max ratio {ratio:.4g}; tf32 conversion: {tf32_mode}; emulator bit-exact: {emu_sum}")
    if errs:
        line += f"; {errs} bundles/settings NOT CHECKED (errors)"
    if dev == "cpu":
        line += " [CPU DRY RUN, not a GPU result]"
    report["verdict"] = line
    report["wall_s"] = round(time.time() - t_start, 1)
    code = EXIT_OK if (m == 0 and v == 0 and errs == 0) else EXIT_FAIL
    report["exit"] = code
    if args.out:
        try:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
        except Exception as e:  # noqa: BLE001
            log(f"could not write {args.out}: {short_exc(e)}")
    log(f"(wall time {report['wall_s']} s)")
    log(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
