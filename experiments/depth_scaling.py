"""The last and first layers' FFN gradients at init vs depth, post vs pre (claims X5, S2).

python -m experiments.depth_scaling --config=experiments/configs/depth_scaling.py:quick
"""

from experiments import common
from normjax.studies import depth_scaling

_CONFIG = common.define_config("depth_scaling")

if __name__ == "__main__":
    common.run_main("depth_scaling", _CONFIG, depth_scaling)
