"""Per-layer FFN gradient norms at init, post vs pre vs mixln (claims X6, L3, R5, S1, S3).

python -m experiments.grad_norms_at_init --config=experiments/configs/grad_norms_at_init.py:quick --workdir=results
(installed: python -m normjax.experiments.grad_norms_at_init with the same flags, from any directory)
"""

from normjax.experiments import common
from normjax.studies import grad_norms_at_init

EXPERIMENT = common.study("grad_norms_at_init", grad_norms_at_init)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
