"""diagnose: a per-layer stability table of a normjax model at init, with plain-language warnings (no verdicts)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting
from normjax.io import to_jsonable
from normjax.jacobian import spectral
from normjax.probes import model_jacobians, model_probes, param_probes
from normjax.studies.diagnose import probe as diagnose_probe
from normjax.studies.diagnose import table as diagnose_report

FFN_WEIGHTS = ("ffn/fc1/kernel", "ffn/fc2/kernel")


def model_config(config) -> normjax.ModelConfig:
    """The ModelConfig of config.model; raises ModelConfig's ValueError (naming the field) when invalid."""
    return normjax.ModelConfig(**config.model.to_dict())


def batches(cfg: normjax.ModelConfig, config) -> list:
    """config.num_batches random (inputs, targets): tokens, or (src, tgt) for encoder_decoder."""
    out, shape = [], (config.batch_size, config.seq_len)
    for b in range(config.num_batches):
        k1, k2, k3 = jax.random.split(jax.random.key(10_000 * config.seed + b), 3)
        tokens = jax.random.randint(k1, shape, 0, cfg.vocab_size)
        inputs = (
            (tokens, jax.random.randint(k2, shape, 0, cfg.vocab_size)) if cfg.arch == "encoder_decoder" else (tokens,)
        )
        out.append((inputs, jax.random.randint(k3, shape, 0, cfg.vocab_size)))
    return out


def loss_fn(model, batch):
    """Cross-entropy of the logits against random targets (module level: its gradient compiles once)."""
    inputs, targets_BT = batch
    logp_BTV = jax.nn.log_softmax(model(*inputs))
    return -jnp.mean(jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1))


def block_norms(model, inputs, method: str, length: int) -> dict:
    """||d x_{l+1} / d x_l||_2 of every block on the first `length` tokens of the first sequence: {stack: (L,)}.

    n = length * d_model inputs: exact up to jacobian.AUTO_EXACT_MAX_ENTRIES, else Lanczos; every block of one
    structure shares one compiled program (normjax.jacobian passes the weights as arguments).
    """
    inputs, masks = model_jacobians.one_sequence(tuple(x[:, :length] for x in inputs), {}, 0)
    streams = model_probes.run_probe(model, inputs, masks)
    out = {}
    for stack in normjax.stack_names(model):
        ctx = normjax.block_context(model, *inputs, stack=stack)
        out[stack] = [
            float(spectral.spectral_norm(normjax.block_fn(model, l, stack, ctx), x[0], method=method))
            for l, x in enumerate(
                tqdm(streams[stack].streams[:-1], desc=f"{stack} block Jacobians", unit="block", leave=False)
            )
        ]
    return out


def _site_table(stack_sites: dict, key: str) -> dict:
    """{site: (L,) mean of `key` ("sigma" or "jac_norm") over tokens, None where a layer lacks the site}."""
    names = sorted({site for layer in stack_sites["layers"] for site in layer})
    return {
        site: [layer[site][key]["mean"] if site in layer else None for layer in stack_sites["layers"]] for site in names
    }


def ffn_gradients(model, data) -> dict:
    """{stack: {weight: {"mean_of_norms": (L,), "norm_of_mean": (L,)}}}, or {"error": str} if not finite."""
    try:
        grads = param_probes.grad_norms(model, loss_fn, data)["stacks"]
    except FloatingPointError as e:
        return {"error": str(e)}
    return {
        stack: {
            name: {k: v[k] for k in ("mean_of_norms", "norm_of_mean")}
            for name, v in by_name.items()
            if name in FFN_WEIGHTS
        }
        for stack, by_name in grads.items()
    }


