"""deep_training: Post-LN, DeepNorm and others trained across depth and seeds (D1-D3, S4/R4 in training, S7, R3, R6)."""

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
from normjax.report.rules import seeds as seed_list
from normjax.train.tasks import unigram_nll

BETA_KERNELS = ("ffn/fc1/kernel", "ffn/fc2/kernel", "attn/value/kernel", "attn/out/kernel")  # DeepNorm's beta
UNSCALED_KERNELS = ("attn/query/kernel", "attn/key/kernel")
LN_INPUT_LARGE = 3.0  # ||x||/sqrt(d) that counts as ">> sqrt(d)" (D3's rule and the instability figure)
# A run "stalled" when its final loss is above H(p) - STALL_MARGIN, H(p) the unigram entropy of the training stream
# (3.13 nats/byte): it learnt little beyond byte frequencies. At :quick the stalled runs (Post-LN, 18 layers, lr
# 1e-3 after warmup) end at 3.12-3.30, the trained ones at 2.50-2.90 (20-step means; seed to seed about 0.1).
# Used by compute to pick S7's lr and by the S7 rule.
STALL_MARGIN = 0.15


def model_config(config, run: str, depth: int) -> normjax.ModelConfig:
    """The decoder-only byte LM of this study (scanned layers: one compile per run and depth, whatever the seed).

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


def data(config, seed: int):
    """(training batches in seed `seed`'s order, the fixed held-out batch x on which F(x, theta_t) is probed)."""
    corpus, spec = _corpus(config.max_bytes), nt.BatchSpec(batch_size=config.batch_size)
    train = nt.LMBatches(corpus["train"], config.seq_len, spec, seed=config.data_seed + seed)
    return train, nt.LMBatches(corpus["valid"], config.seq_len, spec, shuffle=False).batch(0)


def hparams(config, vocab_size: int, lr: float, warmup: int, num_steps: int) -> dict:
    """Linear warmup over `warmup` steps (0: lr from the first update), no clipping, smoothing or weight decay."""
    return dict(
        lr=lr,
        warmup_steps=warmup,
        warmup_init_lr=0.0,
        total_steps=num_steps,
        end_lr=lr,
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


def _stream_ms(streams, mask_BT) -> jax.Array:
    """(L + 1,): per residual stream x_l, the mean over real tokens of ||x_l||^2 / d."""
    w_BT = mask_BT.astype(jnp.float32)
    return jnp.stack(
        [
            (jnp.sum(x.astype(jnp.float32) ** 2, -1) / x.shape[-1] * w_BT).sum() / jnp.maximum(w_BT.sum(), 1.0)
            for x in streams
        ]
    )


@functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
def _step(spec, state, batch, fixed, probe):
    """The engine's train_step, after (when `probe`) its diagnostics, F(x, theta) and the stream norms on `fixed`.

    One compile per model serves probed and plain steps: lax.cond runs the probe branch only when asked.
    """

    def measure(s):
        diag = nt.diagnostics(spec.graphdef, spec.task, s.params, s.consts, fixed)
        model = nnx.merge(spec.graphdef, s.params, s.consts)
        logits_BTV, probes = normjax.probe(model, fixed["tokens"], padding_mask=fixed["mask"])
        return diag, logits_BTV, _stream_ms(probes["decoder"].streams, fixed["mask"])

    skip = lambda s: jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(measure, s))
    probes = jax.lax.cond(probe, measure, skip, state)
    return *nt.train_step(spec, state, batch), probes


def model_update(logits_BTV, logits0_BTV) -> float:
    """||F(x, theta_t) - F(x, theta_0)||: rms over the tokens of x of the L2 norm of the logit change."""
    d_BTV = np.asarray(logits_BTV, np.float64) - np.asarray(logits0_BTV, np.float64)
    return float(np.sqrt(np.mean(np.sum(d_BTV**2, axis=-1))))


@functools.partial(jax.jit, static_argnums=0)
def _alphas(graphdef, state, tokens_BT):
    """Per block, <z - G(x), x>/<x, x> at the attention LN input z = alpha x + G(x) (one compile per model shape)."""
    sp = normjax.probe(nnx.merge(graphdef, state), tokens_BT)[1]["decoder"]
    return jnp.stack(
        [
            jnp.sum((n["attn.post"] - b["attn"]) * x) / jnp.sum(x * x)
            for x, n, b in zip(sp.streams[:-1], sp.norm_inputs, sp.branch_outputs, strict=True)
        ]
    )


def deepnorm_init(model, tokens_BT) -> dict:
    """D1 at init: alpha measured per block as <z - G(x), x>/<x, x> at the attention LN input z = alpha x + G(x),
    and the std of each kernel over its Xavier std sqrt(2/(fan_in + fan_out)), pooled over layers."""
    graphdef, state = nnx.split(model)
    layers = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
    ratios, counts = {}, {}
    for name in BETA_KERNELS + UNSCALED_KERNELS:
        w_LIO = np.stack([np.asarray(p[name]) for p in layers])
        ratios[name] = float(w_LIO.std() / math.sqrt(2 / sum(w_LIO.shape[-2:])))
        counts[name] = int(w_LIO.size)
    return {"alpha": np.asarray(_alphas(graphdef, state, tokens_BT)), "std_over_xavier": ratios, "counts": counts}


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
    """num_steps updates of `state`; F(x, theta_t), LN inputs, layer gradients and stream norms probed at `when`.

    Returns (probes, per-step metrics, final state); stops early once the engine flags divergence.
    """
    probes, metrics, logits0 = {"step": [], "update": [], "ln_input_rms": [], "layer_grad_norm": []}, [], None
    probes["stream_ms"] = []
    for t in range(num_steps + 1):  # the update after the last probe (t = num_steps) is discarded
        state, m, (diag, logits_BTV, stream_ms) = _step(spec, state, batches.batch(t), fixed, t in when)
        if t in when:
            diag, logits_BTV, stream_ms = jax.device_get((diag, logits_BTV, stream_ms))
            if logits0 is None:
                logits0, probes["output_norm"] = logits_BTV, model_update(logits_BTV, np.zeros_like(logits_BTV))
            probes["step"].append(t)
            probes["update"].append(model_update(logits_BTV, logits0))
            probes["ln_input_rms"].append(float(diag["norm_input_rms/decoder"]))
            probes["layer_grad_norm"].append(np.asarray(diag["grad_norm/decoder"]))
            probes["stream_ms"].append(np.asarray(stream_ms))
        if t == num_steps:
            break
        metrics.append(m)
        if (t + 1) % check_every == 0 and int(state.diverged_at) >= 0:
            break
    return probes, jax.device_get(metrics), state


def train_run(config, run: str, depth: int, seed: int, schedule: dict | None = None) -> dict:
    """Trains one model (init, data order and dropout from `seed`).

    Without `schedule`: config.num_steps at config.lr from the first update, then the first early_steps again
    at update_lr from the same init (D2's regime). With `schedule` (S7: {"lr", "warmup", "num_steps", "kind"}):
    that run only, probed at its first and last step.
    """
    cfg = model_config(config, run, depth)
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(seed))
    batches, fixed = data(config, seed)
    init = init_record(model, run, fixed["tokens"][:2])
    optimizer = nt.OptimizerSpec(config.optimizer, b1=config.b1, b2=config.b2, eps=config.eps)
    main = schedule is None
    schedule = schedule or {"lr": config.lr, "warmup": 0, "num_steps": config.num_steps, "kind": "constant"}
    spec = nt.StepSpec(nnx.graphdef(model), "lm", schedule["kind"], optimizer)
    num_steps = schedule["num_steps"]
    hp, start = hparams(config, cfg.vocab_size, schedule["lr"], schedule["warmup"], num_steps), time.time()
    when = set(probe_steps(config)) if main else {0, num_steps}
    probes, metrics, state = _train(
        spec, nt.init_state(spec, model, seed, hp), batches, fixed, num_steps, when, config.divergence_check_every
    )
    diverged = int(state.diverged_at)  # the discarded update after the last probe may set it to num_steps + 1
    rec = {
        "seed": seed,
        "init": init,
        "probes": probes,
        "diverged_step": diverged if 0 <= diverged <= num_steps else None,
        "loss": [float(m["loss"]) for m in metrics],
        "grad_norm": [float(m["grad_norm"]) for m in metrics],
        "wall_time_s": time.time() - start,
    }
    if main:  # the same init and batches at update_lr: lr is traced, so the compiled step is reused
        again = nt.init_state(spec, normjax.Transformer(cfg, rngs=nnx.Rngs(seed)), seed, hp | {"lr": config.update_lr})
        steps = set(range(config.early_steps + 1))
        rec["small_lr_update"] = _train(spec, again, batches, fixed, config.early_steps, steps, len(steps))[0]["update"]
    return rec


