"""The baseline of benchmarks.sweep: the training loop a user writes first, with optax and a jitted closure.

Each run builds its model, an optax optimizer with the run's lr and warmup baked in as Python constants and a
fresh `jax.jit`-ed train step closing over that optimizer, so every run traces and compiles its step again.
Batches come from the library's data pipeline (`normjax.train.job.prepare`); the model call, the loss, the
optimizer and the jit are plain Flax NNX / optax / JAX. Seq2seq tasks only, no dropout (deterministic model
call), no gradient clipping and no weight decay.
"""

import dataclasses
import time

import jax
import jax.numpy as jnp
import optax
from flax import nnx

import normjax
from normjax.train.config_schema import RunConfig, TrainConfig
from normjax.train.job import prepare


@dataclasses.dataclass(frozen=True)
class PlainRun:
    losses: list[float]  # the training loss of every update, in order
    compiles: int  # compiled train steps
    first_step_s: float  # model + optimizer setup, trace, compile and the first update
    wall_s: float  # the whole run


def warmup_cosine_adam(t: TrainConfig) -> optax.GradientTransformation:
    """Adam with linear warmup from warmup_init_lr to lr, then cosine decay to end_lr at num_steps."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=t.warmup_init_lr,
        peak_value=t.lr,
        warmup_steps=t.warmup_steps,
        decay_steps=t.num_steps,
        end_value=t.end_lr,
    )
    return optax.adam(schedule, b1=t.b1, b2=t.b2, eps=t.eps)


def smoothed_cross_entropy(logits_BTV, targets_BT, mask_BT, label_smoothing: float):
    """Mean over real tokens of the cross entropy with label-smoothed one-hot targets."""
    labels_BTV = optax.smooth_labels(jax.nn.one_hot(targets_BT, logits_BTV.shape[-1]), label_smoothing)
    w_BT = mask_BT.astype(jnp.float32)
    return (optax.softmax_cross_entropy(logits_BTV, labels_BTV) * w_BT).sum() / jnp.maximum(w_BT.sum(), 1.0)


def make_train_step(graphdef, optimizer: optax.GradientTransformation, label_smoothing: float):
    """A new jitted step (params, consts, opt_state, batch) -> (params, opt_state, loss)."""

    def loss_fn(params, consts, batch):
        model = nnx.merge(graphdef, params, consts)
        logits_BTV = model(batch["src"], batch["tgt_in"], src_mask=batch["src_mask"], tgt_mask=batch["tgt_mask"])
        return smoothed_cross_entropy(logits_BTV, batch["tgt_out"], batch["tgt_mask"], label_smoothing)

    @jax.jit
    def train_step(params, consts, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, consts, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def train_run(run: RunConfig) -> PlainRun:
    """Trains one run on the library's batches; the loss curve comes back to the host at the end."""
    t = run.train
    if run.model["dropout"] or t.clip_norm or t.weight_decay or (t.optimizer, t.schedule) != ("adam", "cosine"):
        raise ValueError("the plain loop is Adam with a cosine schedule, without dropout, clipping or weight decay")
    start = time.perf_counter()
    task, cfg = prepare(run)
    if task.kind != "seq2seq":
        raise ValueError(f"the plain loop trains seq2seq tasks, not {task.kind!r}")
    graphdef, params, consts = nnx.split(normjax.Transformer(cfg, rngs=nnx.Rngs(t.seed)), nnx.Param, ...)
    optimizer = warmup_cosine_adam(t)
    opt_state = optimizer.init(params)
    train_step = make_train_step(graphdef, optimizer, t.label_smoothing)
    losses = []
    for step in range(t.num_steps):
        params, opt_state, loss = train_step(params, consts, opt_state, task.train.batch(step))
        losses.append(loss)
        if step == 0:
            jax.block_until_ready(loss)
            first_step_s = time.perf_counter() - start
    losses = [float(x) for x in jax.device_get(losses)]
    return PlainRun(losses, train_step._cache_size(), first_step_s, time.perf_counter() - start)
