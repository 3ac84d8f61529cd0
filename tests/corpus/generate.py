#!/usr/bin/env python3
"""Regenerate lipfp's corpus of real exports of small dense ReLU classifiers (issue 11 item 5).

Every model here is a tiny MLP (64-32-32-10) trained for a few seconds on scikit-learn's
`load_digits` (pixels scaled to [0, 1]) and exported by a real exporter at its defaults, apart
from what each file name says. Beside each `<name>.onnx` are:

  <name>.x.npy           the 200-row digits test split, in the dtype and shape the model's input
                         expects (float32 [200, 64]; [200, 1, 8, 8] for the Flatten models;
                         float16 / float64 for the .half() / .double() models)
  <name>.y.npy           true labels, int64 [200]
  <name>.ort_label.npy   onnxruntime's predicted class per row, int64 [200]: argmax of the
                         logits / probabilities output, or skl2onnx's `label` output
  <name>.ort_scores.npy  float64 [200, 10]: the first float output (logits, probabilities or
                         log-probabilities); for skl2onnx with ZipMap, the ZipMap probabilities
                         in class order

onnxruntime runs with default session options (CPUExecutionProvider); a model with a fixed batch
dimension of 1 is run row by row. MANIFEST.json lists, per model: exporter and version, what it
exercises, input shape and dtype, the graph's op types, outputs, onnxruntime's accuracy, and
`lipfp_today` (whether the lipfp build it was checked with accepts it, or its error message).

Usage (from this directory):

    python3.11 -m venv /tmp/corpus-venv
    /tmp/corpus-venv/bin/pip install -r requirements.txt
    /tmp/corpus-venv/bin/python generate.py                        # models, data, MANIFEST.json
    /tmp/corpus-venv/bin/python generate.py --lipfp PATH/TO/lipfp  # ... and re-check lipfp_today

Without --lipfp, each model's `lipfp_today` is carried over from the existing MANIFEST.json
when the model's sha256 is unchanged (and set to "not checked" otherwise). With --lipfp, each
model is run through `lipfp -q certify --model M --inputs M.x.npy --labels M.y.npy --epsilon 0.1
--mode standard --certificates ...`, and for accepted models lipfp's predicted classes are
compared with onnxruntime's (`lipfp_vs_ort`).

torch comes from PyPI (its CPU-only index was not reachable when this was written; the PyPI
wheel also pulls CUDA libraries, unused here). Everything runs on the CPU, single-threaded,
with fixed seeds; regenerating with the pinned versions below reproduces the files byte for
byte, wherever the repository and the venv are (the script refuses other versions unless
--allow-other-versions is given). The exports are the exporters' own output, with two
deterministic touches that change no computation: skl2onnx gets `name=<model name>` (its graph
name is otherwise a random uuid), and in the dynamo exporter's node metadata
(`pkg.torch.onnx.stack_trace`) the absolute paths of the venv and of this directory become
`<venv>/` and `<corpus>/`.

Pinned (Python 3.11, manylinux x86_64; also in requirements.txt):
    torch==2.15.0 onnxscript==0.7.2 onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6
    scikit-learn==1.9.1 skl2onnx==1.20.0 tensorflow-cpu==2.21.0 keras==3.15.1 tf2onnx==1.17.0
    protobuf==7.36.2 onnx_ir==1.1.0 ml_dtypes==0.6.0 scipy==1.17.1
"""
import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from importlib import metadata
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

PINNED = {
    "torch": "2.15.0",
    "onnxscript": "0.7.2",
    "onnx": "1.23.2",
    "onnxruntime": "1.32.0",
    "numpy": "2.4.6",
    "scikit-learn": "1.9.1",
    "skl2onnx": "1.20.0",
    "tensorflow-cpu": "2.21.0",
    "keras": "3.15.1",
    "tf2onnx": "1.17.0",
    "protobuf": "7.36.2",
    "onnx_ir": "1.1.0",
    "ml_dtypes": "0.6.0",
    "scipy": "1.17.1",
}

HERE = Path(__file__).resolve().parent
TEST_ROWS = 200
SEED = 0
EPSILON = "0.1"


def installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_versions(allow_other):
    bad = []
    for name, want in PINNED.items():
        have = installed(name)
        if have is None or have.split("+")[0] != want:
            bad.append(f"{name}: pinned {want}, installed {have}")
    if bad:
        msg = "generate.py: versions differ from the pins:\n  " + "\n  ".join(bad)
        if not allow_other:
            sys.exit(msg + "\n(install requirements.txt, or pass --allow-other-versions)")
        print(msg, file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Data


def digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)  # [1797, 64] in [0, 1]
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_ROWS, random_state=SEED, stratify=y)
    return x_tr, y_tr, x_te, y_te


