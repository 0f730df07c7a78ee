"""warmup_ablation: placement x lr x warmup (and depth, schedule, optimizer arms) through the sweep engine (S5, X7)."""

from normjax.studies.study import study
from normjax.studies.warmup_ablation import config, measure, verdicts

STUDY = study(
    "warmup_ablation",
    measure,
    config,
    verdicts,
    claims=("S5", "X7", "X8", "R7", "W1", "W2", "W3"),
    sweep_before_compute=True,
)
