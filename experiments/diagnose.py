"""`python -m experiments.diagnose` in the repository: runs `python -m normjax.studies.diagnose`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.diagnose", run_name="__main__", alter_sys=True)
