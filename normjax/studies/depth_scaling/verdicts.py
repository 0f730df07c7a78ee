"""Verdict rules of depth_scaling: Theorem 1's slopes (X5) and the seed's 1/depth claim (S2)."""

from __future__ import annotations

from normjax.report import verdict_row
from normjax.report.rules import Threshold, combine, mean_ci, power_note, too_few_seeds
from normjax.studies.depth_scaling.measure import S2_SLOPE, THEOREM1_SLOPE

THRESHOLDS = {
    "SLOPE_BAND": Threshold(
        0.1,
        "a log-log slope of the gradient vs depth L 'matches' a predicted slope when the across-seed mean's 95% "
        "interval lies within predicted +- 0.1: over the 8x depth range (L = 6..48) a slope off by 0.1 changes the "
        "predicted ratio by 8^0.1 = 1.23; the per-seed slopes' spread was 0.02-0.08 (s.d.) at the quick preset "
        "(6 seeds: interval half-widths <= 0.08)",
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
FIGURE = "depth_scaling.png"


def _slope(results, setting, placement, where, metric=METRIC):
    """The across-seed Estimate of the per-seed log-log slope, or None when not run."""
    agg = results["runs"].get(setting, {}).get(placement)
    return None if agg is None else mean_ci(agg[where][KERNEL][metric]["exponent"])


def _band(predicted: float) -> tuple[float, float]:
    band = float(THRESHOLDS["SLOPE_BAND"])
    return predicted - band, predicted + band


def _depths(results) -> str:
    agg = next(iter(next(iter(results["runs"].values())).values()))
    return f"L in {agg['depths']}"


def theorem1(results: dict) -> dict:
    prediction = (
        "last layer's FFN gradient vs L: log-log slope about 0 (Post-LN) and -1/2 (Pre-LN); the theorem's upper bounds"
    )
    if (row := too_few_seeds("X5", prediction, results["num_seeds"])) is not None:
        return row
    flags, parts, keys, notes = [], [], [], []
    for setting in results["runs"]:
        for placement, predicted in THEOREM1_SLOPE.items():
            est = _slope(results, setting, placement, "last")
            if est is None:
                continue
            flags.append(est.within(*_band(predicted)))
            notes.append(power_note(f"{setting} {placement}", est, *_band(predicted)))
            other = _slope(results, setting, placement, "last", "norm_of_mean")
            parts.append(
                f"{setting} {placement}: slope {est.text('+.3f')} (predicted {predicted:+.1f}; "
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
    band = THRESHOLDS["SLOPE_BAND"].value
    reason = (
        f"rule: for every (setting, placement), the 95% interval of the across-seed mean slope lies within "
        f"predicted +- {band} (0 for post, -0.5 for pre): all -> holds, some -> partly holds, none -> does not "
        "hold. Theorem 1 gives upper bounds; the rule reads them as scaling laws, as the claim does" + "".join(notes)
    )
    key = "slopes " + ", ".join(keys) + f" ({results['num_seeds']} seeds)"
    return verdict_row("X5", prediction, measured, combine(flags), reason, FIGURE, key=key, matches=flags)


def inverse_depth(results: dict) -> dict:
    prediction = "Post-LN gradient ~ 1/L near the output (last layer) and exploding with L near the input (first layer)"
    setting = "real" if "real" in results["runs"] else next(iter(results["runs"]))
    last, first = (_slope(results, setting, "post", w) for w in ("last", "first"))
    if last is None:
        return verdict_row(
            "S2", prediction, "no post run", "not testable at this scale", "the config has no post placement"
        )
    if (row := too_few_seeds("S2", prediction, results["num_seeds"])) is not None:
        return row
    inverse = last.within(*_band(S2_SLOPE))
    explodes = first.above(float(THRESHOLDS["EXPLODES_ABOVE"]))
    pre = [f"{w} {e.text('+.3f')}" for w in ("last", "first") if (e := _slope(results, setting, "pre", w)) is not None]
    measured = (
        f"{setting} setting, {_depths(results)}, slope fitted per seed: Post-LN slope vs L of the last layer's "
        f"FFN gradient {last.text('+.3f')} (S2 says -1), first layer's {first.text('+.3f')}"
        + (f"; Pre-LN: {', '.join(pre)}" if pre else "")
    )
    reason = (
        f"rule (gradient part of S2; the sigma_l premise is in ln_jacobian): the last-layer slope's 95% interval "
        f"within -1 +- {THRESHOLDS['SLOPE_BAND'].value}, and the first-layer slope's interval above "
        f"{THRESHOLDS['EXPLODES_ABOVE'].value}; both -> holds, one -> partly holds, neither -> does not hold"
        + power_note("the last-layer slope", last, *_band(S2_SLOPE))
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
