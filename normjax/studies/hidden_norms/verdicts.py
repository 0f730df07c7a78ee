"""Verdict rules of hidden_norms: theory setting (X2), Lemma 2 (X3), Pre-LN stream growth (S4), Sandwich (R4)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row
from normjax.report.claims import CONSTRUCTION
from normjax.report.rules import Check, Threshold, combine, every, log_ci, mean_ci, power_note, too_few_seeds

THRESHOLDS = {
    "POST_BAND": Threshold(
        0.1,
        "Lemma 2's Post-LN value E||z||^2/d = 3/2: the across-seed mean (over layers, per seed) must have its 95% "
        "interval within 1.5 +- 0.1 (finite d and batch); the per-seed layer means spread by about 0.02 (s.d.)",
        source="convention",
    ),
    "BOUND_MARGIN": Threshold(
        0.05,
        "Lemma 2's Pre-LN bounds (1 + l/2) <= E||x_l||^2/d <= (1 + 3l/2) are on expectations; at every l the "
        "across-seed mean's 95% interval must lie within [lower (1 - 0.05), upper (1 + 0.05)]: the 5% covers the "
        "finite-sample mean of ||x_0||^2/d (equality at l = 0; its seed spread is about 1% at d = 128, 256 tokens)",
        source="theory",
    ),
    "GROWTH_RATIO": Threshold(
        2.0,
        "S4: the Pre-LN stream 'grows with depth' when ||x_L||^2 / ||x_0||^2 has its 95% interval above 2 (more "
        "than doubles over the stack); measured about 19 at 24 layers, seed spread about 1 (s.d.)",
        source="convention",
    ),
    "LINEAR_R2": Threshold(
        0.9,
        "S4, R4: growth is 'about linear' in l when the r^2 of a per-seed linear fit of ||x_l||^2/d in l has its "
        "95% interval above 0.9 (exponential growth over 24 layers would fit far worse); r^2 varied by < 0.01 over "
        "seeds",
        source="convention",
    ),
}
STREAM_FIGURE = "stream_norms.png"


def lemma2(results: dict) -> dict:
    prediction = "Post-LN FFN LN input 3d/2 in every layer; Pre-LN between (1 + l/2)d and (1 + 3l/2)d"
    theory = results["runs"].get("theory", {})
    bounds = results["bounds"]
    if "post" not in theory or "pre" not in theory:
        return verdict_row(
            "X3",
            prediction,
            "theory setting not run",
            "not testable at this scale",
            "the config has no theory run of both post and pre",
        )
    if (row := too_few_seeds("X3", prediction, len(theory["pre"]["stream"]))) is not None:
        return row
    post = mean_ci(np.nanmean(np.array(theory["post"]["norm_inputs"]["ffn.post"]["values"], float), axis=1))
    band = float(THRESHOLDS["POST_BAND"])
    post_ok = post.within(1.5 - band, 1.5 + band)
    margin = float(THRESHOLDS["BOUND_MARGIN"])
    lower, upper = np.array(bounds["pre_lower"]), np.array(bounds["pre_upper"])
    pre = [mean_ci(col) for col in np.array(theory["pre"]["stream"], float).T]
    inside = [e.within(lo * (1 - margin), hi * (1 + margin)) for e, lo, hi in zip(pre, lower, upper, strict=True)]
    outside = [f"l = {l}: {pre[l].text('.2f')} ({c.value})" for l, c in enumerate(inside) if c is not Check.SUPPORTED]
    n_inside = sum(c is Check.SUPPORTED for c in inside)
    measured = (
        f"Post-LN ||z||^2/d (per-seed mean over layers) {post.text('.3f')}; Pre-LN ||x_l||^2/d inside the bounds "
        f"at {n_inside}/{len(inside)} depths (l = {len(pre) - 1}: {pre[-1].text('.2f')} in "
        f"[{lower[-1]:.1f}, {upper[-1]:.1f}])" + (f"; outside: {', '.join(outside)}" if outside else "")
    )
    reason = (
        f"rule: Post-LN's across-seed mean's 95% interval within 1.5 +- {band}; Pre-LN's at every l within the "
        f"Lemma 2 bounds widened by {margin:.0%}; both -> holds, one -> partly holds, neither -> does not hold"
        + power_note("Post-LN", post, 1.5 - band, 1.5 + band)
    )
    return verdict_row(
        "X3",
        prediction,
        measured,
        combine([post_ok, every(inside)]),
        reason,
        "ln_inputs.png",
        key=f"Post-LN {post.text('.3f')}; Pre-LN inside at {n_inside}/{len(inside)} depths",
        post_mean=post.mean,
        pre_inside=n_inside,
        depths=len(inside),
    )


def _growth_row(claim, prediction, growth, label, need_ratio, extra_reason=""):
    """Judges per-seed growth: r^2 of a linear fit (and, for S4, the growth ratio) on their seed intervals."""
    if (row := too_few_seeds(claim, prediction, len(growth["slope"]))) is not None:
        return row
    slope, r2, ratio = mean_ci(growth["slope"]), mean_ci(growth["r2"]), log_ci(growth["ratio_last_first"])
    r2_min, ratio_min = float(THRESHOLDS["LINEAR_R2"]), float(THRESHOLDS["GROWTH_RATIO"])
    checks = [r2.above(r2_min), ratio.above(ratio_min) if need_ratio else slope.above(0.0)]
    measured = (
        f"{label}: ||x_L||^2/||x_0||^2 = {ratio.text('.1f')}, linear fit slope {slope.text('.3f')} per layer, "
        f"r^2 = {r2.text('.3f')}"
    )
    grows = f"||x_L||^2/||x_0||^2 above {ratio_min:g}" if need_ratio else "slope above 0"
    reason = (
        f"rule: per seed, a linear fit of ||x_l||^2/d in l; the across-seed 95% intervals of r^2 above {r2_min:g} "
        f"(linear) and of the {grows} (grows): both -> holds, one -> partly holds, neither -> does not hold"
        + extra_reason
    )
    return verdict_row(
        claim,
        prediction,
        measured,
        combine(checks),
        reason,
        STREAM_FIGURE,
        key=f"ratio {ratio.text('.1f')}, r^2 {r2.text('.3f').split(' (')[0]}",
        slope=slope.mean,
        r2=r2.mean,
        ratio_last_first=ratio.mean,
    )


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
                    True,
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
                    False,
                    "; only the init half is measured here (Pre-LN's growth during training is not)",
                )
            )
    return rows


def theory_setting(results: dict) -> list[dict]:
    """X2, a check of the construction: the theory switch builds exactly Xiong et al.'s setting."""
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
    reason = (
        "a check of the construction: every property exact (weight std within 5 standard errors of "
        "1/sqrt(fan_in), attention spread <= 1e-5)" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return [
        verdict_row(
            "X2",
            "theory=True is Xiong et al.'s setting",
            measured,
            "does not hold" if failed else CONSTRUCTION,
            reason,
            None,
            key=f"{len(ok) - len(failed)}/{len(ok)} properties exact",
            **{k: bool(v) for k, v in ok.items()},
        )
    ]


def verdicts(results: dict) -> list[dict]:
    return [lemma2(results)] + theory_setting(results) + stream_growth(results)
