"""Builds REPORT.md from every WORKDIR/<experiment>/results.json: a verdict table and one section each."""

from __future__ import annotations

import datetime
import glob
import os

from normjax.io import (
    ChecksumError,
    CorruptFileError,
    WorkdirError,
    note_unverified,
    read_checked,
    read_json,
    refuse_stripped,
    write_text,
)
from normjax.report.claims import (
    BY_ID,
    CLAIMS,
    CONSTRUCTION,
    EMPIRICAL,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_TESTABLE,
)
from normjax.report.rules import claim_verdict
from normjax.studies import BY_NAME
from normjax.studies.judge import EDGES, judge, sensitivity
from normjax.studies.runner import code_fingerprint

SECTIONS = {
    "S": "Seed-note claims",
    "X": "Xiong et al. 2020",
    "L": "Liu et al. 2020 (Admin)",
    "D": "Wang et al. 2022 (DeepNet)",
    "R": "ReZero, Fixup and later placements",
    "W": "Wortsman et al. 2023 (small-scale proxies)",
    "N": "Schemes of 2024-2026 (LayerNorm Scaling, mHC)",
    "A": "Why: interventions that change one thing",
}
MARK = {
    "holds": "holds",
    "partly holds": "partly holds",
    "does not hold": "**does not hold**",
    INCONCLUSIVE: INCONCLUSIVE,
    NOT_TESTABLE: NOT_TESTABLE,
    CONSTRUCTION: CONSTRUCTION,
    NOT_REPRODUCED: NOT_REPRODUCED,
}
NOT_RUN = "not run"
UNVERIFIED = "[unverified: no checksum, an older normjax's file]"


def load_results(workdir: str) -> dict[str, dict]:
    """{experiment: saved results.json, with "verdicts" from the current rules} for every study under `workdir`.

    Results without a checksum written by an older normjax (other code) are judged unverified, with a note
    (io.note_unverified): "unverified": True, and each verdict row marked UNVERIFIED.

    Raises:
      WorkdirError: `workdir` is not a folder, or a study's results no longer describe its folder (Study.stale).
      CorruptFileError: naming a results.json that is not JSON, fails its checksum or lacks one though the
        current code wrote it (ChecksumError), is not a study's results, or that the current rules cannot judge;
        or a damaged sweep.json beside it.
    """
    if not os.path.isdir(workdir):
        raise WorkdirError(f"--workdir={workdir!r} is not a folder (it should hold <study>/results.json)")
    found = {}
    for path in sorted(glob.glob(os.path.join(workdir, "*", "results.json"))):
        try:
            saved, checked = read_checked(path)
            if not isinstance(saved, dict) or not isinstance(saved.get("results"), dict):
                raise CorruptFileError(f"{path} is not a study's results (no results dict)")
            want = {"experiment": str, "wall_time_s": int | float, "figures": list, "machine": dict, "provenance": dict}
            odd = [k for k, kind in want.items() if saved.get(k) is not None and not isinstance(saved[k], kind)]
            if isinstance(saved.get("figures"), list) and not all(isinstance(f, str) for f in saved["figures"]):
                odd.append("figures")
            if odd:
                fields = ", ".join(f"{k}={saved[k]!r:.60}" for k in odd)
                raise CorruptFileError(f"{path} is not a study's results: {fields}")
            name = saved.get("experiment", os.path.basename(os.path.dirname(path)))
            if not checked and name in BY_NAME:
                refuse_stripped(path, saved, code_fingerprint(BY_NAME[name].compute))
        except ChecksumError as e:
            raise ChecksumError(f"{e}; the report uses no altered results: rerun that study with --force") from None
        if not checked:
            note_unverified(path)
        try:
            verdicts = judge(name, saved["results"], path)
        except CorruptFileError:
            raise
        except ValueError as e:  # e.g. a text where a rule reads a number (judge names Key/Index/TypeErrors)
            raise CorruptFileError(f"{path}: the {name} rules cannot read these results ({e})") from None
        stale = getattr(BY_NAME.get(name), "stale", None)
        if stale is not None and (why := stale(os.path.dirname(path), saved["results"])):
            raise WorkdirError(f"{path}: {why}; rebuild it: python -m normjax.studies.{name} --workdir={workdir}")
        if not checked:  # every row built from it says so (verdict tables, summary, the study's section)
            verdicts = [r | {k: f"{UNVERIFIED} {r[k]}" for k in ("measured", "key") if r.get(k)} for r in verdicts]
        try:
            wall = study_wall_time(path, saved)
        except CorruptFileError:
            raise
        except (AttributeError, TypeError, ValueError) as e:
            sweep = os.path.join(os.path.dirname(path), "sweep.json")
            raise CorruptFileError(f"{sweep} is not a sweep's record ({type(e).__name__}: {e})") from None
        found[name] = saved | {"verdicts": verdicts, "study_wall_time_s": wall, "unverified": not checked}
    return found


