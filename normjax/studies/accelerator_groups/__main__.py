"""Reads the accelerator cell groups' run folders and judges them (claims S5 at 12 layers, X7 at 6-6 layers).

  python -m normjax.studies.accelerator_groups --config=:standard --workdir=results

DIR = WORKDIR/accelerator_groups holds one folder per group (`scripts/accelerator_check.sh GROUP` trains one
there, on any machine; copy a group's folder in from another machine to merge it). The study trains nothing: it
summarizes what the folders hold into DIR/results.json, so it is computed again on every call (a group that
arrived since is read; a group that has not run is a 'not testable' row saying it waits for a device).
"""

from normjax.experiments import common
from normjax.studies import runner, schema
from normjax.studies.accelerator_groups import STUDY


def validate(args: common.Args, num_devices: int) -> dict:
    schema.validate(STUDY, args.config)
    return args.config.to_dict()


def run(args: common.Args) -> None:
    runner.run_study(
        STUDY.name, args.workdir, args.config, STUDY.compute, STUDY.plot, force=True, provenance=args.provenance
    )


EXPERIMENT = common.Experiment(STUDY.name, common.STUDY, validate, run, STUDY.config_path)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
