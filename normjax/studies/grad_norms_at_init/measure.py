"""grad_norms_at_init: per-layer FFN weight-gradient norms at init (X6, L3, R5, S1, S3)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from absl import logging
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting, specs
from normjax.jacobian import fits
from normjax.studies.ffn_gradients import FFN_KERNELS, CopyTask, PairedBatches, ffn_grad_norms
from normjax.studies.seeds import seeds
from normjax.train import batching, data_gettext

METRICS = ("norm_of_mean", "mean_of_norms")
TITLES = {"encoder_decoder": "enc-dec", "encoder": "encoder-only", "decoder": "decoder-only"}


DEEP_ARCH = "decoder"  # R5's model: Mix-LN is a recipe for decoder-only LMs (Li et al. 2024, LLaMA-like)


def model_config(config, arch: str, placement: str, num_layers: int | None = None) -> normjax.ModelConfig:
    """The model of `arch` (`num_layers` deep, default config.num_layers); `placement` is a model spec
    (`normjax.specs`: "pre", "pre+qk_norm")."""
    return normjax.ModelConfig(
        arch=arch,
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=num_layers or config.num_layers,
        max_len=max(config.seq_len, 8),
        **specs.parse(placement).fields,
    )


def measure(config, arch: str, placement: str, seed: int, num_layers=None, num_batches=None) -> dict:
    model = normjax.Transformer(model_config(config, arch, placement, num_layers), rngs=nnx.Rngs(seed))
    task = CopyTask(arch, config.batch_size, config.seq_len, config.vocab_size)
    return ffn_grad_norms(model, task, num_batches or config.num_batches, seed=1000 + seed)


@functools.lru_cache(maxsize=1)
def gettext_corpus(bpe_vocab: int) -> tuple[int, list, dict]:
    """(vocab size, training pairs, what names the data) of the De-En gettext corpus with a `bpe_vocab` BPE
    (built once into the user cache, then read back and checked against its manifest)."""
    folder = data_gettext.cached_corpus(data_gettext.CorpusSpec(vocab_size=bpe_vocab))
    vocab, splits, _, record = data_gettext.load_corpus(folder)
    return len(vocab), splits["train"], {k: v for k, v in record.items() if k != "path"}  # no machine's path


def gettext_batches(config, seed: int) -> dict:
    """`num_batches` training batches of `batch_size` pairs (up to `seq_len` tokens with eos), in seed's order,
    stacked: {"src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"} of shape (num_batches, batch_size, seq_len)."""
    _, pairs, _ = gettext_corpus(config.gettext_bpe_vocab)
    spec = batching.BatchSpec(batch_size=config.batch_size, buckets=(config.seq_len,))
    source = batching.Seq2SeqBatches(pairs, spec, seed=1000 + seed)
    batches = [source.batch(i) for i in range(config.num_batches)]
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}


def measure_gettext(config, placement: str, seed: int) -> dict:
    """ffn_grad_norms of the 6-6 model (vocabulary: the corpus's BPE) on real De-En batches."""
    vocab_size = gettext_corpus(config.gettext_bpe_vocab)[0]
    cfg = dataclasses.replace(model_config(config, "encoder_decoder", placement), vocab_size=vocab_size)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    return ffn_grad_norms(model, PairedBatches(), config.num_batches, seed, batches=gettext_batches(config, seed))


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
    results["d_model"] = config.d_model
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
    if config.get("deep_placements"):
        results["deep"] = _deep(config, study, seed_list)
    if config.get("gettext_placements"):
        results["gettext"] = _gettext(config, study, seeds(config, config.gettext_num_seeds))
    return results


def _gettext(config, study, seed_list) -> dict:
    """X6's and L3's real-batch arm: {"data", "num_seeds", "seeds", "runs": {placement: aggregate}} of the 6-6 model
    on the gettext corpus."""
    data = gettext_corpus(config.gettext_bpe_vocab)[2] | {"bpe_vocab": config.gettext_bpe_vocab}
    out = {"data": data, "num_seeds": len(seed_list), "seeds": seed_list, "runs": {}}
    for placement in tqdm(config.gettext_placements, desc="grad_norms_at_init gettext 6-6", unit="model"):
        runs = [
            study.cached(
                f"gettext{config.gettext_bpe_vocab}-{specs.parse(placement).file_key}-{seed}",
                lambda s=seed, p=placement: measure_gettext(config, p, s),
            )
            for seed in seed_list
        ]
        out["runs"][placement] = _aggregate(runs)
    return out


def _deep(config, study, seed_list) -> dict:
    """R5's arm: {"arch", "num_layers", "num_batches", "runs": {placement: aggregate}} of the deep decoder."""
    L, nb = config.deep_layers, config.deep_num_batches
    out = {"arch": DEEP_ARCH, "num_layers": L, "num_batches": nb, "runs": {}}
    for placement in tqdm(config.deep_placements, desc=f"grad_norms_at_init {DEEP_ARCH} L={L}", unit="model"):
        runs = [
            study.cached(
                f"{DEEP_ARCH}{L}-{specs.parse(placement).file_key}-b{nb}-{seed}",
                lambda s=seed, p=placement: measure(config, DEEP_ARCH, p, s, L, nb),
            )
            for seed in seed_list
        ]
        out["runs"][placement] = _aggregate(runs)
    return out


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
    return paths + plot_fig3(results, study) + plot_deep(results, study)


def _curve(ax, m: dict, placement: str, label: str) -> None:
    """One placement's ||E[grad]|| per layer (1-indexed, as in the papers): seed mean, +- std over seeds."""
    mean, std = np.array(m["mean"], float), np.array(m["std"], float)
    l, c = np.arange(1, len(mean) + 1), plotting.color(specs.parse(placement).placement)
    ax.errorbar(l, mean, yerr=std, marker="o", ms=3, capsize=2, color=c, label=label)


def plot_fig3(results: dict, study) -> list[str]:
    """Xiong et al.'s Fig. 3(a, b) on the copy task and, where measured, on the gettext batches."""
    real = results.get("gettext") or {}
    copy_judged = not {"post", "pre"} <= set(real.get("runs", {}))  # X6 and L3 read the real batches where present
    copy = _plot_fig3(
        results, study, results["runs"].get("encoder_decoder", {}), "copy task", "xiong_fig3", copy_judged
    )
    n = real.get("num_seeds", results["num_seeds"])  # results of before the arm had its own count: the study's
    return copy + _plot_fig3(
        results, study, real.get("runs", {}), "gettext De-En batches", "xiong_fig3_gettext", True, n
    )


def _plot_fig3(
    results: dict, study, by_p: dict, source: str, stem: str, judged: bool, num_seeds: int | None = None
) -> list[str]:
    """Gradient norm of the FFN's W^2 per layer of the 6-6 model, Post-LN vs Pre-LN, one panel per stack on one
    shared y axis (linear, as the paper's); the titles say whether X6 and L3 are judged on these batches."""
    if not {"post", "pre"} <= set(by_p):
        return []
    with plotting.style():
        fig, axes = plotting.figure(ncols=2, width=3.8, height=3.2)
        axes[1].sharey(axes[0])
        for ax, stack in zip(axes, ("decoder", "encoder"), strict=True):
            for placement, label in (("post", "Post-LN"), ("pre", "Pre-LN")):
                m = by_p[placement][stack]["ffn/fc2/kernel"]["norm_of_mean"]
                _curve(ax, m, placement, f"{label} (slope {np.mean(m['slope']):+.2f}/layer in ln)")
            ax.set(
                title=f"6-6 model, {stack}"
                + ((" (judged for X6, L3)" if stack == "decoder" else " (L3)") if judged else " (reported)"),
                xlabel="layer index l",
                ylabel=r"$\|E[\nabla W^{2,l}]\|_F$",
            )
            ax.legend(fontsize=7)
        fig.suptitle(
            "Mirrors Xiong et al. 2020 (arXiv 2002.04745), Fig. 3(a, b): gradient norm of the FFN's $W^2$ per layer "
            f"at init\n(here: {source}, d {results.get('d_model', '')}; {results['num_batches']} batches, mean "
            rf"$\pm$ std over {num_seeds or results['num_seeds']} seeds)",
            fontsize=8,
        )
        fig.tight_layout()
        return plotting.save(fig, study.figure_stem(stem))


def plot_deep(results: dict, study) -> list[str]:
    """R5's arm: ||E[grad]|| of W^2 per layer of the deep decoder, Pre-LN, Mix-LN (its Post-LN layers shaded)
    and Post-LN on one log axis."""
    deep = results.get("deep")
    if not deep or not deep["runs"]:
        return []
    L = deep["num_layers"]
    with plotting.style():
        fig, (ax,) = plotting.figure(width=5.6, height=3.6)
        for placement in deep["runs"]:
            m = deep["runs"][placement][deep["arch"]]["ffn/fc2/kernel"]["norm_of_mean"]
            ratio = np.exp(np.mean(np.log(m["max_over_min"])))
            _curve(ax, m, placement, f"{placement} (max/min {ratio:.2f}, geometric mean over seeds)")
        if "mixln" in deep["runs"]:
            num_post = (
                normjax.ModelConfig(arch="decoder", num_layers=L, placement="mixln")
                .layer_placements("decoder")
                .count("post")
            )
            ax.axvspan(0.5, num_post + 0.5, color=plotting.color("mixln"), alpha=0.08, label="Mix-LN's Post-LN layers")
        ax.set(yscale="log", xlabel="layer index l", ylabel=r"$\|E[\nabla W^{2,l}]\|_F$")
        plotting.plain_log_ticks(ax)
        ax.legend(fontsize=7)
        ax.set_title(
            f"R5 (Li et al. 2024, Mix-LN) at init only: decoder-only LM, {L} layers, {deep['num_batches']} batches, "
            f"{results['num_seeds']} seeds\n(the paper's per-layer gradient norms are measured during training: "
            "not here)",
            fontsize=8,
        )
        fig.tight_layout()
        return plotting.save(fig, study.figure_stem("grad_deep_decoder"))
