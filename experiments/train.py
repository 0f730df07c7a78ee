"""`python -m experiments.train` in the repository: runs `python -m normjax.experiments.train`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.experiments.train", run_name="__main__", alter_sys=True)
