"""`python -m experiments.diagnose` in the repository: runs `python -m normjax.experiments.diagnose`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.experiments.diagnose", run_name="__main__", alter_sys=True)
