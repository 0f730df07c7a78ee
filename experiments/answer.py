"""`python -m experiments.answer` in the repository: runs `python -m normjax.studies.answer`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.answer", run_name="__main__", alter_sys=True)
