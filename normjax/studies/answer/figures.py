"""answer's figures from results.json: the lr window heatmap, the warmup dose-response, sharpness against 2/lr."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from normjax import plotting
from normjax.studies.answer import cells

OUTCOME_COLORS = {"trained": "#4daf4a", "slow": "#ffd92f", "stalled": "#ff7f00", "diverged": "#e41a1c"}
OUTCOME_INDEX = {name: i for i, name in enumerate(OUTCOME_COLORS)}


def window_figure(results: dict, runs: list[dict], stem: str) -> list[str]:
    """One panel per placement: depth x lr, coloured by the curve-based outcome, the final nll written in."""
    curves = cells.window(runs)
    placements = sorted({p for p, _ in curves})
    depths = sorted({d for _, d in curves})
    lrs = sorted({lr for c in curves.values() for lr in c})
    fig, axes = plotting.figure(ncols=len(placements), width=2.2 + 0.5 * len(lrs), height=1.8 + 0.5 * len(depths))
    cmap = ListedColormap(list(OUTCOME_COLORS.values()))
    for ax, placement in zip(axes, placements, strict=True):
        grid = np.full((len(depths), len(lrs)), np.nan)
        for i, d in enumerate(depths):
            for j, lr in enumerate(lrs):
                rows = curves.get((placement, d), {}).get(lr)
                if not rows:
                    continue
                grid[i, j] = OUTCOME_INDEX[cells.cell_label(rows)]
                nll = rows[0]["final_valid_nll"]  # the first seed's
                text = "-" if nll is None or not math.isfinite(nll) else f"{nll:.2f}"
                if len(rows) > 1:
                    text += f"\n{sum(r['label'] == 'trained' for r in rows)}/{len(rows)}"
                ax.text(j, i, text, ha="center", va="center", fontsize=6)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(OUTCOME_COLORS) - 0.5, aspect="auto", origin="lower")
        ax.set_xticks(range(len(lrs)), [cells.lr_text(lr) for lr in lrs], fontsize=6, rotation=45)
        ax.set_yticks(range(len(depths)), [str(d) for d in depths], fontsize=7)
        ax.set(xlabel="peak lr (no warmup)", ylabel="layers", title=placement)
    handles = [Patch(color=color, label=name) for name, color in OUTCOME_COLORS.items()]
    fig.suptitle(
        "lr window per placement and depth (cf. Wortsman et al. 2023's final loss vs lr); outcome judged from the "
        "stored validation curve\n(majority of seeds), first seed's final valid nll written in (k/n seeds trained)",
        fontsize=8,
    )
    paths = plotting.save(fig, stem)  # tight_layout first, then the legend in the space it leaves below
    fig.subplots_adjust(bottom=0.32)
    fig.legend(handles=handles, fontsize=6, loc="lower center", ncols=len(handles))
    fig.savefig(paths[0], dpi=130)
    fig.savefig(paths[1])
    return paths


def dose_figure(results: dict, runs: list[dict], stem: str) -> list[str]:
    """Final valid nll against the warmup length (in H), Post-LN and Pre-LN; failed seeds drawn as crosses on top."""
    s = results["setup"]
    fig, (ax,) = plotting.figure()
    top = max((r["final_valid_nll"] or 0.0) for r in runs if r["final_valid_nll"] is not None and
              math.isfinite(r["final_valid_nll"]))  # fmt: skip
    for placement, arms in sorted(cells.dose(runs, results).items()):
        for lr in sorted({r["lr"] for rows in arms.values() for r in rows}):
            xs, ys = [], []
            for w, rows in sorted(arms.items()):
                for r in (r for r in rows if r["lr"] == lr):
                    x = w / s["horizon"]
                    if r["label"] in ("diverged", "stalled"):
                        ax.plot(x, top, "x", color=plotting.color(placement))
                    else:
                        xs.append(x)
                        ys.append(r["final_valid_nll"])
            ax.plot(xs, ys, "o-", color=plotting.color(placement), label=f"{placement}, lr {cells.lr_text(lr)}")
    plotting.mark_unigram(ax, results)
    horizons = sorted({w / s["horizon"] for arms in cells.dose(runs, results).values() for w in arms})
    ax.set(xlabel="warmup length / H (H = 1/(1 - b2))", ylabel="final valid nll", xscale="symlog")
    ax.set_xticks(horizons, [f"{h:g}" for h in horizons])
    ax.set_title(f"warmup dose-response at {s['dose_depth']} layers (x: failed seed)", fontsize=8)
    plotting.legend_outside(ax, fontsize=6)
    return plotting.save(fig, stem)


def sharpness_figure(results: dict, stem: str) -> list[str]:
    """Each arm's Adam-preconditioned sharpness over training, with Cohen et al.'s threshold at its lr (dashed)."""
    arms = results.get("sharpness") or []
    fig, (ax,) = plotting.figure(width=5.0)
    for a in arms:
        p = a["probes"]
        style = dict(color=plotting.color(a["placement"]), ls="-" if a["warmup"] else "--")
        kept = [(t, v) for t, v in zip(p["step"], p["sharpness"], strict=True) if v is not None and v > 0]
        steps, values = [t for t, _ in kept], [v for _, v in kept]  # a log axis: lambda_max <= 0 is left out
        ax.plot(steps, values, marker=".", label=f"{a['placement']}, warmup {a['warmup']}, seed {a['seed']}", **style)
        th = [(t, v) for t, v in zip(p["step"], p["threshold"], strict=True) if v is not None]
        if th:
            ax.plot(*zip(*th, strict=True), color=style["color"], lw=0.6, ls=":")
    ax.set(xlabel="step", ylabel=r"$\lambda_{max}(P^{-1}H)$", yscale="log")
    ax.set_title(
        "Adam-preconditioned sharpness (dashed: no warmup) vs the adaptive edge\n(2 + 2 b1)/((1 - b1) lr_t) (dotted), "
        "cf. Kalra & Barkeshli 2024; Cohen et al. 2022",
        fontsize=7,
    )
    plotting.legend_outside(ax, fontsize=6)
    return plotting.save(fig, stem)


def plot(results: dict, study) -> list[str]:
    runs = cells.labelled(results)
    return (
        window_figure(results, runs, study.figure_stem("lr_window"))
        + dose_figure(results, runs, study.figure_stem("warmup_dose"))
        + sharpness_figure(results, study.figure_stem("sharpness"))
    )
