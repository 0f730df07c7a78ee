"""Init rules: the base init and each placement's constants (DeepNorm, Admin, T-Fixup, Sub-LN, B2T, GPT-2, ...)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from flax import nnx

if TYPE_CHECKING:
    from normjax.config import ModelConfig

# Weights of one block that the init rules scale, as "<sublayer>.<weight>" (names as in layers.py).
ATTENTION_WEIGHTS = ("query", "key", "value", "out")
FFN_WEIGHTS = ("fc1", "fc2")
BRANCH_VALUE_WEIGHTS = ("value", "out", "fc1", "fc2")  # DeepNorm beta, T-Fixup and Sub-LN scale these
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
    """T-Fixup's factor on W^V, W^O and the FFN weights (Huang et al. 2020), as in the authors' code.

    layer6ai-labs/T-Fixup `fairseq/modules/transformer_layer.py`: encoder layers 0.67 N^(-1/4) (lines 36-44),
    decoder layers (9M)^(-1/4) on self and cross attention (lines 162-170). A decoder-only LM is a stack of
    decoder layers, so it takes the decoder rule with M = its depth; an encoder-only model the encoder rule.
    (The code's extra sqrt(2) on v_proj undoes fairseq's 1/sqrt(2) Xavier gain on q/k/v; normjax's base
    init has gain 1 on every projection, so no extra factor here.)
    """
    if stack == "encoder":
        return 0.67 * num_encoder_layers**-0.25
    return (9 * num_decoder_layers) ** -0.25


def tfixup_embedding_scale(arch: str, stack: str, num_encoder_layers: int, num_decoder_layers: int) -> float:
    """T-Fixup's factor on the input embeddings: (9 L)^(-1/4), L the depth of the stack they feed.

    layer6ai-labs/T-Fixup `fairseq/models/transformer.py` lines 378-381 (encoder, (9N)^(-1/4)) and 604-607
    (decoder, (9M)^(-1/4)), applied to the N(0, d^-1/2) table before the sqrt(d) embedding scale.
    """
    return (9 * (num_encoder_layers if stack == "encoder" else num_decoder_layers)) ** -0.25


def subln_gain(arch: str, stack: str, num_encoder_layers: int, num_decoder_layers: int) -> float:
    """Sub-LN (Magneto, Wang et al. 2022) gain on W^V, W^O and the FFN weights, as in torchscale.

    microsoft/torchscale `torchscale/architecture/encoder.py` lines 254-270: encoder-only sqrt(ln 2N),
    encoder of an encoder-decoder sqrt(ln(3M) ln(2N) / 3); `decoder.py` lines 300-314: decoder-only
    sqrt(ln 2M), decoder of an encoder-decoder sqrt(ln 3M) (cross attention left unscaled).
    """
    N, M = num_encoder_layers, num_decoder_layers
    if arch == "encoder_decoder":
        return math.sqrt(math.log(3 * M) * math.log(2 * N) / 3) if stack == "encoder" else math.sqrt(math.log(3 * M))
    return math.sqrt(math.log(2 * (N if arch == "encoder" else M)))


def gpt2_scale(num_sublayers: int) -> float:
    """GPT-2's residual-projection scale 1/sqrt(N), N = residual sublayers in the stack (2L for an LM)."""
    return 1 / math.sqrt(num_sublayers)


def cait_layerscale_init(depth: int) -> float:
    """CaiT's LayerScale init by depth: 0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond."""
    if depth <= 18:
        return 0.1
    return 1e-5 if depth <= 24 else 1e-6


@dataclasses.dataclass(frozen=True)
class InitRule:
    """What a placement's init rule sets for one block (everything else keeps the base init)."""

    gains: dict = dataclasses.field(default_factory=dict)  # "<sublayer>.<weight>" -> multiplier
    deepnorm_alpha: float = 1.0
    admin_omega: float = 1.0
    gate_init: float = 0.0  # rezero / skipinit alpha, layerscale lambda
    embedding_scale: float = 1.0  # multiplier on the embedding table feeding the stack


