"""What every study main shares: the --config/--workdir/--force flags and the resumable run."""

from __future__ import annotations

from absl import app, flags
from ml_collections import config_flags

from normjax import train
from normjax.studies import runner

_WORKDIR = flags.DEFINE_string("workdir", "results", "Output root; results go to WORKDIR/<name>/.")
_FORCE = flags.DEFINE_bool("force", False, "Recompute even if WORKDIR/<name>/results.json is current.")


def define_config(name: str):
    """The --config flag of experiment `name`, defaulting to its quick preset."""
    return config_flags.DEFINE_config_file(
        "config",
        f"experiments/configs/{name}.py:quick",
        f"Config file and preset (:quick or :paper) of {name}.",
        lock_config=True,
    )


def run_main(name: str, config_flag, study) -> None:
    """app.run a study module's compute/plot on the flags."""

    def main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
        with train.exit_on_config_error():
            runner.run_study(name, _WORKDIR.value, config_flag.value, study.compute, study.plot, force=_FORCE.value)

    app.run(main)


def preset(arg: str, presets: dict):
    """presets[arg]() with a clear error naming the valid presets."""
    if arg not in presets:
        raise ValueError(f"unknown preset {arg!r}: valid presets are {', '.join(presets)}")
    return presets[arg]()
