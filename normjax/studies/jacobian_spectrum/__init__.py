"""jacobian_spectrum: singular values of d x_L / d x_l and per-block ||J_l|| at init (R1, R2, S3, S7)."""

from normjax.studies.jacobian_spectrum import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("jacobian_spectrum", measure, config, verdicts, claims=("S3", "S7", "R1", "R2"))
