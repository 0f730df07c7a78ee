"""cost: compiled train-step time, parameter count, FLOPs and XLA memory per placement at equal size (S6)."""

from normjax.studies.cost import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("cost", measure, config, verdicts, claims=("S6",))
