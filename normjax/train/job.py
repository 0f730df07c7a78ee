"""One run's bookkeeping: data, model, train state, metrics log, evals, checkpoints and summary."""

import contextlib
import functools
import logging
import math
import os
import shutil
import time
import types

import jax
import numpy as np
from flax import nnx

import normjax
from normjax import io
from normjax.train import compile_cache, completep, decode, metric_writers, records, sharding, steps
from normjax.train.batching import BatchSpec
from normjax.train.checkpoint import REJECTED, Checkpointer, fingerprint
from normjax.train.config_io import ConfigError, RunConfig, TrainConfig, divergence_loss, model_config
from normjax.train.config_schema import HPARAM_FIELDS
from normjax.train.optimizers import OptimizerSpec
from normjax.train.outcomes import OUTCOMES, classify, stall_level
from normjax.train.tasks import Task, load_task, unigram_nll


@functools.cache
def compiled() -> types.SimpleNamespace:
    """The jitted steps, shared by every run in this process: a sweep compiles once per shape.

    Turns on JAX's persistent compilation cache first where it is on (compile_cache: accelerators, or opt-in).
    The train steps donate their state (no second copy of params and optimizer state) on accelerators
    only: on the CPU, donation made the sweep benchmark's step 28-29 ms instead of 22 (benchmarks/README.md).
    """
    compile_cache.enable_compilation_cache()
    donate = () if jax.default_backend() == "cpu" else (1,)
    return types.SimpleNamespace(
        train=jax.jit(steps.train_step, static_argnums=0, donate_argnums=donate),
        vtrain=jax.jit(steps.vmapped_train_step, static_argnums=0, donate_argnums=donate),
        eval=jax.jit(steps.eval_step, static_argnums=(0, 1)),
        diag=jax.jit(steps.diagnostics, static_argnums=(0, 1)),
        decode=jax.jit(decode.greedy_decode, static_argnums=(0, 5)),
    )


def train_hparams(train: TrainConfig, d_model: int, vocab_size: int) -> dict:
    """The traced hyperparameters (steps.HPARAMS) of `train` for a model of width `d_model` and vocabulary size
    `vocab_size`: each the value of its TrainConfig field (config_schema.HPARAM_FIELDS); noam_d_model 0 reads
    `d_model`, divergence_loss 0 reads 1.5 ln(vocab_size)."""
    values = {name: getattr(train, field) for name, field in HPARAM_FIELDS.items()}
    return values | {"d_model": train.noam_d_model or d_model, "divergence_loss": divergence_loss(train, vocab_size)}


def hparams(run: RunConfig, cfg: normjax.ModelConfig) -> dict:
    """The traced hyperparameters of a run (train_hparams of its train config and resolved model)."""
    return train_hparams(run.train, cfg.d_model, cfg.vocab_size)


def step_spec(run: RunConfig, model: nnx.Module, kind: str) -> steps.StepSpec:
    t = run.train
    cp = completep.from_model(model.cfg, t.base_width) if t.parametrization == "completep" else None
    opt = OptimizerSpec(t.optimizer, t.b1, t.b2, t.eps, t.momentum, t.nesterov, cp)
    return steps.StepSpec(nnx.graphdef(model), kind, t.schedule, opt)


def prepare(run: RunConfig, num_devices: int = 1) -> tuple[Task, normjax.ModelConfig]:
    """The run's data and resolved ModelConfig (raises ConfigError before anything is written)."""
    batch = BatchSpec(run.train.batch_size, run.train.max_tokens, row_multiple=num_devices)
    task = load_task(run.data, batch, run.train.seed, run.train.bleu_examples)
    return task, model_config(run, len(task.vocab))


