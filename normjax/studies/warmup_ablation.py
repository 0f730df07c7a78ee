"""warmup_ablation: the lr x warmup x placement grid through the sweep engine, curves and heat maps (S5, X7)."""

from __future__ import annotations

import os

import jax
import numpy as np

from normjax import plotting, train
from normjax.train import records, tasks
from normjax.train.job import prepare


def run_grid(config, folder: str, shard: tuple[int, int] = (0, 1), progress: bool = True, force: bool = False) -> dict:
    """Runs (a shard of) the sweep into `folder`; finished runs are skipped, unfinished ones resume."""
    runs = train.expand(config, jax.device_count())
    return train.run_sweep(runs, folder, shard, force=force, vmap=config.sweep.vmap, progress=progress)


def _curve(folder: str, name: str, key: str) -> list[list[float]]:
    """[[step, value], ...] of one metric from a run's metrics.jsonl (None where non-finite)."""
    return [
        [r["step"], r.get(key)] for r in records.read_jsonl(os.path.join(folder, name, "metrics.jsonl")) if key in r
    ]


def _steps_to(curve: list, target: float) -> int | None:
    return next((step for step, v in curve if v is not None and v <= target), None)


def summarize_runs(sweep: dict, folder: str) -> list[dict]:
    """One row per run: its axes, outcome, final metrics and curves."""
    rows = []
    for run in sweep["runs"]:
        summary = run["summary"] or {}
        final = summary.get("final", {})
        rows.append(
            {
                "name": run["name"],
                "placement": run["overrides"].get("model.placement"),
                "lr": run["overrides"].get("train.lr"),
                "warmup": run["overrides"].get("train.warmup_steps"),
                "depth": run["overrides"].get("model.num_layers"),
                "outcome": summary.get("outcome", run["status"]),
                "diverged_step": summary.get("diverged_step"),
                "final_valid_nll": final.get("valid/nll"),
                "final_valid_bleu": final.get("valid/bleu"),
                "train_nll": _curve(folder, run["name"], "train/nll"),
                "valid_nll": _curve(folder, run["name"], "valid/nll"),
                "norm_input_rms": _curve(folder, run["name"], "diag/norm_input_rms/decoder"),
            }
        )
    finals = [r["final_valid_nll"] for r in rows if r["outcome"] == "ok" and r["final_valid_nll"] is not None]
    target = 1.25 * min(finals) if finals else None
    for r in rows:
        r["steps_to_target"] = None if target is None else _steps_to(r["train_nll"], target)
    return rows


def compute(config, study) -> dict:
    sweep = run_grid(config, study.path)
    rows = summarize_runs(sweep, study.path)
    results = {
        "runs": rows,
        "model": dict(config.model),
        "data_task": config.data.task,
        "num_steps": config.train.num_steps,
        "schedule": config.train.schedule,
        "unigram_nll": tasks.unigram_nll(prepare(train.expand(config, 1)[0].run)[0].train),
    }
    return results


def _grid(rows, placement):
    lrs = sorted({r["lr"] for r in rows})
    warmups = sorted({r["warmup"] for r in rows})
    nll = np.full((len(lrs), len(warmups)), np.nan)
    diverged = np.zeros_like(nll, bool)
    for r in rows:
        if r["placement"] == placement:
            i, j = lrs.index(r["lr"]), warmups.index(r["warmup"])
            diverged[i, j] = r["outcome"] == "diverged"
            nll[i, j] = np.nan if r["final_valid_nll"] is None else r["final_valid_nll"]
    return lrs, warmups, nll, diverged


def plot(results: dict, study) -> list[str]:
    rows = [r for r in results["runs"] if r["depth"] is None] or results["runs"]
    placements = sorted({r["placement"] for r in rows})
    lrs = sorted({r["lr"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), nrows=len(lrs), width=3.6, height=2.6)
    warmups = sorted({r["warmup"] for r in rows})
    shades = dict(zip(warmups, np.linspace(1.0, 0.35, len(warmups)), strict=True))
    for r in rows:
        ax = axes[lrs.index(r["lr"]) * len(placements) + placements.index(r["placement"])]
        steps, values = zip(*r["train_nll"], strict=True) if r["train_nll"] else ((), ())
        label = f"warmup {r['warmup']}" + (" (diverged)" if r["outcome"] == "diverged" else "")
        ax.plot(
            steps,
            [np.nan if v is None else v for v in values],
            color=plotting.color(r["placement"]),
            alpha=shades[r["warmup"]],
            label=label,
        )
        ax.set(title=f"{r['placement']}, lr {r['lr']:g}", xlabel="step", ylabel="train nll")
    for ax in axes:
        plotting.mark_unigram(ax, results)
        ax.legend(fontsize=6)
    paths = plotting.save(fig, study.figure_stem("loss_curves"))
    fig, axes = plotting.figure(ncols=len(placements), width=3.6, height=3.0)
    finals = [r["final_valid_nll"] for r in rows if r["final_valid_nll"] is not None]
    vmin, vmax = (min(finals), max(finals)) if finals else (0.0, 1.0)  # one colour scale for every panel
    for ax, placement in zip(axes, placements, strict=True):
        lrs_, warmups_, nll, diverged = _grid(rows, placement)
        image = ax.imshow(nll, cmap="viridis_r", aspect="auto", vmin=vmin, vmax=vmax)
        for i in range(len(lrs_)):
            for j in range(len(warmups_)):
                text = "div" if diverged[i, j] else f"{nll[i, j]:.2f}"
                light = np.isfinite(nll[i, j]) and nll[i, j] < (vmin + vmax) / 2
                ax.text(j, i, text, ha="center", va="center", color="black" if light else "white", fontsize=8)
        ax.set(
            title=f"{placement}: final valid nll",
            xticks=range(len(warmups_)),
            yticks=range(len(lrs_)),
            xticklabels=warmups_,
            yticklabels=[f"{lr:g}" for lr in lrs_],
            xlabel="warmup steps",
            ylabel="peak lr",
        )
        ax.grid(False)
        fig.colorbar(image, ax=ax, shrink=0.8)
    if results.get("unigram_nll") is not None:
        fig.suptitle(f"unigram level $H(p)$ = {results['unigram_nll']:.2f} nats per token", fontsize=8)
    return paths + plotting.save(fig, study.figure_stem("heatmap"))
