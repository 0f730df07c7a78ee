"""Admin's amplification: output change after a small update vs depth; profiled vs closed-form omega (L1, L2).

python -m experiments.amplification --config=experiments/configs/amplification.py:quick --workdir=results
(installed: python -m normjax.experiments.amplification with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import amplification

EXPERIMENT = common.study("amplification", amplification)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
