"""Verdict rules of depth_scaling: Theorem 1's upper bounds on the slopes (X5) and the seed's 1/depth claim (S2)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row
from normjax.report.rules import Threshold, band_check, combine, exponent_ci, mean_ci, too_few_seeds
from normjax.studies.depth_scaling.measure import S2_SLOPE, THEOREM1_SLOPE

THRESHOLDS = {
    "SLOPE_BAND": Threshold(
        0.1,
        "a log-log slope of the gradient vs depth L 'matches' a predicted slope (S2's -1, an equality) when the "
        "across-seed mean's 95% interval lies within predicted +- 0.1: over the 8x depth range (L = 6..48) a slope "
        "off by 0.1 changes the predicted ratio by 8^0.1 = 1.23; the per-seed slopes' spread was 0.02-0.08 (s.d.) "
        "at the quick preset (6 seeds: interval half-widths <= 0.08)",
        source="convention",
    ),
    "BOUND_MARGIN": Threshold(
        0.1,
        "X5 reads Theorem 1's O() bounds as bounds on the log-log slope vs L: the slope's 95% interval must lie "
        "below the bound's slope + 0.1 (+0.1 for Post-LN, -0.4 for Pre-LN), the slack a rate leaves to lower-order "
        "terms: 8^0.1 = 1.23 over L = 6..48 (the paper states no number). Pilot seeds 1000-1005 (quick preset, "
        "never judged): the last layer's per-seed slope s.d. is 0.05-0.08 over every depth (6-seed half-widths "
        "0.05-0.08: a slope on the bound resolves), 0.22-0.27 over L >= 24 (two depths at :quick; half-widths "
        "0.23-0.28: there only a slope well below the bound resolves, more depths and seeds narrow it); pilot means "
        "+0.00 (post) and -0.59 (pre) over every depth, -0.13 to -0.15 and -0.38 to -0.42 over L >= 24",
        source="convention",
    ),
    "EXPLODES_ABOVE": Threshold(
        0.1,
        "the first layer's gradient 'explodes' with depth when its slope's 95% interval lies above +0.1 (it grows "
        "by more than 8^0.1 = 1.23 over L = 6..48); Post-LN's first-layer slope varied by about 0.4 (s.d.) over seeds",
        source="convention",
    ),
}
KERNEL, METRIC = "ffn/fc2/kernel", "mean_of_norms"  # Theorem 1 bounds W^{2,L}, batch by batch
ASYMPTOTIC_DEPTH = 24  # Theorem 1 is a rate in L: the deepest depths (L >= 24, at least two of them) show it
FIGURE = "depth_scaling.png"


def _agg(results, setting, placement):
    return results["runs"].get(setting, {}).get(placement)


def _slope(results, setting, placement, where, metric=METRIC):
    """The across-seed Estimate of the per-seed log-log slope over every depth, or None when not run."""
    agg = _agg(results, setting, placement)
    return None if agg is None else mean_ci(agg[where][KERNEL][metric]["exponent"])


def _deep_slope(results, setting, placement):
    """The across-seed Estimate of the per-seed slope of the last layer's gradient over L >= ASYMPTOTIC_DEPTH,
    or None with fewer than two such depths."""
    agg = _agg(results, setting, placement)
    depths = np.array(agg["depths"], float)
    deep = depths >= ASYMPTOTIC_DEPTH
    if deep.sum() < 2:
        return None
    values_DS = np.array(agg["last"][KERNEL][METRIC]["values"], float)
    return exponent_ci((depths[deep], v_D[deep]) for v_D in values_DS.T)


def _tightness(deep, bound: float) -> str:
    """How close the deep slope comes to the bound's (reported, not judged)."""
    if deep is None:
        return f"; fewer than two depths >= {ASYMPTOTIC_DEPTH}"
    return f"; L >= {ASYMPTOTIC_DEPTH}: {deep.text('+.3f')}, bound - slope {bound - deep.mean:+.2f}"


def _band(predicted: float) -> tuple[float, float]:
    band = float(THRESHOLDS["SLOPE_BAND"])
    return predicted - band, predicted + band


def _depths(results) -> str:
    agg = next(iter(next(iter(results["runs"].values())).values()))
    return f"L in {agg['depths']}"


