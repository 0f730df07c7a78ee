"""Normalization layers over the last axis (LayerNorm, RMSNorm, ScaleNorm, DyT, identity) and make_norm(kind)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

NORM_KINDS = ("layernorm", "rmsnorm", "scalenorm", "dyt", "none")


class LayerNorm(nnx.Module):
    """gamma * (z - mean) / sqrt(var + eps) + beta, with the biased variance (as in the papers).

    `use_bias=False` drops beta (nanodo, PaLM: LayerNorm without bias).
    """

    def __init__(self, d: int, *, eps: float = 1e-5, use_bias: bool = True, param_dtype=jnp.float32):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((d,), param_dtype))
        self.bias = nnx.Param(jnp.zeros((d,), param_dtype)) if use_bias else None

    def __call__(self, z):
        centered = z - z.mean(-1, keepdims=True)
        sigma = jnp.sqrt((centered**2).mean(-1, keepdims=True) + self.eps)
        y = centered / sigma * self.scale[...].astype(z.dtype)
        return y if self.bias is None else y + self.bias[...].astype(z.dtype)


class RMSNorm(nnx.Module):
    """gamma * z / sqrt(mean(z^2) + eps)."""

    def __init__(self, d: int, *, eps: float = 1e-5, param_dtype=jnp.float32):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((d,), param_dtype))

    def __call__(self, z):
        rms = jnp.sqrt((z**2).mean(-1, keepdims=True) + self.eps)
        return z / rms * self.scale[...].astype(z.dtype)


class ScaleNorm(nnx.Module):
    """ScaleNorm (Nguyen & Salazar 2019): g * z / sqrt(||z||^2 + eps), one scalar g initialised to sqrt(d).

    At init it equals RMSNorm with gamma = 1 (up to where eps enters); the gain is one scalar, not per channel.
    """

    def __init__(self, d: int, *, eps: float = 1e-5, param_dtype=jnp.float32):
        self.eps = eps
        self.g = nnx.Param(jnp.full((), d**0.5, param_dtype))

    def __call__(self, z):
        norm = jnp.sqrt((z**2).sum(-1, keepdims=True) + self.eps)
        return z / norm * self.g[...].astype(z.dtype)


class DyT(nnx.Module):
    """Dynamic Tanh (Zhu et al. 2025): gamma * tanh(alpha * z) + beta, scalar alpha initialised to alpha0."""

    def __init__(self, d: int, *, alpha0: float = 0.5, use_bias: bool = True, param_dtype=jnp.float32):
        self.alpha = nnx.Param(jnp.full((), alpha0, param_dtype))
        self.scale = nnx.Param(jnp.ones((d,), param_dtype))
        self.bias = nnx.Param(jnp.zeros((d,), param_dtype)) if use_bias else None

    def __call__(self, z):
        alpha = self.alpha[...].astype(z.dtype)
        y = jnp.tanh(alpha * z) * self.scale[...].astype(z.dtype)
        return y if self.bias is None else y + self.bias[...].astype(z.dtype)


class Identity(nnx.Module):
    """norm="none": passes its input through."""

    def __call__(self, z):
        return z


def make_norm(
    kind: str,
    d: int,
    *,
    eps: float = 1e-5,
    dyt_alpha: float = 0.5,
    use_bias: bool = True,
    param_dtype: jnp.dtype = jnp.float32,
) -> nnx.Module:
    """The norm layer of `kind` (one of NORM_KINDS) over a last axis of size d.

    `use_bias=False` drops the additive beta of LayerNorm and DyT (the other kinds have none).
    """
    if kind == "layernorm":
        return LayerNorm(d, eps=eps, use_bias=use_bias, param_dtype=param_dtype)
    if kind == "rmsnorm":
        return RMSNorm(d, eps=eps, param_dtype=param_dtype)
    if kind == "scalenorm":
        return ScaleNorm(d, eps=eps, param_dtype=param_dtype)
    if kind == "dyt":
        return DyT(d, alpha0=dyt_alpha, use_bias=use_bias, param_dtype=param_dtype)
    if kind == "none":
        return Identity()
    raise ValueError(f"unknown norm kind {kind!r}: valid choices are {', '.join(NORM_KINDS)}")
