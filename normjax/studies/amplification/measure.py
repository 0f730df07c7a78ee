"""amplification: output change after a small update vs residual sublayers N; Admin's omega (L1, L2)."""

from __future__ import annotations

import functools
import platform

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

import normjax
from normjax import plotting
from normjax.jacobian import fits
from normjax.probes import param_probes
from normjax.studies.seeds import seeds
from normjax.train import data_text

STACK = "decoder"  # a causal byte LM: the task loss is next-byte cross-entropy on real text
PROFILED = "admin_profiled"  # Admin with omega from normjax.profile_admin instead of the closed form
# Fixed before any run: L1 is judged on Liu et al.'s tool's default perturbation (a random sign on every
# non-bias, non-norm weight), its change of the model output (the logits); every other arm is reported only.
# (scope, kind, target) of L1's judged arm: their tool's default update, and what their tool logs, x_final, the
# stack's last residual stream before any final norm (Transformer-Clinic's fairseq patch: the encoder output it
# compares is taken before the final LayerNorm). The logits and the scale-free stream are reported beside it.
JUDGED = ("weights", "random_sign", "stream")
TARGETS = ("logits", "stream")  # stream: the stack's last residual stream before any final norm (their x_final)
FIGURE = "amplification.png"


def model_config(config, placement: str, num_layers: int) -> normjax.ModelConfig:
    """A scanned decoder-only LM (one compiled program per depth); admin_profiled builds as admin."""
    return normjax.ModelConfig(
        arch=STACK,
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=num_layers,
        placement="admin" if placement == PROFILED else placement,
        max_len=max(config.seq_len, 8),
        scan_layers=True,
    )


def loss_fn(model, batch):
    """The task loss: next-byte cross-entropy of the LM on a real batch (the gradient the grad_sign arm follows)."""
    tokens_BT, targets_BT = batch
    logp_BTV = jax.nn.log_softmax(model(tokens_BT))
    return -jnp.mean(jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1))


@functools.lru_cache(maxsize=2)
def corpus(max_bytes: int) -> np.ndarray:
    """Byte ids of the stdlib sources' training split (data_text.load_byte_corpus), read once per process."""
    return data_text.load_byte_corpus(max_bytes=max_bytes)["train"]


def data_record(config) -> dict:
    """What names the data: the sha256 of the bytes read, with the Python and JAX versions."""
    return data_text.byte_corpus_record(max_bytes=config.max_bytes) | {
        "task": "bytes_lm (stdlib sources, training split)",
        "jax_version": jax.__version__,
        "python": platform.python_version(),
    }


def batch(config, seed: int):
    """(tokens, next tokens): batch_size windows of the corpus at offsets drawn from `seed`."""
    ids = corpus(int(config.max_bytes))
    starts = np.random.default_rng(seed).integers(0, ids.size - config.seq_len - 1, config.batch_size)
    windows = np.stack([ids[s : s + config.seq_len + 1] for s in starts])
    return jnp.asarray(windows[:, :-1]), jnp.asarray(windows[:, 1:])


def build(config, placement: str, num_layers: int, seed: int):
    """(model, batch, omegas): the model at init; for admin_profiled with omegas profiled on the batch."""
    model = normjax.Transformer(model_config(config, placement, num_layers), rngs=nnx.Rngs(seed))
    data = batch(config, seed)
    omegas = normjax.profile_admin(model, data[0])[STACK] if placement == PROFILED else None
    return model, data, omegas


def scope_mask(params, scope: str):
    """1 on the weights an update may move, 0 elsewhere: "weights" is Liu et al.'s tool's set (every weight but
    biases, norm gains and Admin's omega: embeddings included; param_probes.weight_mask), "branch" the sublayer
    weights W_i of each f_i only, "all" every parameter, "none" none."""
    if scope == "weights":
        return param_probes.weight_mask(params)

    def keep(path):
        return scope == "all" or (scope == "branch" and any(getattr(k, "key", None) == "branch" for k in path))

    return jax.tree_util.tree_map_with_path(lambda path, w: jnp.asarray(float(keep(path)), w.dtype), params)


@functools.partial(jax.jit, static_argnames="graphdef")
def outputs(graphdef, params, rest, dW, mask, tokens_BT):
    """{logits, stream} of F(x, W + mask * dW), one compiled program per model layout."""
    moved = jax.tree.map(lambda w, d, m: w + m * d, params, dW, mask)
    logits, probes = normjax.probe(nnx.merge(graphdef, moved, rest), tokens_BT)
    return {"logits": logits, "stream": probes[STACK].streams[-1]}


