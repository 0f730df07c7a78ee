"""toy_study: the residual stream's mean square ||x_l||^2/d at init vs depth, Pre-LN (a template measurement)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import normjax
from normjax import plotting
from normjax.studies.seeds import seeds


def _stream(config, seed: int) -> list[float]:
    cfg = normjax.ModelConfig(
        arch="encoder", vocab_size=config.vocab_size, d_model=config.d_model, num_heads=config.num_heads,
        d_ff=config.d_ff, num_layers=config.num_layers, placement="pre",
    )  # fmt: skip
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    tokens = jax.random.randint(jax.random.key(seed), (config.batch_size, config.seq_len), 0, config.vocab_size)
    streams = normjax.probe(model, tokens)[1]["encoder"].streams
    return [float(jnp.mean(jnp.sum(x**2, -1)) / config.d_model) for x in streams]


def compute(config, study) -> dict:
    """Per seed, ||x_l||^2/d for l = 0..L: one cached piece per seed, so a killed run resumes."""
    per_seed = [study.cached(f"seed{s}", lambda s=s: {"stream": _stream(config, s)})["stream"] for s in seeds(config)]
    return {"stream": per_seed, "num_seeds": len(per_seed)}


def plot(results: dict, study) -> list[str]:
    fig, (ax,) = plotting.figure(ncols=1)
    for curve in results["stream"]:
        ax.plot(np.arange(len(curve)), curve, color=plotting.color("pre"), alpha=0.7)
    ax.set(xlabel="layer l", ylabel="||x_l||^2 / d", title="Pre-LN residual stream at init")
    return plotting.save(fig, study.figure_stem("stream"))
