"""hidden_norms: ||x_l||^2/d of the residual stream and of every norm input at init (X3, S4, R4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting, specs
from normjax.jacobian import fits
from normjax.studies.encoder_models import lemma2_bounds, model_config
from normjax.studies.hidden_norms import final_norm
from normjax.studies.seeds import seeds

NORM_INPUT_SITES = ("attn.post", "ffn.post", "attn.pre", "ffn.pre")


def _mean_sq(z_BTD) -> float:
    return float(jnp.mean(jnp.square(z_BTD)))


def measure(config, setting: str, placement: str, seed: int) -> dict:
    """Per-layer ||x_l||^2/d and ||z||^2/d at each norm site, for one initialisation.

    A ResiDual model also gives its dual stream's ||d_l||^2/d ("dual_stream"); "stream" is its Post-LN stream.
    """
    model = normjax.Transformer(model_config(config, setting, placement), rngs=nnx.Rngs(seed))
    key = jax.random.key(1000 + seed)
    shape = (config.batch_size, config.seq_len)
    if setting == "theory":  # Gaussian inputs with E||x||^2 = d, as in the lemma
        probes = normjax.probe_stream(model, jax.random.normal(key, shape + (config.d_model,)))
    else:
        tokens = jax.random.randint(key, shape, 0, config.vocab_size)
        probes = normjax.probe(model, tokens)[1]["encoder"]
    sites = {
        site: [_mean_sq(n[site]) if site in n else None for n in probes.norm_inputs]
        for site in NORM_INPUT_SITES
        if any(site in n for n in probes.norm_inputs)
    }
    out = {"stream": [_mean_sq(x) for x in probes.streams], "norm_inputs": sites}
    if probes.dual_streams is not None:
        out["dual_stream"] = [_mean_sq(d) for d in probes.dual_streams]
    return out


def theory_setting_check(config, seed: int = 0) -> dict:
    """X2: is the theory switch Xiong et al.'s setting? Weights, biases and attention uniformity."""
    model = normjax.Transformer(model_config(config, "theory", "post"), rngs=nnx.Rngs(seed))
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")
    kernels = [np.asarray(p[k]) for p in layers for k in p if k.endswith("kernel")]
    qk = [np.asarray(p[k]) for p in layers for k in p if k.endswith(("query/kernel", "key/kernel"))]
    others = [k for k in kernels if np.abs(k).max() > 0]
    x = jax.random.normal(jax.random.key(seed), (config.batch_size, config.seq_len, config.d_model))
    attn = [np.asarray(b["attn"]) for b in normjax.probe_stream(model, x).branch_outputs]
    spread = max(float(np.abs(a - a.mean(1, keepdims=True)).max() / np.abs(a).max()) for a in attn)
    return {
        "max_abs_wq_wk": max(float(np.abs(k).max()) for k in qk),
        "std_times_sqrt_fan_in": [float(k.std() * np.sqrt(k.shape[0])) for k in others],
        "weight_counts": [int(k.size) for k in others],
        "max_abs_bias": max(
            float(np.abs(np.asarray(p[k])).max()) for p in layers for k in p if k.endswith("bias") and "norm" not in k
        ),
        "norm_scale_range": [
            min(float(np.asarray(p[k]).min()) for p in layers for k in p if k.endswith("norm/scale")),
            max(float(np.asarray(p[k]).max()) for p in layers for k in p if k.endswith("norm/scale")),
        ],
        "attention_output_spread_over_tokens": spread,
        "num_heads": model.cfg.num_heads,
    }


def _aggregate(runs: list[dict]) -> dict:
    """Per-seed values (seeds first) and their mean and std over seeds, stream and every norm site."""
    stream = np.array([r["stream"] for r in runs])
    out = {"stream": stream, "stream_mean": stream.mean(0), "stream_std": stream.std(0), "norm_inputs": {}}
    if "dual_stream" in runs[0]:  # ResiDual's second stream
        dual = np.array([r["dual_stream"] for r in runs])
        out |= {"dual_stream_mean": dual.mean(0), "dual_stream_std": dual.std(0)}
    for site in runs[0]["norm_inputs"]:
        values = np.array([[np.nan if v is None else v for v in r["norm_inputs"][site]] for r in runs])
        out["norm_inputs"][site] = {"values": values, "mean": values.mean(0), "std": values.std(0)}
    out["stream_growth"] = _growth(stream)
    return out


def _growth(stream_SL) -> dict:
    """Per seed: the slope and r^2 of a linear fit of ||x_l||^2/d in l, and ||x_L||^2 / ||x_0||^2."""
    stream_SL = np.asarray(stream_SL, np.float64)
    per_seed = [fits.linear_fit(np.arange(s.size), s) for s in stream_SL]
    return {
        "slope": [f.slope for f in per_seed],
        "r2": [f.r2 for f in per_seed],
        "ratio_last_first": list(stream_SL[:, -1] / stream_SL[:, 0]),
    }


