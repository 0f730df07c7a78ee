"""Trained decoder-only LMs at one depth: per-layer gradient norms through training (R5), trained blocks' distance
from the identity (N1).

python -m normjax.studies.trained_layers --config=:quick --workdir=results
(in the repository also `python -m experiments.trained_layers`; the same presets as a file:
--config=normjax/studies/trained_layers/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.trained_layers import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