def study_wall_time(path: str, saved: dict) -> float:
    """Seconds a study took: its results.json's wall time, plus its sweep's runs' wall times summed (`sweep.json`
    beside it) when the sweep trains before the analysis that writes results.json (Study.sweep_before_compute);
    a study whose compute runs its sweep counts it once, in its own wall time."""
    total = float(saved.get("wall_time_s") or 0.0)
    sweep = os.path.join(os.path.dirname(path), "sweep.json")
    study = BY_NAME.get(saved.get("experiment", os.path.basename(os.path.dirname(path))))
    if os.path.exists(sweep) and getattr(study, "sweep_before_compute", False):
        runs = read_json(sweep).get("runs", [])
        total += sum(float((r.get("summary") or {}).get("wall_time_s") or 0.0) for r in runs)
    return total


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def collect_rows(studies: dict[str, dict]) -> dict[str, list[dict]]:
    """{claim id: [verdict rows, each with its experiment]} in CLAIMS order; a claim's measured rows before the
    ones that measured nothing (not testable: e.g. an accelerator group that waits for a device)."""
    rows = {claim: [] for claim in CLAIMS}
    for name, saved in studies.items():
        for i, row in enumerate(saved["verdicts"]):  # judged and validated by load_results
            rows[row["claim"]].append(row | {"experiment": name, "index": i, "off_preset": _off_preset(saved)})
    return {claim: sorted(found, key=lambda r: r["verdict"] == NOT_TESTABLE) for claim, found in rows.items()}


def claim_verdicts(rows: dict[str, list[dict]]) -> dict[str, str]:
    """{claim id: its one verdict, combining its rows' checks across studies and read in the claim's scope}
    ('not run' for a claim no study judged)."""
    return {c: BY_ID[c].scoped(claim_verdict(claim_rows)) if claim_rows else NOT_RUN for c, claim_rows in rows.items()}


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


def _claim_cell(claim: str, verdict: str, claim_rows: list[dict]) -> str:
    """The claim's verdict, marked when a row is not its preset's run or the claim is a timing of this machine."""
    notes = sorted({r["off_preset"] for r in claim_rows if r.get("off_preset")})
    if BY_ID[claim].machine_dependent:
        notes.append(f"machine-dependent: {BY_ID[claim].machine_dependent}")
    return MARK.get(verdict, verdict) + "".join(f" (*{n}*)" for n in notes)


def _figure_link(row: dict) -> str:
    if not row.get("figure") or not row.get("figure_exists"):
        return ""
    return f"[{row['figure']}]({row['experiment']}/{row['figure']})"


