"""Independent real-arithmetic CROWN reference and l2 PGD attack for dense ReLU ONNX classifiers.

For issue 21 ("local bounds"): a float64 numpy CROWN over the whole l2 ball
{x : ||x - x0||_2 <= eps} (no clipping to the pixel box), to compare lipfp's sound `local`
mode against, plus a PGD attack that finds points the ball does not protect.

CROWN (Zhang et al. 2018), as implemented here:
  * layer-1 pre-activations are exact: W1 x0 + b1 +- eps ||row||_2;
  * deeper pre-activations and the final margins z_c - z_j (c the predicted class, every
    j != c) are bounded by back-substitution through every earlier layer, relaxing each
    ReLU with its pre-activation bounds [l, u]: stable neurons exactly, unstable ones
    (l < 0 < u) by the upper line u/(u-l) (z - l) and the lower line alpha z with the
    adaptive choice alpha = 1 if u > -l else 0;
  * the resulting a^T x + d is concretised with the l2 dual norm:
    min over the ball of a^T x = a^T x0 - eps ||a||_2.
A point is certified at eps iff every margin lower bound is > 0. This is real arithmetic
evaluated in float64, a reference, not a sound floating-point certificate.

PGD: margin loss z_c - max_{j != c} z_j, normalised-gradient steps of 2.5 eps / steps,
projection onto the ball, one start at x0 plus random starts inside the ball; a point is
falsified when some iterate's float64 argmax differs from c.

With --auto-lirpa the script also runs auto_LiRPA's CROWN (method='CROWN',
PerturbationLpNorm(norm=2), no x_L/x_U, sparse_intermediate_bounds off) in float64 and
asserts its margin bounds equal ours to 1e-5. This needs torch and auto_LiRPA (the
target/local-venv environment).

    python tests/local/crown_reference.py --model /tmp/natural/mnist-256x2.onnx \\
        --inputs /tmp/natural/mnist_x_eval.npy --labels /tmp/natural/mnist_y_eval.npy \\
        --count 500 --radii 0.02,0.1,0.3 --out /tmp/natural/mnist-256x2.json [--auto-lirpa]
"""

import argparse
import json
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402


def load_network(path):
    """Read a dense ReLU ONNX graph as float64 [(W [out, in], b [out]), ...].

    Accepts Gemm (any transB, alpha, beta; transA=0) or MatMul followed by Add for the affine
    layers, Relu between them, and Flatten/Reshape/Identity, which are skipped (the inputs are
    flattened by the caller). Raises ValueError for anything else.
    """
    model = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            inits[node.output[0]] = numpy_helper.to_array(node.attribute[0].t).astype(np.float64)
    layers = []
    open_affine = False  # the last layer may still take an Add bias
    for node in model.graph.node:
        op = node.op_type
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if op in ("Flatten", "Reshape", "Identity", "Constant"):
            continue
        if op == "Gemm":
            if attrs.get("transA", 0):
                raise ValueError("Gemm with transA=1 is not supported")
            w = inits[node.input[1]] * attrs.get("alpha", 1.0)
            w = w if attrs.get("transB", 0) else w.T
            b = np.zeros(w.shape[0])
            if len(node.input) > 2 and node.input[2]:
                b = b + inits[node.input[2]] * attrs.get("beta", 1.0)
            layers.append([w, b])
            open_affine = True
        elif op == "MatMul":
            layers.append([inits[node.input[1]].T, np.zeros(inits[node.input[1]].shape[1])])
            open_affine = True
        elif op == "Add" and open_affine:
            bias = inits.get(node.input[1], inits.get(node.input[0]))
            if bias is None:
                raise ValueError("Add without a constant operand")
            layers[-1][1] = layers[-1][1] + bias.reshape(-1)
        elif op == "Relu":
            open_affine = False
        else:
            raise ValueError(f"unsupported node {op} ({node.name})")
    relus = sum(node.op_type == "Relu" for node in model.graph.node)
    if relus != len(layers) - 1:
        raise ValueError(f"expected {len(layers) - 1} Relu nodes between {len(layers)} affine layers, found {relus}")
    return [(w, b) for w, b in layers]


def forward(params, x):
    """Float64 logits for a batch x [B, in]."""
    h = x
    for k, (w, b) in enumerate(params):
        h = h @ w.T + b
        if k + 1 < len(params):
            h = np.maximum(h, 0)
    return h


