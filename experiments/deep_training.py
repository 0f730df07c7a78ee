"""`python -m experiments.deep_training` in the repository: runs `python -m normjax.studies.deep_training`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.deep_training", run_name="__main__", alter_sys=True)
