"""warmup_ablation: learning-rate sensitivity curves with and without warmup per placement and depth (S5, X7)."""

from __future__ import annotations

import hashlib
import json
import os
import platform

import jax

from normjax import train
from normjax.io import write_bytes
from normjax.studies.grid_runs import TARGET_FRACTION, summarize_runs
from normjax.studies.warmup_ablation import figures, runs_code
from normjax.studies.warmup_ablation.config import (
    TRANSLATION,
)  # fmt: skip
from normjax.studies.warmup_ablation.curves import lm_runs
from normjax.train import data_text


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
