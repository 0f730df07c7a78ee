"""Verdict rules of jacobian_spectrum for the 2024-2026 schemes: LayerNorm Scaling (N1) and mHC (N2), at init."""

from __future__ import annotations

import numpy as np

from normjax.report import verdict_row
from normjax.report.claims import CONSTRUCTION, NOT_TESTABLE
from normjax.report.rules import Check, Estimate, Threshold, combine, exponent_ci, log_ci

# Merged into jacobian_spectrum.verdicts.THRESHOLDS, which the rules below are passed (the sensitivity table
# moves the values there).
THRESHOLDS = {
    "DEV_DECAY": Threshold(
        0.0,
        "the power-law exponent of ||J_l - I||_2 against l + 1 over the upper half of the deepest stack below 0 "
        "(the whole 95% interval over seeds): deep blocks move toward the identity. The direction is the "
        "paper's claim; at init Xiong et al.'s Lemma 2 gives ||dF/dx|| ~ 1/sigma_l ~ l^(-1/2) for Pre-LN",
        source="paper",
        unit=0.2,
    ),
    "LNS_AWAY": Threshold(
        1.0,
        "LNS over Pre-LN of the mean ||J_l - I||_2 over the upper half of the deepest stack, per seed (same "
        "seed, same weights): above 1 (the whole 95% log-scale interval) = LNS keeps the deep blocks farther "
        "from the identity, as the paper claims; below 1 contradicts it",
        source="paper",
    ),
    "STOCHASTIC_TOL": Threshold(
        1e-10,
        "float64 rounding of Sinkhorn-normalized 4 x 4 matrices and their product over up to 128 sublayers "
        "(measured column-sum errors are about 2e-16 per matrix): ||prod H_res||_2 <= 1 + this, and every "
        "entry >= 0, at every depth and seed (a construction check)",
        source="theory",
    ),
}

N1_PREDICTION = (
    "Pre-LN's deep blocks approach the identity (||J_l - I||_2 falls with l); LayerNorm Scaling keeps them "
    "farther from it than Pre-LN (at init here; the paper argues from the variance growth of training)"
)
N2_PREDICTION = (
    "mHC's composite residual mapping prod_l H_res^l keeps its spectral norm <= 1 over depth (H_res doubly "
    "stochastic by Sinkhorn); unconstrained hyper-connections' can grow"
)


def _upper_half_dev(results: dict, placement: str, L: int) -> tuple[np.ndarray, np.ndarray]:
    """(l + 1 for the upper half of blocks, (seeds, blocks) ||J_l - I||_2 there)."""
    dev_SL = np.asarray(results["runs"][placement][str(L)]["block_dev"]["seeds"], float)
    first = L // 2
    return np.arange(first, L) + 1.0, dev_SL[:, first:]


def approach_and_away(l1, pre_SL, lns_SL, thresholds: dict) -> tuple[Estimate, Estimate, Estimate, list[Check]]:
    """N1's two checks on a per-block distance from the identity over the upper half of a stack (l1 = l + 1 of
    those blocks, one row per seed): Pre-LN's power-law exponent against l + 1 below DEV_DECAY (deep blocks
    approach I) and LNS / Pre-LN of the upper-half mean (paired by seed) above LNS_AWAY. Returns (Pre-LN's
    exponent, LNS's exponent, the ratio, the checks)."""
    pre_exp = exponent_ci([(l1, row) for row in pre_SL])
    lns_exp = exponent_ci([(l1, row) for row in lns_SL])
    ratio = log_ci(np.mean(lns_SL, 1) / np.mean(pre_SL, 1))
    checks = [pre_exp.below(thresholds["DEV_DECAY"].value), ratio.above(thresholds["LNS_AWAY"].value)]
    return pre_exp, lns_exp, ratio, checks


