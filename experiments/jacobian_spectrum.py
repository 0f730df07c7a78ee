"""`python -m experiments.jacobian_spectrum` in the repository runs `normjax.studies.jacobian_spectrum`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.jacobian_spectrum", run_name="__main__", alter_sys=True)
