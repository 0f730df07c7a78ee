"""One working dtype per call: mixed input/output dtypes and bfloat16/float16 functions, host level and pure."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian
from normjax.jacobian import checks, pure

W_NN = np.random.default_rng(0).normal(size=(16, 16)) / 4
X_N = np.random.default_rng(1).normal(size=16)


def make(x_dtype, compute, out_dtype):
    """(f, x): tanh(W x) with x in x_dtype, computed in `compute`, returned in out_dtype."""
    W = jnp.asarray(W_NN, compute)
    f = lambda x: jnp.tanh(W @ x.astype(compute)).astype(out_dtype)  # noqa: E731
    return f, jnp.asarray(X_N, x_dtype)


def reference(compute):
    """||J|| from float64 NumPy on the weights and input as the function sees them (rounded to `compute`)."""
    W = np.asarray(jnp.asarray(W_NN, compute), np.float64)
    x = np.asarray(jnp.asarray(jnp.asarray(X_N, jnp.float32), compute), np.float64)
    return np.linalg.norm((1 - np.tanh(W @ x) ** 2)[:, None] * W, 2)


CASES = {  # x dtype, compute dtype, f(x) dtype -> working dtype
    "f32->f64": (jnp.float32, jnp.float64, jnp.float64, "float64"),
    "f64->f32": (jnp.float64, jnp.float32, jnp.float32, "float64"),
    "f32->bf16": (jnp.float32, jnp.bfloat16, jnp.bfloat16, "float32"),
    "bf16->bf16": (jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, "float32"),
    "f16->f16": (jnp.float16, jnp.float16, jnp.float16, "float32"),
    "f32 in, bf16 inside, f32 out": (jnp.float32, jnp.bfloat16, jnp.float32, "float32"),
}


@pytest.mark.parametrize("method", ["exact", "power", "lanczos"])
@pytest.mark.parametrize("case", CASES)
def test_mixed_and_narrow_dtypes_work_in_one_stated_dtype(case, method):
    x_dtype, compute, out_dtype, working = CASES[case]
    f, x = make(x_dtype, compute, out_dtype)
    s, info = jacobian.spectral_norm(f, x, method=method, return_info=True)
    assert info.dtype == working and s.dtype == working and info.converged
    # Each J v is only as precise as the narrowest dtype the function computes in: the estimate is within
    # its bound of a singular value of the computed operator, which is within a few eps of the true one.
    precision = checks.narrowest([x_dtype, compute, out_dtype])
    slack = 4 * float(jnp.finfo(precision).eps) * reference(compute)
    assert abs(float(s) - reference(compute)) <= info.error_bound + slack


def test_tolerance_follows_the_precision_the_function_computes_in():
    assert checks.default_tol(jnp.float64) == 1e-10 and checks.default_tol(jnp.float32) == 1e-5
    assert checks.default_tol(jnp.float64, jnp.float32) == 1e-5  # a float32 step inside a float64 call
    assert checks.default_tol(jnp.float32, jnp.bfloat16) == 4 * 2.0**-7
    f, x = make(jnp.float32, jnp.bfloat16, jnp.float32)
    _, info = jacobian.spectral_norm(f, x, method="lanczos", return_info=True)
    # The loop runs to float32's residual (a bfloat16-sized stop can hold sigma_2's Ritz value), but the
    # certified bound carries f's bfloat16 rounding: above float32's tol, within bfloat16's.
    assert info.converged and info.iterations < 50 and info.loop_residual <= 1e-5
    assert 1e-5 < info.residual <= 4 * 2.0**-7 and 0 < info.rounding < info.error_bound


def test_jacobian_and_evaluate_keep_the_stated_dtypes():
    f, x = make(jnp.float32, jnp.float64, jnp.float64)
    J = jacobian.jacobian(f, x)
    assert J.dtype == jnp.float64 and J.shape == (16, 16)
    y = jacobian.evaluate(f, x)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, f(x), rtol=0)
    fb, xb = make(jnp.bfloat16, jnp.bfloat16, jnp.bfloat16)
    assert jacobian.jacobian(fb, xb).dtype == jnp.float32 and jacobian.evaluate(fb, xb).dtype == jnp.bfloat16


@pytest.mark.parametrize("case", ["f32->f64", "f64->f32", "f32->bf16"])
def test_pure_variants_take_mixed_dtypes_under_jit(case):
    x_dtype, compute, out_dtype, working = CASES[case]
    f, x = make(x_dtype, compute, out_dtype)
    s, info = jax.jit(lambda x: pure.spectral_norm(f, x))(x)
    top, _ = jax.jit(lambda x: pure.singular_values(f, x, 2))(x)
    assert s.dtype == working and top.dtype == working and bool(info.converged)
    precision = checks.narrowest([x_dtype, compute, out_dtype])
    slack = 4 * float(jnp.finfo(precision).eps) * reference(compute)
    assert abs(float(s) - reference(compute)) <= float(info.error_bound) + slack
    assert pure.jacobian(f, x).dtype == working
