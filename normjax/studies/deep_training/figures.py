"""deep_training's figures, drawn from results.json (outside the code fingerprint: redrawing reruns nothing)."""

from __future__ import annotations

import math

import matplotlib.ticker
import numpy as np

from normjax import plotting, specs
from normjax.studies.deep_training.measure import LN_INPUT_LARGE


def _mean(values) -> float:
    """Mean over the seeds that have a value (nan when none has)."""
    x = [v for v in values if v is not None]
    return float(np.mean(x)) if x else math.nan


def _depth_series(by_depth: dict, key: str) -> tuple[list[int], list[float]]:
    """Depths and the across-seed mean of `key` (depths where every seed lacks it are left out)."""
    depths = sorted(by_depth, key=int)
    means = [_mean(s[key] for s in by_depth[d]["per_seed"]) for d in depths]
    return [int(d) for d, m in zip(depths, means, strict=True) if np.isfinite(m)], [m for m in means if np.isfinite(m)]


def _early_update_series(by_depth: dict, d2_by_depth: dict | None) -> tuple[list[int], list[float]]:
    """D2's early update per depth: the mean over D2's seeds where the run has them (results["d2"]), else over the
    main runs' seeds."""
    if d2_by_depth is None:
        return _depth_series(by_depth, "early_update")
    depths = sorted(d2_by_depth, key=int)
    return [int(d) for d in depths], [_mean(d2_by_depth[d]) for d in depths]


def _style(run: str) -> dict:
    side = specs.parse(run).is_variant
    return dict(
        color=plotting.color(specs.parse(run).placement),
        marker="s" if side else "o",
        ms=4,
        label=run,
        linestyle="--" if side else "-",
        mfc="white" if side else None,
    )


def _depth_axis(ax, depths) -> None:
    ax.set_xscale("log")
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def _log_y(ax) -> None:
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def plot(results: dict, study) -> list[str]:
    summary, runs, setup = results["summary"], results["runs"], results["setup"]
    n = len(results["seeds"])
    d2 = results.get("d2") or {"seeds": results["seeds"], "early_update": {}}
    fig, (ax_u, ax_t, ax_l) = plotting.figure(ncols=3)
    for run in summary:
        ax_u.plot(*_early_update_series(summary[run], d2["early_update"].get(run)), **_style(run))
        ax_l.plot(*_depth_series(summary[run], "final_loss"), **_style(run))
    for width, by_run in d2.get("widths", {}).items():  # D2's early-update-only runs at other widths
        for run, by_depth in by_run.items():
            depths = sorted(by_depth, key=int)
            style = _style(run) | {"linestyle": ":", "mfc": "white", "label": f"{run}, d {width}"}
            ax_u.plot([int(d) for d in depths], [_mean(by_depth[d]) for d in depths], **style)
    if "post" in summary:  # the Post-LN prediction: an update growing with depth (O(N), Liu et al.)
        d, u = _early_update_series(summary["post"], d2["early_update"].get("post"))
        ax_u.plot(d, u[0] * np.array(d) / d[0], **plotting.THEORY_STYLE, label=r"$\propto$ depth (Post-LN, O(N))")
    ax_u.set(
        yscale="log",
        xlabel="layers",
        ylabel=r"$\|F(x,\theta_t) - F(x,\theta_0)\|$",
        title=f"early update t = 1..{setup['early_steps']}, lr {setup['update_lr']:g}\n(mean over {n} seeds"
        + (f"; post, deepnorm {len(d2['seeds'])}" if d2["early_update"] else "")
        + ")",
    )
    depths = sorted({int(d) for r in ("post", "deepnorm") for d in runs.get(r, {})})
    for run in ("post", "deepnorm"):
        for i, d in enumerate(depths):
            if str(d) in runs.get(run, {}):
                update = runs[run][str(d)][0]["small_lr_update"]
                ax_t.plot(
                    np.arange(1, len(update)),
                    update[1:],
                    color=plotting.color(run),
                    marker=".",
                    alpha=0.3 + 0.7 * i / max(len(depths) - 1, 1),
                    label=f"{run} L={d}",
                )
    ax_t.set(
        yscale="log",
        xlabel="step t",
        ylabel="model update",
        title=f"update vs step, seed {results['seeds'][0]} (darker = deeper)",
    )
    ax_l.set(
        xlabel="layers",
        ylabel="final train loss (nats/byte)",
        title=f"final loss, lr {setup['lr']:g}, no warmup ({n} seeds)",
    )
    if (unigram := plotting.mark_unigram(ax_l, results)) is not None:  # the runs' colours are ax_u's
        ax_l.legend(handles=[unigram], fontsize=6, loc="best")
    all_depths = sorted({int(d) for by in summary.values() for d in by})
    for ax in (ax_u, ax_l):
        _depth_axis(ax, all_depths)
    for ax in (ax_u, ax_t):  # the colours of ax_l are ax_u's
        _log_y(ax)
        ax.legend(fontsize=6, loc="best")
    config = study.config
    fig.suptitle(
        "cf. DeepNet (Wang et al. 2022) Fig. 5: the early model update of Post-LN and DeepNorm across depth (paper: "
        f"64-128-2 encoder-decoders, 6L-6L to 100L-100L; here: decoder-only byte LMs, d {config['d_model']}, "
        f"FFN {config['d_ff']}, {config['num_heads']} heads)",
        fontsize=8,
    )
    paths = plotting.save(fig, study.figure_stem("depth_sweep"))
    return paths + plot_instability(results, study) + plot_streams(results, study) + plot_s7(results, study)