def skipped_in_theory(config) -> dict[str, str]:
    """{placement: why} of the placements the theory setting cannot measure: those with an embedding norm (the
    setting feeds x_0 to the blocks, past that norm) and those it cannot build (nGPT: its unit-norm weights
    contradict N(0, 1/d) with W^Q = W^K = 0)."""
    out = {}
    for p in config.placements:
        try:
            cfg = model_config(config, "theory", p)
        except ValueError as e:
            out[p] = str(e)
            continue
        if cfg.has_embedding_norm("encoder"):
            out[p] = "x_0 bypasses its embedding norm"
    return out


def compute(config, study) -> dict:
    skip = skipped_in_theory(config) if "theory" in config.settings else {}
    jobs = [(s, p) for s in config.settings for p in config.placements if not (s == "theory" and p in skip)]
    results = {"bounds": lemma2_bounds(config.num_layers), "seeds": seeds(config), "runs": {}}
    if skip:
        logging.warning("hidden_norms: left out of the theory setting: %s", skip)
        results["skipped_in_theory"] = skip
    if "theory" in config.settings:
        results["theory_check"] = study.cached("theory_check", lambda: theory_setting_check(config, config.seed))
    for setting, placement in tqdm(jobs, desc="hidden_norms", unit="model"):
        runs = [
            study.cached(
                f"{setting}-{specs.parse(placement).file_key}-{seed}",
                lambda s=seed, st=setting, p=placement: measure(config, st, p, s),
            )
            for seed in seeds(config)
        ]
        results["runs"].setdefault(setting, {})[placement] = _aggregate(runs)
    if "real" in config.settings and config.get("final_norm_depths"):  # S4's final-norm half
        results["final_norm"] = final_norm.compute(config, study)
    return results


MARKERS = "osD^vP*X"


def plot(results: dict, study) -> list[str]:
    bounds = results["bounds"]
    settings = sorted(results["runs"], key=lambda s: s != "theory")  # theory first
    fig, axes = plotting.figure(ncols=len(settings), width=5.2)
    for ax, setting in zip(axes, settings, strict=True):
        placements = list(results["runs"][setting])
        for i, (placement, agg) in enumerate(results["runs"][setting].items()):
            mean, std = np.array(agg["stream_mean"]), np.array(agg["stream_std"])
            c = plotting.color(specs.parse(placement).placement)
            l = np.arange(len(mean))
            # Post-LN-style streams all sit at one level: staggered markers keep every curve visible
            every = (i * max(len(l) // (4 * len(placements)), 1), max(len(l) // 4, 1))
            ax.plot(l, mean, color=c, label=placement, marker=MARKERS[i % 8], ms=4)
            ax.lines[-1].set_markevery(every)
            ax.fill_between(l, mean - std, mean + std, color=c, alpha=0.2)
            if "dual_stream_mean" in agg:  # ResiDual: x_l above, its dual stream d_l dashed
                ax.plot(l, agg["dual_stream_mean"], color=c, ls="--", label=f"{placement} d_l")
        if setting == "theory":
            l = np.arange(len(bounds["pre_lower"]))
            ax.fill_between(
                l,
                bounds["pre_lower"],
                bounds["pre_upper"],
                color="grey",
                alpha=0.15,
                label="Lemma 2 (Pre-LN):\n$1 + l/2 \\leq E\\|x_l\\|^2/d \\leq 1 + 3l/2$",
            )
        ax.set(title=f"residual stream at init ({setting})", xlabel="layer l", ylabel=r"$\|x_l\|^2/d$ (linear)")
        ax.set_ylim(bottom=0)
        flat = [p for p, agg in results["runs"][setting].items() if np.ptp(agg["stream_mean"]) < 1.0]
        if flat:
            text = f"flat (normalised stream): {', '.join(flat)}"
            ax.text(0.5, 0.06, text, transform=ax.transAxes, ha="center", fontsize=6)
        plotting.legend_outside(ax)
    paths = plotting.save(fig, study.figure_stem("stream_norms"))
    fig, axes = plotting.figure(ncols=len(settings), width=5.2)
    for ax, setting in zip(axes, settings, strict=True):
        for placement, agg in results["runs"][setting].items():
            site = agg["norm_inputs"].get("ffn.post")
            if site is not None:
                ax.plot(
                    np.array(site["mean"], float),
                    marker="o",
                    ms=3,
                    color=plotting.color(specs.parse(placement).placement),
                    label=f"{placement} (FFN LN input)",
                )
        ax.axhline(bounds["post_ln_input"], **plotting.THEORY_STYLE, label="Lemma 2: $E\\|z\\|^2/d = 3/2$")
        ax.set(title=f"Post-LN-style norm inputs ({setting})", xlabel="layer", ylabel=r"$\|z\|^2/d$")
        plotting.legend_outside(ax)
    paths += plotting.save(fig, study.figure_stem("ln_inputs"))
    return paths + (final_norm.plot(results, study) if "final_norm" in results else [])
