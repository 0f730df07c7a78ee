"""No silent non-convergence in the traceable variants; defaults that converge on a 1% singular-value gap."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian
from normjax.jacobian import pure

N = 64
_rng = np.random.default_rng(0)
_U, _V = (np.linalg.qr(_rng.normal(size=(N, N)))[0] for _ in range(2))
W_GAP = _U @ np.diag(np.r_[1.01, 1.0, np.linspace(0.99, 0.1, N - 2)]) @ _V.T  # s2 / s1 = 0.99
X_N = _rng.normal(size=N) * 0.1  # NumPy: the float64 fixture is on only inside the tests


def block(p, x):
    return p["W"] @ x + 0.01 * jnp.tanh(p["W"] @ x) ** 3


def exact_sigma(p, x):
    return jnp.linalg.svd(jax.jacfwd(lambda x: block(p, x))(x), compute_uv=False)[0]


def test_default_regularizer_gradient_matches_the_exact_gradient_on_a_one_percent_gap():
    p, X = {"W": jnp.asarray(W_GAP)}, jnp.asarray(X_N)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sigma, info = jacobian.differentiable_spectral_norm(block, p, X)
        grads = jax.grad(lambda p, x: jacobian.differentiable_spectral_norm(block, p, x)[0], argnums=(0, 1))(p, X)
        jax.effects_barrier()
    assert bool(info.converged)
    want = jax.grad(exact_sigma, argnums=(0, 1))(p, X)
    np.testing.assert_allclose(sigma, exact_sigma(p, X), rtol=1e-10)
    # (u, v) are within about residual / relative gap = 1e-10 / 0.01 of the exact pair: the gradient too.
    for got, ref in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-8 * float(jnp.max(jnp.abs(ref))))


@pytest.mark.parametrize("which", ["differentiable_spectral_norm", "spectral_norm", "power_iteration"])
def test_an_unconverged_traceable_estimate_warns_under_jit(which):
    p, X = {"W": jnp.asarray(W_GAP)}, jnp.asarray(X_N)
    calls = {
        "differentiable_spectral_norm": lambda x: jacobian.differentiable_spectral_norm(
            block, p, x, method="power", num_iters=100
        )[0],
        "spectral_norm": lambda x: pure.spectral_norm(block, x, params=p, num_iters=3)[0],
        "power_iteration": lambda x: pure.power_iteration(block, x, params=p, num_iters=100)[0],
    }
    with pytest.warns(UserWarning, match=rf"pure\.{which}: 1 estimate\(s\) stopped"):
        jax.block_until_ready(jax.jit(calls[which])(X))
        jax.effects_barrier()


def test_warnings_can_be_silenced_and_converged_batches_are_quiet():
    p, X = {"W": jnp.asarray(W_GAP)}, jnp.asarray(X_N)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = jax.jit(lambda x: pure.spectral_norm(block, x, params=p, num_iters=3, warn_unconverged=False))
        _, info = fn(X)
        assert not bool(info.converged)
        s_B, info = jax.jit(jax.vmap(lambda x: pure.spectral_norm(block, x, params=p)))(jnp.stack([X, 2 * X]))
        jax.effects_barrier()
    assert bool(jnp.all(info.converged))
