"""benchmarks/standard_budget.py: the :standard ledger's arithmetic on the committed results' own files."""

import pathlib

import pytest

from benchmarks import standard_budget
from normjax.io import read_json

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "results"


def test_the_ledger_counts_each_run_once_and_splits_only_the_sweep_trained_before_its_analysis():
    found = standard_budget.parts(str(RESULTS))
    answer = read_json(str(RESULTS / "answer" / "results.json"))["wall_time_s"] / 60
    assert found["answer"] == {"runs": None, "minutes": pytest.approx(answer), "workers": 1}  # its sweep inside
    warmup = {k: v for k, v in found.items() if k.startswith("warmup_ablation/")}
    sweep = read_json(str(RESULTS / "warmup_ablation" / "sweep.json"))["runs"]
    assert sum(v["runs"] or 0 for v in warmup.values()) == len(sweep)  # every run in exactly one sub-grid
    assert all(v["workers"] == standard_budget.WORKERS for k, v in warmup.items() if not k.endswith("/analysis"))
    total = sum(v["minutes"] / v["workers"] for v in found.values())
    assert standard_budget.wall_minutes(found) == pytest.approx(total)
    cut = standard_budget.wall_minutes(found, standard_budget.CUT)
    assert cut == pytest.approx(total - sum(found[k]["minutes"] / found[k]["workers"] for k in standard_budget.CUT))
    assert set(standard_budget.CUT) <= set(found)  # the plan names parts that exist
    from normjax.studies.accelerator_groups.groups import GROUPS

    assert all(GROUPS[group].standby for group in standard_budget.CUT.values())  # each moved part has its group


def test_the_table_says_whether_the_plan_fits_the_budget():
    found = standard_budget.parts(str(RESULTS))
    cut = standard_budget.wall_minutes(found, standard_budget.CUT)
    assert "(within it)" in standard_budget.table(found, cut + 1)[-1]
    assert "(over it)" in standard_budget.table(found, cut - 1)[-1]
