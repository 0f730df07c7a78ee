"""Traceable spectral routines (inside jit, vmap, grad): arrays in, arrays and convergence info out."""

# No host syncs and no finiteness errors here (check `info` or the result yourself); the host-level
# entry points in `normjax.jacobian` add those. `f` is f(x) or, with `params`, f(params, x).

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from normjax.jacobian import exact, krylov


class SpectralState(NamedTuple):
    """Convergence info of a traceable estimate, as arrays (batched under vmap).

    error_bound: absolute residual bound ||J^T u - s v|| (a singular value of J lies within it);
    residual: error_bound / s; converged: residual <= tol; iterations: J^T J products / Lanczos steps.
    """

    iterations: jax.Array
    error_bound: jax.Array
    residual: jax.Array
    converged: jax.Array


def flat(f: Callable, x: Any, params: Any = None) -> tuple[Callable, jax.Array]:
    """(g, x_N) with g(x_N) = ravel(f(x)) (or of f(params, x)); x and f(x) may be pytrees."""
    x_N, unravel = ravel_pytree(x)
    call = (lambda z: f(z)) if params is None else functools.partial(f, params)
    return (lambda z_N: ravel_pytree(call(unravel(z_N)))[0]), x_N


def _start(key, x_N):
    key = jax.random.key(0) if key is None else key
    return jax.random.normal(key, x_N.shape, x_N.dtype)


def _tol(tol, dtype):
    return (1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5) if tol is None else tol


def power_iteration(
    f: Callable, x: Any, *, params: Any = None, num_iters: int = 100, tol: float | None = None, key=None
) -> tuple[jax.Array, jax.Array, jax.Array, SpectralState]:
    """(s, u_M, v_N, info): the top singular triplet of d f / d x by power iteration on J^T J.

    J v = s u exactly; info.error_bound = ||J^T u - s v||. Stops at num_iters or when
    error_bound <= tol * s. u and v are raveled (`jax.flatten_util.ravel_pytree` order).
    """
    g, x_N = flat(f, x, params)
    tol = _tol(tol, x_N.dtype)
    s, v_N, u_M, steps, bound, _ = krylov.power(g, x_N, _start(key, x_N), num_iters, tol)
    rel = bound / jnp.maximum(s, jnp.finfo(x_N.dtype).tiny)
    return s, u_M, v_N, SpectralState(steps, bound, rel, rel <= tol)


def spectral_norm(
    f: Callable, x: Any, *, params: Any = None, num_iters: int = 100, tol: float | None = None, key=None
) -> tuple[jax.Array, SpectralState]:
    """(||d f / d x||_2 estimate, info) by power iteration; traceable, see `power_iteration`."""
    s, _, _, info = power_iteration(f, x, params=params, num_iters=num_iters, tol=tol, key=key)
    return s, info


def singular_values(
    f: Callable, x: Any, k: int, *, params: Any = None, num_iters: int | None = None, tol: float | None = None, key=None
) -> tuple[jax.Array, SpectralState]:
    """(top-k singular values, info) by Golub-Kahan-Lanczos (Krylov dimension num_iters, static)."""
    g, x_N = flat(f, x, params)
    tol = _tol(tol, x_N.dtype)
    out_size = jax.eval_shape(g, x_N).shape[0]
    max_dim = min(x_N.size, out_size, 2 * k + 60 if num_iters is None else num_iters)
    theta_K, steps, rel, _ = krylov.lanczos(g, x_N, _start(key, x_N), k, max_dim, tol)
    return theta_K[:k], SpectralState(steps, rel * theta_K[0], rel, (rel <= tol) | (steps == min(x_N.size, out_size)))


def frobenius_norm_sq(
    f: Callable, x: Any, *, params: Any = None, num_probes: int = 64, key=None
) -> tuple[jax.Array, jax.Array]:
    """(Hutchinson estimate of ||d f / d x||_F^2, its standard error) over Rademacher probes; traceable."""
    g, x_N = flat(f, x, params)
    key = jax.random.key(0) if key is None else key
    z_PN = jax.random.rademacher(key, (num_probes, x_N.size), x_N.dtype)
    value, stderr, _ = krylov.hutchinson(g, x_N, z_PN, None)
    return value, stderr


def jacobian(f: Callable, x: Any, *, params: Any = None, mode: str = "fwd") -> jax.Array:
    """J_MN = d ravel(f(x)) / d ravel(x), traceable."""
    g, x_N = flat(f, x, params)
    return exact.flat_jacobian(g, x_N, mode)[0]


def differentiable_spectral_norm(
    f: Callable, params: Any, x: Any, *, num_iters: int = 100, tol: float | None = None, key=None
) -> tuple[jax.Array, SpectralState]:
    """sigma_max(d f(params, x) / d x), differentiable in params and x: a spectral regularizer.

    The top triplet (u, v) comes from `power_iteration` under `stop_gradient`; the value is
    u^T J v (= s, since J v = s u), whose derivative with u, v held fixed is u^T dJ v: the
    derivative of a simple sigma_max. Gradients are exact when sigma_max is simple and the
    iteration converged (check info.converged); one extra JVP per call, differentiated.
    """
    _, u_M, v_N, info = power_iteration(
        f, jax.lax.stop_gradient(x), params=jax.lax.stop_gradient(params), num_iters=num_iters, tol=tol, key=key
    )
    u_M, v_N = jax.lax.stop_gradient(u_M), jax.lax.stop_gradient(v_N)

    def sigma(params, x):
        g, x_N = flat(f, x, params)
        return jnp.vdot(u_M, jax.jvp(g, (x_N,), (v_N,))[1])

    return sigma(params, x), info
