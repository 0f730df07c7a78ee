"""amplification: output change after a small update vs residual sublayers N; Admin's omega (L1, L2)."""

from normjax.studies.amplification import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("amplification", measure, config, verdicts, claims=("L1", "L2"))
