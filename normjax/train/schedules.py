"""Learning-rate schedules as pure functions of a traced step and traced hyperparameters."""

from collections.abc import Callable, Mapping

import jax.numpy as jnp

SCHEDULES = ("constant", "inverse_sqrt", "warmup_then_inverse_sqrt", "noam", "cosine", "linear", "wsd")

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


def warmup_then_inverse_sqrt(step, hp):
    """Linear warmup, then lr until decay_start and lr * sqrt(decay_start / step) after it.

    The tail does not depend on warmup_steps: arms that share lr and decay_start (>= every arm's warmup)
    have equal lrs from the end of their warmups on, so a no-warmup arm differs from a warmup arm only
    in the warmup (the fair control; fairseq's `inverse_sqrt` anchors its decay at the warmup's end).
    """
    start = jnp.maximum(jnp.maximum(hp["decay_start"], hp["warmup_steps"]), 1.0)
    decay = hp["lr"] * jnp.sqrt(start / jnp.maximum(step, start))
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


def wsd(step, hp):
    """Warmup-stable-decay (MiniCPM, Hu et al. 2024, arXiv 2404.06395, WSD(T; s)): linear warmup, lr until
    decay_start, then a linear decay from lr to end_lr at total_steps (end_lr after it).

    The decay is the linear form of OpenBMB's bmtrain scheduler `WarmupStableDrop` (`get_lr_drop`:
    lr (0.1 + 0.9 (end - step) / drop_iter), i.e. end_lr = 0.1 lr over the last drop_iter steps); its
    `WarmupStableExp` is the exponential form (lr halved every drop_iter steps), not offered here.
    decay_start is the step where the stable phase ends (MiniCPM decays over about the last 10%:
    decay_start = 0.9 total_steps); below the warmup's end it is the warmup's end.
    """
    start = jnp.maximum(hp["decay_start"], hp["warmup_steps"])
    frac = jnp.clip((step - start) / jnp.maximum(hp["total_steps"] - start, 1.0), 0.0, 1.0)
    decay = hp["lr"] + (hp["end_lr"] - hp["lr"]) * frac
    return jnp.where(_in_warmup(step, hp), _warmup(step, hp), decay)


_BY_NAME: dict[str, Callable] = {
    "constant": constant,
    "inverse_sqrt": inverse_sqrt,
    "warmup_then_inverse_sqrt": warmup_then_inverse_sqrt,
    "noam": noam,
    "cosine": cosine,
    "linear": linear,
    "wsd": wsd,
}


def learning_rate(kind: str, step: jnp.ndarray | int, hparams: Hparams) -> jnp.ndarray:
    """Learning rate of update number `step` (0-based count of updates done) under schedule `kind`.

    Args:
      kind: one of SCHEDULES (a static choice: it selects the formula).
      step: scalar step, Python number or traced array.
      hparams: scalars (traced in the train step): lr, warmup_steps, warmup_init_lr, total_steps,
        end_lr, d_model (noam only), decay_start (warmup_then_inverse_sqrt and wsd only).

    Returns:
      A float32 scalar.
    """
    if kind not in _BY_NAME:
        raise ValueError(f"unknown schedule {kind!r}; valid choices: {', '.join(SCHEDULES)}")
    hp = {k: jnp.asarray(v, jnp.float32) for k, v in hparams.items()}
    return _BY_NAME[kind](jnp.asarray(step, jnp.float32), hp)


# Schedules whose lr after the warmup does not depend on warmup_steps (given the arms' shared hparams).
FAIR_CONTROLS = ("constant", "warmup_then_inverse_sqrt")


def control_arms(kind: str, warmups, hparams: Hparams) -> list[dict]:
    """The hparams of arms that differ only in warmup_steps, for a schedule of FAIR_CONTROLS.

    warmup_then_inverse_sqrt gets decay_start = max(warmups, hparams["decay_start"]), so every arm
    decays from the same step.
    """
    if kind not in FAIR_CONTROLS:
        raise ValueError(f"schedule {kind!r} is no fair warmup control; use one of {', '.join(FAIR_CONTROLS)}")
    shared = dict(hparams)
    if kind == "warmup_then_inverse_sqrt":
        shared["decay_start"] = max([float(hparams.get("decay_start", 0.0)), *map(float, warmups)])
    return [shared | {"warmup_steps": float(w)} for w in warmups]


def control_mismatch(kind: str, arms, num_steps: int) -> str | None:
    """None if every two arms have equal lrs at every step from the longer warmup's end to num_steps;
    otherwise the first disagreement, as one line."""
    steps = jnp.arange(num_steps + 1, dtype=jnp.float32)
    lrs = [learning_rate(kind, steps, hp) for hp in arms]
    for i in range(len(arms)):
        for j in range(i + 1, len(arms)):
            start = int(max(arms[i]["warmup_steps"], arms[j]["warmup_steps"]))
            bad = jnp.nonzero(lrs[i][start:] != lrs[j][start:], size=1, fill_value=-1)[0][0]
            if bad >= 0:
                t = start + int(bad)
                return (
                    f"{kind}: warmup {arms[i]['warmup_steps']:g} gives lr {float(lrs[i][t]):.4g} at step {t}, "
                    f"warmup {arms[j]['warmup_steps']:g} gives {float(lrs[j][t]):.4g}"
                )
    return None
