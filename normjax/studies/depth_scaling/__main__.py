"""The last and first layers' FFN gradients at init vs depth, post vs pre (claims X5, S2).

python -m experiments.depth_scaling --config=experiments/configs/depth_scaling.py:quick --workdir=results
(installed: python -m normjax.experiments.depth_scaling with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import depth_scaling

EXPERIMENT = common.study("depth_scaling", depth_scaling)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