# ---------------------------------------------------------------------------------------------
# torch


def torch_models(x_tr, y_tr):
    """Trained torch modules (eval mode), by variant name."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    def mlp_layers(dropout=0.0, batchnorm=False):
        layers = [nn.Linear(64, 32)]
        if batchnorm:
            layers.append(nn.BatchNorm1d(32))
        layers.append(nn.ReLU())
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(32, 32))
        if batchnorm:
            layers.append(nn.BatchNorm1d(32))
        layers.append(nn.ReLU())
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(32, 10))
        return layers

    class Standardise(nn.Module):
        """In-graph input normalisation (x - mean) / std, StandardScaler's convention."""

        def __init__(self, mean, std):
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

        def forward(self, x):
            return (x - self.mean) / self.std

    def train(model, epochs=40, seed=SEED):
        torch.manual_seed(seed)
        xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        loss_fn = nn.CrossEntropyLoss()
        gen = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            perm = torch.randperm(len(xt), generator=gen)
            for i in range(0, len(xt), 64):
                idx = perm[i:i + 64]
                opt.zero_grad()
                loss_fn(model(xt[idx]), yt[idx]).backward()
                opt.step()
        return model.eval()

    torch.manual_seed(SEED)
    base = train(nn.Sequential(*mlp_layers()))
    torch.manual_seed(SEED + 1)
    dropout = train(nn.Sequential(*mlp_layers(dropout=0.2)), seed=SEED + 1)
    torch.manual_seed(SEED + 2)
    bn = train(nn.Sequential(*mlp_layers(batchnorm=True)), seed=SEED + 2)
    mean = x_tr.mean(axis=0)
    std = x_tr.std(axis=0)
    std[std == 0] = 1.0
    torch.manual_seed(SEED + 3)
    norm = train(nn.Sequential(Standardise(mean, std), *mlp_layers()), seed=SEED + 3)

    def with_head(head):
        return nn.Sequential(*copy.deepcopy(list(base.children())), head).eval()

    return {
        "logits": base,
        "flatten": nn.Sequential(nn.Flatten(), *copy.deepcopy(list(base.children()))).eval(),
        "dropout": dropout,
        "softmax": with_head(nn.Softmax(dim=1)),
        "logsoftmax": with_head(nn.LogSoftmax(dim=1)),
        "normalise": norm,
        "batchnorm": bn,
        "half": copy.deepcopy(base).half().eval(),
        "double": copy.deepcopy(base).double().eval(),
    }


