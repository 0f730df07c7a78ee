"""Learning-rate schedules as pure functions of a traced step and traced hyperparameters."""

from collections.abc import Callable, Mapping

import jax.numpy as jnp

SCHEDULES = ("constant", "inverse_sqrt", "noam", "cosine", "linear")

Hparams = Mapping[str, jnp.ndarray]


def _warmup(step, hp):
    """Linear ramp from warmup_init_lr (step 0) to lr (step warmup_steps)."""
    frac = step / jnp.maximum(hp["warmup_steps"], 1.0)
    return hp["warmup_init_lr"] + (hp["lr"] - hp["warmup_init_lr"]) * frac


def _in_warmup(step, hp):
    return step < hp["warmup_steps"]


def constant(step, hp):
    """Linear warmup, then lr."""
    return jnp.where(_in_warmup(step, hp), _warmup(step, hp), hp["lr"])


def inverse_sqrt(step, hp):
    """fairseq `inverse_sqrt`: linear warmup, then lr * sqrt(warmup / step).

    With warmup_steps = 0 the decay starts at step 1 (as fairseq with one warmup update): lr at
    steps 0 and 1, lr / sqrt(step) afterwards.
    """
    warmup = jnp.maximum(hp["warmup_steps"], 1.0)
    decay = hp["lr"] * jnp.sqrt(warmup / jnp.maximum(step, warmup))
    return jnp.where(_in_warmup(step, hp), _warmup(step, hp), decay)


def noam(step, hp):
    """Vaswani et al.: lr * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1.

    `lr` is the dimensionless multiplier (1.0 in the paper); the peak d^-0.5 warmup^-0.5 is at
    step = warmup.
    """
    t = jnp.maximum(step, 1.0)
    warmup = jnp.maximum(hp["warmup_steps"], 1.0)
    return hp["lr"] * hp["d_model"] ** -0.5 * jnp.minimum(t**-0.5, t * warmup**-1.5)


def _decay_frac(step, hp):
    """Fraction of the decay done; total_steps counts the warmup (unlike optax's decay_steps)."""
    span = jnp.maximum(hp["total_steps"] - hp["warmup_steps"], 1.0)
    return jnp.clip((step - hp["warmup_steps"]) / span, 0.0, 1.0)


def cosine(step, hp):
    """Linear warmup, then cosine decay from lr to end_lr at total_steps."""
    cos = 0.5 * (1.0 + jnp.cos(jnp.pi * _decay_frac(step, hp)))
    decay = hp["end_lr"] + (hp["lr"] - hp["end_lr"]) * cos
    return jnp.where(_in_warmup(step, hp), _warmup(step, hp), decay)


def linear(step, hp):
    """Linear warmup, then linear decay from lr to end_lr at total_steps."""
    decay = hp["lr"] + (hp["end_lr"] - hp["lr"]) * _decay_frac(step, hp)
    return jnp.where(_in_warmup(step, hp), _warmup(step, hp), decay)


_BY_NAME: dict[str, Callable] = {
    "constant": constant,
    "inverse_sqrt": inverse_sqrt,
    "noam": noam,
    "cosine": cosine,
    "linear": linear,
}


def learning_rate(kind: str, step: jnp.ndarray | int, hparams: Hparams) -> jnp.ndarray:
    """Learning rate of update number `step` (0-based count of updates done) under schedule `kind`.

    Args:
      kind: one of SCHEDULES (a static choice: it selects the formula).
      step: scalar step, Python number or traced array.
      hparams: scalars (traced in the train step): lr, warmup_steps, warmup_init_lr, total_steps,
        end_lr, d_model (noam only).

    Returns:
      A float32 scalar.
    """
    if kind not in _BY_NAME:
        raise ValueError(f"unknown schedule {kind!r}; valid choices: {', '.join(SCHEDULES)}")
    hp = {k: jnp.asarray(v, jnp.float32) for k, v in hparams.items()}
    return _BY_NAME[kind](jnp.asarray(step, jnp.float32), hp)
