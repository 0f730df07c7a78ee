"""trained_layers' figures, drawn from results.json (outside the code fingerprint: redrawing reruns nothing)."""

from __future__ import annotations

import numpy as np

from normjax import plotting, specs


def _mean_profile(rows: list, key: str) -> np.ndarray | None:
    """The across-seed mean of a per-layer list (seeds without it left out; None when none has it)."""
    have = [np.asarray(r[key], float) for r in rows if r.get(key) is not None]
    return np.mean(have, axis=0) if have else None


def plot(results: dict, study) -> list[str]:
    """Mix-LN's figure (per-layer gradient norm, at init and after training) and LNS's (angular distance and
    ||J_l - I||_2 per block after training), every run's mean over seeds."""
    fig, (ax_g0, ax_g, ax_a, ax_j) = plotting.figure(ncols=4, width=3.6)
    setup, n = results["setup"], len(results["seeds"])
    for run, recs in results["runs"].items():
        placement = specs.parse(run).placement
        color = plotting.color(placement)
        style = dict(color=color, label=run, marker=".", ls="-")
        if placement == "lns":  # Pre-LN with scaled outputs, in a blue close to Pre-LN's: dashed squares
            style |= dict(marker="s", ms=3, ls="--")
        grads = np.asarray([r["probes"]["layer_grad_norm"] for r in recs], float)  # (seeds, probes, layers)
        layers = np.arange(grads.shape[-1])
        ax_g0.plot(layers, np.exp(np.nanmean(np.log(grads[:, 0]), axis=0)), **style)
        if grads.shape[1] > 1:
            ax_g.plot(layers, np.exp(np.nanmean(np.log(grads[:, -1]), axis=0)), **style)
        summary = results["summary"][run]
        for ax, key in ((ax_a, "angular_end"), (ax_j, "block_dev_end")):
            if (mean := _mean_profile(summary, key)) is not None:
                ax.plot(np.arange(len(mean)), mean, **style)
        if (init := _mean_profile(summary, "block_dev_init")) is not None:
            ax_j.plot(np.arange(len(init)), init, color=color, ls=":", lw=1)
    last = setup["probe_steps"][-1]
    ax_g0.set(xlabel="layer", ylabel="gradient norm of the layer", yscale="log", title=f"at init ({n} seeds)")
    ax_g.set(xlabel="layer", ylabel="gradient norm of the layer", yscale="log", title=f"after {last} steps")
    ax_a.set(xlabel="block l", ylabel=r"angular distance $(x_l, x_{l+1})$", title="after training")
    ax_j.set(xlabel="block l", ylabel=r"$\|J_l - I\|_2$", yscale="log", title="after training (dotted: init)")
    fig.suptitle(
        "cf. Mix-LN (Li et al. 2025): per-layer gradient norms of Pre-LN, Post-LN and Mix-LN (paper: LLaMA 71M-1B on "
        "C4);\nLayerNorm Scaling (Sun et al. 2025): angular distance of the deep blocks. Here: decoder-only byte LM, "
        f"L={setup['depth']}, d {setup['d_model']}, lr {setup['lr']:g}, {setup['schedule']}",
        fontsize=8,
    )
    for ax in (ax_g0, ax_g, ax_a, ax_j):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    return plotting.save(fig, study.figure_stem("layer_profiles"))
