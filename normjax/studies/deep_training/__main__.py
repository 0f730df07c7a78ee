"""Deep Post-LN vs DeepNorm without warmup: early model update, LN inputs, vanishing gradients (D1-D3, S7, R3, R6).

python -m normjax.studies.deep_training --config=:quick --workdir=results
(in the repository also `python -m experiments.deep_training`; the same presets as a file:
--config=normjax/studies/deep_training/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.deep_training import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