def relu_relaxation(lower, upper):
    """CROWN relaxation lo_slope * z <= relu(z) <= up_slope * z + up_icpt on [lower, upper]."""
    unstable = (lower < 0) & (upper > 0)
    active = lower >= 0
    width = np.where(unstable, upper - lower, 1.0)
    up_slope = np.where(unstable, upper / width, active.astype(np.float64))
    up_icpt = np.where(unstable, -up_slope * lower, 0.0)
    lo_slope = np.where(unstable, (upper > -lower).astype(np.float64), active.astype(np.float64))
    return up_slope, up_icpt, lo_slope


def lower_bound(params, relaxations, coeff, const, x0, eps):
    """Lower bounds of coeff @ h + const over the l2 ball, h the input of affine layer k.

    k = len(relaxations): h = x for k = 0, else the ReLU output after affine layer k - 1, and
    relaxations[j] is the ReLU relaxation after affine layer j, for every j < k.
    """
    for j in range(len(relaxations) - 1, -1, -1):
        up_slope, up_icpt, lo_slope = relaxations[j]
        pos, neg = np.maximum(coeff, 0), np.minimum(coeff, 0)
        const = const + neg @ up_icpt
        coeff = pos * lo_slope + neg * up_slope
        w, b = params[j]
        const = const + coeff @ b
        coeff = coeff @ w
    return coeff @ x0 + const - eps * np.linalg.norm(coeff, axis=1)


def crown(params, x0, eps, label):
    """CROWN over the l2 ball of radius eps around x0.

    Returns (pre-activation bounds [(l, u), ...] for every hidden layer, lower bounds of
    z_label - z_j for every j != label, in increasing j).
    """
    bounds, relaxations = [], []
    for w, b in params[:-1]:
        n = len(b)
        both = lower_bound(params, relaxations, np.vstack([w, -w]), np.concatenate([b, -b]), x0, eps)
        lower, upper = both[:n], -both[n:]
        bounds.append((lower, upper))
        relaxations.append(relu_relaxation(lower, upper))
    w, b = params[-1]
    spec = margin_spec(len(b), label)
    return bounds, lower_bound(params, relaxations, spec @ w, spec @ b, x0, eps)


def margin_spec(classes, label):
    """Rows e_label - e_j for every j != label."""
    others = [j for j in range(classes) if j != label]
    spec = -np.eye(classes)[others]
    spec[:, label] = 1.0
    return spec


def margin_and_grad(params, x, label):
    """Margins z_label - max_{j != label} z_j of a batch x and their gradients."""
    acts = [x]
    for k, (w, b) in enumerate(params):
        z = acts[-1] @ w.T + b
        acts.append(np.maximum(z, 0) if k + 1 < len(params) else z)
    logits = acts[-1]
    rivals = logits.copy()
    rivals[:, label] = -np.inf
    runner_up = rivals.argmax(axis=1)
    rows = np.arange(len(x))
    margin = logits[:, label] - logits[rows, runner_up]
    delta = np.zeros_like(logits)
    delta[:, label] = 1.0
    delta[rows, runner_up] -= 1.0
    for k in range(len(params) - 1, -1, -1):
        delta = delta @ params[k][0]
        if k > 0:
            delta = delta * (acts[k] > 0)
    return margin, delta