# (name, variant, dynamo, batch, optimize, exercises). batch: 1 (fixed, as exported with a
# single example) or "dynamic".
TORCH_EXPORTS = [
    ("torch_dynamo_logits_b1", "logits", True, 1, True,
     ["plain logits", "fixed batch 1"]),
    ("torch_ts_logits_b1", "logits", False, 1, True,
     ["plain logits", "fixed batch 1"]),
    ("torch_dynamo_logits_dynbatch", "logits", True, "dynamic", True,
     ["plain logits", "dynamic batch axis"]),
    ("torch_ts_logits_dynbatch", "logits", False, "dynamic", True,
     ["plain logits", "dynamic batch axis (dynamic_axes)"]),
    ("torch_dynamo_flatten_b1", "flatten", True, 1, True,
     ["nn.Flatten on image input [N,1,8,8]", "fixed batch 1"]),
    ("torch_ts_flatten_b1", "flatten", False, 1, True,
     ["nn.Flatten on image input [N,1,8,8]", "fixed batch 1"]),
    ("torch_dynamo_flatten_dynbatch", "flatten", True, "dynamic", True,
     ["nn.Flatten on image input [N,1,8,8]", "dynamic batch axis"]),
    ("torch_ts_flatten_dynbatch", "flatten", False, "dynamic", True,
     ["nn.Flatten on image input [N,1,8,8]", "dynamic batch axis"]),
    ("torch_dynamo_dropout", "dropout", True, "dynamic", True,
     ["nn.Dropout(0.2) in eval mode"]),
    ("torch_ts_dropout", "dropout", False, "dynamic", True,
     ["nn.Dropout(0.2) in eval mode"]),
    ("torch_dynamo_softmax", "softmax", True, "dynamic", True,
     ["softmax head"]),
    ("torch_ts_softmax", "softmax", False, "dynamic", True,
     ["softmax head"]),
    ("torch_dynamo_logsoftmax", "logsoftmax", True, "dynamic", True,
     ["log-softmax head"]),
    ("torch_ts_logsoftmax", "logsoftmax", False, "dynamic", True,
     ["log-softmax head"]),
    ("torch_dynamo_normalise", "normalise", True, "dynamic", True,
     ["in-graph normalisation (x - mean) / std (Sub/Div)"]),
    ("torch_ts_normalise", "normalise", False, "dynamic", True,
     ["in-graph normalisation (x - mean) / std (Sub/Div)"]),
    ("torch_dynamo_batchnorm", "batchnorm", True, "dynamic", True,
     ["nn.BatchNorm1d in eval mode (dynamo, optimize=True)"]),
    ("torch_dynamo_batchnorm_noopt", "batchnorm", True, "dynamic", False,
     ["nn.BatchNorm1d in eval mode (dynamo, optimize=False)"]),
    ("torch_ts_batchnorm", "batchnorm", False, "dynamic", True,
     ["nn.BatchNorm1d in eval mode (BatchNormalization)"]),
    ("torch_dynamo_half", "half", True, "dynamic", True,
     ["model.half(): float16 weights and input"]),
    ("torch_ts_half", "half", False, "dynamic", True,
     ["model.half(): float16 weights and input"]),
    ("torch_dynamo_double", "double", True, "dynamic", True,
     ["model.double(): float64 weights and input"]),
    ("torch_ts_double", "double", False, "dynamic", True,
     ["model.double(): float64 weights and input"]),
]


def torch_example(variant, x_te):
    """The test inputs in the dtype and shape the variant takes."""
    x = x_te
    if variant == "flatten":
        x = x.reshape(-1, 1, 8, 8)
    if variant == "half":
        x = x.astype(np.float16)
    if variant == "double":
        x = x.astype(np.float64)
    return np.ascontiguousarray(x)


def scrub_stack_traces(path):
    """Make the dynamo exporter's node metadata independent of where things are installed.

    Each node's `pkg.torch.onnx.stack_trace` names the Python files (absolute paths) of the
    module code it was traced from: the venv's torch and, for the normalisation model, this
    script. The prefixes become `<venv>` and `<corpus>`; nothing else is changed.
    """
    import onnx

    model = onnx.load(str(path))
    prefixes = [(str(HERE) + os.sep, "<corpus>/"), (sys.prefix + os.sep, "<venv>/")]

    def scrub(graph):
        for node in graph.node:
            for prop in node.metadata_props:
                for old, new in prefixes:
                    prop.value = prop.value.replace(old, new)
            for attr in node.attribute:
                if attr.HasField("g"):
                    scrub(attr.g)
                for g in attr.graphs:
                    scrub(g)

    scrub(model.graph)
    onnx.save(model, str(path))


def export_torch(models, x_te, out):
    import torch

    done = []
    output_name = {"softmax": "probabilities", "logsoftmax": "log_probabilities"}
    for name, variant, dynamo, batch, optimize, exercises in TORCH_EXPORTS:
        model = models[variant]
        x = torch_example(variant, x_te)
        example = (torch.from_numpy(x[:1] if batch == 1 else x[:2].copy()),)
        path = out / f"{name}.onnx"
        kwargs = dict(input_names=["input"], output_names=[output_name.get(variant, "logits")],
                      dynamo=dynamo)
        if dynamo:
            kwargs.update(external_data=False, optimize=optimize)
            if batch == "dynamic":
                kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch")},)
        elif batch == "dynamic":
            kwargs["dynamic_axes"] = {"input": {0: "batch"}, kwargs["output_names"][0]: {0: "batch"}}
        with torch.no_grad():
            torch.onnx.export(model, example, str(path), **kwargs)
        if dynamo:
            scrub_stack_traces(path)
        exporter = "torch.onnx.export(dynamo=True" + ("" if optimize else ", optimize=False") + ")" \
            if dynamo else "torch.onnx.export(dynamo=False) (TorchScript)"
        version = f"torch {installed('torch')}" + (
            f", onnxscript {installed('onnxscript')}" if dynamo else "")
        done.append(dict(name=name, exporter=exporter, exporter_version=version,
                         exercises=exercises, x=x, batch=batch))
    return done


