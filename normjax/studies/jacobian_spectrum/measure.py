"""jacobian_spectrum: singular values of d x_L / d x_l, ||J_l|| and ||J_l - I|| per block (R1, R2, S3, S7, N1, N2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.flatten_util import ravel_pytree
from tqdm import tqdm

import normjax
from normjax import jacobian, plotting, specs
from normjax.probes import model_jacobians, param_probes
from normjax.studies.jacobian_spectrum.streams import measure_streams
from normjax.studies.seeds import seeds

STACK = "encoder"


def model_config(config, placement: str, num_layers: int) -> normjax.ModelConfig:
    """A scanned float64 encoder (rounding stays ~1e-16); `placement` is a model spec (`normjax.specs`)."""
    return normjax.ModelConfig(
        arch="encoder",
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        num_layers=num_layers,
        max_len=max(config.seq_len, 8),
        scan_layers=True,
        dtype="float64",
        param_dtype="float64",
        **specs.parse(placement).fields,
    )


def spectrum_stats(s_N, floor: float) -> dict:
    """Summary of singular values s (descending); log statistics over those above floor * s_max.

    The ones below are LN's structural zeros (each token's mean direction, and its radial direction
    up to eps) or beyond float64's resolution of a product of many Jacobians; their count is kept.
    """
    s_N = np.asarray(s_N, np.float64)
    resolved = s_N[s_N > floor * s_N[0]]
    log_s = np.log(resolved)
    return {
        "max": float(s_N[0]),
        "min": float(s_N[-1]),
        "q10": float(np.quantile(s_N, 0.1)),  # 10th percentile of all n (structural zeros included)
        "rms": float(np.sqrt(np.mean(s_N**2))),
        "log_std": float(log_s.std()),
        "log_mean": float(log_s.mean()),
        "below_floor": int(s_N.size - resolved.size),
        "max_dev_from_1": float(np.max(np.abs(s_N - 1))),
    }


def _inputs(config, seed: int):
    return (jax.random.randint(jax.random.key(1000 + seed), (1, config.seq_len), 0, config.vocab_size),)


def _targets(config, seed: int) -> jax.Array:
    """(1, T) uniform random targets of the study's sequence: the labels of every loss the study takes."""
    return jax.random.randint(jax.random.key(7 + seed), (1, config.seq_len), 0, config.vocab_size)


def _cross_entropy(logits, targets) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def loss_gradient(model, last, targets_T) -> np.ndarray:
    """g = d Loss / d x_L, raveled like the state (stream by stream): Loss the mean cross-entropy of the model's
    logits from x_L (the stack's output map, its final norm included, then the head) against `targets_T`."""
    st = model.stacks[STACK]
    g = jax.grad(lambda state: _cross_entropy(model.logits(st.output(state)), targets_T))(last)
    return np.asarray(ravel_pytree(g)[0])


def gradient_reach(pullbacks, g_N) -> list[float]:
    """||d Loss / d x_l|| / ||d Loss / d x_L|| for every l: g pulled back block by block (c_l = J_l^T c_{l+1},
    `pullbacks[l]` maps c_{l+1} to c_l), i.e. ||(d x_L / d x_l)^T g|| / ||g||, how much of the loss gradient
    reaches block l's input."""
    c, norms = g_N, []
    for pull in reversed(pullbacks):
        c = pull(c)
        norms.append(float(np.linalg.norm(c)))
    return [v / float(np.linalg.norm(g_N)) for v in norms[::-1]]


def _state_text(model) -> str:
    st = model.stacks[STACK]
    return "pair (x, d)" if st.dual else f"{st.hyper_streams} streams" if st.hyper_streams else "x"


