"""Verdict rules of depth_scaling: Theorem 1's slopes (X5) and the seed's 1/depth claim (S2)."""

from __future__ import annotations

from normjax.report import verdict_row

THEOREM1_SLOPE = {"post": 0.0, "pre": -0.5}  # d ln||grad W_L|| / d ln L of the bounds
S2_SLOPE = -1.0  # "scales inversely with depth near the output layer"
EXPLODES = 0.1  # a first-layer slope above max(0.1, 2 stderr) counts as growth with depth
KERNEL, METRIC = "ffn/fc2/kernel", "mean_of_norms"  # Theorem 1 bounds W^{2,L}, batch by batch
FIGURE = "depth_scaling.png"


def near(fit: dict, predicted: float) -> bool:
    """|slope - predicted| <= 2 stderr + 0.1."""
    return abs(fit["exponent"] - predicted) <= 2 * fit["stderr"] + 0.1


def _fit(results, setting, placement, where, metric=METRIC) -> dict | None:
    agg = results["runs"].get(setting, {}).get(placement)
    return None if agg is None else agg[where][KERNEL][metric]["fit"]


def _text(fit: dict) -> str:
    return f"{fit['exponent']:+.3f} +- {fit['stderr']:.3f}"


def _depths(results) -> str:
    agg = next(iter(next(iter(results["runs"].values())).values()))
    return f"L in {agg['depths']}"


def theorem1(results: dict) -> dict:
    prediction = (
        "last layer's FFN gradient vs L: log-log slope about 0 (Post-LN) and -1/2 (Pre-LN); the theorem's upper bounds"
    )
    flags, parts = [], []
    for setting in results["runs"]:
        for placement, predicted in THEOREM1_SLOPE.items():
            fit = _fit(results, setting, placement, "last")
            if fit is None:
                continue
            flags.append(near(fit, predicted))
            other = _fit(results, setting, placement, "last", "norm_of_mean")
            parts.append(
                f"{setting} {placement}: slope {_text(fit)} (predicted {predicted:+.1f}; ||E[grad]||: {_text(other)})"
            )
    if not flags:
        return verdict_row(
            "X5", prediction, "no post/pre run", "not testable at this scale", "the config has neither post nor pre"
        )
    verdict = "holds" if all(flags) else "partly holds" if any(flags) else "does not hold"
    measured = (
        f"{_depths(results)}, {results['num_seeds']} seeds, {KERNEL}, mean over "
        f"{results['num_batches']} batches of ||grad||: " + "; ".join(parts)
    )
    reason = (
        "rule: |slope - predicted| <= 2 stderr + 0.1 for every (setting, placement): all -> "
        "holds, some -> partly holds, none -> does not hold. Theorem 1 gives upper bounds; "
        "the rule reads them as scaling laws, as the claim does"
    )
    return verdict_row("X5", prediction, measured, verdict, reason, FIGURE, matches=flags)


def inverse_depth(results: dict) -> dict:
    prediction = "Post-LN gradient ~ 1/L near the output (last layer) and exploding with L near the input (first layer)"
    setting = "real" if "real" in results["runs"] else next(iter(results["runs"]))
    last, first = (_fit(results, setting, "post", w) for w in ("last", "first"))
    if last is None:
        return verdict_row(
            "S2", prediction, "no post run", "not testable at this scale", "the config has no post placement"
        )
    inverse = near(last, S2_SLOPE)
    explodes = first["exponent"] > max(EXPLODES, 2 * first["stderr"])
    verdict = {(True, True): "holds", (False, False): "does not hold"}.get((inverse, explodes), "partly holds")
    pre = [f"{w} {_text(f)}" for w in ("last", "first") if (f := _fit(results, setting, "pre", w)) is not None]
    measured = (
        f"{setting} setting, {_depths(results)}: Post-LN slope vs L of the last layer's "
        f"FFN gradient {_text(last)} (S2 says -1), first layer's {_text(first)}"
        + (f"; Pre-LN: {', '.join(pre)}" if pre else "")
    )
    reason = (
        f"rule (gradient part of S2; the sigma_l premise is in ln_jacobian): last-layer "
        f"slope within 2 stderr + 0.1 of -1, and first-layer slope > max({EXPLODES}, 2 "
        "stderr); both -> holds, one -> partly holds, neither -> does not hold"
    )
    return verdict_row("S2", prediction, measured, verdict, reason, FIGURE, inverse=inverse, explodes=explodes)


def verdicts(results: dict) -> list[dict]:
    return [theorem1(results), inverse_depth(results)]
