"""No false certificate in bfloat16: power/Lanczos bounds hold against the float64 SVD of the rounded operator."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian
from normjax.jacobian import pure

N = 64


def small_gap_map(seed: int, inside_only: bool = False):
    """(f, x, sigma): x -> tanh(W x) computed in bfloat16, sigma_2 / sigma_1 ~ 0.99 (before tanh's diagonal), and
    the singular values of its exact Jacobian at the bfloat16 W and x, in float64 (largest first)."""
    rng = np.random.default_rng(seed)
    U_NN, _ = np.linalg.qr(rng.normal(size=(N, N)))
    V_NN, _ = np.linalg.qr(rng.normal(size=(N, N)))
    s_N = np.linspace(1.0, 0.1, N)
    s_N[1] = 0.995
    W16 = jnp.asarray(3 * (U_NN * s_N) @ V_NN.T, jnp.bfloat16)
    x16 = jnp.asarray(0.1 * rng.normal(size=N), jnp.bfloat16)
    W, x = np.asarray(W16, np.float64), np.asarray(x16, np.float64)
    sigma = np.linalg.svd((1 - np.tanh(W @ x) ** 2)[:, None] * W, compute_uv=False)
    if inside_only:  # a float32 function that computes in bfloat16 inside
        return (lambda x: jnp.tanh(W16 @ x.astype(jnp.bfloat16)).astype(jnp.float32)), x16.astype(jnp.float32), sigma
    return (lambda x: jnp.tanh(W16 @ x)), x16, sigma


CASES = [(seed, inside) for seed in range(3) for inside in (False, True)]


@pytest.mark.parametrize("method", ["lanczos", "power"])
@pytest.mark.parametrize(("seed", "inside_only"), CASES)
def test_the_top_singular_value_is_within_its_bound(seed, inside_only, method):
    f, x, sigma = small_gap_map(seed, inside_only)
    s, info = jacobian.spectral_norm(f, x, method=method, return_info=True)
    assert abs(float(s) - sigma[0]) <= info.error_bound  # converged or not: the bound holds
    assert 0 < info.rounding <= info.error_bound  # f's bfloat16 rounding is part of it


@pytest.mark.parametrize(("seed", "inside_only"), CASES)
def test_top_k_values_are_within_their_bound(seed, inside_only):
    f, x, sigma = small_gap_map(seed, inside_only)
    s_K, info = jacobian.singular_values(f, x, 5, method="lanczos", return_info=True)
    assert np.all(np.abs(np.asarray(s_K, np.float64) - sigma[:5]) <= info.error_bound)


def test_the_traceable_variants_certify_the_same_way():
    f, x, sigma = small_gap_map(1)
    s, state = jax.jit(lambda x: pure.spectral_norm(f, x))(x)
    top, state_K = jax.jit(lambda x: pure.singular_values(f, x, 3))(x)
    assert abs(float(s) - sigma[0]) <= float(state.error_bound)
    assert np.all(np.abs(np.asarray(top, np.float64) - sigma[:3]) <= float(state_K.error_bound))


def test_a_tol_below_the_functions_rounding_is_not_reported_converged():
    f, x, sigma = small_gap_map(0)
    with pytest.warns(UserWarning, match="own rounding"):
        s, info = jacobian.spectral_norm(f, x, method="lanczos", tol=1e-4, return_info=True)
    assert not info.converged and info.loop_residual <= 1e-4 < info.residual
    assert abs(float(s) - sigma[0]) <= info.error_bound
