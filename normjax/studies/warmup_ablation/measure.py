"""warmup_ablation: placement x lr x warmup (and depth, schedule, optimizer arms) through the sweep engine (S5, X7)."""

from __future__ import annotations

import os

import jax
import numpy as np

from normjax import plotting, train
from normjax.train import records, tasks
from normjax.train.job import prepare
from normjax.train.outcomes import STALL_FRACTION, stall_level

# steps-to-target: the first logged step whose train nll is <= TARGET_FRACTION x H (H the unigram entropy),
# an absolute target (a property of the data, the same for every run), clearly below the stall level 0.9 H.
TARGET_FRACTION = 0.80
FAILED = ("stalled", "diverged")


def run_grid(config, folder: str, shard: tuple[int, int] = (0, 1), progress: bool = True, force: bool = False) -> dict:
    """Runs (a shard of) the sweep and its sub-grids into `folder`; finished runs are skipped, unfinished ones
    resume."""
    runs = train.expand(config, jax.device_count())
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
                "outcome": summary.get("outcome", entry["status"]),
                "diverged_step": summary.get("diverged_step"),
                "unigram_nll": unigram,
                "final_valid_nll": final.get("valid/nll"),
                "final_valid_bleu": final.get("valid/bleu"),
                "train_nll": train_nll,
                "valid_nll": _curve(folder, entry["name"], "valid/nll"),
                "norm_input_rms": _curve(folder, entry["name"], "diag/norm_input_rms/decoder"),
                "steps_to_target": None if unigram is None else steps_to(train_nll, TARGET_FRACTION * unigram),
            }
        )
    return rows


def compute(config, study) -> dict:
    sweep = run_grid(config, study.path)
    unigram = tasks.unigram_nll(prepare(train.expand(config, 1)[0].run)[0].train)
    return {
        "runs": summarize_runs(config, sweep, study.path),
        "model": dict(config.model),
        "data_task": config.data.task,
        "num_steps": config.train.num_steps,
        "schedule": config.train.schedule,
        "unigram_nll": unigram,
        "stall_nll": stall_level(unigram),
        "stall_fraction": STALL_FRACTION,
        "target_nll": TARGET_FRACTION * unigram,
        "target_fraction": TARGET_FRACTION,
    }


def main_rows(results: dict) -> list[dict]:
    """The main grid's runs (config.sweep.axes: the preset's schedule, Adam, the model's depth)."""
    return [r for r in results["runs"] if not r.get("group")]


def _grid(rows, placement):
    """(lrs, warmups, mean final nll, text per cell) of one placement, averaged over seeds."""
    lrs = sorted({r["lr"] for r in rows})
    warmups = sorted({r["warmup"] for r in rows})
    nll = np.full((len(lrs), len(warmups)), np.nan)
    text = np.full(nll.shape, "", dtype=object)
    for i, lr in enumerate(lrs):
        for j, w in enumerate(warmups):
            cell = [r for r in rows if r["placement"] == placement and r["lr"] == lr and r["warmup"] == w]
            finals = [r["final_valid_nll"] for r in cell if r["outcome"] != "diverged" and r["final_valid_nll"]]
            nll[i, j] = np.mean(finals) if finals else np.nan
            counts = {o: sum(r["outcome"] == o for r in cell) for o in FAILED}
            marks = " ".join(f"{n}{o[:3]}" for o, n in counts.items() if n)
            text[i, j] = ("-" if np.isnan(nll[i, j]) else f"{nll[i, j]:.2f}") + (f"\n{marks}" if marks else "")
    return lrs, warmups, nll, text


