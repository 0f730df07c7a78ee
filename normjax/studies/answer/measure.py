"""answer: the lr window, depth, warmup dose and final quality per placement, and the interventions (why)."""

from __future__ import annotations

import os

import jax
from tqdm.auto import tqdm

from normjax import train
from normjax.studies.answer.config import MAIN, SIDE
from normjax.studies.answer.sharpness import sharpness_run
from normjax.train import data_text, records
from normjax.train.config_io import sweep_axes
from normjax.train.outcomes import label

QUALITY = "quality"  # the grids added once the window ran: QUALITY_<placement>_L<depth>
BOUNDARY = "boundary"  # and BOUNDARY_<placement>_L<depth>: more seeds on both sides of a failure boundary
SHARPNESS = "sharpness"


def sweep_config(config, grids: dict | None = None):
    """The config the sweep engine reads: without the study's own section, with `grids` instead of its own."""
    out = config.copy_and_resolve_references()
    with out.unlocked():  # the CLI locks its config
        del out[SIDE]
        if grids is not None:
            out.sweep.grids = grids
    return out


def _curve(folder: str, name: str, key: str) -> list:
    rows = records.read_jsonl(os.path.join(folder, name, "metrics.jsonl"))
    return [[r["step"], r.get(key)] for r in rows if key in r]


def summarize(runs: list[train.SweepRun], sweep: dict, folder: str) -> list[dict]:
    """One row per run: its settings (from its config), final numbers, curves and wall time; no outcome label (the
    rules judge it from the stored curve, `normjax.train.outcomes.label`)."""
    by_name = {r.name: r for r in runs}
    out = []
    for entry in sweep["runs"]:
        s, rc = entry["summary"] or {}, by_name[entry["name"]].run
        out.append(
            {
                "name": entry["name"],
                "group": entry["group"],
                "placement": rc.model["placement"],
                "depth": rc.model["num_layers"],
                "lr": rc.train.lr,
                "warmup": rc.train.warmup_steps,
                "optimizer": rc.train.optimizer,
                "seed": rc.train.seed,
                "final_valid_nll": s.get("final", {}).get("valid/nll"),
                "diverged_step": s.get("diverged_step"),
                "unigram_nll": s.get("unigram_nll"),
                "valid_nll": _curve(folder, entry["name"], "valid/nll"),
                "train_nll": _curve(folder, entry["name"], "train/nll"),
                "wall_time_s": s.get("wall_time_s"),
            }
        )
    return out


def best_lrs(rows: list[dict], unigram: float) -> dict[tuple[str, int], float]:
    """(placement, depth) -> the window lr with the lowest final valid nll among its 'trained' runs (first seed);
    a curve where no lr trains has no entry."""
    best: dict[tuple[str, int], tuple[float, float]] = {}
    for r in rows:
        if r["group"] == "window" and label(r, unigram) == "trained":
            key = (r["placement"], r["depth"])
            if key not in best or r["final_valid_nll"] < best[key][1]:
                best[key] = (r["lr"], r["final_valid_nll"])
    return {k: lr for k, (lr, _) in best.items()}


def boundary_lrs(curve: dict[float, str]) -> list[float]:
    """The lrs on either side of each change between 'trained' and not along a curve ({lr: label})."""
    lrs, out = sorted(curve), set()
    for a, b in zip(lrs, lrs[1:], strict=False):
        if (curve[a] == "trained") != (curve[b] == "trained"):
            out |= {a, b}
    return sorted(out)


def boundary_grids(rows: list[dict], unigram: float, best: dict, seeds: list[int], count: int) -> dict:
    """`count` seeds beyond the window's one at the cells on either side of each failure boundary of every window
    curve (first-seed labels), but at its best lr (the quality grid seeds that cell)."""
    curves: dict = {}
    for r in rows:
        if r["group"] == "window":
            curves.setdefault((r["placement"], r["depth"]), {})[r["lr"]] = label(r, unigram)
    grids = {}
    for (placement, depth), curve in sorted(curves.items()):
        lrs = [lr for lr in boundary_lrs(curve) if lr != best.get((placement, depth))]
        if lrs and count:
            grids[f"{BOUNDARY}_{placement}_L{depth}"] = sweep_axes(
                {"model.placement": [placement], "model.num_layers": [depth], "train.lr": lrs,
                 "train.warmup_steps": [0], "train.seed": seeds[1 : 1 + count]}
            )  # fmt: skip
    return grids


def quality_grids(best: dict, seeds: list[int]) -> dict:
    """The seeds beyond the window's one at each curve's best lr, no warmup."""
    return {
        f"{QUALITY}_{placement}_L{depth}": sweep_axes(
            {"model.placement": [placement], "model.num_layers": [depth], "train.lr": [lr],
             "train.warmup_steps": [0], "train.seed": seeds[1:]}
        )
        for (placement, depth), lr in sorted(best.items())
    }  # fmt: skip


def sharpness_runs(config) -> list[train.SweepRun]:
    side = config[SIDE]
    steps = side.sharpness_steps or config.train.num_steps  # 0: the run's length, read after any flag override
    grid = {
        SHARPNESS: sweep_axes(
            {"model.placement": list(MAIN), "model.num_layers": [side.dose_depth], "train.lr": [side.dose_lr],
             "train.warmup_steps": [0, side.sharpness_warmup], "train.num_steps": [steps],
             "train.seed": [config.train.seed + k for k in range(side.sharpness_seeds)]}
        )
    }  # fmt: skip
    return train.expand(sweep_config(config, grid), jax.device_count())


def _sweep(config, runs, folder):
    return train.run_sweep(runs, folder, workers=config.sweep.workers, parallel=config.sweep.parallel)


def compute(config, study) -> dict:
    devices = jax.device_count()
    first = train.expand(sweep_config(config), devices)
    sweep = _sweep(config, first, study.path)
    rows = summarize(first, sweep, study.path)
    unigram = next(r["unigram_nll"] for r in rows if r["unigram_nll"] is not None)  # a property of the data
    seeds = [config.train.seed + k for k in range(config[SIDE].num_seeds)]
    best = best_lrs(rows, unigram)
    grids = quality_grids(best, seeds) if len(seeds) > 1 else {}
    grids |= boundary_grids(rows, unigram, best, seeds, config[SIDE].boundary_seeds)
    second = train.expand(sweep_config(config, grids), devices) if grids else []
    if second:
        sweep = _sweep(config, first + second, study.path)
        rows = summarize(first + second, sweep, study.path)
    side = config[SIDE]
    arms = []
    for run in tqdm(sharpness_runs(config), desc="answer sharpness", unit="run"):
        arms.append(study.cached(run.name, lambda r=run: sharpness_run(r, side.sharpness_every, side.sharpness_dim)))
    return {
        "runs": rows,
        "sharpness": arms,
        "unigram_nll": unigram,
        "best_lr": [{"placement": p, "depth": d, "lr": lr} for (p, d), lr in sorted(best.items())],
        "setup": {
            "model": dict(config.model),
            "num_steps": config.train.num_steps,
            "b1": config.train.b1,
            "b2": config.train.b2,
            "horizon": round(1 / (1 - config.train.b2)),
            "decay_start": config.train.decay_start,
            "schedule": config.train.schedule,
        }
        | dict(side),
        "data": {"task": "bytes_lm"} | data_text.byte_corpus_record(config.data.path, config.data.suffix,
                                                                     config.data.max_bytes),
    }  # fmt: skip
