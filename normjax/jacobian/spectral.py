"""Spectral norm, singular values and Frobenius norm of a Jacobian (host level): exact or matrix-free."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from normjax.jacobian import checks, krylov
from normjax.jacobian.exact import jacobian_of, prepare, rounding_estimate

METHODS = ("auto", "exact", "power", "lanczos")
# "auto" materializes J (and runs a dense SVD) when it has at most this many entries (a 1024 x 1024
# Jacobian: 8 MiB in float64, an SVD of ~0.1 s on one CPU core); otherwise it runs Lanczos.
AUTO_EXACT_MAX_ENTRIES = 2**20
DEFAULT_POWER_ITERS = 500


@dataclasses.dataclass(frozen=True)
class SpectralInfo:
    """How a spectral estimate was obtained, with an honest error bound.

    Attributes:
      method: "exact", "power" or "lanczos".
      iterations: J^T J products (power) or bidiagonalization steps (Lanczos), each costing one JVP
        and one VJP; 0 for exact.
      residual: error_bound relative to the largest estimate.
      converged: residual <= tol.
      error_bound: absolute; a singular value of J (the Jacobian of f in exact arithmetic, at its
        weights and x as f sees them, e.g. rounded to bfloat16) lies within it of each estimate. Power
        and Lanczos: the returned triplets' residuals ||J v - s u|| and ||J^T u - s v||, computed with
        the operator as f computes it and each widened by that matvec's own rounding (`krylov.certify`);
        exact, see `exact_error_bound`.
      dtype: the working dtype of J, the Krylov vectors and the SVD (`checks.working_dtype`: x's and
        f(x)'s dtypes promoted, bfloat16/float16 widened to float32).
      rounding: the part of f's own rounding in error_bound (absolute): the estimated error of one J v
        or J^T u (power, Lanczos), of J (exact). It does not shrink with more iterations.
      loop_residual: the relative residual power/Lanczos stopped at (0 for exact).
    """

    method: str
    iterations: int
    residual: float
    converged: bool
    error_bound: float
    dtype: str
    rounding: float = 0.0
    loop_residual: float = 0.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FrobeniusInfo:
    """Details of a Frobenius estimate: probes used and its standard error (0 when exact)."""

    method: str
    num_probes: int
    stderr: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@functools.partial(jax.jit, static_argnames=("k",))
def _top_singular_values(J_MN, k):
    return jnp.linalg.svd(J_MN, compute_uv=False)[:k]


@functools.partial(jax.jit, static_argnums=0)
def _power(fn, args, x_N, v0_N, num_iters, tol):
    s, v_N, u_M, steps, res, bad_y = krylov.power(functools.partial(fn, args), x_N, v0_N, num_iters, tol)
    return s[None], steps, res / jnp.maximum(s, jnp.finfo(x_N.dtype).tiny), bad_y, u_M[None], v_N[None]


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _lanczos(fn, args, x_N, v0_N, k, max_dim, tol):
    theta_K, steps, rel, bad_y, (U_KM, V_KN) = krylov.lanczos(
        functools.partial(fn, args), x_N, v0_N, k, max_dim, tol, vectors=k
    )
    return theta_K, steps, rel, bad_y, U_KM, V_KN


@functools.partial(jax.jit, static_argnums=0)
def _certify_one(fn, args, x_N, theta, u_M, v_N):
    bound_1, rounding_1 = krylov.certify(functools.partial(fn, args), x_N, theta[None], u_M[None], v_N[None])
    return bound_1[0], rounding_1[0]


def _certify(conv, theta_K, U_KM, V_KN) -> tuple[float, float]:
    """(largest bound, largest rounding part) of the triplets by `krylov.certify`, one triplet per call: one
    compiled program per structure, whatever k and method."""
    triplets = zip(*(np.asarray(a) for a in (theta_K, U_KM, V_KN)), strict=True)  # host rows: no eager slicing
    pairs = [_certify_one(conv.fn, conv.args, conv.x_N, *t) for t in triplets]
    return max(float(b) for b, _ in pairs), max(float(r) for _, r in pairs)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _hutchinson(fn, args, x_N, z_PN, chunk_size):
    return krylov.hutchinson(functools.partial(fn, args), x_N, z_PN, chunk_size)


def resolve_method(method: str, in_size: int, out_size: int) -> str:
    """The method "auto" stands for with these sizes (others are returned as they are)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    if method == "auto":
        return "exact" if in_size * out_size <= AUTO_EXACT_MAX_ENTRIES else "lanczos"
    return method


def check_iteration_args(num_iters, tol) -> None:
    """ValueError unless num_iters is None or an int >= 1 and tol is None or a finite float > 0."""
    if num_iters is not None and (isinstance(num_iters, bool) or not isinstance(num_iters, int) or num_iters < 1):
        raise ValueError(f"num_iters must be a positive int or None, got {num_iters!r}.")
    if tol is not None and not (isinstance(tol, int | float) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0 or None, got {tol!r}.")


def host_level(name: str, conv) -> None:
    """TypeError when called under a JAX transformation, naming the entry point and its traceable variant."""
    if any(isinstance(a, jax.core.Tracer) for a in (conv.x_N, *conv.args)):
        raise TypeError(
            f"jacobian.{name} is a host-level entry point (it reads results back); inside jit, vmap or grad use "
            f"normjax.jacobian.pure.{name}"
            + (" (or jacobian.differentiable_spectral_norm for gradients)." if name == "spectral_norm" else ".")
        )


def _finish(values, info, tol, inner_tol, return_info):
    if not info.converged and info.loop_residual > inner_tol:
        warnings.warn(
            f"{info.method} stopped after {info.iterations} iterations with relative residual bound "
            f"{info.residual:.3g} > tol {tol:.3g}: each estimate is guaranteed within that (relative) of a "
            "singular value of J, and is often far closer (a converged value's error shrinks like the bound "
            "squared over the gap to the next singular value). Raise num_iters (or tol) for a guaranteed bound.",
            stacklevel=3,
        )
    elif not info.converged:
        warnings.warn(
            f"{info.method}: f's own rounding limits what can be certified: the error bound {info.residual:.3g} "
            f"(relative; {info.rounding / max(info.error_bound, 1e-300) * info.residual:.3g} of it from one "
            f"matvec's rounding) is above tol {tol:.3g}, and more iterations do not lower it. Each estimate is "
            "guaranteed within the bound of a singular value of J; pass tol at or above it, or let f compute in "
            "a wider dtype.",
            stacklevel=3,
        )
    return (values, info) if return_info else values


def exact_error_bound(s_max: float, rounding: float, shape: tuple[int, int], dtype) -> float:
    """The exact method's bound on |s_i - sigma_i(J)|: J's own rounding plus the dense SVD's.

    `rounding` estimates ||J_computed - J|| (`exact.rounding_estimate`), which moves every singular value
    by at most that much (Weyl); the SVD adds its backward error, sqrt(min(M, N)) eps s_max in the working
    dtype (LAPACK's p(m, n) eps ||J||, with p(m, n) taken as sqrt(min(M, N))).
    """
    return rounding + math.sqrt(min(shape)) * float(jnp.finfo(dtype).eps) * s_max


def _exact(conv, k, out_size):
    mode = "fwd" if conv.x_N.size <= out_size else "rev"  # the cheaper of N JVPs and M VJPs
    J_MN = jacobian_of(conv, mode=mode)
    s_K = _top_singular_values(J_MN, k)
    rounding = rounding_estimate(conv, J_MN, mode)
    bound = exact_error_bound(float(s_K[0]), rounding, J_MN.shape, conv.dtype)
    residual = bound / max(float(s_K[0]), float(jnp.finfo(conv.dtype).tiny))
    return s_K, SpectralInfo("exact", 0, residual, True, bound, str(conv.dtype), rounding)


def singular_values(
    f: Callable,
    x: Any,
    k: int | None = None,
    *,
    params: Any = None,
    method: str = "auto",
    num_iters: int | None = None,
    tol: float | None = None,
    key: jax.Array | None = None,
    return_info: bool = False,
    stop_gradient: str = "constant",
) -> jax.Array | tuple[jax.Array, SpectralInfo]:
    """Singular values of the Jacobian d f / d x at x, largest first.

    J is by default the Jacobian backpropagation uses (every `stop_gradient` operand in f a constant);
    `stop_gradient="identity"` gives the forward map's, see `normjax.jacobian.jacobian`.

    Args:
      f: f(x), or f(params, x) with `params`, or an nnx.Module; see `normjax.jacobian.jacobian`
        (never stale, compiled once per structure).
      x: floating array or pytree of them; N = its size, M = the size of f(x).
      k: number of top singular values; None means all min(N, M) (exact only).
      params: pytree of arrays for f(params, x), or None.
      method: "exact" (materialize J, dense SVD: O(N M min(N, M)) time, N M memory), "lanczos"
        (matrix-free Golub-Kahan-Lanczos with full reorthogonalization: per step one JVP + one VJP,
        plus O((N + M) num_iters) memory), "power" (k = 1 only), or "auto" (exact when
        N * M <= AUTO_EXACT_MAX_ENTRIES, else Lanczos; with num_iters None, auto's Lanczos doubles
        its Krylov dimension from min(N, M, 2 k + 60) until the bound reaches tol or the dimension
        reaches min(N, M), one compile per dimension tried).
      num_iters: iteration cap >= 1: power steps (default 500) or Lanczos Krylov dimension
        (default min(N, M, 2 k + 60)).
      tol: relative tolerance > 0 on the residual error bound (default `checks.default_tol`: 1e-10 in
        float64, 1e-5 in float32, 0.031 for a function that computes in bfloat16).
      key: PRNG key of the random start vector (default `jax.random.key(0)`).
      return_info: also return a `SpectralInfo`.
      stop_gradient: "constant" (the backpropagated Jacobian) or "identity" (the forward map's).

    Returns:
      s_K of shape (k,) (or (min(N, M),) for k=None), and the `SpectralInfo` if asked. Warns when
      the error bound did not reach tol.

    Raises:
      ValueError: bad arguments or non-finite x. FloatingPointError: non-finite f(x) or result.
      TypeError: f, x or f(x) of an unsupported kind.
    """
    return _spectrum(
        "singular_values",
        f,
        x,
        k,
        params,
        method=method,
        num_iters=num_iters,
        tol=tol,
        key=key,
        return_info=return_info,
        stop_gradient=stop_gradient,
    )


def _spectrum(entry, f, x, k, params, *, method, num_iters, tol, key, return_info, stop_gradient):
    """`singular_values`, with errors under a transformation naming the public `entry` that was called."""
    check_iteration_args(num_iters, tol)
    conv = prepare(f, x, params, stop_gradient)
    host_level(entry, conv)
    x_N, out_size = conv.x_N, conv.out_size
    requested, method = method, resolve_method(method, x_N.size, out_size)
    rank = min(x_N.size, out_size)
    if k is None and method != "exact":
        raise ValueError(f"all singular values need method='exact'; pass k for {method!r}.")
    k = rank if k is None else k
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= rank:
        raise ValueError(f"k must be an int in [1, min(x.size, f(x).size) = {rank}], got {k!r}.")
    if method == "power" and k != 1:
        raise ValueError("power iteration gives only the top singular value; use k=1 or lanczos.")
    tol = checks.default_tol(conv.dtype, conv.fn.precision) if tol is None else float(tol)
    key = jax.random.key(0) if key is None else key
    inner_tol = checks.loop_tol(tol, conv.dtype, conv.fn.precision)
    if method == "exact":
        s_K, info = _exact(conv, k, out_size)
    else:
        v0_N = krylov.random_vectors(key, (x_N.size,), x_N.dtype)
        if method == "power":
            iters = DEFAULT_POWER_ITERS if num_iters is None else num_iters
            theta_K, steps, res, bad_y, U_KM, V_KN = _power(conv.fn, conv.args, x_N, v0_N, iters, inner_tol)
        else:
            max_dim = min(rank, 2 * k + 60 if num_iters is None else num_iters)
            if max_dim < k:
                raise ValueError(f"num_iters={num_iters} must be >= k={k} for lanczos.")
            while True:
                theta_K, steps, res, bad_y, U_KM, V_KN = _lanczos(conv.fn, conv.args, x_N, v0_N, k, max_dim, inner_tol)
                checks.raise_if_nonfinite("f(x)", bad_y, out_size)
                # "auto" owns the Krylov dimension: double it until the loop's residual reaches its tol or spans all.
                if requested != "auto" or num_iters is not None or float(res) <= inner_tol or max_dim == rank:
                    break
                max_dim = min(rank, 2 * max_dim)
        checks.raise_if_nonfinite("f(x)", bad_y, out_size)
        s_K = theta_K[:k]
        bound, rounding = _certify(conv, s_K, U_KM, V_KN)
        rel = bound / max(float(theta_K[0]), float(jnp.finfo(x_N.dtype).tiny))
        info = SpectralInfo(method, int(steps), rel, rel <= tol, bound, str(conv.dtype), rounding, float(res))
    checks.check_finite(f"the {info.method} singular values", s_K)
    return _finish(s_K, info, tol, inner_tol, return_info)


def spectral_norm(
    f: Callable,
    x: Any,
    *,
    params: Any = None,
    method: str = "auto",
    num_iters: int | None = None,
    tol: float | None = None,
    key: jax.Array | None = None,
    return_info: bool = False,
    stop_gradient: str = "constant",
) -> jax.Array | tuple[jax.Array, SpectralInfo]:
    """Largest singular value ||J||_2 of the Jacobian d f / d x at x (scalar).

    Same arguments and costs as `singular_values` with k = 1 (by default of the backpropagated Jacobian;
    `stop_gradient="identity"`: of the forward map's). "power" runs power iteration on
    J^T J (one JVP + one VJP per step) until its residual bound ||J^T u - s v|| <= tol * s; with a
    small gap sigma_2 / sigma_1 that takes many steps: prefer "lanczos" when accuracy matters. For
    use inside jit/vmap/grad see `normjax.jacobian.pure`.

    Returns:
      A scalar array, and the `SpectralInfo` if `return_info`.
    """
    out = _spectrum(
        "spectral_norm",
        f,
        x,
        1,
        params,
        method=method,
        num_iters=num_iters,
        tol=tol,
        key=key,
        return_info=return_info,
        stop_gradient=stop_gradient,
    )
    return (out[0][0], out[1]) if return_info else out[0]


def frobenius_norm_sq(
    f: Callable,
    x: Any,
    *,
    params: Any = None,
    method: str = "hutchinson",
    num_probes: int = 64,
    key: jax.Array | None = None,
    chunk_size: int | None = None,
    return_info: bool = False,
    stop_gradient: str = "constant",
) -> jax.Array | tuple[jax.Array, FrobeniusInfo]:
    """Squared Frobenius norm ||J||_F^2 of the Jacobian d f / d x at x (scalar).

    Args:
      f, x, params, stop_gradient: as in `singular_values` (by default the backpropagated Jacobian's norm).
      method: "hutchinson" (unbiased estimate E||J z||^2 over `num_probes` Rademacher probes z:
        `num_probes` JVPs, never J; an approximation with the standard error in the info) or
        "exact" (sum of squares of the materialized J).
      num_probes: Hutchinson probes, >= 2.
      key: PRNG key of the probes (default `jax.random.key(0)`).
      chunk_size: probes pushed through one `vmap` at a time (None: all at once).
      return_info: also return a `FrobeniusInfo`.
    """
    if method not in ("hutchinson", "exact"):
        raise ValueError(f"method must be 'hutchinson' or 'exact', got {method!r}.")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}.")
    conv = prepare(f, x, params, stop_gradient)
    host_level("frobenius_norm_sq", conv)
    if method == "exact":
        J_MN = jacobian_of(conv, chunk_size=chunk_size)
        value, info = jnp.sum(J_MN**2), FrobeniusInfo("exact", 0, 0.0)
    else:
        if isinstance(num_probes, bool) or not isinstance(num_probes, int) or num_probes < 2:
            raise ValueError(f"num_probes must be an int >= 2, got {num_probes!r}.")
        key = jax.random.key(0) if key is None else key
        z_PN = krylov.random_vectors(key, (num_probes, conv.x_N.size), conv.x_N.dtype, "rademacher")
        value, stderr, bad_y = _hutchinson(conv.fn, conv.args, conv.x_N, z_PN, chunk_size)
        checks.raise_if_nonfinite("f(x)", bad_y, conv.out_size)
        info = FrobeniusInfo("hutchinson", num_probes, float(stderr))
    checks.check_finite("the Frobenius norm estimate", value)
    return (value, info) if return_info else value
