"""Builds REPORT.md from every WORKDIR/<experiment>/results.json: a verdict table and one section each."""

from __future__ import annotations

import datetime
import glob
import os

from normjax.io import CorruptFileError, read_json
from normjax.report.claims import CLAIMS, VERDICTS, Verdict

SECTIONS = {
    "S": "Seed-note claims",
    "X": "Xiong et al. 2020",
    "L": "Liu et al. 2020 (Admin)",
    "D": "Wang et al. 2022 (DeepNet)",
    "R": "ReZero, Fixup and later placements",
}
MARK = {
    "holds": "holds",
    "partly holds": "partly holds",
    "does not hold": "**does not hold**",
    "not testable at this scale": "not testable at this scale",
}


def _check_saved(path: str, saved) -> None:
    """A results.json whose verdict rows are all valid Verdicts, so no row can drop out of the report unseen.

    Raises:
      CorruptFileError: naming the file and the bad row.
    """
    results = saved.get("results") if isinstance(saved, dict) else None
    if not isinstance(results, dict) or not isinstance(results.get("verdicts", []), list):
        raise CorruptFileError(f"{path} is not a study's results (no results dict with a verdicts list)")
    for i, row in enumerate(results.get("verdicts", [])):
        try:
            Verdict(**row)
        except (TypeError, ValueError) as e:
            raise CorruptFileError(f"{path}: verdict row {i} is invalid ({e})") from None


def load_results(workdir: str) -> dict[str, dict]:
    """{experiment: saved results.json} for every finished study under `workdir`.

    Raises:
      CorruptFileError: naming a results.json that is not JSON, or holds an invalid verdict row.
    """
    found = {}
    for path in sorted(glob.glob(os.path.join(workdir, "*", "results.json"))):
        saved = read_json(path)
        _check_saved(path, saved)
        found[saved.get("experiment", os.path.basename(os.path.dirname(path)))] = saved
    return found


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def collect_rows(studies: dict[str, dict]) -> dict[str, list[dict]]:
    """{claim id: [verdict rows, each with its experiment]} in CLAIMS order."""
    rows = {claim: [] for claim in CLAIMS}
    for name, saved in studies.items():
        for row in saved["results"].get("verdicts", []):  # validated by load_results
            rows[row["claim"]].append(row | {"experiment": name})
    return rows


def _figure_link(row: dict) -> str:
    if not row.get("figure"):
        return ""
    return f"[{row['figure']}]({row['experiment']}/{row['figure']})"


def verdict_table(rows: dict[str, list[dict]]) -> list[str]:
    lines = ["| claim | prediction | measured | verdict | rule / reason | figure |", "|---|---|---|---|---|---|"]
    for claim, claim_rows in rows.items():
        if not claim_rows:
            lines.append(
                f"| {claim}: {_cell(CLAIMS[claim])} | | no measurement in this run "
                f"| not run | no experiment that checks {claim} wrote results | |"
            )
        for row in claim_rows:
            lines.append(
                f"| {claim}: {_cell(CLAIMS[claim])} | {_cell(row['prediction'])} | "
                f"{_cell(row['measured'])} ({row['experiment']}) | {MARK[row['verdict']]} | "
                f"{_cell(row['reason'])} | {_figure_link(row)} |"
            )
    return lines


def _counts(rows: dict[str, list[dict]]) -> str:
    flat = [r["verdict"] for claim_rows in rows.values() for r in claim_rows]
    missing = sum(1 for claim_rows in rows.values() if not claim_rows)
    parts = [f"{flat.count(v)} {v}" for v in VERDICTS if flat.count(v)]
    return ", ".join(parts + ([f"{missing} claims not run"] if missing else []))


def study_section(name: str, saved: dict) -> list[str]:
    results = saved.get("results", {})
    lines = [
        f"### {name}",
        "",
        f"Wall time {saved.get('wall_time_s', float('nan')):.0f} s on "
        f"{saved.get('machine', {}).get('platform', 'unknown machine')}.",
        "",
    ]
    if results.get("discussion"):
        lines += [results["discussion"], ""]
    for row in results.get("verdicts", []):
        lines.append(f"- **{row['claim']}** ({row['verdict']}): {row['measured']}")
    figures = [f for f in saved.get("figures", []) if f.endswith(".png")]
    lines += [""] + [f"![{name}: {os.path.basename(f)}]({name}/{f})" for f in figures] + [""]
    return lines


def build_report(workdir: str) -> str:
    """Writes WORKDIR/REPORT.md and returns its path."""
    studies = load_results(workdir)
    rows = collect_rows(studies)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes")
    lines = [
        "# normjax report: where should the norm sit?",
        "",
        f"Built {now} from {len(studies)} experiments in `{workdir}` "
        f"({', '.join(studies) or 'none'}). Verdicts: {_counts(rows)}.",
        "",
        "Every verdict comes from the measured numbers by the rule given in its row "
        "(the rules live in `normjax/studies/*_verdicts.py`).",
        "",
    ]
    for prefix, title in SECTIONS.items():
        section = {c: r for c, r in rows.items() if c.startswith(prefix)}
        lines += [f"## {title}", ""] + verdict_table(section) + [""]
    lines += ["## Experiments", ""]
    for name, saved in studies.items():
        lines += study_section(name, saved)
    path = os.path.join(workdir, "REPORT.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
