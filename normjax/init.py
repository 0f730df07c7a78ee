"""Placement-specific init constants: DeepNorm alpha/beta, Admin omega, T-Fixup, GPT-2, LayerScale."""

from __future__ import annotations

import dataclasses
import math

from flax import nnx

from normjax.config import ModelConfig

# Weights of one block that the init rules scale (names as in layers.py).
BRANCH_VALUE_WEIGHTS = ("value", "out", "fc1", "fc2")  # DeepNorm beta and T-Fixup scale these
BRANCH_OUTPUT_WEIGHTS = ("out", "fc2")  # GPT-2's 1/sqrt(N) scales the projections into the stream


def deepnorm_constants(arch: str, stack: str, num_encoder_layers: int, num_decoder_layers: int) -> tuple[float, float]:
    """(alpha, beta) of DeepNorm (Wang et al. 2022, Table 1) for one stack.

    Encoder-only: alpha = (2N)^(1/4), beta = (8N)^(-1/4). Decoder-only: alpha = (2M)^(1/4),
    beta = (8M)^(-1/4). Encoder-decoder: encoder alpha = 0.81 (N^4 M)^(1/16), beta = 0.87 (N^4 M)^(-1/16);
    decoder alpha = (3M)^(1/4), beta = (12M)^(-1/4).
    """
    N, M = num_encoder_layers, num_decoder_layers
    if arch == "encoder":
        return (2 * N) ** 0.25, (8 * N) ** -0.25
    if arch == "decoder":
        return (2 * M) ** 0.25, (8 * M) ** -0.25
    if stack == "encoder":
        return 0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)
    return (3 * M) ** 0.25, (12 * M) ** -0.25


def admin_omega(num_sublayers: int) -> float:
    """Admin's closed-form residual weight omega = sqrt((N+1)/ln(N+1) - 1) (Liu et al. 2020).

    normjax takes N as the number of residual sublayers of the stack (2 per encoder or decoder-only block,
    3 per seq2seq decoder block).
    """
    n1 = num_sublayers + 1
    return math.sqrt(n1 / math.log(n1) - 1)


def tfixup_scale(arch: str, stack: str, num_encoder_layers: int, num_decoder_layers: int) -> float:
    """T-Fixup's factor on v, w, FFN weights and input embeddings (Huang et al. 2020).

    Encoder: 0.67 N^(-1/4). Seq2seq decoder: (9M)^(-1/4). A decoder-only LM has the encoder's two-sublayer
    blocks, so it takes the encoder rule with N = its depth.
    """
    if arch == "encoder_decoder" and stack == "decoder":
        return (9 * num_decoder_layers) ** -0.25
    depth = num_encoder_layers if arch != "decoder" else num_decoder_layers
    return 0.67 * depth**-0.25


def gpt2_scale(num_sublayers: int) -> float:
    """GPT-2's residual-projection scale 1/sqrt(N), N = residual sublayers in the stack (2L for an LM)."""
    return 1 / math.sqrt(num_sublayers)


def cait_layerscale_init(depth: int) -> float:
    """CaiT's LayerScale init by depth: 0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond."""
    if depth <= 18:
        return 0.1
    return 1e-5 if depth <= 24 else 1e-6


@dataclasses.dataclass(frozen=True)
class BlockInit:
    """What the init rules give one block: weight gains, residual constants, gate init."""

    gains: dict  # weight name -> multiplier on the base init's std
    deepnorm_alpha: float = 1.0
    admin_omega: float = 1.0
    gate_init: float = 0.0  # rezero / skipinit alpha, layerscale lambda


def _depths(cfg: ModelConfig) -> tuple[int, int]:
    """(N, M): encoder and decoder depths as the papers count them for this topology."""
    if cfg.arch == "encoder":
        return cfg.num_layers, 0
    if cfg.arch == "decoder":
        return 0, cfg.num_layers
    return cfg.num_layers, cfg.decoder_layers


def block_init(cfg: ModelConfig, stack: str, placement: str) -> BlockInit:
    """The init of one block of `stack` wired by `placement` under the rules of `cfg`."""
    N, M = _depths(cfg)
    num_sublayers = cfg.stack_depth(stack) * cfg.sublayers_per_block(stack)
    gains = dict.fromkeys(("query", "key") + BRANCH_VALUE_WEIGHTS, 1.0)
    if cfg.theory:
        gains["query"] = gains["key"] = 0.0
    alpha, omega, gate = 1.0, 1.0, 0.0
    if placement == "deepnorm":
        alpha, beta = deepnorm_constants(cfg.arch, stack, N, M)
        alpha = cfg.deepnorm_alpha if cfg.deepnorm_alpha is not None else alpha
        beta = cfg.deepnorm_beta if cfg.deepnorm_beta is not None else beta
        for name in BRANCH_VALUE_WEIGHTS:
            gains[name] *= beta
    if placement == "tfixup":
        for name in BRANCH_VALUE_WEIGHTS:
            gains[name] *= tfixup_scale(cfg.arch, stack, N, M)
    if placement == "admin":
        omega = cfg.admin_omega if cfg.admin_omega is not None else admin_omega(num_sublayers)
    if placement == "layerscale":
        gate = cfg.layerscale_init if cfg.layerscale_init is not None else cait_layerscale_init(cfg.stack_depth(stack))
    if cfg.branch_scaling == "gpt2":
        for name in BRANCH_OUTPUT_WEIGHTS:
            gains[name] *= gpt2_scale(num_sublayers)
    return BlockInit(gains=gains, deepnorm_alpha=alpha, admin_omega=omega, gate_init=gate)


def embedding_scale(cfg: ModelConfig, stack: str) -> float:
    """Multiplier on the embedding table's N(0, 1/d) init: T-Fixup's factor, 1 otherwise."""
    if "tfixup" in cfg.layer_placements(stack):
        N, M = _depths(cfg)
        return tfixup_scale(cfg.arch, stack, N, M)
    return 1.0


def kernel_init(cfg: ModelConfig, gain: float) -> nnx.Initializer:
    """Base init times `gain`: Xavier normal, or N(0, 1/fan_in) in the theory setting."""
    if gain == 0.0:
        return nnx.initializers.zeros
    mode = "fan_in" if cfg.theory else "fan_avg"
    return nnx.initializers.variance_scaling(gain**2, mode, "normal")