@dataclasses.dataclass(frozen=True)
class BlockInit:
    """What the init rules give one block: weight gains, residual constants, gate init."""

    gains: dict  # "<sublayer>.<weight>" -> multiplier on the base init's std
    deepnorm_alpha: float = 1.0
    admin_omega: float = 1.0
    gate_init: float = 0.0

    def of(self, sublayer: str) -> dict:
        """{weight: gain} of one sublayer ("attn", "cross" or "ffn")."""
        return {k.split(".")[1]: v for k, v in self.gains.items() if k.startswith(f"{sublayer}.")}


def depths(cfg: ModelConfig) -> tuple[int, int]:
    """(N, M): encoder and decoder depths as the papers count them for this topology."""
    if cfg.arch == "encoder":
        return cfg.num_layers, 0
    if cfg.arch == "decoder":
        return 0, cfg.num_layers
    return cfg.num_layers, cfg.decoder_layers


def _branch_gains(factor: float, *, cross: bool = True) -> dict:
    subs = ("attn", "cross", "ffn") if cross else ("attn", "ffn")
    return {f"{s}.{w}": factor for s in subs for w in BRANCH_VALUE_WEIGHTS if (w in FFN_WEIGHTS) == (s == "ffn")}


def deepnorm_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """DeepNorm: alpha on the residual, beta on W^V, W^O and the FFN weights (config overrides win)."""
    alpha, beta = deepnorm_constants(cfg.arch, stack, *depths(cfg))
    alpha = cfg.deepnorm_alpha if cfg.deepnorm_alpha is not None else alpha
    beta = cfg.deepnorm_beta if cfg.deepnorm_beta is not None else beta
    return InitRule(gains=_branch_gains(beta), deepnorm_alpha=alpha)


def admin_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """Admin: omega per channel, closed form over the stack's residual sublayers unless set in the config."""
    n = cfg.stack_depth(stack) * cfg.sublayers_per_block(stack)
    return InitRule(admin_omega=cfg.admin_omega if cfg.admin_omega is not None else admin_omega(n))


def tfixup_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """T-Fixup: its factor on W^V, W^O, FFN weights (cross attention included) and the input embeddings."""
    N, M = depths(cfg)
    return InitRule(
        gains=_branch_gains(tfixup_scale(cfg.arch, stack, N, M)),
        embedding_scale=tfixup_embedding_scale(cfg.arch, stack, N, M),
    )


def subln_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """Sub-LN: torchscale's gain on W^V, W^O and FFN weights; cross attention keeps the base init."""
    return InitRule(gains=_branch_gains(subln_gain(cfg.arch, stack, *depths(cfg)), cross=False))


def b2t_scale(depth: int) -> float:
    """B2T's factor L^(-1/2) on every weight of a block, L the depth of its stack (Takase et al. 2022).

    takase/b2t_connection `fairseq/modules/transformer_layer.py` lines 401-405 (`rescaling_init`: every parameter
    whose name has "weight" and no "layer_norm" times layer_num ** -0.5), called with encoder_layers for encoder
    layers (line 57) and decoder_layers for decoder layers (line 217).
    """
    return depth**-0.5


def b2t_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """B2T: W^Q, W^K, W^V, W^O (self and cross attention) and both FFN weights times L^(-1/2)."""
    factor = b2t_scale(cfg.stack_depth(stack))
    gains = {f"{s}.{w}": factor for s in ("attn", "cross") for w in ATTENTION_WEIGHTS}
    return InitRule(gains=gains | {f"ffn.{w}": factor for w in FFN_WEIGHTS})


def layerscale_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """LayerScale: lambda from the config or CaiT's rule by depth."""
    init = cfg.layerscale_init if cfg.layerscale_init is not None else cait_layerscale_init(cfg.stack_depth(stack))
    return InitRule(gate_init=init)


