"""Spectral norm, singular values and Frobenius norm of a Jacobian: exact or matrix-free."""

import dataclasses
import functools
import math
import warnings

import jax
import jax.numpy as jnp

from normjax.jacobian import checks, krylov
from normjax.jacobian.exact import jacobian, validate

METHODS = ("auto", "exact", "power", "lanczos")
# "auto" materializes J (and runs a dense SVD) when it has at most this many entries (a 1024 x 1024
# Jacobian: 8 MiB in float64, an SVD of ~0.1 s on one CPU core); otherwise it runs Lanczos.
AUTO_EXACT_MAX_ENTRIES = 2**20
DEFAULT_POWER_ITERS = 500


@dataclasses.dataclass(frozen=True)
class SpectralInfo:
    """How a spectral estimate was obtained.

    Attributes:
      method: "exact", "power" or "lanczos".
      iterations: J^T J products (power) or bidiagonalization steps (Lanczos), each costing one JVP
        and one VJP; 0 for exact.
      residual: power: the last relative change of the estimate; Lanczos: the largest residual bound
        |sigma_i - theta_i| <= residual * theta_0 over the top-k Ritz values; exact: 0.
      converged: residual <= tol before the iteration cap.
    """

    method: str
    iterations: int
    residual: float
    converged: bool

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


def default_tol(dtype) -> float:
    """Default stopping tolerance: well above rounding noise of a norm estimate in `dtype`."""
    return 1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5


@functools.partial(jax.jit, static_argnames=("k",))
def _top_singular_values(J_MN, k):
    return jnp.linalg.svd(J_MN, compute_uv=False)[:k]


