"""`python -m experiments.depth_scaling` in the repository: runs `python -m normjax.studies.depth_scaling`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.depth_scaling", run_name="__main__", alter_sys=True)
