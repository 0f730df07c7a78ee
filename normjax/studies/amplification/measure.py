"""amplification: output change after a small update vs residual sublayers N; Admin's omega (L1, L2)."""

from __future__ import annotations

import functools

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

STACK = "encoder"
PROFILED = "admin_profiled"  # Admin with omega from normjax.profile_admin instead of the closed form
JUDGED_KIND = "grad_sign"  # L1 is judged on Adam's first step (sign of the gradient); "random" is reported only


def model_config(config, placement: str, num_layers: int) -> normjax.ModelConfig:
    """A scanned encoder (compile time independent of depth); admin_profiled builds as admin."""
    return normjax.ModelConfig(
        arch="encoder",
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
    """Cross-entropy of the logits against random targets: the loss whose gradient sign is the update."""
    tokens_BT, targets_BT = batch
    logp_BTV = jax.nn.log_softmax(model(tokens_BT))
    return -jnp.mean(jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1))


def batch(config, seed: int):
    k1, k2 = jax.random.split(jax.random.key(1000 + seed))
    shape = (config.batch_size, config.seq_len)
    return (jax.random.randint(k1, shape, 0, config.vocab_size), jax.random.randint(k2, shape, 0, config.vocab_size))


def build(config, placement: str, num_layers: int, seed: int):
    """(model, batch, omegas): the model at init; for admin_profiled with omegas profiled on the batch."""
    model = normjax.Transformer(model_config(config, placement, num_layers), rngs=nnx.Rngs(seed))
    data = batch(config, seed)
    omegas = normjax.profile_admin(model, data[0])[STACK] if placement == PROFILED else None
    return model, data, omegas


def scope_mask(params, scope: str):
    """1 on the weights an update may move, 0 elsewhere: "branch" is Liu et al.'s W_i of each sublayer f_i
    (attention and FFN weights), "all" every parameter (LN gains, Admin's omega, embeddings too), "none" none."""

    def keep(path):
        return scope == "all" or (scope == "branch" and any(getattr(k, "key", None) == "branch" for k in path))

    return jax.tree_util.tree_map_with_path(lambda path, w: jnp.asarray(float(keep(path)), w.dtype), params)


@functools.partial(jax.jit, static_argnames="graphdef")
def logits(graphdef, params, rest, dW, mask, tokens_BT):
    """F(x, W + mask * dW): the logits after the masked update, one compiled program per model layout."""
    moved = jax.tree.map(lambda w, d, m: w + m * d, params, dW, mask)
    return nnx.merge(graphdef, moved, rest)(tokens_BT)


