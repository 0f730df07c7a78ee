"""Deep Post-LN vs DeepNorm without warmup: early model update, LN inputs, vanishing gradients (D1-D3, S7, R3, R6).

python -m experiments.deep_training --config=experiments/configs/deep_training.py:quick --workdir=results
"""

from experiments import common
from normjax.studies import deep_training

_CONFIG = common.define_config("deep_training")

if __name__ == "__main__":
    common.run_main("deep_training", _CONFIG, deep_training)
