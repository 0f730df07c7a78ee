"""Input-output Jacobian spectra and per-block norms at init (claims R1, R2, S3, S7).

python -m experiments.jacobian_spectrum --config=experiments/configs/jacobian_spectrum.py:quick --workdir=results
(installed: python -m normjax.experiments.jacobian_spectrum with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import jacobian_spectrum

EXPERIMENT = common.study("jacobian_spectrum", jacobian_spectrum)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
