"""diagnose's probe against a finished sweep: does it flag the runs that stalled or diverged, and only those?

  python -m normjax.studies.diagnose_validation --sweep=DIR [--probe_steps=30]

DIR is a sweep folder (DIR/sweep.json, DIR/<run>/config.json and summary.json, as experiments.warmup_ablation
writes). Each finished run is probed with its own config (model, data, lr, warmup, schedule, optimizer, seed);
the hit rate and one row per run are printed and written to DIR/diagnose_validation.json.
"""

from __future__ import annotations

import os
import re

import numpy as np
from absl import app, flags

from normjax.io import read_json, to_jsonable, write_json
from normjax.studies.diagnose import probe as diagnose_probe
from normjax.train import job, outcomes, tasks
from normjax.train.config_io import ConfigError, parse

FAILED = ("diverged", "stalled")


def _label(summary: dict, run) -> tuple[str, str]:
    """(outcome, where it came from): summary.json's, or, for an old 'ok' summary without a unigram level, the
    training engine's stall check (normjax.train.outcomes) applied here."""
    outcome = summary.get("outcome")
    if outcome != "ok" or "unigram_nll" in summary:
        return outcome, "summary.json"
    nll = (summary.get("final") or {}).get("valid/nll")
    unigram = tasks.unigram_nll(job.prepare(run)[0].train)
    if nll is None:
        return None, "summary.json says ok but has no final valid nll to check against the unigram level"
    level = outcomes.stall_level(unigram)
    checked = (
        f"valid nll {nll:.3f} vs stall level {level:.3f} = {1 - outcomes.STALL_FRACTION:g} x unigram, checked here"
    )
    return outcomes.classify(False, nll, unigram), checked


def cells(folder: str, match: str = "") -> tuple[list[dict], list[str]]:
    """([{name, overrides, outcome, source, run}] of every finished run whose name `match` (a regex) finds,
    [runs not finished or not labelled])."""
    sweep = read_json(os.path.join(folder, "sweep.json"))
    out, skipped = [], []
    for entry in sweep["runs"]:
        if not re.search(match, entry["name"]):
            continue
        summary = entry.get("summary")
        if not summary:
            skipped.append(entry["name"])
            continue
        config = read_json(os.path.join(folder, entry["name"], "config.json"))
        run = parse(config)
        outcome, source = _label(summary, run)
        if outcome is None:
            skipped.append(f"{entry['name']} ({source})")
            continue
        if outcome not in FAILED + ("ok",):
            raise ConfigError(f"{folder}/{entry['name']}/summary.json: unknown outcome {outcome!r}")
        out.append({"name": entry["name"], "overrides": entry["overrides"], "outcome": outcome, "source": source})
        out[-1]["run"] = run
    return out, skipped


def hit_rate(rows: list[dict]) -> dict:
    """Counts of flagged failed runs (hits), unflagged failed runs (misses), flagged trained runs (false alarms),
    unflagged trained runs; accuracy = (hits + clears) / runs (nan when there are no runs)."""
    failed = [r for r in rows if r["outcome"] in FAILED]
    trained = [r for r in rows if r["outcome"] == "ok"]
    hits = sum(r["flagged"] for r in failed)
    clears = sum(not r["flagged"] for r in trained)
    return {
        "runs": len(rows),
        "failed": len(failed),
        "trained": len(trained),
        "hits": hits,
        "misses": len(failed) - hits,
        "false_alarms": len(trained) - clears,
        "clears": clears,
        "accuracy": (hits + clears) / len(rows) if rows else float("nan"),
    }


def validate(folder: str, probe_steps: int, thresholds: dict | None = None, match: str = "") -> dict:
    """Probes every finished run of the sweep in `folder` (those whose name the regex `match` finds); returns (and
    writes) the rows and the hit rate."""
    thresholds = thresholds or diagnose_probe.threshold_values()
    found, skipped = cells(folder, match)
    rows = []
    for cell in found:
        rec = diagnose_probe.probe(cell.pop("run"), probe_steps)
        warnings = diagnose_probe.warnings(rec, thresholds)
        sig = diagnose_probe.signals(rec)
        rows.append(
            cell
            | {
                "flagged": bool(warnings),
                "warnings": warnings,
                "signals": sig,
                "summary_line": diagnose_probe.summary_line(rec, sig),
                "probe_wall_time_s": rec["wall_time_s"],
            }
        )
    result = {
        "probe_steps": probe_steps,
        "match": match,
        "thresholds": thresholds,
        "hit_rate": hit_rate(rows),
        "rows": rows,
        "not_finished": skipped,
        "probe_wall_time_s": [r["probe_wall_time_s"] for r in rows],
    }
    write_json(os.path.join(folder, "diagnose_validation.json"), to_jsonable(result))
    return result


def _num(v) -> str:
    return "-" if v is None else f"{v:.3g}"  # None: nan written to JSON (no norm on the residual path)


def format_result(result: dict) -> str:
    """One line per run (name, outcome, flagged, the deciding numbers) and the hit rate."""
    lines = []
    for r in result["rows"]:
        sig = r["signals"]
        stacks = "; ".join(
            f"{s}: ln x{_num(v['ln_growth'])}, collapse x{_num(v['grad_collapse'])}" for s, v in sig["stacks"].items()
        )
        verdict = "right" if r["flagged"] == (r["outcome"] in FAILED) else "WRONG"
        lines.append(
            f"{r['name']}: {r['outcome']} ({r['source']}), probe {'flags' if r['flagged'] else 'clears'} it "
            f"[{verdict}]: update {_num(sig['update'])}; {stacks}"
        )
    h, times = result["hit_rate"], np.asarray(result["probe_wall_time_s"], float)
    lines.append(
        f"hit rate: flags {h['hits']} of {h['failed']} stalled or diverged runs, clears {h['clears']} of "
        f"{h['trained']} trained runs (accuracy {h['accuracy']:.0%} over {h['runs']} runs); probe "
        f"{result['probe_steps']} steps, {times.mean() if times.size else float('nan'):.1f} s per run"
    )
    if result["not_finished"]:
        lines.append(f"not finished or not labelled (not probed): {', '.join(result['not_finished'])}")
    return "\n".join(lines)


_SWEEP = flags.DEFINE_string("sweep", None, "A finished sweep folder (DIR/sweep.json).")
_STEPS = flags.DEFINE_integer("probe_steps", 30, "Probe training steps per run.", lower_bound=1)
_MATCH = flags.DEFINE_string("match", "", "Probe only the runs whose name this regex finds (e.g. 'seed=0').")


def main(argv) -> None:
    del argv
    print(format_result(validate(_SWEEP.value, _STEPS.value, match=_MATCH.value)))


if __name__ == "__main__":
    flags.mark_flag_as_required("sweep")
    app.run(main)
