"""depth_scaling: the first and last layers' FFN weight gradients at init vs depth L (X5, S2)."""

from __future__ import annotations

import numpy as np
from flax import nnx
from matplotlib import ticker
from tqdm import tqdm

import normjax
from normjax import plotting
from normjax.jacobian import fits
from normjax.studies.encoder_models import model_config
from normjax.studies.ffn_gradients import FFN_KERNELS, CopyTask, ffn_grad_norms
from normjax.studies.seeds import seeds

WHERE = {"last": -1, "first": 0}  # which layer's FFN weights
METRICS = ("mean_of_norms", "norm_of_mean")
S2_STYLE = dict(color="grey", linestyle=":", linewidth=1.2)
THEOREM1_SLOPE = {"post": 0.0, "pre": -0.5}  # d ln||grad W_L|| / d ln L of Theorem 1's bounds
S2_SLOPE = -1.0  # the seed claim: "scales inversely with depth near the output layer"


def measure(config, setting: str, placement: str, num_layers: int, seed: int) -> dict:
    """{where: {kernel: {metric: value}}} for the first and the last layer of one initialisation."""
    cfg = model_config(config, setting, placement, num_layers, scan_layers=True)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    task = CopyTask("encoder", config.batch_size, config.seq_len, config.vocab_size)
    norms = ffn_grad_norms(model, task, config.num_batches, seed=1000 + seed)["encoder"]
    return {
        where: {name: {metric: float(norms[name][metric][index]) for metric in METRICS} for name in FFN_KERNELS}
        for where, index in WHERE.items()
    }


def _aggregate(depths, runs_DS: list[list[dict]]) -> dict:
    """values (D, S) per where/kernel/metric and, per seed, a power-law fit over the depths."""
    out = {"depths": list(depths)}
    for where in WHERE:
        for name in FFN_KERNELS:
            for metric in METRICS:
                values_DS = np.array([[r[where][name][metric] for r in runs] for runs in runs_DS])
                per_seed = [fits.power_law_fit(depths, v_D) for v_D in values_DS.T]
                out.setdefault(where, {}).setdefault(name, {})[metric] = {
                    "values": values_DS,
                    "exponent": [f.exponent for f in per_seed],  # one per seed
                    "prefactor": [f.prefactor for f in per_seed],
                }
    return out


def compute(config, study) -> dict:
    jobs = [(s, p, L) for s in config.settings for p in config.placements for L in config.depths]
    results = {"runs": {}, "num_batches": config.num_batches, "seeds": seeds(config), "num_seeds": config.num_seeds}
    done = {}
    for setting, placement, L in tqdm(jobs, desc="depth_scaling", unit="model"):
        done.setdefault((setting, placement), []).append(
            [
                study.cached(
                    f"{setting}-{placement}-L{L}-{seed}",
                    lambda s=seed, st=setting, p=placement, n=L: measure(config, st, p, n, s),
                )
                for seed in seeds(config)
            ]
        )
    for (setting, placement), runs_DS in done.items():
        results["runs"].setdefault(setting, {})[placement] = _aggregate(config.depths, runs_DS)
    return results


def _anchored(values_DS, depths, slope):
    """A power law L^slope through the seed mean at the smallest depth."""
    return values_DS[0].mean() * (depths / depths[0]) ** slope


def _mean_sem(values) -> tuple[float, float]:
    """Mean and standard error over seeds (the figure's; the verdicts use the 95% interval)."""
    x = np.asarray(values, np.float64)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")


def plot(results: dict, study) -> list[str]:
    settings = sorted(results["runs"], key=lambda s: s != "theory")
    fig, axes = plotting.figure(ncols=len(settings), nrows=2, width=6.6, height=3.5)
    name, metric = "ffn/fc2/kernel", "mean_of_norms"
    for row, where in enumerate(WHERE):
        for col, setting in enumerate(settings):
            ax = axes[row * len(settings) + col]
            by_p = results["runs"][setting]
            for placement in plotting.placements_in_order(by_p):
                agg, c = by_p[placement], plotting.color(placement)
                depths = np.array(agg["depths"], float)
                m = agg[where][name][metric]
                values_DS = np.array(m["values"], float)
                ax.plot(np.repeat(depths, values_DS.shape[1]), values_DS.ravel(), ".", color=c, alpha=0.5)
                p, sem = _mean_sem(m["exponent"])
                prefactor = float(np.exp(np.mean(np.log(m["prefactor"]))))
                ax.plot(
                    depths,
                    prefactor * depths**p,
                    color=c,
                    label=f"{placement}: slope {p:+.2f} +- {sem:.2f} (s.e., seeds)",
                )
                if where == "last" and placement in THEOREM1_SLOPE:
                    ax.plot(depths, _anchored(values_DS, depths, THEOREM1_SLOPE[placement]), **plotting.THEORY_STYLE)
                if where == "last" and placement == "post":
                    ax.plot(depths, _anchored(values_DS, depths, S2_SLOPE), **S2_STYLE)
            if where == "last":
                ax.plot(
                    [], [], **plotting.THEORY_STYLE, label=r"Theorem 1: $\propto L^{0}$ (Post-LN), $L^{-1/2}$ (Pre-LN)"
                )
                ax.plot([], [], **S2_STYLE, label=r"seed's S2: $\propto 1/L$ (Post-LN)")
            ax.set(
                title=f"{where} layer's FFN W2 ({setting} setting)",
                xlabel="depth L",
                ylabel=r"$E\|\nabla W\|$ at init",
                xscale="log",
                yscale="log",
            )
            ax.set_xticks(depths, [f"{d:g}" for d in depths])
            ax.xaxis.set_minor_locator(ticker.NullLocator())
            plotting.plain_log_ticks(ax)
            plotting.legend_outside(ax)
    return plotting.save(fig, study.figure_stem("depth_scaling"))
