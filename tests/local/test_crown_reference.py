"""Checks of tests/local/crown_reference.py (plain asserts; runs as a script or under pytest).

  * the ONNX reader handles Gemm (transB 0/1, alpha, beta) and MatMul + Add, matching
    onnxruntime's logits;
  * on tiny random networks (3-5-5-3, 2-4-4-2, 4-8-8-8-3) every CROWN pre-activation interval
    contains the values met by dense sampling of the l2 ball (points on the sphere and inside
    it), layer 1 is attained exactly, and every margin lower bound is below the sampled
    minimum margin;
  * PGD returns points inside the ball whose argmax changed, and never for a certified point;
  * where auto_LiRPA imports (target/local-venv), its CROWN (method='CROWN',
    PerturbationLpNorm norm=2, no x_L/x_U) equals ours to 1e-5, intermediate bounds included,
    on the tiny networks and, when --natural names a folder written by train_natural.py,
    on the MNIST networks for a few evaluation points.

    python tests/local/test_crown_reference.py [--natural /tmp/natural]
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import crown_reference as cr  # noqa: E402

TINY = [[3, 5, 5, 3], [2, 4, 4, 2], [4, 8, 8, 8, 3]]
TOL = 1e-9


def random_net(widths, rng):
    """Random float64 [(W, b), ...] with biases large enough for unstable and stable neurons."""
    return [(rng.standard_normal((o, i)), 0.5 * rng.standard_normal(o)) for i, o in zip(widths[:-1], widths[1:])]


def ball_samples(x0, eps, rng, count=20000):
    """Points of the l2 ball: half on the sphere, half uniform inside, plus the centre."""
    d = x0.size
    dirs = rng.standard_normal((count, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    radii = np.ones((count, 1))
    radii[count // 2:] = rng.random((count - count // 2, 1)) ** (1.0 / d)
    return np.vstack([x0, x0 + eps * dirs * radii])


def pre_activations(params, x):
    """Pre-activation values [z_1, ..., z_{L-1}] and logits for a batch x."""
    zs, h = [], x
    for w, b in params[:-1]:
        zs.append(h @ w.T + b)
        h = np.maximum(zs[-1], 0)
    return zs, h @ params[-1][0].T + params[-1][1]


def test_onnx_reader():
    """Gemm with transB 0/1, alpha, beta and MatMul + Add all read as the onnxruntime forward."""
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    w1, b1 = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    w2, b2 = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    w3, b3 = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (b1, "b1"), (w2.T.copy(), "w2t"), (b2, "b2"), (w3.T.copy(), "w3t"), (b3, "b3")]]
    nodes = [
        helper.make_node("Gemm", ["input", "w1", "b1"], ["z1"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Relu", ["z1"], ["h1"]),
        helper.make_node("Gemm", ["h1", "w2t", "b2"], ["z2"]),
        helper.make_node("Relu", ["z2"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w3t"], ["m3"]),
        helper.make_node("Add", ["b3", "m3"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "reader", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "reader.onnx")
        onnx.save(model, path)
        params = cr.load_network(path)
        x = rng.standard_normal((50, 4)).astype(np.float32)
        theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert [w.shape for w, _ in params] == [(6, 4), (5, 6), (3, 5)]
    assert np.allclose(cr.forward(params, x.astype(np.float64)), theirs, atol=1e-4)


def test_crown_contains_samples():
    """CROWN intervals contain sampled pre-activations; margins lower-bound sampled margins."""
    rng = np.random.default_rng(2)
    unstable_seen = 0
    for widths in TINY:
        for trial in range(20):
            params = random_net(widths, rng)
            x0 = rng.standard_normal(widths[0])
            eps = [0.05, 0.3, 1.0, 3.0][trial % 4]
            label = int(cr.forward(params, x0[None])[0].argmax())
            bounds, margins = cr.crown(params, x0, eps, label)
            xs = ball_samples(x0, eps, rng)
            zs, logits = pre_activations(params, xs)
            for k, ((lower, upper), z) in enumerate(zip(bounds, zs)):
                assert np.all(z >= lower - TOL) and np.all(z <= upper + TOL), (widths, trial, k)
                assert np.all(lower <= upper + TOL)
                unstable_seen += int(((lower < 0) & (upper > 0)).sum())
            w1, b1 = params[0]
            exact = w1 @ x0 + b1
            radius = eps * np.linalg.norm(w1, axis=1)
            assert np.allclose(bounds[0][0], exact - radius) and np.allclose(bounds[0][1], exact + radius)
            attained = (x0 + eps * w1 / np.linalg.norm(w1, axis=1, keepdims=True)) @ w1.T + b1
            assert np.allclose(np.diag(attained), bounds[0][1])
            sampled = logits[:, [label]] - np.delete(logits, label, axis=1)
            assert np.all(margins <= sampled.min(axis=0) + TOL), (widths, trial)
            if eps == 0.05:
                assert np.all(np.abs(margins - sampled.min(axis=0)) < 1.0), "bounds unreasonably loose"
    assert unstable_seen > 100, "the tiny nets must exercise unstable neurons"


def test_pgd():
    """PGD counterexamples lie in the ball and change the argmax; certified points are never hit."""
    rng = np.random.default_rng(3)
    found = 0
    for trial in range(60):
        params = random_net([4, 8, 8, 3], rng)
        x0 = rng.standard_normal(4)
        eps = [0.1, 1.0, 3.0][trial % 3]
        label = int(cr.forward(params, x0[None])[0].argmax())
        _, margins = cr.crown(params, x0, eps, label)
        adv = cr.pgd(params, x0, label, eps, np.random.default_rng(trial))
        if adv is None:
            continue
        found += 1
        assert np.linalg.norm(adv - x0) <= eps * (1 + 1e-12)
        assert cr.forward(params, adv[None])[0].argmax() != label
        assert margins.min() <= 0
    assert found > 10


def auto_lirpa_available():
    try:
        import auto_LiRPA  # noqa: F401
    except ImportError:
        return False
    return True


def check_against_auto_lirpa(params, xs, radii, tol=1e-5):
    """Assert auto_LiRPA's CROWN equals ours (intermediate and margin bounds); return max diff."""
    bounder = cr.auto_lirpa_bounder(params)
    worst = 0.0
    for x0 in xs:
        label = int(cr.forward(params, x0[None])[0].argmax())
        for eps in radii:
            ours_pre, ours = cr.crown(params, x0, eps, label)
            theirs_pre, theirs = bounder(x0, eps, label)
            diffs = [np.abs(ours - theirs).max()]
            for (l1, u1), (l2, u2) in zip(ours_pre, theirs_pre):
                diffs += [np.abs(l1 - l2).max(), np.abs(u1 - u2).max()]
            worst = max(worst, max(diffs))
            assert max(diffs) <= tol, (eps, max(diffs))
    return worst


