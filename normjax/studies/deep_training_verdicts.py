"""Verdict rules of deep_training: DeepNorm init (D1), early update (D2), Post-LN failure chain (D3), S7, R3, R6."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row

ALPHA_RTOL = 1e-4  # float32 arithmetic on the probed stream
POST_GROWTH_SLOPE = 0.2  # log-log slope of Post-LN's early update vs depth that counts as "grows"
EXPLODING = 1.0  # first update at the training lr, ||F(x, theta_1) - F(x, theta_0)|| / ||F(x, theta_0)||
LN_INPUT_LARGE = 3.0  # ||x||/sqrt(d) that counts as ">> sqrt(d)" (and at least twice the value at init)
GRAD_VANISHED = 1e-2  # bottom-layer gradient at the end / at init that counts as "vanished"
LOSS_TOLERANCE = 0.05  # final loss within 5% of the best placement at that depth = trains fine
REPLACE_TOLERANCE = 0.10  # R3/R6: final loss within 10% of Pre-LN's


def decoder_deepnorm(depth: int) -> tuple[float, float]:
    """The paper's decoder-only constants (Wang et al. 2022, Table 1): alpha = (2M)^(1/4), beta = (8M)^(-1/4)."""
    return (2 * depth) ** 0.25, (8 * depth) ** -0.25


def deepnorm_init(results: dict) -> list[dict]:
    runs = results["runs"].get("deepnorm", {})
    if not runs:
        return []
    worst_alpha, worst_std, parts = 0.0, 0.0, []
    for depth, rec in sorted(runs.items(), key=lambda kv: int(kv[0])):
        init = rec["init"]["deepnorm"]
        alpha, beta = decoder_deepnorm(int(depth))
        alpha_err = float(np.max(np.abs(np.array(init["alpha"]) / alpha - 1)))
        worst_alpha = max(worst_alpha, alpha_err)
        for name, ratio in init["std_over_xavier"].items():
            target = 1.0 if name.endswith(("query/kernel", "key/kernel")) else beta
            # the sample std of n Gaussian draws has relative standard error 1/sqrt(2n): allow 5 of them
            worst_std = max(worst_std, abs(ratio / target - 1) / (5 / np.sqrt(2 * init["counts"][name])))
        s = init["std_over_xavier"]
        parts.append(
            f"L={depth}: alpha {np.mean(init['alpha']):.4f} (paper {alpha:.4f}), FFN/V/O std/Xavier "
            f"{min(s[k] for k in s if 'query' not in k and 'key' not in k):.3f}-"
            f"{max(s[k] for k in s if 'query' not in k and 'key' not in k):.3f} (beta {beta:.3f}), "
            f"Q/K {s['attn/query/kernel']:.3f}/{s['attn/key/kernel']:.3f} (1)"
        )
    ok = worst_alpha <= ALPHA_RTOL and worst_std <= 1.0
    return [
        verdict_row(
            "D1",
            "decoder-only DeepNorm: alpha = (2M)^(1/4); FFN, W^V, W^O init std = beta * Xavier with beta = "
            "(8M)^(-1/4); W^Q, W^K unscaled",
            "; ".join(parts),
            "holds" if ok else "does not hold",
            f"rule: measured alpha within {ALPHA_RTOL:g} relative of the paper value in every block, and every kernel "
            "std within 5 standard errors of its target; only the decoder-only row of Table 1 is exercised here",
            None,
            worst_alpha_rel_err=worst_alpha,
            worst_std_in_5_stderr_units=worst_std,
        )
    ]


def _series(results: dict, run: str, key: str) -> tuple[list[int], np.ndarray]:
    by_depth = results["summary"].get(run, {})
    depths = sorted(int(d) for d in by_depth)
    return depths, np.array([by_depth[str(d)][key] for d in depths], float)


