"""Studies, one folder each (`normjax/studies/<name>/`); `STUDIES` is the one list of them, in report order."""

from normjax.studies import (
    accelerator_groups,
    amplification,
    answer,
    cost,
    deep_training,
    depth_scaling,
    diagnose,
    grad_norms_at_init,
    hidden_norms,
    jacobian_spectrum,
    ln_jacobian,
    trained_layers,
    warmup_ablation,
)
from normjax.studies.study import Study

STUDIES: tuple[Study, ...] = (  # adding a study: its folder and one line here (docs/experiments_howto.md)
    hidden_norms.STUDY,
    ln_jacobian.STUDY,
    grad_norms_at_init.STUDY,
    depth_scaling.STUDY,
    jacobian_spectrum.STUDY,
    amplification.STUDY,
    deep_training.STUDY,
    trained_layers.STUDY,
    warmup_ablation.STUDY,
    answer.STUDY,
    accelerator_groups.STUDY,
    cost.STUDY,
    diagnose.STUDY,
)
BY_NAME: dict[str, Study] = {s.name: s for s in STUDIES}


def get(name: str) -> Study:
    """The study called `name` (KeyError naming the valid ones)."""
    if name not in BY_NAME:
        raise KeyError(f"no study {name!r}; studies: {', '.join(BY_NAME)}")
    return BY_NAME[name]


__all__ = ["BY_NAME", "STUDIES", "Study", "get"]
