"""Residual-stream and norm-input norms at init, theory vs real model (claims X3, S4, R4).

python -m experiments.hidden_norms --config=experiments/configs/hidden_norms.py:quick --workdir=results
"""

from experiments import common
from normjax.studies import hidden_norms

_CONFIG = common.define_config("hidden_norms")

if __name__ == "__main__":
    common.run_main("hidden_norms", _CONFIG, hidden_norms)