def _as_saved(run: RunConfig, saved) -> dict:
    """`run`'s config as its config.json would hold it: vocab_size / max_len "from the data" (0) taken from
    `saved` (the config.json found), the model fields normalized by ModelConfig."""
    model, saved_model = dict(run.model), saved.get("model") if isinstance(saved, dict) else None
    for key in ("vocab_size", "max_len"):
        if not model[key] and isinstance(saved_model, dict) and isinstance(saved_model.get(key), int):
            model[key] = saved_model[key]
    with contextlib.suppress(TypeError, ValueError):  # left as it is when "from the data" is still unknown
        model = normjax.ModelConfig(**model).to_dict()
    return run.to_dict() | {"model": model}


def check_config(workdir: str, wanted: dict | RunConfig) -> None:
    """Raises ConfigError naming the differing keys when `workdir` holds a run of another config.

    Args:
      wanted: the resolved config (config.json's content), or a RunConfig whose model may take its vocab
        size and max length from the data.
    """
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    saved = records.read_json(path)
    wanted = _as_saved(wanted, saved) if isinstance(wanted, RunConfig) else wanted
    if diffs := io.config_diff(saved, wanted):
        raise ConfigError(
            f"{workdir} holds a run of another config ({io.describe_diff(diffs)}); rerun with --force to"
            " recompute it, or use another --workdir"
        )


def _number(value) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


NUMBERS = ("diverged_step", "unigram_nll", "stall_nll", "best_valid_nll", "wall_time_s", "steps_per_s")


def _summary_problem(summary) -> str | None:
    """Why `summary` is not a complete summary (a field missing, or not a number where one belongs); None if it is."""
    if not isinstance(summary, dict) or summary.get("outcome") not in OUTCOMES:
        return "no valid outcome"
    if not isinstance(summary.get("steps"), int) or isinstance(summary["steps"], bool):
        return "no step count"
    final = summary.get("final", {})
    if not isinstance(final, dict):
        return "final is not a dict"
    numbers = {k: summary[k] for k in NUMBERS if k in summary} | {f"final.{k}": v for k, v in final.items()}
    bad = [k for k, v in numbers.items() if not _number(v)]
    return f"{bad[0]}={numbers[bad[0]]!r} is not a number" if bad else None


def _load_summary(path: str) -> tuple[dict | None, str | None]:
    """(summary, None) for a complete summary.json; (None, why not) for a damaged, edited or incomplete one."""
    try:
        summary = records.read_json(path)
    except io.WorkdirError as e:
        return None, f"{path} is not a complete summary: {e}"
    problem = _summary_problem(summary)
    return (None, f"{path} is not a complete summary ({problem})") if problem else (summary, None)


def read_summary(workdir: str) -> dict | None:
    """WORKDIR/summary.json if it is a complete summary; None (with a warning if it is damaged) otherwise."""
    path = os.path.join(workdir, "summary.json")
    if not os.path.exists(path):
        return None
    summary, problem = _load_summary(path)
    if problem:
        logging.warning("%s; the run is not finished", problem)
    return summary


def set_aside_damaged(workdir: str) -> None:
    """Under the run's lock: a metrics.jsonl that fails its checksum is set aside (io.set_aside) with the
    summary and checkpoints built after it (the run is trained again from step 0); a damaged, edited or
    incomplete summary.json is set aside (the run resumes from its newest checkpoint)."""
    summary = os.path.join(workdir, "summary.json")
    try:
        records.read_jsonl(os.path.join(workdir, metric_writers.METRICS_FILE))
    except io.ChecksumError as e:
        io.set_aside(os.path.join(workdir, metric_writers.METRICS_FILE), str(e))
        for name in ("summary.json", "checkpoints"):
            if os.path.exists(os.path.join(workdir, name)):
                io.set_aside(os.path.join(workdir, name), f"{os.path.join(workdir, name)} was built from it")
        return
    except io.CorruptFileError:
        pass  # other damage stops the run when it resumes (records.check_steps), naming the line
    if os.path.exists(summary) and (problem := _load_summary(summary)[1]):
        io.set_aside(summary, problem)


