"""Metric writers in the style of clu.metric_writers: one interface; JSONL, TensorBoard and W&B backends."""

from __future__ import annotations

import abc
import hashlib
import importlib.util
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from absl import logging

from normjax.train import records
from normjax.train.config_io import ConfigError

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tb"
HPARAM_METRICS = ("train/loss", "valid/nll")  # the columns of TensorBoard's HParams table


class MetricWriter(abc.ABC):
    """Writes a run's metrics somewhere; closes itself as a context manager (flush on exit).

    `write_scalars(step, scalars)` takes numbers, or 1-D arrays of one value per layer (the per-layer
    diagnostics `diag/*`). The JSONL backend stores them as given; the others write one scalar per layer.
    """

    @abc.abstractmethod
    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        """Writes the values of `step` (numbers or per-layer vectors)."""

    @abc.abstractmethod
    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        """Writes the run's hyperparameters (a nested dict, e.g. the run config)."""

    def rewind(self, step: int) -> None:  # noqa: B027  (optional hook, no-op by default)
        """Forgets what was written after `step` (a run resuming from its checkpoint at `step`; -1: all)."""

    def flush(self) -> None:  # noqa: B027
        """Makes everything written so far durable or visible."""

    def close(self) -> None:
        """Flushes and releases the backend."""
        self.flush()

    def __enter__(self) -> MetricWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def per_layer_scalars(scalars: Mapping[str, Any]) -> dict[str, float]:
    """One float per tag: a vector value `v` under `key` becomes `key/layer_00`, `key/layer_01`, ...

    None (a non-finite value after JSON conversion) becomes NaN. Raises ValueError on arrays of rank > 1.
    """
    out = {}
    for key, value in scalars.items():
        v = np.asarray(np.nan if value is None else value, dtype=np.float64)
        if v.ndim == 0:
            out[key] = float(v)
        elif v.ndim == 1:
            width = len(str(max(v.size - 1, 0)))
            out |= {f"{key}/layer_{i:0{width}d}": float(x) for i, x in enumerate(v)}
        else:
            raise ValueError(f"metric {key!r} has shape {v.shape}; expected a number or one value per layer")
    return out


def flat_hparams(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, str | bool | int | float]:
    """A nested config as flat `section/key` -> str, bool, int or float (sequences as their str; None dropped)."""
    out = {}
    for key, value in hparams.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flat_hparams(value, f"{name}/")
        elif isinstance(value, str | bool | int | float):
            out[name] = value
        elif value is not None:
            out[name] = str(list(value)) if isinstance(value, Sequence) else str(value)
    return out


class JsonlWriter(MetricWriter):
    """metrics.jsonl (records.MetricsLog): each record appended with flush + fsync, so a crash loses at
    most a torn last line, which readers skip. Per-layer vectors stay lists. Hyperparameters are not
    repeated here: the run's config.json holds them."""

    def __init__(self, path: str, logged_steps: Callable[[int], list[int]] | None = None):
        self.path, self.logged_steps = path, logged_steps
        self.log = records.MetricsLog(path)

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        self.log.append({"step": step, **scalars})

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        del hparams  # config.json

    def rewind(self, step: int) -> None:
        """Cuts the log back to `step`; with `logged_steps` (the steps 0..step that must have a record) a
        log that lacks or garbles one of them is an error naming the file and line, never silently cut."""
        want = self.logged_steps(step) if self.logged_steps else [r["step"] for r in records.read_jsonl(self.path)]
        self.log.cut_back(step, [s for s in want if s <= step])


