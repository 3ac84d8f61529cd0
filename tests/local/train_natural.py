"""Train naturally (plain cross-entropy) dense ReLU classifiers and export them to ONNX.

Fixtures for issue 21 ("local bounds"): networks with no Lipschitz regularisation and no
adversarial training, whose global Lipschitz bounds are loose, so that local (CROWN-style)
certificates are what matters.

Data splits:
  * MNIST: ../shared/benchmarks/mnist/{x,y}_test.npy is the official 10,000-image test set;
    there is no training set, so the networks train on rows 0..4999 and are evaluated and
    certified on rows 5000..9999 (written to mnist_{x,y}_eval.npy).
  * digits: examples/digits/{x,y}_test.npy holds 450 images of scikit-learn's 8x8 digits
    (pixels in [0, 1]); the tiny network trains on rows 0..299 and is evaluated on rows
    300..449 (written to digits_{x,y}_eval.npy, inputs flattened to 64 features).

Networks (hidden widths): mnist-256x2, mnist-100x5, mnist-256x6 (784 inputs) and digits-32x2
(64 inputs), 10 logits each. Training is float32 numpy minibatch Adam with He
initialisation and a fixed seed, single-threaded, so reruns give identical weights.

Each network is exported as opset 13, float32, graph input `input` of shape [N, in] (dynamic
batch), Gemm (transB=1) + Relu nodes, output `logits` (no softmax), and checked with
onnxruntime: its predictions must equal the numpy forward pass on 1,000 points (the 450
digits images for the digits network).

    python tests/local/train_natural.py --out /tmp/natural
"""

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST_DIR = os.path.join(REPO, "..", "shared", "benchmarks", "mnist")
DIGITS_DIR = os.path.join(REPO, "examples", "digits")

# name -> (dataset, hidden widths, epochs, learning rate)
NETWORKS = {
    "mnist-256x2": ("mnist", [256] * 2, 20, 1e-3),
    "mnist-100x5": ("mnist", [100] * 5, 20, 1e-3),
    "mnist-256x6": ("mnist", [256] * 6, 20, 5e-4),
    "digits-32x2": ("digits", [32] * 2, 200, 2e-3),
}


def load_data():
    """Return {dataset: (x_train, y_train, x_eval, y_eval)} with flattened float32 inputs."""
    x = np.load(os.path.join(MNIST_DIR, "x_test.npy")).astype(np.float32).reshape(10000, -1)
    y = np.load(os.path.join(MNIST_DIR, "y_test.npy")).astype(np.int64)
    dx = np.load(os.path.join(DIGITS_DIR, "x_test.npy")).astype(np.float32).reshape(-1, 64)
    dy = np.load(os.path.join(DIGITS_DIR, "y_test.npy")).astype(np.int64)
    return {
        "mnist": (x[:5000], y[:5000], x[5000:], y[5000:]),
        "digits": (dx[:300], dy[:300], dx[300:], dy[300:]),
    }


def forward(params, x):
    """Logits of the ReLU network; params is a list of (W [out, in], b [out])."""
    h = x
    for k, (w, b) in enumerate(params):
        h = h @ w.T + b
        if k + 1 < len(params):
            h = np.maximum(h, 0)
    return h


def train(x, y, widths, epochs, lr, seed, batch=64):
    """Minibatch Adam on softmax cross-entropy; returns float32 [(W, b), ...]."""
    rng = np.random.default_rng(seed)
    params = []
    for n_in, n_out in zip(widths[:-1], widths[1:]):
        w = (rng.standard_normal((n_out, n_in)) * np.sqrt(2.0 / n_in)).astype(np.float32)
        params.append([w, np.zeros(n_out, np.float32)])
    moments = [[np.zeros_like(p) for p in layer] for layer in params]
    velocities = [[np.zeros_like(p) for p in layer] for layer in params]
    beta1, beta2, tiny = 0.9, 0.999, 1e-8
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            idx = order[start:start + batch]
            xb, yb = x[idx], y[idx]
            acts = [xb]
            for k, (w, b) in enumerate(params):
                z = acts[-1] @ w.T + b
                acts.append(np.maximum(z, 0) if k + 1 < len(params) else z)
            logits = acts[-1]
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1
            delta = p / len(yb)
            step += 1
            for k in reversed(range(len(params))):
                w = params[k][0]
                grads = (delta.T @ acts[k], delta.sum(axis=0))
                if k > 0:
                    delta = (delta @ w) * (acts[k] > 0)
                for j, g in enumerate(grads):
                    moments[k][j] = beta1 * moments[k][j] + (1 - beta1) * g
                    velocities[k][j] = beta2 * velocities[k][j] + (1 - beta2) * g * g
                    m_hat = moments[k][j] / (1 - beta1**step)
                    v_hat = velocities[k][j] / (1 - beta2**step)
                    params[k][j] -= (lr * m_hat / (np.sqrt(v_hat) + tiny)).astype(np.float32)
    return [(w.astype(np.float32), b.astype(np.float32)) for w, b in params]


def export_onnx(params, path, name):
    """Write the network as Gemm(transB=1) + Relu nodes, opset 13, dynamic batch."""
    nodes, inits = [], []
    cur = "input"
    for k, (w, b) in enumerate(params):
        wn, bn, out = f"fc{k}.weight", f"fc{k}.bias", f"fc{k}_out"
        inits += [numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)]
        last = k + 1 == len(params)
        out = "logits" if last else out
        nodes.append(helper.make_node("Gemm", [cur, wn, bn], [out], name=f"fc{k}", alpha=1.0, beta=1.0, transB=1))
        cur = out
        if not last:
            nodes.append(helper.make_node("Relu", [cur], [f"relu{k}_out"], name=f"relu{k}"))
            cur = f"relu{k}_out"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", params[0][0].shape[1]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", params[-1][0].shape[0]])],
        inits,
    )
    model = helper.make_model(graph, producer_name="lipfp-train-natural", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def check_onnx(path, params, x):
    """Assert onnxruntime's argmax equals the numpy forward pass on x."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    ours = forward(params, x)
    theirs = sess.run(["logits"], {"input": x})[0]
    assert np.array_equal(ours.argmax(1), theirs.argmax(1)), f"{path}: onnxruntime predictions differ"
    return float(np.abs(ours - theirs).max())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    data = load_data()
    for ds, (_, _, x_eval, y_eval) in data.items():
        np.save(os.path.join(args.out, f"{ds}_x_eval.npy"), x_eval)
        np.save(os.path.join(args.out, f"{ds}_y_eval.npy"), y_eval)

    for name, (ds, hidden, epochs, lr) in NETWORKS.items():
        x_tr, y_tr, x_ev, y_ev = data[ds]
        params = train(x_tr, y_tr, [x_tr.shape[1], *hidden, 10], epochs, lr, args.seed)
        path = os.path.join(args.out, f"{name}.onnx")
        export_onnx(params, path, name.replace("-", "_"))
        diff = check_onnx(path, params, np.concatenate([x_ev, x_tr])[:1000])
        train_acc = float((forward(params, x_tr).argmax(1) == y_tr).mean())
        acc = float((forward(params, x_ev).argmax(1) == y_ev).mean())
        print(f"{name}: train accuracy {train_acc:.4f}, test accuracy {acc:.4f} on {len(y_ev)} eval rows, "
              f"onnxruntime max |logit diff| {diff:.2e} -> {path}")


if __name__ == "__main__":
    main()
