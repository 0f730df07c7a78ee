"""The last and first layers' FFN gradients at init vs depth, post vs pre (claims X5, S2).

python -m normjax.studies.depth_scaling --config=:quick --workdir=results
(in the repository also `python -m experiments.depth_scaling`; the same presets as a file:
--config=normjax/studies/depth_scaling/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.depth_scaling import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
