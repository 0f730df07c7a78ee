"""The answer section of the report, judged from results.json: lr window, warmup, quality, recommendation per depth."""

from __future__ import annotations

import math

import numpy as np

from normjax.report.rules import Check, mean_ci
from normjax.studies.answer import cells
from normjax.train.outcomes import FAILED


def _refs(rows: list[dict]) -> str:
    return "[" + ", ".join(r["ref"] for r in rows) + "]" if rows else "[-]"


def _nll_text(rows: list[dict]) -> tuple[str, float]:
    values = list(cells.final_nll(rows).values())
    if not values:
        return "no seed trains", math.inf
    return mean_ci(values).text(".3f"), float(np.mean(values))


def _warmup_needed(dose: dict[int, list[dict]], lr: float, horizon: int) -> tuple[str, list[dict]]:
    """The shortest warmup at which every seed trains at `lr` (in steps and in H), with the runs it rests on."""
    arms = {w: [r for r in rows if math.isclose(r["lr"], lr)] for w, rows in sorted(dose.items())}
    arms = {w: rows for w, rows in arms.items() if rows}
    for w, rows in arms.items():
        if all(r["label"] == "trained" for r in rows):
            return ("none" if w == 0 else f"{w} steps ({w / horizon:g} H)"), sum(arms.values(), [])
    return (f"more than {max(arms)} steps" if arms else "not measured"), sum(arms.values(), [])


def recommend(summary: dict[str, dict]) -> tuple[str | None, list[str]]:
    """(the recommended placement, the placements tied with the best on quality), None if no placement trains.

    The best is the lowest mean final nll at its own best lr; a placement ties with it unless its paired
    difference to the best (by seed) has a 95% interval wholly above 0. Among the tied, the widest lr window wins
    (more trained lrs), then the lower mean. `summary`: placement -> {"nll": mean or inf, "width": trained window
    lrs, "seeds": {seed: final nll}}."""
    trained = {p: s for p, s in summary.items() if math.isfinite(s["nll"])}
    if not trained:
        return None, []
    best = min(trained, key=lambda p: trained[p]["nll"])
    worse = Check.SUPPORTED
    tied = [
        p
        for p in trained
        if p == best
        or mean_ci(cells.paired_difference(trained[p]["seeds"], trained[best]["seeds"])).above(0.0) is not worse
    ]
    return min(tied, key=lambda p: (-trained[p]["width"], trained[p]["nll"])), sorted(tied)


def depth_table(runs: list[dict], results: dict, depth: int) -> list[str]:
    s = results["setup"]
    curves = {p: c for (p, d), c in cells.window(runs).items() if d == depth}
    dose = cells.dose(runs, results)
    ref_rows = cells.best_cell(runs, results, s["reference"], depth)
    reference = cells.final_nll(ref_rows)
    lrs = sorted({lr for c in curves.values() for lr in c})
    out = [
        f"**{depth} layers** (lrs tried: {', '.join(cells.lr_text(lr) for lr in lrs)}; one seed per lr, more at "
        "the best lr)",
        "",
        f"| placement | lr window (trained) | best lr | final valid nll at best lr | minus {s['reference']} (paired) "
        f"| warmup needed at lr {cells.lr_text(s['dose_lr'])} |",
        "|---|---|---|---|---|---|",
    ]
    summary = {}
    for placement, curve in sorted(curves.items()):
        ok = cells.trained_lrs(curve)
        window = (f"{cells.lr_text(ok[0])} .. {cells.lr_text(ok[-1])} ({len(ok)} of {len(curve)})" if ok
                  else f"none of {len(curve)}")  # fmt: skip
        best = cells.best_cell(runs, results, placement, depth)
        nll, mean = _nll_text(best)
        summary[placement] = {"nll": mean, "width": len(ok), "rows": best, "seeds": cells.final_nll(best)}
        diff = cells.paired_difference(cells.final_nll(best), reference)
        diff_text = mean_ci(diff).text("+.3f") if diff and placement != s["reference"] else "-"
        if depth == s["dose_depth"] and placement in dose:
            warm, warm_rows = _warmup_needed(dose[placement], s["dose_lr"], s["horizon"])
        else:
            warm, warm_rows = "not measured", []
        tried = sum(curve.values(), [])  # the curve's runs: cited where no seed at the best lr trains
        out.append(
            f"| {placement} | {window} {_refs(tried)} | "
            f"{cells.lr_text(best[0]['lr']) if best else '-'} {_refs(best[:1])} | {nll} {_refs(best or tried)} | "
            f"{diff_text} {_refs(best + ref_rows) if diff_text != '-' else _refs(ref_rows)} | "
            f"{warm} {_refs(warm_rows)} |"
        )
    choice, tied = recommend(summary)
    out.append("")
    if choice is None:
        tried = sum((r for c in curves.values() for r in c.values()), [])
        out.append(f"Recommended at {depth} layers: none (no placement trains at any lr tried {_refs(tried)}).")
    else:
        best = min(tied, key=lambda p: summary[p]["nll"])
        out.append(
            f"Recommended at {depth} layers: **{choice}**: the widest lr window ({summary[choice]['width']} lrs "
            f"{_refs(sum(curves[choice].values(), []))}) among the placements whose final nll is not worse than the "
            f"lowest ({best}, {summary[best]['nll']:.3f} {_refs(summary[best]['rows'])}) by a 95% paired interval: "
            f"{', '.join(tied)}."
        )
    return out + [""]