def verdict_table(rows: dict[str, list[dict]], verdicts: dict[str, str]) -> list[str]:
    """One block per claim: its verdict, then each row that judged it (the evidence, with its own verdict)."""
    lines = [
        "| claim | prediction | measured (study) | this check | rule / reason | figure |",
        "|---|---|---|---|---|---|",
    ]
    for claim, claim_rows in rows.items():
        head = f"| {claim}: {_cell(CLAIMS[claim])} ({_claim_cell(claim, verdicts[claim], claim_rows)})"
        if not claim_rows:
            lines.append(
                f"{head} | | no measurement in this run | {NOT_RUN} | no experiment that checks {claim} wrote "
                "results | |"
            )
        for i, row in enumerate(claim_rows):
            first = head if i == 0 else f"| {claim} (evidence {i + 1})"
            lines.append(
                f"{first} | {_cell(row['prediction'])} | {_cell(row['measured'])} ({row['experiment']}) | "
                f"{_verdict_cell(row)} | {_cell(row['reason'])} | {_figure_link(row)} |"
            )
    return lines


def _counts(verdicts: dict[str, str]) -> str:
    """Claims counted by their one verdict: empirical findings apart from checks of the construction."""
    flat = list(verdicts.values())
    parts = [f"{flat.count(v)} {v}" for v in EMPIRICAL if flat.count(v)]
    text = f"{len(flat)} claims; empirical: " + (", ".join(parts) or "none")
    if flat.count(NOT_REPRODUCED):  # contradicted outside the claim's setting: counted apart from 'does not hold'
        text += f"; outside their papers' settings: {flat.count(NOT_REPRODUCED)} {NOT_REPRODUCED}"
    text += f"; {flat.count(CONSTRUCTION)} {CONSTRUCTION}"
    return text + (f"; {flat.count(NOT_RUN)} not run" if flat.count(NOT_RUN) else "")


def _short(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: text.rfind(" ", 0, width)] + " ..."


def summary_table(rows: dict[str, list[dict]], verdicts: dict[str, str]) -> list[str]:
    """One row per claim: its verdict, then each check's verdict and deciding number (details below)."""
    lines = [
        "| claim | scope | verdict | checks: verdict, key number (95% interval over seeds), study |",
        "|---|---|---|---|",
    ]
    for claim, claim_rows in rows.items():
        evidence = "; ".join(
            f"{r['verdict']}: {r.get('key') or _short(r['measured'])} ({r['experiment']})" for r in claim_rows
        )
        cell = _claim_cell(claim, verdicts[claim], claim_rows)
        scope = _cell(BY_ID[claim].scope_text)
        lines.append(f"| {claim} | {scope} | {cell} | {_cell(evidence) or 'no study judged it'} |")
    return lines


def _moved_claims(entry: dict, name: str, rows: dict[str, list[dict]], verdicts: dict[str, str]) -> dict[str, str]:
    """{claim: its verdict} for each claim whose verdict changes when `entry`'s move re-judges study `name`."""
    moved = {i: row for i, row in enumerate(entry["rows"])}
    out = {}
    for claim in sorted({flip["claim"] for flip in entry["flips"]}):
        now = claim_verdict(moved.get(r["index"], r) if r["experiment"] == name else r for r in rows[claim])
        if BY_ID[claim].scoped(now) != verdicts[claim]:
            out[claim] = BY_ID[claim].scoped(now)
    return out


def _flip_text(entry: dict, name: str, rows: dict[str, list[dict]], verdicts: dict[str, str]) -> str:
    """What a moved threshold flips: each row of study `name`, and its claim's verdict when that changes too."""
    head = f"to {entry['moved_value']:.4g}: "
    if not entry["changed"]:
        return head + "no row changes"
    if not entry["flips"]:
        return head + "no flip"
    claims = _moved_claims(entry, name, rows, verdicts)
    parts = []
    for flip in entry["flips"]:
        claim = flip["claim"]
        text = f"{claim} ({name}): {flip['verdict']} -> {flip['moved']}"
        parts.append(text + (f"; claim {claim}: {verdicts[claim]} -> {claims[claim]}" if claim in claims else ""))
    return head + "; ".join(parts)


