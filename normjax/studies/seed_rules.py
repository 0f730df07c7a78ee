"""Rows of a run with fewer than MIN_SEEDS seeds: its empirical verdicts become "not testable", visibly."""

from __future__ import annotations

from normjax.report.claims import CONSTRUCTION
from normjax.report.rules import MIN_SEEDS

NOT_TESTABLE = "not testable at this scale"


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
