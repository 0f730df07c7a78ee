"""What every verdict rule shares: three-valued checks and their combinator, thresholds, seed intervals."""

from __future__ import annotations

import dataclasses
import enum
import math

import numpy as np
from scipy import stats

from normjax.jacobian import fits
from normjax.report.claims import CONSTRUCTION, INCONCLUSIVE, NOT_TESTABLE, verdict_row
from normjax.threshold import Threshold as Threshold  # re-exported: the rules name it from here

CONFIDENCE = 0.95  # every interval in the report is a two-sided 95% interval over seeds
MIN_SEEDS = 3  # no empirical verdict rests on fewer seeds
PILOT_SEED = 1000  # pilot seeds (that may set a threshold) are >= PILOT_SEED; judged seeds lie below it


class Check(enum.StrEnum):
    """One check of a rule: the whole interval on the predicted side (supported), the whole interval on the other
    side (contradicted), or an interval that straddles the threshold (inconclusive: noise, not evidence).

    `bool(check)` is True only when supported (what a two-valued rule read as passing); `&`, `|` and `~` are
    Kleene's three-valued and, or, not.
    """

    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    INCONCLUSIVE = "inconclusive"

    def __bool__(self) -> bool:
        return self is Check.SUPPORTED

    def __and__(self, other) -> Check:
        return every([self, other])

    def __or__(self, other) -> Check:
        return some([self, other])

    def __invert__(self) -> Check:
        return {Check.SUPPORTED: Check.CONTRADICTED, Check.CONTRADICTED: Check.SUPPORTED}.get(self, self)


def check(value) -> Check:
    """A Check from a Check, its name (as stored in a verdict row) or a bool (an exact test: True supported, False
    contradicted)."""
    if isinstance(value, str):
        return Check(value)  # a Check is a str too; an unknown name raises ValueError
    return Check.SUPPORTED if value else Check.CONTRADICTED


def every(checks) -> Check:
    """Three-valued all(): contradicted if any is, else inconclusive if any is, else supported."""
    checks = {check(c) for c in checks}
    return next((c for c in (Check.CONTRADICTED, Check.INCONCLUSIVE) if c in checks), Check.SUPPORTED)


def some(checks) -> Check:
    """Three-valued any(): supported if any is, else inconclusive if any is, else contradicted."""
    checks = {check(c) for c in checks}
    return next((c for c in (Check.SUPPORTED, Check.INCONCLUSIVE) if c in checks), Check.CONTRADICTED)


def combine(checks) -> str:
    """A verdict from the checks of one claim (the one combinator of the rules): all supported -> 'holds'; some
    supported and some contradicted -> 'partly holds'; some contradicted, none supported -> 'does not hold';
    none contradicted but some inconclusive -> 'inconclusive at this scale' (a straddling interval is never a
    failure, and an unresolved part never makes a claim 'partly' hold). Bools count as exact checks.

    Raises:
      ValueError: on no checks (a verdict on nothing is not a verdict).
    """
    found = {check(c) for c in checks}
    if not found:
        raise ValueError("combine() needs at least one check")
    if found == {Check.SUPPORTED}:
        return "holds"
    if Check.CONTRADICTED in found:
        return "partly holds" if Check.SUPPORTED in found else "does not hold"
    return INCONCLUSIVE


_AS_CHECKS = {
    "holds": (Check.SUPPORTED,),
    "partly holds": (Check.SUPPORTED, Check.CONTRADICTED),
    "does not hold": (Check.CONTRADICTED,),
    INCONCLUSIVE: (Check.INCONCLUSIVE,),
    CONSTRUCTION: (Check.SUPPORTED,),
}


def claim_verdict(rows) -> str:
    """One verdict per claim from its rows (across studies), by `combine` over their checks: a row's own `checks`
    where its rule recorded them, else what its verdict says it found. `rows` are verdict rows (dicts) or bare
    verdict strings.

    Rows that could not measure ('not testable at this scale') add nothing; a claim whose rows are all checks
    of the construction is 'verified by construction'; one with no measured row is 'not testable at this scale'.
    """
    rows = [r if isinstance(r, dict) else {"verdict": r} for r in rows]
    rows = [r for r in rows if r["verdict"] != NOT_TESTABLE]
    if not rows:
        return NOT_TESTABLE
    if all(r["verdict"] == CONSTRUCTION for r in rows):
        return CONSTRUCTION
    return combine(c for r in rows for c in (r.get("checks") or _AS_CHECKS[r["verdict"]]))


