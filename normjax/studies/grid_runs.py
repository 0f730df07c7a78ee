"""A sweep grid's finished runs as rows (settings, outcome events, curves): warmup_ablation's and the groups'."""

from __future__ import annotations

import os

import jax

from normjax import train
from normjax.train import records

# steps-to-target: the first logged step whose train nll is <= TARGET_FRACTION x H (H the unigram entropy),
# an absolute target (a property of the data, the same for every run), below the plateau level (outcomes.label).
TARGET_FRACTION = 0.80


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