def plot(results: dict, study) -> list[str]:
    rows = main_rows(results) or results["runs"]
    placements = sorted({r["placement"] for r in rows})
    lrs = sorted({r["lr"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), nrows=len(lrs), width=3.6, height=2.6)
    warmups = sorted({r["warmup"] for r in rows})
    shades = dict(zip(warmups, np.linspace(1.0, 0.35, len(warmups)), strict=True))
    labelled = set()
    for r in rows:
        ax = axes[lrs.index(r["lr"]) * len(placements) + placements.index(r["placement"])]
        steps, values = zip(*r["train_nll"], strict=True) if r["train_nll"] else ((), ())
        label = f"warmup {r['warmup']}" if (id(ax), r["warmup"]) not in labelled else None
        labelled.add((id(ax), r["warmup"]))
        style = {"linestyle": "--"} if r["outcome"] in FAILED else {}
        ax.plot(
            steps,
            [np.nan if v is None else v for v in values],
            color=plotting.color(r["placement"]),
            alpha=shades[r["warmup"]],
            label=label,
            **style,
        )
        ax.set(title=f"{r['placement']}, lr {r['lr']:g}", xlabel="step", ylabel="train nll")
    for ax in axes:
        plotting.mark_unigram(ax, results)
        ax.legend(fontsize=6, title="dashed: stalled/diverged", title_fontsize=6)
    paths = plotting.save(fig, study.figure_stem("loss_curves"))
    fig, axes = plotting.figure(ncols=len(placements), width=3.6, height=3.0)
    finals = [r["final_valid_nll"] for r in rows if r["final_valid_nll"] is not None]
    vmin, vmax = (min(finals), max(finals)) if finals else (0.0, 1.0)  # one colour scale for every panel
    for ax, placement in zip(axes, placements, strict=True):
        lrs_, warmups_, nll, text = _grid(rows, placement)
        image = ax.imshow(nll, cmap="viridis_r", aspect="auto", vmin=vmin, vmax=vmax)
        for i in range(len(lrs_)):
            for j in range(len(warmups_)):
                light = np.isfinite(nll[i, j]) and nll[i, j] < (vmin + vmax) / 2
                ax.text(j, i, text[i, j], ha="center", va="center", color="black" if light else "white", fontsize=7)
        ax.set(
            title=f"{placement}: final valid nll (seed mean)",
            xticks=range(len(warmups_)),
            yticks=range(len(lrs_)),
            xticklabels=warmups_,
            yticklabels=[f"{lr:g}" for lr in lrs_],
            xlabel="warmup steps",
            ylabel="peak lr",
        )
        ax.grid(False)
        bar = fig.colorbar(image, ax=ax, shrink=0.8)
        if results.get("unigram_nll") is not None:  # the unigram level and the stall level on the colour scale
            bar.ax.axhline(results["unigram_nll"], **plotting.UNIGRAM_STYLE)
            if results.get("stall_nll") is not None:
                bar.ax.axhline(results["stall_nll"], **plotting.STALL_STYLE)
    if results.get("unigram_nll") is not None:
        stall = results.get("stall_nll")
        fig.suptitle(
            f"unigram level H = {results['unigram_nll']:.2f} nats per token (dotted); "
            + ("no stall level in these results" if stall is None else f"cells at or above {stall:.2f} stalled")
            + "; Nsta / Ndiv: seeds stalled / diverged",
            fontsize=7,
        )
    paths += plotting.save(fig, study.figure_stem("heatmap"))
    if all("group" in r for r in results["runs"]):  # results from before the arms existed have no such cells
        paths += _plot_no_warmup(results, study)
    return paths


def _arm(r: dict) -> str:
    """The label of a run's no-warmup cell: its grid (or the main grid's schedule), depth and lr."""
    return f"{r.get('group') or 'main'}\nL={r['depth']} lr {r['lr']:g}"


def _plot_no_warmup(results: dict, study) -> list[str]:
    """Every cell without warmup (depth x lr, schedule and optimizer arms): one dot per seed, failed runs hollow,
    against the unigram and stall levels."""
    rows = [r for r in results["runs"] if r["warmup"] == 0]
    placements = sorted({r["placement"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), width=max(4.0, 0.55 * len({_arm(r) for r in rows})), height=3)
    for ax, placement in zip(axes, placements, strict=True):
        own = [r for r in rows if r["placement"] == placement]
        arms = sorted({_arm(r) for r in own})
        for r in own:
            nll = r["final_valid_nll"] if r["outcome"] != "diverged" and r["final_valid_nll"] else np.nan
            failed = r["outcome"] in FAILED
            color = plotting.color(placement)
            x = arms.index(_arm(r)) + 0.08 * (r["seed"] % 3 - 1)
            ax.plot(x, nll, "o", mfc="none" if failed else color, mec=color, ms=5)
            if r["outcome"] == "diverged":
                ax.annotate("div", (x, results.get("unigram_nll") or 0), fontsize=6, ha="center")
        plotting.mark_unigram(ax, results)
        ax.set_xticks(range(len(arms)), arms, fontsize=6)
        ax.set(title=f"{placement}, no warmup: final valid nll per seed (hollow: stalled/diverged)", ylabel="nll")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=6)
    return plotting.save(fig, study.figure_stem("no_warmup"))
