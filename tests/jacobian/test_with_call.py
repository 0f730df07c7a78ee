"""`jacobian.with_call(model, call)`: a model whose forward needs more than x, analysed without a wrapper."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from normjax import jacobian
from normjax.jacobian import exact


class PositionalBlock(nnx.Module):
    """A block whose forward needs positions besides x (as real attention blocks need positions or masks)."""

    def __init__(self, d: int, rngs: nnx.Rngs):
        self.dense = nnx.Linear(d, d, rngs=rngs, param_dtype=jnp.float64)

    def __call__(self, x, positions):
        return jnp.tanh(self.dense(x) + jnp.sin(positions)[:, None])


def _reference(block, pos, x):
    fn = lambda x: block(x, pos)
    return np.linalg.norm(np.asarray(jax.jacfwd(fn)(x)).reshape(x.size, x.size), 2)


def test_an_nnx_module_with_positions_is_fresh_after_updates_and_compiles_once():
    block = PositionalBlock(5, nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 5)))
    pos = jnp.arange(3.0)
    optimizer = nnx.Optimizer(block, optax.sgd(0.5), wrt=nnx.Param)
    exact._jacobian_impl.clear_cache()
    for _ in range(3):
        got = jacobian.spectral_norm(jacobian.with_call(block, lambda m, x: m(x, pos)), x, method="exact")
        np.testing.assert_allclose(got, _reference(block, pos, x), rtol=1e-10)
        optimizer.update(block, nnx.grad(lambda m: jnp.sum(m(x, pos) ** 2))(block))
    assert exact._jacobian_impl._cache_size() == 1


def test_a_pytree_model_is_its_own_params():
    params = {"w": jnp.asarray(np.random.default_rng(2).normal(size=(4, 4)) / 2), "act": jnp.tanh}
    mask = jnp.asarray([1.0, 0.0, 1.0])[:, None]
    call = lambda m, x: m["act"](x @ m["w"]) * mask
    x = jnp.ones((3, 4))
    want = jax.jacfwd(lambda x: call(params, x))(x).reshape(12, 12)
    np.testing.assert_allclose(jacobian.jacobian(jacobian.with_call(params, call), x), want, rtol=1e-12)


def test_bad_uses_are_one_line_errors():
    block = PositionalBlock(2, nnx.Rngs(0))
    with pytest.raises(TypeError, match="call must be a function"):
        jacobian.with_call(block, "m(x)")
    with pytest.raises(TypeError, match="not both"):
        jacobian.jacobian(jacobian.with_call(block, lambda m, x: m(x, x[:, 0])), jnp.ones((2, 2)), params={})
