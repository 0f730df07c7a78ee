"""Input-output Jacobian spectra and per-block norms at init (claims R1, R2, S3, S7).

python -m experiments.jacobian_spectrum --config=experiments/configs/jacobian_spectrum.py:quick --workdir=results
"""

from experiments import common
from normjax.studies import jacobian_spectrum

_CONFIG = common.define_config("jacobian_spectrum")

if __name__ == "__main__":
    common.run_main("jacobian_spectrum", _CONFIG, jacobian_spectrum)
