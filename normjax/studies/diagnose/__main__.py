"""Per-layer stability table of a normjax model config at init (another model: diagnose_blocks), with warnings.

  python -m normjax.studies.diagnose --config=:quick --workdir=results \
      --config.model.placement=post --config.model.num_layers=12 \
      [--config.probe_steps=30 --config.train.lr=1e-3 --config.train.warmup_steps=0]

With probe_steps > 0 it also trains the model for that many steps as normjax.experiments.train would (config.data,
config.train) and warns on the early model update, LN-input growth and gradient collapse (docs/diagnose.md).

Writes WORKDIR/diagnose/results.json, table.md and diagnose.png, and prints the table. An invalid config
prints one line naming the key and exits with status 2 before anything is written.
"""

from normjax.experiments import common
from normjax.studies.diagnose import STUDY, table


def _print_table(saved: dict) -> None:
    print(table.format_table(saved["results"]))


EXPERIMENT = common.study(STUDY, after=_print_table)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
