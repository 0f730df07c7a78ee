"""Verdicts at report time: each study's rules (normjax/studies/<name>_verdicts.py) applied to its results.json."""

from __future__ import annotations

import dataclasses
import importlib

from normjax.io import CorruptFileError
from normjax.report.claims import Verdict

RULES = {  # experiment -> the module whose verdicts(results) judges it
    name: f"normjax.studies.{name}_verdicts"
    for name in (
        "hidden_norms",
        "ln_jacobian",
        "grad_norms_at_init",
        "depth_scaling",
        "jacobian_spectrum",
        "amplification",
        "deep_training",
        "warmup_ablation",
        "cost",
    )
}


def judge(experiment: str, results: dict, source: str = "results") -> list[dict]:
    """The verdict rows the current rules give `results` (a study's results.json "results").

    Rules are pure functions of the measurements, so rewording a rule never re-runs a measurement and any old
    results folder can be judged again.

    Raises:
      CorruptFileError: naming `source` when the results lack what the rules read (measured by older code:
        rerun the study) or a rule returns an invalid row. No row is silently dropped.
    """
    if experiment not in RULES:
        return []
    rules = importlib.import_module(RULES[experiment])
    try:
        rows = rules.verdicts(results)
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
    return [dataclasses.asdict(Verdict(**row)) for row in rows]
