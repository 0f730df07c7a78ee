"""Rules of answer: the interventions that test why warmup matters (A1-A4) and Post-LN's final quality (A5)."""

from __future__ import annotations

import math

from normjax.report import verdict_row
from normjax.report.claims import NOT_TESTABLE
from normjax.report.rules import MIN_SEEDS, Check, combine, log_ci, mean_ci
from normjax.studies.answer import cells
from normjax.studies.answer.table_verdicts import answer_section
from normjax.threshold import Threshold
from normjax.train import outcomes

THRESHOLDS = {
    "RESCUED": Threshold(
        2 / 3,
        "fraction of seeds: an arm 'fails' at a cell when at least this fraction of its seeds does not train "
        "(curve-based label other than 'trained'), and an intervention 'rescues' it when at least this fraction "
        "trains; a majority of 3 seeds, chosen before any run",
        source="convention",
        bounded=True,
    ),
    "SHARP_RATIO": Threshold(
        1.0,
        "ratio of the peak preconditioned sharpness over Cohen et al.'s threshold (2 + 2 b1) / ((1 - b1) lr_t) "
        "during the warmup window, without warmup over with: above 1 means warmup kept P^-1 H further from the "
        "stability edge; the theory's neutral point",
        source="theory",
    ),
    "QUALITY_MARGIN": Threshold(
        0.0,
        "nats: Post-LN minus Pre-LN final validation nll, each at its own best lr, paired by seed; 'better' is an "
        "interval wholly below 0 (moved by +-0.025 nats, half the 0.05-nat spread of the 6-layer placements)",
        source="convention",
        unit=0.05,
    ),
}
THRESHOLDS |= {k: outcomes.THRESHOLDS[k] for k in ("PLATEAU_BAND", "STILL_FALLING")}  # the outcome labels move too
FIGURES = {"window": "lr_window.png", "dose": "warmup_dose.png", "sharpness": "sharpness.png"}


def _cell(results: dict) -> str:
    s = results["setup"]
    return (
        f"byte LM d {s['model']['d_model']}, {s['num_steps']} steps, Post-LN at {s['dose_depth']} layers, lr "
        f"{cells.lr_text(s['dose_lr'])} (fair-control schedule, H = {s['horizon']} steps)"
    )


def _base(runs: list[dict], results: dict, lr: float) -> list[dict]:
    return [r for r in cells.dose(runs, results).get("post", {}).get(0, []) if math.isclose(r["lr"], lr)]


def rescue_check(base: list[dict], treated: list[dict], rescue: bool, level: float) -> tuple[Check, str]:
    """Did `treated` train where `base` (plain Adam, no warmup) does not (diverged, stalled or still at the plateau
    level: every label but 'trained')? `rescue` False predicts it does not."""
    n = min(len(base), len(treated))
    fails, trains = cells.untrained_fraction(base), 1 - cells.untrained_fraction(treated)
    text = f"no warmup fails {fails:.0%} of {len(base)} seeds, intervention trains {trains:.0%} of {len(treated)}"
    if n < MIN_SEEDS:
        return Check.INCONCLUSIVE, text + f" (fewer than {MIN_SEEDS} seeds: not judged)"
    if fails < level:
        return Check.INCONCLUSIVE, text + " (no warmup does not fail here: nothing to rescue)"
    if trains >= level:
        return (Check.SUPPORTED if rescue else Check.CONTRADICTED), text
    if trains <= 1 - level:
        return (Check.CONTRADICTED if rescue else Check.SUPPORTED), text
    return Check.INCONCLUSIVE, text


def _rescue_row(claim, prediction, results, runs, groups: dict[str, bool], level) -> dict:
    checks, texts = [], []
    for group, rescue in groups.items():
        treated = cells.arm(runs, group)
        for lr in sorted({r["lr"] for r in treated}):
            c, t = rescue_check(_base(runs, results, lr), [r for r in treated if r["lr"] == lr], rescue, level)
            checks.append(c)
            texts.append(f"{group} at lr {cells.lr_text(lr)}: {t}")
    if not checks:
        return verdict_row(claim, prediction, "no runs", NOT_TESTABLE, "the arm was not run")
    return verdict_row(
        claim, prediction, "; ".join(texts), combine(checks), f"rescue rule (RESCUED = {level:.2f}); "
        + _cell(results), figure=FIGURES["dose"], checks=checks, key=texts[0],
    )  # fmt: skip


def gi_adam_rule(results, runs, level) -> dict:
    """A1, prediction written before any run: if warmup's job at Post-LN's failing cell is to tame Adam's early
    preconditioner (its second moment starting at 0), GI-Adam (nu_0 = g_1^2) without any warmup trains in at least
    RESCUED of the seeds where plain Adam without warmup fails."""
    return _rescue_row("A1", "GI-Adam trains Post-LN where Adam without warmup fails", results, runs,
                       {"gi_adam": True}, level)  # fmt: skip