def _pct(factor: float) -> str:
    return f"{factor:+.1%}".replace(".0%", "%")


def sensitivity_table(studies: dict[str, dict], rows: dict[str, list[dict]], verdicts: dict[str, str]) -> list[str]:
    """Every threshold moved by -50% and +50% on its own scale, its study re-judged: which verdicts flip; and per
    claim, the smallest move of any threshold (of +-12.5%, 25%, 50%) that changes its verdict."""
    lines = ["| threshold (study) | value | scale | moved -50% | moved +50% |", "|---|---|---|---|---|"]
    nearest: dict[str, tuple] = {}
    for name, saved in studies.items():
        entries = sensitivity(name, saved["results"])
        for threshold in dict.fromkeys(e["threshold"] for e in entries):
            mine = [e for e in entries if e["threshold"] == threshold]
            down, up = (next(e for e in mine if e["factor"] == f) for f in EDGES)
            lines.append(
                f"| `{threshold}` ({name}) | {down['value']:g} | {down['scale']} | "
                f"{_cell(_flip_text(down, name, rows, verdicts))} | {_cell(_flip_text(up, name, rows, verdicts))} |"
            )
            for e in mine:
                for claim, now in _moved_claims(e, name, rows, verdicts).items():
                    best = nearest.get(claim)
                    if best is None or abs(e["factor"]) < abs(best[0]):
                        nearest[claim] = (e["factor"], f"`{threshold}` ({name}) {_pct(e['factor'])}", now)
    lines += ["", "| claim | verdict | nearest flip: threshold, move, verdict then |", "|---|---|---|"]
    for claim, verdict in verdicts.items():
        if verdict in (NOT_RUN, CONSTRUCTION):
            continue
        flip = nearest.get(claim)
        text = f"{flip[1]}: {flip[2]}" if flip else "none within +-50% of any threshold"
        lines.append(f"| {claim} | {verdict} | {_cell(text)} |")
    return lines


def _presets(studies: dict[str, dict]) -> str:
    names = sorted({(s.get("provenance") or {}).get("preset", "unrecorded") for s in studies.values()})
    return ", ".join(f":{n}" for n in names) or "none"


def _existing(workdir: str, name: str, files) -> list[str]:
    return [f for f in files or [] if os.path.exists(os.path.join(workdir, name, f))]


def study_section(name: str, saved: dict, workdir: str = "") -> list[str]:
    results = saved.get("results", {})
    wall, own = saved.get("study_wall_time_s", saved.get("wall_time_s") or 0.0), saved.get("wall_time_s") or 0.0
    sweep = f" ({own:.0f} s analysis + {wall - own:.0f} s of sweep runs, summed over its workers)" if wall > own else ""
    lines = [
        f"### {name}",
        "",
        f"Time {wall:.0f} s{sweep} on {saved.get('machine', {}).get('platform', 'unknown machine')}.",
        "",
    ]
    if results.get("discussion"):
        lines += [results["discussion"], ""]
    study = BY_NAME.get(name)
    if study is not None and study.tables is not None:  # the study's own tables (e.g. warmup_ablation's answer)
        lines += study.tables(results)
    for row in saved["verdicts"]:
        lines.append(f"- **{row['claim']}** ({row['verdict']}): {row['measured']}")
    figures = [f for f in _existing(workdir, name, saved.get("figures")) if f.endswith(".png")]
    lines += [""] + [f"![{name}: {os.path.basename(f)}]({name}/{f})" for f in figures] + [""]
    return lines


def lead_sections(studies: dict[str, dict]) -> list[str]:
    """The sections studies put before the claim tables (Study.lead: the answer to the report's title), each
    headed by the study it comes from."""
    lines = []
    for name, saved in studies.items():
        study = BY_NAME.get(name)
        if study is not None and study.lead is not None:
            lines += [f"## Where should the norm sit? (from {name}; details in its section below)", ""]
            lines += study.lead(saved["results"]) + [""]
    return lines


