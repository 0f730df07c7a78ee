"""Admin's amplification: output change after a small update vs depth; profiled vs closed-form omega (L1, L2).

python -m normjax.studies.amplification --config=:quick --workdir=results
(in the repository also `python -m experiments.amplification`; the same presets as a file:
--config=normjax/studies/amplification/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.amplification import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
