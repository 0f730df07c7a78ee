"""Closed-form Jacobians of LayerNorm, RMSNorm and DyT, and their spectral norms.

All functions act on the last axis of z (size d) and broadcast over leading axes, e.g. z_BTD gives
per-token results of shape (B, T, d, d) or (B, T). They are jit-compiled (once per input shape).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

NORM_KINDS = ("layernorm", "rmsnorm", "dyt")


class ClosedFormNorm(NamedTuple):
    """A closed-form spectral norm per vector (shape z.shape[:-1]) and whether it is exact.

    `exact` is True when `value` equals ||J||_2, False when it is only an upper bound (a
    non-constant scale gamma: ||diag(gamma) P|| <= max|gamma| ||P||).
    """

    value: jax.Array
    exact: jax.Array


def _scale(scale, z):
    return jnp.ones(z.shape[-1:], z.dtype) if scale is None else jnp.asarray(scale, z.dtype)


def _is_constant(scale):
    return jnp.asarray(True) if scale is None else jnp.all(scale == jnp.ravel(scale)[0])


def _outer(a, b):
    return a[..., :, None] * b[..., None, :]


@jax.jit
def layernorm_sigma(z, eps: float = 1e-5) -> jax.Array:
    """LayerNorm's denominator sigma = sqrt(var(z) + eps) over the last axis; shape z.shape[:-1]."""
    return jnp.sqrt(jnp.var(z, axis=-1) + eps)


@jax.jit
def rmsnorm_rms(z, eps: float = 1e-5) -> jax.Array:
    """RMSNorm's denominator r = sqrt(mean(z^2) + eps) over the last axis; shape z.shape[:-1]."""
    return jnp.sqrt(jnp.mean(jnp.square(z), axis=-1) + eps)


@jax.jit
def layernorm_jacobian(z, scale=None, eps: float = 1e-5) -> jax.Array:
    """Jacobian of y = gamma * (z - mean) / sigma + beta, sigma = sqrt(var(z) + eps).

    J = (1/sigma) diag(gamma) (I - 1 1^T / d - zhat zhat^T / d), zhat = (z - mean) / sigma.

    Args:
      z: (..., d) inputs. scale: gamma, (d,) or broadcastable; None means 1. eps: as in the norm.

    Returns:
      J of shape (..., d, d), J[..., i, j] = dy_i / dz_j. Cost O(d^2) per vector.
    """
    z = jnp.asarray(z)
    d = z.shape[-1]
    sigma = layernorm_sigma(z, eps)[..., None]
    zhat = (z - jnp.mean(z, axis=-1, keepdims=True)) / sigma
    P = jnp.eye(d, dtype=z.dtype) - 1.0 / d - _outer(zhat, zhat) / d
    return _scale(scale, z)[..., :, None] * P / sigma[..., None]


@jax.jit
def layernorm_jacobian_norm(z, scale=None, eps: float = 1e-5) -> ClosedFormNorm:
    """Closed-form ||dLN/dz||_2 per vector: max|gamma| lambda_max(P) / sigma.

    P = I - 1 1^T/d - zhat zhat^T/d has eigenvalue 0 on 1, 1 on the d - 2 directions orthogonal
    to 1 and zhat, and 1 - ||zhat||^2/d = eps / (var + eps) on zhat (not 0: eps > 0 shrinks zhat).
    So lambda_max(P) = 1 for d >= 3, eps / (var + eps) for d = 2, 0 for d = 1, and for gamma = 1
    the norm is 1/sigma (d >= 3). Exact for a constant gamma, an upper bound otherwise (see
    `ClosedFormNorm.exact`). Cost O(d) per vector.
    """
    z = jnp.asarray(z)
    d = z.shape[-1]
    var = jnp.var(z, axis=-1)
    top = jnp.ones_like(var) if d >= 3 else (eps / (var + eps) if d == 2 else jnp.zeros_like(var))
    value = jnp.max(jnp.abs(_scale(scale, z)), axis=-1) * top / jnp.sqrt(var + eps)
    return ClosedFormNorm(value, _is_constant(scale))


