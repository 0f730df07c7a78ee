"""Per-layer FFN gradient norms at init, post vs pre vs mixln (claims X6, L3, R5, S1, S3).

python -m normjax.studies.grad_norms_at_init --config=:quick --workdir=results
(in the repository also `python -m experiments.grad_norms_at_init`; the same presets as a file:
--config=normjax/studies/grad_norms_at_init/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.grad_norms_at_init import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
