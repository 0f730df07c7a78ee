"""answer's absl main: python -m normjax.studies.answer --config=:quick --workdir=results

Every run of the grids is checked (config, data, memory) before any compute; the sweep's runs go to
WORKDIR/answer/<run>, the quality seeds are added once the window ran, and results.json holds every curve.
"""

from normjax import train
from normjax.experiments import common
from normjax.studies import runner
from normjax.studies.answer import STUDY, measure
from normjax.train import job, memory
from normjax.train.config_io import as_dict


def validate(args: common.Args, num_devices: int) -> dict:
    config = args.config
    runs = train.expand(measure.sweep_config(config), num_devices) + measure.sharpness_runs(config)
    for r in runs:
        memory.check_run_fits(r.run, job.prepare(r.run, num_devices)[1])
    return as_dict(config)


def run(args: common.Args) -> None:
    runner.run_study(
        STUDY.name, args.workdir, args.config, STUDY.compute, STUDY.plot, force=args.force, provenance=args.provenance
    )


EXPERIMENT = common.Experiment(STUDY.name, common.STUDY, validate, run, STUDY.config_path)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