def output_changes(model, data, kinds, eps: dict, scopes, key) -> dict:
    """{scope: {kind: {rms, relative, max}}} of dF = F(x, W + dW) - F(x, W) on the logits."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    masks = {scope: scope_mask(params, scope) for scope in ("none",) + tuple(scopes)}
    out = {}
    for kind in kinds:
        # dW = eps |W| N(0, 1) ("random") or -eps sign(grad) ("grad_sign": Adam's first step)
        dW = param_probes.perturbation(model, eps=eps[kind], kind=kind, key=key, loss_fn=loss_fn, batch=data)
        y0 = logits(graphdef, params, rest, dW, masks["none"], data[0])
        for scope in scopes:
            dy = logits(graphdef, params, rest, dW, masks[scope], data[0]) - y0
            out.setdefault(scope, {})[kind] = {
                "rms": float(jnp.sqrt(jnp.mean(dy**2))),
                "relative": float(jnp.linalg.norm(dy) / jnp.linalg.norm(y0)),
                "max": float(jnp.max(jnp.abs(dy))),
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


def _aggregate(config, runs_by_N: dict) -> dict:
    """Var[dF] = rms^2 (Liu et al.'s Theorem 2 quantity) per seed and N, and each seed's growth exponent."""
    Ns = sorted(runs_by_N)
    N = np.array(Ns, np.float64)
    out = {"N": N}
    for scope in config.scopes:
        for kind in config.kinds:
            var_SN = np.array([[r[scope][kind]["rms"] ** 2 for r in runs_by_N[n]] for n in Ns]).T
            rel_SN = np.array([[r[scope][kind]["relative"] for r in runs_by_N[n]] for n in Ns]).T
            out.setdefault(scope, {})[kind] = {
                "var": var_SN,  # (seeds, N)
                "var_mean": var_SN.mean(0),
                "var_std": var_SN.std(0),
                "relative_mean": rel_SN.mean(0),
                "exponent": seed_exponents(N, var_SN),  # one per seed
            }
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
    results = {
        "kinds": list(config.kinds),
        "scopes": list(config.scopes),
        "eps": dict(config.eps),
        "seeds": seeds(config),
        "num_seeds": config.num_seeds,
        "runs": {p: _aggregate(config, by_N) for p, by_N in raw.items()},
    }
    return results


def _theory(ax, results: dict, scope: str, kind: str) -> None:
    """Liu et al.'s laws, anchored at the smallest N: Var ~ N (Post-LN) and Var ~ ln N (Pre-LN, Admin)."""
    for placement, law, label, style in (
        ("post", lambda N: N, r"$\propto N$, p = 1 (Post-LN theory)", "--"),
        ("pre", np.log, r"$\propto \ln N$ (Pre-LN, Admin theory)", ":"),
    ):
        if placement in results["runs"]:
            agg = results["runs"][placement]
            N = np.array(agg["N"], np.float64)
            y = agg[scope][kind]["var_mean"][0] * law(N) / law(N[0])
            ax.plot(N, y, **(plotting.THEORY_STYLE | {"linestyle": style}), label=label)


def _mean_sem(values) -> str:
    """'mean +- s.e.' of per-seed values (the figure's; the verdict uses the 95% interval)."""
    x = np.asarray(values, np.float64)
    return f"{x.mean():.2f} +- {x.std(ddof=1) / np.sqrt(x.size):.2f}" if x.size > 1 else f"{x.mean():.2f}"


def plot(results: dict, study) -> list[str]:
    kinds, scopes = results["kinds"], results["scopes"]
    fig, axes = plotting.figure(ncols=len(kinds) * len(scopes), width=4.8)
    panels = [(scope, kind) for kind in kinds for scope in scopes]
    for ax, (scope, kind) in zip(axes, panels, strict=True):
        for placement, agg in results["runs"].items():
            N, a = np.array(agg["N"]), agg[scope][kind]
            sem = np.array(a["var_std"]) / np.sqrt(results["num_seeds"])
            ax.errorbar(
                N,
                a["var_mean"],
                yerr=sem,
                fmt="s--" if placement == PROFILED else "o-",
                ms=4,
                capsize=2,
                color=plotting.color("admin" if placement == PROFILED else placement),
                label=f"{placement}: Var ~ N^p, p = {_mean_sem(a['exponent'])}",
            )
        _theory(ax, results, scope, kind)
        ax.set(
            title=f"{kind} update (eps {results['eps'][kind]:g}) of {scope} weights"
            + (" (L1 rule)" if (kind, scope) == (JUDGED_KIND, scopes[0]) else " (reported only)"),
            xlabel="residual sublayers N",
            ylabel=r"Var$[F(x, W + \delta W) - F(x, W)]$",
            xscale="log",
            yscale="log",
        )
        ax.set_xticks(N, [str(int(n)) for n in N])
        ax.minorticks_off()
        ax.legend(fontsize=6, title="mean +- s.e. over seeds", title_fontsize=6)
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
        label=r"closed form $\sqrt{(N+1)/\ln(N+1) - 1}$",
    )
    axes[0].set(title="Admin omega vs depth (L2)", xlabel="residual sublayers N", ylabel=r"$\omega$", xscale="log")
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
    label = rf"closed form $\sqrt{{(N+1)/\ln(N+1) - 1}}$ = {omega:.2f}"
    axes[1].axhline(omega, **plotting.THEORY_STYLE, label=label)
    axes[1].set(title=f"profiled omega_i, N = {int(N.max())}", xlabel="sublayer i", ylabel=r"$\omega_i$")
    for ax in axes:
        ax.legend(fontsize=7)
    return plotting.save(fig, study.figure_stem("admin_omega"))
