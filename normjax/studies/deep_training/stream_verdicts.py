"""Verdict rules of deep_training on the trained streams and replacements: S4 and R4 in training, R3, R6."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row
from normjax.report.rules import combine, log_ci, mean_ci


def per_seed(entry: dict, key: str) -> list:
    return [s[key] for s in entry["per_seed"]]


def effective(entry: dict, unigram: float) -> np.ndarray:
    """Per-seed final loss, a diverged seed counted at the unigram entropy (it learnt no more than frequencies)."""
    return np.array([unigram if v is None else v for v in per_seed(entry, "final_loss")], float)


def _last_stream(entry: dict, key: str) -> np.ndarray:
    """Per seed, ||x_L||^2 / d of the last residual stream (the final norm's input)."""
    return np.array([s[key][-1] for s in entry["per_seed"]], float)


def stream_growth(results: dict, thresholds: dict) -> list[dict]:
    """S4 after training: Pre-LN's last stream grows with depth, and training does not shrink it."""
    pre = results["summary"].get("pre", {})
    if len(pre) < 2:
        return []
    depths = sorted(pre, key=int)
    ms = np.array([_last_stream(pre[d], "stream_ms_end") for d in depths])  # (depths, seeds)
    ok = np.all(np.isfinite(ms) & (ms > 0), axis=0)  # a seed whose stream went non-finite has no exponent
    slopes = np.polyfit(np.log([int(d) for d in depths]), np.log(ms[:, ok]), 1)[0] if ok.any() else []
    exponent, growth_min = mean_ci(slopes), float(thresholds["STREAM_GROWTH_EXPONENT"])
    grew = log_ci(_last_stream(pre[depths[-1]], "stream_ms_end") / _last_stream(pre[depths[-1]], "stream_ms_init"))
    ends = ", ".join(f"L={d}: {log_ci(_last_stream(pre[d], 'stream_ms_end')).text('.3g')}" for d in depths)
    checks = [exponent.above(growth_min), grew.above(1.0)]
    return [
        verdict_row(
            "S4",
            "in training: Pre-LN's residual stream grows with depth (so the head needs a final norm)",
            f"||x_L||^2/d after {results['setup']['num_steps']} steps at lr "
            f"{results['setup']['lr']:g}: {ends}; exponent against L {exponent.text('.2f')}; at L={depths[-1]} "
            f"trained / init {grew.text('.2f')}",
            combine(checks),
            f"rule: exponent interval above {growth_min} (grows with depth) and, at the largest "
            f"depth, trained / init interval above 1 (training does not undo it); both -> holds, one -> partly, a "
            f"straddling interval inconclusive: {[c.value for c in checks]}",
            "stream_growth.png",
            key=f"exponent {exponent.text('.2f')}",
            exponent=exponent.mean,
        )
    ]


def sandwich_vs_pre(results: dict, thresholds: dict) -> list[dict]:
    """R4 in training: Pre-LN's last stream grows more during training than Sandwich's, at the same depth."""
    summary = results["summary"]
    shared = sorted((d for d in summary.get("sandwich", {}) if d in summary.get("pre", {})), key=int)
    if not shared:
        return []
    d = shared[-1]
    growth = {
        r: _last_stream(summary[r][d], "stream_ms_end") / _last_stream(summary[r][d], "stream_ms_init")
        for r in ("pre", "sandwich")
    }
    ratio, faster = log_ci(growth["pre"] / growth["sandwich"]), float(thresholds["FASTER"])
    return [
        verdict_row(
            "R4",
            "in training: Pre-LN's hidden state can grow faster than Sandwich's (Peri-LN)",
            f"L={d}, lr {results['setup']['lr']:g}, no warmup: ||x_L||^2 trained / init Pre-LN "
            f"{log_ci(growth['pre']).text('.3g')}, Sandwich {log_ci(growth['sandwich']).text('.3g')}; ratio "
            f"{ratio.text('.3g')}",
            combine([ratio.above(faster)]),
            f"rule: the per-seed ratio of the growth factors has its (log-scale) interval above {faster:g} "
            "(holds), at or below it (does not hold) or straddling it (inconclusive)",
            "stream_growth.png",
            key=f"growth ratio {ratio.text('.3g')} at L={d}",
            ratio=ratio.mean,
        )
    ]


def replaces(results: dict, thresholds: dict, claim: str, run: str, prediction: str) -> list[dict]:
    """R3/R6: `run` trains without warmup at Pre-LN's lr to within REPLACE_TOLERANCE of Pre-LN's final loss."""
    summary, unigram, tol = results["summary"], results["unigram_nll"], 1 + float(thresholds["REPLACE_TOLERANCE"])
    depths = sorted((d for d in summary.get(run, {}) if d in summary.get("pre", {})), key=int)
    if not depths:
        return []
    ratios = {d: log_ci(effective(summary[run][d], unigram) / effective(summary["pre"][d], unigram)) for d in depths}
    measured = "; ".join(
        f"L={d}: {run} / pre final loss {r.text('.3f')} "
        f"({run} {mean_ci(effective(summary[run][d], unigram)).text('.3f')}"
        f", diverged seeds {sum(v is None for v in per_seed(summary[run][d], 'final_loss'))})"
        for d, r in ratios.items()
    )
    return [
        verdict_row(
            claim,
            prediction,
            measured + f" (lr {results['setup']['lr']:g}, no warmup; a diverged seed counts at H(p) {unigram:.3f})",
            combine(r.below(tol) for r in ratios.values()),
            f"rule: per-seed ratio to Pre-LN's final loss, log-scale interval below {tol:g} at every depth (holds), "
            "at or above it at every depth (does not hold), at some (partly); an interval that straddles it (a "
            "ranking that flips between seeds) is inconclusive",
            "depth_sweep.png",
            key="; ".join(f"L={d}: {r.text('.3f')}" for d, r in ratios.items()),
            ratios={d: r.mean for d, r in ratios.items()},
        )
    ]
