"""Verdict rules of trained_layers: Mix-LN's gradient profile in training (R5), LNS's trained deep blocks (N1)."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row
from normjax.report.claims import NOT_TESTABLE
from normjax.report.rules import MIN_SEEDS, Check, combine, log_ci, mean_ci
from normjax.studies.grad_norms_at_init.verdicts import THRESHOLDS as GRAD_THRESHOLDS
from normjax.studies.jacobian_spectrum.scheme_verdicts import THRESHOLDS as SCHEME_THRESHOLDS
from normjax.studies.jacobian_spectrum.scheme_verdicts import approach_and_away

# The thresholds of the init-time halves of the same claims (one value per claim, whatever the study): set from
# the papers' directions before this study's judged seeds were run (pilot seed 1000 only timed a run).
THRESHOLDS = {
    "FLATTER": GRAD_THRESHOLDS["FLATTER"],
    "DEV_DECAY": SCHEME_THRESHOLDS["DEV_DECAY"],
    "LNS_AWAY": SCHEME_THRESHOLDS["LNS_AWAY"],
}
FIGURE = "layer_profiles.png"


def _setting(results: dict) -> str:
    s = results["setup"]
    return (
        f"decoder-only byte LM, {s['depth']} layers, d {s['d_model']}, {s['num_steps']} steps at lr {s['lr']:g} "
        f"({s['schedule']}), {s['optimizer']}"
    )


def _paired(results: dict, runs: tuple[str, ...], key: str) -> np.ndarray:
    """(seeds, ...) of summary[key] for every run in `runs`, keeping the seeds where every run has a finite value."""
    rows = []
    for i in range(len(results["seeds"])):
        values = [results["summary"][r][i][key] for r in runs]
        if all(v is not None and np.all(np.isfinite(v)) for v in values):
            rows.append(values)
    return np.asarray(rows, float)


def _losses(results: dict) -> str:
    parts = []
    for run, rows in results["summary"].items():
        est = mean_ci([r["final_loss"] for r in rows])
        failed = sum(r["final_loss"] is None for r in rows)
        parts.append(f"{run} {est.text('.2f')}" + (f", {failed} diverged" if failed else ""))
    return "final train loss: " + "; ".join(parts) + f" (unigram {results['unigram_nll']:.2f})"


def mixln_flatter_in_training(results: dict) -> dict:
    """R5 in training: Mix-LN's per-layer gradient profile is flatter than Pre-LN's (and Post-LN's).

    Li et al. 2024 (arXiv 2412.13795), Mix-LN: Post-LN in the first floor(L/4) layers, Pre-LN after, in LLaMA-like
    decoder-only LMs (71M-7B on C4); the paper plots the gradient norm of each layer during pre-training and
    states that Mix-LN's is more uniform across layers than Pre-LN's (small in deep layers) and Post-LN's
    (vanishing in early layers). Their code (pixeli99/MixLN, torchrun_main.py) logs no per-layer gradient norm;
    its angular distance is utils/metrics.py's block_influence. Ours: a 24-layer byte LM (6 Post-LN layers in
    Mix-LN), LayerNorm not RMSNorm, d 64, hundreds of steps, not billions of tokens. Flatness = ln(max/min) over
    layers of the gradient norm of each layer's parameters (mean over held-out batches), averaged over the
    probes after step 0; the margin is the other placement's flatness minus Mix-LN's, paired by seed.
    """
    prediction = "Mix-LN's per-layer gradient profile during training is flatter than Pre-LN's (and Post-LN's)"
    flatter = THRESHOLDS["FLATTER"].value
    if "mixln" not in results["summary"] or "pre" not in results["summary"]:
        return verdict_row("R5", prediction, "not run: the config lacks mixln or pre", NOT_TESTABLE,
                           "trained_layers needs runs mixln and pre for R5")  # fmt: skip
    checks, parts, keys = [], [], []
    for base in ("pre", "post"):
        if base not in results["summary"]:
            continue
        pair = _paired(results, (base, "mixln"), "grad_log_range_trained")
        margin = mean_ci(pair[:, 0] - pair[:, 1]) if len(pair) else mean_ci([])
        checks.append(margin.above(flatter) if margin.n >= MIN_SEEDS else Check.INCONCLUSIVE)
        parts.append(
            f"vs {base}: margin {margin.text('+.2f')} ({base} ln-range {mean_ci(pair[:, 0]).text('.2f')}, "
            f"mixln {mean_ci(pair[:, 1]).text('.2f')})"
            if len(pair)
            else f"vs {base}: no seed where both trained"
        )
        keys.append(f"vs {base} {margin.text('+.2f')}")
    steps = results["setup"]["probe_steps"]
    measured = (
        f"{_setting(results)}; ln(max/min over layers) of each layer's gradient norm, mean over the probes at "
        f"steps {', '.join(str(t) for t in steps[1:])}: " + "; ".join(parts) + f"; {_losses(results)}"
    )
    reason = (
        f"rule: per seed, margin = the other placement's ln-range minus Mix-LN's; its 95% interval over seeds above "
        f"{flatter:g} -> flatter, at or below -> not flatter; against Pre-LN (the paper's main baseline) and Post-LN: "
        "both -> holds, one -> partly holds, neither -> does not hold, a straddling interval or fewer than "
        f"{MIN_SEEDS} seeds where both trained -> inconclusive. The init half is grad_norms_at_init's row"
    )
    return verdict_row("R5", prediction, measured, combine(checks), reason, FIGURE, key="; ".join(keys), checks=checks)


def _upper_half(results: dict, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(l + 1 of the upper half of blocks, Pre-LN's and LNS's (seeds, blocks) `key` there, paired by seed)."""
    pair = _paired(results, ("pre", "lns"), key)
    L = results["setup"]["depth"]
    if not len(pair):
        return np.arange(L // 2, L) + 1.0, np.zeros((0, L - L // 2)), np.zeros((0, L - L // 2))
    return np.arange(L // 2, L) + 1.0, pair[:, 0, L // 2 :], pair[:, 1, L // 2 :]


def lns_trained_identity(results: dict) -> dict:
    """N1 in training: Pre-LN's trained deep blocks approach the identity; LayerNorm Scaling keeps them farther.

    Sun et al. 2025 (arXiv 2502.05795) argue from trained LLaMA-style models: the angular distance between a deep
    Pre-LN layer's input and output is small (the layer is nearly the identity, pruning it costs little), and
    LNS's 1/sqrt(l) on each norm's output keeps the deep layers' contribution. Judged here on the trained
    checkpoints with both the paper's measurement (the angular distance arccos(cos(x_l, x_{l+1})) / pi, mean over
    a held-out batch's tokens, where Mix-LN's block_influence takes the last token) and the mechanism
    (||J_l - I||_2 of each block at one held-out sequence, Lanczos): for each, Pre-LN's exponent against l + 1
    over the upper half below DEV_DECAY and LNS / Pre-LN of the upper-half mean above LNS_AWAY, as the init half
    in jacobian_spectrum. A 24-layer byte LM after hundreds of steps, not a 1B-parameter LM.
    """
    prediction = "After training, Pre-LN's deep blocks approach the identity; LNS keeps them farther from it"
    if not {"pre", "lns"} <= set(results["summary"]):
        return verdict_row("N1", prediction, "not run: the config lacks pre or lns", NOT_TESTABLE,
                           "trained_layers needs runs pre and lns for N1")  # fmt: skip
    checks, parts, keys = [], [], []
    for key, label in (("angular_end", "angular distance"), ("block_dev_end", "||J_l - I||_2")):
        l1, pre, lns = _upper_half(results, key)
        if len(pre) < MIN_SEEDS:
            checks.append(Check.INCONCLUSIVE)
            parts.append(f"{label}: {len(pre)} seeds where both trained")
            continue
        pre_exp, lns_exp, ratio, found = approach_and_away(l1, pre, lns, THRESHOLDS)
        checks.extend(found)
        parts.append(
            f"{label}: Pre-LN e = {pre_exp.text('+.2f')}, LNS e = {lns_exp.text('+.2f')}, LNS / Pre-LN upper-half "
            f"mean {ratio.text('.3f')}"
        )
        keys.append(f"{label}: Pre-LN e {pre_exp.text('+.2f')}, LNS / Pre-LN {ratio.text('.2f')}")
    L = results["setup"]["depth"]
    trained = [r for r in results["summary"]["pre"] if r["block_dev_end"] is not None]
    moved = log_ci([np.mean(r["block_dev_end"][L // 2 :]) / np.mean(r["block_dev_init"][L // 2 :]) for r in trained])
    measured = (
        f"{_setting(results)}; blocks {L // 2}..{L - 1} after training, ~ (l + 1)^e: " + "; ".join(parts)
        + (f"; Pre-LN's ||J_l - I|| trained / init (upper half) {moved.text('.2f')}" if moved.n else "")
    )  # fmt: skip
    reason = (
        f"rule: for each of the two measurements, Pre-LN's exponent interval below {THRESHOLDS['DEV_DECAY'].value:g} "
        f"(deep blocks approach I) and the LNS / Pre-LN ratio's log-scale interval above "
        f"{THRESHOLDS['LNS_AWAY'].value:g} (LNS keeps them farther); all four -> holds, some supported and some "
        "contradicted -> partly holds, none supported -> does not hold, straddling intervals -> inconclusive. "
        "The init half is jacobian_spectrum's row"
    )
    return verdict_row("N1", prediction, measured, combine(checks), reason, FIGURE, key="; ".join(keys), checks=checks)


def verdicts(results: dict) -> list[dict]:
    return [mixln_flatter_in_training(results), lns_trained_identity(results)]