def resolve_method(method: str, in_size: int, out_size: int) -> str:
    """The method "auto" stands for with these sizes (others are returned as they are)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    if method == "auto":
        return "exact" if in_size * out_size <= AUTO_EXACT_MAX_ENTRIES else "lanczos"
    return method


def _output_size(f, x) -> int:
    """f(x).size, from the abstract evaluation (no computation)."""
    return math.prod(jax.eval_shape(f, x).shape)


def _finish(values, info, tol, return_info):
    if not info.converged:
        warnings.warn(
            f"{info.method} stopped after {info.iterations} iterations with residual "
            f"{info.residual:.3g} > tol {tol:.3g}; raise num_iters.",
            stacklevel=3,
        )
    return (values, info) if return_info else values


def singular_values(
    f,
    x,
    k: int | None = None,
    *,
    method: str = "auto",
    num_iters: int | None = None,
    tol: float | None = None,
    key=None,
    return_info: bool = False,
):
    """Singular values of the Jacobian of f at x, largest first.

    Args:
      f: pure, hashable JAX function of one array (compiled code is cached per `f`).
      x: floating array; N = x.size, M = f(x).size.
      k: number of top singular values; None means all min(N, M) (exact only).
      method: "exact" (materialize J with `jacobian`, dense SVD: O(N M min(N, M)) time, N M memory),
        "lanczos" (matrix-free Golub-Kahan-Lanczos with full reorthogonalization: per step one JVP
        + one VJP, about 3 forward passes, plus O((N + M) num_iters) memory and flops; an
        approximation to within the reported residual), "power" (k = 1 only), or "auto"
        (exact when N * M <= AUTO_EXACT_MAX_ENTRIES, else Lanczos).
      num_iters: iteration cap: power steps (default 500) or Lanczos Krylov dimension (default
        min(N, M, 2 k + 60)).
      tol: stopping tolerance (default `default_tol(x.dtype)`); see `SpectralInfo.residual`.
      key: PRNG key of the random start vector (default `jax.random.key(0)`).
      return_info: also return a `SpectralInfo`.

    Returns:
      s_K of shape (k,) (or (min(N, M),) for k=None), and the `SpectralInfo` if asked.

    Raises:
      ValueError: bad arguments or non-finite x. FloatingPointError: non-finite f(x) or result.
    """
    x = validate(f, x)
    out_size = _output_size(f, x)
    method = resolve_method(method, x.size, out_size)
    rank = min(x.size, out_size)
    if k is None and method != "exact":
        raise ValueError(f"all singular values need method='exact'; pass k for {method!r}.")
    k = rank if k is None else k
    if not 1 <= k <= rank:
        raise ValueError(f"k must be in [1, min(x.size, f(x).size) = {rank}], got {k}.")
    if method == "power" and k != 1:
        raise ValueError("power iteration gives only the top singular value; use k=1 or lanczos.")
    tol = default_tol(x.dtype) if tol is None else tol
    key = jax.random.key(0) if key is None else key
    if method == "exact":
        mode = "fwd" if x.size <= out_size else "rev"  # the cheaper of N JVPs and M VJPs
        s_K = _top_singular_values(jacobian(f, x, mode=mode), k)
        info = SpectralInfo("exact", 0, 0.0, True)
    else:
        v0_N = krylov.random_vectors(key, (x.size,), x.dtype)
        if method == "power":
            iters = DEFAULT_POWER_ITERS if num_iters is None else num_iters
            s, steps, res, bad_y = krylov.power(f, x, v0_N, iters, tol)
            s_K = s[None]
        else:
            max_dim = min(rank, 2 * k + 60 if num_iters is None else num_iters)
            if max_dim < k:
                raise ValueError(f"num_iters={num_iters} must be >= k={k} for lanczos.")
            theta_K, steps, res, bad_y = krylov.lanczos(f, x, v0_N, k, max_dim, tol)
            s_K = theta_K[:k]
            # A full Krylov basis (max_dim = rank) makes B's singular values exact up to rounding.
        checks.raise_if_nonfinite("f(x)", bad_y, out_size)
        res = float(res)
        converged = res <= tol or (method == "lanczos" and int(steps) == rank)
        info = SpectralInfo(method, int(steps), res, converged)
    checks.check_finite(f"the {info.method} singular values", s_K)
    return _finish(s_K, info, tol, return_info)


def spectral_norm(
    f,
    x,
    *,
    method: str = "auto",
    num_iters: int | None = None,
    tol: float | None = None,
    key=None,
    return_info: bool = False,
):
    """Largest singular value ||J||_2 of the Jacobian of f at x (scalar).

    Same arguments and costs as `singular_values` with k = 1. "power" runs power iteration on
    J^T J (one JVP + one VJP per step) until the relative change of the estimate is <= tol; it
    converges like (sigma_2 / sigma_1)^(2 i), so with a small gap its error can exceed tol: prefer
    "lanczos" (a rigorous residual bound, far fewer steps) when accuracy matters.

    Returns:
      A scalar array, and the `SpectralInfo` if `return_info`.
    """
    out = singular_values(f, x, 1, method=method, num_iters=num_iters, tol=tol, key=key, return_info=return_info)
    return (out[0][0], out[1]) if return_info else out[0]


def frobenius_norm_sq(
    f,
    x,
    *,
    method: str = "hutchinson",
    num_probes: int = 64,
    key=None,
    chunk_size: int | None = None,
    return_info: bool = False,
):
    """Squared Frobenius norm ||J||_F^2 of the Jacobian of f at x (scalar).

    Args:
      f, x: as in `singular_values`.
      method: "hutchinson" (unbiased estimate E||J z||^2 over `num_probes` Rademacher probes z:
        `num_probes` JVPs, never J; an approximation with the standard error in the info) or
        "exact" (sum of squares of the materialized J).
      num_probes: Hutchinson probes, >= 2.
      key: PRNG key of the probes (default `jax.random.key(0)`).
      chunk_size: probes pushed through one `vmap` at a time (None: all at once).
      return_info: also return a `FrobeniusInfo`.
    """
    x = validate(f, x, chunk_size=chunk_size)
    out_size = _output_size(f, x)
    if method == "exact":
        J_MN = jacobian(f, x, chunk_size=chunk_size)
        value, info = jnp.sum(J_MN**2), FrobeniusInfo("exact", 0, 0.0)
    elif method == "hutchinson":
        if num_probes < 2:
            raise ValueError(f"num_probes must be >= 2, got {num_probes}.")
        key = jax.random.key(0) if key is None else key
        z_PN = krylov.random_vectors(key, (num_probes, x.size), x.dtype, "rademacher")
        value, stderr, bad_y = krylov.hutchinson(f, x, z_PN, chunk_size)
        checks.raise_if_nonfinite("f(x)", bad_y, out_size)
        info = FrobeniusInfo("hutchinson", num_probes, float(stderr))
    else:
        raise ValueError(f"method must be 'hutchinson' or 'exact', got {method!r}.")
    checks.check_finite("the Frobenius norm estimate", value)
    return (value, info) if return_info else value
