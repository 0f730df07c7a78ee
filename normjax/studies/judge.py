"""Verdicts at report time: each study's rules (`normjax/studies/<name>/verdicts.py`) applied to its results.json."""

from __future__ import annotations

import contextlib
import dataclasses
import sys

from normjax.io import CorruptFileError
from normjax.report.claims import Verdict
from normjax.studies import BY_NAME
from normjax.studies.study import Study

MOVES = (-0.5, -0.25, -0.125, 0.125, 0.25, 0.5)  # the sensitivity table's moves, on each threshold's own scale
EDGES = (-0.5, 0.5)  # the moves the sensitivity table shows in full (the others find the nearest flip)


def judge(experiment: str, results: dict, source: str = "results") -> list[dict]:
    """The verdict rows the current rules give `results` (a study's results.json "results").

    Rules are pure functions of the measurements, so rewording a rule never re-runs a measurement and any old
    results folder can be judged again. A study without rules (or an unknown name) gives no rows.

    Raises:
      CorruptFileError: naming `source` when the results lack what the rules read (measured by older code:
        rerun the study) or a rule returns an invalid row. No row is silently dropped.
    """
    study = BY_NAME.get(experiment)
    if study is None or study.verdicts is None:
        return []
    try:
        rows = study.verdicts(results)
    except (KeyError, IndexError, TypeError) as e:
        raise CorruptFileError(
            f"{source}: the {experiment} rules cannot read these results ({type(e).__name__}: {e}); they were "
            f"measured by older code: rerun {experiment} with --force"
        ) from None
    for i, row in enumerate(rows):
        try:
            Verdict(**row)
        except (TypeError, ValueError) as e:
            raise CorruptFileError(f"{source}: {experiment} verdict row {i} is invalid ({e})") from None
        if row["claim"] not in study.claims:
            raise CorruptFileError(
                f"{source}: {experiment} verdict row {i} judges claim {row['claim']!r}, which the study does not "
                f"list (normjax/studies/{experiment}/__init__.py claims={study.claims})"
            )
    return [dataclasses.asdict(Verdict(**row)) for row in rows]


def _tables(study: Study) -> list[dict]:
    """The THRESHOLDS dicts the study's rules read: the record's and its verdicts module's (one or two objects)."""
    module = sys.modules.get(getattr(study.verdicts, "__module__", ""))
    tables = [study.thresholds, getattr(module, "THRESHOLDS", None)]
    return [t for i, t in enumerate(tables) if isinstance(t, dict) and all(t is not u for u in tables[:i])]


@contextlib.contextmanager
def moved(study: Study, name: str, factor: float):
    """Threshold `name` of `study` moved by `factor` on its own scale (Threshold.moved) while inside: the rules read
    THRESHOLDS when they run, so everything they derive from it (outcome labels included) is recomputed."""
    tables = [t for t in _tables(study) if name in t]
    saved = [t[name] for t in tables]
    try:
        for t in tables:
            t[name] = dataclasses.replace(t[name], value=t[name].moved(factor))
        yield
    finally:
        for t, old in zip(tables, saved, strict=True):
            t[name] = old


def sensitivity(experiment: str, results: dict, source: str = "results") -> list[dict]:
    """Each threshold of the study moved by every MOVES fraction (on its own scale), the study re-judged: one entry
    per (threshold, move) with the rows whose verdict flips ({index of the row, claim, verdict, moved}), the rows
    themselves (`rows`, so a claim's verdict can be recombined) and `changed`, whether any row changed at all
    (False: the rules do not read this threshold when they run, or it reaches no row)."""
    study = BY_NAME.get(experiment)
    if study is None or study.verdicts is None:
        return []
    base = judge(experiment, results, source)
    out = []
    for name in study.thresholds:
        for factor in MOVES:
            with moved(study, name, factor):
                rows = judge(experiment, results, source)
            flips = [  # one row per claim and study: the same order under any threshold
                {"index": i, "claim": a["claim"], "verdict": a["verdict"], "moved": b["verdict"]}
                for i, (a, b) in enumerate(zip(base, rows, strict=False))
                if a["verdict"] != b["verdict"]
            ]
            threshold = study.thresholds[name]
            changed = repr(rows) != repr(base)  # repr: a nan number compares equal to itself
            out.append(
                {
                    "threshold": name, "value": threshold.value, "scale": threshold.scale, "factor": factor,
                    "moved_value": threshold.moved(factor), "flips": flips, "changed": changed, "rows": rows,
                }
            )  # fmt: skip
    return out
