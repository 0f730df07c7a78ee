"""Warmup ablation (claims S5, X7, X8, R7): the lr x warmup x placement grid, its figures and verdicts.

  python -m experiments.warmup_ablation --config=experiments/configs/warmup_ablation.py:quick \
      --workdir=results/warmup_ablation [--shard=0/2] [--force]

DIR (--workdir) receives one subfolder per run, DIR/sweep.json, and once every run is done
DIR/results.json with loss curves and heat maps. Rerunning skips finished runs and resumes unfinished
ones from their last checkpoint; with --shard=i/n only every n-th run is trained, and the analysis runs
when the last shard finds every run done.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from normjax import train
from normjax.studies import runner, warmup_ablation

_CONFIG = config_flags.DEFINE_config_file(
    "config", "experiments/configs/warmup_ablation.py:quick", "Config file and preset."
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder of the sweep.", required=True)
_SHARD = flags.DEFINE_string("shard", "0/1", "i/n: run only every n-th run, starting at run i.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
_FORCE = flags.DEFINE_bool("force", False, "Retrain this shard's runs and recompute the analysis.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    train.setup_devices(_DISTRIBUTED.value)
    with train.exit_on_config_error():
        shard = train.parse_shard(_SHARD.value)
        result = warmup_ablation.run_grid(
            _CONFIG.value, _WORKDIR.value, shard, progress=_PROGRESS.value, force=_FORCE.value
        )
        print(train.format_table(result))
        if all(run["status"] == "done" for run in result["runs"]):
            runner.run_study(
                "warmup_ablation",
                "",
                _CONFIG.value,
                warmup_ablation.compute,
                warmup_ablation.plot,
                force=_FORCE.value,
                folder=_WORKDIR.value,
            )


if __name__ == "__main__":
    app.run(main, flags_parser=train.parse_flags)
