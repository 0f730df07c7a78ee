"""diagnose: a per-layer stability table of any model at init, with plain-language warnings (a tool, no verdicts)."""

from normjax.studies.diagnose import config, measure
from normjax.studies.study import study

STUDY = study("diagnose", measure, config)
