"""sigma at every norm site and ||dLN/dz|| (closed form, autodiff) vs depth (X4, S1, S2, X1).

  python -m experiments.ln_jacobian --config=experiments/configs/ln_jacobian.py:quick
"""

import os

# numpy's LAPACK (OpenBLAS) threads spin on a shared 2-core CPU: its SVDs ran 30-100x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from experiments import common  # noqa: E402
from normjax.studies import ln_jacobian  # noqa: E402

_CONFIG = common.define_config("ln_jacobian")

if __name__ == "__main__":
    common.run_main("ln_jacobian", _CONFIG, ln_jacobian)
