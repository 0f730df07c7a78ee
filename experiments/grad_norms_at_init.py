"""Per-layer FFN gradient norms at init, post vs pre vs mixln (claims X6, L3, R5, S1, S3).

python -m experiments.grad_norms_at_init --config=experiments/configs/grad_norms_at_init.py:quick
"""

from experiments import common
from normjax.studies import grad_norms_at_init

_CONFIG = common.define_config("grad_norms_at_init")

if __name__ == "__main__":
    common.run_main("grad_norms_at_init", _CONFIG, grad_norms_at_init)
