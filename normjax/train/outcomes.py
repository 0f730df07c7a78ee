"""A finished run's outcome: ok, stalled (its final validation loss at the unigram level) or diverged."""

from __future__ import annotations

import math

OUTCOMES = ("ok", "stalled", "diverged")

STALL_FRACTION = 0.10
STALL_WHY = (
    "a run is 'stalled' when its final validation nll is at or above (1 - 0.10) x H, H the unigram entropy of "
    "the training targets: it has recovered less than a tenth of the entropy that token frequencies leave, i.e. "
    "learnt the frequencies and next to nothing of the input. The level is absolute (a property of the data, not "
    "of the other runs of a sweep). At warmup_ablation:quick (H = 4.24 nats, 57 runs of 3 seeds) the final nll "
    "falls into two groups: 36 runs at 0.62-0.89 H and 21 at 0.93-1.03 H (15 of them at 0.99 H or above, "
    "accuracy 0.10, the frequency of the commonest token); any fraction from 0.07 to 0.11 gives the same "
    "outcomes there. Cells near the failure edge had seeds on both sides, so rules count seeds, not one run"
)


def stall_level(unigram_nll: float) -> float:
    """The validation nll at or above which a finished run is 'stalled': (1 - STALL_FRACTION) x H."""
    return (1.0 - STALL_FRACTION) * unigram_nll


def classify(diverged: bool, final_valid_nll: float | None, unigram_nll: float) -> str:
    """'diverged', 'stalled' or 'ok' for a finished run.

    A non-finite final validation nll counts as diverged (the model's predictions are no longer numbers).

    Raises:
      ValueError: when a run that did not diverge has no final validation nll (nothing to judge it by).
    """
    if diverged:
        return "diverged"
    if final_valid_nll is None:
        raise ValueError("a finished run needs a final valid/nll to tell 'ok' from 'stalled'")
    if not math.isfinite(final_valid_nll):
        return "diverged"
    return "stalled" if final_valid_nll >= stall_level(unigram_nll) else "ok"
