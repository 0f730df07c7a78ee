"""The training loop: one run, or runs sharing shapes in lockstep with one vmapped step."""

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from normjax.train import sharding
from normjax.train.config_io import RunConfig
from normjax.train.config_schema import shape_key
from normjax.train.job import Job, compiled, finished_summary

STOP = threading.Event()  # set: every loop of this process stops at its next step (a Ctrl-C to a threaded sweep)


def run_job(
    run: RunConfig,
    workdir: str,
    *,
    force: bool = False,
    mesh=None,
    progress: bool = True,
    desc: str = "",
    position: int = 0,
) -> dict:
    """Trains one run in `workdir`, resuming from its newest intact checkpoint; skips a finished run.

    Writes config.json, metrics.jsonl (one record per logged step), summary.json (outcome "ok" or
    "diverged" with the step) and orbax checkpoints under checkpoints/. Holds `workdir`'s lock meanwhile.

    Args:
      force: delete the run's files first and train it from step 0, whatever `workdir` holds.

    Returns:
      The summary.

    Raises:
      ConfigError: when `workdir` holds a run of another config (naming the keys) and not `force`.
      WorkdirError: when another process holds `workdir`, or a file in it is damaged (naming it).
    """
    return run_group([(run, workdir)], force=force, mesh=mesh, progress=progress, desc=desc, position=position)[0]


def run_group(
    items: list[tuple[RunConfig, str]],
    *,
    force: bool = False,
    mesh=None,
    progress: bool = True,
    desc: str = "",
    position: int = 0,
) -> list[dict]:
    """Trains runs that share shapes (same model, data, batch, optimizer kind, schedule kind, steps and
    intervals; lr, warmup, seed and the other traced values may differ) with one vmapped step.

    Finished runs are skipped (see run_job for `force` and the errors). Unfinished runs resume together
    when their last checkpoints are at the same step, else one after another.

    Returns:
      The summaries, in the order of `items`.
    """
    mesh = mesh or sharding.data_mesh()
    out = [None if force else finished_summary(workdir, run) for run, workdir in items]
    opened: dict[int, Job] = {}
    try:
        for i in [i for i, s in enumerate(out) if s is None]:
            opened[i] = Job(items[i][0], items[i][1], mesh, force)
            out[i] = opened[i].done  # finished by another process meanwhile
        todo = [i for i in opened if out[i] is None]
        jobs = [opened[i] for i in todo]
        starts = {job.resume() for job in jobs}
        shared = len({job.spec for job in jobs}) == 1 and len({shape_key(j.run) for j in jobs}) == 1
        if len(jobs) > 1 and len(starts) == 1 and shared:
            summaries = _train(jobs, progress, desc, position, vmapped=True)
        else:
            summaries = [_train([job], progress, desc, position)[0] for job in jobs]
        for i, summary in zip(todo, summaries, strict=True):
            out[i] = summary
        return out
    finally:
        for job in opened.values():
            job.close()


@jax.jit
def _stack(trees):
    """The runs' pytrees stacked along a new leading run axis: one program per group size, not one per leaf."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


@jax.jit
def _take(tree, i):
    """Run `i` of a stacked pytree; `i` is traced, so every run of a group reads through one program."""
    return jax.tree.map(lambda x: x[i], tree)


def _host_stack(batches: list[dict]) -> dict:
    """The runs' host batches stacked along a leading run axis (numpy: no device program)."""
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}


def run_steps(state, step_fn, start: int, stop: int, on_step=None, name: str = "run"):
    """The training loop: `state, out = step_fn(state, t)` for t = start .. stop - 1, then `on_step(t + 1, state,
    out)` (the updates done, the new state, step_fn's output), which ends the loop by returning True.

    Every training loop steps here (run_group's jobs, the studies' probed runs): a set STOP ends it before the
    next update with KeyboardInterrupt (a run resumes from its checkpoint).

    Returns:
      (the last state, the updates done).
    """
    step = start
    while step < stop:
        if STOP.is_set():
            raise KeyboardInterrupt(f"{name} stopped at step {step}")
        state, out = step_fn(state, step)
        step += 1
        if on_step is not None and on_step(step, state, out):
            break
    return state, step