# ---------------------------------------------------------------------------------------------
# scikit-learn / skl2onnx


def export_sklearn(x_tr, y_tr, x_te, out):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    def mlp():
        return MLPClassifier(hidden_layer_sizes=(32, 32), max_iter=60, random_state=SEED)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = mlp().fit(x_tr, y_tr)
        pipe = Pipeline([("scaler", StandardScaler()), ("mlp", mlp())]).fit(x_tr, y_tr)

    initial = [("input", FloatTensorType([None, 64]))]
    version = f"skl2onnx {installed('skl2onnx')}, scikit-learn {installed('scikit-learn')}"
    specs = [
        ("skl2onnx_mlp_zipmap", clf, None,
         ["MLPClassifier with ZipMap (default)", "label + seq(map) outputs", "softmax head"]),
        ("skl2onnx_mlp_nozipmap", clf, {id(clf): {"zipmap": False}},
         ["MLPClassifier without ZipMap", "label + probabilities outputs", "softmax head"]),
        ("skl2onnx_pipeline_scaler_mlp", pipe, {id(pipe.steps[-1][1]): {"zipmap": False}},
         ["Pipeline(StandardScaler, MLPClassifier) without ZipMap", "Scaler", "softmax head"]),
    ]
    done = []
    for name, est, options, exercises in specs:
        # name: the graph name, otherwise a random uuid4 (the only nondeterminism here).
        onx = convert_sklearn(est, name=name, initial_types=initial, options=options)
        (out / f"{name}.onnx").write_bytes(onx.SerializeToString())
        done.append(dict(name=name, exporter="skl2onnx.convert_sklearn",
                         exporter_version=version, exercises=exercises, x=x_te, batch="dynamic"))
    return done


# ---------------------------------------------------------------------------------------------
# Keras / tf2onnx


def export_keras(x_tr, y_tr, x_te, out):
    import tensorflow as tf
    import keras
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()

    def build(head, normalise):
        keras.utils.set_random_seed(SEED)
        layers = [keras.Input((64,), name="input")]
        if normalise:
            norm = keras.layers.Normalization(name="normalization")
            norm.adapt(x_tr)
            layers.append(norm)
        layers += [keras.layers.Dense(32, activation="relu"),
                   keras.layers.Dense(32, activation="relu"),
                   keras.layers.Dense(10, activation=head)]
        model = keras.Sequential(layers)
        model.compile(optimizer=keras.optimizers.Adam(3e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=head is None))
        model.fit(x_tr, y_tr, epochs=30, batch_size=64, shuffle=True, verbose=0)
        return model

    version = (f"tf2onnx {installed('tf2onnx')}, tensorflow-cpu {installed('tensorflow-cpu')}, "
               f"keras {installed('keras')}")
    specs = [
        ("tf2onnx_keras_logits", None, False, ["plain logits (linear output Dense)"]),
        ("tf2onnx_keras_softmax", "softmax", False, ["softmax head (Dense activation)"]),
        ("tf2onnx_keras_normalization", None, True,
         ["keras.layers.Normalization in front (Sub/Div or Mul)", "plain logits"]),
    ]
    done = []
    for name, head, normalise, exercises in specs:
        model = build(head, normalise)
        # tf2onnx.convert.from_keras fails on Keras 3 models, and from_function leaves a
        # Normalization layer's mean and variance as graph inputs; the SavedModel route that
        # tf2onnx documents freezes everything.
        with tempfile.TemporaryDirectory() as tmp:
            model.export(str(Path(tmp) / "saved_model"), verbose=False)
            # Relative path: tf2onnx writes "converted from <path>" into the doc string.
            cmd = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", "saved_model",
                   "--output", str(out / f"{name}.onnx")]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
            if r.returncode != 0:
                sys.exit(f"tf2onnx failed for {name}:\n{r.stderr}")
        done.append(dict(name=name,
                         exporter="keras Model.export (SavedModel) + "
                                  "python -m tf2onnx.convert --saved-model",
                         exporter_version=version, exercises=exercises, x=x_te,
                         batch="dynamic"))
    return done


# ---------------------------------------------------------------------------------------------
# onnxruntime and the manifest


