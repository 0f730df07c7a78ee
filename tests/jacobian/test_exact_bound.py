"""The exact method's error_bound covers J's own rounding: 1,000 random float32/float64 cases vs extended precision."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normjax import jacobian

SHAPES = [(3, 5, (4,)), (8, 6, (7, 9)), (12, 12, (12,)), (5, 10, (6, 6, 6))]  # (M, N, hidden widths)
EXTENDED = np.finfo(np.longdouble).eps < 1e-18  # 80-bit x87 long double: a reference ~2000x finer than float64


def mlp(p, x):
    for W, b in zip(p["W"], p["b"], strict=True):
        x = jnp.tanh(W @ x + b)
    return p["A"] @ x


def reference_jacobian(p, x) -> np.ndarray:
    """J = A D_L W_L ... D_1 W_1, D = diag(1 - tanh(z)^2), in np.longdouble from the same stored values."""
    L = np.longdouble
    h, J = np.asarray(x).astype(L), np.eye(np.size(x), dtype=L)
    for W, b in zip(p["W"], p["b"], strict=True):
        W = np.asarray(W).astype(L)
        h = np.tanh(W @ h + np.asarray(b).astype(L))
        J = ((1 - h * h)[:, None] * W) @ J
    return np.asarray(p["A"]).astype(L) @ J


def jacobi_singular_values(J) -> np.ndarray:
    """One-sided Jacobi (Hestenes) in np.longdouble, sorted largest first: no LAPACK, no JAX."""
    A = np.array(J if J.shape[0] >= J.shape[1] else J.T, dtype=np.longdouble)
    n = A.shape[1]
    for _ in range(60):
        off = 0.0
        for i in range(n - 1):
            for j in range(i + 1, n):
                a, b = A[:, i].copy(), A[:, j].copy()
                alpha, beta, gamma = a @ a, b @ b, a @ b
                if gamma == 0:
                    continue
                off = max(off, float(abs(gamma) / np.sqrt(alpha * beta)))
                zeta = (beta - alpha) / (2 * gamma)
                t = (1 if zeta >= 0 else -1) / (abs(zeta) + np.sqrt(1 + zeta * zeta))
                c = 1 / np.sqrt(1 + t * t)
                A[:, i], A[:, j] = c * a - c * t * b, c * t * a + c * b
        if off < 1e-19:
            break
    return np.sort(np.sqrt(np.sum(A * A, axis=0)))[::-1]


def random_case(rng, m, n, hidden, dtype):
    """Weights scaled by 10^U(-1, 1) (tanh from linear to saturated), output scales over 4 decades."""
    dims, scale = [n, *hidden], 10 ** rng.uniform(-1, 1)
    layers = range(len(hidden))
    p = {
        "W": [jnp.asarray(rng.normal(size=(dims[i + 1], dims[i])) * scale / np.sqrt(dims[i]), dtype) for i in layers],
        "b": [jnp.asarray(rng.normal(size=dims[i + 1]), dtype) for i in layers],
        "A": jnp.asarray(rng.normal(size=(m, dims[-1])) * 10 ** rng.uniform(-2, 2), dtype),
    }
    return p, jnp.asarray(rng.normal(size=n), dtype)


@pytest.mark.skipif(not EXTENDED, reason="np.longdouble is not extended precision on this platform")
def test_exact_error_bound_holds_in_1000_random_float32_and_float64_cases():
    rng, worst = np.random.default_rng(0), 0.0
    for case in range(1000):
        m, n, hidden = SHAPES[case % len(SHAPES)]
        dtype = jnp.float32 if case % 2 else jnp.float64
        p, x = random_case(rng, m, n, hidden, dtype)
        with jax.enable_x64(dtype == jnp.float64):
            s, info = jacobian.singular_values(mlp, x, params=p, method="exact", return_info=True)
        assert info.dtype == jnp.dtype(dtype).name
        ref = jacobi_singular_values(reference_jacobian(p, x))
        err = float(np.max(np.abs(np.asarray(s).astype(np.longdouble) - ref)))
        assert err <= info.error_bound, (case, err, info.error_bound)
        worst = max(worst, err / info.error_bound)
    assert worst > 0.01  # the bound is not vacuous: some case comes within 100x of it
