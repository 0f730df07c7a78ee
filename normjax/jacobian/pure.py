"""Traceable spectral routines (inside jit, vmap, grad): arrays in, arrays and convergence info out."""

# No host syncs and no finiteness errors here (check `info` or the result yourself); the host-level
# entry points in `normjax.jacobian` add those. `f` is f(x) or, with `params`, f(params, x). An
# unconverged estimate warns at run time (`jax.debug.callback`) unless `warn_unconverged=False`.

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from normjax.jacobian import checks, exact, krylov, structure, traced

DEFAULT_POWER_ITERS = 500  # as the host-level power iteration
METHODS = ("lanczos", "power")


class SpectralState(NamedTuple):
    """Convergence info of a traceable estimate, as arrays (batched under vmap).

    error_bound: absolute residual bound ||J^T u - s v|| (a singular value of J lies within it);
    residual: error_bound / s; converged: residual <= tol; iterations: J^T J products / Lanczos steps.
    """

    iterations: jax.Array
    error_bound: jax.Array
    residual: jax.Array
    converged: jax.Array


class Flat(NamedTuple):
    """g(x_N) = ravel(f(x)) in the working `dtype` (`checks.working_dtype`), the default tol, and the narrowest
    floating dtype f computes in."""

    g: Callable
    x_N: jax.Array  # noqa: N815 (shape-suffix convention, STYLE.md)
    tol: float
    precision: np.dtype


def flat(f: Callable, x: Any, params: Any = None) -> Flat:
    """f as a flat map in one working dtype; x and f(x) may be pytrees (checked, leaf paths named)."""
    x_N, unravel = traced.ravel_floats("x", x)
    call = (lambda z: f(z)) if params is None else functools.partial(f, params)

    def g0(z_N):
        y = call(unravel(z_N))
        traced.check_output(y)
        return ravel_pytree(y)[0]

    dtype, precision = structure.dtypes(jax.make_jaxpr(g0)(x_N))

    def g(z_N):
        return g0(z_N.astype(x_N.dtype)).astype(dtype)

    return Flat(g, x_N.astype(dtype), checks.default_tol(dtype, precision), precision)


def _start(key, x_N):
    key = jax.random.key(0) if key is None else key
    return jax.random.normal(key, x_N.shape, x_N.dtype)


def _warn(name: str, converged, residual, tol: float) -> None:
    """Warns at run time (inside jit/vmap too) when an estimate did not reach tol, as the host entry points do."""

    def report(converged, residual):
        if not np.all(converged):
            warnings.warn(
                f"pure.{name}: {int(np.size(converged) - np.count_nonzero(converged))} estimate(s) stopped with a "
                f"relative residual bound up to {float(np.max(residual)):.3g} > tol {tol:.3g}; raise num_iters "
                "(Lanczos: the Krylov dimension) or check info.converged (warn_unconverged=False silences this).",
                stacklevel=2,
            )

    jax.debug.callback(report, converged, residual)


def _certified(g, x_N, theta_K, U_KM, V_KN, steps, tol):
    """SpectralState of triplets checked by `krylov.certify` (f's own rounding included in the bound)."""
    bound_K, _ = krylov.certify(g, x_N, theta_K, U_KM, V_KN)
    bound = jnp.max(bound_K)
    rel = bound / jnp.maximum(theta_K[0], jnp.finfo(x_N.dtype).tiny)
    return SpectralState(steps, bound, rel, rel <= tol)


def _top_pair(f, x, params, method, num_iters, tol, key):
    """(s, u_M, v_N, info, tol) of the top singular triplet by Lanczos or power iteration."""
    fl = flat(f, x, params)
    return _top_flat(fl.g, fl.x_N, fl.precision, method, num_iters, fl.tol if tol is None else tol, key)


