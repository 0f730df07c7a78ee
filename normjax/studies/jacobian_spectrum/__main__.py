"""Input-output Jacobian spectra and per-block norms at init (claims R1, R2, S3, S7).

python -m normjax.studies.jacobian_spectrum --config=:quick --workdir=results
(in the repository also `python -m experiments.jacobian_spectrum`; the same presets as a file:
--config=normjax/studies/jacobian_spectrum/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.jacobian_spectrum import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