def measure_exact(model, tokens_BT, floor: float, targets_BT) -> dict:
    """Exact per-block Jacobians J_l and every product d x_L / d x_l = J_{L-1} ... J_l (float64).

    A multi-stream stack's state is its streams (ResiDual's pair (x_l, d_l), `normjax.DualStream`; the n streams
    of hyper-connections, `normjax.HyperStreams`), raveled stream by stream: its J_l are kn x kn (k streams), the
    products d state_L / d state_l, and the input-output Jacobian is d state_L / d x_0 = P_0 [I; ...; I] (kn x n:
    every stream starts at x_0, `Stack.initial_state`), compared with [I; ...; I] for the identity check.
    "grad_reach" (per l) is `gradient_reach` of the loss gradient at x_L (`loss_gradient`, targets `targets_BT`).
    """
    x0 = normjax.embed(model, *tokens_BT, STACK)[0]
    states, J_LNN = [model.stacks[STACK].initial_state(x0)], []
    for l in range(normjax.num_blocks(model, STACK)):  # x_{l+1} = block_l(x_l) comes with J_l
        f = normjax.block_fn(model, l, STACK)  # every block shares one compiled program
        J_LNN.append(np.asarray(jacobian.jacobian(f, states[-1])))
        states.append(jacobian.evaluate(f, states[-1]))
    P_NN, svs = np.eye(J_LNN[0].shape[0]), []
    for J in reversed(J_LNN):
        P_NN = P_NN @ J
        svs.append(np.linalg.svd(P_NN, compute_uv=False))
    e2e = [spectrum_stats(s, floor) for s in svs[::-1]]
    num_streams = len(jax.tree.leaves(states[0]))
    identity = np.vstack([np.eye(x0.size)] * num_streams)
    multi = num_streams > 1
    io_NM = P_NN @ identity if multi else P_NN
    io_sv = np.linalg.svd(io_NM, compute_uv=False) if multi else svs[-1]
    last = jnp.stack(jax.tree.leaves(states[-1]))
    g_N = loss_gradient(model, states[-1], targets_BT[0])
    return {
        "block_norm": [np.linalg.norm(J, 2) for J in J_LNN],
        "block_dev": [np.linalg.norm(J - np.eye(J.shape[0]), 2) for J in J_LNN],  # ||J_l - I||_2 (N1)
        "e2e": {k: [r[k] for r in e2e] for k in e2e[0]}
        | {"grad_reach": gradient_reach([lambda c, J=J: J.T @ c for J in J_LNN], g_N)},
        "io_sv": io_sv,
        "io": spectrum_stats(io_sv, floor) if multi else e2e[0],
        "max_abs_J_minus_I": float(np.max(np.abs(io_NM - identity))),
        "max_abs_xL_minus_x0": float(jnp.max(jnp.abs(last - x0))),
        "exact": True,
        "state": _state_text(model),
    }


def measure_matrix_free(model, tokens_BT, top_k: int, targets_BT) -> dict:
    """Large n: Lanczos spectral norms (of J_l and of J_l - I), Hutchinson ||J||_F, the top-k io singular values,
    and the loss gradient's reach pulled back by one VJP per block."""
    blocks = model_jacobians.block_jacobian_norms(model, *tokens_BT, method="lanczos")[STACK]
    e2e = model_jacobians.end_to_end_jacobians(model, *tokens_BT, method="lanczos", top_k=top_k)[STACK]
    n = tokens_BT[0].size * model.cfg.d_model
    top = np.asarray(e2e["io_singular_values"])
    log_top = np.log(top)
    io = {
        "max": float(top[0]),
        "min": None,
        "rms": float(np.sqrt(e2e["frobenius_sq"][0] / n)),
        "log_std": float(log_top.std()),
        "log_mean": float(log_top.mean()),
        "below_floor": 0,
        "max_dev_from_1": float(np.max(np.abs(top - 1))),
    }
    rms = np.sqrt(np.asarray(e2e["frobenius_sq"]) / n)
    x = normjax.embed(model, *tokens_BT, STACK)[0]
    pullbacks, block_dev = [], []
    for l in range(normjax.num_blocks(model, STACK)):
        f = normjax.block_fn(model, l, STACK)
        block_dev.append(float(jacobian.spectral_norm(lambda x, f=f: f(x) - x, x, method="lanczos")))
        y, vjp = jax.vjp(f, x)
        pullbacks.append(lambda c, vjp=vjp, x=x: np.asarray(vjp(jnp.asarray(c).reshape(x.shape))[0]).ravel())
        x = y
    return {
        "block_norm": blocks["block"],
        "block_dev": block_dev,
        "io_sv": top,
        "io": io,
        "exact": False,
        "e2e": {
            "max": e2e["spectral"],
            "min": [None] * len(rms),
            "q10": [None] * len(rms),
            "rms": rms,
            "grad_reach": gradient_reach(pullbacks, loss_gradient(model, x, targets_BT[0])),
        },
    }


def measure(config, placement: str, num_layers: int, seed: int) -> dict:
    model = normjax.Transformer(model_config(config, placement, num_layers), rngs=nnx.Rngs(seed))
    tokens, targets = _inputs(config, seed), _targets(config, seed)
    if config.seq_len * config.d_model <= config.exact_max_n:
        return measure_exact(model, tokens, config.resolution, targets)
    return measure_matrix_free(model, tokens, config.top_k, targets)


def rezero_gradients(config, seed: int) -> dict:
    """R1's second half: at step 0 only ReZero's alpha gets a gradient among the block weights."""
    model = normjax.Transformer(model_config(config, "rezero", min(config.depths)), rngs=nnx.Rngs(seed))
    tokens, targets = _inputs(config, seed)[0], _targets(config, seed)

    def loss_fn(m, batch):
        return _cross_entropy(m(batch[0]), batch[1])

    grads = param_probes.grad_norms(model, loss_fn, [(tokens, targets)])
    norms = {name: np.asarray(v["norm_of_mean"]) for name, v in grads["stacks"][STACK].items()}
    gates = [n for n in norms if n == "gate" or n.endswith("/gate")]
    return {
        "gate_grad_min": min(float(norms[n].min()) for n in gates),
        "other_grad_max": max(float(v.max()) for n, v in norms.items() if n not in gates),
        "num_other": sum(1 for n in norms if n not in gates),
    }


