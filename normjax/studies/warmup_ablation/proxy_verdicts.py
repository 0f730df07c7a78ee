"""Verdict rules of warmup_ablation for Wortsman et al. 2023's small-scale proxies (W1-W3), from the lr curves."""

from __future__ import annotations

import numpy as np

from normjax.jacobian import fits
from normjax.report import verdict_row
from normjax.report.claims import NOT_TESTABLE
from normjax.report.rules import Threshold, combine, exponent_ci, log_ci, mean_ci
from normjax.studies.warmup_ablation.config import QK_NORM, Z_LOSS
from normjax.studies.warmup_ablation.curves import main_rows, sensitivity_curves

WORTSMAN = "Wortsman et al. 2023 (arXiv 2309.14322)"

# Merged into warmup_ablation.verdicts.THRESHOLDS, which the rules below are passed (the sensitivity table moves
# the values there).
THRESHOLDS = {
    "LOGIT_GROWTH": Threshold(
        0.0,
        "the power-law exponent of a curve's peak attention logit (max over layers and recorded steps) against "
        "the peak lr above 0 (the whole 95% interval over seeds): the logits grow with lr, the direction of "
        "Wortsman et al.'s Fig. 1 and Sec. 3.1",
        source="paper",
        unit=0.2,
    ),
    "LOGIT_DRIFT": Threshold(
        0.0,
        "the slope of a curve's final mean output logit against log10 lr below 0 (the whole 95% interval over "
        "seeds): the output logits drift away from 0, toward negative values, as lr grows (Wortsman et al. Sec. "
        "3.2, output logit divergence)",
        source="paper",
        unit=0.2,
    ),
    "SENSITIVITY_CHANGE": Threshold(
        0.0,
        "a paired (same seed) difference of LR sensitivities (nats) below 0 (reduces) or above 0 (grows), the "
        "whole 95% interval over seeds: the directions Wortsman et al. state",
        source="paper",
        unit=0.1,
    ),
}


def _curves(results: dict, group: str = "", placement: str = "pre", **match) -> dict:
    """{seed: curve} of one group's Adam lr curves (sensitivity_curves) for `placement`, matched on `match`."""
    out = {}
    for c in sensitivity_curves(results):
        same = c["group"] == group and c["placement"] == placement and c["optimizer"] == "adam"
        if same and all(c[k] == v for k, v in match.items()) and c["sensitivity"] is not None:
            out[c["seed"]] = c
    return out


def _runs_by_curve(results: dict, rows: list[dict], placement: str, warmup: int) -> dict:
    """{seed: runs sorted by lr} of the main grid for one placement and warmup."""
    out: dict = {}
    for r in rows:
        if r["placement"] == placement and r["warmup"] == warmup:
            out.setdefault(r["seed"], []).append(r)
    return {s: sorted(v, key=lambda r: r["lr"]) for s, v in sorted(out.items())}


def _peak_attention_logit(run: dict) -> float:
    """The largest recorded attention logit; nan when any recorded value is not finite (a diverged run)."""
    values = np.asarray([v for _, layers in run["attn_logit_max"] for v in layers], np.float64)
    return float(values.max()) if np.all(np.isfinite(values)) else float("nan")


def _finite_curves(curves: dict, value) -> dict:
    """The seeds whose every run gives a finite `value(run)` (a diverged run leaves no exponent: its seed is
    dropped, and fewer than 3 seeds make the check inconclusive)."""
    out = {}
    for seed, runs in curves.items():
        try:
            finite = all(np.isfinite(value(r)) for r in runs)
        except TypeError:  # None: no value recorded
            finite = False
        if finite:
            out[seed] = runs
    return out


