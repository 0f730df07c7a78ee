"""`python -m experiments.warmup_ablation` in the repository: runs `python -m normjax.studies.warmup_ablation`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("normjax.studies.warmup_ablation", run_name="__main__", alter_sys=True)
