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
