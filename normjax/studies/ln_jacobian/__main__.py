"""sigma at every norm site and ||dLN/dz|| (closed form, autodiff) vs depth (X4, S1, S2, X1).

python -m experiments.ln_jacobian --config=experiments/configs/ln_jacobian.py:quick --workdir=results
(installed: python -m normjax.experiments.ln_jacobian with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import ln_jacobian

EXPERIMENT = common.study("ln_jacobian", ln_jacobian)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