@dataclasses.dataclass(frozen=True)
class Probe:
    """A measurement taken while training: `fn(step, state, batch)` on the state after `step` updates, for step 0,
    `every`, 2 `every`, ..., each step in `at` and the last one (`batch`: the batch of the next update, or of the
    last one at the end)."""

    every: int
    fn: Callable[[int, Any, dict], Any]
    at: frozenset[int] = frozenset()

    def __post_init__(self):
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"Probe.every must be a positive int (probe every that many updates), not {self.every!r}")

    def due(self, done: int, num_steps: int) -> bool:
        """Whether this probe measures the state after `done` of `num_steps` updates."""
        return done % self.every == 0 or done == num_steps or done in self.at


def train_probed(spec, state, batch_at: Callable[[int], dict], num_steps: int, probes=(), check_every: int = 1):
    """The studies' trainer: `num_steps` updates by the shared compiled train step (job.compiled) in run_steps,
    each Probe's fn at its steps; stops at the first divergence check (every `check_every` updates) after the
    engine flags a divergence (the probes due at that step measure the frozen state first).

    Returns:
      (the last state, the per-update metrics read to the host, per probe a list of (step, fn's value)).
    """
    train, metrics, measured = compiled().train, [], [[] for _ in probes]

    def measure(done: int, state) -> None:
        for probe, out in zip(probes, measured, strict=True):
            if probe.due(done, num_steps):
                out.append((done, probe.fn(done, state, batch_at(min(done, num_steps - 1)))))

    def on_step(done, state, m):
        metrics.append(m)
        measure(done, state)
        return done % check_every == 0 and int(state.diverged_at) >= 0

    measure(0, state)
    state, _ = run_steps(state, lambda state, t: train(spec, state, batch_at(t)), 0, num_steps, on_step)
    return state, jax.device_get(metrics), measured


def _train(jobs: list[Job], progress: bool, desc: str, position: int, vmapped: bool = False) -> list[dict]:
    """The loop over resumed jobs. Every job shares the train config's step count and intervals (run_group checks)."""
    t, fns, mesh = jobs[0].run.train, compiled(), jobs[0].mesh
    start = jobs[0].start
    if start == 0:
        for job in jobs:
            job.record(0, [])
    state = sharding.replicate(_stack([j.state for j in jobs]), mesh) if vmapped else jobs[0].state
    take = _take if vmapped else (lambda tree, i: tree)
    active, pending, summaries = list(range(len(jobs))), [], [None] * len(jobs)
    bar = tqdm(
        total=t.num_steps,
        initial=start,
        desc=desc,
        position=position,
        leave=False,
        disable=not progress,
        dynamic_ncols=True,
    )

    def step_fn(state, step):
        if vmapped:
            batch = _host_stack([j.host_batch(step) for j in jobs])
            return fns.vtrain(jobs[0].spec, state, sharding.shard_batch(batch, mesh, 1))
        return fns.train(jobs[0].spec, state, jobs[0].device_batch(jobs[0].host_batch(step)))

    def run_metrics(i: int) -> list:
        """Run i's metrics of the pending steps, read to the host once per record point."""
        if vmapped and pending and not isinstance(pending[0]["loss"], np.ndarray):
            pending[:] = jax.device_get(pending)
        return [{k: v[i] for k, v in m.items()} for m in pending] if vmapped else list(pending)

    def on_step(step, state, metrics):
        """Divergence checks, records, evals and checkpoints after update `step`; True once no job is left."""
        pending.append(metrics)
        bar.update()
        ckpt_due = step % t.checkpoint_every == 0 and step < t.num_steps
        log_due = step % t.log_every == 0 or step == t.num_steps
        eval_due = step % t.eval_every == 0 or bool(t.diag_every and step % t.diag_every == 0)
        if step % t.divergence_check_every == 0 or log_due or ckpt_due:
            diverged = jax.device_get(state.diverged_at).reshape(-1)
            for i in [i for i in active if diverged[i] >= 0]:
                jobs[i].state = take(state, i)
                jobs[i].record(step, run_metrics(i))
                summaries[i] = jobs[i].finish(step, int(diverged[i]))
                active.remove(i)
        if log_due or eval_due:
            for i in active:
                jobs[i].state = take(state, i)
                jobs[i].record(step, run_metrics(i) if log_due else [])
            if log_due:
                pending.clear()
            if active and "train/loss" in jobs[active[0]].last:
                bar.set_postfix(loss=f"{jobs[active[0]].last['train/loss']:.3f}")
        if ckpt_due:
            for i in active:
                jobs[i].state = take(state, i)
                jobs[i].save(step)
        return not active

    _, step = run_steps(state, step_fn, start, t.num_steps, on_step, name=desc or "run")
    bar.close()
    for i in active:
        summaries[i] = jobs[i].finish(step, -1)
    return summaries
