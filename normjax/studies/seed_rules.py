"""The verdict row every init-time study's rules give when too few seeds were run to judge a claim."""

from __future__ import annotations

from normjax.report import verdict_row
from normjax.report.rules import MIN_SEEDS


def too_few_seeds(claim: str, prediction: str, n: int) -> dict | None:
    """A "not testable" row when `n` < MIN_SEEDS (no verdict rests on fewer seeds), else None."""
    if n >= MIN_SEEDS:
        return None
    return verdict_row(
        claim,
        prediction,
        f"{n} seed{'s' * (n != 1)}",
        "not testable at this scale",
        f"needs at least {MIN_SEEDS} seeds for an across-seed interval (rerun with --config.num_seeds={MIN_SEEDS})",
    )
