"""Normalization layers over the last axis (LayerNorm, RMSNorm, ScaleNorm, DyT, Derf, identity) and make_norm(kind)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

NORM_KINDS = ("layernorm", "rmsnorm", "scalenorm", "dyt", "derf", "none")
# The per-channel gain gamma of layernorm, rmsnorm, dyt and derf: "one" a learned gamma initialised to 1 (`scale`),
# "zero_centred" gamma = 1 + g with g initialised to 0 (`scale_offset`, Gemma), "none" no gain (modded-nanogpt).
GAINS = ("one", "zero_centred", "none")


def _init_gain(norm, d: int, gain: str, param_dtype):
    if gain not in GAINS:
        raise ValueError(f"unknown norm gain {gain!r}: valid choices are {', '.join(GAINS)}")
    norm.scale = nnx.Param(jnp.ones((d,), param_dtype)) if gain == "one" else None
    norm.scale_offset = nnx.Param(jnp.zeros((d,), param_dtype)) if gain == "zero_centred" else None


def _apply_gain(norm, y):
    """y * gamma; a zero-centred gain multiplies by 1 + g in at least float32 (bfloat16 1 + g would round g away)."""
    if norm.scale is not None:
        return y * norm.scale[...].astype(y.dtype)
    if norm.scale_offset is not None:
        g = norm.scale_offset[...]
        wide = jnp.promote_types(jnp.promote_types(g.dtype, y.dtype), jnp.float32)
        return (y.astype(wide) * (1 + g.astype(wide))).astype(y.dtype)
    return y


class LayerNorm(nnx.Module):
    """gamma * (z - mean) / sqrt(var + eps) + beta, with the biased variance (as in the papers).

    `use_bias=False` drops beta (nanodo, PaLM: LayerNorm without bias); `gain` as GAINS.
    """

    def __init__(self, d: int, *, eps: float = 1e-5, use_bias: bool = True, gain: str = "one", param_dtype=jnp.float32):
        self.eps = eps
        _init_gain(self, d, gain, param_dtype)
        self.bias = nnx.Param(jnp.zeros((d,), param_dtype)) if use_bias else None

    def __call__(self, z):
        centered = z - z.mean(-1, keepdims=True)
        sigma = jnp.sqrt((centered**2).mean(-1, keepdims=True) + self.eps)
        y = _apply_gain(self, centered / sigma)
        return y if self.bias is None else y + self.bias[...].astype(z.dtype)


class RMSNorm(nnx.Module):
    """gamma * z / sqrt(mean(z^2) + eps); `gain` as GAINS."""

    def __init__(self, d: int, *, eps: float = 1e-5, gain: str = "one", param_dtype=jnp.float32):
        self.eps = eps
        _init_gain(self, d, gain, param_dtype)

    def __call__(self, z):
        rms = jnp.sqrt((z**2).mean(-1, keepdims=True) + self.eps)
        return _apply_gain(self, z / rms)


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

    def __init__(
        self, d: int, *, alpha0: float = 0.5, use_bias: bool = True, gain: str = "one", param_dtype=jnp.float32
    ):
        self.alpha = nnx.Param(jnp.full((), alpha0, param_dtype))
        _init_gain(self, d, gain, param_dtype)
        self.bias = nnx.Param(jnp.zeros((d,), param_dtype)) if use_bias else None

    def __call__(self, z):
        y = _apply_gain(self, jnp.tanh(self.alpha[...].astype(z.dtype) * z))
        return y if self.bias is None else y + self.bias[...].astype(z.dtype)


class Derf(nnx.Module):
    """Dynamic erf (Chen et al. 2025, arXiv 2512.10938): gamma * erf(alpha * z + s) + beta.

    Scalars alpha (init alpha0) and s (init 0), per-channel gamma and beta, as zlab-princeton/Derf
    `DNA model/dynamic_erf.py` lines 6-18 (`Dynamic_erf`, alpha_init_value 0.5, shift_init_value 0).
    """

    def __init__(
        self, d: int, *, alpha0: float = 0.5, use_bias: bool = True, gain: str = "one", param_dtype=jnp.float32
    ):
        self.alpha = nnx.Param(jnp.full((), alpha0, param_dtype))
        self.shift = nnx.Param(jnp.zeros((), param_dtype))
        _init_gain(self, d, gain, param_dtype)
        self.bias = nnx.Param(jnp.zeros((d,), param_dtype)) if use_bias else None

    def __call__(self, z):
        y = _apply_gain(self, jax.lax.erf(self.alpha[...].astype(z.dtype) * z + self.shift[...].astype(z.dtype)))
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
    gain: str = "one",
    param_dtype: jnp.dtype = jnp.float32,
) -> nnx.Module:
    """The norm layer of `kind` (one of NORM_KINDS) over a last axis of size d.

    `use_bias=False` drops the additive beta of LayerNorm, DyT and Derf (the other kinds have none). `gain` (GAINS)
    sets the per-channel gamma of layernorm, rmsnorm, dyt and derf; scalenorm's one scalar g takes only "one".
    `dyt_alpha` is DyT's and Derf's alpha_0.
    """
    if kind == "scalenorm" and gain != "one":
        raise ValueError(
            f"norm gain {gain!r}: scalenorm has one scalar g = sqrt(d), not a per-channel gamma; use 'one'"
        )
    if kind == "layernorm":
        return LayerNorm(d, eps=eps, use_bias=use_bias, gain=gain, param_dtype=param_dtype)
    if kind == "rmsnorm":
        return RMSNorm(d, eps=eps, gain=gain, param_dtype=param_dtype)
    if kind == "scalenorm":
        return ScaleNorm(d, eps=eps, param_dtype=param_dtype)
    if kind in ("dyt", "derf"):
        cls = DyT if kind == "dyt" else Derf
        return cls(d, alpha0=dyt_alpha, use_bias=use_bias, gain=gain, param_dtype=param_dtype)
    if kind == "none":
        return Identity()
    raise ValueError(f"unknown norm kind {kind!r}: valid choices are {', '.join(NORM_KINDS)}")
