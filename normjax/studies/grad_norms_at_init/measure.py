"""grad_norms_at_init: per-layer FFN weight-gradient norms at init (X6, L3, R5, S1, S3)."""

from __future__ import annotations

import numpy as np
from absl import logging
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting, specs
from normjax.jacobian import fits
from normjax.studies.ffn_gradients import FFN_KERNELS, CopyTask, ffn_grad_norms
from normjax.studies.seeds import seeds

METRICS = ("norm_of_mean", "mean_of_norms")
TITLES = {"encoder_decoder": "enc-dec", "encoder": "encoder-only", "decoder": "decoder-only"}


def model_config(config, arch: str, placement: str) -> normjax.ModelConfig:
    """The model of `arch`; `placement` is a model spec (`normjax.specs`: "pre", "pre+qk_norm")."""
    return normjax.ModelConfig(
        arch=arch,
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=config.num_layers,
        max_len=max(config.seq_len, 8),
        **specs.parse(placement).fields,
    )


def measure(config, arch: str, placement: str, seed: int) -> dict:
    model = normjax.Transformer(model_config(config, arch, placement), rngs=nnx.Rngs(seed))
    task = CopyTask(arch, config.batch_size, config.seq_len, config.vocab_size)
    return ffn_grad_norms(model, task, config.num_batches, seed=1000 + seed)


def layer_profile(values_SL) -> dict:
    """Per seed: the fit ln ||grad|| = a + slope * l over that seed's layers, max/min and first/last layer.

    The rules take the across-seed mean and 95% interval of these numbers (one value per seed), never a
    stderr pooled over the layers of one model.
    """
    values_SL = np.asarray(values_SL, float)
    layers_L = np.arange(values_SL.shape[1])
    fits_S = [fits.linear_fit(layers_L, np.log(v_L)) for v_L in values_SL]
    return {
        "slope": [f.slope for f in fits_S],
        "r2": [f.r2 for f in fits_S],
        "max_over_min": list(values_SL.max(1) / values_SL.min(1)),
        "first_over_last": list(values_SL[:, 0] / values_SL[:, -1]),
    }


def _aggregate(runs: list[dict]) -> dict:
    """{stack: {name: {metric: {"mean", "std", "seeds" (S, L), per-seed "slope", "r2", ...}}}} over seeds."""
    out = {}
    for stack, names in runs[0].items():
        for name in names:
            for metric in METRICS:
                values_SL = np.array([r[stack][name][metric] for r in runs])
                out.setdefault(stack, {}).setdefault(name, {})[metric] = {
                    "mean": values_SL.mean(0),
                    "std": values_SL.std(0),
                    "seeds": values_SL,
                } | layer_profile(values_SL)
    return out


def unbuildable(config) -> dict[str, dict[str, str]]:
    """{arch: {placement: why}} of the placements an architecture cannot build (nGPT has no encoder-decoder)."""
    out = {}
    for arch in config.archs:
        for p in config.placements:
            try:
                model_config(config, arch, p)
            except ValueError as e:
                out.setdefault(arch, {})[p] = str(e)
    return out


def compute(config, study) -> dict:
    skip = unbuildable(config)
    jobs = [(a, p) for a in config.archs for p in config.placements if p not in skip.get(a, {})]
    seed_list = seeds(config)
    results = {"runs": {}, "num_batches": config.num_batches, "num_seeds": len(seed_list), "seeds": seed_list}
    if skip:
        logging.warning("grad_norms_at_init: left out: %s", skip)
        results["skipped"] = skip
    for arch, placement in tqdm(jobs, desc="grad_norms_at_init", unit="model"):
        runs = [
            study.cached(
                f"{arch}-{specs.parse(placement).file_key}-{seed}",
                lambda s=seed, a=arch, p=placement: measure(config, a, p, s),
            )
            for seed in seed_list
        ]
        results["runs"].setdefault(arch, {})[placement] = _aggregate(runs)
    return results


def panels(results: dict) -> list[tuple[str, str]]:
    """(arch, stack) of every stack measured: seq2seq decoder, seq2seq encoder, then the others."""
    cells = [(arch, stack) for arch, by_p in results["runs"].items() for stack in next(iter(by_p.values()))]
    return sorted(cells, key=lambda c: (c[0] != "encoder_decoder", c[1] != "decoder"))


def plot(results: dict, study) -> list[str]:
    paths = []
    for name in FFN_KERNELS:
        cells = panels(results)
        fig, axes = plotting.figure(ncols=len(cells), width=3.6, height=3.4)
        for ax, (arch, stack) in zip(axes, cells, strict=True):
            for placement in plotting.placements_in_order(results["runs"][arch]):
                agg, c = results["runs"][arch][placement], plotting.color(specs.parse(placement).placement)
                for metric, style in zip(METRICS, ("-", ":"), strict=True):
                    m = agg[stack][name][metric]
                    mean, std = np.array(m["mean"], float), np.array(m["std"], float)
                    l = np.arange(len(mean))
                    mean_slope = np.mean(m["slope"])
                    label = f"{placement} (slope {mean_slope:+.2f}/layer)" if metric == "norm_of_mean" else None
                    ax.plot(
                        l,
                        mean,
                        style,
                        marker=("s" if specs.parse(placement).is_variant else "o") if style == "-" else None,
                        ms=3,
                        color=c,
                        label=label,
                    )
                    if metric == "norm_of_mean":
                        ax.fill_between(l, mean - std, mean + std, color=c, alpha=0.15)
            ax.set(
                title=f"{TITLES[arch]} ({len(mean)} layers): {stack}",
                xlabel="layer l",
                yscale="log",
                ylabel=f"gradient norm of {name} in layer l",
            )
            plotting.plain_log_ticks(ax)
            ax.legend(fontsize=6)
        fig.suptitle(
            rf"init, copy task: $\|E[\nabla W]\|$ over {results['num_batches']} batches "
            rf"(solid, $\pm$ std over {results['num_seeds']} seeds), "
            rf"$E\|\nabla W\|$ (dotted)",
            fontsize=9,
        )
        paths += plotting.save(fig, study.figure_stem(f"grad_{name.split('/')[1]}"))
    return paths
