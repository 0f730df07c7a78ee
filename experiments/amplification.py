"""Admin's amplification: output change after a small update vs depth; profiled vs closed-form omega (L1, L2).

python -m experiments.amplification --config=experiments/configs/amplification.py:quick --workdir=results
"""

from experiments import common
from normjax.studies import amplification

_CONFIG = common.define_config("amplification")

if __name__ == "__main__":
    common.run_main("amplification", _CONFIG, amplification)