def logit_growth(results: dict, thresholds: dict) -> dict:
    """W1: Wortsman et al. 2023, Sec. 3: the instabilities of large models, attention-logit growth (Sec. 3.1) and
    output-logit divergence (Sec. 3.2), appear in small models at high learning rates; their instrument is the
    final loss and these diagnostics against lr over orders of magnitude (Pre-LN GPT-style decoders, no qk-norm
    or z-loss). Ours: the main grid's Pre-LN byte LMs (d 128, 6 layers, 600 steps), each warmup arm, 3 seeds:
    per seed, the exponent of the peak attention logit (pre-softmax, after the 1/sqrt(d_head) scaling; max over
    layers and the recorded steps) against lr, above LOGIT_GROWTH; and the slope of the final mean output logit
    against log10 lr, below LOGIT_DRIFT. Every arm and both checks supported -> holds (`combine`)."""
    prediction = "attention logits grow and output logits drift from 0 as the lr grows, in small Pre-LN models"
    rows = main_rows(results)
    warmups = sorted({r["warmup"] for r in rows if r["placement"] == "pre"})
    if not warmups or not all(r.get("attn_logit_max") and r.get("output_logit_mean") for r in rows):
        return verdict_row("W1", prediction, "not run: no Pre-LN lr curves with diagnostics", NOT_TESTABLE,
                           "the study needs the main grid's Pre-LN runs with diag_every > 0")  # fmt: skip
    growth, drift = thresholds["LOGIT_GROWTH"].value, thresholds["LOGIT_DRIFT"].value
    checks, parts = [], []
    for w in warmups:
        curves = _runs_by_curve(results, rows, "pre", w)
        lrs = [r["lr"] for r in next(iter(curves.values()))]
        curves = _finite_curves(curves, lambda r: _peak_attention_logit(r) + r["output_logit_mean"][-1][1])
        if len(lrs) < 3 or not curves:
            continue
        exp = exponent_ci([(lrs, [_peak_attention_logit(r) for r in runs]) for runs in curves.values()])
        slope = mean_ci(
            fits.linear_fit(np.log10(lrs), [r["output_logit_mean"][-1][1] for r in runs]).slope
            for runs in curves.values()
        )
        checks += [exp.above(growth), slope.below(drift)]
        peaks = [log_ci([_peak_attention_logit(runs[i]) for runs in curves.values()]) for i in range(len(lrs))]
        parts.append(
            f"warmup {w}: peak attention logit ~ lr^e, e = {exp.text('+.2f')} (lr {lrs[0]:.3g} -> {lrs[-1]:.3g}: "
            f"{peaks[0].text('.3g')} -> {peaks[-1].text('.3g')}); final mean output logit per decade of lr "
            f"{slope.text('+.2f')}"
        )
    if not checks:
        return verdict_row("W1", prediction, "not run: fewer than 3 lrs per curve", NOT_TESTABLE,
                           "W1 needs lr curves of at least 3 lrs")  # fmt: skip
    reason = (
        f"rule: per seed and warmup arm, the exponent of the peak attention logit against lr above {growth:g} and "
        f"the slope of the final mean output logit against log10 lr below {drift:g} (95% intervals over seeds); "
        "all supported -> holds, some contradicted -> partly holds, none supported -> does not hold, a straddling "
        "interval -> inconclusive. Pre-LN without qk-norm or z-loss, as Wortsman et al.'s baseline"
    )
    return verdict_row(
        "W1", prediction, "Pre-LN, L=6, main grid: " + "; ".join(parts), combine(checks), reason, None,
        key="; ".join(p.split(" (")[0] for p in parts),
    )  # fmt: skip


def _paired(a: dict, b: dict):
    """mean_ci of b's sensitivity minus a's over the seeds both have (None: fewer than 2 shared seeds)."""
    seeds = sorted(set(a) & set(b))
    return mean_ci([b[s]["sensitivity"] - a[s]["sensitivity"] for s in seeds]) if len(seeds) > 1 else None


