"""Argument checks shared by the Jacobian tools: floating dtypes and finite values."""

import jax
import jax.numpy as jnp
import numpy as np


def require_float(name: str, x) -> jax.Array:
    """Returns `x` as a JAX array, raising `TypeError` unless it has a floating dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{name} must have a floating dtype to be differentiated, got {x.dtype}.")
    return x


def count_nonfinite(x: jax.Array) -> jax.Array:
    """Number of NaN or infinite entries of `x`, for use inside jit (an int32 scalar)."""
    return jnp.sum(~jnp.isfinite(x), dtype=jnp.int32)


def raise_if_nonfinite(what: str, count, size: int, error=FloatingPointError) -> None:
    """Raises `error` naming `what` when `count` (a concrete number) is positive.

    Does nothing when `count` is a tracer (the caller runs inside an outer `jax.jit`), so the tools
    stay traceable; the check is then the caller's job.
    """
    if isinstance(count, jax.core.Tracer):
        return
    count = int(np.asarray(count))
    if count:
        raise error(f"{what} has {count} non-finite (NaN or inf) entries out of {size}.")


def check_finite(what: str, x, error=FloatingPointError) -> None:
    """Raises `error` naming `what` when the concrete array (or pytree) `x` has NaN/inf entries.

    Counted on the host with NumPy: an eager jnp reduction would compile once per shape. Tracers
    are skipped, as in `raise_if_nonfinite`.
    """
    leaves = jax.tree.leaves(x)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return
    arrays = [np.asarray(leaf) for leaf in leaves]
    bad = sum(a.size - np.count_nonzero(np.isfinite(a)) for a in arrays)
    raise_if_nonfinite(what, bad, sum(a.size for a in arrays), error)


def require_finite(name: str, x) -> None:
    """Raises `ValueError` naming the input `name` when `x` has NaN or inf entries."""
    check_finite(f"input {name}", x, error=ValueError)


def working_dtype(*dtypes) -> np.dtype:
    """The one floating dtype a call computes its vectors, J and spectra in.

    The promotion of the input and output dtypes (float32 x with float64 f(x): float64), widened to
    float32 when narrower: LAPACK has no bfloat16/float16 SVD, and Krylov bases lose orthogonality fast
    in them. The function itself still runs as written (its bfloat16 arithmetic included).
    """
    dtype = np.dtype(jnp.result_type(*dtypes))
    return np.dtype(jnp.float32) if jnp.finfo(dtype).bits < 32 else dtype


def narrowest(dtypes) -> np.dtype:
    """The floating dtype of lowest precision (largest eps) among `dtypes`."""
    return max((np.dtype(d) for d in dtypes), key=lambda d: float(jnp.finfo(d).eps))


def default_tol(dtype, precision=None) -> float:
    """Default relative tolerance of power/Lanczos: well above the rounding noise of a norm estimate.

    Set by the narrowest of the working `dtype` and the `precision` the function computes in (each J v
    is only that precise): 1e-10 for float64, 1e-5 for float32, LOW_PRECISION_TOL_EPS times eps below
    (bfloat16 0.031, float16 0.0039), where the residual cannot go much below eps.
    """
    d = narrowest([dtype] if precision is None else [dtype, precision])
    if jnp.finfo(d).bits < 32:
        return LOW_PRECISION_TOL_EPS * float(jnp.finfo(d).eps)
    return 1e-10 if d == np.float64 else 1e-5


LOW_PRECISION_TOL_EPS = 4.0


def loop_tol(tol: float, dtype, precision=None) -> float:
    """The relative residual a power/Lanczos loop runs to: `tol`, and for a function that computes in a narrower
    dtype than the working one at most the working dtype's default.

    A certificate (`krylov.certify`) needs the loop's own residual well below f's rounding: stopped at a
    bfloat16-sized tol, a Krylov space of a few steps often holds a Ritz value close to sigma_2, not sigma_1,
    whose small residual says only that *some* singular value is near.
    """
    if precision is not None and narrowest([dtype, precision]) != np.dtype(dtype):
        return min(tol, default_tol(dtype))
    return tol
