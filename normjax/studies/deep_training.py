"""deep_training: early model update, LN-input growth and gradient vanishing vs depth without warmup (D1-D3, S7)."""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import matplotlib.ticker
import numpy as np
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting, specs
from normjax import train as nt
from normjax.jacobian import fits
from normjax.studies.deep_training_verdicts import LN_INPUT_LARGE
from normjax.train.tasks import unigram_nll

BETA_KERNELS = ("ffn/fc1/kernel", "ffn/fc2/kernel", "attn/value/kernel", "attn/out/kernel")  # DeepNorm's beta
UNSCALED_KERNELS = ("attn/query/kernel", "attn/key/kernel")


def model_config(config, run: str, depth: int) -> normjax.ModelConfig:
    """The decoder-only byte LM of this study (scanned layers: one compile per run, whatever the depth).

    `run` is a model spec (`normjax.specs`: "pre", "pre:dyt", "post+no_bias").
    """
    return normjax.ModelConfig(
        arch="decoder",
        vocab_size=len(nt.byte_vocab()),
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=depth,
        scan_layers=True,
        max_len=config.seq_len,
        **specs.parse(run).fields,
    )


@functools.lru_cache(maxsize=2)
def _corpus(max_bytes: int) -> dict:
    return nt.load_byte_corpus(max_bytes=max_bytes)


def data(config):
    """(training batches, the fixed held-out batch x on which F(x, theta_t) is probed)."""
    corpus, spec = _corpus(config.max_bytes), nt.BatchSpec(batch_size=config.batch_size)
    train = nt.LMBatches(corpus["train"], config.seq_len, spec, seed=config.data_seed)
    return train, nt.LMBatches(corpus["valid"], config.seq_len, spec, shuffle=False).batch(0)


def hparams(config, vocab_size: int) -> dict:
    """Constant lr from the first update (no warmup), no clipping, no smoothing, no weight decay."""
    return dict(
        lr=config.lr,
        warmup_steps=0,
        warmup_init_lr=0.0,
        total_steps=config.num_steps,
        end_lr=config.lr,
        d_model=config.d_model,
        weight_decay=0.0,
        clip_norm=0.0,
        label_smoothing=0.0,
        divergence_loss=config.divergence_factor * math.log(vocab_size),
        divergence_patience=config.divergence_patience,
    )


def probe_steps(config) -> list[int]:
    """Every step up to early_steps, then every probe_every steps, and the last one."""
    return sorted(
        set(range(config.early_steps + 1)) | set(range(0, config.num_steps, config.probe_every)) | {config.num_steps}
    )


@functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
def _step(spec, state, batch, fixed, probe):
    """The engine's train_step, after (when `probe`) its diagnostics and the logits F(x, theta) on `fixed`.

    One compile per model serves probed and plain steps: lax.cond runs the probe branch only when asked.
    """

    def measure(s):
        diag = nt.diagnostics(spec.graphdef, spec.task, s.params, s.consts, fixed)
        return diag, nnx.merge(spec.graphdef, s.params, s.consts)(fixed["tokens"], padding_mask=fixed["mask"])

    skip = lambda s: jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(measure, s))
    probes = jax.lax.cond(probe, measure, skip, state)
    return *nt.train_step(spec, state, batch), probes


def model_update(logits_BTV, logits0_BTV) -> float:
    """||F(x, theta_t) - F(x, theta_0)||: rms over the tokens of x of the L2 norm of the logit change."""
    d_BTV = np.asarray(logits_BTV, np.float64) - np.asarray(logits0_BTV, np.float64)
    return float(np.sqrt(np.mean(np.sum(d_BTV**2, axis=-1))))


