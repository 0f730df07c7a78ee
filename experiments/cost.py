"""`python -m experiments.cost` in the repository: runs `python -m normjax.studies.cost`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.cost", run_name="__main__", alter_sys=True)