def test_auto_lirpa_tiny():
    if not auto_lirpa_available():
        print("auto_LiRPA not importable: skipped the comparison on tiny networks")
        return
    rng = np.random.default_rng(4)
    for widths in TINY:
        params = random_net(widths, rng)
        worst = check_against_auto_lirpa(params, rng.standard_normal((3, widths[0])), [0.05, 0.3, 1.0])
        print(f"auto_LiRPA vs ours on {widths}: max |diff| {worst:.1e}")


def check_natural(folder, points=3):
    """Compare with auto_LiRPA on the MNIST networks of train_natural.py for a few points."""
    xs = np.load(os.path.join(folder, "mnist_x_eval.npy")).astype(np.float64)[:points]
    for name in ["mnist-256x2", "mnist-100x5", "mnist-256x6"]:
        params = cr.load_network(os.path.join(folder, f"{name}.onnx"))
        worst = check_against_auto_lirpa(params, xs, [0.02, 0.1, 0.3])
        print(f"auto_LiRPA vs ours on {name}, {points} points: max |diff| {worst:.1e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--natural", help="folder written by train_natural.py (MNIST comparison with auto_LiRPA)")
    args = parser.parse_args()
    tests = [test_onnx_reader, test_crown_contains_samples, test_pgd, test_auto_lirpa_tiny]
    for test in tests:
        test()
        print(f"ok {test.__name__}")
    if args.natural:
        if auto_lirpa_available():
            check_natural(args.natural)
            print("ok check_natural")
        else:
            print("auto_LiRPA not importable: skipped the MNIST comparison")
    print(f"{len(tests) + bool(args.natural)} passed, 0 failed")


if __name__ == "__main__":
    main()
