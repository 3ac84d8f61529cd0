#!/usr/bin/env python3
"""Run an ONNX classifier with onnxruntime (CPU) and write its logits as float64.

Usage:
    python ort_logits.py MODEL.onnx INPUTS.npy OUT.npy [--opt default|disable] [--daz]

INPUTS is a float npy array of shape [N, ...]. Each row is reshaped to the model
input's declared shape without its batch dimension and cast with numpy
(round-to-nearest-even) to the input's element type (float16, float or double).
If the batch dimension is fixed (B), rows are fed B at a time and the last batch
is zero-padded (padded rows are dropped); otherwise rows are fed 4096 at a time
and a lone last row is padded to two rows, because MLAS sums a 1-row GEMM with
unpacked weights (e.g. float16 models under --opt disable) in another order. So
every row's logits are the same whatever N is.
OUT receives the first graph output, widened exactly to float64, shape [N, classes].

  --opt default   graph_optimization_level = ORT_ENABLE_ALL (onnxruntime's default)
  --opt disable   graph_optimization_level = ORT_DISABLE_ALL
  --daz           session config "session.set_denormal_as_zero" = "1" (FTZ + DAZ)

The session uses CPUExecutionProvider with one intra-op thread. It is created and
run on a dedicated worker thread: onnxruntime sets the FTZ/DAZ flags on the thread
that creates the first session, and numpy's own casts must not see them.

Errors are printed on stderr; the exit status is then 2.
Pinned versions (requirements.txt): onnxruntime==1.32.0, onnx==1.23.2, numpy==2.4.6.
"""
import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort

BATCH = 4096
ELEM_TYPES = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(double)": np.float64}
OPT_LEVELS = {"default": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
              "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


def make_session(model, opt, daz):
    so = ort.SessionOptions()
    so.graph_optimization_level = OPT_LEVELS[opt]
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if daz:
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def logits(model, inputs, opt="default", daz=False):
    """Return the first output of `model` for every row of `inputs`, as float64 [N, classes]."""
    if inputs.dtype.kind != "f":
        raise ValueError(f"INPUTS must be a float array, got {inputs.dtype}")
    if inputs.ndim < 1 or len(inputs) == 0:
        raise ValueError(f"INPUTS must have shape [N, ...] with N > 0, got {inputs.shape}")
    with ThreadPoolExecutor(max_workers=1) as worker:
        sess = worker.submit(make_session, model, opt, daz).result()
        ins = sess.get_inputs()
        if len(ins) != 1:
            raise ValueError(f"model must have exactly one input, has {len(ins)}")
        inp, out_name = ins[0], sess.get_outputs()[0].name
        dtype = ELEM_TYPES.get(inp.type)
        if dtype is None:
            raise ValueError(f"unsupported model input type {inp.type}")
        if len(inp.shape) < 1 or not all(isinstance(d, int) for d in inp.shape[1:]):
            raise ValueError(f"model input must be [batch, fixed dims...], got {inp.shape}")
        row_shape = tuple(inp.shape[1:])
        n = len(inputs)
        if int(np.prod(inputs.shape[1:])) != int(np.prod(row_shape)):
            raise ValueError(f"INPUTS rows {inputs.shape[1:]} do not fit model input {inp.shape}")
        fixed = inp.shape[0] if isinstance(inp.shape[0], int) and inp.shape[0] > 0 else None
        step = fixed or BATCH
        result = None
        for start in range(0, n, step):
            rows = np.asarray(inputs[start:start + step]).reshape((-1,) + row_shape).astype(dtype)
            k = len(rows)
            target = fixed or max(k, 2)
            if k < target:
                rows = np.concatenate([rows, np.zeros((target - k,) + row_shape, dtype)])
            y = worker.submit(sess.run, [out_name], {inp.name: rows}).result()[0]
            if y.dtype.kind != "f":
                raise ValueError(f"first model output is not floating point ({y.dtype})")
            y = y.reshape(len(rows), -1)[:k].astype(np.float64)
            if result is None:
                result = np.empty((n, y.shape[1]), np.float64)
            result[start:start + k] = y
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("out")
    ap.add_argument("--opt", choices=sorted(OPT_LEVELS), default="default")
    ap.add_argument("--daz", action="store_true")
    args = ap.parse_args(argv)
    try:
        y = logits(args.model, np.load(args.inputs, mmap_mode="r"), args.opt, args.daz)
        tmp = args.out + ".tmp"
        with open(tmp, "wb") as f:
            np.save(f, y)
        os.replace(tmp, args.out)
    except Exception as e:  # noqa: BLE001 - every failure becomes exit status 2
        print(f"ort_logits: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
