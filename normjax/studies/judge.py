"""Verdicts at report time: each study's rules (`normjax/studies/<name>/verdicts.py`) applied to its results.json."""

from __future__ import annotations

import dataclasses

from normjax.io import CorruptFileError
from normjax.report.claims import Verdict
from normjax.studies import BY_NAME


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
