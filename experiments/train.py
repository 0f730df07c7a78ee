"""Runs one training job and writes config.json, metrics.jsonl, summary.json and checkpoints.

  python -m experiments.train --config=experiments/configs/train.py:quick --workdir=/tmp/run \
      [--config.train.lr=1e-3] [--distributed]

Rerunning with the same --workdir resumes from the last intact checkpoint (or does nothing once finished);
a workdir of another config is refused (exit 2, naming the keys) unless --force.
"""

import json

from absl import app, flags, logging
from ml_collections import config_flags

from normjax import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", "experiments/configs/train.py:quick", "Config file and preset.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder of the run.", required=True)
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")
_FORCE = flags.DEFINE_bool("force", False, "Delete what --workdir holds of this run and train it from step 0.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    num_devices = train.setup_devices(_DISTRIBUTED.value)
    with train.exit_on_config_error():
        run = train.parse(_CONFIG.value, num_devices)
        summary = train.run_job(run, _WORKDIR.value, force=_FORCE.value, progress=_PROGRESS.value)
    print(json.dumps(summary, indent=2, sort_keys=True))


if __name__ == "__main__":
    app.run(main, flags_parser=train.parse_flags)
