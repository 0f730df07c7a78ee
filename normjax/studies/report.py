"""Builds REPORT.md from every WORKDIR/<experiment>/results.json: a verdict table and one section each."""

from __future__ import annotations

import datetime
import glob
import os

from normjax.io import ChecksumError, CorruptFileError, WorkdirError, read_json
from normjax.report.claims import CLAIMS, CONSTRUCTION, EMPIRICAL
from normjax.studies.judge import judge

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
    CONSTRUCTION: CONSTRUCTION,
}


def load_results(workdir: str) -> dict[str, dict]:
    """{experiment: saved results.json, with "verdicts" from the current rules} for every study under `workdir`.

    Results without a checksum (an older normjax) are judged unverified, with a note (io.note_unverified).

    Raises:
      WorkdirError: `workdir` is not a folder.
      CorruptFileError: naming a results.json that is not JSON, fails its checksum (ChecksumError), is not a
        study's results, or that the current rules cannot judge.
    """
    if not os.path.isdir(workdir):
        raise WorkdirError(f"--workdir={workdir!r} is not a folder (it should hold <study>/results.json)")
    found = {}
    for path in sorted(glob.glob(os.path.join(workdir, "*", "results.json"))):
        try:
            saved = read_json(path)
        except ChecksumError as e:
            raise ChecksumError(f"{e}; the report uses no altered results: rerun that study with --force") from None
        if not isinstance(saved, dict) or not isinstance(saved.get("results"), dict):
            raise CorruptFileError(f"{path} is not a study's results (no results dict)")
        name = saved.get("experiment", os.path.basename(os.path.dirname(path)))
        try:
            verdicts = judge(name, saved["results"], path)
        except CorruptFileError:
            raise
        except ValueError as e:  # e.g. a text where a rule reads a number (judge names Key/Index/TypeErrors)
            raise CorruptFileError(f"{path}: the {name} rules cannot read these results ({e})") from None
        found[name] = saved | {"verdicts": verdicts}
    return found


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def collect_rows(studies: dict[str, dict]) -> dict[str, list[dict]]:
    """{claim id: [verdict rows, each with its experiment]} in CLAIMS order."""
    rows = {claim: [] for claim in CLAIMS}
    for name, saved in studies.items():
        for row in saved["verdicts"]:  # judged and validated by load_results
            rows[row["claim"]].append(row | {"experiment": name, "off_preset": _off_preset(saved)})
    return rows


def _off_preset(saved: dict) -> str:
    """'' for a run of its preset, else which config keys differ from it (shown next to the verdict)."""
    provenance = saved.get("provenance") or {}
    if "preset" not in provenance:
        return "run without a recorded preset"
    differs = provenance.get("differs") or []
    return f"differs from :{provenance['preset']} in {', '.join(differs)}" if differs else ""


def _verdict_cell(row: dict) -> str:
    mark = MARK[row["verdict"]]
    return f"{mark} (*{row['off_preset']}*)" if row.get("off_preset") else mark


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
                f"{_cell(row['measured'])} ({row['experiment']}) | {_verdict_cell(row)} | "
                f"{_cell(row['reason'])} | {_figure_link(row)} |"
            )
    return lines


def _counts(rows: dict[str, list[dict]]) -> str:
    """Empirical verdicts counted apart from checks of the construction, and claims no study ran."""
    flat = [r["verdict"] for claim_rows in rows.values() for r in claim_rows]
    missing = sum(1 for claim_rows in rows.values() if not claim_rows)
    parts = [f"{flat.count(v)} {v}" for v in EMPIRICAL if flat.count(v)]
    text = "empirical: " + (", ".join(parts) or "none")
    text += f"; {flat.count(CONSTRUCTION)} {CONSTRUCTION}"
    return text + (f"; {missing} claims not run" if missing else "")


def summary_table(rows: dict[str, list[dict]]) -> list[str]:
    """One screen: claim, verdict, the deciding number with its interval; details in the sections below."""
    lines = ["| claim | verdict | key number (95% interval over seeds) | study |", "|---|---|---|---|"]
    for claim, claim_rows in rows.items():
        for row in claim_rows or [{"verdict": None, "key": "", "experiment": "not run"}]:
            verdict = _verdict_cell(row) if row["verdict"] else "not run"
            lines.append(f"| {claim} | {verdict} | {_cell(row.get('key', ''))} | {row['experiment']} |")
    return lines


def _presets(studies: dict[str, dict]) -> str:
    names = sorted({(s.get("provenance") or {}).get("preset", "unrecorded") for s in studies.values()})
    return ", ".join(f":{n}" for n in names) or "none"


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
    for row in saved["verdicts"]:
        lines.append(f"- **{row['claim']}** ({row['verdict']}): {row['measured']}")
    figures = [f for f in saved.get("figures", []) if f.endswith(".png")]
    lines += [""] + [f"![{name}: {os.path.basename(f)}]({name}/{f})" for f in figures] + [""]
    return lines


def build_report(workdir: str, wall_time_s: float | None = None) -> str:
    """Writes WORKDIR/REPORT.md and returns its path; `wall_time_s` (the whole run's, e.g. reproduce.sh's)
    goes into the header, else the sum of the studies' own wall times."""
    studies = load_results(workdir)
    rows = collect_rows(studies)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes")
    if wall_time_s is None:
        wall = f"{sum(s.get('wall_time_s') or 0 for s in studies.values()) / 60:.0f} min of study wall time"
    else:
        wall = f"wall time {wall_time_s / 60:.1f} min"
    lines = [
        "# normjax report: where should the norm sit?",
        "",
        f"Preset {_presets(studies)}. Built {now} from {len(studies)} experiments in `{workdir}` "
        f"({', '.join(studies) or 'none'}; {wall}). Verdicts, {_counts(rows)}.",
        "",
        "Every verdict is given when this report is built, by the rule in its row applied to the measured numbers "
        "(rules: `normjax/studies/<name>/verdicts.py`; claims and thresholds: `docs/claims.md`). "
        f"'{CONSTRUCTION}' rows check how the code is written and are not counted as findings.",
        "",
        "## Summary",
        "",
        *summary_table(rows),
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
