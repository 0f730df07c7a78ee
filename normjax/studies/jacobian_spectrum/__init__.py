"""jacobian_spectrum: singular values of d x_L / d x_l, ||J_l|| and ||J_l - I|| per block (R1, R2, S3, S7, N1, N2)."""

from normjax.studies.jacobian_spectrum import config, measure, verdicts
from normjax.studies.study import study

STUDY = study("jacobian_spectrum", measure, config, verdicts, claims=("S3", "S7", "R1", "R2", "N1", "N2"))
