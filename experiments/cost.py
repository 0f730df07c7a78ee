"""Train-step time, memory, parameters and FLOPs per placement at equal size (claim S6).

python -m experiments.cost --config=experiments/configs/cost.py:quick --workdir=results
"""

from experiments import common
from normjax.studies import cost

_CONFIG = common.define_config("cost")

if __name__ == "__main__":
    common.run_main("cost", _CONFIG, cost)
