"""Per-layer stability table of any model at init: stream, norm inputs, Jacobians, gradients, warnings.

  python -m experiments.diagnose --config=experiments/configs/diagnose.py:quick --workdir=results \
      --config.model.placement=post --config.model.num_layers=12

Writes WORKDIR/diagnose/results.json, table.md and diagnose.png, and prints the table. An invalid model
config prints ModelConfig's message and exits with status 2 before anything is written.
"""

import sys

from absl import app, flags

from experiments import common
from normjax import train
from normjax.studies import diagnose, diagnose_report, runner

_CONFIG = common.define_config("diagnose")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    config = _CONFIG.value
    try:
        diagnose.model_config(config)
    except (TypeError, ValueError) as e:
        print(f"diagnose: invalid config.model: {e}", file=sys.stderr)
        sys.exit(2)
    with train.exit_on_config_error():
        saved = runner.run_study(
            "diagnose", flags.FLAGS.workdir, config, diagnose.compute, diagnose.plot, force=flags.FLAGS.force
        )
    print(diagnose_report.format_table(saved["results"]))


if __name__ == "__main__":
    app.run(main)
