"""S4's final-norm half: Pre-LN's output logits and init loss against depth, with and without a final norm."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax import plotting
from normjax.studies.encoder_models import model_config
from normjax.studies.seeds import seeds

ARMS = ("with", "without")  # final_norm=True, final_norm=False
QUANTITIES = ("logit_rms", "loss", "stream_ms")


def head_config(config, depth: int, final_norm: bool = True) -> normjax.ModelConfig:
    """The real-setting Pre-LN encoder at `depth`, with or without its final norm, and a separate head.

    The head is untied (`tie_embeddings=False`, N(0, 2/(d + V)) weights) so that the logits read the scale of the
    head's input alone: a tied head on sqrt(d) E[t] embeddings (E ~ N(0, 1/d)) adds the input token's own logit
    sqrt(d) ||E_t||^2 ~ sqrt(d), which a final norm divides by the stream's growth; that is tying, not depth.
    """
    return dataclasses.replace(
        model_config(config, "real", "pre"), num_layers=depth, final_norm=final_norm, tie_embeddings=False
    )


def _stats(logits, last) -> dict:
    """rms of the logits, the expected loss against a uniform target, and ||x_L||^2/d."""
    return {
        "logit_rms": float(jnp.sqrt(jnp.mean(jnp.square(logits)))),
        "loss": float(jnp.mean(jax.nn.logsumexp(logits, axis=-1) - jnp.mean(logits, axis=-1))),
        "stream_ms": float(jnp.mean(jnp.square(last))),
    }


def measure_head(config, depth: int, seed: int) -> dict:
    """One initialisation at `depth`: {"with": stats, "without": stats} of the model with its final norm and of
    the same model without it (the final norm draws no randomness, so `final_norm=False` builds these very weights
    and its logits are the head on x_L: tests check both).

    The batch is the study's real-setting batch (`measure.measure`: i.i.d. uniform tokens, key 1000 + seed). The
    loss is the cross-entropy against a target independent of the input and uniform on the V tokens (the next
    token of an i.i.d. uniform stream, as a causal LM sees it), averaged exactly over the V targets:
    mean_t [logsumexp(z_t) - mean_v z_tv] = ln V + KL(U || p_t) >= ln V, with equality for uniform predictions.
    """
    model = normjax.Transformer(head_config(config, depth), rngs=nnx.Rngs(seed))
    tokens = jax.random.randint(jax.random.key(1000 + seed), (config.batch_size, config.seq_len), 0, config.vocab_size)
    logits, probes = normjax.probe(model, tokens)
    last = probes["encoder"].streams[-1]
    return {"with": _stats(logits, last), "without": _stats(model.logits(last), last)}


def compute(config, study) -> dict:
    """Per arm, (seeds, depths) arrays of logit rms, init loss and ||x_L||^2/d; ln V, the uniform loss."""
    depths = [int(d) for d in config.final_norm_depths]
    runs = [
        [study.cached(f"head-L{d}-{seed}", lambda d=d, s=seed: measure_head(config, d, s)) for d in depths]
        for seed in seeds(config)
    ]
    out = {"depths": depths, "ln_vocab": float(np.log(config.vocab_size)), "head": "untied"}
    for arm in ARMS:
        out[arm] = {k: np.array([[r[arm][k] for r in row] for row in runs]) for k in QUANTITIES}
    return out


def plot(results: dict, study) -> list[str]:
    """Logit rms (log axes) and init loss against depth, with and without the final norm, mean and seed range."""
    fn = results["final_norm"]
    depths = np.array(fn["depths"])
    fig, axes = plotting.figure(ncols=2, width=3.6)
    for arm, marker in (("with", "o"), ("without", "s")):
        for ax, key in zip(axes, ("logit_rms", "loss"), strict=True):
            values = np.array(fn[arm][key], float)
            c = plotting.color("pre") if arm == "with" else "black"
            ax.plot(depths, values.mean(0), marker=marker, ms=4, color=c, label=f"Pre-LN {arm} final norm")
            ax.fill_between(depths, values.min(0), values.max(0), color=c, alpha=0.2)
    axes[1].axhline(fn["ln_vocab"], **plotting.THEORY_STYLE, label="ln V (uniform predictions)")
    axes[0].set(xscale="log", yscale="log", title="output logits at init (real model)", ylabel="rms of logits")
    axes[1].set(xscale="log", title="init loss (uniform target)", ylabel="cross-entropy (nats)")
    for ax in axes:
        ax.set(xlabel="depth L (log)")
        plotting.plain_log_ticks(ax, "x")
        ax.legend(loc="upper left", fontsize=7)
    plotting.plain_log_ticks(axes[0], "y")
    return plotting.save(fig, study.figure_stem("final_norm"))
