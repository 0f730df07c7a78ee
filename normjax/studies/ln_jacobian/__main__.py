"""sigma at every norm site and ||dLN/dz|| (closed form, autodiff) vs depth (X4, S1, S2, X1).

python -m normjax.studies.ln_jacobian --config=:quick --workdir=results
(in the repository also `python -m experiments.ln_jacobian`; the same presets as a file:
--config=normjax/studies/ln_jacobian/config.py:quick)
"""

from normjax.experiments import common
from normjax.studies.ln_jacobian import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
