"""Parameter probes: per-layer gradient norms over many batches, output change under an update."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax.jacobian import checks, krylov


def _layer_norms(tree, model, stack):
    """[{name: ||array||_F}] per block of `stack`, from a State shaped like the model's params.

    NumPy on the host: an eager jnp norm would compile once per parameter shape.
    """
    return [
        {name: float(np.linalg.norm(np.asarray(v, np.float64))) for name, v in layer.items()}
        for layer in normjax.layer_params(tree, model, stack)
    ]


_tree_add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))


def _by_name(per_layer: list[dict]) -> dict:
    """{name: (L,) array} from [{name: value}] per layer; NaN where a layer lacks that parameter."""
    names = sorted({name for layer in per_layer for name in layer})
    return {name: np.array([layer.get(name, np.nan) for layer in per_layer]) for name in names}


@functools.partial(jax.jit, static_argnames=("graphdef", "loss_fn"))
def _grads(graphdef, loss_fn, params, rest, batch):
    return jax.grad(lambda p: loss_fn(nnx.merge(graphdef, p, rest), batch))(params)


def grad_fn(model, loss_fn):
    """A (params, rest, batch) -> d loss / d params function, and the split (params, rest).

    `loss_fn(model, batch) -> scalar` is called on the model rebuilt with `nnx.merge`. The gradient
    is compiled once per (model structure, loss_fn, batch shape) and reused by every batch and call.
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return functools.partial(_grads, graphdef, loss_fn), params, rest


def grad_norms(model, loss_fn, batches, *, stacks=None) -> dict:
    """Per-layer, per-parameter gradient norms at the current weights, over many batches.

    Two metrics per parameter: the mean over batches of ||grad_b|| and the norm of the mean
    gradient ||E_b[grad_b]|| (Xiong et al.'s Fig. 3 metric). By the triangle inequality the second
    is <= the first, with equality for a single batch. One jitted gradient function serves every
    batch; cost one forward + backward pass per batch.

    Args:
      model: a normjax.Transformer. loss_fn: (model, batch) -> scalar loss.
      batches: an iterable of batches (pytrees accepted by loss_fn), all of one shape.
      stacks: stack names to report (default all).

    Returns:
      {"num_batches": int, "stacks": {stack: {name: {"mean_of_norms": (L,), "std_of_norms": (L,),
      "norm_of_mean": (L,)}}}}; names as in `normjax.layer_params` ("ffn/fc1/kernel", ...), NaN
      for a layer without that parameter (per-layer placements).

    Raises:
      FloatingPointError: a batch's gradient has NaN/inf entries (names the batch index).
    """
    grads, params, rest = grad_fn(model, loss_fn)
    stacks = normjax.stack_names(model) if stacks is None else tuple(stacks)
    total, per_batch = None, {s: [] for s in stacks}
    for b, batch in enumerate(batches):
        g = grads(params, rest, batch)
        checks.check_finite(f"the gradient of batch {b}", g)
        total = g if total is None else _tree_add(total, g)
        for s in stacks:
            per_batch[s].append(_by_name(_layer_norms(g, model, s)))
    if total is None:
        raise ValueError("batches is empty.")
    n = len(per_batch[stacks[0]])
    mean = jax.tree.map(lambda a: np.asarray(a) / n, total)
    out = {}
    for s in stacks:
        norm_of_mean = _by_name(_layer_norms(mean, model, s))
        out[s] = {
            name: {
                "mean_of_norms": np.mean([pb[name] for pb in per_batch[s]], axis=0),
                "std_of_norms": np.std([pb[name] for pb in per_batch[s]], axis=0),
                "norm_of_mean": norm_of_mean[name],
            }
            for name in norm_of_mean
        }
    return {"num_batches": n, "stacks": out}


def perturbation(model, *, eps: float, kind: str = "random", key=None, loss_fn=None, batch=None):
    """A weight update dW of every nnx.Param, as a State shaped like nnx.state(model, nnx.Param).

    kind="random": dW = eps * |W| * N(0, 1), elementwise, so each weight moves by a relative
      amount eps (zero-initialized weights, e.g. biases or ReZero's alpha, stay put).
    kind="random_sign": dW = eps * s with s = +-1 drawn uniformly per weight (independent of W): the default
      perturbation of Liu et al. 2020's tool (Transformer-Clinic, fairseq/fairseq/tasks/fairseq_task.py lines
      244-258: `parameter.data.add_(parameter.data.clone().normal_().sign(), alpha=-0.0001)` when
      `--plot_stability` is set without `--gradient_as_delta`), applied there to the weights `weight_mask` keeps.
    kind="grad_sign": dW = -eps * sign(dL/dW) for `loss_fn(model, batch)`: Adam's first step with
      learning rate eps, every weight moving by eps in a direction correlated across weights (the same tool's
      `--gradient_as_delta` option, -1e-6 sign(grad) of the task loss; not its default random-sign one).
    """
    params = nnx.state(model, nnx.Param)
    if kind == "random":
        return _relative_noise(params, jax.random.key(0) if key is None else key, eps)
    if kind == "random_sign":
        return _random_sign(params, jax.random.key(0) if key is None else key, eps)
    if kind == "grad_sign":
        if loss_fn is None or batch is None:
            raise ValueError("kind='grad_sign' needs loss_fn and batch.")
        grads, p, rest = grad_fn(model, loss_fn)
        return _sign_step(grads(p, rest, batch), eps)
    raise ValueError(f"kind must be 'random', 'random_sign' or 'grad_sign', got {kind!r}.")


