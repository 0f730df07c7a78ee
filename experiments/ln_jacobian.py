"""sigma at every norm site and ||dLN/dz|| (closed form, autodiff) vs depth (X4, S1, S2, X1).

python -m experiments.ln_jacobian --config=experiments/configs/ln_jacobian.py:quick
"""

from experiments import common
from normjax.studies import ln_jacobian

_CONFIG = common.define_config("ln_jacobian")

if __name__ == "__main__":
    common.run_main("ln_jacobian", _CONFIG, ln_jacobian)
