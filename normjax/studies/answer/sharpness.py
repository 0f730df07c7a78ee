"""The answer study's sharpness arms: one byte LM trained in-process, its Adam-preconditioned sharpness probed."""

from __future__ import annotations

import math
import time

import jax
import optax
from flax import nnx

import normjax
from normjax import train
from normjax.jacobian import hessian
from normjax.train import job, schedules, steps
from normjax.train.loop import Probe, train_probed


def _loss(graphdef, task_kind):
    """nll(params, consts, batch) per token of a batch (the unsmoothed training objective)."""

    def loss(params, consts, batch):
        model = nnx.merge(graphdef, params, consts)
        sums = steps.token_losses(*steps.forward(model, task_kind, batch), 0.0)
        return sums["nll"] / sums["tokens"]

    return loss


def adam_state(opt_state):
    """The ScaleByAdamState inside an Adam optimizer state (nu, count)."""
    for s in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState)):
        if isinstance(s, optax.ScaleByAdamState):
            return s
    raise ValueError("the optimizer state holds no Adam second moment")


def sharpness_run(run: train.SweepRun, every: int, max_dim: int) -> dict:
    """Trains `run` (Adam) and probes, every `every` updates and at the end, on the held-out batch 0: the top
    eigenvalue of P^-1 H (P = sqrt(nu_hat) + eps from the optimizer state; `hessian.top_eigenvalue`), the lr of
    the next update and Cohen et al.'s threshold (2 + 2 b1) / ((1 - b1) lr) at that lr; plus the held-out nll."""
    rc = run.run
    task, cfg = job.prepare(rc)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(rc.train.seed))
    spec = job.step_spec(rc, model, task.kind)
    hp = job.hparams(rc, cfg)
    state = steps.init_state(spec, model, rc.train.seed, hp)
    loss = _loss(spec.graphdef, task.kind)  # one function object per run: top_eigenvalue compiles once for it
    nll_of = jax.jit(loss)
    held_out = task.valid.batch(0)
    probes = {"step": [], "sharpness": [], "magnitude": [], "residual": [], "lr": [], "threshold": [], "nll": []}
    start = time.time()

    def probe(t, state, batch):
        lr = float(schedules.learning_rate(rc.train.schedule, t, hp))
        adam = adam_state(state.opt_state)
        nll = float(nll_of(state.params, state.consts, held_out))
        if t == 0 or not math.isfinite(nll):  # nu is 0 before the first update: P^-1 H is not defined yet
            top = None
        else:
            precond = hessian.adam_preconditioner(adam.nu, adam.count, rc.train.b2, rc.train.eps)
            top = hessian.top_eigenvalue(loss, state.params, state.consts, held_out, precond=precond, max_dim=max_dim)
        probes["step"].append(t)
        probes["nll"].append(nll if math.isfinite(nll) else None)
        for key, value in zip(("sharpness", "magnitude", "residual"), top or (None, None, None), strict=False):
            probes[key].append(None if value is None or not math.isfinite(float(value)) else float(value))
        probes["lr"].append(lr)
        probes["threshold"].append(hessian.adam_threshold(lr, rc.train.b1) if lr > 0 else None)

    state, _, _ = train_probed(spec, state, task.train.batch, rc.train.num_steps, [Probe(every, probe)])
    diverged = int(state.diverged_at)
    return {
        "name": run.name,
        "placement": rc.model["placement"],
        "depth": rc.model["num_layers"],
        "lr": rc.train.lr,
        "warmup": rc.train.warmup_steps,
        "seed": rc.train.seed,
        "b1": rc.train.b1,
        "probes": probes,
        "diverged_step": diverged if diverged >= 0 else None,
        "wall_time_s": time.time() - start,
    }
