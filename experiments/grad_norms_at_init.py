"""`python -m experiments.grad_norms_at_init` in the repository runs `normjax.studies.grad_norms_at_init`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.grad_norms_at_init", run_name="__main__", alter_sys=True)