def build_report(workdir: str, wall_time_s: float | None = None) -> str:
    """Writes WORKDIR/REPORT.md and returns its path. The header's wall time is the sum of the studies' own
    (each with its sweep's runs, summed over the sweep's parallel workers: more than the elapsed time when they
    ran in parallel); `wall_time_s` (the whole run's elapsed time, e.g. reproduce.sh's) is shown beside it."""
    studies = load_results(workdir)
    for name, saved in studies.items():
        existing = set(_existing(workdir, name, [r["figure"] for r in saved["verdicts"] if r.get("figure")]))
        saved["verdicts"] = [r | {"figure_exists": r.get("figure") in existing} for r in saved["verdicts"]]
    rows = collect_rows(studies)
    verdicts = claim_verdicts(rows)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes")
    total_min = sum(s["study_wall_time_s"] for s in studies.values()) / 60
    wall = f"{total_min:.1f} min of study time, each sweep's runs summed over its workers"
    if wall_time_s is not None:
        wall += f"; the whole run took {wall_time_s / 60:.1f} min"
    lines = [
        "# normjax report: where should the norm sit?",
        "",
        f"Preset {_presets(studies)}. Built {now} from {len(studies)} experiments in `{workdir}` "
        f"({', '.join(studies) or 'none'}; {wall}). Verdicts per claim: {_counts(verdicts)}.",
        "",
        "Every verdict is given when this report is built, by the rules applied to the measured numbers (rules: "
        "`normjax/studies/<name>/verdicts.py`; claims and thresholds: `docs/claims.md`). Each check is supported "
        "(its whole 95% interval on the predicted side), contradicted (wholly on the other side) or inconclusive "
        "(straddling); a claim's verdict combines its checks across studies: all supported -> holds, some "
        f"supported and some contradicted -> partly holds, none supported -> does not hold, none contradicted but "
        f"some inconclusive -> {INCONCLUSIVE}. '{CONSTRUCTION}' rows check how the code is written and are not "
        "counted as findings. Every claim carries its scope (the paper in its setting, the paper outside it and "
        "on which axes, a folk claim of the seed notes, a library default): 'does not hold' is kept for a "
        f"contradiction in the claim's own setting; outside it the claim reads '{NOT_REPRODUCED}'. Outcomes of "
        "training runs (diverged, stalled at the unigram plateau, slow: still falling, trained) are judged from "
        "each run's stored validation curve when this report is built.",
        "",
        *lead_sections(studies),
        "## Summary",
        "",
        *summary_table(rows, verdicts),
        "",
    ]
    for prefix, title in SECTIONS.items():
        section = {c: r for c, r in rows.items() if c.startswith(prefix)}
        lines += [f"## {title}", ""] + verdict_table(section, {c: verdicts[c] for c in section}) + [""]
    lines += [
        "## Sensitivity to the thresholds",
        "",
        "Each study re-judged with one threshold moved by -50% and by +50% on its own scale (relative; a "
        "threshold at 0 by half its declared unit; one bounded by 1 on the complement 1 - value), everything the "
        "rules derive from it recomputed, the runs' outcome labels included (the rules are pure functions of the "
        "results): the verdicts that flip. 'no row changes': the rules gave the same rows. The second table gives, "
        "per claim, the smallest move (+-12.5%, 25% or 50%) of any one threshold that changes its verdict.",
        "",
        *sensitivity_table(studies, rows, verdicts),
        "",
        "## Experiments",
        "",
    ]
    for name, saved in studies.items():
        lines += study_section(name, saved, workdir)
    if unverified := [name for name, saved in studies.items() if saved["unverified"]]:
        lines[4:4] = [f"**Unverified results** (no checksum: an older normjax's files): {', '.join(unverified)}.", ""]
    path = os.path.join(workdir, "REPORT.md")
    write_text(path, "\n".join(lines) + "\n")
    return path