def final_loss(rec: dict, window: int) -> float | None:
    """Mean train loss of the last `window` updates (each batch seen once); None when the run diverged."""
    loss = np.array(rec["loss"], float)
    return None if rec["diverged_step"] is not None else float(np.mean(loss[-window:]))


def summarize(rec: dict, config) -> dict:
    """One run's numbers for the rules: early update, final loss, LN-input peak, gradients, stream norms."""
    p = rec["probes"]
    steps_, update = np.array(p["step"]), np.array(p["update"], float)  # None (JSON for NaN) becomes nan
    early = (steps_ >= 1) & (steps_ <= config.early_steps)
    grads_PL, rms = np.array(p["layer_grad_norm"], float), np.array(p["ln_input_rms"], float)
    ms_PL = np.array(p["stream_ms"], float)
    return {
        "early_update": float(np.mean(np.array(rec["small_lr_update"], float)[1:])),
        "early_update_train_lr": float(np.mean(update[early])),
        "first_update_relative": float(update[1] / p["output_norm"]),
        "final_loss": final_loss(rec, config.final_window),
        "diverged_step": rec["diverged_step"],
        "ln_rms_init": float(rms[0]),
        "ln_rms_peak": float(np.nanmax(rms)),
        "grad_bottom_init": float(grads_PL[0, 0]),
        "grad_bottom_end": float(grads_PL[-1, 0]),
        "grad_top_end": float(grads_PL[-1, -1]),
        "stream_ms_init": ms_PL[0].tolist(),  # ||x_l||^2 / d for l = 0..L, at init and after the last update
        "stream_ms_end": ms_PL[-1].tolist(),
    }


