"""Append a Relu to an ONNX classifier's output: `python relu_output.py IN.onnx OUT.onnx`.

For tests/oracles/conformance.rs: a dense network whose output layer has a ReLU, which lipfp reads with
the zero floor as one more class (docs/soundness.md "Classifier heads").
"""

import sys

import onnx
from onnx import helper


def main():
    src, dst = sys.argv[1], sys.argv[2]
    model = onnx.load(src)
    graph = model.graph
    out = graph.output[0]
    pre = out.name + "_pre_relu"
    for node in graph.node:
        node.output[:] = [pre if o == out.name else o for o in node.output]
    graph.node.append(helper.make_node("Relu", [pre], [out.name], name="output_relu"))
    onnx.checker.check_model(model)
    onnx.save(model, dst)


if __name__ == "__main__":
    main()
