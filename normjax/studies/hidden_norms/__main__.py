"""Residual-stream and norm-input norms at init, theory vs real model (claims X3, S4, R4).

python -m normjax.studies.hidden_norms --config=:quick --workdir=results
(in the repository also `python -m experiments.hidden_norms`; the same presets as a file:
--config=normjax/studies/hidden_norms/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.hidden_norms import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