def lns_identity(results: dict, thresholds: dict) -> dict:
    """N1: Sun et al. 2025 (arXiv 2502.05795), "The Curse of Depth in Large Language Models".

    The paper: Pre-LN's output variance grows with depth (exponentially in training, their Lemma/Theorem on
    sigma_{x_l}^2), so the derivative of a deep Pre-LN block approaches the identity and the block contributes
    little; scaling each norm's output by 1/sqrt(l) (LNS) keeps the variance in check and the deep blocks
    useful. They measure trained LLaMA-style models (angular distance of layer inputs and outputs, the loss
    change when a layer is pruned). Ours measures the claim's mechanism at init, exactly: ||J_l - I||_2 of every
    block's Jacobian (float64, one sequence, encoder stack with a final norm), Pre-LN against LNS on the same
    seeds. Judged: Pre-LN's exponent of ||J_l - I|| against l + 1 (upper half of the deepest stack) below
    DEV_DECAY, and the LNS / Pre-LN ratio of the upper-half mean above LNS_AWAY. At init LNS divides the branch
    input by sqrt(l) as well as the stream growing, so the claim's second half is read here at init only; the
    training half is the trained_layers study's row.
    """
    runs = results["runs"]
    if not {"pre", "lns"} <= set(runs):
        return verdict_row("N1", N1_PREDICTION, "not run: the config lacks pre and lns", NOT_TESTABLE,
                           "the study needs placements pre and lns to test N1")  # fmt: skip
    L = max(results["depths"])
    if "block_dev" not in runs["pre"][str(L)]:
        return verdict_row("N1", N1_PREDICTION, "not measured: these results predate ||J_l - I|| (block_dev)",
                           NOT_TESTABLE, "rerun jacobian_spectrum: N1 is judged on ||J_l - I|| per block")  # fmt: skip
    decay, away = thresholds["DEV_DECAY"].value, thresholds["LNS_AWAY"].value
    l1, pre = _upper_half_dev(results, "pre", L)
    _, lns = _upper_half_dev(results, "lns", L)
    pre_exp, lns_exp, ratio, checks = approach_and_away(l1, pre, lns, thresholds)
    last = {p: np.asarray(runs[p][str(L)]["block_dev"]["mean"], float) for p in ("pre", "lns")}
    measured = (
        f"L = {L}, blocks {L // 2}..{L - 1}, at init: ||J_l - I||_2 ~ (l + 1)^e, Pre-LN e = {pre_exp.text('+.2f')}, "
        f"LNS e = {lns_exp.text('+.2f')}; LNS / Pre-LN upper-half mean {ratio.text('.3f')}; first -> last block "
        f"(seed means): Pre-LN {last['pre'][0]:.3f} -> {last['pre'][-1]:.3f}, LNS {last['lns'][0]:.3f} -> "
        f"{last['lns'][-1]:.3f}"
    )
    if "post" in runs:
        _, post = _upper_half_dev(results, "post", L)
        measured += f"; Post-LN e = {exponent_ci([(l1, row) for row in post]).text('+.2f')} (not judged)"
    reason = (
        f"rule (at init): Pre-LN's exponent interval below {decay:g} (deep blocks approach I) and the LNS / Pre-LN "
        f"ratio's log-scale interval above {away:g} (LNS keeps them farther from I); both -> holds, one -> partly "
        "holds, neither -> does not hold, a straddling interval -> inconclusive. The paper's evidence is from "
        "trained models; at init LNS's 1/sqrt(l) shrinks dF/dx on top of the stream growth"
    )
    return verdict_row(
        "N1", N1_PREDICTION, measured, combine(checks), reason, "block_dev.png",
        key=f"Pre-LN e {pre_exp.text('+.2f')}; LNS / Pre-LN {ratio.text('.3f')}",
        pre_exponent=pre_exp.mean, lns_exponent=lns_exp.mean, lns_over_pre=ratio.mean,
    )  # fmt: skip


def _stream_values(results: dict, placement: str, arm: str, key: str) -> np.ndarray:
    """(depths, seeds) values of composite()[key] for one placement and arm ("init" or "perturbed")."""
    by_depth = results["streams"][placement]
    return np.array([[run[arm][key] for run in by_depth[str(L)]] for L in results["depths"]], float)


def mhc_composite(results: dict, thresholds: dict) -> dict:
    """N2: Xie et al. 2025 (DeepSeek, arXiv 2512.24880), "mHC: Manifold-Constrained Hyper-Connections".

    The paper: with hyper-connections the composite residual mapping prod_l H_res^l is unconstrained and its gain
    grows over depth in training (their "Amax Gain Magnitude", up to about 3000 in a 27B model); projecting
    each H_res onto the doubly stochastic matrices (Sinkhorn-Knopp, t_max = 20) keeps the composite's spectral
    norm <= 1 (a product of doubly stochastic matrices is doubly stochastic). Ours: the model's own H_res of
    every sublayer (HyperConnection.matrices at init, dynamic part included) multiplied over the stack; then the
    same after adding N(0, 0.1^2) to every static H_res logit (a stand-in for the drift of training, same noise
    for every placement). Judged (a construction check of the mHC half): for mhc at every depth and seed, in
    both arms, ||prod H_res||_2 <= 1 + STOCHASTIC_TOL and every entry >= 0. The growth of unconstrained HC is a
    claim about training: at init its H_res = I (composite norm exactly 1), so it is not testable here; the
    perturbed arm's numbers are reported, not judged.
    """
    if "mhc" not in results.get("streams", {}):
        return verdict_row("N2", N2_PREDICTION, "not run: the config lacks stream_placements mhc", NOT_TESTABLE,
                           "the study needs stream_placements with mhc to test N2")  # fmt: skip
    tol, depths = thresholds["STOCHASTIC_TOL"].value, results["depths"]
    excess = max(float(_stream_values(results, "mhc", arm, "spectral").max()) - 1 for arm in ("init", "perturbed"))
    min_entry = min(float(_stream_values(results, "mhc", arm, "min_entry").min()) for arm in ("init", "perturbed"))
    ok = excess <= tol and min_entry >= 0
    parts = []
    for p in results["streams"]:
        init = _stream_values(results, p, "init", "spectral").max()
        pert = [log_ci(v).text(".3g") for v in _stream_values(results, p, "perturbed", "spectral")]
        parts.append(f"{p}: init max {init:.6g}; perturbed, L = {depths}: {', '.join(pert)}")
    measured = (
        f"||prod_l H_res^l||_2 over the {2 * max(depths)} sublayers of L = {max(depths)} (and every L in {depths}), "
        f"{results['num_seeds']} seeds; mhc: max ||.||_2 - 1 = {excess:.1e}, min entry {min_entry:.3f}. "
        + "; ".join(parts)
        + ". Unconstrained HC starts at H_res = I: its growth is a training effect (not measured)"
    )
    reason = (
        f"construction check (the mHC half): ||prod H_res||_2 <= 1 + {tol:g} and every entry >= 0 for mhc at every "
        "depth, seed and arm (init; static logits + N(0, 0.01)), else does not hold. The HC half (growth in "
        "training) is not testable at init; the perturbed arm shows what an unconstrained product does"
    )
    return verdict_row(
        "N2", N2_PREDICTION, measured, CONSTRUCTION if ok else "does not hold", reason,
        key=f"mhc max ||prod H_res||_2 - 1 = {excess:.1e}", mhc_excess=excess, mhc_min_entry=min_entry,
    )  # fmt: skip
