"""The committed docs/results: every figure a results.json lists is there, and REPORT.md rebuilds from them."""

import os
import pathlib
import re
import shutil

import pytest

from normjax.io import read_json
from normjax.studies.report import build_report

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "results"
STUDIES = sorted(p.parent.name for p in RESULTS.glob("*/results.json"))
BUILT = re.compile(r"Built \S+ from (\d+) experiments in `[^`]*`")  # the build's time and folder


@pytest.mark.parametrize("name", STUDIES)
def test_every_listed_figure_is_committed(name):
    saved = read_json(str(RESULTS / name / "results.json"))
    missing = [f for f in saved.get("figures", []) if not (RESULTS / name / f).is_file()]
    assert not missing, f"docs/results/{name}/results.json lists figures that are not committed: {missing}"


def test_the_committed_report_is_what_its_results_give(tmp_path):
    """REPORT.md is rebuilt from the committed results.json files (and sweep.json, figures) by today's rules:
    every verdict and number in it comes from them, none is stale or typed by hand."""
    for name in STUDIES:
        shutil.copytree(RESULTS / name, tmp_path / name)
    committed = (RESULTS / "REPORT.md").read_text()
    wall = re.search(r"; the whole run took ([\d.]+) min", committed)
    rebuilt = pathlib.Path(
        build_report(str(tmp_path), wall_time_s=float(wall.group(1)) * 60 if wall else None)
    ).read_text()
    assert BUILT.sub("Built", rebuilt) == BUILT.sub("Built", committed)
    assert len(STUDIES) == int(BUILT.search(committed).group(1)) and os.path.isfile(RESULTS / "REPORT.md")


README_VERDICTS = {  # the README's wording of each verdict but holds -> the report's
    "partly hold": "partly holds",
    "do not hold": "does not hold",
    "inconclusive": "inconclusive at this scale",
    "not testable": "not testable at this scale",
    "not reproduced": "not reproduced at this scale",
}
VERDICT_WORDS = "partly hold|do not hold|inconclusive|not testable|not reproduced"
LISTING = re.compile(rf"\d+ (?:is |are )?({VERDICT_WORDS})[^(]*\(([^)]*)\)")


def test_the_readme_names_the_claims_of_each_verdict_as_the_report_gives_them():
    """README's 'What the standard run measured' lists, per verdict other than holds, the claims the committed
    report gives it: a rerun that moves a claim fails here until the README says so."""
    readme = (RESULTS.parents[1] / "README.md").read_text()
    section = " ".join(readme.split("## What the standard run measured")[1].split("\n- ")[0].split())
    listed: dict = {}
    for words, claims in LISTING.findall(section):
        listed.setdefault(README_VERDICTS[words], set()).update(re.findall(r"\b[A-Z]\d+\b", claims))
    summary = (RESULTS / "REPORT.md").read_text().split("## Summary")[1].split("\n## ")[0]  # claim | scope | verdict
    report: dict = {}
    for claim, verdict in re.findall(
        r"^\| ([A-Z]\d+) \| [^|]+ \| (?:\*\*)?([a-z ]+?)(?:\*\*)?(?: \(\*.*?\*\))? \|", summary, re.M
    ):
        if verdict in README_VERDICTS.values():
            report.setdefault(verdict, set()).add(claim)
    assert listed == report


def test_the_readme_answer_rows_are_the_reports():
    """README's answer table is copied from REPORT.md's answer tables: every row between its markers is a line of
    the committed report, so a rerun that changes the answer fails here until the README shows it."""
    readme = (RESULTS.parents[1] / "README.md").read_text()
    block = readme.split("<!-- answer rows: copied from docs/results/REPORT.md -->")[1].split("<!-- end answer rows")[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    report = set((RESULTS / "REPORT.md").read_text().splitlines())
    assert len(rows) >= 4 and not [row for row in rows if row not in report]