def _by_seed(summaries: list[dict]) -> dict:
    """{"per_seed": summaries, "diverged_step": the earliest divergence over seeds (None: no seed diverged)}."""
    steps = [s["diverged_step"] for s in summaries if s["diverged_step"] is not None]
    return {"per_seed": summaries, "diverged_step": min(steps) if steps else None}


def _fit_updates(config, summary: dict) -> dict:
    """Per run and seed, the power-law fit of D2's early update against depth."""
    out = {}
    for run in config.runs:
        per_seed = [
            [summary[run][str(d)]["per_seed"][i]["early_update"] for d in config.depths]
            for i in range(config.num_seeds)
        ]
        out[run] = [fits.power_law_fit(config.depths, u).to_dict() for u in per_seed]
    return out


def deepnorm_vs_depth(config, study, seeds: list[int], unigram: float) -> dict:
    """S7's DeepNorm half: the largest lr of config.s7_lrs at which Post-LN trains at the shallowest s7 depth
    (every seed neither diverged nor stalled) under config.s7_warmup, then post and deepnorm at the deeper ones."""
    shallow, kind = min(config.s7_depths), config.s7_schedule
    out = {"schedule": kind, "warmup": config.s7_warmup, "num_steps": config.s7_steps, "lr": None, "candidates": {}}
    out["summary"], out["loss"] = {}, {}

    def runs(run: str, depth: int, lr: float) -> list[dict]:
        schedule = {"lr": lr, "warmup": config.s7_warmup, "num_steps": config.s7_steps, "kind": kind}
        key = f"s7-{specs.parse(run).file_key}-L{depth}-lr{lr:g}-w{config.s7_warmup}-{kind}"
        recs = [study.cached(f"{key}-s{s}", lambda s=s: train_run(config, run, depth, s, schedule)) for s in seeds]
        out["loss"].setdefault(run, {})[str(depth)] = [rec["loss"] for rec in recs]
        summaries = [
            {
                "final_loss": final_loss(rec, config.final_window),
                "diverged_step": rec["diverged_step"],
                "stream_ms_end": rec["probes"]["stream_ms"][-1],
            }
            for rec in recs
        ]
        out["summary"].setdefault(run, {})[str(depth)] = _by_seed(summaries)
        return summaries

    for lr in sorted(config.s7_lrs, reverse=True):
        summaries = runs("post", shallow, lr)
        out["candidates"][f"{lr:g}"] = [s["final_loss"] for s in summaries]
        if all(s["final_loss"] is not None and s["final_loss"] < unigram - STALL_MARGIN for s in summaries):
            out["lr"] = lr
            break
    if out["lr"] is None:
        return out
    for depth in tqdm(sorted(config.s7_depths)[1:], desc="deep_training S7", unit="depth"):
        for run in ("post", "deepnorm"):  # the rule compares both with Post-LN at the shallowest depth
            runs(run, depth, out["lr"])
    return out