# nGPT (Loshchilov et al. 2024), NVIDIA/ngpt model.py lines 86-100 (alpha, s_qk, s_uv) and 239-241 (s_z),
# train.py line 128 (base_scale = 1/sqrt(n_embd)): each scaling is stored as `scale` and used as
# param * value / scale, so it starts at `value`.
NGPT_ALPHA_INIT = 0.05  # attn_alpha_init_value, mlp_alpha_init_value
NGPT_SQK_INIT = NGPT_SZ_INIT = NGPT_SUV_INIT = 1.0


def ngpt_scale(d_model: int) -> float:
    """nGPT's base_scale 1/sqrt(d_model): the stored init of alpha, s_qk and s_z (NVIDIA/ngpt train.py line 128)."""
    return d_model**-0.5


def ngpt_rule(cfg: ModelConfig, stack: str) -> InitRule:
    """nGPT: the eigen learning rates alpha are stored as base_scale (used as alpha * 0.05 / base_scale).

    Every weight matrix starts Gaussian and is normalised along its embedding dimension when the model is built
    (`hypersphere_normalize`, as NVIDIA/ngpt train.py lines 394-411 call normalize_matrices before training).
    """
    return InitRule(gate_init=ngpt_scale(cfg.d_model))


def hypersphere_normalize(params):
    """nGPT's normalize_matrices (NVIDIA/ngpt train.py lines 394-408) on a params pytree.

    Embedding tables (V, d) and input-side kernels (d, n: W^Q, W^K, W^V, the MLP's fc1, an untied head) get unit
    vectors along d; output-side kernels (n, d: W^O as `out`, `fc2`) too, along their last axis. A leading
    layer axis (scanned stacks) is kept. Everything else (alpha, s_qk, s_uv, s_z, positions) is left as it is.
    """

    def one(path, a):
        names = [getattr(k, "key", getattr(k, "name", None)) for k in path]
        if "embedding" in names:
            axis = -1
        elif "kernel" in names:
            axis = -1 if names[names.index("kernel") - 1] in BRANCH_OUTPUT_WEIGHTS else -2
        else:
            return a
        return a / jnp.linalg.norm(a, axis=axis, keepdims=True)

    return jax.tree_util.tree_map_with_path(one, params)


def base_gains(cfg: ModelConfig) -> dict:
    """Gain 1 on every weight (0 on W^Q, W^K in the theory setting)."""
    gains = {f"{s}.{w}": 1.0 for s in ("attn", "cross") for w in ATTENTION_WEIGHTS}
    gains |= {f"ffn.{w}": 1.0 for w in FFN_WEIGHTS}
    if cfg.theory:
        for s in ("attn", "cross"):
            gains[f"{s}.query"] = gains[f"{s}.key"] = 0.0
    return gains


def block_init(cfg: ModelConfig, stack: str, rule: InitRule) -> BlockInit:
    """The init of one block of `stack` under its placement's rule and the config's branch scaling."""
    gains = base_gains(cfg)
    for name, factor in rule.gains.items():
        gains[name] *= factor
    if cfg.branch_scaling == "gpt2":
        scale = gpt2_scale(cfg.stack_depth(stack) * cfg.sublayers_per_block(stack))
        for name in gains:
            if name.split(".")[1] in BRANCH_OUTPUT_WEIGHTS:
                gains[name] *= scale
    return BlockInit(
        gains=gains, deepnorm_alpha=rule.deepnorm_alpha, admin_omega=rule.admin_omega, gate_init=rule.gate_init
    )


def kernel_init(cfg: ModelConfig, gain: float) -> nnx.Initializer:
    """Base init times `gain`: Xavier normal, or N(0, 1/fan_in) in the theory setting."""
    if gain == 0.0:
        return nnx.initializers.zeros
    mode = "fan_in" if cfg.theory else "fan_avg"
    return nnx.initializers.variance_scaling(gain**2, mode, "normal")
