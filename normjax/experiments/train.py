"""Runs one training job and writes config.json, metrics.jsonl, summary.json and checkpoints.

  python -m normjax.experiments.train --config=:quick --workdir=/tmp/run \
      [--config.train.lr=1e-3] [--distributed] [--print_config] [--force]

Rerunning with the same --workdir resumes from the last intact checkpoint (or does nothing once finished);
a workdir of another config is refused (exit 2, naming the keys) unless --force. In the repository
`python -m experiments.train` is an alias.
"""

import json
import os

import jax

from normjax import train
from normjax.experiments import common
from normjax.train import job, memory, presets


def validate(args: common.Args, num_devices: int) -> dict:
    """The config, data and memory checks of a run; returns what config.json will hold."""
    run = train.parse(args.config, num_devices)
    _, cfg = job.prepare(run, num_devices)
    memory.check_run_fits(run, cfg)
    return run.to_dict() | {"model": cfg.to_dict()}


def run(args: common.Args) -> None:
    run_config = train.parse(args.config, jax.device_count())
    summary = train.run_job(run_config, args.workdir, force=args.force, progress=args.progress)
    print(json.dumps(summary, indent=2, sort_keys=True))


EXPERIMENT = common.Experiment("train", common.TRAIN, validate, run, os.path.abspath(presets.__file__))

if __name__ == "__main__":
    common.launch(EXPERIMENT)