@dataclasses.dataclass(frozen=True)
class Estimate:
    """An across-seed estimate of a measurement with its 95% interval [lo, hi] (nan when n < 2).

    `method` says how the interval was made: "t" (Student-t on the values), "log" (Student-t on their logs:
    `mean` is the geometric mean), "bootstrap" or "order" (order statistics).
    """

    mean: float
    lo: float
    hi: float
    n: int
    method: str = "t"

    @property
    def resolved(self) -> bool:
        """An interval from >= MIN_SEEDS finite values (a dropped non-finite seed leaves fewer)."""
        return self.n >= MIN_SEEDS and math.isfinite(self.lo) and math.isfinite(self.hi)

    def above(self, threshold: float) -> Check:
        """Supported when the whole interval lies above `threshold`, contradicted when it lies at or below it,
        else (straddling, or fewer than MIN_SEEDS values) inconclusive."""
        if not self.resolved:
            return Check.INCONCLUSIVE
        return (
            Check.SUPPORTED
            if self.lo > threshold
            else Check.CONTRADICTED
            if self.hi <= threshold
            else (Check.INCONCLUSIVE)
        )

    def below(self, threshold: float) -> Check:
        if not self.resolved:
            return Check.INCONCLUSIVE
        return (
            Check.SUPPORTED
            if self.hi < threshold
            else Check.CONTRADICTED
            if self.lo >= threshold
            else (Check.INCONCLUSIVE)
        )

    def within(self, lo: float, hi: float) -> Check:
        """Supported when the whole interval lies inside [lo, hi] (a tolerance that does not widen with noise),
        contradicted when it lies wholly outside, else inconclusive; an interval wider than the band cannot be
        supported at this seed count (`underpowered`)."""
        if not self.resolved:
            return Check.INCONCLUSIVE
        if lo <= self.lo and self.hi <= hi:
            return Check.SUPPORTED
        return Check.CONTRADICTED if self.hi < lo or self.lo > hi else Check.INCONCLUSIVE

    def underpowered(self, lo: float, hi: float) -> bool:
        """The interval is wider than the band [lo, hi]: no outcome at this seed count can put it inside."""
        return self.resolved and self.hi - self.lo > hi - lo

    def text(self, fmt: str = ".3g") -> str:
        if self.n < 2:
            return f"{self.mean:{fmt}} (1 seed, no interval)"
        how = {"t": "", "log": ", log scale", "bootstrap": ", bootstrap", "order": ", order statistics"}[self.method]
        return f"{self.mean:{fmt}} [{self.lo:{fmt}}, {self.hi:{fmt}}] ({self.n} seeds{how})"


def _finite(values) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], float)
    return x[np.isfinite(x)]


def mean_ci(values) -> Estimate:
    """Across-seed mean and 95% Student-t interval of `values` (one number per seed; nan ignored): for roughly
    normal per-seed statistics (slopes, exponents, differences)."""
    x = _finite(values)
    if x.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, math.nan, math.nan, int(x.size))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return Estimate(mean, mean - half, mean + half, int(x.size))


def log_ci(values) -> Estimate:
    """Geometric mean and the 95% Student-t interval of ln(values), mapped back: for positive quantities and
    ratios (never a negative lower end). Values <= 0 or non-finite are dropped (n counts what is left)."""
    x = _finite(values)
    x = x[x > 0]
    e = mean_ci(np.log(x))
    return Estimate(math.exp(e.mean), math.exp(e.lo), math.exp(e.hi), e.n, "log") if e.n else e


