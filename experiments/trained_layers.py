"""`python -m experiments.trained_layers` in the repository: runs `python -m normjax.studies.trained_layers`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.trained_layers", run_name="__main__", alter_sys=True)