def compute(config, study) -> dict:
    seeds = seed_list(config)
    jobs = sorted(
        {(d, r) for d in config.depths for r in config.runs}
        | {(d, r) for d in config.side_depths for r in config.side_runs}
    )
    setup = {
        "task": "decoder-only byte LM (stdlib .py files)",
        "lr": config.lr,
        "num_steps": config.num_steps,
        "update_lr": config.update_lr,
        "schedule": "constant, no warmup",
        "optimizer": f"{config.optimizer} ({config.b1}, {config.b2})",
        "early_steps": config.early_steps,
        "probe_steps": probe_steps(config),
        "stall_margin": STALL_MARGIN,
    }
    unigram = unigram_nll(data(config, seeds[0])[0])  # H(p) of the training stream (every seed's order)
    results = {"setup": setup, "seeds": seeds, "runs": {}, "summary": {}, "unigram_nll": unigram}
    for depth, run in tqdm(jobs, desc="deep_training", unit="run"):
        key = f"{specs.parse(run).file_key}-L{depth}"
        recs = [study.cached(f"{key}-s{s}", lambda r=run, d=depth, s=s: train_run(config, r, d, s)) for s in seeds]
        results["runs"].setdefault(run, {})[str(depth)] = recs
        results["summary"].setdefault(run, {})[str(depth)] = _by_seed([summarize(rec, config) for rec in recs])
    if len(config.depths) >= 2:
        results["update_fits"] = _fit_updates(config, results["summary"])
    results["s7"] = deepnorm_vs_depth(config, study, seeds, unigram) if config.s7_depths else None  # () skips S7
    return results


def _mean(values) -> float:
    """Mean over the seeds that have a value (nan when none has)."""
    x = [v for v in values if v is not None]
    return float(np.mean(x)) if x else math.nan


def _depth_series(by_depth: dict, key: str) -> tuple[list[int], list[float]]:
    """Depths and the across-seed mean of `key` (depths where every seed lacks it are left out)."""
    depths = sorted(by_depth, key=int)
    means = [_mean(s[key] for s in by_depth[d]["per_seed"]) for d in depths]
    return [int(d) for d, m in zip(depths, means, strict=True) if np.isfinite(m)], [m for m in means if np.isfinite(m)]


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
    fig, (ax_u, ax_t, ax_l) = plotting.figure(ncols=3)
    for run in summary:
        ax_u.plot(*_depth_series(summary[run], "early_update"), **_style(run))
        ax_l.plot(*_depth_series(summary[run], "final_loss"), **_style(run))
    if "post" in summary:  # the Post-LN prediction: an update growing with depth (O(N), Liu et al.)
        d, u = _depth_series(summary["post"], "early_update")
        ax_u.plot(d, u[0] * np.array(d) / d[0], **plotting.THEORY_STYLE, label=r"$\propto$ depth (Post-LN, O(N))")
    ax_u.set(
        yscale="log",
        xlabel="layers",
        ylabel=r"$\|F(x,\theta_t) - F(x,\theta_0)\|$",
        title=f"early update t = 1..{setup['early_steps']}, lr {setup['update_lr']:g} ({n} seeds)",
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
