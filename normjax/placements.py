"""Wirings: how a placement puts the norm N around one residual branch F (the registry names them).

Every wiring function has the signature `wire(s, x, F, rec, gate)`: `s` is the Sublayer (its norms `s.norm`,
`s.norm2` and constants), `x` the residual stream, `F` the branch, `rec(role, z)` records a norm input and
returns it, `gate` the learnable scalar or per-channel multiplier where the placement has one. A wiring with
`Wiring.block_skip` (B2T) also takes `x_in`, the block's input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from normjax.layers import unit


def post(s, x, F, rec, gate):  # Vaswani 2017: x = N(x + F(x))
    return s.norm(rec("post", x + F(x)))


def pre(s, x, F, rec, gate):  # x = x + F(N(x))
    return x + F(s.norm(rec("pre", x)))


def sandwich(s, x, F, rec, gate):  # Sandwich-LN / Peri-LN: x = x + N2(F(N1(x)))
    return x + s.norm2(rec("branch", F(s.norm(rec("pre", x)))))


def branch_post(s, x, F, rec, gate):  # praxis "post": x = x + N(F(x)); not Post-LN
    return x + s.norm(rec("branch", F(x)))


def lns(s, x, F, rec, gate):  # LayerNorm Scaling (Sun et al. 2025): x = x + F(N(x) / sqrt(l)), l = 1, 2, ...
    return x + F(s.norm(rec("pre", x)) * s.lns_scale[...].astype(x.dtype))


def keel(s, x, F, rec, gate):  # x-transformers pre_and_post_norm (KEEL): x = N2(x + F(N1(x)))
    return s.norm2(rec("post", x + F(s.norm(rec("pre", x)))))


def b2t(s, x, F, rec, gate, x_in):  # Takase et al. 2022, the block's last sublayer: x = N(x + F(x) + x_in)
    return s.norm(rec("post", x + F(x) + x_in))


def deepnorm(s, x, F, rec, gate):  # Wang 2022: x = N(alpha * x + F(x))
    return s.norm(rec("post", s.alpha * x + F(x)))


def admin(s, x, F, rec, gate):  # Liu 2020: x = N(omega * x + F(x)), omega per channel
    return s.norm(rec("post", s.omega[...].astype(x.dtype) * x + F(x)))


def gpas(x, alpha):
    """GPAS (Chen et al. 2025, arXiv 2506.22049): x - SiLU(alpha) sg(x), sg the stop-gradient.

    The value is (1 - SiLU(alpha)) x; backpropagation passes d/dx as the identity (sg's operand is a constant to
    autodiff) and gives alpha the gradient -SiLU'(alpha) x. dandingsky/GPAS (commit 3198068)
    `peft_pretraining/modeling_llama.py` lines 261-268 (`GPASBlock`: `hidden_states - act_fn(gate) *
    hidden_states.detach()`, gate a scalar initialised to 0.0, act_fn SiLU).
    """
    return x - jax.nn.silu(alpha) * jax.lax.stop_gradient(x)


def pre_gpas(s, x, F, rec, gate):  # Pre + GPAS: x = GPAS(x + F(N(x))); GPAS repo modeling_llama.py lines 491-510
    return gpas(pre(s, x, F, rec, gate), gate)


def sandwich_gpas(s, x, F, rec, gate):  # Sandwich + GPAS: x = GPAS(x + N2(F(N1(x)))); lines 512-533
    return gpas(sandwich(s, x, F, rec, gate), gate)


def deepnorm_gpas(s, x, F, rec, gate):  # DeepNorm + GPAS: x = N(alpha GPAS(x) + F(x)), F sees x; lines 535-553
    return s.norm(rec("post", s.alpha * gpas(x, gate) + F(x)))


def gated_residual(s, x, F, rec, gate):  # ReZero / SkipInit: x = x + alpha F(x)
    return x + gate * F(x)


def layerscale(s, x, F, rec, gate):  # CaiT: x = x + lambda * F(N(x)), lambda per channel
    return x + gate * F(s.norm(rec("pre", x)))


def plain_residual(s, x, F, rec, gate):  # T-Fixup (no norm) and HybridNorm's attention: x = x + F(x)
    return x + F(x)


def normed_residual(s, x, F, rec, gate):  # HybridNorm's FFN: u = N(x); x = u + F(u)
    u = s.norm(rec("pre", x))
    return u + F(u)


@struct.dataclass
class DualStream:
    """ResiDual's two residual streams, a pytree: `x` the Post-LN stream, `d` the dual (Pre-LN-like) stream.

    Not an array on purpose: `jnp` functions refuse it instead of stacking the two streams into one array.
    """

    x: jax.Array
    d: jax.Array


def resi_dual(s, xd, F, rec, gate):
    """ResiDual (Xie et al. 2023): x = N(x + F(x)) and d = d + F(x) (the same, dropped-out branch output).

    microsoft/ResiDual `resi_dual/resi_dual_layers.py` lines 25-39 and 42-51 (encoder: `res = res + x`, then
    `x = LN(x + xr)`), lines 116-177 (decoder, cross attention included).
    """
    if not isinstance(xd, DualStream):
        raise TypeError(
            f"a ResiDual sublayer maps a normjax.DualStream(x, d), got {type(xd).__name__}: it carries two "
            "residual streams and is never run as if it were Post-LN"
        )
    f = F(xd.x)
    return DualStream(s.norm(rec("post", xd.x + f)), xd.d + f)


def ngpt(s, x, F, rec, gate):
    """nGPT (Loshchilov et al. 2024): x = unit(h + |alpha| (unit(F(x)) - h)), h = unit(x), alpha per channel.

    NVIDIA/ngpt `model.py` lines 144-153 (attention) and 168-177 (MLP); `gate` is the effective eigen
    learning rate alpha = alpha_param * alpha_init / alpha_scale, its absolute value taken here as there.
    Nothing is recorded as a norm site: `unit` is no norm module, and the norm-site tools (closed-form LN
    Jacobians of `cfg.norm`) would otherwise apply the wrong formula to it.
    """
    h = unit(x)
    return unit(h + jnp.abs(gate * s.eigen_factor) * (unit(F(x)) - h))


@dataclasses.dataclass(frozen=True)
class Wiring:
    """How one sublayer is wired: the function, its norms, its gate and the norms inside the branch.

    Attributes:
      fn: the wiring function.
      norms: norms around the branch (0 to 3: `s.norm`, `s.norm2`, `s.norm3`; 3 for SiameseNorm).
      gate: "none", "scalar" or "channel".
      qkv_norm: attention roles ("q", "k", "v") normalised per head inside the branch.
      inner_norm: a norm inside the branch: before the attention's output projection (self attention only,
        as torchscale's Sub-LN) and after the FFN activation (Sub-LN and NormFormer).
      head_scale: NormFormer's learned per-head scale on the attention heads before the output projection.
      omega: a learned per-channel weight on the residual (Admin's omega).
      hypersphere: nGPT: the gate is the per-channel eigen learning rate, the branches are nGPT's attention
        and MLP (`layers.NGPTMLP`), the block has no norm module and no biases.
      depth_scaled: LNS and SiameseNorm: the sublayer holds 1/sqrt(l) (`s.lns_scale`, l = block index + 1), a
        fixed variable.
      block_skip: B2T: the wiring also reads the block's input (`fn(s, x, F, rec, gate, x_in)`).
      hyper: hyper-connections: the kind (`normjax.hyper.HYPER_KINDS`) of the sublayer's mixing matrices
        (`s.hyper`, a `normjax.hyper.HyperConnection`); the wiring maps `normjax.HyperStreams`.
    """

    fn: Callable
    norms: int = 1
    gate: str = "none"
    qkv_norm: tuple[str, ...] = ()
    inner_norm: bool = False
    head_scale: bool = False
    omega: bool = False
    hypersphere: bool = False
    depth_scaled: bool = False
    block_skip: bool = False
    hyper: str = ""
