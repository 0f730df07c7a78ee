"""`python -m experiments.depth_scaling` in the repository: runs `python -m normjax.experiments.depth_scaling`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.experiments.depth_scaling", run_name="__main__", alter_sys=True)
