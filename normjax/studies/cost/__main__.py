"""Train-step time, memory, parameters and FLOPs per placement at equal size (claim S6).

python -m normjax.studies.cost --config=:quick --workdir=results
(in the repository also `python -m experiments.cost`; the same presets as a file:
--config=normjax/studies/cost/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.cost import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
