"""trained_layers: decoder-only byte LMs trained at one depth, probed per layer (R5 and N1 in training)."""

from __future__ import annotations

import math

import numpy as np
from tqdm import tqdm

from normjax import plotting, specs
from normjax.studies.byte_lm import data
from normjax.studies.seeds import seeds as seed_list
from normjax.studies.trained_layers.runs import probe_steps, train_run
from normjax.train.data_text import byte_corpus_record
from normjax.train.tasks import unigram_nll


def log_range(values) -> float:
    """ln(max / min) over layers (nan when a value is not finite or not positive)."""
    x = np.asarray(values, float)
    return float(np.log(x.max() / x.min())) if np.all(np.isfinite(x)) and np.all(x > 0) else math.nan


def summarize(rec: dict, config) -> dict:
    """One run's numbers for the rules: final loss, the gradient profile's flatness in training, block distances."""
    p = rec["probes"]
    ranges = [log_range(g) for g in p["layer_grad_norm"]]
    trained = [r for t, r in zip(p["step"], ranges, strict=True) if t > 0 and math.isfinite(r)]
    loss = np.asarray(rec["loss"], float)
    diverged = rec["diverged_step"] is not None or not np.all(np.isfinite(loss))
    return {
        "final_loss": None if diverged else float(loss[-config.final_window :].mean()),
        "diverged_step": rec["diverged_step"],
        "grad_log_range": ranges,  # per probe step
        "grad_log_range_trained": float(np.mean(trained)) if trained else None,  # mean over the probes t > 0
        "block_dev_init": rec["block_dev_init"],
        "block_dev_end": rec["block_dev_end"],
        "angular_init": p["angular"][0],
        "angular_end": p["angular"][-1] if len(p["step"]) > 1 and p["step"][-1] == config.num_steps else None,
    }


def compute(config, study) -> dict:
    seeds = seed_list(config)
    setup = {
        "task": "decoder-only byte LM (stdlib .py files)",
        "depth": config.depth,
        "d_model": config.d_model,
        "lr": config.lr,
        "warmup": config.warmup,
        "num_steps": config.num_steps,
        "schedule": f"linear warmup over {config.warmup} steps, then constant",
        "optimizer": f"{config.optimizer} ({config.b1}, {config.b2})",
        "probe_steps": probe_steps(config),
        "probe_batches": config.probe_batches,
        "jacobian_len": config.jacobian_len,
    }
    results = {
        "setup": setup,
        "seeds": seeds,
        "data": byte_corpus_record(max_bytes=config.max_bytes) | {"task": "bytes_lm (stdlib sources)"},
        "unigram_nll": unigram_nll(data(config, seeds[0])[0]),
        "runs": {},
        "summary": {},
    }
    jobs = [(run, seed) for run in config.runs for seed in seeds]
    for run, seed in tqdm(jobs, desc="trained_layers", unit="run"):
        key = f"{specs.parse(run).file_key}-L{config.depth}-s{seed}"
        rec = study.cached(key, lambda r=run, s=seed: train_run(config, r, s))
        results["runs"].setdefault(run, []).append(rec)
        results["summary"].setdefault(run, []).append(summarize(rec, config))
    return results


def _mean_profile(rows: list, key: str) -> np.ndarray | None:
    """The across-seed mean of a per-layer list (seeds without it left out; None when none has it)."""
    have = [np.asarray(r[key], float) for r in rows if r.get(key) is not None]
    return np.mean(have, axis=0) if have else None


def plot(results: dict, study) -> list[str]:
    """Mix-LN's figure (per-layer gradient norm, at init and after training) and LNS's (angular distance and
    ||J_l - I||_2 per block after training), every run's mean over seeds."""
    fig, (ax_g0, ax_g, ax_a, ax_j) = plotting.figure(ncols=4, width=3.6)
    setup, n = results["setup"], len(results["seeds"])
    used = set()
    for run, recs in results["runs"].items():
        color = plotting.color(specs.parse(run).placement)  # a colour shared with an earlier run (lns: pre's)
        style = dict(color=color, marker="s" if color in used else ".", ls="--" if color in used else "-", label=run)
        used.add(color)
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
        f"Mix-LN's per-layer gradients, LNS's deep blocks: decoder L={setup['depth']}, d {setup['d_model']}, "
        f"lr {setup['lr']:g}, {setup['schedule']}",
        fontsize=8,
    )
    for ax in (ax_g0, ax_g, ax_a, ax_j):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    return plotting.save(fig, study.figure_stem("layer_profiles"))
