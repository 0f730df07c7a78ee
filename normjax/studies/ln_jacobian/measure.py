"""ln_jacobian: sigma of every norm input and ||dLN/dz|| vs depth at init (X4, S1, S2, X1)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting
from normjax.probes import model_probes
from normjax.studies.encoder_models import lemma2_bounds, model_config
from normjax.studies.ln_jacobian.checks import autodiff_spectral, wiring_errors
from normjax.studies.seeds import seeds

# The site drawn per placement: Lemma 2's quantities (FFN LN input for Post-LN, x_l for Pre-LN).
MAIN_SITE = {"post": "ffn.post", "pre": "attn.pre", "sandwich": "attn.pre", "deepnorm": "ffn.post", "admin": "ffn.post"}
SUBLAYER_INDEX = {"attn": 0, "ffn": 1}  # residual branches per encoder block, in call order


def branches_before(site: str, l: int) -> int:
    """How many residual branches were added to the stream before the input of `site` in block l.

    A post site (x + F(x)) sees its own branch; a pre/branch site sees the stream entering it.
    """
    sub, role = site.split(".")
    return 2 * l + SUBLAYER_INDEX[sub] + (role == "post")


def stack_probes(config, model, setting: str, seed: int):
    """(encoder StackProbes, tokens): fed Gaussian streams (theory, as in Lemma 2) or tokens."""
    key = jax.random.key(1000 + seed)
    shape = (config.batch_size, config.seq_len)
    tokens = jax.random.randint(key, shape, 0, config.vocab_size)
    if setting == "theory":  # E||x_0||^2 = d
        x0_BTD = jax.random.normal(key, shape + (config.d_model,))
        return normjax.probe_stream(model, x0_BTD), tokens
    return normjax.probe(model, tokens)[1]["encoder"], tokens


def site_stats(model, sp) -> dict:
    """Per norm site: mean over tokens of sigma and of the closed-form ||dN/dz||_2, per layer.

    The same quantities as `model_probes.norm_sites`, computed from StackProbes so that the theory setting
    can feed Gaussian streams (norm_sites takes tokens only). The final norm uses gamma = 1 (exact
    at init). At a per-head site (QKV-norm) "jac" is the per-token norm (largest head) and "sigma"
    the mean over (token, head), as in `model_probes.site_closed_form`.
    """
    cfg = model.cfg
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "encoder")

    def stats(z, scale):
        params = {"scale": scale, "eps": cfg.norm_eps, "alpha": cfg.dyt_alpha}
        jac_BT, sigma, exact = model_probes.site_closed_form(cfg.norm, z, params)
        return {"sigma": float(jnp.mean(sigma)), "jac": float(jnp.mean(jac_BT)), "exact": exact}

    sites = {}
    for l, inputs in enumerate(sp.norm_inputs):
        for site, z in inputs.items():
            scale = layers[l].get(f"{model_probes.norm_module_name(site, layers[l])}/scale")
            sites.setdefault(site, [None] * len(layers))[l] = stats(z, scale)
    final = None if sp.final_norm_input is None else stats(sp.final_norm_input, None)
    return {"sites": sites, "final": final}


def measure(config, setting: str, placement: str, seed: int, checks: bool) -> dict:
    """Site statistics of one initialisation; with `checks` (the first seed) the autodiff and wiring checks.

    The checks are exactness checks (worst case over every site and token, float32 rounding only), not
    statistics, so one seed's model serves them; the site statistics are measured at every seed.
    """
    cfg = model_config(config, setting, placement)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    sp, tokens = stack_probes(config, model, setting, seed)
    out = site_stats(model, sp)
    if checks:
        out["matrix_check"] = model_probes.check_ln_jacobian_autodiff(
            model, tokens, num_tokens=config.num_check_tokens
        )["max_rel_err"]
        out["spectral_check"] = autodiff_spectral(model, sp, config.num_check_tokens, config.gamma_noise)
        if setting == "real" and placement in ("post", "pre"):
            out["wiring"] = wiring_errors(model, tokens)
    return out


def _aggregate(runs: list[dict], num_layers: int) -> dict:
    """Per site: mean and std over seeds of sigma and ||dN/dz|| per layer, every seed's sigma ("sigma_seeds",
    (S, L), for the rules' per-seed fits), and branch counts; the checks of the first seed."""
    out = {"sites": {}, "final": None}
    for site in runs[0]["sites"]:
        get = lambda r, k, site=site: [np.nan if s is None else s[k] for s in r["sites"][site]]
        sigma = np.array([get(r, "sigma") for r in runs])
        jac = np.array([get(r, "jac") for r in runs])
        present = ~np.isnan(sigma[0])
        out["sites"][site] = {
            "sigma_mean": sigma.mean(0),
            "sigma_std": sigma.std(0),
            "sigma_seeds": sigma,
            "jac_mean": jac.mean(0),
            "jac_std": jac.std(0),
            "branches": [branches_before(site, l) if present[l] else None for l in range(num_layers)],
        }
    if runs[0]["final"] is not None:
        sigma = np.array([r["final"]["sigma"] for r in runs])
        out["final"] = {
            "sigma_mean": sigma.mean(),
            "sigma_std": sigma.std(),
            "sigma_seeds": sigma,
            "branches": 2 * num_layers,
        }
    for key in ("matrix_check", "spectral_check", "wiring"):
        if key in runs[0]:
            out[key] = runs[0][key]
    return out


