"""warmup_ablation's figures: loss curves, heat maps, lr sensitivity curves, a failed run and its rescue."""

from __future__ import annotations

import numpy as np

from normjax import plotting
from normjax.studies.warmup_ablation import curves as runs_of


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
            counts = {o: sum(r["outcome"] == o for r in cell) for o in runs_of.FAILED}
            marks = " ".join(f"{n}{o[:3]}" for o, n in counts.items() if n)
            text[i, j] = ("-" if np.isnan(nll[i, j]) else f"{nll[i, j]:.2f}") + (f"\n{marks}" if marks else "")
    return lrs, warmups, nll, text


def plot(results: dict, study) -> list[str]:
    results = runs_of.relabel(results)  # outcomes judged from the stored curves, at the default thresholds
    rows = runs_of.main_rows(results) or results["runs"]
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
        style = {"linestyle": "--"} if r["outcome"] in runs_of.FAILED else {}
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
    if all("init_valid_nll" in r for r in results["runs"]):  # results from before the lr curves have none
        paths += _plot_sensitivity(results, study) + _plot_failure(results, study)
    if runs_of.translation_runs(results):
        paths += _plot_translation(results, study)
    return paths


def _plot_translation(results: dict, study) -> list[str]:
    """The translation arm: valid nll against steps, one panel per placement, one line per run (dashed without
    warmup), its final test BLEU in the legend; the unigram level of the target tokens dotted."""
    rows = runs_of.translation_runs(results)
    placements = sorted({r["placement"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), width=4.0, height=3.0)
    for ax, placement in zip(axes, placements, strict=True):
        for r in sorted((r for r in rows if r["placement"] == placement), key=lambda r: (r["warmup"], r["seed"])):
            if not r["valid_nll"]:
                continue
            steps, values = zip(*r["valid_nll"], strict=True)
            bleu = r.get("final_test_bleu")
            label = f"warmup {r['warmup']}, seed {r['seed']}: {r['outcome']}" + (
                "" if bleu is None else f", BLEU {bleu:.1f}"
            )
            style = "--" if r["warmup"] == 0 else "-"
            ax.plot(steps, [np.nan if v is None else v for v in values], style, label=label, marker="o", ms=3,
                    color=plotting.color(placement), alpha=1.0 if r["warmup"] else 0.6)  # fmt: skip
        unigram = next((r["unigram_nll"] for r in rows if r.get("unigram_nll")), None)
        if unigram:
            ax.axhline(unigram, **plotting.UNIGRAM_STYLE)
        ax.set(title=f"{placement}: gettext De->En", xlabel="step", ylabel="valid nll (BPE tokens)")
        ax.legend(fontsize=5)
    return plotting.save(fig, study.figure_stem("translation"))


def _curve_label(c: dict) -> str:
    """A curve's legend: placement, warmup, optimizer, and the mitigation arm's grid (it changes the model)."""
    warm = f"warmup {c['warmup']}" if c["warmup"] else "no warmup"
    label = f"{c['placement']}, {warm}" + (f", {c['optimizer']}" if c["optimizer"] != "adam" else "")
    return label + (f" +{c['group']}" if c["group"] in runs_of.MITIGATIONS else "")


def _plot_sensitivity(results: dict, study) -> list[str]:
    """Final valid nll against peak lr (Wortsman et al. 2023's Fig. 1 axes), one panel per depth: the seeds'
    mean of min(final, init) (a failed run at the init loss) with their range, dashed without warmup."""
    curves = runs_of.sensitivity_curves(results)
    if not curves:  # one lr per cell (e.g. an override of train.lr): no curve to draw
        return []
    depths = sorted({c["depth"] for c in curves})
    fig, axes = plotting.figure(ncols=len(depths), width=4.4, height=3.4)
    for ax, depth in zip(axes, depths, strict=True):
        groups: dict = {}
        for c in (c for c in curves if c["depth"] == depth):
            groups.setdefault(_curve_label(c), []).append(c)
        for label, seeds in sorted(groups.items()):
            lrs = seeds[0]["lrs"]
            capped = np.array(
                [
                    [c["init_nll"] if v is None else min(v, c["init_nll"]) for v in c["final"]]
                    for c in seeds
                    if c["lrs"] == lrs
                ]
            )
            first = seeds[0]
            style = dict(linestyle="--" if first["warmup"] == 0 else "-", marker="o", ms=3)
            mean = capped.mean(0)
            ax.errorbar(
                lrs, mean, yerr=[mean - capped.min(0), capped.max(0) - mean], color=plotting.color(first["placement"]),
                label=label, capsize=2, alpha=0.85 if first["warmup"] else 0.6, **style,
            )  # fmt: skip
        ax.set_xscale("log")
        ax.set(xlabel="peak learning rate", ylabel="final valid nll (failed run: init loss)", title=f"{depth} layers")
        plotting.mark_unigram(ax, results)
        plotting.legend_outside(ax)
    fig.suptitle("lr sensitivity curves (as Wortsman et al. 2023, Fig. 1): seed mean and range", fontsize=8)
    return plotting.save(fig, study.figure_stem("lr_sensitivity"))


def failure_pair(results: dict) -> tuple[dict, dict] | None:
    """(failed, healthy): Post-LN without warmup that stalled or diverged, and the same lr, depth and seed with the
    longest warmup that trained (the lowest such lr), or None."""
    runs = [r for r in runs_of.lm_runs(results) if r["placement"] == "post" and r["optimizer"] == "adam"]
    longest = max((r["warmup"] for r in runs), default=0)
    for r in sorted(runs, key=lambda r: (r["lr"], r["depth"], r["seed"])):
        if r["warmup"] == 0 and r["outcome"] in runs_of.FAILED:
            twin = [
                w for w in runs
                if w["warmup"] == longest > 0 and w["outcome"] == "trained"
                and (w["lr"], w["depth"], w["seed"], w.get("group")) == (r["lr"], r["depth"], r["seed"], r.get("group"))
            ]  # fmt: skip
            if twin:
                return r, twin[0]
    return None


def _plot_failure(results: dict, study) -> list[str]:
    """A failed Post-LN run next to the same run with warmup: train nll, the largest LN-input rms, the first
    layer's gradient norm over the last layer's, and the update-to-parameter ratio, against steps."""
    pair = failure_pair(results)
    if pair is None:
        return []
    fig, axes = plotting.figure(ncols=4, width=3.4, height=2.8)
    for r, style in zip(pair, ("--", "-"), strict=True):
        label = f"warmup {r['warmup']}: {r['outcome']}"
        color = plotting.color(r["placement"])
        for ax, curve in zip(axes, (r["train_nll"], r["norm_input_rms"], None, r["update_ratio"]), strict=True):
            if curve is None:  # the gradient ratio from the per-layer norms
                curve = [[s, g[0] / g[-1]] for s, g in r["layer_grad_norm"] if g and g[-1]]
            if curve:
                steps, values = zip(*curve, strict=True)
                ax.plot(steps, [np.nan if v is None else v for v in values], style, color=color, label=label)
    titles = ("train nll", "largest LN-input rms", "grad norm: layer 0 / last", "||update|| / ||params||")
    for ax, title in zip(axes, titles, strict=True):
        ax.set(title=title, xlabel="step")
        ax.legend(fontsize=6)
    for ax in axes[1:]:
        ax.set_yscale("log")
    plotting.mark_unigram(axes[0], results)
    failed = pair[0]
    fig.suptitle(f"Post-LN, {failed['depth']} layers, lr {failed['lr']:g}, seed {failed['seed']}", fontsize=8)
    return plotting.save(fig, study.figure_stem("failure"))


def _arm(r: dict) -> str:
    """The label of a run's no-warmup cell: its grid (or the main grid's schedule), depth and lr."""
    return f"{r.get('group') or 'main'}\nL={r['depth']} lr {r['lr']:g}"


def _plot_no_warmup(results: dict, study) -> list[str]:
    """Every cell without warmup (depth x lr, schedule and optimizer arms): one dot per seed, failed runs hollow,
    against the unigram and stall levels."""
    rows = [r for r in runs_of.lm_runs(results) if r["warmup"] == 0]
    placements = sorted({r["placement"] for r in rows})
    fig, axes = plotting.figure(ncols=len(placements), width=max(4.0, 0.55 * len({_arm(r) for r in rows})), height=3)
    for ax, placement in zip(axes, placements, strict=True):
        own = [r for r in rows if r["placement"] == placement]
        arms = sorted({_arm(r) for r in own})
        for r in own:
            nll = r["final_valid_nll"] if r["outcome"] != "diverged" and r["final_valid_nll"] else np.nan
            failed = r["outcome"] in runs_of.FAILED
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