def bootstrap_ci(values, statistic=np.mean, resamples: int = 2000, seed: int = 0) -> Estimate:
    """`statistic` of `values` with its 95% percentile-bootstrap interval (fixed resampling seed, so a report
    is reproducible): for worst cases and maxima, whose sampling law is not normal. `statistic(x, axis=...)` is a
    numpy reduction (np.mean, np.median, np.max, ...)."""
    x = _finite(values)
    if x.size < 2:
        return Estimate(float(statistic(x)) if x.size else math.nan, math.nan, math.nan, int(x.size), "bootstrap")
    idx = np.random.default_rng(seed).integers(0, x.size, (resamples, x.size))
    boot = statistic(x[idx], axis=1)
    lo, hi = np.quantile(boot, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return Estimate(float(statistic(x)), float(lo), float(hi), int(x.size), "bootstrap")


def quantile_ci(values, q: float = 0.5) -> Estimate:
    """The q-quantile of `values` with a distribution-free interval from order statistics: [x_(j), x_(k)] with
    j, k the binomial(n, q) quantiles, at least 95% coverage for any continuous law. With too few values to reach
    95% (e.g. n < 6 for the median) the interval is infinite on the missing side."""
    x = np.sort(_finite(values))
    n = x.size
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, "order")
    alpha, ranks = (1 - CONFIDENCE) / 2, np.arange(1, n + 1)
    below = ranks[stats.binom.cdf(ranks - 1, n, q) <= alpha]  # P(x_(j) > quantile) = P(Bin(n, q) <= j - 1)
    above = ranks[stats.binom.sf(ranks - 1, n, q) <= alpha]  # P(x_(k) < quantile) = P(Bin(n, q) >= k)
    j, k = (int(below.max()) if below.size else 0), (int(above.min()) if above.size else n + 1)
    lo = float(x[j - 1]) if j >= 1 else -math.inf
    hi = float(x[k - 1]) if k <= n else math.inf
    return Estimate(float(np.quantile(x, q)), lo, hi, int(n), "order")


def too_few_seeds(claim: str, prediction: str, n: int) -> dict | None:
    """A "not testable" row when `n` < MIN_SEEDS (no verdict rests on fewer seeds), else None."""
    if n >= MIN_SEEDS:
        return None
    return verdict_row(
        claim,
        prediction,
        f"{n} seed{'s' * (n != 1)}",
        NOT_TESTABLE,
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


def seeds_needed(est: Estimate, lo: float, hi: float) -> int | None:
    """About how many seeds would make `est`'s interval (at its own spread) narrower than the band [lo, hi]
    (on the log scale for a log-scale estimate); None when it already is or cannot tell."""
    if not est.underpowered(lo, hi) or (est.method == "log" and lo <= 0):
        return None
    width, band = (math.log(est.hi / est.lo), math.log(hi / lo)) if est.method == "log" else (est.hi - est.lo, hi - lo)
    spread = width * math.sqrt(est.n) / (2 * stats.t.ppf(0.5 + CONFIDENCE / 2, est.n - 1))  # the sample s.d.
    n = est.n
    while n < 10_000 and 2 * stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * spread / math.sqrt(n) >= band:
        n += 1
    return n


def power_note(label: str, est: Estimate, lo: float, hi: float) -> str:
    """'' or a clause saying the band [lo, hi] cannot be met at this seed count (the check is then inconclusive
    unless the interval lies wholly outside the band)."""
    n = seeds_needed(est, lo, hi)
    if n is None:
        return ""
    return (
        f"; underpowered: {label}'s interval ({est.hi - est.lo:.3g} wide) is wider than the band [{lo:g}, {hi:g}] "
        f"at {est.n} seeds (about {n} seeds at this spread)"
    )


def band_check(label: str, est: Estimate, lo: float, hi: float) -> tuple[Check, str]:
    """(check, note) of an equality read as the band [lo, hi], with the power check: `est.within(lo, hi)`, except
    that an interval wider than the band is inconclusive on whichever side it lies (no outcome at this seed count
    could support the band, so the rule is underpowered there, not judged; stricter than `power_note`'s default).
    The note then says so (`power_note`), with the seeds that would narrow the interval below the band and, when
    the mean lies inside the band, those that would let the interval fit inside it at this mean."""
    note = power_note(label, est, lo, hi)
    if not note:
        return est.within(lo, hi), ""
    room = min(est.mean - lo, hi - est.mean)
    n = seeds_needed(est, est.mean - room, est.mean + room) if room > 0 else None
    return Check.INCONCLUSIVE, note + (f", about {n} to fit inside it at this mean" if n else "")


def exponent_ci(points) -> Estimate:
    """The across-seed `mean_ci` of per-seed power-law exponents: `points` holds one (x, y) pair per seed, each fit
    y = c x^e by least squares in log-log (`fits.power_law_fit`)."""
    return mean_ci(fits.power_law_fit(x, y).exponent for x, y in points)