_sign_step = jax.jit(lambda grads, eps: jax.tree.map(lambda g: -eps * jnp.sign(g), grads))


def _relative_noise(params, key, eps):
    """eps * |W| * N(0, 1) for every leaf W, from one host-side draw over all the weights.

    One draw split across leaves (per-leaf threefry draws would compile into one huge program).
    """
    leaves, treedef = jax.tree.flatten(params)
    sizes = [leaf.size for leaf in leaves]
    z = np.asarray(krylov.random_vectors(key, (sum(sizes),), np.float64))
    chunks = np.split(z, np.cumsum(sizes)[:-1])
    noise = [
        (eps * np.abs(np.asarray(w, np.float64)) * c.reshape(w.shape)).astype(w.dtype)
        for w, c in zip(leaves, chunks, strict=True)
    ]
    return jax.tree.unflatten(treedef, [jnp.asarray(n) for n in noise])


def _random_sign(params, key, eps):
    """eps * (+-1, uniform) for every leaf, from one host-side draw over all the weights (see _relative_noise)."""
    leaves, treedef = jax.tree.flatten(params)
    sizes = [leaf.size for leaf in leaves]
    z = np.asarray(krylov.random_vectors(key, (sum(sizes),), np.float64, kind="rademacher"))
    chunks = np.split(z, np.cumsum(sizes)[:-1])
    steps = [jnp.asarray((eps * c).reshape(w.shape), w.dtype) for w, c in zip(leaves, chunks, strict=True)]
    return jax.tree.unflatten(treedef, steps)


def is_liu_weight(path) -> bool:
    """Whether Liu et al.'s tool perturbs this parameter: not a bias, not inside a norm, not Admin's omega.

    Their rule (Transformer-Clinic, fairseq/fairseq/tasks/fairseq_task.py lines 248 and 255) skips names with
    'bias', 'layer_norm' or 'ratio' (Admin's omega); embeddings and every kernel are perturbed. Here a path key
    containing "norm" (norm, final_norm, inner_norm, qkv_norm, ...) marks a norm's gain or bias.
    """
    keys = [str(k.key) for k in path if hasattr(k, "key")]  # the module and parameter names (not `.value`)
    return keys[-1] != "bias" and "omega" not in keys and not any("norm" in k for k in keys)


def weight_mask(params):
    """1 on the weights `is_liu_weight` keeps (Liu et al.'s perturbed set), 0 elsewhere; shaped like params."""
    return jax.tree_util.tree_map_with_path(lambda path, w: jnp.asarray(float(is_liu_weight(path)), w.dtype), params)


@functools.partial(jax.jit, static_argnames=("graphdef", "target"))
def _output(graphdef, target, params, rest, inputs, masks):
    """The logits, or the last stack's final stream, of the model with these parameters."""
    model = nnx.merge(graphdef, params, rest)
    if target == "logits":
        return model(*inputs, **masks)
    last = normjax.stack_names(model)[-1]
    return normjax.probe(model, *inputs, **masks)[1][last].streams[-1]


def output_change(
    model,
    *inputs,
    eps: float = 1e-3,
    kind: str = "random",
    target="logits",
    key=None,
    loss_fn=None,
    batch=None,
    **masks,
) -> dict:
    """||F(x, W) - F(x, W + dW)|| for a small update dW of all weights (see `perturbation`).

    Args:
      model, inputs, masks: as for model(...). eps, kind, key, loss_fn, batch: see `perturbation`.
      target: "logits" (the model output) or "stream" (the last stack's final residual stream
        x_L, before any final norm).

    Returns:
      {"rms": sqrt(mean (dF)^2), "relative": ||dF|| / ||F||, "max": max |dF|} over all entries.
    """
    if target not in ("logits", "stream"):
        raise ValueError(f"target must be 'logits' or 'stream', got {target!r}.")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    dW = perturbation(model, eps=eps, kind=kind, key=key, loss_fn=loss_fn, batch=batch)
    y0 = np.asarray(_output(graphdef, target, params, rest, inputs, masks), np.float64)
    y1 = np.asarray(_output(graphdef, target, _tree_add(params, dW), rest, inputs, masks), np.float64)
    checks.check_finite(f"the perturbed {target}", y1)
    dy = y1 - y0
    return {
        "rms": float(np.sqrt(np.mean(dy**2))),
        "relative": float(np.linalg.norm(dy) / np.linalg.norm(y0)),
        "max": float(np.max(np.abs(dy))),
    }


def model_update(logits_BTV, logits0_BTV) -> float:
    """DeepNet's model update ||F(x, theta_t) - F(x, theta_0)|| - F(x, theta_0)||: rms over the tokens of x of the L2
    norm of the logit change."""
    d_BTV = np.asarray(logits_BTV, np.float64) - np.asarray(logits0_BTV, np.float64)
    return float(np.sqrt(np.mean(np.sum(d_BTV**2, axis=-1))))
