"""What every verdict rule shares: one all/some/none combinator, documented thresholds, seed statistics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

from normjax.report.claims import CONSTRUCTION, verdict_row
from normjax.threshold import Threshold as Threshold  # re-exported: the rules name it from here

CONFIDENCE = 0.95  # every interval in the report is a two-sided 95% Student-t interval over seeds
MIN_SEEDS = 3  # no empirical verdict rests on fewer seeds
NOT_TESTABLE = "not testable at this scale"


def combine(checks) -> str:
    """all True -> 'holds', some -> 'partly holds', none -> 'does not hold' (the one combinator of the rules).

    Raises:
      ValueError: on no checks (a verdict on nothing is not a verdict).
    """
    checks = [bool(c) for c in checks]
    if not checks:
        raise ValueError("combine() needs at least one check")
    return "holds" if all(checks) else "partly holds" if any(checks) else "does not hold"


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The across-seed mean of a measurement with its 95% interval [lo, hi] (nan when n < 2)."""

    mean: float
    lo: float
    hi: float
    n: int

    def above(self, threshold: float) -> bool:
        """The whole interval lies above `threshold` (so noise cannot make it pass), from >= MIN_SEEDS finite
        values: a seed whose value was non-finite and dropped leaves fewer, and then nothing passes."""
        return self.n >= MIN_SEEDS and self.lo > threshold

    def below(self, threshold: float) -> bool:
        return self.n >= MIN_SEEDS and self.hi < threshold

    def within(self, lo: float, hi: float) -> bool:
        """The whole interval lies inside [lo, hi]: a tolerance that does not widen with noise."""
        return self.n >= MIN_SEEDS and lo <= self.lo and self.hi <= hi

    def text(self, fmt: str = ".3g") -> str:
        if self.n < 2:
            return f"{self.mean:{fmt}} (1 seed, no interval)"
        return f"{self.mean:{fmt}} [{self.lo:{fmt}}, {self.hi:{fmt}}] ({self.n} seeds)"


def mean_ci(values) -> Estimate:
    """Across-seed mean and 95% Student-t interval of `values` (one number per seed; nan ignored)."""
    x = np.asarray([v for v in values if v is not None], float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, math.nan, math.nan, int(x.size))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return Estimate(mean, mean - half, mean + half, int(x.size))


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


def require_seeds(rows: list[dict], num_seeds: int) -> list[dict]:
    """`rows` unchanged with >= MIN_SEEDS seeds; else every empirical verdict replaced by "not testable at this
    scale", the rule's own verdict kept in the reason (an interval from 1 or 2 seeds decides nothing).
    Construction checks are kept: they do not rest on seeds."""
    if num_seeds >= MIN_SEEDS:
        return rows
    out = []
    for row in rows:
        if row["verdict"] not in (CONSTRUCTION, NOT_TESTABLE):
            row = row | {
                "verdict": NOT_TESTABLE,
                "reason": f"only {num_seeds} seed(s), the rules need >= {MIN_SEEDS} (the rule alone would say "
                f"'{row['verdict']}'); " + row["reason"],
            }
        out.append(row)
    return out
