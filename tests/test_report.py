"""The report builder: rules judge results.json when the report is built; every claim gets a row."""

import os
import pathlib
import subprocess
import sys
import types

import pytest

from normjax import studies
from normjax.io import CorruptFileError, write_json
from normjax.report import CLAIMS, verdict_row
from normjax.report.claims import CONSTRUCTION
from normjax.studies import claims_doc, runner
from normjax.studies.hidden_norms import measure as hidden_norms
from normjax.studies.report import build_report

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_rules(monkeypatch):
    """Studies 'alpha' and 'beta' whose rules return the rows stored in their results (a stand-in measurement)."""
    module = types.ModuleType("fake_rules")
    module.verdicts = lambda results: results["rows"]
    for name in ("alpha", "beta"):
        rules = lambda results: module.verdicts(results)  # noqa: B023 (the test rewrites module.verdicts)
        fake = studies.Study(name, types.ModuleType(name), types.ModuleType(name), rules, claims=CLAIMS)
        monkeypatch.setitem(studies.BY_NAME, name, fake)
    return module


def _study(tmp_path, name, rows, figures=(), provenance=None):
    write_json(
        str(tmp_path / name / "results.json"),
        {
            "experiment": name,
            "config": {},
            "provenance": {"preset": "quick", "differs": []} if provenance is None else provenance,
            "wall_time_s": 1.0,
            "figures": list(figures),
            "results": {"rows": rows, "discussion": f"{name} discussion."},
        },
    )


def _report(tmp_path) -> str:
    with open(build_report(str(tmp_path))) as f:
        return f.read()


def test_report_has_a_row_per_claim_and_keeps_negative_verdicts(tmp_path, fake_rules):
    _study(
        tmp_path,
        "alpha",
        [
            verdict_row(
                "X5",
                "slope -1/2 for Pre-LN",
                "slope -0.12 +- 0.02",
                "does not hold",
                "rule: interval inside [-0.6, -0.4]",
                "fit.png",
                key="slope -0.12 [-0.16, -0.08] (3 seeds)",
                slope=-0.12,
            ),
            verdict_row("S4", "grows", "ratio 19", "holds", "rule: r^2 >= 0.9"),
            verdict_row("X1", "wiring", "exact", CONSTRUCTION, "rebuilt from the streams"),
        ],
        figures=["fit.png", "fit.pdf"],
    )
    _study(
        tmp_path,
        "beta",
        [verdict_row("X7", "BLEU 8 vs 34", "no IWSLT files", "not testable at this scale", "needs the real data")],
    )
    text = _report(tmp_path)
    for claim in CLAIMS:
        assert f"| {claim}: " in text, claim
    x5 = next(line for line in text.splitlines() if line.startswith("| X5: "))
    assert "**does not hold**" in x5 and "slope -0.12 +- 0.02 (alpha)" in x5
    assert "[fit.png](alpha/fit.png)" in x5
    assert "| X5 | **does not hold** | slope -0.12 [-0.16, -0.08] (3 seeds) | alpha |" in text  # summary table
    assert "empirical: 1 holds, 1 does not hold, 1 not testable at this scale; 1 verified by construction" in text
    assert f"{len(CLAIMS) - 4} claims not run" in text
    assert "Preset :quick." in text
    assert "![alpha: fit.png](alpha/fit.png)" in text and "fit.pdf)" not in text
    assert "beta discussion." in text


def test_rules_run_when_the_report_is_built_not_when_measured(tmp_path, fake_rules):
    """Rewording a rule changes the verdict of an old results folder without recomputing anything."""
    _study(tmp_path, "alpha", [verdict_row("S4", "grows", "ratio 19", "holds", "old rule")])
    assert "| S4 | holds |" in _report(tmp_path)
    fake_rules.verdicts = lambda results: [
        r | {"verdict": "partly holds", "reason": "new rule"} for r in results["rows"]
    ]
    text = _report(tmp_path)
    assert "| S4 | partly holds |" in text and "new rule" in text