def _aggregate(runs: list[dict]) -> dict:
    """Mean and std over seeds, and every seed's values ("seeds", seed first) for the rules' intervals."""

    def stat(values):
        a = np.array([np.nan if v is None else v for v in values], np.float64)  # None (not measured) -> nan
        return {"mean": a.mean(0), "std": a.std(0), "seeds": a}

    out = {
        "block_norm": stat([r["block_norm"] for r in runs]),
        "block_dev": stat([r["block_dev"] for r in runs]),
        "e2e": {k: stat([r["e2e"][k] for r in runs]) for k in ("max", "min", "q10", "rms", "grad_reach")},
        "io": {k: stat([r["io"][k] for r in runs]) for k in runs[0]["io"]},
        "io_sv": [r["io_sv"] for r in runs],
        "exact": runs[0]["exact"],
    }
    out["max_dev_from_1"] = max(r["io"]["max_dev_from_1"] for r in runs)
    for key in ("max_abs_J_minus_I", "max_abs_xL_minus_x0"):
        if key in runs[0]:
            out[key] = max(r[key] for r in runs)
    return out


def compute(config, study) -> dict:
    jobs = [(p, L) for p in config.placements for L in config.depths]
    seed_list = seeds(config)
    results = {
        "seeds": seed_list,
        "num_seeds": len(seed_list),
        "depths": list(config.depths),
        "n": config.seq_len * config.d_model,
        "seq_len": config.seq_len,
        "resolution": config.resolution,
        "runs": {},
    }
    with jax.enable_x64(True):
        for placement, L in tqdm(jobs, desc="jacobian_spectrum", unit="model"):
            runs = [
                study.cached(
                    f"{specs.parse(placement).file_key}-L{L}-{seed}-dev",  # -dev: pieces with block_dev
                    lambda s=seed, p=placement, L=L: measure(config, p, L, s),
                )
                for seed in seed_list
            ]
            results["runs"].setdefault(placement, {})[str(L)] = _aggregate(runs)
        for placement, L in [(p, L) for p in config.stream_placements for L in config.depths]:
            runs = [
                study.cached(
                    f"streams-{placement}-L{L}-{seed}",
                    lambda s=seed, p=placement, L=L: measure_streams(model_config(config, p, L), _inputs(config, s), s),
                )
                for seed in seed_list
            ]
            results.setdefault("streams", {}).setdefault(placement, {})[str(L)] = runs
        if "rezero" in config.placements:
            results["rezero_gradients"] = [
                study.cached(f"rezero-gradients-{seed}", lambda s=seed: rezero_gradients(config, s))
                for seed in seed_list
            ]
    return results


def _style(placement: str) -> dict:
    """ReZero's curves sit on the theory line: draw them wide and translucent so both show; variants dashed."""
    spec = specs.parse(placement)
    wide = dict(linewidth=3, alpha=0.6) if placement == "rezero" else {}
    dashed = dict(linestyle="--") if spec.is_variant else {}
    return dict(color=plotting.color(spec.placement), label=placement) | wide | dashed