def pgd(params, x0, label, eps, rng, steps=50, restarts=5):
    """l2 PGD on the margin; returns a point of the ball whose argmax is not label, or None."""
    d = x0.size
    direction = rng.standard_normal((restarts, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radius = eps * rng.random((restarts, 1)) ** (1.0 / d)
    delta = direction * radius
    delta[0] = 0.0
    step = 2.5 * eps / steps
    for _ in range(steps + 1):
        x = x0 + delta
        margin, grad = margin_and_grad(params, x, label)
        hit = np.flatnonzero(margin < 0)
        if hit.size:
            return x[hit[0]]
        norms = np.linalg.norm(grad, axis=1, keepdims=True)
        delta = delta - step * grad / np.maximum(norms, 1e-30)
        scale = np.minimum(1.0, eps / np.maximum(np.linalg.norm(delta, axis=1, keepdims=True), 1e-30))
        delta = delta * scale
    return None


def auto_lirpa_bounder(params):
    """Return f(x0, eps, label) -> auto_LiRPA's CROWN, in float64, shaped like crown()'s result."""
    import torch
    from auto_LiRPA import BoundedModule, BoundedTensor, PerturbationLpNorm

    torch.set_num_threads(1)
    modules = []
    for k, (w, b) in enumerate(params):
        lin = torch.nn.Linear(w.shape[1], w.shape[0]).double()
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        modules.append(lin)
        if k + 1 < len(params):
            modules.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*modules).double()
    dim, classes = params[0][0].shape[1], params[-1][0].shape[0]
    # auto_LiRPA's default sparse_intermediate_bounds keeps IBP bounds for neurons that IBP
    # already finds stable; off, every intermediate bound is CROWN's, as in crown().
    bounded = BoundedModule(net, torch.zeros(1, dim, dtype=torch.float64), device="cpu",
                            bound_opts={"sparse_intermediate_bounds": False})

    def bound(x0, eps, label):
        ptb = PerturbationLpNorm(norm=2, eps=eps)
        x = BoundedTensor(torch.from_numpy(x0.reshape(1, -1)), ptb)
        spec = torch.from_numpy(margin_spec(classes, label)).unsqueeze(0)
        with torch.no_grad():
            lb, _ = bounded.compute_bounds(x=(x,), C=spec, method="CROWN", bound_upper=False)
        pre = [(relu.inputs[0].lower, relu.inputs[0].upper) for relu in bounded.relus]
        return [(l.detach().numpy().reshape(-1), u.detach().numpy().reshape(-1)) for l, u in pre], lb.numpy().reshape(-1)

    return bound


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="dense ReLU ONNX classifier")
    parser.add_argument("--inputs", required=True, help=".npy inputs, one row per point (flattened)")
    parser.add_argument("--labels", required=True, help=".npy integer labels")
    parser.add_argument("--count", type=int, default=100, help="first COUNT points")
    parser.add_argument("--radii", default="0.02,0.1,0.3", help="comma-separated l2 radii")
    parser.add_argument("--out", required=True, help="JSON report")
    parser.add_argument("--pgd-steps", type=int, default=50)
    parser.add_argument("--pgd-restarts", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--auto-lirpa", action="store_true", help="also run auto_LiRPA CROWN and compare")
    args = parser.parse_args()

    params = load_network(args.model)
    xs = np.load(args.inputs).astype(np.float64)
    xs = xs.reshape(len(xs), -1)[: args.count]
    ys = np.load(args.labels).astype(np.int64)[: args.count]
    count = len(xs)
    predictions = forward(params, xs).argmax(axis=1)
    alirpa = auto_lirpa_bounder(params) if args.auto_lirpa else None

    report = {
        "model": args.model,
        "count": count,
        "correct_count": int((predictions == ys).sum()),
        "pgd": {"steps": args.pgd_steps, "restarts": args.pgd_restarts, "seed": args.seed},
        "radii": {},
        "predictions": predictions.tolist(),
    }
    for token in args.radii.split(","):
        eps = float(token)
        certified, falsified = [], []
        crown_time = alirpa_time = 0.0
        alirpa_certified = 0
        max_diff = 0.0
        for i in range(count):
            start = time.perf_counter()
            _, margins = crown(params, xs[i], eps, predictions[i])
            crown_time += time.perf_counter() - start
            if margins.min() > 0:
                certified.append(i)
            if alirpa is not None:
                start = time.perf_counter()
                _, theirs = alirpa(xs[i], eps, predictions[i])
                alirpa_time += time.perf_counter() - start
                alirpa_certified += int(theirs.min() > 0)
                max_diff = max(max_diff, float(np.abs(theirs - margins).max()))
            rng = np.random.default_rng([args.seed, i])
            if pgd(params, xs[i], predictions[i], eps, rng, args.pgd_steps, args.pgd_restarts) is not None:
                falsified.append(i)
        overlap = set(certified) & set(falsified)
        assert not overlap, f"eps {token}: certified and falsified: {sorted(overlap)}"
        entry = {
            "crown_certified": certified,
            "pgd_falsified": falsified,
            "certified_count": len(certified),
            "falsified_count": len(falsified),
            "crown_seconds_per_point": crown_time / count,
        }
        if alirpa is not None:
            entry["auto_lirpa_certified_count"] = alirpa_certified
            entry["auto_lirpa_seconds_per_point"] = alirpa_time / count
            entry["auto_lirpa_max_abs_margin_diff"] = max_diff
            assert max_diff <= 1e-5, f"eps {token}: auto_LiRPA margins differ by {max_diff}"
        report["radii"][token] = entry
        print(f"{os.path.basename(args.model)} eps {token}: CROWN certified {len(certified)}/{count}, "
              f"PGD falsified {len(falsified)}/{count}, CROWN {crown_time / count * 1e3:.1f} ms/point"
              + (f", auto_LiRPA certified {alirpa_certified} ({alirpa_time / count * 1e3:.1f} ms/point, "
                 f"max |diff| {max_diff:.1e})" if alirpa is not None else ""))
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