def compute(config, study) -> dict:
    cfg = model_config(config)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(config.seed))
    data = batches(cfg, config)
    inputs = data[0][0]
    streams = model_probes.stream_norms(model, *inputs)
    sites = model_probes.norm_sites(model, *inputs)
    jac = block_norms(model, inputs, config.jacobian_method, config.jacobian_seq_len)
    grads = ffn_gradients(model, data)
    stacks = {}
    for stack in normjax.stack_names(model):
        final = sites[stack]["final"]
        stacks[stack] = {
            "num_layers": normjax.num_blocks(model, stack),
            "placements": list(cfg.layer_placements(stack)),
            "stream_rms": np.sqrt(streams[stack]["mean"]),
            "sigma": _site_table(sites[stack], "sigma"),
            "ln_jacobian": _site_table(sites[stack], "jac_norm"),
            "block_norm": jac[stack],
            "final_norm": None
            if final is None
            else {"sigma": final["sigma"]["mean"], "ln_jacobian": final["jac_norm"]["mean"]},
            "ffn_grad": grads.get(stack),
        }
    results = {
        "model": cfg.to_dict(),
        "stacks": stacks,
        "stack_order": list(normjax.stack_names(model)),
        "grad_error": grads.get("error"),
        "num_batches": config.num_batches,
        "jacobian_seq_len": min(config.jacobian_seq_len, config.seq_len),
        "table_file": "table.md",
    }
    workdir = os.path.dirname(study.path)
    results["warnings"] = diagnose_report.warnings(to_jsonable(results), cfg, dict(config.thresholds), workdir)
    results["probe"] = None
    if config.probe_steps:
        results["probe"] = diagnose_probe.probe(diagnose_probe.run_config(config), config.probe_steps)
        results["probe"]["signals"] = diagnose_probe.signals(results["probe"])
        results["warnings"] += diagnose_probe.warnings(results["probe"], dict(config.thresholds))
    return results


def plot(results: dict, study) -> list[str]:
    diagnose_report.write_markdown(results, study.figure_stem("table") + ".md")
    fig, axes = plotting.figure(ncols=3, nrows=2, width=4.0, height=3.0)
    panels = [
        ("residual stream", r"rms of $x_l$ ($\|x_l\|/\sqrt{d}$)"),
        ("norm inputs", r"$\sigma$ of norm input"),
        ("norm Jacobians", r"$\|\partial N/\partial z\|_2$"),
        ("block Jacobians", r"$\|J_l\|_2$"),
        (r"FFN $W_2$ gradient", "norm (log)"),
        (r"FFN $W_1$ gradient", "norm (log)"),
    ]
    for ax, (title, ylabel) in zip(axes, panels, strict=True):
        ax.set(title=title, xlabel="layer l", ylabel=ylabel)
    for stack in results["stack_order"]:
        s = results["stacks"][stack]
        style = {
            "linestyle": "--" if stack == "decoder" and len(results["stacks"]) > 1 else "-",
            "marker": "o",
            "ms": 3,
        }
        axes[0].plot(s["stream_rms"], label=stack, **style)
        for site, values in s["sigma"].items():
            axes[1].plot([np.nan if v is None else v for v in values], label=f"{stack} {site}", **style)
            axes[2].plot([np.nan if v is None else v for v in s["ln_jacobian"][site]], label=f"{stack} {site}", **style)
        axes[3].plot(s["block_norm"], label=stack, **style)
        for ax, weight in ((axes[4], "ffn/fc2/kernel"), (axes[5], "ffn/fc1/kernel")):
            for metric, label in (("mean_of_norms", "mean of ||g_b||"), ("norm_of_mean", "||mean g_b||")):
                if s["ffn_grad"] and weight in s["ffn_grad"]:
                    ax.plot(s["ffn_grad"][weight][metric], label=f"{stack} {label}", **style)
            ax.set_yscale("log")
    for ax in (axes[2], axes[3]):
        ax.axhline(1.0, **plotting.THEORY_STYLE, label="1 (no gain)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    model = results["model"]
    fig.suptitle(
        f"{model['arch']}, placement {model['placement']}, norm {model['norm']}, d {model['d_model']}", fontsize=9
    )
    return plotting.save(fig, study.figure_stem("diagnose"))
