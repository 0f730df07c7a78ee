"""grad_norms_at_init: per-layer FFN weight-gradient norms at init (X6, L3, R5, S1, S3)."""

from normjax.studies.grad_norms_at_init import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("grad_norms_at_init", measure, config, verdicts, claims=("S1", "S3", "X6", "L3", "R5"))