def _top_flat(g, x_N, precision, method, num_iters, tol, key):
    """`_top_pair` of a flat map g in the working dtype of x_N, computing in `precision`."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    inner_tol = checks.loop_tol(tol, x_N.dtype, precision)
    if method == "power":
        iters = DEFAULT_POWER_ITERS if num_iters is None else num_iters
        s, v_N, u_M, steps, _, _ = krylov.power(g, x_N, _start(key, x_N), iters, inner_tol)
        return s, u_M, v_N, _certified(g, x_N, s[None], u_M[None], v_N[None], steps, tol), tol
    rank = min(x_N.size, jax.eval_shape(g, x_N).shape[0])
    max_dim = min(rank, 62 if num_iters is None else num_iters)
    theta_K, steps, _, _, (U_1M, V_1N) = krylov.lanczos(g, x_N, _start(key, x_N), 1, max_dim, inner_tol, 1)
    info = _certified(g, x_N, theta_K[:1], U_1M, V_1N, steps, tol)
    return theta_K[0], U_1M[0], V_1N[0], info, tol


def power_iteration(
    f: Callable,
    x: Any,
    *,
    params: Any = None,
    num_iters: int = DEFAULT_POWER_ITERS,
    tol: float | None = None,
    key=None,
    warn_unconverged: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array, SpectralState]:
    """(s, u_M, v_N, info): the top singular triplet of d f / d x by power iteration on J^T J.

    J v = s u exactly; info.error_bound = ||J^T u - s v||. Stops at num_iters or when
    error_bound <= tol * s (default tol `checks.default_tol` of the working dtype). u and v are raveled
    (`jax.flatten_util.ravel_pytree` order). With a small gap sigma_2 / sigma_1 power iteration needs
    many steps: prefer `spectral_norm` (Lanczos).
    """
    s, u_M, v_N, info, tol = _top_pair(f, x, params, "power", num_iters, tol, key)
    if warn_unconverged:
        _warn("power_iteration", info.converged, info.residual, tol)
    return s, u_M, v_N, info


def spectral_norm(
    f: Callable,
    x: Any,
    *,
    params: Any = None,
    method: str = "lanczos",
    num_iters: int | None = None,
    tol: float | None = None,
    key=None,
    warn_unconverged: bool = True,
) -> tuple[jax.Array, SpectralState]:
    """(||d f / d x||_2 estimate, info); traceable.

    method "lanczos" (default; num_iters = its static Krylov dimension, default min(N, M, 62)) or
    "power" (num_iters steps, default 500). Warns at run time when the bound did not reach tol.
    """
    s, _, _, info, tol = _top_pair(f, x, params, method, num_iters, tol, key)
    if warn_unconverged:
        _warn("spectral_norm", info.converged, info.residual, tol)
    return s, info


def singular_values(
    f: Callable,
    x: Any,
    k: int,
    *,
    params: Any = None,
    num_iters: int | None = None,
    tol: float | None = None,
    key=None,
    warn_unconverged: bool = True,
) -> tuple[jax.Array, SpectralState]:
    """(top-k singular values, info) by Golub-Kahan-Lanczos (Krylov dimension num_iters, static)."""
    fl = flat(f, x, params)
    tol = fl.tol if tol is None else tol
    rank = min(fl.x_N.size, jax.eval_shape(fl.g, fl.x_N).shape[0])
    max_dim = min(rank, 2 * k + 60 if num_iters is None else num_iters)
    inner_tol = checks.loop_tol(tol, fl.x_N.dtype, fl.precision)
    theta_K, steps, _, _, (U_KM, V_KN) = krylov.lanczos(fl.g, fl.x_N, _start(key, fl.x_N), k, max_dim, inner_tol, k)
    info = _certified(fl.g, fl.x_N, theta_K[:k], U_KM, V_KN, steps, tol)
    if warn_unconverged:
        _warn("singular_values", info.converged, info.residual, tol)
    return theta_K[:k], info


def frobenius_norm_sq(
    f: Callable, x: Any, *, params: Any = None, num_probes: int = 64, key=None
) -> tuple[jax.Array, jax.Array]:
    """(Hutchinson estimate of ||d f / d x||_F^2, its standard error) over Rademacher probes; traceable."""
    fl = flat(f, x, params)
    key = jax.random.key(0) if key is None else key
    z_PN = jax.random.rademacher(key, (num_probes, fl.x_N.size), fl.x_N.dtype)
    value, stderr, _ = krylov.hutchinson(fl.g, fl.x_N, z_PN, None)
    return value, stderr


def jacobian(f: Callable, x: Any, *, params: Any = None, mode: str = "fwd") -> jax.Array:
    """J_MN = d ravel(f(x)) / d ravel(x) in the working dtype, traceable."""
    fl = flat(f, x, params)
    return exact.flat_jacobian(fl.g, fl.x_N, mode)[0]


def _stop_gradient(tree):
    """stop_gradient on the array leaves only (params may hold functions, ints, strings)."""
    return jax.tree.map(lambda a: jax.lax.stop_gradient(a) if isinstance(a, jax.Array | np.ndarray) else a, tree)


def differentiable_spectral_norm(
    f: Callable,
    params: Any,
    x: Any,
    *,
    method: str = "lanczos",
    num_iters: int | None = None,
    tol: float | None = None,
    key=None,
    warn_unconverged: bool = True,
) -> tuple[jax.Array, SpectralState]:
    """sigma_max(d f(params, x) / d x), differentiable in params and x: a spectral regularizer.

    The top triplet (u, v) comes from Lanczos (default; or power iteration) under `stop_gradient`;
    the value is u^T J v (= s, since J v = s u), whose derivative with u, v held fixed is u^T dJ v: the
    derivative of a simple sigma_max. The gradient's error is about the residual over the relative gap
    (sigma_1 - sigma_2) / sigma_1, so it is exact to tol / gap when the estimate converged; an
    unconverged one warns at run time (and info.converged says so). One extra JVP per call, differentiated.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    # Through the structure cache: one compiled program per structure (also for an unjitted jax.grad), the
    # arrays f reads passed as arguments (never stale), params' leaves among them (so gradients reach them).
    conv = traced.convert(f, x, params)
    tol = checks.default_tol(conv.fn.dtype, conv.fn.precision) if tol is None else float(tol)
    key = jax.random.key(0) if key is None else key
    return _differentiable(conv.fn, conv.args, conv.x_N, key, method, num_iters, tol, warn_unconverged)


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6, 7))
def _differentiable(fn, args, x_N, key, method, num_iters, tol, warn_unconverged):
    g = functools.partial(fn, _stop_gradient(args))
    _, u_M, v_N, info, tol = _top_flat(g, jax.lax.stop_gradient(x_N), fn.precision, method, num_iters, tol, key)
    if warn_unconverged:
        _warn("differentiable_spectral_norm", info.converged, info.residual, tol)
    u_M, v_N = jax.lax.stop_gradient(u_M), jax.lax.stop_gradient(v_N)
    return jnp.vdot(u_M, jax.jvp(functools.partial(fn, args), (x_N,), (v_N,))[1]), info