def test_a_run_that_is_not_its_preset_is_marked_with_the_differing_keys(tmp_path, fake_rules):
    differs = {"preset": "quick", "differs": ["train.num_steps", "seed"]}
    _study(tmp_path, "alpha", [verdict_row("S4", "grows", "ratio 19", "holds", "r")], provenance=differs)
    _study(tmp_path, "beta", [verdict_row("S6", "same", "1.0", "holds", "r")], provenance={})
    text = _report(tmp_path)
    assert "| S4 | holds (*differs from :quick in train.num_steps, seed*) |" in text
    assert "| S6 | holds (*run without a recorded preset*) |" in text


def test_results_the_current_rules_cannot_read_are_an_error_naming_the_file(tmp_path):
    """Results measured by older code (a key the rules need is missing) are refused, never judged wrongly."""
    write_json(
        str(tmp_path / "hidden_norms" / "results.json"),
        {"experiment": "hidden_norms", "config": {}, "results": {"runs": {}}},
    )
    with pytest.raises(CorruptFileError, match=r"hidden_norms/results.json: the hidden_norms rules cannot read"):
        build_report(str(tmp_path))
    assert not (tmp_path / "REPORT.md").exists()


def test_verdict_rows_are_validated():
    with pytest.raises(ValueError, match="unknown claim 'Z9'"):
        verdict_row("Z9", "p", "m", "holds", "r")
    with pytest.raises(ValueError, match="verdict 'probably'"):
        verdict_row("S1", "p", "m", "probably", "r")


@pytest.mark.parametrize(
    "row, match",
    [
        ({"claim": "S6", "verdict": "holds"}, "verdict row 0 is invalid"),  # fields missing
        (verdict_row("S6", "p", "m", "holds", "r") | {"verdict": "mostly"}, "verdict row 0 is invalid"),
        (verdict_row("S6", "p", "m", "holds", "r") | {"claim": "Z9"}, "verdict row 0 is invalid"),
    ],
)
def test_an_invalid_verdict_row_names_its_file_instead_of_dropping_out(tmp_path, fake_rules, row, match):
    """A row the report cannot place used to vanish from REPORT.md; now it is an error naming the file."""
    _study(tmp_path, "alpha", [row])
    with pytest.raises(CorruptFileError, match=rf"alpha/results.json: alpha {match}"):
        build_report(str(tmp_path))
    assert not (tmp_path / "REPORT.md").exists()


def test_report_cli_names_a_truncated_results_file_in_one_line(tmp_path):
    _study(tmp_path, "cost", [])
    path = tmp_path / "cost" / "results.json"
    path.write_text(path.read_text()[:40])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report.py"), f"--workdir={tmp_path}"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {path} is corrupt") and len(proc.stderr.strip().splitlines()) == 1


def test_the_cache_fingerprint_covers_library_code_but_not_rules_or_sibling_studies():
    files = {os.path.relpath(f, ROOT / "normjax") for f in runner.code_files(hidden_norms.compute)}
    assert {"model.py", "init.py", "jacobian/traced.py", "studies/hidden_norms/measure.py", "studies/seeds.py"} <= files
    assert not {f for f in files if f.startswith("train/")}  # imported by the package, not used by this study
    assert not {f for f in files if f.endswith(("verdicts.py", "config.py")) or f.startswith("report/")}
    for study in studies.STUDIES:
        files = {os.path.relpath(f, ROOT / "normjax" / "studies") for f in runner.code_files(study.compute)}
        siblings = {f for f in files if f.split(os.sep)[0] in studies.BY_NAME and f.split(os.sep)[0] != study.name}
        assert not siblings, f"{study.name}'s cache key covers sibling studies {siblings}"


def test_docs_claims_md_is_generated_from_the_registry_and_rule_thresholds():
    with open(claims_doc.DOC) as f:
        assert f.read() == claims_doc.render(), "docs/claims.md is stale: run python -m normjax.studies.claims_doc"
    assert all(f"### {claim}: " in claims_doc.render() for claim in CLAIMS)


@pytest.mark.parametrize("bad", ["nan", "inf", "-5"])
def test_report_cli_refuses_a_wall_time_that_is_not_a_duration(tmp_path, bad):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report.py"), f"--workdir={tmp_path}", f"--wall_time_s={bad}"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode != 0 and "--wall_time_s" in proc.stderr and not (tmp_path / "REPORT.md").exists()
