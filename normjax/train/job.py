"""One run's bookkeeping: data, model, train state, metrics log, evals, checkpoints and summary."""

import functools
import math
import os
import time
import types

import jax
import numpy as np
from flax import nnx

import normjax
from normjax.train import decode, metric_writers, records, sharding, steps
from normjax.train.batching import BatchSpec
from normjax.train.checkpoint import Checkpointer
from normjax.train.config_io import ConfigError, RunConfig, divergence_loss, model_config
from normjax.train.optimizers import OptimizerSpec
from normjax.train.tasks import Task, load_task


@functools.cache
def compiled() -> types.SimpleNamespace:
    """The jitted steps, shared by every run in this process: a sweep compiles once per shape.

    The train steps donate their state (no second copy of params and optimizer state) on accelerators
    only: on the CPU, donation made the sweep benchmark's step 28-29 ms instead of 22 (benchmarks/README.md).
    """
    donate = () if jax.default_backend() == "cpu" else (1,)
    return types.SimpleNamespace(
        train=jax.jit(steps.train_step, static_argnums=0, donate_argnums=donate),
        vtrain=jax.jit(steps.vmapped_train_step, static_argnums=0, donate_argnums=donate),
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


def finished_summary(workdir: str) -> dict | None:
    path = os.path.join(workdir, "summary.json")
    return records.read_json(path) if os.path.exists(path) else None


class Job:
    """One run in `workdir`: builds its state, resumes it, logs, evaluates, checkpoints, summarizes."""

    def __init__(self, run: RunConfig, workdir: str, mesh):
        self.run, self.workdir, self.mesh = run, workdir, mesh
        self.task, cfg = prepare(run, mesh.size)
        self.main = jax.process_index() == 0
        t = run.train
        self.log = metric_writers.create_default_writer(
            workdir, tensorboard=t.tensorboard, wandb_project=t.wandb_project, just_logging=not self.main
        )
        if self.main:
            config = run.to_dict() | {"model": cfg.to_dict()}
            self._claim(config)
            self.log.write_hparams(config)
        self.fns = compiled()
        model = normjax.Transformer(cfg, rngs=nnx.Rngs(run.train.seed))
        self.spec = step_spec(run, model, self.task.kind)
        state = steps.init_state(self.spec, model, run.train.seed, hparams(run, cfg))
        self.state = sharding.replicate(state, mesh)
        self.ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), run.train.keep_checkpoints)
        self.start, self.last, self.t0 = 0, {}, time.time()

    def _claim(self, config: dict) -> None:
        path = os.path.join(self.workdir, "config.json")
        if os.path.exists(path) and records.read_json(path) != records.to_jsonable(config):
            raise ConfigError(f"{self.workdir} holds a run with a different config.json; use a new --workdir")
        os.makedirs(self.workdir, exist_ok=True)
        records.write_json(path, config)

    def resume(self) -> int:
        """Restores the last checkpoint (if any), cuts metrics.jsonl back to it; returns its step."""
        latest = self.ckpt.latest_step()
        if latest is not None:
            self.state, _ = self.ckpt.restore(latest, self.state)
        if self.main:
            self.log.rewind(-1 if latest is None else latest)
        self.start = latest or 0
        return self.start

    def host_batch(self, step: int) -> dict:
        return self.task.train.batch(step)

    def device_batch(self, batch: dict) -> dict:
        return sharding.shard_batch(batch, self.mesh)

    def evaluate(self) -> dict:
        s, g, kind = self.state, self.spec.graphdef, self.task.kind
        limit = self.run.data.valid_batches or self.task.valid.batches_per_epoch
        sums = [
            self.fns.eval(g, kind, s.params, s.consts, self.device_batch(b))
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
        s, task, g = self.state, self.task, self.spec.graphdef
        fn = lambda p, c, src, mask: self.fns.decode(g, p, c, src, mask, task.max_len)
        hyps, refs = decode.translate(fn, s.params, s.consts, task.bleu, task.vocab, task.references, task.strip_bpe)
        return {"valid/bleu": decode.corpus_bleu(hyps, refs)}

    def diagnostics(self) -> dict:
        """On the first validation batch: the same probe at every step, one compiled shape."""
        s = self.state
        out = self.fns.diag(
            self.spec.graphdef, self.task.kind, s.params, s.consts, self.device_batch(self.task.valid.batch(0))
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
            rec |= self.diagnostics()
        if len(rec) > 1 and self.main:
            self.log.write_scalars(step, {k: v for k, v in rec.items() if k != "step"})
        self.last = rec if len(rec) > 1 else self.last
        return rec

    def save(self, step: int) -> None:
        self.ckpt.save(step, self.state, step)

    def finish(self, step: int, diverged_at: int) -> dict:
        """Writes summary.json (outcome "ok" or "diverged" at a step) and closes the job's files."""
        elapsed = time.time() - self.t0
        log = records.read_jsonl(os.path.join(self.workdir, metric_writers.METRICS_FILE))
        valid = [r["valid/nll"] for r in log if r.get("valid/nll") is not None]
        summary = records.to_jsonable(
            {
                "outcome": "diverged" if diverged_at >= 0 else "ok",
                "diverged_step": diverged_at if diverged_at >= 0 else None,
                "steps": step,
                "final": {k: v for k, v in self.last.items() if not k.startswith("diag/")},
                "best_valid_nll": min(valid, default=None),
                "wall_time_s": elapsed,
                "steps_per_s": (step - self.start) / max(elapsed, 1e-9),
            }
        )
        if self.main:
            records.write_json(os.path.join(self.workdir, "summary.json"), summary)
        self.ckpt.close()
        self.log.close()
        return summary
