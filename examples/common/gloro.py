"""Globally-robust training of dense ReLU classifiers (in the spirit of Leino et al. 2021,
"Globally-Robust Neural Networks") and ONNX export, shared by the example scripts.

The training objective adds a "bottom" logit y_bot = max_{j != t} (y_j + eps * K_tj), where
K_tj = ||w_t - w_j||_2 * prod_{l < L} ||W_l||_2 is the margin Lipschitz bound lipfp certifies
with. Cross-entropy on [y, y_bot] asks the true class to beat every competitor by eps * K_tj,
which is exactly lipfp's real-arithmetic certificate, so certification at eps is non-trivial.
Spectral norms use power iteration with persistent vectors (gradients flow through u^T W v).
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

jax.config.update("jax_enable_x64", False)


def init_params(key, widths):
    params = []
    for n_in, n_out in zip(widths[:-1], widths[1:]):
        key, k = jax.random.split(key)
        w = jax.random.normal(k, (n_out, n_in)) * jnp.sqrt(2.0 / n_in)
        params.append((w, jnp.zeros((n_out,))))
    return params


def forward(params, x):
    z = x
    for k, (w, b) in enumerate(params):
        z = z @ w.T + b
        if k < len(params) - 1:
            z = jax.nn.relu(z)
    return z


def power_iterate(params, vecs, steps=2):
    new = []
    for (w, _), v in zip(params, vecs):
        for _ in range(steps):
            u = w @ v
            u = u / (jnp.linalg.norm(u) + 1e-12)
            v = w.T @ u
            v = v / (jnp.linalg.norm(v) + 1e-12)
        new.append(v)
    return new


def spectral_norms(params, vecs):
    norms = []
    for (w, _), v in zip(params, vecs):
        v = jax.lax.stop_gradient(v)
        u = w @ v
        u = jax.lax.stop_gradient(u / (jnp.linalg.norm(u) + 1e-12))
        norms.append(u @ w @ v)
    return norms


def margin_lipschitz(params, vecs):
    """K[i, j] = ||w_i - w_j|| * prod_{l<L} ||W_l||."""
    norms = spectral_norms(params, vecs)
    prefix = jnp.prod(jnp.stack(norms[:-1])) if len(norms) > 1 else 1.0
    w_last = params[-1][0]
    diff = w_last[:, None, :] - w_last[None, :, :]
    return jnp.sqrt(jnp.sum(diff**2, axis=-1) + 1e-12) * prefix


def gloro_loss(params, vecs, x, y, eps, classes):
    logits = forward(params, x)
    k = margin_lipschitz(params, vecs)
    k_t = k[y]  # [batch, classes]
    mask = jax.nn.one_hot(y, classes)
    bot = jnp.max(jnp.where(mask > 0, -jnp.inf, logits + eps * k_t), axis=1)
    aug = jnp.concatenate([logits, bot[:, None]], axis=1)
    return -jnp.mean(jax.nn.log_softmax(aug)[jnp.arange(x.shape[0]), y])


def train(x, y, widths, eps, epochs, lr=1e-3, batch=64, seed=0, eps_warmup=0.3):
    """Adam on the GloRo loss, eps ramped up linearly over the first eps_warmup of training."""
    key = jax.random.PRNGKey(seed)
    params = init_params(key, widths)
    vecs = [jnp.ones((w.shape[1],)) / jnp.sqrt(w.shape[1]) for w, _ in params]
    classes = widths[-1]
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    grad_fn = jax.jit(jax.value_and_grad(gloro_loss), static_argnums=(5,))
    rng = np.random.default_rng(seed)
    step = 0
    n = x.shape[0]
    for epoch in range(epochs):
        cur_eps = eps * min(1.0, (epoch + 1) / max(1, int(eps_warmup * epochs)))
        order = rng.permutation(n)
        total = 0.0
        for s in range(0, n, batch):
            idx = order[s : s + batch]
            vecs = power_iterate(params, vecs)
            loss, g = grad_fn(params, vecs, x[idx], y[idx], cur_eps, classes)
            step += 1
            m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
            v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
            params = jax.tree_util.tree_map(
                lambda p, a, b: p - lr * (a / (1 - 0.9**step)) / (jnp.sqrt(b / (1 - 0.999**step)) + 1e-8),
                params,
                m,
                v,
            )
            total += float(loss) * len(idx)
        if epoch % 50 == 0 or epoch == epochs - 1:
            print(f"epoch {epoch:4d} eps {cur_eps:.3f} loss {total / n:.4f}")
    return [(np.asarray(w, np.float32), np.asarray(b, np.float32)) for w, b in params]


def real_vra(params, x, y, eps):
    """Accuracy and the real-arithmetic VRA with power-iteration norms (a training-time estimate;
    lipfp computes the sound figures)."""
    p = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
    vecs = [jnp.ones((w.shape[1],)) for w, _ in p]
    for _ in range(50):
        vecs = power_iterate(p, vecs)
    k = np.asarray(margin_lipschitz(p, vecs))
    logits = np.asarray(forward(p, x))
    pred = logits.argmax(1)
    ok = []
    for i in range(len(x)):
        c = pred[i]
        margins = logits[i, c] - logits[i] - eps * k[c]
        margins[c] = np.inf
        ok.append(margins.min() > 0 and c == y[i])
    return float((pred == y).mean()), float(np.mean(ok))


def export_flatten_gemm(params, input_shape, path, name):
    """Export as PyTorch's TorchScript exporter does: Flatten(axis=1), then Gemm(transB=1)
    with Relu between the layers; float32 initializers."""
    nodes, inits = [], []
    cur = "input"
    nodes.append(helper.make_node("Flatten", [cur], ["/Flatten_output_0"], name="/Flatten", axis=1))
    cur = "/Flatten_output_0"
    for k, (w, b) in enumerate(params):
        wn, bn = f"fc{k}.weight", f"fc{k}.bias"
        inits += [numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)]
        out = f"/fc{k}/Gemm_output_0" if k < len(params) - 1 else "logits"
        nodes.append(helper.make_node("Gemm", [cur, wn, bn], [out], name=f"/fc{k}/Gemm", alpha=1.0, beta=1.0, transB=1))
        cur = out
        if k < len(params) - 1:
            nodes.append(helper.make_node("Relu", [cur], [f"/act{k}/Relu_output_0"], name=f"/act{k}/Relu"))
            cur = f"/act{k}/Relu_output_0"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", *input_shape])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", params[-1][0].shape[0]])],
        inits,
    )
    model = helper.make_model(graph, producer_name="pytorch", producer_version="2.1.0", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def export_reshape_matmul_add(params, input_dim, path, name):
    """Export as tf2onnx does: Reshape to [-1, d], then MatMul + Add (weights stored [in, out])
    with Relu between the layers."""
    nodes, inits = [], []
    inits.append(numpy_helper.from_array(np.array([-1, input_dim], np.int64), "const_shape"))
    nodes.append(helper.make_node("Reshape", ["input", "const_shape"], ["flat"], name="sequential/flatten/Reshape"))
    cur = "flat"
    for k, (w, b) in enumerate(params):
        wn, bn = f"sequential/dense_{k}/MatMul/ReadVariableOp:0", f"sequential/dense_{k}/BiasAdd/ReadVariableOp:0"
        inits += [numpy_helper.from_array(np.ascontiguousarray(w.T), wn), numpy_helper.from_array(b, bn)]
        mm = f"sequential/dense_{k}/MatMul:0"
        nodes.append(helper.make_node("MatMul", [cur, wn], [mm], name=f"sequential/dense_{k}/MatMul"))
        out = f"sequential/dense_{k}/BiasAdd:0" if k < len(params) - 1 else "logits"
        nodes.append(helper.make_node("Add", [mm, bn], [out], name=f"sequential/dense_{k}/BiasAdd"))
        cur = out
        if k < len(params) - 1:
            nodes.append(helper.make_node("Relu", [cur], [f"sequential/dense_{k}/Relu:0"], name=f"sequential/dense_{k}/Relu"))
            cur = f"sequential/dense_{k}/Relu:0"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["unk__0", input_dim])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["unk__1", params[-1][0].shape[0]])],
        inits,
    )
    model = helper.make_model(graph, producer_name="tf2onnx", producer_version="1.16.1", opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
