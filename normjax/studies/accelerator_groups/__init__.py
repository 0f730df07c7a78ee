"""accelerator_groups: the accelerator cell groups' runs (WORKDIR/accelerator_groups/<GROUP>/), judged."""

from normjax.studies.accelerator_groups import config, measure, verdicts
from normjax.studies.accelerator_groups.groups import GROUPS, StudyGroup
from normjax.studies.study import study

CLAIMS = ("S5", "X7", "R5") + tuple(c for g in GROUPS.values() if isinstance(g, StudyGroup) for c in g.claims)
STUDY = study("accelerator_groups", measure, config, verdicts, claims=CLAIMS, stale=measure.stale)