def deepnorm_init(model, tokens_BT) -> dict:
    """D1 at init: alpha measured per block as <z - G(x), x>/<x, x> at the attention LN input z = alpha x + G(x),
    and the std of each kernel over its Xavier std sqrt(2/(fan_in + fan_out)), pooled over layers."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def alphas(state, tokens_BT):
        sp = normjax.probe(nnx.merge(graphdef, state), tokens_BT)[1]["decoder"]
        return jnp.stack(
            [
                jnp.sum((n["attn.post"] - b["attn"]) * x) / jnp.sum(x * x)
                for x, n, b in zip(sp.streams[:-1], sp.norm_inputs, sp.branch_outputs, strict=True)
            ]
        )

    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
    ratios, counts = {}, {}
    for name in BETA_KERNELS + UNSCALED_KERNELS:
        w_LIO = np.stack([np.asarray(p[name]) for p in layers])
        ratios[name] = float(w_LIO.std() / math.sqrt(2 / sum(w_LIO.shape[-2:])))
        counts[name] = int(w_LIO.size)
    return {"alpha": np.asarray(alphas(state, tokens_BT)), "std_over_xavier": ratios, "counts": counts}


def init_record(model, run: str, tokens_BT) -> dict:
    """What the claims check at init: DeepNorm's constants (D1), DyT's alpha_0 (R6)."""
    spec = specs.parse(run)
    out = {"num_params": sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))}
    if spec.placement == "deepnorm":
        out["deepnorm"] = deepnorm_init(model, tokens_BT)
    if spec.norm == "dyt":
        layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
        out["dyt_alpha0"] = [float(v) for p in layers for k, v in p.items() if k.endswith("norm/alpha")]
    return out


def _train(spec, state, batches, fixed, num_steps: int, when: set, check_every: int):
    """num_steps updates of `state`; F(x, theta_t), LN inputs and layer gradients probed at the steps in `when`.

    Returns (probes, per-step metrics, final state); stops early once the engine flags divergence.
    """
    probes, metrics, logits0 = {"step": [], "update": [], "ln_input_rms": [], "layer_grad_norm": []}, [], None
    for t in range(num_steps + 1):  # the update after the last probe (t = num_steps) is discarded
        state, m, (diag, logits_BTV) = _step(spec, state, batches.batch(t), fixed, t in when)
        if t in when:
            diag, logits_BTV = jax.device_get((diag, logits_BTV))
            if logits0 is None:
                logits0, probes["output_norm"] = logits_BTV, model_update(logits_BTV, np.zeros_like(logits_BTV))
            probes["step"].append(t)
            probes["update"].append(model_update(logits_BTV, logits0))
            probes["ln_input_rms"].append(float(diag["norm_input_rms/decoder"]))
            probes["layer_grad_norm"].append(np.asarray(diag["grad_norm/decoder"]))
        if t == num_steps:
            break
        metrics.append(m)
        if (t + 1) % check_every == 0 and int(state.diverged_at) >= 0:
            break
    return probes, jax.device_get(metrics), state


def train_run(config, run: str, depth: int) -> dict:
    """Trains one model at lr without warmup, then repeats its first early_steps at update_lr (D2's regime)."""
    cfg = model_config(config, run, depth)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(config.seed))
    batches, fixed = data(config)
    init = init_record(model, run, fixed["tokens"][:2])
    optimizer = nt.OptimizerSpec(config.optimizer, b1=config.b1, b2=config.b2, eps=config.eps)
    spec = nt.StepSpec(nnx.graphdef(model), "lm", "constant", optimizer)
    hp, start = hparams(config, cfg.vocab_size), time.time()
    probes, metrics, state = _train(
        spec,
        nt.init_state(spec, model, config.seed, hp),
        batches,
        fixed,
        config.num_steps,
        set(probe_steps(config)),
        config.divergence_check_every,
    )
    diverged = int(state.diverged_at)  # the discarded update after the last probe may set it to num_steps + 1
    # The same init and batches at update_lr: lr is traced, so the compiled step is reused.
    again = nt.init_state(
        spec, normjax.Transformer(cfg, rngs=nnx.Rngs(config.seed)), config.seed, hp | {"lr": config.update_lr}
    )
    small = _train(
        spec, again, batches, fixed, config.early_steps, set(range(config.early_steps + 1)), config.early_steps + 1
    )[0]
    return {
        "init": init,
        "probes": probes,
        "diverged_step": diverged if 0 <= diverged <= config.num_steps else None,
        "loss": [float(m["loss"]) for m in metrics],
        "grad_norm": [float(m["grad_norm"]) for m in metrics],
        "small_lr_update": small["update"],
        "wall_time_s": time.time() - start,
    }


def summarize(rec: dict, config) -> dict:
    """One run's numbers for the verdicts: early update, final loss, LN-input peak, bottom-layer gradient."""
    p = rec["probes"]
    steps_, update = np.array(p["step"]), np.array(p["update"], float)  # None (JSON for NaN) becomes nan
    early = (steps_ >= 1) & (steps_ <= config.early_steps)
    grads_PL, rms = np.array(p["layer_grad_norm"], float), np.array(p["ln_input_rms"], float)
    loss = np.array(rec["loss"], float)
    final = None if rec["diverged_step"] is not None else float(np.mean(loss[-config.final_window :]))
    return {
        "early_update": float(np.mean(np.array(rec["small_lr_update"], float)[1:])),
        "early_update_train_lr": float(np.mean(update[early])),
        "first_update_relative": float(update[1] / p["output_norm"]),
        "final_loss": final,
        "diverged_step": rec["diverged_step"],
        "ln_rms_init": float(rms[0]),
        "ln_rms_peak": float(np.nanmax(rms)),
        "grad_bottom_init": float(grads_PL[0, 0]),
        "grad_bottom_end": float(grads_PL[-1, 0]),
        "grad_top_end": float(grads_PL[-1, -1]),
    }


