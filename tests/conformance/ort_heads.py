#!/usr/bin/env python3
"""Run ONNX models with onnxruntime (CPU) and write every tensor output as float64.

Usage:
    python ort_heads.py MODEL.onnx INPUTS.npy OUTDIR [MODEL.onnx INPUTS.npy OUTDIR ...]

For each triple: INPUTS is a float npy array of shape [N, ...]; each row is reshaped to
the model input's declared shape without its batch dimension and cast with numpy
(round-to-nearest-even) to the input's element type (float16, float or double); the
tests pass values of that type, so the cast is exact. The rows are fed in one batch
(padded to two rows when N = 1, as ort_logits.py does). Output k of the graph is
written to OUTDIR/k.npy, shape [N, -1], widened exactly to float64: the scores of
Softmax / LogSoftmax and the int64 labels of ArgMax alike (labels are small
integers). An output that is not a tensor (ZipMap's sequence of maps) is written as
an empty [N, 0] array. OUTDIR must exist.

Classifier-head conformance (tests/onnx/heads.rs) uses it to read how onnxruntime ranks
the classes of crafted logits. One Python process runs every model given, so the
tests pay the interpreter start once. The session options are those of
ort_logits.py (CPUExecutionProvider, one thread, ORT_ENABLE_ALL).

Errors are printed on stderr; the exit status is then 2.
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ort_logits import ELEM_TYPES, make_session


def run(worker, model, inputs, outdir):
    sess = worker.submit(make_session, model, "default", False).result()
    ins = sess.get_inputs()
    if len(ins) != 1:
        raise ValueError(f"{model}: model must have exactly one input, has {len(ins)}")
    inp = ins[0]
    dtype = ELEM_TYPES.get(inp.type)
    if dtype is None:
        raise ValueError(f"{model}: unsupported model input type {inp.type}")
    row_shape = tuple(inp.shape[1:])
    n = len(inputs)
    rows = np.asarray(inputs).reshape((-1,) + row_shape)
    cast = rows.astype(dtype)
    if not np.array_equal(cast.astype(np.float64), rows.astype(np.float64)):
        raise ValueError(f"{model}: INPUTS are not {dtype.__name__} values")
    if n == 1:
        cast = np.concatenate([cast, np.zeros((1,) + row_shape, dtype)])
    names = [o.name for o in sess.get_outputs()]
    outs = worker.submit(sess.run, names, {inp.name: cast}).result()
    for k, y in enumerate(outs):
        if isinstance(y, np.ndarray) and y.dtype.kind in "fiu":
            y = y.reshape(len(cast), -1)[:n].astype(np.float64)
        else:
            y = np.empty((n, 0), np.float64)
        np.save(os.path.join(outdir, f"{k}.npy"), y)


def main(argv):
    if not argv or len(argv) % 3 != 0:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with ThreadPoolExecutor(max_workers=1) as worker:
            for i in range(0, len(argv), 3):
                model, inputs, outdir = argv[i:i + 3]
                run(worker, model, np.load(inputs), outdir)
    except Exception as e:  # noqa: BLE001 - every failure becomes exit status 2
        print(f"ort_heads: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