def sensitivity_trends(results: dict, thresholds: dict) -> list[dict]:
    """W2: Wortsman et al. 2023, Sec. 3 and Fig. 1/9: LR sensitivity grows with model size without mitigations,
    qk-layernorm (Sec. 3.1) and z-loss (Sec. 3.2) reduce it, and warmup reduces it (Sec. 3.4: longer warmup
    lowers it). Theirs: Pre-LN decoders from 9.4M to 1.2B parameters on C4, 10k-step runs, warmup 5k. Ours: the
    byte LM's Pre-LN curves, paired by seed: the warmup part compares the longest warmup with none at the main
    depth; the size part the deeper stack with the main one (depth only: the `depth` grid's curves, judged when
    they cover the main grid's lrs); the qk-layernorm and z-loss parts their sub-grids against the plain curves
    without warmup. Each part is its own row (a part whose arm was not run is 'not testable')."""
    change = thresholds["SENSITIVITY_CHANGE"].value
    warmups = sorted({c["warmup"] for c in sensitivity_curves(results) if c["group"] == "" and c["placement"] == "pre"})
    base = _curves(results, warmup=0)
    lrs = next(iter(base.values()))["lrs"] if base else []
    rows = []

    def row(part, prediction, a, b, sign, what):
        est = _paired(a, b)
        if est is None:
            return verdict_row("W2", f"{prediction} ({part} part)", f"not run: {what} has no paired curves",
                               NOT_TESTABLE, f"the {part} part needs {what} on >= 2 seeds")  # fmt: skip
        check = est.below(change) if sign < 0 else est.above(change)
        direction = "below" if sign < 0 else "above"
        sens = f"{mean_ci([c['sensitivity'] for c in a.values()]).text('.2f')} -> "
        sens += mean_ci([c["sensitivity"] for c in b.values()]).text(".2f")
        measured = f"Pre-LN LR sensitivity (nats), {what}: {sens}; paired change {est.text('+.2f')}"
        reason = (
            f"rule: the paired (same seed) change of Wortsman et al.'s LR sensitivity over lrs "
            f"{', '.join(f'{v:.3g}' for v in lrs)} {direction} {change:g} (95% interval over seeds) -> holds, the "
            "opposite -> does not hold, a straddling interval -> inconclusive (one row per part of the claim)"
        )
        return verdict_row(
            "W2", f"{prediction} ({part} part)", measured, combine([check]), reason, "lr_sensitivity.png",
            key=f"{part}: {est.text('+.2f')}", paired_change=est.mean,
        )  # fmt: skip

    longest = max(warmups) if warmups else 0
    rows.append(row("warmup", "warmup reduces LR sensitivity", base, _curves(results, warmup=longest), -1,
                    f"warmup 0 -> {longest} at the main depth"))  # fmt: skip
    depth_curves = {s: c for s, c in _curves(results, group="depth", warmup=0).items() if c["lrs"] == lrs}
    main_depth = next(iter(base.values()))["depth"] if base else "?"
    deeper = sorted({c["depth"] for c in depth_curves.values()}) or "a deeper stack over the main grid's lrs"
    rows.append(row("size", "LR sensitivity grows with model size", base, depth_curves, +1,
                    f"depth {main_depth} -> {deeper}"))  # fmt: skip
    for group, name in ((QK_NORM, "qk-layernorm"), (Z_LOSS, "z-loss")):
        rows.append(row(name, f"{name} reduces LR sensitivity", base, _curves(results, group=group, warmup=0), -1,
                        f"the {group} sub-grid vs plain, no warmup"))  # fmt: skip
    return rows


def early_logits(results: dict, thresholds: dict) -> dict:
    """W3: Wortsman et al. 2023, Sec. 3.1: attention-logit growth precedes the loss divergence that qk-layernorm
    prevents. Judged when the qk_norm sub-grid was run: per seed, at the main grid's largest lr, the peak attention
    logit with qk-layernorm over that without below 1 (log-scale interval; the growth is what qk-norm removes),
    and qk-norm's final nll below the plain run's there (paired difference below 0)."""
    prediction = "attention-logit growth precedes the divergence that qk-layernorm prevents"
    qk = {s: c for s, c in _curves(results, group=QK_NORM, warmup=0).items()}
    if not qk:
        return verdict_row("W3", prediction, "not run: the grid has no qk_norm arm", NOT_TESTABLE,
                           "W3 needs the qk_norm sub-grid (Pre-LN with qk-layernorm over the main lrs)")  # fmt: skip
    plain = _runs_by_curve(results, main_rows(results), "pre", 0)
    qk_runs = _runs_by_curve(results, [r for r in results["runs"] if r.get("group") == QK_NORM], "pre", 0)
    top = lambda r: _peak_attention_logit(r) + r["final_valid_nll"]  # noqa: E731 (None or nan: the seed is dropped)
    plain, qk_runs = (_finite_curves({s: runs[-1:] for s, runs in c.items()}, top) for c in (plain, qk_runs))
    seeds = sorted(set(plain) & set(qk_runs))
    ratio = log_ci([_peak_attention_logit(qk_runs[s][-1]) / _peak_attention_logit(plain[s][-1]) for s in seeds])
    nll = mean_ci([qk_runs[s][-1]["final_valid_nll"] - plain[s][-1]["final_valid_nll"] for s in seeds])
    checks = [ratio.below(1.0), nll.below(thresholds["SENSITIVITY_CHANGE"].value)]
    lr = plain[seeds[0]][-1]["lr"] if seeds else float("nan")
    measured = f"Pre-LN at lr {lr:.3g}, no warmup: peak attention logit qk-norm / plain {ratio.text('.3g')}; "
    measured += f"final nll qk-norm - plain {nll.text('+.2f')}"
    reason = (
        "rule: at the largest lr, qk-layernorm's peak attention logit over the plain run's below 1 and its final "
        "nll below the plain run's (95% intervals over seeds, paired); both -> holds, one -> partly holds"
    )
    return verdict_row("W3", prediction, measured, combine(checks), reason, None, key=measured)


def verdicts(results: dict, thresholds: dict) -> list[dict]:
    rows = [logit_growth(results, thresholds)] + sensitivity_trends(results, thresholds)
    return rows + [early_logits(results, thresholds)]
