"""Deep Post-LN vs DeepNorm without warmup: early model update, LN inputs, vanishing gradients (D1-D3, S7, R3, R6).

python -m experiments.deep_training --config=experiments/configs/deep_training.py:quick --workdir=results
(installed: python -m normjax.experiments.deep_training with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import deep_training

EXPERIMENT = common.study("deep_training", deep_training)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
