"""`python -m experiments.amplification` in the repository: runs `python -m normjax.studies.amplification`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.amplification", run_name="__main__", alter_sys=True)
