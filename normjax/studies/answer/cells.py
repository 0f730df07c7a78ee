"""answer's cells: results.json's runs grouped as the rules, tables and figures read them, with outcome labels."""

from __future__ import annotations

import math

import numpy as np

from normjax.train.outcomes import FAILED, label

ADAM = "adam"


def labelled(results: dict, **moved) -> list[dict]:
    """results["runs"], each with "label" (judged now from its stored curve, `outcomes.label`; `moved` passes
    band/falling when the report moves the thresholds) and "ref" (its row id in the answer section)."""
    unigram = results["unigram_nll"]
    return [r | {"label": label(r, unigram, **moved), "ref": f"r{i}"} for i, r in enumerate(results["runs"])]


def window(runs: list[dict]) -> dict[tuple[str, int], dict[float, list[dict]]]:
    """(placement, depth) -> {lr: every seed run there without warmup with Adam (the window's first seed, the
    boundary and quality grids' further seeds)}."""
    out: dict = {}
    for r in runs:
        if r["group"] == "window":
            out.setdefault((r["placement"], r["depth"]), {})[r["lr"]] = []
    for r in runs:
        extra = r["group"].startswith(("boundary", "quality"))
        if (
            (r["group"] == "window" or extra)
            and (r["placement"], r["depth"]) in out
            and r["lr"] in out[(r["placement"], r["depth"])]
        ):
            out[(r["placement"], r["depth"])][r["lr"]].append(r)
    return out


def cell_label(rows: list[dict]) -> str:
    """'trained' when at least half the seeds trained, else the commonest other label."""
    labels = [r["label"] for r in rows]
    if 2 * labels.count("trained") >= len(labels):
        return "trained"
    others = [x for x in labels if x != "trained"]
    return max(sorted(set(others)), key=others.count)


def trained_lrs(curve: dict[float, list[dict]]) -> list[float]:
    """The lrs of a window curve where at least half the seeds trained."""
    return sorted(lr for lr, rows in curve.items() if cell_label(rows) == "trained")


def best_cell(runs: list[dict], results: dict, placement: str, depth: int) -> list[dict]:
    """Every seed at the curve's best lr (results["best_lr"], chosen from the first seed when the study ran)."""
    lr = next((b["lr"] for b in results["best_lr"] if (b["placement"], b["depth"]) == (placement, depth)), None)
    if lr is None:
        return []
    return [
        r
        for r in runs
        if (r["placement"], r["depth"], r["lr"], r["warmup"], r["optimizer"]) == (placement, depth, lr, 0, ADAM)
        and (r["group"] == "window" or r["group"].startswith("quality"))
    ]


def final_nll(rows: list[dict]) -> dict[int, float]:
    """seed -> final valid nll of the rows that did not fail (a diverged or stalled run has no quality to compare)."""
    return {r["seed"]: r["final_valid_nll"] for r in rows if r["label"] not in FAILED}


def paired_difference(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """a - b over the seeds both have (same seed: same init and data order)."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def dose(runs: list[dict], results: dict) -> dict[str, dict[int, list[dict]]]:
    """placement -> {warmup steps: runs} of the dose grid (the dose depth, Adam) at every lr it ran."""
    out: dict = {}
    for r in runs:
        if r["group"] == "dose":
            out.setdefault(r["placement"], {}).setdefault(r["warmup"], []).append(r)
    return out


def arm(runs: list[dict], group: str) -> list[dict]:
    return [r for r in runs if r["group"] == group]


def untrained_fraction(rows: list[dict]) -> float:
    """The fraction of `rows` that did not train: diverged, stalled, or still at the plateau level (slow)."""
    return float(np.mean([r["label"] != "trained" for r in rows])) if rows else math.nan


def lr_text(lr: float) -> str:
    """10^-2.5 style for half-decade lrs, else %g."""
    k = math.log10(lr) * 2
    return f"10^{k / 2:g}" if abs(k - round(k)) < 1e-9 else f"{lr:g}"


def peak_ratio(arm_record: dict, until: int | None = None) -> float | None:
    """max over probes (t < until: inside a warmup of `until` steps) of preconditioned sharpness / Cohen et al.'s
    threshold at the lr of the step."""
    p = arm_record["probes"]
    ratios = [
        s / th
        for t, s, th in zip(p["step"], p["sharpness"], p["threshold"], strict=True)
        if s is not None and th and (until is None or t < until)
    ]
    return max(ratios) if ratios else None
