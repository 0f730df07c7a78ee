"""materialize_cotangent: exact in value and derivatives, and the looped CPU backward linear in depth."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from normjax import blocks
from normjax.cotangent import materialize_cotangent
from tests.model_fixtures import model_inputs, tiny_model


def loss_and_grads(model, tokens):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
        logits = nnx.merge(graphdef, p, rest)(tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

    return jax.jit(jax.value_and_grad(loss))(params)


def without_materialization(monkeypatch):
    monkeypatch.setattr(blocks, "materialize_cotangent", lambda x: x)


@pytest.mark.parametrize("placement", ["pre", "post", "resi_dual"])
def test_gradients_equal_those_without_it(placement, x64, monkeypatch):
    model = tiny_model(placement=placement, num_layers=4, arch="decoder", dtype="float64", param_dtype="float64")
    (tokens,) = model_inputs(model.cfg, length=7)
    value, grads = loss_and_grads(model, tokens)
    without_materialization(monkeypatch)
    value_off, grads_off = loss_and_grads(model, tokens)
    np.testing.assert_allclose(value, value_off, rtol=1e-14)
    for g, g_off in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_off), strict=True):
        np.testing.assert_allclose(g, g_off, rtol=1e-11, atol=1e-15)


def test_forward_mode_jacobians_match_reverse_mode(x64):
    x = jax.random.normal(jax.random.key(0), (3, 4), jnp.float64)
    f = lambda x: jnp.tanh(materialize_cotangent(x, enabled=True)) ** 2  # noqa: E731
    np.testing.assert_allclose(jax.jacfwd(f)(x), jax.jacrev(f)(x), rtol=1e-14)
    np.testing.assert_allclose(jax.jacfwd(f)(x), jax.jacfwd(lambda x: jnp.tanh(x) ** 2)(x), rtol=1e-14)
    hess = jax.hessian(lambda x: jnp.sum(jnp.sin(materialize_cotangent(x, enabled=True))))(x)
    np.testing.assert_allclose(hess, jax.hessian(lambda x: jnp.sum(jnp.sin(x)))(x), rtol=1e-14)


def test_batched_and_non_finite_inputs_keep_the_identity():
    f = lambda x: jnp.sum(3.0 * materialize_cotangent(x, enabled=True))  # noqa: E731
    x = jnp.array([[jnp.nan, 1.0], [2.0, 3.0]])  # the first row's predicate is False: the other identity
    np.testing.assert_array_equal(jax.vmap(jax.grad(f))(x), np.full((2, 2), 3.0))
    np.testing.assert_array_equal(jax.grad(f)(x), np.full((2, 2), 3.0))
    tree = {"a": x, "b": (jnp.ones(2),)}
    assert jax.tree.structure(materialize_cotangent(tree, enabled=True)) == jax.tree.structure(tree)
    assert materialize_cotangent(x, enabled=False) is x
    empty = jnp.zeros((0, 3))
    assert jax.grad(lambda x: jnp.sum(materialize_cotangent(x, enabled=True)))(empty).shape == (0, 3)


def hlo_instructions(num_layers: int) -> tuple[int, int]:
    """(instructions, conditionals) in the optimized CPU program of a looped Pre-LN decoder's gradient."""
    model = tiny_model(placement="pre", num_layers=num_layers, arch="decoder")
    (tokens,) = model_inputs(model.cfg, length=7)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
        return jnp.mean(nnx.merge(graphdef, p, rest)(tokens) ** 2)

    text = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
    return len(re.findall(r"^\s+\S+ = ", text, re.M)), text.count(" conditional(")


def test_the_compiled_backward_grows_linearly_in_depth():
    """XLA CPU fused the residual-gradient chain into every consumer: O(L^2) instructions. Now O(L)."""
    (small, conds_small), (large, conds_large) = hlo_instructions(4), hlo_instructions(8)
    assert conds_large > conds_small > 0
    assert large / small < 2.1, (small, large)
