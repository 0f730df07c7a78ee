"""Exact Jacobians: jacfwd == jacrev == central differences, chunking, token blocks, bad values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian

A_MN = np.random.default_rng(0).normal(size=(10, 12))


def f(x_34):
    """A non-square nonlinear map (3, 4) -> (5, 2), so any transposed layout fails the tests."""
    return (jnp.tanh(A_MN @ x_34.ravel()) * jnp.sum(x_34**2)).reshape(5, 2)


def x_34():
    return jnp.asarray(np.random.default_rng(1).normal(size=(3, 4)))


def test_fwd_rev_and_finite_differences_agree(helpers):
    x = x_34()
    J_fwd = jacobian.jacobian(f, x)
    assert J_fwd.shape == (10, 12) and J_fwd.dtype == jnp.float64
    np.testing.assert_allclose(jacobian.jacobian(f, x, mode="rev"), J_fwd, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(helpers.central_differences(f, x), J_fwd, rtol=1e-7, atol=1e-8)


# 12 inputs, 10 outputs: chunks of 1, a ragged last chunk (5 into 12) and one oversized chunk.
@pytest.mark.parametrize(("mode", "chunk_size"), [("fwd", 1), ("fwd", 5), ("rev", 4), ("rev", 64)])
def test_chunked_equals_unchunked(mode, chunk_size):
    x = x_34()
    J = jacobian.jacobian(f, x, mode=mode)
    J_chunked = jacobian.jacobian(f, x, mode=mode, chunk_size=chunk_size)
    np.testing.assert_allclose(J_chunked, J, rtol=1e-13, atol=1e-14)


def test_token_blocks_layout():
    # y_t = sum_{s <= t} x_s W, so d y_t / d x_s = W^T for s <= t and 0 for s > t.
    W_DE = jnp.asarray(np.random.default_rng(2).normal(size=(3, 4)))
    blocks = jacobian.token_blocks(lambda x_TD: jnp.cumsum(x_TD @ W_DE, axis=0), jnp.ones((5, 3)))
    assert blocks.shape == (5, 5, 4, 3)
    for t in range(5):
        for s in range(5):
            np.testing.assert_array_equal(blocks[t, s], W_DE.T if s <= t else 0 * W_DE.T)


def test_non_finite_input_raises_value_error():
    with pytest.raises(ValueError, match="input x has 1 non-finite"):
        jacobian.jacobian(f, x_34().at[1, 2].set(jnp.nan))


def test_non_finite_output_raises():
    with pytest.raises(FloatingPointError, match=r"f\(x\) has 2 non-finite"):
        jacobian.jacobian(jnp.log, jnp.array([1.0, -1.0, -2.0]))


def test_non_finite_jacobian_of_finite_output_raises():
    # sqrt(0) = 0 is finite, its derivative is not.
    with pytest.raises(FloatingPointError, match="the Jacobian has 1 non-finite"):
        jacobian.jacobian(jnp.sqrt, jnp.array([0.0, 1.0]), chunk_size=1)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="mode"):
        jacobian.jacobian(f, x_34(), mode="central")
    with pytest.raises(ValueError, match="chunk_size"):
        jacobian.jacobian(f, x_34(), chunk_size=0)
    with pytest.raises(TypeError, match="floating"):
        jacobian.jacobian(f, jnp.ones((3, 4), jnp.int32))


def test_traceable_inside_jit():
    x = x_34()
    J = jax.jit(lambda v: jacobian.jacobian(f, v))(x)
    np.testing.assert_allclose(J, jacobian.jacobian(f, x), rtol=1e-13)


def test_exact_paths_refuse_a_jacobian_that_would_not_fit(monkeypatch):
    from normjax.jacobian import exact

    monkeypatch.setattr(exact, "available_memory", lambda: 2**30)  # 1 GiB left
    x = jnp.ones(60000, jnp.float32)  # J: 60000 x 60000, 13.4 GiB in float32
    for call in (
        lambda: jacobian.jacobian(jnp.sin, x),
        lambda: jacobian.spectral_norm(jnp.sin, x, method="exact"),
        lambda: jacobian.frobenius_norm_sq(jnp.sin, x, method="exact"),
    ):
        with pytest.raises(MemoryError, match=r"60000 x 60000 float32 \(13.4 GiB.*method='lanczos'"):
            call()
    s = jacobian.spectral_norm(jnp.sin, x[:2000], method="lanczos")  # the matrix-free method still runs
    np.testing.assert_allclose(s, np.cos(1.0), rtol=1e-5)  # J = diag(cos x)


def test_available_memory_honours_an_address_space_limit(monkeypatch):
    import pathlib
    import resource

    from normjax.jacobian import exact

    unlimited = exact.available_memory()
    assert unlimited > 0
    status = pathlib.Path("/proc/self/status").read_text().splitlines()
    used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    monkeypatch.setattr(resource, "getrlimit", lambda _: (used + 2**20, resource.RLIM_INFINITY))  # ulimit -v
    assert exact.available_memory() <= min(unlimited, 2**20)