def plot(results: dict, study) -> list[str]:
    depths, runs = results["depths"], results["runs"]
    # below the study's resolution a singular value is numerically zero: LayerNorm's null space (the
    # mean and x directions of every token) and float64 rounding. Such values are drawn at the floor.
    floor = results["resolution"]
    fig, axes = plotting.figure(ncols=len(depths), width=4.4, height=3.4)
    for ax, L in zip(axes, depths, strict=True):
        zeros = []
        for placement, by_depth in runs.items():
            s = np.array(by_depth[str(L)]["io_sv"][0], np.float64)
            zeros += [f"{placement} {int(np.sum(s < floor))}"] if np.any(s < floor) else []
            ax.plot(np.arange(1, s.size + 1), np.maximum(s, floor), **_style(placement))
        ax.axhspan(floor / 10, floor, color="grey", alpha=0.2, label=f"< {floor:g}: numerically 0")
        ax.axhline(1.0, **plotting.THEORY_STYLE, label="ReZero theory:\n" + r"$J = I$, all $\sigma_i = 1$")
        ax.set(
            title=f"io Jacobian spectrum, L = {L} (seed {results['seeds'][0]})\n"
            f"below floor: {', '.join(zeros) or 'none'}",
            xlabel="index i (descending)",
            ylabel=r"$\sigma_i(\partial x_L/\partial x_0)$",
            yscale="log",
            ylim=(floor / 10, None),
        )
    plotting.legend_outside(axes[-1])
    fig.text(
        0.5,
        0.005,
        f"values below {floor:g} (the study's resolution) are drawn at {floor:g}: not resolved (LayerNorm's null "
        f"space, 2 directions per token = {2 * results['seq_len']} here; float64 rounding; deep Post-LN's "
        "smallest gains)",
        ha="center",
        fontsize=7,
    )
    paths = plotting.save(fig, study.figure_stem("io_spectra"))
    fig, axes = plotting.figure(ncols=1, width=5)
    for placement, by_depth in runs.items():
        mean = [by_depth[str(L)]["io"]["log_std"]["mean"] for L in depths]
        std = [by_depth[str(L)]["io"]["log_std"]["std"] for L in depths]
        axes[0].errorbar(
            depths,
            mean,
            yerr=std,
            marker="o",
            ms=4,
            capsize=3,
            color=plotting.color(specs.parse(placement).placement),
            label=placement,
        )
    axes[0].axhline(0.0, **plotting.THEORY_STYLE, label=r"ReZero theory: $J = I$, std of $\ln \sigma_i$ = 0")
    axes[0].set(
        title="spread of log singular values (R2)",
        xlabel="layers L",
        xscale="log",
        ylabel=r"std of $\ln \sigma_i(\partial x_L/\partial x_0)$",
    )
    axes[0].set_xticks(depths, [str(L) for L in depths])
    axes[0].minorticks_off()
    axes[0].legend(fontsize=7)
    paths += plotting.save(fig, study.figure_stem("log_sv_spread"))
    return paths + _plot_profiles(results, study) + _plot_block_dev(results, study)


def _plot_profiles(results: dict, study) -> list[str]:
    L = max(results["depths"])
    fig, axes = plotting.figure(ncols=4, width=3.8)
    panels = [
        (lambda a: a["block_norm"], r"$\|J_l\|_2$", "per-block spectral norm", None),
        (lambda a: a["e2e"]["max"], r"$\|\partial x_L/\partial x_l\|_2$", "gradient gain, top", None),
        (lambda a: a["e2e"]["rms"], r"rms $\sigma_i(\partial x_L/\partial x_l)$", "gradient gain, typical", None),
        (
            lambda a: a["e2e"]["min"],
            r"$\sigma_{\min}(\partial x_L/\partial x_l)$",
            "gradient gain, worst (S3)",
            ("pre", "rezero"),
        ),
    ]
    for ax, (get, ylabel, title, only) in zip(axes, panels, strict=True):
        for placement, by_depth in results["runs"].items():
            if only is None or placement in only:
                mean = np.array(get(by_depth[str(L)])["mean"], np.float64)
                ax.plot(np.arange(mean.size), mean, **_style(placement))
        ax.axhline(1.0, **plotting.THEORY_STYLE, label=r"identity: $\|J\| = 1$")
        ax.set(title=f"{title}, L = {L}", xlabel="layer l", ylabel=ylabel, yscale="log")
    axes[0].legend(fontsize=7)
    axes[-1].legend(fontsize=7)
    axes[-1].text(0.02, 0.02, "stacks ending in a norm: exact zeros", transform=axes[-1].transAxes, fontsize=6)
    return plotting.save(fig, study.figure_stem("layer_profiles"))


def _plot_block_dev(results: dict, study) -> list[str]:
    """N1: ||J_l - I||_2 per block at the largest depth (seed means, the band their min..max), log-log."""
    L = max(results["depths"])
    shown = [p for p in ("post", "pre", "lns") if "block_dev" in results["runs"].get(p, {}).get(str(L), {})]
    if not shown:  # results from before block_dev, or no Pre-LN-like run: no figure
        return []
    fig, axes = plotting.figure(ncols=1, width=5.2)
    l1 = np.arange(1, L + 1)
    for placement in shown:
        dev_SL = np.asarray(results["runs"][placement][str(L)]["block_dev"]["seeds"], np.float64)
        axes[0].plot(l1, dev_SL.mean(0), **_style(placement))
        axes[0].fill_between(l1, dev_SL.min(0), dev_SL.max(0), color=plotting.color(placement), alpha=0.2)
    axes[0].axvline(L // 2 + 1, color="grey", linestyle=":", label="judged: upper half")
    axes[0].set(
        title=f"distance of each block from the identity at init, L = {L} (N1)",
        xlabel="block l + 1",
        ylabel=r"$\|J_l - I\|_2$",
        xscale="log",
        yscale="log",
    )
    axes[0].legend(fontsize=7)
    return plotting.save(fig, study.figure_stem("block_dev"))
