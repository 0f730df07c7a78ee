"""ln_jacobian: sigma of every norm input and ||dLN/dz|| vs depth at init (X4, S1, S2, X1)."""

from normjax.studies.ln_jacobian import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("ln_jacobian", measure, config, verdicts, claims=("S1", "S2", "X1", "X4"))