def theorem1(results: dict) -> dict:
    """X5: Theorem 1 of Xiong et al. 2020 bounds the last layer's FFN weight gradient at init from above,
    ||dL/dW^{2,L}||_F <= O(d sqrt(ln d)) (Post-LN) and O(d sqrt(ln d / L)) (Pre-LN), with high probability over
    the init (arXiv 2002.04745; the authors released no code for it, and their Fig. 3 measures ||E[grad]|| per layer
    at one depth, not depth scaling). Read as a bound on the rate in L: the log-log slope of the gradient vs L lies
    at or below 0 (Post-LN) and -1/2 (Pre-LN), up to BOUND_MARGIN, over every depth and over the deepest ones
    (L >= ASYMPTOTIC_DEPTH, where a rate applies); how close the deep slope comes to the bound's is reported, not
    judged. Ours: d fixed (64 at :quick), the mean over batches of per-batch ||grad|| (||E[grad]|| reported beside),
    a copy task's loss, the theory setting (X2) and the real one."""
    prediction = (
        "last layer's FFN gradient at init vs L: log-log slope at most 0 (Post-LN) and at most -1/2 (Pre-LN), "
        "Theorem 1's upper bounds read as rates"
    )
    if (row := too_few_seeds("X5", prediction, results["num_seeds"])) is not None:
        return row
    margin = float(THRESHOLDS["BOUND_MARGIN"])
    flags, parts, keys = [], [], []
    for setting in results["runs"]:
        for placement, bound in THEOREM1_SLOPE.items():
            est = _slope(results, setting, placement, "last")
            if est is None:
                continue
            deep = _deep_slope(results, setting, placement)
            flags += [e.below(bound + margin) for e in (est, deep) if e is not None]
            other = _slope(results, setting, placement, "last", "norm_of_mean")
            parts.append(
                f"{setting} {placement}: slope {est.text('+.3f')} (bound {bound:+.1f}{_tightness(deep, bound)}; "
                f"||E[grad]||: {other.text('+.3f')})"
            )
            keys.append(f"{setting} {placement} {est.text('+.2f').split(' (')[0]}")
    if not flags:
        return verdict_row(
            "X5", prediction, "no post/pre run", "not testable at this scale", "the config has neither post nor pre"
        )
    measured = (
        f"{_depths(results)}, {results['num_seeds']} seeds, {KERNEL}, mean over "
        f"{results['num_batches']} batches of ||grad||, slope fitted per seed: " + "; ".join(parts)
    )
    reason = (
        f"rule (upper bounds, one-sided): for every (setting, placement), the 95% interval of the across-seed mean "
        f"slope lies below the bound's slope + {margin} (0 for Post-LN, -1/2 for Pre-LN), over every depth and over "
        f"L >= {ASYMPTOTIC_DEPTH} (where a rate applies; checked when two such depths were run); a slope steeper "
        "than the bound is consistent with it. All below -> holds, some above -> partly holds, all above -> does not "
        "hold, a straddle -> inconclusive. Tightness (bound - deep slope) is reported, not judged"
    )
    key = "slopes " + ", ".join(keys) + f" ({results['num_seeds']} seeds)"
    return verdict_row("X5", prediction, measured, combine(flags), reason, FIGURE, key=key, matches=flags)


def inverse_depth(results: dict) -> dict:
    prediction = (
        "at init, Post-LN gradient ~ 1/L near the output (last layer) and exploding with L near the input (first layer)"
    )
    setting = "real" if "real" in results["runs"] else next(iter(results["runs"]))
    last, first = (_slope(results, setting, "post", w) for w in ("last", "first"))
    if last is None:
        return verdict_row(
            "S2", prediction, "no post run", "not testable at this scale", "the config has no post placement"
        )
    if (row := too_few_seeds("S2", prediction, results["num_seeds"])) is not None:
        return row
    inverse, note = band_check("the last-layer slope", last, *_band(S2_SLOPE))
    explodes = first.above(float(THRESHOLDS["EXPLODES_ABOVE"]))
    pre = [f"{w} {e.text('+.3f')}" for w in ("last", "first") if (e := _slope(results, setting, "pre", w)) is not None]
    measured = (
        f"{setting} setting, at init, {_depths(results)}, slope fitted per seed: Post-LN slope vs L of the last "
        f"layer's FFN gradient {last.text('+.3f')} (S2 says -1), first layer's {first.text('+.3f')}"
        + (f"; Pre-LN: {', '.join(pre)}" if pre else "")
    )
    reason = (
        f"rule (gradient part of S2, at init; the sigma_l premise is in ln_jacobian): the last-layer slope's 95% "
        f"interval within -1 +- {THRESHOLDS['SLOPE_BAND'].value} (an interval wider than the band: inconclusive), "
        f"and the first-layer slope's interval above {THRESHOLDS['EXPLODES_ABOVE'].value}; both -> holds, one -> "
        "partly holds, neither -> does not hold" + note
    )
    key = f"Post-LN last {last.text('+.2f')}, first {first.text('+.2f').split(' (')[0]}"
    return verdict_row(
        "S2",
        prediction,
        measured,
        combine([inverse, explodes]),
        reason,
        FIGURE,
        key=key,
        inverse=inverse,
        explodes=explodes,
    )


def verdicts(results: dict) -> list[dict]:
    return [theorem1(results), inverse_depth(results)]
