"""A sweep main (kind SWEEP) over the fault config: two lrs, two worker processes, long enough to interrupt."""

import os

from faults.fault_runs import fault_config

from normjax.experiments import common
from normjax.train import presets
from normjax.train.sweep import expand, run_sweep


def run(args: common.Args) -> None:
    config = fault_config(train__num_steps=100_000) | {"sweep": {"axes": {"train.lr": [1e-3, 2e-3]}}}
    run_sweep(expand(config), os.path.join(args.workdir, "sweep"), progress=False, workers=2)


EXPERIMENT = common.Experiment("sweep", common.SWEEP, lambda args, n: {}, run, os.path.abspath(presets.__file__))

if __name__ == "__main__":
    common.launch(EXPERIMENT)
