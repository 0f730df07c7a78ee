"""Tiny models and inputs shared by the model tests."""

import jax
import jax.numpy as jnp
from flax import nnx

import normjax

TINY = dict(vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2)


def tiny_model(seed: int = 0, **fields) -> normjax.Transformer:
    """A tiny Transformer for tests; fields override TINY."""
    return normjax.Transformer(normjax.ModelConfig(**(TINY | fields)), rngs=nnx.Rngs(seed))


def model_inputs(cfg: normjax.ModelConfig, batch: int = 2, length: int = 5, seed: int = 0):
    """Random token inputs shaped for cfg.arch: (tokens,) or (src, tgt)."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    src = jax.random.randint(k1, (batch, length), 1, cfg.vocab_size)
    if cfg.arch != "encoder_decoder":
        return (src,)
    return src, jax.random.randint(k2, (batch, length + 1), 1, cfg.vocab_size)


def scan_twin(model: normjax.Transformer) -> normjax.Transformer:
    """The same model with scan_layers=True and the same parameters (loop layers stacked)."""
    twin = normjax.Transformer(model.cfg.replace(scan_layers=True), rngs=nnx.Rngs(123))
    pure = nnx.to_pure_dict(nnx.state(model))
    for stack in model.cfg.stacks:
        layers = pure["stacks"][stack]["layers"]
        per_layer = [layers[i] for i in sorted(layers)]
        pure["stacks"][stack]["layers"] = jax.tree.map(lambda *xs: jnp.stack(xs), *per_layer)
    state = nnx.state(twin)
    nnx.replace_by_pure_dict(state, pure)
    nnx.update(twin, state)
    return twin
