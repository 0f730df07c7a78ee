"""One training job: init or resume, train with logs/evals/checkpoints, record the outcome."""

import functools
import math
import os
import time
import types

import jax
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

import normjax
from normjax.train import decode, records, sharding, steps
from normjax.train.batching import BatchSpec
from normjax.train.checkpoint import Checkpointer
from normjax.train.config_io import ConfigError, RunConfig, divergence_loss, model_config
from normjax.train.optimizers import OptimizerSpec
from normjax.train.tasks import Task, load_task


@functools.cache
def compiled() -> types.SimpleNamespace:
    """The jitted steps, shared by every run in this process: a sweep compiles once per shape."""
    return types.SimpleNamespace(
        train=jax.jit(steps.train_step, static_argnums=0, donate_argnums=1),
        eval=jax.jit(steps.eval_step, static_argnums=(0, 1)),
        diag=jax.jit(steps.diagnostics, static_argnums=(0, 1)),
        decode=jax.jit(decode.greedy_decode, static_argnums=(0, 5)),
    )


def hparams(run: RunConfig, cfg: normjax.ModelConfig) -> dict:
    """The traced hyperparameters of a run (see steps.HPARAMS)."""
    t = run.train
    return dict(
        lr=t.lr,
        warmup_steps=t.warmup_steps,
        warmup_init_lr=t.warmup_init_lr,
        total_steps=t.num_steps,
        end_lr=t.end_lr,
        d_model=t.noam_d_model or cfg.d_model,
        weight_decay=t.weight_decay,
        clip_norm=t.clip_norm,
        label_smoothing=t.label_smoothing,
        divergence_loss=divergence_loss(t, cfg.vocab_size),
        divergence_patience=t.divergence_patience,
    )


def step_spec(run: RunConfig, model: nnx.Module, kind: str) -> steps.StepSpec:
    t = run.train
    opt = OptimizerSpec(t.optimizer, t.b1, t.b2, t.eps, t.momentum, t.nesterov)
    return steps.StepSpec(nnx.graphdef(model), kind, t.schedule, opt)


def prepare(run: RunConfig, num_devices: int = 1) -> tuple[Task, normjax.ModelConfig]:
    """The run's data and resolved ModelConfig (raises ConfigError before anything is written)."""
    batch = BatchSpec(run.train.batch_size, run.train.max_tokens, row_multiple=num_devices)
    task = load_task(run.data, batch, run.train.seed, run.train.bleu_examples)
    return task, model_config(run, len(task.vocab))


def _claim_workdir(workdir: str, config: dict) -> None:
    path = os.path.join(workdir, "config.json")
    if os.path.exists(path) and records.read_json(path) != records.to_jsonable(config):
        raise ConfigError(
            f"{workdir} holds a run with a different config.json; use a new --workdir"
        )
    os.makedirs(workdir, exist_ok=True)
    records.write_json(path, config)


class _Job:
    """The state of one running job (kept small: run_job drives it)."""

    def __init__(self, run: RunConfig, task: Task, cfg, workdir: str, mesh):
        self.run, self.task, self.mesh, self.workdir = run, task, mesh, workdir
        self.fns = compiled()
        model = normjax.Transformer(cfg, rngs=nnx.Rngs(run.train.seed))
        self.spec = step_spec(run, model, task.kind)
        state = steps.init_state(self.spec, model, run.train.seed, hparams(run, cfg))
        self.state = sharding.replicate(state, mesh)
        self.main = jax.process_index() == 0
        self.log = records.MetricsLog(
            os.path.join(workdir, "metrics.jsonl"),
            os.path.join(workdir, "tb") if run.train.tensorboard and self.main else None,
        )

    def batch(self, b):
        return sharding.shard_batch(b, self.mesh)

    def evaluate(self) -> dict:
        s = self.state
        limit = self.run.data.valid_batches or self.task.valid.batches_per_epoch
        sums = [
            self.fns.eval(self.spec.graphdef, self.task.kind, s.params, s.consts, self.batch(b))
            for _, b in zip(range(limit), self.task.valid.epoch(), strict=False)
        ]
        tot = {k: float(np.sum([x[k] for x in jax.device_get(sums)])) for k in sums[0]}
        nll = tot["nll"] / max(tot["tokens"], 1.0)
        return {
            "valid/nll": nll,
            "valid/accuracy": tot["correct"] / max(tot["tokens"], 1.0),
            "valid/ppl": math.exp(min(nll, 700.0)),
        }

    def bleu(self) -> dict:
        s, task = self.state, self.task
        fn = lambda p, c, src, mask: self.fns.decode(
            self.spec.graphdef, p, c, src, mask, task.max_len
        )
        hyps, refs = decode.translate(
            fn, s.params, s.consts, task.bleu, task.vocab, task.references, task.strip_bpe
        )
        return {"valid/bleu": decode.corpus_bleu(hyps, refs)}

    def diagnostics(self, step: int) -> dict:
        s = self.state
        out = self.fns.diag(
            self.spec.graphdef,
            self.task.kind,
            s.params,
            s.consts,
            self.batch(self.task.train.batch(step)),
        )
        return {f"diag/{k}": v for k, v in jax.device_get(out).items()}

    def record(self, step: int, pending: list) -> dict:
        """Writes the record of `step`: mean train metrics since the last, evals, diagnostics."""
        t, rec = self.run.train, {"step": step}
        if pending:
            ms = jax.device_get(pending)
            rec |= {f"train/{k}": float(np.mean([m[k] for m in ms])) for k in ms[0] if k != "lr"}
            rec["train/lr"] = float(ms[-1]["lr"])
            rec["train/tokens"] = float(np.sum([m["tokens"] for m in ms]))
        if step % t.eval_every == 0 or step == t.num_steps:
            rec |= self.evaluate()
        if step == t.num_steps and self.task.bleu is not None:
            rec |= self.bleu()
        if t.diag_every and step % t.diag_every == 0 and step < t.num_steps:
            rec |= self.diagnostics(step)
        if len(rec) > 1 and self.main:
            self.log.append(rec)
        return rec


