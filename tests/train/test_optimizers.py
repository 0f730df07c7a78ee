"""Traced-lr optimizers equal optax's own; clipping and the smoothed loss match optax."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from normjax.train import optimizers
from normjax.train.steps import token_losses


def _params_and_grads(seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    params = {"w": jax.random.normal(k[0], (3, 4)), "b": jax.random.normal(k[1], (4,))}
    grads = [{"w": jax.random.normal(k[2 + i], (3, 4)), "b": jax.random.normal(k[2 + i], (4,))} for i in range(2)]
    return params, grads


def _run_ours(spec, lr, wd, params, grads):
    state = optimizers.direction(spec).init(params)
    for g in grads:
        updates, state = optimizers.updates(spec, g, state, params, jnp.float32(lr), jnp.float32(wd))
        params = optax.apply_updates(params, updates)
    return params


def _run_optax(tx, params, grads):
    state = tx.init(params)
    for g in grads:
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "radam"])
def test_matches_optax(name):
    params, grads = _params_and_grads()
    lr, wd = 1e-2, 0.1 if name == "adamw" else 0.0
    spec = optimizers.OptimizerSpec(name, b1=0.9, b2=0.98, eps=1e-9, momentum=0.8)
    mask = jax.tree.map(lambda p: p.ndim >= 2, params)
    tx = {
        "adam": optax.adam(lr, b1=0.9, b2=0.98, eps=1e-9),
        "adamw": optax.adamw(lr, b1=0.9, b2=0.98, eps=1e-9, weight_decay=wd, mask=mask),
        "sgd": optax.sgd(lr, momentum=0.8),
        "radam": optax.radam(lr, b1=0.9, b2=0.98, eps=1e-9),
    }[name]
    ours, ref = _run_ours(spec, lr, wd, params, grads), _run_optax(tx, params, grads)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_clip_by_global_norm_matches_optax_and_zero_means_off():
    _, grads = _params_and_grads()
    g = grads[0]
    clipped, norm = optimizers.clip_by_global_norm(g, jnp.float32(0.5))
    ref, _ = optax.clip_by_global_norm(0.5).update(g, None)
    assert float(norm) == pytest.approx(float(optax.tree.norm(g)), rel=1e-6)
    for a, b in zip(jax.tree.leaves(clipped), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    same, _ = optimizers.clip_by_global_norm(g, jnp.float32(0.0))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(g), strict=True))


def test_unknown_optimizer_names_choices():
    with pytest.raises(ValueError, match="adamw"):
        optimizers.OptimizerSpec("lion")


def test_label_smoothing_loss_matches_optax():
    k1, k2 = jax.random.split(jax.random.key(1))
    logits = jax.random.normal(k1, (2, 5, 7))
    targets = jax.random.randint(k2, (2, 5), 0, 7)
    mask = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    sums = token_losses(logits, targets, mask, 0.1)
    labels = optax.smooth_labels(jax.nn.one_hot(targets, 7), 0.1)
    ref = optax.softmax_cross_entropy(logits, labels)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    assert float(sums["loss"]) == pytest.approx(float((ref * mask).sum()), rel=1e-6)
    assert float(sums["nll"]) == pytest.approx(float((nll * mask).sum()), rel=1e-6)
    assert float(sums["tokens"]) == 8
