"""`python -m experiments.hidden_norms` in the repository: runs `python -m normjax.studies.hidden_norms`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.hidden_norms", run_name="__main__", alter_sys=True)