def run_job(
    run: RunConfig,
    workdir: str,
    *,
    mesh=None,
    progress: bool = True,
    desc: str = "",
    position: int = 0,
) -> dict:
    """Trains one run in `workdir`, resuming from its last checkpoint; skips a finished run.

    Writes config.json, metrics.jsonl (one record per logged step), summary.json (outcome "ok" or
    "diverged" with the step) and orbax checkpoints under checkpoints/.

    Returns:
      The summary.
    """
    summary_path = os.path.join(workdir, "summary.json")
    if os.path.exists(summary_path):
        return records.read_json(summary_path)
    mesh = mesh or sharding.data_mesh()
    task, cfg = prepare(run, mesh.size)
    config = run.to_dict() | {"model": cfg.to_dict()}
    if jax.process_index() == 0:
        _claim_workdir(workdir, config)
    job, t = _Job(run, task, cfg, workdir, mesh), run.train
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), t.keep_checkpoints)
    start = ckpt.latest_step()
    if start is not None:
        job.state, _ = ckpt.restore(start, job.state)
    if job.main:
        job.log.truncate(-1 if start is None else start)
    step, pending, last, t0 = start or 0, [], {}, time.time()
    if step == 0:
        last = job.record(0, [])
    bar = tqdm(
        total=t.num_steps,
        initial=step,
        desc=desc,
        position=position,
        leave=False,
        disable=not progress,
        dynamic_ncols=True,
    )
    diverged_at = -1
    while step < t.num_steps:
        job.state, metrics = job.fns.train(job.spec, job.state, job.batch(task.train.batch(step)))
        step += 1
        pending.append(metrics)
        bar.update()
        ckpt_due = step % t.checkpoint_every == 0 and step < t.num_steps
        log_due = step % t.log_every == 0 or step == t.num_steps
        if (step % t.divergence_check_every == 0 or log_due or ckpt_due) and int(
            job.state.diverged_at
        ) >= 0:
            diverged_at = int(job.state.diverged_at)
            last = job.record(step, pending)
            break
        if log_due or step % t.eval_every == 0 or (t.diag_every and step % t.diag_every == 0):
            last = job.record(step, pending if log_due else [])
            pending = [] if log_due else pending
            if "train/loss" in last:
                bar.set_postfix(loss=f"{last['train/loss']:.3f}")
        if ckpt_due:
            ckpt.save(step, job.state, step)
    bar.close()
    ckpt.close()
    elapsed = time.time() - t0
    summary = {
        "outcome": "diverged" if diverged_at >= 0 else "ok",
        "diverged_step": diverged_at if diverged_at >= 0 else None,
        "steps": step,
        "final": {k: v for k, v in last.items() if not k.startswith("diag/")},
        "best_valid_nll": min(
            (
                r["valid/nll"]
                for r in records.read_jsonl(job.log.path)
                if r.get("valid/nll") is not None
            ),
            default=None,
        ),
        "wall_time_s": elapsed,
        "steps_per_s": (step - (start or 0)) / max(elapsed, 1e-9),
    }
    if job.main:
        records.write_json(summary_path, summary)
    job.log.close()
    return records.to_jsonable(summary)
