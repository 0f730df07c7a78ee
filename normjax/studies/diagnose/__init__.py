"""diagnose: a per-layer stability table at init, with plain-language warnings (a tool, no verdicts): of a normjax
model config, or (diagnose_blocks) of any model given as block functions."""

from normjax.studies.diagnose import config, measure
from normjax.studies.diagnose.blocks import diagnose_blocks
from normjax.studies.study import study

STUDY = study("diagnose", measure, config)

__all__ = ["STUDY", "diagnose_blocks"]