def early_update(results: dict) -> list[dict]:
    fits_ = results.get("update_fits", {})
    if "post" not in fits_ or "deepnorm" not in fits_:
        return [
            verdict_row(
                "D2",
                "early update grows with depth for Post-LN, small and flat for DeepNorm",
                "post and deepnorm not both run at two or more depths",
                "not testable at this scale",
                "needs post and deepnorm at two or more depths",
            )
        ]
    depths, post = _series(results, "post", "early_update")
    _, deep = _series(results, "deepnorm", "early_update")
    s_post, s_deep = fits_["post"]["exponent"], fits_["deepnorm"]["exponent"]
    grows, smaller, flatter = s_post >= POST_GROWTH_SLOPE, bool(np.all(deep < post)), abs(s_deep) <= s_post / 2
    verdict = "holds" if grows and smaller and flatter else ("partly holds" if grows or smaller else "does not hold")
    _, post_lr = _series(results, "post", "early_update_train_lr")
    _, deep_lr = _series(results, "deepnorm", "early_update_train_lr")
    measured = (
        f"mean update over steps 1..{results['setup']['early_steps']} at lr {results['setup']['update_lr']:g}, "
        f"depths {depths}: Post-LN {np.round(post, 2).tolist()} (log-log slope {s_post:.2f}), DeepNorm "
        f"{np.round(deep, 2).tolist()} (slope {s_deep:.2f}); at the training lr {results['setup']['lr']:g} "
        f"both saturate at about ||F|| (Post-LN {np.round(post_lr, 1).tolist()}, DeepNorm "
        f"{np.round(deep_lr, 1).tolist()})"
    )
    reason = (
        f"rule: Post-LN slope >= {POST_GROWTH_SLOPE} (grows), DeepNorm below Post-LN at every depth and "
        f"|DeepNorm slope| <= half of Post-LN's (flat); holds if all three, partly if Post-LN grows or "
        f"DeepNorm is smaller; got grows={grows}, smaller={smaller}, flatter={flatter}"
    )
    return [
        verdict_row(
            "D2",
            "early update ||F(x, theta_t) - F(x, theta_0)|| grows with depth for Post-LN, "
            "small and nearly flat for DeepNorm",
            measured,
            verdict,
            reason,
            "depth_sweep.png",
            post_slope=s_post,
            deepnorm_slope=s_deep,
        )
    ]


def _first_step(steps: list[int], flags) -> int | None:
    return next((t for t, flag in zip(steps, flags, strict=True) if flag), None)


def failure_chain(results: dict) -> list[dict]:
    summary = results["summary"]
    if "post" not in summary:
        return []
    depth = max(int(d) for d in summary["post"])
    post, probes = summary["post"][str(depth)], results["runs"]["post"][str(depth)]["probes"]
    deep = summary.get("deepnorm", {}).get(str(depth))
    first, deep_first = post["first_update_relative"], deep["first_update_relative"] if deep else 0.0
    ln_large = max(LN_INPUT_LARGE, 2 * post["ln_rms_init"])
    grads = [g[0] for g in probes["layer_grad_norm"]]
    ln_step = _first_step(probes["step"], [r >= ln_large for r in probes["ln_input_rms"]])
    grad_step = _first_step(probes["step"], [g <= GRAD_VANISHED * grads[0] for g in grads])
    per_block = (post["grad_top_end"] / post["grad_bottom_end"]) ** (1 / max(depth - 1, 1))
    rms_then = probes["ln_input_rms"][probes["step"].index(grad_step)] if grad_step is not None else None
    links = {
        "exploding update": first >= EXPLODING and first > deep_first,
        "LN inputs >> sqrt(d) before gradients vanish": ln_step is not None
        and (grad_step is None or ln_step <= grad_step),
        "vanishing gradients": grad_step is not None,
    }
    diverged = sorted(
        f"{run} L={d} (step {s['diverged_step']})"
        for run, by in summary.items()
        for d, s in by.items()
        if s["diverged_step"] is not None
    )
    measured = (
        f"Post-LN L={depth}, lr {results['setup']['lr']:g}, no warmup: first update ||dF||/||F|| = "
        f"{first:.2f} (DeepNorm {deep_first:.2f}); max LN input ||x||/sqrt(d) {post['ln_rms_init']:.2f} at "
        f"init -> peak {post['ln_rms_peak']:.2f} (>= {ln_large:.2f} from step {ln_step}); layer-0 gradient "
        f"{post['grad_bottom_init']:.2e} at init -> {post['grad_bottom_end']:.2e} at the end (<= "
        f"{GRAD_VANISHED:g}x from step {grad_step}, when the max LN-input rms was "
        f"{'n/a' if rms_then is None else format(rms_then, '.2f')}; top layer {post['grad_top_end']:.2e}, "
        f"so a factor {per_block:.2f} per block ({np.sqrt(per_block):.2f} per LN) smaller toward the input); "
        f"diverged runs: "
        f"{', '.join(diverged) or 'none'}"
    )
    verdict = {3: "holds", 0: "does not hold"}.get(sum(links.values()), "partly holds")
    reason = (
        f"rule, each link at the largest depth: first update >= {EXPLODING:g}x ||F|| and above DeepNorm's; "
        f"LN-input rms >= {LN_INPUT_LARGE:g} and >= 2x its init value no later than the layer-0 gradient "
        f"falls to <= {GRAD_VANISHED:g}x its init value (the chain's order); that fall happens; holds if all "
        "three, partly if some: " + ", ".join(f"{k}={v}" for k, v in links.items())
    )
    return [
        verdict_row(
            "D3",
            "Post-LN without warmup: exploding update, then LN inputs >> sqrt(d), then vanishing gradients",
            measured,
            verdict,
            reason,
            "instability.png",
            ln_step=ln_step,
            grad_step=grad_step,
            **{k.replace(" ", "_"): bool(v) for k, v in links.items()},
        )
    ]


