"""Attention-sink and outlier probes: first-token attention mass and max logit per head, stream kurtosis and peaks."""

import jax.numpy as jnp
import numpy as np

from normjax.probes.model_probes import run_probe, token_mask

# Gu et al. 2024 (arXiv 2410.10781, "When Attention Sink Emerges"): a head is a sink head when its mean attention
# on the first token exceeds epsilon = 0.3.
SINK_THRESHOLD = 0.3


def first_token_mass(first_key_mass_BHT, mask_BT):
    """(H,): per head, the mean over real queries of the softmax weight on key 0 (Gu et al.'s alpha_1^{l,h}).

    `first_key_mass_BHT` is `StackProbes.attn_heads[l][sublayer]["first_key_mass"]`; `mask_BT` marks the real
    queries. In a causal stack query 0 sees only key 0, so a uniform head has mass H_T / T, not 1 / T.
    """
    w = mask_BT[:, None, :].astype(first_key_mass_BHT.dtype)
    return (first_key_mass_BHT * w).sum(axis=(0, 2)) / jnp.maximum(w.sum(axis=(0, 2)), 1)


def head_logit_max(logit_max_BHT, mask_BT):
    """(H,): per head, the largest attention logit over real queries and allowed keys (-inf if none): the
    S_max^h of QK-Clip (Kimi K2), read from `StackProbes.attn_heads[l][sublayer]["logit_max"]`."""
    return jnp.where(mask_BT[:, None, :], logit_max_BHT, -jnp.inf).max(axis=(0, 2))


def sink_rate(mass_LH, threshold: float = SINK_THRESHOLD):
    """Fraction of heads (over layers and heads) whose first-token mass exceeds `threshold` (Gu et al.)."""
    return jnp.mean(mass_LH > threshold)


def feature_kurtosis(x_BTD, mask_BT):
    """Kurtosis of the channels' activation RMS (He et al. 2024, arXiv 2405.19279, outlier features):
    s_j = sqrt(mean over real tokens of x_j^2), Kurt = mean_j s_j^4 / (mean_j s_j^2)^2; 1 when every channel has
    the same RMS, about d when one channel carries the stream."""
    w = mask_BT[..., None].astype(x_BTD.dtype)
    s2_D = (jnp.square(x_BTD) * w).sum(axis=(0, 1)) / jnp.maximum(w.sum(), 1)
    return jnp.mean(jnp.square(s2_D)) / jnp.square(jnp.mean(s2_D))


def max_activation(x_BTD, mask_BT):
    """(max |x|, max |x| / median |x|) over the real tokens' entries: massive activations (Sun et al. 2024,
    arXiv 2402.17762) are entries about 1000x the median magnitude."""
    a = jnp.where(mask_BT[..., None], jnp.abs(x_BTD), jnp.nan)
    peak = jnp.nanmax(a)
    return peak, peak / jnp.nanmedian(a)


def sink_probes(model, *inputs, **masks) -> dict:
    """Per stack, from one deterministic forward pass (`normjax.probe`'s hooks):

    {"streams": {"kurtosis": (L+1,), "max_abs": (L+1,), "max_over_median": (L+1,)} of x_0 .. x_L,
     <sublayer> ("attn", and "cross" in a seq2seq decoder): {"first_token_mass": (L, H), "logit_max": (L, H)}}
    over real tokens (padding masks as for the model call). numpy arrays.
    """
    probes = run_probe(model, inputs, masks)
    out = {}
    for stack, sp in probes.items():
        mask = jnp.asarray(token_mask(model, stack, inputs, masks))
        peaks = [max_activation(x, mask) for x in sp.streams]
        out[stack] = {
            "streams": {
                "kurtosis": np.asarray([feature_kurtosis(x, mask) for x in sp.streams]),
                "max_abs": np.asarray([p[0] for p in peaks]),
                "max_over_median": np.asarray([p[1] for p in peaks]),
            }
        }
        for sub in sp.attn_heads[0]:
            heads = [layer[sub] for layer in sp.attn_heads]
            out[stack][sub] = {
                "first_token_mass": np.stack([first_token_mass(h["first_key_mass"], mask) for h in heads]),
                "logit_max": np.stack([head_logit_max(h["logit_max"], mask) for h in heads]),
            }
    return out
