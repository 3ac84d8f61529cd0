"""Scale one class's output row of a dense ONNX classifier: `python scale_class.py IN OUT K F`.

For tests/cli/ci_integration.rs: a "retrained" model whose class K lost most of its margin (the last
Gemm's weight row and bias of class K multiplied by F), so that the mean VRA stays up while class
K's VRA falls.
"""

import sys

import numpy as np
import onnx
from onnx import numpy_helper


def main():
    src, dst, k, factor = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    model = onnx.load(src)
    graph = model.graph
    last = [n for n in graph.node if n.op_type == "Gemm"][-1]
    trans_b = any(a.name == "transB" and a.i for a in last.attribute)
    inits = {t.name: t for t in graph.initializer}
    w = numpy_helper.to_array(inits[last.input[1]]).copy()
    if trans_b:
        w[k, :] *= factor
    else:
        w[:, k] *= factor
    inits[last.input[1]].CopyFrom(numpy_helper.from_array(w.astype(w.dtype), last.input[1]))
    if len(last.input) > 2 and last.input[2] in inits:
        b = numpy_helper.to_array(inits[last.input[2]]).copy()
        b[k] *= factor
        inits[last.input[2]].CopyFrom(numpy_helper.from_array(b.astype(b.dtype), last.input[2]))
    onnx.checker.check_model(model)
    onnx.save(model, dst)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