def layerwise_rule(results, runs, level) -> dict:
    """A2, prediction written before any run: Xiong et al. locate Post-LN's large early gradients near the
    output, so a warmup of the top half of the stack alone rescues the failing cell and a warmup of the bottom half
    alone does not (both over the same length, the other half at the peak lr from step 0)."""
    return _rescue_row("A2", "warmup of the top half rescues Post-LN, of the bottom half does not", results, runs,
                       {"warmup_top": True, "warmup_bottom": False}, level)  # fmt: skip


def radam_rule(results, runs, level) -> dict:
    """A4, prediction written before any run: RAdam's rectification (no adaptive step until the second moment's
    variance is tractable) acts as a built-in warmup and rescues Post-LN without warmup (Liu et al. 2020, RAdam)."""
    return _rescue_row("A4", "RAdam trains Post-LN where Adam without warmup fails", results, runs,
                       {"radam": True}, level)  # fmt: skip


def sharpness_rule(results, ratio_threshold) -> dict:
    """A3, prediction written before any run (Kalra & Barkeshli 2024; Cohen et al. 2022): without warmup,
    Post-LN's Adam-preconditioned sharpness reaches a larger fraction of the stability threshold (2 + 2 b1) /
    ((1 - b1) lr_t) during the first `sharpness_warmup` steps than with warmup (per seed, the ratio of the two
    peaks is above SHARP_RATIO), and more than Pre-LN's without warmup."""
    prediction = "warmup keeps Post-LN's preconditioned sharpness further below the adaptive edge of stability"
    arms = results.get("sharpness") or []
    until = results["setup"]["sharpness_warmup"]

    def peaks(placement, warmup):
        return {
            a["seed"]: cells.peak_ratio(a, until) for a in arms if (a["placement"], a["warmup"]) == (placement, warmup)
        }

    post0, postw, pre0 = peaks("post", 0), peaks("post", until), peaks("pre", 0)
    warm = [post0[s] / postw[s] for s in post0 if post0[s] and postw.get(s)]
    place = [post0[s] / pre0[s] for s in post0 if post0[s] and pre0.get(s)]
    if not warm:
        return verdict_row("A3", prediction, "no finite sharpness", NOT_TESTABLE, "the sharpness arms were not run")
    e_warm, e_place = log_ci(warm), log_ci(place)
    checks = [e_warm.above(ratio_threshold), e_place.above(ratio_threshold)]
    measured = (
        f"peak sharpness/threshold in the first {until} steps, Post-LN without over with warmup: {e_warm.text()}; "
        f"Post-LN over Pre-LN without warmup: {e_place.text()}"
    )
    return verdict_row("A3", prediction, measured, combine(checks), f"log-scale interval vs {ratio_threshold:g}; "
                       + _cell(results), figure=FIGURES["sharpness"], checks=checks, key=e_warm.text())  # fmt: skip


def quality_rule(results, runs, margin) -> dict:
    """A5, prediction (the literature's "Post-LN is better when it trains", e.g. Liu et al. 2020) written before any
    run: at every depth, Post-LN's final validation nll at its own best lr is below Pre-LN's at its own best lr
    (paired by seed, both trained; an interval wholly below QUALITY_MARGIN)."""
    prediction = "Post-LN, where it trains, ends below Pre-LN (each at its own best lr)"
    checks, texts = [], []
    for depth in sorted({d for _, d in cells.window(runs)}):
        post = cells.final_nll(cells.best_cell(runs, results, "post", depth))
        pre = cells.final_nll(cells.best_cell(runs, results, "pre", depth))
        diff = cells.paired_difference(post, pre)
        if not diff:
            texts.append(f"{depth} layers: no seed where both trained")
            continue
        e = mean_ci(diff)
        checks.append(e.below(margin))
        texts.append(f"{depth} layers: Post - Pre {e.text('+.3f')} nats")
    if not checks:
        return verdict_row("A5", prediction, "; ".join(texts) or "no runs", NOT_TESTABLE, "no comparable cell")
    return verdict_row("A5", prediction, "; ".join(texts), combine(checks), f"Student-t interval vs {margin:+g} "
                       "nats per depth", figure=FIGURES["window"], checks=checks, key=texts[-1])  # fmt: skip


def verdicts(results: dict, thresholds: dict | None = None) -> list[dict]:
    t = {k: float(v) for k, v in THRESHOLDS.items()} | (thresholds or {})
    runs = cells.labelled(results, band=t["PLATEAU_BAND"], falling=t["STILL_FALLING"])
    return [
        gi_adam_rule(results, runs, t["RESCUED"]),
        layerwise_rule(results, runs, t["RESCUED"]),
        sharpness_rule(results, t["SHARP_RATIO"]),
        radam_rule(results, runs, t["RESCUED"]),
        quality_rule(results, runs, t["QUALITY_MARGIN"]),
    ]


def tables(results: dict) -> list[str]:
    """The answer section (tables.answer_section), shown in the study's report section."""
    return answer_section(results)


lead = tables  # the answer section also opens REPORT.md (Study.lead), before the claim tables
