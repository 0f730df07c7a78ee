"""Which Jacobian the tools report where f calls stop_gradient: the backpropagated one, or the forward map's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian

RNG = np.random.default_rng(0)
W_NN = RNG.normal(size=(12, 12)) / np.sqrt(12)
C = 0.3  # the scale GPAS takes off: y = h - C sg(h), h = tanh(W x)


def scaled(x_N):
    """GPAS-like: value (1 - C) tanh(W x), derivative diag(1 - tanh^2) W under backpropagation."""
    h_N = jnp.tanh(W_NN @ x_N)
    return h_N - C * jax.lax.stop_gradient(h_N)


def closed_forms(x_N):
    """(backpropagated J, forward-map J) in float64: diag(1 - tanh^2(W x)) W and (1 - C) times it."""
    J_NN = (1 - np.tanh(W_NN @ np.asarray(x_N)) ** 2)[:, None] * W_NN
    return J_NN, (1 - C) * J_NN


def central_differences(fn, x_N, h=1e-6):
    """The forward map's Jacobian by float64 central differences of fn's values (stop_gradient changes none)."""
    return np.stack(
        [(np.asarray(fn(x_N + h * e)) - np.asarray(fn(x_N - h * e))) / (2 * h) for e in np.eye(x_N.size)], 1
    )


def point():
    return jnp.asarray(np.random.default_rng(1).normal(size=12))


def test_default_is_the_backpropagated_jacobian_identity_the_forward_maps(x64):
    x_N = point()
    backprop, forward = closed_forms(x_N)
    np.testing.assert_allclose(central_differences(scaled, x_N), forward, rtol=1e-8, atol=1e-9)
    for mode in ("fwd", "rev"):
        J = np.asarray(jacobian.jacobian(scaled, x_N, mode=mode))
        np.testing.assert_allclose(J, backprop, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(J, np.asarray(jax.jacrev(scaled)(x_N)), rtol=1e-13, atol=1e-14)  # what grad uses
        J_fwd = np.asarray(jacobian.jacobian(scaled, x_N, mode=mode, stop_gradient="identity"))
        np.testing.assert_allclose(J_fwd, forward, rtol=1e-13, atol=1e-14)
    assert not np.allclose(backprop, forward, rtol=0.1)  # the two differ by the factor 1 - C


def test_spectra_follow_the_chosen_jacobian(x64):
    x_N = point()
    backprop, forward = (np.linalg.svd(J, compute_uv=False) for J in closed_forms(x_N))
    for method in ("exact", "lanczos", "power"):
        s = float(jacobian.spectral_norm(scaled, x_N, method=method))
        s_fwd = float(jacobian.spectral_norm(scaled, x_N, method=method, stop_gradient="identity"))
        assert s == pytest.approx(backprop[0], rel=1e-8) and s_fwd == pytest.approx(forward[0], rel=1e-8)
    np.testing.assert_allclose(jacobian.singular_values(scaled, x_N, k=3, method="lanczos"), backprop[:3], rtol=1e-8)
    s_fwd = jacobian.singular_values(scaled, x_N, k=3, method="lanczos", stop_gradient="identity")
    np.testing.assert_allclose(s_fwd, forward[:3], rtol=1e-8)
    fro2 = jacobian.frobenius_norm_sq(scaled, x_N, method="exact", stop_gradient="identity")
    assert float(fro2) == pytest.approx((forward**2).sum(), rel=1e-12)
    blocks = jacobian.token_blocks(
        lambda x: scaled(x.ravel()).reshape(3, 4), x_N.reshape(3, 4), stop_gradient="identity"
    )
    np.testing.assert_allclose(blocks.transpose(0, 2, 1, 3).reshape(12, 12), closed_forms(x_N)[1], rtol=1e-13)


def test_identity_reaches_inside_jit_and_compiles_apart(x64):
    x_N = point()
    jitted = jax.jit(jax.jit(scaled))  # nested jits are inlined, their stop_gradient replaced
    np.testing.assert_allclose(
        jacobian.jacobian(jitted, x_N, stop_gradient="identity"), closed_forms(x_N)[1], rtol=1e-13
    )
    np.testing.assert_allclose(jacobian.jacobian(jitted, x_N), closed_forms(x_N)[0], rtol=1e-13)  # not a stale program


def test_identity_refuses_stop_gradient_inside_scan_and_bad_values():
    x_N = jnp.ones(12)
    looped = lambda x: jax.lax.scan(lambda h, _: (scaled(h), None), x, None, length=2)[0]
    with pytest.raises(ValueError, match="stop_gradient='identity'.*inside a `scan`"):
        jacobian.jacobian(looped, x_N, stop_gradient="identity")
    jacobian.jacobian(looped, x_N)  # the backpropagated one is defined
    with pytest.raises(ValueError, match=r"stop_gradient must be one of \('constant', 'identity'\), got 'forward'"):
        jacobian.spectral_norm(scaled, x_N, stop_gradient="forward")


def test_functions_without_stop_gradient_are_unchanged(x64):
    f = lambda x: jnp.tanh(W_NN @ x)
    x_N = point()
    np.testing.assert_array_equal(jacobian.jacobian(f, x_N, stop_gradient="identity"), jacobian.jacobian(f, x_N))
