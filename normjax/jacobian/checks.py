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
    """Number of NaN or infinite entries of `x` (a traced int32 scalar inside jit)."""
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


def require_finite(name: str, x: jax.Array) -> None:
    """Raises `ValueError` naming `name` when the (concrete) array `x` has NaN or inf entries."""
    if isinstance(x, jax.core.Tracer):
        return
    raise_if_nonfinite(f"input {name}", count_nonfinite(x), x.size, error=ValueError)