def output_changes(model, data, kinds, eps: dict, scopes, key) -> dict:
    """{scope: {kind: {target: {rms, norm, relative}}}} of dF = F(x, W + dW) - F(x, W)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    masks = {scope: scope_mask(params, scope) for scope in ("none",) + tuple(scopes)}
    out = {}
    for kind in kinds:
        # random_sign: eps * (+-1) (Liu et al.'s default); grad_sign: -eps sign(grad of the task loss)
        dW = param_probes.perturbation(model, eps=eps[kind], kind=kind, key=key, loss_fn=loss_fn, batch=data)
        y0 = outputs(graphdef, params, rest, dW, masks["none"], data[0])
        for scope in scopes:
            y1 = outputs(graphdef, params, rest, dW, masks[scope], data[0])
            for target in TARGETS:
                dy = np.asarray(y1[target], np.float64) - np.asarray(y0[target], np.float64)
                out.setdefault(scope, {}).setdefault(kind, {})[target] = {
                    "rms": float(np.sqrt(np.mean(dy**2))),
                    "norm": float(np.linalg.norm(dy)),  # what their tool logs: ||x_final - x_final*||
                    "relative": float(np.linalg.norm(dy) / np.linalg.norm(np.asarray(y0[target], np.float64))),
                }
    return out


def measure(config, placement: str, num_layers: int, seed: int) -> dict:
    model, data, omegas = build(config, placement, num_layers, seed)
    out = output_changes(model, data, config.kinds, config.eps, config.scopes, jax.random.key(seed))
    if omegas is not None:
        out["omega_profiled"] = [w for block in omegas for w in block.values()]
    return out


def seed_exponents(N, var_SN) -> list[float]:
    """Per seed, the exponent p of the power law Var = c N^p fitted over N (log-log least squares)."""
    return [fits.power_law_fit(N, var_N).exponent for var_N in np.asarray(var_SN, np.float64)]


def _arm_stats(N, var_SN) -> dict:
    return {
        "var": var_SN,  # (seeds, N)
        "var_mean": var_SN.mean(0),
        "var_std": var_SN.std(0),
        "exponent": seed_exponents(N, var_SN),  # one per seed
    }


def _aggregate(config, runs_by_N: dict) -> dict:
    """Var[dF] = rms^2 (Liu et al.'s Theorem 2 quantity) per seed and N, and each seed's growth exponent."""
    Ns = sorted(runs_by_N)
    N = np.array(Ns, np.float64)
    out = {"N": N}
    for scope in config.scopes:
        for kind in config.kinds:
            for target in TARGETS:
                var_SN = np.array([[r[scope][kind][target]["rms"] ** 2 for r in runs_by_N[n]] for n in Ns]).T
                rel_SN = np.array([[r[scope][kind][target]["relative"] ** 2 for r in runs_by_N[n]] for n in Ns]).T
                arms = out.setdefault(scope, {}).setdefault(kind, {})
                arms[target] = _arm_stats(N, var_SN)
                arms[f"{target}_relative"] = _arm_stats(N, rel_SN)  # ||dF||^2 / ||F||^2: scale-free
    if "omega_profiled" in runs_by_N[Ns[0]][0]:
        last_SN = np.array([[r["omega_profiled"][-1] for r in runs_by_N[n]] for n in Ns]).T
        out["omega_last"] = {"values": last_SN, "mean": last_SN.mean(0), "std": last_SN.std(0)}
        out["omega_closed_form"] = np.array([normjax.admin_omega(int(n)) for n in N])
        out["omega_profiled_deepest"] = runs_by_N[Ns[-1]][0]["omega_profiled"]
    return out


def compute(config, study) -> dict:
    jobs = [(p, L) for p in config.placements for L in config.depths]
    raw = {}
    for placement, L in tqdm(jobs, desc="amplification", unit="model"):
        raw.setdefault(placement, {})[2 * L] = [
            study.cached(f"{placement}-L{L}-{seed}", lambda s=seed, p=placement, L=L: measure(config, p, L, s))
            for seed in seeds(config)
        ]
    return {
        "kinds": list(config.kinds),
        "scopes": list(config.scopes),
        "targets": list(TARGETS),
        "judged": list(JUDGED),
        "eps": dict(config.eps),
        "seeds": seeds(config),
        "num_seeds": config.num_seeds,
        "data": data_record(config),
        "runs": {p: _aggregate(config, by_N) for p, by_N in raw.items()},
    }


def _mean_sem(values) -> str:
    """'mean +- s.e.' of per-seed values (the figure's; the verdict uses the 95% interval)."""
    x = np.asarray(values, np.float64)
    return f"{x.mean():.2f} +- {x.std(ddof=1) / np.sqrt(x.size):.2f}" if x.size > 1 else f"{x.mean():.2f}"


def arm_of(agg: dict, scope: str, kind: str, target: str) -> dict | None:
    """One placement's {var, var_mean, var_std, exponent} of an arm, or None when not measured (results of the
    study's earlier versions have no target level: those measured the logits)."""
    a = agg.get(scope, {}).get(kind)
    if a is None or "var" in a:
        return a if target == "logits" else None
    return a.get(target)


def plot(results: dict, study) -> list[str]:
    """Mirrors Liu et al. 2020's output-change figure (|F(x, W) - F(x, W*)| vs depth per placement, a random
    perturbation and a gradient update; its figure number is not checked here), as Var[dF] vs residual
    sublayers N on a log N axis."""
    scope, _, target = results.get("judged", JUDGED)
    scope = scope if scope in results["scopes"] else results["scopes"][0]
    kinds = results["kinds"]
    fig, axes = plotting.figure(ncols=len(kinds), width=4.8)
    for ax, kind in zip(axes, kinds, strict=True):
        for placement, agg in results["runs"].items():
            N, a = np.array(agg["N"]), arm_of(agg, scope, kind, target)
            if a is None:
                continue
            ax.errorbar(
                N,
                a["var_mean"],
                yerr=np.array(a["var_std"]) / np.sqrt(results["num_seeds"]),
                fmt="s--" if placement == PROFILED else "o-",
                ms=4,
                capsize=2,
                color=plotting.color("admin" if placement == PROFILED else placement),
                label=f"{placement}: Var ~ N^p, p = {_mean_sem(a['exponent'])}",
            )
        what = "random sign (L1 rule)" if (scope, kind, target) == tuple(results.get("judged", JUDGED)) else kind
        ax.set(
            title=f"{what}, eps {results['eps'][kind]:g}, {scope} ({target})",
            xlabel="residual sublayers N (log)",
            ylabel=r"Var$[F(x, W^*) - F(x, W)]$",
            xscale="log",
        )
        ax.set_xticks(N, [str(int(n)) for n in N])
        ax.minorticks_off()
        ax.legend(fontsize=6, title="mean +- s.e. over seeds", title_fontsize=6)
    fig.suptitle(
        "mirrors Liu et al. 2020 (arXiv 2004.08249), output-change figure: |F(x, W) - F(x, W*)| vs depth under a "
        "random perturbation and a gradient update",
        fontsize=8,
    )
    paths = plotting.save(fig, study.figure_stem("amplification"))
    return paths + _plot_omega(results, study)


def _plot_omega(results: dict, study) -> list[str]:
    agg = results["runs"].get(PROFILED)
    if agg is None:
        return []
    fig, axes = plotting.figure(ncols=2)
    N = np.array(agg["N"])
    axes[0].errorbar(
        N,
        agg["omega_last"]["mean"],
        yerr=agg["omega_last"]["std"],
        fmt="o-",
        ms=4,
        color=plotting.color("admin"),
        label="profiled, last sublayer",
    )
    grid = np.arange(N.min(), N.max() + 1)
    axes[0].plot(
        grid,
        [normjax.admin_omega(int(n)) for n in grid],
        **plotting.THEORY_STYLE,
        label=r"admin-torch default $\sqrt{(N+1)/\ln(N+1) - 1}$",
    )
    axes[0].set(
        title="Admin omega vs depth (L2)",
        xlabel="residual sublayers N",
        ylabel=r"$\omega$",
        xscale="log",
        yscale="log",
    )
    axes[0].set_xticks(N, [str(int(n)) for n in N])
    axes[0].minorticks_off()
    deepest = np.array(agg["omega_profiled_deepest"])
    axes[1].plot(
        np.arange(1, deepest.size + 1),
        deepest,
        "o-",
        ms=3,
        color=plotting.color("admin"),
        label=f"profiled (seed {results['seeds'][0]})",
    )
    omega = normjax.admin_omega(int(N.max()))
    label = rf"admin-torch default $\sqrt{{(N+1)/\ln(N+1) - 1}}$ = {omega:.2f}"
    axes[1].axhline(omega, **plotting.THEORY_STYLE, label=label)
    axes[1].set(title=f"profiled omega_i, N = {int(N.max())}", xlabel="sublayer i", ylabel=r"$\omega_i$")
    for ax in axes:
        ax.legend(fontsize=7)
    return plotting.save(fig, study.figure_stem("admin_omega"))
