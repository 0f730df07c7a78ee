"""toy_study's absl main: python -m normjax.studies.toy_study --config=:quick --workdir=results"""

from normjax.experiments import common

from . import STUDY

EXPERIMENT = common.study(STUDY)

if __name__ == "__main__":
    common.launch(EXPERIMENT)