def plot_instability(results: dict, study) -> list[str]:
    """D3 at the largest depth (first seed): loss, max LN-input rms, bottom-layer gradient, gradient profile."""
    runs = results["runs"]
    depth = max(int(d) for r in runs.values() for d in r)
    fig, axes = plotting.figure(ncols=4, width=3.6)
    for run, by_depth in runs.items():
        if str(depth) not in by_depth:
            continue
        rec, c = by_depth[str(depth)][0], plotting.color(specs.parse(run).placement)
        p, ls = rec["probes"], "--" if specs.parse(run).is_variant else "-"
        grads_PL = np.array(p["layer_grad_norm"], float)
        axes[0].plot(np.arange(1, len(rec["loss"]) + 1), rec["loss"], color=c, ls=ls, lw=1, label=run)
        if max(p["ln_input_rms"]) > 0:
            axes[1].plot(p["step"], p["ln_input_rms"], color=c, ls=ls, marker=".", label=run)
        axes[2].plot(p["step"], grads_PL[:, 0], color=c, ls=ls, marker=".", label=run)
        axes[3].plot(np.arange(grads_PL.shape[1]), grads_PL[-1], color=c, ls=ls, marker=".", label=f"{run} end")
        axes[3].plot(np.arange(grads_PL.shape[1]), grads_PL[0], color=c, ls=":", lw=1)
    axes[1].axhline(1.0, **plotting.THEORY_STYLE, label=r"$\|x\| = \sqrt{d}$")
    axes[1].axhline(LN_INPUT_LARGE, color="grey", ls=":", label=r"D3's $\gg\sqrt{d}$ threshold")
    plotting.mark_unigram(axes[0], results)
    seed = results["seeds"][0]
    axes[0].set(xlabel="step", ylabel="train loss", title=f"L={depth}, lr {results['setup']['lr']:g}, seed {seed}")
    axes[1].set(
        xlabel="step",
        ylabel=r"max over LN sites of $\|x\|/\sqrt{d}$",
        yscale="log",
        title="LN inputs (Pre-LN: the stream)",
    )
    axes[2].set(xlabel="step", ylabel="grad norm, layer 0", yscale="log", title="bottom-layer gradient")
    axes[3].set(xlabel="layer", ylabel="grad norm", yscale="log", title="gradient per layer (dotted: init)")
    for ax in axes:
        ax.legend(fontsize=6)
    return plotting.save(fig, study.figure_stem("instability"))


