"""The report builder: every claim gets a row, verdicts come through as the studies gave them."""

import os
import pathlib
import subprocess
import sys

import pytest

from normjax.io import CorruptFileError, write_json
from normjax.report import CLAIMS, verdict_row
from normjax.report.build import build_report

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _study(tmp_path, name, rows, figures=()):
    write_json(
        str(tmp_path / name / "results.json"),
        {
            "experiment": name,
            "config": {},
            "wall_time_s": 1.0,
            "figures": list(figures),
            "results": {"verdicts": rows, "discussion": f"{name} discussion."},
        },
    )


def test_report_has_a_row_per_claim_and_keeps_negative_verdicts(tmp_path):
    _study(
        tmp_path,
        "alpha",
        [
            verdict_row(
                "X5",
                "slope -1/2 for Pre-LN",
                "slope -0.12 +- 0.02",
                "does not hold",
                "rule: |slope + 0.5| <= 2 stderr + 0.1",
                "fit.png",
                slope=-0.12,
            ),
            verdict_row("S4", "grows", "ratio 19", "holds", "rule: r^2 >= 0.9"),
        ],
        figures=["fit.png", "fit.pdf"],
    )
    _study(
        tmp_path,
        "beta",
        [verdict_row("X7", "BLEU 8 vs 34", "no IWSLT files", "not testable at this scale", "needs the real data")],
    )
    with open(build_report(str(tmp_path))) as f:
        text = f.read()
    for claim in CLAIMS:
        assert f"| {claim}: " in text, claim
    x5 = next(line for line in text.splitlines() if line.startswith("| X5: "))
    assert "**does not hold**" in x5 and "slope -0.12 +- 0.02 (alpha)" in x5
    assert "[fit.png](alpha/fit.png)" in x5
    assert "1 holds, 1 does not hold, 1 not testable at this scale" in text
    assert f"{len(CLAIMS) - 3} claims not run" in text
    assert "![alpha: fit.png](alpha/fit.png)" in text and "fit.pdf)" not in text
    assert "beta discussion." in text


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
def test_an_invalid_verdict_row_names_its_file_instead_of_dropping_out(tmp_path, row, match):
    """A row the report cannot place used to vanish from REPORT.md; now it is an error naming the file."""
    _study(tmp_path, "cost", [row])
    with pytest.raises(CorruptFileError, match=rf"cost/results.json: {match}"):
        build_report(str(tmp_path))
    assert not (tmp_path / "REPORT.md").exists()


def test_report_cli_names_a_truncated_results_file_in_one_line(tmp_path):
    _study(tmp_path, "cost", [verdict_row("S6", "p", "m", "holds", "r")])
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
