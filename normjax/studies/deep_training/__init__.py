"""deep_training: Post-LN, DeepNorm and others trained across depth and seeds (D1-D3, S4/R4 in training, S7, R3, R6)."""

from normjax.studies.deep_training import config, figures, measure, verdicts
from normjax.studies.study import study

STUDY = study(
    "deep_training",
    measure,
    config,
    verdicts,
    claims=("S4", "S7", "D1", "D2", "D3", "R3", "R4", "R6"),
    training=True,
    figures=figures,
)
