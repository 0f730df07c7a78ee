"""Closed-form LayerNorm / RMSNorm / DyT Jacobians and norms against autodiff and the SVD."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian


def layernorm(z, gamma, eps):
    return gamma * (z - z.mean()) / jnp.sqrt(z.var() + eps) + 0.3


def rmsnorm(z, gamma, eps):
    return gamma * z / jnp.sqrt(jnp.mean(z**2) + eps)


def dyt(z, gamma, alpha):
    return gamma * jnp.tanh(alpha * z) + 0.3


@functools.partial(jax.jit, static_argnums=0)
def per_vector_autodiff(norm, z_BD, *params):
    return jax.vmap(jax.jacfwd(norm), in_axes=(0,) + (None,) * len(params))(z_BD, *params)


def sample(shape, seed=0, spread=1.0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape) * spread)


def two_norms(J_BDD):
    return np.linalg.norm(np.asarray(J_BDD), ord=2, axis=(-2, -1))


# eps = 0.5 makes the eps terms large enough that a formula dropping them fails.
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layernorm_jacobian_equals_autodiff(eps):
    z_BD, gamma_D = sample((6, 7)), sample(7, seed=1)
    np.testing.assert_allclose(
        jacobian.layernorm_jacobian(z_BD, gamma_D, eps),
        per_vector_autodiff(layernorm, z_BD, gamma_D, eps),
        rtol=1e-12,
        atol=1e-13,
    )


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_rmsnorm_jacobian_equals_autodiff(eps):
    z_BD, gamma_D = sample((6, 7)), sample(7, seed=1)
    np.testing.assert_allclose(
        jacobian.rmsnorm_jacobian(z_BD, gamma_D, eps),
        per_vector_autodiff(rmsnorm, z_BD, gamma_D, eps),
        rtol=1e-12,
        atol=1e-13,
    )


@pytest.mark.parametrize("alpha", [0.5, sample(7, seed=3)])
def test_dyt_jacobian_equals_autodiff_and_norm_is_exact(alpha):
    z_BD, gamma_D = sample((6, 7), spread=3.0), sample(7, seed=1)
    J_BDD = jacobian.dyt_jacobian(z_BD, alpha, gamma_D)
    np.testing.assert_allclose(J_BDD, per_vector_autodiff(dyt, z_BD, gamma_D, alpha), rtol=1e-12, atol=1e-13)
    norm = jacobian.dyt_jacobian_norm(z_BD, alpha, gamma_D)
    assert bool(norm.exact)
    np.testing.assert_allclose(norm.value, two_norms(J_BDD), rtol=1e-12)


@pytest.mark.parametrize("d", [3, 4, 16])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layernorm_norm_is_one_over_sigma_for_unit_gamma(d, eps):
    z_BD = sample((5, d), spread=2.0)
    sigma_B = np.sqrt(np.var(np.asarray(z_BD), axis=-1) + eps)
    norm = jacobian.layernorm_jacobian_norm(z_BD, eps=eps)
    assert bool(norm.exact)
    np.testing.assert_allclose(norm.value, 1 / sigma_B, rtol=1e-12)
    np.testing.assert_allclose(norm.value, two_norms(jacobian.layernorm_jacobian(z_BD, eps=eps)), rtol=1e-12)


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layernorm_projector_eigenvalues(eps):
    # sigma * J = I - 11^T/d - zhat zhat^T/d: eigenvalues 0 (on 1), eps/(var + eps) (on zhat, not 0
    # because eps shrinks zhat) and 1 (d - 2 times).
    z_D = sample(6, spread=0.7)
    var = float(np.var(np.asarray(z_D)))
    P_DD = jacobian.layernorm_jacobian(z_D, eps=eps) * jacobian.layernorm_sigma(z_D, eps)
    expected = np.sort([0.0, eps / (var + eps)] + [1.0] * 4)
    np.testing.assert_allclose(np.linalg.eigvalsh(np.asarray(P_DD)), expected, atol=1e-13)


def test_layernorm_norm_small_d_and_constant_input():
    eps = 0.3
    z_BD = sample((4, 2))
    np.testing.assert_allclose(
        jacobian.layernorm_jacobian_norm(z_BD, eps=eps).value,
        two_norms(jacobian.layernorm_jacobian(z_BD, eps=eps)),
        rtol=1e-12,
    )
    # A constant z: zhat = 0, P = I - 11^T/d, so the norm is 1/sqrt(eps).
    np.testing.assert_allclose(
        jacobian.layernorm_jacobian_norm(jnp.full(5, 2.0), eps=eps).value, 1 / np.sqrt(eps), rtol=1e-12
    )


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_scale_constant_is_exact_varying_is_upper_bound(kind):
    z_BD = sample((8, 6), spread=1.5)
    closed = jacobian.norm_jacobian_norm(kind, z_BD, scale=jnp.full(6, -2.5), eps=1e-5)
    true = two_norms(jacobian.norm_jacobian(kind, z_BD, scale=jnp.full(6, -2.5), eps=1e-5))
    assert bool(closed.exact)
    np.testing.assert_allclose(closed.value, true, rtol=1e-12)
    gamma_D = sample(6, seed=5)
    closed = jacobian.norm_jacobian_norm(kind, z_BD, scale=gamma_D, eps=1e-5)
    true = two_norms(jacobian.norm_jacobian(kind, z_BD, scale=gamma_D, eps=1e-5))
    assert not bool(closed.exact)
    assert np.all(closed.value >= true * (1 - 1e-12)) and np.any(closed.value > true * 1.01)


@pytest.mark.parametrize("d", [2, 5])
def test_rmsnorm_norm_is_one_over_rms_for_unit_gamma(d):
    z_BD = sample((5, d))
    norm = jacobian.rmsnorm_jacobian_norm(z_BD, eps=0.2)
    np.testing.assert_allclose(norm.value, 1 / jacobian.rmsnorm_rms(z_BD, 0.2), rtol=1e-12)
    np.testing.assert_allclose(norm.value, two_norms(jacobian.rmsnorm_jacobian(z_BD, eps=0.2)), rtol=1e-12)


def test_batched_shapes_and_dispatch_errors():
    z_BTD = sample((2, 3, 4))
    assert jacobian.layernorm_jacobian(z_BTD).shape == (2, 3, 4, 4)
    assert jacobian.rmsnorm_jacobian_norm(z_BTD).value.shape == (2, 3)
    with pytest.raises(ValueError, match="norm kind"):
        jacobian.norm_jacobian("batchnorm", z_BTD)
    with pytest.raises(ValueError, match="alpha"):
        jacobian.norm_jacobian_norm("dyt", z_BTD)
