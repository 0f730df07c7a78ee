"""answer: where the norm should sit, per depth, lr and warmup, and why, tested by intervention (A1-A5)."""

from normjax.studies.answer import config, figures, measure, verdicts
from normjax.studies.study import study

STUDY = study(
    "answer", measure, config, verdicts, claims=("A1", "A2", "A3", "A4", "A5"), training=True, figures=figures
)
