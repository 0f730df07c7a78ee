"""`python -m experiments.amplification` in the repository: runs `python -m normjax.experiments.amplification`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.experiments.amplification", run_name="__main__", alter_sys=True)