class TensorBoardWriter(MetricWriter):
    """TensorBoard event files through tensorboardX (numpy + protobuf; no torch or TensorFlow).

    A rewind to step s opens a new event file that purges steps > s from TensorBoard's view (a resumed
    run's replayed steps do not show twice).
    """

    def __init__(self, logdir: str, hparam_metrics: Sequence[str] = HPARAM_METRICS):
        from tensorboardX import SummaryWriter

        self.logdir, self.hparam_metrics, self._make = logdir, tuple(hparam_metrics), SummaryWriter
        self._writer, self._hparams = None, ()

    def _open(self, purge_step: int | None = None):
        if self._writer is None or purge_step is not None:
            if self._writer is not None:
                self._writer.close()
            # tensorboardX names files by the second and opens them with "wb": a unique, ordered suffix
            # keeps a writer reopened within the same second from overwriting the file before
            suffix = f".{time.time_ns()}"
            self._writer = self._make(self.logdir, purge_step=purge_step, flush_secs=30, filename_suffix=suffix)
            for summary in self._hparams[:2]:  # a purge hides the file before: write them again
                self._writer.file_writer.add_summary(summary)
        return self._writer

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        writer = self._open()
        for tag, value in per_layer_scalars(scalars).items():
            writer.add_scalar(tag, value, step)
        writer.flush()  # one record per logged step: on disk before the next, as metrics.jsonl

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        from tensorboardX.summary import hparams as hparams_summaries

        self._hparams = hparams_summaries(flat_hparams(hparams), dict.fromkeys(self.hparam_metrics, math.nan))
        if self._writer is not None:  # else written when the event file opens
            for summary in self._hparams[:2]:
                self._writer.file_writer.add_summary(summary)

    def rewind(self, step: int) -> None:
        self._open(purge_step=step + 1)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._hparams:
            self._open().file_writer.add_summary(self._hparams[2])  # session end
            self._hparams = ()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbWriter(MetricWriter):
    """A Weights & Biases run (needs `wandb`), started at the first write. Its id comes from the workdir,
    so a resumed run continues the same W&B run; W&B keeps steps it already has (a rewind logs a warning)."""

    def __init__(self, project: str, workdir: str):
        self.project, self.workdir = project, os.path.abspath(workdir)
        self.id = hashlib.sha256(self.workdir.encode()).hexdigest()[:16]
        self._run = None

    @property
    def run(self):
        if self._run is None:
            import wandb

            name = os.path.basename(self.workdir.rstrip(os.sep))
            self._run = wandb.init(project=self.project, dir=self.workdir, name=name, id=self.id, resume="allow")
        return self._run

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        self.run.log(per_layer_scalars(scalars), step=step)

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        self.run.config.update(flat_hparams(hparams), allow_val_change=True)

    def rewind(self, step: int) -> None:
        if step >= 0:
            logging.warning("wandb: run %s resumes at step %d; W&B ignores steps it already has", self.id, step)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


class LoggingWriter(MetricWriter):
    """Writes scalars to the absl log (clu's `just_logging` writer, for processes other than the first)."""

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        logging.info("step %d: %s", step, ", ".join(f"{k}={v:.6g}" for k, v in per_layer_scalars(scalars).items()))

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        logging.info("hparams: %s", flat_hparams(hparams))


class MultiWriter(MetricWriter):
    """Writes to every writer in order (the first is the one that must not fail: the JSONL log)."""

    def __init__(self, writers: Sequence[MetricWriter]):
        self.writers = list(writers)

    def __iter__(self) -> Iterator[MetricWriter]:
        return iter(self.writers)

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        for w in self.writers:
            w.write_scalars(step, scalars)

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        for w in self.writers:
            w.write_hparams(hparams)

    def rewind(self, step: int) -> None:
        for w in self.writers:
            w.rewind(step)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()

    def close(self) -> None:
        for w in self.writers:
            w.close()


def _require(module: str, option: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"{option} needs the `{module}` package, which is not installed (pip install {module})")


def create_default_writer(
    workdir: str,
    *,
    tensorboard: bool = False,
    wandb_project: str = "",
    just_logging: bool = False,
    logged_steps: Callable[[int], list[int]] | None = None,
) -> MetricWriter:
    """The writers of one run in `workdir`: metrics.jsonl always, tb/ events and a W&B run when asked.

    Nothing is opened or written before the first call on the writer.

    Args:
      workdir: the run's folder.
      tensorboard: also write TensorBoard events under `workdir`/tb.
      wandb_project: also log to this W&B project ("" = off).
      just_logging: only log (processes other than the first of a multi-host run write no files).
      logged_steps: the steps 0..s that must have a metrics.jsonl record when the run resumes at step s
        (checked by `rewind`); None: the records there are taken as they are.

    Raises:
      ConfigError: a requested backend is not installed (checked before anything is opened).
    """
    if tensorboard:
        _require("tensorboardX", "train.tensorboard=True")
    if wandb_project:
        _require("wandb", f"train.wandb_project={wandb_project!r}")
    if just_logging:
        return LoggingWriter()
    writers: list[MetricWriter] = [JsonlWriter(os.path.join(workdir, METRICS_FILE), logged_steps)]
    if tensorboard:
        writers.append(TensorBoardWriter(os.path.join(workdir, TENSORBOARD_DIR)))
    if wandb_project:
        writers.append(WandbWriter(wandb_project, workdir))
    return MultiWriter(writers)