def plot_streams(results: dict, study) -> list[str]:
    """S4/R4 in training: ||x_l||^2/d against l at init (dotted) and after training (solid), mean over seeds."""
    summary = results["summary"]
    fig, (ax_l, ax_d) = plotting.figure(ncols=2)
    present = [r for r in ("pre", "sandwich") if r in summary]
    shared = set.intersection(*(set(summary[r]) for r in present)) if present else set()
    for run in present:  # the left panel at R4's depth: the largest both ran at
        depth = max(shared or summary[run], key=int)
        per_seed = summary[run][depth]["per_seed"]
        for key, ls in (("stream_ms_init", ":"), ("stream_ms_end", "-")):
            ms = np.mean([s[key] for s in per_seed], axis=0)
            label = f"{run} L={depth} {'init' if key.endswith('init') else 'trained'}"
            ax_l.plot(np.arange(len(ms)), ms, color=plotting.color(run), ls=ls, label=label)
        ax_d.plot(*_last_stream(summary[run]), **_style(run))
    ax_l.set(xlabel="stream l", ylabel=r"$\|x_l\|^2/d$", yscale="log", title="residual stream (mean over seeds)")
    ax_d.set(xlabel="layers L", ylabel=r"$\|x_L\|^2/d$ after training", yscale="log", title="last stream vs depth")
    depths = sorted({int(d) for r in ("pre", "sandwich") for d in summary.get(r, {})})
    if depths:
        _depth_axis(ax_d, depths)
    for ax in (ax_l, ax_d):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "no pre or sandwich run", transform=ax.transAxes, ha="center", fontsize=7)
    return plotting.save(fig, study.figure_stem("stream_growth"))


def _last_stream(by_depth: dict) -> tuple[list[int], list[float]]:
    depths = sorted(by_depth, key=int)
    return [int(d) for d in depths], [_mean(s["stream_ms_end"][-1] for s in by_depth[d]["per_seed"]) for d in depths]


def plot_s7(results: dict, study) -> list[str]:
    """S7: Post-LN and DeepNorm final loss against depth at the lr and warmup that train Post-LN shallow."""
    s7 = results["s7"]
    if s7 is None:
        return []
    fig, (ax_d, ax_c) = plotting.figure(ncols=2)
    plotting.mark_unigram(ax_d, results)
    for run, by_depth in s7["summary"].items():
        depths = sorted(by_depth, key=int)
        for d in depths:  # every seed: a diverged one is drawn at the unigram level with an x
            for s in by_depth[d]["per_seed"]:
                diverged = s["final_loss"] is None
                y = results["unigram_nll"] if diverged else s["final_loss"]
                ax_d.plot(int(d), y, "x" if diverged else ".", color=plotting.color(run), alpha=0.5)
        ax_d.plot(*_depth_series(by_depth, "final_loss"), **_style(run))
    for run in ("post", "deepnorm"):
        by_depth = s7["loss"].get(run, {})
        if by_depth and s7["lr"] is not None:
            depth = max(by_depth, key=int)
            for i, loss in enumerate(by_depth[depth]):
                ax_c.plot(loss, color=plotting.color(run), lw=0.8, label=f"{run} L={depth}" if i == 0 else None)
    plotting.mark_unigram(ax_c, results)
    lr = "no lr trains Post-LN shallow" if s7["lr"] is None else f"lr {s7['lr']:g}"
    title = f"{lr}, {s7['warmup']}-step linear warmup, then {s7['schedule']}"
    ax_d.set(xlabel="layers", ylabel="final train loss (x: diverged)", title=title)
    ax_c.set(xlabel="step", ylabel="train loss", title="deepest depth, every seed")
    depths = sorted({int(d) for by in s7["summary"].values() for d in by})
    if depths:
        _depth_axis(ax_d, depths)
    for ax in (ax_d, ax_c):
        ax.legend(fontsize=6)
    return plotting.save(fig, study.figure_stem("deepnorm_depth"))
