"""Fault injection helpers: the tiny fault config, training it in-process or by the CLI, comparing runs."""

import os
import pathlib
import sys
import time

from normjax.studies import runner
from normjax.train import records
from normjax.train.config_io import default_config, parse, set_path
from normjax.train.loop import run_job

ROOT = pathlib.Path(__file__).resolve().parents[2]
# 30 steps, a record and a checkpoint every 10: a finished run keeps checkpoints 10 and 20
FAULT_TINY = {
    "model.d_model": 16,
    "model.num_heads": 2,
    "model.d_ff": 32,
    "model.num_layers": 1,
    "model.placement": "post",
    "data.max_len": 12,
    "data.num_train": 200,
    "data.num_valid": 16,
    "data.num_test": 8,
    "train.batch_size": 8,
    "train.lr": 3e-3,
    "train.schedule": "constant",
    "train.warmup_steps": 5,
    "train.num_steps": 30,
    "train.log_every": 10,
    "train.eval_every": 10,
    "train.checkpoint_every": 10,
    "train.bleu_examples": 0,
    "train.divergence_check_every": 5,
}


def fault_config(**overrides) -> dict:
    """The fault-injection config as a nested dict, with `section__key=value` overrides."""
    values = default_config().to_dict()
    values.pop("sweep")
    for key, value in (FAULT_TINY | {k.replace("__", "."): v for k, v in overrides.items()}).items():
        values = set_path(values, key, value)
    return values


def train(workdir, **kwargs) -> dict:
    """run_job of the fault config in `workdir` (kwargs: `force`, or config overrides)."""
    force = kwargs.pop("force", False)
    return run_job(parse(fault_config(**kwargs)), str(workdir), force=force, progress=False)


def write_config_file(path: pathlib.Path, **overrides) -> pathlib.Path:
    """A config file for `python -m experiments.train` with the fault config."""
    items = {k: v for k, v in (FAULT_TINY | {k.replace("__", "."): v for k, v in overrides.items()}).items()}
    path.write_text(
        "from normjax.train.config_io import default_config\n\n\n"
        "def get_config(arg=None):\n"
        "    config = default_config()\n"
        f"    for key, value in {items!r}.items():\n"
        "        section, name = key.split('.')\n"
        "        config[section][name] = value\n"
        "    return config\n"
    )
    return path


def train_command(config: pathlib.Path, workdir: pathlib.Path, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "experiments.train",
        f"--config={config}",
        f"--workdir={workdir}",
        "--progress=false",
        *flags,
    ]


def cli_env(tmp_path: pathlib.Path) -> dict:
    """The environment of CLI subprocesses: CPU, a persistent compilation cache shared by a test's processes."""
    return os.environ | {
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "xla"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def assert_same_run(got: pathlib.Path, want: pathlib.Path) -> None:
    """Equal metrics.jsonl and summary.json (timings aside): the run reproduced the uninterrupted one."""
    assert records.read_jsonl(str(got / "metrics.jsonl")) == records.read_jsonl(str(want / "metrics.jsonl"))
    timing = ("wall_time_s", "steps_per_s")
    clean = lambda p: {k: v for k, v in records.read_json(str(p / "summary.json")).items() if k not in timing}
    assert clean(got) == clean(want)


def interrupted_study(workdir, config: dict, compute) -> pathlib.Path:
    """What a run of study "toy" interrupted after computing its pieces leaves: partial/ (its marker and the
    pieces `compute` caches), no results.json; returns partial/."""
    study = runner.StudyDir(str(workdir), "toy", config, runner.code_fingerprint(compute))
    study.open_partial()
    compute(config, study)
    return pathlib.Path(study.path) / "partial"


def hold_lock(folder: str) -> None:
    """A sweep worker's stand-in: takes the lock of `folder`, says so, and works until it is killed."""
    from normjax.io import FolderLock

    lock = FolderLock(folder)
    print(f"worker {os.getpid()} holds {folder}", flush=True)
    while lock:
        time.sleep(0.1)