def compute(config, study) -> dict:
    jobs = [(s, p) for s in config.settings for p in config.placements]
    seed_list = seeds(config)
    results = {
        "bounds": lemma2_bounds(config.num_layers),
        "seeds": seed_list,
        "num_seeds": len(seed_list),
        "runs": {},
    }
    for setting, placement in tqdm(jobs, desc="ln_jacobian", unit="model"):
        runs = [
            study.cached(
                f"{setting}-{placement}-{seed}",
                lambda s=seed, st=setting, p=placement: measure(config, st, p, s, checks=s == seed_list[0]),
            )
            for seed in seed_list
        ]
        results["runs"].setdefault(setting, {})[placement] = _aggregate(runs, config.num_layers)
    return results


def _lemma2_sigma(ax, bounds, quantity: str):
    """Lemma 2 in units of sigma (or 1/sigma): Post-LN input sqrt(3/2), Pre-LN stream band."""
    l = np.arange(len(bounds["pre_lower"]))
    f = np.sqrt if quantity == "sigma" else (lambda v: 1 / np.sqrt(v))
    if quantity == "sigma":  # sigma = sqrt(E||z||^2/d); the LN Jacobian's norm is 1/sigma
        post, pre = r"$\sqrt{3/2}$", r"$\sqrt{1 + l/2}$ to $\sqrt{1 + 3l/2}$"
    else:
        post, pre = r"$1/\sqrt{3/2}$", r"$1/\sqrt{1 + 3l/2}$ to $1/\sqrt{1 + l/2}$"
    ax.axhline(f(bounds["post_ln_input"]), **plotting.THEORY_STYLE, label=f"Lemma 2, Post-LN input: {post}")
    ax.fill_between(
        l,
        f(np.array(bounds["pre_lower"])),
        f(np.array(bounds["pre_upper"])),
        color="grey",
        alpha=0.2,
        label=f"Lemma 2, Pre-LN $x_l$: {pre}",
    )


def plot(results: dict, study) -> list[str]:
    settings = list(results["runs"])
    paths = []
    for quantity, ylabel in (
        ("sigma", r"$\sigma$ of the norm input"),
        ("jac", r"$\|\partial \mathrm{LN}/\partial z\|_2$"),
    ):
        fig, axes = plotting.figure(ncols=len(settings), width=4.6, height=4.6)
        for ax, setting in zip(axes, settings, strict=True):
            for placement, agg in results["runs"][setting].items():
                site = agg["sites"].get(MAIN_SITE.get(placement, ""))
                if site is None:
                    continue
                mean = np.array(site[f"{quantity}_mean"], float)
                std = np.array(site[f"{quantity}_std"], float)
                l = np.arange(len(mean))
                c = plotting.color(placement)
                ax.plot(l, mean, color=c, label=f"{placement} ({MAIN_SITE[placement]})")
                ax.fill_between(l, mean - std, mean + std, color=c, alpha=0.2)
                check = agg.get("spectral_check", {}).get("per_layer", {}).get(MAIN_SITE[placement])
                if quantity == "jac" and check is not None:
                    label = f"{placement}: autodiff SVD (seed {results['seeds'][0]})"
                    ax.plot(l, np.array(check, float), "x", color=c, ms=4, label=label)
            if setting == "theory":
                _lemma2_sigma(ax, results["bounds"], quantity)
            ax.set(title=f"{setting} setting, init", xlabel="layer l", ylabel=ylabel, yscale="log")
            plotting.plain_log_ticks(ax)
            ax.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        paths += plotting.save(fig, study.figure_stem(f"ln_{quantity}"))
    return paths
