"""Verdict rules of hidden_norms: Lemma 2 (X3), Pre-LN stream growth (S4), Sandwich growth (R4)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row

POST_TOLERANCE = 0.1  # |mean ||z||^2/d - 3/2| allowed for Lemma 2's Post-LN value (finite d, seeds)


def lemma2(results: dict) -> dict:
    theory = results["runs"].get("theory", {})
    bounds = results["bounds"]
    if "post" not in theory or "pre" not in theory:
        return verdict_row(
            "X3",
            "Post-LN FFN LN input 3/2 d; Pre-LN within Lemma 2 bounds",
            "theory setting not run",
            "not testable at this scale",
            "the config has no theory run of both post and pre",
        )
    post = np.array(theory["post"]["norm_inputs"]["ffn.post"]["mean"], float)
    pre = np.array(theory["pre"]["stream_mean"], float)
    pre_std = np.array(theory["pre"]["stream_std"], float)
    lower, upper = np.array(bounds["pre_lower"]), np.array(bounds["pre_upper"])
    inside = (pre + 2 * pre_std >= lower) & (pre - 2 * pre_std <= upper)
    post_ok = abs(post.mean() - 1.5) <= POST_TOLERANCE
    pre_ok = bool(inside.all())
    verdict = {(True, True): "holds", (False, False): "does not hold"}.get((post_ok, pre_ok), "partly holds")
    measured = (
        f"Post-LN ||z||^2/d = {post.mean():.3f} +- {post.std():.3f} over layers; "
        f"Pre-LN inside the bounds at {inside.sum()}/{inside.size} depths "
        f"(l = {len(pre) - 1}: {pre[-1]:.2f} in [{lower[-1]:.1f}, {upper[-1]:.1f}])"
    )
    reason = (
        f"rule: |mean - 1.5| <= {POST_TOLERANCE} for Post-LN and every Pre-LN mean within "
        f"the bounds up to 2 std over seeds"
    )
    return verdict_row(
        "X3",
        "Post-LN FFN LN input 3d/2 in every layer; Pre-LN between (1 + l/2)d and (1 + 3l/2)d",
        measured,
        verdict,
        reason,
        "ln_inputs.png",
        post_mean=post.mean(),
        pre_inside=int(inside.sum()),
        depths=int(inside.size),
    )


def _growth_row(claim, prediction, growth, label, figure, extra_reason=""):
    linear = growth["slope"] > 0 and growth["r2"] >= 0.9
    measured = (
        f"{label}: ||x_L||^2/||x_0||^2 = {growth['ratio_last_first']:.1f}, linear fit slope "
        f"{growth['slope']:.3f} +- {growth['stderr']:.3f} per layer, r^2 = {growth['r2']:.3f}"
    )
    verdict = "holds" if linear else "does not hold"
    reason = "rule: positive slope with r^2 >= 0.9 for a linear fit in l" + extra_reason
    return verdict_row(claim, prediction, measured, verdict, reason, figure, **growth)


def stream_growth(results: dict) -> list[dict]:
    rows = []
    for setting in ("real", "theory"):
        runs = results["runs"].get(setting, {})
        if "pre" in runs and not any(r["claim"] == "S4" for r in rows):
            rows.append(
                _growth_row(
                    "S4",
                    "Pre-LN's residual stream grows with depth (so the head needs a final norm)",
                    runs["pre"]["stream_growth"],
                    f"Pre-LN ({setting} model, init)",
                    "stream_norms.png",
                    "; growth at init is linear in depth, not exponential; the final norm (on by "
                    "default for pre) resets the head's input to unit scale",
                )
            )
        if "sandwich" in runs and not any(r["claim"] == "R4" for r in rows):
            rows.append(
                _growth_row(
                    "R4",
                    "Sandwich (Peri-LN) hidden variance grows about linearly with depth",
                    runs["sandwich"]["stream_growth"],
                    f"Sandwich ({setting} model, init)",
                    "stream_norms.png",
                    "; only the init half is measured here (Pre-LN's growth during training is not)",
                )
            )
    return rows


def theory_setting(results: dict) -> list[dict]:
    check = results.get("theory_check")
    if check is None:
        return []
    stds = np.array(check["std_times_sqrt_fan_in"])
    # A sample std of n Gaussian draws has relative standard error 1/sqrt(2n): allow 5 of them.
    tolerance = 5 / np.sqrt(2 * np.array(check["weight_counts"]))
    ok = {
        "W^Q = W^K = 0": check["max_abs_wq_wk"] == 0.0,
        "weights N(0, 1/fan_in)": bool(np.all(np.abs(stds - 1) <= tolerance)),
        "zero biases": check["max_abs_bias"] == 0.0,
        "gamma = 1": check["norm_scale_range"] == [1.0, 1.0],
        "one head": check["num_heads"] == 1,
        "uniform attention": check["attention_output_spread_over_tokens"] <= 1e-5,
    }
    measured = (
        f"max|W^Q|,|W^K| = {check['max_abs_wq_wk']:g}; std * sqrt(fan_in) in "
        f"[{stds.min():.3f}, {stds.max():.3f}]; max|bias| = {check['max_abs_bias']:g}; attention "
        f"output spread over tokens {check['attention_output_spread_over_tokens']:.1e}"
    )
    failed = [name for name, good in ok.items() if not good]
    verdict = "holds" if not failed else "does not hold"
    reason = (
        "rule: every property exact (weight std within 5 standard errors of 1/sqrt(fan_in), "
        "attention spread <= 1e-5)" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return [
        verdict_row(
            "X2",
            "theory=True is Xiong et al.'s setting",
            measured,
            verdict,
            reason,
            None,
            **{k: bool(v) for k, v in ok.items()},
        )
    ]


def verdicts(results: dict) -> list[dict]:
    return [lemma2(results)] + theory_setting(results) + stream_growth(results)