def compute(config, study) -> dict:
    jobs = sorted(
        [(d, r) for d in config.depths for r in config.runs]
        + [(d, r) for d in config.side_depths for r in config.side_runs]
    )
    setup = {
        "task": "decoder-only byte LM (stdlib .py files)",
        "lr": config.lr,
        "update_lr": config.update_lr,
        "schedule": "constant, no warmup",
        "optimizer": f"{config.optimizer} ({config.b1}, {config.b2})",
        "early_steps": config.early_steps,
        "probe_steps": probe_steps(config),
    }
    results = {"setup": setup, "runs": {}, "summary": {}, "unigram_nll": unigram_nll(data(config)[0])}
    for depth, run in tqdm(jobs, desc="deep_training", unit="run"):
        rec = study.cached(f"{specs.parse(run).file_key}-L{depth}", lambda r=run, d=depth: train_run(config, r, d))
        results["runs"].setdefault(run, {})[str(depth)] = rec
        results["summary"].setdefault(run, {})[str(depth)] = summarize(rec, config)
    results["update_fits"] = {
        run: fits.power_law_fit(
            config.depths, [results["summary"][run][str(d)]["early_update"] for d in config.depths]
        ).to_dict()
        for run in config.runs
        if len(config.depths) >= 2
    }
    return results


def _depth_series(summary: dict, key: str):
    depths = sorted(summary, key=int)
    values = [summary[d][key] for d in depths]
    return [int(d) for d, v in zip(depths, values, strict=True) if v is not None], [v for v in values if v is not None]


def plot(results: dict, study) -> list[str]:
    summary, runs, setup = results["summary"], results["runs"], results["setup"]
    fig, (ax_u, ax_t, ax_l) = plotting.figure(ncols=3)
    for run in summary:
        side = specs.parse(run).is_variant
        style = dict(
            color=plotting.color(specs.parse(run).placement),
            marker="s" if side else "o",
            ms=4,
            label=run,
            linestyle="--" if side else "-",
            mfc="white" if side else None,
        )
        ax_u.plot(*_depth_series(summary[run], "early_update"), **style)
        ax_l.plot(*_depth_series(summary[run], "final_loss"), **style)
    if "post" in summary:  # the Post-LN prediction: an update growing with depth (O(N), Liu et al.)
        d, u = _depth_series(summary["post"], "early_update")
        ax_u.plot(d, u[0] * np.array(d) / d[0], **plotting.THEORY_STYLE, label=r"$\propto$ depth (Post-LN, O(N))")
    ax_u.set(
        xscale="log",
        yscale="log",
        xlabel="layers",
        ylabel=r"$\|F(x,\theta_t) - F(x,\theta_0)\|$",
        title=f"early update, mean over t = 1..{setup['early_steps']} (lr {setup['update_lr']:g})",
    )
    depths = sorted({int(d) for r in ("post", "deepnorm") for d in runs.get(r, {})})
    for run in ("post", "deepnorm"):
        for i, d in enumerate(depths):
            if str(d) in runs.get(run, {}):
                update = runs[run][str(d)]["small_lr_update"]
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
        title=f"update vs step, lr {setup['update_lr']:g} (darker = deeper)",
    )
    ax_l.set(
        xscale="log",
        xlabel="layers",
        ylabel="final train loss (nats/byte)",
        title=f"final loss at lr {setup['lr']:g} (missing = diverged)",
    )
    if (unigram := plotting.mark_unigram(ax_l, results)) is not None:  # the runs' colours are ax_u's
        ax_l.legend(handles=[unigram], fontsize=6, loc="best")
    depths = sorted({int(d) for by in summary.values() for d in by})
    for ax in (ax_u, ax_l):
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    for ax in (ax_u, ax_t):  # the colours of ax_l are ax_u's
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=6, loc="best")
    paths = plotting.save(fig, study.figure_stem("depth_sweep"))
    return paths + plot_instability(results, study)


def plot_instability(results: dict, study) -> list[str]:
    """D3 at the largest depth: loss, max LN-input rms, bottom-layer gradient, gradient profile at the end."""
    runs = results["runs"]
    depth = max(int(d) for r in runs.values() for d in r)
    fig, axes = plotting.figure(ncols=4, width=3.6)
    for run, by_depth in runs.items():
        if str(depth) not in by_depth:
            continue
        rec, c = by_depth[str(depth)], plotting.color(specs.parse(run).placement)
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
    axes[0].set(xlabel="step", ylabel="train loss", title=f"L={depth}, lr {results['setup']['lr']:g}, no warmup")
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
