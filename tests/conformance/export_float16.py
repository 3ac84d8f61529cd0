#!/usr/bin/env python3
"""Convert a float32 ONNX dense classifier to float16, like PyTorch's `model.half()`.

Usage:
    python export_float16.py SRC.onnx DST.onnx [--keep-io-types]

Every FLOAT initializer and FLOAT Constant tensor becomes FLOAT16 (numpy astype,
round-to-nearest-even; values beyond 65504 become inf, with a warning). Graph
inputs and outputs of type FLOAT become FLOAT16; operators are left unchanged
(Flatten, Gemm, Relu, MatMul, Add, Reshape accept float16). Intermediate
value_info is dropped (it would still say FLOAT).

  --keep-io-types  keep FLOAT graph inputs/outputs and insert Cast(to=FLOAT16)
                   after each input and Cast(to=FLOAT) before each output (what
                   onnxconverter_common's keep_io_types=True produces).

The result is checked with onnx.checker (full_check) and must load and run in
onnxruntime (CPU) on an all-zero input. Errors: message on stderr, exit status 2.
Pinned versions (requirements.txt): onnxruntime==1.32.0, onnx==1.23.2, numpy==2.4.6.
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16


def to_half(tensor):
    """FLOAT TensorProto -> FLOAT16 TensorProto with the same name (RNE)."""
    src = numpy_helper.to_array(tensor)
    with np.errstate(over="ignore"):
        half = src.astype(np.float16)
    overflow = np.isinf(half) & np.isfinite(src)
    if overflow.any():
        print(f"export_float16: warning: {tensor.name or 'constant'}: "
              f"{int(overflow.sum())} value(s) overflow float16 to inf", file=sys.stderr)
    return numpy_helper.from_array(half, tensor.name)


def convert(model, keep_io_types=False):
    g = model.graph
    for i, init in enumerate(g.initializer):
        if init.data_type == FLOAT:
            g.initializer[i].CopyFrom(to_half(init))
    for node in g.node:
        if node.op_type != "Constant":
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.t.data_type == FLOAT:
                attr.t.CopyFrom(to_half(attr.t))
            elif attr.name in ("value_float", "value_floats"):
                vals = np.array(attr.f if attr.name == "value_float" else list(attr.floats), np.float32)
                new = helper.make_attribute("value", to_half(numpy_helper.from_array(vals)))
                attr.CopyFrom(new)
    del g.value_info[:]

    init_names = {t.name for t in g.initializer}
    used = {n for node in g.node for n in list(node.input) + list(node.output)} | init_names
    used |= {v.name for v in list(g.input) + list(g.output)}

    def fresh(base):
        name, k = base, 0
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        return name

    def rename(old, new, outputs_too):
        for node in g.node:
            node.input[:] = [new if n == old else n for n in node.input]
            if outputs_too:
                node.output[:] = [new if n == old else n for n in node.output]

    for vi in g.input:
        tt = vi.type.tensor_type
        if tt.elem_type != FLOAT:
            continue
        if keep_io_types and vi.name not in init_names:
            half = fresh(vi.name + "_fp16")
            rename(vi.name, half, outputs_too=False)
            g.node.insert(0, helper.make_node("Cast", [vi.name], [half], to=FLOAT16, name=fresh("cast_in")))
        else:
            tt.elem_type = FLOAT16
    for vo in g.output:
        tt = vo.type.tensor_type
        if tt.elem_type != FLOAT:
            continue
        if keep_io_types:
            half = fresh(vo.name + "_fp16")
            rename(vo.name, half, outputs_too=True)
            g.node.append(helper.make_node("Cast", [half], [vo.name], to=FLOAT, name=fresh("cast_out")))
        else:
            tt.elem_type = FLOAT16
    return model


def smoke_run(model):
    """Load `model` in onnxruntime and run it once on zeros (symbolic dims = 1)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    types = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(double)": np.float64}
    feeds = {i.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in i.shape], types[i.type])
             for i in sess.get_inputs()}
    sess.run(None, feeds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--keep-io-types", action="store_true")
    args = ap.parse_args(argv)
    try:
        model = convert(onnx.load(args.src), args.keep_io_types)
        onnx.checker.check_model(model, full_check=True)
        smoke_run(model)
        onnx.save(model, args.dst)
    except Exception as e:  # noqa: BLE001 - every failure becomes exit status 2
        print(f"export_float16: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
