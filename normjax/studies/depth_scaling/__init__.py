"""depth_scaling: the first and last layers' FFN weight gradients at init vs depth L (X5, S2)."""

from normjax.studies.depth_scaling import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("depth_scaling", measure, config, verdicts, claims=("S2", "X5"))