@jax.jit
def rmsnorm_jacobian(z, scale=None, eps: float = 1e-5) -> jax.Array:
    """Jacobian of y = gamma z / r, r = sqrt(mean(z^2) + eps): diag(gamma) (I - z z^T/(d r^2)) / r.

    Args and returns as in `layernorm_jacobian`: (..., d) -> (..., d, d).
    """
    z = jnp.asarray(z)
    d = z.shape[-1]
    r = rmsnorm_rms(z, eps)[..., None, None]
    P = jnp.eye(d, dtype=z.dtype) - _outer(z, z) / (d * r**2)
    return _scale(scale, z)[..., :, None] * P / r


@jax.jit
def rmsnorm_jacobian_norm(z, scale=None, eps: float = 1e-5) -> ClosedFormNorm:
    """Closed-form ||dRMSNorm/dz||_2 per vector: max|gamma| lambda_max(P) / r.

    P = I - z z^T/(d r^2) has eigenvalue 1 orthogonal to z (d - 1 times) and eps / (mean(z^2) + eps)
    on z, so lambda_max(P) = 1 for d >= 2. Exact for a constant gamma, an upper bound otherwise.
    """
    z = jnp.asarray(z)
    d = z.shape[-1]
    ms = jnp.mean(jnp.square(z), axis=-1)
    top = jnp.ones_like(ms) if d >= 2 else eps / (ms + eps)
    value = jnp.max(jnp.abs(_scale(scale, z)), axis=-1) * top / jnp.sqrt(ms + eps)
    return ClosedFormNorm(value, _is_constant(scale))


def _dyt_diag(z, alpha, scale):
    z = jnp.asarray(z)
    alpha = jnp.asarray(alpha, z.dtype)
    return _scale(scale, z) * alpha * (1 - jnp.tanh(alpha * z) ** 2)


@jax.jit
def dyt_jacobian(z, alpha, scale=None) -> jax.Array:
    """Jacobian of DyT y = gamma * tanh(alpha z) + beta: diag(gamma alpha (1 - tanh^2(alpha z))).

    Args: z (..., d); alpha scalar or (d,); scale gamma (d,) or None (1). Returns (..., d, d).
    """
    diag = _dyt_diag(z, alpha, scale)
    return diag[..., :, None] * jnp.eye(diag.shape[-1], dtype=diag.dtype)


@jax.jit
def dyt_jacobian_norm(z, alpha, scale=None) -> ClosedFormNorm:
    """||dDyT/dz||_2 = max_i |gamma_i alpha (1 - tanh^2(alpha z_i))| per vector; always exact."""
    return ClosedFormNorm(jnp.max(jnp.abs(_dyt_diag(z, alpha, scale)), axis=-1), jnp.asarray(True))


def norm_jacobian(kind: str, z, *, scale=None, eps: float = 1e-5, alpha=None) -> jax.Array:
    """Closed-form Jacobian of the norm `kind` ("layernorm", "rmsnorm", "dyt"); (..., d, d)."""
    if kind == "dyt":
        return dyt_jacobian(z, _require_alpha(alpha), scale)
    return _by_kind(kind, layernorm_jacobian, rmsnorm_jacobian)(z, scale, eps)


def norm_jacobian_norm(kind: str, z, *, scale=None, eps: float = 1e-5, alpha=None) -> ClosedFormNorm:
    """Closed-form ||J||_2 of the norm `kind` per vector; see the per-kind functions."""
    if kind == "dyt":
        return dyt_jacobian_norm(z, _require_alpha(alpha), scale)
    return _by_kind(kind, layernorm_jacobian_norm, rmsnorm_jacobian_norm)(z, scale, eps)


def _by_kind(kind, layernorm_fn, rmsnorm_fn):
    if kind not in NORM_KINDS:
        raise ValueError(f"norm kind must be one of {NORM_KINDS}, got {kind!r}.")
    return layernorm_fn if kind == "layernorm" else rmsnorm_fn


def _require_alpha(alpha):
    if alpha is None:
        raise ValueError("the dyt norm needs its alpha (y = gamma * tanh(alpha z) + beta).")
    return alpha
