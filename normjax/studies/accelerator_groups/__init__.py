"""accelerator_groups: the accelerator cell groups' runs (WORKDIR/accelerator_groups/<GROUP>/), judged."""

from normjax.studies.accelerator_groups import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("accelerator_groups", measure, config, verdicts, claims=("S5", "X7", "R5"), stale=measure.stale)
