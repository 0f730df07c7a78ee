"""Warmup ablation sweep: one subfolder per run, DIR/sweep.json, and an outcome table on stdout.

  python -m experiments.warmup_ablation --config=experiments/configs/warmup_ablation.py:quick \
      --workdir=/tmp/wa [--shard=0/2]

Rerunning skips finished runs and resumes unfinished ones from their last checkpoint.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from normjax import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", "experiments/configs/warmup_ablation.py:quick", "Config file and preset."
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder of the sweep.", required=True)
_SHARD = flags.DEFINE_string("shard", "0/1", "i/n: run only every n-th run, starting at run i.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    num_devices = train.setup_devices(_DISTRIBUTED.value)
    with train.exit_on_config_error():
        runs = train.expand(_CONFIG.value, num_devices)
        shard = train.parse_shard(_SHARD.value)
        result = train.run_sweep(runs, _WORKDIR.value, shard, vmap=_CONFIG.value.sweep.vmap,
                                 progress=_PROGRESS.value)
    print(train.format_table(result))


if __name__ == "__main__":
    app.run(main, flags_parser=train.parse_flags)