def depth_to_failure(runs: list[dict]) -> list[str]:
    """Per placement and lr (no warmup): the deepest depth that trains before the first depth that does not."""
    curves = cells.window(runs)
    placements, depths = sorted({p for p, _ in curves}), sorted({d for _, d in curves})
    lrs = sorted({lr for c in curves.values() for lr in c})
    out = [
        f"**Depth to failure** (no warmup; depths tried: {', '.join(map(str, depths))})",
        "",
        "| placement | " + " | ".join(f"lr {cells.lr_text(lr)}" for lr in lrs) + " |",
        "|---|" + "---|" * len(lrs),
    ]
    for placement in placements:
        row = []
        for lr in lrs:
            cell = [(d, curves[(placement, d)].get(lr, [])) for d in depths if curves.get((placement, d), {}).get(lr)]
            fails = [d for d, rows in cell if cells.cell_label(rows) != "trained"]
            trains = [d for d, rows in cell if d < min(fails, default=math.inf)]
            text = (f"trains to {trains[-1]}" if trains else "fails at all") + (f", fails at {fails[0]}" if fails and
                                                                                trains else "")  # fmt: skip
            row.append(f"{text if cell else 'not run'} {_refs(sum((rows for _, rows in cell), []))}")
        out.append(f"| {placement} | " + " | ".join(row) + " |")
    return out + [""]


def intervention_table(runs: list[dict], results: dict) -> list[str]:
    s = results["setup"]
    out = [
        f"**Why: interventions** (Post-LN at {s['dose_depth']} layers, no global warmup; predictions in "
        "normjax/studies/answer/verdicts.py, written before the runs)",
        "",
        "| arm | lr | outcomes (curve-based) | final valid nll of the trained seeds |",
        "|---|---|---|---|",
    ]
    dose = cells.dose(runs, results).get("post", {})
    arms = [("Adam, no warmup", dose.get(0, []))]
    arms += [(f"Adam, warmup {w} steps (all layers)", rows) for w, rows in sorted(dose.items()) if w]
    for group in ("gi_adam", "radam", "warmup_top", "warmup_bottom"):
        arms.append((group, cells.arm(runs, group)))
    for name, rows in arms:
        for lr in sorted({r["lr"] for r in rows}):
            at = [r for r in rows if r["lr"] == lr]
            labels = ", ".join(r["label"] for r in at)
            nll, _ = _nll_text(at)
            out.append(f"| {name} | {cells.lr_text(lr)} {_refs(at[:1])} | {labels} {_refs(at)} | {nll} {_refs(at)} |")
    return out + [""]


def sharpness_table(results: dict) -> list[str]:
    arms = results.get("sharpness") or []
    if not arms:
        return []
    until = results["setup"]["sharpness_warmup"]
    out = [
        "**Preconditioned sharpness** (top eigenvalue of P^-1 H, P = sqrt(nu_hat) + eps, over Cohen et al.'s "
        "threshold (2 + 2 b1) / ((1 - b1) lr_t); above 1 is past the adaptive edge of stability)",
        "",
        f"| arm | peak ratio, steps < {until} | peak ratio, whole run | diverged at |",
        "|---|---|---|---|",
    ]
    for i, a in enumerate(arms):
        first, whole = cells.peak_ratio(a, until), cells.peak_ratio(a)
        ref = f"[s{i}]"
        out.append(
            f"| {a['placement']}, warmup {a['warmup']}, seed {a['seed']} | "
            f"{'-' if first is None else f'{first:.3g}'} {ref} | {'-' if whole is None else f'{whole:.3g}'} {ref} | "
            f"{a['diverged_step'] if a['diverged_step'] is not None else 'no'} {ref} |"
        )
    return out + [""]


def row_ids(runs: list[dict], results: dict) -> list[str]:
    """Where each cited id comes from: results.json runs[i] (r<i>) and sharpness[i] (s<i>)."""
    names = [f"{r['ref']} = {r['name']}" for r in runs] + [f"s{i} = {a['name']}" for i, a in
                                                           enumerate(results.get("sharpness") or [])]  # fmt: skip
    return ["<details><summary>Row ids (results.json runs[i] = r<i>, sharpness[i] = s<i>)</summary>", "",
            "; ".join(names), "", "</details>", ""]  # fmt: skip


def answer_section(results: dict) -> list[str]:
    """Markdown lines: per depth, each placement's lr window, the warmup it needs, its final quality with intervals
    and the recommended placement (derived from those numbers); then what the interventions and the sharpness
    say about why. Every number cites the results rows it comes from ([r<i>]: results["runs"][i], [s<i>]:
    results["sharpness"][i]); outcome labels are judged now from the stored curves."""
    runs = cells.labelled(results)
    s = results["setup"]
    failed = sum(r["label"] in FAILED for r in runs)
    out = [
        f"Byte LM d {s['model']['d_model']}, {s['num_steps']} steps, Adam ({s['b1']}, {s['b2']}), H = "
        f"{s['horizon']} steps, fair-control schedule (decay from step {s['decay_start']}); {len(runs)} runs, "
        f"{failed} failed (diverged or stalled).",
        "",
    ]
    for depth in sorted({d for _, d in cells.window(runs)}):
        out += depth_table(runs, results, depth)
    out += depth_to_failure(runs)
    return out + intervention_table(runs, results) + sharpness_table(results) + row_ids(runs, results)
