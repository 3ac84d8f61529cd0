#!/usr/bin/env python3
"""Run a bundle's network under emulated runtime arithmetics and write the logits.

Usage:
    python emulate_bundle.py BUNDLE EXECUTIONS.json OUT.npy

BUNDLE is a directory written by lipfp's tests (tests/oracles/runtime_conformance.rs): `meta.json`
({"layers": L, "storage": ...}), `W{l}.npy` float64 [m_l, n_l] and `b{l}.npy` float64 [m_l]
(storage values; ReLU after every layer but the last) and `x.npy` float64 [N, n_0].

EXECUTIONS.json is a list of objects, one per emulated execution:
    {"name": str, "kind": "gemm", ...keyword arguments of tensor_core.gemm}
    {"name": str, "kind": "openvino", "kernel": "avx512"|"amx", "bias_position": ...}
    {"name": str, "kind": "arm_fp16"}
Every layer of the network runs under the same execution (activations stay in the execution's
output format between layers; ReLU between layers). OUT receives float64 logits [E, N, C] in
the order of EXECUTIONS. Errors go to stderr with exit status 2.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensor_core  # noqa: E402


def load_bundle(path):
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    weights = [np.load(os.path.join(path, "W%d.npy" % l)) for l in range(meta["layers"])]
    biases = [np.load(os.path.join(path, "b%d.npy" % l)) for l in range(meta["layers"])]
    x = np.load(os.path.join(path, "x.npy"))
    return meta, weights, biases, x


def layer_fn(execution):
    """The emulated layer `f(h, W, b)` of one execution."""
    kind = execution.get("kind", "gemm")
    args = {k: v for k, v in execution.items() if k not in ("name", "kind")}
    if kind == "gemm":
        return lambda h, W, b: tensor_core.gemm(h, W, b, **args)
    if kind == "openvino":
        return lambda h, W, b: tensor_core.openvino_bf16_gemm(h, W, b, **args)
    if kind == "arm_fp16":
        return lambda h, W, b: tensor_core.arm_fp16_gemm(h, W, b, **args)
    raise ValueError("unknown execution kind %r" % kind)


def run(weights, biases, x, execution):
    layer = layer_fn(execution)
    h = x
    for i, (W, b) in enumerate(zip(weights, biases)):
        h = layer(h, W, b)
        if i < len(weights) - 1:
            h = np.maximum(h, 0.0)
    return h


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        _, weights, biases, x = load_bundle(argv[1])
        with open(argv[2]) as f:
            executions = json.load(f)
        logits = np.stack([run(weights, biases, x, e) for e in executions])
        np.save(argv[3], logits.astype(np.float64))
    except Exception as e:  # noqa: BLE001 - reported to the Rust test
        print("emulate_bundle: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
