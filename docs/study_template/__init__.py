"""toy_study: the template of a study folder (copy to normjax/studies/<name>/, rename, list it in STUDIES)."""

from normjax.studies.study import study

from . import config, measure, verdicts  # relative: the folder works under any name

STUDY = study("toy_study", measure, config, verdicts, claims=("S4",))