def type_str(t):
    import onnx

    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        elem = onnx.TensorProto.DataType.Name(t.tensor_type.elem_type)
        dims = [d.dim_param if d.HasField("dim_param") else
                (d.dim_value if d.HasField("dim_value") else "?")
                for d in t.tensor_type.shape.dim]
        return f"tensor({elem.lower()}){dims}".replace("'", "")
    if kind == "sequence_type":
        return f"seq({type_str(t.sequence_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(t.map_type.key_type).lower()
        return f"map({key}, {type_str(t.map_type.value_type)})"
    return kind or "?"


def run_ort(path, x, batch):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0].name
    step = 1 if batch == 1 else len(x)
    outs = [sess.run(None, {inp: x[i:i + step]}) for i in range(0, len(x), step)]
    names = [o.name for o in sess.get_outputs()]
    merged = {}
    for k, name in enumerate(names):
        parts = [o[k] for o in outs]
        if isinstance(parts[0], list):  # ZipMap: list of {class: probability}
            merged[name] = [row for p in parts for row in p]
        else:
            merged[name] = np.concatenate(parts, axis=0)
    return names, merged


def ort_predictions(names, outputs):
    """(labels, scores, label_source, scores_source)."""
    scores, scores_src = None, None
    for name in names:
        v = outputs[name]
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            scores, scores_src = v.astype(np.float64), f"output '{name}'"
            break
    if scores is None:
        for name in names:
            v = outputs[name]
            if isinstance(v, list) and v and isinstance(v[0], dict):
                keys = sorted(v[0])
                scores = np.array([[row[k] for k in keys] for row in v], dtype=np.float64)
                scores_src = f"output '{name}' (ZipMap), classes {keys}"
                break
    int_outputs = [n for n in names
                   if isinstance(outputs[n], np.ndarray) and outputs[n].dtype.kind in "iu"]
    if int_outputs:  # skl2onnx's label output ('label', or 'output_label' with ZipMap)
        labels = outputs[int_outputs[0]].astype(np.int64).reshape(-1)
        label_src = f"output '{int_outputs[0]}'"
    else:
        labels = np.argmax(scores, axis=1).astype(np.int64)
        label_src = f"argmax of {scores_src}"
    return labels, scores, label_src, scores_src


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def describe(entry, y_te, out):
    import onnx

    name = entry["name"]
    path = out / f"{name}.onnx"
    x = entry["x"]
    np.save(out / f"{name}.x.npy", x)
    np.save(out / f"{name}.y.npy", y_te)
    names, outputs = run_ort(path, x, entry["batch"])
    labels, scores, label_src, scores_src = ort_predictions(names, outputs)
    np.save(out / f"{name}.ort_label.npy", labels)
    if scores is not None:
        np.save(out / f"{name}.ort_scores.npy", scores)
    m = onnx.load(str(path))
    ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                  for n in m.graph.node)
    order = list(dict.fromkeys(n.op_type if n.domain in ("", "ai.onnx")
                               else f"{n.domain}.{n.op_type}" for n in m.graph.node))
    init_types = sorted({onnx.TensorProto.DataType.Name(t.data_type).lower()
                         for t in m.graph.initializer})
    inits = {t.name for t in m.graph.initializer}
    return {
        "name": name,
        "file": f"{name}.onnx",
        "bytes": path.stat().st_size,
        "sha256": sha256(path),
        "exporter": entry["exporter"],
        "exporter_version": entry["exporter_version"],
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "ir_version": m.ir_version,
        "opset_import": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "exercises": entry["exercises"],
        "batch": entry["batch"],
        "inputs": [{"name": i.name, "type": type_str(i.type)} for i in m.graph.input
                   if i.name not in inits],
        "x": {"file": f"{name}.x.npy", "shape": list(x.shape), "dtype": str(x.dtype)},
        "op_types": order,
        "op_counts": dict(sorted(ops.items())),
        "initializer_types": init_types,
        "local_functions": [f.name for f in m.functions],
        "outputs": [{"name": o.name, "type": type_str(o.type)} for o in m.graph.output],
        "ort": {
            "version": installed("onnxruntime"),
            "rows": int(len(labels)),
            "accuracy_pct": round(float(np.mean(labels == y_te)) * 100, 2),
            "label": f"{name}.ort_label.npy ({label_src})",
            "scores": f"{name}.ort_scores.npy ({scores_src})" if scores is not None else None,
        },
    }


# ---------------------------------------------------------------------------------------------
# lipfp


