"""Train-step time, memory, parameters and FLOPs per placement at equal size (claim S6).

python -m experiments.cost --config=experiments/configs/cost.py:quick --workdir=results
(installed: python -m normjax.experiments.cost with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import cost

EXPERIMENT = common.study("cost", cost)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
