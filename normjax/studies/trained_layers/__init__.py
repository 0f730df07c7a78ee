"""trained_layers: decoder-only LMs trained at one depth: per-layer gradients, trained blocks (R5, N1 in training)."""

from normjax.studies.study import study
from normjax.studies.trained_layers import config, figures, measure, verdicts

STUDY = study("trained_layers", measure, config, verdicts, claims=("R5", "N1"), training=True, figures=figures)