def read_varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """Protobuf wire-format fields of one message: (number, wire type, value)."""
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def certificate_predictions(path):
    """Predicted class per instance from a lipfp certificate file (proto/lipfp.proto)."""
    preds = {}
    for num, _, gate in fields(Path(path).read_bytes()):
        if num != 3:  # CertificateFile.gates
            continue
        for gnum, _, inst in fields(gate):
            if gnum != 24:  # GateCertificates.instances
                continue
            index, pred = 0, 0
            for inum, _, v in fields(inst):
                if inum == 1:
                    index = v
                elif inum == 3:
                    pred = v - (1 << 64) if v >= 1 << 63 else v
            preds[index] = pred
    return np.array([preds[i] for i in sorted(preds)], dtype=np.int64)


def check_lipfp(binary, name, out):
    with tempfile.TemporaryDirectory() as tmp:
        cert = Path(tmp) / "out.pb"
        cmd = [str(binary), "-q", "certify", "--model", f"{name}.onnx",
               "--inputs", f"{name}.x.npy", "--labels", f"{name}.y.npy",
               "--epsilon", EPSILON, "--mode", "standard", "--certificates", str(cert)]
        r = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            msg = (r.stderr.strip() or r.stdout.strip()).replace("\n", " | ")
            return f"refused (exit {r.returncode}): {msg}", None, None
        preds = certificate_predictions(cert)
    ort_labels = np.load(out / f"{name}.ort_label.npy")
    same = int(np.sum(preds == ort_labels))
    summary = "\n".join(line.strip() for line in r.stdout.strip().splitlines()
                        if not line.strip().startswith("time:"))  # keep the manifest stable
    return "accepted", {"agree": same, "rows": int(len(ort_labels)),
                        "disagree_rows": [int(i) for i in np.nonzero(preds != ort_labels)[0]]}, \
        summary


def lipfp_commit(binary):
    try:
        root = Path(binary).resolve().parents[2]
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lipfp", help="lipfp binary: also record lipfp_today for every model")
    ap.add_argument("--lipfp-label", help="what to record as the lipfp build checked "
                    "(default: the git commit of the binary's repository)")
    ap.add_argument("--allow-other-versions", action="store_true")
    args = ap.parse_args()
    check_versions(args.allow_other_versions)
    out = HERE
    manifest_path = out / "MANIFEST.json"
    previous = {}
    if manifest_path.exists():
        previous = {m["name"]: m for m in json.loads(manifest_path.read_text())["models"]}

    x_tr, y_tr, x_te, y_te = digits_split()
    entries = []
    entries += export_torch(torch_models(x_tr, y_tr), x_te, out)
    entries += export_sklearn(x_tr, y_tr, x_te, out)
    entries += export_keras(x_tr, y_tr, x_te, out)

    lipfp_label = None
    if args.lipfp:
        lipfp_label = args.lipfp_label or lipfp_commit(args.lipfp) or str(args.lipfp)
    models = []
    for entry in entries:
        desc = describe(entry, y_te, out)
        name = desc["name"]
        if args.lipfp:
            verdict, agreement, summary = check_lipfp(args.lipfp, name, out)
            desc["lipfp_today"] = verdict
            desc["lipfp_checked_with"] = lipfp_label
            if agreement is not None:
                desc["lipfp_vs_ort"] = agreement
                desc["lipfp_summary"] = summary
        else:
            old = previous.get(name)
            if old and old.get("sha256") == desc["sha256"] and "lipfp_today" in old:
                for k in ("lipfp_today", "lipfp_checked_with", "lipfp_vs_ort", "lipfp_summary"):
                    if k in old:
                        desc[k] = old[k]
            else:
                desc["lipfp_today"] = "not checked"
        models.append(desc)
        print(f"{name:34s} {desc['bytes']:6d} B  ort {desc['ort']['accuracy_pct']:6.2f}%  "
              f"{desc['lipfp_today'][:100]}")

    manifest = {
        "description": "Real exports of small dense ReLU classifiers (digits, 64-32-32-10) "
                       "with onnxruntime's predictions; regenerate with generate.py.",
        "data": {"source": "sklearn.datasets.load_digits, pixels / 16 (float32)",
                 "split": f"train_test_split(test_size={TEST_ROWS}, random_state={SEED}, "
                          "stratify=y); the test rows are each model's x.npy",
                 "rows": TEST_ROWS},
        "versions": {k: installed(k) for k in PINNED},
        "python": sys.version.split()[0],
        "lipfp_command": "lipfp -q certify --model M.onnx --inputs M.x.npy --labels M.y.npy "
                         f"--epsilon {EPSILON} --mode standard",
        "models": models,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
