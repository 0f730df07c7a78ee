"""warmup_ablation: learning-rate sensitivity curves with and without warmup per placement and depth (S5, X7)."""

from __future__ import annotations

import hashlib
import json
import os
import platform

import jax

from normjax import train
from normjax.io import write_bytes
from normjax.studies.warmup_ablation import figures, runs_code
from normjax.studies.warmup_ablation.config import (
    TRANSLATION,
)  # fmt: skip
from normjax.studies.warmup_ablation.curves import lm_runs
from normjax.train import data_text, records

# steps-to-target: the first logged step whose train nll is <= TARGET_FRACTION x H (H the unigram entropy),
# an absolute target (a property of the data, the same for every run), below the plateau level (outcomes.label).
TARGET_FRACTION = 0.80


def run_grid(config, folder: str, shard: tuple[int, int] = (0, 1), progress: bool = True, force: bool = False) -> dict:
    """Runs (a shard of) the sweep and its sub-grids into `folder`; finished runs are skipped, unfinished ones
    resume, runs trained by other training code are trained again (runs_code)."""
    runs = train.expand(config, jax.device_count())
    runs_code.drop_runs_of_other_code(folder, [r.name for r in runs])
    return train.run_sweep(
        runs,
        folder,
        shard,
        force=force,
        vmap=config.sweep.vmap,
        progress=progress,
        workers=config.sweep.workers,
        parallel=config.sweep.parallel,
    )


def _curve(folder: str, name: str, key: str) -> list[list[float]]:
    """[[step, value], ...] of one metric from a run's metrics.jsonl (None where non-finite)."""
    return [
        [r["step"], r.get(key)] for r in records.read_jsonl(os.path.join(folder, name, "metrics.jsonl")) if key in r
    ]


def _ratio_curve(folder: str, name: str) -> list[list[float]]:
    """[[step, ||update|| / ||params||], ...]: the relative size of each logged update."""
    rows = records.read_jsonl(os.path.join(folder, name, "metrics.jsonl"))
    return [
        [r["step"], r["train/update_norm"] / r["train/param_norm"]]
        for r in rows
        if r.get("train/update_norm") is not None and r.get("train/param_norm")
    ]


def steps_to(curve: list, target: float) -> int | None:
    """The first step of `curve` ([[step, value], ...]) at or below `target`; None if never."""
    return next((step for step, v in curve if v is not None and v <= target), None)


def summarize_runs(config, sweep: dict, folder: str) -> list[dict]:
    """One row per run: its grid, settings (from its config, not only its overrides), outcome, final metrics,
    curves and steps to the absolute target TARGET_FRACTION x H."""
    by_name = {r.name: r for r in train.expand(config, jax.device_count())}
    rows = []
    for entry in sweep["runs"]:
        summary, run = entry["summary"] or {}, by_name[entry["name"]].run
        final, unigram = summary.get("final", {}), summary.get("unigram_nll")
        train_nll = _curve(folder, entry["name"], "train/nll")
        valid_nll = _curve(folder, entry["name"], "valid/nll")
        rows.append(
            {
                "name": entry["name"],
                "group": entry.get("group", ""),
                "placement": run.model["placement"],
                "depth": run.model["num_layers"],
                "lr": run.train.lr,
                "warmup": run.train.warmup_steps,
                "seed": run.train.seed,
                "schedule": run.train.schedule,
                "optimizer": run.train.optimizer,
                "b2": run.train.b2,
                "diverged": summary.get("outcome") == "diverged",  # an event; other outcomes are judged later
                "diverged_step": summary.get("diverged_step"),
                "unigram_nll": unigram,
                "final_valid_nll": final.get("valid/nll"),
                "task": run.data.task,
                "data": summary.get("data"),
                "final_valid_bleu": final.get("valid/bleu"),
                "final_test_bleu": final.get("test/bleu"),
                "train_nll": train_nll,
                "valid_nll": valid_nll,
                "norm_input_rms": _curve(folder, entry["name"], "diag/norm_input_rms/decoder"),
                "ln_input_rms": _curve(folder, entry["name"], "diag/ln_input_rms/decoder"),
                "attn_logit_max": _curve(folder, entry["name"], "diag/attn_logit_max/decoder"),
                "output_logit_max": _curve(folder, entry["name"], "diag/output_logit_max"),
                "output_logit_mean": _curve(folder, entry["name"], "diag/output_logit_mean"),
                "layer_grad_norm": _curve(folder, entry["name"], "diag/grad_norm/decoder"),
                "update_ratio": _ratio_curve(folder, entry["name"]),
                "init_valid_nll": next((v for step, v in valid_nll if step == 0), None),
                "steps_to_target": None if unigram is None else steps_to(train_nll, TARGET_FRACTION * unigram),
            }
        )
    return rows


def data_record(config) -> dict:
    """What names the data: the sha256 of the exact bytes (bytes_lm) or the task and path, with Python's version."""
    if config.data.task == "bytes_lm":
        return {"task": "bytes_lm"} | data_text.byte_corpus_record(
            config.data.path, config.data.suffix, config.data.max_bytes
        )
    return {"task": config.data.task, "path": config.data.path, "python_version": platform.python_version()}


def compute(config, study) -> dict:
    sweep = run_grid(config, study.path)
    runs = summarize_runs(config, sweep, study.path)
    lm = lm_runs({"runs": runs})
    unigram = next((r["unigram_nll"] for r in lm if r["unigram_nll"] is not None), None)  # a property of the data
    translation = [r for r in runs if r["group"] == TRANSLATION]
    return {
        "runs": runs,
        "model": dict(config.model),
        "data_task": config.data.task,
        "data": data_record(config),
        "num_steps": config.train.num_steps,
        "schedule": config.train.schedule,
        "decay_start": config.train.decay_start,
        "b2": config.train.b2,
        "unigram_nll": unigram,
        "target_nll": None if unigram is None else TARGET_FRACTION * unigram,
        "target_fraction": TARGET_FRACTION,
        "translation": translation_record(config, translation, study.path),
    }


MANIFEST_COPY = "gettext_manifest.json"  # the corpus manifest beside results.json (catalogs and their sha256)


def translation_record(config, runs: list[dict], folder: str) -> dict | None:
    """The translation arm's settings and the corpus it read (from the runs' summaries); the corpus manifest is
    copied to FOLDER/gettext_manifest.json after checking its sha256 against the one every run recorded."""
    if not runs:
        return None
    axes = {k: list(v) for k, v in config.sweep.grids[TRANSLATION].items()}
    corpora = {json_key(r["data"]) for r in runs}
    if len(corpora) != 1:  # every run of the arm must have read one corpus
        raise ValueError(f"the translation runs read {len(corpora)} different corpora: {sorted(corpora)}")
    data = runs[0]["data"]
    with open(os.path.join(data["path"], "manifest.json"), "rb") as f:
        raw = f.read()
    if hashlib.sha256(raw).hexdigest() != data["manifest_sha256"]:
        raise ValueError(f"{data['path']}/manifest.json changed since the translation runs read it (sha256 differs)")
    write_bytes(os.path.join(folder, MANIFEST_COPY), raw)
    return {"axes": axes, "data": data, "manifest": MANIFEST_COPY}


def json_key(value) -> str:
    return json.dumps(value, sort_keys=True)


plot = figures.plot  # the study's figures (Study.plot reads measure.plot)
