"""QK-Clip (Kimi K2's MuonClip): after an update, rescale W_q and W_k of every head whose max logit exceeds tau."""

import jax
import jax.numpy as jnp
import numpy as np

from normjax import registry
from normjax.probes.model_probes import run_probe, token_mask
from normjax.probes.sinks import head_logit_max

ROLES = ("query", "key")


def max_logits_per_head(model, *inputs, **masks) -> dict:
    """{stack: {attention sublayer: (L, H)}}: S_max^h, per layer and head the largest attention logit of the batch
    (scaled by 1/sqrt(d_h), after any soft-cap; over real queries and the keys the mask allows), the metric that
    triggers QK-Clip (Kimi K2 report, arXiv 2507.20534, sec. 2.1; per head, not per layer). numpy arrays."""
    probes = run_probe(model, inputs, masks)
    out = {}
    for stack, sp in probes.items():
        mask = jnp.asarray(token_mask(model, stack, inputs, masks))
        out[stack] = {
            sub: np.stack([head_logit_max(layer[sub]["logit_max"], mask) for layer in sp.attn_heads])
            for sub in sp.attn_heads[0]
        }
    return out


def check_config(cfg) -> None:
    """ValueError naming the field where rescaling W_q, W_k does not scale the logits by gamma (the rule's premise:
    q and k linear in their weights, logits bilinear in q and k)."""
    layers = {p for stack in cfg.stacks for p in cfg.layer_placements(stack)}
    normed = sorted(
        p
        for p in layers
        if any({"q", "k"} & set(w.qkv_norm) or w.hypersphere for w in registry.get(p).wirings.values())
    )
    reasons = {
        "qk_norm": (cfg.qk_norm, "a norm of q and k undoes their rescaling"),
        "placement": (bool(normed), f"placement {normed[:1]} normalises q and k, undoing their rescaling"),
        "qkv_clip": (cfg.qkv_clip is not None, "clamping q and k is not linear in W_q, W_k"),
        "attn_logit_softcap": (cfg.attn_logit_softcap is not None, "a soft-cap is not linear in the logits"),
    }
    for field, (bad, why) in reasons.items():
        if bad:
            raise ValueError(f"ModelConfig.{field}={getattr(cfg, field)!r} is invalid with QK-Clip: {why}")


def _names(path) -> list:
    return [getattr(k, "key", getattr(k, "name", None)) for k in path]


def qk_clip(params, max_logits: dict, tau: float, alpha: float = 0.5):
    """Params with every head h of every attention whose S_max^h exceeds tau rescaled: gamma_h = tau / S_max^h,
    W_q^h <- gamma_h^alpha W_q^h, W_k^h <- gamma_h^(1 - alpha) W_k^h (alpha = 1/2: both by sqrt(tau / S_max^h)).

    Su Jianlin's description of the final, per-head QK-Clip of Kimi K2 (kexue.fm/archives/11126, "QK-Clip"):
    after the optimizer step, if S_max^(l,h) > tau, the head's W_qc, W_kc are multiplied by sqrt(tau / S_max^(l,h))
    (MLA's rotary W_qr by tau / S_max^(l,h), the shared W_kr left alone: no MLA here); the Kimi K2 report
    (arXiv 2507.20534, sec. 2.1, Algorithm 1 MuonClip) states it with a balance alpha = 1/2. The heads' biases
    b_q, b_k are scaled with their kernels (K2 has none), so q, k and the head's logits scale by exactly
    gamma_h^alpha, gamma_h^(1 - alpha) and gamma_h: S_max^h becomes tau on that batch. Heads with S_max^h <= tau
    (or -inf / NaN) keep bit-identical weights. The authors released no code for it.

    Args:
      params: an nnx.State shaped like a model's params (TrainState.params), scanned or not.
      max_logits: {stack: {sublayer: (L, H)}}, `max_logits_per_head` of the batch of this update.
      tau: the threshold (Kimi K2: 100).
      alpha: the share of the rescaling on W_q.

    Returns:
      The rescaled params (same structure). Meaningful only where `check_config` passes.
    """

    def one(path, a):
        names = _names(path)
        if "branch" not in names:
            return a
        i = names.index("branch")
        if names[i + 1] not in ROLES or names[i + 2] not in ("kernel", "bias"):
            return a
        stack, layer_or_sub = names[1], names[names.index("layers") + 1]
        sub = names[i - 1]
        m_LH = jnp.asarray(max_logits[stack][sub], jnp.float32)
        clipped_LH = m_LH > tau
        gamma_LH = jnp.where(clipped_LH, tau / jnp.where(clipped_LH, m_LH, 1.0), 1.0)
        power = alpha if names[i + 1] == "query" else 1.0 - alpha
        per_channel = a.shape[-1] // m_LH.shape[-1]
        factor_LD = jnp.repeat(gamma_LH**power, per_channel, axis=-1).astype(a.dtype)
        clipped_LD = jnp.repeat(clipped_LH, per_channel, axis=-1)
        if isinstance(layer_or_sub, int):  # one block's weights: (D_in, D) or (D,)
            factor, clipped = factor_LD[layer_or_sub], clipped_LD[layer_or_sub]
        else:  # scanned: a leading layer axis, (L, D_in, D) or (L, D)
            factor, clipped = factor_LD.reshape(a.shape[:1] + (1,) * (a.ndim - 2) + a.shape[-1:]), clipped_LD
            clipped = clipped.reshape(factor.shape)
        return jnp.where(clipped, a * factor, a)

    return jax.tree_util.tree_map_with_path(one, params)
