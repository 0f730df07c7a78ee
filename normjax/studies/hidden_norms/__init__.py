"""hidden_norms: ||x_l||^2/d of the residual stream and of every norm input at init (X3, S4, R4)."""

from normjax.studies.hidden_norms import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("hidden_norms", measure, config, verdicts, claims=("S4", "X2", "X3", "R4"))
