"""Warmup ablation (claims S5, X7, X8, R7): the lr x warmup x placement grid and its arms, figures, verdicts.

  python -m normjax.studies.warmup_ablation --config=:quick --workdir=results [--shard=0/2] [--force]

DIR = WORKDIR/warmup_ablation (as for every study) receives one subfolder per run, DIR/sweep.json, and once every
run is done DIR/results.json with loss curves and heat maps. Rerunning skips finished runs and resumes unfinished
ones from their last checkpoint; with --shard=i/n only every n-th run is trained, and the analysis runs
when the last shard finds every run done. An override of a swept key (--config.train.lr=1e-3) replaces
that axis by the one value in the main grid and every sub-grid (config.sweep.grids); --config.train.seed=s
shifts every seed axis to s, s+1, s+2 (the seed count stays).
"""

import os
import sys

from normjax import train
from normjax.experiments import common
from normjax.studies import runner
from normjax.studies.warmup_ablation import STUDY, measure
from normjax.train import job, memory
from normjax.train.config_io import ConfigError, as_dict

AXES = ("model.placement", "train.lr", "train.warmup_steps")  # the heat maps' rows, columns and panels


def _axes(config) -> dict:
    """name -> axes of the main grid ("") and of every sub-grid (config.sweep.grids)."""
    grids = dict(config.sweep.get("grids", {}))
    return {"": config.sweep.axes} | {name: grids[name] for name in grids}


def grid(args: common.Args, note: bool = False):
    """The config with every swept key that was overridden on the command line as a one-value axis (in the main
    grid and every sub-grid); an overridden train.seed instead shifts each seed axis to start at that seed."""
    config = args.config.copy_and_resolve_references()
    for name, axes in _axes(config).items():
        for key in sorted(set(args.overrides) & set(axes)):
            section, _, field = key.partition(".")
            value, axis = config[section][field], list(axes[key])
            new = [value + k for k in range(len(axis))] if key == "train.seed" else [value]
            if note:
                where = f"sweep grid {name}" if name else "sweep axis"
                print(f"note: --config.{key}={value!r} replaces the {where} {key}={axis} by {new}", file=sys.stderr)
            axes[key] = new
    return config


def validate(args: common.Args, num_devices: int) -> dict:
    """Every run of the grid checked (config, data, memory) and the axes the analysis needs."""
    config = grid(args)
    missing = [a for a in AXES if a not in config.sweep.axes]
    if missing:
        raise ConfigError(f"config.sweep.axes needs {', '.join(AXES)} for the heat maps; missing {', '.join(missing)}")
    train.parse_shard(args.shard)
    for r in train.expand(config, num_devices):
        memory.check_run_fits(r.run, job.prepare(r.run, num_devices)[1])
    return as_dict(config)


def run(args: common.Args) -> None:
    config = grid(args, note=True)
    shard = train.parse_shard(args.shard)
    folder = os.path.join(args.workdir, STUDY.name)
    result = measure.run_grid(config, folder, shard, progress=args.progress, force=args.force)
    print(train.format_table(result))
    if all(r["status"] == "done" for r in result["runs"]):
        runner.run_study(
            STUDY.name,
            args.workdir,
            config,
            STUDY.compute,
            STUDY.plot,
            force=args.force,
            folder=folder,
            wait=True,
            provenance=args.provenance,
        )


EXPERIMENT = common.Experiment(STUDY.name, common.SWEEP, validate, run, STUDY.config_path)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
