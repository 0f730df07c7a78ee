"""The record a study folder exports: everything the CLI, the runner, the judge and the report need of it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from types import ModuleType


@dataclasses.dataclass(frozen=True)
class Study:
    """One study: `normjax/studies/<name>/` with measure.py, verdicts.py, config.py and __main__.py.

    measure: the module with `compute(config, study_dir) -> results` and, unless `figures` is given,
      `plot(results, study_dir) -> [paths]`.
    figures: a module with that `plot`, which measure does not import: its code stays out of the study's code
      fingerprint, so a changed figure is redrawn (runner.replot) without recomputing the study.
    verdicts: `verdicts(results) -> [verdict rows]` (None: the study gives no verdict, e.g. diagnose).
    thresholds: the rules' documented thresholds ({name: Threshold}), shown in docs/claims.md.
    rules_doc: one line saying what the rules judge (the verdicts module's docstring).
    config: the module with `get_config(arg)`, `SCHEMA` and optionally `check(values)` (cross-key rules) and
      `largest_model(values) -> (ModelConfig, rows, seq_len)` (the memory check before any compute).
    claims: the claim ids (normjax.report.CLAIMS) whose rows this study's rules give.
    tables: `tables(results) -> [markdown lines]` shown in the study's report section (the verdicts module's
      `tables`, e.g. warmup_ablation's answer table), or None.
    lead: `lead(results) -> [markdown lines]` shown first in REPORT.md, before the claim tables (the verdicts
      module's `lead`: the answer to the report's title), or None.
    in_report: run by scripts/reproduce.sh and judged in REPORT.md.
    training: the memory check counts optimizer state (the study trains models).
    sweep_before_compute: the study's sweep trains before `compute` (its __main__ trains the grid's shards, then
      compute only analyses: warmup_ablation), so its runs' wall times (sweep.json) add to results.json's; a
      study whose compute runs its sweep (answer) has them inside its own wall time already.
    stale: `stale(study_dir, results) -> str`: why results.json no longer describes the study's folder ('' when
      it does), for a study that summarizes files arriving after it ran (accelerator_groups); the report refuses
      stale results, naming the command that rebuilds them.
    """

    name: str
    measure: ModuleType
    config: ModuleType
    verdicts: Callable | None = None
    thresholds: dict = dataclasses.field(default_factory=dict)
    rules_doc: str = ""
    claims: tuple[str, ...] = ()
    tables: Callable | None = None
    lead: Callable | None = None
    in_report: bool = True
    training: bool = False
    figures: ModuleType | None = None
    sweep_before_compute: bool = False
    stale: Callable | None = None

    @property
    def config_path(self) -> str:
        """The packaged preset file (an absolute path: any working directory reads it)."""
        return os.path.abspath(self.config.__file__)

    @property
    def compute(self) -> Callable:
        return self.measure.compute

    @property
    def plot(self) -> Callable:
        return (self.figures or self.measure).plot


def study(name: str, measure: ModuleType, config: ModuleType, verdicts: ModuleType | None = None, **kw) -> Study:
    """The Study of a folder from its modules: `verdicts.verdicts`, `verdicts.THRESHOLDS` and its docstring."""
    if verdicts is None:
        return Study(name, measure, config, in_report=False, **kw)
    doc = (verdicts.__doc__ or "").strip().splitlines()[0]
    thresholds = dict(getattr(verdicts, "THRESHOLDS", {}))
    tables, lead = getattr(verdicts, "tables", None), getattr(verdicts, "lead", None)
    return Study(name, measure, config, verdicts.verdicts, thresholds, doc, tables=tables, lead=lead, **kw)
