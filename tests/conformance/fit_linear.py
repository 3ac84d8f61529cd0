#!/usr/bin/env python3
"""Fit a linear MNIST classifier (no hidden layer) by ridge least squares and export it to ONNX.

Usage:
    python fit_linear.py X.npy Y.npy OUT.onnx [--skip N] [--ridge R]

X is [N, ...] float (flattened to [N, D]), Y [N] integer labels. The classifier is fitted on
rows N.. of the file (the first `--skip` rows, default 1000, are left for evaluation) to one-hot
targets: W, b = argmin ||[X 1] [W b]^T - onehot(Y)||^2 + R ||W||^2 (normal equations in float64).
The model is a single float32 `Gemm(x, W, b, transB=1)` from `x[N, D]` to `logits[N, C]`, the
shape of a linear layer exported from PyTorch. It prints the accuracy on the first `--skip` rows.
Errors: message on stderr, exit status 2.
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def fit(x, y, ridge):
    classes = int(y.max()) + 1
    a = np.hstack([x, np.ones((x.shape[0], 1))])
    t = np.eye(classes)[y]
    reg = ridge * np.eye(a.shape[1])
    reg[-1, -1] = 0.0
    coef = np.linalg.solve(a.T @ a + reg, a.T @ t)
    return coef[:-1].T.astype(np.float32), coef[-1].astype(np.float32)


def export(w, b, path):
    classes, dim = w.shape
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["logits"], name="/fc/Gemm", transB=1)],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dim])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("x")
    p.add_argument("y")
    p.add_argument("out")
    p.add_argument("--skip", type=int, default=1000)
    p.add_argument("--ridge", type=float, default=1.0)
    a = p.parse_args()
    try:
        x = np.load(a.x).astype(np.float64)
        x = x.reshape(x.shape[0], -1)
        y = np.load(a.y).astype(np.int64)
        if y.shape[0] != x.shape[0] or a.skip >= x.shape[0]:
            raise ValueError("labels and inputs disagree, or nothing is left to fit")
        w, b = fit(x[a.skip:], y[a.skip:], a.ridge)
        export(w, b, a.out)
    except (OSError, ValueError, np.linalg.LinAlgError) as e:
        print("fit_linear.py: %s" % e, file=sys.stderr)
        sys.exit(2)
    logits = x[: a.skip] @ w.T.astype(np.float64) + b
    print("accuracy on the first %d rows: %.4f" % (a.skip, (logits.argmax(1) == y[: a.skip]).mean()))


if __name__ == "__main__":
    main()
