"""Power iteration and Lanczos against the dense SVD; Hutchinson against the exact ||J||_F^2."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian

RNG = np.random.default_rng(0)
A_MN = RNG.normal(size=(40, 30)) / np.sqrt(30)
B_NN = RNG.normal(size=(30, 30)) / np.sqrt(30)


def f(x_N):
    """Nonlinear R^30 -> R^40 with a generic (well spread) Jacobian spectrum."""
    return A_MN @ jnp.tanh(B_NN @ x_N + 0.5) + 0.1 * jnp.sin(A_MN @ x_N)


def point():
    return jnp.asarray(np.random.default_rng(1).normal(size=30))


def svd(fn, x):
    return np.linalg.svd(np.asarray(jacobian.jacobian(fn, x)), compute_uv=False)


def rank2(x_N):
    return A_MN[:, :2] @ (B_NN[:2] @ x_N)  # a linear map of rank 2


def test_power_matches_svd():
    s, info = jacobian.spectral_norm(f, point(), method="power", tol=1e-14, return_info=True)
    assert info.converged and info.method == "power" and 1 < info.iterations < 500
    np.testing.assert_allclose(s, svd(f, point())[0], rtol=1e-6)


def test_lanczos_top_k_matches_svd():
    s_K, info = jacobian.singular_values(f, point(), 5, method="lanczos", tol=1e-12, return_info=True)
    assert info.converged and info.residual <= 1e-12 and info.iterations < 30
    np.testing.assert_allclose(s_K, svd(f, point())[:5], rtol=1e-6)


def test_lanczos_spectral_norm_and_exact_agree():
    s_exact = jacobian.spectral_norm(f, point(), method="exact")
    np.testing.assert_allclose(s_exact, svd(f, point())[0], rtol=1e-12)
    np.testing.assert_allclose(jacobian.spectral_norm(f, point(), method="lanczos", tol=1e-12), s_exact, rtol=1e-6)


def test_lanczos_full_krylov_basis_gives_all_singular_values():
    s_K, info = jacobian.singular_values(f, point(), 30, method="lanczos", return_info=True)
    assert info.converged
    np.testing.assert_allclose(s_K, svd(f, point()), rtol=1e-8, atol=1e-12)


def test_lanczos_survives_breakdown_on_identity_and_low_rank():
    # J = I: the Krylov space of any start vector is 1-dimensional, so Lanczos must restart.
    np.testing.assert_allclose(
        jacobian.singular_values(lambda x: x, point(), 4, method="lanczos"), np.ones(4), rtol=1e-12
    )
    s_K = jacobian.singular_values(rank2, point(), 4, method="lanczos", num_iters=30)
    np.testing.assert_allclose(s_K[:2], svd(rank2, point())[:2], rtol=1e-10)
    np.testing.assert_allclose(s_K[2:], 0, atol=1e-12)


def test_exact_returns_all_singular_values_sorted():
    s = jacobian.singular_values(f, point())
    assert s.shape == (30,) and np.all(np.diff(s) <= 0)
    np.testing.assert_allclose(s, svd(f, point()), rtol=1e-12)


def test_auto_picks_exact_for_small_and_lanczos_for_large():
    _, info = jacobian.spectral_norm(f, point(), return_info=True)
    assert info.method == "exact"
    # Elementwise map: J = diag(1 - tanh^2(x)), largest entry 1 at x = 0, the rest <= 1 - tanh^2(1).
    x_big = jnp.concatenate([jnp.zeros(1), jnp.linspace(1.0, 3.0, 1100)])
    assert x_big.size**2 > jacobian.AUTO_EXACT_MAX_ENTRIES
    s, info = jacobian.spectral_norm(jnp.tanh, x_big, return_info=True)
    assert info.method == "lanczos" and info.converged
    np.testing.assert_allclose(s, 1.0, rtol=1e-9)


def test_auto_grows_lanczos_until_its_bound_holds():
    # A 1000 x 1100 Gaussian J: the top value converges (error ~1e-15) long before the residual bound
    # reaches tol at the default Krylov dimension 62; explicit lanczos warns, auto enlarges the space.
    A_MN = jax.random.normal(jax.random.key(0), (1000, 1100), jnp.float64)
    fn, x = (lambda x: A_MN @ x), jnp.ones(1100)
    true = np.linalg.norm(np.asarray(A_MN), 2)
    with pytest.warns(UserWarning, match="guaranteed within that"):
        s, info = jacobian.spectral_norm(fn, x, method="lanczos", return_info=True)
    assert info.iterations == 62 and not info.converged and abs(float(s) - true) <= info.error_bound
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto: no warning
        s, info = jacobian.spectral_norm(fn, x, return_info=True)
    assert info.method == "lanczos" and info.iterations > 62 and info.converged
    assert info.residual <= 1e-10  # the float64 default tol
    assert abs(float(s) - true) <= info.error_bound


def test_unconverged_power_warns():
    with pytest.warns(UserWarning, match="power stopped after 2 iterations"):
        _, info = jacobian.spectral_norm(f, point(), method="power", num_iters=2, tol=1e-14, return_info=True)
    assert not info.converged and info.iterations == 2


def test_hutchinson_is_unbiased_and_exact_for_diagonal_jacobians():
    exact = jacobian.frobenius_norm_sq(f, point(), method="exact")
    np.testing.assert_allclose(exact, np.sum(svd(f, point()) ** 2), rtol=1e-12)
    est, info = jacobian.frobenius_norm_sq(f, point(), num_probes=400, chunk_size=64, return_info=True)
    # A fixed key makes this deterministic; 4 standard errors is the statistical bound.
    assert 0 < info.stderr < 0.1 * exact and abs(est - exact) < 4 * info.stderr
    # With J^T J diagonal, ||J z||^2 = sum_i J_ii^2 z_i^2 = ||J||_F^2 for every Rademacher z.
    est_diag, info = jacobian.frobenius_norm_sq(jnp.tanh, point(), return_info=True)
    np.testing.assert_allclose(est_diag, np.sum((1 - np.tanh(point()) ** 2) ** 2), rtol=1e-12)
    assert info.stderr < 1e-12


@pytest.mark.parametrize("method", ["exact", "power", "lanczos"])
def test_non_finite_output_raises(method):
    with pytest.raises(FloatingPointError, match=r"f\(x\) has 1 non-finite"):
        jacobian.spectral_norm(jnp.log, jnp.array([1.0, 2.0, -1.0]), method=method)


def test_non_finite_input_raises():
    with pytest.raises(ValueError, match="input x has 1 non-finite"):
        jacobian.singular_values(f, point().at[3].set(jnp.inf), 2, method="lanczos")
    with pytest.raises(ValueError, match="input x"):
        jacobian.frobenius_norm_sq(f, point().at[0].set(jnp.nan))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="method"):
        jacobian.spectral_norm(f, point(), method="arnoldi")
    with pytest.raises(ValueError, match="top singular value"):
        jacobian.singular_values(f, point(), 2, method="power")
    with pytest.raises(ValueError, match="pass k"):
        jacobian.singular_values(f, point(), method="lanczos")
    with pytest.raises(ValueError, match="k must be"):
        jacobian.singular_values(f, point(), 31)


def test_float32_power_and_lanczos_within_float32_accuracy():
    with jax.enable_x64(False):
        x = point().astype(jnp.float32)
        ref = svd(f, x)[0]
        for method in ("power", "lanczos"):
            s, info = jacobian.spectral_norm(f, x, method=method, return_info=True)
            assert s.dtype == jnp.float32 and info.converged
            # default float32 tol is 1e-5; the Lanczos bound is rigorous, power's is a change.
            np.testing.assert_allclose(s, ref, rtol=1e-4)
