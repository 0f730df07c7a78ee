"""Residual-stream and norm-input norms at init, theory vs real model (claims X3, S4, R4).

python -m experiments.hidden_norms --config=experiments/configs/hidden_norms.py:quick --workdir=results
(installed: python -m normjax.experiments.hidden_norms with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import hidden_norms

EXPERIMENT = common.study("hidden_norms", hidden_norms)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