def with_unigram(workdir: str, run: RunConfig, summary: dict) -> dict:
    """`summary` with `unigram_nll` and an outcome judged against it; a summary written before the stalled
    outcome existed (no `unigram_nll`) is judged from its final validation nll and rewritten, with a warning.

    Raises:
      WorkdirError: when such an old summary has no final valid/nll to judge (retrain it with --force).
    """
    if "unigram_nll" in summary:
        return summary
    path = os.path.join(workdir, "summary.json")
    level = unigram_nll(prepare(run)[0].train)
    try:
        outcome = classify(summary["outcome"] == "diverged", summary.get("final", {}).get("valid/nll"), level)
    except ValueError as e:
        raise io.WorkdirError(f"{path} predates the 'stalled' outcome and {e}; rerun with --force") from None
    logging.warning(
        "%s predates the 'stalled' outcome: judged now from its final valid/nll against the unigram level %.3f"
        " (outcome %s -> %s) and rewritten",
        path,
        level,
        summary["outcome"],
        outcome,
    )
    summary = summary | {"outcome": outcome, "unigram_nll": level, "stall_nll": stall_level(level)}
    if jax.process_index() == 0:
        records.write_json(path, summary)
    return summary


def logged_steps(train: TrainConfig, upto: int) -> list[int]:
    """The steps 0..upto that have a metrics record (the record points of the loop, before the last step)."""
    return [
        s
        for s in range(upto + 1)
        if s % train.log_every == 0 or s % train.eval_every == 0 or (train.diag_every and s % train.diag_every == 0)
    ]


def finished_summary(workdir: str, run: RunConfig) -> dict | None:
    """The summary of a finished run of `run`'s config in `workdir`, or None.

    Raises:
      ConfigError: naming the differing keys when `workdir` holds a run of another config.
      CorruptFileError: naming the file and line when the finished run's metrics.jsonl is damaged or cut.
    """
    check_config(workdir, run)
    if not os.path.exists(os.path.join(workdir, "config.json")):
        return None
    summary = read_summary(workdir)
    if summary is not None:  # its log must be whole: a finished run is read, never retrained
        path = os.path.join(workdir, "metrics.jsonl")
        want = logged_steps(run.train, summary["steps"] - 1) + [summary["steps"]]
        try:
            log = records.read_jsonl(path)
        except io.ChecksumError:
            return None  # an edited log: set aside and trained again under the run's lock (Job)
        records.check_steps(path, log, summary["steps"], want)
        summary = with_unigram(workdir, run, summary)
    return summary


def clear_run(workdir: str) -> None:
    """Deletes a run's own files (summary first, so it is never seen finished half-deleted); --force."""
    for name in ("summary.json", "config.json", "metrics.jsonl"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(workdir, name))
    for name in ("checkpoints", REJECTED, "tb"):
        shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)


def device_record(cfg: normjax.ModelConfig) -> dict:
    """Where and in which precision a run trained: the backend, the device kind and count, the model's dtypes and
    JAX's default matmul precision (None: the backend's default, which on recent GPUs runs float32 matmuls in TF32)."""
    return {
        "backend": jax.default_backend(),
        "kind": jax.devices()[0].device_kind,
        "count": jax.device_count(),
        "dtype": cfg.dtype,
        "param_dtype": cfg.param_dtype,
        "matmul_precision": jax.config.jax_default_matmul_precision,
    }