def _fmt(loss: float | None) -> str:
    return "diverged" if loss is None else f"{loss:.3f}"


def _trains(summary: dict, run: str, depth: str) -> bool | None:
    """Not diverged and final loss within LOSS_TOLERANCE of the best run at that depth (None: not run)."""
    if depth not in summary.get(run, {}):
        return None
    finals = [by[depth]["final_loss"] for by in summary.values() if depth in by and by[depth]["final_loss"]]
    own = summary[run][depth]["final_loss"]
    return own is not None and own <= (1 + LOSS_TOLERANCE) * min(finals)


def deepnorm_depth(results: dict) -> list[dict]:
    summary = results["summary"]
    if "post" not in summary or "deepnorm" not in summary:
        return []
    depths = sorted((d for d in summary["post"] if d in summary["deepnorm"]), key=int)
    failing = [d for d in depths if not _trains(summary, "post", d)]
    best = {d: min(by[d]["final_loss"] for by in summary.values() if d in by and by[d]["final_loss"]) for d in depths}
    measured = (
        "final loss post / deepnorm / best run: "
        + "; ".join(
            f"L={d}: {_fmt(summary['post'][d]['final_loss'])} / {_fmt(summary['deepnorm'][d]['final_loss'])} / "
            f"{best[d]:.3f}"
            for d in depths
        )
        + f"; Post-LN fails or degrades at L = {[int(d) for d in failing]}"
    )
    prediction = "DeepNorm trains stably at the largest depth where Post-LN fails or degrades (DeepNorm half of S7)"
    rule = f"Post-LN fails or degrades: diverged or final loss > {1 + LOSS_TOLERANCE:g}x the best run at that depth"
    if not failing:
        return [
            verdict_row(
                "S7",
                prediction,
                measured + f" (none up to L={depths[-1]} at lr {results['setup']['lr']:g})",
                "not testable at this scale",
                rule,
                "depth_sweep.png",
            )
        ]
    d = failing[-1]
    ok = _trains(summary, "deepnorm", d)
    dn = summary["deepnorm"][d]
    verdict = "holds" if ok else ("partly holds" if dn["diverged_step"] is None else "does not hold")
    return [
        verdict_row(
            "S7",
            prediction,
            measured,
            verdict,
            rule + "; holds if DeepNorm trains within the same tolerance there, partly if it only avoids divergence",
            "depth_sweep.png",
            depth=int(d),
        )
    ]


def _replaces(results: dict, claim: str, run: str, prediction: str) -> list[dict]:
    """R3/R6: `run` trains without warmup at Pre-LN's lr to within REPLACE_TOLERANCE of Pre-LN's final loss."""
    summary = results["summary"]
    depths = sorted((d for d in summary.get(run, {}) if d in summary.get("pre", {})), key=int)
    if not depths:
        return []
    pairs = {d: (summary[run][d]["final_loss"], summary["pre"][d]["final_loss"]) for d in depths}
    diverged = [d for d, (own, _) in pairs.items() if own is None]
    ratios = {d: own / pre for d, (own, pre) in pairs.items() if own is not None and pre}
    close = all(r <= 1 + REPLACE_TOLERANCE for r in ratios.values())
    verdict = "does not hold" if diverged else ("holds" if close else "partly holds")
    measured = "; ".join(f"L={d}: {run} {_fmt(own)} vs pre {_fmt(pre)}" for d, (own, pre) in pairs.items())
    return [
        verdict_row(
            claim,
            prediction,
            measured + f" (lr {results['setup']['lr']:g}, no warmup)",
            verdict,
            f"rule: no divergence and final loss <= {1 + REPLACE_TOLERANCE:g}x Pre-LN's at equal steps "
            "(holds), no divergence but worse (partly), diverged (does not hold)",
            "depth_sweep.png",
            ratios=ratios,
        )
    ]


def verdicts(results: dict) -> list[dict]:
    dyt = results["runs"].get("pre:dyt", {})
    alpha0 = sorted({a for rec in dyt.values() for a in rec["init"]["dyt_alpha0"]})
    return (
        deepnorm_init(results)
        + early_update(results)
        + failure_chain(results)
        + deepnorm_depth(results)
        + _replaces(results, "R3", "tfixup", "T-Fixup trains without LN and without warmup at Pre-LN's lr")
        + _replaces(results, "R6", "pre:dyt", f"DyT (measured alpha_0 = {alpha0}) replaces LayerNorm in Pre-LN")
    )
