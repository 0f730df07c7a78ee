"""Will a model fit: a lower bound on its parameter, optimizer and activation memory, checked before allocating."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

import normjax
from normjax.train.batching import BatchSpec
from normjax.train.config_io import ConfigError, sequence_length


def param_count(cfg: normjax.ModelConfig) -> int:
    """Weight matrices and embeddings of `cfg` (biases and norm gains left out: a lower bound)."""
    d, f = cfg.d_model, cfg.d_ff
    embed = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
    embed += cfg.max_len * d if cfg.pos_encoding == "learned" else 0
    layers = {stack: cfg.stack_depth(stack) * (4 * d * d + 2 * d * f) for stack in cfg.stacks}
    cross = 4 * d * d * cfg.decoder_layers if cfg.arch == "encoder_decoder" else 0
    return embed + sum(layers.values()) + cross


def estimate_bytes(cfg: normjax.ModelConfig, rows: int, seq_len: int, training: bool = True, moments: int = 2) -> dict:
    """A lower bound on the memory of one step: {"params", "activations", "total"} in bytes.

    Training holds params, gradients and `moments` optimizer moments per parameter (Adam 2); the backward
    pass keeps, per layer, the residual stream, the FFN hidden layer and the attention probabilities
    (with `remat` only the residual stream); the logits are kept once.
    """
    width, act_width = jnp.dtype(cfg.param_dtype).itemsize, jnp.dtype(cfg.dtype).itemsize
    params = param_count(cfg) * width * (2 + moments if training else 1)
    tokens = rows * seq_len
    layers = sum(cfg.stack_depth(s) for s in cfg.stacks)
    per_layer = tokens * (cfg.d_model + cfg.d_ff) + rows * cfg.num_heads * seq_len * seq_len
    per_layer = tokens * cfg.d_model if cfg.remat else per_layer
    activations = act_width * ((layers if training else 1) * per_layer + tokens * cfg.vocab_size)
    return {"params": params, "activations": activations, "total": params + activations}


def available_bytes() -> int:
    """The first device's memory limit (accelerators), else the machine's physical memory."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(
    cfg: normjax.ModelConfig, rows: int, seq_len: int, training: bool = True, available: int = 0, moments: int = 2
) -> None:
    """Raises ConfigError with the estimate and the memory when even the lower bound does not fit.

    Args:
      cfg: the model.
      rows, seq_len: the batch shape of one step.
      training: count gradients, optimizer moments and the activations kept for the backward pass.
      available: bytes to compare with (0 = `available_bytes()`).
      moments: optimizer moments per parameter (Adam 2, SGD with momentum 1).
    """
    need = estimate_bytes(cfg, rows, seq_len, training, moments)
    have = available or available_bytes()
    if need["total"] > have:
        gib = lambda b: f"{b / 2**30:.1f} GiB"
        raise ConfigError(
            f"the model does not fit: it needs at least {gib(need['total'])} ({gib(need['params'])} of parameters"
            f"{' and optimizer state' if training else ''}, {gib(need['activations'])} of activations for a "
            f"{rows}x{seq_len} batch) but {jax.local_devices()[0].platform} memory is {gib(have)}; "
            "reduce the model or the batch"
        )


def check_run_fits(run, cfg: normjax.ModelConfig) -> None:
    """check_fits for a training run's model and largest batch."""
    seq_len = sequence_length(run.data)
    t = run.train
    moments = (1 if t.momentum > 0 else 0) if t.optimizer == "sgd" else 2
    check_fits(cfg, BatchSpec(t.batch_size, t.max_tokens).rows(seq_len), seq_len, training=True, moments=moments)