class Job:
    """One run in `workdir`: builds its state, resumes it, logs, evaluates, checkpoints, summarizes.

    Holds the lock of `workdir` from construction to finish() or close(); `done` is the summary when the
    run turned out to be finished already (another process finished it).
    """

    def __init__(self, run: RunConfig, workdir: str, mesh, force: bool = False):
        self.run, self.workdir, self.mesh = run, workdir, mesh
        self.task, cfg = prepare(run, mesh.size)
        self.cfg = cfg
        self.main = jax.process_index() == 0
        config = records.to_jsonable(run.to_dict() | {"model": cfg.to_dict()})
        t = run.train
        self.log = metric_writers.create_default_writer(  # a missing backend fails here, before any write
            workdir,
            tensorboard=t.tensorboard,
            wandb_project=t.wandb_project,
            just_logging=not self.main,
            logged_steps=lambda last: logged_steps(t, last),
        )
        self.lock = io.FolderLock(workdir) if self.main else None
        try:
            self.done = self._claim(config, force) if self.main else None
            if self.done is None:
                self._build(cfg, config)
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: normjax.ModelConfig, config: dict) -> None:
        run, workdir = self.run, self.workdir
        self.fns = compiled()
        model = normjax.Transformer(cfg, rngs=nnx.Rngs(run.train.seed))
        self.spec = step_spec(run, model, self.task.kind)
        state = steps.init_state(self.spec, model, run.train.seed, hparams(run, cfg))
        self.state = sharding.replicate(state, self.mesh)
        if self.main:
            self.log.write_hparams(config)
        ckpt_dir = os.path.join(workdir, "checkpoints")
        self.ckpt = Checkpointer(ckpt_dir, run.train.keep_checkpoints, fingerprint(config))
        self.start, self.last, self.t0 = 0, {}, time.time()

    def _claim(self, config: dict, force: bool) -> dict | None:
        """Under the lock: the summary if finished, else writes config.json (clearing the run with `force`)."""
        io.remove_stale_tmp(self.workdir)
        if force:
            clear_run(self.workdir)
        set_aside_damaged(self.workdir)
        check_config(self.workdir, config)
        path = os.path.join(self.workdir, "config.json")
        if os.path.exists(path) and (done := read_summary(self.workdir)) is not None:
            return with_unigram(self.workdir, self.run, done)
        records.write_json(path, config)
        return None

    def resume(self) -> int:
        """Restores the newest intact checkpoint (if any), cuts metrics.jsonl back to it; returns its step.

        Raises:
          WorkdirError: when metrics.jsonl is damaged or lacks records up to the checkpoint (naming the line).
        """
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
        return {f"{task.bleu_split}/bleu": decode.corpus_bleu(hyps, refs)}

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
        """Writes summary.json (outcome "ok", "stalled" or "diverged" at a step) and closes the job's files."""
        elapsed = time.time() - self.t0
        log = records.read_jsonl(os.path.join(self.workdir, metric_writers.METRICS_FILE))
        valid = [r["valid/nll"] for r in log if r.get("valid/nll") is not None]
        level = unigram_nll(self.task.train)
        outcome = classify(diverged_at >= 0, self.last.get("valid/nll"), level)
        if outcome == "diverged" and diverged_at < 0:  # a non-finite final validation nll
            diverged_at = step
        summary = records.to_jsonable(
            {
                "outcome": outcome,
                "diverged_step": diverged_at if diverged_at >= 0 else None,
                "unigram_nll": level,
                "stall_nll": stall_level(level),
                "steps": step,
                "final": {k: v for k, v in self.last.items() if not k.startswith("diag/")},
                "best_valid_nll": min(valid, default=None),
                "wall_time_s": elapsed,
                "steps_per_s": (step - self.start) / max(elapsed, 1e-9),
                "device": device_record(self.cfg),
            }
            | ({"data": self.task.record} if self.task.record else {})
        )
        if self.main:
            records.write_json(os.path.join(self.workdir, "summary.json"), summary)
        self.close()
        return summary

    def close(self) -> None:
        """Closes the checkpointer and the log and releases the workdir's lock (idempotent)."""
        try:
            if getattr(self, "ckpt", None) is not None:  # on every exit path, a Ctrl-C too (run_group's finally)
                ckpt, self.ckpt = self.ckpt, None
                ckpt.close()
        finally:
            try:
                if getattr(self, "log", None) is not None:
                    self.log.close()
            finally:
                if self.lock is not None:
                    self.lock.release()
