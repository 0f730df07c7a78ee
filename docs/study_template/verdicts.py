"""toy_study's rule: Pre-LN's stream grows with depth at init (S4, its init-time half)."""

from normjax.report import verdict_row
from normjax.report.rules import Threshold, combine, mean_ci, too_few_seeds

THRESHOLDS = {  # each names its source (normjax.threshold.SOURCES): tests/test_verdicts_seeds.py checks it
    "GROWTH": Threshold(1.0, "the last layer's ||x||^2/d over the first's: more than 1 is growth", source="theory")
}


def verdicts(results: dict) -> list[dict]:
    ratios = [curve[-1] / curve[0] for curve in results["stream"]]
    prediction = "Pre-LN's ||x_L||^2/d over ||x_0||^2/d above 1 at init"
    short = too_few_seeds("S4", prediction, len(ratios))
    if short:
        return [short]
    ratio = mean_ci(ratios)
    verdict = combine([ratio.above(float(THRESHOLDS["GROWTH"]))])
    return [verdict_row("S4", prediction, f"ratio {ratio.text()}", verdict, "interval above the threshold")]
