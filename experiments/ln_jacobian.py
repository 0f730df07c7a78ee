"""`python -m experiments.ln_jacobian` in the repository: runs `python -m normjax.studies.ln_jacobian`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.ln_jacobian", run_name="__main__", alter_sys=True)
